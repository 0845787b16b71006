//! One tablet replica: the tablet as a Raft state machine, the leader's write path and
//! how reads choose their snapshot.
//!
//! **Writes** ([`TabletReplica::write`]): validate the batch, lock its rows, check its
//! conditions (and, for an all-or-nothing batch, that every row will succeed), then
//! under the proposal lock take the timestamp and submit the record to Raft — so log
//! order is timestamp order — and wait for this leader to apply it. The row locks and
//! the in-flight timestamp are held until the record is applied or can no longer be
//! (leadership lost), also after the client's deadline passed: the waiting moves to a
//! background task and the client gets `Unavailable`, so a leader cut off from its
//! followers answers in bounded time and pins no threads. A batch whose every row
//! failed its check changes nothing and is not logged; its answer is a read of the
//! leader's state, so it waits for the same confirmation of leadership as a read.
//!
//! **Exactly once**: a write with a request id that this tablet has already answered
//! gets that answer again (the answers are replicated with the writes, see
//! [`cairn_tablet::results`]); one whose first attempt is still running here waits for
//! it.
//!
//! **Reads**: a read served by the leader — `READ_LATEST` or a snapshot — is served
//! only once the leader has confirmed its leadership with a quorum
//! ([`RaftGroup::confirm_leadership`]) *after* waiting for the snapshot to be safe, so
//! a deposed leader in a minority partition, or one that was paused, never answers
//! from stale state, nor from state its successor's records change while it reads. A
//! snapshot read on a follower asks the leader which log index makes the snapshot
//! safe (the leader confirms its leadership after the same wait) and waits to apply
//! it; every wait has a deadline.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn_common::{HybridClock, HybridTime, Partition, PartitionSchema, SchemaMeta};
use cairn_consensus::ConsensusError;
use cairn_consensus::{RaftGroup, SmError, StateMachine};
use cairn_tablet::locks::RowLocks;
use cairn_tablet::ops::{decode_batch, decode_row_errors, encode_row_errors};
use cairn_tablet::tablet::PreparedWrite;
use cairn_tablet::{
    MaintenanceManager, ReadMode, RequestId, RowError, RowOp, Tablet, TabletOptions, TxnDecision,
    TxnId, TxnOutcome, TxnRole,
};
use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

use crate::error::{Result, TserverError};
use crate::proposer::{Proposer, join_answers};

/// The largest autocommit batch whose rows [`TabletReplica::write`] tries to lock on
/// the calling task, before it moves to a blocking thread (see `prepare_locked`).
const INLINE_WRITE_OPS: usize = 8;

/// What a replica records about itself (`replica.json`, written last at creation).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ReplicaMeta {
    /// The tablet.
    pub tablet_id: String,
    /// Its table.
    pub table_id: String,
    /// The table's name when the replica was created.
    pub table_name: String,
    /// The table's partition schema.
    pub partition_schema: PartitionSchema,
    /// The slice of the table this tablet holds.
    pub partition: Partition,
    /// The schema the tablet was created with.
    pub initial_schema: SchemaMeta,
    /// The table's subspaces, which this tablet's leader chains every change into
    /// ([`crate::chain`]); empty for most tables.
    #[serde(default)]
    pub subspaces: Vec<cairn_hyperspace::SubspaceEntry>,
    /// Set on a subspace's region tablets: the table whose privileges govern them.
    #[serde(default)]
    pub privileges_of: Option<String>,
}

/// The tablet as a replicated state machine. Holds the tablet behind a lock because a
/// tablet copy replaces it wholesale.
pub struct TabletSm {
    dir: PathBuf,
    opts: TabletOptions,
    clock: Arc<HybridClock>,
    tablet: RwLock<Arc<Tablet>>,
    maint: Mutex<Option<MaintenanceManager>>,
    /// The table has subspaces: the tablet tracks the changes to chain into them.
    chained: bool,
}

impl TabletSm {
    /// Opens (or creates, with `schema`) the tablet in `dir`. A `chained` tablet (of
    /// a table with subspaces) tracks the changes its leader must chain into them
    /// ([`cairn_tablet::unchained`]).
    pub fn open(
        dir: &Path,
        schema: Option<cairn_common::Schema>,
        opts: TabletOptions,
        clock: Arc<HybridClock>,
        chained: bool,
    ) -> Result<Arc<TabletSm>> {
        let tablet = match schema {
            Some(s) if !dir.join(cairn_tablet::metadata::METADATA_FILE).exists() => {
                Tablet::create(dir, s, opts.clone(), clock.clone())?
            }
            _ => Tablet::open(dir, opts.clone(), clock.clone())?,
        };
        if chained {
            tablet.unchained().track();
        }
        let maint = MaintenanceManager::start(tablet.clone());
        Ok(Arc::new(TabletSm {
            dir: dir.to_path_buf(),
            opts,
            clock,
            tablet: RwLock::new(tablet),
            maint: Mutex::new(Some(maint)),
            chained,
        }))
    }

