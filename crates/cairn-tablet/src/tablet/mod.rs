//! The tablet: one shard's storage engine tying every piece together (Kudu paper §4).
//!
//! A tablet is a state machine fed by a log. Whoever owns the log — a Raft group on a
//! tablet server, or [`crate::local::LocalTablet`] for tests and tools — hands it each
//! record in log order through [`Tablet::apply`]; every replica applying the same log
//! ends in the same state. The code is split by job, as Kudu splits its tablet:
//!
//! - this file: the tablet's state, opening, scans, metadata, shutdown and failure;
//! - [`read`](self::read): reads of one row by key — point reads, and the change a
//!   write made to a row;
//! - [`write`](self::write): the leader's side of a write — validate a batch, lock its
//!   rows, take a timestamp and encode the record to replicate;
//! - [`apply`](self::apply): applying committed records — row ops with their
//!   conditions, all-or-nothing batches, exactly-once answers;
//! - [`bulk`](self::bulk): bulk inserts straight into DiskRowSets;
//! - [`flush`](self::flush): MemRowSet and DeltaMemStore flushes, checkpoints;
//! - [`compact`](self::compact): rowset and delta compactions, reclaiming deleted rows;
//! - [`gc`](self::gc): history GC and skip-cache persistence;
//! - [`alter`](self::alter): schema changes.
//!
//! **Durability.** The log holds every op before it is acknowledged. The metadata file
//! records, per store, the log index up to which its files hold everything
//! (`mrs_flushed_index`, each rowset's `durable_index`); [`Tablet::durable_index`] is
//! the lowest of them *as last written to the metadata file*, so a log owner never
//! discards records that a restart would still need. Reopening applies the log again
//! from there; each row op is skipped by a store that already holds it.
//!
//! **Maintenance** ops run one at a time. Each takes a brief exclusive *cut* of the write
//! gate that freezes its inputs at the last applied log index, writes its output while
//! writes and reads go on, then takes the gate again to *install* it, carrying over the
//! changes its inputs received after the cut. The cut's MVCC snapshot is the timestamp of
//! the last applied record: records are applied in log order and log order is timestamp
//! order, so everything at or below the cut index is at or below the snapshot and
//! everything after it is above — even on a leader whose own writes are still in flight,
//! and on a follower whose clock is ahead of what it has applied.
//!
//! **Failure.** If writing the metadata file fails (disk full, I/O error) the tablet
//! stops: [`TabletError::Failed`] from then on, with nothing half-recorded on disk.

mod alter;
mod apply;
mod bulk;
mod compact;
mod flush;
mod gc;
mod read;
mod txn;
mod write;

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cairn_common::{ColumnStatistics, HybridClock, HybridTime, Schema, Value};
use parking_lot::{Mutex, RwLock};

pub use self::bulk::PreparedBulk;
pub use self::txn::TxnDecision;
pub use self::write::PreparedWrite;
use crate::cache::BlockCache;
use crate::diskrowset::{DiskRowSet, ScanCounters};
use crate::error::{Result, TabletError};
use crate::history::{Row, row_from_cells};
use crate::locks::{LockManager, PendingRanges};
use crate::memrowset::{MemRowSet, MrsRow};
use crate::metadata::{SchemaMeta, TabletMeta};
use crate::mvcc::MvccManager;
use crate::ops::RowError;
use crate::results::ResultTracker;
use crate::rowsets::Components;
use crate::writer::{Codec, RowSetWriter, WriterConfig};
use cairn_wal::FsyncPolicy;

