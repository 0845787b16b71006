//! Build → open → look up, across layouts, batchings, spills and damage.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
use cairn_common::Value;
use proptest::prelude::*;

use crate::fetch::source_location;
use crate::format::METADATA_FILE;
use crate::*;

fn arrow_schema() -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(vec![
        Field::new("user", ArrowType::Utf8, false),
        Field::new("slot", ArrowType::Int32, false),
        Field::new("item", ArrowType::Int64, true),
        Field::new("score", ArrowType::Float64, true),
        Field::new("note", ArrowType::Utf8, true),
    ]))
}

/// A row: key (user, slot), values (item, score, note).
type Row = (String, i32, Option<i64>, Option<f64>, Option<String>);

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        arrow_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.0.clone()),
            )),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.3))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.4.clone()))),
        ],
    )
    .unwrap()
}

fn schema() -> StoreSchema {
    StoreSchema::from_arrow(&arrow_schema(), &["user".into(), "slot".into()], None).unwrap()
}

fn options(memory: usize, dir: &Path) -> BuildOptions {
    BuildOptions {
        threads: 2,
        memory_bytes: memory,
        spill_dir: dir.to_path_buf(),
    }
}

/// Builds `rows` split into batches of `batch_rows`, fed from two threads.
fn build(
    rows: &[Row],
    layout: &StoreLayout,
    batch_rows: usize,
    memory: usize,
    out: &Path,
) -> Result<BuildSummary> {
    let b = StoreBuilder::new("recs", schema(), layout.clone(), &options(memory, out))?;
    let batches: Vec<RecordBatch> = rows.chunks(batch_rows.max(1)).map(batch).collect();
    let (even, odd): (Vec<_>, Vec<_>) = batches.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    std::thread::scope(|s| {
        let h1 = s.spawn(|| even.iter().try_for_each(|(_, x)| b.add_batch(x)));
        let h2 = s.spawn(|| odd.iter().try_for_each(|(_, x)| b.add_batch(x)));
        h1.join().unwrap()?;
        h2.join().unwrap()
    })?;
    b.finish(&out.join("out"))
}

fn open_all(layout: &StoreLayout, out: &Path) -> BTreeMap<NodeId, StoreVersion> {
    layout
        .nodes()
        .into_iter()
        .map(|n| {
            let v = StoreVersion::open(&node_dir(&out.join("out"), n), Verify::Checksums).unwrap();
            (n, v)
        })
        .collect()
}

fn expected(r: &Row) -> Vec<Value> {
    vec![
        r.2.map_or(Value::Null, Value::Int64),
        r.3.map_or(Value::Null, Value::Double),
        r.4.clone().map_or(Value::Null, Value::String),
    ]
}

fn key(r: &Row) -> Vec<Value> {
    vec![Value::String(r.0.clone()), Value::Int32(r.1)]
}

/// Every row is on exactly the nodes of its preference list, with its value.
fn check_lookups(rows: &[Row], layout: &StoreLayout, versions: &BTreeMap<NodeId, StoreVersion>) {
    let s = schema();
    for r in rows {
        let k = s.encode_key(&key(r)).unwrap();
        let p = layout.partition_of(&KeyHash::of(&k));
        let holders: Vec<NodeId> = layout.preference_list(p).iter().map(|x| x.1).collect();
        for (n, v) in versions {
            if holders.contains(n) {
                assert_eq!(v.get_row(&key(r)).unwrap(), Some(expected(r)), "node {n}");
            } else {
                assert!(v.get(&k).is_err(), "node {n} does not hold partition {p}");
            }
        }
    }
    // Keys never written are absent wherever they route.
    for i in 0..20 {
        let missing = vec![Value::String(format!("absent-{i}")), Value::Int32(i)];
        let k = s.encode_key(&missing).unwrap();
        for v in versions.values().filter(|v| v.holds(&k)) {
            assert_eq!(v.get_row(&missing).unwrap(), None);
        }
    }
}

fn sample_rows(n: usize) -> Vec<Row> {
    (0..n)
        .map(|i| {
            (
                format!("user-{}", i / 3),
                (i % 3) as i32,
                (i % 7 != 0).then_some(i as i64 * 11),
                Some(i as f64 / 4.0),
                (i % 5 != 0).then(|| "x".repeat(i % 40)),
            )
        })
        .collect()
}

fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for node in std::fs::read_dir(dir).unwrap() {
        let node = node.unwrap().path();
        for f in std::fs::read_dir(&node).unwrap() {
            let f = f.unwrap().path();
            let name = format!(
                "{}/{}",
                node.file_name().unwrap().to_string_lossy(),
                f.file_name().unwrap().to_string_lossy()
            );
            out.insert(name, std::fs::read(&f).unwrap());
        }
    }
    out
}

