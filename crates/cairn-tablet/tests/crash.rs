//! Crash test: a separate process writes to a tablet (with the maintenance manager
//! flushing and compacting underneath) and reports every acknowledged batch; the test
//! kills it with SIGKILL at a random moment, reopens the tablet, and checks that every
//! acknowledged row is present with its value and that no row exists that was never
//! written. Repeated over several kill/restart cycles on the same tablet.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_tablet::{MaintenanceManager, RowOp, Tablet, TabletOptions};
use common::{ordered_rows, small_options};

const CHILD_ENV: &str = "CAIRN_CRASH_CHILD_DIR";
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
    TabletOptions {
        mrs_flush_bytes: 32 << 10,
        ..small_options()
    }
}

fn value_for(k: i64) -> Value {
    Value::String(format!("value-{k}"))
}

/// The child: writes batches forever, printing `ack <first> <last>` after each.
#[test]
#[ignore = "run by crash_test_kill_9 as a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let t = if dir.join("tablet-meta").exists() {
        Tablet::open(&dir, opts()).unwrap()
    } else {
        Tablet::create(&dir, schema(), opts()).unwrap()
    };
    let _mm = MaintenanceManager::start(t.clone());
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

#[test]
fn crash_test_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let tdir = dir.path().join("t");
    let exe = std::env::current_exe().unwrap();
    let mut acked: Vec<(i64, i64)> = vec![];
    let mut next_start = 0i64;
    for cycle in 0..4u64 {
        let mut child = Command::new(&exe)
            .args([
                "crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &tdir)
            .env("CAIRN_CRASH_START", next_start.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        // Kill after a varying number of acknowledged batches.
        let target = 40 + (cycle * 37) % 60;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut n = 0;
        let record = |line: &str, acked: &mut Vec<(i64, i64)>| {
            // libtest may print "test crash_child ... " on the same line first.
            if let Some(rest) = line.find("ack ").map(|i| &line[i + 4..]) {
                let mut it = rest.split(' ').map(|x| x.parse::<i64>().unwrap());
                acked.push((it.next().unwrap(), it.next().unwrap()));
                return true;
            }
            false
        };
        while n < target && Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            if record(&line, &mut acked) {
                n += 1;
            }
        }
        // SIGKILL: no destructors, no flush, no fsync.
        child.kill().unwrap();
        child.wait().unwrap();
        // Acks the child printed before it died are acknowledged writes too.
        for line in lines.map_while(|l| l.ok()) {
            record(&line, &mut acked);
        }
        assert!(n > 0, "cycle {cycle}: the child acknowledged nothing");
        // Everything written by a later cycle starts well above what this one tried.
        next_start = acked.last().unwrap().1 + 1_000_000;

        let t = Tablet::open(&tdir, opts()).unwrap();
        let rows = ordered_rows(&t);
        let present: std::collections::BTreeMap<i64, Value> = rows
            .into_iter()
            .map(|r| match &r[0] {
                Value::Int64(k) => (*k, r[1].clone()),
                _ => unreachable!(),
            })
            .collect();
        for &(a, b) in &acked {
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
            let attempted = acked.iter().any(|(a, b)| k >= a && *k <= b + BATCH);
            assert!(attempted, "cycle {cycle}: key {k} was never written");
        }
        t.shutdown().unwrap();
    }
}
