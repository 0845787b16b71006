//! Select lists that repeat an output name, as PostgreSQL allows and DataFusion does
//! not: `SELECT n, n FROM t`, `SELECT 1, 1`, or the common
//! `INSERT INTO t SELECT i, i, i FROM generate_series(1, 10) AS s(i)`.
//!
//! DataFusion requires the names of a projection to be unique. Before it plans a
//! statement, every item of a select list whose name repeats another item's gets an
//! alias that is unique: the name PostgreSQL would give the column, then
//! [`MARKER`] and the item's position. An INSERT maps its source by position, so the
//! names do not matter there; the names a client sees are taken back to PostgreSQL's by
//! [`client_schema`], which cuts every name at the marker. So `SELECT n, n FROM t`
//! answers two columns named `n`, and `SELECT 1, 1` two named `?column?`.
//!
//! A repeated name inside a subquery cannot be referred to from outside, as in
//! PostgreSQL (there it is ambiguous, here it is unknown).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{self, Expr, Ident, SelectItem, SetExpr};

/// Separates the client's name of a column from what makes it unique in the plan.
pub const MARKER: char = '\u{1}';

/// Gives the repeated items of every select list of `statement` unique aliases (see
/// the module docs).
pub(crate) fn name_repeated_items(statement: &mut DFStatement) {
    let s = match statement {
        DFStatement::Statement(s) => s.as_mut(),
        DFStatement::Explain(e) => return name_repeated_items(&mut e.statement),
        _ => return,
    };
    let _ = ast::VisitMut::visit(s, &mut RepeatedNames);
}

/// The schema a client is shown for `schema`: names cut at [`MARKER`].
pub fn client_schema(schema: &SchemaRef) -> SchemaRef {
    if !schema.fields().iter().any(|f| f.name().contains(MARKER)) {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.name().split_once(MARKER) {
            Some((name, _)) => f.as_ref().clone().with_name(name),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

struct RepeatedNames;

impl ast::VisitorMut for RepeatedNames {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        name_in(query.body.as_mut());
        ControlFlow::Continue(())
    }
}

/// Names the repeated items of the select lists of a query body (nested queries are
/// visited on their own).
fn name_in(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => name_select(&mut select.projection),
        SetExpr::SetOperation { left, right, .. } => {
            name_in(left);
            name_in(right);
        }
        _ => {}
    }
}

fn name_select(items: &mut [SelectItem]) {
    let keys: Vec<Option<String>> = items
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) => Some(key(e)),
            _ => None,
        })
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for k in keys.iter().flatten() {
        *seen.entry(k).or_default() += 1;
    }
    if seen.values().all(|&n| n < 2) {
        return;
    }
    for (i, (item, k)) in items.iter_mut().zip(&keys).enumerate() {
        if let (SelectItem::UnnamedExpr(e), Some(k)) = (&*item, k)
            && seen.get(k.as_str()).is_some_and(|&n| n > 1)
        {
            let alias = Ident::with_quote('"', format!("{}{MARKER}{i}", client_name(e)));
            *item = SelectItem::ExprWithAlias {
                expr: e.clone(),
                alias,
            };
        }
    }
}

/// What makes two unaliased items collide: a column's name (whatever its table), or
/// the expression's text in any case. Counting too many as repeated is harmless: an
/// aliased item is shown under the name PostgreSQL gives it anyway.
fn key(e: &Expr) -> String {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => client_name(e),
        e => e.to_string().to_lowercase(),
    }
}

/// The name PostgreSQL gives an unaliased item: a column's or a function's name
/// (through casts), else `?column?`.
fn client_name(e: &Expr) -> String {
    let ident = |i: &Ident| match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    };
    match e {
        Expr::Identifier(i) => ident(i),
        Expr::CompoundIdentifier(parts) => parts.last().map(ident).unwrap_or_default(),
        Expr::Function(f) => match f.name.0.last().and_then(|p| p.as_ident()) {
            Some(i) => ident(i),
            None => "?column?".into(),
        },
        Expr::Cast { expr, .. } | Expr::Nested(expr) => client_name(expr),
        _ => "?column?".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_sql;
    use super::*;
    use crate::parser::CairnStatement;

    fn rewritten(sql: &str) -> String {
        match parse_sql(sql).unwrap().pop().unwrap() {
            CairnStatement::Query { statement, .. } => statement.to_string(),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn repeated_items_get_unique_aliases() {
        assert_eq!(
            rewritten("SELECT n, n, k FROM t"),
            "SELECT n AS \"n\u{1}0\", n AS \"n\u{1}1\", k FROM t"
        );
        assert_eq!(
            rewritten("INSERT INTO t SELECT i, i % 7, i % 7 FROM s"),
            "INSERT INTO t SELECT i, i % 7 AS \"?column?\u{1}1\", i % 7 AS \"?column?\u{1}2\" \
             FROM s"
        );
        assert_eq!(
            rewritten("SELECT a.n, b.N, count(*), COUNT(*) FROM a, b"),
            "SELECT a.n AS \"n\u{1}0\", b.N AS \"n\u{1}1\", count(*) AS \"count\u{1}2\", \
             COUNT(*) AS \"count\u{1}3\" FROM a, b"
        );
        // Inside subqueries, CTEs and set operations too; aliased items are left alone.
        assert_eq!(
            rewritten("WITH c AS (SELECT 1, 1) SELECT * FROM c UNION SELECT x AS a, x AS b"),
            "WITH c AS (SELECT 1 AS \"?column?\u{1}0\", 1 AS \"?column?\u{1}1\") \
             SELECT * FROM c UNION SELECT x AS a, x AS b"
        );
        assert_eq!(rewritten("SELECT n, m FROM t"), "SELECT n, m FROM t");
    }

    #[test]
    fn clients_see_the_names_without_the_marker() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n\u{1}0", arrow::datatypes::DataType::Int64, true),
            Field::new("n\u{1}1", arrow::datatypes::DataType::Int64, true),
            Field::new("k", arrow::datatypes::DataType::Int64, false),
        ]));
        let shown = client_schema(&schema);
        let names: Vec<&str> = shown.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["n", "n", "k"]);
        assert!(!shown.field(2).is_nullable());
    }
}