#[test]
fn round_trip_across_nodes_replicas_and_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(3, 12, 2, 3).unwrap();
    let rows = sample_rows(3000);
    let summary = build(&rows, &layout, 257, 1 << 30, dir.path()).unwrap();
    assert_eq!(summary.rows, 3000);
    assert_eq!(summary.tuples, 6000);
    assert_eq!(summary.spilled_bytes, 0);
    let versions = open_all(&layout, dir.path());
    let total: u64 = versions.values().map(|v| v.metadata().rows).sum();
    assert_eq!(total, 6000);
    check_lookups(&rows, &layout, &versions);
}

#[test]
fn spilled_and_in_memory_builds_write_the_same_bytes() {
    let layout = StoreLayout::round_robin(2, 8, 2, 2).unwrap();
    let rows = sample_rows(5000);
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let in_memory = build(&rows, &layout, 1000, 1 << 30, a.path()).unwrap();
    let spilled = build(&rows, &layout, 97, 16 << 10, b.path()).unwrap();
    assert_eq!(in_memory.spilled_bytes, 0);
    assert!(spilled.spilled_bytes > 0, "the small budget must spill");
    assert_eq!(
        files_of(&a.path().join("out")),
        files_of(&b.path().join("out"))
    );
    check_lookups(&rows, &layout, &open_all(&layout, b.path()));
}

#[test]
fn duplicate_keys_are_refused_in_memory_and_after_spills() {
    let layout = StoreLayout::round_robin(1, 4, 1, 1).unwrap();
    let mut rows = sample_rows(2000);
    rows.push(rows[1234].clone());
    for memory in [1 << 30, 8 << 10] {
        let dir = tempfile::tempdir().unwrap();
        let err = build(&rows, &layout, 100, memory, dir.path()).unwrap_err();
        assert!(
            matches!(&err, ReadOnlyError::DuplicateKey { key } if key.contains("user-411")),
            "{err}"
        );
        // Nothing half-written is left behind: the same output builds once fixed.
        assert!(!node_dir(&dir.path().join("out"), 0).exists());
        build(&rows[..2000], &layout, 100, memory, dir.path()).unwrap();
    }
}

/// A spill is written outside the shard's lock, after its tuples have left the shard:
/// when the write fails, those tuples are gone, and the build must refuse to finish
/// rather than write a store without them.
#[test]
fn a_failed_spill_makes_the_build_refuse_to_finish() {
    let layout = StoreLayout::round_robin(1, 4, 1, 1).unwrap();
    let rows = sample_rows(400);
    let dir = tempfile::tempdir().unwrap();
    let opts = BuildOptions {
        threads: 1,
        ..options(4 << 10, dir.path())
    };
    let b = StoreBuilder::new("recs", schema(), layout, &opts).unwrap();
    b.add_batch(&batch(&rows[..200])).unwrap();
    // The next run's file name is taken by a folder, so creating the run fails (even
    // for root, unlike a permission).
    let spill = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("cairn-store-build-")
        })
        .unwrap();
    assert!(
        spill.join("shard-0-run-0").is_file(),
        "the first batch spilled"
    );
    std::fs::create_dir(spill.join("shard-0-run-1")).unwrap();
    let err = b.add_batch(&batch(&rows[200..])).unwrap_err();
    assert!(err.to_string().contains("spill file"), "{err}");
    let err = b.finish(&dir.path().join("out")).unwrap_err();
    assert!(err.to_string().contains("some rows are missing"), "{err}");
    assert!(!dir.path().join("out").exists());
}

#[test]
fn bad_input_is_refused() {
    let s = arrow_schema();
    assert!(StoreSchema::from_arrow(&s, &["nope".into()], None).is_err());
    assert!(StoreSchema::from_arrow(&s, &[], None).is_err());
    assert!(StoreSchema::from_arrow(&s, &["user".into()], Some(&["user".into()])).is_err());
    // A NULL key.
    let dir = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(1, 2, 1, 1).unwrap();
    let schema = StoreSchema::from_arrow(&s, &["item".into()], None).unwrap();
    let b = StoreBuilder::new("x", schema, layout, &options(1 << 20, dir.path())).unwrap();
    let err = b.add_batch(&batch(&sample_rows(10))).unwrap_err();
    assert!(
        err.to_string().contains("key column 'item' has a NULL"),
        "{err}"
    );
}

#[test]
fn an_empty_store_has_empty_chunks_and_answers_none() {
    let dir = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(2, 4, 1, 2).unwrap();
    let s = build(&[], &layout, 10, 1 << 20, dir.path()).unwrap();
    assert_eq!((s.rows, s.tuples), (0, 0));
    let versions = open_all(&layout, dir.path());
    assert_eq!(versions[&0].metadata().files.len(), 2 * 2 * 2);
    check_lookups(&[], &layout, &versions);
}

