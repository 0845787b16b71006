//! # cairn-flightsql — Cairn's Arrow Flight SQL front end
//!
//! [`serve`] answers Arrow Flight SQL (ADBC, JDBC, the Flight SQL CLI) on a TCP
//! listener with [`CairnFlightSql`], an implementation of arrow-flight's
//! [`FlightSqlService`] over a [`SqlEngine`].
//!
//! ## Sessions
//!
//! Flight SQL calls are independent requests: there is no connection state to hang a
//! session on. Every statement therefore runs in a fresh
//! [`SqlSession`](cairn_sql::SqlSession), and every prepared statement keeps the session
//! it was prepared in until it is closed. A `SET` only lasts for its own statement
//! (it is accepted and does nothing for later calls); `cairn.read_timestamp` and the
//! other settings cannot be carried from call to call. A statement outside a
//! transaction commits on its own. `BeginTransaction` opens a session with a Cairn
//! transaction and keeps it under the returned id; the statements that name the id
//! run in it, and `EndTransaction` commits or rolls it back
//! (`FlightSqlServerTransaction` is `TRANSACTION`).
//! Concurrent calls never share state, so one client's `SET` cannot leak into
//! another's statements.
//!
//! ## Statements
//!
//! - `GetFlightInfo(CommandStatementQuery)` runs the SQL at once. A query's rows are
//!   not read yet: its stream is kept under a one-shot ticket that `DoGet` drains
//!   (results nobody fetches are dropped after [`RESULT_TTL`]). Statements without rows
//!   have already done their work when `GetFlightInfo` returns; their ticket yields one
//!   row with the affected count (`count: UInt64`, the schema of
//!   [`cairn_sql::write::count_schema`]) for INSERT, UPDATE, DELETE and COPY, and no
//!   columns at all for DDL and `SET`. ADBC's `cursor.execute("INSERT ...")` takes this
//!   path.
//! - `DoPut(CommandStatementUpdate)` runs the SQL and returns the sum of the affected
//!   counts (-1 when no statement counts rows, like DDL).
//! - Prepared statements: `CreatePreparedStatement` parses and plans the SQL (`?`
//!   placeholders become `$1`, `$2`, ...) and returns the result and parameter
//!   schemas; `DoPut(CommandPreparedStatementQuery)` binds a parameter batch (one row
//!   per execution; values are cast to the planned parameter types);
//!   `GetFlightInfo`/`DoGet` on the prepared statement run it once per bound row (the
//!   rows of all runs are returned one after the other, counts are added up);
//!   `DoPut(CommandPreparedStatementUpdate)` runs it for each row of the batch it
//!   carries (or of the bound one); `ClosePreparedStatement` forgets it. Prepared
//!   statements unused for [`PREPARED_IDLE_TTL`] are forgotten too.
//!
//! Results are streamed with [`FlightDataEncoderBuilder`] as DataFusion produces
//! them; nothing collects a whole result.
//!
//! ## Metadata
//!
//! One catalog (`cairn`) with one schema (`public`) holding all tables of the
//! cluster, of table type `TABLE`; `GetTables` with `include_schema` opens each
//! matching table for its Arrow schema. `GetSqlInfo` names the server `Cairn` with
//! this crate's version.
//!
//! ## Errors
//!
//! Errors are [`tonic::Status`]es whose message starts with the PostgreSQL SQLSTATE
//! (`42P01: table 'x' does not exist`) and whose code fits it (see [`grpc_code`]).

mod auth;
mod limit;
mod metadata;
mod params;
mod state;
mod status;

use std::future::Future;
use std::sync::Arc;

use arrow::array::UInt64Array;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::metadata::SqlInfoData;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult,
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, ActionEndTransactionRequest, CommandGetCatalogs,
    CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandPreparedStatementQuery, CommandPreparedStatementUpdate, CommandStatementQuery,
    CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket,
    flight_service_server::FlightService,
};
use bytes::Bytes;
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt, stream};
use parking_lot::Mutex;
use prost::Message;
use tonic::{Request, Response, Status};

