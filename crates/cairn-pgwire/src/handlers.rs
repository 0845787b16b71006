//! The per-connection pgwire handlers: simple and extended query protocol over one
//! [`SqlSession`].
//!
//! A query string is split into statements ([`super::sqltext`]); session statements are
//! answered by [`super::local`], everything else runs on the session one statement at a
//! time. Catalog queries (they name `pg_…` relations or functions,
//! `information_schema` or `reg…` types) first run as rewritten by
//! `datafusion-pg-catalog`'s [`PostgresCompatibilityParser`], falling back to the text
//! as sent; any other read-only statement the engine rejects is tried once more in
//! rewritten form. That is how psql's `\d`, pgJDBC's `DatabaseMetaData` and similar
//! queries (with `OPERATOR(pg_catalog.~)`, `::regclass`, `COLLATE`, `= ANY(array)`, ...)
//! work without the engine's parser knowing those forms. Writes are never rewritten.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use arrow::array::StringArray;
use arrow::datatypes::{DataType as ArrowType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use datafusion::common::ScalarValue;
use datafusion::config::ExtensionOptions;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use futures::{Sink, SinkExt, TryStreamExt};
use parking_lot::Mutex;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, DEFAULT_NAME, PgWireConnectionState,
    PgWireServerHandlers, RandomPidSecretKeyGenerator, Type,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Describe, Execute, TARGET_TYPE_BYTE_STATEMENT,
};
use tokio::sync::watch;

use super::PgOptions;
use super::coalesce::Coalesce;
use super::colnames::{pg_column_names, renamed};
use super::encode::{Stop, fields, pg_error, query_response, timed_out, wire_schema};
use super::local::{Local, Vars, classify, show_column};
use super::params::decode_params;
use super::sqltext::{Tok, split_statements, tokens};
use super::txn::{TxBlock, wrote_nothing};
use cairn_sql::error::SqlError;
use cairn_sql::options::CairnOptions;
use cairn_sql::session::{Prepared, QueryResult, SqlEngine, SqlSession};
use cairn_sql::txn::{Isolation, TxnModes};

/// The largest row limit an `Execute` is served with; above it, the whole result
/// (see `on_execute`).
const MAX_ROWS_LIMIT: i32 = 1 << 16;

/// A connection's process id and secret key, as sent in a cancel request.
pub(crate) type CancelKey = (i32, Bytes);

/// What all connections of one server share.
pub(crate) struct Shared {
    /// The engine sessions are made from.
    pub(crate) engine: SqlEngine,
    /// Authentication settings.
    pub(crate) opts: PgOptions,
    /// pgwire's registry of connections, for cancel requests during `do_query`.
    pub(crate) manager: Arc<ConnectionManager>,
    /// Cancel signals of live connections by (pid, secret key), for cancel requests
    /// while rows stream.
    pub(crate) cancels: Mutex<HashMap<CancelKey, Arc<watch::Sender<u64>>>>,
    /// Process ids and secret keys for new connections.
    pub(crate) pids: RandomPidSecretKeyGenerator,
    /// Rewrites PostgreSQL catalog queries into forms DataFusion plans.
    pub(crate) compat: PostgresCompatibilityParser,
    /// Recent failed logins per user.
    pub(crate) login_failures: cairn_proto::auth::LoginFailures,
}

impl Shared {
    pub(crate) fn new(engine: SqlEngine, opts: PgOptions) -> Self {
        Shared {
            engine,
            opts,
            manager: Arc::new(ConnectionManager::new()),
            cancels: Mutex::new(HashMap::new()),
            pids: RandomPidSecretKeyGenerator::default(),
            compat: PostgresCompatibilityParser::new(),
            login_failures: Default::default(),
        }
    }
}

/// One connection's state.
pub(crate) struct Conn {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: SqlSession,
    pub(crate) vars: Arc<Vars>,
    /// Bumped by a cancel request for this connection.
    pub(crate) cancel: Arc<watch::Sender<u64>>,
    /// Where the connection's SCRAM exchange stands.
    pub(crate) scram: Mutex<super::auth::ScramStage>,
    /// The `COPY … FROM STDIN` waiting for the client's data, if one is under way.
    pub(crate) copy_in: Mutex<Option<cairn_sql::copy::CopyIn>>,
    /// The transaction block and its savepoints.
    tx: Arc<Mutex<TxBlock>>,
}

