//! Multi-row transactions on this tablet: the leader's steps (write provisionally,
//! prepare, finish) and applying their records (see [`crate::txn`] for the model).
//!
//! A transaction's write goes the way of any write — validate, lock the rows, check
//! conditions, take a timestamp under the proposal lock — except that its conditions
//! see the transaction's own earlier writes, and applying it records the ops in the
//! [`crate::txn::TxnTable`] instead of the stores. The commit applies each key's net
//! effect as one op at the commit timestamp, so one commit is one version per row.

use cairn_common::key::encode_row_key_of;
use cairn_common::{HybridTime, Value};

use super::Tablet;
use crate::error::{Result, TabletError};
use crate::history::Row;
use crate::ops::{LogRecord, LoggedOp, OpKind, RequestRecord, RowError, RowOp, TxnId, TxnRole};
use crate::rowsets::Components;
use crate::txn::{TxnOutcome, TxnTable, fold_row, live_after};

use super::PreparedWrite;

/// How a transaction ends on a tablet ([`Tablet::start_finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnDecision {
    /// Commit at the given timestamp (a prepared participant of a two-phase commit),
    /// or, with `None`, at a fresh timestamp of this tablet's (a one-phase commit:
    /// the transaction wrote only here).
    Commit(Option<HybridTime>),
    /// Discard its provisional writes.
    Abort,
}

impl Tablet {
    /// The encoded primary keys transaction `txn` has written on this tablet, in key
    /// order (empty when it is not open here). A point leader reads them before the
    /// commit, to chain the committed rows into the table's subspaces.
    pub fn txn_keys(&self, txn: TxnId) -> Vec<Vec<u8>> {
        self.txns.keys_of(txn)
    }

    /// The tablet's open transactions.
    pub fn txns(&self) -> &TxnTable {
        &self.txns
    }

    /// [`Tablet::prepare_write`] for a write of transaction `txn`: the later steps
    /// (locks, checks, record) act for the transaction. Refused once the transaction
    /// ended or prepared here.
    pub fn prepare_txn_write(&self, txn: TxnId, ops: Vec<RowOp>) -> Result<PreparedWrite> {
        self.prepare_txn_write_from(txn, None, ops)
    }

    /// [`Tablet::prepare_txn_write`] of ops decoded with schema `decoded_with` (see
    /// [`Tablet::prepare_write_from`]).
    pub fn prepare_txn_write_from(
        &self,
        txn: TxnId,
        decoded_with: Option<&cairn_common::Schema>,
        ops: Vec<RowOp>,
    ) -> Result<PreparedWrite> {
        if self.txns.writable(txn) == Some(false) {
            return Err(TabletError::TxnNotOpen {
                txn,
                state: match self.txns.outcome(txn) {
                    Some(TxnOutcome::Committed(_)) => "committed".into(),
                    Some(TxnOutcome::Aborted) => "aborted".into(),
                    None => "preparing to commit".into(),
                },
            });
        }
        let mut p = self.prepare_write_from(decoded_with, ops)?;
        p.txn = Some(txn);
        Ok(p)
    }

    /// Whether the row with `key` is live for a writer acting for `txn`, and when it
    /// last changed: the committed row with the transaction's own ops applied, which
    /// never count as a conflicting change.
    pub(crate) fn status_in(
        &self,
        txn: Option<TxnId>,
        comps: &Components,
        key: &[u8],
    ) -> (bool, HybridTime) {
        let (live, last) = self.row_status(comps, key);
        match txn.and_then(|t| self.txns.ops_of(t, key)) {
            Some(ops) => (live_after(live, &ops), HybridTime::MIN),
            None => (live, last),
        }
    }

    /// The row with `key` as a writer acting for `txn` sees it now.
    pub(crate) fn current_row_in(
        &self,
        txn: Option<TxnId>,
        comps: &Components,
        key: &[u8],
    ) -> Result<Option<Row>> {
        let schema = self.schema();
        let row = self.current_row(&schema, comps, key)?;
        Ok(match txn.and_then(|t| self.txns.ops_of(t, key)) {
            Some(ops) => ops.iter().fold(row, |r, op| fold_row(&schema, r, op)),
            None => row,
        })
    }

    /// Reads one row by primary key as transaction `txn` sees it: a row it wrote as
    /// its writes left it — applied to the newest committed row, which they were
    /// checked against and which nobody else can change while the transaction owns
    /// the key — and any other row as committed at `snapshot`.
    pub fn get_in_txn(
        &self,
        txn: TxnId,
        key: &[Value],
        snapshot: HybridTime,
    ) -> Result<Option<Row>> {
        let refs: Vec<&Value> = key.iter().collect();
        let enc = cairn_common::key::encode_values(&refs)?;
        match self.txns.ops_of(txn, &enc) {
            Some(_) => self.current_row_in(Some(txn), &self.components(), &enc),
            None => self.get(key, super::ReadMode::Snapshot(snapshot)),
        }
    }

