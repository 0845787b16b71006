//! [`SqlEngine`] and [`SqlSession`]: running SQL statements against a Cairn cluster.
//!
//! An engine holds what all sessions share: the cluster client, the catalog and a
//! template DataFusion state with Cairn's settings and the PostgreSQL catalog
//! (`pg_catalog`, for psql and drivers). A session is one connection's state: its
//! `SET` settings and prepared statements. Each statement is parsed by Cairn's parser
//! ([`crate::parser`]); DDL and COPY run here, everything else is planned by
//! DataFusion with a fresh [`StatementContext`] (one snapshot per statement).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast;

use crate::copy::{CopyIn, CopyInput, copy_from};
use crate::error::{Result, SqlError};
use crate::options::{CairnOptions, InsertMode, StatementContext, parse_read_timestamp};
use crate::parser::{self, CairnStatement};
use crate::txn::SessionTxn;

mod engine;
mod prepared;
mod schema_changes;

pub use engine::{EngineLimits, SqlEngine};
pub use prepared::Prepared;

/// The catalog name Cairn tables live in (also the PostgreSQL database name).
pub const CATALOG: &str = "cairn";
/// The schema Cairn tables live in.
pub const SCHEMA: &str = "public";

/// What a statement returns.
pub enum QueryResult {
    /// Rows (SELECT, EXPLAIN, SHOW, ...).
    Rows {
        /// Their schema.
        schema: SchemaRef,
        /// The rows, produced as they are read.
        stream: SendableRecordBatchStream,
    },
    /// A count of affected rows with the PostgreSQL command tag (`INSERT`, `UPDATE`,
    /// `DELETE`, `COPY`, `SELECT` for CREATE TABLE AS).
    Count {
        /// The command tag.
        tag: &'static str,
        /// Rows affected.
        rows: u64,
    },
    /// A statement without rows (`CREATE TABLE`, `SET`, ...) and its command tag.
    Done {
        /// The command tag.
        tag: String,
    },
    /// `COPY … FROM STDIN`: a load waiting for the client's data, which only the
    /// PostgreSQL front end can send.
    CopyIn(CopyIn),
    /// `COPY … TO STDOUT`: rows the PostgreSQL front end sends in COPY's text or CSV
    /// format.
    CopyOut {
        /// Their schema.
        schema: SchemaRef,
        /// The rows, produced as they are read.
        stream: SendableRecordBatchStream,
        /// The format to send them in.
        options: parser::CopyOptions,
    },
}

impl std::fmt::Debug for QueryResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryResult::Rows { schema, .. } => write!(f, "Rows({schema:?})"),
            QueryResult::Count { tag, rows } => write!(f, "{tag} {rows}"),
            QueryResult::Done { tag } => write!(f, "{tag}"),
            QueryResult::CopyIn(c) => write!(f, "{c:?}"),
            QueryResult::CopyOut {
                schema, options, ..
            } => {
                write!(f, "CopyOut({schema:?}, {options:?})")
            }
        }
    }
}

impl QueryResult {
    /// The result for a front end that cannot stream COPY data: a `CopyOut` becomes
    /// its rows, a `CopyIn` an error (0A000) naming what to use instead.
    pub fn without_copy(self) -> Result<QueryResult> {
        match self {
            QueryResult::CopyIn(_) => Err(SqlError::unsupported(
                "COPY ... FROM STDIN streams rows over the PostgreSQL protocol (psql's \\copy, \
                 psycopg's cursor.copy()); here, load with INSERT or COPY ... FROM a file",
            )),
            QueryResult::CopyOut { schema, stream, .. } => Ok(QueryResult::Rows { schema, stream }),
            other => Ok(other),
        }
    }

    /// Reads all rows of a `Rows` or `CopyOut` result (none for the others).
    pub async fn collect(self) -> Result<Vec<RecordBatch>> {
        match self {
            QueryResult::Rows { stream, .. } | QueryResult::CopyOut { stream, .. } => {
                use futures::TryStreamExt;
                Ok(stream.try_collect().await?)
            }
            _ => Ok(vec![]),
        }
    }
}