    /// The current tablet.
    pub fn tablet(&self) -> Arc<Tablet> {
        self.tablet.read().clone()
    }

    /// Stops maintenance and the tablet.
    pub fn shutdown(&self) {
        if let Some(m) = self.maint.lock().take() {
            m.stop();
        }
        self.tablet().shutdown();
    }
}

impl StateMachine for TabletSm {
    fn apply(&self, index: u64, data: &[u8]) -> Result<Vec<u8>, SmError> {
        let t = self.tablet();
        let res = match decode_batch(data) {
            Ok(Some(records)) => t.apply_batch(index, &records).map(|all| {
                let parts: Vec<Vec<u8>> = all.iter().map(|e| encode_row_errors(e)).collect();
                join_answers(&parts)
            }),
            Ok(None) => t.apply(index, data).map(|errs| encode_row_errors(&errs)),
            Err(e) => Err(cairn_tablet::TabletError::corruption(
                &self.dir,
                format!("log entry {index}: {e}"),
            )),
        };
        match res {
            Ok(answer) => Ok(answer),
            Err(e) => {
                // The replica cannot go on (its group stops): say so to the master,
                // which replaces it.
                t.fail(format!("applying log entry {index} failed: {e}"));
                Err(e.into())
            }
        }
    }

    fn durable_index(&self) -> u64 {
        self.tablet().durable_index()
    }

    fn flush(&self) -> Result<(), SmError> {
        // A tablet copy may replace the tablet meanwhile: retry on the new one.
        loop {
            let t = self.tablet();
            match t.flush_all() {
                Err(cairn_tablet::TabletError::ShutDown) if !Arc::ptr_eq(&t, &self.tablet()) => {}
                r => return Ok(r?),
            }
        }
    }

    fn checkpoint(&self, into: &Path) -> Result<(Vec<PathBuf>, u64), SmError> {
        loop {
            let t = self.tablet();
            match t.checkpoint_files(into) {
                Err(cairn_tablet::TabletError::ShutDown) if !Arc::ptr_eq(&t, &self.tablet()) => {}
                r => return Ok(r?),
            }
        }
    }

    fn restore(&self, from: &Path) -> Result<(), SmError> {
        if let Some(m) = self.maint.lock().take() {
            m.stop();
        }
        let old = self.tablet();
        old.shutdown();
        let aside = self.dir.with_extension("replaced");
        let _ = std::fs::remove_dir_all(&aside);
        std::fs::rename(&self.dir, &aside)?;
        std::fs::rename(from, &self.dir)?;
        if let Some(parent) = self.dir.parent() {
            cairn_tablet::metadata::sync_dir(parent)?;
        }
        let t = Tablet::open(&self.dir, self.opts.clone(), self.clock.clone())?;
        if self.chained {
            t.unchained().track();
        }
        *self.tablet.write() = t.clone();
        *self.maint.lock() = Some(MaintenanceManager::start(t));
        let _ = std::fs::remove_dir_all(&aside);
        Ok(())
    }
}

/// How a write is to be applied.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// All or nothing.
    pub atomic: bool,
    /// The client's request id, for exactly-once answers.
    pub request: Option<RequestId>,
    /// When the caller stops waiting.
    pub deadline: Instant,
    /// The multi-row transaction the rows are provisional writes of, if any.
    pub txn: Option<TxnId>,
    /// The schema the ops' cells were decoded with (`None`: the tablet's current
    /// one); see [`cairn_tablet::Tablet::prepare_write_from`].
    pub decoded_with: Option<Arc<cairn_common::Schema>>,
}

/// A step of a transaction on one tablet ([`TabletReplica::txn_control`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnStep {
    /// Prepare: the first phase of a two-phase commit; the role says where the
    /// transaction's status record lives (`None`: an older coordinator's prepare).
    BeginCommit(Option<TxnRole>),
    /// Commit or abort.
    Finish(TxnDecision),
    /// The coordinator is alive (no log record).
    KeepAlive,
}

/// A transaction's state as its home tablet tells it ([`TabletReplica::txn_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeState {
    /// Not decided: open or prepared at the home.
    Pending,
    /// Committed at this timestamp.
    Committed(HybridTime),
    /// Aborted.
    Aborted,
    /// The home no longer knows (the asker was prepared longer ago than the home
    /// keeps decisions).
    Unknown,
}

/// How a participant asks a transaction's home tablet for its state: (home table id,
/// home tablet id, transaction, the participant's prepare timestamp) → the state.
/// The tablet server provides it (it knows the masters and has channels); a
/// participant's resolver calls it for prepared transactions whose coordinator went
/// silent.
pub type AskHome = Arc<
    dyn Fn(
            String,
            String,
            TxnId,
            HybridTime,
        ) -> futures::future::BoxFuture<'static, std::result::Result<HomeState, String>>
        + Send
        + Sync,
>;

/// A write's answer: its timestamp and row errors by position in the caller's batch.
pub type WriteAnswer = (HybridTime, Vec<(usize, RowError)>);

