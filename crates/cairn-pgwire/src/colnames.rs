//! Result column names as PostgreSQL gives them.
//!
//! DataFusion names an unaliased select item after its whole expression
//! (`count(*)`, `sum(t.v)`, `upper(t.name)`); PostgreSQL names a function call after
//! the function (`count`, `sum`, `upper`), which is what psql prints as the header
//! and what drivers and pandas use as the column name. The plan cannot carry
//! PostgreSQL's names itself, because two items may get the same one
//! (`SELECT count(a), count(b)`) and a DataFusion projection needs unique names; so
//! the pgwire front end renames the columns it describes to the client, by position,
//! and the rows are encoded by position as before.
//!
//! Only the plain case is renamed: a single SELECT (with ORDER BY / LIMIT) whose
//! list has no wildcard, where an unaliased function call (aggregates and window
//! functions included) gets its function's name. Everything else keeps
//! DataFusion's name.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr, Statement};

use cairn_sql::parser::{self, CairnStatement};

/// The PostgreSQL name of each result column of `sql` that differs from the plan's
/// (`None` for a column that keeps its name), or `None` if `sql` is not the plain
/// case of the module docs.
pub(crate) fn pg_column_names(sql: &str) -> Option<Vec<Option<String>>> {
    let mut statements = parser::parse_sql(sql).ok()?;
    let (Some(CairnStatement::Query { statement, .. }), true) =
        (statements.pop(), statements.is_empty())
    else {
        return None;
    };
    let DfStatement::Statement(statement) = statement else {
        return None;
    };
    let Statement::Query(q) = *statement else {
        return None;
    };
    let SetExpr::Select(select) = q.body.as_ref() else {
        return None;
    };
    let mut names = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        names.push(match item {
            SelectItem::UnnamedExpr(Expr::Function(f)) => f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase()),
            SelectItem::UnnamedExpr(_) | SelectItem::ExprWithAlias { .. } => None,
            // Wildcards and multi-column aliases: the positions are not known here.
            _ => return None,
        });
    }
    names.iter().any(Option::is_some).then_some(names)
}

/// `schema` with the columns `names` gives a name renamed; `None` when the counts do
/// not match (the statement was not what the names were figured for).
pub(crate) fn renamed(schema: &Schema, names: &[Option<String>]) -> Option<SchemaRef> {
    if schema.fields().len() != names.len() {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(names)
        .map(|(f, n)| match n {
            Some(n) => f.as_ref().clone().with_name(n.clone()),
            None => f.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    fn names(sql: &str) -> Option<Vec<Option<String>>> {
        pg_column_names(sql)
    }

    #[test]
    fn function_calls_are_named_after_the_function() {
        let n = |s: &str| Some(s.to_string());
        assert_eq!(
            names("SELECT count(*), sum(v) AS total, k, upper(name) FROM t GROUP BY k, name"),
            Some(vec![n("count"), None, None, n("upper")])
        );
        assert_eq!(
            names("select COUNT(a), count(b) from t order by 1 limit 3"),
            Some(vec![n("count"), n("count")])
        );
        assert_eq!(names("SELECT pg_catalog.now()"), Some(vec![n("now")]));
    }

    #[test]
    fn other_statements_keep_their_names() {
        assert_eq!(names("SELECT k, v + 1 FROM t"), None);
        assert_eq!(names("SELECT *, count(*) OVER () FROM t"), None);
        assert_eq!(
            names("SELECT count(*) FROM a UNION SELECT count(*) FROM b"),
            None
        );
        assert_eq!(names("INSERT INTO t VALUES (1)"), None);
        assert_eq!(names("SELECT 1; SELECT count(*) FROM t"), None);
        assert_eq!(names("not sql at all"), None);
    }

    #[test]
    fn renaming_keeps_types_and_checks_the_count() {
        let schema = Schema::new(vec![
            Field::new("count(*)", DataType::Int64, false),
            Field::new("k", DataType::Utf8, true),
        ]);
        let r = renamed(&schema, &[Some("count".into()), None]).unwrap();
        assert_eq!(r.field(0).name(), "count");
        assert_eq!(r.field(0).data_type(), &DataType::Int64);
        assert!(!r.field(0).is_nullable());
        assert_eq!(r.field(1).name(), "k");
        assert!(renamed(&schema, &[None]).is_none());
    }
}