#[test]
fn prefix_collisions_share_an_entry_and_resolve_by_full_key() {
    let dir = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(1, 1, 1, 1).unwrap();
    let b = StoreBuilder::new("c", schema(), layout, &options(1 << 20, dir.path())).unwrap();
    let id = ChunkId {
        partition: 0,
        replica: 0,
        chunk: 0,
    };
    // 300 keys over 7 prefixes.
    let tuples: Vec<_> = (0..300u32)
        .map(|i| {
            (
                id,
                (i % 7) as u64 * 1000,
                format!("k{i}").into_bytes(),
                i.to_be_bytes().to_vec(),
            )
        })
        .collect();
    b.add_tuples(&tuples).unwrap();
    let summary = b.finish(&dir.path().join("out")).unwrap();
    assert_eq!(summary.collisions, 7);
    let v = StoreVersion::open(&node_dir(&dir.path().join("out"), 0), Verify::Checksums).unwrap();
    let chunk = v.chunk(0, 0).unwrap();
    assert_eq!(chunk.entries(), 7);
    for (_, prefix, k, val) in &tuples {
        assert_eq!(chunk.get(*prefix, k).unwrap(), Some(&val[..]));
    }
    assert_eq!(chunk.get(0, b"k-missing").unwrap(), None);
    assert_eq!(chunk.get(1, b"k0").unwrap(), None);
}

#[test]
fn damage_to_any_file_is_detected_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(1, 2, 1, 1).unwrap();
    build(&sample_rows(500), &layout, 100, 1 << 20, dir.path()).unwrap();
    let node = node_dir(&dir.path().join("out"), 0);
    let pristine = files_of(&dir.path().join("out"));
    for (name, bytes) in &pristine {
        let file = node.join(name.split('/').nth(1).unwrap());
        let restore = || std::fs::write(&file, bytes).unwrap();
        // A flipped byte: caught by checksums (for the index, often by structure too).
        let mut flipped = bytes.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        std::fs::write(&file, &flipped).unwrap();
        assert!(
            StoreVersion::open(&node, Verify::Checksums).is_err(),
            "flipped byte in {name}"
        );
        restore();
        // A truncated file: caught by the structure check alone.
        std::fs::write(&file, &bytes[..bytes.len() - 2]).unwrap();
        let err = StoreVersion::open(&node, Verify::Structure).unwrap_err();
        assert!(
            matches!(err, ReadOnlyError::Corrupt { .. }),
            "{name}: {err}"
        );
        restore();
    }
    assert!(StoreVersion::open(&node, Verify::Checksums).is_ok());
    // A missing file.
    std::fs::remove_file(node.join("1_0_0.data")).unwrap();
    assert!(StoreVersion::open(&node, Verify::Structure).is_err());
    assert!(node.join(METADATA_FILE).exists());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_rows_any_batching_round_trip_deterministically(
        keys in proptest::collection::btree_set(("[a-c\\x00]{0,6}", -3i32..3), 0..400),
        huge in proptest::option::of(0usize..400),
        batch_rows in 1usize..150,
        nodes in 1u32..4,
        chunks in 1u32..4,
    ) {
        let rows: Vec<Row> = keys.into_iter().enumerate().map(|(i, (u, s))| {
            let note = if huge == Some(i) { Some("h".repeat(300_000)) } else { Some(format!("n{i}")) };
            (u, s, Some(i as i64), (i % 2 == 0).then_some(i as f64), note)
        }).collect();
        let layout = StoreLayout::round_robin(nodes, nodes * 3, nodes.min(2), chunks).unwrap();
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        build(&rows, &layout, batch_rows, 1 << 30, a.path()).unwrap();
        build(&rows, &layout, 1 + batch_rows / 3, 4096, b.path()).unwrap();
        prop_assert_eq!(files_of(&a.path().join("out")), files_of(&b.path().join("out")));
        check_lookups(&rows, &layout, &open_all(&layout, a.path()));
    }
}

/// Builds `rows` (values tagged with `tag` in `note`) on one node and copies the
/// folder to `store`'s fetch folder for version `v`.
fn stage_version(store: &VersionedStore, v: u64, rows: &[Row], tag: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let tagged: Vec<Row> = rows
        .iter()
        .map(|r| (r.0.clone(), r.1, r.2, r.3, Some(tag.to_string())))
        .collect();
    let layout = StoreLayout::round_robin(1, 4, 1, 2).unwrap();
    build(&tagged, &layout, 100, 1 << 20, tmp.path()).unwrap();
    let src = node_dir(&tmp.path().join("out"), 0);
    let dst = store.fetch_dir(v);
    std::fs::create_dir_all(&dst).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
    }
}

