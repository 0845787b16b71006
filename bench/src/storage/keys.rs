//! What a DiskRowSet's key index buys a point lookup.
//!
//! Cairn stores each rowset's primary keys twice: in the Parquet base file (the key
//! columns) and in the key index (prefix-compressed sorted keys and a bloom filter),
//! from which a key's row ordinal is a binary search over memory-mapped blocks. The
//! alternative keeps only the Parquet columns: find the row group and the pages that
//! may hold the key from the Parquet statistics and column index, decode those pages
//! of the key columns and binary-search them. This measures both ways of turning a
//! TPC-H lineitem key (`l_orderkey`, `l_linenumber`) into its row ordinal with no
//! cache, over the same compacted rowsets.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow::array::{Array, Int32Array, Int64Array};
use bytes::Bytes;
use cairn_common::key::encode_values;
use cairn_common::{Schema, Value};
use cairn_tablet::LocalTablet;
use cairn_tablet::basedata::parquet_column_name;
use cairn_tablet::keyindex::KeyIndex;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::statistics::Statistics;

use super::BoxResult;

/// One rowset, opened both ways.
struct RowSet {
    index: KeyIndex,
    data: Bytes,
    meta: ArrowReaderMetadata,
    /// Positions of l_orderkey and l_linenumber in the base file.
    cols: (usize, usize),
    /// First row of each row group, and the total at the end.
    group_starts: Vec<usize>,
}

/// p50 and p99 (µs) of key → row ordinal through the key index, then through the
/// Parquet key columns, for `keys` (l_orderkey, l_linenumber) looked up in `order`.
pub(super) fn key_to_ordinal_costs(
    tablet: &LocalTablet,
    schema: &Schema,
    keys: &[[Value; 2]],
    order: &[usize],
) -> BoxResult<((f64, f64), (f64, f64))> {
    let id = |name: &str| -> BoxResult<String> {
        Ok(parquet_column_name(
            schema.column(schema.index_of(name)?).id,
        ))
    };
    let (ok_name, ln_name) = (id("l_orderkey")?, id("l_linenumber")?);
    let mut rowsets = vec![];
    for rs in &tablet.tablet().components().disk {
        let m = rs.meta();
        let index = KeyIndex::open(&rs.dir().join(&m.keys.name), m.keys.crc)?;
        let base = m.base_files.first().ok_or("a rowset without base data")?;
        let path: PathBuf = rs.dir().join(&base.name);
        let data = Bytes::from(std::fs::read(&path)?);
        let meta = ArrowReaderMetadata::load(
            &data,
            ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required),
        )?;
        let pos = |name: &str| -> BoxResult<usize> { Ok(meta.schema().index_of(name)?) };
        let cols = (pos(&ok_name)?, pos(&ln_name)?);
        let mut group_starts = vec![0];
        for g in meta.metadata().row_groups() {
            group_starts.push(group_starts.last().copied().unwrap_or(0) + g.num_rows() as usize);
        }
        rowsets.push(RowSet {
            index,
            data,
            meta,
            cols,
            group_starts,
        });
    }
    let encoded: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| encode_values(&[&k[0], &k[1]]))
        .collect::<cairn_common::Result<_>>()?;
    let by_index = time(order, |i| {
        let enc = &encoded[i];
        Ok(rowsets.iter().enumerate().find_map(|(r, rs)| {
            let inside =
                rs.index.min_key() <= enc.as_slice() && enc.as_slice() <= rs.index.max_key();
            (inside && rs.index.may_contain(enc))
                .then(|| rs.index.find(enc).map(|o| (r, o)))
                .flatten()
        }))
    })?;
    let by_columns = time(order, |i| {
        let [Value::Int64(ok), Value::Int32(ln)] = keys[i] else {
            return Err("a lineitem key is not (Int64, Int32)".into());
        };
        for (r, rs) in rowsets.iter().enumerate() {
            let enc = &encoded[i];
            if rs.index.min_key() > enc.as_slice() || enc.as_slice() > rs.index.max_key() {
                continue;
            }
            if let Some(o) = find_in_columns(rs, ok, ln)? {
                return Ok(Some((r, o)));
            }
        }
        Ok(None)
    })?;
    if by_index.1 != by_columns.1 {
        return Err("the key index and the key columns disagree on row ordinals".into());
    }
    Ok((by_index.0, by_columns.0))
}

