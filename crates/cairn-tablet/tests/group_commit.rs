//! Group commit of a [`LocalTablet`]'s log under `FsyncPolicy::Always` (one test per
//! binary: failpoints are global to the process).
//!
//! Writers that arrive during an fsync share the next one; a write is neither acknowledged nor visible before
//! its record is durable; a failed fsync fails the tablet and every write waiting on
//! it, and leaves no reader waiting.

mod common;

use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_tablet::{LocalTablet, ReadMode, RowOp, TabletError, TabletOptions};
use common::{ordered_rows, small_options};

const WRITERS: i64 = 6;
const BATCHES: i64 = 8;

fn schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("v", DataType::Int64),
        ],
        &["k"],
    )
    .unwrap()
}

fn options() -> TabletOptions {
    TabletOptions {
        fsync: cairn_wal::FsyncPolicy::Always,
        ..small_options()
    }
}

fn insert(k: i64) -> Vec<RowOp> {
    vec![RowOp::insert(vec![Value::Int64(k), Value::Int64(k * 10)])]
}

/// Waits until the log has grown past `bytes` (a record was appended).
fn wait_for_append(t: &LocalTablet, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while t.log_size().0 <= bytes {
        assert!(Instant::now() < deadline, "no record was appended");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Open or closed, and its change.
type Gate = Arc<(Mutex<bool>, Condvar)>;

/// Makes every group fsync wait, before it syncs, until `gate` is open.
fn hold_fsyncs(gate: &Gate) {
    let gate = gate.clone();
    fail::cfg_callback("local::group_sync", move || {
        let (open, cv) = &*gate;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
    })
    .unwrap();
}

fn open(gate: &Gate) {
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
}

#[test]
fn writers_share_fsyncs_and_see_only_durable_writes() {
    let dir = tempfile::tempdir().unwrap();
    let t = LocalTablet::create(dir.path(), schema(), options()).unwrap();
    let maintenance = t.start_maintenance();

    // 1. Concurrent writers, with flushes and log GC running and every fsync taking
    // a few milliseconds: each acknowledged write is durable and visible.
    fail::cfg("local::group_sync", "sleep(5)").unwrap();
    let start = Arc::new(Barrier::new(WRITERS as usize));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (t, start) = (t.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for b in 0..BATCHES {
                    let res = t.write(insert(w * 1000 + b)).unwrap();
                    assert!(res.row_errors.is_empty(), "{:?}", res.row_errors);
                    // Acknowledged means visible to a read that follows.
                    let got = t.get(&[Value::Int64(w * 1000 + b)], ReadMode::Latest);
                    assert!(got.unwrap().is_some(), "writer {w} batch {b}");
                }
            })
        })
        .collect();
    for h in writers {
        h.join().unwrap();
    }
    let writes = (WRITERS * BATCHES) as u64;
    assert!(t.group_syncs() <= writes);
    fail::remove("local::group_sync");

    // 1b. Writes that arrive while an fsync runs share the next one: hold the first
    // fsync until five more writes are appended; the six take two fsyncs.
    let gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
    hold_fsyncs(&gate);
    let syncs = t.group_syncs();
    let before = t.log_size().0;
    let mut writers = vec![{
        let t = t.clone();
        std::thread::spawn(move || t.write(insert(40_000)).unwrap())
    }];
    wait_for_append(&t, before);
    let record = t.log_size().0 - before;
    for k in 1..6 {
        let t = t.clone();
        writers.push(std::thread::spawn(move || {
            t.write(insert(40_000 + k)).unwrap()
        }));
    }
    wait_for_append(&t, before + 6 * record - 1);
    open(&gate);
    for h in writers {
        h.join().unwrap();
    }
    assert_eq!(t.group_syncs() - syncs, 2, "six writes, two fsyncs");
    fail::remove("local::group_sync");

    // 2. A write is not visible while its fsync runs.
    fail::cfg("local::group_sync", "sleep(300)").unwrap();
    let before = t.log_size().0;
    let writer = {
        let t = t.clone();
        std::thread::spawn(move || t.write(insert(50_000)).unwrap())
    };
    wait_for_append(&t, before);
    assert_eq!(
        t.get(&[Value::Int64(50_000)], ReadMode::Latest).unwrap(),
        None,
        "a row was visible before its record was durable"
    );
    writer.join().unwrap();
    assert!(
        t.get(&[Value::Int64(50_000)], ReadMode::Latest)
            .unwrap()
            .is_some()
    );
    fail::remove("local::group_sync");

    // 3. A failed fsync fails the writes waiting on it and the tablet; readers are
    // not left waiting on their timestamps. The first fsync (of one write) is held
    // until two more writes queue behind it, and the next one fails.
    *gate.0.lock().unwrap() = false;
    hold_fsyncs(&gate);
    let before = t.log_size().0;
    let write = |k: i64| {
        let t = t.clone();
        std::thread::spawn(move || t.write(insert(k)))
    };
    let first = write(60_000);
    wait_for_append(&t, before);
    let record = t.log_size().0 - before;
    let queued = [write(60_001), write(60_002)];
    wait_for_append(&t, before + 3 * record - 1);
    fail::cfg("local::group_sync", "return").unwrap();
    open(&gate);
    first.join().unwrap().unwrap();
    for h in queued {
        let err = h.join().unwrap().unwrap_err();
        assert!(matches!(err, TabletError::Failed(_)), "{err}");
    }
    fail::remove("local::group_sync");
    assert!(t.failure().is_some());
    assert!(matches!(
        t.write(insert(60_003)),
        Err(TabletError::Failed(_))
    ));
    drop(maintenance);
    drop(t);

    // Every acknowledged write is there after a reopen.
    let t = LocalTablet::open(dir.path(), options()).unwrap();
    let keys: Vec<i64> = ordered_rows(&t)
        .iter()
        .map(|r| match r[0] {
            Value::Int64(k) => k,
            ref v => panic!("key {v:?}"),
        })
        .collect();
    for w in 0..WRITERS {
        for b in 0..BATCHES {
            assert!(keys.contains(&(w * 1000 + b)), "lost {}", w * 1000 + b);
        }
    }
    assert!(keys.contains(&50_000));
    assert!((40_000..40_006).all(|k| keys.contains(&k)));
    assert!(keys.contains(&60_000));
    assert!(!keys.contains(&60_003));
}
