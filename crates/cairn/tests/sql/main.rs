//! SQL end to end on in-process clusters: DDL, every write statement, pushdown and
//! EXPLAIN, snapshot reads, COPY, errors with their SQLSTATE (`basics`); the
//! sqllogictest files under `tests/slt/` (`slt`); all 22 TPC-H queries at scale factor
//! 0.01 against DataFusion on the same data (`tpch`); real PostgreSQL and Flight SQL
//! clients (`clients`); and concurrent read-modify-write statements, pgbench included
//! (`concurrency`); tables without a primary key (`keyless`); transaction blocks
//! (`transactions`) and randomized ones against a snapshot-isolation oracle
//! (`si_model`); hyperspace search through subspaces (`search`); `INSERT … SELECT`
//! and `CREATE TABLE AS` written from the workers (`distributed_writes`).

#[path = "../common/mod.rs"]
mod common;

mod authz;
mod basics;
mod clients;
mod concurrency;
mod copy;
mod distributed_writes;
mod hostile;
mod keyless;
mod limits;
mod point;
mod search;
mod security;
mod si_model;
mod slt;
mod stores;
mod tpch;
mod transactions;

use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use cairn_sql::{SqlEngine, SqlError, SqlSession};

/// A cluster of `n` tablet servers and a SQL engine on it that calls them in process,
/// as on `cairn local`.
pub async fn sql_cluster(n: usize) -> (common::InProc, SqlEngine) {
    let cl = common::InProc::start(n, std::time::Duration::from_secs(300)).await;
    let engine = SqlEngine::new(cl.in_process_client().await).unwrap();
    (cl, engine)
}

/// Serves `engine` over the PostgreSQL protocol with `opts` on a free loopback port
/// until the test ends; returns the port.
pub async fn serve_pg(engine: SqlEngine, opts: cairn_pgwire::PgOptions) -> u16 {
    let listener = cairn_pgwire::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(cairn_pgwire::serve(
        engine,
        listener,
        opts,
        std::future::pending(),
    ));
    port
}

/// A tokio-postgres client of the server on `port` (user `cairn`, no TLS).
pub async fn pg_connect(port: u16) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=cairn dbname=cairn"),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    client
}

/// Rows as strings (NULL for nulls).
pub fn strings(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = vec![];
    for b in batches {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            out.push(fmts.iter().map(|f| f.value(r).to_string()).collect());
        }
    }
    out
}

/// Runs `sql` and returns its rows as strings; panics on error.
pub async fn q(s: &SqlSession, sql: &str) -> Vec<Vec<String>> {
    match s.query(sql).await {
        Ok(b) => strings(&b),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// Runs `sql`, expecting an error; returns it.
pub async fn err(s: &SqlSession, sql: &str) -> SqlError {
    match s.query(sql).await {
        Ok(b) => panic!("{sql}: expected an error, got {:?}", strings(&b)),
        Err(e) => e,
    }
}

/// Runs one statement and returns its affected-row count.
pub async fn count(s: &SqlSession, sql: &str) -> u64 {
    match s.execute(sql).await {
        Ok(mut r) => match r.pop() {
            Some(cairn_sql::QueryResult::Count { rows, .. }) => rows,
            other => panic!("{sql}: expected a count, got {other:?}"),
        },
        Err(e) => panic!("{sql}: {e}"),
    }
}
