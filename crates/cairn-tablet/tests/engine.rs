//! Feature tests of the tablet: concurrency with the maintenance manager, corruption of
//! every kind of file, ALTER without rewrites, lazy materialisation and the predicate
//! skip cache, snapshot limits, bad input.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_common::{ColumnPredicate, ColumnSpec, DataType, HybridTime, Schema, Value};
use cairn_tablet::{
    AlterOp, LocalTablet, ReadMode, RowError, RowOp, ScanSpec, TabletError, TabletOptions,
};
use common::{ordered_rows, rows_of, small_options};

fn kv_schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("w", DataType::Int32),
            ColumnSpec::new("v", DataType::Int64),
        ],
        &["k"],
    )
    .unwrap()
}

fn row(k: i64, w: i32, v: i64) -> Vec<Value> {
    vec![Value::Int64(k), Value::Int32(w), Value::Int64(v)]
}

#[test]
fn writers_scanners_and_maintenance_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TabletOptions {
        mrs_flush_bytes: 16 << 10,
        dms_flush_bytes: 4 << 10,
        ..small_options()
    };
    let t = LocalTablet::create(dir.path(), kv_schema(), opts).unwrap();
    let mm = t.start_maintenance();
    let stop = Arc::new(AtomicBool::new(false));
    const WRITERS: i64 = 3;
    const PER_WRITER: i64 = 1500;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let t = t.clone();
            std::thread::spawn(move || {
                for i in 0..PER_WRITER {
                    let k = w * 1_000_000 + i;
                    let mut ops = vec![RowOp::insert(row(k, w as i32, i))];
                    if i % 5 == 4 {
                        // Re-write an earlier row: its value becomes -index.
                        let old = w * 1_000_000 + i / 2;
                        ops.push(RowOp::upsert(row(old, w as i32, -(i / 2))));
                    }
                    let r = t.write(ops).unwrap();
                    assert!(r.row_errors.is_empty(), "{:?}", r.row_errors);
                }
            })
        })
        .collect();
    let scanners: Vec<_> = (0..2)
        .map(|_| {
            let t = t.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let schema = t.schema();
                let mut scans = 0;
                while !stop.load(Ordering::Acquire) {
                    let mut s = t
                        .scan(ScanSpec {
                            ordered: scans % 2 == 0,
                            ..Default::default()
                        })
                        .unwrap();
                    let rows = rows_of(&schema, &s.collect_all().unwrap());
                    // Each writer inserts sequentially, so a consistent snapshot holds a
                    // prefix of each writer's keys.
                    for w in 0..WRITERS {
                        let mine: BTreeSet<i64> = rows
                            .iter()
                            .filter(|r| r[1] == Value::Int32(w as i32))
                            .map(|r| match r[0] {
                                Value::Int64(k) => k - w * 1_000_000,
                                _ => unreachable!(),
                            })
                            .collect();
                        let n = mine.len() as i64;
                        assert!(mine.iter().copied().eq(0..n), "writer {w}: not a prefix");
                    }
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Release);
    for s in scanners {
        assert!(s.join().unwrap() > 0);
    }
    // On a fast run the writers can finish before the manager's first flush: give it
    // time to do one on its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while t.stats().disk_rowsets == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    mm.stop();
    let check = |t: &LocalTablet| {
        let rows = ordered_rows(t);
        assert_eq!(rows.len() as i64, WRITERS * PER_WRITER);
        for r in rows {
            let (Value::Int64(k), Value::Int64(v)) = (&r[0], &r[2]) else {
                unreachable!()
            };
            let i = k % 1_000_000;
            let rewritten = (0..PER_WRITER).any(|j| j % 5 == 4 && j / 2 == i);
            assert_eq!(*v, if rewritten { -i } else { i }, "key {k}");
        }
    };
    check(&t);
    assert!(
        t.stats().disk_rowsets > 0,
        "the maintenance manager flushed"
    );
    drop(t);
    check(&LocalTablet::open(dir.path(), small_options()).unwrap());
}

/// Builds a tablet with every kind of file, then closes it.
fn tablet_with_every_file(dir: &Path) {
    let t = LocalTablet::create(dir, kv_schema(), small_options()).unwrap();
    let ops: Vec<_> = (0..200).map(|k| RowOp::insert(row(k, 0, k))).collect();
    t.write(ops).unwrap();
    t.flush_mrs().unwrap();
    let schema = t.schema();
    let ups: Vec<_> = (0..50)
        .map(|k| RowOp::update(&schema, &[Value::Int64(k)], &[("v", Value::Int64(-k))]).unwrap())
        .collect();
    t.write(ups).unwrap();
    t.flush_deltas().unwrap();
    let rs = t.components().disk[0].clone();
    t.major_delta_compaction(&rs).unwrap();
    t.write(vec![RowOp::delete(&schema, &[Value::Int64(3)]).unwrap()])
        .unwrap();
    t.flush_deltas().unwrap();
    let mut s = t
        .scan(ScanSpec {
            predicates: vec![ColumnPredicate::eq("w", Value::Int32(99))],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(s.count_rows().unwrap(), 0);
    t.persist_skip_caches().unwrap();
    t.write(vec![RowOp::insert(row(1000, 0, 0))]).unwrap();
    t.shutdown().unwrap();
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dst = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

#[test]
fn flipped_bytes_in_every_kind_of_file_are_reported() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    tablet_with_every_file(&pristine);
    let files = files_under(&pristine);
    let kinds = [
        "tablet-meta",
        "base-0.parquet",
        "base-",
        "keys",
        "redo-",
        "undo-",
        "skipcache-",
        "wal-",
    ];
    for kind in kinds {
        assert!(
            files
                .iter()
                .any(|f| f.file_name().unwrap().to_string_lossy().starts_with(kind)),
            "no {kind} file was produced: {files:?}"
        );
    }
    for (n, f) in files.iter().enumerate() {
        let rel = f.strip_prefix(&pristine).unwrap();
        let copy = root.path().join(format!("c{n}"));
        copy_dir(&pristine, &copy);
        let target = copy.join(rel);
        let mut bytes = std::fs::read(&target).unwrap();
        let pos = bytes.len() / 2;
        bytes[pos] ^= 0x5A;
        std::fs::write(&target, &bytes).unwrap();
        match LocalTablet::open(&copy, small_options()) {
            Err(TabletError::Corruption { .. }) | Err(TabletError::Wal(_)) => {}
            Err(e) => panic!("{}: unexpected error kind {e}", rel.display()),
            Ok(_) => panic!("{}: corruption went unnoticed", rel.display()),
        }
    }
    // And the untouched copy opens fine with all data.
    let t = LocalTablet::open(&pristine, small_options()).unwrap();
    assert_eq!(
        t.scan(ScanSpec::default()).unwrap().count_rows().unwrap(),
        200
    );
}

#[test]
fn alter_adds_drops_and_renames_without_rewriting() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    t.write((0..100).map(|k| RowOp::insert(row(k, 1, k))).collect())
        .unwrap();
    t.flush_mrs().unwrap();
    let files_before = files_under(dir.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".parquet"))
        .count();
    t.alter_schema(AlterOp::AddColumn(
        ColumnSpec::new("n", DataType::String).with_default(Value::String("x".into())),
    ))
    .unwrap();
    t.alter_schema(AlterOp::RenameColumn {
        from: "v".into(),
        to: "value".into(),
    })
    .unwrap();
    t.alter_schema(AlterOp::DropColumn("w".into())).unwrap();
    assert!(t.alter_schema(AlterOp::DropColumn("k".into())).is_err());
    let files_after = files_under(dir.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".parquet"))
        .count();
    assert_eq!(files_before, files_after, "no base data was rewritten");
    let schema = t.schema();
    t.write(vec![RowOp::insert(vec![
        Value::Int64(500),
        Value::Int64(5),
        Value::String("new".into()),
    ])])
    .unwrap();
    let check = |t: &LocalTablet| {
        let rows = rows_of(
            &schema,
            &t.scan(ScanSpec {
                ordered: true,
                ..Default::default()
            })
            .unwrap()
            .collect_all()
            .unwrap(),
        );
        assert_eq!(rows.len(), 101);
        assert_eq!(
            rows[7],
            vec![Value::Int64(7), Value::Int64(7), Value::String("x".into())]
        );
        assert_eq!(
            rows[100],
            vec![
                Value::Int64(500),
                Value::Int64(5),
                Value::String("new".into())
            ]
        );
    };
    check(&t);
    drop(t);
    let t = LocalTablet::open(dir.path(), small_options()).unwrap();
    assert_eq!(t.schema().index_of("value").unwrap(), 1);
    check(&t);
}

