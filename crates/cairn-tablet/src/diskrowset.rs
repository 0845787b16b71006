//! The DiskRowSet: immutable columnar base data plus mutable delta stores (Kudu §4.3-4.4).
//!
//! A DiskRowSet covers a contiguous, sorted run of keys. Its parts:
//!
//! - **Base data**: one or more Parquet files (`base-N.parquet`). The first holds every
//!   column; a major delta compaction that rewrites some columns adds a file holding just
//!   those, which then shadows the older copies. Parquet columns are named `c<id>` after
//!   stable column ids, so renames and drops never touch them; columns added later read
//!   as their default. Every file has the same row groups, and pages of at most
//!   [`BLOCK_ROWS`](crate::cache::BLOCK_ROWS) rows with page indexes, so a row selection decodes only the pages it
//!   needs.
//! - **Key index** ([`KeyIndex`]): sorted keys + bloom filter; row ordinal = position.
//! - **Deltas** ([`Deltas`]): REDO files and the DeltaMemStore for later changes, UNDO
//!   files for history.
//! - **Predicate skip cache** ([`SkipCache`]): per row group, conjunctions known to match
//!   no base row (HRDBMS §III), consulted by implication.
//!
//! Scans work per row group: the key range becomes an ordinal range; row groups where
//! no visible delta changes a column the scan reads are skipped when min/max
//! statistics or the skip cache rule them out, and otherwise read *lazily* — predicate
//! columns first, the other columns only for matching rows. Other row groups are read
//! eagerly, their deltas applied (`deltaapply.rs`: column-wise when all are
//! updates), and the predicates evaluated on the result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::filter;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use cairn_common::{ColumnId, ColumnPredicate, HybridTime, Schema, Value};
use parking_lot::{Mutex, RwLock};

use crate::cache::BlockCache;
use crate::delta::{DeltaEntry, DeltaFile, DeltaMemStore};
use crate::deltaapply::{RelevantDeltas, apply_deltas, apply_patches, update_patches};
use crate::error::{Result, TabletError};
use crate::history::{NewestFirst, Row, apply_change};
use crate::keyindex::KeyIndex;
use crate::metadata::{BaseFileMeta, FileMeta, RowSetMeta};
use crate::ops::RowChange;

pub use crate::basedata::{BaseData, BaseFile, parquet_column_name};
pub use crate::skipcache::SkipCache;

/// The delta stores of a DiskRowSet.
#[derive(Debug, Clone)]
pub struct Deltas {
    /// Flushed REDO files, oldest first.
    pub redo_files: Vec<Arc<DeltaFile>>,
    /// UNDO files.
    pub undo_files: Vec<Arc<DeltaFile>>,
    /// A DeltaMemStore being flushed (still read until its file is installed).
    pub frozen_dms: Option<Arc<DeltaMemStore>>,
    /// The active DeltaMemStore.
    pub dms: Arc<DeltaMemStore>,
}

impl Deltas {
    /// REDOs and UNDOs for ordinals `[lo, hi)`, each ordered by (ordinal, timestamp).
    pub fn collect(&self, lo: u32, hi: u32) -> (Vec<DeltaEntry>, Vec<DeltaEntry>) {
        self.collect_for(lo, hi, HybridTime::MIN)
    }

    /// Like [`Deltas::collect`], but skips UNDO files that cannot matter to a read at
    /// `snap` (all their changes are at or before it).
    pub fn collect_for(
        &self,
        lo: u32,
        hi: u32,
        snap: HybridTime,
    ) -> (Vec<DeltaEntry>, Vec<DeltaEntry>) {
        let mut redo: Vec<DeltaEntry> = Vec::new();
        for f in &self.redo_files {
            redo.extend_from_slice(f.range(lo, hi));
        }
        if let Some(d) = &self.frozen_dms {
            redo.extend(d.range(lo, hi));
        }
        redo.extend(self.dms.range(lo, hi));
        redo.sort_by_key(|e| (e.ordinal, e.ts));
        let mut undo: Vec<DeltaEntry> = Vec::new();
        for f in self.undo_files.iter().filter(|f| f.max_ts > snap) {
            undo.extend(f.range(lo, hi).iter().filter(|e| e.ts > snap).cloned());
        }
        undo.sort_by_key(|e| (e.ordinal, e.ts));
        (redo, undo)
    }