pub use metadata::TABLE_TYPE;
pub use params::number_placeholders;
pub use state::{MAX_PREPARED, MAX_RESULTS, PREPARED_IDLE_TTL, RESULT_TTL};
pub use status::{grpc_code, sql_error_status};

use cairn_sql::error::SqlError;
use cairn_sql::session::{CATALOG, QueryResult, SCHEMA, SqlEngine};
use cairn_sql::write::count_schema;
use state::{BatchStream, PendingResult, PreparedEntry, Registry};
use status::status_with_state;

/// Largest gRPC message the service sends or accepts (64 MiB).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// The stream type of `DoGet` answers.
type DoGetStream = <CairnFlightSql as FlightService>::DoGetStream;

/// Settings of the Flight SQL front end.
#[derive(Clone, Debug)]
pub struct FlightOptions {
    /// The most client connections served at once (`--flight-max-connections`, 100);
    /// the calls of further connections fail with `RESOURCE_EXHAUSTED`.
    pub max_connections: usize,
    /// TLS with the node's certificate (clients need no certificate of their own).
    pub tls: Option<Arc<cairn_proto::TlsConfig>>,
    /// Every call needs a login (a user and password in the handshake, then its
    /// bearer token). Without it, calls that bring no login run with the engine's own
    /// rights.
    pub auth_required: bool,
}

impl Default for FlightOptions {
    fn default() -> Self {
        FlightOptions {
            max_connections: 100,
            tls: None,
            auth_required: false,
        }
    }
}

/// Serves Flight SQL for `engine` on `listener` until `shutdown` completes. Every
/// connection gets TCP_NODELAY; messages may be up to [`MAX_MESSAGE_BYTES`].
pub async fn serve(
    engine: SqlEngine,
    listener: tokio::net::TcpListener,
    opts: FlightOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let limit = opts.max_connections;
    let permits = Arc::new(tokio::sync::Semaphore::new(limit));
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        move |s| {
            s.map(|s| {
                let _ = s.set_nodelay(true);
                limit::CountedStream::new(s, &permits, limit)
            })
        },
    );
    let mut builder = tonic::transport::Server::builder();
    if let Some(t) = &opts.tls {
        builder = builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(
            tonic::transport::Identity::from_pem(&t.cert_pem, &t.key_pem),
        ))?;
    }
    builder
        .layer(tonic::service::InterceptorLayer::new(
            limit::refuse_over_limit,
        ))
        .add_service(
            CairnFlightSql::new(engine)
                .with_auth_required(opts.auth_required)
                .into_server(),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// Cairn's Flight SQL service: statements, prepared statements and metadata over a
/// [`SqlEngine`] (see the [module documentation](self)).
pub struct CairnFlightSql {
    engine: SqlEngine,
    registry: Registry,
    sql_info: SqlInfoData,
    logins: auth::FlightLogins,
    auth_required: bool,
}

impl std::fmt::Debug for CairnFlightSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CairnFlightSql").finish_non_exhaustive()
    }
}

impl CairnFlightSql {
    /// A service running statements on `engine`.
    pub fn new(engine: SqlEngine) -> Self {
        CairnFlightSql {
            engine,
            registry: Registry::new(),
            // Built from constants only; a unit test checks it builds.
            sql_info: metadata::sql_info().expect("the server's SqlInfo is well-formed"),
            logins: Default::default(),
            auth_required: false,
        }
    }

    /// The same service, requiring a login on every call (see
    /// [`FlightOptions::auth_required`]).
    pub fn with_auth_required(mut self, required: bool) -> Self {
        self.auth_required = required;
        self
    }