#[test]
fn lazy_materialisation_and_skip_cache() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    // w cycles 0..10 so min/max statistics cannot rule row groups out for w = 3.
    t.write(
        (0..640)
            .map(|k| RowOp::insert(row(k, (k % 10) as i32, k * 2)))
            .collect(),
    )
    .unwrap();
    t.flush_mrs().unwrap();
    let scan = |p: ColumnPredicate| {
        let mut s = t
            .scan(ScanSpec {
                predicates: vec![p],
                projection: Some(vec!["k".into()]),
                ..Default::default()
            })
            .unwrap();
        s.count_rows().unwrap()
    };
    assert_eq!(scan(ColumnPredicate::eq("w", Value::Int32(3))), 64);
    // v is even: v = 7 matches nothing, but min/max cannot show it.
    let read0 = t.counters.groups_read.load(Ordering::Relaxed);
    assert_eq!(scan(ColumnPredicate::eq("v", Value::Int64(7))), 0);
    let read1 = t.counters.groups_read.load(Ordering::Relaxed);
    assert!(read1 > read0);
    // Same predicate again: every group is skipped by the cache…
    assert_eq!(scan(ColumnPredicate::eq("v", Value::Int64(7))), 0);
    assert_eq!(t.counters.groups_read.load(Ordering::Relaxed), read1);
    let by_cache = t.counters.groups_skipped_by_cache.load(Ordering::Relaxed);
    assert!(by_cache > 0);
    // …and so is a conjunction that implies it.
    let mut s = t
        .scan(ScanSpec {
            predicates: vec![
                ColumnPredicate::eq("v", Value::Int64(7)),
                ColumnPredicate::ge("k", Value::Int64(0)),
            ],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(s.count_rows().unwrap(), 0);
    assert!(t.counters.groups_skipped_by_cache.load(Ordering::Relaxed) > by_cache);
    // An update that makes a row match is found despite the cache.
    let schema = t.schema();
    t.write(vec![
        RowOp::update(&schema, &[Value::Int64(5)], &[("v", Value::Int64(7))]).unwrap(),
    ])
    .unwrap();
    assert_eq!(scan(ColumnPredicate::eq("v", Value::Int64(7))), 1);
    // Min/max statistics skip groups for key-ordered columns.
    let before = t.counters.groups_skipped_by_stats.load(Ordering::Relaxed);
    assert_eq!(scan(ColumnPredicate::ge("v", Value::Int64(1270))), 5);
    assert!(t.counters.groups_skipped_by_stats.load(Ordering::Relaxed) > before);
    // The cache survives a reopen once persisted.
    t.persist_skip_caches().unwrap();
    drop(t);
    let t = LocalTablet::open(dir.path(), small_options()).unwrap();
    assert!(t.components().disk.iter().any(|r| !r.skip_cache.is_empty()));
}

#[test]
fn bad_input_gets_clear_errors_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    let schema = t.schema();
    let r = t
        .write(vec![
            RowOp::insert(vec![Value::Int64(1), Value::Int32(1), Value::Int64(1)]),
            RowOp::insert(vec![Value::Int32(2), Value::Int32(1), Value::Int64(1)]),
            RowOp::insert(vec![Value::Null, Value::Int32(1), Value::Int64(1)]),
            RowOp::new(
                cairn_tablet::OpKind::Insert,
                vec![Some(Value::Int64(3)), None, None],
            ),
            RowOp::insert(vec![Value::Int64(1), Value::Int32(1), Value::Int64(1)]),
        ])
        .unwrap();
    let errs: Vec<usize> = r.row_errors.iter().map(|(i, _)| *i).collect();
    assert_eq!(errs, vec![1, 2, 3, 4]);
    assert_eq!(r.row_errors[3].1, RowError::AlreadyPresent);
    assert!(
        r.row_errors[0].1.to_string().contains("expected a INT64"),
        "{}",
        r.row_errors[0].1
    );
    assert!(matches!(
        t.scan(ScanSpec {
            predicates: vec![ColumnPredicate::eq("nope", Value::Int32(1))],
            ..Default::default()
        }),
        Err(TabletError::Common(_))
    ));
    assert!(
        t.get(&[Value::String("x".into())], ReadMode::Latest)
            .is_err()
    );
    let too_old = HybridTime::from_micros(1);
    assert!(matches!(
        t.scan(ScanSpec {
            read_mode: ReadMode::Snapshot(too_old),
            ..Default::default()
        }),
        Err(TabletError::SnapshotTooOld { .. })
    ));
    assert!(LocalTablet::create(dir.path(), schema.as_ref().clone(), small_options()).is_err());
    assert_eq!(
        t.scan(ScanSpec::default()).unwrap().count_rows().unwrap(),
        1
    );
}

