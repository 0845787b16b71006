//! Cairn's session settings (`SET cairn.…`) and the per-statement context.
//!
//! Settings live in DataFusion's config under the `cairn` prefix, so `SET
//! cairn.read_timestamp = '…'` and `SHOW cairn.read_timestamp` work like any other
//! setting. [`StatementContext`] carries what one statement decides for all of its
//! scans and writes: the snapshot every tablet is read at and how INSERT treats
//! existing keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_common::HybridTime;
use datafusion::common::extensions_options;
use datafusion::config::ConfigExtension;

use crate::error::{Result, SqlError};

extensions_options! {
    /// Settings of a SQL session under the `cairn.` prefix.
    pub struct CairnOptions {
        /// Read every table at this point in time: a timestamp such as
        /// '2026-01-02 03:04:05.123456' (UTC) or a raw HybridTime number. Empty: read
        /// the latest data.
        pub read_timestamp: String, default = String::new()
        /// Hash buckets for a table created without PARTITION BY (0: twice the number
        /// of live tablet servers, at least 2).
        pub default_hash_buckets: u32, default = 0
        /// Replicas per tablet for a table created without WITH (replicas = n) (0: the
        /// master's default).
        pub default_replicas: u32, default = 0
        /// Rows per write request of COPY and of the native client's sessions.
        pub write_batch_rows: usize, default = 1000
        /// A statement writes each tablet's share of its rows as one all-or-nothing
        /// request up to this many rows; a larger share is written in several.
        pub max_atomic_rows: usize, default = 100000
        /// Run prepared statements that name rows by their whole primary key
        /// (`WHERE k = $1` reads, updates and deletes, `INSERT … VALUES`) as direct
        /// keyed reads and writes instead of DataFusion plans. Takes effect for
        /// statements prepared after it is set; off is for comparison only.
        pub keyed_fast_path: bool, default = true
        /// Answer scans whose WHERE clause narrows a subspace of the table by reading
        /// only that subspace's matching regions (hyperspace search). Off scans the
        /// table's own tablets, for comparison.
        pub subspace_search: bool, default = true
        /// Run queries distributed when the SQL engine knows the tablet servers'
        /// workers (a cluster's front ends do, `cairn local` does not): each fragment
        /// runs on the server that leads the tablets it reads. Off runs every query in
        /// this process.
        pub distributed: bool, default = true
        /// The most workers one worker exchanges a distributed query's rows with
        /// (HRDBMS's N_max). On a cluster with more workers than this, each stage
        /// that reads tablets hands its rows to a hub of its group of workers, and
        /// only the hubs run the stages above and exchange rows with one another,
        /// so no worker has more than N_max neighbours (when N_max is at least
        /// about 2√W). 0: no bound.
        pub n_max: usize, default = 64
    }
}

impl ConfigExtension for CairnOptions {
    const PREFIX: &'static str = "cairn";
}

/// How INSERT treats a row whose primary key exists already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum InsertMode {
    /// Fail the statement (SQLSTATE 23505).
    #[default]
    Insert,
    /// Replace the existing row (`UPSERT INTO`, `INSERT OR REPLACE`).
    Upsert,
    /// Keep the existing row and skip the new one (`ON CONFLICT DO NOTHING`).
    Ignore,
}

/// The default value of the Cairn setting `name` (without its `cairn.` prefix), as
/// `SET` takes it; `None` if there is no such setting. `RESET cairn.…` sets it.
pub fn default_of(name: &str) -> Option<String> {
    use datafusion::common::config::ExtensionOptions;
    CairnOptions::default()
        .entries()
        .into_iter()
        .find(|e| e.key == name || e.key.strip_prefix("cairn.") == Some(name))
        .map(|e| e.value.unwrap_or_default())
}

impl InsertMode {
    /// The operation as EXPLAIN shows it: `insert`, `upsert` or `insert ignore`.
    pub fn name(self) -> &'static str {
        match self {
            InsertMode::Insert => "insert",
            InsertMode::Upsert => "upsert",
            InsertMode::Ignore => "insert ignore",
        }
    }
}

/// What one statement decides for all its scans and writes; attached to the
/// statement's session state as a config extension.
#[derive(Debug, Default)]
pub struct StatementContext {
    /// A fixed snapshot (`AS OF` / `cairn.read_timestamp`), if any.
    pub fixed_snapshot: Option<u64>,
    /// The snapshot chosen by the first tablet scanned, shared by every other scan of
    /// the statement.
    pub chosen_snapshot: ChosenSnapshot,
    /// How INSERT treats existing keys.
    pub insert_mode: InsertMode,
    /// The transaction the statement runs in: its scans read as it, its writes are
    /// its provisional rows. `None`: the statement is its own transaction.
    pub txn: Option<Arc<crate::txn::SessionTxn>>,
}

impl StatementContext {
    /// A context for one statement.
    pub fn new(fixed_snapshot: Option<u64>, insert_mode: InsertMode) -> Arc<Self> {
        Self::new_in(fixed_snapshot, insert_mode, None)
    }

