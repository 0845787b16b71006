//! Crash tests: a separate process writes to a tablet (with the maintenance manager
//! flushing and compacting underneath, the log fsynced on every write) and reports
//! every acknowledged batch; it dies by SIGKILL — sent by the test at a varying moment,
//! or sent to itself right after a MemRowSet flush recorded its new rowsets — and the
//! test reopens the tablet and checks that every acknowledged row is present with its
//! value and that no row exists that was never written. Repeated over several
//! kill/restart cycles on the same tablet.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_tablet::{LocalTablet, RowOp, TabletOptions};
use common::{ordered_rows, small_options};

const CHILD_ENV: &str = "CAIRN_CRASH_CHILD_DIR";
/// Set for a child that kills itself right after its first MemRowSet flush.
const AT_FLUSH_ENV: &str = "CAIRN_CRASH_AT_FLUSH";
const BATCH: i64 = 20;

fn schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("v", DataType::String),
        ],
        &["k"],
    )
    .unwrap()
}

fn opts() -> TabletOptions {
    // Durability is what this test checks: the log is fsynced on every write.
    TabletOptions {
        mrs_flush_bytes: 32 << 10,
        fsync: cairn_wal::FsyncPolicy::Always,
        ..small_options()
    }
}

fn value_for(k: i64) -> Value {
    Value::String(format!("value-{k}"))
}

/// The child: writes batches forever, printing `ack <first> <last>` after each.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    if std::env::var(AT_FLUSH_ENV).is_ok() {
        // kill -9 of itself the moment a flush has written its rowsets and metadata,
        // before anything else (log GC, the next write) happens.
        fail::cfg_callback("tablet::after_flush_mrs", || {
            // SAFETY: getpid and kill have no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        })
        .unwrap();
    }
    let dir = std::path::PathBuf::from(dir);
    let t = if dir.join("tablet-meta").exists() {
        LocalTablet::open(&dir, opts()).unwrap()
    } else {
        LocalTablet::create(&dir, schema(), opts()).unwrap()
    };
    let _mm = t.start_maintenance();
    let start: i64 = std::env::var("CAIRN_CRASH_START").unwrap().parse().unwrap();
    let mut out = std::io::stdout().lock();
    let mut k = start;
    loop {
        let ops: Vec<_> = (k..k + BATCH)
            .map(|i| RowOp::insert(vec![Value::Int64(i), value_for(i)]))
            .collect();
        let r = t.write(ops).unwrap();
        assert!(r.row_errors.is_empty());
        writeln!(out, "ack {} {}", k, k + BATCH - 1).unwrap();
        out.flush().unwrap();
        k += BATCH;
    }
}

/// Acknowledged batches (first and last key of each) over all cycles.
#[derive(Default)]
struct Acked(Vec<(i64, i64)>);

impl Acked {
    /// Records an `ack` line; libtest may print "test crash_child ... " first.
    fn record(&mut self, line: &str) -> bool {
        if let Some(rest) = line.find("ack ").map(|i| &line[i + 4..]) {
            let mut it = rest.split(' ').map(|x| x.parse::<i64>().unwrap());
            self.0.push((it.next().unwrap(), it.next().unwrap()));
            return true;
        }
        false
    }
}

/// Runs one child on `tdir` starting at key `start`. With `kill_after`, kills it after
/// that many acknowledged batches; without, waits for it to kill itself at a flush.
/// Returns the number of batches it acknowledged.
fn run_child(tdir: &Path, start: i64, kill_after: Option<usize>, acked: &mut Acked) -> usize {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "crash_child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, tdir)
    .env("CAIRN_CRASH_START", start.to_string())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if kill_after.is_none() {
        cmd.env(AT_FLUSH_ENV, "1");
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    while kill_after.is_none_or(|k| n < k) && Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if acked.record(&line) {
            n += 1;
        }
    }
    if kill_after.is_some() {
        // SIGKILL: no destructors, no flush, no fsync.
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    // Acks the child printed before it died are acknowledged writes too.
    for line in lines.map_while(|l| l.ok()) {
        if acked.record(&line) {
            n += 1;
        }
    }
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child must die by SIGKILL (status {status:?})"
    );
    n
}

/// Reopens the tablet and checks every acknowledged row, and that no row exists that
/// was never written.
fn check(tdir: &Path, acked: &Acked, cycle: u64) {
    let t = LocalTablet::open(tdir, opts()).unwrap();
    let present: std::collections::BTreeMap<i64, Value> = ordered_rows(&t)
        .into_iter()
        .map(|r| match &r[0] {
            Value::Int64(k) => (*k, r[1].clone()),
            _ => unreachable!(),
        })
        .collect();
    for &(a, b) in &acked.0 {
        for k in a..=b {
            assert_eq!(
                present.get(&k),
                Some(&value_for(k)),
                "cycle {cycle}: acknowledged key {k} lost"
            );
        }
    }
    for (k, v) in &present {
        assert_eq!(
            v,
            &value_for(*k),
            "cycle {cycle}: key {k} has a value never written"
        );
        let attempted = acked.0.iter().any(|(a, b)| k >= a && *k <= b + BATCH);
        assert!(attempted, "cycle {cycle}: key {k} was never written");
    }
    t.shutdown().unwrap();
}

/// Where the next child starts: well above everything an earlier one tried.
fn next_start(acked: &Acked) -> i64 {
    acked.0.last().map_or(0, |l| l.1 + 1_000_000)
}

#[test]
fn crash_test_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let tdir = dir.path().join("t");
    let mut acked = Acked::default();
    for cycle in 0..8u64 {
        // Kill after a varying number of acknowledged batches.
        let target = 40 + (cycle * 137) % 400;
        let start = next_start(&acked);
        let n = run_child(&tdir, start, Some(target as usize), &mut acked);
        assert!(n > 0, "cycle {cycle}: the child acknowledged nothing");
        eprintln!("cycle {cycle}: killed after {n} acknowledged batches");
        check(&tdir, &acked, cycle);
    }
}

#[test]
fn kill_9_right_after_a_flush_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tdir = dir.path().join("t");
    let mut acked = Acked::default();
    for cycle in 0..3u64 {
        let start = next_start(&acked);
        // A reopened child may flush what it replayed before its first write is
        // acknowledged (maintenance runs at once): that is a kill after a flush too.
        let n = run_child(&tdir, start, None, &mut acked);
        eprintln!("cycle {cycle}: died at a flush after {n} acknowledged batches");
        check(&tdir, &acked, cycle);
    }
    assert!(!acked.0.is_empty(), "no child acknowledged anything");
}
