//! A tablet's side of multi-row transactions: provisional writes that only their
//! transaction sees, held until the transaction commits or aborts.
//!
//! The design is Kudu's (1.15+, "multi-row transactions"): a transaction's coordinator
//! sends each participant tablet its writes as they happen ([`LogRecord::TxnWrite`]),
//! then, to commit, asks every participant to prepare ([`LogRecord::TxnBeginCommit`],
//! Kudu's BEGIN_COMMIT, which answers a prepare timestamp), picks the commit timestamp
//! as the largest of them, and finishes the transaction everywhere
//! ([`LogRecord::TxnFinish`]). A transaction with one participant commits in one phase:
//! the finish record takes a fresh timestamp of its own.
//!
//! [`TxnTable`] is what applying those records builds, identically on every replica:
//!
//! - **Provisional writes.** Each open transaction keeps its ops per encoded key, in
//!   the order written. Nothing reaches the stores (MemRowSet, deltas) before the
//!   commit, so scans, flushes and compactions never meet an uncommitted row.
//! - **Ownership.** The first provisional write to a key makes the transaction its
//!   owner until it finishes. Any other writer of the key — another transaction or a
//!   single-statement write — waits for it ([`TxnTable::wait_unowned`]): this is the
//!   row lock a PostgreSQL transaction holds to its end, and because it is state
//!   rebuilt from the log rather than a leader's memory, a new leader keeps it.
//! - **Prepare holds snapshots back.** A prepared transaction's timestamp stays in
//!   flight in the tablet's MVCC until it finishes, so a snapshot at or after it waits
//!   instead of reading around a commit that is about to land below it. A maintenance
//!   cut also waits while a transaction is prepared ([`TxnTable::wait_none_committing`]):
//!   the commit's timestamp may be lower than records applied after the prepare, and
//!   a cut in between would take that commit for one already included.
//! - **Durability.** Provisional writes live in memory; their records stay in the log.
//!   The metadata file records the log position of the oldest open transaction's
//!   first record ([`TxnTable::floor`]) and the tablet's durable index stays below
//!   it, so a restart re-applies those records and finds the transaction again.
//!
//! # The status record
//!
//! A two-phase commit needs one place that says whether the transaction committed,
//! so that a coordinator dying between the prepares and the last commit leaves no
//! participant prepared for ever. Kudu keeps it in a transaction status tablet;
//! Cairn keeps it on one of the participants, the transaction's *home* (as
//! CockroachDB keeps its transaction record on the range of the first key written):
//!
//! - Each prepare names the participant's [`TxnRole`]: the home, or a participant
//!   that knows where the home is.
//! - The coordinator commits at the home first. The home's commit record — replicated
//!   by its Raft group like any record — is the decision; the other participants
//!   commit after it. A prepared home may abort alone while no decision exists.
//! - The home remembers its decisions ([`TxnTable::decision`]) in memory and in the
//!   metadata file for [`DECISION_RETENTION`], so that the answer outlives the log
//!   records it came from, across restarts.
//! - A participant whose coordinator went silent asks the home. A home that never
//!   heard of the transaction, or forgot it, aborts it first (a tombstone, itself a
//!   recorded decision), so a late commit can never land there afterwards.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use cairn_common::{HybridTime, Schema, Value};
use parking_lot::{Condvar, Mutex};

use crate::history::Row;
use crate::ops::{LoggedOp, OpKind, TxnId, TxnRole};

/// How long a transaction waits for a key owned by another, unprepared one before its
/// wait is taken for part of a deadlock across tablets. Twice PostgreSQL's
/// `deadlock_timeout`: a refusal here may be a false alarm, so it comes later.
pub const DEADLOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How many finished transactions a tablet remembers the outcome of.
const REMEMBERED_OUTCOMES: usize = 65_536;

/// How long a home tablet keeps the decision of a two-phase commit it was home of
/// (see "The status record" in the module docs). A participant left prepared for
/// longer than this — its whole tablet down the while — can no longer learn the
/// decision and stays prepared, with an error in the log.
pub const DECISION_RETENTION: std::time::Duration = std::time::Duration::from_secs(3600);

