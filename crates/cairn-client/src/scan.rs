//! Scans: one consistent snapshot across all tablets, partition pruning, limits, and
//! fault tolerance.
//!
//! A scan visits the table's tablets one after another in partition order (tablets
//! whose partitions cannot hold matching rows are skipped, see
//! [`PartitionSchema::prune`](cairn_common::PartitionSchema::prune)). Every tablet is
//! read at the same snapshot: with [`ReadMode::Latest`] the first tablet's response
//! fixes the snapshot timestamp and the others are read `READ_AT_SNAPSHOT` at it.
//!
//! **Fault tolerance.** A scanner lives on one replica. When opening or continuing it
//! fails (server down, scanner expired, leadership moved), the tablet's scan is reopened
//! on another replica at the same snapshot:
//! - if no row of the tablet was returned yet, it simply starts over;
//! - ordered scans ([`ScanBuilder::ordered`]) resume exactly after the last key
//!   received (`lower_key` = that key followed by a `0x00` byte);
//! - unordered scans cannot resume by key. [`ScanBuilder::execute`] and
//!   [`ScanBuilder::count`] still hold the tablet's rows, so they discard them and
//!   rescan the tablet from scratch; a [`ScanCursor`] / stream has already handed them
//!   out and fails with [`ClientError::ScanInterrupted`].

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use cairn_common::{ColumnPredicate, Partition};
use cairn_proto::{ReadMode as PbReadMode, ScanRequest, ScanResponse, ScannerKeepAliveRequest};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{ClientError, Failure, Result, classify};
use crate::retry::{Backoff, Deadline, attempt, attempt_in_process, request};
use crate::table::{Table, TabletLocationInfo};
use crate::write::decode_ipc;

/// Which snapshot a scan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// The latest committed data: the first tablet's leader picks the snapshot, the
    /// other tablets are read at the same one.
    #[default]
    Latest,
    /// A given HybridTime (0: the server picks one).
    Snapshot(u64),
    /// A fresh snapshot that includes everything this client has written or observed
    /// (Kudu's READ_YOUR_WRITES): the first tablet's server moves its clock past
    /// [`Client::last_timestamp`] and reads at its current time, so writes other
    /// clients committed before the scan are seen too; the other tablets are read at
    /// the same snapshot.
    ReadYourWrites,
}

/// All rows of a scan.
#[derive(Clone, Debug)]
pub struct ScanResult {
    /// The schema of the batches (the projection).
    pub schema: SchemaRef,
    /// Batches, tablet by tablet in partition order.
    pub batches: Vec<RecordBatch>,
    /// The snapshot every tablet was read at (0 if no tablet was read).
    pub snapshot_timestamp: u64,
}

impl ScanResult {
    /// Total number of rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// All rows in one batch.
    pub fn concat(&self) -> Result<RecordBatch> {
        Ok(arrow::compute::concat_batches(&self.schema, &self.batches)?)
    }
}

/// Configures a scan; created by [`Client::scan`].
#[derive(Clone, Debug)]
pub struct ScanBuilder {
    client: Client,
    table: Table,
    projection: Option<Vec<String>>,
    predicates: Vec<ColumnPredicate>,
    limit: Option<u64>,
    ordered: bool,
    read_mode: ReadMode,
    batch_rows: u32,
    only_tablet: Option<String>,
    timeout: Option<Duration>,
    txn: Option<u64>,
    prefer: Option<String>,
}

impl ScanBuilder {
    pub(crate) fn new(client: Client, table: Table) -> Self {
        ScanBuilder {
            client,
            table,
            projection: None,
            predicates: vec![],
            limit: None,
            ordered: false,
            read_mode: ReadMode::Latest,
            batch_rows: 0,
            only_tablet: None,
            timeout: None,
            txn: None,
            prefer: None,
        }
    }

    /// Returns only these columns, in this order (default: all columns).
    pub fn projection<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.projection = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    /// Adds a predicate; rows must satisfy all of them. Evaluated by the tablet servers.
    pub fn predicate(mut self, p: ColumnPredicate) -> Self {
        self.predicates.push(p);
        self
    }

    /// Returns at most `n` rows in total.
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// Returns each tablet's rows in primary-key order (tablets follow each other in
    /// partition order, so with hash partitioning the whole result is not sorted).
    /// Ordered scans resume exactly after a server failure.
    pub fn ordered(mut self, yes: bool) -> Self {
        self.ordered = yes;
        self
    }

