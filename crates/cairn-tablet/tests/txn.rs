//! Multi-row transactions on one tablet, against an oracle.
//!
//! - `random_transactions_match_the_oracle`: random interleavings of several open
//!   transactions (provisional writes of every op kind, one- and two-phase commits —
//!   some committing at their prepare timestamp, below writes applied after the
//!   prepare — and aborts), single writes on keys no transaction owns, flushes and
//!   compactions, and reopening the tablet from its log with transactions still open or
//!   prepared. After every step each key read at the latest snapshot, and at past
//!   commit timestamps, must match the oracle's committed versions, and each open
//!   transaction must see its own writes.
//! - `bank_transfers_keep_the_total`: concurrent transfer transactions (first committer
//!   wins: a transfer whose accounts changed after its snapshot aborts and retries)
//!   with the maintenance manager running, while readers check that the balances add
//!   up at every snapshot they read.
//!
//! Scans as an open transaction (unordered, ordered, filtered with a limit) are checked
//! the same way. `CAIRN_TXN_SEEDS=n` runs more seeds of the random test.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cairn_common::{ColumnSpec, DataType, HybridTime, Schema, Value};
use cairn_tablet::{
    LocalTablet, OpKind, ReadMode, RowError, RowOp, ScanSpec, TxnDecision, TxnId, TxnOutcome,
    TxnRole,
};
use common::{rows_of, small_options};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("v", DataType::Int64).nullable(),
        ],
        &["k"],
    )
    .unwrap()
}

fn op(kind: OpKind, k: i64, v: Option<i64>) -> RowOp {
    let v = match kind {
        OpKind::Delete | OpKind::DeleteIgnore => None,
        _ => Some(v.map_or(Value::Null, Value::Int64)),
    };
    RowOp::new(kind, vec![Some(Value::Int64(k)), v])
}

fn value_of(row: Option<Vec<Value>>) -> Option<Option<i64>> {
    row.map(|r| match &r[1] {
        Value::Int64(v) => Some(*v),
        _ => None,
    })
}

/// Committed versions per key (timestamp order) and the open transactions' views.
#[derive(Default)]
struct Oracle {
    versions: BTreeMap<i64, BTreeMap<HybridTime, Option<Option<i64>>>>,
    /// Per open transaction: its writes' net effect per key.
    open: BTreeMap<u64, BTreeMap<i64, Option<Option<i64>>>>,
    prepared: BTreeMap<u64, HybridTime>,
    /// Prepared transactions this tablet is the home of (the status record).
    home: BTreeSet<u64>,
    /// The decisions a home recorded: commit timestamp, or `None` for an abort.
    decisions: BTreeMap<u64, Option<HybridTime>>,
}

impl Oracle {
    fn at(&self, k: i64, snap: HybridTime) -> Option<Option<i64>> {
        self.versions
            .get(&k)
            .and_then(|vs| vs.range(..=snap).next_back())
            .and_then(|(_, v)| *v)
    }
    fn owner(&self, k: i64) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, w)| w.contains_key(&k))
            .map(|(t, _)| *t)
    }
    /// The row as `txn` (or a single write, with `None`) sees it now.
    fn view(&self, txn: Option<u64>, k: i64) -> Option<Option<i64>> {
        if let Some(w) = txn.and_then(|t| self.open.get(&t))
            && let Some(v) = w.get(&k)
        {
            return *v;
        }
        self.at(k, HybridTime::MAX)
    }
    /// What an op does to a row: the new row or the error.
    fn effect(
        kind: OpKind,
        now: Option<Option<i64>>,
        v: Option<i64>,
    ) -> Result<Option<Option<i64>>, RowError> {
        match (kind, now) {
            (OpKind::Insert, Some(_)) => Err(RowError::AlreadyPresent),
            (OpKind::Update | OpKind::Delete, None) => Err(RowError::NotFound),
            (OpKind::Delete, Some(_)) => Ok(None),
            _ => Ok(Some(v)),
        }
    }
}

const KEYS: i64 = 12;