/// Limited scans read DiskRowSets and MemRowSets in growing windows from their start
/// key (instead of decoding the rest of a row group) and still return the right rows:
/// ordered scans exactly the first ones, unordered ones any matching rows; a short
/// range from a start key, a selective predicate that needs many windows, over rows
/// with updates and deletes.
#[test]
fn limited_scans_read_in_windows_and_return_the_first_rows() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TabletOptions {
        rows_per_row_group: 8192,
        target_rowset_bytes: 64 << 20,
        mrs_flush_bytes: 64 << 20,
        ..small_options()
    };
    let t = LocalTablet::create(dir.path(), kv_schema(), opts).unwrap();
    let n = 20_000i64;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let ops = chunk
            .iter()
            .map(|&k| RowOp::insert(row(k, (k % 97) as i32, k)))
            .collect();
        t.write(ops).unwrap();
    }
    t.flush_all().unwrap();
    // Deleted and updated rows inside the first windows.
    t.write(
        (5000..5050)
            .map(|k| RowOp::delete(&kv_schema(), &[Value::Int64(k)]).unwrap())
            .collect(),
    )
    .unwrap();
    t.write(vec![RowOp::upsert(row(5100, 1, -1))]).unwrap();
    // More rows that stay in the MemRowSet, read in windows too.
    let m = 25_000i64;
    t.write(
        (n..m)
            .map(|k| RowOp::insert(row(k, (k % 97) as i32, k)))
            .collect(),
    )
    .unwrap();
    let keys = |batches: &[arrow::record_batch::RecordBatch]| -> Vec<i64> {
        rows_of(&kv_schema(), batches)
            .into_iter()
            .map(|r| match r[0] {
                Value::Int64(k) => k,
                ref other => panic!("{other:?}"),
            })
            .collect()
    };
    for ordered in [true, false] {
        for (start, limit) in [
            (4990, 1usize),
            (4990, 10),
            (4990, 100),
            (4990, 1000),
            (19_990, 100),
            (20_500, 3000),
        ] {
            let mut s = t
                .scan(ScanSpec {
                    predicates: vec![ColumnPredicate::ge("k", Value::Int64(start))],
                    limit: Some(limit),
                    ordered,
                    ..Default::default()
                })
                .unwrap();
            let got = keys(&s.collect_all().unwrap());
            let live = |k: &i64| (start..m).contains(k) && !(5000..5050).contains(k);
            if ordered {
                let want: Vec<i64> = (start..m).filter(live).take(limit).collect();
                assert_eq!(got, want, "from {start}, limit {limit}");
            } else {
                // Any `limit` matching rows, each once.
                let distinct: BTreeSet<i64> = got.iter().copied().collect();
                assert_eq!(
                    distinct.len(),
                    limit,
                    "from {start}, limit {limit}: {got:?}"
                );
                assert!(got.iter().all(live), "from {start}, limit {limit}: {got:?}");
            }
        }
        // w = 3 holds one row in 97: the windows must grow to find 50 of them.
        let mut s = t
            .scan(ScanSpec {
                predicates: vec![ColumnPredicate::eq("w", Value::Int32(3))],
                limit: Some(50),
                ordered,
                ..Default::default()
            })
            .unwrap();
        let got = keys(&s.collect_all().unwrap());
        assert_eq!(got.len(), 50, "ordered {ordered}");
        assert!(got.iter().all(|k| k % 97 == 3), "{got:?}");
    }
}