impl Conn {
    fn new(shared: Arc<Shared>) -> Self {
        let session = shared.engine.session();
        let version = format!(
            "PostgreSQL {} on {}-{}, Cairn {} (Apache DataFusion)",
            super::SERVER_VERSION,
            std::env::consts::ARCH,
            std::env::consts::OS,
            env!("CARGO_PKG_VERSION"),
        );
        // Tools parse `SELECT version()` expecting PostgreSQL's format.
        session.context().register_udf(create_udf(
            "version",
            vec![],
            ArrowType::Utf8,
            Volatility::Immutable,
            Arc::new(move |_| {
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                    version.clone(),
                ))))
            }),
        ));
        let vars = Arc::new(Vars::default());
        session
            .context()
            .register_udf(super::local::CurrentSetting::udf(vars.clone()));
        Conn {
            shared,
            session,
            vars,
            cancel: Arc::new(watch::channel(0).0),
            scram: Mutex::new(Default::default()),
            copy_in: Mutex::new(None),
            tx: Arc::new(Mutex::new(TxBlock::default())),
        }
    }

    /// The compatibility parser's rewrite of a read-only statement, if it changes it.
    fn rewrite(&self, sql: &str) -> Option<String> {
        rewrite_sql(&self.shared.compat, sql)
    }

    /// Runs (or prepares) one statement with `run`. A catalog query runs in its
    /// rewritten form first (falling back to the original); any other read-only
    /// statement the engine rejects is tried once more in rewritten form. The
    /// original's error is reported when both fail.
    async fn with_rewrite<T, F, Fut>(&self, sql: &str, run: F) -> Result<T, SqlError>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<T, SqlError>>,
    {
        if mentions_catalog(sql)
            && let Some(rewritten) = self.rewrite(sql)
        {
            match run(rewritten.clone()).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    tracing::debug!(%sql, %rewritten, error = %e, "the rewritten catalog query failed");
                }
            }
            return run(sql.to_string()).await;
        }
        match run(sql.to_string()).await {
            Ok(r) => Ok(r),
            Err(e) => {
                let code = e.sqlstate();
                if ["08", "23", "40", "53", "57"]
                    .iter()
                    .any(|c| code.starts_with(c))
                {
                    return Err(e);
                }
                let Some(rewritten) = self.rewrite(sql) else {
                    return Err(e);
                };
                tracing::debug!(%sql, %rewritten, error = %e, "retrying a rewritten query");
                run(rewritten).await.map_err(|e2| {
                    tracing::debug!(error = %e2, "the rewritten query failed too");
                    e
                })
            }
        }
    }

    /// Runs one statement on the session (see [`Conn::with_rewrite`]).
    async fn execute(&self, sql: &str) -> Result<Vec<QueryResult>, SqlError> {
        self.with_rewrite(sql, |s| async move { self.session.execute(&s).await })
            .await
    }

    /// Prepares one statement (see [`Conn::with_rewrite`]).
    async fn prepare(&self, sql: &str) -> Result<Prepared, SqlError> {
        self.with_rewrite(sql, |s| async move { self.session.prepare(&s).await })
            .await
    }

    /// Whether a statement is answered here, given the variables known now.
    fn local(&self, sql: &str) -> Option<Local> {
        match classify(sql)? {
            Local::Show(name) if self.show_value(&name).is_none() => None,
            other => Some(other),
        }
    }

    /// The value `SHOW name` reports: a PostgreSQL variable, or a setting of the
    /// session (`cairn.…` or `datafusion.…`).
    fn show_value(&self, name: &str) -> Option<String> {
        match (name, self.session.transaction()) {
            ("transaction_isolation", Some(t)) => return Some(t.isolation().name().into()),
            ("transaction_read_only", Some(t)) => {
                return Some(if t.read_only() { "on" } else { "off" }.into());
            }
            ("transaction_isolation", None) => {
                return self.vars.get("default_transaction_isolation");
            }
            ("transaction_read_only", None) => {
                return self.vars.get("default_transaction_read_only");
            }
            _ => {}
        }
        if let Some(v) = self.vars.get(name) {
            return Some(v);
        }
        let state = self.session.context().state();
        let options = state.config_options();
        if let Some(key) = name.strip_prefix("cairn.") {
            let cairn = options.extensions.get::<CairnOptions>()?;
            return cairn
                .entries()
                .into_iter()
                .find(|e| e.key == key || e.key == name)
                .map(|e| e.value.unwrap_or_default());
        }
        options
            .entries()
            .into_iter()
            .find(|e| e.key == name)
            .map(|e| e.value.unwrap_or_default())
    }

    /// Runs a statement answered by the front end (refused with 25P02 in a failed
    /// transaction block unless it ends the block).
    async fn run_local(&self, local: &Local, format: &Format) -> PgWireResult<Response> {
        let checked = self.tx.lock().check(local.ends_block());
        let result = match checked {
            Ok(()) => self.answer_local(local, format).await,
            Err(e) => Err(e),
        };
        result
            .inspect_err(|_| self.tx.lock().failed(false))
            .map_err(|e| pg_error(&e))
    }

    /// The session's `default_transaction_…` settings.
    fn default_modes(&self) -> TxnModes {
        TxnModes {
            isolation: self
                .vars
                .get("default_transaction_isolation")
                .as_deref()
                .and_then(Isolation::parse),
            read_only: self
                .vars
                .get("default_transaction_read_only")
                .map(|v| matches!(v.to_ascii_lowercase().as_str(), "on" | "true" | "1")),
        }
    }

    /// `COMMIT` (`commit`) or `ROLLBACK` of the block: ends the transaction and
    /// answers the tag PostgreSQL does (`ROLLBACK` for a `COMMIT` of a failed block).
    async fn end_block(&self, commit: bool) -> Result<Response, SqlError> {
        let tag = self.tx.lock().end(commit);
        if tag == "COMMIT" {
            self.session.commit().await?;
        } else {
            self.session.rollback().await?;
        }
        Ok(Response::TransactionEnd(Tag::new(tag)))
    }

    /// The answer to a statement the front end runs itself.
    async fn answer_local(&self, local: &Local, format: &Format) -> Result<Response, SqlError> {
        let user_error = |m: String| SqlError::other("22023", m);
        fn words(w: &[String]) -> Vec<&str> {
            w.iter().map(String::as_str).collect()
        }
        Ok(match local {
            Local::Begin(tag, modes) => {
                let modes = TxnModes::parse(&words(modes))?;
                self.session.begin(modes, self.default_modes());
                self.tx.lock().begin();
                Response::TransactionStart(Tag::new(tag))
            }
            Local::Commit => self.end_block(true).await?,
            Local::Rollback => self.end_block(false).await?,
            Local::SetTransaction(modes) => {
                let modes = TxnModes::parse(&words(modes))?;
                if !self.session.set_transaction(modes)? {
                    tracing::debug!("SET TRANSACTION outside a transaction block has no effect");
                }
                Response::Execution(Tag::new("SET"))
            }
            Local::SetCharacteristics(modes) => {
                let modes = TxnModes::parse(&words(modes))?;
                if let Some(i) = modes.isolation {
                    self.vars
                        .set("default_transaction_isolation", Some(i.name().into()))
                        .map_err(user_error)?;
                }
                if let Some(r) = modes.read_only {
                    let v = if r { "on" } else { "off" };
                    self.vars
                        .set("default_transaction_read_only", Some(v.into()))
                        .map_err(user_error)?;
                }
                Response::Execution(Tag::new("SET"))
            }
            Local::Savepoint(name) => {
                self.tx.lock().savepoint(name)?;
                Response::Execution(Tag::new("SAVEPOINT"))
            }
            Local::Release(name) => {
                self.tx.lock().release(name)?;
                Response::Execution(Tag::new("RELEASE"))
            }
            Local::RollbackTo(name) => {
                self.tx.lock().rollback_to(name)?;
                Response::Execution(Tag::new("ROLLBACK"))
            }
            Local::Set { name, value } if name == "transaction_isolation" => {
                let isolation = value.as_deref().and_then(Isolation::parse).ok_or_else(|| {
                    user_error(format!(
                        "invalid value for transaction_isolation: {value:?}"
                    ))
                })?;
                self.session.set_transaction(TxnModes {
                    isolation: Some(isolation),
                    read_only: None,
                })?;
                Response::Execution(Tag::new("SET"))
            }
            Local::Set { name, value } => {
                self.vars.set(name, value.clone()).map_err(user_error)?;
                Response::Execution(Tag::new("SET"))
            }
            Local::Reset(None) => {
                self.vars.reset_all();
                Response::Execution(Tag::new("RESET"))
            }
            Local::Reset(Some(name)) => {
                self.vars.set(name, None).map_err(user_error)?;
                Response::Execution(Tag::new("RESET"))
            }
            Local::Show(name) => {
                let value = self.show_value(name).unwrap_or_default();
                let schema = show_schema(name);
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(StringArray::from(vec![value]))],
                )?;
                let stream = MemoryStream::try_new(vec![batch], schema.clone(), None)?;
                let mut resp = query_response(&schema, Box::pin(stream), format, Stop::default())
                    .map_err(|e| SqlError::other("XX000", e.to_string()))?;
                resp.set_command_tag("SHOW");
                Response::Query(resp)
            }
            Local::Noop(tag) => Response::Execution(Tag::new(tag)),
        })
    }

    /// Sends the notices and warnings the session queued.
    async fn send_notices<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        for n in self.session.take_notices() {
            let info = ErrorInfo::new(n.severity.into(), n.code.into(), n.message);
            client
                .feed(PgWireBackendMessage::NoticeResponse(info.into()))
                .await?;
        }
        Ok(())
    }

    /// The wire response for a statement's result. `described` is the schema the
    /// client was told (extended protocol); rows are sent with its types.
    fn response(
        &self,
        result: QueryResult,
        format: &Format,
        stop: Stop,
        described: Option<&Schema>,
    ) -> PgWireResult<Response> {
        Ok(match result {
            QueryResult::Rows { schema, stream } => {
                // An error while rows stream fails the transaction block too.
                let tx = self.tx.clone();
                let stream = Box::pin(RecordBatchStreamAdapter::new(
                    schema.clone(),
                    stream.inspect_err(move |_| tx.lock().failed(false)),
                ));
                let schema = match described {
                    Some(d) if d.fields().len() == schema.fields().len() => d,
                    _ => schema.as_ref(),
                };
                Response::Query(query_response(schema, stream, format, stop)?)
            }
            QueryResult::Count { tag, rows } => {
                let t = Tag::new(tag).with_rows(usize::try_from(rows).unwrap_or(usize::MAX));
                Response::Execution(if tag == "INSERT" { t.with_oid(0) } else { t })
            }
            QueryResult::Done { tag } if tag.is_empty() => Response::EmptyQuery,
            QueryResult::Done { tag } => match tag.as_str() {
                "BEGIN" => Response::TransactionStart(Tag::new(&tag)),
                "COMMIT" | "ROLLBACK" => Response::TransactionEnd(Tag::new(&tag)),
                _ => Response::Execution(Tag::new(&tag)),
            },
            QueryResult::CopyIn(load) => {
                let response = super::copy::copy_in_response(&load);
                *self.copy_in.lock() = Some(load);
                Response::CopyIn(response)
            }
            QueryResult::CopyOut {
                schema,
                stream,
                options,
            } => Response::CopyOut(super::copy::copy_out_response(
                &schema, stream, options, stop,
            )?),
        })
    }

    /// What stops a statement starting now: a cancel request (`cancel` changes) or the
    /// connection's `statement_timeout`.
    fn stop(&self, cancel: &watch::Receiver<u64>) -> Stop {
        Stop {
            cancel: Some(cancel.clone()),
            deadline: self
                .vars
                .statement_timeout()
                .map(|t| tokio::time::Instant::now() + t),
        }
    }

    /// Runs one statement of a simple query. Rows of statements that are not the
    /// last are read at once, so that statements run in order.
    async fn run_simple(
        &self,
        sql: &str,
        last: bool,
        cancel: &watch::Receiver<u64>,
    ) -> PgWireResult<Vec<Response>> {
        if let Some(local) = self.local(sql) {
            return Ok(vec![self.run_local(&local, &Format::UnifiedText).await?]);
        }
        self.tx.lock().check(false).map_err(|e| pg_error(&e))?;
        let stop = self.stop(cancel);
        let read_only = read_only(sql);
        let results = match with_deadline(stop.deadline, self.execute(sql)).await {
            Ok(Ok(results)) => results,
            Ok(Err(e)) => return Err(self.failed(read_only, e)),
            Err(e) => {
                self.tx.lock().failed(!read_only);
                return Err(e);
            }
        };
        let n = results.len();
        let mut out = Vec::with_capacity(n);
        // PostgreSQL's column names, figured only when there are rows to describe.
        let names = results
            .iter()
            .any(|r| matches!(r, QueryResult::Rows { .. }))
            .then(|| pg_column_names(sql))
            .flatten();
        for (i, r) in results.into_iter().enumerate() {
            if wrote(&r) {
                self.tx.lock().wrote();
            }
            let r = if last && i + 1 == n {
                r
            } else if matches!(r, QueryResult::CopyIn(_)) {
                return Err(self.failed(
                    true,
                    SqlError::other(
                        "0A000",
                        "COPY ... FROM STDIN must be the last statement of a query string",
                    ),
                ));
            } else {
                match with_deadline(stop.deadline, materialize(r)).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => return Err(self.failed(true, e)),
                    Err(e) => {
                        self.tx.lock().failed(false);
                        return Err(e);
                    }
                }
            };
            let described = match (&r, &names) {
                (QueryResult::Rows { schema, .. }, Some(names)) => renamed(schema, names),
                _ => None,
            };
            out.push(self.response(r, &Format::UnifiedText, stop.clone(), described.as_deref())?);
        }
        if out.is_empty() {
            out.push(Response::EmptyQuery);
        }
        Ok(out)
    }

    /// Notes a failed engine statement in the transaction block and returns its
    /// wire error. `read_only`: the statement only reads.
    pub(crate) fn failed(&self, read_only: bool, e: SqlError) -> PgWireError {
        self.tx.lock().failed(!wrote_nothing(read_only, &e));
        pg_error(&e)
    }
}

