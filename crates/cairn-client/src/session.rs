//! Write sessions: buffering, routing and flushing of row operations.
//!
//! A [`WriteSession`] routes each applied [`Operation`] to its tablet (partition key →
//! cached tablet locations) and buffers it per tablet. Flushing sends one `Write` RPC
//! per tablet to the tablet's leader; leader changes, moved tablets and unreachable
//! servers are retried (with a location refresh and backoff) until the session's
//! timeout. Row errors (duplicate key, missing row, bad value) are final and returned
//! by [`WriteSession::flush`].
//!
//! Ordering: operations on one tablet are sent in the order they were applied, and a
//! tablet never has more than one write in flight from a session, so operations on the
//! same row are applied in session order in every flush mode.

use std::collections::HashMap;
use std::time::Duration;

use cairn_proto::{RowErrorKind, WriteRequest, WriteResponse};
use tokio::task::{Id as TaskId, JoinSet};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{ClientError, Failure, Result, classify};
use crate::retry::{Backoff, Deadline, attempt, attempt_in_process, request};
use crate::table::{Table, locate_tablet};
use crate::write::{Operation, encode_write, map_row_errors};

/// When a session sends its buffered operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlushMode {
    /// Every `apply` sends its operation and waits for the result; a row error is
    /// returned by `apply` itself as [`ClientError::Row`].
    #[default]
    AutoFlushSync,
    /// `apply` buffers; a tablet's buffer is sent in the background once it holds
    /// `batch_rows` operations (at most `max_in_flight` writes at a time, one per
    /// tablet). Errors are collected and returned by the next `flush`.
    AutoFlushBackground,
    /// `apply` only buffers; `flush` sends everything.
    Manual,
}

/// A row the server rejected.
#[derive(Clone, Debug, PartialEq)]
pub struct RowErrorInfo {
    /// The operation's index in session order: 0 for the first operation applied to
    /// the session, counting every `apply` that passed validation.
    pub op_index: usize,
    /// Why it was rejected.
    pub kind: RowErrorKind,
    /// The server's message.
    pub message: String,
    /// The operation.
    pub op: Operation,
}

/// Default number of buffered operations per tablet that triggers a background flush.
pub const DEFAULT_BATCH_ROWS: usize = 1000;
/// Default bound on concurrent background writes of one session.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 8;

/// A tablet's buffered operations, each with its index in the session.
type TabletOps = Vec<(usize, Operation)>;

/// The result of writing a set of operations.
#[derive(Default, Debug)]
struct Outcome {
    row_errors: Vec<RowErrorInfo>,
    failed: Vec<(usize, Operation)>,
    cause: Option<ClientError>,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.row_errors.extend(other.row_errors);
        self.failed.extend(other.failed);
        if self.cause.is_none() {
            self.cause = other.cause;
        }
    }
    fn fail(&mut self, cause: ClientError, ops: Vec<(usize, Operation)>) {
        self.failed.extend(ops);
        if self.cause.is_none() {
            self.cause = Some(cause);
        }
    }
}

/// Buffers, routes and sends row operations for one table. Not shared between tasks:
/// use one session per writer.
///
/// Dropping a session discards its buffered operations and abandons writes still in
/// flight (they may or may not be applied): call [`WriteSession::flush`] first.
pub struct WriteSession {
    client: Client,
    table: Table,
    mode: FlushMode,
    batch_rows: usize,
    max_in_flight: usize,
    timeout: Duration,
    /// Buffered operations per tablet id, in apply order.
    buffers: HashMap<String, Vec<(usize, Operation)>>,
    buffered: usize,
    /// Each tablet's write is all or nothing.
    atomic: bool,
    /// The transaction the writes belong to (provisional until it commits).
    txn: Option<crate::txn::TxnLink>,
    next_index: usize,
    in_flight: JoinSet<Outcome>,
    /// Write in flight -> (its tablet, its number of operations). At most one per
    /// tablet, which keeps per-row order.
    in_flight_meta: HashMap<TaskId, (String, usize)>,
    /// Outcomes of background writes not yet reported by `flush`.
    collected: Outcome,
}