/// How a transaction ended on this tablet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Committed at this timestamp.
    Committed(HybridTime),
    /// Aborted: its provisional writes were discarded.
    Aborted,
}

/// One open transaction on this tablet.
#[derive(Debug, Clone)]
pub(crate) struct OpenTxn {
    /// Log index of its first record here.
    pub(crate) first_index: u64,
    /// Timestamp of its first record here.
    pub(crate) first_ts: HybridTime,
    /// Its ops per encoded key, in the order written.
    pub(crate) keys: BTreeMap<Vec<u8>, Vec<LoggedOp>>,
    /// The prepare timestamp, once prepared (held in flight until it finishes).
    pub(crate) prepared: Option<HybridTime>,
    /// When the last record of the transaction was applied here (for the detection of
    /// abandoned transactions).
    pub(crate) last_active: Instant,
    /// Where its status record lives, once prepared (`None` before, or for a prepare
    /// written before status records existed).
    pub(crate) role: Option<TxnRole>,
}

/// A decision a home tablet recorded (see "The status record" in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TxnDecisionRecord {
    /// The transaction.
    pub txn: u64,
    /// Its commit timestamp, or 0: aborted.
    pub commit_ts: u64,
    /// When the home recorded it (a HybridTime): it is forgotten
    /// [`DECISION_RETENTION`] later.
    pub recorded: u64,
}

impl TxnDecisionRecord {
    /// The outcome it records.
    pub fn outcome(&self) -> TxnOutcome {
        match self.commit_ts {
            0 => TxnOutcome::Aborted,
            ts => TxnOutcome::Committed(HybridTime(ts)),
        }
    }
}

/// What a tablet's tools and its server's resolver see of an open transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnInfo {
    /// The transaction.
    pub txn: TxnId,
    /// Keys it has written here.
    pub keys: usize,
    /// Its prepare timestamp, once prepared.
    pub prepared: Option<HybridTime>,
    /// Where its status record lives, once prepared.
    pub role: Option<TxnRole>,
    /// Milliseconds since its last record here was applied.
    pub idle_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    open: HashMap<TxnId, OpenTxn>,
    owners: HashMap<Vec<u8>, TxnId>,
    outcomes: HashMap<TxnId, TxnOutcome>,
    outcome_order: VecDeque<TxnId>,
    /// Decisions of the transactions this tablet is home of (durable: see
    /// [`TxnTable::decisions`]).
    decisions: HashMap<TxnId, TxnDecisionRecord>,
    committing: usize,
    /// Transactions waiting on this tablet for a key's owner: waiter -> (owner, since).
    /// The leader's memory only; it exists to find deadlocks.
    waits_for: HashMap<TxnId, (TxnId, Instant)>,
}

/// How a wait for keys owned by other transactions ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// No other transaction owns any of the keys.
    Free,
    /// The deadline passed.
    TimedOut,
    /// Waiting for this owner would (or, past the wait bound, may) deadlock.
    Deadlock(TxnId),
}

/// Whether `me` waiting for `owner` closes a cycle of waiting transactions.
fn closes_cycle(waits_for: &HashMap<TxnId, (TxnId, Instant)>, me: TxnId, owner: TxnId) -> bool {
    let mut at = owner;
    for _ in 0..=waits_for.len() {
        if at == me {
            return true;
        }
        match waits_for.get(&at) {
            Some((next, _)) => at = *next,
            None => return false,
        }
    }
    false
}

/// The open transactions of one tablet (see the module docs).
#[derive(Debug, Default)]
pub struct TxnTable {
    state: Mutex<State>,
    changed: Condvar,
}

impl TxnTable {
    /// The owner of `key`, if an open transaction wrote it.
    pub(crate) fn owner(&self, key: &[u8]) -> Option<TxnId> {
        self.state.lock().owners.get(key).copied()
    }

