//! Multi-row transactions across tablets and tables: the coordinator's side.
//!
//! A [`Transaction`] hands out write sessions whose rows are *provisional*: each tablet
//! keeps them apart from its committed rows, nobody else sees them, and the
//! transaction owns their keys — any other writer of those keys waits — until it
//! ends (`cairn_tablet::txn` has the tablet's side). The transaction remembers every
//! tablet it sent rows to. [`Transaction::commit`] then
//!
//! - with one participant, commits there in one phase: the tablet takes the commit
//!   timestamp itself, one round trip;
//! - with several, runs two-phase commit as Kudu does: every participant prepares
//!   (its prepare timestamp holds back snapshots at or after it), the commit timestamp
//!   is the largest prepare timestamp, and every participant commits at it — so a
//!   snapshot sees all of the transaction or none of it, on every tablet.
//!
//! One participant, the *home* (the first in tablet-id order), holds the
//! transaction's status record (`cairn_tablet::txn`, "The status record"): each
//! prepare tells the participant where the home is, and the coordinator commits at
//! the home first. The home's commit record, replicated by its Raft group, is the
//! decision; the other participants commit after it. If the coordinator dies after
//! the decision, each remaining participant learns it from the home once the
//! coordinator has been silent for the abandon timeout; if it dies before, the home
//! aborts the transaction alone and the others learn that.
//!
//! [`Transaction::rollback`] (or a failed prepare) aborts everywhere.
//!
//! [`Transaction::scan`] reads as the transaction: each tablet returns the
//! transaction's own rows as its writes left them, and every other row at the scan's
//! snapshot.
//!
//! While a transaction is open, a background task sends its participants keep-alives
//! ([`TXN_KEEPALIVE_INTERVAL`]); a tablet server aborts an unprepared transaction it
//! has heard nothing from for its abandon timeout, so a coordinator that dies (or a
//! handle dropped without `commit`/`rollback`) leaves no rows owned for long.
//!

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_common::HybridTime;
use cairn_proto::{TxnAction, TxnControlRequest, TxnControlResponse};
use parking_lot::Mutex;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::retry::{Deadline, attempt, attempt_in_process, request};
use crate::session::{LeaderCall, LeaderServer, WriteSession, call_leader};
use crate::table::Table;

/// What a session needs to write for a transaction: its id, and where to record the
/// tablets it writes to.
#[derive(Clone)]
pub(crate) struct TxnLink {
    pub(crate) id: u64,
    participants: Arc<Mutex<BTreeMap<String, Table>>>,
    /// Set once the transaction commits or rolls back (the keep-alives stop).
    ended: Arc<std::sync::atomic::AtomicBool>,
}

/// How often an open transaction tells its participants that its coordinator is
/// alive. A tablet server aborts a transaction it has heard nothing from for its
/// `txn_abandon_after` (30 s by default).
pub const TXN_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

impl TxnLink {
    /// Records `tablet_id` (of `table`) as a participant.
    pub(crate) fn join(&self, tablet_id: &str, table: &Table) {
        self.participants
            .lock()
            .entry(tablet_id.to_string())
            .or_insert_with(|| table.clone());
    }
}

/// A multi-row transaction (see the module docs). Dropping it without `commit` or
/// `rollback` leaves its provisional rows owned on their tablets until they give it
/// up for abandoned (30 s by default): always end it.
/// Clones are handles on the same transaction (its participants are shared); end it
/// through one of them.
#[derive(Clone)]
pub struct Transaction {
    client: Client,
    link: TxnLink,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Transaction({:016x})", self.link.id)
    }
}

impl Client {
    /// Starts a transaction with a random id. While it is open (and some handle on
    /// it exists) a background task sends its participants keep-alives every
    /// [`TXN_KEEPALIVE_INTERVAL`]; once every handle is dropped they stop, and the
    /// tablets abort it after their abandon timeout.
    pub fn begin_transaction(&self) -> Transaction {
        self.join_transaction(rand::random::<u64>())
    }