#[test]
fn column_statistics_come_from_the_stored_rowsets() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    assert!(t.column_statistics().is_empty(), "no rowset yet");
    t.write((10..60).map(|k| RowOp::insert(row(k, 3, k * 2))).collect())
        .unwrap();
    t.flush_mrs().unwrap();
    t.write((100..120).map(|k| RowOp::insert(row(k, -4, k))).collect())
        .unwrap();
    t.flush_mrs().unwrap();
    // Still in memory: not counted.
    t.write(vec![RowOp::insert(row(5000, 99, 1))]).unwrap();
    let stats = t.column_statistics();
    let names: Vec<&str> = stats.iter().map(|c| c.column.as_str()).collect();
    assert_eq!(names, ["k", "w", "v"]);
    assert_eq!(stats[0].min, Some(Value::Int64(10)));
    assert_eq!(stats[0].max, Some(Value::Int64(119)));
    assert_eq!(stats[1].min, Some(Value::Int32(-4)));
    assert_eq!(stats[1].max, Some(Value::Int32(3)));
    assert_eq!(stats[2].min, Some(Value::Int64(20)));
    assert_eq!(stats[2].max, Some(Value::Int64(119)));
    assert!(stats.iter().all(|c| c.null_count == 0 && c.bytes > 0));
    // A column added later is not in the files: its bounds are unknown.
    t.alter_schema(AlterOp::AddColumn(
        ColumnSpec::new("n", DataType::String).nullable(),
    ))
    .unwrap();
    let stats = t.column_statistics();
    assert_eq!(stats.len(), 4);
    assert_eq!((stats[3].min.as_ref(), stats[3].max.as_ref()), (None, None));
}

