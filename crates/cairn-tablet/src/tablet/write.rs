//! The leader's side of a write: validate a batch, lock its rows, check its conditions,
//! take its timestamp and encode the record to replicate.
//!
//! Rows that do not fit the schema get their error here and are left out of the record.
//! Conditions (`unchanged_since`, predicates) and an all-or-nothing batch's "every op
//! will succeed" are checked by the leader under the rows' locks, against state that
//! holds every write it proposed before: a row that fails is left out of the record, so
//! followers never evaluate a condition. Whether a key exists is decided again when the
//! record is applied ([`super::apply`]), in log order, identically on every replica.

use std::collections::HashMap;
use std::time::Instant;

use cairn_common::key::encode_row_key_of;
use cairn_common::{HybridTime, Schema};

use super::{Location, Tablet};
use crate::error::{Result, TabletError};
use crate::history::Row;
use crate::locks::RowLocks;
use crate::ops::{OpKind, RequestId, RequestRecord, RowError, RowOp, TxnId, encode_write_record};
use crate::rowsets::Components;

/// A leader's validated write batch, not yet replicated ([`Tablet::prepare_write`]).
#[derive(Debug)]
pub struct PreparedWrite {
    pub(crate) schema: std::sync::Arc<Schema>,
    /// (position in the caller's batch, validated op, encoded key).
    pub(super) rows: Vec<(usize, RowOp, Vec<u8>)>,
    /// The transaction it writes for ([`Tablet::prepare_txn_write`]), if any.
    pub(super) txn: Option<crate::ops::TxnId>,
    /// Rows that failed validation, by position in the caller's batch.
    pub row_errors: Vec<(usize, RowError)>,
}

impl PreparedWrite {
    /// Whether no row passed validation (nothing to replicate).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// The transaction the batch writes for, if any.
    pub fn txn(&self) -> Option<crate::ops::TxnId> {
        self.txn
    }
    /// Number of rows to replicate.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// Moves the validated ops and their keys out, in record order, leaving their
    /// batch positions ([`PreparedWrite::batch_position`]) in place.
    pub(crate) fn take_rows(&mut self) -> Vec<(RowOp, Vec<u8>)> {
        self.rows
            .iter_mut()
            .map(|(_, op, key)| {
                let empty = RowOp::new(op.kind, Vec::new());
                (std::mem::replace(op, empty), std::mem::take(key))
            })
            .collect()
    }
    /// Maps the position of a row in the replicated record back to its position in
    /// the caller's batch.
    pub fn batch_position(&self, record_pos: usize) -> usize {
        self.rows.get(record_pos).map_or(usize::MAX, |r| r.0)
    }
    /// What the record must know of the client's request `id` (positions and early
    /// errors), so that applying it yields the whole answer.
    pub fn request_record(&self, id: RequestId) -> RequestRecord {
        let positions = if self.row_errors.is_empty() {
            vec![]
        } else {
            self.rows.iter().map(|r| r.0 as u32).collect()
        };
        RequestRecord::new(id, positions, &self.row_errors)
    }
}

/// Whether two schemas have the same columns (by id) in the same order.
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.columns()
        .iter()
        .map(|c| c.id)
        .eq(b.columns().iter().map(|c| c.id))
}

/// Op `op`, whose cells follow the positions of schema `from`, with its cells at their
/// columns' positions in schema `to` (matched by column id). A column added since is
/// not given (an insert takes its default); a cell of a column dropped since is
/// left out, as if the write had come before the drop.
pub(crate) fn rebase_op(from: &Schema, to: &Schema, op: RowOp) -> RowOp {
    let mut values = vec![None; to.num_columns()];
    for (i, v) in op.values.into_iter().enumerate() {
        if let (Some(v), Some(c)) = (v, from.columns().get(i))
            && let Some(j) = to.index_of_id(c.id)
        {
            values[j] = Some(v);
        }
    }
    RowOp { values, ..op }
}

