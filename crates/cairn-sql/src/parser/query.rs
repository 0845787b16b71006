//! Statements DataFusion plans (SELECT, INSERT, UPDATE, DELETE, EXPLAIN, …): the
//! Cairn-only decorations are taken off before DataFusion sees them — the insert mode
//! of `UPSERT INTO`, `INSERT OR …` and `ON CONFLICT DO NOTHING`, and the read time of
//! `FOR SYSTEM_TIME AS OF` — PostgreSQL functions are rewritten for DataFusion, and
//! select lists that repeat a name get unique aliases ([`names`]).

use std::ops::ControlFlow;

use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    self, Expr, OnConflictAction, OnInsert, SqliteOnConflict, TableFactor, TableVersion, VisitMut,
    VisitorMut,
};

use super::{CairnStatement, InsertMode, ParseError, functions, names};

/// Extracts the insert mode and the AS OF time of a statement for DataFusion.
pub(super) fn finish_query(
    mut statement: DFStatement,
    mode: InsertMode,
) -> Result<CairnStatement, ParseError> {
    if let DFStatement::Statement(s) = &statement
        && let ast::Statement::Insert(insert) = s.as_ref()
        && let Some(OnInsert::OnConflict(c)) = &insert.on
        && matches!(c.action, OnConflictAction::DoUpdate(_))
    {
        if insert.or.is_some() {
            return Err(ParseError::syntax(
                "INSERT OR … cannot be combined with ON CONFLICT DO UPDATE",
            ));
        }
        return Ok(CairnStatement::InsertOnConflictUpdate(Box::new(
            insert.clone(),
        )));
    }
    let insert_mode = match take_insert_mode(&mut statement)? {
        InsertMode::Insert => mode,
        m => m,
    };
    let as_of = strip_as_of(&mut statement)?;
    normalize_update_targets(&mut statement);
    functions::rewrite_functions(&mut statement);
    names::name_repeated_items(&mut statement);
    Ok(CairnStatement::Query {
        statement,
        insert_mode,
        as_of,
    })
}

/// Lower-cases the unquoted column names on the left of `UPDATE … SET col = …` (also
/// inside EXPLAIN). DataFusion normalizes every other identifier but looks these up as
/// written, so `SET FIELD0 = …` failed on a column created as `FIELD0` (stored
/// `field0`), as drivers such as go-ycsb write it.
fn normalize_update_targets(statement: &mut DFStatement) {
    let stmt = match statement {
        DFStatement::Explain(e) => return normalize_update_targets(&mut e.statement),
        DFStatement::Statement(s) => s.as_mut(),
        _ => return,
    };
    let ast::Statement::Update(update) = stmt else {
        return;
    };
    let lower = |name: &mut ast::ObjectName| {
        for part in &mut name.0 {
            if let ast::ObjectNamePart::Identifier(ident) = part
                && ident.quote_style.is_none()
            {
                ident.value = ident.value.to_lowercase();
            }
        }
    };
    for assignment in &mut update.assignments {
        match &mut assignment.target {
            ast::AssignmentTarget::ColumnName(name) => lower(name),
            ast::AssignmentTarget::Tuple(names) => names.iter_mut().for_each(lower),
        }
    }
}

/// Reads and clears the `OR REPLACE` / `OR IGNORE` / `ON CONFLICT` decorations of an
/// INSERT (also inside EXPLAIN), leaving a plain INSERT for DataFusion.
fn take_insert_mode(statement: &mut DFStatement) -> Result<InsertMode, ParseError> {
    match statement {
        DFStatement::Explain(e) => take_insert_mode(&mut e.statement),
        DFStatement::Statement(s) => match s.as_mut() {
            ast::Statement::Insert(insert) => {
                let by_or = match insert.or.take() {
                    None => None,
                    Some(SqliteOnConflict::Replace) => Some(InsertMode::Upsert),
                    Some(SqliteOnConflict::Ignore) => Some(InsertMode::InsertIgnore),
                    Some(other) => {
                        return Err(ParseError::unsupported(format!(
                            "INSERT {other} is not supported: use INSERT, INSERT OR REPLACE (or UPSERT INTO) or INSERT OR IGNORE"
                        )));
                    }
                };
                let by_on = match insert.on.take() {
                    None => None,
                    Some(OnInsert::OnConflict(c)) => match c.action {
                        OnConflictAction::DoNothing => Some(InsertMode::InsertIgnore),
                        OnConflictAction::DoUpdate(_) => {
                            return Err(ParseError::unsupported(
                                "EXPLAIN of INSERT ... ON CONFLICT DO UPDATE is not supported",
                            ));
                        }
                    },
                    Some(OnInsert::DuplicateKeyUpdate(_)) => {
                        return Err(ParseError::unsupported(
                            "ON DUPLICATE KEY UPDATE is not supported: use UPSERT INTO t ... to replace whole rows",
                        ));
                    }
                    Some(_) => {
                        return Err(ParseError::unsupported(
                            "this ON clause of INSERT is not supported: use ON CONFLICT DO NOTHING or UPSERT INTO",
                        ));
                    }
                };
                match (by_or, by_on) {
                    (Some(_), Some(_)) => Err(ParseError::syntax(
                        "combine neither OR REPLACE nor OR IGNORE with ON CONFLICT: write one of them",
                    )),
                    (Some(m), None) | (None, Some(m)) => Ok(m),
                    (None, None) => Ok(InsertMode::Insert),
                }
            }
            _ => Ok(InsertMode::Insert),
        },
        _ => Ok(InsertMode::Insert),
    }
}