    /// A handle on transaction `id`, begun by another process: its sessions write
    /// rows for that transaction, and it sends keep-alives to the tablets it wrote
    /// to while it lives. The joining process does not end the transaction: it hands
    /// [`Transaction::tablets`] to the coordinator, which [`Transaction::join`]s them to its own handle and ends the
    /// transaction there. Distributed `INSERT … SELECT` writes from its workers this
    /// way.
    pub fn join_transaction(&self, id: u64) -> Transaction {
        let t = Transaction {
            client: self.clone(),
            link: TxnLink {
                id,
                participants: Arc::default(),
                ended: Arc::default(),
            },
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(keep_alive(
                self.clone(),
                id,
                Arc::downgrade(&t.link.participants),
                t.link.ended.clone(),
            ));
        }
        t
    }
}

impl Transaction {
    /// The transaction's id.
    pub fn id(&self) -> u64 {
        self.link.id
    }

    /// A write session on `table` whose rows belong to this transaction. Row errors
    /// (duplicate key, conditions) are reported by the session as usual; the rows
    /// that succeeded stay provisional until the transaction ends.
    pub fn session(&self, table: &Table) -> WriteSession {
        let mut s = self.client.new_session(table);
        s.set_txn(self.link.clone());
        s
    }

    /// Makes `session` write for this transaction from its next flush on (rows it
    /// buffered already go with them). Used to turn a write into a transaction once
    /// it turns out to span several tablets or requests.
    pub fn attach(&self, session: &mut WriteSession) {
        session.set_txn(self.link.clone());
    }

    /// A scan of `table` as this transaction sees it: its own provisional rows, as its
    /// writes left them, and every other row at the scan's snapshot.
    pub fn scan(&self, table: &Table) -> crate::scan::ScanBuilder {
        self.client.scan(table).in_txn(self.link.id)
    }

    /// Records `tablet_id` of `table` as a participant written through another
    /// handle on this transaction ([`Client::join_transaction`]), so that commit and
    /// rollback reach it. Recording a tablet the transaction never wrote to is
    /// harmless to a rollback, which aborts it there (the tablet then refuses later
    /// writes of the transaction); a commit would fail on it, so before a commit
    /// join only tablets that were written to.
    pub fn join(&self, tablet_id: &str, table: &Table) {
        self.link.join(tablet_id, table);
    }

    /// How many tablets the transaction has written to.
    pub fn participants(&self) -> usize {
        self.link.participants.lock().len()
    }

    /// The tablets the transaction has written to, with their tables, in tablet-id
    /// order: at commit the first is the home, which holds the status record.
    pub fn tablets(&self) -> Vec<(String, Table)> {
        self.parts()
    }

    /// Commits: one phase on a single participant, two-phase commit across several.
    /// Returns the commit timestamp (a read at or after it sees the whole
    /// transaction); a transaction that wrote nothing commits at the client's current
    /// timestamp. If a participant cannot prepare, or the home tablet refuses the
    /// commit, the transaction is aborted everywhere and the error returned
    /// ([`ClientError::TxnNotOpen`]: it can be run again). If the home cannot be
    /// reached to learn whether it committed, [`ClientError::TxnOutcomeUnknown`].
    pub async fn commit(self) -> Result<HybridTime> {
        let res = self.commit_inner().await;
        self.link
            .ended
            .store(true, std::sync::atomic::Ordering::Relaxed);
        res
    }

