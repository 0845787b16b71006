//! Prepared statements ([`Prepared`]): a statement parsed and planned once with `$n`
//! parameters (the extended query protocol, Flight SQL prepared statements), then
//! executed many times. A plan remembers the tables it read and their schema versions,
//! and is planned again when one of them changed since.

use std::sync::Arc;

use arrow::datatypes::{DataType as ArrowType, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast;

use super::{PlannedQuery, QueryResult, SqlSession, returns_rows};
use crate::error::{Result, SqlError};
use crate::options::InsertMode;
use crate::parser::{self, CairnStatement};
use crate::point::PointPlan;

/// A statement parsed and planned once, executed many times with parameters
/// (extended query protocol, Flight SQL prepared statements).
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The SQL text.
    pub sql: String,
    statement: Option<CairnStatement>,
    plan: Option<LogicalPlan>,
    insert_mode: InsertMode,
    fixed_snapshot: Option<u64>,
    /// Parameter types (`$1`, `$2`, ...), `None` where DataFusion cannot infer one.
    pub param_types: Vec<Option<ArrowType>>,
    /// The schema of the rows it returns (empty for statements without rows; the
    /// one-column `count` schema for DML).
    pub schema: SchemaRef,
    /// The tables the plan reads and writes, as it saw them: name, id and schema
    /// version. An ALTER TABLE (or a DROP and CREATE) since makes the plan stale.
    tables: Vec<PlannedTable>,
    /// The keyed fast path for this statement, if it names rows by their whole
    /// primary key (see `crate::point`).
    point: Option<Arc<PointPlan>>,
}

/// A table as a prepared plan saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlannedTable {
    name: String,
    id: String,
    version: u32,
}