    /// Waits until no transaction other than `me` owns any of `keys`.
    ///
    /// A transaction (`me` is `Some`) waiting here may be part of a deadlock: it owns
    /// keys others wait for. Two rules break deadlocks. A wait that would close a
    /// cycle among the transactions waiting on this tablet is refused at once
    /// ([`WaitOutcome::Deadlock`]). A cycle across tablets cannot be seen from one, so
    /// a transaction waits at most `txn_wait` for one owner before it is refused the
    /// same way (PostgreSQL's `deadlock_timeout` plays that role there), unless the
    /// owner is prepared: it then waits for nothing but its commit. A write
    /// outside any transaction owns nothing while it waits, so it waits until
    /// `deadline`.
    pub(crate) fn wait_unowned(
        &self,
        keys: &[&[u8]],
        me: Option<TxnId>,
        deadline: Instant,
        txn_wait: std::time::Duration,
    ) -> WaitOutcome {
        let mut g = self.state.lock();
        let outcome = loop {
            let owner = keys
                .iter()
                .find_map(|k| g.owners.get(*k).filter(|o| Some(**o) != me).copied());
            let Some(owner) = owner else {
                break WaitOutcome::Free;
            };
            // A prepared owner waits for nothing but its commit: never a deadlock.
            let committing = g.open.get(&owner).is_some_and(|t| t.prepared.is_some());
            let until = match me {
                Some(m) => {
                    if committing || g.waits_for.get(&m).map(|w| w.0) != Some(owner) {
                        g.waits_for.insert(m, (owner, Instant::now()));
                    }
                    if closes_cycle(&g.waits_for, m, owner) {
                        break WaitOutcome::Deadlock(owner);
                    }
                    let since = g.waits_for.get(&m).map_or_else(Instant::now, |w| w.1);
                    if committing {
                        deadline
                    } else {
                        deadline.min(since + txn_wait)
                    }
                }
                None => deadline,
            };
            if self.changed.wait_until(&mut g, until).timed_out() {
                break if until < deadline {
                    WaitOutcome::Deadlock(owner)
                } else {
                    WaitOutcome::TimedOut
                };
            }
        };
        if let Some(m) = me {
            g.waits_for.remove(&m);
        }
        outcome
    }

    /// Whether `txn` is open here and not prepared (it may still write).
    pub(crate) fn writable(&self, txn: TxnId) -> Option<bool> {
        let g = self.state.lock();
        if let Some(t) = g.open.get(&txn) {
            return Some(t.prepared.is_none());
        }
        if g.outcomes.contains_key(&txn) || g.decisions.contains_key(&txn) {
            return Some(false);
        }
        None
    }