/// One connection's SQL state.
pub struct SqlSession {
    engine: SqlEngine,
    ctx: SessionContext,
    /// The user the statements run as; `None`: the engine's own client decides
    /// (a front end sets the user once it has authenticated them).
    user: parking_lot::RwLock<Option<String>>,
    /// The open transaction block, if any (`crate::txn` has its methods).
    pub(crate) txn: parking_lot::Mutex<Option<Arc<SessionTxn>>>,
    /// Notices for the client (PostgreSQL's NOTICE and WARNING messages) not yet sent.
    notices: parking_lot::Mutex<Vec<Notice>>,
}

impl Drop for SqlSession {
    /// A connection that goes away inside a transaction block rolls it back, as
    /// PostgreSQL does, so that its rows do not stay owned.
    fn drop(&mut self) {
        if let Some(t) = self.txn.get_mut().take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                if let Err(e) = t.rollback().await {
                    tracing::warn!(error = %e, "rolling back the transaction of a closed session");
                }
            });
        }
    }
}

/// A message for the client that is not an error (PostgreSQL's NoticeResponse).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// `NOTICE` or `WARNING`.
    pub severity: &'static str,
    /// The SQLSTATE: `00000` for a notice, `01000` for a warning.
    pub code: &'static str,
    /// What the client should know.
    pub message: String,
}

impl std::fmt::Debug for SqlSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSession").finish_non_exhaustive()
    }
}

impl SqlSession {
    /// Queues a notice for the client: a PostgreSQL NOTICE through pgwire, a log line
    /// elsewhere ([`SqlSession::take_notices`]).
    pub fn notice(&self, message: impl Into<String>) {
        self.queue_notice("NOTICE", "00000", message.into());
    }

    /// Queues a warning for the client (PostgreSQL's WARNING, SQLSTATE 01000): the
    /// statement did what it says, but not all a PostgreSQL user would expect.
    pub fn warning(&self, message: impl Into<String>) {
        self.queue_notice("WARNING", "01000", message.into());
    }

    /// Logs a notice or warning and queues it for [`SqlSession::take_notices`].
    fn queue_notice(&self, severity: &'static str, code: &'static str, message: String) {
        tracing::info!(severity, message = %message, "SQL notice");
        self.notices.lock().push(Notice {
            severity,
            code,
            message,
        });
    }

    /// The transaction block a COPY FROM writes in, if one is open.
    fn copy_transaction(&self) -> Option<crate::copy::InTransaction> {
        let opts = self.options();
        self.transaction().map(|txn| crate::copy::InTransaction {
            txn,
            batch_rows: opts.write_batch_rows,
            max_atomic_rows: opts.max_atomic_rows,
        })
    }

    /// Warns that `what`, run inside a transaction block, takes effect at once: Cairn's
    /// schema, user and privilege changes are not part of transactions, so a later
    /// ROLLBACK does not undo them (PostgreSQL's would).
    fn warn_if_in_block(&self, what: &str) {
        if self.transaction().is_some() {
            self.warning(format!(
                "{what} inside a transaction block takes effect now and is not undone by \
                 ROLLBACK: Cairn's schema, user and privilege changes are not transactional"
            ));
        }
    }

    /// The notices and warnings queued since the last call (front ends send them
    /// with the statement's result).
    pub fn take_notices(&self) -> Vec<Notice> {
        std::mem::take(&mut *self.notices.lock())
    }

    /// The DataFusion context of this session.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The engine this session belongs to.
    pub fn engine(&self) -> &SqlEngine {
        &self.engine
    }

    /// Runs the session's statements as `user` (whose password the front end has
    /// checked): each statement is then authorized against that user's privileges.
    pub fn set_user(&self, user: &str) {
        *self.user.write() = Some(user.to_string());
    }