/// Whether a statement's result says it changed something (rows, tables, users).
fn wrote(r: &QueryResult) -> bool {
    match r {
        QueryResult::Count { .. } | QueryResult::CopyIn(_) => true,
        QueryResult::Done { tag } => !matches!(tag.as_str(), "" | "SET" | "RESET" | "SHOW"),
        QueryResult::Rows { .. } | QueryResult::CopyOut { .. } => false,
    }
}

/// The compatibility parser's rewrite of a read-only statement, if it changes it.
/// Runs `work` until `deadline` (the statement's `statement_timeout`); past it, the
/// work is dropped and the statement fails with SQLSTATE 57014.
async fn with_deadline<T>(
    deadline: Option<tokio::time::Instant>,
    work: impl std::future::Future<Output = T>,
) -> PgWireResult<T> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, work)
            .await
            .map_err(|_| timed_out()),
        None => Ok(work.await),
    }
}

fn rewrite_sql(compat: &PostgresCompatibilityParser, sql: &str) -> Option<String> {
    if !read_only(sql) {
        return None;
    }
    let bare = cairn_sql::parser::functions::regproc_names(sql);
    let statements = compat.parse(bare.as_deref().unwrap_or(sql)).ok()?;
    let [statement] = statements.as_slice() else {
        return None;
    };
    let rewritten = statement.to_string();
    let plain = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .ok()
        .and_then(|s| s.first().map(|s| s.to_string()));
    (plain.as_deref() != Some(rewritten.as_str())).then_some(rewritten)
}