    async fn commit_inner(&self) -> Result<HybridTime> {
        let parts = self.parts();
        match parts.as_slice() {
            [] => Ok(HybridTime(self.client.last_timestamp())),
            [(tablet, table)] => {
                let r = self.step(table, tablet, Step::commit(0)).await;
                match r {
                    Ok(ts) => Ok(HybridTime(ts)),
                    Err(e) => {
                        // The commit may not have happened: make sure it never does.
                        let _ = self.step(table, tablet, Step::abort()).await;
                        Err(e)
                    }
                }
            }
            [(home_tablet, home_table), others @ ..] => {
                let home_role = Step {
                    action: TxnAction::TxnBeginCommit,
                    commit_ts: 0,
                    is_home: true,
                    home: None,
                };
                let role = Step {
                    action: TxnAction::TxnBeginCommit,
                    commit_ts: 0,
                    is_home: false,
                    home: Some((home_table.id.clone(), home_tablet.clone())),
                };
                let prepares =
                    futures::future::join_all(parts.iter().enumerate().map(|(i, (t, tb))| {
                        let step = if i == 0 {
                            home_role.clone()
                        } else {
                            role.clone()
                        };
                        self.step(tb, t, step)
                    }))
                    .await;
                let mut commit_ts = 0;
                let mut failed = None;
                for p in prepares {
                    match p {
                        Ok(ts) => commit_ts = commit_ts.max(ts),
                        Err(e) => failed = failed.or(Some(e)),
                    }
                }
                if let Some(e) = failed {
                    // Best effort: the prepare error is what the caller needs.
                    let _ = self.abort_all(&parts).await;
                    return Err(e);
                }
                fail::fail_point!("txn::before_home_commit", |_| Err(ClientError::Internal(
                    "failpoint txn::before_home_commit".into()
                )));
                // Every participant is prepared. The home's commit record is the
                // decision.
                if let Err(e) = self
                    .step(home_table, home_tablet, Step::commit(commit_ts))
                    .await
                {
                    return Err(self.after_failed_home_commit(&parts, e).await);
                }
                fail::fail_point!("txn::after_home_commit", |_| Err(ClientError::Internal(
                    "failpoint txn::after_home_commit".into()
                )));
                // Committed. Each other participant is told until it answers (its
                // leader may change meanwhile; the new one holds the prepared state);
                // one that cannot be told learns the decision from the home.
                let commits = futures::future::join_all(
                    others
                        .iter()
                        .map(|(t, tb)| self.step(tb, t, Step::commit(commit_ts))),
                )
                .await;
                for (r, (t, _)) in commits.into_iter().zip(others) {
                    if let Err(e) = r {
                        tracing::warn!(txn = self.link.id, tablet = %t, error = %e,
                            "a participant did not confirm the commit; it will learn it from \
                             the transaction's home tablet");
                    }
                }
                self.client.observe_timestamp(commit_ts);
                Ok(HybridTime(commit_ts))
            }
        }
    }

    /// What a failed commit at the home tablet means, found out by aborting there:
    /// an abort that takes, or a home that had aborted already, means the transaction
    /// never committed (then it is aborted everywhere and `TxnNotOpen` returned); a
    /// home that answers "committed" means the commit took, and the caller's error
    /// was only the answer lost — yet the commit must then be completed by the
    /// resolvers, so the outcome is reported unknown rather than guessed.
    async fn after_failed_home_commit(
        &self,
        parts: &[(String, Table)],
        e: ClientError,
    ) -> ClientError {
        let (home_tablet, home_table) = &parts[0];
        match self.step(home_table, home_tablet, Step::abort()).await {
            Ok(_) => {
                let _ = self.abort_all(&parts[1..]).await;
                match e {
                    ClientError::TxnNotOpen(_) => e,
                    e => ClientError::TxnNotOpen(format!(
                        "transaction {:016x} was aborted: its commit did not reach the home \
                         tablet {home_tablet} ({e}); run it again",
                        self.link.id
                    )),
                }
            }
            Err(ClientError::TxnNotOpen(msg)) if msg.contains("committed") => {
                ClientError::TxnOutcomeUnknown(format!(
                    "transaction {:016x} committed at its home tablet {home_tablet}, but the \
                     answer was lost ({e}); the other participants complete the commit",
                    self.link.id
                ))
            }
            Err(ClientError::TxnNotOpen(_)) => {
                let _ = self.abort_all(&parts[1..]).await;
                e
            }
            Err(abort) => ClientError::TxnOutcomeUnknown(format!(
                "whether transaction {:016x} committed is unknown: its home tablet \
                 {home_tablet} could not be reached ({e}; then {abort}); the transaction \
                 will be committed or aborted as the home decided — check before running it \
                 again",
                self.link.id
            )),
        }
    }

    /// Aborts: every participant discards the transaction's rows.
    pub async fn rollback(self) -> Result<()> {
        self.link
            .ended
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let parts = self.parts();
        self.abort_all(&parts).await
    }

    /// The participants: tablet ids with their tables.
    fn parts(&self) -> Vec<(String, Table)> {
        self.link
            .participants
            .lock()
            .iter()
            .map(|(t, tb)| (t.clone(), tb.clone()))
            .collect()
    }

