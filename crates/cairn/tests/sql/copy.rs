//! `COPY … FROM STDIN` and `COPY … TO STDOUT` through tokio-postgres (the extended
//! protocol; psql and psycopg, which use the simple one, are in `clients.rs`).
//!
//! - several clients stream rows into one replicated, hash-partitioned table at once,
//!   while other sessions update rows already loaded: every row arrives once, none is
//!   lost, and COPY TO STDOUT gives them back;
//! - a load that fails halfway (a bad value) reports its SQLSTATE and leaves the
//!   connection usable.

use bytes::Bytes;
use futures::{SinkExt, StreamExt, pin_mut};
use tokio_postgres::error::SqlState;

use crate::{count, q, sql_cluster};

async fn serve_pg(engine: &cairn_sql::SqlEngine) -> u16 {
    let listener = cairn_pgwire::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(cairn_pgwire::serve(
        engine.clone(),
        listener,
        cairn_pgwire::PgOptions::default(),
        std::future::pending(),
    ));
    port
}

/// Streams rows `from..to` as `k<TAB>name k<TAB>k` lines in chunks of `chunk` bytes.
async fn load(client: &tokio_postgres::Client, from: u64, to: u64, chunk: usize) -> u64 {
    let sink = client
        .copy_in::<_, Bytes>("COPY loaded (k, name, v) FROM STDIN")
        .await
        .unwrap();
    pin_mut!(sink);
    let mut text = String::new();
    for k in from..to {
        text.push_str(&format!("{k}\tname {k}\t{k}\n"));
    }
    for part in text.as_bytes().chunks(chunk) {
        sink.send(Bytes::copy_from_slice(part)).await.unwrap();
    }
    sink.finish().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_copies_into_a_replicated_table_lose_nothing() {
    let (_cl, engine) = sql_cluster(3).await;
    let s = engine.session();
    q(
        &s,
        "CREATE TABLE loaded (k BIGINT PRIMARY KEY, name TEXT, v BIGINT) \
         PARTITION BY HASH (k) PARTITIONS 4 WITH (replicas = 3)",
    )
    .await;
    count(&s, "INSERT INTO loaded VALUES (-1, 'hot', 0)").await;
    let port = serve_pg(&engine).await;
    const LOADERS: u64 = 4;
    const EACH: u64 = 3000;
    let mut tasks = vec![];
    for w in 0..LOADERS {
        tasks.push(tokio::spawn(async move {
            let c = crate::pg_connect(port).await;
            // Odd chunk sizes split lines across CopyData messages.
            load(&c, w * EACH, (w + 1) * EACH, 1000 + 77 * w as usize).await
        }));
    }
    // Writes racing the loads.
    let writer = {
        let s = engine.session();
        tokio::spawn(async move {
            for _ in 0..30 {
                count(&s, "UPDATE loaded SET v = v + 1 WHERE k = -1").await;
            }
        })
    };
    for t in tasks {
        assert_eq!(t.await.unwrap(), EACH, "COPY reports the rows it loaded");
    }
    writer.await.unwrap();
    let n = LOADERS * EACH;
    assert_eq!(
        q(
            &s,
            "SELECT count(*), sum(k), sum(v) FROM loaded WHERE k >= 0"
        )
        .await,
        vec![vec![
            n.to_string(),
            (n * (n - 1) / 2).to_string(),
            (n * (n - 1) / 2).to_string()
        ]]
    );
    assert_eq!(
        q(&s, "SELECT v FROM loaded WHERE k = -1").await,
        vec![vec!["30".to_string()]]
    );
    // And back out, in key order, through COPY TO STDOUT.
    let c = crate::pg_connect(port).await;
    let out = c
        .copy_out("COPY (SELECT k, name FROM loaded WHERE k >= 0 ORDER BY k) TO STDOUT")
        .await
        .unwrap();
    pin_mut!(out);
    let mut text = Vec::new();
    while let Some(chunk) = out.next().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(text).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len() as u64, n);
    assert_eq!(lines[0], "0\tname 0");
    assert_eq!(lines[lines.len() - 1], format!("{}\tname {}", n - 1, n - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_copy_reports_its_error_and_the_connection_goes_on() {
    let (_cl, engine) = sql_cluster(1).await;
    let s = engine.session();
    q(
        &s,
        "CREATE TABLE loaded (k BIGINT PRIMARY KEY, name TEXT, v BIGINT)",
    )
    .await;
    let port = serve_pg(&engine).await;
    let c = crate::pg_connect(port).await;
    let sink = c
        .copy_in::<_, Bytes>("COPY loaded (k, name, v) FROM STDIN")
        .await
        .unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from_static(b"1\tone\t1\n2\ttwo\tnot-a-number\n"))
        .await
        .unwrap();
    let e = sink.finish().await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(&SqlState::INVALID_TEXT_REPRESENTATION),
        "{e:?}"
    );
    let rows = c.query("SELECT count(*) FROM loaded", &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 0, "the bad batch loaded nothing");
    let e = c
        .copy_in::<_, Bytes>("COPY loaded (k, nope) FROM STDIN")
        .await
        .err()
        .expect("an unknown column");
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_COLUMN), "{e:?}");
    // A COPY that fails to start leaves tokio-postgres's connection out of step (it
    // pipelines two Syncs, each answered): a new connection loads.
    let c = crate::pg_connect(port).await;
    assert_eq!(load_one(&c).await, 1);
}

async fn load_one(c: &tokio_postgres::Client) -> u64 {
    let sink = c
        .copy_in::<_, Bytes>("COPY loaded FROM STDIN WITH (FORMAT csv)")
        .await
        .unwrap();
    pin_mut!(sink);
    sink.send(Bytes::from_static(b"7,\"seven, quoted\",\n"))
        .await
        .unwrap();
    sink.finish().await.unwrap()
}