/// Collects and removes the table versions (`FOR SYSTEM_TIME AS OF`) of every table.
pub(super) struct AsOfStripper {
    pub(super) as_of: Option<Expr>,
}

impl VisitorMut for AsOfStripper {
    type Break = ParseError;

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<ParseError> {
        let TableFactor::Table { version, name, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let expr = match version.take() {
            None => return ControlFlow::Continue(()),
            Some(TableVersion::ForSystemTimeAsOf(e)) | Some(TableVersion::TimestampAsOf(e)) => e,
            Some(other) => {
                return ControlFlow::Break(ParseError::unsupported(format!(
                    "table version '{other}' on {name} is not supported: use FOR SYSTEM_TIME AS OF <timestamp>"
                )));
            }
        };
        match &self.as_of {
            None => self.as_of = Some(expr),
            Some(prev) if *prev == expr => {}
            Some(prev) => {
                return ControlFlow::Break(ParseError::unsupported(format!(
                    "a statement reads at one time only, but it names AS OF {prev} and AS OF {expr}: use the same AS OF expression for every table"
                )));
            }
        }
        ControlFlow::Continue(())
    }
}

/// Removes `FOR SYSTEM_TIME AS OF` from every table of the statement and returns the
/// (single) expression.
fn strip_as_of(statement: &mut DFStatement) -> Result<Option<Expr>, ParseError> {
    let mut v = AsOfStripper { as_of: None };
    strip_as_of_in(statement, &mut v)?;
    Ok(v.as_of)
}

fn strip_as_of_in(statement: &mut DFStatement, v: &mut AsOfStripper) -> Result<(), ParseError> {
    let flow = match statement {
        DFStatement::Statement(s) => s.visit(v),
        DFStatement::Explain(e) => return strip_as_of_in(&mut e.statement, v),
        DFStatement::CopyTo(c) => match &mut c.source {
            CopyToSource::Query(q) => q.visit(v),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        _ => ControlFlow::Continue(()),
    };
    match flow {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_sql;
    use super::super::tests::{err, lit, query};
    use super::*;

    #[test]
    fn upsert_and_insert_modes() {
        let (s, m, _) = query("UPSERT INTO t (a, b) VALUES (1, 2)");
        assert_eq!(m, InsertMode::Upsert);
        assert_eq!(s.to_string(), "INSERT INTO t (a, b) VALUES (1, 2)");
        let (s, m, _) = query("upsert into t select * from u");
        assert_eq!(m, InsertMode::Upsert);
        assert_eq!(s.to_string(), "INSERT INTO t SELECT * FROM u");
        let (s, m, _) = query("INSERT OR REPLACE INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Upsert);
        assert_eq!(s.to_string(), "INSERT INTO t VALUES (1)");
        let (s, m, _) = query("INSERT OR IGNORE INTO t VALUES (1)");
        assert_eq!(m, InsertMode::InsertIgnore);
        assert_eq!(s.to_string(), "INSERT INTO t VALUES (1)");
        let (s, m, _) = query("INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        assert_eq!(s.to_string(), "INSERT INTO t VALUES (1)");
        let (_, m, _) = query("INSERT INTO t VALUES (1) ON CONFLICT (a) DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        let (_, m, _) = query("INSERT INTO t VALUES (1) ON CONFLICT ON CONSTRAINT pk DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        let (_, m, _) = query("INSERT INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Insert);
        let (_, m, _) = query("SELECT 1");
        assert_eq!(m, InsertMode::Insert);
        let parsed =
            parse_sql("INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2").unwrap();
        assert!(
            matches!(
                parsed.as_slice(),
                [CairnStatement::InsertOnConflictUpdate(_)]
            ),
            "{parsed:?}"
        );
        let e = err("EXPLAIN INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2");
        assert_eq!(e.sqlstate(), "0A000");
        assert_eq!(
            err("UPSERT INTO t VALUES (1) ON CONFLICT DO NOTHING").sqlstate(),
            "0A000"
        );
        assert_eq!(
            err("UPSERT OR IGNORE INTO t VALUES (1)").sqlstate(),
            "42601"
        );
        assert_eq!(err("INSERT OR ABORT INTO t VALUES (1)").sqlstate(), "0A000");
        assert_eq!(
            err("INSERT OR IGNORE INTO t VALUES (1) ON CONFLICT DO NOTHING").sqlstate(),
            "42601"
        );
    }

    #[test]
    fn explain_keeps_insert_mode() {
        let (s, m, _) = query("EXPLAIN INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        assert!(matches!(s, DFStatement::Explain(_)));
        let (s, m, _) = query("EXPLAIN UPSERT INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Upsert);
        let DFStatement::Explain(e) = &s else {
            panic!("{s:?}")
        };
        assert_eq!(e.statement.to_string(), "INSERT INTO t VALUES (1)");
        let (_, m, _) = query("EXPLAIN ANALYZE VERBOSE UPSERT INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Upsert);
    }

    #[test]
    fn strips_as_of() {
        let (s, _, as_of) =
            query("SELECT * FROM t FOR SYSTEM_TIME AS OF '2024-01-01 00:00:00' WHERE a = 1");
        assert_eq!(
            as_of.as_ref().map(lit).as_deref(),
            Some("'2024-01-01 00:00:00'")
        );
        assert_eq!(s.to_string(), "SELECT * FROM t WHERE a = 1");
        let (s, _, as_of) = query(
            "SELECT * FROM t FOR SYSTEM_TIME AS OF TIMESTAMP '2024-01-01' AS x JOIN u FOR SYSTEM_TIME AS OF TIMESTAMP '2024-01-01' ON x.a = u.a",
        );
        assert_eq!(
            as_of.as_ref().map(lit).as_deref(),
            Some("TIMESTAMP '2024-01-01'")
        );
        assert_eq!(s.to_string(), "SELECT * FROM t AS x JOIN u ON x.a = u.a");
        // Inside subqueries, CTEs, INSERT ... SELECT and EXPLAIN.
        let (s, _, as_of) = query(
            "WITH c AS (SELECT a FROM t FOR SYSTEM_TIME AS OF 5) SELECT * FROM c WHERE a IN (SELECT a FROM u FOR SYSTEM_TIME AS OF 5)",
        );
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("5"));
        assert!(!s.to_string().contains("SYSTEM_TIME"), "{s}");
        let (s, m, as_of) =
            query("UPSERT INTO t2 SELECT * FROM t FOR SYSTEM_TIME AS OF now() - INTERVAL '1 hour'");
        assert_eq!(m, InsertMode::Upsert);
        assert!(as_of.is_some());
        assert_eq!(s.to_string(), "INSERT INTO t2 SELECT * FROM t");
        let (s, _, as_of) = query("EXPLAIN SELECT * FROM t FOR SYSTEM_TIME AS OF 7");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("7"));
        assert!(!s.to_string().contains("SYSTEM_TIME"), "{s}");
        // Databricks' TIMESTAMP AS OF means the same.
        let (_, _, as_of) = query("SELECT * FROM t TIMESTAMP AS OF '2024-01-01'");
        assert!(as_of.is_some());
        // No AS OF.
        let (_, _, as_of) = query("SELECT * FROM t");
        assert!(as_of.is_none());
        // Two different times.
        let e = err("SELECT * FROM t FOR SYSTEM_TIME AS OF 1, u FOR SYSTEM_TIME AS OF 2");
        assert_eq!(e.sqlstate(), "0A000");
        assert_eq!(err("SELECT * FROM t VERSION AS OF 3").sqlstate(), "0A000");
    }

    #[test]
    fn short_as_of_form() {
        let (s, _, as_of) = query("SELECT * FROM t AS OF '2024-01-01' WHERE a = 1");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("'2024-01-01'"));
        assert_eq!(s.to_string(), "SELECT * FROM t WHERE a = 1");
        let (_, _, as_of) = query("SELECT * FROM s.t AS OF 5, u AS OF 5");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("5"));
        let (_, _, as_of) = query("SELECT * FROM a JOIN t AS OF 5 ON a.x = t.x");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("5"));
        // A column or table alias called "of" is left alone.
        let (s, _, as_of) = query("SELECT a, b AS of FROM t");
        assert!(as_of.is_none());
        assert_eq!(s.to_string(), "SELECT a, b AS of FROM t");
        let (_, _, as_of) = query("SELECT * FROM t AS of WHERE of.a = 1");
        assert!(as_of.is_none());
    }
}