fn note_of(v: &StoreVersion, r: &Row) -> Value {
    v.get_row(&key(r)).unwrap().unwrap()[2].clone()
}

#[test]
fn install_swap_rollback_retain_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let rows = sample_rows(300);
    let store = VersionedStore::open(dir.path(), 2).unwrap();
    assert!(store.live().is_none());
    assert!(store.rollback(None).is_err(), "nothing to roll back to");
    for v in 1..=3u64 {
        stage_version(&store, v, &rows, &format!("v{v}"));
        assert_eq!(store.install(v).unwrap().rows, 300);
        assert!(store.install(v).is_err(), "version {v} twice");
        let r = store.swap(v).unwrap();
        assert_eq!((r.previous, r.current), ((v > 1).then(|| v - 1), v));
        let (live, version) = store.live().unwrap();
        assert_eq!(live, v);
        assert_eq!(note_of(&version, &rows[7]), Value::String(format!("v{v}")));
    }
    store.prune_now().unwrap();
    assert_eq!(store.versions().unwrap(), vec![2, 3], "retention keeps two");
    let r = store.rollback(None).unwrap();
    assert_eq!((r.previous, r.current), (Some(3), 2));
    assert_eq!(
        note_of(&store.live().unwrap().1, &rows[0]),
        Value::String("v2".into())
    );
    assert!(store.rollback(Some(1)).is_err(), "version 1 was pruned");
    assert!(
        store.rollback(None).is_err(),
        "nothing older than 2 is left"
    );
    store.rollback(Some(3)).unwrap();
    // A restart comes back on the live version, ignoring a half-made link.
    drop(store);
    std::os::unix::fs::symlink("version-2", dir.path().join("latest.new")).unwrap();
    let store = VersionedStore::open(dir.path(), 2).unwrap();
    assert_eq!(store.live().unwrap().0, 3);
    assert_eq!(store.next_version().unwrap(), 4);
}

#[test]
fn late_swap_orders_are_refused_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let rows = sample_rows(100);
    let store = VersionedStore::open(dir.path(), 5).unwrap();
    for v in 1..=3u64 {
        stage_version(&store, v, &rows, &format!("v{v}"));
        store.install(v).unwrap();
    }
    let order = |epoch, if_live| SwapOrder { epoch, if_live };
    store.swap_ordered(1, order(2, None)).unwrap();
    // The next leader (epoch 3) swaps to 2; its predecessor's order to swap to 1,
    // arriving late, must not undo it.
    store.swap_ordered(2, order(3, Some(1))).unwrap();
    let err = store.swap_ordered(1, order(2, None)).unwrap_err();
    assert!(matches!(err, ReadOnlyError::StaleSwap(_)), "{err}");
    assert_eq!(store.live().unwrap().0, 2);
    // An order that expects another live version is refused, whatever its epoch.
    let err = store.swap_ordered(3, order(4, Some(1))).unwrap_err();
    assert!(err.to_string().contains("expected version 1 live"), "{err}");
    assert_eq!(store.live().unwrap().0, 2);
    // The refused order did not raise the epoch: epoch 3 still orders.
    store.swap_ordered(3, order(3, Some(2))).unwrap();
    // The epoch survives a restart.
    drop(store);
    let store = VersionedStore::open(dir.path(), 5).unwrap();
    assert_eq!(store.live().unwrap().0, 3);
    assert!(store.swap_ordered(1, order(2, None)).is_err());
    // Orders without an epoch (local tools) are not fenced.
    store.swap(1).unwrap();
    assert_eq!(store.live().unwrap().0, 1);
    assert_eq!(store.versions().unwrap(), vec![1, 2, 3]);
}

#[test]
fn a_corrupt_fetch_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let rows = sample_rows(200);
    let store = VersionedStore::open(dir.path(), 3).unwrap();
    stage_version(&store, 1, &rows, "good");
    store.install(1).unwrap();
    store.swap(1).unwrap();
    stage_version(&store, 2, &rows, "bad");
    let victim = store.fetch_dir(2).join("0_0_1.data");
    let mut bytes = std::fs::read(&victim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&victim, bytes).unwrap();
    let err = store.install(2).unwrap_err();
    assert!(matches!(err, ReadOnlyError::Corrupt { .. }), "{err}");
    assert!(
        store.swap(2).is_err(),
        "an uninstalled version cannot go live"
    );
    assert_eq!(store.live().unwrap().0, 1);
    assert_eq!(store.versions().unwrap(), vec![1]);
}

