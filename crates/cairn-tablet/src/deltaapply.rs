//! Applying a DiskRowSet's deltas to the columns a scan read from its base data.
//!
//! A row group whose visible deltas are all updates (the usual case: rows updated in
//! place since the last compaction) stays columnar: for each column read, the newest
//! visible update of each row becomes a patch, and the patched column is built with
//! Arrow's `interleave` ([`update_patches`], [`apply_patches`]). Rows with visible
//! deletes, re-inserts or UNDOs are rebuilt one by one as values ([`apply_deltas`]).

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::interleave;
use cairn_common::types::array_from_values;
use cairn_common::{ColumnId, DataType, HybridTime, Schema, Value};

use crate::delta::DeltaEntry;
use crate::diskrowset::Deltas;
use crate::error::{Result, TabletError};
use crate::ops::RowChange;

pub(crate) type RelevantDeltas<'a> = BTreeMap<u32, (Vec<&'a DeltaEntry>, Vec<&'a DeltaEntry>)>;

/// Applies relevant deltas (REDOs ascending, UNDOs descending) to the rows they touch.
/// Returns the new columns and a visibility mask.
pub(crate) fn apply_deltas(
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
    let out = cols
        .into_iter()
        .zip(&types)
        .zip(overrides)
        .map(|((col, t), ov)| patch_column(col, t, ov.iter().map(|(r, v)| (*r, v))))
        .collect::<Result<Vec<_>>>()?;
    Ok((out, BooleanArray::from(visible)))
}

/// `col` with the rows in `patches` (ascending row, one entry per row) replaced by
/// their values.
fn patch_column<'v>(
    col: ArrayRef,
    t: &DataType,
    patches: impl ExactSizeIterator<Item = (usize, &'v Value)> + Clone,
) -> Result<ArrayRef> {
    if patches.len() == 0 {
        return Ok(col);
    }
    let patch = array_from_values(t, patches.clone().map(|(_, v)| v))?;
    let mut idx: Vec<(usize, usize)> = (0..col.len()).map(|i| (0, i)).collect();
    for (j, (row, _)) in patches.enumerate() {
        idx[row] = (1, j);
    }
    Ok(interleave(&[col.as_ref(), patch.as_ref()], &idx)?)
}

/// For each column of `ids`, the rows of ordinals `[lo, hi)` (as offsets from `lo`,
/// ascending) whose value at `snap` differs from the base data because of a REDO
/// update, with that value: the newest update at or before `snap` that sets the
/// column, ties going to the later store as [`Deltas::collect`] orders them.
/// `dms_entries` are the DeltaMemStores' deltas of the range (frozen store first).
///
/// `None` when a visible change there is not an update — a delete, a re-insert or
/// an UNDO newer than `snap` — so rows must be rebuilt one by one
/// ([`apply_deltas`]). Updates of columns outside `ids` cost nothing more than being
/// looked at: such rows stay on the columnar path.
pub(crate) fn update_patches<'d>(
    deltas: &'d Deltas,
    dms_entries: &'d [DeltaEntry],
    lo: u32,
    hi: u32,
    snap: HybridTime,
    ids: &[ColumnId],
) -> Option<Vec<Vec<(usize, &'d Value)>>> {
    let undo_visible = deltas
        .undo_files
        .iter()
        .filter(|f| f.max_ts > snap)
        .any(|f| f.range(lo, hi).iter().any(|e| e.ts > snap));
    if undo_visible {
        return None;
    }
    // Per column: (row, timestamp, arrival order, value).
    let mut found: Vec<Vec<(usize, HybridTime, usize, &Value)>> = vec![Vec::new(); ids.len()];
    let files = deltas.redo_files.iter().map(|f| f.range(lo, hi));
    let mut seq = 0usize;
    for entries in files.chain(std::iter::once(dms_entries)) {
        for e in entries.iter().filter(|e| e.ts <= snap) {
            let RowChange::Update(cells) = &e.change else {
                return None;
            };
            for (id, v) in cells {
                if let Some(p) = ids.iter().position(|x| x == id) {
                    found[p].push(((e.ordinal - lo) as usize, e.ts, seq, v));
                }
            }
            seq += 1;
        }
    }
    Some(
        found
            .into_iter()
            .map(|mut f| {
                // Usually one file, already in (row, timestamp) order.
                f.sort_unstable_by_key(|&(row, ts, seq, _)| (row, ts, seq));
                let mut out: Vec<(usize, &Value)> = Vec::with_capacity(f.len());
                for (row, _, _, v) in f {
                    match out.last_mut() {
                        Some(last) if last.0 == row => last.1 = v,
                        _ => out.push((row, v)),
                    }
                }
                out
            })
            .collect(),
    )
}

