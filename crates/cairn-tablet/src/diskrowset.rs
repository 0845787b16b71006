//! The DiskRowSet: immutable columnar base data plus mutable delta stores (Kudu §4.3-4.4).
//!
//! A DiskRowSet covers a contiguous, sorted run of keys. Its parts:
//!
//! - **Base data**: one or more Parquet files (`base-N.parquet`). The first holds every
//!   column; a major delta compaction that rewrites some columns adds a file holding just
//!   those, which then shadows the older copies. Parquet columns are named `c<id>` after
//!   stable column ids, so renames and drops never touch them; columns added later read
//!   as their default. Every file has the same row groups, and pages of at most
//!   [`BLOCK_ROWS`] rows with page indexes, so a row selection decodes only the pages it
//!   needs.
//! - **Key index** ([`KeyIndex`]): sorted keys + bloom filter; row ordinal = position.
//! - **Deltas** ([`Deltas`]): REDO files and the DeltaMemStore for later changes, UNDO
//!   files for history.
//! - **Predicate skip cache** ([`SkipCache`]): per row group, conjunctions known to match
//!   no base row (HRDBMS §III), consulted by implication.
//!
//! Scans work per row group: the key range becomes an ordinal range; row groups without
//! relevant deltas are skipped when min/max statistics or the skip cache rule them out,
//! and otherwise read *lazily* — predicate columns first, the other columns only for
//! matching rows. Row groups with relevant deltas are read eagerly, deltas applied, and
//! the predicates evaluated on the result.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef, BooleanArray, new_null_array};
use arrow::compute::{filter, interleave};
use arrow::datatypes::{Field, Schema as ArrowSchema};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use bytes::Bytes;
use cairn_common::predicate::conjunction_implies;
use cairn_common::types::{array_from_values, array_of_repeated};
use cairn_common::{
    ColumnId, ColumnPredicate, ColumnStatistics, DataType, HybridTime, Schema, Value,
};
use parking_lot::{Mutex, RwLock};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};

use crate::cache::{BLOCK_ROWS, BlockCache};
use crate::delta::{DeltaEntry, DeltaFile, DeltaMemStore};
use crate::error::{Result, TabletError};
use crate::history::{Row, apply_change};
use crate::keyindex::KeyIndex;
use crate::metadata::{BaseFileMeta, FileMeta, RowSetMeta};
use crate::ops::RowChange;

static NEXT_FILE_UID: AtomicU64 = AtomicU64::new(1);

/// The Parquet column name of a column id.
pub fn parquet_column_name(id: ColumnId) -> String {
    format!("c{id}")
}

/// Per-row-group statistics of one column of a base file.
#[derive(Debug)]
struct ColumnStats {
    mins: ArrayRef,
    maxs: ArrayRef,
    null_counts: Vec<u64>,
}

/// One open Parquet base file.
#[derive(Debug)]
pub struct BaseFile {
    uid: u64,
    /// File name within the rowset directory.
    pub meta: BaseFileMeta,
    reader_meta: ArrowReaderMetadata,
    data: Bytes,
    stats: Vec<Option<ColumnStats>>,
}

