//! The tablet: one shard's storage engine tying every piece together (Kudu paper §4).
//!
//! **Write path** ([`Tablet::write`]): validate each row op against the schema (bad rows
//! get a per-row error and are not logged), take the row locks, take a timestamp from
//! the MVCC manager, append the batch to the write-ahead log, then apply each op to the
//! store that owns its key — located through the rowset interval tree, bloom filters and
//! key indexes, then the MemRowSets — and finally mark the timestamp applied.
//!
//! **Durability**: the log holds every op before it is acknowledged. The metadata file
//! records, per store, the log index up to which its files hold everything
//! (`mrs_flushed_index`, each rowset's `durable_index`). Reopening replays the log from
//! the lowest of those, re-running each op through the same write path and skipping the
//! row ops whose owning store already has them.
//!
//! **Replicated mode** ([`TabletOptions::external_log`]): under Raft the consensus log
//! is the write-ahead log, so the tablet keeps none of its own. The leader validates and
//! locks a batch ([`Tablet::prepare_write`]), takes a timestamp, and hands the encoded
//! record to consensus; every replica (leader included) applies committed records in log
//! order through [`Tablet::apply_replicated`], which skips what a store already holds,
//! exactly like local log replay. [`Tablet::durable_index`] says from where the
//! consensus log must be re-applied after a restart.
//!
//! **Maintenance** ops (flush, delta flush, delta compactions, rowset compaction, history
//! and log GC) run one at a time. Each takes a brief exclusive *cut* of the write gate to
//! freeze its inputs at a known log index, does its I/O while writers and readers go on,
//! then takes the gate again to *install* its output — carrying over any changes that
//! reached its inputs meanwhile, so nothing is lost.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cairn_common::key::encode_row_key;
use cairn_common::{ColumnStatistics, HybridClock, HybridTime, Schema, Value};
use cairn_wal::{FsyncPolicy, Log, LogOptions};
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

use crate::cache::BlockCache;
use crate::delta::{DeltaEntry, DeltaMemStore, write_delta_file};
use crate::diskrowset::{DiskRowSet, ScanCounters};
use crate::error::{Result, TabletError};
use crate::history::{Row, apply_change, flush_row, row_cells, row_from_cells};
use crate::locks::LockManager;
use crate::memrowset::{MemRowSet, MrsRow};
use crate::metadata::{FileMeta, SchemaMeta, TabletMeta, write_atomic};
use crate::mvcc::MvccManager;
use crate::ops::{LogRecord, OpKind, RowChange, RowError, RowOp};
use crate::rowsets::Components;
use crate::writer::{Codec, RowSetWriter, WriterConfig};

/// Tunables of a tablet. The defaults suit a laptop.
#[derive(Clone, Debug)]
pub struct TabletOptions {
    /// When the log is fsynced.
    pub fsync: FsyncPolicy,
    /// Log segment size.
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
    /// Decoded-block cache size.
    pub block_cache_bytes: usize,
    /// How often the maintenance manager looks for work.
    pub maintenance_interval: Duration,
    /// The tablet keeps no log of its own: a consensus log feeds it through
    /// [`Tablet::apply_replicated`] (replicated tablets).
    pub external_log: bool,
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
            block_cache_bytes: 256 << 20,
            maintenance_interval: Duration::from_millis(250),
            external_log: false,
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
enum Location {
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
    /// Log size.
    pub wal_bytes: u64,
    /// Log segments.
    pub wal_segments: usize,
}

/// A leader's validated write batch, not yet replicated
/// ([`Tablet::prepare_write`]).
#[derive(Debug)]
pub struct PreparedWrite {
    schema: Arc<Schema>,
    /// (position in the caller's batch, validated op, encoded key).
    rows: Vec<(usize, RowOp, Vec<u8>)>,
    /// Rows that failed validation, by position in the caller's batch.
    pub row_errors: Vec<(usize, RowError)>,
}

impl PreparedWrite {
    /// Whether no row passed validation (nothing to replicate).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// Number of rows to replicate.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// Maps the position of a row in the replicated record back to its position in
    /// the caller's batch.
    pub fn batch_position(&self, record_pos: usize) -> usize {
        self.rows.get(record_pos).map_or(usize::MAX, |r| r.0)
    }
}

/// A leader's checked bulk insert, not yet replicated ([`Tablet::prepare_bulk`]).
#[derive(Debug)]
pub struct PreparedBulk {
    /// The accepted rows in record form, as Arrow IPC.
    ipc: Vec<u8>,
    /// `positions[i]` = position in the caller's batch of record row `i`.
    positions: Vec<usize>,
    /// Rows that failed the checks, by position in the caller's batch.
    pub row_errors: Vec<(usize, RowError)>,
}

impl PreparedBulk {
    /// Whether no row passed the checks (nothing to replicate).
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
    /// Number of rows to replicate.
    pub fn len(&self) -> usize {
        self.positions.len()
    }
    /// Maps the position of a row in the replicated record back to its position in
    /// the caller's batch.
    pub fn batch_position(&self, record_pos: usize) -> usize {
        self.positions
            .get(record_pos)
            .copied()
            .unwrap_or(usize::MAX)
    }
}

/// One tablet.
pub struct Tablet {
    dir: PathBuf,
    opts: TabletOptions,
    clock: Arc<HybridClock>,
    mvcc: MvccManager,
    locks: LockManager,
    schema: RwLock<Arc<Schema>>,
    comps: RwLock<Arc<Components>>,
    /// Writers hold it shared; maintenance cuts and installs hold it exclusively.
    gate: RwLock<()>,
    /// The tablet's own log; `None` in replicated mode.
    wal: Mutex<Option<Log>>,
    /// Replicated mode: the last consensus index applied.
    applied_index: AtomicU64,
    mrs_flushed_index: AtomicU64,
    next_rowset_id: AtomicU64,
    maint: Mutex<()>,
    cache: Arc<BlockCache>,
    /// What scans skipped.
    pub counters: ScanCounters,
    shut_down: AtomicBool,
}

impl std::fmt::Debug for Tablet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tablet({})", self.dir.display())
    }
}

fn rowsets_dir(dir: &Path) -> PathBuf {
    dir.join("rowsets")
}

impl Tablet {
    /// Creates a new, empty tablet in `dir` (which must not hold one).
    pub fn create(dir: &Path, schema: Schema, opts: TabletOptions) -> Result<Arc<Tablet>> {
        if dir.join(crate::metadata::METADATA_FILE).exists() {
            return Err(TabletError::BadTabletDir(format!(
                "{} already holds a tablet; open it instead, or choose an empty directory",
                dir.display()
            )));
        }
        std::fs::create_dir_all(rowsets_dir(dir)).map_err(|e| TabletError::io(dir, e))?;
        TabletMeta::new(&schema).store(dir)?;
        Self::open(dir, opts)
    }