/// Whether a statement only reads (a query): only those are ever rewritten, so a
/// retry never repeats a write.
fn read_only(sql: &str) -> bool {
    matches!(
        tokens(sql, 1).first(),
        Some(Tok::Word(w)) if matches!(w.as_str(), "select" | "with" | "show" | "values" | "table")
    )
}

/// Whether a statement reads PostgreSQL's catalog (`pg_…` tables and functions,
/// `information_schema`, `::regclass` and friends): drivers' and psql's metadata
/// queries, which the compatibility parser is made for.
fn mentions_catalog(sql: &str) -> bool {
    tokens(sql, usize::MAX).iter().any(|t| match t {
        Tok::Word(w) => {
            w.starts_with("pg_")
                || w == "information_schema"
                || matches!(
                    w.as_str(),
                    "regclass" | "regtype" | "regproc" | "regnamespace"
                )
        }
        _ => false,
    })
}

/// Reads all rows of a result into memory.
async fn materialize(r: QueryResult) -> Result<QueryResult, SqlError> {
    match r {
        QueryResult::Rows { schema, stream } => {
            let batches: Vec<RecordBatch> = stream.try_collect().await?;
            Ok(QueryResult::Rows {
                stream: Box::pin(MemoryStream::try_new(batches, schema.clone(), None)?),
                schema,
            })
        }
        other => Ok(other),
    }
}