    /// Whether the row at `ordinal` is live after every REDO so far, and when it last
    /// changed (its newest REDO or UNDO; [`HybridTime::MIN`] when it has none). Copies
    /// no change: the write path asks this of every row it touches, and a hot row
    /// with thousands of updates must cost a walk, not a clone of each (as
    /// [`Deltas::collect`] would). Ties between sources resolve as `collect` orders
    /// them: files oldest first, then the frozen store, then the active one.
    pub fn row_status(&self, ordinal: u32) -> (bool, HybridTime) {
        // The newest delete or re-insert, by (timestamp, source, position).
        let mut newest: Option<((HybridTime, usize, usize), bool)> = None;
        let mut last = HybridTime::MIN;
        let files = self.redo_files.len();
        for (src, f) in self.redo_files.iter().enumerate() {
            // A file's deltas of one row are in timestamp order: its newest change is
            // the last, and its newest delete or re-insert the last of those. A file
            // of updates only (the usual case) needs no walk of a hot row's updates.
            let range = f.range(ordinal, ordinal + 1);
            if let Some(e) = range.last() {
                last = last.max(e.ts);
            }
            if f.deletes + f.reinserts == 0 {
                continue;
            }
            if let Some((pos, e)) = range
                .iter()
                .enumerate()
                .rev()
                .find(|(_, e)| !matches!(e.change, RowChange::Update(_)))
            {
                let key = (e.ts, src, pos);
                if newest.as_ref().is_none_or(|(k, _)| key > *k) {
                    newest = Some((key, matches!(e.change, RowChange::Reinsert(_))));
                }
            }
        }
        let stores = [self.frozen_dms.as_ref(), Some(&self.dms)];
        for (i, d) in stores.into_iter().enumerate() {
            if let Some(sum) = d.and_then(|d| d.row_summary(ordinal)) {
                last = last.max(sum.newest);
                if let Some((ts, seq, live)) = sum.liveness {
                    let key = (ts, files + i, seq as usize);
                    if newest.as_ref().is_none_or(|(k, _)| key > *k) {
                        newest = Some((key, live));
                    }
                }
            }
        }
        for f in &self.undo_files {
            // A row's UNDOs in a file are in timestamp order too (every writer sorts
            // them so, and `history_from_deltas` reads them so): the last is the
            // newest, without a walk of a hot row's thousands of UNDOs on each write.
            if let Some(e) = f.range(ordinal, ordinal + 1).last() {
                last = last.max(e.ts);
            }
        }
        (newest.is_none_or(|(_, live)| live), last)
    }

    /// Number of REDO deltas on disk and in memory.
    pub fn redo_count(&self) -> usize {
        self.redo_files.iter().map(|f| f.len()).sum::<usize>()
            + self.frozen_dms.as_ref().map_or(0, |d| d.len())
            + self.dms.len()
    }
}

/// A batch of scan output together with the row ordinals it came from.
#[derive(Debug)]
pub struct OrdinalBatch {
    /// Projected columns.
    pub batch: RecordBatch,
    /// Row ordinal of each output row.
    pub ordinals: Vec<u32>,
}

/// What a scan of one rowset needs.
#[derive(Debug, Clone)]
pub struct RowSetScan<'a> {
    /// Schema of the tablet now.
    pub schema: &'a Schema,
    /// Projected column positions.
    pub projection: &'a [usize],
    /// Predicates with their column positions.
    pub predicates: &'a [(usize, ColumnPredicate)],
    /// The plain conjunction (for the skip cache).
    pub conjunction: &'a [ColumnPredicate],
    /// Snapshot.
    pub snapshot: HybridTime,
    /// Output schema.
    pub out_schema: arrow::datatypes::SchemaRef,
}

/// Counters of what scans skipped, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct ScanCounters {
    /// Row groups skipped by min/max statistics.
    pub groups_skipped_by_stats: AtomicU64,
    /// Row groups skipped by the predicate skip cache.
    pub groups_skipped_by_cache: AtomicU64,
    /// Row groups read.
    pub groups_read: AtomicU64,
}