    /// The user statements run as, if a front end set one.
    pub fn user(&self) -> Option<String> {
        self.user.read().clone()
    }

    /// Who runs the next statement: the session's user with the privileges the
    /// catalog holds now, or (no user set) the engine's own client, whose rights the
    /// servers check.
    pub async fn principal(&self) -> Result<cairn_proto::auth::Principal> {
        match self.user() {
            Some(u) => self.engine.users().principal(&u).await,
            None => Ok(cairn_proto::auth::Principal::Internal),
        }
    }

    /// Checks that the session's user may `action`.
    async fn authorize(&self, action: cairn_proto::auth::Action<'_>) -> Result<()> {
        self.principal().await?.check(action)?;
        Ok(())
    }

    /// Checks that the session's user owns table `name` (or is a superuser).
    async fn authorize_owner(&self, name: &str) -> Result<()> {
        let who = self.principal().await?;
        if who.is_superuser() {
            return Ok(());
        }
        let table = self.engine.client().open_table(name).await?;
        let owner = self.engine.users().owner(&table.id).await?;
        who.check(cairn_proto::auth::Action::OwnTable {
            name: &table.name,
            owner: &owner,
        })?;
        Ok(())
    }

    /// Runs every statement of `sql` in order. When there are several, the rows of
    /// all but the last are read before the next statement starts.
    pub async fn execute(&self, sql: &str) -> Result<Vec<QueryResult>> {
        let statements = parser::parse_sql(sql)?;
        let n = statements.len();
        let mut out = Vec::with_capacity(n);
        for (i, s) in statements.into_iter().enumerate() {
            let r = match self.run(s).await {
                Ok(r) => r,
                Err(e) => {
                    self.after_error(&e).await;
                    return Err(e);
                }
            };
            let r = match r {
                QueryResult::Rows { schema, stream } if i + 1 < n => {
                    let batches = collect_stream(stream).await?;
                    QueryResult::Rows {
                        stream: Box::pin(MemoryStream::try_new(batches, schema.clone(), None)?),
                        schema,
                    }
                }
                other => other,
            };
            out.push(r);
        }
        Ok(out)
    }