impl WriteSession {
    pub(crate) fn new(client: Client, table: Table) -> Self {
        let timeout = client.options().operation_timeout;
        WriteSession {
            client,
            table,
            mode: FlushMode::default(),
            batch_rows: DEFAULT_BATCH_ROWS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            timeout,
            buffers: HashMap::new(),
            buffered: 0,
            atomic: false,
            txn: None,
            next_index: 0,
            in_flight: JoinSet::new(),
            in_flight_meta: HashMap::new(),
            collected: Outcome::default(),
        }
    }

    /// Makes the session write for a transaction ([`crate::Transaction::session`]).
    pub(crate) fn set_txn(&mut self, link: crate::txn::TxnLink) {
        self.txn = Some(link);
    }

    /// Sets the flush mode (default [`FlushMode::AutoFlushSync`]). Switching modes does
    /// not send what is buffered; call `flush` for that.
    pub fn set_flush_mode(&mut self, m: FlushMode) {
        self.mode = m;
    }

    /// Sets how many buffered operations of one tablet trigger a background flush
    /// (default 1000; at least 1).
    pub fn set_batch_rows(&mut self, n: usize) {
        self.batch_rows = n.max(1);
    }

    /// Makes every write of the session to one tablet all or nothing: if any of its
    /// rows fails (its condition, a duplicate key, a missing row), none is applied and
    /// the others fail with `ABORTED`. With [`FlushMode::Manual`] and one `flush`, each
    /// tablet's share of the session is one such write. Off by default.
    pub fn set_atomic(&mut self, atomic: bool) {
        self.atomic = atomic;
    }

    /// Sets how many background writes may be in flight at once (default 8; at least 1).
    pub fn set_max_in_flight(&mut self, n: usize) {
        self.max_in_flight = n.max(1);
    }

    /// Sets the time a write (including its retries) may take before it fails
    /// (default: the client's operation timeout).
    pub fn set_timeout(&mut self, d: Duration) {
        self.timeout = d;
    }

    /// The table this session writes to.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// How many tablets the buffered (unsent) operations go to.
    pub fn buffered_tablets(&self) -> usize {
        self.buffers.values().filter(|b| !b.is_empty()).count()
    }

    /// Whether the session writes for a transaction.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    /// Operations applied but not yet acknowledged: buffered ones plus those in flight
    /// in the background.
    pub fn pending(&self) -> usize {
        self.buffered + self.in_flight_meta.values().map(|(_, n)| n).sum::<usize>()
    }

    /// Validates, routes and buffers an operation; sends it according to the flush
    /// mode. Invalid operations (wrong width, missing key, bad value) are rejected here
    /// with [`ClientError::InvalidArgument`] / [`ClientError::Common`] and are not
    /// counted in the session order.
    pub async fn apply(&mut self, op: Operation) -> Result<()> {
        op.validate(&self.table.schema)?;
        let pkey = self.table.partition_key(&op.values)?;
        let tablet_id = self.route(&pkey).await?;
        let index = self.next_index;
        self.next_index += 1;
        let buf = self.buffers.entry(tablet_id.clone()).or_default();
        buf.push((index, op));
        let len = buf.len();
        self.buffered += 1;
        match self.mode {
            FlushMode::AutoFlushSync => {
                let errors = self.flush().await?;
                // Errors of earlier operations (buffered before a switch to this
                // mode) stay for the next `flush`.
                let (mine, others): (Vec<_>, Vec<_>) =
                    errors.into_iter().partition(|e| e.op_index == index);
                self.collected.row_errors.extend(others);
                match mine.into_iter().next() {
                    Some(e) => Err(ClientError::Row(Box::new(e))),
                    None => Ok(()),
                }
            }
            FlushMode::AutoFlushBackground => {
                self.reap_finished();
                if len >= self.batch_rows {
                    self.send_tablet_in_background(&tablet_id).await;
                }
                Ok(())
            }
            FlushMode::Manual => Ok(()),
        }
    }