    /// Reads as transaction `txn` sees the table: its own provisional rows (as its
    /// writes left them) with every other row at the scan's snapshot
    /// ([`crate::Transaction::scan`]).
    pub(crate) fn in_txn(mut self, txn: u64) -> Self {
        self.txn = Some(txn);
        self
    }

    /// Which snapshot to read (default [`ReadMode::Latest`]).
    pub fn read_mode(mut self, m: ReadMode) -> Self {
        self.read_mode = m;
        self
    }

    /// Rows per response batch the servers aim for (0: their default).
    pub fn batch_rows(mut self, n: u32) -> Self {
        self.batch_rows = n;
        self
    }

    /// Scans only this tablet of the table (for per-tablet parallel scans).
    pub fn only_tablet(mut self, tablet_id: impl Into<String>) -> Self {
        self.only_tablet = Some(tablet_id.into());
        self
    }

    /// Reads a snapshot from the replica on the tablet server at `addr` first, where
    /// the tablet has one (a fragment of a distributed query reads the replicas of
    /// the server it runs on); the others are tried if it fails. Scans of the
    /// latest data go to the leader regardless.
    pub fn prefer_replica(mut self, addr: impl Into<String>) -> Self {
        self.prefer = Some(addr.into());
        self
    }

    /// How long one step of the scan (a batch, retries included) may take (default:
    /// the client's operation timeout).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Runs the scan and collects every batch.
    pub async fn execute(self) -> Result<ScanResult> {
        let mut cursor = self.open(true).await?;
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut tablet_start = 0;
        loop {
            match cursor.next_event().await? {
                Event::TabletStarted => tablet_start = batches.len(),
                Event::TabletRestarted => batches.truncate(tablet_start),
                Event::Batch(b) => batches.push(b),
                Event::End => break,
            }
        }
        let schema = batches
            .first()
            .map(|b| b.schema())
            .unwrap_or_else(|| cursor.local_schema.clone());
        Ok(ScanResult {
            schema,
            batches,
            snapshot_timestamp: cursor.snapshot.unwrap_or(0),
        })
    }

    /// Counts the matching rows (projecting only the first key column).
    pub async fn count(mut self) -> Result<u64> {
        if let Some(&key0) = self.table.schema.key_indexes().first() {
            self.projection = Some(vec![self.table.schema.column(key0).name.clone()]);
        }
        let mut cursor = self.open(true).await?;
        let (mut total, mut tablet_rows) = (0u64, 0u64);
        loop {
            match cursor.next_event().await? {
                Event::TabletStarted => tablet_rows = 0,
                Event::TabletRestarted => {
                    total -= tablet_rows;
                    tablet_rows = 0;
                }
                Event::Batch(b) => {
                    total += b.num_rows() as u64;
                    tablet_rows += b.num_rows() as u64;
                }
                Event::End => return Ok(total),
            }
        }
    }

    /// Opens the scan for incremental reading, batch by batch.
    pub async fn cursor(self) -> Result<ScanCursor> {
        self.open(false).await
    }

