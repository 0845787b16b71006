//! Two-phase commit under crashes: a coordinator that dies in every phase, and
//! participants (tablet servers) that restart in every phase. Whatever happens, each
//! transaction ends all-or-nothing on every tablet, its keys are freed, and no
//! participant stays prepared: the home tablet's status record decides.
//!
//! The tests drive the phases themselves with raw `TxnControl` calls (the test is the
//! coordinator, and "dies" by going silent), and through `Transaction::commit` with
//! failpoints. Failpoints are process-wide, which is why these tests have a binary of
//! their own.

mod common;

use std::time::{Duration, Instant};

use cairn_client::{Client, Operation, ReadMode, Table, Transaction};
use cairn_common::Value;
use cairn_proto as pb;
use common::*;

/// Rows of the test table: ids 0..ROWS, each with n = 100 before any transaction.
const ROWS: i64 = 8;

/// An in-process cluster of three tablet servers that give up on a silent coordinator
/// after five seconds, with table `acct` (4 tablets, one replica each, spread over
/// the servers) holding ROWS rows.
async fn cluster() -> (InProc, Client, Table) {
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    cl.ts_limits.txn_abandon_after = Duration::from_secs(5);
    for i in 0..3 {
        cl.stop_tserver(i).await;
        cl.start_tserver(i).await;
    }
    cl.wait_live(3).await;
    let c = cl.client().await;
    c.create_table(table_spec("acct", 4, 1)).await.unwrap();
    let t = c.open_table("acct").await.unwrap();
    let mut s = c.new_session(&t);
    for id in 0..ROWS {
        s.apply(Operation::insert(vec![
            Value::Int64(id),
            Value::Null,
            Value::Int64(100),
        ]))
        .await
        .unwrap();
    }
    assert!(s.flush().await.unwrap().is_empty());
    (cl, c, t)
}

/// A transaction that sets every row's n to 1000 + id, written but not committed.
async fn transfer(c: &Client, t: &Table) -> Transaction {
    let txn = c.begin_transaction();
    let mut s = txn.session(t);
    for id in 0..ROWS {
        let op = Operation::update(
            &t.schema,
            &[Value::Int64(id)],
            &[("n", Value::Int64(1000 + id))],
        )
        .unwrap();
        s.apply(op).await.unwrap();
    }
    assert!(s.flush().await.unwrap().is_empty());
    assert!(
        txn.participants() > 2,
        "the rows should span three or more tablets"
    );
    txn
}

/// Every row's n at the latest snapshot, or `None` if the read failed (a snapshot
/// waiting for a prepared transaction may time out).
async fn read_n(c: &Client, t: &Table) -> Option<Vec<i64>> {
    let r = c
        .scan(t)
        .projection(["id", "n"])
        .read_mode(ReadMode::Latest)
        .timeout(Duration::from_secs(3))
        .execute()
        .await
        .ok()?;
    let mut rows = Vec::new();
    for b in &r.batches {
        let ids = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        let ns = b
            .column(1)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        for i in 0..b.num_rows() {
            rows.push((ids.value(i), ns.value(i)));
        }
    }
    rows.sort_unstable();
    Some(rows.into_iter().map(|(_, n)| n).collect())
}

