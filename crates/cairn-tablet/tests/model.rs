//! Randomized model-based test of the tablet (in the style of Kudu's fuzz-itest): random
//! sequences of every write op, bulk inserts, flushes, delta flushes, delta and rowset
//! compactions, reopen-from-disk, ALTER, and scans (full, predicate, ordered, limited, and at past
//! snapshots) are checked against an in-memory oracle that keeps every version. Writes
//! carry conditions (unchanged since a snapshot, predicates on the row) and some
//! batches are all or nothing.
//!
//! Seeds that once failed are kept in `FIXED_SEEDS`; `CAIRN_FUZZ_SEEDS=n` runs more.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use cairn_common::types::array_from_values;
use cairn_common::{ColumnPredicate, ColumnSpec, DataType, HybridTime, Value};
use cairn_tablet::cache::{BlockCache, BlockCacheStats};
use cairn_tablet::{
    AlterOp, LocalTablet, OpKind, ReadMode, RowError, RowOp, ScanSpec, TabletError, TabletOptions,
};
use common::{rows_of, small_options, test_schema};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seeds kept as fixed regression cases (add any seed that ever fails here).
const FIXED_SEEDS: &[u64] = &[1, 2, 3, 7, 42, 1234];

type Key = (String, i32);
type Versions = Vec<(HybridTime, Option<Vec<Value>>)>;

/// The oracle: every version of every row, plus the current column layout.
struct Oracle {
    versions: BTreeMap<Key, Versions>,
    ncols: usize,
}

impl Oracle {
    fn current(&self, k: &Key) -> Option<&Vec<Value>> {
        self.versions
            .get(k)
            .and_then(|v| v.last())
            .and_then(|(_, r)| r.as_ref())
    }
    fn at(&self, snap: HybridTime) -> Vec<Vec<Value>> {
        self.versions
            .values()
            .filter_map(|vs| {
                vs.iter()
                    .rev()
                    .find(|(ts, _)| *ts <= snap)
                    .and_then(|(_, r)| r.clone())
            })
            .collect()
    }
    fn set(&mut self, k: Key, ts: HybridTime, row: Option<Vec<Value>>) {
        self.versions.entry(k).or_default().push((ts, row));
    }
    fn last_change(&self, k: &Key) -> HybridTime {
        self.versions
            .get(k)
            .and_then(|v| v.last())
            .map_or(HybridTime::MIN, |(ts, _)| *ts)
    }

    /// What a write batch should do to each row: an error, or the row's new state
    /// (`None` inside: deleted), or no change. Conditions are checked first, in order,
    /// against the rows as the batch found them (a row changed earlier in the batch
    /// fails any condition); an all-or-nothing batch with any failing row changes
    /// nothing, its other rows reporting `Aborted`.
    fn expect_batch(
        &self,
        schema: &cairn_common::Schema,
        ops: &[RowOp],
        keys: &[Key],
        atomic: bool,
    ) -> Vec<Result<Option<Option<Vec<Value>>>, RowError>> {
        let mut live: BTreeMap<Key, Option<Vec<Value>>> = BTreeMap::new();
        let mut touched = std::collections::BTreeSet::new();
        let mut failed: BTreeMap<usize, RowError> = BTreeMap::new();
        for (i, (op, k)) in ops.iter().zip(keys).enumerate() {
            let now = live
                .get(k)
                .cloned()
                .unwrap_or_else(|| self.current(k).cloned());
            let c = &op.condition;
            let err = if let Some(since) = c.unchanged_since
                && (touched.contains(k) || now.is_none() || self.last_change(k) > since)
            {
                Some(RowError::Conflict)
            } else if !c.predicates.is_empty()
                && (touched.contains(k)
                    || !now.as_ref().is_some_and(|r| {
                        c.predicates
                            .iter()
                            .all(|p| p.matches_value(&r[schema.index_of(&p.column).unwrap()]))
                    }))
            {
                Some(RowError::ConditionFailed)
            } else if atomic {
                match (op.kind, now.is_some()) {
                    (OpKind::Insert, true) => Some(RowError::AlreadyPresent),
                    (OpKind::Update | OpKind::Delete, false) => Some(RowError::NotFound),
                    _ => None,
                }
            } else {
                None
            };
            match err {
                Some(e) => {
                    failed.insert(i, e);
                }
                None => {
                    touched.insert(k.clone());
                    let after = Self::op_result(schema, op, &now);
                    live.insert(
                        k.clone(),
                        match after {
                            Ok(Some(new)) => new,
                            _ => now,
                        },
                    );
                }
            }
        }
        if atomic && !failed.is_empty() {
            return (0..ops.len())
                .map(|i| Err(failed.get(&i).cloned().unwrap_or(RowError::Aborted)))
                .collect();
        }
        // Apply in order against the rows' real states.
        let mut state: BTreeMap<Key, Option<Vec<Value>>> = BTreeMap::new();
        let mut out = Vec::with_capacity(ops.len());
        for (i, (op, k)) in ops.iter().zip(keys).enumerate() {
            if let Some(e) = failed.get(&i) {
                out.push(Err(e.clone()));
                continue;
            }
            let now = state
                .get(k)
                .cloned()
                .unwrap_or_else(|| self.current(k).cloned());
            let r = Self::op_result(schema, op, &now);
            if let Ok(Some(new)) = &r {
                state.insert(k.clone(), new.clone());
            }
            out.push(r);
        }
        out
    }

