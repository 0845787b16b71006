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

/// A delete (`None`) or re-insert (its cells) seen by [`NewestFirst`]: when, and its
/// visit number.
type Reset = (
    HybridTime,
    u64,
    Option<Vec<(cairn_common::ColumnId, Value)>>,
);

/// One row as of a snapshot, built from its changes visited *newest first* — what a
/// point read needs when a row has many changes (a hot key's REDO deltas): replaying
/// them all oldest first costs a copy of every change, while newest first stops at
/// the latest delete or re-insert, or once every column has its latest value.
///
/// Feed [`NewestFirst::visit`] each source's changes at or below the snapshot, newest
/// first within the source (sources may come in any order — each value is kept with
/// its timestamp — but the changes of one write are in one source), then
/// [`NewestFirst::finish`] with the row the changes apply to.
pub(crate) struct NewestFirst<'a> {
    schema: &'a Schema,
    snap: HybridTime,
    /// The newest value seen for each column, with its timestamp and visit number.
    cols: Vec<Option<(HybridTime, u64, Value)>>,
    /// Columns that updates can set (the non-key ones) not set yet.
    unset: usize,
    /// The newest delete (`None`) or re-insert (its cells) seen: when, its visit
    /// number and the cells.
    reset: Option<Reset>,
    /// Changes visited so far. Changes of one write share its timestamp; among them,
    /// the one visited first is the newer (a source is read newest first).
    visits: u64,
}

impl<'a> NewestFirst<'a> {
    /// An empty fold for a read at `snap`.
    pub(crate) fn new(schema: &'a Schema, snap: HybridTime) -> Self {
        NewestFirst {
            schema,
            snap,
            cols: vec![None; schema.num_columns()],
            unset: schema.num_columns() - schema.key_indexes().len(),
            reset: None,
            visits: 0,
        }
    }

    /// Takes one change of a source; false when the source's older changes cannot
    /// matter any more (the caller stops reading that source).
    pub(crate) fn visit(&mut self, ts: HybridTime, change: &RowChange) -> bool {
        if ts > self.snap {
            return true;
        }
        if self.reset.as_ref().is_some_and(|(r, _, _)| ts < *r) {
            return false;
        }
        self.visits += 1;
        let visit = self.visits;
        match change {
            RowChange::Update(cells) => {
                for (id, v) in cells {
                    if let Some(i) = self.schema.index_of_id(*id) {
                        match &self.cols[i] {
                            Some((t, _, _)) if *t >= ts => {}
                            old => {
                                if old.is_none() && !self.schema.is_key_column(i) {
                                    self.unset -= 1;
                                }
                                self.cols[i] = Some((ts, visit, v.clone()));
                            }
                        }
                    }
                }
                // Older updates matter only for columns still unset, or set by a
                // change older than this one (from another source).
                self.unset > 0
                    || self.cols.iter().enumerate().any(|(i, c)| {
                        !self.schema.is_key_column(i) && c.as_ref().is_some_and(|(t, _, _)| *t < ts)
                    })
            }
            RowChange::Delete | RowChange::Reinsert(_) => {
                if self.reset.as_ref().is_none_or(|(r, _, _)| *r < ts) {
                    let cells = match change {
                        RowChange::Reinsert(c) => Some(c.clone()),
                        _ => None,
                    };
                    self.reset = Some((ts, visit, cells));
                }
                false
            }
        }
    }