/// Waits until the transaction is resolved everywhere, checking every read on the
/// way: all rows old (aborted) or all new (committed), never a mix. Then checks that
/// its keys are free (a plain write to each succeeds at once). Returns whether it
/// committed.
async fn settled(c: &Client, t: &Table, what: &str) -> bool {
    let old: Vec<i64> = vec![100; ROWS as usize];
    let new: Vec<i64> = (0..ROWS).map(|id| 1000 + id).collect();
    let until = Instant::now() + Duration::from_secs(60);
    let committed = loop {
        assert!(
            Instant::now() < until,
            "{what}: the transaction was never resolved"
        );
        // Each key written by a plain write waits for the transaction owning it, so
        // an update that goes through in time shows the key is free.
        if let Some(rows) = read_n(c, t).await {
            assert!(
                rows == old || rows == new,
                "{what}: a partial transaction is visible: {rows:?}"
            );
            let mut s = c.new_session(t);
            s.set_timeout(Duration::from_millis(500));
            let mut free = true;
            for id in 0..ROWS {
                let same = rows[id as usize];
                let op =
                    Operation::update(&t.schema, &[Value::Int64(id)], &[("n", Value::Int64(same))])
                        .unwrap();
                if s.apply(op).await.is_err() {
                    free = false;
                }
            }
            if free && s.flush().await.is_ok_and(|e| e.is_empty()) {
                break rows == new;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // The state stays put.
    let rows = read_n(c, t).await.expect("a read after resolution");
    assert_eq!(rows == new, committed, "{what}: the outcome changed");
    committed
}

/// One `TxnControl` call to whichever server leads `tablet_id`, retried until one
/// answers (or `deadline`).
async fn control(
    cl: &InProc,
    req: pb::TxnControlRequest,
    deadline: Duration,
) -> pb::TxnControlResponse {
    let until = Instant::now() + deadline;
    loop {
        for addr in &cl.ts_addrs {
            let Ok(mut s) =
                pb::tablet_server_client::TabletServerClient::connect(format!("http://{addr}"))
                    .await
            else {
                continue;
            };
            if let Ok(r) = s.txn_control(req.clone()).await {
                return r.into_inner();
            }
        }
        assert!(Instant::now() < until, "no server answered {req:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The test as the coordinator: prepares, commits at the home.
struct Coordinator<'a> {
    cl: &'a InProc,
    txn: u64,
    /// Participants in tablet-id order (the first is the home), with their tables.
    parts: Vec<(String, Table)>,
}

impl Coordinator<'_> {
    fn home(&self) -> &str {
        &self.parts[0].0
    }

    /// Prepares participant `i` (0 = the home); returns its prepare timestamp.
    async fn prepare(&self, i: usize) -> u64 {
        let (tablet, _) = &self.parts[i];
        let req = pb::TxnControlRequest {
            tablet_id: tablet.clone(),
            txn_id: self.txn,
            action: pb::TxnAction::TxnBeginCommit as i32,
            is_home: i == 0,
            home_table_id: if i == 0 {
                String::new()
            } else {
                self.parts[0].1.id.clone()
            },
            home_tablet_id: if i == 0 {
                String::new()
            } else {
                self.home().to_string()
            },
            ..Default::default()
        };
        control(self.cl, req, Duration::from_secs(20))
            .await
            .timestamp
    }

    async fn prepare_all(&self) -> u64 {
        let mut ts = 0;
        for i in 0..self.parts.len() {
            ts = ts.max(self.prepare(i).await);
        }
        ts
    }

    async fn commit(&self, i: usize, ts: u64) {
        let req = pb::TxnControlRequest {
            tablet_id: self.parts[i].0.clone(),
            txn_id: self.txn,
            action: pb::TxnAction::TxnCommit as i32,
            commit_timestamp: ts,
            ..Default::default()
        };
        control(self.cl, req, Duration::from_secs(30)).await;
    }

    /// The server index hosting participant `i` (one replica per tablet).
    async fn server_of(&self, c: &Client, i: usize) -> usize {
        let (tablet, table) = &self.parts[i];
        let locs = c.table_locations(table, true).await.unwrap();
        let l = locs.iter().find(|l| &l.tablet_id == tablet).unwrap();
        let addr = &l.replicas[0].addr;
        self.cl.ts_addrs.iter().position(|a| a == addr).unwrap()
    }
}

/// Starts a transaction and takes it over: the returned coordinator drives its
/// commit; dropping the `Transaction` handle stops its keep-alives (the coordinator
/// "dies" whenever the test stops calling).
async fn take_over<'a>(cl: &'a InProc, c: &Client, t: &Table) -> Coordinator<'a> {
    let txn = transfer(c, t).await;
    let co = Coordinator {
        cl,
        txn: txn.id(),
        parts: txn.tablets(),
    };
    drop(txn);
    co
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_dies_after_preparing_some_participants() {
    let (cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    for i in 1..co.parts.len() {
        co.prepare(i).await;
    }
    assert!(!settled(&c, &t, "home unprepared, the rest prepared").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_dies_after_preparing_every_participant() {
    let (cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    co.prepare_all().await;
    assert!(!settled(&c, &t, "all prepared, no decision").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_dies_after_the_home_committed() {
    let (cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    let ts = co.prepare_all().await;
    co.commit(0, ts).await;
    assert!(settled(&c, &t, "committed at the home only").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_dies_after_committing_some_participants() {
    let (cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    let ts = co.prepare_all().await;
    co.commit(0, ts).await;
    co.commit(1, ts).await;
    assert!(settled(&c, &t, "committed at the home and one more").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn participant_restarts_while_prepared_then_commits() {
    let (mut cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    let ts = co.prepare_all().await;
    let server = co.server_of(&c, 1).await;
    let (parts, txn) = (co.parts.clone(), co.txn);
    cl.stop_tserver(server).await;
    cl.start_tserver(server).await;
    let co = Coordinator {
        cl: &cl,
        txn,
        parts,
    };
    for i in 0..co.parts.len() {
        co.commit(i, ts).await;
    }
    assert!(settled(&c, &t, "a participant restarted while prepared").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn participant_restarts_after_the_home_committed() {
    let (mut cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    let ts = co.prepare_all().await;
    co.commit(0, ts).await;
    let server = co.server_of(&c, 1).await;
    cl.stop_tserver(server).await;
    cl.start_tserver(server).await;
    assert!(settled(&c, &t, "a participant restarted after the decision").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn home_restarts_after_deciding() {
    let (mut cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    let ts = co.prepare_all().await;
    co.commit(0, ts).await;
    let server = co.server_of(&c, 0).await;
    cl.stop_tserver(server).await;
    cl.start_tserver(server).await;
    assert!(settled(&c, &t, "the home restarted after committing").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn home_restarts_while_prepared() {
    let (mut cl, c, t) = cluster().await;
    let co = take_over(&cl, &c, &t).await;
    co.prepare_all().await;
    let server = co.server_of(&c, 0).await;
    cl.stop_tserver(server).await;
    cl.start_tserver(server).await;
    assert!(!settled(&c, &t, "the home restarted while prepared").await);
}

/// `Transaction::commit` stopped by failpoints just before and just after the home's
/// commit: the first transaction ends aborted, the second committed; a transaction
/// committed normally afterwards needs no resolver.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commit_interrupted_around_the_decision() {
    let (_cl, c, t) = cluster().await;
    fail::cfg("txn::before_home_commit", "return").unwrap();
    let txn = transfer(&c, &t).await;
    assert!(txn.commit().await.is_err());
    fail::remove("txn::before_home_commit");
    assert!(!settled(&c, &t, "commit stopped before the decision").await);

    fail::cfg("txn::after_home_commit", "return").unwrap();
    let txn = transfer(&c, &t).await;
    assert!(txn.commit().await.is_err());
    fail::remove("txn::after_home_commit");
    assert!(settled(&c, &t, "commit stopped after the decision").await);

    // Back to 100 everywhere, then a normal commit.
    let txn = c.begin_transaction();
    let mut s = txn.session(&t);
    for id in 0..ROWS {
        let op =
            Operation::update(&t.schema, &[Value::Int64(id)], &[("n", Value::Int64(100))]).unwrap();
        s.apply(op).await.unwrap();
    }
    assert!(s.flush().await.unwrap().is_empty());
    txn.commit().await.unwrap();
    let txn = transfer(&c, &t).await;
    let started = Instant::now();
    txn.commit().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        read_n(&c, &t).await.unwrap(),
        (0..ROWS).map(|id| 1000 + id).collect::<Vec<_>>()
    );
}
