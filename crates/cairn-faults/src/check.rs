//! Checkers of recorded histories.
//!
//! - Registers: linearizability, by porcupine (the Go program in `porcupine/` next to
//!   this crate, built on first use with the Go toolchain and the Go module proxy).
//! - Counter: the final value lies within [acknowledged increments, attempted
//!   increments] (attempted = acknowledged + unknown outcomes).
//! - Set: every acknowledged insert is in the final read, and nothing is there that
//!   was never attempted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::history::{Event, Kind};
use crate::{FaultsError, Result};

/// The outcome of one checker.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    /// The checker.
    pub checker: String,
    /// Whether the history passed.
    pub ok: bool,
    /// Operations checked.
    pub operations: usize,
    /// What was found (for a failure: the smallest failing history).
    pub detail: String,
}

/// The directory of the porcupine checker's sources.
pub fn porcupine_sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("porcupine")
}

/// Builds the porcupine checker into `out_dir` and returns it (Go's build cache makes
/// a rebuild of unchanged sources quick).
pub fn build_porcupine(out_dir: &Path) -> Result<PathBuf> {
    let bin = out_dir.join("cairn-porcupine");
    std::fs::create_dir_all(out_dir)
        .map_err(|e| FaultsError::io(format!("creating {}", out_dir.display()), e))?;
    let out = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(porcupine_sources())
        .output()
        .map_err(|e| {
            FaultsError::Checker(format!(
                "running `go build` for the linearizability checker failed ({e}); install Go"
            ))
        })?;
    if !out.status.success() {
        return Err(FaultsError::Checker(format!(
            "building the linearizability checker failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(bin)
}

/// Checks the register history in `history_file` with porcupine.
pub fn linearizable(
    checker: &Path,
    history_file: &Path,
    name: &str,
    visualize: &Path,
) -> Result<Verdict> {
    let out = Command::new(checker)
        .arg("-visualize")
        .arg(visualize)
        .arg(history_file)
        .output()
        .map_err(|e| FaultsError::io(format!("running {}", checker.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let summary: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
        FaultsError::Checker(format!(
            "unreadable answer from the checker ({e}): {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    let ok = out.status.code() == Some(0);
    let result = summary["result"].as_str().unwrap_or("?").to_string();
    if !ok && result != "Illegal" {
        return Err(FaultsError::Checker(format!(
            "the linearizability check did not finish ({result}): {text}"
        )));
    }
    let detail = if ok {
        format!(
            "linearizable: {} keys, {} unknown outcomes",
            summary["keys"], summary["indeterminate"]
        )
    } else {
        format!(
            "NOT linearizable: key {} — {}\n  (visualization: {})",
            summary["failed_key"],
            summary["failed_key_history"]
                .as_array()
                .map(|v| v
                    .iter()
                    .filter_map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  "))
                .unwrap_or_default(),
            visualize.display()
        )
    };
    Ok(Verdict {
        checker: name.to_string(),
        ok,
        operations: summary["operations"].as_u64().unwrap_or(0) as usize,
        detail,
    })
}

/// Checks the counter: `final_value` must lie within [acknowledged, attempted].
pub fn counter(events: &[Event], final_value: i64) -> Verdict {
    let done: Vec<&Event> = events
        .iter()
        .filter(|e| e.f == "add" && e.kind != Kind::Invoke)
        .collect();
    let acked = done.iter().filter(|e| e.kind == Kind::Ok).count() as i64;
    let unknown = done.iter().filter(|e| e.kind == Kind::Info).count() as i64;
    let invoked = events
        .iter()
        .filter(|e| e.f == "add" && e.kind == Kind::Invoke)
        .count() as i64;
    // Invocations still running when the history ended count as unknown too.
    let attempted = acked + unknown + (invoked - done.len() as i64);
    let ok = (acked..=attempted).contains(&final_value);
    Verdict {
        checker: "counter".into(),
        ok,
        operations: invoked as usize,
        detail: format!(
            "final value {final_value}, acknowledged {acked}, attempted {attempted}{}",
            if ok {
                ""
            } else if final_value < acked {
                " — acknowledged increments were LOST"
            } else {
                " — increments were applied that were never attempted (or twice)"
            }
        ),
    }
}

/// Checks the set: acknowledged inserts present, nothing unattempted present.
pub fn set(events: &[Event], final_read: &[i64]) -> Verdict {
    let read: BTreeSet<i64> = final_read.iter().copied().collect();
    let attempted: BTreeSet<i64> = events
        .iter()
        .filter(|e| e.f == "insert" && e.kind == Kind::Invoke)
        .filter_map(|e| e.value)
        .collect();
    let acked: BTreeSet<i64> = events
        .iter()
        .filter(|e| e.f == "insert" && e.kind == Kind::Ok)
        .filter_map(|e| e.value)
        .collect();
    let failed: BTreeSet<i64> = events
        .iter()
        .filter(|e| e.f == "insert" && e.kind == Kind::Fail)
        .filter_map(|e| e.value)
        .collect();
    let lost: Vec<i64> = acked.difference(&read).copied().collect();
    let phantom: Vec<i64> = read.difference(&attempted).copied().collect();
    let failed_but_there: Vec<i64> = read.intersection(&failed).copied().collect();
    let dupes = final_read.len() - read.len();
    let ok = lost.is_empty() && phantom.is_empty() && failed_but_there.is_empty() && dupes == 0;
    let show = |v: &[i64]| {
        v.iter()
            .take(10)
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Verdict {
        checker: "set".into(),
        ok,
        operations: attempted.len(),
        detail: format!(
            "{} acknowledged, {} read back, {} lost [{}], {} never attempted [{}], {} reported \
             failed yet present [{}], {} duplicates",
            acked.len(),
            read.len(),
            lost.len(),
            show(&lost),
            phantom.len(),
            show(&phantom),
            failed_but_there.len(),
            show(&failed_but_there),
            dupes
        ),
    }
}

/// Checks the set's searches and counts of a group `g` (HyperDex's search
/// consistency): a search finds every element whose insert was acknowledged before the
/// search began, finds nothing outside group `g` or never inserted (or whose insert
/// began after the search ended), and finds each element once; a count lies between
/// the acknowledged-before and the attempted elements of its group.
pub fn search(events: &[Event], groups: i64) -> Verdict {
    use std::collections::HashMap;
    // When each element's insert began and when it was acknowledged.
    let mut invoked: HashMap<i64, u64> = HashMap::new();
    let mut acked: HashMap<i64, u64> = HashMap::new();
    // The invoke time of each process's operation in progress.
    let mut started: HashMap<usize, u64> = HashMap::new();
    let mut problems: Vec<String> = Vec::new();
    let (mut searches, mut counts) = (0usize, 0usize);
    for e in events {
        match (e.f, e.kind) {
            ("insert", Kind::Invoke) => {
                if let Some(v) = e.value {
                    invoked.insert(v, e.time);
                }
            }
            ("insert", Kind::Ok) => {
                if let Some(v) = e.value {
                    acked.insert(v, e.time);
                }
            }
            ("search" | "count", Kind::Invoke) => {
                started.insert(e.process, e.time);
            }
            (f @ ("search" | "count"), Kind::Ok) => {
                let began = started.get(&e.process).copied().unwrap_or(0);
                let Ok(g) = e.key.parse::<i64>() else {
                    problems.push(format!("a {f} of group '{}'", e.key));
                    continue;
                };
                let in_group = |x: &i64| x.rem_euclid(groups) == g;
                let must: BTreeSet<i64> = acked
                    .iter()
                    .filter(|(x, t)| in_group(x) && **t < began)
                    .map(|(x, _)| *x)
                    .collect();
                let may: BTreeSet<i64> = invoked
                    .iter()
                    .filter(|(x, t)| in_group(x) && **t < e.time)
                    .map(|(x, _)| *x)
                    .collect();
                if f == "count" {
                    counts += 1;
                    let n = e.value.unwrap_or(-1);
                    if n < must.len() as i64 || n > may.len() as i64 {
                        problems.push(format!(
                            "count of group {g} at {} ns = {n}, outside [{}, {}]",
                            e.time,
                            must.len(),
                            may.len()
                        ));
                    }
                    continue;
                }
                searches += 1;
                let found = e.found.clone().unwrap_or_default();
                let set: BTreeSet<i64> = found.iter().copied().collect();
                if set.len() != found.len() {
                    problems.push(format!(
                        "search of group {g} at {} ns found {} elements twice",
                        e.time,
                        found.len() - set.len()
                    ));
                }
                let missed: Vec<i64> = must.difference(&set).copied().collect();
                if !missed.is_empty() {
                    problems.push(format!(
                        "search of group {g} at {} ns MISSED acknowledged elements {:?}",
                        e.time,
                        &missed[..missed.len().min(10)]
                    ));
                }
                let phantom: Vec<i64> = set.difference(&may).copied().collect();
                if !phantom.is_empty() {
                    problems.push(format!(
                        "search of group {g} at {} ns found elements never inserted into it \
                         by then {:?}",
                        e.time,
                        &phantom[..phantom.len().min(10)]
                    ));
                }
            }
            _ => {}
        }
    }
    Verdict {
        checker: "search".into(),
        ok: problems.is_empty(),
        operations: searches + counts,
        detail: if problems.is_empty() {
            format!("{searches} searches and {counts} counts agree with the inserts")
        } else {
            format!(
                "{} of {} operations wrong: {}",
                problems.len(),
                searches + counts,
                problems[..problems.len().min(5)].join("; ")
            )
        },
    }
}

/// Checks the bank: every balances read that succeeded — and the final read — saw
/// every account once and the total they opened with (snapshot isolation: a
/// transfer is seen whole or not at all); at least one transfer committed.
pub fn bank(events: &[Event], final_read: &[(i64, i64)], accounts: i64, total: i64) -> Verdict {
    let reads: Vec<&Event> = events
        .iter()
        .filter(|e| e.f == "balances" && e.kind == Kind::Ok)
        .collect();
    let transfers = events
        .iter()
        .filter(|e| e.f == "transfer" && e.kind == Kind::Invoke)
        .count();
    let committed = events
        .iter()
        .filter(|e| e.f == "transfer" && e.kind == Kind::Ok)
        .count();
    let wrong = |rows: &[(i64, i64)]| {
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        let sum: i64 = rows.iter().map(|(_, b)| b).sum();
        (ids != (0..accounts).collect::<Vec<_>>() || sum != total)
            .then(|| format!("read {} accounts totalling {sum}: {rows:?}", rows.len()))
    };
    let mut problems: Vec<String> = reads
        .iter()
        .filter_map(|e| {
            wrong(e.rows.as_deref().unwrap_or_default())
                .map(|w| format!("process {} at {} ns {w}", e.process, e.time))
        })
        .collect();
    if let Some(w) = wrong(final_read) {
        problems.push(format!("the final read {w}"));
    }
    if committed == 0 {
        problems.push("no transfer committed".into());
    }
    Verdict {
        checker: "bank".into(),
        ok: problems.is_empty(),
        operations: transfers + reads.len(),
        detail: if problems.is_empty() {
            format!(
                "{} snapshot reads and the final read total {total}; {committed} of \
                 {transfers} transfers committed",
                reads.len()
            )
        } else {
            format!(
                "{} bad reads, e.g. {}",
                problems.len(),
                problems[..problems.len().min(3)].join("; ")
            )
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::History;

    #[test]
    fn bank_checker_catches_a_torn_read() {
        let h = History::new();
        h.invoke(0, "transfer", "0->1", Some(3), None)
            .complete(Kind::Ok, None);
        h.invoke(1, "balances", "accounts", None, None)
            .read_rows(vec![(0, 97), (1, 103)]);
        let ev = h.events();
        let good = [(0, 97), (1, 103)];
        assert!(bank(&ev, &good, 2, 200).ok);
        assert!(
            !bank(&ev, &[(0, 97), (1, 100)], 2, 200).ok,
            "a final read that misses half a transfer"
        );
        assert!(!bank(&ev, &[(0, 200)], 2, 200).ok, "an account missing");
        h.invoke(1, "balances", "accounts", None, None)
            .read_rows(vec![(0, 97), (1, 100)]);
        assert!(
            !bank(&h.events(), &good, 2, 200).ok,
            "a snapshot read that saw half a transfer"
        );
        let none = History::new();
        assert!(
            !bank(&none.events(), &good, 2, 200).ok,
            "no transfer committed"
        );
    }

    #[test]
    fn search_checker_catches_missed_phantom_and_doubled_elements() {
        let h = History::new();
        // 8 and 16 are in group 0 (of 8), acknowledged; 3 is in group 3.
        for e in [8, 16, 3] {
            h.invoke(0, "insert", &e.to_string(), Some(e), None)
                .complete(Kind::Ok, None);
        }
        let good = h.invoke(1, "search", "0", None, None);
        // Begun during the search: it may or may not be found.
        h.invoke(0, "insert", "24", Some(24), None)
            .complete(Kind::Info, None);
        good.found(vec![16, 8, 24]);
        h.invoke(1, "count", "0", None, None)
            .complete(Kind::Ok, Some(2));
        assert!(search(&h.events(), 8).ok, "{:?}", search(&h.events(), 8));

        for (found, what) in [
            (vec![8], "MISSED"),
            (vec![8, 16, 3], "never inserted into it"),
            (vec![8, 16, 8], "twice"),
            (vec![8, 16, 32], "never inserted into it"),
        ] {
            let bad = History::new();
            for e in [8, 16, 3] {
                bad.invoke(0, "insert", &e.to_string(), Some(e), None)
                    .complete(Kind::Ok, None);
            }
            bad.invoke(1, "search", "0", None, None).found(found);
            let v = search(&bad.events(), 8);
            assert!(!v.ok && v.detail.contains(what), "{what}: {v:?}");
        }
        let bad = History::new();
        bad.invoke(0, "insert", "8", Some(8), None)
            .complete(Kind::Ok, None);
        bad.invoke(1, "count", "0", None, None)
            .complete(Kind::Ok, Some(0));
        assert!(!search(&bad.events(), 8).ok);
    }

    #[test]
    fn counter_and_set_checkers_catch_losses() {
        let h = History::new();
        h.invoke(0, "add", "c", Some(1), None)
            .complete(Kind::Ok, None);
        h.invoke(1, "add", "c", Some(1), None)
            .complete(Kind::Info, None);
        h.invoke(0, "add", "c", Some(1), None)
            .complete(Kind::Ok, None);
        let ev = h.events();
        assert!(counter(&ev, 2).ok);
        assert!(counter(&ev, 3).ok);
        assert!(!counter(&ev, 1).ok, "an acknowledged increment lost");
        assert!(!counter(&ev, 4).ok, "an increment applied twice");

        let h = History::new();
        h.invoke(0, "insert", "1", Some(1), None)
            .complete(Kind::Ok, None);
        h.invoke(0, "insert", "2", Some(2), None)
            .complete(Kind::Info, None);
        h.invoke(1, "insert", "3", Some(3), None)
            .complete(Kind::Fail, None);
        let ev = h.events();
        assert!(set(&ev, &[1]).ok);
        assert!(set(&ev, &[1, 2]).ok);
        assert!(!set(&ev, &[2]).ok, "lost an acknowledged insert");
        assert!(!set(&ev, &[1, 9]).ok, "read something never attempted");
        assert!(!set(&ev, &[1, 1]).ok, "a duplicate");
        assert!(!set(&ev, &[1, 3]).ok, "reported failed, yet present");
    }

    /// Porcupine (Go) must tell a cas whose comparison failed — evidence about the
    /// register — from a cas that failed with an error and compared nothing.
    #[test]
    fn a_cas_that_errored_says_nothing_about_the_register() {
        if Command::new("go").arg("version").output().is_err() {
            assert!(std::env::var("CI").is_err(), "Go is missing (see .ci/run)");
            eprintln!("skipping: Go is not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let checker = build_porcupine(dir.path()).unwrap();
        let verdict = |compared: bool| {
            let h = History::new();
            h.invoke(0, "write", "r0", Some(1), None)
                .complete(Kind::Ok, None);
            h.invoke(0, "cas", "r0", Some(3), Some(1))
                .complete(Kind::Ok, None);
            let cas = h.invoke(1, "cas", "r0", Some(4), Some(3));
            if compared {
                cas.complete(Kind::Fail, None);
            } else {
                cas.error("refused: the clock bound");
            }
            h.invoke(1, "read", "r0", None, None)
                .complete(Kind::Ok, Some(3));
            let file = dir.path().join("history.jsonl");
            crate::history::write_jsonl(&file, &h.events()).unwrap();
            linearizable(&checker, &file, "registers", &dir.path().join("v.html")).unwrap()
        };
        assert!(verdict(false).ok, "an errored cas is no comparison");
        assert!(
            !verdict(true).ok,
            "cas(3 -> 4) failing on a register holding 3"
        );
    }
}