    /// The gRPC service, with message limits of [`MAX_MESSAGE_BYTES`].
    pub fn into_server(self) -> FlightServiceServer<Self> {
        FlightServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// The session a request runs in: that of transaction `txn` (begun by the same
    /// user), or a fresh one of the caller.
    async fn session_in<T>(
        &self,
        request: &Request<T>,
        txn: &Option<Bytes>,
    ) -> Result<Arc<cairn_sql::SqlSession>, Status> {
        let Some(id) = txn else {
            return Ok(Arc::new(self.session_for(request).await?));
        };
        let user = self.user_of(request).await?;
        self.registry
            .transaction(id)
            .filter(|s| s.user() == user)
            .ok_or_else(|| {
                status_with_state(
                    "25000",
                    "unknown transaction: it was ended, or unused for too long and rolled \
                     back; begin a new one",
                )
            })
    }

    /// Runs `sql` (one or more statements) in the session of the caller or of its
    /// transaction `txn`; the result of the last statement.
    async fn run_sql<T>(
        &self,
        request: &Request<T>,
        txn: &Option<Bytes>,
        sql: &str,
    ) -> Result<PendingResult, Status> {
        let session = self.session_in(request, txn).await?;
        let mut results = session
            .execute(sql)
            .await
            .map_err(|e| sql_error_status(&e))?;
        let last = results
            .pop()
            .map(QueryResult::without_copy)
            .transpose()
            .map_err(|e| sql_error_status(&e))?;
        Ok(match last {
            Some(QueryResult::Rows { schema, stream }) => PendingResult {
                schema,
                stream: rows_stream(stream),
            },
            Some(QueryResult::Count { rows, .. }) => count_result(rows),
            Some(
                QueryResult::Done { .. } | QueryResult::CopyIn(_) | QueryResult::CopyOut { .. },
            )
            | None => empty_result(),
        })
    }

    /// The prepared statement behind `handle`, which the caller of `request` must have
    /// prepared.
    async fn prepared<T>(
        &self,
        request: &Request<T>,
        handle: &[u8],
    ) -> Result<Arc<PreparedEntry>, Status> {
        let user = self.user_of(request).await?;
        self.registry
            .prepared(handle)
            .filter(|e| e.session.user() == user)
            .ok_or_else(|| {
                status_with_state(
                    "26000",
                    "unknown prepared statement: it was closed, or unused for too long; \
                     prepare it again",
                )
            })
    }

    /// Keeps `result` for one `DoGet` and describes it.
    fn result_info(
        &self,
        result: PendingResult,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = result.schema.clone();
        let handle = self.registry.put_result(result);
        let ticket = TicketStatementQuery {
            statement_handle: handle,
        }
        .as_any()
        .encode_to_vec();
        Ok(Response::new(flight_info(&schema, ticket, descriptor)?))
    }
}

/// Runs a prepared statement once per parameter row (once without parameters when no
/// row is given). The first run happens now, so that its errors reach the caller;
/// further runs of a query start when the rows of the previous one are read.
async fn run_prepared(
    entry: Arc<PreparedEntry>,
    rows: Vec<Vec<ScalarValue>>,
) -> Result<PendingResult, Status> {
    let mut rows = rows.into_iter();
    let first = rows.next().unwrap_or_default();
    let result = entry
        .session
        .execute_prepared(&entry.prepared, first)
        .await
        .and_then(QueryResult::without_copy)
        .map_err(|e| sql_error_status(&e))?;
    match result {
        QueryResult::Rows { schema, stream } => {
            let rest: Vec<Vec<ScalarValue>> = rows.collect();
            let first = rows_stream(stream);
            if rest.is_empty() {
                return Ok(PendingResult {
                    schema,
                    stream: first,
                });
            }
            let more = stream::iter(rest)
                .then(move |row| {
                    let entry = entry.clone();
                    async move {
                        match entry.session.execute_prepared(&entry.prepared, row).await {
                            Ok(QueryResult::Rows { stream, .. }) => rows_stream(stream),
                            Ok(_) => Box::pin(stream::empty()) as BatchStream,
                            Err(e) => Box::pin(stream::iter([Err(sql_error_status(&e))])),
                        }
                    }
                })
                .flatten();
            Ok(PendingResult {
                schema,
                stream: Box::pin(first.chain(more)),
            })
        }
        QueryResult::Count { rows: n, .. } => {
            let mut total = n;
            for row in rows {
                total += run_for_count(&entry, row).await?.unwrap_or(0);
            }
            Ok(count_result(total))
        }
        QueryResult::Done { .. } | QueryResult::CopyIn(_) | QueryResult::CopyOut { .. } => {
            for row in rows {
                run_for_count(&entry, row).await?;
            }
            Ok(empty_result())
        }
    }
}

/// Runs a prepared statement once; its affected count (`None` for statements that do
/// not count rows; rows of a query are dropped unread).
async fn run_for_count(
    entry: &PreparedEntry,
    row: Vec<ScalarValue>,
) -> Result<Option<u64>, Status> {
    match entry
        .session
        .execute_prepared(&entry.prepared, row)
        .await
        .map_err(|e| sql_error_status(&e))?
    {
        QueryResult::Count { rows, .. } => Ok(Some(rows)),
        _ => Ok(None),
    }
}

/// The parameter batches of a `DoPut`, as rows of scalars of the parameter types.
async fn next_params(
    batches: &mut FlightRecordBatchStream,
    types: &[Option<DataType>],
) -> Result<Option<Vec<Vec<ScalarValue>>>, Status> {
    match batches.try_next().await.map_err(put_error)? {
        Some(batch) => Ok(Some(params::batch_rows(&batch, types)?)),
        None => Ok(None),
    }
}

/// The record batches a `DoPut` carries. Messages without an IPC header are skipped:
/// clients send the command alone that way when they have no parameters.
fn put_batches(request: Request<PeekableFlightDataStream>) -> FlightRecordBatchStream {
    let data = request
        .into_inner()
        .try_filter(|d| std::future::ready(!d.data_header.is_empty()))
        .map_err(FlightError::from);
    FlightRecordBatchStream::new_from_flight_data(data)
}

/// A status for an error while reading a `DoPut` stream.
fn put_error(e: FlightError) -> Status {
    match e {
        FlightError::Tonic(s) => *s,
        other => status_with_state(
            "08P01",
            &format!("cannot read the parameter batch: {other}"),
        ),
    }
}

/// Rows of a DataFusion stream, with errors as statuses.
fn rows_stream(stream: SendableRecordBatchStream) -> BatchStream {
    Box::pin(stream.map_err(|e: DataFusionError| sql_error_status(&SqlError::from(e))))
}

/// One row with an affected count.
fn count_result(rows: u64) -> PendingResult {
    let schema = count_schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(UInt64Array::from(vec![rows]))],
    )
    .map_err(|e| Status::internal(format!("XX000: {e}")));
    PendingResult {
        schema,
        stream: Box::pin(stream::iter([batch])),
    }
}

