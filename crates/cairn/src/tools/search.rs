//! `cairn table search`: HyperDex's `search`, `count` and `sorted_search` from the
//! command line, answered through the table's subspaces.

use clap::Args;

use super::parse::{Filter, parse_where};
use super::{MasterArgs, ToolResult};

/// `cairn table search`
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    cairn table search people --where \"city = 'oslo' AND age > 30\"\n  \
    cairn table search people --where \"age >= 18\" --count\n  \
    cairn table search people --where \"city = 'lima'\" --order-by age --limit 10 --desc")]
pub struct SearchArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The table.
    pub name: String,
    /// Filters "COLUMN OP VALUE" (OP one of = < <= > >=) or "COLUMN IS [NOT] NULL",
    /// joined with AND; repeatable (rows must match all). The search asks only the
    /// regions of the subspace these narrow most.
    #[arg(long = "where", value_name = "FILTER")]
    pub r#where: Vec<String>,
    /// Print only the number of matching rows (HyperDex's count).
    #[arg(long)]
    pub count: bool,
    /// Return the rows ordered by this column (HyperDex's sorted_search); needs
    /// --limit.
    #[arg(long, value_name = "COLUMN", requires = "limit")]
    pub order_by: Option<String>,
    /// With --order-by: descending order.
    #[arg(long, requires = "order_by")]
    pub desc: bool,
    /// Return at most N rows.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

/// Splits `a = 1 AND b > 2` into its filters (an `AND` inside quotes is kept).
pub(crate) fn split_and(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let words: Vec<&str> = s.split(' ').collect();
    for w in words {
        if !quoted && w.eq_ignore_ascii_case("and") && !current.trim().is_empty() {
            out.push(current.trim().to_string());
            current.clear();
            continue;
        }
        quoted ^= w.matches('\'').count() % 2 == 1;
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(w);
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

/// `cairn table search`
pub async fn search(a: SearchArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let table = client.open_table(&a.name).await?;
    let mut preds = Vec::new();
    for w in &a.r#where {
        for f in split_and(w) {
            match parse_where(&f)?.to_filter(&table.schema)? {
                Filter::Pushed(p) => preds.push(p),
                Filter::NotEqual { .. } => {
                    return Err(format!(
                        "--where \"{f}\": search takes = < <= > >= and IS [NOT] NULL; use \
                         `cairn table scan` for !="
                    )
                    .into());
                }
            }
        }
    }
    let result = match &a.order_by {
        Some(col) => {
            let limit = a.limit.unwrap_or(usize::MAX);
            client
                .sorted_search(&table, &preds, col, limit, !a.desc)
                .await?
        }
        None => {
            let mut r = client.search(&table, &preds).await?;
            if let Some(l) = a.limit {
                r.batch = r.batch.slice(0, l.min(r.batch.num_rows()));
            }
            r
        }
    };
    let how = match &result.plan {
        Some(p) => format!("searched subspace '{}': {p}", p.subspace),
        None if table.subspaces.is_empty() => {
            "scanned the table: it has no subspaces (CREATE TABLE … SUBSPACE (…))".to_string()
        }
        None => "scanned the table: the filters narrow none of its subspaces".to_string(),
    };
    if a.count {
        println!("{}", result.batch.num_rows());
    } else {
        let rows = result.batch.num_rows();
        println!(
            "{}",
            arrow::util::pretty::pretty_format_batches(std::slice::from_ref(&result.batch))?
        );
        println!("({rows} row{})", if rows == 1 { "" } else { "s" });
    }
    eprintln!("{how}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_split_on_and_outside_quotes() {
        assert_eq!(split_and("a = 5 AND b > 2"), vec!["a = 5", "b > 2"]);
        assert_eq!(split_and("a = 5 and b is null"), vec!["a = 5", "b is null"]);
        assert_eq!(
            split_and("name = 'x AND y' AND n >= 1"),
            vec!["name = 'x AND y'", "n >= 1"]
        );
        assert_eq!(split_and("brand = 'AND'"), vec!["brand = 'AND'"]);
        assert!(split_and("").is_empty());
    }
}