    /// Aborts on every participant; the first error, if any.
    async fn abort_all(&self, parts: &[(String, Table)]) -> Result<()> {
        let res =
            futures::future::join_all(parts.iter().map(|(t, tb)| self.step(tb, t, Step::abort())))
                .await;
        res.into_iter().find_map(|r| r.err()).map_or(Ok(()), Err)
    }

    /// One step on one participant's leader, retried until the operation timeout.
    async fn step(&self, table: &Table, tablet_id: &str, step: Step) -> Result<u64> {
        run_step(&self.client, self.link.id, table, tablet_id, step).await
    }
}

/// One `TxnControl` call's arguments.
#[derive(Clone, Debug)]
struct Step {
    action: TxnAction,
    commit_ts: u64,
    /// A prepare of the home tablet.
    is_home: bool,
    /// A prepare of another participant: the home's table id and tablet id.
    home: Option<(String, String)>,
}

impl Step {
    fn of(action: TxnAction, commit_ts: u64) -> Step {
        Step {
            action,
            commit_ts,
            is_home: false,
            home: None,
        }
    }
    fn commit(commit_ts: u64) -> Step {
        Step::of(TxnAction::TxnCommit, commit_ts)
    }
    fn abort() -> Step {
        Step::of(TxnAction::TxnAbort, 0)
    }
}

/// Sends keep-alives for transaction `id` to its participants until it ends or every
/// handle on it is gone.
async fn keep_alive(
    client: Client,
    id: u64,
    participants: std::sync::Weak<Mutex<BTreeMap<String, Table>>>,
    ended: Arc<std::sync::atomic::AtomicBool>,
) {
    loop {
        tokio::time::sleep(TXN_KEEPALIVE_INTERVAL).await;
        let parts: Vec<(String, Table)> = match participants.upgrade() {
            Some(p) => p
                .lock()
                .iter()
                .map(|(t, tb)| (t.clone(), tb.clone()))
                .collect(),
            None => return,
        };
        if ended.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        for (tablet, table) in parts {
            let keep = Step::of(TxnAction::TxnKeepalive, 0);
            if let Err(e) = run_step(&client, id, &table, &tablet, keep).await {
                tracing::debug!(txn = id, %tablet, error = %e, "transaction keep-alive");
            }
        }
    }
}

/// One step of transaction `txn` on one participant's leader, retried until the
/// operation timeout.
async fn run_step(
    client: &Client,
    txn: u64,
    table: &Table,
    tablet_id: &str,
    step: Step,
) -> Result<u64> {
    let what = format!(
        "{} transaction {txn:016x} on tablet {tablet_id} of table '{}'",
        match step.action {
            TxnAction::TxnBeginCommit => "preparing",
            TxnAction::TxnCommit => "committing",
            TxnAction::TxnAbort => "aborting",
            TxnAction::TxnKeepalive => "keeping alive",
            TxnAction::TxnStatus => "asking the state of",
        },
        table.name
    );
    let deadline = Deadline::after(client.options().operation_timeout);
    let call = |server: LeaderServer, t| {
        let (home_table_id, home_tablet_id) = step.home.clone().unwrap_or_default();
        let req = TxnControlRequest {
            tablet_id: tablet_id.to_string(),
            txn_id: txn,
            action: step.action as i32,
            commit_timestamp: step.commit_ts,
            propagated_timestamp: client.last_timestamp(),
            is_home: step.is_home,
            home_table_id,
            home_tablet_id,
            prepared_at: 0,
        };
        async move {
            match server {
                LeaderServer::InProcess(s) => attempt_in_process(t, s.txn_control(req)).await,
                LeaderServer::Remote(mut s) => attempt(t, s.txn_control(request(req, t))).await,
            }
        }
    };
    match call_leader::<_, _, TxnControlResponse>(client, table, tablet_id, &what, deadline, call)
        .await
    {
        LeaderCall::Done(r) => Ok(r.timestamp),
        LeaderCall::Failed(e) => Err(e),
        LeaderCall::Gone(_) => Err(ClientError::NotFound(format!(
            "{what}: the tablet is no longer part of the table (dropped?)"
        ))),
    }
}