    /// Prepares `txn` to commit (the first phase): takes the prepare timestamp —
    /// registered in flight, released with [`Tablet::finish_write`] once the record
    /// is applied; applying it holds the timestamp again until the transaction
    /// finishes — and encodes the record. The coordinator commits at the largest
    /// prepare timestamp of its participants, or later. `role` says where the
    /// transaction's status record lives (see [`crate::txn`]).
    /// REQUIRES: the caller's proposal-order lock.
    pub fn start_begin_commit(
        &self,
        txn: TxnId,
        role: Option<TxnRole>,
    ) -> Result<(HybridTime, Vec<u8>)> {
        self.check_healthy()?;
        if let Some(ts) = self.txns.prepared_at(txn) {
            return Err(TabletError::InvalidRequest(format!(
                "{txn} is already prepared here (at {ts:?})"
            )));
        }
        if self.txns.writable(txn) != Some(true) {
            return Err(TabletError::TxnNotOpen {
                txn,
                state: match self.txns.outcome(txn) {
                    Some(TxnOutcome::Committed(_)) => "committed".into(),
                    Some(TxnOutcome::Aborted) => "aborted".into(),
                    None => "it wrote nothing here".into(),
                },
            });
        }
        let ts = self.mvcc.start(&self.clock);
        Ok((ts, LogRecord::TxnBeginCommit { txn, ts, role }.encode()))
    }

    /// Ends `txn` here. Returns the record to log and the timestamp registered in
    /// flight for it (release it with [`Tablet::finish_write`] once applied), or
    /// `None` when there is nothing to log: the transaction already ended the same
    /// way (a retry). A commit of an aborted transaction, a two-phase commit of an
    /// unprepared one or below its prepare timestamp, and a one-phase commit of a
    /// prepared one are refused.
    /// REQUIRES: the caller's proposal-order lock.
    pub fn start_finish(
        &self,
        txn: TxnId,
        decision: TxnDecision,
    ) -> Result<Option<(Option<HybridTime>, Vec<u8>)>> {
        self.check_healthy()?;
        match (self.txns.outcome(txn), decision) {
            (Some(TxnOutcome::Committed(_)), TxnDecision::Commit(_))
            | (Some(TxnOutcome::Aborted), TxnDecision::Abort) => return Ok(None),
            (Some(TxnOutcome::Aborted), TxnDecision::Commit(_)) => {
                return Err(TabletError::TxnNotOpen {
                    txn,
                    state: "aborted".into(),
                });
            }
            (Some(TxnOutcome::Committed(_)), TxnDecision::Abort) => {
                return Err(TabletError::TxnNotOpen {
                    txn,
                    state: "committed".into(),
                });
            }
            (None, _) => {}
        }
        let prepared = self.txns.prepared_at(txn);
        let ts = match decision {
            TxnDecision::Abort => None,
            TxnDecision::Commit(Some(cts)) => {
                match prepared {
                    Some(p) if cts >= p => {}
                    Some(p) => {
                        return Err(TabletError::InvalidRequest(format!(
                            "{txn} cannot commit at {cts:?}: it was prepared here at {p:?}, \
                             and a commit must not be earlier than any participant's prepare"
                        )));
                    }
                    None => {
                        return Err(TabletError::InvalidRequest(format!(
                            "{txn} is not prepared here: prepare every participant \
                             (BeginCommit) before a two-phase commit"
                        )));
                    }
                }
                self.mvcc.start_at(&self.clock, cts);
                Some(cts)
            }
            TxnDecision::Commit(None) => {
                if prepared.is_some() {
                    return Err(TabletError::InvalidRequest(format!(
                        "{txn} is prepared here: commit it at the coordinator's timestamp"
                    )));
                }
                Some(self.mvcc.start(&self.clock))
            }
        };
        let ops = match (ts, self.txns.open_copy(txn)) {
            (Some(_), Some(t)) => t.keys.into_values().flatten().collect(),
            _ => Vec::new(),
        };
        let rec = LogRecord::TxnFinish {
            txn,
            commit_ts: ts,
            ops,
        };
        Ok(Some((ts, rec.encode())))
    }

    /// Applies a [`LogRecord::TxnWrite`]: records each op as the transaction's
    /// provisional write. An op whose key another transaction owns, or of a
    /// transaction that already ended or prepared here, gets a row error (the leader
    /// refuses both; only a record proposed by a deposed leader could meet them).
    pub(super) fn apply_txn_write(
        &self,
        index: u64,
        txn: TxnId,
        ts: HybridTime,
        ops: Vec<LoggedOp>,
        request: Option<&RequestRecord>,
    ) -> Result<Vec<(usize, RowError)>> {
        self.mvcc.start_at(&self.clock, ts);
        let gate = self.gate.read();
        let res = self.txn_write_locked(index, txn, ts, ops, request);
        self.note_applied(index, ts);
        drop(gate);
        self.mvcc.finish(ts);
        res
    }

