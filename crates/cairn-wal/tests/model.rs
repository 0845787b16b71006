//! Model-based test: random sequences of operations checked against a `BTreeMap` model.

use std::collections::BTreeMap;
use std::path::Path;

use cairn_wal::{FsyncPolicy, Log, LogOptions, WalError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Append a batch; `start` is used only when the log is brand new.
    Append { start: u64, payloads: Vec<Vec<u8>> },
    /// Append at a wrong index (next + 1 + skip, or next - 1 - skip); must fail harmlessly.
    BadAppend { skip: u64, below: bool },
    /// `truncate_suffix(at)`, `at` picked by [`Target`].
    Truncate { at: Target },
    /// `gc(at)`, `at` picked by [`Target`].
    Gc { at: Target },
    /// `reset(to)`.
    Reset { to: u64 },
    /// Drop and reopen the log.
    Reopen,
    /// Explicit sync.
    Sync,
}

/// How an index argument is chosen.
#[derive(Debug, Clone)]
enum Target {
    /// `first - 3 + sel` (saturating).
    Near(u64),
    /// A segment's first index (from the file names) plus -1, 0 or +1: the edge cases.
    Boundary(prop::sample::Index, i64),
}

impl Target {
    fn resolve(&self, model: &Model, dir: &Path) -> u64 {
        match self {
            Target::Near(sel) => model.start().unwrap_or(0).saturating_sub(3) + sel,
            Target::Boundary(pick, delta) => {
                let firsts = segment_firsts(dir);
                if firsts.is_empty() {
                    return 0;
                }
                firsts[pick.index(firsts.len())].saturating_add_signed(*delta)
            }
        }
    }
}

/// First indexes of the segment files in `dir`, sorted (parsed from the file names).
fn segment_firsts(dir: &Path) -> Vec<u64> {
    let mut firsts: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            e.unwrap().file_name().to_str().unwrap()[4..24]
                .parse()
                .unwrap()
        })
        .collect();
    firsts.sort_unstable();
    firsts
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        (0u64..80).prop_map(Target::Near),
        (any::<prop::sample::Index>(), -1i64..=1).prop_map(|(i, d)| Target::Boundary(i, d)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..50, prop::collection::vec(prop::collection::vec(any::<u8>(), 0..48), 1..8))
            .prop_map(|(start, payloads)| Op::Append { start, payloads }),
        1 => (0u64..3, any::<bool>()).prop_map(|(skip, below)| Op::BadAppend { skip, below }),
        2 => target().prop_map(|at| Op::Truncate { at }),
        2 => target().prop_map(|at| Op::Gc { at }),
        1 => (0u64..120).prop_map(|to| Op::Reset { to }),
        2 => Just(Op::Reopen),
        1 => Just(Op::Sync),
    ]
}

/// What the log should contain.
#[derive(Debug, Default)]
struct Model {
    /// `None` for a brand-new log (any start index accepted).
    next: Option<u64>,
    /// Always a contiguous range of indexes ending at `next - 1`.
    entries: BTreeMap<u64, Vec<u8>>,
}

impl Model {
    /// First index of the log's window (first entry, or `next` when empty).
    fn start(&self) -> Option<u64> {
        self.entries.keys().next().copied().or(self.next)
    }
}

fn check(log: &Log, model: &Model, dir: &Path) {
    assert_eq!(log.next_index(), model.next);
    assert_eq!(log.first_index(), model.entries.keys().next().copied());
    assert_eq!(log.last_index(), model.entries.keys().next_back().copied());
    for (k, v) in &model.entries {
        assert_eq!(log.read(*k).unwrap().as_ref(), Some(v), "entry {k}");
    }
    let all = log.read_range(0, u64::MAX).unwrap();
    let want: Vec<_> = model.entries.iter().map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(all, want);
    if let (Some(first), Some(last)) = (log.first_index(), log.last_index()) {
        if first > 0 {
            assert_eq!(log.read(first - 1).unwrap(), None);
        }
        assert_eq!(log.read(last + 1).unwrap(), None);
        // A sub-range.
        let mid = first + (last - first) / 2;
        let sub = log.read_range(mid, last).unwrap();
        assert_eq!(sub.len() as u64, last - mid);
        assert_eq!(sub.first().map(|e| e.0), (mid < last).then_some(mid));
    }
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(files.len(), log.segment_count());
    let on_disk: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    assert_eq!(log.size_bytes(), on_disk);
    if model.next.is_some() {
        assert!(log.segment_count() >= 1);
    }
}

