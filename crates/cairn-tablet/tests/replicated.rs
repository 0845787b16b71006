//! Randomized test of replicated tablets: three replicas fed one log, as a Raft group
//! feeds them, while
//! - several writer threads run the leader's write path concurrently (validate, lock
//!   rows, check conditions, take a timestamp, append to the log, wait for the leader to
//!   apply) with every op kind on a few hot keys, conditional writes, all-or-nothing
//!   batches and bulk inserts;
//! - each replica applies the log on its own thread, followers lagging at random;
//! - maintenance runs all the time on every replica (tiny flush and compaction
//!   thresholds, plus a thread forcing random flushes and compactions);
//! - followers crash (their tablet dropped without shutdown, as after kill -9) and
//!   restart from their files, applying the log again from their durable index.
//!
//! Afterwards the log is replayed against an oracle that keeps every version of every
//! row; every replica must equal the oracle at the snapshot of every record, the
//! leader's answers must be the oracle's, and every condition the leader checked must
//! have been right at the record's place in the log. `CAIRN_REPLICATED_SEEDS=n` runs
//! more seeds; `CAIRN_REPL_DEBUG=1` records, at every follower crash, each key's stores
//! before and after the restart and at every replay step that changed them, and prints
//! them for the rows that differ. `CAIRN_REPL_NO_CRASH`, `CAIRN_REPL_NO_CHAOS`,
//! `CAIRN_REPL_NO_BULK`, `CAIRN_REPL_NO_MM` and `CAIRN_REPL_OPS=0,2` (forced maintenance
//! kinds) narrow a failure down.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType as ArrowType, Field};
use cairn_common::{ColumnPredicate, ColumnSpec, DataType, HybridClock, HybridTime, Schema, Value};
use cairn_tablet::ops::LogRecord;
use cairn_tablet::{
    MaintenanceManager, OpKind, ReadMode, RowError, RowOp, ScanSpec, Tablet, TabletOptions,
};
use common::rows_of;
use parking_lot::{Condvar, Mutex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: i64 = 40;
const WRITERS: usize = 4;

fn schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("v", DataType::Int64).nullable(),
            ColumnSpec::new("s", DataType::String).nullable(),
        ],
        &["k"],
    )
    .unwrap()
}

/// Options under which maintenance never stops.
fn tiny_options() -> TabletOptions {
    TabletOptions {
        target_rowset_bytes: 1 << 10,
        rows_per_row_group: 8,
        mrs_flush_bytes: 2 << 10,
        dms_flush_bytes: 512,
        max_memstore_age: Duration::from_millis(20),
        compaction_budget_bytes: 64 << 20,
        block_cache: Arc::new(cairn_tablet::cache::BlockCache::new(1 << 20)),
        maintenance_interval: Duration::from_millis(1),
        safe_time_timeout: Duration::from_secs(60),
        ..TabletOptions::default()
    }
}

/// The shared log: records in index order (index = position + 1).
#[derive(Default)]
struct SharedLog {
    records: Mutex<Vec<Arc<Vec<u8>>>>,
    grew: Condvar,
}

impl SharedLog {
    fn append(&self, rec: Vec<u8>) -> u64 {
        let mut r = self.records.lock();
        r.push(Arc::new(rec));
        self.grew.notify_all();
        r.len() as u64
    }
    /// Record `index`, waiting a little for it; `None` if it is not there yet.
    fn get(&self, index: u64) -> Option<Arc<Vec<u8>>> {
        let mut r = self.records.lock();
        if r.len() < index as usize {
            self.grew.wait_for(&mut r, Duration::from_millis(20));
        }
        r.get(index as usize - 1).cloned()
    }
    fn len(&self) -> u64 {
        self.records.lock().len() as u64
    }
}

/// One replica: its tablet, applier thread and maintenance.
struct Replica {
    dir: PathBuf,
    tablet: Mutex<Arc<Tablet>>,
    applied: AtomicU64,
    /// Answers of the leader's applies, by index.
    answers: Mutex<BTreeMap<u64, Vec<(usize, RowError)>>>,
    applied_cv: Condvar,
    applied_mx: Mutex<()>,
}