impl Tablet {
    /// Validates an op; returns it with defaults filled in (insert-like ops) and its key.
    pub(crate) fn prepare(
        &self,
        schema: &Schema,
        mut op: RowOp,
    ) -> std::result::Result<(RowOp, Vec<u8>), RowError> {
        let inv = |e: cairn_common::CommonError| RowError::Invalid(e.to_string());
        if op.values.len() != schema.num_columns() {
            return Err(RowError::Invalid(format!(
                "the op has {} cells but the table has {} columns",
                op.values.len(),
                schema.num_columns()
            )));
        }
        for &k in schema.key_indexes() {
            if op.values[k].as_ref().is_none_or(|v| v.is_null()) {
                return Err(RowError::Invalid(format!(
                    "missing value for primary key column '{}'",
                    schema.column(k).name
                )));
            }
        }
        for (i, v) in op.values.iter().enumerate() {
            if let Some(v) = v {
                schema.validate_cell(schema.column(i), v).map_err(inv)?;
            }
        }
        for p in &op.condition.predicates {
            p.validate(schema).map_err(inv)?;
        }
        for m in &op.condition.mutations {
            m.check(schema, op.kind == OpKind::Update, &op.values)
                .map_err(RowError::Invalid)?;
        }
        if matches!(op.kind, OpKind::Insert | OpKind::InsertIgnore) {
            for (i, c) in schema.columns().iter().enumerate() {
                if op.values[i].is_none() {
                    if c.default.is_none() && !c.nullable {
                        return Err(RowError::Invalid(format!(
                            "column '{}' is NOT NULL and has no default: give it a value",
                            c.name
                        )));
                    }
                    op.values[i] = Some(c.read_default());
                }
            }
        }
        if op.kind == OpKind::Upsert {
            for (i, c) in schema.columns().iter().enumerate() {
                if c.default.is_none() && !c.nullable && op.values[i].is_none() {
                    return Err(RowError::Invalid(format!(
                        "column '{}' is NOT NULL and has no default: an UPSERT must give it a value",
                        c.name
                    )));
                }
            }
        }
        let key = encode_row_key_of(schema, |k| op.values.get(k).and_then(|v| v.as_ref()))
            .map_err(inv)?;
        Ok((op, key))
    }

    /// Validates a write batch on a leader: rows that do not fit the schema get their
    /// error now and are left out of the record to replicate.
    pub fn prepare_write(&self, ops: Vec<RowOp>) -> Result<PreparedWrite> {
        self.prepare_write_from(None, ops)
    }

