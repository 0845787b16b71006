//! Applying committed log records: the one way data enters a tablet.
//!
//! Every replica applies the same records in log order through [`Tablet::apply`] — the
//! first time, and again after a restart for the records after the durable index. Each
//! row op goes to the store that owns its key; a store whose files already hold the
//! record's index skips it, so re-application changes nothing that survived. Whether a
//! key exists is decided here, so every replica computes the same row errors.
//!
//! An all-or-nothing record is applied only if none of its ops fails; the leader checked
//! that under row locks, so it fails here only if a bulk insert raced it onto one of its
//! keys. A record that answers a client request records its answer in the result
//! tracker; a second record of the same request (a duplicate that reached the log
//! twice) changes nothing and returns the first answer.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use cairn_common::key::encode_row_key_of;
use cairn_common::{HybridTime, Schema, Value};

use super::{Location, Tablet};
use crate::error::{Result, TabletError};
use crate::history::Row;
use crate::ops::{
    LogRecord, LoggedOp, OpKind, RequestId, RequestRecord, RowChange, RowError, RowOp,
};
use crate::results::CachedAnswer;
use crate::rowsets::Components;

/// What an op does to the row it finds.
enum Decision {
    /// Insert this new row into the MemRowSet.
    Insert(Row),
    /// Record a change on the existing row.
    Change(RowChange),
    /// Nothing to do.
    Nothing,
}

impl Tablet {
    /// Applies the committed record at log index `index`. Returns the row errors of a
    /// write — by position in the client's batch when the record answers a request
    /// ([`crate::ops::RequestRecord`]), else by position in the record; every replica
    /// computes the same.
    pub fn apply(&self, index: u64, record: &[u8]) -> Result<Vec<(usize, RowError)>> {
        self.check_healthy()?;
        let rec = LogRecord::decode(record)
            .map_err(|e| TabletError::corruption(&self.dir, format!("log entry {index}: {e}")))?;
        self.apply_failpoint()?;
        match rec {
            LogRecord::Write {
                ts,
                ops,
                atomic,
                request,
            } => {
                self.mvcc.start_at(&self.clock, ts);
                self.under_gate(index, ts, || {
                    self.apply_write(index, ts, ops, atomic, request.as_ref())
                })
            }
            LogRecord::BulkInsert { ts, ipc, request } => {
                self.mvcc.start_at(&self.clock, ts);
                let res = self.apply_bulk(index, ts, &ipc, request.as_ref());
                let gate = self.gate.read();
                self.note_applied(index, ts);
                drop(gate);
                self.mvcc.finish(ts);
                res
            }
            LogRecord::AlterSchema { schema } => {
                self.apply_alter(index, schema)?;
                Ok(Vec::new())
            }
            LogRecord::TxnWrite {
                txn,
                ts,
                ops,
                request,
            } => self.apply_txn_write(index, txn, ts, ops, request.as_ref()),
            LogRecord::TxnBeginCommit { txn, ts, role } => {
                self.apply_begin_commit(index, txn, ts, role);
                Ok(Vec::new())
            }
            LogRecord::TxnFinish {
                txn,
                commit_ts,
                ops,
            } => {
                self.apply_txn_finish(index, txn, commit_ts, ops)?;
                Ok(Vec::new())
            }
            LogRecord::SetSubspaces {
                ts,
                version,
                layouts,
            } => {
                self.apply_set_subspaces(index, ts, version, layouts);
                Ok(Vec::new())
            }
            LogRecord::ChainsDone { done } => {
                let _g = self.gate.read();
                self.unchained.done(&done);
                self.note_applied(index, HybridTime::MIN);
                Ok(Vec::new())
            }
        }
    }

