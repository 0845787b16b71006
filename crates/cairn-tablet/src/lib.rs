//! # cairn-tablet — one tablet's storage engine
//!
//! A tablet is one shard of a table: a contiguous slice of its partition-key space,
//! stored as described in §4 of the Kudu paper ("Tablet storage"). This crate is that
//! engine, with no knowledge of replication or RPC: each Raft replica (on a tablet
//! server) owns one [`Tablet`] and feeds it the committed log.
//!
//! How the pieces fit, from write to disk:
//!
//! - [`ops`]: row operations (INSERT, UPSERT, UPDATE, DELETE and their IGNORE forms),
//!   row changes, and the log records that carry them.
//! - [`tablet`]: the [`Tablet`], a state machine fed by a log: the leader's write path
//!   (validation → row [`locks`] → conditions → [`mvcc`] timestamp → record), applying
//!   records, reads, and the maintenance ops (flush, delta flush, compactions, GC,
//!   ALTER), split into one file per job.
//! - [`local`]: [`LocalTablet`], a tablet with a log of its own (tests, tools, demo).
//! - [`txn`]: multi-row transactions — provisional writes owned by their transaction
//!   until it commits (at one timestamp on every tablet) or aborts.
//! - [`results`]: answers of applied client requests, for exactly-once retries.
//! - [`unchained`]: changes applied but not yet chained into the table's subspaces.
//! - [`bulk`]: bulk inserts — checked Arrow batches written straight into new
//!   DiskRowSets.
//! - [`memrowset`]: the in-memory store of new rows with MVCC mutation chains.
//! - [`diskrowset`]: immutable columnar rowsets: Parquet base data, [`keyindex`] (sorted
//!   keys + bloom filter), [`delta`] stores (REDO / UNDO), the predicate skip cache, and
//!   per-row-group scans with lazy materialisation.
//! - [`rowsets`]: the current set of rowsets and the interval tree over their key ranges.
//! - [`history`]: row versions → base + UNDO + REDO (shared by flush and compaction).
//! - [`writer`]: writing new DiskRowSets, rolling at the target size.
//! - [`compaction`] and [`policy`]: rowset compaction (budgeted knapsack choice) and
//!   major delta compaction.
//! - [`maintenance`]: the background thread that picks and runs maintenance ops.
//! - [`scan`]: scan specs and resumable scanners returning Arrow record batches.
//! - [`metadata`]: the atomically replaced, checksummed tablet metadata file.
//! - [`cache`]: the decoded-block cache for point lookups.

pub mod basedata;
pub mod bulk;
pub mod cache;
pub mod compaction;
pub mod delta;
mod deltaapply;
pub mod diskrowset;
pub mod error;
pub mod history;
pub mod keyindex;
pub mod local;
pub mod locks;
pub mod maintenance;
pub mod memrowset;
pub mod metadata;
pub mod mvcc;
pub mod ops;
pub mod policy;
pub mod results;
pub mod rowsets;
pub mod scan;
pub mod skipcache;
pub mod tablet;
pub mod txn;
pub mod unchained;
pub mod writer;

/// The log fsync policy (re-exported from `cairn-wal`).
pub use cairn_wal::FsyncPolicy;
pub use error::{Result, TabletError};
pub use local::LocalTablet;
pub use maintenance::MaintenanceManager;
pub use ops::{OpKind, RequestId, RequestRecord, RowCondition, RowError, RowOp, TxnId, TxnRole};
pub use scan::{ScanSpec, Scanner};
pub use tablet::{
    AlterOp, PreparedBulk, PreparedWrite, ReadMode, Tablet, TabletOptions, TxnDecision, WriteResult,
};
pub use txn::{TxnDecisionRecord, TxnInfo, TxnOutcome};
pub use writer::Codec;