    /// The keys `txn` has written here, in key order.
    pub(crate) fn keys_of(&self, txn: TxnId) -> Vec<Vec<u8>> {
        self.state
            .lock()
            .open
            .get(&txn)
            .map(|t| t.keys.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// A copy of `txn`'s state, if it is open here.
    pub(crate) fn open_copy(&self, txn: TxnId) -> Option<OpenTxn> {
        self.state.lock().open.get(&txn).cloned()
    }

    /// `txn`'s ops on `key`, if it wrote it.
    pub(crate) fn ops_of(&self, txn: TxnId, key: &[u8]) -> Option<Vec<LoggedOp>> {
        self.state.lock().open.get(&txn)?.keys.get(key).cloned()
    }

    /// Records the provisional op of a [`crate::ops::LogRecord::TxnWrite`]. Returns
    /// false (and records nothing) if another transaction owns the key or `txn`
    /// already finished or prepared.
    pub(crate) fn add(
        &self,
        txn: TxnId,
        index: u64,
        ts: HybridTime,
        key: Vec<u8>,
        op: LoggedOp,
    ) -> bool {
        let mut g = self.state.lock();
        if g.outcomes.contains_key(&txn)
            || g.decisions.contains_key(&txn)
            || g.owners.get(&key).is_some_and(|o| *o != txn)
        {
            return false;
        }
        let t = g.open.entry(txn).or_insert_with(|| OpenTxn {
            first_index: index,
            first_ts: ts,
            keys: BTreeMap::new(),
            prepared: None,
            last_active: Instant::now(),
            role: None,
        });
        if t.prepared.is_some() {
            return false;
        }
        t.last_active = Instant::now();
        t.keys.entry(key.clone()).or_default().push(op);
        g.owners.insert(key, txn);
        true
    }

    /// Marks `txn` prepared at `ts`, its status record where `role` says. False if it
    /// is not open here or already prepared (then nothing holds `ts`).
    pub(crate) fn prepare(&self, txn: TxnId, ts: HybridTime, role: Option<TxnRole>) -> bool {
        let mut g = self.state.lock();
        let Some(t) = g.open.get_mut(&txn) else {
            return false;
        };
        if t.prepared.is_some() {
            return false;
        }
        t.prepared = Some(ts);
        t.role = role;
        t.last_active = Instant::now();
        g.committing += 1;
        true
    }

    /// The prepare timestamp of `txn`, if it is open and prepared here.
    pub(crate) fn prepared_at(&self, txn: TxnId) -> Option<HybridTime> {
        self.state.lock().open.get(&txn)?.prepared
    }

    /// Removes `txn` (its keys are free again) and remembers how it ended. Returns its
    /// state if it was open. At `now`, the outcome becomes a recorded decision if this
    /// tablet is the transaction's home, or if the transaction was not open here (an
    /// abort of a transaction this tablet never heard of, or forgot, is a tombstone:
    /// see "The status record" in the module docs).
    /// The caller wakes waiters with [`TxnTable::notify`] once the commit is applied.
    pub(crate) fn finish(
        &self,
        txn: TxnId,
        outcome: TxnOutcome,
        now: HybridTime,
    ) -> Option<OpenTxn> {
        let mut g = self.state.lock();
        let t = g.open.remove(&txn);
        if let Some(t) = &t {
            for k in t.keys.keys() {
                g.owners.remove(k);
            }
            if t.prepared.is_some() {
                g.committing -= 1;
            }
        }
        let home = match &t {
            Some(t) => t.role == Some(TxnRole::Home),
            None => outcome == TxnOutcome::Aborted && !g.outcomes.contains_key(&txn),
        };
        if home && !g.decisions.contains_key(&txn) {
            let commit_ts = match outcome {
                TxnOutcome::Committed(ts) => ts.0,
                TxnOutcome::Aborted => 0,
            };
            g.decisions.insert(
                txn,
                TxnDecisionRecord {
                    txn: txn.0,
                    commit_ts,
                    recorded: now.0,
                },
            );
        }
        if g.outcomes.insert(txn, outcome).is_none() {
            g.outcome_order.push_back(txn);
            while g.outcome_order.len() > REMEMBERED_OUTCOMES {
                if let Some(old) = g.outcome_order.pop_front() {
                    g.outcomes.remove(&old);
                }
            }
        }
        t
    }

    /// Wakes everyone waiting for keys or for prepared transactions.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    /// How `txn` ended here, if this tablet still remembers.
    pub fn outcome(&self, txn: TxnId) -> Option<TxnOutcome> {
        let g = self.state.lock();
        g.outcomes
            .get(&txn)
            .copied()
            .or_else(|| g.decisions.get(&txn).map(TxnDecisionRecord::outcome))
    }

    /// The decision this tablet recorded as `txn`'s home, if it did (and has not
    /// forgotten it yet).
    pub fn decision(&self, txn: TxnId) -> Option<TxnOutcome> {
        self.state
            .lock()
            .decisions
            .get(&txn)
            .map(TxnDecisionRecord::outcome)
    }

    /// The recorded decisions younger than [`DECISION_RETENTION`] at `now`, for the
    /// metadata file; older ones are forgotten here.
    pub(crate) fn decisions(&self, now: HybridTime) -> Vec<TxnDecisionRecord> {
        let keep_from = now
            .physical_micros()
            .saturating_sub(DECISION_RETENTION.as_micros() as u64);
        let mut g = self.state.lock();
        g.decisions
            .retain(|_, d| HybridTime(d.recorded).physical_micros() >= keep_from);
        let mut v: Vec<TxnDecisionRecord> = g.decisions.values().copied().collect();
        v.sort_by_key(|d| (d.recorded, d.txn));
        v
    }

    /// Loads the decisions the metadata file recorded (at open).
    pub(crate) fn load_decisions(&self, decisions: &[TxnDecisionRecord]) {
        let mut g = self.state.lock();
        for d in decisions {
            g.decisions.insert(TxnId(d.txn), *d);
        }
    }

    /// Prepared transactions not yet finished.
    pub fn committing(&self) -> usize {
        self.state.lock().committing
    }

    /// Waits until no transaction is prepared; false if `deadline` passed first.
    pub(crate) fn wait_none_committing(&self, deadline: Instant) -> bool {
        let mut g = self.state.lock();
        while g.committing > 0 {
            if self.changed.wait_until(&mut g, deadline).timed_out() {
                return g.committing == 0;
            }
        }
        true
    }

    /// The durable mark open transactions allow: (the log index before the oldest open
    /// transaction's first record, a timestamp below that record's), or `None`.
    pub(crate) fn floor(&self) -> Option<(u64, u64)> {
        self.state
            .lock()
            .open
            .values()
            .map(|t| (t.first_index.saturating_sub(1), t.first_ts.prev().0))
            .min()
    }

    /// A keep-alive from `txn`'s coordinator: marks it active now. False if this
    /// tablet aborted it.
    pub fn touch(&self, txn: TxnId) -> bool {
        let mut g = self.state.lock();
        if let Some(t) = g.open.get_mut(&txn) {
            t.last_active = Instant::now();
            return true;
        }
        g.outcomes.get(&txn) != Some(&TxnOutcome::Aborted)
    }

    /// Marks every open transaction active now. A follower does this (it sees no
    /// keep-alives), so that on becoming leader it gives each transaction's
    /// coordinator the full abandon timeout to reach it.
    pub fn touch_all(&self) {
        let now = Instant::now();
        for t in self.state.lock().open.values_mut() {
            t.last_active = now;
        }
    }

    /// The open transactions, for tools and the resolver of abandoned ones.
    pub fn list(&self) -> Vec<TxnInfo> {
        let g = self.state.lock();
        let mut v: Vec<TxnInfo> = g
            .open
            .iter()
            .map(|(id, t)| TxnInfo {
                txn: *id,
                keys: t.keys.len(),
                prepared: t.prepared,
                role: t.role.clone(),
                idle_ms: t.last_active.elapsed().as_millis() as u64,
            })
            .collect();
        v.sort_by_key(|i| i.txn);
        v
    }
}

/// A row after one provisional op: `row` is the row before it (`None`: absent or
/// deleted). Cells are named by column id; a cell the op does not name keeps its
/// value (updates) or is NULL (an insert whose defaults the leader already filled).
pub(crate) fn fold_row(schema: &Schema, row: Option<Row>, op: &LoggedOp) -> Option<Row> {
    let set = |mut r: Row, keys_too: bool| {
        for (id, v) in &op.cells {
            if let Some(i) = schema.index_of_id(*id)
                && (keys_too || !schema.is_key_column(i))
            {
                r[i] = v.clone();
            }
        }
        r
    };
    let fresh = || set(vec![Value::Null; schema.num_columns()], true);
    match (op.kind, row) {
        (OpKind::Insert | OpKind::InsertIgnore, Some(r)) => Some(r),
        (OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert, None) => Some(fresh()),
        (OpKind::Upsert | OpKind::Update | OpKind::UpdateIgnore, Some(r)) => Some(set(r, false)),
        (OpKind::Update | OpKind::UpdateIgnore, None) => None,
        (OpKind::Delete | OpKind::DeleteIgnore, _) => None,
    }
}

/// Whether a row is live after `ops`, given whether it was live before them.
pub(crate) fn live_after(mut live: bool, ops: &[LoggedOp]) -> bool {
    for op in ops {
        live = match op.kind {
            OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert => true,
            OpKind::Delete | OpKind::DeleteIgnore => false,
            OpKind::Update | OpKind::UpdateIgnore => live,
        };
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::{ColumnSpec, DataType};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::Int64).nullable(),
            ],
            &["k"],
        )
        .unwrap()
    }

    fn op(kind: OpKind, k: i64, v: Option<i64>) -> LoggedOp {
        let mut cells = vec![(0, Value::Int64(k))];
        if let Some(v) = v {
            cells.push((1, Value::Int64(v)));
        }
        LoggedOp { kind, cells }
    }

    #[test]
    fn fold_follows_row_op_semantics() {
        let s = schema();
        let row = |v| Some(vec![Value::Int64(1), Value::Int64(v)]);
        assert_eq!(fold_row(&s, None, &op(OpKind::Insert, 1, Some(5))), row(5));
        assert_eq!(
            fold_row(&s, row(5), &op(OpKind::Update, 1, Some(6))),
            row(6)
        );
        assert_eq!(fold_row(&s, None, &op(OpKind::Update, 1, Some(6))), None);
        assert_eq!(
            fold_row(&s, row(5), &op(OpKind::Upsert, 1, Some(7))),
            row(7)
        );
        assert_eq!(fold_row(&s, row(5), &op(OpKind::Delete, 1, None)), None);
        assert_eq!(
            fold_row(&s, row(5), &op(OpKind::InsertIgnore, 1, Some(9))),
            row(5)
        );
        assert!(live_after(
            false,
            &[op(OpKind::Insert, 1, None), op(OpKind::Update, 1, None)]
        ));
        assert!(!live_after(
            true,
            &[op(OpKind::Delete, 1, None), op(OpKind::Update, 1, None)]
        ));
    }

    #[test]
    fn ownership_waits_and_floor() {
        let t = std::sync::Arc::new(TxnTable::default());
        assert!(t.add(
            TxnId(1),
            10,
            HybridTime(100),
            b"a".to_vec(),
            op(OpKind::Insert, 1, None)
        ));
        assert!(!t.add(
            TxnId(2),
            11,
            HybridTime(101),
            b"a".to_vec(),
            op(OpKind::Insert, 1, None)
        ));
        assert!(t.add(
            TxnId(2),
            12,
            HybridTime(102),
            b"b".to_vec(),
            op(OpKind::Insert, 2, None)
        ));
        assert_eq!(t.floor(), Some((9, 99)));
        let soon = Instant::now() + std::time::Duration::from_millis(20);
        let hour = std::time::Duration::from_secs(3600);
        assert_eq!(
            t.wait_unowned(&[b"a"], Some(TxnId(2)), soon, hour),
            WaitOutcome::TimedOut
        );
        assert_eq!(
            t.wait_unowned(&[b"a"], Some(TxnId(1)), soon, hour),
            WaitOutcome::Free
        );
        assert!(t.prepare(TxnId(1), HybridTime(200), None));
        assert_eq!(t.committing(), 1);
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            t2.finish(
                TxnId(1),
                TxnOutcome::Committed(HybridTime(210)),
                HybridTime(220),
            );
            t2.notify();
        });
        let later = Instant::now() + std::time::Duration::from_secs(10);
        assert_eq!(
            t.wait_unowned(&[b"a"], None, later, hour),
            WaitOutcome::Free
        );
        assert!(t.wait_none_committing(later));
        h.join().unwrap();
        assert_eq!(
            t.outcome(TxnId(1)),
            Some(TxnOutcome::Committed(HybridTime(210)))
        );
        // A finished transaction takes no more writes.
        assert!(!t.add(
            TxnId(1),
            13,
            HybridTime(103),
            b"c".to_vec(),
            op(OpKind::Insert, 3, None)
        ));
        assert_eq!(t.floor(), Some((11, 101)));
        assert_eq!(t.list().len(), 1);
    }

    #[test]
    fn deadlocks_are_refused() {
        let t = std::sync::Arc::new(TxnTable::default());
        for (txn, key) in [(1, b"a"), (2, b"b")] {
            assert!(t.add(
                TxnId(txn),
                10 + txn,
                HybridTime(100 + txn),
                key.to_vec(),
                op(OpKind::Insert, txn as i64, None)
            ));
        }
        let hour = std::time::Duration::from_secs(3600);
        let later = Instant::now() + hour;
        // Transaction 1 waits for "b" (owned by 2) ...
        let t1 = t.clone();
        let waiter =
            std::thread::spawn(move || t1.wait_unowned(&[b"b"], Some(TxnId(1)), later, hour));
        while !t.state.lock().waits_for.contains_key(&TxnId(1)) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // ... so 2 waiting for "a" (owned by 1) closes a cycle: refused at once.
        assert_eq!(
            t.wait_unowned(&[b"a"], Some(TxnId(2)), later, hour),
            WaitOutcome::Deadlock(TxnId(1))
        );
        // 2 aborts; 1 gets its key.
        t.finish(TxnId(2), TxnOutcome::Aborted, HybridTime(300));
        t.notify();
        assert_eq!(waiter.join().unwrap(), WaitOutcome::Free);
        assert!(t.state.lock().waits_for.is_empty());
        // Past the bound, a transaction's wait is refused as a possible deadlock
        // (a cycle through other tablets), a plain write's is not.
        let short = std::time::Duration::from_millis(20);
        assert_eq!(
            t.wait_unowned(&[b"a"], Some(TxnId(3)), later, short),
            WaitOutcome::Deadlock(TxnId(1))
        );
        let soon = Instant::now() + short;
        assert_eq!(
            t.wait_unowned(&[b"a"], None, soon, short),
            WaitOutcome::TimedOut
        );
    }

    #[test]
    fn homes_record_decisions_and_tombstones() {
        let t = TxnTable::default();
        let hour_us = DECISION_RETENTION.as_micros() as u64;
        let at = |us: u64| HybridTime::from_micros(us);
        // Home of 1: its commit is a decision.
        assert!(t.add(
            TxnId(1),
            10,
            HybridTime(100),
            b"a".to_vec(),
            op(OpKind::Insert, 1, None)
        ));
        assert!(t.prepare(TxnId(1), HybridTime(200), Some(TxnRole::Home)));
        t.finish(TxnId(1), TxnOutcome::Committed(HybridTime(210)), at(1_000));
        assert_eq!(
            t.decision(TxnId(1)),
            Some(TxnOutcome::Committed(HybridTime(210)))
        );
        // A mere participant of 2 records no decision.
        let role = TxnRole::Participant {
            table_id: "t".into(),
            tablet_id: "x".into(),
        };
        assert!(t.add(
            TxnId(2),
            11,
            HybridTime(101),
            b"b".to_vec(),
            op(OpKind::Insert, 2, None)
        ));
        assert!(t.prepare(TxnId(2), HybridTime(201), Some(role)));
        t.finish(TxnId(2), TxnOutcome::Committed(HybridTime(211)), at(1_000));
        assert_eq!(t.decision(TxnId(2)), None);
        // An abort of a transaction never seen here is a tombstone: no later write of it.
        t.finish(TxnId(3), TxnOutcome::Aborted, at(2_000));
        assert_eq!(t.decision(TxnId(3)), Some(TxnOutcome::Aborted));
        assert!(!t.add(
            TxnId(3),
            12,
            HybridTime(102),
            b"c".to_vec(),
            op(OpKind::Insert, 3, None)
        ));
        // Decisions survive a reload, and are forgotten after the retention.
        let kept = t.decisions(at(1_500 + hour_us));
        assert_eq!(kept.iter().map(|d| d.txn).collect::<Vec<_>>(), vec![3]);
        let again = TxnTable::default();
        again.load_decisions(&kept);
        assert_eq!(again.decision(TxnId(3)), Some(TxnOutcome::Aborted));
        assert_eq!(again.writable(TxnId(3)), Some(false));
        assert!(again.decisions(at(2_001 + hour_us)).is_empty());
    }
}
