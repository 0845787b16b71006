//! `INSERT … ON CONFLICT (key) DO UPDATE SET …`: PostgreSQL's upsert with expressions.
//!
//! Each row of the `VALUES` list is written with the ordinary write paths and their
//! guarantees:
//!
//! 1. `UPDATE t SET <assignments> WHERE key = <row's key> [AND <the DO UPDATE's
//!    WHERE>]`, with every `EXCLUDED.col` replaced by the row's value for `col` (NULL
//!    for a column the INSERT does not name). The UPDATE path re-reads a row that
//!    changes under it, so `SET n = t.n + EXCLUDED.n` from many clients counts every
//!    increment (see `write.rs`).
//! 2. If it updated nothing, a plain `INSERT` of the row. If that finds the key taken
//!    (another client inserted it in between), the row starts over at step 1 — with
//!    a DO UPDATE WHERE, step 1 once more decides: the row exists, so it is updated
//!    or skipped. After [`MAX_REEVALUATIONS`] rounds, SQLSTATE 40001.
//!
//! The count reported is rows inserted plus rows updated, as PostgreSQL's `INSERT 0
//! n`.
//!
//! The conflict target must be the primary key (PostgreSQL's 42P10 otherwise): it is
//! Cairn's only unique constraint. Rows are written one at a time, so a multi-row
//! upsert is atomic per row, not as a whole. The source must be a `VALUES` list, and
//! `RETURNING` is not supported.

use std::ops::ControlFlow;

use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    self, ConflictTarget, Expr, Ident, OnConflictAction, OnInsert, visit_expressions_mut,
};

use crate::error::{Result, SqlError};
use crate::options::InsertMode;
use crate::session::{QueryResult, SqlSession};
use crate::write::MAX_REEVALUATIONS;