/// Attempts of requests in progress on this leader, so a retry waits for the first
/// attempt instead of racing it.
type InFlight = Mutex<HashMap<(String, u64), tokio::sync::watch::Receiver<Option<WriteAnswer>>>>;

/// A tablet replica on this server.
pub struct TabletReplica {
    /// Identity and partition.
    pub meta: ReplicaMeta,
    /// The state machine.
    pub sm: Arc<TabletSm>,
    /// The Raft group member.
    pub group: Arc<RaftGroup>,
    /// Serialises "take a timestamp, queue for the log" so log order is timestamp
    /// order.
    propose: tokio::sync::Mutex<()>,
    /// The queue into the log (group commit).
    proposer: Arc<Proposer>,
    in_flight: InFlight,
    /// The table's subspaces parsed from the tablet's last `SetSubspaces` record, by
    /// its version.
    layouts: Mutex<Option<(u64, Arc<Vec<cairn_hyperspace::SubspaceEntry>>)>>,
    /// The subspaces the replica was created with.
    created_with: Arc<Vec<cairn_hyperspace::SubspaceEntry>>,
}

impl std::fmt::Debug for TabletReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TabletReplica({})", self.meta.tablet_id)
    }
}

/// A leader's record on its way to Raft, and how to answer the client once applied
/// ([`TabletReplica::replicate`]).
struct Proposal<H, F> {
    tablet: Arc<Tablet>,
    /// The record carries the client's request: applying it yields the whole answer.
    answered_by_record: bool,
    /// Rows that failed before replication, by position in the client's batch.
    early: Vec<(usize, RowError)>,
    /// Maps a position in the record to the position in the client's batch.
    to_batch: F,
    /// Held until the record is applied or can no longer be (row locks, the bulk
    /// insert's pending keys).
    hold: H,
    /// Publishes the answer to retries of the same request waiting here.
    done: Option<tokio::sync::watch::Sender<Option<WriteAnswer>>>,
    /// Unregisters the attempt when dropped.
    guard: InFlightGuard,
    /// Runs after the answer is known, before it is returned (a failpoint).
    reply_failpoint: fn(),
    deadline: Instant,
    /// A row write, which may share its log entry with others (group commit).
    batchable: bool,
}

/// What a request attempt found when it registered.
enum Attempt {
    /// This tablet already answered it.
    Answered(WriteAnswer),
    /// Another attempt is running here: its answer arrives on this channel.
    Running(tokio::sync::watch::Receiver<Option<WriteAnswer>>),
    /// This attempt runs it; the sender publishes the answer.
    First(Option<tokio::sync::watch::Sender<Option<WriteAnswer>>>),
}

impl TabletReplica {
    /// Wraps an opened state machine and group.
    pub fn new(meta: ReplicaMeta, sm: Arc<TabletSm>, group: Arc<RaftGroup>) -> Self {
        TabletReplica {
            created_with: Arc::new(meta.subspaces.clone()),
            meta,
            sm,
            proposer: Proposer::new(group.clone()),
            group,
            propose: tokio::sync::Mutex::new(()),
            in_flight: Mutex::new(HashMap::new()),
            layouts: Mutex::new(None),
        }
    }

    /// The table's subspaces as this replica knows them: those the last applied
    /// `SetSubspaces` record set (`ALTER TABLE … ADD/DROP SUBSPACE`), else those the
    /// replica was created with. Empty for most tables.
    pub fn subspaces(&self) -> Arc<Vec<cairn_hyperspace::SubspaceEntry>> {
        let Some(set) = self.tablet().subspaces() else {
            return self.created_with.clone();
        };
        let mut cached = self.layouts.lock();
        if let Some((v, l)) = cached.as_ref()
            && *v == set.version
        {
            return l.clone();
        }
        match serde_json::from_slice::<Vec<cairn_hyperspace::SubspaceEntry>>(&set.layouts) {
            Ok(l) => {
                let l = Arc::new(l);
                *cached = Some((set.version, l.clone()));
                l
            }
            Err(e) => {
                // Written by this code's own encoder: unreadable only if corrupt.
                self.tablet()
                    .fail(format!("unreadable subspace layouts: {e}"));
                self.created_with.clone()
            }
        }
    }

    /// The version of the subspace layouts the tablet applied and the timestamp from
    /// which every change is chained into them (`(0, 0)`: none set since creation).
    pub fn subspaces_version(&self) -> (u64, u64) {
        self.tablet()
            .subspaces()
            .map_or((0, 0), |s| (s.version, s.ts))
    }

