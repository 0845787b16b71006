//! `INSERT … SELECT` and `CREATE TABLE AS` written from the workers, on three
//! in-process tablet servers hosting workers, tables replicated three times: the
//! plan, all-or-nothing statements (a duplicate key on one worker leaves nothing
//! and no locked rows), concurrent statements, and a statement that loses a worker
//! before its commit and runs again on the workers left.

use cairn_sql::distributed::ClusterWorkers;
use cairn_sql::{SqlEngine, SqlSession};

use crate::common::InProc;
use crate::{count, err, q, strings};

/// Three tablet servers with workers, a SQL engine sending them fragments, and a
/// table `src` of `ROWS` rows hashed into 6 tablets; `dst` is empty, shaped alike.
async fn cluster() -> (InProc, SqlEngine) {
    let cl = InProc::start_with_workers(3).await;
    let engine = SqlEngine::new(cl.client().await)
        .unwrap()
        .with_workers(ClusterWorkers::fixed(&cl.ts_addrs));
    let s = engine.session();
    for t in ["src", "dst"] {
        s.execute(&format!(
            "CREATE TABLE {t} (k BIGINT PRIMARY KEY, g INT NOT NULL, v BIGINT NOT NULL) \
             PARTITION BY HASH (k) PARTITIONS 6 WITH (replicas = 3)"
        ))
        .await
        .unwrap();
    }
    count(
        &s,
        &format!("INSERT INTO src SELECT i, i % 7, i FROM generate_series(1, {ROWS}) AS s(i)"),
    )
    .await;
    (cl, engine)
}

const ROWS: i64 = 6000;

/// `SELECT count(*), sum(v)` of `dst` where `k` is in `lo..=hi`.
async fn dst_rows(s: &SqlSession, lo: i64, hi: i64) -> (i64, i64) {
    let r = q(
        s,
        &format!("SELECT count(*), coalesce(sum(v), 0) FROM dst WHERE k BETWEEN {lo} AND {hi}"),
    )
    .await;
    (r[0][0].parse().unwrap(), r[0][1].parse().unwrap())
}