/// The planner weighs broadcasting a table by its statistics' bytes: they must be the
/// size in memory, not that of the dictionary-encoded pages, or a 4 MB column of few
/// distinct strings looks a few KB and gets copied to every task.
#[test]
fn column_statistics_count_bytes_as_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("s", DataType::String),
            ColumnSpec::new("w", DataType::Int32),
        ],
        &["k"],
    )
    .unwrap();
    let t = LocalTablet::create(dir.path(), schema, small_options()).unwrap();
    let text = "a string of thirty bytes, too!";
    assert_eq!(text.len(), 30);
    let rows = 4000u64;
    t.write(
        (0..rows as i64)
            .map(|k| {
                RowOp::insert(vec![
                    Value::Int64(k),
                    Value::String(text.into()),
                    Value::Int32(7),
                ])
            })
            .collect(),
    )
    .unwrap();
    t.flush_mrs().unwrap();
    let stats = t.column_statistics();
    assert_eq!(stats[0].bytes, rows * 8, "{stats:?}");
    assert_eq!(stats[1].bytes, rows * (30 + 4), "{stats:?}");
    assert_eq!(stats[2].bytes, rows * 4, "{stats:?}");
}

/// A column dropped and added again under the same name is a new column: what the
/// predicate skip cache learnt about the old one must not skip rows of the new one.
#[test]
fn skip_cache_forgets_a_dropped_column_reused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    let x = || ColumnSpec::new("x", DataType::Int64).nullable();
    t.alter_schema(AlterOp::AddColumn(x())).unwrap();
    t.write(
        (0..200)
            .map(|k| {
                RowOp::insert(vec![
                    Value::Int64(k),
                    Value::Int32(1),
                    Value::Int64(k),
                    Value::Int64((k * 2) % 100),
                ])
            })
            .collect(),
    )
    .unwrap();
    t.flush_mrs().unwrap();
    let matching = |t: &LocalTablet| {
        t.scan(ScanSpec {
            predicates: vec![ColumnPredicate::eq("x", Value::Int64(51))],
            projection: Some(vec!["k".into()]),
            ..Default::default()
        })
        .unwrap()
        .count_rows()
        .unwrap()
    };
    // x is even, 0 to 98 in every row group (min/max cannot rule out x = 51): every
    // row group is learnt to match nothing.
    assert_eq!(matching(&t), 0);
    assert!(t.components().disk.iter().any(|r| !r.skip_cache.is_empty()));
    t.persist_skip_caches().unwrap();
    t.alter_schema(AlterOp::DropColumn("x".into())).unwrap();
    t.alter_schema(AlterOp::AddColumn(x().with_default(Value::Int64(51))))
        .unwrap();
    assert_eq!(matching(&t), 200, "the new x is 51 in every row");
    drop(t);
    let t = LocalTablet::open(dir.path(), small_options()).unwrap();
    assert_eq!(matching(&t), 200, "and after a reopen");
}