fn check(t: &LocalTablet, o: &Oracle, rng: &mut StdRng, ctx: &str) {
    // Below any prepared transaction (a latest read would wait for it to finish).
    let snap = t.safe_time();
    if o.prepared.is_empty() {
        assert!(t.snapshot_for(ReadMode::Latest).unwrap() >= snap);
    }
    for k in 0..KEYS {
        let got = value_of(t.get(&[Value::Int64(k)], ReadMode::Snapshot(snap)).unwrap());
        assert_eq!(
            got,
            o.at(k, snap),
            "{ctx}: key {k} at the latest snapshot {snap:?}"
        );
    }
    // A past commit timestamp.
    let past: Vec<HybridTime> = o
        .versions
        .values()
        .flat_map(|v| v.keys().copied())
        .filter(|ts| *ts <= snap)
        .collect();
    if !past.is_empty() {
        let ts = past[rng.random_range(0..past.len())];
        for k in 0..KEYS {
            let got = value_of(t.get(&[Value::Int64(k)], ReadMode::Snapshot(ts)).unwrap());
            assert_eq!(got, o.at(k, ts), "{ctx}: key {k} at past snapshot {ts:?}");
        }
    }
    for (txn, writes) in &o.open {
        let mut want = BTreeMap::new();
        for k in 0..KEYS {
            let got = value_of(t.get_in_txn(TxnId(*txn), &[Value::Int64(k)], snap).unwrap());
            let w = match writes.get(&k) {
                Some(v) => *v,
                None => o.at(k, snap),
            };
            assert_eq!(got, w, "{ctx}: key {k} as txn {txn} sees it");
            if let Some(v) = w {
                want.insert(k, v);
            }
        }
        // Scans as the transaction: unordered, ordered, and with a predicate and a
        // limit (in key order).
        let scan = |ordered, predicates, limit| {
            let spec = ScanSpec {
                read_mode: ReadMode::Snapshot(snap),
                txn: Some(TxnId(*txn)),
                ordered,
                predicates,
                limit,
                batch_size: 3,
                ..Default::default()
            };
            let s = schema();
            let rows = rows_of(&s, &t.scan(spec).unwrap().collect_all().unwrap());
            rows.into_iter()
                .map(|r| match (&r[0], &r[1]) {
                    (Value::Int64(k), Value::Int64(v)) => (*k, Some(*v)),
                    (Value::Int64(k), _) => (*k, None),
                    _ => panic!("bad row"),
                })
                .collect::<Vec<_>>()
        };
        let mut unordered = scan(false, vec![], None);
        unordered.sort_unstable();
        let all: Vec<(i64, Option<i64>)> = want.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(unordered, all, "{ctx}: txn {txn} scan");
        assert_eq!(
            scan(true, vec![], None),
            all,
            "{ctx}: txn {txn} ordered scan"
        );
        let big: Vec<(i64, Option<i64>)> = all
            .iter()
            .filter(|(_, v)| v.is_some_and(|v| v >= 500))
            .take(3)
            .copied()
            .collect();
        let pred = vec![cairn_common::ColumnPredicate::ge("v", Value::Int64(500))];
        assert_eq!(
            scan(true, pred, Some(3)),
            big,
            "{ctx}: txn {txn} filtered scan"
        );
    }
}

fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut t = LocalTablet::create(dir.path(), schema(), small_options()).unwrap();
    let mut o = Oracle::default();
    let mut next_txn = seed * 1000;
    let kinds = [
        OpKind::Insert,
        OpKind::Update,
        OpKind::Upsert,
        OpKind::Delete,
    ];
    for step in 0..400 {
        let ctx = format!("seed {seed} step {step}");
        match rng.random_range(0..100) {
            // Start a transaction.
            0..8 if o.open.len() < 4 => {
                next_txn += 1;
                o.open.insert(next_txn, BTreeMap::new());
            }
            // A provisional write.
            8..45 => {
                let writers: Vec<u64> = o
                    .open
                    .keys()
                    .filter(|t| !o.prepared.contains_key(t))
                    .copied()
                    .collect();
                if writers.is_empty() {
                    continue;
                }
                let txn = writers[rng.random_range(0..writers.len())];
                let k = rng.random_range(0..KEYS);
                if o.owner(k).is_some_and(|w| w != txn) {
                    continue;
                }
                let kind = kinds[rng.random_range(0..kinds.len())];
                let v = rng
                    .random_range(0..3)
                    .ne(&0)
                    .then(|| rng.random_range(0..1000));
                let want = Oracle::effect(kind, o.view(Some(txn), k), v);
                let res = t.txn_write(TxnId(txn), vec![op(kind, k, v)], true).unwrap();
                match want {
                    Ok(row) => {
                        assert!(res.row_errors.is_empty(), "{ctx}: {:?}", res.row_errors);
                        o.open.get_mut(&txn).unwrap().insert(k, row);
                    }
                    Err(e) => assert_eq!(res.row_errors, vec![(0, e)], "{ctx}"),
                }
            }
            // A single write on a key no transaction owns.
            45..65 => {
                let k = rng.random_range(0..KEYS);
                if o.owner(k).is_some() {
                    continue;
                }
                let kind = kinds[rng.random_range(0..kinds.len())];
                let v = Some(rng.random_range(0..1000));
                let want = Oracle::effect(kind, o.view(None, k), v);
                let res = t.write(vec![op(kind, k, v)]).unwrap();
                match want {
                    Ok(row) => {
                        assert!(res.row_errors.is_empty(), "{ctx}: {:?}", res.row_errors);
                        o.versions.entry(k).or_default().insert(res.ts, row);
                    }
                    Err(e) => assert_eq!(res.row_errors, vec![(0, e)], "{ctx}"),
                }
            }
            // Prepare.
            65..72 => {
                let cands: Vec<u64> = o
                    .open
                    .iter()
                    .filter(|(t, w)| !o.prepared.contains_key(t) && !w.is_empty())
                    .map(|(t, _)| *t)
                    .collect();
                if let Some(&txn) = cands.get(rng.random_range(0..cands.len().max(1))) {
                    let role = match rng.random_range(0..3) {
                        0 => None,
                        1 => Some(TxnRole::Home),
                        _ => Some(TxnRole::Participant {
                            table_id: "t".into(),
                            tablet_id: "home".into(),
                        }),
                    };
                    if role == Some(TxnRole::Home) {
                        o.home.insert(txn);
                    }
                    let p = t.txn_begin_commit(TxnId(txn), role).unwrap();
                    o.prepared.insert(txn, p);
                }
            }
            // Commit (one phase, or at or after the prepare timestamp) or abort.
            72..85 => {
                let Some(&txn) = o.open.keys().nth(rng.random_range(0..o.open.len().max(1))) else {
                    continue;
                };
                let writes = o.open.remove(&txn).unwrap();
                let prepared = o.prepared.remove(&txn);
                let home = o.home.remove(&txn);
                if rng.random_bool(0.25) {
                    assert_eq!(t.txn_finish(TxnId(txn), TxnDecision::Abort).unwrap(), None);
                    assert_eq!(t.txns().outcome(TxnId(txn)), Some(TxnOutcome::Aborted));
                    if home {
                        o.decisions.insert(txn, None);
                    }
                    continue;
                }
                let decision = match prepared {
                    Some(p) if rng.random_bool(0.5) => TxnDecision::Commit(Some(p)),
                    Some(_) => TxnDecision::Commit(Some(t.clock().now())),
                    None if writes.is_empty() => continue,
                    None => TxnDecision::Commit(None),
                };
                let cts = t.txn_finish(TxnId(txn), decision).unwrap().unwrap();
                if let TxnDecision::Commit(Some(want)) = decision {
                    assert_eq!(cts, want);
                }
                if home {
                    o.decisions.insert(txn, Some(cts));
                }
                for (k, row) in writes {
                    o.versions.entry(k).or_default().insert(cts, row);
                }
                // A retry of the same decision changes nothing.
                assert_eq!(t.txn_finish(TxnId(txn), decision).unwrap(), Some(cts));
                assert!(t.txn_finish(TxnId(txn), TxnDecision::Abort).is_err());
            }
            // Maintenance (a cut waits while a transaction is prepared).
            85..92 if o.prepared.is_empty() => match rng.random_range(0..3) {
                0 => {
                    t.flush_mrs().unwrap();
                }
                1 => {
                    t.flush_deltas().unwrap();
                }
                _ => t.flush_all().unwrap(),
            },
            // Reopen from the log: open and prepared transactions come back.
            92..96 => {
                drop(t);
                t = LocalTablet::open(dir.path(), small_options()).unwrap();
                let listed: BTreeSet<u64> = t
                    .txns()
                    .list()
                    .into_iter()
                    .map(|i| {
                        assert_eq!(
                            i.prepared.is_some(),
                            o.prepared.contains_key(&i.txn.0),
                            "{ctx}: prepared state of {} after reopening",
                            i.txn
                        );
                        i.txn.0
                    })
                    .collect();
                let want: BTreeSet<u64> = o
                    .open
                    .iter()
                    .filter(|(_, w)| !w.is_empty())
                    .map(|(t, _)| *t)
                    .collect();
                assert_eq!(listed, want, "{ctx}: open transactions after reopening");
                // A home's decisions outlive the records they came from.
                for (txn, d) in &o.decisions {
                    let want = d.map_or(TxnOutcome::Aborted, TxnOutcome::Committed);
                    assert_eq!(
                        t.txns().decision(TxnId(*txn)),
                        Some(want),
                        "{ctx}: decision of txn {txn} after reopening"
                    );
                }
            }
            _ => {}
        }
        check(&t, &o, &mut rng, &ctx);
    }
    // End everything and compare the whole table.
    let open: Vec<u64> = o.open.keys().copied().collect();
    for txn in open {
        t.txn_finish(TxnId(txn), TxnDecision::Abort).unwrap();
    }
    t.flush_all().unwrap();
    drop(t);
    let t = LocalTablet::open(dir.path(), small_options()).unwrap();
    assert!(t.txns().list().is_empty());
    let s = schema();
    let rows = rows_of(
        &s,
        &t.scan(ScanSpec::default()).unwrap().collect_all().unwrap(),
    );
    let got: BTreeMap<i64, Option<i64>> = rows
        .into_iter()
        .map(|r| match (&r[0], &r[1]) {
            (Value::Int64(k), Value::Int64(v)) => (*k, Some(*v)),
            (Value::Int64(k), _) => (*k, None),
            _ => panic!("bad row"),
        })
        .collect();
    let want: BTreeMap<i64, Option<i64>> = (0..KEYS)
        .filter_map(|k| o.at(k, HybridTime::MAX).map(|v| (k, v)))
        .collect();
    assert_eq!(got, want, "seed {seed}: final contents");
}