    /// Applies a group-commit entry at log index `index`: row-write records
    /// ([`LogRecord::Write`], [`LogRecord::TxnWrite`]) that concurrent writers' leader
    /// logged together ([`crate::ops::encode_batch`]) so that they share one log
    /// append and fsync. They are applied in order under one hold of the write gate,
    /// so a maintenance cut falls before or after the whole entry and the records'
    /// shared index means the same to every store. Returns each record's row errors,
    /// as [`Tablet::apply`] would.
    pub fn apply_batch(
        &self,
        index: u64,
        records: &[&[u8]],
    ) -> Result<Vec<Vec<(usize, RowError)>>> {
        self.check_healthy()?;
        let mut recs = Vec::with_capacity(records.len());
        for r in records {
            let rec = LogRecord::decode(r).map_err(|e| {
                TabletError::corruption(&self.dir, format!("log entry {index}: {e}"))
            })?;
            match rec {
                LogRecord::Write { .. } | LogRecord::TxnWrite { .. } => recs.push(rec),
                _ => {
                    return Err(TabletError::corruption(
                        &self.dir,
                        format!("log entry {index}: a batch may hold only row writes"),
                    ));
                }
            }
        }
        self.apply_failpoint()?;
        let stamp = |rec: &LogRecord| match rec {
            LogRecord::Write { ts, .. } | LogRecord::TxnWrite { ts, .. } => *ts,
            _ => unreachable!("only row writes are batched"),
        };
        let mut last = HybridTime::MIN;
        for rec in &recs {
            self.mvcc.start_at(&self.clock, stamp(rec));
            last = last.max(stamp(rec));
        }
        let stamps: Vec<HybridTime> = recs.iter().map(stamp).collect();
        let gate = self.gate.read();
        let mut out = Vec::with_capacity(recs.len());
        let mut failed = None;
        for rec in recs {
            let res = match rec {
                LogRecord::Write {
                    ts,
                    ops,
                    atomic,
                    request,
                } => self.apply_write(index, ts, ops, atomic, request.as_ref()),
                LogRecord::TxnWrite {
                    txn,
                    ts,
                    ops,
                    request,
                } => self.txn_write_locked(index, txn, ts, ops, request.as_ref()),
                _ => unreachable!("only row writes are batched"),
            };
            match res {
                Ok(errs) => out.push(errs),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if failed.is_none() {
            self.note_applied(index, last);
        }
        drop(gate);
        for ts in stamps {
            self.mvcc.finish(ts);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The answer this tablet gave to client request `id`, if it still remembers it
    /// (timestamp and row errors by position in the client's batch).
    pub fn answer_of(&self, id: &RequestId) -> Option<(HybridTime, Vec<(usize, RowError)>)> {
        self.results.get(id).map(|a| (HybridTime(a.ts), a.errors))
    }

    /// Records that everything up to `index` (timestamps up to `ts`) is applied.
    /// REQUIRES: the write gate held shared, so a cut sees both or neither.
    pub(crate) fn note_applied(&self, index: u64, ts: HybridTime) {
        self.applied_index.fetch_max(index, Ordering::AcqRel);
        self.applied_ts.fetch_max(ts.0, Ordering::AcqRel);
    }

    /// The answer a request already has from another log entry, if any: the record at
    /// `index` is then a duplicate and must change nothing.
    pub(crate) fn answered_elsewhere(
        &self,
        request: Option<&RequestRecord>,
        index: u64,
    ) -> Option<CachedAnswer> {
        let r = request?;
        self.results.get(&r.id).filter(|a| a.index != index)
    }

    /// Completes the answer of a request record from the apply's row errors (by
    /// record position) and remembers it; re-application of the same entry keeps the
    /// first answer (stores that held the entry skipped their rows this time).
    pub(crate) fn answer(
        &self,
        request: Option<&RequestRecord>,
        index: u64,
        ts: HybridTime,
        errors: Vec<(usize, RowError)>,
    ) -> Vec<(usize, RowError)> {
        let Some(r) = request else {
            return errors;
        };
        if let Some(first) = self.results.get(&r.id) {
            return first.errors;
        }
        let mut all: Vec<(usize, RowError)> = r
            .early_errors
            .iter()
            .map(|(p, e)| (*p as usize, e.clone()))
            .collect();
        all.extend(errors.into_iter().map(|(p, e)| (r.position(p), e)));
        all.sort_by_key(|(i, _)| *i);
        self.results.record(
            &r.id,
            CachedAnswer {
                index,
                ts: ts.0,
                errors: all.clone(),
            },
            ts,
        );
        all
    }

    /// Applies a write record's ops.
    /// REQUIRES: the write gate held shared.
    fn apply_write(
        &self,
        index: u64,
        ts: HybridTime,
        ops: Vec<LoggedOp>,
        atomic: bool,
        request: Option<&RequestRecord>,
    ) -> Result<Vec<(usize, RowError)>> {
        if let Some(first) = self.answered_elsewhere(request, index) {
            return Ok(first.errors);
        }
        let schema = self.schema();
        let mut rows = Vec::with_capacity(ops.len());
        for op in ops {
            let mut values = vec![None; schema.num_columns()];
            for (id, v) in op.cells {
                if let Some(i) = schema.index_of_id(id) {
                    values[i] = Some(v);
                }
            }
            let op = RowOp::new(op.kind, values);
            let key = encode_row_key_of(&schema, |k| op.values.get(k).and_then(|v| v.as_ref()))?;
            rows.push((op, key));
        }
        Ok(self.apply_rows(index, ts, &schema, rows, atomic, request))
    }

    /// Applies the ops of a [`LogRecord::Write`] at `index` that this process proposed
    /// itself, from the validated ops and keys it encoded the record from
    /// ([`Tablet::start_write`]), so the record need not be decoded again. `schema` is
    /// the one they were validated against; if the table's schema changed since, the
    /// caller must apply the encoded record instead. Row errors are by position in
    /// `rows`.
    /// REQUIRES: the record is durable in the log at `index`, and `ts` is registered in
    /// flight ([`Tablet::start_write`]).
    pub fn apply_own_write(
        &self,
        index: u64,
        ts: HybridTime,
        schema: &Schema,
        rows: Vec<(RowOp, Vec<u8>)>,
        atomic: bool,
    ) -> Result<Vec<(usize, RowError)>> {
        self.check_healthy()?;
        self.apply_failpoint()?;
        Ok(self.under_gate(index, ts, || {
            self.apply_rows(index, ts, schema, rows, atomic, None)
        }))
    }

    /// Runs `apply` — the applying of the write at `index` and `ts` — under the write
    /// gate (shared), marks the record applied, and then finishes `ts` in MVCC.
    fn under_gate<R>(&self, index: u64, ts: HybridTime, apply: impl FnOnce() -> R) -> R {
        let gate = self.gate.read();
        let res = apply();
        self.note_applied(index, ts);
        drop(gate);
        self.mvcc.finish(ts);
        res
    }

    /// The `tablet::apply` failpoint: tests make applying a record fail here.
    fn apply_failpoint(&self) -> Result<()> {
        fail::fail_point!("tablet::apply", |arg| Err(TabletError::io(
            &self.dir,
            std::io::Error::other(arg.unwrap_or_else(|| "injected failure".into()))
        )));
        Ok(())
    }

    /// Applies a write record's rows (ops with their keys).
    /// REQUIRES: the write gate held shared.
    fn apply_rows(
        &self,
        index: u64,
        ts: HybridTime,
        schema: &Schema,
        rows: Vec<(RowOp, Vec<u8>)>,
        atomic: bool,
        request: Option<&RequestRecord>,
    ) -> Vec<(usize, RowError)> {
        let comps = self.components();
        if atomic {
            let failed = self.atomic_failures(&comps, &rows, index);
            if !failed.is_empty() {
                tracing::warn!(
                    index,
                    "an all-or-nothing write met a row changed since its leader checked it \
                     (a concurrent bulk insert); none of its rows was applied"
                );
                let errors = (0..rows.len())
                    .map(|p| (p, failed.get(&p).cloned().unwrap_or(RowError::Aborted)))
                    .collect();
                return self.answer(request, index, ts, errors);
            }
        }
        self.unchained
            .record(ts.0, rows.iter().map(|(_, k)| k.as_slice()));
        let mut errors = Vec::new();
        for (pos, (op, key)) in rows.into_iter().enumerate() {
            if let Err(e) = self.apply_op(schema, &comps, op, key, ts, index) {
                errors.push((pos, e));
            }
        }
        self.answer(request, index, ts, errors)
    }

    /// The ops of an all-or-nothing record that would fail, by record position. Rows
    /// whose store already holds the record (re-application) count as applied.
    ///
    /// Only an insert over a live row fails here. The leader checked every op under
    /// its row lock, and the one writer that takes no row locks, a bulk insert, only
    /// makes rows live; so an update or delete meeting no live row can only be a
    /// re-application whose row was deleted later and then dropped by a compaction
    /// past the history mark (its key is gone, so no store claims the record). Failing
    /// the record then would throw away its other rows, which replay must restore.
    fn atomic_failures(
        &self,
        comps: &Components,
        rows: &[(RowOp, Vec<u8>)],
        index: u64,
    ) -> HashMap<usize, RowError> {
        let mut live_now: HashMap<&[u8], bool> = HashMap::new();
        let mut failed = HashMap::new();
        for (pos, (op, key)) in rows.iter().enumerate() {
            let live = match live_now.get(key.as_slice()) {
                Some(l) => *l,
                None => {
                    let loc = self.locate(comps, key);
                    if self.holds(&loc, index) {
                        continue;
                    }
                    loc_live(&loc)
                }
            };
            let e = match (op.kind, live) {
                (OpKind::Insert, true) => Some(RowError::AlreadyPresent),
                _ => None,
            };
            match e {
                Some(e) => {
                    failed.insert(pos, e);
                }
                None => {
                    let after = match op.kind {
                        OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert => true,
                        OpKind::Delete | OpKind::DeleteIgnore => false,
                        OpKind::Update | OpKind::UpdateIgnore => live,
                    };
                    live_now.insert(key, after);
                }
            }
        }
        failed
    }

    /// Whether the store holding `loc` already holds every op at `index`.
    pub(crate) fn holds(&self, loc: &Location, index: u64) -> bool {
        let durable = match loc {
            Location::Disk(rs, _) => rs.durable_index(),
            _ => self.mrs_flushed_index.load(Ordering::Acquire),
        };
        index <= durable
    }

    /// Applies one row op at log index `index`, unless the store owning its key already
    /// holds that index.
    /// REQUIRES: the write gate held shared (or exclusively).
    pub(crate) fn apply_op(
        &self,
        schema: &Schema,
        comps: &Components,
        op: RowOp,
        key: Vec<u8>,
        ts: HybridTime,
        index: u64,
    ) -> std::result::Result<(), RowError> {
        let loc = self.locate(comps, &key);
        if self.holds(&loc, index) {
            return Ok(());
        }
        // The op's cells are moved into the row or change, never copied.
        let full_row = |values: Vec<Option<Value>>| -> Row {
            schema
                .columns()
                .iter()
                .zip(values)
                .map(|(c, v)| v.unwrap_or_else(|| c.read_default()))
                .collect()
        };
        let absent = matches!(loc, Location::Absent);
        let decision = match (op.kind, loc_live(&loc)) {
            (OpKind::Insert, true) => return Err(RowError::AlreadyPresent),
            (OpKind::InsertIgnore, true) => Decision::Nothing,
            (OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert, false) if absent => {
                Decision::Insert(full_row(op.values))
            }
            (OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert, false) => {
                let cells = schema.columns().iter().map(|c| c.id);
                Decision::Change(RowChange::Reinsert(
                    cells.zip(full_row(op.values)).collect(),
                ))
            }
            (OpKind::Upsert | OpKind::Update | OpKind::UpdateIgnore, true) => {
                Decision::Change(RowChange::Update(
                    op.values
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| !schema.is_key_column(*i))
                        .filter_map(|(i, v)| v.map(|v| (schema.column(i).id, v)))
                        .collect(),
                ))
            }
            (OpKind::Update | OpKind::Delete, false) => return Err(RowError::NotFound),
            (OpKind::UpdateIgnore | OpKind::DeleteIgnore, false) => Decision::Nothing,
            (OpKind::Delete | OpKind::DeleteIgnore, true) => Decision::Change(RowChange::Delete),
        };
        match (decision, loc) {
            (Decision::Insert(row), _) => comps.mrs.insert(key, row, ts, index),
            (Decision::Change(c), Location::Disk(rs, o)) => rs.dms().add(o, ts, c),
            (Decision::Change(c), Location::Mem(m, r)) => m.mutate(&r, ts, c, index),
            _ => {}
        }
        Ok(())
    }
}

/// Whether the row found at `loc` is live.
fn loc_live(loc: &Location) -> bool {
    match loc {
        Location::Disk(rs, o) => rs.is_live(*o),
        Location::Mem(_, r) => r.is_live(),
        Location::Absent => false,
    }
}