/// A rowset whose REDOs are deletes offers major delta compaction nothing to fold:
/// the maintenance manager must not keep picking it (a busy loop), and once the
/// deletes are older than the history retention the rowset is rewritten without the
/// deleted rows.
#[test]
fn deletes_neither_spin_maintenance_nor_stay_forever() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TabletOptions {
        history_retention: std::time::Duration::from_millis(300),
        ..small_options()
    };
    let t = LocalTablet::create(dir.path(), kv_schema(), opts).unwrap();
    t.write((0..400).map(|k| RowOp::insert(row(k, 0, k))).collect())
        .unwrap();
    t.flush_mrs().unwrap();
    t.compact_rowsets(None).unwrap();
    let schema = t.schema();
    t.write(
        (0..300)
            .map(|k| RowOp::delete(&schema, &[Value::Int64(k)]).unwrap())
            .collect(),
    )
    .unwrap();
    t.flush_deltas().unwrap();
    // Before the deletes age out of the retention window there is nothing to do.
    let op = cairn_tablet::maintenance::pick_op(t.tablet());
    assert!(
        !matches!(
            op,
            Some(cairn_tablet::maintenance::MaintenanceOp::MajorDeltaCompaction(_))
        ),
        "picked {op:?}: deletes cannot be folded into base data"
    );
    std::thread::sleep(std::time::Duration::from_millis(400));
    // Then rewriting the rowsets drops them; afterwards nothing is left to do.
    let mut rounds = 0;
    while cairn_tablet::maintenance::run_once(t.tablet())
        .unwrap()
        .is_some()
    {
        rounds += 1;
        assert!(rounds < 20, "maintenance keeps finding work");
    }
    assert!(rounds > 0, "the deleted rows were reclaimed");
    assert_eq!(
        t.stats().disk_rows,
        100,
        "the deleted rows are gone from disk"
    );
    assert_eq!(ordered_rows(&t).len(), 100);
}

/// A write "unchanged since" a timestamp older than the ancient history mark conflicts:
/// the row's changes before the mark may be forgotten (here a flush drops the UNDO of
/// an update), so the condition cannot be verified, and passing it would overwrite
/// that update blindly.
#[test]
fn unchanged_since_below_the_history_mark_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TabletOptions {
        history_retention: std::time::Duration::from_millis(200),
        ..small_options()
    };
    let t = LocalTablet::create(dir.path(), kv_schema(), opts).unwrap();
    let schema = t.schema();
    let read_at = t.write(vec![RowOp::insert(row(1, 0, 1))]).unwrap().ts;
    let update =
        |v: i64| RowOp::update(&schema, &[Value::Int64(1)], &[("v", Value::Int64(v))]).unwrap();
    t.write(vec![update(2)]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.flush_mrs().unwrap();
    let r = t.write(vec![update(3).unchanged_since(read_at)]).unwrap();
    assert_eq!(
        r.row_errors,
        vec![(0, RowError::Conflict)],
        "the update after {read_at:?} was forgotten, not undone"
    );
    let got = t.get(&[Value::Int64(1)], ReadMode::Latest).unwrap();
    assert_eq!(got.map(|r| r[2].clone()), Some(Value::Int64(2)));
}