/// The Cairn tables `plan` reads or writes (subqueries included).
fn planned_tables(plan: &LogicalPlan) -> Vec<PlannedTable> {
    let mut out: Vec<PlannedTable> = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        let source = match node {
            LogicalPlan::TableScan(s) => Some(&s.source),
            LogicalPlan::Dml(d) => Some(&d.target),
            _ => None,
        };
        if let Some(t) = source.and_then(crate::authz::cairn_table) {
            let seen = PlannedTable {
                name: t.name.clone(),
                id: t.id.clone(),
                version: t.schema.version(),
            };
            if !out.contains(&seen) {
                out.push(seen);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

impl Prepared {
    /// A statement Cairn runs itself at each execute (no DataFusion plan, no rows):
    /// `statement`, or nothing for an empty query string.
    fn unplanned(
        sql: &str,
        statement: Option<CairnStatement>,
        param_types: Vec<Option<ArrowType>>,
    ) -> Prepared {
        Prepared {
            sql: sql.to_string(),
            statement,
            plan: None,
            insert_mode: InsertMode::Insert,
            fixed_snapshot: None,
            param_types,
            schema: Arc::new(arrow::datatypes::Schema::empty()),
            tables: vec![],
            point: None,
        }
    }

    /// Whether executions take the keyed fast path (a read or write of rows named by
    /// their whole primary key, without a DataFusion plan).
    pub fn keyed(&self) -> bool {
        self.point.is_some()
    }

    /// Whether executing it yields rows ([`QueryResult::Rows`]) rather than a count
    /// or a command tag.
    pub fn returns_rows(&self) -> bool {
        self.plan.as_ref().is_some_and(returns_rows)
    }
}

impl SqlSession {
    /// Parses and plans one statement with `$n` parameters.
    pub async fn prepare(&self, sql: &str) -> Result<Prepared> {
        let mut statements = parser::parse_sql(sql)?;
        if statements.len() > 1 {
            return Err(SqlError::other(
                "42601",
                "cannot prepare several statements at once: send them one by one",
            ));
        }
        let Some(statement) = statements.pop() else {
            return Ok(Prepared::unplanned(sql, None, vec![]));
        };
        match statement {
            CairnStatement::Query {
                statement: DFStatement::Statement(st),
                ..
            } if crate::txn::controls_transaction(&st) => Ok(Prepared::unplanned(
                sql,
                Some(CairnStatement::Query {
                    statement: DFStatement::Statement(st),
                    insert_mode: parser::InsertMode::Insert,
                    as_of: None,
                }),
                vec![],
            )),
            CairnStatement::Query {
                statement,
                insert_mode,
                as_of,
            } => {
                let PlannedQuery {
                    plan, fixed, mode, ..
                } = self
                    .plan_query(statement, insert_mode, as_of.as_ref())
                    .await?;
                let types = plan.get_parameter_types()?;
                let mut params: Vec<(usize, Option<ArrowType>)> = types
                    .into_iter()
                    .filter_map(|(k, v)| {
                        k.trim_start_matches('$')
                            .parse::<usize>()
                            .ok()
                            .map(|i| (i, v))
                    })
                    .collect();
                params.sort_by_key(|(i, _)| *i);
                let count = params.last().map(|(i, _)| *i).unwrap_or(0);
                let mut param_types = vec![None; count];
                for (i, t) in params {
                    param_types[i - 1] = t;
                }
                for i in limit_placeholders(&plan) {
                    if let Some(t @ None) = param_types.get_mut(i - 1) {
                        *t = Some(ArrowType::Int64);
                    }
                }
                let schema = match &plan {
                    LogicalPlan::Dml(_) => crate::write::count_schema(),
                    p if returns_rows(p) => parser::names::client_schema(p.schema().inner()),
                    _ => Arc::new(arrow::datatypes::Schema::empty()),
                };
                Ok(Prepared {
                    sql: sql.to_string(),
                    statement: None,
                    tables: planned_tables(&plan),
                    point: self
                        .options()
                        .keyed_fast_path
                        .then(|| PointPlan::recognize(&plan, mode).map(Arc::new))
                        .flatten(),
                    plan: Some(plan),
                    insert_mode: mode,
                    fixed_snapshot: fixed,
                    param_types,
                    schema,
                })
            }
            CairnStatement::InsertOnConflictUpdate(insert) => {
                // The parameters are those of the plain INSERT (and the SET list's).
                let mut plain = insert.as_ref().clone();
                plain.on = None;
                plain.table_alias = None;
                let text = ast::Statement::Insert(plain).to_string();
                let param_types = Box::pin(self.prepare(&text)).await?.param_types;
                Ok(Prepared::unplanned(
                    sql,
                    Some(CairnStatement::InsertOnConflictUpdate(insert)),
                    param_types,
                ))
            }
            other => Ok(Prepared::unplanned(sql, Some(other), vec![])),
        }
    }

    /// Executes a prepared statement with parameter values (one per `$n`).
    pub async fn execute_prepared(
        &self,
        p: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<QueryResult> {
        let r = self.execute_prepared_once(p, params).await;
        if let Err(e) = &r {
            self.after_error(e).await;
        }
        r
    }

    /// [`SqlSession::execute_prepared`], before a failure is applied to the
    /// transaction.
    async fn execute_prepared_once(
        &self,
        p: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<QueryResult> {
        if let Some(CairnStatement::InsertOnConflictUpdate(insert)) = &p.statement {
            self.check_write("INSERT")?;
            return crate::upsert::run(self, insert, &params).await;
        }
        if let Some(s) = &p.statement {
            return self.run(s.clone()).await;
        }
        self.check_not_aborted()?;
        if self.stale(&p.tables).await? {
            // A table changed since the statement was prepared: plan it again, as
            // PostgreSQL re-plans cached statements after DDL.
            let fresh = self.prepare(&p.sql).await?;
            if !fresh.tables.is_empty() && self.stale(&fresh.tables).await? {
                return Err(SqlError::other(
                    "40001",
                    "a table changed twice while this statement was planned again: retry it",
                ));
            }
            let same_rows = fresh.schema.fields().len() == p.schema.fields().len()
                && fresh
                    .schema
                    .fields()
                    .iter()
                    .zip(p.schema.fields())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
            if !same_rows || fresh.param_types.len() != p.param_types.len() {
                return Err(SqlError::other(
                    "0A000",
                    "cached plan must not change result type: a table this prepared \
                     statement uses was altered; prepare it again",
                ));
            }
            return Box::pin(self.execute_prepared_once(&fresh, params)).await;
        }
        let Some(plan) = &p.plan else {
            return Ok(QueryResult::Done { tag: String::new() });
        };
        if params.len() != p.param_types.len() {
            return Err(SqlError::other(
                "08P01",
                format!(
                    "the statement has {} parameters but {} values were bound",
                    p.param_types.len(),
                    params.len()
                ),
            ));
        }
        if let Some(point) = p.point.as_ref().filter(|_| self.transaction().is_none()) {
            crate::authz::check_plan(&self.principal().await?, plan, p.insert_mode)?;
            if let Some(result) = point
                .run(self.engine.client(), &params, p.fixed_snapshot)
                .await
            {
                return result;
            }
        }
        let plan = if params.is_empty() {
            plan.clone()
        } else {
            plan.clone().with_param_values(ParamValues::from(params))?
        };
        let who = self.principal().await?;
        crate::authz::check_plan(&who, &plan, p.insert_mode)?;
        let state = self.statement_state(p.fixed_snapshot, p.insert_mode);
        self.run_plan(state, plan).await
    }

    /// Whether any of `tables` was altered, dropped or replaced since it was planned.
    async fn stale(&self, tables: &[PlannedTable]) -> Result<bool> {
        let schema = &self.engine.inner.schema;
        for t in tables {
            let now = datafusion::catalog::SchemaProvider::table(schema.as_ref(), &t.name)
                .await?
                .and_then(|p| {
                    p.downcast_ref::<crate::provider::CairnTable>()
                        .map(|c| (c.table().id.clone(), c.table().schema.version()))
                });
            if now.as_ref() != Some(&(t.id.clone(), t.version)) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The numbers of the placeholders in `LIMIT $n` / `OFFSET $n`, which DataFusion
/// leaves untyped: they can only be row counts, and a driver that sends untyped
/// parameters as text (go-ycsb's `LIMIT $2` through lib/pq) needs to be told so.
fn limit_placeholders(plan: &LogicalPlan) -> Vec<usize> {
    let mut numbers = vec![];
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Limit(limit) = node {
            for e in [&limit.skip, &limit.fetch].into_iter().flatten() {
                if let Expr::Placeholder(p) = e.as_ref()
                    && let Ok(n) = p.id.trim_start_matches('$').parse::<usize>()
                    && n > 0
                {
                    numbers.push(n);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    numbers
}