/// Applies [`update_patches`] to the columns (of `ids`) read for a range.
pub(crate) fn apply_patches(
    schema: &Schema,
    ids: &[ColumnId],
    cols: Vec<ArrayRef>,
    patches: Vec<Vec<(usize, &Value)>>,
) -> Result<Vec<ArrayRef>> {
    cols.into_iter()
        .zip(ids)
        .zip(patches)
        .map(|((col, id), p)| {
            let i = schema.index_of_id(*id).ok_or_else(|| {
                TabletError::InvalidRequest(format!("column id {id} is not in the schema"))
            })?;
            patch_column(col, &schema.column(i).data_type, p.into_iter())
        })
        .collect()
}


#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use cairn_common::ColumnSpec;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::delta::{DeltaFile, DeltaMemStore, write_delta_file};

    /// The column-wise patches give the columns that rebuilding each row from its
    /// deltas gives, for random updates spread over files and memory stores (ties in
    /// timestamp included), updates of columns not read, and random snapshots; and
    /// any visible delete refuses the column-wise path.
    #[test]
    fn patches_match_row_by_row_application() {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("a", DataType::Int64).nullable(),
                ColumnSpec::new("b", DataType::String),
                ColumnSpec::new("c", DataType::Int64),
            ],
            &["k"],
        )
        .unwrap();
        let id = |name: &str| schema.column(schema.index_of(name).unwrap()).id;
        let ids = [id("b"), id("a")];
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..300u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (lo, n) = (100u32, 24usize);
            let change = |rng: &mut StdRng, deletes: bool| {
                if deletes && rng.random_ratio(1, 8) {
                    return RowChange::Delete;
                }
                let mut cells = Vec::new();
                if rng.random_bool(0.5) {
                    let v = if rng.random_ratio(1, 5) {
                        Value::Null
                    } else {
                        Value::Int64(rng.random_range(-9..9))
                    };
                    cells.push((id("a"), v));
                }
                if rng.random_bool(0.5) {
                    cells.push((id("b"), Value::String(format!("s{}", rng.random_range(0..99)))));
                }
                if rng.random_bool(0.5) {
                    cells.push((id("c"), Value::Int64(1)));
                }
                RowChange::Update(cells)
            };
            let deletes = seed % 3 == 0;
            let entries = |rng: &mut StdRng| -> Vec<DeltaEntry> {
                let mut v: Vec<DeltaEntry> = (0..rng.random_range(0..30))
                    .map(|_| DeltaEntry {
                        ordinal: lo + rng.random_range(0..n as u32),
                        ts: HybridTime(rng.random_range(1..12)),
                        change: change(rng, deletes),
                    })
                    .collect();
                v.sort_by_key(|e| (e.ordinal, e.ts));
                v
            };
            let mut redo_files = Vec::new();
            for f in 0..rng.random_range(0..3) {
                let path = dir.path().join(format!("r{seed}-{f}"));
                let (crc, _) = write_delta_file(&path, &entries(&mut rng)).unwrap();
                redo_files.push(Arc::new(DeltaFile::open(&path, "r", crc).unwrap()));
            }
            let mem = |es: Vec<DeltaEntry>| {
                let d = DeltaMemStore::new();
                for e in es {
                    d.add(e.ordinal, e.ts, e.change);
                }
                Arc::new(d)
            };
            let frozen = entries(&mut rng);
            let active = entries(&mut rng);
            let deltas = Deltas {
                redo_files,
                undo_files: vec![],
                frozen_dms: rng.random_bool(0.5).then(|| mem(frozen)),
                dms: mem(active),
            };
            let snap = HybridTime(rng.random_range(0..13));
            let base: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("base{i}")))),
                Arc::new(Int64Array::from_iter((0..n as i64).map(|i| (i % 4 != 0).then_some(i)))),
            ];
            let (redo, undo) = deltas.collect_for(lo, lo + n as u32, snap);
            let mut relevant: RelevantDeltas<'_> = BTreeMap::new();
            for e in redo.iter().filter(|e| e.ts <= snap) {
                relevant.entry(e.ordinal).or_default().0.push(e);
            }
            let (want, visible) = apply_deltas(&schema, &ids, base.clone(), lo, &relevant).unwrap();
            assert!(undo.is_empty());
            let mut dms_entries = deltas.frozen_dms.as_ref().map_or(vec![], |d| d.range(lo, lo + n as u32));
            dms_entries.extend(deltas.dms.range(lo, lo + n as u32));
            match update_patches(&deltas, &dms_entries, lo, lo + n as u32, snap, &ids) {
                Some(p) => {
                    assert_eq!(visible.true_count(), n, "seed {seed}: patches despite a delete");
                    let got = apply_patches(&schema, &ids, base, p).unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!(g.to_data(), w.to_data(), "seed {seed}");
                    }
                }
                None => assert!(
                    redo.iter().any(|e| e.ts <= snap && e.change == RowChange::Delete),
                    "seed {seed}: refused without a visible delete"
                ),
            }
        }
    }
}
