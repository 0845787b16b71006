//! A DiskRowSet's base data (Kudu §4.3): one or more immutable Parquet files.
//!
//! The first file holds every column; a major delta compaction that rewrites some
//! columns adds a file holding just those, which then shadows the older copies. Parquet
//! columns are named `c<id>` after stable column ids, so renames and drops never touch
//! them; columns added later read as their default. Every file has the same row groups,
//! and pages of at most [`BLOCK_ROWS`] rows with page indexes, so a row selection decodes
//! only the pages it needs. Per-row-group min/max statistics let scans skip groups.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef, BooleanArray, new_null_array};
use arrow::compute::filter;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use cairn_common::types::array_of_repeated;
use cairn_common::{ColumnId, ColumnPredicate, ColumnStatistics, Schema, Value};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};

use crate::cache::{BLOCK_ROWS, BlockCache, PageKey};
use crate::error::{Result, TabletError};
use crate::metadata::BaseFileMeta;

/// Largest row range a scan reads through the block cache (at most two pages of
/// each column).
pub(crate) const CACHED_READ_MAX_ROWS: u32 = BLOCK_ROWS as u32;

static NEXT_FILE_UID: AtomicU64 = AtomicU64::new(1);

/// The Parquet column name of a column id.
pub fn parquet_column_name(id: ColumnId) -> String {
    format!("c{id}")
}

/// Per-row-group statistics of one column of a base file.
#[derive(Debug)]
pub(crate) struct ColumnStats {
    pub(crate) mins: ArrayRef,
    pub(crate) maxs: ArrayRef,
    pub(crate) null_counts: Vec<u64>,
}

/// One open Parquet base file.
#[derive(Debug)]
pub struct BaseFile {
    pub(crate) uid: u64,
    /// File name within the rowset directory.
    pub meta: BaseFileMeta,
    pub(crate) reader_meta: ArrowReaderMetadata,
    pub(crate) data: Bytes,
    pub(crate) stats: Vec<Option<ColumnStats>>,
    /// `[row group][column position]`: the first row (within the group) of each data
    /// page, from the Parquet offset index; without one, a page every
    /// [`BLOCK_ROWS`] rows (the reader then decodes from the page that holds the
    /// first wanted row).
    pub(crate) page_starts: Vec<Vec<Vec<u32>>>,
}

impl BaseFile {
    pub(crate) fn open(path: &Path, meta: BaseFileMeta) -> Result<BaseFile> {
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
        let page_starts = page_starts(&reader_meta, meta.column_ids.len());
        Ok(BaseFile {
            uid: NEXT_FILE_UID.fetch_add(1, Ordering::Relaxed),
            meta,
            reader_meta,
            data,
            stats,
            page_starts,
        })
    }

    /// Rows of row group `rg`.
    fn group_rows(&self, rg: usize) -> u32 {
        self.reader_meta.metadata().row_group(rg).num_rows() as u32
    }

    /// The page of column `col` of row group `rg` that holds row `row` (within the
    /// group).
    pub(crate) fn page_of(&self, rg: usize, col: usize, row: u32) -> usize {
        let starts = &self.page_starts[rg][col];
        starts.partition_point(|s| *s <= row).saturating_sub(1)
    }

    /// Rows `[first, end)` (within row group `rg`) of page `page` of column `col`.
    pub(crate) fn page_rows(&self, rg: usize, col: usize, page: usize) -> (u32, u32) {
        let starts = &self.page_starts[rg][col];
        let end = starts
            .get(page + 1)
            .copied()
            .unwrap_or_else(|| self.group_rows(rg));
        (starts[page], end)
    }