/// A normalized identifier: lower case unless quoted.
fn name_of(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// A column name quoted for SQL text.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One upsert, checked and taken apart.
struct Upsert {
    /// The table as written.
    table: String,
    /// The table as the UPDATE names it (`name` or `name AS alias`).
    target: String,
    /// The INSERT's columns, in its order.
    columns: Vec<String>,
    /// The key columns.
    key: Vec<String>,
    /// `SET a = …, b = …` as written.
    assignments: Vec<ast::Assignment>,
    /// The DO UPDATE's WHERE.
    selection: Option<Expr>,
    /// The VALUES rows.
    rows: Vec<Vec<Expr>>,
}

/// Runs `INSERT … ON CONFLICT … DO UPDATE` with the parameter values `params`.
pub(crate) async fn run(
    session: &SqlSession,
    insert: &ast::Insert,
    params: &[ScalarValue],
) -> Result<QueryResult> {
    let upsert = take_apart(session, insert).await?;
    let mut written = 0u64;
    for row in &upsert.rows {
        written += upsert_row(session, &upsert, row, params).await?;
    }
    Ok(QueryResult::Count {
        tag: "INSERT",
        rows: written,
    })
}

/// Checks the statement against the table and takes out what [`run`] needs.
async fn take_apart(session: &SqlSession, insert: &ast::Insert) -> Result<Upsert> {
    let unsupported = |what: &str| Err(SqlError::unsupported(what.to_string()));
    let ast::TableObject::TableName(table_name) = &insert.table else {
        return unsupported("INSERT ... ON CONFLICT DO UPDATE needs a table name");
    };
    if insert.returning.is_some() {
        return unsupported("INSERT ... ON CONFLICT DO UPDATE ... RETURNING is not supported");
    }
    let Some(OnInsert::OnConflict(on_conflict)) = &insert.on else {
        return unsupported("not an ON CONFLICT DO UPDATE");
    };
    let OnConflictAction::DoUpdate(action) = &on_conflict.action else {
        return unsupported("not an ON CONFLICT DO UPDATE");
    };
    let Some(last) = table_name.0.last().and_then(|p| p.as_ident()) else {
        return unsupported("INSERT ... ON CONFLICT DO UPDATE needs a table name");
    };
    let name = name_of(last);
    let table = session.engine().client().open_table(&name).await?;
    let schema = &table.schema;
    if schema.auto_id_index().is_some() {
        return Err(SqlError::other(
            "42P10",
            format!(
                "there is no unique or exclusion constraint matching the ON CONFLICT \
                 specification: {name} was created without a primary key"
            ),
        ));
    }
    let key: Vec<String> = schema
        .key_indexes()
        .iter()
        .map(|&i| schema.columns()[i].name.clone())
        .collect();
    let mut target: Vec<String> = match &on_conflict.conflict_target {
        Some(ConflictTarget::Columns(cols)) => cols.iter().map(name_of).collect(),
        Some(ConflictTarget::OnConstraint(c)) => {
            if c.to_string().trim_matches('"') != format!("{name}_pkey") {
                return Err(SqlError::other(
                    "42704",
                    format!("constraint \"{c}\" for table \"{name}\" does not exist"),
                ));
            }
            key.clone()
        }
        None => {
            return Err(SqlError::other(
                "42601",
                "ON CONFLICT DO UPDATE requires inference specification or constraint name: \
                 write ON CONFLICT (key columns) DO UPDATE",
            ));
        }
    };
    target.sort();
    let mut sorted_key = key.clone();
    sorted_key.sort();
    if target != sorted_key {
        return Err(SqlError::other(
            "42P10",
            format!(
                "there is no unique or exclusion constraint matching the ON CONFLICT \
                 specification: the only unique constraint of {name} is its primary key ({})",
                key.join(", ")
            ),
        ));
    }
    let columns: Vec<String> = if insert.columns.is_empty() {
        schema.columns().iter().map(|c| c.name.clone()).collect()
    } else {
        insert
            .columns
            .iter()
            .map(|c| match c.0.last().and_then(|p| p.as_ident()) {
                Some(i) => Ok(name_of(i)),
                None => Err(SqlError::other("42601", format!("bad column name {c}"))),
            })
            .collect::<Result<_>>()?
    };
    let Some(source) = &insert.source else {
        return unsupported("INSERT ... DEFAULT VALUES ON CONFLICT DO UPDATE is not supported");
    };
    let ast::SetExpr::Values(values) = source.body.as_ref() else {
        return unsupported(
            "INSERT ... SELECT ... ON CONFLICT DO UPDATE is not supported: list the rows with \
             VALUES, or write INSERT ... SELECT ... ON CONFLICT DO NOTHING and an UPDATE",
        );
    };
    let rows: Vec<Vec<Expr>> = values.rows.iter().map(|r| r.content.clone()).collect();
    for row in &rows {
        if row.len() != columns.len() {
            return Err(SqlError::other(
                "42601",
                format!(
                    "INSERT has {} target columns but a VALUES row has {} expressions",
                    columns.len(),
                    row.len()
                ),
            ));
        }
    }
    let target = match &insert.table_alias {
        Some(alias) => format!("{table_name} AS {}", alias.alias),
        None => table_name.to_string(),
    };
    Ok(Upsert {
        table: table_name.to_string(),
        target,
        columns,
        key,
        assignments: action.assignments.clone(),
        selection: action.selection.clone(),
        rows,
    })
}

/// `expr` with every `EXCLUDED.col` replaced by the row's expression for `col`.
fn with_excluded(expr: &Expr, columns: &[String], row: &[Expr]) -> Expr {
    let mut expr = expr.clone();
    let _ = visit_expressions_mut(&mut expr, |e| {
        if let Expr::CompoundIdentifier(parts) = e
            && let [first, column] = parts.as_slice()
            && first.value.eq_ignore_ascii_case("excluded")
        {
            let name = name_of(column);
            *e = match columns.iter().position(|c| *c == name) {
                Some(i) => Expr::Nested(Box::new(row[i].clone())),
                None => Expr::value(ast::Value::Null),
            };
        }
        ControlFlow::<()>::Continue(())
    });
    expr
}

/// Writes one row (see the module doc); returns 1 if it was inserted or updated, 0 if
/// the DO UPDATE's WHERE skipped it.
async fn upsert_row(
    session: &SqlSession,
    upsert: &Upsert,
    row: &[Expr],
    params: &[ScalarValue],
) -> Result<u64> {
    let columns: Vec<String> = upsert.columns.iter().map(|c| quoted(c)).collect();
    let values: Vec<String> = row.iter().map(|e| e.to_string()).collect();
    let insert = format!(
        "INSERT INTO {} ({}) VALUES ({})",
        upsert.table,
        columns.join(", "),
        values.join(", ")
    );
    let mut conditions = Vec::with_capacity(upsert.key.len() + 1);
    for k in &upsert.key {
        let Some(i) = upsert.columns.iter().position(|c| c == k) else {
            return Err(SqlError::other(
                "23502",
                format!(
                    "null value in column \"{k}\" violates not-null constraint: the INSERT must give every key column"
                ),
            ));
        };
        conditions.push(format!("{} = ({})", quoted(k), row[i]));
    }
    if let Some(w) = &upsert.selection {
        conditions.push(format!("({})", with_excluded(w, &upsert.columns, row)));
    }
    let assignments: Vec<String> = upsert
        .assignments
        .iter()
        .map(|a| {
            format!(
                "{} = {}",
                a.target,
                with_excluded(&a.value, &upsert.columns, row)
            )
        })
        .collect();
    let update = format!(
        "UPDATE {} SET {} WHERE {}",
        upsert.target,
        assignments.join(", "),
        conditions.join(" AND ")
    );
    for _ in 0..MAX_REEVALUATIONS {
        let updated = session
            .run_write(&update, InsertMode::Insert, params)
            .await?;
        if updated > 0 {
            return Ok(updated);
        }
        match session.run_write(&insert, InsertMode::Insert, params).await {
            Ok(inserted) => return Ok(inserted),
            Err(e) if e.sqlstate() == "23505" => {
                if upsert.selection.is_some() {
                    // The row exists: the WHERE decides, once.
                    return session.run_write(&update, InsertMode::Insert, params).await;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(SqlError::other(
        "40001",
        format!(
            "could not serialize access due to concurrent update: the row was deleted and \
             re-inserted {MAX_REEVALUATIONS} times while this upsert ran; retry the statement"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn expr(sql: &str) -> Expr {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap()
    }

    #[test]
    fn excluded_columns_take_the_rows_values() {
        let columns = vec!["id".to_string(), "n".to_string()];
        let row = vec![expr("$1"), expr("2 + 3")];
        let set = with_excluded(&expr("t.n + EXCLUDED.n * excluded.\"n\""), &columns, &row);
        assert_eq!(set.to_string(), "t.n + (2 + 3) * (2 + 3)");
        let missing = with_excluded(&expr("coalesce(EXCLUDED.other, 1)"), &columns, &row);
        assert_eq!(missing.to_string(), "coalesce(NULL, 1)");
        assert_eq!(
            with_excluded(&expr("excluded.id"), &columns, &row).to_string(),
            "($1)"
        );
    }
}