/// The one text column of `SHOW name`.
fn show_schema(name: &str) -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new(
        show_column(name),
        ArrowType::Utf8,
        true,
    )]))
}

/// A statement of the extended query protocol.
#[derive(Clone, Debug)]
pub(crate) enum PgStatement {
    /// Prepared by the engine.
    Engine {
        /// The engine's prepared statement.
        prepared: Arc<Prepared>,
        /// Whether it returns rows (see [`Prepared::returns_rows`]).
        rows: bool,
        /// The result columns as the client is told them: the statement's, with
        /// PostgreSQL's names ([`super::colnames`]).
        columns: SchemaRef,
    },
    /// Answered by the front end.
    Local(Local),
}

/// The extended protocol's parser: prepares statements on the connection's session.
pub(crate) struct CairnParser {
    conn: Arc<Conn>,
}

#[async_trait]
impl QueryParser for CairnParser {
    type Statement = PgStatement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<PgStatement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let statements = split_statements(sql);
        let sql = match statements.as_slice() {
            [] => return Ok(None),
            [one] => *one,
            _ => {
                return Err(pg_error(&SqlError::other(
                    "42601",
                    "cannot insert multiple commands into a prepared statement",
                )));
            }
        };
        if let Some(local) = self.conn.local(sql) {
            return Ok(Some(PgStatement::Local(local)));
        }
        self.conn.tx.lock().check(false).map_err(|e| pg_error(&e))?;
        let prepared = self
            .conn
            .prepare(sql)
            .await
            .map_err(|e| self.conn.failed(true, e))?;
        let columns = pg_column_names(sql)
            .and_then(|names| renamed(&prepared.schema, &names))
            .unwrap_or_else(|| prepared.schema.clone());
        Ok(Some(PgStatement::Engine {
            rows: prepared.returns_rows(),
            prepared: Arc::new(prepared),
            columns,
        }))
    }

    fn get_parameter_types(&self, stmt: &PgStatement) -> PgWireResult<Vec<Type>> {
        Ok(match stmt {
            PgStatement::Local(_) => vec![],
            PgStatement::Engine { prepared, .. } => prepared
                .param_types
                .iter()
                .map(|t| {
                    t.as_ref()
                        .and_then(|t| arrow_pg::datatypes::into_pg_type(t).ok())
                        .filter(|t| *t != Type::UNKNOWN)
                        .unwrap_or(Type::TEXT)
                })
                .collect(),
        })
    }

    fn get_result_schema(
        &self,
        stmt: &PgStatement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = column_format.unwrap_or(&Format::UnifiedText);
        match stmt {
            PgStatement::Local(Local::Show(name)) => fields(&show_schema(name), format),
            PgStatement::Local(_) | PgStatement::Engine { rows: false, .. } => Ok(vec![]),
            PgStatement::Engine { columns, .. } => fields(&wire_schema(columns), format),
        }
    }
}