    /// [`Tablet::prepare_write`] of ops whose cells follow the positions of schema
    /// `decoded_with` (`None`: the tablet's). A server decodes a request with the
    /// schema of the moment; if a schema change applied since, each op is first moved
    /// to the current schema by column id ([`rebase_op`]), as if it had been decoded
    /// now.
    pub fn prepare_write_from(
        &self,
        decoded_with: Option<&Schema>,
        ops: Vec<RowOp>,
    ) -> Result<PreparedWrite> {
        self.check_healthy()?;
        let schema = self.schema();
        let from = decoded_with.filter(|d| !same_columns(d, &schema));
        let mut rows = Vec::with_capacity(ops.len());
        let mut row_errors = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            let op = match from {
                Some(d) => rebase_op(d, &schema, op),
                None => op,
            };
            match self.prepare(&schema, op) {
                Ok((op, key)) => rows.push((i, op, key)),
                Err(e) => row_errors.push((i, e)),
            }
        }
        Ok(PreparedWrite {
            schema,
            rows,
            row_errors,
            txn: None,
        })
    }

    /// Locks the rows of a prepared batch until the returned guard is dropped (after
    /// the batch is applied), so writers of one key take turns. Waits until `deadline`
    /// at most.
    /// Keys an open transaction owns ([`crate::txn`]) are waited for first — until it
    /// commits or aborts — unless the batch writes for that transaction. A
    /// transaction's batch whose wait would deadlock fails with
    /// [`TabletError::Deadlock`].
    pub fn lock_rows(&self, p: &PreparedWrite, deadline: Instant) -> Result<RowLocks> {
        let keys: Vec<&[u8]> = p.rows.iter().map(|(_, _, k)| k.as_slice()).collect();
        loop {
            match self
                .txns
                .wait_unowned(&keys, p.txn, deadline, crate::txn::DEADLOCK_TIMEOUT)
            {
                crate::txn::WaitOutcome::Free => {}
                crate::txn::WaitOutcome::TimedOut => return Err(TabletError::LockTimeout),
                crate::txn::WaitOutcome::Deadlock(owner) => {
                    return Err(TabletError::Deadlock {
                        txn: p.txn.unwrap_or(TxnId(0)),
                        owner,
                    });
                }
            }
            let locks = self
                .locks
                .lock_all(keys.iter().copied(), Some(deadline))
                .ok_or(TabletError::LockTimeout)?;
            // A key becomes owned only when a transaction's write is applied, and that
            // write held the key's row lock until then: under the locks, ownership
            // cannot change.
            if keys
                .iter()
                .all(|k| self.txns.owner(k).is_none_or(|o| Some(o) == p.txn))
            {
                return Ok(locks);
            }
        }
    }

    /// The leader's checks of a locked batch against the rows' current state: each
    /// op's condition, and for an all-or-nothing (`atomic`) batch whether every op will
    /// succeed. Ops that fail move to the batch's row errors; if an atomic batch has any
    /// error, every op does (the others as [`RowError::Aborted`]) and nothing is left to
    /// replicate.
    /// REQUIRES: the batch's row locks held, and every write this leader proposed
    /// earlier applied on it (true for rows it holds locks on: their writers release
    /// them only once applied).
    pub fn check_write(
        &self,
        p: &mut PreparedWrite,
        atomic: bool,
        deadline: Instant,
    ) -> Result<()> {
        if atomic && !p.row_errors.is_empty() {
            for (pos, _, _) in p.rows.drain(..) {
                p.row_errors.push((pos, RowError::Aborted));
            }
            p.row_errors.sort_by_key(|(i, _)| *i);
            return Ok(());
        }
        let needs_state = atomic || p.rows.iter().any(|(_, op, _)| !op.condition.is_empty());
        if !needs_state {
            return Ok(());
        }
        // Bulk inserts take no row locks: wait for those already proposed over these
        // keys, so the state checked is the state the record will meet.
        let keys: Vec<&[u8]> = p.rows.iter().map(|(_, _, k)| k.as_slice()).collect();
        if !self.pending_bulk.wait_clear(&keys, deadline) {
            return Err(TabletError::LockTimeout);
        }
        let schema = p.schema.clone();
        let comps = self.components();
        // Changes older than the ancient history mark may be forgotten (flushes and
        // compactions drop their UNDOs), so "unchanged since" a timestamp below it
        // cannot be verified: such a write conflicts, and its reader retries with a
        // fresh snapshot, as a snapshot read below the mark is refused.
        let ahm = self.ancient_history_mark();
        let txn = p.txn;
        // Liveness of keys changed earlier in this batch.
        let mut in_batch: HashMap<Vec<u8>, bool> = HashMap::new();
        // Rows as atomic operations earlier in this batch left them.
        let mut mutated: HashMap<Vec<u8>, Vec<cairn_common::Value>> = HashMap::new();
        let mut failed = Vec::new();
        for (n, (pos, op, key)) in p.rows.iter_mut().enumerate() {
            let (live, last_change) = match in_batch.get(key) {
                Some(&live) => (live, HybridTime::MAX),
                None => self.status_in(txn, &comps, key),
            };
            let mutates = !op.condition.mutations.is_empty();
            let verdict = if let Some(since) = op.condition.unchanged_since
                && (!live || last_change > since || since < ahm)
            {
                Err(RowError::Conflict)
            } else if !op.condition.predicates.is_empty()
                && !self.predicates_hold(txn, &schema, &comps, key, op, live, &in_batch)?
            {
                Err(RowError::ConditionFailed)
            } else if mutates {
                // Evaluated here, under the row lock: the record carries the results.
                let row = match mutated.get(key.as_slice()) {
                    Some(row) => Some(row.clone()),
                    None if in_batch.contains_key(key) => None,
                    None if live => self.current_row_in(txn, &comps, key)?,
                    None => None,
                };
                match row {
                    Some(row) => apply_mutations(&schema, op, row).map(|row| {
                        mutated.insert(key.clone(), row);
                    }),
                    // Changed by another kind of op earlier in the batch: its result
                    // is not known before the batch is applied.
                    None if in_batch.contains_key(key) && live => Err(RowError::Conflict),
                    None => Err(RowError::NotFound),
                }
            } else if atomic {
                match (op.kind, live) {
                    (OpKind::Insert, true) => Err(RowError::AlreadyPresent),
                    (OpKind::Update | OpKind::Delete, false) => Err(RowError::NotFound),
                    _ => Ok(()),
                }
            } else {
                Ok(())
            };
            if verdict.is_ok() && !mutates {
                mutated.remove(key.as_slice());
            }
            match verdict {
                Ok(()) => {
                    let after = match op.kind {
                        OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert => true,
                        OpKind::Delete | OpKind::DeleteIgnore => false,
                        OpKind::Update | OpKind::UpdateIgnore => live,
                    };
                    in_batch.insert(key.clone(), after);
                }
                Err(e) => failed.push((n, *pos, e)),
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        if atomic {
            let failed_at: HashMap<usize, RowError> =
                failed.into_iter().map(|(_, pos, e)| (pos, e)).collect();
            for (pos, _, _) in p.rows.drain(..) {
                let e = failed_at.get(&pos).cloned().unwrap_or(RowError::Aborted);
                p.row_errors.push((pos, e));
            }
        } else {
            for &(n, pos, ref e) in failed.iter().rev() {
                p.rows.remove(n);
                p.row_errors.push((pos, e.clone()));
            }
        }
        p.row_errors.sort_by_key(|(i, _)| *i);
        Ok(())
    }

    /// Whether `op`'s predicates hold on the row with `key` (live, not changed earlier
    /// in the same batch, and matching each of them).
    #[allow(clippy::too_many_arguments)]
    fn predicates_hold(
        &self,
        txn: Option<crate::ops::TxnId>,
        schema: &Schema,
        comps: &Components,
        key: &[u8],
        op: &RowOp,
        live: bool,
        in_batch: &HashMap<Vec<u8>, bool>,
    ) -> Result<bool> {
        if !live || in_batch.contains_key(key) {
            return Ok(false);
        }
        let Some(row) = self.current_row_in(txn, comps, key)? else {
            return Ok(false);
        };
        Ok(op.condition.predicates.iter().all(|pr| {
            schema
                .index_of(&pr.column)
                .is_ok_and(|i| pr.matches_value(&row[i]))
        }))
    }

    /// Whether the row with `key` is live now, and when it last changed
    /// ([`HybridTime::MIN`] if its history is older than the retention window).
    pub(crate) fn row_status(&self, comps: &Components, key: &[u8]) -> (bool, HybridTime) {
        match self.locate(comps, key) {
            Location::Disk(rs, o) => rs.row_status(o),
            Location::Mem(_, r) => (r.is_live(), r.last_change()),
            Location::Absent => (false, HybridTime::MIN),
        }
    }

    /// The row with `key` as it is now (`None`: absent or deleted).
    pub(crate) fn current_row(
        &self,
        schema: &Schema,
        comps: &Components,
        key: &[u8],
    ) -> Result<Option<Row>> {
        match self.locate(comps, key) {
            Location::Disk(rs, o) => rs.row_at(schema, o, HybridTime::MAX, None),
            Location::Mem(_, r) => Ok(r.state_at(schema, HybridTime::MAX)),
            Location::Absent => Ok(None),
        }
    }

    /// Takes the batch's timestamp (registered in flight until
    /// [`Tablet::finish_write`]) and encodes the record to replicate: a
    /// [`LogRecord::Write`], or for a transaction's batch
    /// ([`Tablet::prepare_txn_write`]) a [`LogRecord::TxnWrite`] of provisional
    /// writes. With `atomic`, the batch is all or nothing when applied (a
    /// transaction's batch was checked whole already); with `request`, applying it
    /// records the answer for retries of the request.
    /// REQUIRES: the caller's proposal-order lock, so log order is timestamp order.
    pub fn start_write(
        &self,
        p: &PreparedWrite,
        atomic: bool,
        request: Option<RequestRecord>,
    ) -> (HybridTime, Vec<u8>) {
        let ts = self.mvcc.start(&self.clock);
        let ops = p.rows.iter().map(|(_, op, _)| op);
        let rec = encode_write_record(ts, p.txn, atomic, request.as_ref(), &p.schema, ops);
        (ts, rec)
    }

    /// Keeps `ts` in flight once more: a [`Tablet::finish_write`] more is then
    /// needed before snapshots include it. A log owner that applies its own write
    /// ([`Tablet::apply_own_write`] finishes the timestamp) but acknowledges it only
    /// once durable holds it over the wait.
    pub fn hold_write(&self, ts: HybridTime) {
        self.mvcc.start_at(&self.clock, ts);
    }

    /// Marks a leader's write at `ts` finished (applied, or abandoned).
    pub fn finish_write(&self, ts: HybridTime) {
        self.mvcc.finish(ts);
    }
}

/// Computes `op`'s atomic operations on `row` (the row as it is now) and turns them
/// into given cells of `op`; returns the row after them.
/// REQUIRES: `op` passed [`Tablet::prepare`], and the row's lock is held.
fn apply_mutations(
    schema: &Schema,
    op: &mut RowOp,
    mut row: Vec<cairn_common::Value>,
) -> std::result::Result<Vec<cairn_common::Value>, RowError> {
    for (i, v) in op.values.iter().enumerate() {
        if let Some(v) = v {
            row[i] = v.clone();
        }
    }
    for m in std::mem::take(&mut op.condition.mutations) {
        let i = schema
            .index_of(&m.column)
            .map_err(|e| RowError::Invalid(e.to_string()))?;
        let c = schema.column(i);
        let new = m.op.apply(&row[i], &m.operand).map_err(RowError::Invalid)?;
        schema.validate_cell(c, &new).map_err(|e| {
            RowError::Invalid(format!(
                "atomic {} of column '{}': {e}",
                m.op.name(),
                c.name
            ))
        })?;
        row[i] = new.clone();
        op.values[i] = Some(new);
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use cairn_common::{AlterOp, ColumnSpec, DataType, Value};

    use super::*;

    #[test]
    fn ops_decoded_before_a_schema_change_follow_it() {
        let old = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("a", DataType::Int64).nullable(),
                ColumnSpec::new("b", DataType::String).nullable(),
            ],
            &["k"],
        )
        .unwrap();
        // `a` dropped and `c` added: as many columns as before, at other positions.
        let new = old
            .altered(&AlterOp::DropColumn("a".into()))
            .unwrap()
            .altered(&AlterOp::AddColumn(
                ColumnSpec::new("c", DataType::Int64).nullable(),
            ))
            .unwrap();
        assert!(same_columns(&old, &old) && !same_columns(&old, &new));
        let op = RowOp::new(
            OpKind::Upsert,
            vec![
                Some(Value::Int64(1)),
                Some(Value::Int64(2)),
                Some(Value::String("x".into())),
            ],
        );
        let moved = rebase_op(&old, &new, op);
        assert_eq!(
            moved.values,
            vec![Some(Value::Int64(1)), Some(Value::String("x".into())), None]
        );
        assert_eq!(moved.kind, OpKind::Upsert);
    }
}
