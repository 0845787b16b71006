//! Rewriting DiskRowSets: rowset compaction and major delta compaction (Kudu §4.6-4.7).
//!
//! **Rowset compaction** merges several DiskRowSets into new ones, in key order through
//! the [`crate::writer::RowSetWriter`], so overlapping rowsets become disjoint ones and
//! a key lookup consults fewer of them. History older than the ancient history mark is
//! dropped (rows deleted before it vanish). A row with REDO deltas has its history
//! rebuilt from base + UNDO + REDO and written again; every other row (nearly all)
//! keeps its base cells, which move column-wise from the inputs' decoded row groups
//! into the output batches (Arrow `interleave`) without becoming `Value`s.
//!
//! **Major delta compaction** folds the REDO updates of one rowset into its base data.
//! Only the columns that were updated are rewritten, into a new Parquet file that
//! shadows the old copies of those columns; unchanged columns are not touched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::interleave;
use arrow::error::ArrowError;
use cairn_common::types::array_from_values;
use cairn_common::{ColumnId, HybridTime, Schema, Value};

use crate::delta::{DeltaEntry, DeltaFile, write_delta_file};
use crate::diskrowset::DiskRowSet;
use crate::error::Result;
use crate::history::{Row, flush_row, history_from_deltas};
use crate::metadata::FileMeta;
use crate::ops::RowChange;
use crate::tablet::Tablet;
use crate::writer::{
    CHUNK_ROWS, RowSetWriter, RowsChunk, base_arrow_schema, write_parquet_file, writer_properties,
};

/// Where a gathered row's cells come from: a row of a decoded input row group, or a
/// version rebuilt from the row's history.
#[derive(Clone, Copy)]
enum Cells {
    /// Row `row` of source `source` (an index into [`Merge::sources`]).
    Base { source: usize, row: usize },
    /// Row `i` of [`Merge::rebuilt`].
    Rebuilt(usize),
}

/// The cells of an input's next row: a row of its current row group, or a version
/// rebuilt from the row's history.
enum HeadCells {
    Base(usize),
    Rebuilt(Row),
}

/// One input rowset's next surviving row.
struct Head {
    key: Vec<u8>,
    cells: HeadCells,
    undos: Vec<(HybridTime, RowChange)>,
    redos: Vec<(HybridTime, RowChange)>,
}

/// A cursor over one input rowset's rows, in key order.
struct Cursor<'a> {
    rs: &'a DiskRowSet,
    keys: crate::keyindex::KeyCursor<'a>,
    /// Next row group to decode.
    rg: usize,
    /// The current row group's source index and its rows `[next, end)` still to read.
    source: usize,
    next: u32,
    end: u32,
    group_start: u32,
    /// All deltas of the rowset, sorted by (ordinal, timestamp), consumed in order.
    redo: std::iter::Peekable<std::vec::IntoIter<DeltaEntry>>,
    undo: std::iter::Peekable<std::vec::IntoIter<DeltaEntry>>,
}

impl<'a> Cursor<'a> {
    fn new(rs: &'a DiskRowSet) -> Self {
        let (redo, undo) = rs.deltas().collect(0, u32::MAX);
        Cursor {
            rs,
            keys: rs.keys.cursor(),
            rg: 0,
            source: 0,
            next: 0,
            end: 0,
            group_start: 0,
            redo: redo.into_iter().peekable(),
            undo: undo.into_iter().peekable(),
        }
    }

    /// The next surviving row, or `None` at the end. Decoded row groups go into
    /// `m.sources` (the cursor's current one is `self.source`).
    fn next(&mut self, m: &mut Merge<'_>) -> Result<Option<Head>> {
        loop {
            if self.next == self.end {
                if self.rg >= self.rs.num_row_groups() {
                    return Ok(None);
                }
                let (start, end) = self.rs.base().group_range(self.rg);
                let cols = self.rs.base().read_all(m.schema, &m.ids, self.rg)?;
                self.rg += 1;
                self.source = m.sources.len();
                m.sources.push(cols);
                (self.group_start, self.next, self.end) = (start, start, end);
                continue;
            }
            let o = self.next;
            self.next += 1;
            let row = (o - self.group_start) as usize;
            let mut undos = Vec::new();
            while let Some(e) = self.undo.next_if(|e| e.ordinal <= o) {
                if e.ordinal == o {
                    undos.push((e.ts, e.change));
                }
            }
            let mut redos = Vec::new();
            while let Some(e) = self.redo.next_if(|e| e.ordinal <= o) {
                if e.ordinal == o {
                    redos.push((e.ts, e.change));
                }
            }
            let key = self.keys.seek(o as usize).to_vec();
            if redos.iter().all(|(ts, _)| *ts > m.snap) {
                // No change up to the snapshot: the base row stays as it is, and of
                // its history only what is older than the ancient history mark goes.
                undos.retain(|(ts, _)| *ts >= m.ahm);
                return Ok(Some(Head {
                    key,
                    cells: HeadCells::Base(row),
                    undos,
                    redos: vec![],
                }));
            }
            let cols = &m.sources[self.source];
            let base = m
                .schema
                .columns()
                .iter()
                .zip(cols)
                .map(|(c, a)| Value::from_array(a.as_ref(), row, &c.data_type))
                .collect::<cairn_common::Result<Row>>()?;
            let h = history_from_deltas(m.schema, key, base, &undos, &redos, m.snap);
            if let Some(f) = flush_row(m.schema, h, m.ahm) {
                return Ok(Some(Head {
                    key: f.key,
                    cells: HeadCells::Rebuilt(f.base),
                    undos: f.undos,
                    redos: f.redos,
                }));
            }
        }
    }
}

