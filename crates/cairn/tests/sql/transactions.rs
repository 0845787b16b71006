//! `BEGIN` … `COMMIT` through SQL sessions, as Cairn transactions.
//!
//! - a block's rows are seen by its own statements only, `COMMIT` publishes them on
//!   every tablet at once and `ROLLBACK` discards them;
//! - READ COMMITTED reads each statement at a new snapshot and re-reads rows that
//!   changed under an UPDATE; REPEATABLE READ keeps the first snapshot and refuses
//!   (40001) to change a row changed since — the first committer wins;
//! - a writer waits for the transaction that owns its row; a deadlock is refused
//!   (40P01) and the other transaction goes on;
//! - `READ ONLY` refuses writes (25006);
//! - an autocommit statement spanning tablets is all or nothing;
//! - COPY FROM in a block is undone by ROLLBACK; DDL in a block warns;
//! - the bank workload: transfers in transactions from many sessions, on three
//!   replicated tablet servers with maintenance running, keep the total at every
//!   snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cairn_sql::SqlSession;

use crate::{count, err, q, sql_cluster};

/// Runs one statement, panicking on error.
async fn run(s: &SqlSession, sql: &str) {
    if let Err(e) = s.execute(sql).await {
        panic!("{sql}: {e}");
    }
}