/// A DiskRowSet.
#[derive(Debug)]
pub struct DiskRowSet {
    /// Rowset id.
    pub id: u64,
    dir: PathBuf,
    /// Sorted keys and bloom filter.
    pub keys: KeyIndex,
    base: RwLock<Arc<BaseData>>,
    deltas: RwLock<Deltas>,
    /// Log index up to which every op on this rowset's rows is in its files.
    durable_index: AtomicU64,
    /// Predicate skip cache.
    pub skip_cache: SkipCache,
    meta: Mutex<RowSetMeta>,
    obsolete: AtomicBool,
    cache: Arc<BlockCache>,
}

impl Drop for DiskRowSet {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl DiskRowSet {
    /// Opens a rowset from its metadata, verifying every file's checksum.
    pub fn open(dir: &Path, meta: RowSetMeta, cache: Arc<BlockCache>) -> Result<DiskRowSet> {
        let keys = KeyIndex::open(&dir.join(&meta.keys.name), meta.keys.crc)?;
        let files = meta
            .base_files
            .iter()
            .map(|f| BaseFile::open(&dir.join(&f.name), f.clone()).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let base = BaseData::new(files);
        if base.group_starts.last().copied().unwrap_or(0) as usize != keys.len() {
            return Err(TabletError::corruption(
                dir,
                "base data and key index disagree on the row count",
            ));
        }
        let open_deltas = |list: &[FileMeta]| -> Result<Vec<Arc<DeltaFile>>> {
            list.iter()
                .map(|f| DeltaFile::open(&dir.join(&f.name), &f.name, f.crc).map(Arc::new))
                .collect()
        };
        let deltas = Deltas {
            redo_files: open_deltas(&meta.redo_files)?,
            undo_files: open_deltas(&meta.undo_files)?,
            frozen_dms: None,
            dms: Arc::new(DeltaMemStore::new()),
        };
        let skip = match &meta.skip_cache {
            None => SkipCache::default(),
            Some(f) => {
                let p = dir.join(&f.name);
                let bytes = std::fs::read(&p).map_err(|e| TabletError::io(&p, e))?;
                if crc32c::crc32c(&bytes) != f.crc {
                    return Err(TabletError::corruption(
                        &p,
                        "skip cache checksum does not match the tablet metadata",
                    ));
                }
                SkipCache::from_persisted(&bytes).map_err(|e| {
                    TabletError::corruption(&p, format!("unreadable skip cache: {e}"))
                })?
            }
        };
        Ok(DiskRowSet {
            id: meta.id,
            dir: dir.to_path_buf(),
            keys,
            base: RwLock::new(Arc::new(base)),
            deltas: RwLock::new(deltas),
            durable_index: AtomicU64::new(meta.durable_index),
            skip_cache: skip,
            meta: Mutex::new(meta),
            obsolete: AtomicBool::new(false),
            cache,
        })
    }

    /// The rowset's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Number of rows in the base data.
    pub fn num_rows(&self) -> usize {
        self.keys.len()
    }
    /// Log index up to which this rowset's files hold every op on its rows.
    pub fn durable_index(&self) -> u64 {
        self.durable_index.load(Ordering::Acquire)
    }
    /// Updates the durable index (after a delta flush or when installed).
    pub fn set_durable_index(&self, i: u64) {
        self.durable_index.store(i, Ordering::Release);
        self.meta.lock().durable_index = i;
    }
    /// Marks the rowset as replaced: its files are deleted once the last reader drops it.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
    /// The current metadata.
    pub fn meta(&self) -> RowSetMeta {
        self.meta.lock().clone()
    }
    /// Replaces the metadata record (after a maintenance op changed the files).
    pub fn set_meta(&self, m: RowSetMeta) {
        *self.meta.lock() = m;
    }
    /// A consistent view of the delta stores.
    pub fn deltas(&self) -> Deltas {
        self.deltas.read().clone()
    }
    /// Replaces the delta stores.
    pub fn set_deltas(&self, d: Deltas) {
        *self.deltas.write() = d;
    }
    /// The active DeltaMemStore.
    pub fn dms(&self) -> Arc<DeltaMemStore> {
        self.deltas.read().dms.clone()
    }
    /// Base data.
    pub fn base(&self) -> Arc<BaseData> {
        self.base.read().clone()
    }
    /// A consistent view of base data and deltas (both locks taken in a fixed order).
    pub fn view(&self) -> (Arc<BaseData>, Deltas) {
        let b = self.base.read();
        let d = self.deltas.read();
        (b.clone(), d.clone())
    }
    /// Replaces base files and deltas together (major delta compaction), so no reader
    /// sees new base data with old deltas. Clears the skip cache.
    pub fn install_base_and_deltas(&self, files: Vec<Arc<BaseFile>>, deltas: Deltas) {
        let mut b = self.base.write();
        let mut d = self.deltas.write();
        *b = Arc::new(BaseData::new(files));
        *d = deltas;
        self.skip_cache.clear();
    }
    /// Opens an additional base file of this rowset.
    pub fn open_base_file(&self, meta: BaseFileMeta) -> Result<Arc<BaseFile>> {
        BaseFile::open(&self.dir.join(&meta.name), meta).map(Arc::new)
    }
    /// Total bytes on disk.
    pub fn size_bytes(&self) -> u64 {
        let m = self.meta.lock();
        m.base_files.iter().map(|f| f.size).sum::<u64>()
            + m.keys.size
            + m.redo_files
                .iter()
                .chain(&m.undo_files)
                .map(|f| f.size)
                .sum::<u64>()
    }

    /// Whether the row at `ordinal` is live after every change so far.
    pub fn is_live(&self, ordinal: u32) -> bool {
        self.deltas.read().row_status(ordinal).0
    }

    /// Whether the row at `ordinal` is live, and when it last changed: its latest
    /// REDO, or the version its base data holds (its latest UNDO);
    /// [`HybridTime::MIN`] when that history is older than the retention window and
    /// has been collected.
    pub fn row_status(&self, ordinal: u32) -> (bool, HybridTime) {
        self.deltas.read().row_status(ordinal)
    }

    /// Reads the base row at `ordinal` through the block cache: the columns at the
    /// schema positions `want` (`None`: every column) — one page of each — with the
    /// others left `Value::Null`.
    pub fn base_row(&self, schema: &Schema, ordinal: u32, want: Option<&[usize]>) -> Result<Row> {
        let base = self.base();
        let rg = base.group_starts.partition_point(|s| *s <= ordinal) - 1;
        let rel = ordinal - base.group_starts[rg];
        let mut row: Row = vec![Value::Null; schema.num_columns()];
        // file → (schema position, column position in the file)
        let mut per_file: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
        let all: Vec<usize>;
        let want = match want {
            Some(w) => w,
            None => {
                all = (0..schema.num_columns()).collect();
                &all
            }
        };
        // A position past the schema (a projection made before an ALTER dropped
        // columns) reads nothing.
        for &i in want.iter().filter(|i| **i < schema.num_columns()) {
            let col = schema.column(i);
            match base.locations.get(&col.id) {
                Some(&(fi, ci)) => per_file.entry(fi).or_default().push((i, ci)),
                None => row[i] = col.read_default(),
            }
        }
        for (fi, cols) in per_file {
            let file = &base.files[fi];
            let wants: Vec<(usize, usize)> = cols
                .iter()
                .map(|&(_, ci)| (ci, file.page_of(rg, ci, rel)))
                .collect();
            let pages = base.pages(&self.cache, fi, rg, &wants)?;
            for ((&(i, ci), &(_, page)), values) in cols.iter().zip(&wants).zip(&pages) {
                let (first, _) = file.page_rows(rg, ci, page);
                row[i] = Value::from_array(
                    values.as_ref(),
                    (rel - first) as usize,
                    &schema.column(i).data_type,
                )?;
            }
        }
        Ok(row)
    }

    /// The row at `ordinal` as of `snap` (`None`: not visible). Base data is read
    /// only for the columns at schema positions `want` (`None`: all); the others
    /// are `Value::Null` unless a change carried them.
    pub fn row_at(
        &self,
        schema: &Schema,
        ordinal: u32,
        snap: HybridTime,
        want: Option<&[usize]>,
    ) -> Result<Option<Row>> {
        let deltas = self.deltas.read().clone();
        let undo_matters = deltas
            .undo_files
            .iter()
            .any(|f| f.max_ts > snap && f.range(ordinal, ordinal + 1).iter().any(|e| e.ts > snap));
        if !undo_matters {
            // Only REDOs at or below the snapshot: fold them newest first, so a hot
            // row's long delta chain is read only back to its latest values.
            let mut fold = NewestFirst::new(schema, snap);
            deltas
                .dms
                .visit_newest_first(ordinal, |ts, c| fold.visit(ts, c));
            if let Some(d) = &deltas.frozen_dms {
                d.visit_newest_first(ordinal, |ts, c| fold.visit(ts, c));
            }
            for f in deltas.redo_files.iter().rev() {
                for e in f.range(ordinal, ordinal + 1).iter().rev() {
                    if !fold.visit(e.ts, &e.change) {
                        break;
                    }
                }
            }
            return fold.finish(|| self.base_row(schema, ordinal, want).map(Some));
        }
        let (redo, undo) = deltas.collect_for(ordinal, ordinal + 1, snap);
        let mut state = Some(self.base_row(schema, ordinal, want)?);
        for e in undo.iter().rev() {
            if e.ts > snap {
                apply_change(schema, &mut state, &e.change);
            }
        }
        for e in &redo {
            if e.ts <= snap {
                apply_change(schema, &mut state, &e.change);
            }
        }
        Ok(state)
    }

    /// Ordinal range `[a, b)` of keys in `[lower, upper)` (empty bound = unbounded).
    pub fn ordinal_range(&self, lower: &[u8], upper: &[u8]) -> (u32, u32) {
        let a = if lower.is_empty() {
            0
        } else {
            self.keys.lower_bound(lower)
        };
        let b = if upper.is_empty() {
            self.keys.len()
        } else {
            self.keys.lower_bound(upper)
        };
        (a as u32, b.max(a) as u32)
    }

    /// Number of row groups.
    pub fn num_row_groups(&self) -> usize {
        self.base().num_groups()
    }

    /// Scans rows `[a, b)` of row group `rg` at the scan's snapshot. Returns `None` when
    /// nothing matches.
    #[allow(clippy::too_many_arguments)]
    pub fn scan_group(
        &self,
        s: &RowSetScan<'_>,
        base: &BaseData,
        deltas: &Deltas,
        rg: usize,
        a: u32,
        b: u32,
        counters: &ScanCounters,
    ) -> Result<Option<OrdinalBatch>> {
        let schema = s.schema;
        let start = base.group_starts[rg];
        let end = base.group_starts[rg + 1];
        let (lo, hi) = (a.max(start), b.min(end));
        if lo >= hi {
            return Ok(None);
        }
        let proj_ids: Vec<ColumnId> = s.projection.iter().map(|&i| schema.column(i).id).collect();
        let mut pred_unique: Vec<ColumnId> = s
            .predicates
            .iter()
            .map(|(i, _)| schema.column(*i).id)
            .collect();
        pred_unique.sort_unstable();
        pred_unique.dedup();
        // Every column read: the projection, then predicate columns outside it.
        let mut ids: Vec<ColumnId> = proj_ids.clone();
        for id in &pred_unique {
            if !ids.contains(id) {
                ids.push(*id);
            }
        }
        let mut dms_entries = match &deltas.frozen_dms {
            Some(d) => d.range(lo, hi),
            None => Vec::new(),
        };
        dms_entries.extend(deltas.dms.range(lo, hi));
        let patches = update_patches(deltas, &dms_entries, lo, hi, s.snapshot, &ids);
        let (redo, undo) = if patches.is_some() {
            (Vec::new(), Vec::new())
        } else {
            deltas.collect_for(lo, hi, s.snapshot)
        };
        let relevant: RelevantDeltas<'_> = {
            let mut m: RelevantDeltas<'_> = BTreeMap::new();
            for e in redo.iter().filter(|e| e.ts <= s.snapshot) {
                m.entry(e.ordinal).or_default().0.push(e);
            }
            for e in undo.iter().filter(|e| e.ts > s.snapshot) {
                m.entry(e.ordinal).or_default().1.push(e);
            }
            m
        };
        // No visible change to the columns read: base data (and its statistics and
        // skip cache) answer as they are.
        let unchanged = patches
            .as_ref()
            .is_some_and(|p| p.iter().all(|c| c.is_empty()));
        let full_group = lo == start && hi == end;
        if unchanged && !s.predicates.is_empty() {
            if base.stats_exclude(schema, rg, s.predicates) {
                counters
                    .groups_skipped_by_stats
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            if self.skip_cache.known_empty(rg, s.conjunction) {
                counters
                    .groups_skipped_by_cache
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
        }
        counters.groups_read.fetch_add(1, Ordering::Relaxed);

        if unchanged {
            // Lazy materialisation: predicate columns first.
            if s.predicates.is_empty() {
                let cols =
                    base.read_columns(schema, &proj_ids, rg, lo, hi, None, Some(&self.cache))?;
                return Ok(Some(OrdinalBatch {
                    batch: make_batch(&s.out_schema, cols, (hi - lo) as usize)?,
                    ordinals: (lo..hi).collect(),
                }));
            }
            let pcols =
                base.read_columns(schema, &pred_unique, rg, lo, hi, None, Some(&self.cache))?;
            let mask = evaluate(schema, s.predicates, &pred_unique, &pcols)?;
            let n = mask.true_count();
            if n == 0 {
                if full_group {
                    self.skip_cache.record(rg, base.num_groups(), s.conjunction);
                }
                return Ok(None);
            }
            let ordinals: Vec<u32> = (0..mask.len())
                .filter(|&i| mask.value(i))
                .map(|i| lo + i as u32)
                .collect();
            let need: Vec<ColumnId> = proj_ids
                .iter()
                .copied()
                .filter(|id| !pred_unique.contains(id))
                .collect();
            let rest = if need.is_empty() {
                vec![]
            } else {
                base.read_columns(schema, &need, rg, lo, hi, Some(&mask), Some(&self.cache))?
            };
            let mut cols = Vec::with_capacity(proj_ids.len());
            for id in &proj_ids {
                if let Some(p) = pred_unique.iter().position(|x| x == id) {
                    cols.push(filter(pcols[p].as_ref(), &mask)?);
                } else {
                    let p = need.iter().position(|x| x == id).unwrap_or(0);
                    cols.push(rest[p].clone());
                }
            }
            return Ok(Some(OrdinalBatch {
                batch: make_batch(&s.out_schema, cols, n)?,
                ordinals,
            }));
        }

        // Eager path: read everything needed, apply deltas (column-wise when they are
        // all updates), then filter.
        let cols = base.read_columns(schema, &ids, rg, lo, hi, None, Some(&self.cache))?;
        let (cols, visible) = match patches {
            Some(p) => (apply_patches(schema, &ids, cols, p)?, None),
            None => {
                let (cols, visible) = apply_deltas(schema, &ids, cols, lo, &relevant)?;
                (cols, Some(visible))
            }
        };
        let pos_of = |id: &ColumnId| ids.iter().position(|x| x == id).unwrap_or(0);
        let pcols: Vec<ArrayRef> = pred_unique
            .iter()
            .map(|id| cols[pos_of(id)].clone())
            .collect();
        let mut mask = match (visible, s.predicates.is_empty()) {
            (None, true) => {
                // Every row is visible and wanted.
                let mut cols = cols;
                cols.truncate(proj_ids.len());
                return Ok(Some(OrdinalBatch {
                    batch: make_batch(&s.out_schema, cols, (hi - lo) as usize)?,
                    ordinals: (lo..hi).collect(),
                }));
            }
            (Some(visible), true) => visible,
            (None, false) => evaluate(schema, s.predicates, &pred_unique, &pcols)?,
            (Some(visible), false) => arrow::compute::and(
                &visible,
                &evaluate(schema, s.predicates, &pred_unique, &pcols)?,
            )?,
        };
        if mask.null_count() > 0 {
            mask = arrow::compute::prep_null_mask_filter(&mask);
        }
        let n = mask.true_count();
        if n == 0 {
            return Ok(None);
        }
        let ordinals: Vec<u32> = (0..mask.len())
            .filter(|&i| mask.value(i))
            .map(|i| lo + i as u32)
            .collect();
        let out = proj_ids
            .iter()
            .map(|id| filter(cols[pos_of(id)].as_ref(), &mask).map_err(TabletError::from))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(OrdinalBatch {
            batch: make_batch(&s.out_schema, out, n)?,
            ordinals,
        }))
    }
}

/// Builds a batch (which may have no columns) with `rows` rows.
pub fn make_batch(
    schema: &arrow::datatypes::SchemaRef,
    cols: Vec<ArrayRef>,
    rows: usize,
) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

/// Evaluates a conjunction over columns `cols` (holding column ids `ids`).
fn evaluate(
    schema: &Schema,
    preds: &[(usize, ColumnPredicate)],
    ids: &[ColumnId],
    cols: &[ArrayRef],
) -> Result<BooleanArray> {
    let mut acc: Option<BooleanArray> = None;
    for (ci, p) in preds {
        let c = schema.column(*ci);
        let pos = ids.iter().position(|x| *x == c.id).unwrap_or(0);
        let r = p.evaluate(cols[pos].as_ref(), &c.data_type)?;
        acc = Some(match acc {
            None => r,
            Some(a) => arrow::compute::and(&a, &r)?,
        });
        if acc.as_ref().is_some_and(|a| a.true_count() == 0) {
            break;
        }
    }
    Ok(acc.unwrap_or_else(|| BooleanArray::from(vec![true; cols.first().map_or(0, |c| c.len())])))
}

#[cfg(test)]
mod row_status_tests {
    use super::*;
    use crate::delta::write_delta_file;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The answer of [`Deltas::row_status`] from every change, copied and replayed
    /// in `collect`'s order.
    fn replayed(d: &Deltas, ordinal: u32) -> (bool, HybridTime) {
        let (redo, undo) = d.collect(ordinal, ordinal + 1);
        let mut live = true;
        for e in &redo {
            match e.change {
                RowChange::Delete => live = false,
                RowChange::Reinsert(_) => live = true,
                RowChange::Update(_) => {}
            }
        }
        let last = redo.iter().chain(&undo).map(|e| e.ts).max();
        (live, last.unwrap_or(HybridTime::MIN))
    }