/// Tunables of a tablet. The defaults suit a laptop.
#[derive(Clone, Debug)]
pub struct TabletOptions {
    /// When a [`crate::local::LocalTablet`]'s own log is fsynced.
    pub fsync: FsyncPolicy,
    /// Segment size of a [`crate::local::LocalTablet`]'s own log.
    pub wal_segment_bytes: u64,
    /// DiskRowSets roll at this base-data size (32 MiB).
    pub target_rowset_bytes: u64,
    /// Rows per Parquet row group.
    pub rows_per_row_group: usize,
    /// Base data compression.
    pub codec: Codec,
    /// How long history is kept for snapshot reads (15 minutes).
    pub history_retention: Duration,
    /// Flush the MemRowSet beyond this size.
    pub mrs_flush_bytes: usize,
    /// Flush a DeltaMemStore beyond this size.
    pub dms_flush_bytes: usize,
    /// Flush in-memory stores older than this, to bound log retention.
    pub max_memstore_age: Duration,
    /// Byte budget of one rowset compaction.
    pub compaction_budget_bytes: u64,
    /// The cache of decoded base-data pages (256 MiB of its own by default; a
    /// tablet server gives every tablet the same one, sized by `--block-cache-mb`).
    pub block_cache: Arc<BlockCache>,
    /// How often the maintenance manager looks for work.
    pub maintenance_interval: Duration,
    /// Rewrite a rowset alone once at least this share of its rows was deleted before
    /// the history retention window (reclaiming their space).
    pub reclaim_deleted_ratio: f64,
    /// How long a read waits for writes in flight at or below its snapshot.
    pub safe_time_timeout: Duration,
    /// Threads a MemRowSet flush writes with, each taking a key range of at least
    /// `flush_part_min_rows` rows into rowsets of its own (the machine's CPUs, at
    /// most 4).
    pub flush_threads: usize,
    /// The fewest rows a flush thread takes (256 Ki).
    pub flush_part_min_rows: usize,
}

impl Default for TabletOptions {
    fn default() -> Self {
        TabletOptions {
            fsync: FsyncPolicy::Always,
            wal_segment_bytes: 64 << 20,
            target_rowset_bytes: 32 << 20,
            rows_per_row_group: 65536,
            codec: Codec::Lz4,
            history_retention: Duration::from_secs(15 * 60),
            mrs_flush_bytes: 64 << 20,
            dms_flush_bytes: 16 << 20,
            max_memstore_age: Duration::from_secs(120),
            compaction_budget_bytes: 128 << 20,
            block_cache: Arc::new(BlockCache::new(256 << 20)),
            maintenance_interval: Duration::from_millis(250),
            reclaim_deleted_ratio: 0.2,
            safe_time_timeout: Duration::from_secs(10),
            flush_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4),
            flush_part_min_rows: 256 << 10,
        }
    }
}

/// How a read chooses its snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Everything committed when the read starts.
    Latest,
    /// The state at this timestamp (waits for writes at or below it to finish).
    Snapshot(HybridTime),
}

/// The outcome of a write batch.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteResult {
    /// The batch's timestamp.
    pub ts: HybridTime,
    /// Rows that failed, by position in the batch.
    pub row_errors: Vec<(usize, RowError)>,
}

pub use cairn_common::schema::AlterOp;

/// Where a key lives.
pub(crate) enum Location {
    Disk(Arc<DiskRowSet>, u32),
    Mem(Arc<MemRowSet>, Arc<MrsRow>),
    Absent,
}

/// Sizes and counts, for the maintenance manager, tools and tests.
#[derive(Debug, Clone, Default)]
pub struct TabletStats {
    /// Rows in the MemRowSet (including deleted ones).
    pub mrs_rows: usize,
    /// MemRowSet memory.
    pub mrs_bytes: usize,
    /// DiskRowSets.
    pub disk_rowsets: usize,
    /// Rows in DiskRowSet base data.
    pub disk_rows: usize,
    /// Bytes on disk in rowsets.
    pub disk_bytes: u64,
    /// Memory in DeltaMemStores.
    pub dms_bytes: usize,
    /// REDO delta files.
    pub redo_files: usize,
    /// UNDO delta files.
    pub undo_files: usize,
    /// Remembered answers of client requests.
    pub remembered_answers: usize,
}

