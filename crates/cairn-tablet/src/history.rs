//! Row versions and their conversion into base data + UNDO + REDO deltas.
//!
//! Flush and compaction both start from each row's *history*: its versions in timestamp
//! order (`None` = deleted). They write the latest live version as the base row, the
//! inverse of every earlier transition as UNDO deltas (so snapshot reads can go back in
//! time) and a trailing delete, if any, as a REDO delta — exactly Kudu's layout (paper
//! §4.5-4.6). UNDOs older than the *ancient history mark* are dropped (history GC), and
//! a row deleted before that mark is dropped entirely.

use cairn_common::{HybridTime, Schema, Value};

use crate::ops::RowChange;

/// A full row, one value per schema column.
pub type Row = Vec<Value>;

/// Applies `change` to a row state (`None` = no live row).
pub fn apply_change(schema: &Schema, state: &mut Option<Row>, change: &RowChange) {
    match change {
        RowChange::Update(cells) => {
            if let Some(row) = state {
                for (id, v) in cells {
                    if let Some(i) = schema.index_of_id(*id) {
                        row[i] = v.clone();
                    }
                }
            }
        }
        RowChange::Delete => *state = None,
        RowChange::Reinsert(cells) => *state = Some(row_from_cells(schema, cells)),
    }
}

/// A full row from `(column id, value)` cells; columns not given read as their default.
pub fn row_from_cells(schema: &Schema, cells: &[(cairn_common::ColumnId, Value)]) -> Row {
    let mut row: Row = schema.columns().iter().map(|c| c.read_default()).collect();
    for (id, v) in cells {
        if let Some(i) = schema.index_of_id(*id) {
            row[i] = v.clone();
        }
    }
    row
}

/// All cells of a row as `(column id, value)`.
pub fn row_cells(schema: &Schema, row: &[Value]) -> Vec<(cairn_common::ColumnId, Value)> {
    schema
        .columns()
        .iter()
        .zip(row)
        .map(|(c, v)| (c.id, v.clone()))
        .collect()
}

/// A row's versions in ascending timestamp order. `versions[0]` is live; its timestamp
/// is `HybridTime::MIN` when the row's origin has been garbage-collected.
#[derive(Clone, Debug)]
pub struct RowHistory {
    /// Encoded primary key.
    pub key: Vec<u8>,
    /// `(timestamp, state)` pairs.
    pub versions: Vec<(HybridTime, Option<Row>)>,
}

/// A row as it is written into a new DiskRowSet.
#[derive(Clone, Debug)]
pub struct FlushedRow {
    /// Encoded primary key.
    pub key: Vec<u8>,
    /// The base row: the latest live version.
    pub base: Row,
    /// UNDO deltas, ascending timestamps.
    pub undos: Vec<(HybridTime, RowChange)>,
    /// REDO deltas (at most a trailing delete), ascending timestamps.
    pub redos: Vec<(HybridTime, RowChange)>,
}

fn diff(schema: &Schema, from: &[Value], to: &[Value]) -> RowChange {
    RowChange::Update(
        schema
            .columns()
            .iter()
            .zip(from.iter().zip(to))
            .filter(|(_, (a, b))| a != b)
            .map(|(c, (_, b))| (c.id, b.clone()))
            .collect(),
    )
}

/// Converts a history into base + deltas, dropping history older than `ahm`. Returns
/// `None` if the row was deleted before `ahm` and can be forgotten.
pub fn flush_row(schema: &Schema, h: RowHistory, ahm: HybridTime) -> Option<FlushedRow> {
    let v = &h.versions;
    let b = v.iter().rposition(|(_, s)| s.is_some())?;
    if let Some((del_ts, None)) = v.last()
        && *del_ts < ahm
    {
        return None;
    }
    let mut undos = Vec::new();
    if v[0].0 != HybridTime::MIN && v[0].0 >= ahm {
        undos.push((v[0].0, RowChange::Delete));
    }
    for i in 1..=b {
        let ts = v[i].0;
        if ts < ahm {
            continue;
        }
        let undo = match (&v[i - 1].1, &v[i].1) {
            (None, Some(_)) => RowChange::Delete,
            (Some(prev), None) => RowChange::Reinsert(row_cells(schema, prev)),
            (Some(prev), Some(cur)) => diff(schema, cur, prev),
            (None, None) => continue,
        };
        undos.push((ts, undo));
    }
    let redos = v[b + 1..]
        .iter()
        .map(|(ts, _)| (*ts, RowChange::Delete))
        .take(1)
        .collect();
    let mut v = h.versions;
    let base = v.swap_remove(b).1?;
    Some(FlushedRow {
        key: h.key,
        base,
        undos,
        redos,
    })
}

