//! Tests of the Flight SQL service through arrow-flight's Flight SQL client.
//!
//! The tests that are not ignored need no cluster: their engine points at a master
//! address nobody listens on, and they use only what works without one (metadata,
//! parse errors, DDL preparation, handles). The ignored ones need a running cluster:
//!
//! ```text
//! CAIRN_MASTERS=127.0.0.1:7051 cargo test -p cairn-flightsql --lib -- --ignored roundtrip
//! CAIRN_MASTERS=127.0.0.1:7051 CAIRN_FLIGHT_PORT=50051 \
//!     cargo test -p cairn-flightsql --lib -- --ignored serve_for_clients --nocapture
//! ```
//!
//! The second serves Flight SQL for `CAIRN_FLIGHT_SERVE_SECS` seconds (default 600)
//! so that `crates/cairn/tests/clients/adbc_smoke.py` can run against it.

use std::time::Duration;

use arrow::array::{Array, Int32Array, Int64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    ActionCreatePreparedStatementRequest, CommandGetDbSchemas, CommandGetTables,
    CommandPreparedStatementQuery, CommandStatementQuery, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{Action, FlightDescriptor, FlightInfo, Ticket};
use futures::TryStreamExt;
use prost::Message;
use tonic::Code;
use tonic::transport::Channel;

use super::*;

type FlightClient = FlightSqlServiceClient<Channel>;

/// A Flight SQL server on a free port for `engine`; the client and a guard that stops
/// the server when dropped.
async fn start(engine: SqlEngine) -> (FlightClient, tokio::sync::oneshot::Sender<()>) {
    let (addr, stop) = start_with(engine, FlightOptions::default()).await;
    (connect(addr).await, stop)
}

/// A Flight SQL server with `opts` on a free port: its address and a guard that stops
/// it when dropped.
async fn start_with(
    engine: SqlEngine,
    opts: FlightOptions,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(engine, listener, opts, async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// A client on a connection of its own.
async fn connect(addr: std::net::SocketAddr) -> FlightClient {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

/// An engine whose master does not exist: cluster calls fail quickly.
async fn offline_engine() -> SqlEngine {
    let client = cairn_client::Client::connect(&["127.0.0.1:1".to_string()])
        .await
        .unwrap()
        .with_options(
            cairn_client::ClientOptions::default()
                .rpc_timeout(Duration::from_millis(200))
                .operation_timeout(Duration::from_millis(600)),
        );
    SqlEngine::new(client).unwrap()
}

/// All batches behind a `FlightInfo`.
async fn fetch(client: &mut FlightClient, info: FlightInfo) -> Vec<RecordBatch> {
    let mut out = vec![];
    for ep in info.endpoint {
        let ticket = ep.ticket.expect("endpoint has a ticket");
        let stream = client.do_get(ticket).await.unwrap();
        out.extend(stream.try_collect::<Vec<_>>().await.unwrap());
    }
    out
}

fn strings(batches: &[RecordBatch], col: usize) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let a = b
                .column(col)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            (0..a.len())
                .map(|i| a.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

/// The status `GetFlightInfo` answers for a SQL statement.
async fn statement_error(client: &mut FlightClient, sql: &str) -> Status {
    let cmd = CommandStatementQuery {
        query: sql.to_string(),
        transaction_id: None,
    };
    client
        .inner_mut()
        .get_flight_info(FlightDescriptor::new_cmd(cmd.as_any().encode_to_vec()))
        .await
        .expect_err("the statement should fail")
}

#[tokio::test]
async fn metadata_without_cluster() {
    let (mut client, _stop) = start(offline_engine().await).await;

    let info = client.get_catalogs().await.unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(strings(&batches, 0), vec![CATALOG]);

    let info = client
        .get_db_schemas(CommandGetDbSchemas::default())
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(strings(&batches, 0), vec![CATALOG]);
    assert_eq!(strings(&batches, 1), vec![SCHEMA]);

    let info = client
        .get_db_schemas(CommandGetDbSchemas {
            catalog: Some("elsewhere".into()),
            db_schema_filter_pattern: None,
        })
        .await
        .unwrap();
    assert_eq!(rows(&fetch(&mut client, info).await), 0);

    let info = client.get_table_types().await.unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(strings(&batches, 0), vec![TABLE_TYPE]);

    // Views only: answered without asking the master.
    let info = client
        .get_tables(CommandGetTables {
            table_types: vec!["VIEW".into()],
            include_schema: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(rows(&fetch(&mut client, info).await), 0);

    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerVersion,
        ])
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(rows(&batches), 2);
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    assert!(text.contains("Cairn"), "{text}");
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
}

#[tokio::test]
async fn errors_carry_sqlstates() {
    let (mut client, _stop) = start(offline_engine().await).await;

    let s = statement_error(&mut client, "SELEC 1").await;
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(s.message().starts_with("42601: "), "{s:?}");

    // The master cannot be reached.
    let s = statement_error(&mut client, "SELECT * FROM t").await;
    assert_eq!(s.code(), Code::Unavailable, "{s:?}");
    assert!(s.message().starts_with("57P03: "), "{s:?}");

    let cmd = CommandStatementQuery {
        query: "SELECT 1".into(),
        transaction_id: Some(Bytes::from_static(b"tx")),
    };
    let s = client
        .inner_mut()
        .get_flight_info(FlightDescriptor::new_cmd(cmd.as_any().encode_to_vec()))
        .await
        .unwrap_err();
    // A transaction id nobody handed out.
    assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
    assert!(s.message().starts_with("25000: "), "{s:?}");
    assert!(s.message().contains("unknown transaction"), "{s:?}");

    let ticket = TicketStatementQuery {
        statement_handle: Bytes::from_static(b"r-nothing"),
    };
    let s = client
        .inner_mut()
        .do_get(Ticket::new(ticket.as_any().encode_to_vec()))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound, "{s:?}");
    assert!(s.message().starts_with("34000: "), "{s:?}");

    let cmd = CommandPreparedStatementQuery {
        prepared_statement_handle: Bytes::from_static(b"p-nothing"),
    };
    let s = client
        .inner_mut()
        .get_flight_info(FlightDescriptor::new_cmd(cmd.as_any().encode_to_vec()))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound, "{s:?}");
    assert!(s.message().starts_with("26000: "), "{s:?}");
}

#[tokio::test]
async fn prepared_ddl_has_empty_schemas() {
    let (mut client, _stop) = start(offline_engine().await).await;
    let stmt = client
        .prepare(
            "CREATE TABLE flight_unit (k INT PRIMARY KEY, v VARCHAR)".into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(stmt.dataset_schema().unwrap().fields().len(), 0);
    assert_eq!(stmt.parameter_schema().unwrap().fields().len(), 0);
    stmt.close().await.unwrap();

    // Several statements cannot be prepared at once.
    let s = client
        .inner_mut()
        .do_action(Action::new(
            "CreatePreparedStatement",
            ActionCreatePreparedStatementRequest {
                query: "SELECT 1; SELECT 2".into(),
                transaction_id: None,
            }
            .as_any()
            .encode_to_vec(),
        ))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(s.message().starts_with("42601: "), "{s:?}");
}

/// The master addresses of a running cluster (`CAIRN_MASTERS`).
fn cluster_masters() -> Vec<String> {
    let masters = std::env::var("CAIRN_MASTERS")
        .expect("set CAIRN_MASTERS to the master addresses of a running cluster");
    vec![masters]
}

/// Serves Flight SQL for a running cluster so that clients (the ADBC smoke test) can
/// be tried by hand: `CAIRN_MASTERS`, `CAIRN_FLIGHT_PORT` (default 50051),
/// `CAIRN_FLIGHT_SERVE_SECS` (default 600).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a running cluster (CAIRN_MASTERS)"]
async fn serve_for_clients() {
    let engine = SqlEngine::connect(&cluster_masters()).await.unwrap();
    let port: u16 = std::env::var("CAIRN_FLIGHT_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(50051);
    let secs: u64 = std::env::var("CAIRN_FLIGHT_SERVE_SECS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(600);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    eprintln!("Flight SQL on grpc://127.0.0.1:{port} for {secs} s");
    serve(
        engine,
        listener,
        FlightOptions::default(),
        tokio::time::sleep(Duration::from_secs(secs)),
    )
    .await
    .unwrap();
}

/// Statements, prepared statements, updates and metadata against a running cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a running cluster (CAIRN_MASTERS)"]
async fn roundtrip_on_cluster() {
    let engine = SqlEngine::connect(&cluster_masters()).await.unwrap();
    let (mut client, _stop) = start(engine).await;
    let table = format!(
        "flight_rt_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );

    // DDL and DML through GetFlightInfo: run at once.
    let info = client
        .execute(
            format!("CREATE TABLE {table} (k INT PRIMARY KEY, v VARCHAR)"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(rows(&fetch(&mut client, info).await), 0);
    let info = client
        .execute(
            format!("INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'c')"),
            None,
        )
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    let counts = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    assert_eq!(counts.value(0), 3);

    // DoPut update.
    let n = client
        .execute_update(format!("INSERT INTO {table} VALUES (4, 'd')"), None)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let n = client
        .execute_update(format!("UPDATE {table} SET v = 'B' WHERE k = 2"), None)
        .await
        .unwrap();
    assert_eq!(n, 1);

    // Query.
    let info = client
        .execute(format!("SELECT k, v FROM {table} ORDER BY k"), None)
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(strings(&batches, 1), vec!["a", "B", "c", "d"]);

    // Prepared query with a `?` parameter bound as Int64 (the column is INT).
    let mut stmt = client
        .prepare(format!("SELECT v FROM {table} WHERE k = ?"), None)
        .await
        .unwrap();
    assert_eq!(
        stmt.parameter_schema().unwrap().field(0).data_type(),
        &DataType::Int32
    );
    let params = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("0", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![3]))],
    )
    .unwrap();
    stmt.set_parameters(params).unwrap();
    let info = stmt.execute().await.unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(strings(&batches, 0), vec!["c"]);
    // Two rows of parameters: the rows of both runs, one after the other.
    let params = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("0", DataType::Int32, true)])),
        vec![Arc::new(Int32Array::from(vec![1, 4]))],
    )
    .unwrap();
    stmt.set_parameters(params).unwrap();
    let info = stmt.execute().await.unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(strings(&batches, 0), vec!["a", "d"]);
    stmt.close().await.unwrap();

    // Prepared update, two rows of parameters.
    let mut stmt = client
        .prepare(format!("INSERT INTO {table} VALUES (?, ?)"), None)
        .await
        .unwrap();
    let params = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("0", DataType::Int32, true),
            Field::new("1", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![5, 6])),
            Arc::new(StringArray::from(vec!["e", "f"])),
        ],
    )
    .unwrap();
    stmt.set_parameters(params).unwrap();
    assert_eq!(stmt.execute_update().await.unwrap(), 2);
    stmt.close().await.unwrap();

    // Duplicate key.
    let s = statement_error(&mut client, &format!("INSERT INTO {table} VALUES (1, 'x')")).await;
    assert_eq!(s.code(), Code::AlreadyExists, "{s:?}");
    assert!(s.message().starts_with("23505: "), "{s:?}");
    // Unknown table.
    let s = statement_error(&mut client, &format!("SELECT * FROM {table}_nope")).await;
    assert_eq!(s.code(), Code::NotFound, "{s:?}");
    assert!(s.message().starts_with("42P01: "), "{s:?}");

    // Metadata with the table's schema.
    let info = client
        .get_tables(CommandGetTables {
            table_name_filter_pattern: Some(table.clone()),
            include_schema: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(strings(&batches, 2), vec![table.clone()]);
    let schema_bytes = batches[0]
        .column(4)
        .as_any()
        .downcast_ref::<arrow::array::BinaryArray>()
        .unwrap()
        .value(0)
        .to_vec();
    let schema = Schema::try_from(IpcMessage(Bytes::from(schema_bytes))).unwrap();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, vec!["k", "v"]);

    let n = client
        .execute_update(format!("DROP TABLE {table}"), None)
        .await
        .unwrap();
    assert_eq!(n, -1);
}