impl Replica {
    fn tablet(&self) -> Arc<Tablet> {
        self.tablet.lock().clone()
    }
    fn wait_applied(&self, index: u64) {
        let mut g = self.applied_mx.lock();
        while self.applied.load(Ordering::Acquire) < index {
            self.applied_cv.wait_for(&mut g, Duration::from_millis(20));
        }
    }
}

/// What a writer did, for the checks afterwards.
#[derive(Debug)]
enum Written {
    /// A row batch: the ops as sent (with their conditions), the leader's answer, and
    /// the log index (None: nothing was replicated).
    Rows {
        ops: Vec<RowOp>,
        atomic: bool,
        answer: Vec<(usize, RowError)>,
        index: Option<u64>,
    },
}

struct Cluster {
    log: SharedLog,
    replicas: Vec<Replica>,
    propose: Mutex<()>,
    stop: AtomicBool,
}

fn open_replica(dir: &std::path::Path, create: bool) -> Arc<Tablet> {
    let clock = Arc::new(HybridClock::new());
    if create {
        Tablet::create(dir, schema(), tiny_options(), clock).unwrap()
    } else {
        Tablet::open(dir, tiny_options(), clock).unwrap()
    }
}

fn applier(c: &Cluster, r: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let rep = &c.replicas[r];
    loop {
        let next = rep.applied.load(Ordering::Acquire) + 1;
        let Some(rec) = c.log.get(next) else {
            if c.stop.load(Ordering::Acquire) {
                return;
            }
            continue;
        };
        if r > 0 && rng.random_bool(0.05) {
            std::thread::sleep(Duration::from_millis(rng.random_range(0..4)));
        }
        // Holding the slot while applying: a crash (see `run`) happens between records
        // — and may have reset the position meanwhile.
        let slot = rep.tablet.lock();
        if rep.applied.load(Ordering::Acquire) + 1 != next {
            continue;
        }
        let answer = slot.apply(next, &rec).unwrap();
        rep.answers.lock().entry(next).or_insert(answer);
        rep.applied.store(next, Ordering::Release);
        drop(slot);
        rep.applied_cv.notify_all();
    }
}

/// Keys `0..KEYS` take every op, conditions included; bulk inserts go to
/// `KEYS..KEYS + BULK_KEYS`, which row writes also update and delete (unconditionally:
/// a bulk insert takes no row locks, so a condition on its keys is only as exact as the
/// moment it was checked).
const BULK_KEYS: i64 = 20;

fn random_op(rng: &mut StdRng, recent: &[HybridTime]) -> RowOp {
    let k = rng.random_range(0..KEYS + BULK_KEYS);
    let kind = [
        OpKind::Insert,
        OpKind::InsertIgnore,
        OpKind::Upsert,
        OpKind::Update,
        OpKind::UpdateIgnore,
        OpKind::Delete,
        OpKind::DeleteIgnore,
    ][rng.random_range(0..7)];
    let mut values = vec![Some(Value::Int64(k)), None, None];
    if !matches!(kind, OpKind::Delete | OpKind::DeleteIgnore) {
        if kind.is_insert_like() || rng.random_bool(0.7) {
            values[1] = Some(Value::Int64(rng.random_range(-50..50)));
        }
        if rng.random_bool(0.5) {
            values[2] = Some(Value::String(format!("s{}", rng.random_range(0..9))));
        }
    }
    let mut op = RowOp::new(kind, values);
    if k < KEYS {
        match rng.random_range(0..8) {
            0 if !recent.is_empty() => {
                op = op.unchanged_since(recent[rng.random_range(0..recent.len())]);
            }
            1 => {
                op = op.if_matches(vec![ColumnPredicate::ge(
                    "v",
                    Value::Int64(rng.random_range(-50..50)),
                )]);
            }
            _ => {}
        }
    }
    op
}