    /// Sends everything buffered and waits for every write of the session (background
    /// ones included). Returns the row errors in session order.
    ///
    /// If some operations could not be delivered (their tablet stayed unreachable until
    /// the timeout, or the server refused the request), returns
    /// [`ClientError::WriteFailed`] listing them along with the row errors of the rest.
    pub async fn flush(&mut self) -> Result<Vec<RowErrorInfo>> {
        // Wait for writes in flight first, so that each tablet's next write goes after
        // its previous one.
        self.join_all().await;
        let tablets: Vec<String> = self.buffers.keys().cloned().collect();
        if let [only] = tablets.as_slice() {
            // One tablet (every keyed statement): write it on this task. A spawned
            // task would be scheduled, perhaps on another thread, and joined, for
            // nothing to overlap with.
            if let Some((ops, deadline, mode)) = self.take_tablet(only) {
                let outcome = write_ops(
                    &self.client,
                    &self.table,
                    Some(only.clone()),
                    ops,
                    deadline,
                    &mode,
                )
                .await;
                self.collected.merge(outcome);
            }
        } else {
            for t in tablets {
                self.spawn_tablet(&t);
            }
            self.join_all().await;
        }
        let mut out = std::mem::take(&mut self.collected);
        out.row_errors.sort_by_key(|e| e.op_index);
        out.failed.sort_by_key(|(i, _)| *i);
        match out.cause {
            Some(cause) => Err(ClientError::WriteFailed {
                cause: Box::new(cause),
                failed_ops: out.failed,
                row_errors: out.row_errors,
            }),
            None => Ok(out.row_errors),
        }
    }

    /// The tablet id owning a partition key (refreshing the cached locations once if no
    /// tablet covers it).
    async fn route(&self, pkey: &[u8]) -> Result<String> {
        let (fetched, locs) = self.client.locations(&self.table, None).await?;
        if let Some(t) = locate_tablet(&locs, pkey) {
            return Ok(t.tablet_id.clone());
        }
        let (_, locs) = self.client.locations(&self.table, Some(fetched)).await?;
        locate_tablet(&locs, pkey)
            .map(|t| t.tablet_id.clone())
            .ok_or_else(|| no_tablet_error(&self.table))
    }

    /// Starts the background write of a tablet's buffer, waiting first for room (the
    /// in-flight bound) and for the tablet's previous write.
    async fn send_tablet_in_background(&mut self, tablet_id: &str) {
        while self.in_flight_meta.values().any(|(t, _)| t == tablet_id) {
            if !self.join_one().await {
                break;
            }
        }
        while self.in_flight.len() >= self.max_in_flight {
            if !self.join_one().await {
                break;
            }
        }
        self.spawn_tablet(tablet_id);
    }

    /// Spawns the write of a tablet's whole buffer (no waiting).
    fn spawn_tablet(&mut self, tablet_id: &str) {
        let Some((ops, deadline, mode)) = self.take_tablet(tablet_id) else {
            return;
        };
        let n = ops.len();
        let client = self.client.clone();
        let table = self.table.clone();
        let tid = tablet_id.to_string();
        let handle = self.in_flight.spawn(async move {
            write_ops(&client, &table, Some(tid), ops, deadline, &mode).await
        });
        self.in_flight_meta
            .insert(handle.id(), (tablet_id.to_string(), n));
    }

    /// Takes a tablet's buffered operations (`None` if there are none), with the
    /// deadline and mode to write them with.
    fn take_tablet(&mut self, tablet_id: &str) -> Option<(TabletOps, Deadline, WriteMode)> {
        let ops = self
            .buffers
            .remove(tablet_id)
            .filter(|ops| !ops.is_empty())?;
        self.buffered -= ops.len();
        let mode = WriteMode {
            atomic: self.atomic,
            txn: self.txn.clone(),
        };
        Some((ops, Deadline::after(self.timeout), mode))
    }