/// The handlers of one connection.
pub(crate) struct ConnHandler {
    pub(crate) conn: Arc<Conn>,
    parser: Arc<CairnParser>,
    /// Refuse the connection at startup: too many clients.
    pub(crate) refuse: bool,
}

#[async_trait]
impl SimpleQueryHandler for ConnHandler {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = split_statements(query);
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let cancel = self.conn.cancel.subscribe();
        let n = statements.len();
        let mut out = Vec::with_capacity(n);
        for (i, sql) in statements.iter().enumerate() {
            let r = self.conn.run_simple(sql, i + 1 == n, &cancel).await;
            self.conn.send_notices(client).await?;
            match r {
                Ok(r) => out.extend(r),
                Err(e) => {
                    // Like PostgreSQL: the error ends the query string.
                    out.push(Response::Error(Box::new(ErrorInfo::from(e))));
                    break;
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl ExtendedQueryHandler for ConnHandler {
    type Statement = PgStatement;
    type QueryParser = CairnParser;

    fn query_parser(&self) -> Arc<CairnParser> {
        self.parser.clone()
    }

    /// Like pgwire's, except that a statement with parameters but no result columns
    /// is described with `NoData` after its `ParameterDescription` (as PostgreSQL
    /// does), not with an empty `RowDescription`: pgJDBC's `executeUpdate` takes the
    /// latter for a result set and fails. The answer waits for the client's Sync or
    /// Flush, as PostgreSQL's does (see [`Coalesce`]).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PgStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == TARGET_TYPE_BYTE_STATEMENT {
            let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
            if let Some(Entry::Value(stmt)) = client.portal_store().get_statement(name) {
                let described = self.do_describe_statement(client, &stmt).await?;
                let types = described.parameters.iter().map(|t| t.oid()).collect();
                client
                    .feed(PgWireBackendMessage::ParameterDescription(
                        ParameterDescription::new(types),
                    ))
                    .await?;
                let last = if described.fields.is_empty() {
                    PgWireBackendMessage::NoData(NoData::new())
                } else {
                    PgWireBackendMessage::RowDescription(RowDescription::new(
                        described.fields.iter().map(Into::into).collect(),
                    ))
                };
                client.feed(last).await?;
                return Ok(());
            }
        }
        self._on_describe(&mut Coalesce(client), message).await
    }

    /// pgwire's `Execute`, with its response left in the connection's buffer for the
    /// client's Sync or Flush to write (see [`Coalesce`]), except the start of a COPY
    /// FROM STDIN, which the client waits for.
    ///
    /// pgwire reserves room for the client's row limit before fetching, so a limit
    /// from the network would size an allocation (a limit of 2,113,929,216 rows aborted the
    /// server): a limit above [`MAX_ROWS_LIMIT`] is served as no limit, as PostgreSQL
    /// serves a negative one.
    async fn on_execute<C>(&self, client: &mut C, mut message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PgStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !(0..=MAX_ROWS_LIMIT).contains(&message.max_rows) {
            message.max_rows = 0;
        }
        self._on_execute(&mut Coalesce(client), message).await?;
        if matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            // A COPY FROM STDIN client sends its data only once it has read the
            // CopyInResponse, and its Sync only after CopyDone: write it now.
            client.flush().await?;
        }
        Ok(())
    }

    /// Binds parameters to a prepared statement as pgwire's default does, but queues
    /// `BindComplete` instead of flushing it: the protocol sends nothing before the
    /// client's Sync or Flush needs it, and each flush is a system call and a TCP
    /// segment of its own on the keyed fast path's hot loop.
    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PgStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
        match client.portal_store().get_statement(name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            // An empty query string: an empty portal, which takes no parameters.
            Some(Entry::Empty) if message.parameters.is_empty() => {
                let portal = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
                client.portal_store().put_empty_portal(portal);
            }
            Some(Entry::Empty) => {
                return Err(pg_error(&SqlError::other(
                    "08P01",
                    format!(
                        "bind message supplies {} parameters, but prepared statement \
                         \"{name}\" requires 0",
                        message.parameters.len()
                    ),
                )));
            }
            None => return Err(PgWireError::StatementNotFound(name.to_owned())),
        }
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<PgStatement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PgStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cancel = self.conn.cancel.subscribe();
        let stop = self.conn.stop(&cancel);
        match &portal.statement.statement {
            PgStatement::Local(local) => {
                self.conn
                    .run_local(local, &portal.result_column_format)
                    .await
            }
            PgStatement::Engine {
                prepared,
                rows,
                columns,
            } => {
                self.conn.tx.lock().check(false).map_err(|e| pg_error(&e))?;
                let params = decode_params(
                    &portal.parameters,
                    &portal.parameter_format,
                    &portal.statement.parameter_types,
                    &prepared.param_types,
                )
                .map_err(|e| self.conn.failed(true, e))?;
                let result = match with_deadline(
                    stop.deadline,
                    self.conn.session.execute_prepared(prepared, params),
                )
                .await
                {
                    Ok(Ok(result)) => result,
                    Ok(Err(e)) => return Err(self.conn.failed(*rows, e)),
                    Err(e) => {
                        self.conn.tx.lock().failed(!*rows);
                        return Err(e);
                    }
                };
                if wrote(&result) {
                    self.conn.tx.lock().wrote();
                }
                self.conn.send_notices(client).await?;
                let described = rows.then_some(columns.as_ref());
                self.conn
                    .response(result, &portal.result_column_format, stop, described)
            }
        }
    }
}

