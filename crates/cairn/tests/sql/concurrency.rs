//! Concurrent read-modify-write through SQL: no lost updates.
//!
//! - `UPDATE … SET c = c + 1` from many sessions at once counts every increment, on
//!   one tablet server (as `cairn local`) and on three with replicas 3;
//! - a DELETE racing an UPDATE decides on the row's latest values;
//! - `INSERT … ON CONFLICT (k) DO UPDATE SET n = t.n + EXCLUDED.n` from many sessions,
//!   starting on keys that do not exist yet, counts every row once (replicated, with
//!   DELETEs of other keys racing it);
//! - pgbench's TPC-B-like script from 8 clients keeps the balances consistent.

use std::sync::Arc;

use crate::common::reserve_port;
use crate::{count, q, sql_cluster};

async fn increments(tservers: usize, replicas: u32) {
    let (_cl, engine) = sql_cluster(tservers).await;
    let s = engine.session();
    q(
        &s,
        &format!(
            "CREATE TABLE counters (k BIGINT PRIMARY KEY, c BIGINT NOT NULL) \
             PARTITION BY HASH (k) PARTITIONS 2 WITH (replicas = {replicas})"
        ),
    )
    .await;
    count(&s, "INSERT INTO counters VALUES (1, 0), (2, 0), (3, 0)").await;
    const WORKERS: u64 = 8;
    const EACH: u64 = 25;
    let mut tasks = vec![];
    for w in 0..WORKERS {
        let s = engine.session();
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                // Mostly the same hot row, sometimes the others.
                let k = if (w + i) % 4 == 0 { 1 + (i % 3) } else { 1 };
                let n = count(&s, &format!("UPDATE counters SET c = c + 1 WHERE k = {k}")).await;
                assert_eq!(n, 1, "every increment changes its row");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        q(&s, "SELECT sum(c) FROM counters").await,
        vec![vec![(WORKERS * EACH).to_string()]],
        "every increment is counted ({tservers} tablet servers, replicas {replicas})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_count_every_one() {
    increments(1, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_count_every_one_replicated() {
    increments(3, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_upserts_count_every_row() {
    let (_cl, engine) = sql_cluster(3).await;
    let s = engine.session();
    q(
        &s,
        "CREATE TABLE tallies (k TEXT PRIMARY KEY, n BIGINT NOT NULL, last BIGINT) \
         PARTITION BY HASH (k) PARTITIONS 3 WITH (replicas = 3)",
    )
    .await;
    const WORKERS: u64 = 6;
    const EACH: u64 = 20;
    let mut tasks = vec![];
    for w in 0..WORKERS {
        let s = engine.session();
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                // Two hot keys created by whichever worker comes first, and one
                // row per worker that another worker keeps deleting.
                let n = count(
                    &s,
                    &format!(
                        "INSERT INTO tallies AS t VALUES ('hot{}', 1, {w}), ('w{w}', 1, {i}) \
                         ON CONFLICT (k) DO UPDATE SET n = t.n + EXCLUDED.n, last = EXCLUDED.last",
                        i % 2
                    ),
                )
                .await;
                assert_eq!(n, 2, "each row is inserted or updated");
                if i % 5 == 4 {
                    count(
                        &s,
                        &format!("DELETE FROM tallies WHERE k = 'w{}'", (w + 1) % WORKERS),
                    )
                    .await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        q(&s, "SELECT sum(n) FROM tallies WHERE k LIKE 'hot%'").await,
        vec![vec![(WORKERS * EACH).to_string()]],
        "every upsert of a hot key is counted once"
    );
    // A DO UPDATE WHERE that is false leaves the row, and counts nothing.
    assert_eq!(
        count(
            &s,
            "INSERT INTO tallies AS t VALUES ('hot0', 0, 0) ON CONFLICT (k) DO UPDATE \
             SET n = 0 WHERE t.n < 0",
        )
        .await,
        0
    );
    assert_eq!(
        q(&s, "SELECT n FROM tallies WHERE k = 'hot0'").await,
        vec![vec![(WORKERS * EACH / 2).to_string()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_racing_update_decides_on_the_latest_row() {
    let (_cl, engine) = sql_cluster(1).await;
    let s = engine.session();
    q(
        &s,
        "CREATE TABLE r (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) WITH (replicas = 1)",
    )
    .await;
    for round in 0..40 {
        count(&s, &format!("UPSERT INTO r VALUES ({round}, 200)")).await;
        let (a, b) = (engine.session(), engine.session());
        let up = tokio::spawn(async move {
            count(&a, &format!("UPDATE r SET v = 50 WHERE k = {round}")).await
        });
        let del = tokio::spawn(async move {
            count(&b, &format!("DELETE FROM r WHERE k = {round} AND v > 100")).await
        });
        let (updated, deleted) = (up.await.unwrap(), del.await.unwrap());
        let left = q(&s, &format!("SELECT v FROM r WHERE k = {round}")).await;
        match (updated, deleted) {
            // The update came first: v = 50 is not > 100, so the delete found nothing.
            (1, 0) => assert_eq!(left, vec![vec!["50".to_string()]], "round {round}"),
            // The delete came first: the update found no row.
            (0, 1) => assert!(left.is_empty(), "round {round}: {left:?}"),
            other => panic!(
                "round {round}: update changed {} row(s) and delete {} — a lost update \
                 (row now {left:?})",
                other.0, other.1
            ),
        }
    }
}

/// pgbench's TPC-B-like transaction (with a primary key on the history table, which
/// Cairn requires); `bench/pgbench/tpcb.sh` runs the same against a live server.
const TPCB: &str = include_str!("../../../../bench/pgbench/tpcb.sql");

fn pgbench() -> Option<std::path::PathBuf> {
    for p in ["pgbench", "/usr/lib/postgresql/15/bin/pgbench"] {
        if std::process::Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(p.into());
        }
    }
    None
}

async fn pgbench_tpcb(tservers: usize, replicas: u32) {
    let Some(bin) = pgbench() else {
        assert!(
            std::env::var("CI").is_err(),
            "pgbench is not installed (CI must install it: see .ci/run)"
        );
        eprintln!("skipping: pgbench is not installed");
        return;
    };
    let (_cl, engine) = sql_cluster(tservers).await;
    let s = engine.session();
    let with = format!("WITH (replicas = {replicas})");
    for ddl in [
        format!(
            "CREATE TABLE pgbench_branches (bid INT PRIMARY KEY, bbalance INT NOT NULL, \
             filler TEXT) {with}"
        ),
        format!(
            "CREATE TABLE pgbench_tellers (tid INT PRIMARY KEY, bid INT, tbalance INT NOT \
             NULL, filler TEXT) {with}"
        ),
        format!(
            "CREATE TABLE pgbench_accounts (aid INT PRIMARY KEY, bid INT, abalance INT NOT \
             NULL, filler TEXT) PARTITION BY HASH (aid) PARTITIONS 3 {with}"
        ),
        format!(
            "CREATE TABLE pgbench_history (hid BIGINT PRIMARY KEY, tid INT, bid INT, aid \
             INT, delta INT, mtime TIMESTAMP) {with}"
        ),
    ] {
        q(&s, &ddl).await;
    }
    count(&s, "INSERT INTO pgbench_branches VALUES (1, 0, '')").await;
    count(
        &s,
        "INSERT INTO pgbench_tellers SELECT CAST(value AS INT), 1, 0, '' FROM \
         generate_series(1, 10)",
    )
    .await;
    count(
        &s,
        "INSERT INTO pgbench_accounts SELECT CAST(value AS INT), 1, 0, '' FROM \
         generate_series(1, 1000)",
    )
    .await;
    let port = reserve_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(cairn_pgwire::serve(
        engine.clone(),
        listener,
        cairn_pgwire::PgOptions::default(),
        std::future::pending(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tpcb.sql");
    std::fs::write(&script, TPCB).unwrap();
    let script = Arc::new(script);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args([
                "-n",
                "-c",
                "8",
                "-j",
                "2",
                "-t",
                "40",
                "-M",
                "prepared",
                // Retry deadlock refusals (a wait on a hot row past the deadlock
                // timeout is taken for one) and serialization failures, as
                // pgbench does for PostgreSQL.
                "--max-tries=10",
                "-h",
                "127.0.0.1",
                "-p",
            ])
            .arg(port.to_string())
            .args(["-U", "cairn", "-f"])
            .arg(script.as_ref())
            .arg("cairn")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pgbench failed:\n{text}");
    assert!(
        text.contains("number of transactions actually processed: 320/320"),
        "every transaction ran:\n{text}"
    );
    assert!(
        !text.contains("number of failed transactions") || text.contains("failed transactions: 0 "),
        "no client got an error:\n{text}"
    );
    let sums = q(
        &s,
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts), \
                (SELECT sum(tbalance) FROM pgbench_tellers), \
                (SELECT sum(bbalance) FROM pgbench_branches), \
                (SELECT sum(delta) FROM pgbench_history), \
                (SELECT count(*) FROM pgbench_history)",
    )
    .await;
    let row = &sums[0];
    assert_eq!(row[4], "320", "one history row per transaction: {row:?}");
    assert!(
        row[0] == row[1] && row[1] == row[2] && row[2] == row[3],
        "sum(account) = sum(teller) = sum(branch) = sum(history.delta): {row:?}\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbench_tpcb_keeps_the_balances() {
    pgbench_tpcb(1, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbench_tpcb_keeps_the_balances_replicated() {
    pgbench_tpcb(3, 3).await;
}