    /// Collects finished background writes without waiting.
    fn reap_finished(&mut self) {
        while let Some(r) = self.in_flight.try_join_next_with_id() {
            self.record(r);
        }
    }

    /// Waits for one background write to finish. Returns false when none was in flight.
    async fn join_one(&mut self) -> bool {
        match self.in_flight.join_next_with_id().await {
            Some(r) => {
                self.record(r);
                true
            }
            None => false,
        }
    }

    async fn join_all(&mut self) {
        while self.join_one().await {}
    }

    fn record(&mut self, r: std::result::Result<(TaskId, Outcome), tokio::task::JoinError>) {
        let id = match &r {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let meta = self.in_flight_meta.remove(&id);
        match r {
            Ok((_, outcome)) => self.collected.merge(outcome),
            Err(e) => self.collected.fail(
                ClientError::Internal(format!(
                    "the background write of {} operation(s) to tablet {} ended abnormally: {e}",
                    meta.as_ref().map_or(0, |m| m.1),
                    meta.as_ref().map_or("?", |m| m.0.as_str()),
                )),
                vec![],
            ),
        }
    }
}

impl Drop for WriteSession {
    fn drop(&mut self) {
        let lost = self.buffered + self.in_flight.len();
        if lost > 0 {
            tracing::warn!(
                table = %self.table.name,
                buffered = self.buffered,
                writes_in_flight = self.in_flight.len(),
                "write session dropped without flush(); buffered operations are discarded"
            );
        }
    }
}

fn no_tablet_error(table: &Table) -> ClientError {
    ClientError::InvalidArgument(format!(
        "no tablet of table '{}' covers this row: its range columns fall outside every \
         range partition",
        table.name
    ))
}

/// Writes operations, grouping them by tablet; `first_tablet` is where the caller
/// routed them (all of them). Operations whose tablet disappeared are routed again with
/// fresh locations.
async fn write_ops(
    client: &Client,
    table: &Table,
    first_tablet: Option<String>,
    ops: Vec<(usize, Operation)>,
    deadline: Deadline,
    mode: &WriteMode,
) -> Outcome {
    let mut out = Outcome::default();
    let mut todo: Vec<(String, Vec<(usize, Operation)>)> = Vec::new();
    let mut to_route: Vec<(usize, Operation)> = Vec::new();
    match first_tablet {
        Some(t) => todo.push((t, ops)),
        None => to_route = ops,
    }
    let mut stale: Option<Instant> = None;
    loop {
        if !to_route.is_empty() {
            match client.locations(table, stale.take()).await {
                Ok((_, locs)) => {
                    let mut groups: HashMap<String, Vec<(usize, Operation)>> = HashMap::new();
                    for (i, op) in to_route.drain(..) {
                        let t = table
                            .partition_key(&op.values)
                            .ok()
                            .and_then(|k| locate_tablet(&locs, &k).map(|t| t.tablet_id.clone()));
                        match t {
                            Some(t) => groups.entry(t).or_default().push((i, op)),
                            None => out.fail(no_tablet_error(table), vec![(i, op)]),
                        }
                    }
                    todo.extend(groups);
                }
                Err(e) => {
                    out.fail(e, std::mem::take(&mut to_route));
                    return out;
                }
            }
        }
        if todo.is_empty() {
            return out;
        }
        let results = futures::future::join_all(
            todo.drain(..)
                .map(|(t, ops)| write_tablet(client, table, t, ops, deadline, mode)),
        )
        .await;
        for r in results {
            match r {
                TabletWrite::Done(errors) => out.row_errors.extend(errors),
                TabletWrite::Failed(e, ops) => out.fail(e, ops),
                TabletWrite::Reroute(ops, fetched) => {
                    to_route.extend(ops);
                    stale = Some(fetched);
                }
            }
        }
        if !to_route.is_empty() && deadline.expired() {
            let ops = std::mem::take(&mut to_route);
            out.fail(
                deadline.timeout_error(
                    format!("writing to table '{}'", table.name),
                    "the tablet disappeared and the rows could not be routed again",
                ),
                ops,
            );
            return out;
        }
    }
}

/// How a session's writes go: all or nothing per tablet, and for which transaction.
struct WriteMode {
    atomic: bool,
    txn: Option<crate::txn::TxnLink>,
}

enum TabletWrite {
    Done(Vec<RowErrorInfo>),
    Failed(ClientError, Vec<(usize, Operation)>),
    /// The tablet is gone from the table's locations (as fetched at the instant).
    Reroute(Vec<(usize, Operation)>, Instant),
}

/// Writes one tablet's operations to its leader, retrying transient failures.
async fn write_tablet(
    client: &Client,
    table: &Table,
    tablet_id: String,
    ops: Vec<(usize, Operation)>,
    deadline: Deadline,
    mode: &WriteMode,
) -> TabletWrite {
    let what = format!(
        "writing {} row(s) to tablet {tablet_id} of table '{}'",
        ops.len(),
        table.name
    );
    let encoded = match encode_write(&table.schema, ops.iter().map(|(_, op)| op)) {
        Ok(e) => e,
        Err(e) => return TabletWrite::Failed(e, ops),
    };
    // A transaction must end on every tablet it may have written to, so the tablet is
    // a participant before the first attempt.
    if let Some(txn) = &mode.txn {
        txn.join(&tablet_id, table);
    }
    let (atomic, txn_id) = (mode.atomic, mode.txn.as_ref().map(|t| t.id));
    // Every attempt carries the same request id: a retry after a lost answer gets the
    // first attempt's answer, never a second application.
    let request_id = client.start_request();
    let call = |server: LeaderServer, t: Duration| {
        let req = WriteRequest {
            tablet_id: tablet_id.clone(),
            batches: encoded.batches.clone(),
            propagated_timestamp: client.last_timestamp(),
            request_id: Some(request_id.id()),
            atomic,
            txn_id,
        };
        async move {
            match server {
                LeaderServer::InProcess(s) => attempt_in_process(t, s.write(req)).await,
                LeaderServer::Remote(mut s) => attempt(t, s.write(request(req, t))).await,
            }
        }
    };
    match call_leader(client, table, &tablet_id, &what, deadline, call).await {
        LeaderCall::Done(resp) => {
            TabletWrite::Done(map_row_errors(&resp.row_errors, &encoded.row_map, &ops))
        }
        LeaderCall::Failed(e) => TabletWrite::Failed(e, ops),
        LeaderCall::Gone(fetched) => TabletWrite::Reroute(ops, fetched),
    }
}

/// The server a [`call_leader`] attempt goes to.
pub(crate) enum LeaderServer {
    /// A tablet server in this process.
    InProcess(std::sync::Arc<dyn cairn_proto::InProcessTabletServer>),
    /// A remote one.
    Remote(crate::client::TabletServerStub),
}

/// An answer of a write-like call, which carries the server's timestamp.
pub(crate) trait LeaderAnswer {
    /// The timestamp the client observes (propagation).
    fn timestamp(&self) -> u64;
}

impl LeaderAnswer for WriteResponse {
    fn timestamp(&self) -> u64 {
        self.timestamp
    }
}

impl LeaderAnswer for cairn_proto::TxnControlResponse {
    fn timestamp(&self) -> u64 {
        self.timestamp
    }
}

/// How a [`call_leader`] ended.
pub(crate) enum LeaderCall<R = WriteResponse> {
    /// The leader answered.
    Done(R),
    /// Final failure (refused, or out of time).
    Failed(ClientError),
    /// The tablet is gone from the table's locations (as fetched at the instant).
    Gone(Instant),
}

/// Makes a write-like call (`call(server, rpc_timeout)`, one attempt) on a tablet's
/// leader, retrying transient failures until `deadline`: follows not-leader hints,
/// asks other replicas while the leader is unreachable, refreshes the locations and
/// backs off. `what` names the operation in errors.
pub(crate) async fn call_leader<F, Fut, R>(
    client: &Client,
    table: &Table,
    tablet_id: &str,
    what: &str,
    deadline: Deadline,
    mut call: F,
) -> LeaderCall<R>
where
    F: FnMut(LeaderServer, Duration) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<R, tonic::Status>>,
    R: LeaderAnswer,
{
    let rpc_timeout = client.options().rpc_timeout;
    let mut backoff = Backoff::new();
    let mut stale: Option<Instant> = None;
    let mut hint: Option<String> = None;
    let mut hint_jumps = 0;
    // Replicas that just failed to answer: while the leader is unreachable, ask the
    // others, which name the new leader as soon as one is elected.
    let mut avoid: Vec<String> = Vec::new();
    let mut last = String::new();
    loop {
        if deadline.expired() {
            return LeaderCall::Failed(deadline.timeout_error(what, last));
        }
        let (fetched, locs) = match client.locations(table, stale.take()).await {
            Ok(l) => l,
            Err(e) => return LeaderCall::Failed(e),
        };
        let Some(tablet) = locs.iter().find(|t| t.tablet_id == tablet_id) else {
            return LeaderCall::Gone(fetched);
        };
        if tablet
            .read_order()
            .iter()
            .all(|a| avoid.iter().any(|x| x == a))
        {
            avoid.clear();
        }
        let addr = match hint.take().or_else(|| {
            tablet
                .read_order()
                .into_iter()
                .find(|a| !avoid.iter().any(|x| x == a))
                .map(str::to_string)
        }) {
            Some(a) => a,
            None => {
                last = format!("tablet {tablet_id} has no known leader (election in progress?)");
                stale = Some(fetched);
                if !deadline.backoff(&mut backoff).await {
                    return LeaderCall::Failed(deadline.timeout_error(what, last));
                }
                continue;
            }
        };
        let cached_leader = tablet.leader_addr() == Some(addr.as_str());
        let t = deadline.rpc_timeout(rpc_timeout);
        let server = match client.in_process(&addr) {
            Some(server) => LeaderServer::InProcess(server),
            None => match client.tablet_server_stub(&addr) {
                Ok(stub) => LeaderServer::Remote(stub),
                Err(e) => {
                    last = e.to_string();
                    stale = Some(fetched);
                    if !deadline.backoff(&mut backoff).await {
                        return LeaderCall::Failed(deadline.timeout_error(what, last));
                    }
                    continue;
                }
            },
        };
        match call(server, t).await {
            Ok(resp) => {
                client.observe_timestamp(resp.timestamp());
                if !cached_leader {
                    client.note_leader(&table.id, tablet_id, &addr);
                }
                return LeaderCall::Done(resp);
            }
            Err(status) => {
                let f = classify(what, &addr, &status);
                last = f.describe();
                match f {
                    Failure::Fatal(e) => return LeaderCall::Failed(e),
                    Failure::NotLeader { hint: h, .. } => {
                        if let Some(h) = h.filter(|h| *h != addr) {
                            hint = Some(h);
                            // Go straight to the named leader (without refreshing the
                            // locations), but not forever.
                            if hint_jumps < 2 {
                                hint_jumps += 1;
                                continue;
                            }
                        }
                        stale = Some(fetched);
                    }
                    Failure::Retry(_) | Failure::NotFound(_) => {
                        avoid.push(addr.clone());
                        stale = Some(fetched);
                    }
                }
                tracing::debug!(tablet = %tablet_id, %addr, error = %last, "write attempt failed; retrying");
            }
        }
        if !deadline.backoff(&mut backoff).await {
            return LeaderCall::Failed(deadline.timeout_error(what, last));
        }
    }
}