    /// Opens the scan as a stream of batches. The stream ends after the first error.
    /// The next batch is fetched while the caller works on the current one (see
    /// [`ScanCursor::into_stream`]).
    pub async fn stream(
        self,
    ) -> Result<impl futures::Stream<Item = Result<RecordBatch>> + Send + 'static> {
        Ok(self.open(false).await?.into_stream())
    }

    /// Validates the scan and plans its tablets.
    async fn open(self, restartable: bool) -> Result<ScanCursor> {
        let schema = &self.table.schema;
        let (projection, all_columns, local_schema) = match &self.projection {
            Some(cols) => {
                let idx = cols
                    .iter()
                    .map(|c| schema.index_of(c))
                    .collect::<cairn_common::Result<Vec<_>>>()?;
                (cols.clone(), false, schema.project_arrow(&idx))
            }
            None => (vec![], true, schema.to_arrow()),
        };
        for p in &self.predicates {
            p.validate(schema)?;
        }
        let predicates_json: Bytes = serde_json::to_vec(&self.predicates)
            .map_err(|e| ClientError::Internal(format!("JSON encoding failed: {e}")))?
            .into();
        let (_, locs) = self.client.locations(&self.table, None).await?;
        let tablets: VecDeque<TabletLocationInfo> = match &self.only_tablet {
            Some(id) => {
                let t = locs.iter().find(|t| &t.tablet_id == id).ok_or_else(|| {
                    ClientError::NotFound(format!(
                        "tablet {id} is not a tablet of table '{}': list them with table_locations()",
                        self.table.name
                    ))
                })?;
                VecDeque::from([t.clone()])
            }
            None => {
                let parts: Vec<Partition> = locs.iter().map(|t| t.partition.clone()).collect();
                self.table
                    .partition_schema
                    .prune(schema, &parts, &self.predicates)?
                    .into_iter()
                    .map(|i| locs[i].clone())
                    .collect()
            }
        };
        let snapshot = match self.read_mode {
            ReadMode::Latest => None,
            ReadMode::Snapshot(ts) => (ts != 0).then_some(ts),
            // The server picks the snapshot after observing the client's last
            // timestamp (sent with every request), so it is at or after it.
            ReadMode::ReadYourWrites => None,
        };
        let timeout = self
            .timeout
            .unwrap_or(self.client.options().operation_timeout);
        Ok(ScanCursor {
            plan: Plan {
                projection,
                all_columns,
                predicates_json,
                ordered: self.ordered,
                batch_rows: self.batch_rows,
                txn: self.txn,
            },
            client: self.client,
            table: self.table,
            tablets,
            current: None,
            ready: VecDeque::new(),
            mode: self.read_mode,
            snapshot,
            remaining: self.limit,
            timeout,
            restartable,
            finished: false,
            local_schema,
            prefer: self.prefer,
        })
    }
}

/// What a scan sends every tablet.
#[derive(Clone, Debug)]
struct Plan {
    projection: Vec<String>,
    all_columns: bool,
    predicates_json: Bytes,
    ordered: bool,
    batch_rows: u32,
    /// The transaction the scan reads as, if any.
    txn: Option<u64>,
}

/// Progress of the scan of one tablet.
#[derive(Debug)]
struct TabletScan {
    tablet: TabletLocationInfo,
    /// Open scanner: (id, address of the replica holding it).
    scanner: Option<(String, String)>,
    /// Encoded key of the last row received from this tablet.
    last_key: Option<Bytes>,
    /// Rows of this tablet handed out so far.
    rows: u64,
    /// Replicas that failed for this tablet.
    excluded: HashSet<String>,
}

/// What one step of the cursor produced.
#[derive(Debug)]
enum Event {
    /// The scan moved on to the next tablet.
    TabletStarted,
    /// The current tablet is being rescanned from scratch: drop its rows so far.
    TabletRestarted,
    Batch(RecordBatch),
    End,
}

/// Batches a streaming scan fetches ahead of its consumer.
pub const READ_AHEAD_BATCHES: usize = 2;

/// An open scan, read batch by batch with [`ScanCursor::next_batch`]. Dropping it
/// closes the server-side scanner.
#[derive(Debug)]
pub struct ScanCursor {
    client: Client,
    table: Table,
    plan: Plan,
    tablets: VecDeque<TabletLocationInfo>,
    current: Option<TabletScan>,
    ready: VecDeque<RecordBatch>,
    mode: ReadMode,
    snapshot: Option<u64>,
    remaining: Option<u64>,
    timeout: Duration,
    /// Rescan a tablet from scratch when an unordered scan cannot resume.
    restartable: bool,
    finished: bool,
    local_schema: SchemaRef,
    /// The replica snapshot reads try first ([`ScanBuilder::prefer_replica`]).
    prefer: Option<String>,
}