    /// Replicates the table's subspaces `layouts` (JSON) at catalog version `version`
    /// unless the tablet has that version or a newer one, and waits (until
    /// `deadline`) for it to apply. Returns the version and timestamp the tablet has.
    pub async fn set_subspaces(
        &self,
        version: u64,
        layouts: Vec<u8>,
        deadline: Instant,
    ) -> Result<(u64, u64)> {
        let have = self.subspaces_version();
        if have.0 >= version {
            return Ok(have);
        }
        serde_json::from_slice::<Vec<cairn_hyperspace::SubspaceEntry>>(&layouts).map_err(|e| {
            TserverError::InvalidArgument(format!("malformed subspace layouts: {e}"))
        })?;
        let rx = {
            let _order = self.propose.lock().await;
            let (_, rec) = self.tablet().start_set_subspaces(version, layouts);
            self.proposer.submit(rec, false)
        };
        tokio::time::timeout_at(deadline, rx)
            .await
            .map_err(|_| deadline_passed())?
            .unwrap_or(Err(ConsensusError::ShutDown))?;
        Ok(self.subspaces_version())
    }

    /// The tablet.
    pub fn tablet(&self) -> Arc<Tablet> {
        self.sm.tablet()
    }

    /// What group commit did on this replica while it led.
    pub fn proposer_stats(&self) -> crate::proposer::ProposerStats {
        self.proposer.stats()
    }

    /// Looks up `request` (None: no request id) among answered and running attempts.
    fn register(&self, tablet: &Tablet, request: Option<&RequestId>) -> Attempt {
        let Some(id) = request else {
            return Attempt::First(None);
        };
        if let Some(a) = tablet.answer_of(id) {
            return Attempt::Answered(a);
        }
        let mut m = self.in_flight.lock();
        let key = (id.client_id.clone(), id.seq_no);
        if let Some(rx) = m.get(&key) {
            return Attempt::Running(rx.clone());
        }
        let (tx, rx) = tokio::sync::watch::channel(None);
        m.insert(key, rx);
        Attempt::First(Some(tx))
    }

    /// Answers a write that changed nothing and so never reached the log: every row
    /// failed a check (a condition, a missing or present key) against this leader's
    /// state. That answer is a read, and is only true if no other leader has changed
    /// the rows meanwhile, so leadership is confirmed first (the read-index step, or
    /// the lease), as for a `READ_LATEST` scan. A deposed leader that has not heard of
    /// its successor would otherwise report a stale "condition failed" for a
    /// compare-and-set that the new state satisfies.
    async fn answer_unlogged(
        &self,
        tablet: &Tablet,
        row_errors: Vec<(usize, RowError)>,
        deadline: Instant,
    ) -> Result<WriteAnswer> {
        self.group.confirm_leadership(deadline).await?;
        Ok((tablet.safe_time(), row_errors))
    }

    /// Waits for another attempt's answer until `deadline`.
    async fn await_other(
        mut rx: tokio::sync::watch::Receiver<Option<WriteAnswer>>,
        deadline: Instant,
    ) -> Result<WriteAnswer> {
        let waited = tokio::time::timeout_at(deadline, rx.wait_for(|a| a.is_some())).await;
        match waited {
            Ok(Ok(a)) => a
                .clone()
                .ok_or_else(|| TserverError::Internal("an attempt's answer vanished".into())),
            // The first attempt ended without an answer (it failed): retry.
            Ok(Err(_)) => Err(TserverError::Unavailable(
                "an earlier attempt of this request failed; retry".into(),
            )),
            Err(_) => Err(deadline_passed()),
        }
    }

    /// The leader's write path (see the module docs). Returns the write's timestamp
    /// and the per-row errors (by position in `ops`).
    pub async fn write(self: &Arc<Self>, ops: Vec<RowOp>, wo: WriteOptions) -> Result<WriteAnswer> {
        self.group.check_leader_ready()?;
        let tablet = self.tablet();
        let done = match self.register(&tablet, wo.request.as_ref()) {
            Attempt::Answered(a) => return Ok(a),
            Attempt::Running(rx) => return Self::await_other(rx, wo.deadline).await,
            Attempt::First(tx) => tx,
        };
        let guard = InFlightGuard {
            replica: self.clone(),
            key: wo.request.as_ref().map(|r| (r.client_id.clone(), r.seq_no)),
        };
        let deadline = wo.deadline;
        let atomic = wo.atomic;
        let txn = wo.txn;
        let (prepared, locks) =
            Self::prepare_locked(&tablet, ops, wo.decoded_with, txn, atomic, deadline).await?;
        if prepared.is_empty() {
            // Nothing to replicate, nothing changed: a retry recomputes the same.
            drop(locks);
            return self
                .answer_unlogged(&tablet, prepared.row_errors, deadline)
                .await;
        }
        let record = wo.request.clone().map(|id| prepared.request_record(id));
        let answered_by_record = record.is_some();
        let early = prepared.row_errors.clone();
        let t = tablet.clone();
        let prepared = Arc::new(prepared);
        let p = prepared.clone();
        self.replicate(
            Proposal {
                tablet,
                answered_by_record,
                early,
                to_batch: move |i| prepared.batch_position(i),
                hold: locks,
                done,
                guard,
                // Tests make the answer late here, as a slow network would.
                reply_failpoint: || fail::fail_point!("tserver::write::reply"),
                deadline,
                batchable: true,
            },
            move || t.start_write(&p, atomic, record),
        )
        .await
    }