impl BaseFile {
    fn open(path: &Path, meta: BaseFileMeta) -> Result<BaseFile> {
        let f = File::open(path).map_err(|e| TabletError::io(path, e))?;
        // SAFETY: base files are immutable once written; Cairn never modifies them in place.
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| TabletError::io(path, e))?;
        if crc32c::crc32c(&map) != meta.crc {
            return Err(TabletError::corruption(
                path,
                "base data checksum does not match the tablet metadata",
            ));
        }
        let data = Bytes::from_owner(map);
        let reader_meta = ArrowReaderMetadata::load(
            &data,
            ArrowReaderOptions::new()
                .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional),
        )
        .map_err(|e| TabletError::corruption(path, format!("unreadable Parquet footer: {e}")))?;
        let arrow_schema = reader_meta.schema().clone();
        let pq = reader_meta.parquet_schema();
        let groups = reader_meta.metadata().row_groups();
        let stats = meta
            .column_ids
            .iter()
            .map(|id| {
                let conv =
                    StatisticsConverter::try_new(&parquet_column_name(*id), &arrow_schema, pq)
                        .ok()?;
                Some(ColumnStats {
                    mins: conv.row_group_mins(groups.iter()).ok()?,
                    maxs: conv.row_group_maxes(groups.iter()).ok()?,
                    null_counts: conv
                        .row_group_null_counts(groups.iter())
                        .ok()?
                        .iter()
                        .map(|c| c.unwrap_or(u64::MAX))
                        .collect(),
                })
            })
            .collect();
        Ok(BaseFile {
            uid: NEXT_FILE_UID.fetch_add(1, Ordering::Relaxed),
            meta,
            reader_meta,
            data,
            stats,
        })
    }

    /// Reads columns at file positions `cols` of row group `rg`, rows selected by `sel`
    /// (relative to the row group), as one array per column.
    fn read(&self, cols: &[usize], rg: usize, sel: Option<RowSelection>) -> Result<Vec<ArrayRef>> {
        if cols.is_empty() {
            return Ok(vec![]);
        }
        let err = |e: parquet::errors::ParquetError| TabletError::parquet(&self.meta.name, e);
        let rows = self.reader_meta.metadata().row_group(rg).num_rows() as usize;
        let mask = ProjectionMask::roots(self.reader_meta.parquet_schema(), cols.iter().copied());
        let mut b = ParquetRecordBatchReaderBuilder::new_with_metadata(
            self.data.clone(),
            self.reader_meta.clone(),
        )
        .with_projection(mask)
        .with_row_groups(vec![rg])
        .with_batch_size(rows.max(1));
        if let Some(s) = sel {
            b = b.with_row_selection(s);
        }
        let reader = b.build().map_err(err)?;
        let batches: Vec<RecordBatch> = reader.collect::<std::result::Result<_, _>>()?;
        // The projection mask keeps file order; map back to the order asked for.
        let mut sorted: Vec<usize> = cols.to_vec();
        sorted.sort_unstable();
        let schema = batches.first().map(|b| b.schema());
        let out = cols
            .iter()
            .map(|c| {
                let pos = sorted.iter().position(|x| x == c).unwrap_or(0);
                match &schema {
                    None => Ok(new_null_array(
                        self.reader_meta.schema().field(*c).data_type(),
                        0,
                    )),
                    Some(_) if batches.len() == 1 => Ok(batches[0].column(pos).clone()),
                    Some(_) => {
                        let parts: Vec<&dyn Array> =
                            batches.iter().map(|b| b.column(pos).as_ref()).collect();
                        Ok(arrow::compute::concat(&parts)?)
                    }
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(out)
    }
}

/// Base data: the Parquet files and which holds each column.
#[derive(Debug)]
pub struct BaseData {
    /// The files, oldest first.
    pub files: Vec<Arc<BaseFile>>,
    /// Column id → (file index, column position in that file); newest file wins.
    locations: HashMap<ColumnId, (usize, usize)>,
    /// First ordinal of each row group, plus the total row count at the end.
    group_starts: Vec<u32>,
}

impl BaseData {
    fn new(files: Vec<Arc<BaseFile>>) -> BaseData {
        let mut locations = HashMap::new();
        for (fi, f) in files.iter().enumerate() {
            for (ci, id) in f.meta.column_ids.iter().enumerate() {
                locations.insert(*id, (fi, ci));
            }
        }
        let mut group_starts = vec![0u32];
        if let Some(f) = files.first() {
            for g in f.reader_meta.metadata().row_groups() {
                let last = *group_starts.last().unwrap_or(&0);
                group_starts.push(last + g.num_rows() as u32);
            }
        }
        BaseData {
            files,
            locations,
            group_starts,
        }
    }

    fn num_groups(&self) -> usize {
        self.group_starts.len() - 1
    }

    /// Ordinal range `[start, end)` of row group `rg`.
    pub fn group_range(&self, rg: usize) -> (u32, u32) {
        (self.group_starts[rg], self.group_starts[rg + 1])
    }

    /// Every row of row group `rg` for the given columns (defaults for absent ones).
    pub fn read_all(&self, schema: &Schema, ids: &[ColumnId], rg: usize) -> Result<Vec<ArrayRef>> {
        let (a, b) = self.group_range(rg);
        self.read_columns(schema, ids, rg, a, b, None, None)
    }

    /// Reads the given columns (by id) of row group `rg`, rows `[a, b)` (absolute
    /// ordinals) further restricted by `mask` (over `[a, b)`), filling absent columns with
    /// their defaults.
    #[allow(clippy::too_many_arguments)]
    fn read_columns(
        &self,
        schema: &Schema,
        ids: &[ColumnId],
        rg: usize,
        a: u32,
        b: u32,
        mask: Option<&BooleanArray>,
        cache: Option<&BlockCache>,
    ) -> Result<Vec<ArrayRef>> {
        let start = self.group_starts[rg];
        let end = self.group_starts[rg + 1];
        // A short range (a point lookup, a limited scan's window) comes from the block
        // cache: decoding its pages again for every lookup is the cost of a
        // key-value read.
        let first_block = ((a - start) as usize) / BLOCK_ROWS;
        let cached = cache.filter(|_| b > a && b - a <= CACHED_READ_MAX_ROWS);
        // No row selection: the whole row group, or a read from cached blocks.
        let selection = if cached.is_some() || (a == start && b == end && mask.is_none()) {
            None
        } else {
            let mut sel = vec![];
            if a > start {
                sel.push(RowSelector::skip((a - start) as usize));
            }
            match mask {
                None => sel.push(RowSelector::select((b - a) as usize)),
                Some(m) => sel.extend(
                    RowSelection::from_filters(std::slice::from_ref(m))
                        .iter()
                        .copied(),
                ),
            }
            if end > b {
                sel.push(RowSelector::skip((end - b) as usize));
            }
            Some(RowSelection::from(sel))
        };
        let out_len = match mask {
            Some(m) => m.true_count(),
            None => (b - a) as usize,
        };
        // Group the wanted columns by file.
        let mut per_file: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new(); // file -> (out pos, file col)
        let mut out: Vec<Option<ArrayRef>> = vec![None; ids.len()];
        for (pos, id) in ids.iter().enumerate() {
            match self.locations.get(id) {
                Some(&(fi, ci)) => per_file.entry(fi).or_default().push((pos, ci)),
                None => {
                    let col = schema
                        .index_of_id(*id)
                        .map(|i| schema.column(i))
                        .ok_or_else(|| {
                            TabletError::InvalidRequest(format!(
                                "column id {id} is not in the schema"
                            ))
                        })?;
                    out[pos] = Some(array_of_repeated(
                        &col.data_type,
                        &col.read_default(),
                        out_len,
                    )?);
                }
            }
        }
        for (fi, cols) in per_file {
            if let Some(cache) = cached {
                let last_block = ((b - 1 - start) as usize) / BLOCK_ROWS;
                let blocks = (first_block..=last_block)
                    .map(|k| self.cached_block(cache, fi, rg, k))
                    .collect::<Result<Vec<_>>>()?;
                for (pos, ci) in cols {
                    let mut pieces = Vec::with_capacity(blocks.len());
                    for (k, block) in (first_block..).zip(&blocks) {
                        let block_start = start as usize + k * BLOCK_ROWS;
                        let from = (a as usize).max(block_start) - block_start;
                        let to = (b as usize).min(block_start + block.num_rows()) - block_start;
                        pieces.push(block.column(ci).slice(from, to - from));
                    }
                    let arr = match pieces.as_slice() {
                        [one] => one.clone(),
                        _ => {
                            let refs: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
                            arrow::compute::concat(&refs)?
                        }
                    };
                    out[pos] = Some(match mask {
                        Some(m) => filter(arr.as_ref(), m)?,
                        None => arr,
                    });
                }
                continue;
            }
            let file_cols: Vec<usize> = cols.iter().map(|(_, c)| *c).collect();
            let arrays = self.files[fi].read(&file_cols, rg, selection.clone())?;
            for ((pos, _), arr) in cols.into_iter().zip(arrays) {
                out[pos] = Some(arr);
            }
        }
        Ok(out
            .into_iter()
            .map(|a| a.unwrap_or_else(|| new_null_array(&arrow::datatypes::DataType::Null, 0)))
            .collect())
    }

    /// Block `block` ([`BLOCK_ROWS`] rows) of row group `rg` of file `fi`, every
    /// column of the file decoded: from the cache, or read and cached.
    fn cached_block(
        &self,
        cache: &BlockCache,
        fi: usize,
        rg: usize,
        block: usize,
    ) -> Result<Arc<RecordBatch>> {
        let file = &self.files[fi];
        let key = (rg as u32) << 16 | block as u32;
        if let Some(b) = cache.get(file.uid, key) {
            return Ok(b);
        }
        let rows = (self.group_starts[rg + 1] - self.group_starts[rg]) as usize;
        let lo = block * BLOCK_ROWS;
        let hi = (lo + BLOCK_ROWS).min(rows);
        let mut sel = vec![];
        if lo > 0 {
            sel.push(RowSelector::skip(lo));
        }
        sel.push(RowSelector::select(hi - lo));
        if rows > hi {
            sel.push(RowSelector::skip(rows - hi));
        }
        let cols: Vec<usize> = (0..file.meta.column_ids.len()).collect();
        let arrays = file.read(&cols, rg, Some(RowSelection::from(sel)))?;
        let fields: Vec<Field> = arrays
            .iter()
            .enumerate()
            .map(|(i, a)| Field::new(format!("f{i}"), a.data_type().clone(), true))
            .collect();
        let b = Arc::new(RecordBatch::try_new(
            Arc::new(ArrowSchema::new(fields)),
            arrays,
        )?);
        cache.insert(file.uid, key, b.clone());
        Ok(b)
    }

    /// Planner statistics of each column of `schema` (in schema order) over this base
    /// data, from the Parquet row-group statistics. A column the files do not hold
    /// (added later) has unknown bounds.
    pub fn column_statistics(&self, schema: &Schema) -> Vec<ColumnStatistics> {
        schema
            .columns()
            .iter()
            .map(|col| {
                let mut out = ColumnStatistics {
                    column: col.name.clone(),
                    ..Default::default()
                };
                let Some(&(fi, pos)) = self.locations.get(&col.id) else {
                    return out;
                };
                let file = &self.files[fi];
                for g in file.reader_meta.metadata().row_groups() {
                    if let Some(c) = g.columns().get(pos) {
                        out.bytes += c.uncompressed_size().max(0) as u64;
                    }
                }
                let Some(st) = &file.stats[pos] else {
                    return out;
                };
                let mut seen = ColumnStatistics {
                    column: col.name.clone(),
                    ..Default::default()
                };
                for rg in 0..self.num_groups() {
                    let nulls = st.null_counts.get(rg).copied().unwrap_or(u64::MAX);
                    if nulls != u64::MAX {
                        out.null_count += nulls;
                    }
                    let bound = |a: &ArrayRef| {
                        Value::from_array(a.as_ref(), rg, &col.data_type)
                            .ok()
                            .filter(|v| !v.is_null())
                    };
                    let (Some(min), Some(max)) = (bound(&st.mins), bound(&st.maxs)) else {
                        let all_null =
                            nulls == (self.group_starts[rg + 1] - self.group_starts[rg]) as u64;
                        if all_null {
                            continue;
                        }
                        // A group without bounds: the column's are unknown.
                        return out;
                    };
                    let group = ColumnStatistics {
                        column: col.name.clone(),
                        min: Some(min),
                        max: Some(max),
                        ..Default::default()
                    };
                    if seen.min.is_none() {
                        seen = group;
                    } else {
                        seen.merge(&group);
                    }
                }
                out.min = seen.min;
                out.max = seen.max;
                out
            })
            .collect()
    }

    /// Whether min/max statistics prove no base row of `rg` matches `preds`.
    fn stats_exclude(
        &self,
        schema: &Schema,
        rg: usize,
        preds: &[(usize, ColumnPredicate)],
    ) -> bool {
        preds.iter().any(|(ci, p)| {
            let col = schema.column(*ci);
            match self.locations.get(&col.id) {
                None => !p.matches_value(&col.read_default()),
                Some(&(fi, pos)) => {
                    let Some(st) = &self.files[fi].stats[pos] else {
                        return false;
                    };
                    let (Ok(min), Ok(max)) = (
                        Value::from_array(st.mins.as_ref(), rg, &col.data_type),
                        Value::from_array(st.maxs.as_ref(), rg, &col.data_type),
                    ) else {
                        return false;
                    };
                    let nulls = st.null_counts.get(rg).copied().unwrap_or(u64::MAX);
                    let rows = (self.group_starts[rg + 1] - self.group_starts[rg]) as u64;
                    if nulls == rows && nulls != u64::MAX {
                        return !p.matches_value(&Value::Null);
                    }
                    !p.could_match_range(&min, &max, nulls > 0)
                }
            }
        })
    }
}

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

    /// Number of REDO deltas on disk and in memory.
    pub fn redo_count(&self) -> usize {
        self.redo_files.iter().map(|f| f.len()).sum::<usize>()
            + self.frozen_dms.as_ref().map_or(0, |d| d.len())
            + self.dms.len()
    }
}

/// Predicate-based data skipping (HRDBMS §III): per row group, conjunctions known to
/// match no base row. Base data is immutable, so entries stay true until the base is
/// rewritten (then the cache is cleared).
#[derive(Debug, Default)]
pub struct SkipCache {
    groups: RwLock<Vec<Vec<Vec<ColumnPredicate>>>>,
    dirty: AtomicBool,
}

/// Most conjunctions remembered per row group.
const SKIP_CACHE_PER_GROUP: usize = 16;

/// Longest IN list a remembered conjunction may hold.
const SKIP_CACHE_MAX_IN_LIST: usize = 64;

impl SkipCache {
    fn with_groups(entries: Vec<Vec<Vec<ColumnPredicate>>>) -> Self {
        SkipCache {
            groups: RwLock::new(entries),
            dirty: AtomicBool::new(false),
        }
    }
    /// Whether a remembered conjunction proves `preds` matches nothing in `rg`.
    pub fn known_empty(&self, rg: usize, preds: &[ColumnPredicate]) -> bool {
        let g = self.groups.read();
        g.get(rg)
            .is_some_and(|cached| cached.iter().any(|c| conjunction_implies(preds, c)))
    }
    /// Remembers that `preds` matched nothing in `rg`. Conjunctions with long IN
    /// lists (a join's key set, different in every query) are not remembered: they
    /// rarely recur, and implication between IN lists costs the product of their
    /// lengths on every later scan.
    pub fn record(&self, rg: usize, num_groups: usize, preds: &[ColumnPredicate]) {
        if preds.iter().any(|p| {
            matches!(&p.op, cairn_common::PredicateOp::InList(vs) if vs.len() > SKIP_CACHE_MAX_IN_LIST)
        }) {
            return;
        }
        let mut g = self.groups.write();
        if g.len() < num_groups {
            g.resize(num_groups, vec![]);
        }
        let list = &mut g[rg];
        if list.iter().any(|c| conjunction_implies(preds, c)) {
            return;
        }
        list.retain(|c| !conjunction_implies(c, preds));
        if list.len() >= SKIP_CACHE_PER_GROUP {
            list.remove(0);
        }
        list.push(preds.to_vec());
        self.dirty.store(true, Ordering::Relaxed);
    }
    /// Number of remembered conjunctions.
    pub fn len(&self) -> usize {
        self.groups.read().iter().map(|g| g.len()).sum()
    }
    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The entries, for persisting; clears the dirty flag.
    pub fn snapshot_for_persist(&self) -> Option<Vec<Vec<Vec<ColumnPredicate>>>> {
        if self.dirty.swap(false, Ordering::Relaxed) {
            Some(self.groups.read().clone())
        } else {
            None
        }
    }
    /// Forgets everything (after the base data changes).
    pub fn clear(&self) {
        self.groups.write().clear();
        self.dirty.store(true, Ordering::Relaxed);
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
                let entries = serde_json::from_slice(&bytes).map_err(|e| {
                    TabletError::corruption(&p, format!("unreadable skip cache: {e}"))
                })?;
                SkipCache::with_groups(entries)
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
        let (redo, _) = self.deltas.read().collect(ordinal, ordinal + 1);
        let mut live = true;
        for e in redo {
            match e.change {
                RowChange::Delete => live = false,
                RowChange::Reinsert(_) => live = true,
                RowChange::Update(_) => {}
            }
        }
        live
    }

    /// Reads the base row at `ordinal` (through the block cache).
    pub fn base_row(&self, schema: &Schema, ordinal: u32) -> Result<Row> {
        let base = self.base();
        let rg = base.group_starts.partition_point(|s| *s <= ordinal) - 1;
        let rel = (ordinal - base.group_starts[rg]) as usize;
        let block = rel / BLOCK_ROWS;
        let mut row: Row = schema.columns().iter().map(|c| c.read_default()).collect();
        for (fi, file) in base.files.iter().enumerate() {
            let batch = base.cached_block(&self.cache, fi, rg, block)?;
            let within = rel - block * BLOCK_ROWS;
            for (ci, id) in file.meta.column_ids.iter().enumerate() {
                if let Some(i) = schema.index_of_id(*id)
                    && base
                        .locations
                        .get(id)
                        .is_some_and(|l| std::ptr::eq(base.files[l.0].as_ref(), file.as_ref()))
                {
                    row[i] = Value::from_array(
                        batch.column(ci).as_ref(),
                        within,
                        &schema.column(i).data_type,
                    )?;
                }
            }
        }
        Ok(row)
    }

    /// The full row at `ordinal` as of `snap` (`None`: not visible).
    pub fn row_at(&self, schema: &Schema, ordinal: u32, snap: HybridTime) -> Result<Option<Row>> {
        let (redo, undo) = self.deltas.read().collect_for(ordinal, ordinal + 1, snap);
        let mut state = Some(self.base_row(schema, ordinal)?);
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
        let (redo, undo) = deltas.collect_for(lo, hi, s.snapshot);
        let relevant: BTreeMap<u32, (Vec<&DeltaEntry>, Vec<&DeltaEntry>)> = {
            let mut m: BTreeMap<u32, (Vec<&DeltaEntry>, Vec<&DeltaEntry>)> = BTreeMap::new();
            for e in redo.iter().filter(|e| e.ts <= s.snapshot) {
                m.entry(e.ordinal).or_default().0.push(e);
            }
            for e in undo.iter().filter(|e| e.ts > s.snapshot) {
                m.entry(e.ordinal).or_default().1.push(e);
            }
            m
        };
        let full_group = lo == start && hi == end;
        if relevant.is_empty() && !s.predicates.is_empty() {
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
        let proj_ids: Vec<ColumnId> = s.projection.iter().map(|&i| schema.column(i).id).collect();
        let pred_ids: Vec<ColumnId> = s
            .predicates
            .iter()
            .map(|(i, _)| schema.column(*i).id)
            .collect();
        let mut pred_unique: Vec<ColumnId> = pred_ids.clone();
        pred_unique.sort_unstable();
        pred_unique.dedup();

        if relevant.is_empty() {
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

        // Eager path: read everything needed, apply deltas, then filter.
        let mut ids: Vec<ColumnId> = proj_ids.clone();
        for id in &pred_unique {
            if !ids.contains(id) {
                ids.push(*id);
            }
        }
        let cols = base.read_columns(schema, &ids, rg, lo, hi, None, Some(&self.cache))?;
        let (cols, visible) = apply_deltas(schema, &ids, cols, lo, &relevant)?;
        let pos_of = |id: &ColumnId| ids.iter().position(|x| x == id).unwrap_or(0);
        let pcols: Vec<ArrayRef> = pred_unique
            .iter()
            .map(|id| cols[pos_of(id)].clone())
            .collect();
        let mut mask = if s.predicates.is_empty() {
            visible
        } else {
            arrow::compute::and(
                &visible,
                &evaluate(schema, s.predicates, &pred_unique, &pcols)?,
            )?
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

/// Largest row range a scan reads through the block cache (at most two blocks).
const CACHED_READ_MAX_ROWS: u32 = BLOCK_ROWS as u32;

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

type RelevantDeltas<'a> = BTreeMap<u32, (Vec<&'a DeltaEntry>, Vec<&'a DeltaEntry>)>;

/// Applies relevant deltas (REDOs ascending, UNDOs descending) to the rows they touch.
/// Returns the new columns and a visibility mask.
fn apply_deltas(
    schema: &Schema,
    ids: &[ColumnId],
    cols: Vec<ArrayRef>,
    first_ordinal: u32,
    relevant: &RelevantDeltas<'_>,
) -> Result<(Vec<ArrayRef>, BooleanArray)> {
    let n = cols.first().map_or(0, |c| c.len());
    let types: Vec<DataType> = ids
        .iter()
        .map(|id| {
            schema
                .index_of_id(*id)
                .map(|i| schema.column(i).data_type.clone())
                .ok_or_else(|| {
                    TabletError::InvalidRequest(format!("column id {id} is not in the schema"))
                })
        })
        .collect::<Result<_>>()?;
    let defaults: Vec<Value> = ids
        .iter()
        .map(|id| {
            schema
                .index_of_id(*id)
                .map(|i| schema.column(i).read_default())
                .unwrap_or(Value::Null)
        })
        .collect();
    let mut visible = vec![true; n];
    // Per column: (row, value) overrides.
    let mut overrides: Vec<Vec<(usize, Value)>> = vec![vec![]; ids.len()];
    for (ord, (redos, undos)) in relevant {
        let row = (*ord - first_ordinal) as usize;
        let mut state: Option<Vec<Value>> = Some(
            cols.iter()
                .zip(&types)
                .map(|(c, t)| Value::from_array(c.as_ref(), row, t))
                .collect::<cairn_common::Result<_>>()?,
        );
        let original = state.clone();
        let mut apply = |change: &RowChange| match change {
            RowChange::Delete => state = None,
            RowChange::Update(cells) => {
                if let Some(s) = &mut state {
                    for (id, v) in cells {
                        if let Some(p) = ids.iter().position(|x| x == id) {
                            s[p] = v.clone();
                        }
                    }
                }
            }
            RowChange::Reinsert(cells) => {
                let mut s = defaults.clone();
                for (id, v) in cells {
                    if let Some(p) = ids.iter().position(|x| x == id) {
                        s[p] = v.clone();
                    }
                }
                state = Some(s);
            }
        };
        for e in undos.iter().rev() {
            apply(&e.change);
        }
        for e in redos {
            apply(&e.change);
        }
        match state {
            None => visible[row] = false,
            Some(s) => {
                let orig = original.unwrap_or_default();
                for (p, v) in s.into_iter().enumerate() {
                    if orig.get(p) != Some(&v) {
                        overrides[p].push((row, v));
                    }
                }
            }
        }
    }
    let mut out = Vec::with_capacity(cols.len());
    for ((col, t), ov) in cols.into_iter().zip(&types).zip(overrides) {
        if ov.is_empty() {
            out.push(col);
            continue;
        }
        let patch = array_from_values(t, ov.iter().map(|(_, v)| v))?;
        let mut idx: Vec<(usize, usize)> = (0..n).map(|i| (0, i)).collect();
        for (j, (row, _)) in ov.iter().enumerate() {
            idx[*row] = (1, j);
        }
        out.push(interleave(&[col.as_ref(), patch.as_ref()], &idx)?);
    }
    Ok((out, BooleanArray::from(visible)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::Value;

    #[test]
    fn skip_cache_forgets_nothing_it_can_use_and_skips_long_in_lists() {
        let c = SkipCache::default();
        let short = vec![ColumnPredicate::in_list(
            "k",
            (0..3).map(Value::Int64).collect(),
        )];
        c.record(0, 2, &short);
        assert_eq!(c.len(), 1);
        assert!(c.known_empty(0, &[ColumnPredicate::eq("k", Value::Int64(1))]));
        assert!(!c.known_empty(1, &short));
        let long = vec![ColumnPredicate::in_list(
            "k",
            (0..SKIP_CACHE_MAX_IN_LIST as i64 + 1)
                .map(Value::Int64)
                .collect(),
        )];
        c.record(1, 2, &long);
        assert_eq!(
            c.len(),
            1,
            "a conjunction with a long IN list is not remembered"
        );
    }
}