fn writer(c: &Cluster, seed: u64, batches: usize, recent: &Mutex<Vec<HybridTime>>) -> Vec<Written> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    for _ in 0..batches {
        let leader = c.replicas[0].tablet();
        if std::env::var("CAIRN_REPL_NO_BULK").is_err() && rng.random_bool(0.05) {
            // A bulk insert of a few keys (existing live keys get AlreadyPresent).
            let n = rng.random_range(1..6);
            let ks: Vec<i64> = (0..n)
                .map(|_| rng.random_range(KEYS..KEYS + BULK_KEYS))
                .collect();
            let vs: Vec<i64> = (0..n).map(|_| rng.random_range(-50..50)).collect();
            let batch = RecordBatch::try_new(
                Arc::new(arrow::datatypes::Schema::new(vec![
                    Field::new("k", ArrowType::Int64, false),
                    Field::new("v", ArrowType::Int64, true),
                    Field::new("s", ArrowType::Utf8, true),
                ])),
                vec![
                    Arc::new(Int64Array::from(ks.clone())) as ArrayRef,
                    Arc::new(Int64Array::from(vs.clone())),
                    Arc::new(StringArray::from(vec![Some("bulk"); n])),
                ],
            )
            .unwrap();
            let p = leader.prepare_bulk(&batch).unwrap();
            let pending = leader.register_bulk(&p);
            let (ts, index) = {
                let _o = c.propose.lock();
                let (ts, rec) = leader.start_bulk(&p, None);
                (ts, c.log.append(rec))
            };
            c.replicas[0].wait_applied(index);
            leader.finish_write(ts);
            drop(pending);
            let ops = ks
                .iter()
                .zip(&vs)
                .map(|(k, v)| {
                    RowOp::insert(vec![
                        Value::Int64(*k),
                        Value::Int64(*v),
                        Value::String("bulk".into()),
                    ])
                })
                .collect();
            let answer = c.replicas[0].answers.lock()[&index].clone();
            out.push(Written::Rows {
                ops,
                atomic: false,
                answer,
                index: Some(index),
            });
            recent.lock().push(ts);
            continue;
        }
        let n = rng.random_range(1..6);
        let ops: Vec<RowOp> = {
            let recent = recent.lock();
            let tail = &recent[recent.len().saturating_sub(20)..];
            (0..n).map(|_| random_op(&mut rng, tail)).collect()
        };
        let atomic = rng.random_bool(0.25);
        let mut p = leader.prepare_write(ops.clone()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let locks = leader.lock_rows(&p, deadline).unwrap();
        leader.check_write(&mut p, atomic, deadline).unwrap();
        if p.is_empty() {
            out.push(Written::Rows {
                ops,
                atomic,
                answer: p.row_errors.clone(),
                index: None,
            });
            continue;
        }
        let (ts, index) = {
            let _o = c.propose.lock();
            let (ts, rec) = leader.start_write(&p, atomic, None);
            (ts, c.log.append(rec))
        };
        c.replicas[0].wait_applied(index);
        leader.finish_write(ts);
        drop(locks);
        let applied = c.replicas[0].answers.lock()[&index].clone();
        let mut answer = p.row_errors.clone();
        answer.extend(applied.into_iter().map(|(i, e)| (p.batch_position(i), e)));
        answer.sort_by_key(|(i, _)| *i);
        out.push(Written::Rows {
            ops,
            atomic,
            answer,
            index: Some(index),
        });
        recent.lock().push(ts);
    }
    out
}