#[test]
fn lookups_during_swaps_see_one_whole_version() {
    let dir = tempfile::tempdir().unwrap();
    let rows = sample_rows(400);
    let store = VersionedStore::open(dir.path(), 5).unwrap();
    for v in 1..=2u64 {
        stage_version(&store, v, &rows, &format!("v{v}"));
        store.install(v).unwrap();
    }
    store.swap(1).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (store, rows, stop) = (&store, &rows, &stop);
            s.spawn(move || {
                let mut i = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (v, version) = store.live().unwrap();
                    // Every row read through one version carries that version's tag.
                    for r in rows.iter().skip(i % 50).step_by(50) {
                        assert_eq!(note_of(&version, r), Value::String(format!("v{v}")));
                    }
                    i += 1;
                }
            });
        }
        for n in 0..200 {
            if n % 2 == 0 {
                store.swap(2).unwrap();
            } else {
                store.rollback(Some(1)).unwrap();
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

/// An in-memory object store holding a copy of local folder `from` under `prefix`,
/// uploaded with [`remote::upload_dir`].
fn in_memory_copy(from: &Path, prefix: &str) -> RemoteDir {
    let dir = RemoteDir {
        store: Arc::new(object_store::memory::InMemory::new()),
        base: url::Url::parse("memory:///").unwrap(),
        prefix: object_store::path::Path::from(prefix),
        url: format!("memory:///{prefix}"),
    };
    remote::upload_dir(from, &dir, &|_, _| {}).unwrap();
    dir
}

#[test]
fn fetch_copies_verifies_and_resumes_a_node_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(2, 8, 2, 2).unwrap();
    let rows = sample_rows(3_000);
    build(&rows, &layout, 500, 1 << 20, tmp.path()).unwrap();
    let out = tmp.path().join("out");
    let src = node_dir(&out, 1);
    let target = FetchTarget {
        store: "recs",
        node: 1,
    };
    // The same folder on a file system and in an object store.
    let remote = in_memory_copy(&out, "builds/v1");
    let sources: Vec<(&str, Box<dyn FetchSource>)> = vec![
        ("dir", Box::new(DirSource(src.clone()))),
        (
            "object store",
            Box::new(RemoteSource::new(remote.child("node-1")).unwrap()),
        ),
    ];
    for (kind, source) in sources {
        let source = &*source;
        // A first fetch stopped half-way through one file leaves a `.part` behind.
        let dest = tmp.path().join(format!("dest-{kind}"));
        let meta = crate::fetch::read_source_metadata(source, &target)
            .unwrap()
            .0;
        let big = meta.files.iter().max_by_key(|f| f.bytes).unwrap();
        std::fs::create_dir_all(&dest).unwrap();
        let bytes = std::fs::read(src.join(&big.name)).unwrap();
        std::fs::write(
            dest.join(format!("{}.part", big.name)),
            &bytes[..bytes.len() / 2],
        )
        .unwrap();
        // Another file was copied in full before the stop but not yet renamed.
        let whole = meta
            .files
            .iter()
            .find(|f| f.name != big.name && f.bytes > 0)
            .unwrap();
        std::fs::copy(
            src.join(&whole.name),
            dest.join(format!("{}.part", whole.name)),
        )
        .unwrap();
        assert!(!crate::fetch::is_fetched(&dest));

        // The next one continues it and finishes with every file verified.
        let progress = FetchProgress::default();
        let got = fetch_node(source, &dest, &target, 0, &progress).unwrap();
        assert_eq!(got, meta, "{kind}");
        assert!(crate::fetch::is_fetched(&dest));
        let total: u64 = meta.files.iter().map(|f| f.bytes).sum();
        assert_eq!(
            progress
                .bytes_done
                .load(std::sync::atomic::Ordering::Relaxed),
            total
        );
        let v = StoreVersion::open(&dest, Verify::Checksums).unwrap();
        for r in &rows {
            let k = schema().encode_key(&key(r)).unwrap();
            if v.holds(&k) {
                assert_eq!(v.get_row(&key(r)).unwrap(), Some(expected(r)));
            }
        }
        // Fetching a finished folder again copies nothing and changes nothing.
        let again = FetchProgress::default();
        fetch_node(source, &dest, &target, 0, &again).unwrap();
        assert_eq!(
            again.bytes_done.load(std::sync::atomic::Ordering::Relaxed),
            total
        );
        let names = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&dest), names(&src), "{kind}: no .part file is left");
        for n in names(&src) {
            assert_eq!(
                std::fs::read(dest.join(&n)).unwrap(),
                std::fs::read(src.join(&n)).unwrap()
            );
        }
    }
}

