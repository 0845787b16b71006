//! Applying a DiskRowSet's deltas to the columns a scan read from its base data.
//!
//! A row group whose visible deltas are all updates (the usual case: rows updated in
//! place since the last compaction) stays columnar: for each column read, the newest
//! visible update of each row becomes a patch, written into a primitive column's
//! buffers (or merged with Arrow's `interleave` for other types) ([`update_patches`],
//! [`apply_patches`]). Rows with visible
//! deletes, re-inserts or UNDOs are rebuilt one by one as values ([`apply_deltas`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, BooleanBufferBuilder, PrimitiveArray,
    downcast_primitive_array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::interleave;
use arrow::util::bit_util;
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
        .map(|((col, t), ov)| {
            let rows: Vec<usize> = ov.iter().map(|(r, _)| *r).collect();
            let values: Vec<&Value> = ov.iter().map(|(_, v)| v).collect();
            patch_column(col, t, &rows, &values)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((out, BooleanArray::from(visible)))
}

/// `col` with row `rows[i]` replaced by `values[i]` (rows ascending).
fn patch_column(
    col: ArrayRef,
    t: &DataType,
    rows: &[usize],
    values: &[&Value],
) -> Result<ArrayRef> {
    if rows.is_empty() {
        return Ok(col);
    }
    let patch = array_from_values(t, values.iter().copied())?;
    let col = if col.data_type() == patch.data_type() {
        let c = col.as_ref();
        let patcher: Option<PrimitivePatcher> = downcast_primitive_array!(
            c => Some(primitive_patcher(c)),
            _ => None
        );
        match patcher {
            Some(f) => match f(col, patch.as_ref(), rows) {
                Ok(patched) => return Ok(patched),
                Err(col) => col,
            },
            None => col,
        }
    } else {
        col
    };
    let mut idx: Vec<(usize, usize)> = (0..col.len()).map(|i| (0, i)).collect();
    for (j, &row) in rows.iter().enumerate() {
        idx[row] = (1, j);
    }
    Ok(interleave(&[col.as_ref(), patch.as_ref()], &idx)?)
}

/// Patches a primitive column of one array type ([`patch_primitive`]); gives the
/// column back when the patch is of another type.
type PrimitivePatcher =
    fn(ArrayRef, &dyn Array, &[usize]) -> std::result::Result<ArrayRef, ArrayRef>;

/// The [`PrimitivePatcher`] of `col`'s array type.
fn primitive_patcher<T: ArrowPrimitiveType>(_col: &PrimitiveArray<T>) -> PrimitivePatcher {
    patch_primitive::<T>
}

/// A primitive column with its values at `rows` (ascending) replaced by `patch`'s:
/// in place when the scan owns the column's buffers alone (a freshly decoded row
/// group), else in one copy of them. `Err(col)` if `patch` is of another type.
fn patch_primitive<T: ArrowPrimitiveType>(
    col: ArrayRef,
    patch: &dyn Array,
    rows: &[usize],
) -> std::result::Result<ArrayRef, ArrayRef> {
    let Some(patch) = patch.as_any().downcast_ref::<PrimitiveArray<T>>() else {
        return Err(col);
    };
    let data_type = col.data_type().clone();
    let arr = PrimitiveArray::<T>::from(col.to_data());
    drop(col);
    // Without a validity buffer to edit, nulls in the patch need the copy.
    let in_place = patch.null_count() == 0 || arr.nulls().is_some();
    let arr = if in_place {
        match arr.into_builder() {
            Ok(mut b) => {
                let values = b.values_slice_mut();
                for (j, &r) in rows.iter().enumerate() {
                    values[r] = patch.values()[j];
                }
                if let Some(valid) = b.validity_slice_mut() {
                    for (j, &r) in rows.iter().enumerate() {
                        if patch.is_valid(j) {
                            bit_util::set_bit(valid, r);
                        } else {
                            bit_util::unset_bit(valid, r);
                        }
                    }
                }
                return Ok(Arc::new(b.finish().with_data_type(data_type)));
            }
            Err(arr) => arr,
        }
    } else {
        arr
    };
    let mut values = arr.values().to_vec();
    let mut nulls = (arr.null_count() > 0 || patch.null_count() > 0).then(|| {
        let mut b = BooleanBufferBuilder::new(arr.len());
        match arr.nulls() {
            Some(n) => b.append_buffer(n.inner()),
            None => b.append_n(arr.len(), true),
        }
        b
    });
    for (j, &r) in rows.iter().enumerate() {
        values[r] = patch.values()[j];
        if let Some(b) = &mut nulls {
            b.set_bit(r, patch.is_valid(j));
        }
    }
    let nulls = nulls.map(|mut b| NullBuffer::new(b.finish()));
    Ok(Arc::new(
        PrimitiveArray::<T>::new(values.into(), nulls).with_data_type(data_type),
    ))
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
) -> Option<Vec<Patch<'d>>> {
    let undo_visible = deltas
        .undo_files
        .iter()
        .filter(|f| f.max_ts > snap)
        .any(|f| f.range(lo, hi).iter().any(|e| e.ts > snap));
    if undo_visible {
        return None;
    }
    // Per column: (row, timestamp, value) in arrival order, and whether that order is
    // still (row, timestamp) order — as it is when one store holds the range's updates.
    let mut found: Vec<(Updates<'_>, bool)> = vec![(Vec::new(), true); ids.len()];
    let files = deltas.redo_files.iter().map(|f| f.range(lo, hi));
    for entries in files.chain(std::iter::once(dms_entries)) {
        for e in entries.iter().filter(|e| e.ts <= snap) {
            let RowChange::Update(cells) = &e.change else {
                return None;
            };
            let row = (e.ordinal - lo) as usize;
            for (id, v) in cells {
                if let Some(p) = ids.iter().position(|x| x == id) {
                    let (f, sorted) = &mut found[p];
                    if f.last().is_some_and(|&(r, ts, _)| (r, ts) > (row, e.ts)) {
                        *sorted = false;
                    }
                    f.push((row, e.ts, v));
                }
            }
        }
    }
    Some(
        found
            .into_iter()
            .map(|(mut f, sorted)| {
                if !sorted {
                    // Stable: equal (row, timestamp) keep arrival order, the later
                    // store winning as it does in `Deltas::collect`.
                    f.sort_by_key(|&(row, ts, _)| (row, ts));
                }
                let mut patch = Patch::default();
                for (row, _, v) in f {
                    if patch.rows.last() == Some(&row) {
                        if let Some(last) = patch.values.last_mut() {
                            *last = v;
                        }
                    } else {
                        patch.rows.push(row);
                        patch.values.push(v);
                    }
                }
                patch
            })
            .collect(),
    )
}

/// One column's updates in a range: (row, timestamp, new value).
type Updates<'d> = Vec<(usize, HybridTime, &'d Value)>;