/// Where a key was found: (rowset, row ordinal in it).
type Found = Option<(usize, usize)>;

/// Times `lookup` for each index in `order`; returns (p50, p99) in µs and what it
/// found.
fn time(
    order: &[usize],
    mut lookup: impl FnMut(usize) -> BoxResult<Found>,
) -> BoxResult<((f64, f64), Vec<Found>)> {
    let mut lat = Vec::with_capacity(order.len());
    let mut found = Vec::with_capacity(order.len());
    for &i in order {
        let t0 = Instant::now();
        let f = lookup(i)?;
        lat.push(t0.elapsed());
        found.push(f);
    }
    if found.iter().any(Option::is_none) {
        return Err("a key → ordinal lookup found nothing".into());
    }
    lat.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok((
        (us(lat[lat.len() / 2]), us(lat[lat.len() * 99 / 100])),
        found,
    ))
}

/// The ordinal of (`ok`, `ln`) in `rs` from its Parquet key columns alone: row groups
/// by their l_orderkey statistics, pages by the column index, then a decode of those
/// pages of both key columns and a binary search.
fn find_in_columns(rs: &RowSet, ok: i64, ln: i32) -> BoxResult<Option<usize>> {
    let md = rs.meta.metadata();
    let column_index = md.column_index().ok_or("no column index")?;
    let offset_index = md.offset_index().ok_or("no offset index")?;
    for (rg, group) in md.row_groups().iter().enumerate() {
        let Some(Statistics::Int64(s)) = group.column(rs.cols.0).statistics() else {
            return Err("no l_orderkey statistics".into());
        };
        if s.min_opt().is_some_and(|m| *m > ok) || s.max_opt().is_some_and(|m| *m < ok) {
            continue;
        }
        let ColumnIndexMetaData::INT64(pages) = &column_index[rg][rs.cols.0] else {
            return Err("no l_orderkey column index".into());
        };
        let locations = offset_index[rg][rs.cols.0].page_locations();
        let hit: Vec<usize> = (0..locations.len())
            .filter(|&p| {
                pages.min_value(p).is_none_or(|m| *m <= ok)
                    && pages.max_value(p).is_none_or(|m| *m >= ok)
            })
            .collect();
        let (Some(&first), Some(&last)) = (hit.first(), hit.last()) else {
            continue;
        };
        let rows = group.num_rows() as usize;
        let from = locations[first].first_row_index as usize;
        let to = locations
            .get(last + 1)
            .map_or(rows, |l| l.first_row_index as usize);
        let selection = RowSelection::from(vec![
            RowSelector::skip(from),
            RowSelector::select(to - from),
            RowSelector::skip(rows - to),
        ]);
        let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), [rs.cols.0, rs.cols.1]);
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(rs.data.clone(), rs.meta.clone())
                .with_projection(mask)
                .with_row_groups(vec![rg])
                .with_row_selection(selection)
                .with_batch_size(to - from)
                .build()?;
        let mut base = rs.group_starts[rg] + from;
        for batch in reader {
            let batch = batch?;
            let (a, b) = if rs.cols.0 < rs.cols.1 {
                (0, 1)
            } else {
                (1, 0)
            };
            let oks = batch
                .column(a)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or("l_orderkey is not Int64")?;
            let lns = batch
                .column(b)
                .as_any()
                .downcast_ref::<Int32Array>()
                .ok_or("l_linenumber is not Int32")?;
            let n = oks.len();
            let at = partition_point(n, |i| (oks.value(i), lns.value(i)) < (ok, ln));
            if at < n && oks.value(at) == ok && lns.value(at) == ln {
                return Ok(Some(base + at));
            }
            base += n;
        }
    }
    Ok(None)
}

/// The first `i` in `0..n` for which `before(i)` is false (`before` is true then false).
fn partition_point(n: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}