#[test]
fn uploads_of_large_files_go_in_parts_and_read_back_from_any_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("node-0");
    std::fs::create_dir_all(&folder).unwrap();
    // 20 MiB: above the multipart threshold, so three 8 MiB parts (the last short).
    let big: Vec<u8> = (0..20u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(folder.join("0_0_0.data"), &big).unwrap();
    std::fs::write(folder.join(METADATA_FILE), b"{}").unwrap();
    let sent = std::cell::Cell::new(0u64);
    let dir = RemoteDir {
        store: Arc::new(object_store::memory::InMemory::new()),
        base: url::Url::parse("memory:///").unwrap(),
        prefix: object_store::path::Path::from("b"),
        url: "memory:///b".into(),
    };
    let total = remote::upload_dir(tmp.path(), &dir, &|n, all| {
        assert_eq!(all, big.len() as u64 + 2);
        sent.set(n)
    })
    .unwrap();
    assert_eq!(total, big.len() as u64 + 2);
    assert_eq!(sent.get(), total);
    let source = RemoteSource::new(dir.child("node-0")).unwrap();
    for offset in [0u64, 1, 8 << 20, (20 << 20) - 1] {
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut source.open("0_0_0.data", offset).unwrap(), &mut got)
            .unwrap();
        assert!(got == big[offset as usize..], "offset {offset}");
    }
    let e = source.open("missing", 0).err().unwrap();
    assert!(
        matches!(&e, ReadOnlyError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{e}"
    );
}

/// An in-memory object store whose multipart uploads fail their second part, and that
/// records whether a failed upload was aborted.
#[derive(Debug, Default)]
struct FailingParts {
    inner: object_store::memory::InMemory,
    aborted: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Display for FailingParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FailingParts")
    }
}

#[derive(Debug)]
struct FailingUpload {
    inner: Box<dyn object_store::MultipartUpload>,
    parts: usize,
    aborted: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait::async_trait]