    /// A context for one statement of transaction `txn` (if any): it reads at the
    /// transaction's snapshot if it fixed one (REPEATABLE READ), unless `AS OF` fixes
    /// another.
    pub fn new_in(
        fixed_snapshot: Option<u64>,
        insert_mode: InsertMode,
        txn: Option<Arc<crate::txn::SessionTxn>>,
    ) -> Arc<Self> {
        let chosen = fixed_snapshot.or_else(|| txn.as_ref().and_then(|t| t.snapshot()));
        Arc::new(StatementContext {
            fixed_snapshot,
            chosen_snapshot: ChosenSnapshot::new(chosen),
            insert_mode,
            txn,
        })
    }
}

/// The snapshot a statement's scans share. The first scan chooses it while holding
/// the lock (the others wait for its choice); once chosen it can also be read without
/// waiting ([`ChosenSnapshot::known`]), as encoding a plan for a worker does.
#[derive(Debug, Default)]
pub struct ChosenSnapshot {
    lock: tokio::sync::Mutex<Option<u64>>,
    /// The value last left under the lock; 0 for none (0 is never a snapshot).
    known: AtomicU64,
}

impl ChosenSnapshot {
    /// A snapshot already chosen (`Some`), or one the first scan will choose.
    pub fn new(chosen: Option<u64>) -> Self {
        ChosenSnapshot {
            lock: tokio::sync::Mutex::new(chosen),
            known: AtomicU64::new(chosen.unwrap_or(0)),
        }
    }

    /// Waits for the lock: the snapshot, to read or to choose.
    pub async fn lock(&self) -> ChosenGuard<'_> {
        ChosenGuard {
            guard: self.lock.lock().await,
            known: &self.known,
        }
    }

    /// The snapshot as last chosen, without waiting for a scan that is choosing it.
    pub fn known(&self) -> Option<u64> {
        Some(self.known.load(Ordering::Acquire)).filter(|&t| t != 0)
    }
}

/// The locked snapshot of [`ChosenSnapshot::lock`]; what it holds when dropped is what
/// [`ChosenSnapshot::known`] answers.
pub struct ChosenGuard<'a> {
    guard: tokio::sync::MutexGuard<'a, Option<u64>>,
    known: &'a AtomicU64,
}

impl std::ops::Deref for ChosenGuard<'_> {
    type Target = Option<u64>;
    fn deref(&self) -> &Option<u64> {
        &self.guard
    }
}

impl std::ops::DerefMut for ChosenGuard<'_> {
    fn deref_mut(&mut self) -> &mut Option<u64> {
        &mut self.guard
    }
}

impl Drop for ChosenGuard<'_> {
    fn drop(&mut self) {
        self.known.store(self.guard.unwrap_or(0), Ordering::Release);
    }
}

/// Parses a point in time given to `cairn.read_timestamp` or `AS OF`: a raw
/// HybridTime (an integer of more than 16 digits), microseconds since the epoch
/// (fewer digits), or a timestamp string (UTC unless it carries an offset).
pub fn parse_read_timestamp(s: &str) -> Result<u64> {
    let t = s.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Ok(if t.len() > 16 {
            n
        } else {
            HybridTime::from_micros(n).0
        });
    }
    let micros = parse_timestamp_micros(t).ok_or_else(|| {
        SqlError::other(
            "22007",
            format!(
                "cannot read '{s}' as a point in time: use a timestamp like \
                 '2026-01-02 03:04:05.123456' (UTC) or a HybridTime number"
            ),
        )
    })?;
    if micros < 0 {
        return Err(SqlError::other(
            "22008",
            format!("'{s}' is before 1970: Cairn keeps no history that old"),
        ));
    }
    // The last HybridTime of that microsecond: everything written up to and
    // including it is visible.
    Ok(HybridTime::from_parts(micros as u64, (1 << cairn_common::clock::LOGICAL_BITS) - 1).0)
}

/// Microseconds since the epoch of a timestamp string (UTC unless it has an offset).
pub fn parse_timestamp_micros(s: &str) -> Option<i64> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime};
    let s = s.trim();
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Some(dt.timestamp_micros());
    }
    for f in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%d %H:%M:%S%#z"] {
        if let Ok(dt) = DateTime::parse_from_str(s, f) {
            return Some(dt.timestamp_micros());
        }
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, f) {
            return Some(dt.and_utc().timestamp_micros());
        }
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|dt| dt.and_utc().timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_timestamps_parse() {
        let ht = parse_read_timestamp("1970-01-01 00:00:01").unwrap();
        assert_eq!(HybridTime(ht).physical_micros(), 1_000_000);
        assert_eq!(HybridTime(ht).logical(), 4095);
        let ht = parse_read_timestamp("1970-01-01T00:00:02+00:00").unwrap();
        assert_eq!(HybridTime(ht).physical_micros(), 2_000_000);
        assert_eq!(
            parse_read_timestamp("12345678901234567890").unwrap(),
            12345678901234567890
        );
        assert_eq!(
            HybridTime(parse_read_timestamp("5").unwrap()).physical_micros(),
            5
        );
        assert!(parse_read_timestamp("yesterday").is_err());
        assert!(parse_read_timestamp("1960-01-01").is_err());
    }
}