    /// Prepares a write, locks its rows and checks it (see [`Tablet::lock_rows`] and
    /// [`Tablet::check_write`]). A small autocommit batch is tried here first without
    /// waiting for anything: most keyed writes find their rows unlocked, and a trip
    /// to a blocking thread and back (two thread switches) costs more than the write.
    /// When a lock is taken, or the batch is large or a transaction's, the work moves
    /// to a blocking thread that waits until `deadline`.
    async fn prepare_locked(
        tablet: &Arc<Tablet>,
        ops: Vec<RowOp>,
        decoded_with: Option<Arc<cairn_common::Schema>>,
        txn: Option<TxnId>,
        atomic: bool,
        deadline: Instant,
    ) -> Result<(PreparedWrite, RowLocks)> {
        /// What the blocking thread starts from.
        enum Start {
            Prepared(PreparedWrite),
            Ops(Vec<RowOp>, Option<TxnId>),
        }
        let start = if txn.is_none() && ops.len() <= INLINE_WRITE_OPS {
            let mut p = tablet.prepare_write_from(decoded_with.as_deref(), ops)?;
            match Self::lock_and_check(tablet, &mut p, atomic, std::time::Instant::now()) {
                Ok(locks) => return Ok((p, locks)),
                // Only waiting would have helped (the checks change nothing before
                // they can time out).
                Err(TserverError::Tablet(cairn_tablet::TabletError::LockTimeout)) => {
                    Start::Prepared(p)
                }
                Err(e) => return Err(e),
            }
        } else {
            Start::Ops(ops, txn)
        };
        let t = tablet.clone();
        tokio::task::spawn_blocking(move || {
            let mut p = match start {
                Start::Prepared(p) => p,
                Start::Ops(ops, Some(txn)) => {
                    t.prepare_txn_write_from(txn, decoded_with.as_deref(), ops)?
                }
                Start::Ops(ops, None) => t.prepare_write_from(decoded_with.as_deref(), ops)?,
            };
            let locks = Self::lock_and_check(&t, &mut p, atomic, deadline.into_std())?;
            Ok((p, locks))
        })
        .await
        .map_err(|e| TserverError::Internal(format!("write task failed: {e}")))?
    }

    /// Locks the rows of `p` and checks it against their state, waiting until
    /// `deadline` at most ([`cairn_tablet::TabletError::LockTimeout`] after it).
    fn lock_and_check(
        t: &Tablet,
        p: &mut PreparedWrite,
        atomic: bool,
        deadline: std::time::Instant,
    ) -> Result<RowLocks> {
        let locks = t.lock_rows(p, deadline)?;
        t.check_write(p, atomic, deadline)?;
        Ok(locks)
    }

    /// Prepares, commits or aborts transaction `txn` on this leader
    /// ([`cairn_tablet::txn`]): under the proposal lock the tablet checks the step and
    /// takes its timestamp, the record is submitted to Raft, and the answer waits for
    /// it to be applied. Returns the prepare timestamp (`BeginCommit`) or the commit
    /// timestamp (a commit); an abort, or a step the transaction already took,
    /// answers at once with what the tablet knows.
    pub async fn txn_control(
        self: &Arc<Self>,
        txn: TxnId,
        step: TxnStep,
        deadline: Instant,
    ) -> Result<Option<HybridTime>> {
        self.group.check_leader_ready()?;
        let tablet = self.tablet();
        if let TxnStep::KeepAlive = step {
            return if tablet.txns().touch(txn) {
                Ok(None)
            } else {
                Err(cairn_tablet::TabletError::TxnNotOpen {
                    txn,
                    state: "aborted: its coordinator went silent".into(),
                }
                .into())
            };
        }
        let (ts, rx) = {
            let _order = self.propose.lock().await;
            let (ts, rec) = match step {
                TxnStep::KeepAlive => unreachable!("answered above"),
                TxnStep::BeginCommit(role) => {
                    let (ts, rec) = tablet.start_begin_commit(txn, role)?;
                    (Some(ts), rec)
                }
                TxnStep::Finish(d) => match tablet.start_finish(txn, d)? {
                    Some(r) => r,
                    None => {
                        return Ok(match tablet.txns().outcome(txn) {
                            Some(cairn_tablet::TxnOutcome::Committed(ts)) => Some(ts),
                            _ => None,
                        });
                    }
                },
            };
            (ts, self.proposer.submit(rec, false))
        };
        let waiter = tokio::spawn(async move {
            let res = rx.await.unwrap_or(Err(ConsensusError::ShutDown));
            if let Some(ts) = ts {
                tablet.finish_write(ts);
            }
            res
        });
        match tokio::time::timeout_at(deadline, waiter).await {
            Ok(joined) => {
                joined.map_err(|e| TserverError::Internal(format!("txn task failed: {e}")))??;
                Ok(ts)
            }
            Err(_) => Err(deadline_passed()),
        }
    }