impl object_store::MultipartUpload for FailingUpload {
    fn put_part(&mut self, data: object_store::PutPayload) -> object_store::UploadPart {
        self.parts += 1;
        if self.parts == 2 {
            return Box::pin(async {
                Err(object_store::Error::Generic {
                    store: "FailingParts",
                    source: "the second part fails".into(),
                })
            });
        }
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<object_store::PutResult> {
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.aborted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.abort().await
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for FailingParts {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        Ok(Box::new(FailingUpload {
            inner: self.inner.put_multipart_opts(location, opts).await?,
            parts: 0,
            aborted: self.aborted.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A multipart upload whose part fails is aborted (so S3 keeps no orphaned parts),
/// the error names the object, and the folder's `.metadata` is never uploaded.
#[test]
fn a_failed_multipart_upload_is_aborted_and_publishes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("node-0");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("0_0_0.data"), vec![7u8; 20 << 20]).unwrap();
    std::fs::write(folder.join(METADATA_FILE), b"{}").unwrap();
    let store = Arc::new(FailingParts::default());
    let dir = RemoteDir {
        store: store.clone(),
        base: url::Url::parse("memory:///").unwrap(),
        prefix: object_store::path::Path::from("b"),
        url: "memory:///b".into(),
    };
    let e = remote::upload_dir(tmp.path(), &dir, &|_, _| {}).unwrap_err();
    assert!(
        e.to_string().contains("node-0/0_0_0.data") && e.to_string().contains("second part"),
        "{e}"
    );
    assert!(store.aborted.load(std::sync::atomic::Ordering::SeqCst));
    let listed: Vec<_> = futures::executor::block_on(futures::StreamExt::collect::<Vec<_>>(
        object_store::ObjectStore::list(&store.inner, None),
    ));
    assert!(listed.is_empty(), "{listed:?}");
}

#[test]
fn fetch_refuses_damaged_or_foreign_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(2, 4, 1, 1).unwrap();
    build(&sample_rows(500), &layout, 100, 1 << 20, tmp.path()).unwrap();
    let src = node_dir(&tmp.path().join("out"), 0);
    let dir_source = DirSource(src.clone());

    // Another node's folder, or another store's, is refused before anything is copied.
    for (store, node) in [("recs", 1), ("other", 0)] {
        let dest = tmp.path().join(format!("d-{store}-{node}"));
        let e = fetch_node(
            &dir_source,
            &dest,
            &FetchTarget { store, node },
            0,
            &FetchProgress::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("push the build made for this store"),
            "{e}"
        );
        assert!(!dest.exists());
    }

    // A flipped byte in a data file fails that file's MD5; the bad copy is not kept.
    let meta = crate::fetch::read_source_metadata(
        &dir_source,
        &FetchTarget {
            store: "recs",
            node: 0,
        },
    )
    .unwrap()
    .0;
    let data = meta
        .files
        .iter()
        .find(|f| f.name.ends_with(".data") && f.bytes > 0)
        .unwrap();
    let path = src.join(&data.name);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let dest = tmp.path().join("d-bad");
    let target = FetchTarget {
        store: "recs",
        node: 0,
    };
    let e = fetch_node(&dir_source, &dest, &target, 0, &FetchProgress::default()).unwrap_err();
    assert!(matches!(e, ReadOnlyError::Corrupt { .. }), "{e}");
    assert!(!dest.join(&data.name).exists());
    assert!(!crate::fetch::is_fetched(&dest));

    // A folder without .metadata is named, with a hint.
    let e = fetch_node(
        &DirSource(tmp.path().join("out")),
        &tmp.path().join("d-none"),
        &target,
        0,
        &FetchProgress::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("node-0 folder"), "{e}");

    // Unsupported and relative sources say what to give instead.
    let err = |url: &str| source_location(url).unwrap_err().to_string();
    assert!(
        err("ftp://host/x").contains("not supported"),
        "{}",
        err("ftp://host/x")
    );
    assert!(err("build/out").contains("absolute"));
    assert!(err("file://relative/x").contains("absolute"));
    let local = |url: &str| match source_location(url).unwrap() {
        Location::Local(p) => p,
        Location::Remote(r) => panic!("{url} parsed as remote {}", r.url),
    };
    assert_eq!(local("file:///a/b"), Path::new("/a/b"));
    assert_eq!(local("/a/b/"), Path::new("/a/b"));
    // Object stores parse without a request; the prefix is the URL's path.
    for (url, base, prefix) in [
        ("s3://bucket/builds/v1/", "s3://bucket/", "builds/v1"),
        ("http://127.0.0.1:8080/x/y", "http://127.0.0.1:8080/", "x/y"),
        ("https://files.example/b", "https://files.example/", "b"),
    ] {
        match source_location(url).unwrap() {
            Location::Remote(r) => {
                assert_eq!(
                    (r.base.as_str(), r.prefix.as_ref()),
                    (base, prefix),
                    "{url}"
                );
                assert_eq!(
                    r.child("node-2").describe(".metadata"),
                    format!("{}/node-2/.metadata", url.trim_end_matches('/'))
                );
            }
            Location::Local(p) => panic!("{url} parsed as {p:?}"),
        }
    }
}

#[test]
fn fetch_honours_its_throttle() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(1, 2, 1, 1).unwrap();
    build(&sample_rows(4_000), &layout, 1_000, 1 << 20, tmp.path()).unwrap();
    let src = node_dir(&tmp.path().join("out"), 0);
    let target = FetchTarget {
        store: "recs",
        node: 0,
    };
    let src = DirSource(src);
    let meta = crate::fetch::read_source_metadata(&src, &target).unwrap().0;
    let total: u64 = meta.files.iter().map(|f| f.bytes).sum();
    // At twice the folder's size per second the copy takes at least half a second: the
    // throttle sleeps after each block until the bytes copied are due.
    let rate = total * 2;
    let started = std::time::Instant::now();
    fetch_node(
        &src,
        &tmp.path().join("d"),
        &target,
        rate,
        &FetchProgress::default(),
    )
    .unwrap();
    let floor = std::time::Duration::from_millis(450);
    assert!(
        started.elapsed() >= floor.mul_f64(0.9),
        "{:?} < {floor:?}",
        started.elapsed()
    );
}

#[test]
fn partition_scans_page_through_every_tuple_once() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(2, 8, 2, 3).unwrap();
    let rows = sample_rows(2_000);
    build(&rows, &layout, 400, 1 << 20, tmp.path()).unwrap();
    let versions = open_all(&layout, tmp.path());
    let s = schema();
    for (n, v) in &versions {
        let mut seen = std::collections::BTreeSet::new();
        for p in 0..layout.partitions() {
            let holds = layout.preference_list(p).iter().any(|x| x.1 == *n);
            let mut cursor = ScanCursor::default();
            loop {
                let page = v.scan(p, cursor, 300);
                if !holds {
                    assert!(page.is_err(), "node {n} does not hold partition {p}");
                    break;
                }
                let (tuples, next) = page.unwrap();
                for (k, val) in tuples {
                    assert_eq!(v.get(&k).unwrap(), Some(&val[..]));
                    assert!(seen.insert(k), "a tuple came twice");
                }
                match next {
                    Some(c) => cursor = c,
                    None => break,
                }
            }
        }
        // Every row whose partition this node holds, and nothing else.
        let expect: std::collections::BTreeSet<Vec<u8>> = rows
            .iter()
            .map(|r| s.encode_key(&key(r)).unwrap())
            .filter(|k| v.holds(k))
            .collect();
        assert_eq!(seen, expect, "node {n}");
    }
}

#[test]
fn replicas_of_a_bucket_are_the_same_bytes() {
    // A rebalance copies a partition from whichever replica holds it and stores it
    // under its own replica number; that is only sound if the bytes are the same.
    let tmp = tempfile::tempdir().unwrap();
    let layout = StoreLayout::round_robin(3, 6, 3, 2).unwrap();
    build(&sample_rows(2_000), &layout, 300, 1 << 20, tmp.path()).unwrap();
    let files = files_of(&tmp.path().join("out"));
    for p in 0..6 {
        for c in 0..2 {
            for ext in ["index", "data"] {
                let copies: Vec<&Vec<u8>> = files
                    .iter()
                    .filter(|(name, _)| {
                        let file = name.split('/').nth(1).unwrap();
                        file.starts_with(&format!("{p}_")) && file.ends_with(&format!("_{c}.{ext}"))
                    })
                    .map(|(_, b)| b)
                    .collect();
                assert_eq!(copies.len(), 3, "partition {p} chunk {c} .{ext}");
                assert!(copies.windows(2).all(|w| w[0] == w[1]));
            }
        }
    }
}

#[test]
fn rebalance_assembles_folders_that_answer_on_both_rings() {
    let tmp = tempfile::tempdir().unwrap();
    let old = StoreLayout::round_robin(3, 12, 2, 2).unwrap();
    let rows = sample_rows(3_000);
    build(&rows, &old, 400, 1 << 20, tmp.path()).unwrap();
    let out = tmp.path().join("out");
    let new = old.rebalanced(4).unwrap();
    // Donors are addressed by their node folder's path here.
    let connect = |addr: &str, _v: u64| -> Result<Box<dyn FetchSource>> {
        Ok(Box::new(DirSource(std::path::PathBuf::from(addr))))
    };
    let mut assembled = BTreeMap::new();
    for node in 0..4u32 {
        let donors = RebalancePlan::partitions_to_copy(&old, &new, node)
            .into_iter()
            .map(|p| {
                let mut list = vec![Donor {
                    addr: "/nonexistent/first-donor-is-down".into(),
                    replica: 0,
                }];
                list.extend(
                    old.preference_list(p)
                        .iter()
                        .enumerate()
                        .map(|(r, &(_, n))| Donor {
                            addr: node_dir(&out, n).to_string_lossy().to_string(),
                            replica: r as u32,
                        }),
                );
                (p, list)
            })
            .collect();
        let plan = RebalancePlan {
            store: "recs".into(),
            schema: schema(),
            layout: new.clone(),
            from_version: 1,
            donors,
        };
        let live = (node < 3)
            .then(|| StoreVersion::open(&node_dir(&out, node), Verify::Checksums).unwrap());
        let dest = tmp.path().join(format!("assembled-{node}"));
        let progress = FetchProgress::default();
        let meta =
            rebalance::assemble(&plan, node, live.as_ref(), &dest, &connect, 0, &progress).unwrap();
        assert_eq!(
            progress
                .bytes_done
                .load(std::sync::atomic::Ordering::Relaxed),
            progress
                .bytes_total
                .load(std::sync::atomic::Ordering::Relaxed)
        );
        // Assembling again finds everything in place.
        let again = rebalance::assemble(
            &plan,
            node,
            live.as_ref(),
            &dest,
            &connect,
            0,
            &FetchProgress::default(),
        )
        .unwrap();
        assert_eq!(meta, again);
        let v = StoreVersion::open(&dest, Verify::Checksums).unwrap();
        assert_eq!(v.metadata().rows, meta.rows);
        assembled.insert(node, v);
    }
    // The new node holds its fair share; every key answers on every node of its
    // preference list on the new ring and, for the old nodes, on the old ring too.
    assert_eq!(new.partition_nodes.iter().filter(|&&n| n == 3).count(), 3);
    let s = schema();
    for r in &rows {
        let k = s.encode_key(&key(r)).unwrap();
        for layout in [&old, &new] {
            let p = layout.partition_of(&KeyHash::of(&k));
            for &(_, n) in &layout.preference_list(p) {
                assert_eq!(
                    assembled[&n].get_row(&key(r)).unwrap(),
                    Some(expected(r)),
                    "node {n}"
                );
            }
        }
    }
    // A folder whose held list misses a partition of its ring is refused at open.
    let dest = tmp.path().join("assembled-3");
    let meta_path = dest.join(METADATA_FILE);
    let mut meta: NodeMetadata =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    let chunks = meta.layout.chunks as usize;
    meta.held.as_mut().unwrap().drain(..chunks);
    meta.files.drain(..2 * chunks);
    meta.checksum = NodeMetadata::checksum_of(&meta.files).unwrap();
    std::fs::write(&meta_path, meta.to_bytes()).unwrap();
    let e = StoreVersion::open(&dest, Verify::Sizes).unwrap_err();
    assert!(e.to_string().contains("must hold partition"), "{e}");
}