/// Forces maintenance ops at random on every replica.
fn chaos(c: &Cluster, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    if std::env::var("CAIRN_REPL_NO_CHAOS").is_ok() {
        return;
    }
    let allowed: Vec<usize> = std::env::var("CAIRN_REPL_OPS")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|_| (0..6).collect());
    while !c.stop.load(Ordering::Acquire) {
        let t = c.replicas[rng.random_range(0..c.replicas.len())].tablet();
        let op = allowed[rng.random_range(0..allowed.len())];
        let r = match op {
            0 => t.flush_mrs().map(|_| ()),
            1 => t.flush_deltas().map(|_| ()),
            2 => t.compact_rowsets(None).map(|_| ()),
            3 => t.flush_all(),
            _ => {
                let comps = t.components();
                match comps.disk.get(rng.random_range(0..comps.disk.len().max(1))) {
                    Some(rs) if rng.random_bool(0.5) => t.major_delta_compaction(rs).map(|_| ()),
                    Some(rs) => t.minor_delta_compaction(rs).map(|_| ()),
                    None => Ok(()),
                }
            }
        };
        match r {
            Ok(()) | Err(cairn_tablet::TabletError::ShutDown) => {}
            Err(e) => panic!("maintenance failed: {e}"),
        }
        std::thread::sleep(Duration::from_micros(rng.random_range(0..800)));
    }
}

/// With `CAIRN_REPL_DEBUG`: per key, what its stores looked like at follower crashes and
/// replay steps (see the module docs).
static DEBUG: std::sync::LazyLock<Mutex<BTreeMap<i64, Vec<String>>>> =
    std::sync::LazyLock::new(Default::default);

type Versions = BTreeMap<i64, Vec<(HybridTime, Option<Vec<Value>>)>>;

/// The oracle: replays the log records, keeping every version, and returns each
/// record's timestamp and expected errors (by record position).
#[allow(clippy::type_complexity)]
fn replay_oracle(
    log: &[Arc<Vec<u8>>],
) -> (Versions, Vec<(u64, HybridTime, Vec<(usize, RowError)>)>) {
    let mut versions: Versions = BTreeMap::new();
    let mut per_record = vec![];
    let current = |v: &Versions, k: i64| -> Option<Vec<Value>> {
        v.get(&k)
            .and_then(|x| x.last())
            .and_then(|(_, r)| r.clone())
    };
    for (i, rec) in log.iter().enumerate() {
        let index = i as u64 + 1;
        match LogRecord::decode(rec).unwrap() {
            LogRecord::Write {
                ts, ops, atomic, ..
            } => {
                let mut errors = vec![];
                let mut changes = vec![];
                let mut scratch: BTreeMap<i64, Option<Vec<Value>>> = BTreeMap::new();
                for (pos, op) in ops.iter().enumerate() {
                    let mut cells: BTreeMap<u32, Value> = op.cells.iter().cloned().collect();
                    let Some(Value::Int64(k)) = cells.remove(&0) else {
                        panic!("no key")
                    };
                    let now = scratch
                        .get(&k)
                        .cloned()
                        .unwrap_or_else(|| current(&versions, k));
                    let full = |cells: &BTreeMap<u32, Value>| {
                        vec![
                            Value::Int64(k),
                            cells.get(&1).cloned().unwrap_or(Value::Null),
                            cells.get(&2).cloned().unwrap_or(Value::Null),
                        ]
                    };
                    let r: Result<Option<Option<Vec<Value>>>, RowError> = match (op.kind, &now) {
                        (OpKind::Insert, Some(_)) => Err(RowError::AlreadyPresent),
                        (OpKind::InsertIgnore, Some(_)) => Ok(None),
                        (OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert, None) => {
                            Ok(Some(Some(full(&cells))))
                        }
                        (OpKind::Upsert | OpKind::Update | OpKind::UpdateIgnore, Some(row)) => {
                            let mut r = row.clone();
                            for (id, v) in &cells {
                                r[*id as usize] = v.clone();
                            }
                            Ok(Some(Some(r)))
                        }
                        (OpKind::Update | OpKind::Delete, None) => Err(RowError::NotFound),
                        (OpKind::UpdateIgnore | OpKind::DeleteIgnore, None) => Ok(None),
                        (OpKind::Delete | OpKind::DeleteIgnore, Some(_)) => Ok(Some(None)),
                    };
                    match r {
                        Err(e) => errors.push((pos, e)),
                        Ok(Some(new)) => {
                            scratch.insert(k, new.clone());
                            changes.push((k, new));
                        }
                        Ok(None) => {}
                    }
                }
                if atomic && !errors.is_empty() {
                    let failed: BTreeMap<usize, RowError> = errors.into_iter().collect();
                    errors = (0..ops.len())
                        .map(|p| (p, failed.get(&p).cloned().unwrap_or(RowError::Aborted)))
                        .collect();
                    changes.clear();
                }
                for (k, new) in changes {
                    versions.entry(k).or_default().push((ts, new));
                }
                per_record.push((index, ts, errors));
            }
            LogRecord::BulkInsert { ts, ipc, .. } => {
                let schema = schema();
                let batch = cairn_tablet::bulk::to_current(
                    &schema,
                    &cairn_tablet::bulk::decode_ipc(&ipc).unwrap(),
                )
                .unwrap();
                let rows: Vec<Vec<Value>> = (0..batch.num_rows())
                    .map(|r| {
                        schema
                            .columns()
                            .iter()
                            .enumerate()
                            .map(|(c, col)| {
                                Value::from_array(batch.column(c).as_ref(), r, &col.data_type)
                                    .unwrap()
                            })
                            .collect()
                    })
                    .collect();
                let mut seen = std::collections::BTreeSet::new();
                let mut errors = vec![];
                for (pos, row) in rows.into_iter().enumerate() {
                    let Value::Int64(k) = row[0] else { panic!() };
                    if !seen.insert(k) || current(&versions, k).is_some() {
                        errors.push((pos, RowError::AlreadyPresent));
                        continue;
                    }
                    versions.entry(k).or_default().push((ts, Some(row)));
                }
                per_record.push((index, ts, errors));
            }
            LogRecord::AlterSchema { .. } => {}
            // This test writes no transactions.
            LogRecord::TxnWrite { .. }
            | LogRecord::TxnBeginCommit { .. }
            | LogRecord::TxnFinish { .. } => {}
            // Nor to a table with subspaces.
            LogRecord::ChainsDone { .. } | LogRecord::SetSubspaces { .. } => {}
        }
    }
    (versions, per_record)
}