fn run(ops: Vec<Op>, segment_size: u64, always: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = || LogOptions {
        segment_size,
        fsync: if always {
            FsyncPolicy::Always
        } else {
            FsyncPolicy::Never
        },
    };
    let mut log = Log::open(dir, opts()).unwrap();
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Append { start, payloads } => {
                let first = model.next.unwrap_or(start);
                log.append_batch(
                    payloads
                        .iter()
                        .enumerate()
                        .map(|(i, p)| (first + i as u64, p.as_slice())),
                )
                .unwrap();
                model.next = Some(first + payloads.len() as u64);
                for (i, p) in payloads.into_iter().enumerate() {
                    model.entries.insert(first + i as u64, p);
                }
            }
            Op::BadAppend { skip, below } => {
                let Some(next) = model.next else { continue };
                let bad = if below {
                    match next.checked_sub(1 + skip) {
                        Some(b) => b,
                        None => continue,
                    }
                } else {
                    next + 1 + skip
                };
                let size = log.size_bytes();
                match log.append(bad, b"bad") {
                    Err(WalError::OutOfOrder { expected, got }) => {
                        assert_eq!((expected, got), (next, bad));
                    }
                    other => panic!("expected OutOfOrder, got {other:?}"),
                }
                assert_eq!(log.size_bytes(), size);
            }
            Op::Truncate { at } => {
                let from = at.resolve(&model, dir);
                log.truncate_suffix(from).unwrap();
                if let (Some(start), Some(next)) = (model.start(), model.next)
                    && from < next
                {
                    let new_next = from.max(start);
                    model.entries.retain(|k, _| *k < new_next);
                    model.next = Some(new_next);
                }
            }
            Op::Gc { at } => {
                let retain_from = at.resolve(&model, dir);
                let old_first = log.first_index();
                let segments = log.segment_count();
                let deleted = log.gc(retain_from).unwrap();
                assert_eq!(log.segment_count(), segments - deleted);
                let new_first = log.first_index();
                if let (Some(old), Some(new)) = (old_first, new_first) {
                    assert!(new >= old);
                    assert!(
                        new == old || new <= retain_from,
                        "gc removed entries >= retain_from"
                    );
                    if retain_from <= old {
                        assert_eq!(deleted, 0);
                    }
                } else {
                    assert_eq!(deleted, 0);
                    assert_eq!(old_first, new_first);
                }
                // gc deletes as much as it may: the second segment now starts above retain_from.
                if let Some(second) = segment_firsts(dir).get(1) {
                    assert!(*second > retain_from, "gc left a deletable segment");
                }
                // Everything >= retain_from must still be there (checked against the model
                // before dropping what gc was allowed to drop).
                for (k, v) in model.entries.range(retain_from..) {
                    assert_eq!(log.read(*k).unwrap().as_ref(), Some(v));
                }
                if let Some(new) = new_first {
                    model.entries.retain(|k, _| *k >= new);
                }
            }
            Op::Reset { to } => {
                log.reset(to).unwrap();
                model.entries.clear();
                model.next = Some(to);
            }
            Op::Reopen => {
                drop(log);
                log = Log::open(dir, opts()).unwrap();
            }
            Op::Sync => log.sync().unwrap(),
        }
        check(&log, &model, dir);
    }
    drop(log);
    let log = Log::open(dir, opts()).unwrap();
    check(&log, &model, dir);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(
        ops in prop::collection::vec(op(), 1..40),
        segment_size in 96u64..1024,
        always in prop::bool::weighted(0.1),
    ) {
        run(ops, segment_size, always);
    }
}