/// `SELECT v FROM t WHERE k = …` as a number.
async fn value(s: &SqlSession, table: &str, k: i64) -> Option<i64> {
    q(s, &format!("SELECT v FROM {table} WHERE k = {k}"))
        .await
        .first()
        .map(|r| r[0].parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commit_publishes_and_rollback_discards_across_tablets() {
    let (_cl, engine) = sql_cluster(1).await;
    let a = engine.session();
    let b = engine.session();
    run(
        &a,
        "CREATE TABLE acct (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 4",
    )
    .await;
    count(&a, "INSERT INTO acct VALUES (1, 10), (2, 20)").await;

    run(&a, "BEGIN").await;
    let values: Vec<String> = (10..50).map(|k| format!("({k}, {k})")).collect();
    assert_eq!(
        count(
            &a,
            &format!("INSERT INTO acct VALUES {}", values.join(", "))
        )
        .await,
        40
    );
    count(&a, "UPDATE acct SET v = v + 1 WHERE k = 1").await;
    count(&a, "DELETE FROM acct WHERE k = 2").await;
    // The block sees its own rows; nobody else does.
    assert_eq!(
        q(&a, "SELECT count(*), sum(v) FROM acct").await[0],
        ["41", "1191"]
    );
    assert_eq!(
        q(&b, "SELECT count(*), sum(v) FROM acct").await[0],
        ["2", "30"]
    );
    run(&a, "ROLLBACK").await;
    assert_eq!(
        q(&a, "SELECT count(*), sum(v) FROM acct").await[0],
        ["2", "30"]
    );

    run(&a, "START TRANSACTION").await;
    count(
        &a,
        &format!("INSERT INTO acct VALUES {}", values.join(", ")),
    )
    .await;
    count(&a, "UPDATE acct SET v = v + 1 WHERE k = 1").await;
    assert_eq!(q(&b, "SELECT count(*) FROM acct").await[0], ["2"]);
    run(&a, "COMMIT").await;
    assert_eq!(
        q(&b, "SELECT count(*), sum(v) FROM acct").await[0],
        ["42", "1211"]
    );
    // Outside a block, COMMIT and ROLLBACK change nothing.
    run(&a, "ROLLBACK").await;
    assert_eq!(q(&b, "SELECT count(*) FROM acct").await[0], ["42"]);
    // A session dropped inside a block rolls it back and frees its rows.
    let c = engine.session();
    run(&c, "BEGIN").await;
    count(&c, "UPDATE acct SET v = 0 WHERE k = 1").await;
    drop(c);
    count(&b, "UPDATE acct SET v = 5 WHERE k = 1").await;
    assert_eq!(value(&a, "acct", 1).await, Some(5));
}

/// COPY FROM inside a block writes the block's rows: its statements see them, others
/// do not, ROLLBACK undoes them and COMMIT publishes them, also for a table without a
/// primary key. A schema change inside a block warns that ROLLBACK will not undo it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_in_a_block_is_undone_by_rollback() {
    let (_cl, engine) = sql_cluster(1).await;
    let a = engine.session();
    let b = engine.session();
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rows.csv");
    let rows: String = (0..300).map(|k| format!("{k},{}\n", k * 2)).collect();
    std::fs::write(&csv, rows).unwrap();
    let copy = |t: &str| format!("COPY {t} FROM '{}' WITH (FORMAT csv)", csv.display());
    run(
        &a,
        "CREATE TABLE keyed (k BIGINT PRIMARY KEY, v BIGINT) PARTITION BY HASH (k) PARTITIONS 3",
    )
    .await;
    run(&a, "CREATE TABLE heap (k BIGINT, v BIGINT)").await;
    assert!(a.take_notices().is_empty());
    for t in ["keyed", "heap"] {
        run(&a, "BEGIN").await;
        assert_eq!(count(&a, &copy(t)).await, 300, "{t}");
        assert_eq!(
            q(&a, &format!("SELECT count(*), sum(v) FROM {t}")).await[0],
            ["300", "89700"],
            "{t}: the block sees its COPY"
        );
        assert_eq!(q(&b, &format!("SELECT count(*) FROM {t}")).await[0], ["0"]);
        run(&a, "ROLLBACK").await;
        assert_eq!(
            q(&b, &format!("SELECT count(*) FROM {t}")).await[0],
            ["0"],
            "{t}: ROLLBACK undoes the COPY"
        );
        run(&a, "BEGIN").await;
        count(&a, &copy(t)).await;
        run(&a, "COMMIT").await;
        assert_eq!(
            q(&b, &format!("SELECT count(*), sum(v) FROM {t}")).await[0],
            ["300", "89700"],
            "{t}: COMMIT publishes the COPY"
        );
    }
    // A duplicate key fails the COPY, and nothing of it stays after ROLLBACK.
    run(&a, "BEGIN").await;
    count(&a, "INSERT INTO keyed VALUES (1000, 1)").await;
    assert_eq!(err(&a, &copy("keyed")).await.sqlstate(), "23505");
    run(&a, "ROLLBACK").await;
    assert_eq!(q(&b, "SELECT count(*) FROM keyed").await[0], ["300"]);
    // DDL in a block takes effect at once, with a warning that says so.
    run(&a, "BEGIN").await;
    run(&a, "CREATE TABLE made_in_block (k INT PRIMARY KEY)").await;
    let notices = a.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].severity, "WARNING");
    assert!(
        notices[0].message.contains("not undone by ROLLBACK"),
        "{notices:?}"
    );
    run(&a, "ROLLBACK").await;
    assert_eq!(q(&b, "SELECT count(*) FROM made_in_block").await[0], ["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn isolation_levels_read_and_conflict_as_postgres() {
    let (_cl, engine) = sql_cluster(1).await;
    let a = engine.session();
    let b = engine.session();
    run(
        &a,
        "CREATE TABLE iso (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 2",
    )
    .await;
    count(&a, "INSERT INTO iso VALUES (1, 1), (2, 2)").await;

    // READ COMMITTED: each statement sees what committed before it.
    run(&a, "BEGIN").await;
    assert_eq!(value(&a, "iso", 1).await, Some(1));
    count(&b, "UPDATE iso SET v = 10 WHERE k = 1").await;
    assert_eq!(value(&a, "iso", 1).await, Some(10));
    // ... and an UPDATE of a row changed since the statement began re-reads it.
    count(&a, "UPDATE iso SET v = v + 1 WHERE k = 1").await;
    run(&a, "COMMIT").await;
    assert_eq!(value(&b, "iso", 1).await, Some(11));

    // REPEATABLE READ: the first read fixes the snapshot ...
    run(&a, "BEGIN ISOLATION LEVEL REPEATABLE READ").await;
    assert_eq!(q(&a, "SELECT sum(v) FROM iso").await[0], ["13"]);
    count(&b, "UPDATE iso SET v = 20 WHERE k = 2").await;
    count(&b, "INSERT INTO iso VALUES (3, 3)").await;
    assert_eq!(q(&a, "SELECT sum(v) FROM iso").await[0], ["13"]);
    // ... its own writes show over it ...
    count(&a, "UPDATE iso SET v = 100 WHERE k = 1").await;
    assert_eq!(q(&a, "SELECT sum(v) FROM iso").await[0], ["102"]);
    // ... and a row another transaction changed since cannot be changed: 40001.
    let e = err(&a, "UPDATE iso SET v = v + 1 WHERE k = 2").await;
    assert_eq!(e.sqlstate(), "40001", "{e}");
    run(&a, "ROLLBACK").await;
    assert_eq!(q(&b, "SELECT sum(v) FROM iso").await[0], ["34"]);

    // SET TRANSACTION before the first statement; refused after it.
    run(&a, "BEGIN").await;
    run(&a, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE").await;
    assert_eq!(q(&a, "SELECT sum(v) FROM iso").await[0], ["34"]);
    count(&b, "UPDATE iso SET v = 0 WHERE k = 3").await;
    assert_eq!(q(&a, "SELECT sum(v) FROM iso").await[0], ["34"]);
    let e = err(&a, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED").await;
    assert_eq!(e.sqlstate(), "25001", "{e}");
    run(&a, "COMMIT").await;

    // READ ONLY refuses writes.
    run(&a, "BEGIN READ ONLY").await;
    let e = err(&a, "INSERT INTO iso VALUES (9, 9)").await;
    assert_eq!(e.sqlstate(), "25006", "{e}");
    assert!(e.to_string().contains("read-only transaction"), "{e}");
    run(&a, "ROLLBACK").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_wait_for_the_owner_and_deadlocks_are_refused() {
    let (_cl, engine) = sql_cluster(1).await;
    let a = Arc::new(engine.session());
    let b = Arc::new(engine.session());
    // One tablet: a cycle of waits is seen there.
    run(&a, "SET cairn.default_hash_buckets = 1").await;
    run(
        &a,
        "CREATE TABLE locks (k BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
    )
    .await;
    count(&a, "INSERT INTO locks VALUES (1, 0), (2, 0)").await;

    // A waits for B's row and then re-reads it: both increments count.
    run(&b, "BEGIN").await;
    count(&b, "UPDATE locks SET v = v + 1 WHERE k = 1").await;
    run(&a, "BEGIN").await;
    let a2 = a.clone();
    let waiting =
        tokio::spawn(async move { count(&a2, "UPDATE locks SET v = v + 1 WHERE k = 1").await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the second writer waits for the first"
    );
    run(&b, "COMMIT").await;
    assert_eq!(waiting.await.unwrap(), 1);
    run(&a, "COMMIT").await;
    assert_eq!(value(&b, "locks", 1).await, Some(2));

    // A holds 1 and wants 2; B holds 2 and wants 1.
    run(&a, "BEGIN").await;
    run(&b, "BEGIN").await;
    count(&a, "UPDATE locks SET v = v + 10 WHERE k = 1").await;
    count(&b, "UPDATE locks SET v = v + 10 WHERE k = 2").await;
    let a2 = a.clone();
    let first =
        tokio::spawn(async move { a2.execute("UPDATE locks SET v = v + 10 WHERE k = 2").await });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // B's wait closes the cycle: refused at once, not after a timeout ...
    let started = std::time::Instant::now();
    let lost = b
        .execute("UPDATE locks SET v = v + 10 WHERE k = 1")
        .await
        .expect_err("closing a cycle of waits is refused");
    assert!(started.elapsed() < cairn_tablet::txn::DEADLOCK_TIMEOUT);
    assert_eq!(lost.sqlstate(), "40P01", "{lost}");
    assert!(lost.to_string().contains("deadlock"), "{lost}");
    // ... and its transaction is rolled back at once, so A goes on before B's
    // ROLLBACK; until then B's statements are refused.
    first.await.unwrap().unwrap();
    assert_eq!(err(&b, "SELECT 1").await.sqlstate(), "25P02");
    run(&a, "COMMIT").await;
    run(&b, "ROLLBACK").await;
    assert_eq!(q(&a, "SELECT sum(v) FROM locks").await[0], ["22"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlocks_across_tablets_end_within_the_deadlock_timeout() {
    let (_cl, engine) = sql_cluster(1).await;
    let s = engine.session();
    run(
        &s,
        "CREATE TABLE spread_locks (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 8",
    )
    .await;
    let values: Vec<String> = (0..16).map(|k| format!("({k}, 0)")).collect();
    count(
        &s,
        &format!("INSERT INTO spread_locks VALUES {}", values.join(", ")),
    )
    .await;
    // Every pair of keys, both orders at once: some pairs share a tablet, most do not.
    let started = std::time::Instant::now();
    let mut winners = 0;
    for (x, y) in [(0, 1), (2, 9), (3, 12), (5, 14)] {
        let (a, b) = (Arc::new(engine.session()), Arc::new(engine.session()));
        run(&a, "BEGIN").await;
        run(&b, "BEGIN").await;
        count(
            &a,
            &format!("UPDATE spread_locks SET v = v + 1 WHERE k = {x}"),
        )
        .await;
        count(
            &b,
            &format!("UPDATE spread_locks SET v = v + 1 WHERE k = {y}"),
        )
        .await;
        let (a2, b2) = (a.clone(), b.clone());
        let ra = tokio::spawn(async move {
            a2.execute(&format!("UPDATE spread_locks SET v = v + 1 WHERE k = {y}"))
                .await
        });
        let rb = tokio::spawn(async move {
            b2.execute(&format!("UPDATE spread_locks SET v = v + 1 WHERE k = {x}"))
                .await
        });
        for (s, r) in [(a, ra.await.unwrap()), (b, rb.await.unwrap())] {
            match r {
                Ok(_) => {
                    run(&s, "COMMIT").await;
                    winners += 1;
                }
                Err(e) => {
                    assert_eq!(e.sqlstate(), "40P01", "{e}");
                    run(&s, "ROLLBACK").await;
                }
            }
        }
    }
    assert!(winners <= 4, "at most one of each pair commits");
    assert_eq!(
        q(&s, "SELECT sum(v) FROM spread_locks").await[0][0],
        (winners * 2).to_string()
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn autocommit_statements_are_atomic_across_tablets() {
    let (_cl, engine) = sql_cluster(1).await;
    let s = engine.session();
    run(
        &s,
        "CREATE TABLE spread (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 4",
    )
    .await;
    count(&s, "INSERT INTO spread VALUES (7, 7)").await;
    // 50 rows over four tablets, one of them a duplicate: nothing is written.
    let values: Vec<String> = (0..50).map(|k| format!("({k}, {k})")).collect();
    let e = err(
        &s,
        &format!("INSERT INTO spread VALUES {}", values.join(", ")),
    )
    .await;
    assert_eq!(e.sqlstate(), "23505", "{e}");
    assert_eq!(q(&s, "SELECT count(*) FROM spread").await[0], ["1"]);
    count(&s, "DELETE FROM spread").await;
    assert_eq!(
        count(
            &s,
            &format!("INSERT INTO spread VALUES {}", values.join(", "))
        )
        .await,
        50
    );
    // An UPDATE over every tablet that fails on one row changes none.
    let e = err(&s, "UPDATE spread SET v = 10 / (k - 33)").await;
    assert_eq!(e.sqlstate(), "22012", "{e}");
    assert_eq!(q(&s, "SELECT sum(v) FROM spread").await[0], ["1225"]);
}

/// The bank workload: `ACCOUNTS` accounts, transfers between random pairs in
/// transactions from `WORKERS` sessions (retrying 40001 and 40P01), and readers
/// checking the total at every snapshot, while the tablets flush and compact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bank_transfers_keep_the_total_replicated_with_maintenance() {
    const ACCOUNTS: i64 = 8;
    const WORKERS: usize = 4;
    const TRANSFERS: usize = 25;
    let (_cl, engine) = sql_cluster(3).await;
    let s = engine.session();
    run(
        &s,
        "CREATE TABLE bank (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 3 WITH (replicas = 3)",
    )
    .await;
    let values: Vec<String> = (0..ACCOUNTS).map(|k| format!("({k}, 100)")).collect();
    count(
        &s,
        &format!("INSERT INTO bank VALUES {}", values.join(", ")),
    )
    .await;
    let total = (ACCOUNTS * 100).to_string();

    let done = Arc::new(AtomicBool::new(false));
    let retries = Arc::new(AtomicU64::new(0));
    let mut workers = vec![];
    for w in 0..WORKERS {
        let (s, retries) = (engine.session(), retries.clone());
        workers.push(tokio::spawn(async move {
            let mut n = 0;
            while n < TRANSFERS {
                let from = ((w * 7 + n * 3) as i64) % ACCOUNTS;
                let to = (from + 1 + (n as i64 % (ACCOUNTS - 1))) % ACCOUNTS;
                let amount = 1 + (n % 5);
                let isolation = if n % 2 == 0 {
                    "READ COMMITTED"
                } else {
                    "REPEATABLE READ"
                };
                let steps = [
                    format!("BEGIN ISOLATION LEVEL {isolation}"),
                    format!("UPDATE bank SET v = v - {amount} WHERE k = {from}"),
                    format!("UPDATE bank SET v = v + {amount} WHERE k = {to}"),
                    "COMMIT".to_string(),
                ];
                let mut failed = None;
                for step in &steps {
                    if let Err(e) = s.execute(step).await {
                        failed = Some(e);
                        break;
                    }
                }
                match failed {
                    None => n += 1,
                    Some(e) if matches!(e.sqlstate(), "40001" | "40P01") => {
                        retries.fetch_add(1, Ordering::Relaxed);
                        s.execute("ROLLBACK").await.unwrap();
                    }
                    Some(e) => panic!("transfer: {e}"),
                }
            }
        }));
    }
    let reader = {
        let (s, done, total) = (engine.session(), done.clone(), total.clone());
        tokio::spawn(async move {
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) {
                assert_eq!(
                    q(&s, "SELECT sum(v) FROM bank").await[0][0],
                    total,
                    "the total at one snapshot"
                );
                reads += 1;
            }
            reads
        })
    };
    // Flushes (MemRowSets and delta stores to disk) while transactions commit.
    let maintenance = {
        let done = done.clone();
        let client = engine.client().clone();
        let table = client.open_table("bank").await.unwrap();
        tokio::spawn(async move {
            let mut flushes = 0;
            while !done.load(Ordering::Relaxed) {
                client.flush_table(&table).await.unwrap();
                flushes += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            flushes
        })
    };
    for w in workers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let reads = reader.await.unwrap();
    let flushes = maintenance.await.unwrap();
    assert!(reads > 0);
    assert_eq!(q(&s, "SELECT sum(v) FROM bank").await[0][0], total);
    eprintln!(
        "bank: {} transfers, {} retries, {reads} consistent reads, {flushes} flushes",
        WORKERS * TRANSFERS,
        retries.load(Ordering::Relaxed)
    );
}

/// Flight SQL's BeginTransaction / EndTransaction: statements naming the transaction
/// see its rows, others do not until the commit; a rollback discards them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flight_sql_transactions_commit_and_roll_back() {
    use arrow_flight::sql::EndTransaction;
    use arrow_flight::sql::client::FlightSqlServiceClient;

    let (_cl, engine) = sql_cluster(1).await;
    let s = engine.session();
    run(
        &s,
        "CREATE TABLE flight_tx (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 2",
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(cairn_flightsql::serve(
        engine.clone(),
        listener,
        cairn_flightsql::FlightOptions::default(),
        std::future::pending(),
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    let total = async |client: &mut FlightSqlServiceClient<_>, txn: Option<bytes::Bytes>| {
        let info = client
            .execute("SELECT count(*) FROM flight_tx".into(), txn)
            .await
            .unwrap();
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let batches: Vec<_> =
            futures::TryStreamExt::try_collect(client.do_get(ticket).await.unwrap())
                .await
                .unwrap();
        crate::strings(&batches)[0][0].clone()
    };

    let txn = client.begin_transaction().await.unwrap();
    let n = client
        .execute_update(
            "INSERT INTO flight_tx VALUES (1, 1), (2, 2), (3, 3)".into(),
            Some(txn.clone()),
        )
        .await
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(total(&mut client, Some(txn.clone())).await, "3");
    assert_eq!(total(&mut client, None).await, "0");
    client
        .end_transaction(txn.clone(), EndTransaction::Commit)
        .await
        .unwrap();
    assert_eq!(total(&mut client, None).await, "3");
    // An ended transaction is gone.
    let e = client
        .execute_update("DELETE FROM flight_tx".into(), Some(txn))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown transaction"), "{e}");

    let txn = client.begin_transaction().await.unwrap();
    client
        .execute_update("DELETE FROM flight_tx".into(), Some(txn.clone()))
        .await
        .unwrap();
    assert_eq!(total(&mut client, Some(txn.clone())).await, "0");
    client
        .end_transaction(txn, EndTransaction::Rollback)
        .await
        .unwrap();
    assert_eq!(total(&mut client, None).await, "3");
}

/// A coordinator that dies with its transaction open leaves no rows owned for long:
/// its keep-alives stop and the tablet aborts the transaction after the abandon
/// timeout. A live transaction idle for longer than that is kept by its keep-alives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abandoned_transactions_are_aborted_and_live_ones_kept() {
    use std::time::Duration;
    let mut cl = crate::common::InProc::start(1, Duration::from_secs(300)).await;
    cl.ts_limits.txn_abandon_after = Duration::from_secs(5);
    cl.stop_tserver(0).await;
    cl.start_tserver(0).await;
    cl.wait_live(1).await;
    let engine = cairn_sql::SqlEngine::new(cl.in_process_client().await).unwrap();
    let s = engine.session();
    run(
        &s,
        "CREATE TABLE abandoned (k BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
    )
    .await;
    count(&s, "INSERT INTO abandoned VALUES (1, 0), (2, 0)").await;

    // The coordinator: a client in a runtime of its own, which stops with the
    // transaction open (its keep-alive task dies with it).
    let masters = vec![cl.master_addr.clone()];
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let c = cairn_client::Client::connect(&masters).await.unwrap();
            let t = c.open_table("abandoned").await.unwrap();
            let txn = c.begin_transaction();
            let mut w = txn.session(&t);
            let key = [cairn_common::Value::Int64(1)];
            let op = cairn_client::Operation::update(
                &t.schema,
                &key,
                &[("v", cairn_common::Value::Int64(99))],
            )
            .unwrap();
            w.apply(op).await.unwrap();
            // Never committed nor rolled back.
            std::mem::forget(txn);
        });
    })
    .join()
    .unwrap();
    let started = std::time::Instant::now();
    // This write waits for the abandoned owner of row 1, which is aborted.
    count(&s, "UPDATE abandoned SET v = 1 WHERE k = 1").await;
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(25), "{waited:?}");
    assert_eq!(value(&s, "abandoned", 1).await, Some(1));

    // A live transaction idle past the timeout is not aborted.
    run(&s, "BEGIN").await;
    count(&s, "UPDATE abandoned SET v = 2 WHERE k = 2").await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    run(&s, "COMMIT").await;
    assert_eq!(value(&s, "abandoned", 2).await, Some(2));
}
