//! Rewriting DiskRowSets: rowset compaction and major delta compaction (Kudu §4.6-4.7).
//!
//! **Rowset compaction** merges several DiskRowSets into new ones: each row's history is
//! rebuilt from base + UNDO + REDO deltas, history older than the ancient history mark
//! is dropped (rows deleted before it vanish), and the rows are written again in key
//! order through the [`crate::writer::RowSetWriter`], so overlapping rowsets become
//! disjoint ones and a key lookup consults fewer of them.
//!
//! **Major delta compaction** folds the REDO updates of one rowset into its base data.
//! Only the columns that were updated are rewritten, into a new Parquet file that
//! shadows the old copies of those columns; unchanged columns are not touched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cairn_common::types::array_from_values;
use cairn_common::{ColumnId, HybridTime, Schema, Value};

use crate::delta::{DeltaEntry, DeltaFile, write_delta_file};
use crate::diskrowset::DiskRowSet;
use crate::error::Result;
use crate::history::{FlushedRow, Row, flush_row, history_from_deltas};
use crate::metadata::FileMeta;
use crate::ops::RowChange;
use crate::tablet::Tablet;
use crate::writer::{base_arrow_schema, write_parquet_file, writer_properties};

/// Reads every base row of row group `rg` of a rowset as values.
fn read_group_rows(schema: &Schema, rs: &DiskRowSet, rg: usize) -> Result<(u32, Vec<Row>)> {
    let base = rs.base();
    let ids: Vec<ColumnId> = schema.columns().iter().map(|c| c.id).collect();
    let (start, end) = base.group_range(rg);
    let cols = base.read_all(schema, &ids, rg)?;
    let n = (end - start) as usize;
    let mut rows = Vec::with_capacity(n);
    for r in 0..n {
        rows.push(
            schema
                .columns()
                .iter()
                .zip(&cols)
                .map(|(c, a)| Value::from_array(a.as_ref(), r, &c.data_type))
                .collect::<cairn_common::Result<Row>>()?,
        );
    }
    Ok((start, rows))
}

/// A cursor over one input rowset's rows, in key order, as flushed rows.
struct Cursor<'a> {
    schema: &'a Schema,
    rs: &'a DiskRowSet,
    keys: crate::keyindex::KeyCursor<'a>,
    rg: usize,
    rows: std::vec::IntoIter<Row>,
    next_ordinal: u32,
    redo: BTreeMap<u32, Vec<(HybridTime, RowChange)>>,
    undo: BTreeMap<u32, Vec<(HybridTime, RowChange)>>,
    snap: HybridTime,
    ahm: HybridTime,
}

impl<'a> Cursor<'a> {
    fn new(schema: &'a Schema, rs: &'a DiskRowSet, snap: HybridTime, ahm: HybridTime) -> Self {
        let d = rs.deltas();
        let (r, u) = d.collect(0, u32::MAX);
        let group = |v: Vec<DeltaEntry>| {
            let mut m: BTreeMap<u32, Vec<(HybridTime, RowChange)>> = BTreeMap::new();
            for e in v {
                m.entry(e.ordinal).or_default().push((e.ts, e.change));
            }
            m
        };
        Cursor {
            schema,
            rs,
            keys: rs.keys.cursor(),
            rg: 0,
            rows: Vec::new().into_iter(),
            next_ordinal: 0,
            redo: group(r),
            undo: group(u),
            snap,
            ahm,
        }
    }

    /// The next surviving row, or `None` at the end.
    fn next(&mut self) -> Result<Option<FlushedRow>> {
        loop {
            let row = match self.rows.next() {
                Some(r) => r,
                None => {
                    if self.rg >= self.rs.num_row_groups() {
                        return Ok(None);
                    }
                    let (start, rows) = read_group_rows(self.schema, self.rs, self.rg)?;
                    self.rg += 1;
                    self.next_ordinal = start;
                    self.rows = rows.into_iter();
                    continue;
                }
            };
            let o = self.next_ordinal;
            self.next_ordinal += 1;
            let key = self.keys.seek(o as usize).to_vec();
            let undos = self.undo.remove(&o).unwrap_or_default();
            let redos = self.redo.remove(&o).unwrap_or_default();
            let h = history_from_deltas(self.schema, key, row, &undos, &redos, self.snap);
            if let Some(f) = flush_row(self.schema, h, self.ahm) {
                return Ok(Some(f));
            }
        }
    }
}

