//! Recorded histories: every client operation as an invoke event and a completion
//! event (ok, fail or info), with monotonic timestamps (nanoseconds since the run
//! started), written as JSON lines — the format the porcupine checker reads.
//!
//! - **ok**: the operation happened (reads carry the value they saw).
//! - **fail**: it certainly did not happen (a compare-and-set whose condition did not
//!   hold, a request refused before it reached the log).
//! - **info**: unknown — a timeout or lost connection; it may or may not have happened.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

/// What a completion says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The start of an operation.
    Invoke,
    /// It happened.
    Ok,
    /// It certainly did not happen.
    Fail,
    /// Unknown.
    Info,
}

/// One event.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    /// The client ("process" in Jepsen's terms); one operation at a time each.
    pub process: usize,
    /// Invoke or completion.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// The operation: read, write, cas, add, insert; the bank's transfer and
    /// balances; the set's search and count.
    pub f: &'static str,
    /// The key (registers, counter), element (set insert) or group (set search).
    pub key: String,
    /// The value read or written (cas: the new value).
    pub value: Option<i64>,
    /// cas: the value compared with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<i64>,
    /// A `fail` completion caused by an error that certainly had no effect (as
    /// opposed to a cas whose comparison failed): the error's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// balances: every account's (id, balance) as one snapshot read saw them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<(i64, i64)>>,
    /// search: the set's elements it found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<Vec<i64>>,
    /// Nanoseconds since the run started.
    pub time: u64,
}

/// A shared, append-only history.
#[derive(Clone)]
pub struct History {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> Self {
        History {
            start: Instant::now(),
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Records an invocation; complete it with [`Pending::complete`].
    pub fn invoke(
        &self,
        process: usize,
        f: &'static str,
        key: &str,
        value: Option<i64>,
        expected: Option<i64>,
    ) -> Pending {
        let e = Event {
            process,
            kind: Kind::Invoke,
            f,
            key: key.to_string(),
            value,
            expected,
            error: None,
            rows: None,
            found: None,
            time: self.now(),
        };
        self.events.lock().push(e.clone());
        Pending {
            history: self.clone(),
            invoke: e,
        }
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().clone()
    }
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

/// An invoked operation waiting for its completion.
pub struct Pending {
    history: History,
    invoke: Event,
}

impl Pending {
    /// Records a `fail` completion by an error that certainly had no effect (a cas
    /// that failed this way compared nothing); returns [`Kind::Fail`].
    pub fn error(mut self, error: impl std::fmt::Display) -> Kind {
        self.invoke.error = Some(error.to_string());
        self.complete(Kind::Fail, None)
    }

    /// Records an `ok` completion of a bank read that saw `rows`; returns [`Kind::Ok`].
    pub fn read_rows(mut self, rows: Vec<(i64, i64)>) -> Kind {
        self.invoke.value = Some(rows.iter().map(|(_, b)| b).sum());
        self.invoke.rows = Some(rows);
        self.complete(Kind::Ok, None)
    }

    /// Records an `ok` completion of a search that found `elements`; returns
    /// [`Kind::Ok`].
    pub fn found(mut self, elements: Vec<i64>) -> Kind {
        self.invoke.value = Some(elements.len() as i64);
        self.invoke.found = Some(elements);
        self.complete(Kind::Ok, None)
    }

    /// Records the completion (for reads and counts, `value` is what was read);
    /// returns `kind`.
    pub fn complete(self, kind: Kind, value: Option<i64>) -> Kind {
        let mut e = self.invoke;
        e.kind = kind;
        if e.f == "read" || e.f == "count" {
            e.value = value;
        }
        e.time = self.history.now();
        self.history.events.lock().push(e);
        kind
    }
}

/// Writes `events` as JSON lines to `path`.
pub fn write_jsonl(path: &std::path::Path, events: &[Event]) -> crate::Result<()> {
    let mut out = String::new();
    for e in events {
        out.push_str(
            &serde_json::to_string(e).map_err(|e| crate::FaultsError::Checker(e.to_string()))?,
        );
        out.push('\n');
    }
    std::fs::write(path, out)
        .map_err(|e| crate::FaultsError::io(format!("writing {}", path.display()), e))
}