    /// The home tablet's side of [`HomeState`]: how transaction `txn` stands here,
    /// for a participant prepared at `prepared_at` whose coordinator went silent.
    /// Answers from the recorded decision or outcome, `Pending` while the transaction
    /// is open or prepared here, and otherwise aborts it first (a replicated
    /// tombstone: the transaction can no longer commit here) unless `prepared_at` is
    /// older than decisions are kept, which is `Unknown`. Leadership is confirmed
    /// first, so a deposed home never answers from stale state.
    pub async fn txn_status(
        self: &Arc<Self>,
        txn: TxnId,
        prepared_at: HybridTime,
        deadline: Instant,
    ) -> Result<HomeState> {
        self.group.confirm_leadership(deadline).await?;
        let tablet = self.tablet();
        let known = |tablet: &Tablet| match tablet.txns().outcome(txn) {
            Some(TxnOutcome::Committed(ts)) => Some(HomeState::Committed(ts)),
            Some(TxnOutcome::Aborted) => Some(HomeState::Aborted),
            None if tablet.txns().list().iter().any(|t| t.txn == txn) => Some(HomeState::Pending),
            None => None,
        };
        if let Some(s) = known(&tablet) {
            return Ok(s);
        }
        let oldest = tablet
            .clock()
            .now()
            .minus_micros(cairn_tablet::txn::DECISION_RETENTION.as_micros() as u64);
        if prepared_at < oldest {
            return Ok(HomeState::Unknown);
        }
        match self
            .txn_control(txn, TxnStep::Finish(TxnDecision::Abort), deadline)
            .await
        {
            Ok(_) => {}
            // Committed meanwhile (it cannot be: it was unknown here), or the like:
            // what the tablet knows now is the answer.
            Err(TserverError::Tablet(cairn_tablet::TabletError::TxnNotOpen { .. })) => {}
            Err(e) => return Err(e),
        }
        Ok(known(&tablet).unwrap_or(HomeState::Aborted))
    }