#[test]
fn a_bulk_insert_lists_its_rows_for_their_chains() {
    use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    // Written before the table had subspaces: nothing to chain.
    t.write(vec![RowOp::insert(row(2, 0, 0))]).unwrap();
    assert!(t.tablet().unchained().is_empty());
    t.tablet().unchained().track();
    let schema = kv_schema().to_arrow();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![3, 2, 1])) as ArrayRef,
            Arc::new(Int32Array::from(vec![1, 1, 1])),
            Arc::new(Int64Array::from(vec![30, 20, 10])),
        ],
    )
    .unwrap();
    let res = t.bulk_insert(&batch).unwrap();
    assert_eq!(res.row_errors, vec![(1, RowError::AlreadyPresent)]);
    let key = |k: i64| cairn_common::key::encode_values(&[&Value::Int64(k)]).unwrap();
    // Every row of the batch waits for its chain, the one that existed too (its
    // chain finds no change).
    assert_eq!(
        t.tablet().unchained().to_persist(),
        vec![(res.ts.0, key(1)), (res.ts.0, key(2)), (res.ts.0, key(3))]
    );
}

#[test]
fn atomic_operations_are_computed_under_the_row_lock() {
    use cairn_common::{AtomicOp, CellMutation};
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    let mm = t.start_maintenance();
    t.write(vec![
        RowOp::insert(row(1, 0, 0)),
        RowOp::insert(row(2, 0, 7)),
    ])
    .unwrap();
    let add = |k: i64, n: i64| {
        RowOp::new(
            cairn_tablet::OpKind::Update,
            vec![Some(Value::Int64(k)), None, None],
        )
        .with_mutations(vec![CellMutation::new("v", AtomicOp::Add, Value::Int64(n))])
    };
    // Threads add to one row at once: no add is lost.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let r = t.write(vec![add(1, 1)]).unwrap();
                    assert!(r.row_errors.is_empty(), "{:?}", r.row_errors);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let v = |k: i64| {
        t.tablet()
            .get(&[Value::Int64(k)], ReadMode::Latest)
            .unwrap()
    };
    assert_eq!(v(1), Some(row(1, 0, 800)));
    // In one batch: two adds to one row both count; an add after another kind of
    // write of its row conflicts; an add to an absent row is not found; an overflow
    // fails its row only.
    let r = t
        .write(vec![
            add(2, 1),
            add(2, 2),
            RowOp::upsert(row(3, 0, 0)),
            add(3, 1),
            add(4, 1),
            add(1, i64::MAX),
        ])
        .unwrap();
    assert_eq!(
        r.row_errors.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    assert_eq!(r.row_errors[0].1, RowError::Conflict);
    assert_eq!(r.row_errors[1].1, RowError::NotFound);
    assert!(
        matches!(&r.row_errors[2].1, RowError::Invalid(m) if m.contains("out of range")),
        "{:?}",
        r.row_errors[2]
    );
    assert_eq!(v(2), Some(row(2, 0, 10)));
    assert_eq!(v(1), Some(row(1, 0, 800)));
    // Bad requests are refused before anything is read.
    let on_key = RowOp::new(
        cairn_tablet::OpKind::Update,
        vec![Some(Value::Int64(1)), None, None],
    )
    .with_mutations(vec![CellMutation::new("k", AtomicOp::Add, Value::Int64(1))]);
    let wrong_type = add(1, 0).with_mutations(vec![CellMutation::new(
        "v",
        AtomicOp::Append,
        Value::Int64(1),
    )]);
    let on_upsert = RowOp::upsert(row(1, 0, 0)).with_mutations(vec![CellMutation::new(
        "v",
        AtomicOp::Add,
        Value::Int64(1),
    )]);
    let r = t.write(vec![on_key, wrong_type, on_upsert]).unwrap();
    assert_eq!(r.row_errors.len(), 3, "{:?}", r.row_errors);
    assert!(
        r.row_errors
            .iter()
            .all(|(_, e)| matches!(e, RowError::Invalid(_)))
    );
    assert_eq!(v(1), Some(row(1, 0, 800)));
    mm.stop();
}

/// Starts an upsert of `row` as a leader does — rows locked, timestamp taken — and
/// leaves it in flight (never applied). Finish it with `finish_write` and drop the
/// locks.
fn start_in_flight(
    tablet: &cairn_tablet::Tablet,
    row: Vec<Value>,
) -> (HybridTime, cairn_tablet::locks::RowLocks) {
    let far = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let write = tablet.prepare_write(vec![RowOp::upsert(row)]).unwrap();
    let locks = tablet.lock_rows(&write, far).unwrap();
    let (ts, _record) = tablet.start_write(&write, false, None);
    (ts, locks)
}

#[test]
fn a_change_is_read_without_waiting_for_other_rows_writes() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    let tablet = t.tablet().clone();
    let far = std::time::Instant::now() + std::time::Duration::from_secs(30);
    t.write(vec![RowOp::insert(row(1, 0, 1))]).unwrap();
    let flushed = t.write(vec![RowOp::upsert(row(1, 0, 2))]).unwrap().ts;
    t.flush_mrs().unwrap();
    // Another row's write is in flight (its timestamp taken, not applied yet) while
    // row 1 changes after it: a snapshot read at row 1's change would wait for it.
    let (in_flight, locks) = start_in_flight(&tablet, row(7, 0, 70));
    let on_disk = t.write(vec![RowOp::upsert(row(1, 0, 3))]).unwrap().ts;
    let in_mem = t.write(vec![RowOp::insert(row(2, 0, 20))]).unwrap().ts;
    assert!(in_flight < on_disk);
    assert_eq!(
        tablet
            .snapshot_if_safe(ReadMode::Snapshot(on_disk))
            .unwrap(),
        None
    );
    let change = |k: i64, ts: HybridTime| {
        tablet
            .change_at(&[Value::Int64(k)], ts, far, false)
            .unwrap()
            .expect("a change is read without waiting")
    };
    // A row on disk, changed by a delta; a row new in the MemRowSet.
    assert_eq!(change(1, on_disk), (Some(row(1, 0, 2)), Some(row(1, 0, 3))));
    assert_eq!(change(2, in_mem), (None, Some(row(2, 0, 20))));
    // An earlier change of the same row, and a row that never existed.
    assert_eq!(change(1, flushed), (Some(row(1, 0, 1)), Some(row(1, 0, 2))));
    assert_eq!(change(9, in_mem), (None, None));
    tablet.finish_write(in_flight);
    drop(locks);
}