    /// Opens the tablet in `dir`: loads its metadata, opens and verifies every file,
    /// and replays the log.
    pub fn open(dir: &Path, opts: TabletOptions) -> Result<Arc<Tablet>> {
        Self::open_with_clock(dir, opts, Arc::new(HybridClock::new()))
    }

    /// [`Tablet::open`] sharing a clock (a server's tablets share one).
    pub fn open_with_clock(
        dir: &Path,
        opts: TabletOptions,
        clock: Arc<HybridClock>,
    ) -> Result<Arc<Tablet>> {
        if !dir.join(crate::metadata::METADATA_FILE).exists() {
            return Err(TabletError::BadTabletDir(format!(
                "{} holds no tablet (no {} file); create one first",
                dir.display(),
                crate::metadata::METADATA_FILE
            )));
        }
        let meta = TabletMeta::load(dir)?;
        let schema = meta.schema.to_schema()?;
        let cache = Arc::new(BlockCache::new(opts.block_cache_bytes));
        let rdir = rowsets_dir(dir);
        let mut disk = Vec::with_capacity(meta.rowsets.len());
        for rs in &meta.rowsets {
            let d = rdir.join(format!("rs-{:08}", rs.id));
            disk.push(Arc::new(DiskRowSet::open(&d, rs.clone(), cache.clone())?));
        }
        remove_orphans(&rdir, &meta)?;
        let wal = if opts.external_log {
            None
        } else {
            Some(Log::open(
                &dir.join("wal"),
                LogOptions {
                    segment_size: opts.wal_segment_bytes,
                    fsync: opts.fsync,
                },
            )?)
        };
        let first_mrs = meta.next_rowset_id;
        let t = Arc::new(Tablet {
            dir: dir.to_path_buf(),
            clock,
            mvcc: MvccManager::new(),
            locks: LockManager::default(),
            schema: RwLock::new(Arc::new(schema)),
            comps: RwLock::new(Arc::new(Components::new(
                Arc::new(MemRowSet::new(first_mrs)),
                vec![],
                disk,
            ))),
            gate: RwLock::new(()),
            wal: Mutex::new(wal),
            applied_index: AtomicU64::new(0),
            mrs_flushed_index: AtomicU64::new(meta.mrs_flushed_index),
            next_rowset_id: AtomicU64::new(meta.next_rowset_id + 1),
            maint: Mutex::new(()),
            cache,
            counters: ScanCounters::default(),
            shut_down: AtomicBool::new(false),
            opts,
        });
        if t.opts.external_log {
            t.applied_index.store(t.durable_index(), Ordering::Release);
        } else {
            t.replay()?;
        }
        Ok(t)
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
    /// History before this timestamp may have been garbage-collected.
    pub fn ancient_history_mark(&self) -> HybridTime {
        self.clock
            .peek()
            .minus_micros(self.opts.history_retention.as_micros() as u64)
    }

    /// Resolves a read mode into a snapshot timestamp, waiting for safe time if needed.
    pub fn snapshot_for(&self, mode: ReadMode) -> Result<HybridTime> {
        match mode {
            ReadMode::Latest => Ok(self.mvcc.snapshot_now(&self.clock)),
            ReadMode::Snapshot(ts) => {
                let oldest = self.ancient_history_mark();
                if ts < oldest {
                    return Err(TabletError::SnapshotTooOld {
                        requested: ts,
                        oldest,
                    });
                }
                self.mvcc.wait_until_safe(&self.clock, ts);
                Ok(ts)
            }
        }
    }

    // ----- write path -------------------------------------------------------------

    /// Validates an op; returns it with defaults filled in (insert-like ops) and its key.
    fn prepare(
        &self,
        schema: &Schema,
        mut op: RowOp,
    ) -> std::result::Result<(RowOp, Vec<u8>), RowError> {
        let inv = |e: cairn_common::CommonError| RowError::Invalid(e.to_string());
        if op.values.len() != schema.num_columns() {
            return Err(RowError::Invalid(format!(
                "the op has {} cells but the table has {} columns",
                op.values.len(),
                schema.num_columns()
            )));
        }
        for &k in schema.key_indexes() {
            if op.values[k].as_ref().is_none_or(|v| v.is_null()) {
                return Err(RowError::Invalid(format!(
                    "missing value for primary key column '{}'",
                    schema.column(k).name
                )));
            }
        }
        for (i, v) in op.values.iter().enumerate() {
            if let Some(v) = v {
                schema.validate_cell(schema.column(i), v).map_err(inv)?;
            }
        }
        if matches!(op.kind, OpKind::Insert | OpKind::InsertIgnore) {
            for (i, c) in schema.columns().iter().enumerate() {
                if op.values[i].is_none() {
                    if c.default.is_none() && !c.nullable {
                        return Err(RowError::Invalid(format!(
                            "column '{}' is NOT NULL and has no default: give it a value",
                            c.name
                        )));
                    }
                    op.values[i] = Some(c.read_default());
                }
            }
        }
        if op.kind == OpKind::Upsert {
            for c in schema.columns() {
                if c.default.is_none()
                    && !c.nullable
                    && op.values[schema.index_of(&c.name).map_err(inv)?].is_none()
                {
                    return Err(RowError::Invalid(format!(
                        "column '{}' is NOT NULL and has no default: an UPSERT must give it a value",
                        c.name
                    )));
                }
            }
        }
        let key_row: Vec<Value> = op
            .values
            .iter()
            .map(|v| v.clone().unwrap_or(Value::Null))
            .collect();
        let key = encode_row_key(schema, &key_row).map_err(inv)?;
        Ok((op, key))
    }

    /// Applies a batch of row ops atomically per row. Rows that fail validation or their
    /// op's precondition get an error; the others are durable in the log when this
    /// returns.
    pub fn write(&self, ops: Vec<RowOp>) -> Result<WriteResult> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(TabletError::ShutDown);
        }
        loop {
            let schema = self.schema();
            let mut row_errors = Vec::new();
            let mut prepared = Vec::with_capacity(ops.len());
            for (i, op) in ops.iter().enumerate() {
                match self.prepare(&schema, op.clone()) {
                    Ok((op, key)) => prepared.push((i, op, key)),
                    Err(e) => row_errors.push((i, e)),
                }
            }
            let _locks = self
                .locks
                .lock_all(prepared.iter().map(|(_, _, k)| k.as_slice()));
            let _gate = self.gate.read();
            if self.schema.read().version() != schema.version() {
                // An ALTER slipped in between validation and the gate: validate again.
                continue;
            }
            let ts = self.mvcc.start(&self.clock);
            let index = if prepared.is_empty() {
                0
            } else {
                let refs: Vec<&RowOp> = prepared.iter().map(|(_, op, _)| op).collect();
                let rec = LogRecord::write(ts, &schema, &refs).encode();
                match self.append_log(&rec) {
                    Ok(i) => i,
                    Err(e) => {
                        self.mvcc.finish(ts);
                        return Err(e);
                    }
                }
            };
            let comps = self.comps.read().clone();
            for (i, op, key) in prepared {
                if let Err(e) = self.apply_op(&schema, &comps, &op, key, ts, index, false) {
                    row_errors.push((i, e));
                }
            }
            self.mvcc.finish(ts);
            row_errors.sort_by_key(|(i, _)| *i);
            return Ok(WriteResult { ts, row_errors });
        }
    }

    fn append_log(&self, rec: &[u8]) -> Result<u64> {
        let mut wal = self.wal.lock();
        let wal = wal.as_mut().ok_or_else(|| {
            TabletError::InvalidRequest(
                "this tablet is replicated: write through its consensus group".into(),
            )
        })?;
        let index = wal.next_index().unwrap_or(1);
        wal.append(index, rec)?;
        Ok(index)
    }

    fn locate(&self, comps: &Components, key: &[u8]) -> Location {
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

    #[allow(clippy::too_many_arguments)]
    fn apply_op(
        &self,
        schema: &Schema,
        comps: &Components,
        op: &RowOp,
        key: Vec<u8>,
        ts: HybridTime,
        index: u64,
        replay: bool,
    ) -> std::result::Result<(), RowError> {
        let loc = self.locate(comps, &key);
        if replay {
            let durable = match &loc {
                Location::Disk(rs, _) => rs.durable_index(),
                _ => self.mrs_flushed_index.load(Ordering::Acquire),
            };
            if index <= durable {
                return Ok(());
            }
        }
        let live = match &loc {
            Location::Disk(rs, o) => rs.is_live(*o),
            Location::Mem(_, r) => r.is_live(),
            Location::Absent => false,
        };
        let given_non_key = || -> Vec<(cairn_common::ColumnId, Value)> {
            op.values
                .iter()
                .enumerate()
                .filter(|(i, _)| !schema.is_key_column(*i))
                .filter_map(|(i, v)| v.as_ref().map(|v| (schema.column(i).id, v.clone())))
                .collect()
        };
        let full_row = || -> Row {
            schema
                .columns()
                .iter()
                .zip(&op.values)
                .map(|(c, v)| v.clone().unwrap_or_else(|| c.read_default()))
                .collect()
        };
        let change = match (op.kind, live) {
            (OpKind::Insert, true) => return Err(RowError::AlreadyPresent),
            (OpKind::InsertIgnore, true) => return Ok(()),
            (OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert, false) => {
                if let Location::Absent = loc {
                    comps.mrs.insert(key, full_row(), ts, index);
                    return Ok(());
                }
                RowChange::Reinsert(row_cells(schema, &full_row()))
            }
            (OpKind::Upsert | OpKind::Update | OpKind::UpdateIgnore, true) => {
                RowChange::Update(given_non_key())
            }
            (OpKind::Update | OpKind::Delete, false) => return Err(RowError::NotFound),
            (OpKind::UpdateIgnore | OpKind::DeleteIgnore, false) => return Ok(()),
            (OpKind::Delete | OpKind::DeleteIgnore, true) => RowChange::Delete,
        };
        match loc {
            Location::Disk(rs, o) => rs.dms().add(o, ts, change),
            Location::Mem(m, r) => m.mutate(&r, ts, change, index),
            Location::Absent => {}
        }
        Ok(())
    }

    fn replay(&self) -> Result<()> {
        let comps = self.components();
        let start = comps
            .disk
            .iter()
            .map(|r| r.durable_index())
            .chain(std::iter::once(
                self.mrs_flushed_index.load(Ordering::Acquire),
            ))
            .min()
            .unwrap_or(0)
            + 1;
        let last = match self.wal.lock().as_ref().and_then(|w| w.last_index()) {
            Some(l) => l,
            None => return Ok(()),
        };
        let mut replayed = 0usize;
        let mut from = start;
        while from <= last {
            let to = (from + 4096).min(last + 1);
            let entries = match self.wal.lock().as_ref() {
                Some(w) => w.read_range(from, to)?,
                None => break,
            };
            for (index, payload) in entries {
                let rec = LogRecord::decode(&payload).map_err(|e| {
                    TabletError::corruption(self.dir.join("wal"), format!("log entry {index}: {e}"))
                })?;
                match rec {
                    LogRecord::Write { ts, ops } => {
                        self.mvcc.start_at(&self.clock, ts);
                        let res = self.apply_logged_ops(ops, ts, index);
                        self.mvcc.finish(ts);
                        res?;
                    }
                    LogRecord::AlterSchema { schema } => {
                        if schema.version > self.schema().version() {
                            let s = schema.to_schema()?;
                            *self.schema.write() = Arc::new(s);
                            self.persist()?;
                        }
                    }
                    LogRecord::BulkInsert { ts, ipc } => {
                        self.mvcc.start_at(&self.clock, ts);
                        let res = self.apply_bulk(index, ts, &ipc);
                        self.mvcc.finish(ts);
                        res?;
                    }
                }
                replayed += 1;
            }
            from = to;
        }
        tracing::info!(dir = %self.dir.display(), replayed, from = start, "replayed the write-ahead log");
        Ok(())
    }

    /// Applies the ops of a logged write record (replay or replicated apply), skipping
    /// those whose store already holds index `index`. Returns per-op errors by position
    /// in the record.
    fn apply_logged_ops(
        &self,
        ops: Vec<(OpKind, Vec<(cairn_common::ColumnId, Value)>)>,
        ts: HybridTime,
        index: u64,
    ) -> Result<Vec<(usize, RowError)>> {
        let schema = self.schema();
        let comps = self.components();
        let mut errors = Vec::new();
        for (pos, (kind, cells)) in ops.into_iter().enumerate() {
            let mut values = vec![None; schema.num_columns()];
            for (id, v) in cells {
                if let Some(i) = schema.index_of_id(id) {
                    values[i] = Some(v);
                }
            }
            let op = RowOp { kind, values };
            let key_row: Vec<Value> = op
                .values
                .iter()
                .map(|v| v.clone().unwrap_or(Value::Null))
                .collect();
            let key = encode_row_key(&schema, &key_row)?;
            if let Err(e) = self.apply_op(&schema, &comps, &op, key, ts, index, true) {
                errors.push((pos, e));
            }
        }
        Ok(errors)
    }

    // ----- replicated mode ----------------------------------------------------------

    /// Validates a write batch on a leader: rows that do not fit the schema get their
    /// error now and are left out of the record to replicate.
    pub fn prepare_write(&self, ops: Vec<RowOp>) -> Result<PreparedWrite> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(TabletError::ShutDown);
        }
        let schema = self.schema();
        let mut rows = Vec::with_capacity(ops.len());
        let mut row_errors = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            match self.prepare(&schema, op) {
                Ok((op, key)) => rows.push((i, op, key)),
                Err(e) => row_errors.push((i, e)),
            }
        }
        Ok(PreparedWrite {
            schema,
            rows,
            row_errors,
        })
    }

    /// Locks the rows of a prepared batch until the returned guard is dropped (after
    /// the batch is applied).
    pub fn lock_rows<'a>(&'a self, p: &PreparedWrite) -> crate::locks::RowLocks<'a> {
        self.locks
            .lock_all(p.rows.iter().map(|(_, _, k)| k.as_slice()))
    }

    /// Takes the batch's timestamp (registered in flight until
    /// [`Tablet::finish_write`]) and encodes the record to replicate.
    pub fn start_write(&self, p: &PreparedWrite) -> (HybridTime, Vec<u8>) {
        let ts = self.mvcc.start(&self.clock);
        let refs: Vec<&RowOp> = p.rows.iter().map(|(_, op, _)| op).collect();
        (ts, LogRecord::write(ts, &p.schema, &refs).encode())
    }

    /// Marks a leader's write at `ts` finished (applied, or abandoned).
    pub fn finish_write(&self, ts: HybridTime) {
        self.mvcc.finish(ts);
    }

    /// Applies one committed consensus record at log index `index`. Returns the errors
    /// of the write's rows by position in the record; every replica computes the same.
    pub fn apply_replicated(&self, index: u64, record: &[u8]) -> Result<Vec<(usize, RowError)>> {
        if !self.opts.external_log {
            return Err(TabletError::InvalidRequest(
                "apply_replicated needs a tablet opened with external_log".into(),
            ));
        }
        let rec = LogRecord::decode(record).map_err(|e| {
            TabletError::corruption(&self.dir, format!("consensus entry {index}: {e}"))
        })?;
        match rec {
            LogRecord::Write { ts, ops } => {
                self.mvcc.start_at(&self.clock, ts);
                let gate = self.gate.read();
                let res = self.apply_logged_ops(ops, ts, index);
                self.applied_index.fetch_max(index, Ordering::AcqRel);
                drop(gate);
                self.mvcc.finish(ts);
                res
            }
            LogRecord::BulkInsert { ts, ipc } => {
                self.mvcc.start_at(&self.clock, ts);
                let res = self.apply_bulk(index, ts, &ipc);
                self.applied_index.fetch_max(index, Ordering::AcqRel);
                self.mvcc.finish(ts);
                res
            }
            LogRecord::AlterSchema { schema } => {
                let _m = self.maint_lock()?;
                if schema.version > self.schema().version() {
                    let new = schema.to_schema()?;
                    let (_, gate) = self.flush_mrs_locked(true)?;
                    *self.schema.write() = Arc::new(new);
                    self.applied_index.fetch_max(index, Ordering::AcqRel);
                    self.persist()?;
                    drop(gate);
                } else {
                    self.applied_index.fetch_max(index, Ordering::AcqRel);
                }
                Ok(Vec::new())
            }
        }
    }

    // ----- bulk insert (see the `bulk` module) ---------------------------------------

    /// Checks a bulk insert on a leader (columns named like the table's): rows that do
    /// not fit the schema get their error now and are left out of the record.
    pub fn prepare_bulk(&self, batch: &arrow::array::RecordBatch) -> Result<PreparedBulk> {
        self.prepare_bulk_shaped(batch).map(|(p, _)| p)
    }

    /// [`Tablet::prepare_bulk`], also returning the accepted rows in record form.
    fn prepare_bulk_shaped(
        &self,
        batch: &arrow::array::RecordBatch,
    ) -> Result<(PreparedBulk, arrow::array::RecordBatch)> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(TabletError::ShutDown);
        }
        let shaped = crate::bulk::shape_batch(&self.schema(), batch)?;
        let prepared = PreparedBulk {
            ipc: if shaped.positions.is_empty() {
                Vec::new()
            } else {
                crate::bulk::encode_ipc(&shaped.batch)?
            },
            positions: shaped.positions,
            row_errors: shaped.row_errors,
        };
        Ok((prepared, shaped.batch))
    }

    /// Takes the bulk insert's timestamp (in flight until [`Tablet::finish_write`])
    /// and encodes the record to replicate. Unlike row writes a bulk insert takes no
    /// row locks: whether a key exists is decided when the record is applied, in log
    /// order, on every replica alike.
    pub fn start_bulk(&self, p: &PreparedBulk) -> (HybridTime, Vec<u8>) {
        let ts = self.mvcc.start(&self.clock);
        (ts, LogRecord::encode_bulk(ts, &p.ipc))
    }

    /// Inserts a batch of new rows (columns named like the table's) on a tablet with
    /// its own log. Rows whose key exists get `AlreadyPresent`; rows that do not fit
    /// the schema get their error; the others are durable when this returns.
    pub fn bulk_insert(&self, batch: &arrow::array::RecordBatch) -> Result<WriteResult> {
        let (prepared, record) = self.prepare_bulk_shaped(batch)?;
        let mut row_errors = prepared.row_errors.clone();
        if prepared.is_empty() {
            return Ok(WriteResult {
                ts: self.safe_time(),
                row_errors,
            });
        }
        // Row writes lock their keys before they look them up; so does a local bulk
        // insert, until its rowsets are installed.
        let keys: Vec<Vec<u8>> = crate::bulk::row_keys(&self.schema(), &record)?
            .into_iter()
            .flatten()
            .collect();
        let _locks = self.locks.lock_all(keys.iter().map(|k| k.as_slice()));
        let (ts, index) = {
            let _gate = self.gate.read();
            let (ts, rec) = self.start_bulk(&prepared);
            match self.append_log(&rec) {
                Ok(i) => (ts, i),
                Err(e) => {
                    self.mvcc.finish(ts);
                    return Err(e);
                }
            }
        };
        let res = self.apply_bulk(index, ts, &prepared.ipc);
        self.mvcc.finish(ts);
        for (pos, e) in res? {
            row_errors.push((prepared.batch_position(pos), e));
        }
        row_errors.sort_by_key(|(i, _)| *i);
        Ok(WriteResult { ts, row_errors })
    }

    /// Applies a bulk insert logged at `index` (first apply and replay alike): rows
    /// whose store already holds `index` are skipped; an existing live key is
    /// `AlreadyPresent` (so is a key repeated within the batch); a deleted one is
    /// re-inserted through the row path; the rest become new DiskRowSets. Returns the
    /// row errors by position in the record.
    fn apply_bulk(&self, index: u64, ts: HybridTime, ipc: &[u8]) -> Result<Vec<(usize, RowError)>> {
        let bad = |e: TabletError| {
            TabletError::corruption(&self.dir, format!("bulk insert at log index {index}: {e}"))
        };
        let schema = self.schema();
        let batch = crate::bulk::decode_ipc(ipc)
            .and_then(|b| crate::bulk::to_current(&schema, &b))
            .map_err(bad)?;
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(batch.num_rows());
        for k in crate::bulk::row_keys(&schema, &batch)? {
            keys.push(k.map_err(|e| bad(TabletError::InvalidRequest(e.to_string())))?);
        }
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        order.sort_by(|a, b| keys[*a as usize].cmp(&keys[*b as usize]));
        let mut errors = Vec::new();
        let mut fresh: Vec<u32> = Vec::with_capacity(order.len());
        {
            let _gate = self.gate.read();
            let comps = self.components();
            let mrs_flushed = self.mrs_flushed_index.load(Ordering::Acquire);
            let mut prev: Option<&[u8]> = None;
            for &i in &order {
                let key = keys[i as usize].as_slice();
                if prev == Some(key) {
                    errors.push((i as usize, RowError::AlreadyPresent));
                    continue;
                }
                prev = Some(key);
                let (held, live) = match self.locate(&comps, key) {
                    Location::Absent => {
                        if index > mrs_flushed {
                            fresh.push(i);
                        }
                        continue;
                    }
                    Location::Disk(rs, o) => (index <= rs.durable_index(), rs.is_live(o)),
                    Location::Mem(_, r) => (index <= mrs_flushed, r.is_live()),
                };
                if held {
                    continue;
                }
                if live {
                    errors.push((i as usize, RowError::AlreadyPresent));
                    continue;
                }
                let values = schema
                    .columns()
                    .iter()
                    .enumerate()
                    .map(|(c, col)| {
                        Value::from_array(batch.column(c).as_ref(), i as usize, &col.data_type)
                            .map(Some)
                    })
                    .collect::<cairn_common::Result<Vec<_>>>()?;
                let op = RowOp {
                    kind: OpKind::Insert,
                    values,
                };
                if let Err(e) = self.apply_op(&schema, &comps, &op, key.to_vec(), ts, index, true) {
                    errors.push((i as usize, e));
                }
            }
        }
        if !fresh.is_empty() {
            let take = arrow::array::UInt32Array::from_iter_values(fresh.iter().copied());
            let sorted = arrow::compute::take_record_batch(&batch, &take)?;
            let fresh_keys: Vec<Vec<u8>> = fresh
                .iter()
                .map(|&i| std::mem::take(&mut keys[i as usize]))
                .collect();
            let undo = (ts >= self.ancient_history_mark()).then_some(ts);
            let mut alloc = || self.alloc_rowset_id();
            let mut w = RowSetWriter::new(
                &rowsets_dir(&self.dir),
                &schema,
                self.writer_config(),
                index,
                &mut alloc,
            );
            w.append_batch(fresh_keys, &sorted, undo)?;
            let outputs = self.open_rowsets(w.finish()?)?;
            let _m = self.maint_lock()?;
            let _gate = self.gate.write();
            let comps = self.components();
            let mut disk = comps.disk.clone();
            disk.extend(outputs.iter().cloned());
            *self.comps.write() = Arc::new(Components::new(
                comps.mrs.clone(),
                comps.frozen.clone(),
                disk,
            ));
            self.persist()?;
            tracing::debug!(
                rows = fresh.len(),
                rowsets = outputs.len(),
                index,
                "bulk insert wrote new rowsets"
            );
        }
        errors.sort_by_key(|(i, _)| *i);
        Ok(errors)
    }

    /// Encodes the record of a schema change, to replicate (replicated mode).
    pub fn prepare_alter(&self, op: &AlterOp) -> Result<Vec<u8>> {
        let new = self.schema().altered(op)?;
        Ok(LogRecord::AlterSchema {
            schema: SchemaMeta::from_schema(&new),
        }
        .encode())
    }

    /// The log index up to which every store's files hold every write: after a
    /// restart, records after it must be applied again.
    pub fn durable_index(&self) -> u64 {
        let comps = self.components();
        comps
            .disk
            .iter()
            .map(|r| r.durable_index())
            .chain(std::iter::once(
                self.mrs_flushed_index.load(Ordering::Acquire),
            ))
            .min()
            .unwrap_or(0)
    }

    /// Replicated mode: the last consensus index applied.
    pub fn applied_index(&self) -> u64 {
        self.applied_index.load(Ordering::Acquire)
    }

    /// Flushes every in-memory store, so that [`Tablet::durable_index`] reaches the
    /// applied index (before a tablet copy or a log purge).
    pub fn flush_all(&self) -> Result<()> {
        self.flush_mrs()?;
        self.flush_deltas()?;
        // Stores with nothing in memory hold everything up to the current cut: advance
        // their marks too, or an idle store would pin the log forever.
        let _m = self.maint_lock()?;
        let _g = self.gate.write();
        let cut = self.last_log_index();
        let comps = self.components();
        let mut changed = false;
        if comps.mrs.is_empty()
            && comps.frozen.is_empty()
            && self.mrs_flushed_index.load(Ordering::Acquire) < cut
        {
            self.mrs_flushed_index.store(cut, Ordering::Release);
            changed = true;
        }
        for rs in &comps.disk {
            let d = rs.deltas();
            if d.dms.is_empty() && d.frozen_dms.is_none() && rs.durable_index() < cut {
                let mut meta = rs.meta();
                meta.durable_index = cut;
                rs.set_meta(meta);
                rs.set_durable_index(cut);
                changed = true;
            }
        }
        if changed {
            self.persist()?;
        }
        Ok(())
    }

    /// Lists the files that make up the tablet (metadata last), relative to its
    /// directory, with hard links under `into` so that maintenance cannot delete them
    /// while they are copied. The caller removes `into` afterwards.
    /// Also returns the log index the files cover ([`Tablet::durable_index`]).
    pub fn checkpoint_files(&self, into: &Path) -> Result<(Vec<PathBuf>, u64)> {
        let _m = self.maint_lock()?;
        let _g = self.gate.write();
        self.persist()?;
        let durable = self.durable_index();
        let mut out = Vec::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).map_err(|e| TabletError::io(&d, e))? {
                let e = e.map_err(|e| TabletError::io(&d, e))?;
                let p = e.path();
                let rel = p.strip_prefix(&self.dir).unwrap_or(&p).to_path_buf();
                if rel.starts_with("wal") || rel.to_string_lossy().ends_with(".tmp") {
                    continue;
                }
                let ft = e.file_type().map_err(|e| TabletError::io(&p, e))?;
                if ft.is_dir() {
                    stack.push(p);
                } else {
                    let dst = into.join(&rel);
                    if let Some(parent) = dst.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| TabletError::io(parent, e))?;
                    }
                    std::fs::hard_link(&p, &dst).map_err(|e| TabletError::io(&dst, e))?;
                    out.push(rel);
                }
            }
        }
        let meta = PathBuf::from(crate::metadata::METADATA_FILE);
        out.retain(|p| p != &meta);
        out.sort();
        out.push(meta);
        Ok((out, durable))
    }

    // ----- reads ------------------------------------------------------------------

    /// Reads one row by primary key (values in key-column order).
    pub fn get(&self, key: &[Value], mode: ReadMode) -> Result<Option<Row>> {
        let schema = self.schema();
        let refs: Vec<&Value> = key.iter().collect();
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
        let enc = cairn_common::key::encode_values(&refs)?;
        let snap = self.snapshot_for(mode)?;
        let comps = self.components();
        match self.locate(&comps, &enc) {
            Location::Disk(rs, o) => rs.row_at(&schema, o, snap),
            Location::Mem(_, r) => Ok(r.state_at(&schema, snap)),
            Location::Absent => Ok(None),
        }
    }

    // ----- persistence ------------------------------------------------------------

    /// Exclusive hold of the write gate (maintenance installs).
    pub(crate) fn write_gate(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// Writes the metadata file (the caller holds the maintenance lock).
    pub(crate) fn persist_locked(&self) -> Result<()> {
        self.persist()
    }

    /// Writes the metadata file from the current state.
    fn persist(&self) -> Result<()> {
        let comps = self.components();
        let meta = TabletMeta {
            format_version: 1,
            schema: SchemaMeta::from_schema(&self.schema()),
            mrs_flushed_index: self.mrs_flushed_index.load(Ordering::Acquire),
            next_rowset_id: self.next_rowset_id.load(Ordering::Acquire),
            rowsets: comps.disk.iter().map(|r| r.meta()).collect(),
        };
        meta.store(&self.dir)
    }

    fn alloc_rowset_id(&self) -> u64 {
        self.next_rowset_id.fetch_add(1, Ordering::AcqRel)
    }

    fn writer_config(&self) -> WriterConfig {
        WriterConfig {
            target_rowset_bytes: self.opts.target_rowset_bytes,
            rows_per_row_group: self.opts.rows_per_row_group,
            codec: self.opts.codec,
        }
    }

    fn last_log_index(&self) -> u64 {
        match self.wal.lock().as_ref() {
            Some(w) => w.last_index().unwrap_or(0),
            None => self.applied_index.load(Ordering::Acquire),
        }
    }

    fn open_rowsets(
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

    /// Re-applies changes made after a cut to rows that now live in `outputs` (or, if a
    /// row was dropped as dead history, to the MemRowSet).
    fn carry_over(
        &self,
        schema: &Schema,
        comps: &Components,
        outputs: &[Arc<DiskRowSet>],
        key: &[u8],
        changes: Vec<(HybridTime, RowChange)>,
        log_index: u64,
    ) {
        if changes.is_empty() {
            return;
        }
        for rs in outputs {
            if let Some(o) = rs.keys.find(key) {
                let dms = rs.dms();
                for (ts, c) in changes {
                    dms.add(o as u32, ts, c);
                }
                return;
            }
        }
        // The row had been dropped (deleted beyond history); the first change re-inserts it.
        let mut state: Option<Row> = None;
        let mut inserted: Option<Arc<MrsRow>> = None;
        for (ts, c) in changes {
            match &inserted {
                None => {
                    apply_change(schema, &mut state, &c);
                    if let Some(row) = state.take() {
                        comps.mrs.insert(key.to_vec(), row, ts, log_index);
                        inserted = comps.mrs.get(key);
                    }
                }
                Some(r) => comps.mrs.mutate(r, ts, c, log_index),
            }
        }
    }

    // ----- maintenance: flush -----------------------------------------------------

    /// Flushes the MemRowSet into new DiskRowSets. Returns false if it was empty.
    pub fn flush_mrs(&self) -> Result<bool> {
        let _m = self.maint_lock()?;
        self.flush_mrs_locked(false).map(|(flushed, _)| flushed)
    }

    /// Flushes the MemRowSet. With `hold_gate`, writers stay blocked from the cut until
    /// the caller drops the returned guard (used by ALTER).
    fn flush_mrs_locked(
        &self,
        hold_gate: bool,
    ) -> Result<(bool, Option<RwLockWriteGuard<'_, ()>>)> {
        let gate = self.gate.write();
        let comps = self.components();
        if comps.mrs.is_empty() {
            return Ok((false, hold_gate.then_some(gate)));
        }
        let cut = self.last_log_index();
        let snap = self.mvcc.snapshot_now(&self.clock);
        let frozen = comps.mrs.clone();
        let new_mrs = Arc::new(MemRowSet::new(self.alloc_rowset_id()));
        let mut frozen_list = comps.frozen.clone();
        frozen_list.push(frozen.clone());
        *self.comps.write() = Arc::new(Components::new(new_mrs, frozen_list, comps.disk.clone()));
        let gate = if hold_gate {
            Some(gate)
        } else {
            drop(gate);
            None
        };

        let schema = self.schema();
        let ahm = self.ancient_history_mark();
        let mut alloc = || self.alloc_rowset_id();
        let mut w = RowSetWriter::new(
            &rowsets_dir(&self.dir),
            &schema,
            self.writer_config(),
            cut,
            &mut alloc,
        );
        for (key, row) in frozen.iter() {
            if let Some(f) = flush_row(&schema, row.history(&schema, key, snap), ahm) {
                w.append(f)?;
            }
        }
        let outputs = self.open_rowsets(w.finish()?)?;

        let gate = match gate {
            Some(g) => g,
            None => self.gate.write(),
        };
        let comps = self.components();
        for (key, row) in frozen.iter() {
            self.carry_over(
                &schema,
                &comps,
                &outputs,
                &key,
                row.mutations_after(snap),
                cut + 1,
            );
        }
        let mut disk = comps.disk.clone();
        disk.extend(outputs.iter().cloned());
        let frozen_left: Vec<_> = comps
            .frozen
            .iter()
            .filter(|m| !Arc::ptr_eq(m, &frozen))
            .cloned()
            .collect();
        *self.comps.write() = Arc::new(Components::new(comps.mrs.clone(), frozen_left, disk));
        self.mrs_flushed_index.store(cut, Ordering::Release);
        self.persist()?;
        tracing::debug!(
            rows = frozen.len(),
            rowsets = outputs.len(),
            cut,
            "flushed the MemRowSet"
        );
        Ok((true, hold_gate.then_some(gate)))
    }

    /// Flushes every non-empty DeltaMemStore into a REDO delta file.
    pub fn flush_deltas(&self) -> Result<usize> {
        let _m = self.maint_lock()?;
        let rowsets: Vec<_> = self.components().disk.clone();
        let mut n = 0;
        for rs in rowsets {
            if self.flush_dms_locked(&rs)? {
                n += 1;
            }
        }
        Ok(n)
    }

    fn flush_dms_locked(&self, rs: &Arc<DiskRowSet>) -> Result<bool> {
        let (frozen, cut) = {
            let _g = self.gate.write();
            let mut d = rs.deltas();
            if d.dms.is_empty() {
                return Ok(false);
            }
            let cut = self.last_log_index();
            let frozen = d.dms.clone();
            d.frozen_dms = Some(frozen.clone());
            d.dms = Arc::new(DeltaMemStore::new());
            rs.set_deltas(d);
            (frozen, cut)
        };
        let mut meta = rs.meta();
        let name = format!("redo-{}.delta", meta.next_file_seq);
        let (crc, size) = write_delta_file(&rs.dir().join(&name), &frozen.entries())?;
        let file = Arc::new(crate::delta::DeltaFile::open(
            &rs.dir().join(&name),
            &name,
            crc,
        )?);
        let _g = self.gate.write();
        let mut d = rs.deltas();
        d.redo_files.push(file);
        d.frozen_dms = None;
        rs.set_deltas(d);
        meta.next_file_seq += 1;
        meta.redo_files.push(FileMeta { name, crc, size });
        meta.durable_index = cut;
        rs.set_meta(meta);
        rs.set_durable_index(cut);
        self.persist()?;
        Ok(true)
    }

    // ----- maintenance: delta compaction ------------------------------------------

    /// Minor delta compaction: merges a rowset's REDO files into one.
    pub fn minor_delta_compaction(&self, rs: &Arc<DiskRowSet>) -> Result<bool> {
        let _m = self.maint_lock()?;
        let d = rs.deltas();
        if d.redo_files.len() < 2 {
            return Ok(false);
        }
        let inputs = d.redo_files.clone();
        let mut entries: Vec<DeltaEntry> = inputs
            .iter()
            .flat_map(|f| f.entries().iter().cloned())
            .collect();
        entries.sort_by_key(|e| (e.ordinal, e.ts));
        let mut meta = rs.meta();
        let name = format!("redo-{}.delta", meta.next_file_seq);
        let (crc, size) = write_delta_file(&rs.dir().join(&name), &entries)?;
        let file = Arc::new(crate::delta::DeltaFile::open(
            &rs.dir().join(&name),
            &name,
            crc,
        )?);
        let _g = self.gate.write();
        let mut d = rs.deltas();
        d.redo_files
            .retain(|f| !inputs.iter().any(|i| Arc::ptr_eq(i, f)));
        d.redo_files.insert(0, file);
        rs.set_deltas(d);
        let old: Vec<String> = inputs.iter().map(|f| f.name.clone()).collect();
        meta.next_file_seq += 1;
        meta.redo_files.retain(|f| !old.contains(&f.name));
        meta.redo_files.insert(0, FileMeta { name, crc, size });
        rs.set_meta(meta);
        self.persist()?;
        for n in old {
            let _ = std::fs::remove_file(rs.dir().join(n));
        }
        Ok(true)
    }

    /// Major delta compaction: folds REDO updates of rows that were only updated into a
    /// new base file holding just the changed columns, writing their inverses as UNDOs.
    /// Rows with deletes or re-inserts keep their REDOs.
    pub fn major_delta_compaction(&self, rs: &Arc<DiskRowSet>) -> Result<bool> {
        let _m = self.maint_lock()?;
        crate::compaction::major_delta_compaction(self, rs)
    }

    // ----- maintenance: rowset compaction -----------------------------------------

    /// Compacts the given rowsets (all of them if `None`) into new ones.
    pub fn compact_rowsets(&self, ids: Option<&[u64]>) -> Result<bool> {
        let _m = self.maint_lock()?;
        let comps = self.components();
        let inputs: Vec<Arc<DiskRowSet>> = match ids {
            None => comps.disk.clone(),
            Some(ids) => comps
                .disk
                .iter()
                .filter(|r| ids.contains(&r.id))
                .cloned()
                .collect(),
        };
        if inputs.len() < 2 && inputs.iter().all(|r| r.deltas().redo_count() == 0) {
            return Ok(false);
        }
        self.compact_locked(inputs)
    }

    /// Compacts the rowsets the budgeted policy picks. Returns false if none are worth it.
    pub fn compact_by_policy(&self) -> Result<bool> {
        let _m = self.maint_lock()?;
        let comps = self.components();
        let picked = crate::policy::pick_compaction(&comps.disk, self.opts.compaction_budget_bytes);
        if picked.len() < 2 {
            return Ok(false);
        }
        self.compact_locked(picked)
    }

    fn compact_locked(&self, inputs: Vec<Arc<DiskRowSet>>) -> Result<bool> {
        let (cut, snap) = {
            let _g = self.gate.write();
            for rs in &inputs {
                let mut d = rs.deltas();
                if !d.dms.is_empty() {
                    // Merge an already frozen DMS with the active one: both are inputs.
                    let merged = Arc::new(DeltaMemStore::new());
                    for src in d.frozen_dms.iter().chain(std::iter::once(&d.dms)) {
                        for e in src.entries() {
                            merged.add(e.ordinal, e.ts, e.change);
                        }
                    }
                    d.frozen_dms = Some(merged);
                    d.dms = Arc::new(DeltaMemStore::new());
                    rs.set_deltas(d);
                }
            }
            (self.last_log_index(), self.mvcc.snapshot_now(&self.clock))
        };
        let schema = self.schema();
        let ahm = self.ancient_history_mark();
        let mut alloc = || self.alloc_rowset_id();
        let mut w = RowSetWriter::new(
            &rowsets_dir(&self.dir),
            &schema,
            self.writer_config(),
            cut,
            &mut alloc,
        );
        crate::compaction::merge_rowsets(&schema, &inputs, snap, ahm, |f| w.append(f))?;
        let outputs = self.open_rowsets(w.finish()?)?;

        let _g = self.gate.write();
        let comps = self.components();
        for rs in &inputs {
            for e in rs.dms().entries() {
                let key = rs.keys.key(e.ordinal as usize).to_vec();
                self.carry_over(
                    &schema,
                    &comps,
                    &outputs,
                    &key,
                    vec![(e.ts, e.change)],
                    cut + 1,
                );
            }
        }
        let mut disk: Vec<_> = comps
            .disk
            .iter()
            .filter(|r| !inputs.iter().any(|i| Arc::ptr_eq(i, r)))
            .cloned()
            .collect();
        disk.extend(outputs.iter().cloned());
        *self.comps.write() = Arc::new(Components::new(
            comps.mrs.clone(),
            comps.frozen.clone(),
            disk,
        ));
        self.persist()?;
        for rs in &inputs {
            rs.mark_obsolete();
        }
        tracing::debug!(
            inputs = inputs.len(),
            outputs = outputs.len(),
            "compacted rowsets"
        );
        Ok(true)
    }

    // ----- maintenance: GC --------------------------------------------------------

    /// Drops UNDO files whose every delta is older than the ancient history mark.
    pub fn gc_history(&self) -> Result<usize> {
        let _m = self.maint_lock()?;
        let ahm = self.ancient_history_mark();
        let mut dropped = 0;
        for rs in self.components().disk.iter() {
            let d = rs.deltas();
            let old: Vec<String> = d
                .undo_files
                .iter()
                .filter(|f| f.max_ts < ahm)
                .map(|f| f.name.clone())
                .collect();
            if old.is_empty() {
                continue;
            }
            let _g = self.gate.write();
            let mut d = rs.deltas();
            d.undo_files.retain(|f| !old.contains(&f.name));
            rs.set_deltas(d);
            let mut meta = rs.meta();
            meta.undo_files.retain(|f| !old.contains(&f.name));
            rs.set_meta(meta);
            self.persist()?;
            for n in &old {
                let _ = std::fs::remove_file(rs.dir().join(n));
            }
            dropped += old.len();
        }
        Ok(dropped)
    }

    /// Deletes log segments every store has made durable. Returns segments deleted.
    pub fn gc_wal(&self) -> Result<usize> {
        let comps = self.components();
        let mut keep_from = self.mrs_flushed_index.load(Ordering::Acquire);
        for rs in &comps.disk {
            keep_from = keep_from.min(rs.durable_index());
        }
        match self.wal.lock().as_mut() {
            Some(w) => Ok(w.gc(keep_from + 1)?),
            None => Ok(0),
        }
    }

    /// Persists dirty predicate skip caches.
    pub fn persist_skip_caches(&self) -> Result<usize> {
        let _m = self.maint_lock()?;
        let mut n = 0;
        for rs in self.components().disk.iter() {
            if let Some(entries) = rs.skip_cache.snapshot_for_persist() {
                let mut meta = rs.meta();
                let name = format!("skipcache-{}.json", meta.next_file_seq);
                let bytes = serde_json::to_vec(&entries)
                    .map_err(|e| TabletError::InvalidRequest(e.to_string()))?;
                write_atomic(rs.dir(), &name, &bytes)?;
                let old = meta.skip_cache.replace(FileMeta {
                    name,
                    crc: crc32c::crc32c(&bytes),
                    size: bytes.len() as u64,
                });
                meta.next_file_seq += 1;
                rs.set_meta(meta);
                let _g = self.gate.write();
                self.persist()?;
                if let Some(o) = old {
                    let _ = std::fs::remove_file(rs.dir().join(o.name));
                }
                n += 1;
            }
        }
        Ok(n)
    }

    // ----- schema changes ---------------------------------------------------------

    /// Changes the schema without rewriting data: the MemRowSet is flushed, the change
    /// is logged, and the new schema recorded. Column ids keep old files readable.
    pub fn alter_schema(&self, op: AlterOp) -> Result<()> {
        let _m = self.maint_lock()?;
        let current = self.schema();
        let new = match &op {
            AlterOp::AddColumn(spec) => current.add_column(spec.clone())?,
            AlterOp::DropColumn(name) => current.drop_column(name)?,
            AlterOp::RenameColumn { from, to } => current.rename_column(from, to)?,
        };
        // Writers stay blocked from the flush's cut until the new schema is in place, so
        // no row reaches the MemRowSet under the old column layout.
        let (_, gate) = self.flush_mrs_locked(true)?;
        let rec = LogRecord::AlterSchema {
            schema: SchemaMeta::from_schema(&new),
        };
        self.append_log(&rec.encode())?;
        self.sync_log()?;
        *self.schema.write() = Arc::new(new);
        self.persist()?;
        drop(gate);
        Ok(())
    }

    // ----- introspection ----------------------------------------------------------

    /// Sizes and counts.
    pub fn stats(&self) -> TabletStats {
        let comps = self.components();
        let wal = self.wal.lock();
        let mut s = TabletStats {
            mrs_rows: comps.mrs.len(),
            mrs_bytes: comps.mrs.mem_bytes(),
            disk_rowsets: comps.disk.len(),
            wal_bytes: wal.as_ref().map_or(0, |w| w.size_bytes()),
            wal_segments: wal.as_ref().map_or(0, |w| w.segment_count()),
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

    /// Stops accepting writes, waits for the maintenance op in progress, and syncs the
    /// log. Afterwards no maintenance op runs and nothing in the directory changes.
    pub fn shutdown(&self) -> Result<()> {
        self.shut_down.store(true, Ordering::Release);
        let _m = self.maint.lock();
        let _g = self.gate.write();
        self.sync_log()
    }

    /// Takes the maintenance lock, refusing once the tablet is shut down (so that a
    /// straggling maintenance or snapshot task never writes into a directory that has
    /// been handed over, e.g. replaced by a tablet copy).
    fn maint_lock(&self) -> Result<parking_lot::MutexGuard<'_, ()>> {
        let g = self.maint.lock();
        if self.shut_down.load(Ordering::Acquire) {
            return Err(TabletError::ShutDown);
        }
        Ok(g)
    }

    fn sync_log(&self) -> Result<()> {
        if let Some(w) = self.wal.lock().as_mut() {
            w.sync()?;
        }
        Ok(())
    }

    /// Whether [`Tablet::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// Scans with the given spec.
    pub fn scan(self: &Arc<Self>, spec: crate::scan::ScanSpec) -> Result<crate::scan::Scanner> {
        crate::scan::Scanner::new(self.clone(), spec)
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