/// One tablet.
pub struct Tablet {
    dir: PathBuf,
    opts: TabletOptions,
    clock: Arc<HybridClock>,
    mvcc: MvccManager,
    locks: Arc<LockManager>,
    /// Key ranges of bulk inserts this leader proposed and has not applied yet.
    pending_bulk: Arc<PendingRanges>,
    schema: RwLock<Arc<Schema>>,
    comps: RwLock<Arc<Components>>,
    /// Appliers hold it shared; maintenance cuts and installs hold it exclusively.
    gate: RwLock<()>,
    /// The last log index applied.
    applied_index: AtomicU64,
    /// The timestamp of the last record applied (the snapshot of a maintenance cut);
    /// after a reopen, that of the record at the durable index.
    applied_ts: AtomicU64,
    mrs_flushed_index: AtomicU64,
    /// The timestamp of the record at `mrs_flushed_index`.
    mrs_flushed_ts: AtomicU64,
    /// [`Tablet::durable_index`] as of the last metadata file written.
    durable: AtomicU64,
    next_rowset_id: AtomicU64,
    /// Held by the maintenance op in progress.
    maint: Mutex<()>,
    /// Serialises metadata writes.
    persisting: Mutex<()>,
    cache: Arc<BlockCache>,
    results: ResultTracker,
    /// Open multi-row transactions and their provisional writes ([`crate::txn`]).
    txns: crate::txn::TxnTable,
    /// Changes not yet chained into the table's subspaces ([`crate::unchained`]).
    unchained: crate::unchained::UnchainedChanges,
    /// The subspace layouts the last `SetSubspaces` record set.
    subspaces: RwLock<Option<Arc<crate::metadata::SubspacesMeta>>>,
    /// What scans skipped.
    pub counters: ScanCounters,
    shut_down: AtomicBool,
    failed: Mutex<Option<String>>,
}

impl std::fmt::Debug for Tablet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tablet({})", self.dir.display())
    }
}

pub(crate) fn rowsets_dir(dir: &Path) -> PathBuf {
    dir.join("rowsets")
}

/// The lowest durable mark a metadata record names: (log index, its timestamp).
fn meta_durable(meta: &TabletMeta) -> (u64, u64) {
    meta.rowsets
        .iter()
        .map(|r| (r.durable_index, r.durable_ts))
        .chain(std::iter::once((
            meta.mrs_flushed_index,
            meta.mrs_flushed_ts,
        )))
        .chain(meta.txn_floor)
        .min()
        .unwrap_or((0, 0))
}

/// The durable index a metadata record names.
fn meta_durable_index(meta: &TabletMeta) -> u64 {
    meta_durable(meta).0
}

impl Tablet {
    /// Creates a new, empty tablet in `dir` (which must not hold one) and opens it.
    pub fn create(
        dir: &Path,
        schema: Schema,
        opts: TabletOptions,
        clock: Arc<HybridClock>,
    ) -> Result<Arc<Tablet>> {
        if dir.join(crate::metadata::METADATA_FILE).exists() {
            return Err(TabletError::BadTabletDir(format!(
                "{} already holds a tablet; open it instead, or choose an empty directory",
                dir.display()
            )));
        }
        std::fs::create_dir_all(rowsets_dir(dir)).map_err(|e| TabletError::io(dir, e))?;
        if let Some(parent) = dir.parent() {
            crate::metadata::sync_dir(parent)?;
        }
        TabletMeta::new(&schema).store(dir)?;
        Self::open(dir, opts, clock)
    }