/// The state of a merge: decoded row groups and rebuilt rows that the rows gathered
/// for the next output batch point into.
struct Merge<'s> {
    schema: &'s Schema,
    ids: Vec<ColumnId>,
    snap: HybridTime,
    ahm: HybridTime,
    /// Decoded input row groups (one array per schema column each).
    sources: Vec<Vec<ArrayRef>>,
    /// Rows whose history was rebuilt.
    rebuilt: Vec<Row>,
    /// The rows gathered for the next output batch.
    chunk: RowsChunk<Cells>,
}

impl Merge<'_> {
    /// Gathers `h`, the head of the input whose current row group is `source`.
    fn push(&mut self, h: Head, source: usize) {
        let cells = match h.cells {
            HeadCells::Base(row) => Cells::Base { source, row },
            HeadCells::Rebuilt(r) => {
                self.rebuilt.push(r);
                Cells::Rebuilt(self.rebuilt.len() - 1)
            }
        };
        self.chunk.push(h.key, cells, h.undos, h.redos);
    }

    /// Builds the gathered rows' batch (interleaving the sources' columns) and hands
    /// it to `w`; then drops every source no cursor (or waiting head) still reads.
    fn emit(
        &mut self,
        w: &mut RowSetWriter<'_>,
        cursors: &mut [Cursor<'_>],
        heads: &[Option<Head>],
    ) -> Result<()> {
        if !self.chunk.is_empty() {
            let rebuilt_source = self.sources.len();
            let indices: Vec<(usize, usize)> = self
                .chunk
                .rows()
                .iter()
                .map(|c| match *c {
                    Cells::Base { source, row } => (source, row),
                    Cells::Rebuilt(i) => (rebuilt_source, i),
                })
                .collect();
            let mut rebuilt_cols = Vec::new();
            if !self.rebuilt.is_empty() {
                for (i, c) in self.schema.columns().iter().enumerate() {
                    rebuilt_cols.push(array_from_values(
                        &c.data_type,
                        self.rebuilt.iter().map(|r| &r[i]),
                    )?);
                }
            }
            // One run of consecutive rows of one source (inputs that do not overlap)
            // is a slice; anything else is interleaved.
            let (s0, r0) = indices[0];
            let run = indices
                .iter()
                .enumerate()
                .all(|(i, &(s, r))| s == s0 && r == r0 + i);
            let cols = (0..self.schema.num_columns())
                .map(|c| {
                    let col = |s: usize| -> &dyn Array {
                        if s == rebuilt_source {
                            rebuilt_cols[c].as_ref()
                        } else {
                            self.sources[s][c].as_ref()
                        }
                    };
                    if run {
                        Ok(col(s0).slice(r0, indices.len()))
                    } else {
                        let n = rebuilt_source + usize::from(!rebuilt_cols.is_empty());
                        let arrays: Vec<&dyn Array> = (0..n).map(col).collect();
                        interleave(&arrays, &indices)
                    }
                })
                .collect::<std::result::Result<Vec<_>, ArrowError>>()?;
            let batch = RecordBatch::try_new(w.arrow_schema(), cols)?;
            self.rebuilt.clear();
            self.chunk.append_to(w, &batch)?;
        }
        // Keep only the row groups cursors are in the middle of.
        let mut kept = Vec::new();
        for (c, h) in cursors.iter_mut().zip(heads) {
            if c.next < c.end
                || matches!(
                    h,
                    Some(Head {
                        cells: HeadCells::Base(_),
                        ..
                    })
                )
            {
                kept.push(std::mem::take(&mut self.sources[c.source]));
                c.source = kept.len() - 1;
            }
        }
        self.sources = kept;
        Ok(())
    }
}

/// Merges the rows of `inputs` (disjoint keys, overlapping ranges) in key order into
/// `w`, as of snapshot `snap`, dropping history older than `ahm`.
///
/// Rows with no change up to the snapshot (nearly all, in a compaction) never become
/// `Value`s: their cells are interleaved from the inputs' decoded columns, and only
/// their UNDOs older than `ahm` are dropped. Rows with REDO deltas have their history
/// rebuilt ([`history_from_deltas`]) and written again ([`flush_row`]).
pub fn merge_rowsets(
    schema: &Schema,
    inputs: &[Arc<DiskRowSet>],
    snap: HybridTime,
    ahm: HybridTime,
    w: &mut RowSetWriter<'_>,
) -> Result<()> {
    let mut m = Merge {
        schema,
        ids: schema.columns().iter().map(|c| c.id).collect(),
        snap,
        ahm,
        sources: vec![],
        rebuilt: vec![],
        chunk: RowsChunk::new(),
    };
    let mut cursors: Vec<Cursor<'_>> = inputs.iter().map(|r| Cursor::new(r)).collect();
    let mut heads: Vec<Option<Head>> = Vec::with_capacity(cursors.len());
    for c in cursors.iter_mut() {
        heads.push(c.next(&mut m)?);
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
        let Some(i) = best else { break };
        if let Some(h) = heads[i].take() {
            m.push(h, cursors[i].source);
        }
        heads[i] = cursors[i].next(&mut m)?;
        if m.chunk.len() >= CHUNK_ROWS {
            m.emit(w, &mut cursors, &heads)?;
        }
    }
    m.emit(w, &mut cursors, &heads)
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
    let props = writer_properties(tablet.options().codec, rows_per_group, batches.first());
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