    /// Runs one statement and reads all its rows.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let mut all = vec![];
        for r in self.execute(sql).await? {
            all = r.collect().await?;
        }
        Ok(all)
    }

    /// The snapshot fixed by `AS OF` or `cairn.read_timestamp`, if any.
    async fn fixed_snapshot(&self, as_of: Option<&ast::Expr>) -> Result<Option<u64>> {
        if let Some(e) = as_of {
            return Ok(Some(self.eval_as_of(e).await?));
        }
        let opts = self.options();
        if opts.read_timestamp.is_empty() {
            Ok(None)
        } else {
            Ok(Some(parse_read_timestamp(&opts.read_timestamp)?))
        }
    }

    /// The HybridTime of an `AS OF` expression: a literal, or any constant
    /// expression DataFusion evaluates (`now() - interval '1 minute'`).
    async fn eval_as_of(&self, e: &ast::Expr) -> Result<u64> {
        if let Some(text) = literal_text(e) {
            return parse_read_timestamp(&text);
        }
        let bad = || {
            SqlError::other(
                "22007",
                format!(
                    "AS OF needs a point in time, e.g. FOR SYSTEM_TIME AS OF \
                     '2026-01-02 03:04:05' or now() - interval '1 minute' (got {e})"
                ),
            )
        };
        let batches = self
            .ctx
            .sql(&format!("SELECT {e}"))
            .await?
            .collect()
            .await?;
        let b = batches
            .first()
            .filter(|b| b.num_rows() == 1)
            .ok_or_else(bad)?;
        let v = ScalarValue::try_from_array(b.column(0), 0)?;
        let micros = match v {
            ScalarValue::TimestampNanosecond(Some(x), _) => x.div_euclid(1000),
            ScalarValue::TimestampMicrosecond(Some(x), _) => x,
            ScalarValue::TimestampMillisecond(Some(x), _) => x * 1000,
            ScalarValue::TimestampSecond(Some(x), _) => x * 1_000_000,
            ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
                return parse_read_timestamp(&s);
            }
            ScalarValue::Int64(Some(n)) => return parse_read_timestamp(&n.to_string()),
            _ => return Err(bad()),
        };
        parse_read_timestamp(&micros.to_string())
    }

    fn options(&self) -> CairnOptions {
        self.ctx
            .state()
            .config_options()
            .extensions
            .get::<CairnOptions>()
            .cloned()
            .unwrap_or_default()
    }

    /// Plans a DataFusion statement in a state carrying its snapshot and insert mode,
    /// after bringing the table list up to date.
    async fn plan_statement(
        &self,
        statement: DFStatement,
        fixed: Option<u64>,
        mode: InsertMode,
    ) -> Result<(SessionState, LogicalPlan)> {
        let state = self.statement_state(fixed, mode);
        self.engine.inner.schema.refresh(false).await?;
        let plan = state.statement_to_plan(statement).await?;
        Ok((state, plan))
    }

    /// Plans and runs one write statement given as SQL, with parameter values for
    /// its `$n`; returns the rows written. Privileges are checked as for any
    /// statement.
    pub(crate) async fn run_write(
        &self,
        sql: &str,
        mode: InsertMode,
        params: &[ScalarValue],
    ) -> Result<u64> {
        let mut statements = parser::parse_sql(sql)?;
        let (Some(CairnStatement::Query { statement, .. }), None) =
            (statements.pop(), statements.pop())
        else {
            return Err(SqlError::other(
                "XX000",
                format!("expected one statement: {sql}"),
            ));
        };
        let (state, plan) = self.plan_statement(statement, None, mode).await?;
        let plan = if params.is_empty() {
            plan
        } else {
            plan.with_param_values(ParamValues::from(params.to_vec()))?
        };
        crate::authz::check_plan(&self.principal().await?, &plan, mode)?;
        match self.run_plan(state, plan).await? {
            QueryResult::Count { rows, .. } => Ok(rows),
            _ => Ok(0),
        }
    }

    /// Plans a parsed query statement: fixes its snapshot (`as_of`, or the session's
    /// `cairn.read_timestamp`) and its insert mode, then plans it (see
    /// [`SqlSession::plan_statement`]).
    async fn plan_query(
        &self,
        statement: DFStatement,
        insert_mode: parser::InsertMode,
        as_of: Option<&ast::Expr>,
    ) -> Result<PlannedQuery> {
        let fixed = self.fixed_snapshot(as_of).await?;
        let mode = insert_mode_of(insert_mode);
        let (state, plan) = self.plan_statement(statement, fixed, mode).await?;
        Ok(PlannedQuery {
            state,
            plan,
            fixed,
            mode,
        })
    }

    /// This session's state with a fresh statement context: `fixed` snapshot, insert
    /// `mode`, and the session's transaction if a block is open.
    fn statement_state(&self, fixed: Option<u64>, mode: InsertMode) -> SessionState {
        let mut state = self.ctx.state();
        state
            .config_mut()
            .set_extension(StatementContext::new_in(fixed, mode, self.transaction()));
        state
    }

    async fn run(&self, statement: CairnStatement) -> Result<QueryResult> {
        if let CairnStatement::Query {
            statement: DFStatement::Statement(st),
            ..
        } = &statement
            && let Some(r) = self.transaction_statement(st).await
        {
            return r;
        }
        self.check_not_aborted()?;
        match statement {
            CairnStatement::Query {
                statement,
                insert_mode,
                as_of,
            } => {
                let q = self
                    .plan_query(statement, insert_mode, as_of.as_ref())
                    .await?;
                crate::authz::check_plan(&self.principal().await?, &q.plan, q.mode)?;
                self.run_plan(q.state, q.plan).await
            }
            CairnStatement::Dcl(d) => {
                self.check_write("a user or privilege statement")?;
                self.warn_if_in_block("a user or privilege statement");
                self.run_dcl(d).await
            }
            CairnStatement::InsertOnConflictUpdate(insert) => {
                self.check_write("INSERT")?;
                crate::upsert::run(self, &insert, &[]).await
            }
            CairnStatement::CreateTable(ct) => {
                self.check_write("CREATE TABLE")?;
                self.authorize(cairn_proto::auth::Action::CreateTable)
                    .await?;
                self.warn_if_in_block("CREATE TABLE");
                self.create_table(ct).await
            }
            CairnStatement::DropTable { names, if_exists } => {
                self.drop_tables(names, if_exists).await
            }
            CairnStatement::AlterTable { name, ops } => self.alter_table(name, ops).await,
            CairnStatement::Copy(c) => {
                self.check_write("COPY FROM")?;
                let client = self.engine.client();
                match c.input {
                    parser::CopyInput::File(path) => {
                        // COPY FROM a file reads the server's files: superusers only,
                        // as in PostgreSQL (pg_read_server_files).
                        self.authorize(cairn_proto::auth::Action::Superuser(
                            "COPY from a file on the server",
                        ))
                        .await?;
                        let table = client.open_table(&c.table).await?;
                        let rows = copy_from(
                            client.clone(),
                            table,
                            c.columns,
                            CopyInput::File(path),
                            c.options,
                            self.copy_transaction(),
                        )
                        .await?;
                        Ok(QueryResult::Count { tag: "COPY", rows })
                    }
                    parser::CopyInput::Stdin => {
                        let table = client.open_table(&c.table).await?;
                        self.authorize(cairn_proto::auth::Action::Table {
                            id: &table.id,
                            name: &table.name,
                            need: cairn_proto::auth::Privileges::INSERT,
                        })
                        .await?;
                        // Before the client is asked for data (the load checks again).
                        for col in &c.columns {
                            table.schema.index_of(col)?;
                        }
                        Ok(QueryResult::CopyIn(CopyIn::start(
                            client.clone(),
                            table,
                            c.columns,
                            c.options,
                            self.copy_transaction(),
                        )))
                    }
                }
            }
            CairnStatement::CopyTo(c) => {
                let mut statements = parser::parse_sql(&c.query)?;
                let (Some(query), true) = (statements.pop(), statements.is_empty()) else {
                    return Err(SqlError::other(
                        "42601",
                        "COPY (...) TO STDOUT takes one query",
                    ));
                };
                match Box::pin(self.run(query)).await? {
                    QueryResult::Rows { schema, stream } => Ok(QueryResult::CopyOut {
                        schema,
                        stream,
                        options: c.options,
                    }),
                    _ => Err(SqlError::other(
                        "42601",
                        "COPY (...) TO STDOUT needs a query that returns rows (SELECT, VALUES)",
                    )),
                }
            }
        }
    }

    async fn run_plan(&self, state: SessionState, plan: LogicalPlan) -> Result<QueryResult> {
        match &plan {
            LogicalPlan::Dml(d) => {
                let tag = match d.op {
                    WriteOp::Insert(_) => "INSERT",
                    WriteOp::Update => "UPDATE",
                    WriteOp::Delete => "DELETE",
                    WriteOp::Truncate => "TRUNCATE",
                    _ => "MERGE",
                };
                self.check_write(tag)?;
                if let Ok(p) = datafusion::datasource::source_as_provider(&d.target)
                    && p.downcast_ref::<crate::store_table::StoreTable>().is_some()
                {
                    return Err(crate::store_table::read_only(&d.table_name.to_string()));
                }
                if matches!(d.op, WriteOp::Update | WriteOp::Delete)
                    && !reads_target(&state.optimize(&plan)?)
                {
                    // The optimizer proved the WHERE clause never true and replaced
                    // the scan with an empty relation. DataFusion would then hand the
                    // table no filters at all — "every row" — so nothing may run.
                    return Ok(QueryResult::Count { tag, rows: 0 });
                }
                let physical = state.create_physical_plan(&plan).await?;
                // An INSERT … SELECT may run distributed: its workers read at the
                // statement's snapshot, and it may run again if it lost one.
                let workers = self.engine.workers();
                let rows = crate::distributed::run_write(physical, &state, &plan, workers).await?;
                let tag = if tag == "MERGE" || tag == "TRUNCATE" {
                    return Err(SqlError::unsupported(format!("{tag} is not supported")));
                } else {
                    tag
                };
                Ok(QueryResult::Count { tag, rows })
            }
            LogicalPlan::Ddl(DdlStatement::CreateIndex(ci)) => {
                // The planner resolved the table and the columns.
                let columns: Vec<String> = ci.columns.iter().map(|c| c.expr.to_string()).collect();
                if ci.unique {
                    return Err(SqlError::unsupported(format!(
                        "CREATE UNIQUE INDEX is not supported: Cairn enforces uniqueness of the \
                         primary key only, so ({}) of {} cannot be made unique",
                        columns.join(", "),
                        ci.table
                    )));
                }
                self.notice(format!(
                    "Cairn has no secondary indexes: CREATE INDEX {} made no index, and \
                     queries filtering on ({}) scan {} (with predicates evaluated on the \
                     tablet servers); only the primary key locates rows",
                    ci.name.as_deref().unwrap_or(""),
                    columns.join(", "),
                    ci.table
                ));
                Ok(QueryResult::Done {
                    tag: "CREATE INDEX".into(),
                })
            }
            LogicalPlan::Ddl(d) => {
                let what = match d {
                    DdlStatement::CreateView(_) => "CREATE VIEW",
                    DdlStatement::CreateCatalogSchema(_) | DdlStatement::CreateCatalog(_) => {
                        "CREATE SCHEMA"
                    }
                    DdlStatement::DropView(_) => "DROP VIEW",
                    _ => "",
                };
                if what.is_empty() || what != "CREATE VIEW" && what != "DROP VIEW" {
                    return Err(SqlError::unsupported(format!(
                        "{} is not supported by Cairn",
                        d.name()
                    )));
                }
                Err(SqlError::unsupported(format!(
                    "{what} is not supported yet: query the tables directly"
                )))
            }
            LogicalPlan::Statement(s) => {
                let tag = match s {
                    datafusion::logical_expr::Statement::SetVariable(_) => "SET",
                    datafusion::logical_expr::Statement::ResetVariable(_) => "RESET",
                    datafusion::logical_expr::Statement::TransactionStart(_) => "BEGIN",
                    datafusion::logical_expr::Statement::TransactionEnd(e) => match e.conclusion {
                        datafusion::logical_expr::TransactionConclusion::Commit => "COMMIT",
                        datafusion::logical_expr::TransactionConclusion::Rollback => "ROLLBACK",
                    },
                    _ => "",
                };
                match tag {
                    // Reached only by plans made elsewhere: `run` answers these first.
                    "BEGIN" => {
                        self.begin(Default::default(), Default::default());
                        Ok(QueryResult::Done { tag: tag.into() })
                    }
                    "COMMIT" => {
                        self.commit().await?;
                        Ok(QueryResult::Done { tag: tag.into() })
                    }
                    "ROLLBACK" => {
                        self.rollback().await?;
                        Ok(QueryResult::Done { tag: tag.into() })
                    }
                    "RESET"
                        if let datafusion::logical_expr::Statement::ResetVariable(r) = s
                            && let Some(name) = r.variable.strip_prefix("cairn.") =>
                    {
                        // DataFusion resets only its own namespace: a Cairn setting
                        // is set back to its default here.
                        let value = crate::options::default_of(name).ok_or_else(|| {
                            SqlError::other(
                                "42704",
                                format!("unrecognized configuration parameter \"{}\"", r.variable),
                            )
                        })?;
                        self.ctx
                            .state_ref()
                            .write()
                            .config_mut()
                            .options_mut()
                            .set(&r.variable, &value)?;
                        Ok(QueryResult::Done { tag: tag.into() })
                    }
                    "SET" | "RESET" => {
                        self.ctx.execute_logical_plan(plan).await?.collect().await?;
                        Ok(QueryResult::Done { tag: tag.into() })
                    }
                    _ => Err(SqlError::unsupported(format!(
                        "{} is not supported",
                        s.name()
                    ))),
                }
            }
            _ => {
                let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
                if let LogicalPlan::Explain(e) = &plan
                    && let Some(rows) = crate::distributed::explain(&state, e).await?
                {
                    let stream = datafusion::physical_plan::memory::MemoryStream::try_new(
                        vec![rows],
                        schema.clone(),
                        None,
                    )?;
                    return Ok(QueryResult::Rows {
                        schema,
                        stream: Box::pin(stream),
                    });
                }
                let physical = state.create_physical_plan(&plan).await?;
                crate::distributed::prepare(&physical).await?;
                let distributed = crate::distributed::is_distributed(&physical);
                let mut stream = crate::distributed::execute(physical, &state)?;
                // A query runs again after a failure; EXPLAIN ANALYZE of an INSERT
                // does not (its write may have taken effect).
                let writes = matches!(&plan, LogicalPlan::Analyze(a)
                    if matches!(a.input.as_ref(), LogicalPlan::Dml(_)));
                if distributed && !writes {
                    let workers = self.engine.workers().cloned();
                    stream = crate::distributed::or_run_here(stream, state, plan, workers);
                }
                let shown = parser::names::client_schema(&schema);
                if !Arc::ptr_eq(&shown, &schema) {
                    stream = renamed(stream, shown.clone());
                }
                Ok(QueryResult::Rows {
                    schema: shown,
                    stream,
                })
            }
        }
    }
}