    /// Opens the tablet in `dir`: loads its metadata and opens and verifies every file.
    /// The log owner then applies its records after [`Tablet::durable_index`].
    pub fn open(dir: &Path, opts: TabletOptions, clock: Arc<HybridClock>) -> Result<Arc<Tablet>> {
        if !dir.join(crate::metadata::METADATA_FILE).exists() {
            return Err(TabletError::BadTabletDir(format!(
                "{} holds no tablet (no {} file); create one first",
                dir.display(),
                crate::metadata::METADATA_FILE
            )));
        }
        let meta = TabletMeta::load(dir)?;
        let schema = meta.schema.to_schema()?;
        let cache = opts.block_cache.clone();
        let rdir = rowsets_dir(dir);
        let mut disk = Vec::with_capacity(meta.rowsets.len());
        for rs in &meta.rowsets {
            let d = rdir.join(format!("rs-{:08}", rs.id));
            disk.push(Arc::new(DiskRowSet::open(&d, rs.clone(), cache.clone())?));
        }
        remove_orphans(&rdir, &meta)?;
        let (durable, durable_ts) = meta_durable(&meta);
        // Metadata written before durable timestamps were recorded says 0: then the
        // newest delta timestamp in the files stands in (only a first replay after the
        // upgrade uses it).
        let durable_ts = if durable > 0 && durable_ts == 0 {
            disk.iter()
                .flat_map(|r| {
                    let d = r.deltas();
                    d.redo_files
                        .iter()
                        .chain(d.undo_files.iter())
                        .map(|f| f.max_ts.0)
                        .collect::<Vec<_>>()
                })
                .max()
                .unwrap_or(0)
        } else {
            durable_ts
        };
        let first_mrs = meta.next_rowset_id;
        let txns = crate::txn::TxnTable::default();
        txns.load_decisions(&meta.txn_decisions);
        Ok(Arc::new(Tablet {
            dir: dir.to_path_buf(),
            clock,
            mvcc: MvccManager::new(),
            locks: Arc::new(LockManager::default()),
            pending_bulk: Arc::new(PendingRanges::default()),
            schema: RwLock::new(Arc::new(schema)),
            comps: RwLock::new(Arc::new(Components::new(
                Arc::new(MemRowSet::new(first_mrs)),
                vec![],
                disk,
            ))),
            gate: RwLock::new(()),
            applied_index: AtomicU64::new(durable),
            applied_ts: AtomicU64::new(durable_ts),
            mrs_flushed_index: AtomicU64::new(meta.mrs_flushed_index),
            mrs_flushed_ts: AtomicU64::new(meta.mrs_flushed_ts),
            durable: AtomicU64::new(durable),
            next_rowset_id: AtomicU64::new(meta.next_rowset_id + 1),
            maint: Mutex::new(()),
            persisting: Mutex::new(()),
            cache,
            results: ResultTracker::from_persisted(meta.results),
            txns,
            unchained: {
                let u = crate::unchained::UnchainedChanges::from_persisted(meta.unchained);
                if meta.subspaces.is_some() {
                    u.track();
                }
                u
            },
            subspaces: RwLock::new(meta.subspaces.map(Arc::new)),
            counters: ScanCounters::default(),
            shut_down: AtomicBool::new(false),
            failed: Mutex::new(None),
            opts,
        }))
    }

    /// The tablet's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The options it runs with.
    pub fn options(&self) -> &TabletOptions {
        &self.opts
    }
    /// The current schema.
    pub fn schema(&self) -> Arc<Schema> {
        self.schema.read().clone()
    }
    /// The clock.
    pub fn clock(&self) -> &Arc<HybridClock> {
        &self.clock
    }
    /// The current components.
    pub fn components(&self) -> Arc<Components> {
        self.comps.read().clone()
    }
    /// The latest timestamp at which every write is applied.
    pub fn safe_time(&self) -> HybridTime {
        self.mvcc.snapshot_now(&self.clock)
    }
    /// History before this timestamp may have been garbage-collected. Measured against
    /// the local wall clock, not the hybrid clock: a timestamp from elsewhere that moved
    /// the hybrid clock ahead cannot make recent history collectable.
    /// A change not yet chained into the table's subspaces keeps history from just
    /// before it (see [`crate::unchained`]).
    pub fn ancient_history_mark(&self) -> HybridTime {
        let mark = self
            .clock
            .wall()
            .minus_micros(self.opts.history_retention.as_micros() as u64);
        match self.unchained.oldest() {
            Some(ts) => mark.min(HybridTime(ts.saturating_sub(1))),
            None => mark,
        }
    }

    /// The changes this tablet applied that are not yet chained into its table's
    /// subspaces ([`crate::unchained`]).
    pub fn unchained(&self) -> &crate::unchained::UnchainedChanges {
        &self.unchained
    }

    /// The subspace layouts the last applied [`crate::ops::LogRecord::SetSubspaces`]
    /// set, if any.
    pub fn subspaces(&self) -> Option<Arc<crate::metadata::SubspacesMeta>> {
        self.subspaces.read().clone()
    }

    /// The record that sets the table's subspaces to `layouts` at catalog version
    /// `version`, with its timestamp (see [`crate::ops::LogRecord::SetSubspaces`]).
    /// REQUIRES: the caller proposes records in timestamp order (the replica's propose
    /// lock), so that writes logged before it are older and writes after it newer.
    pub fn start_set_subspaces(&self, version: u64, layouts: Vec<u8>) -> (HybridTime, Vec<u8>) {
        let ts = self.clock.now();
        let rec = crate::ops::LogRecord::SetSubspaces {
            ts,
            version,
            layouts,
        };
        (ts, rec.encode())
    }