#[test]
fn a_scan_opens_without_waiting_only_at_a_safe_snapshot_and_knows_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), kv_schema(), small_options()).unwrap();
    let tablet = t.tablet().clone();
    t.write((0..40).map(|k| RowOp::insert(row(k, 0, k))).collect())
        .unwrap();
    t.flush_mrs().unwrap();
    t.write((40..50).map(|k| RowOp::insert(row(k, 0, k))).collect())
        .unwrap();
    let range = |lo: i64, hi: i64, read_mode| ScanSpec {
        predicates: vec![ColumnPredicate::range(
            "k",
            Value::Int64(lo),
            Value::Int64(hi),
        )],
        read_mode,
        ..Default::default()
    };
    let open = |spec| tablet.scan_if_ready(spec).unwrap().expect("no wait");
    // Rows on disk and in the MemRowSet both count, matching or not.
    assert!(open(range(35, 45, ReadMode::Latest)).stored_rows_at_most(10));
    assert!(!open(range(35, 45, ReadMode::Latest)).stored_rows_at_most(9));
    assert!(!open(range(0, 50, ReadMode::Latest)).stored_rows_at_most(49));
    assert!(open(range(60, 70, ReadMode::Latest)).stored_rows_at_most(0));
    let unbounded = ScanSpec::default();
    assert!(!open(unbounded.clone()).stored_rows_at_most(49));
    assert!(open(unbounded).stored_rows_at_most(50));
    // A write in flight: a snapshot at or above it cannot be read without waiting;
    // the latest snapshot (below it) can.
    let (in_flight, locks) = start_in_flight(&tablet, row(7, 0, 70));
    assert!(
        tablet
            .scan_if_ready(range(0, 5, ReadMode::Snapshot(in_flight)))
            .unwrap()
            .is_none()
    );
    let mut latest = open(range(0, 5, ReadMode::Latest));
    assert!(latest.snapshot() < in_flight);
    assert_eq!(
        rows_of(&kv_schema(), &latest.collect_all().unwrap()).len(),
        5
    );
    tablet.finish_write(in_flight);
    drop(locks);
}