/// Merges the rows of `inputs` (disjoint keys, overlapping ranges) in key order into
/// `sink`, as of snapshot `snap`, dropping history older than `ahm`.
pub fn merge_rowsets(
    schema: &Schema,
    inputs: &[Arc<DiskRowSet>],
    snap: HybridTime,
    ahm: HybridTime,
    mut sink: impl FnMut(FlushedRow) -> Result<()>,
) -> Result<()> {
    let mut cursors: Vec<Cursor<'_>> = inputs
        .iter()
        .map(|r| Cursor::new(schema, r, snap, ahm))
        .collect();
    let mut heads: Vec<Option<FlushedRow>> = Vec::with_capacity(cursors.len());
    for c in cursors.iter_mut() {
        heads.push(c.next()?);
    }
    loop {
        let mut best: Option<usize> = None;
        for (i, h) in heads.iter().enumerate() {
            if let Some(h) = h
                && best.is_none_or(|b| heads[b].as_ref().is_some_and(|bh| h.key < bh.key))
            {
                best = Some(i);
            }
        }
        let Some(i) = best else { return Ok(()) };
        let row = heads[i].take();
        heads[i] = cursors[i].next()?;
        if let Some(r) = row {
            sink(r)?;
        }
    }
}

/// See [`Tablet::major_delta_compaction`]. The caller holds the maintenance lock.
pub fn major_delta_compaction(tablet: &Tablet, rs: &Arc<DiskRowSet>) -> Result<bool> {
    let schema = tablet.schema();
    let d = rs.deltas();
    let inputs = d.redo_files.clone();
    if inputs.is_empty() {
        return Ok(false);
    }
    let mut entries: Vec<DeltaEntry> = inputs
        .iter()
        .flat_map(|f| f.entries().iter().cloned())
        .collect();
    entries.sort_by_key(|e| (e.ordinal, e.ts));
    let structural: BTreeSet<u32> = entries
        .iter()
        .filter(|e| !matches!(e.change, RowChange::Update(_)))
        .map(|e| e.ordinal)
        .collect();
    let (fold, keep): (Vec<DeltaEntry>, Vec<DeltaEntry>) = entries
        .into_iter()
        .partition(|e| !structural.contains(&e.ordinal));
    let mut cols: BTreeSet<ColumnId> = BTreeSet::new();
    for e in &fold {
        if let RowChange::Update(cells) = &e.change {
            cols.extend(
                cells
                    .iter()
                    .map(|(id, _)| *id)
                    .filter(|id| schema.index_of_id(*id).is_some()),
            );
        }
    }
    if fold.is_empty() || cols.is_empty() {
        return Ok(false);
    }
    let ids: Vec<ColumnId> = cols.into_iter().collect();
    let types: Vec<_> = ids
        .iter()
        .filter_map(|id| {
            schema
                .index_of_id(*id)
                .map(|i| schema.column(i).data_type.clone())
        })
        .collect();
    let base = rs.base();
    let mut by_ordinal: BTreeMap<u32, Vec<&DeltaEntry>> = BTreeMap::new();
    for e in &fold {
        by_ordinal.entry(e.ordinal).or_default().push(e);
    }
    let mut undos: Vec<DeltaEntry> = Vec::new();
    let mut batches = Vec::with_capacity(rs.num_row_groups());
    let arrow_schema = base_arrow_schema(&schema, &ids);
    for rg in 0..rs.num_row_groups() {
        let (start, end) = base.group_range(rg);
        let arrays = base.read_all(&schema, &ids, rg)?;
        let mut values: Vec<Vec<Value>> = arrays
            .iter()
            .zip(&types)
            .map(|(a, t)| {
                (0..a.len())
                    .map(|r| Value::from_array(a.as_ref(), r, t))
                    .collect()
            })
            .collect::<cairn_common::Result<_>>()?;
        for (o, changes) in by_ordinal.range(start..end) {
            let r = (*o - start) as usize;
            for e in changes {
                if let RowChange::Update(cells) = &e.change {
                    let mut inverse = Vec::new();
                    for (id, v) in cells {
                        if let Some(p) = ids.iter().position(|x| x == id) {
                            inverse.push((*id, std::mem::replace(&mut values[p][r], v.clone())));
                        }
                    }
                    undos.push(DeltaEntry {
                        ordinal: *o,
                        ts: e.ts,
                        change: RowChange::Update(inverse),
                    });
                }
            }
        }
        let cols = values
            .iter()
            .zip(&types)
            .map(|(v, t)| array_from_values(t, v.iter()))
            .collect::<cairn_common::Result<Vec<_>>>()?;
        batches.push(arrow::record_batch::RecordBatch::try_new(
            arrow_schema.clone(),
            cols,
        )?);
    }
    undos.sort_by_key(|e| (e.ordinal, e.ts));
    let mut meta = rs.meta();
    let seq = meta.next_file_seq;
    let base_name = format!("base-{seq}.parquet");
    // One row group per input row group keeps the files aligned.
    let rows_per_group = batches
        .iter()
        .map(|b| b.num_rows())
        .max()
        .unwrap_or(1)
        .max(1);
    let props = writer_properties(tablet.options().codec, rows_per_group);
    let new_base = write_parquet_file(
        &rs.dir().join(&base_name),
        &base_name,
        arrow_schema,
        ids.clone(),
        props,
        batches.into_iter().map(Ok),
    )?;
    let undo_name = format!("undo-{}.delta", seq + 1);
    let (ucrc, usize_) = write_delta_file(&rs.dir().join(&undo_name), &undos)?;
    let redo_name = format!("redo-{}.delta", seq + 2);
    let new_redo = if keep.is_empty() {
        None
    } else {
        let (crc, size) = write_delta_file(&rs.dir().join(&redo_name), &keep)?;
        Some((
            FileMeta {
                name: redo_name.clone(),
                crc,
                size,
            },
            Arc::new(DeltaFile::open(
                &rs.dir().join(&redo_name),
                &redo_name,
                crc,
            )?),
        ))
    };
    crate::metadata::sync_dir(rs.dir())?;
    let new_file = rs.open_base_file(new_base.clone())?;
    let undo_file = Arc::new(DeltaFile::open(
        &rs.dir().join(&undo_name),
        &undo_name,
        ucrc,
    )?);

    let _g = tablet.write_gate();
    let mut files = base.files.clone();
    files.push(new_file);
    let mut d = rs.deltas();
    d.redo_files
        .retain(|f| !inputs.iter().any(|i| Arc::ptr_eq(i, f)));
    if let Some((_, f)) = &new_redo {
        d.redo_files.insert(0, f.clone());
    }
    d.undo_files.push(undo_file);
    rs.install_base_and_deltas(files, d);
    let old: Vec<String> = inputs.iter().map(|f| f.name.clone()).collect();
    meta.base_files.push(new_base);
    meta.redo_files.retain(|f| !old.contains(&f.name));
    if let Some((m, _)) = new_redo {
        meta.redo_files.insert(0, m);
    }
    meta.undo_files.push(FileMeta {
        name: undo_name,
        crc: ucrc,
        size: usize_,
    });
    meta.next_file_seq = seq + 3;
    tablet.persist_rowsets(&[(rs.clone(), meta)], None)?;
    for n in old {
        let _ = std::fs::remove_file(rs.dir().join(n));
    }
    Ok(true)
}