/// No columns, no rows (DDL, `SET`).
fn empty_result() -> PendingResult {
    PendingResult {
        schema: Arc::new(Schema::empty()),
        stream: Box::pin(stream::empty()),
    }
}

/// A `FlightInfo` with one endpoint holding `ticket`.
fn flight_info(
    schema: &Schema,
    ticket: Vec<u8>,
    descriptor: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("XX000: cannot encode the schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor))
}

/// A `FlightInfo` for a metadata command: the command itself is the ticket.
fn metadata_info(
    command: &impl ProstMessageExt,
    schema: &Schema,
    request: Request<FlightDescriptor>,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = command.as_any().encode_to_vec();
    Ok(Response::new(flight_info(
        schema,
        ticket,
        request.into_inner(),
    )?))
}

/// The encoded stream of a result.
fn encode(result: PendingResult) -> Response<DoGetStream> {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(result.schema)
        .build(result.stream.map_err(|s| FlightError::Tonic(Box::new(s))))
        .map_err(Status::from);
    Response::new(Box::pin(stream))
}

/// The encoded stream of one batch (metadata answers).
fn encode_batch(batch: Result<RecordBatch, FlightError>) -> Response<DoGetStream> {
    match batch {
        Ok(batch) => encode(PendingResult {
            schema: batch.schema(),
            stream: Box::pin(stream::iter([Ok(batch)])),
        }),
        Err(e) => encode(PendingResult {
            schema: Arc::new(Schema::empty()),
            stream: Box::pin(stream::iter([Err(Status::internal(format!("XX000: {e}")))])),
        }),
    }
}

/// A schema as an IPC message (for prepared statement results).
fn ipc_schema(schema: &Schema) -> Result<Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e| Status::internal(format!("XX000: cannot encode the schema: {e}")))?;
    Ok(bytes)
}