    /// Resolves the transactions whose coordinator has sent nothing (no write, no
    /// keep-alive) for `idle`, if this replica leads; a follower marks them all
    /// active instead (see `TxnTable::touch_all`):
    /// - an unprepared transaction is aborted;
    /// - a prepared one whose status record lives here (its home) is aborted: no
    ///   decision exists yet, and this abort is the decision;
    /// - a prepared one whose home is another tablet gets that home's decision
    ///   (`ask_home`) and commits or aborts accordingly; while the home has not
    ///   decided, it waits;
    /// - a prepared one from a coordinator older than status records is left alone.
    ///
    /// Returns how many were resolved.
    pub async fn resolve_abandoned(self: &Arc<Self>, idle: Duration, ask_home: &AskHome) -> usize {
        let txns = self.tablet();
        if self.group.check_leader_ready().is_err() {
            txns.txns().touch_all();
            return 0;
        }
        let mut resolved = 0;
        for t in txns.txns().list() {
            if t.idle_ms < idle.as_millis() as u64 {
                continue;
            }
            let decision = match (&t.prepared, &t.role) {
                (None, _) | (Some(_), Some(TxnRole::Home)) => TxnDecision::Abort,
                (
                    Some(p),
                    Some(TxnRole::Participant {
                        table_id,
                        tablet_id,
                    }),
                ) => match ask_home(table_id.clone(), tablet_id.clone(), t.txn, *p).await {
                    Ok(HomeState::Committed(ts)) => TxnDecision::Commit(Some(ts)),
                    Ok(HomeState::Aborted) => TxnDecision::Abort,
                    Ok(HomeState::Pending) => continue,
                    Ok(HomeState::Unknown) => {
                        tracing::error!(tablet = %self.meta.tablet_id, txn = %t.txn,
                                home = %tablet_id, prepared_at = p.0,
                                "a prepared transaction's home tablet no longer knows its \
                                 decision: it stays prepared (its keys owned, later \
                                 snapshots waiting) until an operator ends it");
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(txn = %t.txn, home = %tablet_id, error = %e,
                                "asking a transaction's home tablet for its decision");
                        continue;
                    }
                },
                (Some(_), None) => continue,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            match self
                .txn_control(t.txn, TxnStep::Finish(decision), deadline)
                .await
            {
                Ok(_) => {
                    resolved += 1;
                    tracing::warn!(tablet = %self.meta.tablet_id, txn = %t.txn, idle_ms = t.idle_ms,
                        ?decision, "resolved a transaction whose coordinator went silent");
                }
                Err(e) => {
                    tracing::debug!(txn = %t.txn, error = %e, "resolving an abandoned transaction")
                }
            }
        }
        resolved
    }

    /// The leader's bulk-insert path: checks the rows, replicates them as one record
    /// and waits until this leader has written them into DiskRowSets. Returns the
    /// timestamp and the per-row errors (by position in `rows`).
    pub async fn bulk_insert(
        self: &Arc<Self>,
        rows: arrow::array::RecordBatch,
        request: Option<RequestId>,
        deadline: Instant,
    ) -> Result<WriteAnswer> {
        self.group.check_leader_ready()?;
        let tablet = self.tablet();
        let done = match self.register(&tablet, request.as_ref()) {
            Attempt::Answered(a) => return Ok(a),
            Attempt::Running(rx) => return Self::await_other(rx, deadline).await,
            Attempt::First(tx) => tx,
        };
        let guard = InFlightGuard {
            replica: self.clone(),
            key: request.as_ref().map(|r| (r.client_id.clone(), r.seq_no)),
        };
        let t = tablet.clone();
        let prepared = tokio::task::spawn_blocking(move || t.prepare_bulk(&rows))
            .await
            .map_err(|e| TserverError::Internal(format!("bulk insert task failed: {e}")))??;
        if prepared.is_empty() {
            return self
                .answer_unlogged(&tablet, prepared.row_errors, deadline)
                .await;
        }
        let pending = tablet.register_bulk(&prepared);
        let record = request.map(|id| prepared.request_record(id));
        let answered_by_record = record.is_some();
        let early = prepared.row_errors.clone();
        let t = tablet.clone();
        let prepared = Arc::new(prepared);
        let p = prepared.clone();
        self.replicate(
            Proposal {
                tablet,
                answered_by_record,
                early,
                to_batch: move |i| prepared.batch_position(i),
                hold: pending,
                done,
                guard,
                reply_failpoint: || fail::fail_point!("tserver::bulk::reply"),
                deadline,
                batchable: false,
            },
            move || t.start_bulk(&p, record),
        )
        .await
    }

    /// Proposes a leader's record and waits for this leader to apply it (see the
    /// module docs): under the proposal lock `start` takes the timestamp and encodes the
    /// record, which is submitted to Raft at once, so log order is timestamp order. The
    /// waiting runs in a task of its own that keeps `hold` and the in-flight timestamp
    /// until the record is applied or can no longer be, even after `deadline` answered
    /// the client `Unavailable`.
    async fn replicate<H, F>(
        self: &Arc<Self>,
        p: Proposal<H, F>,
        start: impl FnOnce() -> (HybridTime, Vec<u8>),
    ) -> Result<WriteAnswer>
    where
        H: Send + 'static,
        F: Fn(usize) -> usize + Send + 'static,
    {
        let Proposal {
            tablet,
            answered_by_record,
            early,
            to_batch,
            hold,
            done,
            guard,
            reply_failpoint,
            deadline,
            batchable,
        } = p;
        let (ts, rx) = {
            let _order = self.propose.lock().await;
            let (ts, rec) = start();
            (ts, self.proposer.submit(rec, batchable))
        };
        let waiter = tokio::spawn(async move {
            let res = rx.await.unwrap_or(Err(ConsensusError::ShutDown));
            tablet.finish_write(ts);
            drop(hold);
            let answer = res.map_err(TserverError::from).and_then(|resp| {
                let errs = decode_row_errors(&resp)
                    .map_err(|e| TserverError::Internal(format!("bad apply answer: {e}")))?;
                Ok(if answered_by_record {
                    // The tablet's answer already covers the whole batch.
                    (ts, errs)
                } else {
                    let mut all = early;
                    all.extend(errs.into_iter().map(|(i, e)| (to_batch(i), e)));
                    all.sort_by_key(|(i, _)| *i);
                    (ts, all)
                })
            });
            if let (Some(tx), Ok(a)) = (&done, &answer) {
                let _ = tx.send(Some(a.clone()));
            }
            drop(guard);
            reply_failpoint();
            answer
        });
        match tokio::time::timeout_at(deadline, waiter).await {
            Ok(joined) => {
                joined.map_err(|e| TserverError::Internal(format!("write task failed: {e}")))?
            }
            Err(_) => Err(deadline_passed()),
        }
    }

    /// Resolves the read mode of a scan on this replica (every wait until `deadline`)
    /// into the snapshot it reads at:
    /// - `READ_LATEST` needs the leader; it reads at the leader's latest safe time;
    /// - a snapshot at a given timestamp is read on any replica: a follower first
    ///   learns from the leader which log index makes it safe (`safe_index` asks the
    ///   leader, which confirms its leadership) and waits to apply it;
    /// - a snapshot at timestamp 0 ("now", READ_YOUR_WRITES) takes the confirmed
    ///   leader's current time, which is past every write acknowledged before: a
    ///   follower's own clock may lag it.
    ///
    /// On the leader, leadership is confirmed with a quorum (or its lease) *after* the
    /// wait for the snapshot to be safe, whatever the mode. The wait only covers the
    /// writes this replica knows of: a leader cut off from the others, or paused, that
    /// has not heard of its successor finds nothing in flight below the snapshot, or
    /// waits for its own stuck proposals until it learns of the new term — and then
    /// applies its successor's records, some below the snapshot, while the scan reads.
    /// Either way it would read a snapshot that is not one (a torn or stale read).
    /// Confirmed afterwards, every record at or below the snapshot is applied here,
    /// and later ones carry later timestamps.
    pub async fn read_mode<F, Fut>(
        &self,
        snapshot: Option<u64>,
        deadline: Instant,
        safe_index: F,
    ) -> Result<ReadMode>
    where
        F: FnOnce(String, u64) -> Fut,
        Fut: std::future::Future<Output = Result<(u64, u64)>>,
    {
        let tablet = self.tablet();
        if let Some(ts) = snapshot
            && ts != 0
        {
            tablet.clock().check(HybridTime(ts))?;
        }
        let leads = self.group.check_leader_ready();
        if leads.is_ok() || snapshot.is_none() {
            // READ_LATEST is served by the leader only.
            leads?;
            if matches!(snapshot, None | Some(0)) {
                // Also confirmed first, so that a deposed leader fails at once rather
                // than after waiting, and "now" is past every acknowledged write.
                self.group.confirm_leadership(deadline).await?;
            }
            let mode = match snapshot {
                None => ReadMode::Latest,
                Some(0) => ReadMode::Snapshot(tablet.clock().now()),
                Some(ts) => ReadMode::Snapshot(HybridTime(ts)),
            };
            // Nothing in flight at or below the snapshot is the usual case: it needs no
            // blocking thread (a hop to one and back costs more than a small scan).
            let snap = match tablet.snapshot_if_safe(mode)? {
                Some(snap) => snap,
                None => {
                    let t = tablet.clone();
                    tokio::task::spawn_blocking(move || t.snapshot_for(mode))
                        .await
                        .map_err(|e| TserverError::Internal(e.to_string()))??
                }
            };
            self.group.confirm_leadership(deadline).await?;
            return Ok(ReadMode::Snapshot(snap));
        }
        // A snapshot at a given timestamp (or 0) on a follower.
        let ts = snapshot.unwrap_or(0);
        let st = self.group.status();
        let leader_addr = st.leader.and_then(|l| st.voters.get(&l).cloned()).ok_or(
            cairn_consensus::ConsensusError::NotLeader {
                leader: None,
                leader_addr: None,
            },
        )?;
        let (index, ts) = tokio::time::timeout_at(deadline, safe_index(leader_addr, ts))
            .await
            .map_err(|_| deadline_passed())??;
        let left = deadline.saturating_duration_since(Instant::now());
        self.group.wait_applied(index, left).await?;
        let ts = HybridTime(ts);
        tablet.clock().observe(ts)?;
        Ok(ReadMode::Snapshot(ts))
    }

    /// The leader's side of a follower snapshot read: once leadership is confirmed and
    /// no write at or below the snapshot is in flight, the log index a follower must
    /// have applied to read at it, and the snapshot (`ts`, or the leader's current time
    /// when `ts` is 0).
    ///
    /// Leadership is confirmed after the wait, as for the leader's own reads (see
    /// [`TabletReplica::read_mode`]). The index is the tablet's own applied index,
    /// which covers every record at or below the snapshot once the wait is over; the
    /// group's applied index is published later and may lag it.
    pub async fn safe_index(&self, ts: u64, deadline: Instant) -> Result<(u64, u64)> {
        if ts == 0 {
            self.group.confirm_leadership(deadline).await?;
        } else {
            self.group.check_leader_ready()?;
        }
        let tablet = self.tablet();
        let ts = if ts == 0 {
            tablet.clock().now()
        } else {
            HybridTime(ts)
        };
        let t = tablet.clone();
        tokio::task::spawn_blocking(move || t.snapshot_for(ReadMode::Snapshot(ts)))
            .await
            .map_err(|e| TserverError::Internal(e.to_string()))??;
        self.group.confirm_leadership(deadline).await?;
        let index = tablet.applied_index().max(self.group.status().last_applied);
        Ok((index, ts.0))
    }

    /// Replicates a record that answers no client (a schema change, chains done) and
    /// waits (until `deadline`) for it to apply.
    pub async fn propose_record(&self, record: Vec<u8>, deadline: Instant) -> Result<()> {
        let rx = {
            let _order = self.propose.lock().await;
            self.proposer.submit(record, false)
        };
        tokio::time::timeout_at(deadline, rx)
            .await
            .map_err(|_| deadline_passed())?
            .unwrap_or(Err(ConsensusError::ShutDown))?;
        Ok(())
    }
}

/// Unregisters a request attempt when its waiting ends.
struct InFlightGuard {
    replica: Arc<TabletReplica>,
    key: Option<(String, u64)>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if let Some(k) = &self.key {
            self.replica.in_flight.lock().remove(k);
        }
    }
}

fn deadline_passed() -> TserverError {
    TserverError::Unavailable(
        "the request's deadline passed before the write was replicated (a leader may be cut \
         off from its followers); it may still be applied: retry with the same request id"
            .into(),
    )
}

/// The default deadline of a request without one.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(20);