    /// Reads columns at file positions `cols` of row group `rg`, rows selected by `sel`
    /// (relative to the row group), as one array per column.
    pub(crate) fn read(
        &self,
        cols: &[usize],
        rg: usize,
        sel: Option<RowSelection>,
    ) -> Result<Vec<ArrayRef>> {
        if cols.is_empty() {
            return Ok(vec![]);
        }
        let err = |e: parquet::errors::ParquetError| TabletError::parquet(&self.meta.name, e);
        // One batch of exactly the selected rows: arrays sized to what was read, and
        // nothing to concatenate.
        let rows = match &sel {
            Some(s) => s.row_count(),
            None => self.reader_meta.metadata().row_group(rg).num_rows() as usize,
        };
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

/// The first row of each data page, `[row group][column]`, from the offset index
/// of a file with `columns` flat columns; a page every [`BLOCK_ROWS`] rows where
/// the index is missing, a column is not one Parquet leaf, or the starts are not
/// strictly increasing from 0 within the group.
fn page_starts(meta: &ArrowReaderMetadata, columns: usize) -> Vec<Vec<Vec<u32>>> {
    let md = meta.metadata();
    let descr = md.file_metadata().schema_descr();
    let flat = descr.num_columns() == columns
        && (0..columns).all(|leaf| descr.get_column_root_idx(leaf) == leaf);
    md.row_groups()
        .iter()
        .enumerate()
        .map(|(rg, g)| {
            let rows = g.num_rows().max(0) as usize;
            let fixed = || {
                (0..rows.max(1))
                    .step_by(BLOCK_ROWS)
                    .map(|r| r as u32)
                    .collect()
            };
            (0..columns)
                .map(|c| {
                    let located = md
                        .offset_index()
                        .filter(|_| flat)
                        .and_then(|ix| ix.get(rg)?.get(c))
                        .map(|o| {
                            o.page_locations()
                                .iter()
                                .map(|p| p.first_row_index.clamp(0, i64::from(u32::MAX)) as u32)
                                .collect::<Vec<u32>>()
                        })
                        .filter(|v| {
                            v.first() == Some(&0)
                                && v.windows(2).all(|w| w[0] < w[1])
                                && v.last().is_some_and(|l| (*l as usize) < rows.max(1))
                        });
                    located.unwrap_or_else(fixed)
                })
                .collect()
        })
        .collect()
}

/// Base data: the Parquet files and which holds each column.
#[derive(Debug)]
pub struct BaseData {
    /// The files, oldest first.
    pub files: Vec<Arc<BaseFile>>,
    /// Column id → (file index, column position in that file); newest file wins.
    pub(crate) locations: HashMap<ColumnId, (usize, usize)>,
    /// First ordinal of each row group, plus the total row count at the end.
    pub(crate) group_starts: Vec<u32>,
}

impl BaseData {
    pub(crate) fn new(files: Vec<Arc<BaseFile>>) -> BaseData {
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

    pub(crate) fn num_groups(&self) -> usize {
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
    pub(crate) fn read_columns(
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
        // A short range (a limited scan's window) comes through the block cache:
        // decoding its pages again for every read is the cost of a key-value read.
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
                let file = &self.files[fi];
                let (lo, hi) = (a - start, b - start);
                // Every page of every wanted column that overlaps [lo, hi).
                let mut wants = vec![];
                for &(_, ci) in &cols {
                    for page in file.page_of(rg, ci, lo)..=file.page_of(rg, ci, hi - 1) {
                        wants.push((ci, page));
                    }
                }
                let mut pages = self.pages(cache, fi, rg, &wants)?.into_iter();
                for (pos, ci) in cols {
                    let mut pieces = vec![];
                    for page in file.page_of(rg, ci, lo)..=file.page_of(rg, ci, hi - 1) {
                        let values = pages.next().ok_or_else(|| {
                            TabletError::corruption(&file.meta.name, "a page read came back short")
                        })?;
                        let (first, end) = file.page_rows(rg, ci, page);
                        let from = lo.max(first);
                        let to = hi.min(end).max(from);
                        pieces.push(values.slice((from - first) as usize, (to - from) as usize));
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

    /// Pages `wants` (column position in file `fi`, page number) of row group `rg`,
    /// decoded, in the order asked for: from the cache, or read and cached. Pages
    /// missed together that cover the same rows (the usual case: pages roll every
    /// [`BLOCK_ROWS`] rows) are decoded by one Parquet read.
    pub(crate) fn pages(
        &self,
        cache: &BlockCache,
        fi: usize,
        rg: usize,
        wants: &[(usize, usize)],
    ) -> Result<Vec<ArrayRef>> {
        let file = &self.files[fi];
        let key = |ci: usize, page: usize| PageKey {
            file: file.uid,
            group: rg as u32,
            column: ci as u32,
            page: page as u32,
        };
        let mut out: Vec<Option<ArrayRef>> = wants
            .iter()
            .map(|&(ci, page)| cache.get(&key(ci, page)))
            .collect();
        // Missed pages grouped by their rows: rows → [(column, page, slot in out)].
        type Missed = Vec<(usize, usize, usize)>;
        let mut missed: BTreeMap<(u32, u32), Missed> = BTreeMap::new();
        for (slot, &(ci, page)) in wants.iter().enumerate() {
            if out[slot].is_none() {
                missed
                    .entry(file.page_rows(rg, ci, page))
                    .or_default()
                    .push((ci, page, slot));
            }
        }
        let rows = file.group_rows(rg);
        for ((first, end), group) in missed {
            let mut sel = vec![];
            if first > 0 {
                sel.push(RowSelector::skip(first as usize));
            }
            sel.push(RowSelector::select((end - first) as usize));
            if rows > end {
                sel.push(RowSelector::skip((rows - end) as usize));
            }
            let mut cols: Vec<usize> = group.iter().map(|(ci, _, _)| *ci).collect();
            cols.dedup();
            let arrays = file.read(&cols, rg, Some(RowSelection::from(sel)))?;
            for (ci, page, slot) in group {
                let i = cols.iter().position(|c| *c == ci).unwrap_or(0);
                let values = arrays[i].clone();
                if values.len() != (end - first) as usize {
                    return Err(TabletError::corruption(
                        &file.meta.name,
                        format!(
                            "page {page} of column {ci} in row group {rg} holds {} rows, \
                             its offset index says {}",
                            values.len(),
                            end - first
                        ),
                    ));
                }
                cache.insert(key(ci, page), values.clone());
                out[slot] = Some(values);
            }
        }
        out.into_iter()
            .map(|p| {
                p.ok_or_else(|| TabletError::corruption(&file.meta.name, "a page was not read"))
            })
            .collect()
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
                        out.bytes += arrow_bytes(c);
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
    pub(crate) fn stats_exclude(
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

/// About how many bytes column chunk `c` takes once decoded into Arrow, which is what
/// a planner weighing a broadcast needs. Parquet's own `uncompressed_size` counts the
/// *encoded* pages: a dictionary-encoded string column of 200,000 rows can weigh
/// 200 KB there and 4 MB in memory. Fixed-width values count their width; byte
/// arrays their unencoded bytes (written with the chunk's statistics) plus a 4-byte
/// offset each; a chunk that lacks those figures falls back to its page bytes.
fn arrow_bytes(c: &parquet::file::metadata::ColumnChunkMetaData) -> u64 {
    use parquet::basic::Type as Physical;
    let values = c.num_values().max(0) as u64;
    let width = match c.column_type() {
        Physical::BOOLEAN => Some(1),
        Physical::INT32 | Physical::FLOAT => Some(4),
        Physical::INT64 | Physical::DOUBLE => Some(8),
        Physical::INT96 => Some(12),
        Physical::FIXED_LEN_BYTE_ARRAY => Some(c.column_descr().type_length().max(0) as u64),
        Physical::BYTE_ARRAY => None,
    };
    match (width, c.unencoded_byte_array_data_bytes()) {
        (Some(w), _) => values * w,
        (None, Some(data)) => data.max(0) as u64 + 4 * values,
        (None, None) => c.uncompressed_size().max(0) as u64,
    }
}