    /// Applies a [`crate::ops::LogRecord::SetSubspaces`] at `index`: from here on changes are
    /// tracked until chained.
    pub(crate) fn apply_set_subspaces(
        &self,
        index: u64,
        ts: HybridTime,
        version: u64,
        layouts: Vec<u8>,
    ) {
        let _g = self.gate.read();
        // A committed record's timestamp is applied whatever the offset (as writes').
        self.clock.update(ts);
        self.unchained.track();
        let mut cur = self.subspaces.write();
        if cur.as_ref().is_none_or(|s| s.version < version) {
            *cur = Some(Arc::new(crate::metadata::SubspacesMeta {
                version,
                ts: ts.0,
                layouts,
            }));
        }
        drop(cur);
        self.note_applied(index, ts);
    }

    /// Resolves a read mode into a snapshot timestamp, waiting (at most the safe-time
    /// timeout) for writes in flight at or below it. A snapshot further in the future
    /// than the clock's maximum offset is refused.
    pub fn snapshot_for(&self, mode: ReadMode) -> Result<HybridTime> {
        self.snapshot_waiting(mode, self.opts.safe_time_timeout)
    }

    /// [`Tablet::snapshot_for`] without waiting: `None` when a write at or below the
    /// snapshot is still in flight. An async caller resolves the common case (nothing
    /// in flight) on its own task and moves to a thread that may block only for the
    /// rest.
    pub fn snapshot_if_safe(&self, mode: ReadMode) -> Result<Option<HybridTime>> {
        match self.snapshot_waiting(mode, Duration::ZERO) {
            Err(TabletError::SafeTimeTimeout { .. }) => Ok(None),
            r => r.map(Some),
        }
    }

    /// [`Tablet::snapshot_for`], waiting at most `timeout` for a snapshot to be safe.
    fn snapshot_waiting(&self, mode: ReadMode, timeout: Duration) -> Result<HybridTime> {
        self.check_healthy()?;
        match mode {
            // A prepared transaction holds its prepare timestamp in flight until it
            // commits, possibly at a timestamp below writes acknowledged since: reading
            // below it would miss those. Wait for it instead (a commit round trip).
            ReadMode::Latest if self.txns.committing() > 0 => {
                self.snapshot_waiting(ReadMode::Snapshot(self.clock.now()), timeout)
            }
            ReadMode::Latest => Ok(self.mvcc.snapshot_now(&self.clock)),
            ReadMode::Snapshot(ts) => {
                let oldest = self.ancient_history_mark();
                if ts < oldest {
                    return Err(TabletError::SnapshotTooOld {
                        requested: ts,
                        oldest,
                    });
                }
                self.clock.observe(ts)?;
                if !self.mvcc.wait_until_safe(&self.clock, ts, timeout) {
                    return Err(TabletError::SafeTimeTimeout {
                        snapshot: ts,
                        waited_ms: timeout.as_millis() as u64,
                    });
                }
                Ok(ts)
            }
        }
    }

    /// Where `key` lives now.
    pub(crate) fn locate(&self, comps: &Components, key: &[u8]) -> Location {
        let mut cands = Vec::new();
        comps.tree.query(key, &mut cands);
        for rs in cands {
            if let Some(o) = rs.keys.find(key) {
                return Location::Disk(rs, o as u32);
            }
        }
        for m in comps.frozen.iter().chain(std::iter::once(&comps.mrs)) {
            if let Some(r) = m.get(key) {
                return Location::Mem(m.clone(), r);
            }
        }
        Location::Absent
    }

    /// Scans with the given spec.
    pub fn scan(self: &Arc<Self>, spec: crate::scan::ScanSpec) -> Result<crate::scan::Scanner> {
        crate::scan::Scanner::new(self.clone(), spec)
    }