/// Answers cancel requests (which arrive on a connection of their own).
pub(crate) struct CairnCancel {
    shared: Arc<Shared>,
}

#[async_trait]
impl CancelHandler for CairnCancel {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes());
        let signal = self.shared.cancels.lock().get(&key).cloned();
        if let Some(signal) = signal {
            tracing::debug!(pid = request.pid, "cancel request");
            // Stops a statement still in `do_query` (pgwire answers 57014) ...
            self.shared
                .manager
                .cancel(request.pid, &request.secret_key)
                .await;
            // ... and one whose rows are streaming.
            signal.send_modify(|v| *v += 1);
        }
    }
}

/// Everything pgwire needs for one connection.
pub(crate) struct CairnHandlers {
    handler: Arc<ConnHandler>,
    cancel: Arc<CairnCancel>,
}

impl CairnHandlers {
    /// Handlers with a fresh session for a new connection. `refuse` set: the server
    /// has `max_connections` clients already, and the connection is refused at
    /// startup with SQLSTATE 53300 (cancel requests are still answered).
    pub(crate) fn new(shared: Arc<Shared>, refuse: bool) -> Self {
        let conn = Arc::new(Conn::new(shared.clone()));
        CairnHandlers {
            handler: Arc::new(ConnHandler {
                parser: Arc::new(CairnParser { conn: conn.clone() }),
                conn,
                refuse,
            }),
            cancel: Arc::new(CairnCancel { shared }),
        }
    }
}