    fn change(rng: &mut StdRng) -> RowChange {
        match rng.random_range(0..6) {
            0 => RowChange::Delete,
            1 => RowChange::Reinsert(vec![(1, Value::Int64(rng.random()))]),
            _ => RowChange::Update(vec![(1, Value::Int64(rng.random()))]),
        }
    }

    fn file(dir: &Path, name: &str, mut entries: Vec<DeltaEntry>) -> Arc<DeltaFile> {
        entries.sort_by_key(|e| (e.ordinal, e.ts));
        let path = dir.join(name);
        let (crc, _) = write_delta_file(&path, &entries).unwrap();
        Arc::new(DeltaFile::open(&path, name, crc).unwrap())
    }

    #[test]
    fn row_status_matches_replaying_every_change() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..200u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            // Timestamps drawn from a small range, so ties across sources happen.
            let entries = |n: usize, rng: &mut StdRng| -> Vec<DeltaEntry> {
                (0..n)
                    .map(|_| DeltaEntry {
                        ordinal: rng.random_range(0..3),
                        ts: HybridTime(rng.random_range(1..12)),
                        change: change(rng),
                    })
                    .collect()
            };
            let redo_files = (0..rng.random_range(0..3))
                .map(|i| {
                    let n = rng.random_range(0..6);
                    file(dir.path(), &format!("r{seed}-{i}"), entries(n, &mut rng))
                })
                .collect();
            let undo = entries(rng.random_range(0..4), &mut rng);
            let undo_files = vec![file(dir.path(), &format!("u{seed}"), undo)];
            let store = |rng: &mut StdRng| {
                let d = DeltaMemStore::new();
                for e in entries(rng.random_range(0..8), rng) {
                    d.add(e.ordinal, e.ts, e.change);
                }
                Arc::new(d)
            };
            let frozen_dms = rng.random_bool(0.5).then(|| store(&mut rng));
            let dms = store(&mut rng);
            let d = Deltas {
                redo_files,
                undo_files,
                frozen_dms,
                dms,
            };
            for ordinal in 0..4 {
                assert_eq!(
                    d.row_status(ordinal),
                    replayed(&d, ordinal),
                    "seed {seed} ordinal {ordinal}"
                );
            }
        }
    }
}