#[test]
fn random_transactions_match_the_oracle() {
    let extra: u64 = std::env::var("CAIRN_TXN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in [1, 2, 3, 4, 5, 6].into_iter().chain(100..100 + extra) {
        run_seed(seed);
    }
}

#[test]
fn a_write_waits_for_the_transaction_that_owns_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), schema(), small_options()).unwrap();
    t.write(vec![op(OpKind::Insert, 1, Some(10))]).unwrap();
    let txn = TxnId(7);
    t.txn_write(txn, vec![op(OpKind::Update, 1, Some(11))], true)
        .unwrap();
    let t2 = t.clone();
    let writer =
        std::thread::spawn(move || t2.write(vec![op(OpKind::Update, 1, Some(20))]).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !writer.is_finished(),
        "the single write must wait for the transaction"
    );
    // A flush is not held up by an open (unprepared) transaction.
    t.flush_all().unwrap();
    let p = t.txn_begin_commit(txn, None).unwrap();
    // While prepared, a latest read waits too (it must not read below writes
    // acknowledged after the prepare).
    let t4 = t.clone();
    let reader = std::thread::spawn(move || t4.snapshot_for(ReadMode::Latest).unwrap());
    // While prepared, a flush waits; it goes on once the transaction commits.
    let t3 = t.clone();
    let flusher = std::thread::spawn(move || t3.flush_all().unwrap());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !flusher.is_finished(),
        "a maintenance cut must wait for a prepared transaction"
    );
    let cts = t
        .txn_finish(txn, TxnDecision::Commit(Some(p)))
        .unwrap()
        .unwrap();
    flusher.join().unwrap();
    assert!(reader.join().unwrap() >= cts);
    let w = writer.join().unwrap();
    assert!(w.row_errors.is_empty());
    assert!(w.ts > cts);
    let at = |ts| value_of(t.get(&[Value::Int64(1)], ReadMode::Snapshot(ts)).unwrap());
    assert_eq!(at(cts.prev()), Some(Some(10)));
    assert_eq!(at(cts), Some(Some(11)));
    assert_eq!(at(w.ts), Some(Some(20)));
    // The ended transaction takes no more writes.
    assert!(
        t.txn_write(txn, vec![op(OpKind::Update, 1, Some(1))], true)
            .is_err()
    );
}