impl ScanCursor {
    /// The next batch of rows, or `None` when the scan is complete.
    pub async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            match self.next_event().await? {
                Event::Batch(b) => return Ok(Some(b)),
                Event::End => return Ok(None),
                Event::TabletStarted => {}
                Event::TabletRestarted => {
                    return Err(ClientError::Internal(
                        "a streaming scan restarted a tablet".into(),
                    ));
                }
            }
        }
    }

    /// The rest of the scan as a stream that reads ahead: a background task fetches
    /// up to [`READ_AHEAD_BATCHES`] batches beyond the one the caller holds, so the
    /// tablet server scans while the caller computes. Dropping the stream stops the
    /// task. Ends after the first error.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<RecordBatch>> + Send + 'static {
        let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD_BATCHES);
        tokio::spawn(async move {
            let mut cursor = self;
            loop {
                let next = cursor.next_batch().await;
                let last = !matches!(next, Ok(Some(_)));
                let item = match next {
                    Ok(Some(b)) => Ok(b),
                    Ok(None) => break,
                    Err(e) => Err(e),
                };
                if tx.send(item).await.is_err() || last {
                    break;
                }
            }
        });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
    }

    /// The schema the batches are expected to have (from the table's schema and the
    /// projection).
    pub fn schema(&self) -> SchemaRef {
        self.local_schema.clone()
    }

    /// The scan's snapshot timestamp, once known.
    pub fn snapshot_timestamp(&self) -> Option<u64> {
        self.snapshot
    }

    /// Keeps the current server-side scanner from expiring while the caller is busy.
    pub async fn keep_alive(&mut self) -> Result<()> {
        let Some((id, addr)) = self.current.as_ref().and_then(|c| c.scanner.clone()) else {
            return Ok(());
        };
        let t = self.client.options().rpc_timeout;
        let mut stub = self.client.tablet_server_stub(&addr)?;
        let req = request(ScannerKeepAliveRequest { scanner_id: id }, t);
        match attempt(t, stub.scanner_keep_alive(req)).await {
            Ok(_) => Ok(()),
            // A lost scanner is reopened by the next `next_batch`.
            Err(status) => match classify("keeping a scanner alive", &addr, &status) {
                Failure::Fatal(e) => Err(e),
                _ => Ok(()),
            },
        }
    }

    /// Closes the scan (and its server-side scanner) early.
    pub async fn close(mut self) {
        if let Some((id, addr)) = self.current.as_mut().and_then(|c| c.scanner.take()) {
            close_scanner(&self.client, &id, &addr).await;
        }
        self.finished = true;
    }

    async fn next_event(&mut self) -> Result<Event> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Ok(Event::Batch(b));
            }
            if self.finished {
                return Ok(Event::End);
            }
            if self.remaining == Some(0) {
                self.close_current_in_background();
                self.finished = true;
                return Ok(Event::End);
            }
            if self.current.is_none() {
                match self.tablets.pop_front() {
                    None => {
                        self.finished = true;
                        return Ok(Event::End);
                    }
                    Some(tablet) => {
                        self.current = Some(TabletScan {
                            tablet,
                            scanner: None,
                            last_key: None,
                            rows: 0,
                            excluded: HashSet::new(),
                        });
                        return Ok(Event::TabletStarted);
                    }
                }
            }
            match self.fetch().await? {
                Fetched::Restarted => return Ok(Event::TabletRestarted),
                Fetched::Rows { batches, done } => {
                    let Some(st) = self.current.as_mut() else {
                        return Err(ClientError::Internal("scan lost its tablet".into()));
                    };
                    for b in batches {
                        let b = match self.remaining.as_mut() {
                            Some(r) => {
                                let n = (b.num_rows() as u64).min(*r);
                                *r -= n;
                                if n < b.num_rows() as u64 {
                                    b.slice(0, n as usize)
                                } else {
                                    b
                                }
                            }
                            None => b,
                        };
                        st.rows += b.num_rows() as u64;
                        if b.num_rows() > 0 {
                            self.ready.push_back(b);
                        }
                        if self.remaining == Some(0) {
                            break;
                        }
                    }
                    if done {
                        self.current = None;
                    }
                }
            }
        }
    }

    /// Gets the next response for the current tablet, reopening the scan elsewhere on
    /// failure.
    async fn fetch(&mut self) -> Result<Fetched> {
        let deadline = Deadline::after(self.timeout);
        let rpc_timeout = self.client.options().rpc_timeout;
        let mut backoff = Backoff::new();
        let mut stale: Option<Instant> = None;
        let mut fetched_at: Option<Instant> = None;
        let mut hint: Option<String> = None;
        let mut hint_jumps = 0;
        let mut last = String::new();
        loop {
            if deadline.expired() {
                let what = self.what();
                return Err(deadline.timeout_error(what, last));
            }
            // Refresh the tablet's replicas when reopening.
            let reopening = self.current.as_ref().is_some_and(|c| c.scanner.is_none());
            if reopening {
                let (f, locs) = self.client.locations(&self.table, stale.take()).await?;
                fetched_at = Some(f);
                let Some(st) = self.current.as_mut() else {
                    return Err(ClientError::Internal("scan lost its tablet".into()));
                };
                match locs.iter().find(|t| t.tablet_id == st.tablet.tablet_id) {
                    Some(t) => st.tablet = t.clone(),
                    None => {
                        return Err(ClientError::NotFound(format!(
                            "tablet {} of table '{}' no longer exists",
                            st.tablet.tablet_id, self.table.name
                        )));
                    }
                }
            }
            let (addr, req, continuing) = match self.next_request(hint.take()) {
                Some(x) => x,
                None => {
                    last =
                        "no replica to read from (no known leader, or all replicas failed)".into();
                    if let Some(st) = self.current.as_mut() {
                        st.excluded.clear();
                    }
                    stale = fetched_at;
                    if !deadline.backoff(&mut backoff).await {
                        let what = self.what();
                        return Err(deadline.timeout_error(what, last));
                    }
                    continue;
                }
            };
            let t = deadline.rpc_timeout(rpc_timeout);
            let result = match self.client.in_process(&addr) {
                Some(server) => attempt_in_process(t, server.scan(req))
                    .await
                    .map(|s| (s.response, Some(s.batches))),
                None => match self.client.tablet_server_stub(&addr) {
                    Ok(mut stub) => attempt(t, stub.scan(request(req, t)))
                        .await
                        .map(|r| (r, None)),
                    Err(e) => Err(tonic::Status::unavailable(e.to_string())),
                },
            };
            let status = match result {
                Ok((resp, batches)) => return self.accept(resp, batches, addr),
                Err(s) => s,
            };
            let what = self.what();
            let failure = classify(&what, &addr, &status);
            last = failure.describe();
            tracing::debug!(%addr, error = %last, continuing, "{what}: attempt failed");
            let Some(st) = self.current.as_mut() else {
                return Err(ClientError::Internal("scan lost its tablet".into()));
            };
            match failure {
                Failure::Fatal(e) => return Err(e),
                // On open: the replica does not have the tablet (moved). On continue:
                // the scanner expired or its server restarted. Either way reopen, on
                // fresh locations.
                Failure::NotFound(_) => {
                    if !continuing {
                        st.excluded.insert(addr.clone());
                    }
                    stale = fetched_at.or(Some(Instant::now()));
                }
                Failure::NotLeader { hint: h, .. } => {
                    hint = h.filter(|h| *h != addr);
                    if hint.is_none() {
                        stale = fetched_at.or(Some(Instant::now()));
                    }
                }
                Failure::Retry(_) => {
                    st.excluded.insert(addr.clone());
                    stale = fetched_at.or(Some(Instant::now()));
                }
            }
            if continuing {
                st.scanner = None;
                if st.rows > 0 && !(self.plan.ordered && st.last_key.is_some()) {
                    // Unordered (or no resume key): the rows handed out cannot be
                    // matched against a new scanner's.
                    if self.restartable {
                        if let Some(r) = self.remaining.as_mut() {
                            *r += st.rows;
                        }
                        st.rows = 0;
                        st.last_key = None;
                        return Ok(Fetched::Restarted);
                    }
                    return Err(ClientError::ScanInterrupted {
                        tablet_id: st.tablet.tablet_id.clone(),
                        rows: st.rows,
                        cause: Box::new(ClientError::Rpc {
                            what,
                            code: status.code(),
                            message: status.message().to_string(),
                        }),
                    });
                }
                if st.rows == 0 {
                    // Nothing handed out yet: start the tablet over.
                    st.last_key = None;
                }
                // A different replica is tried at once; backoff only when it fails too.
                continue;
            }
            if hint.is_some() && hint_jumps < 2 {
                // Go straight to the named leader, but not forever.
                hint_jumps += 1;
                continue;
            }
            if !deadline.backoff(&mut backoff).await {
                return Err(deadline.timeout_error(what, last));
            }
        }
    }

    /// The request for the current tablet: a continuation, or an open on the best
    /// replica (`hint` first). `None` when there is no replica to try.
    fn next_request(&self, hint: Option<String>) -> Option<(String, ScanRequest, bool)> {
        let st = self.current.as_ref()?;
        if let Some((id, addr)) = &st.scanner {
            let req = ScanRequest {
                scanner_id: id.clone(),
                tablet_id: st.tablet.tablet_id.clone(),
                batch_rows: self.plan.batch_rows,
                propagated_timestamp: self.client.last_timestamp(),
                ..Default::default()
            };
            return Some((addr.clone(), req, true));
        }
        let (read_mode, ts) = match (self.snapshot, self.mode) {
            (Some(ts), _) => (PbReadMode::ReadAtSnapshot, ts),
            (None, ReadMode::Latest) => (PbReadMode::ReadLatest, 0),
            (None, _) => (PbReadMode::ReadAtSnapshot, 0),
        };
        let addr = match hint {
            Some(h) => h,
            // READ_LATEST goes to the leader; snapshot reads to any replica, leader
            // first.
            None if read_mode == PbReadMode::ReadLatest => st.tablet.leader_addr()?.to_string(),
            None => {
                let order = st.tablet.read_order();
                let preferred = self
                    .prefer
                    .as_deref()
                    .filter(|p| order.contains(p) && !st.excluded.contains(*p));
                preferred
                    .or_else(|| order.into_iter().find(|a| !st.excluded.contains(*a)))?
                    .to_string()
            }
        };
        let lower_key = match &st.last_key {
            Some(k) if st.rows > 0 => {
                let mut k = k.to_vec();
                k.push(0);
                Bytes::from(k)
            }
            _ => Bytes::new(),
        };
        let req = ScanRequest {
            scanner_id: String::new(),
            tablet_id: st.tablet.tablet_id.clone(),
            projection: self.plan.projection.clone(),
            all_columns: self.plan.all_columns,
            predicates_json: self.plan.predicates_json.clone(),
            lower_key,
            upper_key: Bytes::new(),
            limit: self.remaining.unwrap_or(0),
            read_mode: read_mode as i32,
            snapshot_timestamp: ts,
            batch_rows: self.plan.batch_rows,
            ordered: self.plan.ordered,
            close: false,
            propagated_timestamp: self.client.last_timestamp(),
            txn_id: self.plan.txn,
        };
        Some((addr, req, false))
    }

    /// Takes in a successful response; `batches` are its rows when an in-process
    /// server sent them as they are (else they are decoded from `arrow_ipc`).
    fn accept(
        &mut self,
        resp: ScanResponse,
        batches: Option<Vec<RecordBatch>>,
        addr: String,
    ) -> Result<Fetched> {
        self.client.observe_timestamp(resp.snapshot_timestamp);
        if self.snapshot.is_none() && resp.snapshot_timestamp != 0 {
            self.snapshot = Some(resp.snapshot_timestamp);
        }
        let batches = match batches {
            Some(b) => b,
            None => decode_ipc(&resp.arrow_ipc)?,
        };
        let Some(st) = self.current.as_mut() else {
            return Err(ClientError::Internal("scan lost its tablet".into()));
        };
        if !resp.last_key.is_empty() {
            st.last_key = Some(resp.last_key);
        }
        st.scanner = None;
        if resp.has_more {
            if resp.scanner_id.is_empty() {
                return Err(ClientError::Decode {
                    what: "scan response",
                    detail: "has_more is set but no scanner id was given".into(),
                });
            }
            st.scanner = Some((resp.scanner_id, addr));
        }
        Ok(Fetched::Rows {
            batches,
            done: !resp.has_more,
        })
    }

    fn what(&self) -> String {
        match &self.current {
            Some(st) => format!(
                "scanning tablet {} of table '{}'",
                st.tablet.tablet_id, self.table.name
            ),
            None => format!("scanning table '{}'", self.table.name),
        }
    }

    fn close_current_in_background(&mut self) {
        if let Some((id, addr)) = self.current.as_mut().and_then(|c| c.scanner.take())
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let client = self.client.clone();
            handle.spawn(async move { close_scanner(&client, &id, &addr).await });
        }
    }
}

impl Drop for ScanCursor {
    fn drop(&mut self) {
        self.close_current_in_background();
    }
}

enum Fetched {
    Rows {
        batches: Vec<RecordBatch>,
        done: bool,
    },
    Restarted,
}

/// Best-effort close of a server-side scanner (errors ignored: it expires anyway).
async fn close_scanner(client: &Client, id: &str, addr: &str) {
    let t = client.options().rpc_timeout.min(Duration::from_secs(5));
    let req = ScanRequest {
        scanner_id: id.to_string(),
        close: true,
        ..Default::default()
    };
    let result = match client.in_process(addr) {
        Some(server) => attempt_in_process(t, server.scan(req)).await.map(|_| ()),
        None => match client.tablet_server_stub(addr) {
            Ok(mut stub) => attempt(t, stub.scan(request(req, t))).await.map(|_| ()),
            Err(_) => return,
        },
    };
    if let Err(e) = result {
        tracing::debug!(scanner = id, %addr, error = %e, "closing a scanner failed");
    }
}