    /// What `op` does to a row whose state is `now`.
    fn op_result(
        schema: &cairn_common::Schema,
        op: &RowOp,
        now: &Option<Vec<Value>>,
    ) -> Result<Option<Option<Vec<Value>>>, RowError> {
        let full = |o: &RowOp| -> Vec<Value> {
            o.values
                .iter()
                .enumerate()
                .map(|(c, v)| v.clone().unwrap_or_else(|| schema.column(c).read_default()))
                .collect()
        };
        match (op.kind, now) {
            (OpKind::Insert, Some(_)) => Err(RowError::AlreadyPresent),
            (OpKind::InsertIgnore, Some(_)) => Ok(None),
            (OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert, None) => {
                Ok(Some(Some(full(op))))
            }
            (OpKind::Upsert | OpKind::Update | OpKind::UpdateIgnore, Some(row)) => {
                let mut r = row.clone();
                for (slot, v) in r.iter_mut().zip(&op.values).skip(2) {
                    if let Some(v) = v {
                        *slot = v.clone();
                    }
                }
                Ok(Some(Some(r)))
            }
            (OpKind::Update | OpKind::Delete, None) => Err(RowError::NotFound),
            (OpKind::UpdateIgnore | OpKind::DeleteIgnore, None) => Ok(None),
            (OpKind::Delete | OpKind::DeleteIgnore, Some(_)) => Ok(Some(None)),
        }
    }
}

fn key_of(rng: &mut StdRng) -> Key {
    let a = ["", "a", "a\0b", "b", "zz"][rng.random_range(0..5)].to_string();
    (a, rng.random_range(-20..20))
}

fn random_value(rng: &mut StdRng, col: usize) -> Value {
    if col != 4 && rng.random_bool(0.15) {
        return Value::Null;
    }
    match col {
        2 => Value::Int64(rng.random_range(-1000..1000)),
        3 => Value::String(format!("s{}", rng.random_range(0..50))),
        4 => Value::Double(rng.random_range(-100..100) as f64 / 4.0),
        _ => Value::Int32(rng.random_range(0..100)),
    }
}

/// Block cache of the usual model runs: holds everything they read.
const ROOMY_CACHE: usize = 1 << 20;
/// Block cache of the eviction runs: a few pages, so most reads evict one.
const TINY_CACHE: usize = 2 << 10;

fn run(seed: u64, steps: usize) {
    run_with_cache(seed, steps, ROOMY_CACHE);
}