    /// The row at the snapshot: `base` (the row the changes apply to, `None` if it
    /// does not exist) is read only if no delete or re-insert was seen and some
    /// column kept its base value.
    pub(crate) fn finish(
        self,
        base: impl FnOnce() -> crate::error::Result<Option<Row>>,
    ) -> crate::error::Result<Option<Row>> {
        // An update counts if it came after the reset: a later timestamp, or the same
        // write's later op (visited earlier).
        let after =
            |t: HybridTime, visit: u64, (r, at): (HybridTime, u64)| t > r || (t == r && visit < at);
        let schema = self.schema;
        let all_after = |reset: (HybridTime, u64)| {
            schema.num_columns() > schema.key_indexes().len()
                && self.cols.iter().enumerate().all(|(i, c)| {
                    schema.is_key_column(i)
                        || c.as_ref()
                            .is_some_and(|(t, visit, _)| after(*t, *visit, reset))
                })
        };
        let (mut row, since) = match &self.reset {
            // Updates after a delete mean the row came back: a source was left early
            // (every column had its value) before its re-insert was seen.
            Some((r, at, None)) if all_after((*r, *at)) => match base()? {
                Some(b) => (b, Some((*r, *at))),
                None => return Ok(None),
            },
            Some((_, _, None)) => return Ok(None),
            Some((r, at, Some(cells))) => (row_from_cells(schema, cells), Some((*r, *at))),
            None => match base()? {
                Some(b) => (b, None),
                None => return Ok(None),
            },
        };
        for (i, c) in self.cols.into_iter().enumerate() {
            let Some((t, visit, v)) = c else {
                continue;
            };
            if since.is_none_or(|reset| after(t, visit, reset)) {
                row[i] = v;
            }
        }
        Ok(Some(row))
    }
}

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

    /// The newest-first fold gives the row that replaying every change oldest first
    /// gives, whatever the changes (updates of some columns, deletes, re-inserts,
    /// several ops of one write sharing a timestamp), however they are spread over
    /// sources and whatever the snapshot.
    #[test]
    fn newest_first_matches_replay() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int32),
                ColumnSpec::new("a", DataType::Int32).nullable(),
                ColumnSpec::new("b", DataType::Int32).nullable(),
            ],
            &["k"],
        )
        .unwrap();
        let ids: Vec<_> = schema.columns().iter().map(|c| c.id).collect();
        for seed in 0..3000u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let base = vec![Value::Int32(1), Value::Int32(10), Value::Int32(20)];
            // (ts, change) in log order; live tracks what a tablet would accept.
            let mut changes: Vec<(HybridTime, RowChange)> = vec![];
            let mut live = true;
            let mut ts = 100u64;
            for _ in 0..rng.random_range(0..14) {
                if rng.random_bool(0.7) {
                    ts += 1;
                }
                let c = if live {
                    match rng.random_range(0..6) {
                        0 => {
                            live = false;
                            RowChange::Delete
                        }
                        1 => {
                            RowChange::Update(vec![(ids[1], Value::Int32(rng.random_range(0..99)))])
                        }
                        2 => {
                            RowChange::Update(vec![(ids[2], Value::Int32(rng.random_range(0..99)))])
                        }
                        _ => RowChange::Update(vec![
                            (ids[1], Value::Int32(rng.random_range(0..99))),
                            (ids[2], Value::Int32(rng.random_range(0..99))),
                        ]),
                    }
                } else {
                    live = true;
                    RowChange::Reinsert(vec![
                        (ids[0], Value::Int32(1)),
                        (ids[1], Value::Int32(rng.random_range(0..99))),
                    ])
                };
                changes.push((HybridTime(ts), c));
            }
            let snap = HybridTime(rng.random_range(99..ts + 2));
            let mut want = Some(base.clone());
            for (t, c) in &changes {
                if *t <= snap {
                    apply_change(&schema, &mut want, c);
                }
            }
            // Split into up to three sources by time (as files, frozen and active
            // stores are; one write's changes are always in one source), visited in
            // a random order, each newest first.
            let boundary = |mut i: usize| {
                while i > 0 && i < changes.len() && changes[i - 1].0 == changes[i].0 {
                    i -= 1;
                }
                i
            };
            let cut1 = boundary(rng.random_range(0..=changes.len()));
            let cut2 = boundary(rng.random_range(cut1..=changes.len())).max(cut1);
            let mut sources = vec![&changes[..cut1], &changes[cut1..cut2], &changes[cut2..]];
            if rng.random_bool(0.5) {
                sources.reverse();
            }
            let mut fold = NewestFirst::new(&schema, snap);
            for src in sources {
                for (t, c) in src.iter().rev() {
                    if !fold.visit(*t, c) {
                        break;
                    }
                }
            }
            let got = fold.finish(|| Ok(Some(base.clone()))).unwrap();
            assert_eq!(got, want, "seed {seed}: {changes:?} at {snap:?}");
        }
    }
}