/// Rebuilds a row's history from a base row and its UNDO / REDO deltas (each ascending
/// by timestamp), keeping only versions at or before `upto`.
pub fn history_from_deltas(
    schema: &Schema,
    key: Vec<u8>,
    base: Row,
    undos: &[(HybridTime, RowChange)],
    redos: &[(HybridTime, RowChange)],
    upto: HybridTime,
) -> RowHistory {
    // Walk UNDOs backwards to recover earlier versions.
    let mut earlier: Vec<(HybridTime, Option<Row>)> = Vec::new();
    let mut state = Some(base.clone());
    let mut base_ts = HybridTime::MIN;
    for (ts, change) in undos.iter().rev() {
        earlier.push((*ts, state.clone()));
        apply_change(schema, &mut state, change);
    }
    if let Some((ts, _)) = undos.last() {
        base_ts = *ts;
    }
    // `earlier` holds (ts, version starting at ts) in descending order; the state left
    // in `state` is the version before the oldest UNDO (absent if that UNDO undid an insert).
    earlier.reverse();
    let mut versions: Vec<(HybridTime, Option<Row>)> = Vec::new();
    if state.is_some() {
        versions.push((HybridTime::MIN, state));
    }
    versions.extend(earlier);
    if versions.is_empty() {
        versions.push((base_ts, Some(base)));
    }
    let mut cur = versions.last().and_then(|(_, s)| s.clone());
    for (ts, change) in redos {
        if *ts > upto {
            break;
        }
        apply_change(schema, &mut cur, change);
        versions.push((*ts, cur.clone()));
    }
    // The first version must be live: drop a leading deleted stretch.
    while versions.len() > 1 && versions[0].1.is_none() {
        versions.remove(0);
    }
    RowHistory { key, versions }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::{ColumnSpec, DataType};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int32),
                ColumnSpec::new("v", DataType::Int32).nullable(),
            ],
            &["k"],
        )
        .unwrap()
    }

    fn state_at(schema: &Schema, f: &FlushedRow, s: HybridTime) -> Option<Row> {
        let mut st = Some(f.base.clone());
        for (ts, u) in f.undos.iter().rev() {
            if *ts > s {
                apply_change(schema, &mut st, u);
            }
        }
        for (ts, r) in &f.redos {
            if *ts <= s {
                apply_change(schema, &mut st, r);
            }
        }
        st
    }

    #[test]
    fn flush_and_rebuild_preserve_every_version() {
        let s = schema();
        let r = |v: i32| Some(vec![Value::Int32(1), Value::Int32(v)]);
        let versions = vec![
            (HybridTime(10), r(1)),
            (HybridTime(20), r(2)),
            (HybridTime(30), None),
            (HybridTime(40), r(4)),
            (HybridTime(50), None),
        ];
        let h = RowHistory {
            key: vec![1],
            versions: versions.clone(),
        };
        let f = flush_row(&s, h, HybridTime::MIN).unwrap();
        for t in [5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55] {
            let want = versions
                .iter()
                .rev()
                .find(|(ts, _)| ts.0 <= t)
                .and_then(|(_, s)| s.clone());
            assert_eq!(state_at(&s, &f, HybridTime(t)), want, "at {t}");
        }
        let rebuilt = history_from_deltas(
            &s,
            vec![1],
            f.base.clone(),
            &f.undos,
            &f.redos,
            HybridTime::MAX,
        );
        assert_eq!(rebuilt.versions, versions);
        // History GC: deleted before the mark → forgotten.
        let h = RowHistory {
            key: vec![1],
            versions,
        };
        assert!(flush_row(&s, h, HybridTime(60)).is_none());
    }
}