fn at(versions: &Versions, snap: HybridTime) -> Vec<Vec<Value>> {
    versions
        .values()
        .filter_map(|vs| {
            vs.iter()
                .rev()
                .find(|(ts, _)| *ts <= snap)
                .and_then(|(_, r)| r.clone())
        })
        .collect()
}

fn scan_at(t: &Arc<Tablet>, mode: ReadMode) -> Vec<Vec<Value>> {
    let mut s = t
        .scan(ScanSpec {
            read_mode: mode,
            ordered: true,
            ..Default::default()
        })
        .unwrap();
    rows_of(&schema(), &s.collect_all().unwrap())
}

fn run(seed: u64, batches_per_writer: usize) {
    DEBUG.lock().clear();
    let dir = tempfile::tempdir().unwrap();
    let replicas: Vec<Replica> = (0..3)
        .map(|i| {
            let d = dir.path().join(format!("r{i}"));
            Replica {
                tablet: Mutex::new(open_replica(&d, true)),
                dir: d,
                applied: AtomicU64::new(0),
                answers: Mutex::new(BTreeMap::new()),
                applied_cv: Condvar::new(),
                applied_mx: Mutex::new(()),
            }
        })
        .collect();
    let c = Arc::new(Cluster {
        log: SharedLog::default(),
        replicas,
        propose: Mutex::new(()),
        stop: AtomicBool::new(false),
    });
    let recent = Arc::new(Mutex::new(Vec::<HybridTime>::new()));
    let mut maint: Vec<Option<MaintenanceManager>> = c
        .replicas
        .iter()
        .map(|r| {
            (std::env::var("CAIRN_REPL_NO_MM").is_err())
                .then(|| MaintenanceManager::start(r.tablet()))
        })
        .collect();
    let appliers: Vec<Mutex<Option<std::thread::JoinHandle<()>>>> = (0..3)
        .map(|r| {
            let c = c.clone();
            Mutex::new(Some(std::thread::spawn(move || {
                applier(&c, r, seed ^ (r as u64 + 1))
            })))
        })
        .collect();
    let chaos_thread = {
        let c = c.clone();
        std::thread::spawn(move || chaos(&c, seed ^ 0xC4A05))
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let c = c.clone();
            let recent = recent.clone();
            std::thread::spawn(move || {
                writer(&c, seed * 31 + w as u64, batches_per_writer, &recent)
            })
        })
        .collect();

    // Crash and restart followers while the writers run: stop the replica's
    // maintenance, stop its tablet between two records (as kill -9 would, nothing in
    // memory reaches disk), reopen it from its files and apply the log again from its
    // durable index.
    let mut rng = StdRng::seed_from_u64(seed ^ 0xDEAD);
    let mut crashes = 0;
    let no_crash = std::env::var("CAIRN_REPL_NO_CRASH").is_ok();
    while writers.iter().any(|w| !w.is_finished()) {
        std::thread::sleep(Duration::from_millis(rng.random_range(20..80)));
        if no_crash {
            continue;
        }
        let r = rng.random_range(1..3);
        let rep = &c.replicas[r];
        maint[r].take();
        {
            let mut slot = rep.tablet.lock();
            let was = rep.applied.load(Ordering::Acquire);
            let before = scan_at(&slot, ReadMode::Latest);
            let before_desc: Vec<String> = (0..KEYS + BULK_KEYS)
                .map(|k| slot.describe_key(&[Value::Int64(k)]))
                .collect();
            slot.shutdown();
            let reopened = open_replica(&rep.dir, false);
            {
                let log = c.log.records.lock().clone();
                let debug = std::env::var("CAIRN_REPL_DEBUG").is_ok();
                if debug {
                    for k in 0..KEYS + BULK_KEYS {
                        DEBUG.lock().entry(k).or_default().push(format!(
                            "crash r{r} at {was}: before {}\n  reopened {}",
                            before_desc[k as usize],
                            reopened.describe_key(&[Value::Int64(k)])
                        ));
                    }
                }
                for index in reopened.durable_index() + 1..=was {
                    if debug {
                        for k in 0..KEYS + BULK_KEYS {
                            let d = reopened.describe_key(&[Value::Int64(k)]);
                            let tail = d[d.find("KEY").unwrap_or(0)..].to_string();
                            let mut g = DEBUG.lock();
                            let e = g.entry(k).or_default();
                            if !e.last().is_some_and(|l| l.ends_with(&tail)) {
                                e.push(format!("  replay {index} r{r}: {d}"));
                            }
                        }
                    }
                    reopened.apply(index, &log[index as usize - 1]).unwrap();
                }
                let after = scan_at(&reopened, ReadMode::Latest);
                if after != before {
                    for k in 0..KEYS + BULK_KEYS {
                        let b: Vec<_> = before.iter().filter(|r| r[0] == Value::Int64(k)).collect();
                        let a: Vec<_> = after.iter().filter(|r| r[0] == Value::Int64(k)).collect();
                        if a != b {
                            eprintln!(
                                "CRASH DIFF key {k}: before {b:?} after {a:?}\n  before: {}\n  after: {}",
                                before_desc[k as usize],
                                reopened.describe_key(&[Value::Int64(k)])
                            );
                        }
                    }
                    panic!("replica {r} differs after a crash at {was}");
                }
                // Start the replay again from the durable index, as a real restart would.
                drop(reopened);
            }
            let reopened = open_replica(&rep.dir, false);
            eprintln!(
                "crash of replica {r}: applied {was}, reopened at durable {}",
                reopened.durable_index()
            );
            rep.applied
                .store(reopened.durable_index(), Ordering::Release);
            *slot = reopened;
        }
        maint[r] = (std::env::var("CAIRN_REPL_NO_MM").is_err())
            .then(|| MaintenanceManager::start(rep.tablet()));
        crashes += 1;
    }
    let written: Vec<Written> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    // Let everyone catch up, then stop the background threads.
    let last = c.log.len();
    for r in &c.replicas {
        r.wait_applied(last);
    }
    c.stop.store(true, Ordering::Release);
    chaos_thread.join().unwrap();
    for a in &appliers {
        a.lock().take().unwrap().join().unwrap();
    }
    for m in maint.iter_mut() {
        m.take();
    }

    let log: Vec<Arc<Vec<u8>>> = c.log.records.lock().clone();
    let (versions, per_record) = replay_oracle(&log);
    // Every replica's answers (first applies) are the oracle's.
    for (r, rep) in c.replicas.iter().enumerate() {
        let answers = rep.answers.lock().clone();
        for (index, _, errors) in &per_record {
            if answers.get(index) != Some(errors) {
                explain_answer_mismatch(&log, &versions, &rep.tablet(), *index);
            }
            assert_eq!(
                answers.get(index),
                Some(errors),
                "seed {seed}: replica {r}'s answer of record {index}"
            );
        }
    }
    // Every condition the leader checked held (or failed) at the record's place in the
    // log: re-derive it from the oracle's versions.
    let ts_of: BTreeMap<u64, HybridTime> = per_record.iter().map(|(i, t, _)| (*i, *t)).collect();
    for w in &written {
        let Written::Rows {
            ops,
            atomic,
            answer,
            index,
        } = w;
        let Some(index) = index else { continue };
        let before = ts_of[index].prev();
        let errs: BTreeMap<usize, RowError> = answer.iter().cloned().collect();
        let mut touched = std::collections::BTreeSet::new();
        for (i, op) in ops.iter().enumerate() {
            let Some(Value::Int64(k)) = op.values[0].clone() else {
                panic!()
            };
            let hist = versions.get(&k).map(|v| v.as_slice()).unwrap_or(&[]);
            let state = hist
                .iter()
                .rev()
                .find(|(t, _)| *t <= before)
                .and_then(|(_, r)| r.clone());
            let last_change = hist
                .iter()
                .rev()
                .find(|(t, _)| *t <= before)
                .map_or(HybridTime::MIN, |(t, _)| *t);
            let c = &op.condition;
            if c.is_empty() || *atomic && errs.contains_key(&i) && errs[&i] == RowError::Aborted {
                touched.insert(k);
                continue;
            }
            let holds = if let Some(since) = c.unchanged_since {
                !touched.contains(&k) && state.is_some() && last_change <= since
            } else {
                !touched.contains(&k)
                    && state
                        .as_ref()
                        .is_some_and(|r| c.predicates.iter().all(|p| p.matches_value(&r[1])))
            };
            let failed = matches!(
                errs.get(&i),
                Some(RowError::Conflict | RowError::ConditionFailed)
            );
            assert_eq!(
                holds, !failed,
                "seed {seed}: condition {c:?} of op {i} on key {k} in record {index}: \
                 row was {state:?} (last changed {last_change:?}), answer {answer:?}"
            );
            if holds {
                touched.insert(k);
            }
        }
    }
    // Every replica equals the oracle at every record's snapshot, and at the end.
    let check_all = |when: &str| {
        for (r, rep) in c.replicas.iter().enumerate() {
            let t = rep.tablet();
            for (index, ts, _) in &per_record {
                let got = scan_at(&t, ReadMode::Snapshot(*ts));
                let want = at(&versions, *ts);
                if got != want {
                    // Explain: the histories of the rows that differ.
                    for row in got.iter().chain(&want) {
                        let Value::Int64(k) = row[0] else { continue };
                        if got.iter().any(|r| r == row) && want.iter().any(|r| r == row) {
                            continue;
                        }
                        eprintln!("key {k}: oracle versions {:?}", versions.get(&k));
                        eprintln!("  stores now: {}", t.describe_key(&[Value::Int64(k)]));
                        for l in DEBUG.lock().get(&k).into_iter().flatten() {
                            eprintln!("{l}");
                        }
                        for (i, rec) in log.iter().enumerate() {
                            if let Ok(LogRecord::Write { ts, ops, .. }) = LogRecord::decode(rec) {
                                for op in ops {
                                    if op.cells.first().map(|c| &c.1) == Some(&Value::Int64(k)) {
                                        eprintln!(
                                            "  record {} ts {ts:?}: {:?} {:?}",
                                            i + 1,
                                            op.kind,
                                            op.cells
                                        );
                                    }
                                }
                            } else if let Ok(LogRecord::BulkInsert { ts, .. }) =
                                LogRecord::decode(rec)
                            {
                                eprintln!("  record {} ts {ts:?}: bulk", i + 1);
                            }
                        }
                        for (i, ts2, _) in &per_record {
                            let g = scan_at(&t, ReadMode::Snapshot(*ts2));
                            let w = at(&versions, *ts2);
                            let gk: Vec<_> = g.iter().filter(|r| r[0] == Value::Int64(k)).collect();
                            let wk: Vec<_> = w.iter().filter(|r| r[0] == Value::Int64(k)).collect();
                            if gk != wk {
                                eprintln!("  record {i} ts {ts2:?}: replica {gk:?} oracle {wk:?}");
                            }
                        }
                        break;
                    }
                }
                assert_eq!(
                    got, want,
                    "seed {seed}: replica {r} at record {index} ({when})"
                );
            }
            assert_eq!(
                scan_at(&t, ReadMode::Latest),
                at(&versions, HybridTime::MAX),
                "seed {seed}: replica {r} latest ({when})"
            );
        }
    };
    check_all("running");
    // Crash every replica once more and check what their files and the log restore.
    for rep in &c.replicas {
        let mut slot = rep.tablet.lock();
        slot.shutdown();
        let t = open_replica(&rep.dir, false);
        for index in t.durable_index() + 1..=last {
            t.apply(index, &log[index as usize - 1]).unwrap();
        }
        *slot = t;
    }
    check_all("after restart");
    eprintln!(
        "seed {seed}: {} records, {} follower crashes",
        per_record.len(),
        crashes
    );
}