impl PgWireServerHandlers for CairnHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.handler.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.handler.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.handler.clone()
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.cancel.clone()
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        self.handler.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_queries_are_rewritten() {
        assert!(read_only("SELECT 1"));
        assert!(read_only("  with x as (select 1) select * from x"));
        assert!(!read_only(
            "INSERT INTO t SELECT * FROM pg_catalog.pg_class"
        ));
        assert!(!read_only("DELETE FROM t"));
        let compat = PostgresCompatibilityParser::new();
        assert_eq!(
            rewrite_sql(&compat, "DELETE FROM t WHERE x = 'a'::regclass"),
            None
        );
    }

    #[test]
    fn catalog_queries_are_recognised() {
        assert!(mentions_catalog("SELECT * FROM pg_catalog.pg_class"));
        assert!(mentions_catalog("select 'pg_class'::regclass"));
        assert!(mentions_catalog("SELECT * FROM information_schema.tables"));
        assert!(!mentions_catalog("SELECT 'pg_class' FROM t"));
        assert!(!mentions_catalog("SELECT a FROM t"));
    }

    #[test]
    fn psql_and_jdbc_catalog_queries_are_rewritten() {
        let compat = PostgresCompatibilityParser::new();
        // psql 15's first query of `\d t`.
        let psql = "SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c \
                    LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                    WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default \
                    AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 2, 3";
        let rewritten = rewrite_sql(&compat, psql).expect("rewritten");
        assert!(!rewritten.contains("OPERATOR"), "{rewritten}");
        assert!(!rewritten.contains("COLLATE"), "{rewritten}");
        // From pgJDBC's getTables.
        let jdbc = "SELECT c.relname FROM pg_catalog.pg_class c \
                    LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid \
                    AND d.objsubid = 0 AND d.classoid = 'pg_class'::regclass)";
        let rewritten = rewrite_sql(&compat, jdbc).expect("rewritten");
        assert!(!rewritten.contains("regclass"), "{rewritten}");
        // Nothing to rewrite.
        assert_eq!(rewrite_sql(&compat, "SELECT a FROM t"), None);
    }
}