/// The parameter schema of a prepared statement: `$1`, `$2`, ... (type `Null` where
/// it could not be inferred).
fn param_schema(types: &[Option<DataType>]) -> SchemaRef {
    Arc::new(Schema::new(
        types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Field::new(
                    format!("${}", i + 1),
                    t.clone().unwrap_or(DataType::Null),
                    true,
                )
            })
            .collect::<Vec<_>>(),
    ))
}

#[tonic::async_trait]
impl FlightSqlService for CairnFlightSql {
    type FlightService = CairnFlightSql;

    async fn do_handshake(
        &self,
        request: Request<tonic::Streaming<arrow_flight::HandshakeRequest>>,
    ) -> Result<
        Response<
            std::pin::Pin<
                Box<
                    dyn futures::Stream<Item = Result<arrow_flight::HandshakeResponse, Status>>
                        + Send,
                >,
            >,
        >,
        Status,
    > {
        let user = self.basic_login(&request).await?;
        let token = self.logins.issue(&user)?;
        let reply = arrow_flight::HandshakeResponse {
            protocol_version: 0,
            payload: Bytes::from(token.clone()),
        };
        let mut response: Response<
            std::pin::Pin<
                Box<
                    dyn futures::Stream<Item = Result<arrow_flight::HandshakeResponse, Status>>
                        + Send,
                >,
            >,
        > = Response::new(Box::pin(stream::iter(vec![Ok(reply)])));
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("the token is not a valid header value"))?;
        response.metadata_mut().insert("authorization", value);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let result = self
            .run_sql(&request, &query.transaction_id, &query.query)
            .await?;
        self.result_info(result, request.into_inner())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.user_of(&request).await?;
        let result = self
            .registry
            .take_result(&ticket.statement_handle)
            .ok_or_else(|| {
                status_with_state(
                    "34000",
                    "unknown ticket: it was already read, or not read in time; run the \
                 statement again",
                )
            })?;
        Ok(encode(result))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = self.session_in(&request, &command.transaction_id).await?;
        let results = session
            .execute(&command.query)
            .await
            .map_err(|e| sql_error_status(&e))?;
        let mut total: Option<u64> = None;
        for r in results {
            if let QueryResult::Count { rows, .. } = r {
                total = Some(total.unwrap_or(0) + rows);
            }
        }
        Ok(total.map_or(-1, |n| n as i64))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let sql = number_placeholders(&query.query);
        let session = self.session_in(&request, &query.transaction_id).await?;
        let prepared = session
            .prepare(&sql)
            .await
            .map_err(|e| sql_error_status(&e))?;
        let dataset_schema = ipc_schema(&prepared.schema)?;
        let parameter_schema = ipc_schema(&param_schema(&prepared.param_types))?;
        let handle = self.registry.put_prepared(PreparedEntry {
            session,
            prepared,
            bound: Mutex::new(vec![]),
        });
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle,
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let entry = self
            .prepared(&request, &query.prepared_statement_handle)
            .await?;
        let mut batches = put_batches(request);
        let mut bound = vec![];
        while let Some(rows) = next_params(&mut batches, &entry.prepared.param_types).await? {
            bound.extend(rows);
        }
        *entry.bound.lock() = bound;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let entry = self
            .prepared(&request, &query.prepared_statement_handle)
            .await?;
        let rows = entry.bound.lock().clone();
        let result = run_prepared(entry, rows).await?;
        self.result_info(result, request.into_inner())
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let entry = self
            .prepared(&request, &query.prepared_statement_handle)
            .await?;
        let rows = entry.bound.lock().clone();
        Ok(encode(run_prepared(entry, rows).await?))
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let entry = self
            .prepared(&request, &query.prepared_statement_handle)
            .await?;
        let mut batches = put_batches(request);
        let mut total: Option<u64> = None;
        let mut any = false;
        while let Some(rows) = next_params(&mut batches, &entry.prepared.param_types).await? {
            for row in rows {
                any = true;
                if let Some(n) = run_for_count(&entry, row).await? {
                    total = Some(total.unwrap_or(0) + n);
                }
            }
        }
        if !any {
            // No parameters came with the call: use the bound ones, or none.
            let mut rows = entry.bound.lock().clone();
            if rows.is_empty() {
                rows.push(vec![]);
            }
            for row in rows {
                if let Some(n) = run_for_count(&entry, row).await? {
                    total = Some(total.unwrap_or(0) + n);
                }
            }
        }
        Ok(total.map_or(-1, |n| n as i64))
    }

    async fn do_action_begin_transaction(
        &self,
        _query: ActionBeginTransactionRequest,
        request: Request<Action>,
    ) -> Result<ActionBeginTransactionResult, Status> {
        let session = self.session_for(&request).await?;
        session.begin(Default::default(), Default::default());
        let transaction_id = self.registry.put_transaction(Arc::new(session));
        Ok(ActionBeginTransactionResult { transaction_id })
    }

    async fn do_action_end_transaction(
        &self,
        query: ActionEndTransactionRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        use arrow_flight::sql::EndTransaction;
        let commit = match EndTransaction::try_from(query.action) {
            Ok(EndTransaction::Commit) => true,
            Ok(EndTransaction::Rollback) => false,
            _ => {
                return Err(status_with_state(
                    "22023",
                    "EndTransaction needs END_TRANSACTION_COMMIT or END_TRANSACTION_ROLLBACK",
                ));
            }
        };
        let id = Some(query.transaction_id.clone());
        self.session_in(&request, &id).await?;
        let session = self
            .registry
            .take_transaction(&query.transaction_id)
            .ok_or_else(|| status_with_state("25000", "unknown transaction: already ended"))?;
        let ended = if commit {
            session.commit().await
        } else {
            session.rollback().await
        };
        ended.map_err(|e| sql_error_status(&e))
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        self.user_of(&request).await?;
        // Closing twice, or after the statement expired, is not an error.
        self.registry
            .close_prepared(&query.prepared_statement_handle);
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user_of(&request).await?;
        let schema = query.into_builder().schema();
        metadata_info(&query, &schema, request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.user_of(&request).await?;
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        Ok(encode_batch(builder.build()))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user_of(&request).await?;
        let schema = query.clone().into_builder().schema();
        metadata_info(&query, &schema, request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.user_of(&request).await?;
        // The builder applies the request's catalog and schema filters.
        let mut builder = query.into_builder();
        builder.append(CATALOG, SCHEMA);
        Ok(encode_batch(builder.build()))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user_of(&request).await?;
        let schema = query.clone().into_builder().schema();
        metadata_info(&query, &schema, request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.user_of(&request).await?;
        let batch = metadata::tables(self.engine.client(), query).await?;
        Ok(encode_batch(Ok(batch)))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user_of(&request).await?;
        let schema = query.into_builder().schema();
        metadata_info(&query, &schema, request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.user_of(&request).await?;
        let mut builder = query.into_builder();
        builder.append(TABLE_TYPE);
        Ok(encode_batch(builder.build()))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.user_of(&request).await?;
        let schema = query.clone().into_builder(&self.sql_info).schema();
        metadata_info(&query, &schema, request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.user_of(&request).await?;
        Ok(encode_batch(query.into_builder(&self.sql_info).build()))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

#[cfg(test)]
mod tests;