#[test]
fn replicas_match_the_oracle_under_concurrency_maintenance_and_crashes() {
    for seed in [11, 12] {
        run(seed, 150);
    }
    let n: u64 = std::env::var("CAIRN_REPLICATED_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for i in 0..n {
        let seed = base.wrapping_mul(17).wrapping_add(i);
        eprintln!("replicated test seed {seed}");
        run(seed, 300);
    }
}

/// Prints, for every key record `index` touched, the oracle's versions and
/// what the replica's tablet holds at each earlier record that touched the
/// key: the trail to read when a replica's answer differs from the oracle's.
fn explain_answer_mismatch(log: &[Arc<Vec<u8>>], versions: &Versions, t: &Arc<Tablet>, index: u64) {
    let Ok(LogRecord::Write { ops, .. }) = LogRecord::decode(&log[index as usize - 1]) else {
        return;
    };
    for (pos, op) in ops.iter().enumerate() {
        let Some((_, Value::Int64(k))) = op.cells.first() else {
            continue;
        };
        eprintln!("record {index} op {pos}: {:?} key {k}", op.kind);
        eprintln!("  oracle: {:?}", versions.get(k));
        for (i2, rec) in log.iter().enumerate().take(index as usize) {
            let touches = match LogRecord::decode(rec) {
                Ok(LogRecord::Write { ops, ts, .. }) => ops
                    .iter()
                    .any(|o| o.cells.first().map(|c| &c.1) == Some(&Value::Int64(*k)))
                    .then_some(ts),
                Ok(LogRecord::BulkInsert { ts, .. }) => Some(ts),
                _ => None,
            };
            if let Some(ts) = touches {
                let g: Vec<_> = scan_at(t, ReadMode::Snapshot(ts))
                    .into_iter()
                    .filter(|r| r[0] == Value::Int64(*k))
                    .collect();
                eprintln!("  record {} ts {ts:?}: replica {g:?}", i2 + 1);
            }
        }
    }
}