/// `stream` with its columns named as in `schema` (same types, other names).
fn renamed(stream: SendableRecordBatchStream, schema: SchemaRef) -> SendableRecordBatchStream {
    use futures::StreamExt;
    let s = schema.clone();
    Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
            schema,
            stream.map(move |b| Ok(RecordBatch::try_new(s.clone(), b?.columns().to_vec())?)),
        ),
    )
}

/// Whether an optimized UPDATE or DELETE still scans its target table (it does not
/// when its WHERE clause was proven false).
fn reads_target(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Dml(d) = plan else {
        return true;
    };
    d.input
        .as_ref()
        .exists(|n| {
            Ok(matches!(n, LogicalPlan::TableScan(s)
                if s.table_name.table() == d.table_name.table()))
        })
        .unwrap_or(true)
}

/// Whether a plan produces rows for the client.
fn returns_rows(p: &LogicalPlan) -> bool {
    !matches!(
        p,
        LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) | LogicalPlan::Dml(_)
    )
}

/// A query statement planned by [`SqlSession::plan_query`].
struct PlannedQuery {
    /// The state to run it in (its statement context set).
    state: SessionState,
    plan: LogicalPlan,
    /// The snapshot it reads at, when fixed before it runs.
    fixed: Option<u64>,
    mode: InsertMode,
}

fn insert_mode_of(m: parser::InsertMode) -> InsertMode {
    match m {
        parser::InsertMode::Insert => InsertMode::Insert,
        parser::InsertMode::Upsert => InsertMode::Upsert,
        parser::InsertMode::InsertIgnore => InsertMode::Ignore,
    }
}

/// The text of a literal `AS OF` expression.
fn literal_text(e: &ast::Expr) -> Option<String> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => {
                Some(s.clone())
            }
            ast::Value::Number(n, _) => Some(n.clone()),
            _ => None,
        },
        ast::Expr::TypedString(ts) => match &ts.value.value {
            ast::Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

async fn collect_stream(stream: SendableRecordBatchStream) -> Result<Vec<RecordBatch>> {
    use futures::TryStreamExt;
    Ok(stream.try_collect().await?)
}