    /// The work of [`Tablet::apply_txn_write`]: records each op as the transaction's
    /// provisional write.
    /// REQUIRES: the write gate held shared; the caller notes the index applied.
    pub(super) fn txn_write_locked(
        &self,
        index: u64,
        txn: TxnId,
        ts: HybridTime,
        ops: Vec<LoggedOp>,
        request: Option<&RequestRecord>,
    ) -> Result<Vec<(usize, RowError)>> {
        if let Some(first) = self.answered_elsewhere(request, index) {
            return Ok(first.errors);
        }
        let schema = self.schema();
        let mut errors = Vec::new();
        for (pos, op) in ops.into_iter().enumerate() {
            let key = logged_key(&schema, &op)?;
            if !self.txns.add(txn, index, ts, key, op) {
                errors.push((pos, RowError::Conflict));
            }
        }
        Ok(self.answer(request, index, ts, errors))
    }

    /// Applies a [`LogRecord::TxnBeginCommit`]: the prepare timestamp stays in flight
    /// until the transaction finishes.
    pub(super) fn apply_begin_commit(
        &self,
        index: u64,
        txn: TxnId,
        ts: HybridTime,
        role: Option<TxnRole>,
    ) {
        self.mvcc.start_at(&self.clock, ts);
        let gate = self.gate.read();
        let held = self.txns.prepare(txn, ts, role);
        self.note_applied(index, ts);
        drop(gate);
        if !held {
            self.mvcc.finish(ts);
        }
    }

    /// Applies a [`LogRecord::TxnFinish`]: a commit writes each key's net effect at
    /// the commit timestamp, as one op, while the transaction still owns the keys;
    /// then the keys are freed, the prepare timestamp released and waiters woken.
    /// The commit's ops come from the record, not from the transaction's state here:
    /// a restart may apply the record again without the records before it.
    pub(super) fn apply_txn_finish(
        &self,
        index: u64,
        txn: TxnId,
        commit_ts: Option<HybridTime>,
        ops: Vec<LoggedOp>,
    ) -> Result<()> {
        let res = match commit_ts {
            Some(cts) => {
                self.mvcc.start_at(&self.clock, cts);
                let gate = self.gate.read();
                let res = self.apply_commit(index, txn, cts, ops);
                self.note_applied(index, cts);
                drop(gate);
                self.mvcc.finish(cts);
                res
            }
            None => Ok(()),
        };
        let outcome = commit_ts.map_or(TxnOutcome::Aborted, TxnOutcome::Committed);
        if let Some(t) = self.txns.finish(txn, outcome, self.clock.now())
            && let Some(p) = t.prepared
        {
            self.mvcc.finish(p);
        }
        self.txns.notify();
        res
    }

    /// Writes a committing transaction's net effect on each key at `cts`.
    /// REQUIRES: the write gate held shared.
    fn apply_commit(
        &self,
        index: u64,
        txn: TxnId,
        cts: HybridTime,
        ops: Vec<LoggedOp>,
    ) -> Result<()> {
        let schema = self.schema();
        let comps = self.components();
        let mut keys: std::collections::BTreeMap<Vec<u8>, Vec<LoggedOp>> = Default::default();
        for op in ops {
            keys.entry(logged_key(&schema, &op)?).or_default().push(op);
        }
        self.unchained
            .record(cts.0, keys.keys().map(|k| k.as_slice()));
        for (key, ops) in &keys {
            let before = self.current_row(&schema, &comps, key)?;
            let was_live = before.is_some();
            let after = ops.iter().fold(before, |r, op| fold_row(&schema, r, op));
            let op = match after {
                Some(row) => RowOp::new(OpKind::Upsert, row.into_iter().map(Some).collect()),
                None if was_live => {
                    let mut values = vec![None; schema.num_columns()];
                    let mut key_row = vec![Value::Null; schema.num_columns()];
                    for op in ops {
                        for (id, v) in &op.cells {
                            if let Some(i) = schema.index_of_id(*id)
                                && schema.is_key_column(i)
                            {
                                key_row[i] = v.clone();
                            }
                        }
                    }
                    for &k in schema.key_indexes() {
                        values[k] = Some(key_row[k].clone());
                    }
                    RowOp::new(OpKind::Delete, values)
                }
                None => continue,
            };
            if let Err(e) = self.apply_op(&schema, &comps, op, key.clone(), cts, index) {
                // Only a bulk insert that took no row locks can change an owned key.
                tracing::warn!(%txn, index, error = ?e, "a committed transaction's row could not be applied");
            }
        }
        Ok(())
    }
}

/// The encoded primary key of a logged op (cells named by column id).
fn logged_key(schema: &cairn_common::Schema, op: &LoggedOp) -> Result<Vec<u8>> {
    Ok(encode_row_key_of(schema, |k| {
        let id = schema.column(k).id;
        op.cells.iter().find(|(c, _)| *c == id).map(|(_, v)| v)
    })?)
}