/// The physical plan EXPLAIN shows for `sql`.
async fn explain(s: &SqlSession, sql: &str) -> String {
    strings(&s.query(&format!("EXPLAIN {sql}")).await.unwrap())
        .into_iter()
        .filter(|r| r[0] == "physical_plan")
        .map(|r| r[1].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insert_select_writes_from_the_workers_all_or_nothing() {
    let (_cl, engine) = cluster().await;
    let s = engine.session();
    let sum: i64 = (1..=ROWS).sum();
    // The plan: the shares write in the stage that reads src, on the servers; the
    // front end commits.
    let plan = explain(&s, "INSERT INTO dst SELECT k, g, v FROM src").await;
    let commit = plan.find("CairnCommitExec").expect(&plan);
    let gather = plan.find("NetworkCoalesceExec").expect(&plan);
    let share = plan.find("CairnWriteShareExec").expect(&plan);
    let scan = plan.find("CairnScanExec").expect(&plan);
    assert!(commit < gather && gather < share && share < scan, "{plan}");
    assert!(plan.contains("DistributedExec"), "{plan}");

    assert_eq!(
        count(&s, "INSERT INTO dst SELECT k, g, v * 2 FROM src").await,
        ROWS as u64
    );
    assert_eq!(dst_rows(&s, 1, ROWS).await, (ROWS, 2 * sum));

    // A duplicate key in one share fails the statement with PostgreSQL's code, and
    // nothing of it stays: not the rows of the other shares, nor their locks.
    count(&s, &format!("DELETE FROM dst WHERE k > {}", ROWS / 2)).await;
    let e = err(&s, "INSERT INTO dst SELECT k, g, v FROM src").await;
    assert_eq!(e.sqlstate(), "23505", "{e}");
    assert_eq!(dst_rows(&s, ROWS / 2 + 1, ROWS).await.0, 0);
    assert_eq!(
        count(
            &s,
            &format!(
                "INSERT INTO dst SELECT k, g, v FROM src WHERE k > {}",
                ROWS / 2
            )
        )
        .await,
        (ROWS / 2) as u64
    );
    assert_eq!(dst_rows(&s, 1, ROWS).await.0, ROWS);
    // ON CONFLICT DO NOTHING and UPSERT travel too.
    let before = dst_rows(&s, 1, ROWS).await;
    count(
        &s,
        "INSERT INTO dst SELECT k, g, v + 1 FROM src ON CONFLICT DO NOTHING",
    )
    .await;
    assert_eq!(dst_rows(&s, 1, ROWS).await, before);
    assert_eq!(
        count(&s, "UPSERT INTO dst SELECT k, g, v FROM src").await,
        ROWS as u64
    );
    assert_eq!(dst_rows(&s, 1, ROWS).await, (ROWS, sum));
    // UPDATE and DELETE read their rows in the front end (on a distributed engine
    // too: DELETE above, UPDATE here).
    assert_eq!(
        count(&s, "UPDATE dst SET v = v + 1 WHERE k <= 10").await,
        10
    );
    assert_eq!(dst_rows(&s, 1, ROWS).await, (ROWS, sum + 10));

    // Concurrent statements, each writing its own keys from all three workers.
    let runs = (1..=3i64).map(|i| {
        let s = engine.session();
        async move {
            let sql = format!("INSERT INTO dst SELECT k + {i} * 1000000, g, v FROM src");
            (i, count(&s, &sql).await)
        }
    });
    for (i, n) in futures::future::join_all(runs).await {
        assert_eq!(n, ROWS as u64);
        let lo = i * 1_000_000;
        assert_eq!(dst_rows(&s, lo + 1, lo + ROWS).await, (ROWS, sum));
    }

    // CREATE TABLE AS writes the same way.
    let sevens = (1..=ROWS).filter(|k| k % 7 == 3).count() as u64;
    assert_eq!(
        count(&s, "CREATE TABLE c AS SELECT k, v FROM src WHERE g = 3").await,
        sevens
    );
    assert_eq!(
        q(&s, "SELECT count(*) FROM c").await[0][0],
        sevens.to_string()
    );

    // A table keyed by a hidden column: each worker draws its rows' ids.
    s.execute("CREATE TABLE nokey (g INT, v BIGINT)")
        .await
        .unwrap();
    assert_eq!(
        count(&s, "INSERT INTO nokey SELECT g, v FROM src").await,
        ROWS as u64
    );
    assert_eq!(
        q(&s, "SELECT count(*), sum(v) FROM nokey").await[0],
        [ROWS.to_string(), sum.to_string()]
    );
    // Shares larger than cairn.max_atomic_rows write in several requests, as a
    // local statement does.
    s.execute("SET cairn.max_atomic_rows = 100").await.unwrap();
    assert_eq!(
        count(&s, "INSERT INTO dst SELECT k + 6000000, g, v FROM src").await,
        ROWS as u64
    );
    assert_eq!(dst_rows(&s, 6_000_001, 6_000_000 + ROWS).await, (ROWS, sum));
    // RESET puts a Cairn setting back to its default, as in PostgreSQL (DataFusion
    // resets only its own); an unknown one is 42704.
    s.execute("RESET cairn.max_atomic_rows").await.unwrap();
    assert_eq!(
        err(&s, "RESET cairn.no_such_setting").await.sqlstate(),
        "42704"
    );

    // In a transaction block the front end writes, and ROLLBACK undoes it; CREATE
    // TABLE AS takes effect at once, rows included, as DDL does.
    s.execute("BEGIN").await.unwrap();
    let plan = explain(&s, "INSERT INTO dst SELECT k + 7000000, g, v FROM src").await;
    assert!(!plan.contains("CairnWriteShareExec"), "{plan}");
    count(&s, "INSERT INTO dst SELECT k + 7000000, g, v FROM src").await;
    count(&s, "CREATE TABLE c2 AS SELECT k, v FROM src WHERE g = 3").await;
    s.execute("ROLLBACK").await.unwrap();
    assert_eq!(dst_rows(&s, 7_000_000, 8_000_000).await.0, 0);
    assert_eq!(
        q(&s, "SELECT count(*) FROM c2").await[0][0],
        sevens.to_string()
    );
}

/// A server stops while the planner still sends it a share (its list of workers is
/// fixed, the client's locations stale): the statement fails before its commit,
/// finds the worker gone, and runs again on the two left. Its rows are there once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_distributed_insert_that_loses_a_worker_runs_again_on_the_workers_left() {
    let (mut cl, engine) = cluster().await;
    let s = engine.session();
    let src = engine.client().open_table("src").await.unwrap();
    let locations = engine.client().table_locations(&src, false).await.unwrap();
    let leader = locations[0].leader_addr().unwrap().to_string();
    let victim = cl.ts_addrs.iter().position(|a| *a == leader).unwrap();
    cl.stop_tserver(victim).await;
    let plan = explain(&s, "INSERT INTO dst SELECT k, g, v FROM src").await;
    assert!(plan.contains(&format!("at={leader}")), "{plan}");
    assert_eq!(
        count(&s, "INSERT INTO dst SELECT k, g, v FROM src").await,
        ROWS as u64
    );
    let sum: i64 = (1..=ROWS).sum();
    assert_eq!(dst_rows(&s, 1, ROWS).await, (ROWS, sum));
    let workers = engine.workers().unwrap();
    assert!(workers.reruns() > 0);
    assert_eq!(workers.local_reruns(), 0, "ran again in the front end");
    let plan = explain(&s, "INSERT INTO dst SELECT k, g, v FROM src").await;
    assert!(!plan.contains(&format!("at={leader}")), "{plan}");
    assert!(plan.contains("CairnWriteShareExec"), "{plan}");
}