#[test]
fn bank_transfers_keep_the_total() {
    const ACCOUNTS: i64 = 6;
    const START: i64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), schema(), small_options()).unwrap();
    t.write(
        (0..ACCOUNTS)
            .map(|k| op(OpKind::Insert, k, Some(START)))
            .collect(),
    )
    .unwrap();
    let maint = t.start_maintenance();
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(1));
    let balance = |t: &LocalTablet, txn: TxnId, k: i64, snap| match value_of(
        t.get_in_txn(txn, &[Value::Int64(k)], snap).unwrap(),
    ) {
        Some(Some(v)) => v,
        other => panic!("account {k} is {other:?}"),
    };
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let (t, committed, next) = (t.clone(), committed.clone(), next.clone());
        workers.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(w);
            for _ in 0..60 {
                loop {
                    let txn = TxnId(next.fetch_add(1, Ordering::Relaxed));
                    let from = rng.random_range(0..ACCOUNTS);
                    let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
                    let snap = t.snapshot_for(ReadMode::Latest).unwrap();
                    let amount = rng.random_range(1..20);
                    let (a, b) = (balance(&t, txn, from, snap), balance(&t, txn, to, snap));
                    let mut ops = vec![
                        op(OpKind::Update, from, Some(a - amount)),
                        op(OpKind::Update, to, Some(b + amount)),
                    ];
                    for o in &mut ops {
                        o.condition.unchanged_since = Some(snap);
                    }
                    let res = t.txn_write(txn, ops, true).unwrap();
                    if !res.row_errors.is_empty() {
                        // First committer wins: start over at a new snapshot.
                        t.txn_finish(txn, TxnDecision::Abort).unwrap();
                        continue;
                    }
                    let decision = if rng.random_bool(0.5) {
                        TxnDecision::Commit(Some(t.txn_begin_commit(txn, None).unwrap()))
                    } else {
                        TxnDecision::Commit(None)
                    };
                    t.txn_finish(txn, decision).unwrap();
                    committed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }));
    }
    let reader = {
        let (t, stop) = (t.clone(), stop.clone());
        std::thread::spawn(move || {
            let s = schema();
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) || reads == 0 {
                let snap = t.snapshot_for(ReadMode::Latest).unwrap();
                let batches = t
                    .scan(ScanSpec {
                        read_mode: ReadMode::Snapshot(snap),
                        ..Default::default()
                    })
                    .unwrap()
                    .collect_all()
                    .unwrap();
                let total: i64 = rows_of(&s, &batches)
                    .iter()
                    .map(|r| match r[1] {
                        Value::Int64(v) => v,
                        _ => panic!("NULL balance"),
                    })
                    .sum();
                assert_eq!(total, ACCOUNTS * START, "balances at {snap:?}");
                reads += 1;
            }
            reads
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    maint.stop();
    assert_eq!(committed.load(Ordering::Relaxed), 180);
    assert!(t.txns().list().is_empty());
}