/// Runs the model with a block cache of `cache_bytes`; returns the cache's counters.
fn run_with_cache(seed: u64, steps: usize, cache_bytes: usize) -> BlockCacheStats {
    run_with(seed, steps, cache_bytes, None)
}

/// Runs the model with a block cache of `cache_bytes`, and with `retention` as the
/// history retention if given (then flushes and compactions drop history older than
/// the ancient history mark, and past snapshots are read only at or above it).
fn run_with(
    seed: u64,
    steps: usize,
    cache_bytes: usize,
    retention: Option<std::time::Duration>,
) -> BlockCacheStats {
    let cache = Arc::new(BlockCache::new(cache_bytes));
    // The small options, reading through `cache`.
    let options = || {
        let o = small_options();
        TabletOptions {
            block_cache: cache.clone(),
            history_retention: retention.unwrap_or(o.history_retention),
            ..o
        }
    };
    // A past timestamp whose history is still kept, if any.
    let past = |rng: &mut StdRng, tablet: &LocalTablet, timestamps: &[HybridTime]| {
        let ahm = tablet.tablet().ancient_history_mark();
        let kept: Vec<HybridTime> = timestamps.iter().copied().filter(|t| *t >= ahm).collect();
        kept.get(rng.random_range(0..kept.len().max(1))).copied()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let mut tablet = LocalTablet::create(&path, test_schema(), options()).unwrap();
    let mut oracle = Oracle {
        versions: BTreeMap::new(),
        ncols: 5,
    };
    let mut timestamps: Vec<HybridTime> = vec![];
    let mut extra_cols = 0usize;

    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        if std::env::var("CAIRN_FUZZ_TRACE").is_ok() {
            eprintln!("{ctx}");
        }
        let schema = tablet.schema();
        let choice = rng.random_range(0..100);
        if std::env::var("CAIRN_FUZZ_TRACE").is_ok() {
            eprintln!("{ctx}: choice {choice}");
        }
        match choice {
            0..=5 => {
                // A bulk insert: new rows as one Arrow batch. Columns the batch omits
                // (sometimes `s`, and columns added by ALTER) take their defaults.
                let n = rng.random_range(1..40);
                let with_s = rng.random_bool(0.7);
                let mut rows: Vec<(Key, Vec<Value>)> = vec![];
                for _ in 0..n {
                    let k = key_of(&mut rng);
                    let mut row = vec![Value::String(k.0.clone()), Value::Int32(k.1)];
                    for c in 2..5 {
                        row.push(if c == 3 && !with_s {
                            schema.column(3).read_default()
                        } else {
                            random_value(&mut rng, c)
                        });
                    }
                    for c in 5..oracle.ncols {
                        row.push(schema.column(c).read_default());
                    }
                    rows.push((k, row));
                }
                let cols: Vec<usize> = (0..5).filter(|&c| c != 3 || with_s).collect();
                let batch = RecordBatch::try_new(
                    Arc::new(arrow::datatypes::Schema::new(
                        cols.iter()
                            .map(|&c| {
                                let col = schema.column(c);
                                arrow::datatypes::Field::new(
                                    &col.name,
                                    col.data_type.to_arrow(),
                                    true,
                                )
                            })
                            .collect::<Vec<_>>(),
                    )),
                    cols.iter()
                        .map(|&c| {
                            array_from_values(
                                &schema.column(c).data_type,
                                rows.iter().map(|(_, r)| &r[c]),
                            )
                            .unwrap()
                        })
                        .collect(),
                )
                .unwrap();
                let res = tablet.bulk_insert(&batch).unwrap();
                timestamps.push(res.ts);
                let errs: BTreeMap<usize, RowError> = res.row_errors.into_iter().collect();
                for (i, (k, row)) in rows.into_iter().enumerate() {
                    if oracle.current(&k).is_some() {
                        assert_eq!(
                            errs.get(&i),
                            Some(&RowError::AlreadyPresent),
                            "{ctx}: bulk row {i} on {k:?}"
                        );
                    } else {
                        assert_eq!(errs.get(&i), None, "{ctx}: bulk row {i} on {k:?}");
                        oracle.set(k, res.ts, Some(row));
                    }
                }
            }
            6..=54 => {
                let n = rng.random_range(1..12);
                let atomic = rng.random_bool(0.2);
                let mut ops = vec![];
                let mut keys = vec![];
                for _ in 0..n {
                    let k = key_of(&mut rng);
                    let kind = [
                        OpKind::Insert,
                        OpKind::InsertIgnore,
                        OpKind::Upsert,
                        OpKind::Update,
                        OpKind::UpdateIgnore,
                        OpKind::Delete,
                        OpKind::DeleteIgnore,
                    ][rng.random_range(0..7)];
                    let mut values: Vec<Option<Value>> = vec![None; oracle.ncols];
                    values[0] = Some(Value::String(k.0.clone()));
                    values[1] = Some(Value::Int32(k.1));
                    if !matches!(kind, OpKind::Delete | OpKind::DeleteIgnore) {
                        for (c, slot) in values.iter_mut().enumerate().skip(2) {
                            let given = kind.is_insert_like() && c == 4 || rng.random_bool(0.6);
                            if given {
                                *slot = Some(random_value(&mut rng, c));
                            }
                        }
                        if kind == OpKind::Upsert {
                            values[4].get_or_insert(Value::Double(1.0));
                        }
                    }
                    let mut op = RowOp::new(kind, values);
                    match rng.random_range(0..10) {
                        // Written only if unchanged since a past write (or since now).
                        // (Not with history GC: the mark moves while the write is
                        // checked, so whether an old `since` conflicts is a race;
                        // engine.rs tests that rule on its own.)
                        0 if retention.is_none() => {
                            let since = match timestamps.len() {
                                0 => HybridTime::MIN,
                                n => timestamps[rng.random_range(n.saturating_sub(5)..n)],
                            };
                            op = op.unchanged_since(since);
                        }
                        // Written only if `v` is in some range (a conditional put).
                        1 => {
                            op = op.if_matches(vec![ColumnPredicate::ge(
                                "v",
                                Value::Int64(rng.random_range(-1000..1000)),
                            )]);
                        }
                        _ => {}
                    }
                    ops.push(op);
                    keys.push(k);
                }
                let res = if atomic {
                    tablet.write_atomic(ops.clone()).unwrap()
                } else {
                    tablet.write(ops.clone()).unwrap()
                };
                let errs: BTreeMap<usize, RowError> = res.row_errors.into_iter().collect();
                let expected = oracle.expect_batch(&schema, &ops, &keys, atomic);
                for (i, (e, k)) in expected.iter().zip(&keys).enumerate() {
                    assert_eq!(
                        errs.get(&i),
                        e.as_ref().err(),
                        "{ctx}: op {i} {:?} on {k:?} (atomic: {atomic}, condition: {:?})\n\
                         batch: {:?}\nkeys: {keys:?}\nrow errors: {errs:?}\nbefore: {:?}",
                        ops[i].kind,
                        ops[i].condition,
                        ops.iter()
                            .map(|o| (o.kind, &o.condition))
                            .collect::<Vec<_>>(),
                        keys.iter().map(|k| oracle.current(k)).collect::<Vec<_>>()
                    );
                }
                if expected
                    .iter()
                    .any(|e| e.as_ref().is_ok_and(|c| c.is_some()))
                {
                    timestamps.push(res.ts);
                }
                for (e, k) in expected.into_iter().zip(keys) {
                    if let Ok(Some(new)) = e {
                        oracle.set(k, res.ts, new);
                    }
                }
            }
            55..=61 => {
                tablet.flush_mrs().unwrap();
            }
            62..=66 => {
                tablet.flush_deltas().unwrap();
            }
            67..=69 => {
                let comps = tablet.components();
                if !comps.disk.is_empty() {
                    let rs = comps.disk[rng.random_range(0..comps.disk.len())].clone();
                    tablet.minor_delta_compaction(&rs).unwrap();
                }
            }
            70..=72 => {
                let comps = tablet.components();
                if !comps.disk.is_empty() {
                    let rs = comps.disk[rng.random_range(0..comps.disk.len())].clone();
                    tablet.major_delta_compaction(&rs).unwrap();
                }
            }
            73..=75 => {
                if rng.random_bool(0.5) {
                    tablet.compact_rowsets(None).unwrap();
                } else {
                    tablet.compact_by_policy().unwrap();
                }
            }
            76..=79 => {
                drop(tablet);
                tablet = LocalTablet::open(&path, options()).unwrap();
            }
            80 if extra_cols < 2 => {
                extra_cols += 1;
                let name = format!("x{extra_cols}");
                tablet
                    .alter_schema(AlterOp::AddColumn(
                        ColumnSpec::new(&name, DataType::Int32)
                            .nullable()
                            .with_default(Value::Int32(7)),
                    ))
                    .unwrap();
                for vs in oracle.versions.values_mut() {
                    for (_, r) in vs.iter_mut() {
                        if let Some(r) = r {
                            r.push(Value::Int32(7));
                        }
                    }
                }
                oracle.ncols += 1;
            }
            81..=88 => {
                // Snapshot scan at a past timestamp.
                if let Some(ts) = past(&mut rng, &tablet, &timestamps) {
                    let s = tablet.scan(ScanSpec {
                        read_mode: ReadMode::Snapshot(ts),
                        ordered: true,
                        ..Default::default()
                    });
                    let mut s = match s {
                        // The mark passed `ts` since it was picked.
                        Err(TabletError::SnapshotTooOld { .. }) if retention.is_some() => continue,
                        s => s.unwrap(),
                    };
                    let got = rows_of(&schema, &s.collect_all().unwrap());
                    assert_eq!(got, oracle.at(ts), "{ctx}: snapshot scan at {ts:?}");
                }
            }
            89..=94 => {
                // Predicate scan (unordered), compared as sets.
                let p = match rng.random_range(0..4) {
                    0 => ColumnPredicate::ge("v", Value::Int64(rng.random_range(-1000..1000))),
                    1 => ColumnPredicate::is_null("v"),
                    2 => ColumnPredicate::eq("a", Value::String("a".into())),
                    _ => ColumnPredicate::range(
                        "b",
                        Value::Int32(-5),
                        Value::Int32(rng.random_range(-5..20)),
                    ),
                };
                let mut s = tablet
                    .scan(ScanSpec {
                        predicates: vec![p.clone()],
                        projection: Some(vec!["a".into(), "b".into(), "v".into()]),
                        ..Default::default()
                    })
                    .unwrap();
                let mut got = rows_of(&schema, &s.collect_all().unwrap());
                got.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
                let ci = schema.index_of(&p.column).unwrap();
                let mut want: Vec<Vec<Value>> = oracle
                    .at(HybridTime::MAX)
                    .into_iter()
                    .filter(|r| p.matches_value(&r[ci]))
                    .map(|r| r[..3].to_vec())
                    .collect();
                want.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
                assert_eq!(got, want, "{ctx}: predicate {p}");
            }
            95..=97 => {
                // Point lookups.
                let k = key_of(&mut rng);
                let got = tablet
                    .get(
                        &[Value::String(k.0.clone()), Value::Int32(k.1)],
                        ReadMode::Latest,
                    )
                    .unwrap();
                assert_eq!(got.as_ref(), oracle.current(&k), "{ctx}: get {k:?}");
                // The leader's point read (newest changes first, no snapshot wait).
                let key = [Value::String(k.0.clone()), Value::Int32(k.1)];
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                let (_, got) = tablet
                    .tablet()
                    .get_point(&key, deadline, true, None)
                    .unwrap()
                    .unwrap();
                assert_eq!(got.as_ref(), oracle.current(&k), "{ctx}: get_point {k:?}");
                // A projected read: the projected columns are the row's.
                let want: Vec<usize> = (0..schema.num_columns())
                    .filter(|_| rng.random_bool(0.5))
                    .collect();
                let got = tablet
                    .tablet()
                    .get_projected(&key, ReadMode::Latest, Some(&want))
                    .unwrap();
                let pick = |r: &Vec<Value>| want.iter().map(|&i| r[i].clone()).collect::<Vec<_>>();
                assert_eq!(
                    got.as_ref().map(pick),
                    oracle.current(&k).map(pick),
                    "{ctx}: get_projected {k:?} columns {want:?}"
                );
                // And at a past snapshot.
                if let Some(ts) = past(&mut rng, &tablet, &timestamps) {
                    let got = match tablet.get(&key, ReadMode::Snapshot(ts)) {
                        Err(TabletError::SnapshotTooOld { .. }) if retention.is_some() => continue,
                        g => g.unwrap(),
                    };
                    let want = oracle
                        .versions
                        .get(&k)
                        .and_then(|vs| vs.iter().rev().find(|(t, _)| *t <= ts))
                        .and_then(|(_, r)| r.clone());
                    assert_eq!(got, want, "{ctx}: get {k:?} at {ts:?}");
                }
            }
            _ => {
                // Ordered, limited scan of the latest state.
                let limit = rng.random_range(0..30);
                let mut s = tablet
                    .scan(ScanSpec {
                        ordered: true,
                        limit: Some(limit),
                        batch_size: 7,
                        ..Default::default()
                    })
                    .unwrap();
                let got = rows_of(&schema, &s.collect_all().unwrap());
                let want: Vec<_> = oracle.at(HybridTime::MAX).into_iter().take(limit).collect();
                assert_eq!(got, want, "{ctx}: ordered limit {limit}");
            }
        }
        if std::env::var("CAIRN_FUZZ_CHECK_EVERY_STEP").is_ok() {
            let mut s = tablet
                .scan(ScanSpec {
                    ordered: true,
                    ..Default::default()
                })
                .unwrap();
            assert_eq!(
                rows_of(&tablet.schema(), &s.collect_all().unwrap()),
                oracle.at(HybridTime::MAX),
                "{ctx}: state after the step"
            );
        }
    }
    // Final full check after a reopen.
    drop(tablet);
    let tablet = LocalTablet::open(&path, options()).unwrap();
    let schema = tablet.schema();
    let mut s = tablet
        .scan(ScanSpec {
            ordered: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        rows_of(&schema, &s.collect_all().unwrap()),
        oracle.at(HybridTime::MAX),
        "seed {seed}: final"
    );
    cache.stats()
}

#[test]
fn fixed_seeds() {
    for &seed in FIXED_SEEDS {
        run(seed, 400);
    }
}

/// The fixed seeds with a block cache of a few pages: reads evict and decode pages
/// again all the time, and must still see every row as the oracle does.
#[test]
fn fixed_seeds_with_a_tiny_block_cache() {
    for &seed in FIXED_SEEDS {
        let st = run_with_cache(seed, 400, TINY_CACHE);
        assert!(st.evictions > 0, "seed {seed}: nothing was evicted: {st:?}");
    }
}

/// The fixed seeds with a history retention of a few milliseconds: flushes and
/// compactions drop old UNDOs and rows deleted long ago, and every read at or above
/// the ancient history mark must still see what the oracle does.
#[test]
fn fixed_seeds_with_history_gc() {
    for &seed in FIXED_SEEDS {
        run_with(
            seed,
            400,
            ROOMY_CACHE,
            Some(std::time::Duration::from_millis(3)),
        );
    }
}

#[test]
fn random_seeds() {
    let n: u64 = std::env::var("CAIRN_FUZZ_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let base: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for i in 0..n {
        let seed = base.wrapping_mul(31).wrapping_add(i);
        // Every other seed with history GC.
        let retention = (i % 2 == 1).then_some(std::time::Duration::from_millis(3));
        eprintln!("model test seed {seed} (history retention {retention:?})");
        run_with(seed, 300, ROOMY_CACHE, retention);
    }
}