/// New values for some rows of one column: `values[i]` replaces row `rows[i]`; rows
/// ascend.
#[derive(Debug, Default)]
pub(crate) struct Patch<'d> {
    rows: Vec<usize>,
    values: Vec<&'d Value>,
}

impl Patch<'_> {
    /// Whether the patch changes nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// Applies [`update_patches`] to the columns (of `ids`) read for a range.
pub(crate) fn apply_patches(
    schema: &Schema,
    ids: &[ColumnId],
    cols: Vec<ArrayRef>,
    patches: Vec<Patch<'_>>,
) -> Result<Vec<ArrayRef>> {
    cols.into_iter()
        .zip(ids)
        .zip(patches)
        .map(|((col, id), p)| {
            let i = schema.index_of_id(*id).ok_or_else(|| {
                TabletError::InvalidRequest(format!("column id {id} is not in the schema"))
            })?;
            patch_column(col, &schema.column(i).data_type, &p.rows, &p.values)
        })
        .collect()
}

#[cfg(test)]
mod tests {
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
                ColumnSpec::new("c", DataType::Int64).nullable(),
                ColumnSpec::new("d", DataType::Int64),
            ],
            &["k"],
        )
        .unwrap();
        let id = |name: &str| schema.column(schema.index_of(name).unwrap()).id;
        let ids = [id("b"), id("a"), id("c")];
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..300u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (lo, n) = (100u32, 24usize);
            let small_or_null = |rng: &mut StdRng| {
                if rng.random_ratio(1, 5) {
                    Value::Null
                } else {
                    Value::Int64(rng.random_range(-9..9))
                }
            };
            let change = |rng: &mut StdRng, deletes: bool| {
                if deletes && rng.random_ratio(1, 8) {
                    return RowChange::Delete;
                }
                let mut cells = Vec::new();
                if rng.random_bool(0.5) {
                    cells.push((id("a"), small_or_null(rng)));
                }
                if rng.random_bool(0.5) {
                    cells.push((
                        id("b"),
                        Value::String(format!("s{}", rng.random_range(0..99))),
                    ));
                }
                if rng.random_bool(0.5) {
                    cells.push((id("c"), small_or_null(rng)));
                }
                if rng.random_bool(0.3) {
                    cells.push((id("d"), Value::Int64(1)));
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
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("base{i}")),
                )),
                Arc::new(Int64Array::from_iter(
                    (0..n as i64).map(|i| (i % 4 != 0).then_some(i)),
                )),
                Arc::new(Int64Array::from_iter_values(0..n as i64)),
            ];
            let (redo, undo) = deltas.collect_for(lo, lo + n as u32, snap);
            let mut relevant: RelevantDeltas<'_> = BTreeMap::new();
            for e in redo.iter().filter(|e| e.ts <= snap) {
                relevant.entry(e.ordinal).or_default().0.push(e);
            }
            let (want, visible) = apply_deltas(&schema, &ids, base.clone(), lo, &relevant).unwrap();
            assert!(undo.is_empty());
            let mut dms_entries = deltas
                .frozen_dms
                .as_ref()
                .map_or(vec![], |d| d.range(lo, lo + n as u32));
            dms_entries.extend(deltas.dms.range(lo, lo + n as u32));
            match update_patches(&deltas, &dms_entries, lo, lo + n as u32, snap, &ids) {
                Some(p) => {
                    assert_eq!(
                        visible.true_count(),
                        n,
                        "seed {seed}: patches despite a delete"
                    );
                    let got = apply_patches(&schema, &ids, base, p).unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!(g.to_data(), w.to_data(), "seed {seed}");
                    }
                }
                None => assert!(
                    redo.iter()
                        .any(|e| e.ts <= snap && e.change == RowChange::Delete),
                    "seed {seed}: refused without a visible delete"
                ),
            }
        }
    }
}
