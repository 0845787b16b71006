//! Every limit trips with an error that names its flag: connections per front end
//! (psql's SQLSTATE 53300, Flight SQL's RESOURCE_EXHAUSTED), `statement_timeout`
//! (57014), the per-statement memory limit (53200, or a spill where the operator can),
//! scan batch size and open scanners on a tablet server, and hash buckets and tablets
//! per table on the master. PostgreSQL clients are `tokio-postgres`.

use std::time::Duration;

use arrow_flight::sql::client::FlightSqlServiceClient;
use cairn_sql::{EngineLimits, SqlEngine};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use crate::common::{InProc, insert_range, table_spec};
use crate::sql_cluster;

/// Serves PostgreSQL for `engine` with `opts` on a free port; the port and a guard
/// that stops the server when dropped.
async fn start_pg(
    engine: SqlEngine,
    opts: cairn_pgwire::PgOptions,
) -> (u16, tokio::sync::oneshot::Sender<()>) {
    let listener = cairn_pgwire::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(cairn_pgwire::serve(engine, listener, opts, async move {
        let _ = stopped.await;
    }));
    (port, stop)
}

async fn connect(port: u16) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=cairn dbname=cairn"),
        NoTls,
    )
    .await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Retries `f` for up to 5 s until it succeeds (a closed connection is noticed by the
/// server shortly, not at once).
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_connections_timeout_and_memory() {
    let (_cl, engine) = sql_cluster(1).await;

    // Connections: the third of two is refused with 53300; after a close, served.
    let opts = cairn_pgwire::PgOptions {
        max_connections: 2,
        ..Default::default()
    };
    let (port, _stop) = start_pg(engine.clone(), opts).await;
    let a = connect(port).await.expect("first connection");
    let b = connect(port).await.expect("second connection");
    let e = connect(port).await.expect_err("a third is past the limit");
    assert_eq!(e.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{e:?}");
    assert!(format!("{e:?}").contains("--pg-max-connections"), "{e:?}");
    a.simple_query("SELECT 1")
        .await
        .expect("the first still works");
    drop(a);
    drop(b);
    eventually("a connection after the others closed is served", || async {
        connect(port).await.is_ok()
    })
    .await;

    // statement_timeout, in both protocols; the connection stays usable.
    let (port, _stop2) = start_pg(engine.clone(), Default::default()).await;
    let c = connect(port).await.unwrap();
    let slow = "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b";
    c.batch_execute("SET statement_timeout = '200ms'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let e = c.simple_query(slow).await.expect_err("times out");
    assert_eq!(e.code(), Some(&SqlState::QUERY_CANCELED), "{e:?}");
    assert!(format!("{e:?}").contains("statement timeout"), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let e = c.query(slow, &[]).await.expect_err("times out");
    assert_eq!(e.code(), Some(&SqlState::QUERY_CANCELED), "{e:?}");
    let rows = c.query("SELECT 1::BIGINT", &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 1);
    c.batch_execute("SET statement_timeout = 0").await.unwrap();
    c.simple_query("SELECT count(*) FROM generate_series(1, 1000)")
        .await
        .expect("runs without a timeout");
    let e = c
        .batch_execute("SET statement_timeout = 'soon'")
        .await
        .expect_err("not a duration");
    assert_eq!(e.code(), Some(&SqlState::INVALID_PARAMETER_VALUE), "{e:?}");

    // Memory: a hash join's build side cannot spill and fails with 53200; a sort
    // spills and finishes.
    let small = engine.clone().with_limits(EngineLimits {
        query_memory_bytes: 4 << 20,
    });
    let (port, _stop3) = start_pg(small, Default::default()).await;
    let c = connect(port).await.unwrap();
    let e = c
        .simple_query(
            "SELECT count(*) FROM generate_series(1, 2000000) a \
             JOIN generate_series(1, 2000000) b ON a.value = b.value",
        )
        .await
        .expect_err("the join needs more than the limit");
    assert_eq!(e.code(), Some(&SqlState::OUT_OF_MEMORY), "{e:?}");
    assert!(
        format!("{e:?}").contains("--query-memory-limit-mb"),
        "{e:?}"
    );
    let rows = c
        .query(
            "SELECT count(*) FROM (SELECT value * 7 % 1000003 AS v \
             FROM generate_series(1, 2000000) ORDER BY v DESC) s",
            &[],
        )
        .await
        .expect("the sort spills and finishes");
    assert_eq!(rows[0].get::<_, i64>(0), 2_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flight_connection_limit() {
    let (_cl, engine) = sql_cluster(1).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = cairn_flightsql::FlightOptions {
        max_connections: 1,
        ..Default::default()
    };
    tokio::spawn(cairn_flightsql::serve(
        engine,
        listener,
        opts,
        std::future::pending(),
    ));
    let client = || async move {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        FlightSqlServiceClient::new(channel)
    };
    let mut first = client().await;
    first.execute("SELECT 1".into(), None).await.unwrap();
    let mut second = client().await;
    let e = second
        .execute("SELECT 1".into(), None)
        .await
        .expect_err("past the limit");
    let e = format!("{e:?}");
    assert!(e.contains("ResourceExhausted"), "{e}");
    assert!(e.contains("--flight-max-connections"), "{e}");
    drop(first);
    drop(second);
    eventually("a connection after the others closed is served", || async {
        client()
            .await
            .execute("SELECT 1".into(), None)
            .await
            .is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tserver_and_master_limits() {
    let mut cl = InProc::start(1, Duration::from_secs(300)).await;
    cl.ts_limits = cairn_tserver::ServiceLimits {
        max_scan_batch_rows: 1000,
        max_open_scanners: 2,
        max_row_bytes: 4096,
        ..Default::default()
    };
    cl.stop_tserver(0).await;
    cl.start_tserver(0).await;
    cl.wait_live(1).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 1, 1)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..10).await;
    // A row past --max-row-bytes is refused whole, by the row path and the bulk path.
    let big = |id: i64| {
        cairn_client::Operation::insert(vec![
            cairn_common::Value::Int64(id),
            cairn_common::Value::String("x".repeat(5000)),
            cairn_common::Value::Null,
        ])
    };
    let mut s = c.new_session(&t);
    s.set_flush_mode(cairn_client::FlushMode::Manual);
    s.apply(big(100)).await.unwrap();
    let e = s.flush().await.unwrap_err().to_string();
    assert!(e.contains("--max-row-bytes"), "{e}");
    let mut loader = c.bulk_loader(&t).await.unwrap();
    loader.set_timeout(Duration::from_secs(5));
    let batch = arrow::record_batch::RecordBatch::try_new(
        t.schema.to_arrow(),
        vec![
            std::sync::Arc::new(arrow::array::Int64Array::from(vec![101i64])),
            std::sync::Arc::new(arrow::array::StringArray::from(vec!["y".repeat(5000)])),
            std::sync::Arc::new(arrow::array::Int64Array::from(vec![None::<i64>])),
        ],
    )
    .unwrap();
    let r = async {
        loader.add(batch).await?;
        loader.finish().await
    }
    .await;
    let e = format!("{:?}", r.unwrap_err());
    assert!(e.contains("--max-row-bytes"), "{e}");
    assert_eq!(c.scan(&t).count().await.unwrap(), 10);
    let locs = c.table_locations(&t, true).await.unwrap();
    let mut raw = c.tablet_server(&cl.ts_addrs[0]).await.unwrap();
    let scan = |batch_rows: u32| cairn_proto::ScanRequest {
        tablet_id: locs[0].tablet_id.clone(),
        all_columns: true,
        batch_rows,
        ..Default::default()
    };
    // A batch past the cap is refused for good (not retried).
    let e = raw.scan(scan(1001)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("--max-scan-batch-rows"), "{e:?}");
    // Two scanners stay open (one row each of ten); a third is refused.
    for _ in 0..2 {
        let r = raw.scan(scan(1)).await.unwrap().into_inner();
        assert!(r.has_more && !r.scanner_id.is_empty());
    }
    let e = raw.scan(scan(1)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("--max-open-scanners"), "{e:?}");
    // Hash buckets and tablets per table on the master (1024 and 10,000 by default).
    let e = c
        .create_table(table_spec("too_many_buckets", 2000, 1))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--max-hash-buckets"), "{e}");
    let mut spec = table_spec("too_many_tablets", 1000, 1);
    spec.partition.range_columns = vec!["id".into()];
    let key = |i: i64| cairn_common::key::encode_values(&[&cairn_common::Value::Int64(i)]).unwrap();
    spec.range_bounds = (0..11).map(|i| (key(i * 10), key(i * 10 + 10))).collect();
    let e = c.create_table(spec).await.unwrap_err();
    assert!(e.to_string().contains("--max-tablets-per-table"), "{e}");
}