    /// [`Tablet::scan`] without waiting: `Ok(None)` when the scan's snapshot is not
    /// safe to read yet (a write at or below it is in flight), so that an async caller
    /// moves to a thread that may block only then. Opening a scanner reads no rows.
    pub fn scan_if_ready(
        self: &Arc<Self>,
        mut spec: crate::scan::ScanSpec,
    ) -> Result<Option<crate::scan::Scanner>> {
        let Some(ts) = self.snapshot_if_safe(spec.read_mode)? else {
            return Ok(None);
        };
        spec.read_mode = ReadMode::Snapshot(ts);
        crate::scan::Scanner::new(self.clone(), spec).map(Some)
    }

    /// The MemRowSet range iterator bounds helper for scans.
    pub(crate) fn mrs_range(
        m: &MemRowSet,
        after: Option<&[u8]>,
        lower: &[u8],
        upper: &[u8],
        max: usize,
    ) -> Vec<(Vec<u8>, Arc<MrsRow>)> {
        let lo = match after {
            Some(a) => Bound::Excluded(a),
            None if lower.is_empty() => Bound::Unbounded,
            None => Bound::Included(lower),
        };
        let hi = if upper.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(upper)
        };
        m.range_chunk(lo, hi, max)
    }

    /// Builds a full row from id-keyed cells (for tools).
    pub fn row_from_cells(&self, cells: &[(cairn_common::ColumnId, Value)]) -> Row {
        row_from_cells(&self.schema(), cells)
    }

    // ----- log positions ------------------------------------------------------------

    /// The log index up to which every store's files hold every write, as recorded in
    /// the metadata file: after a restart, records after it must be applied again, and
    /// the log before it may be discarded.
    pub fn durable_index(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The last log index applied.
    pub fn applied_index(&self) -> u64 {
        self.applied_index.load(Ordering::Acquire)
    }

    /// The snapshot of a maintenance cut: the timestamp of the last applied record.
    /// REQUIRES: the write gate held exclusively (no record is being applied).
    fn cut_snapshot(&self) -> HybridTime {
        HybridTime(self.applied_ts.load(Ordering::Acquire))
    }

    // ----- persistence ------------------------------------------------------------

    /// Exclusive hold of the write gate for a maintenance *cut*, once no transaction is
    /// prepared: a prepared transaction commits at a timestamp that may lie below
    /// records applied after its prepare, and a cut between the two would count its
    /// commit as already included (see [`crate::txn`]). Prepared transactions finish
    /// within a commit round trip, or are resolved once their coordinator is gone.
    /// REQUIRES: the maintenance lock.
    pub(crate) fn cut_gate(&self) -> Result<parking_lot::RwLockWriteGuard<'_, ()>> {
        let mut waited = std::time::Duration::ZERO;
        loop {
            let g = self.gate.write();
            if self.txns.committing() == 0 {
                return Ok(g);
            }
            drop(g);
            self.check_healthy()?;
            let step = std::time::Duration::from_millis(200);
            if !self
                .txns
                .wait_none_committing(std::time::Instant::now() + step)
            {
                waited += step;
                if waited.as_millis().is_multiple_of(10_000) {
                    tracing::warn!(
                        tablet = %self.dir.display(),
                        secs = waited.as_secs(),
                        "maintenance is waiting for prepared transactions to finish"
                    );
                }
            }
        }
    }

    /// Exclusive hold of the write gate (maintenance installs).
    pub(crate) fn write_gate(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// Writes the metadata file from the current state; on success the durable index
    /// advances to what the file records. A failed write fails the tablet: the file on
    /// disk still describes a consistent older state, and nothing that relies on the
    /// newer one (the log owner discarding records) may happen.
    /// REQUIRES: the maintenance lock or the write gate, so the state is not mid-change.
    pub(crate) fn persist(&self) -> Result<()> {
        self.persist_with(|_| {})
    }

    /// [`Tablet::persist`] with `edit` applied to the record first (marks that advance
    /// only once written).
    pub(crate) fn persist_with(&self, edit: impl FnOnce(&mut TabletMeta)) -> Result<()> {
        let _p = self.persisting.lock();
        self.check_healthy()?;
        let comps = self.components();
        let mut meta = TabletMeta {
            format_version: 1,
            schema: SchemaMeta::from_schema(&self.schema()),
            mrs_flushed_index: self.mrs_flushed_index.load(Ordering::Acquire),
            mrs_flushed_ts: self.mrs_flushed_ts.load(Ordering::Acquire),
            next_rowset_id: self.next_rowset_id.load(Ordering::Acquire),
            rowsets: comps.disk.iter().map(|r| r.meta()).collect(),
            results: self.results.to_persist(),
            txn_floor: self.txns.floor(),
            txn_decisions: self.txns.decisions(self.clock.now()),
            unchained: self.unchained.to_persist(),
            subspaces: self.subspaces.read().as_ref().map(|s| s.as_ref().clone()),
        };
        edit(&mut meta);
        let stored = (|| -> Result<()> {
            fail::fail_point!("tablet::persist", |arg| Err(TabletError::io(
                &self.dir,
                std::io::Error::other(arg.unwrap_or_else(|| "injected failure".into()))
            )));
            meta.store(&self.dir)
        })();
        match stored {
            Ok(()) => {
                self.mrs_flushed_index
                    .store(meta.mrs_flushed_index, Ordering::Release);
                self.mrs_flushed_ts
                    .store(meta.mrs_flushed_ts, Ordering::Release);
                self.durable
                    .store(meta_durable_index(&meta), Ordering::Release);
                Ok(())
            }
            Err(e) => {
                self.fail(format!("writing the tablet metadata failed: {e}"));
                Err(e)
            }
        }
    }

    pub(crate) fn alloc_rowset_id(&self) -> u64 {
        self.next_rowset_id.fetch_add(1, Ordering::AcqRel)
    }

    /// A writer of new DiskRowSets under this tablet's directory, with this tablet's
    /// rowset ids and file options, whose rowsets declare themselves durable through
    /// `durable` (log index, timestamp).
    pub(crate) fn rowset_writer<'a>(
        &'a self,
        schema: &'a Schema,
        durable: (u64, HybridTime),
    ) -> RowSetWriter<'a> {
        let config = WriterConfig {
            target_rowset_bytes: self.opts.target_rowset_bytes,
            rows_per_row_group: self.opts.rows_per_row_group,
            codec: self.opts.codec,
        };
        RowSetWriter::new(
            &rowsets_dir(&self.dir),
            schema,
            config,
            durable,
            Box::new(|| self.alloc_rowset_id()),
        )
    }

    pub(crate) fn open_rowsets(
        &self,
        metas: Vec<crate::metadata::RowSetMeta>,
    ) -> Result<Vec<Arc<DiskRowSet>>> {
        let rdir = rowsets_dir(&self.dir);
        metas
            .into_iter()
            .map(|m| {
                let d = rdir.join(format!("rs-{:08}", m.id));
                DiskRowSet::open(&d, m, self.cache.clone()).map(Arc::new)
            })
            .collect()
    }

    // ----- introspection ----------------------------------------------------------

    /// Sizes and counts.
    pub fn stats(&self) -> TabletStats {
        let comps = self.components();
        let mut s = TabletStats {
            mrs_rows: comps.mrs.len() + comps.frozen.iter().map(|m| m.len()).sum::<usize>(),
            mrs_bytes: comps.mrs.mem_bytes(),
            disk_rowsets: comps.disk.len(),
            remembered_answers: self.results.len(),
            ..Default::default()
        };
        for rs in &comps.disk {
            let d = rs.deltas();
            s.disk_rows += rs.num_rows();
            s.disk_bytes += rs.size_bytes();
            s.dms_bytes += d.dms.mem_bytes();
            s.redo_files += d.redo_files.len();
            s.undo_files += d.undo_files.len();
        }
        s
    }

    /// Planner statistics of each column (schema order) over the DiskRowSets' base
    /// data; rows in the MemRowSet and changes in delta stores are not reflected.
    pub fn column_statistics(&self) -> Vec<ColumnStatistics> {
        let schema = self.schema();
        let comps = self.components();
        let mut out: Option<Vec<ColumnStatistics>> = None;
        for rs in &comps.disk {
            let one = rs.base().column_statistics(&schema);
            match &mut out {
                None => out = Some(one),
                Some(acc) => {
                    for (a, o) in acc.iter_mut().zip(&one) {
                        a.merge(o);
                    }
                }
            }
        }
        out.unwrap_or_default()
    }

    /// A diagnostic line for tests and tooling: the tablet's applied and durable marks,
    /// every rowset's mark, and each store holding `key` (primary-key values in key
    /// order) with the row's REDO and UNDO history or in-memory mutations.
    pub fn describe_key(&self, key: &[Value]) -> String {
        let refs: Vec<&Value> = key.iter().collect();
        let enc = cairn_common::key::encode_values(&refs).unwrap_or_default();
        let comps = self.components();
        let mut out = format!(
            "applied {} ts {:?}, mrs_flushed {} ts {}, durable {};",
            self.applied_index(),
            self.cut_snapshot(),
            self.mrs_flushed_index.load(Ordering::Acquire),
            self.mrs_flushed_ts.load(Ordering::Acquire),
            self.durable_index()
        );
        for rs in &comps.disk {
            let m = rs.meta();
            out += &format!(" rs{}(d{} t{})", rs.id, m.durable_index, m.durable_ts);
        }
        for rs in &comps.disk {
            if let Some(o) = rs.keys.find(&enc) {
                let (r, u) = rs.deltas().collect(o as u32, o as u32 + 1);
                out += &format!(" KEY in rs{} ord {o}: redo {r:?} undo {u:?};", rs.id);
            }
        }
        for m in comps.frozen.iter().chain(std::iter::once(&comps.mrs)) {
            if let Some(r) = m.get(&enc) {
                out += &format!(
                    " KEY in mrs{} insert {:?} muts {:?};",
                    m.id,
                    r.insert_ts,
                    r.mutations.lock()
                );
            }
        }
        out
    }

    // ----- lifecycle ----------------------------------------------------------------

    /// Stops accepting writes and waits for the maintenance op in progress. Afterwards
    /// no maintenance op runs and nothing in the directory changes.
    pub fn shutdown(&self) {
        self.shut_down.store(true, Ordering::Release);
        let _m = self.maint.lock();
        let _g = self.gate.write();
    }

    /// Whether [`Tablet::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// Why the tablet failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().clone()
    }

    /// Marks the tablet failed (see [`TabletError::Failed`]).
    pub fn fail(&self, why: String) {
        let mut f = self.failed.lock();
        if f.is_none() {
            tracing::error!(dir = %self.dir.display(), "tablet failed: {why}");
            *f = Some(why);
        }
    }

    /// Ok unless the tablet is shut down or failed.
    pub(crate) fn check_healthy(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(TabletError::ShutDown);
        }
        if let Some(why) = self.failed.lock().as_ref() {
            return Err(TabletError::Failed(why.clone()));
        }
        Ok(())
    }

    /// Takes the maintenance lock, refusing once the tablet is shut down or failed (so
    /// that a straggling maintenance or snapshot task never writes into a directory
    /// that has been handed over, e.g. replaced by a tablet copy).
    pub(crate) fn maint_lock(&self) -> Result<parking_lot::MutexGuard<'_, ()>> {
        let g = self.maint.lock();
        self.check_healthy()?;
        Ok(g)
    }
}

/// Deletes rowset directories the metadata does not list (left by a crash between
/// writing a rowset and recording it).
fn remove_orphans(rdir: &Path, meta: &TabletMeta) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(rdir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let listed = meta
            .rowsets
            .iter()
            .any(|r| format!("rs-{:08}", r.id) == name);
        if name.starts_with("rs-") && !listed {
            tracing::info!(dir = %e.path().display(), "removing an unlisted rowset left by an interrupted operation");
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    Ok(())
}

/// The encoded primary key of a point read, after checking that `key` has one value
/// of the right type per key column.
pub(super) fn encode_point_key(schema: &Schema, key: &[Value]) -> Result<Vec<u8>> {
    if key.len() != schema.key_indexes().len() {
        return Err(TabletError::InvalidRequest(format!(
            "the primary key has {} columns but {} values were given",
            schema.key_indexes().len(),
            key.len()
        )));
    }
    for (&k, v) in schema.key_indexes().iter().zip(key) {
        v.check_type(&schema.column(k).name, &schema.column(k).data_type)?;
    }
    let refs: Vec<&Value> = key.iter().collect();
    Ok(cairn_common::key::encode_values(&refs)?)
}
