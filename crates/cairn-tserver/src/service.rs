//! The gRPC `TabletServer` service.
//!
//! Every RPC first asks the [`AuthGate`] who is calling. Reads and writes need the
//! caller's privileges on the tablet's table (a token's claims, checked here without
//! asking the master); the administrative RPCs (CreateTablet, DeleteTablet,
//! ListTablets, Checksum, ChangeConfig, StepDown, FlushTablet, SafeIndex,
//! AlterSchema) need a cluster certificate or a superuser's token. Calls from the
//! same process ([`pb::InProcessTabletServer`]) come from the SQL engine, which has
//! authorized the statement while planning it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_common::{ColumnPredicate, HybridTime, Value};
use cairn_consensus::ReplicaRole;
use cairn_proto as pb;
use cairn_proto::auth::{Action, AuthGate, Principal, Privileges};
use cairn_proto::tablet_server_client::TabletServerClient;
use cairn_tablet::{ReadMode, ScanSpec, Scanner};
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use crate::convert::{decode_ipc, encode_ipc, request_id, row_error, row_ops};
use crate::error::{Result, TserverError};
use crate::manager::TabletManager;
use crate::replica::{DEFAULT_DEADLINE, HomeState, TabletReplica, TxnStep, WriteOptions};
use cairn_tablet::{TxnDecision, TxnRole};

struct OpenScanner {
    scanner: Scanner,
    last_used: Instant,
    /// The tablet it reads (privileges are checked again on every continuation).
    tablet_id: String,
}

/// Default rows per scan response.
const DEFAULT_SCAN_ROWS: usize = 65_536;

/// Caps on what one request or all clients together may ask of a tablet server. Each
/// is a flag of `cairn tserver`; a request past one fails with `ResourceExhausted` and
/// a message that names the flag.
#[derive(Clone, Debug)]
pub struct ServiceLimits {
    /// The most rows a scan request may ask for in one response
    /// (`--max-scan-batch-rows`).
    pub max_scan_batch_rows: u32,
    /// The most scanners open at once on this server (`--max-open-scanners`). Idle
    /// ones expire after the scanner TTL.
    pub max_open_scanners: usize,
    /// The largest row a write may carry, in bytes (`--max-row-bytes`): strings and
    /// binaries count their length, other cells 8 bytes.
    pub max_row_bytes: usize,
    /// An open transaction whose coordinator sends nothing (no write, no
    /// keep-alive) for this long is aborted, freeing its rows (`--txn-abandon-secs`;
    /// coordinators send keep-alives every `cairn_client::txn::TXN_KEEPALIVE_INTERVAL`).
    pub txn_abandon_after: Duration,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        ServiceLimits {
            max_scan_batch_rows: 1 << 20,
            max_open_scanners: 10_000,
            max_row_bytes: 64 << 20,
            txn_abandon_after: Duration::from_secs(30),
        }
    }
}

/// The service state.
#[derive(Clone)]
pub struct TabletService {
    manager: Arc<TabletManager>,
    scanners: Arc<Mutex<HashMap<String, OpenScanner>>>,
    limits: ServiceLimits,
    gate: Arc<AuthGate>,
    /// Chains writes to tables with subspaces (set once the server has a client).
    chains: Arc<std::sync::OnceLock<Arc<crate::chain::ChainDriver>>>,
}

/// The privileges a write's rows need: INSERT for inserts, UPDATE for updates,
/// both for upserts, DELETE for deletes.
fn write_privileges(req: &pb::WriteRequest) -> Privileges {
    let mut need = Privileges::NONE;
    for b in &req.batches {
        for k in b.op_kinds.iter() {
            need = need.union(match pb::OpKind::try_from(*k as i32) {
                Ok(pb::OpKind::Insert | pb::OpKind::InsertIgnore) => Privileges::INSERT,
                Ok(pb::OpKind::Upsert) => Privileges::INSERT.union(Privileges::UPDATE),
                Ok(pb::OpKind::Update | pb::OpKind::UpdateIgnore) => Privileges::UPDATE,
                Ok(pb::OpKind::Delete | pb::OpKind::DeleteIgnore) => Privileges::DELETE,
                // Refused later as malformed.
                Err(_) => Privileges::NONE,
            });
        }
    }
    need
}

impl TabletService {
    /// A service over `manager`'s replicas; `gate` decides who is calling.
    pub fn new(manager: Arc<TabletManager>, limits: ServiceLimits, gate: Arc<AuthGate>) -> Self {
        TabletService {
            manager,
            scanners: Arc::new(Mutex::new(HashMap::new())),
            limits,
            gate,
            chains: Arc::new(std::sync::OnceLock::new()),
        }
    }

    /// Gives the service the driver that chains writes to tables with subspaces.
    pub fn set_chain_driver(&self, d: Arc<crate::chain::ChainDriver>) {
        let _ = self.chains.set(d);
    }

    /// The driver of chains into subspaces.
    pub(crate) fn chain_driver(&self) -> Result<Arc<crate::chain::ChainDriver>> {
        self.chains.get().cloned().ok_or_else(|| {
            TserverError::Unavailable(
                "this server is not ready to write tables with subspaces yet; retry".into(),
            )
        })
    }

    /// The server's tablet replicas.
    pub(crate) fn manager(&self) -> &Arc<TabletManager> {
        &self.manager
    }

    /// The caller of `req`, which must be an administrator (`what` names the RPC).
    fn admin<T>(&self, req: &Request<T>, what: &str) -> std::result::Result<(), Status> {
        self.gate.check(req, Action::Admin(what)).map(|_| ())
    }

    /// Checks that the caller of `req` holds `need` on `tablet_id`'s table.
    fn check_table<T>(
        &self,
        req: &Request<T>,
        tablet_id: &str,
        need: Privileges,
    ) -> std::result::Result<(), Status> {
        let who = self.gate.principal(req)?;
        if let Principal::User(_) = who {
            let replica = self.manager.get(tablet_id)?;
            who.check(Action::Table {
                id: replica
                    .meta
                    .privileges_of
                    .as_deref()
                    .unwrap_or(&replica.meta.table_id),
                name: &replica.meta.table_name,
                need,
            })?;
        }
        Ok(())
    }

    /// Drops scanners idle for longer than `ttl`; returns how many.
    pub fn expire_scanners(&self, ttl: Duration) -> usize {
        let mut m = self.scanners.lock();
        let before = m.len();
        m.retain(|_, s| s.last_used.elapsed() < ttl);
        before - m.len()
    }

    /// Open scanners.
    pub fn open_scanners(&self) -> usize {
        self.scanners.lock().len()
    }

    /// The replica of `tablet_id`, which must be the ready leader.
    fn leader_replica(&self, tablet_id: &str) -> Result<Arc<TabletReplica>> {
        let replica = self.manager.get(tablet_id)?;
        replica.group.check_leader_ready()?;
        Ok(replica)
    }

    /// Observes a client's propagated timestamp (refused if it lies beyond the clock's
    /// maximum offset: it must not move this server's clock).
    pub(crate) fn observe(&self, ts: u64) -> Result<()> {
        if ts > 0 {
            self.manager.clock().observe(HybridTime(ts))?;
        }
        Ok(())
    }

    async fn resolve_mode(
        &self,
        replica: &Arc<TabletReplica>,
        mode: i32,
        ts: u64,
        deadline: tokio::time::Instant,
    ) -> Result<ReadMode> {
        let snapshot = if mode == pb::ReadMode::ReadAtSnapshot as i32 {
            Some(ts)
        } else {
            None
        };
        let pool = self.manager.pool().clone();
        let tablet_id = replica.meta.tablet_id.clone();
        replica
            .read_mode(snapshot, deadline, move |addr, ts| async move {
                let ch = pool
                    .get(&addr)
                    .map_err(|e| TserverError::Unavailable(e.to_string()))?;
                let mut c = TabletServerClient::new(ch);
                let r = c
                    .safe_index(pb::SafeIndexRequest {
                        tablet_id,
                        timestamp: ts,
                    })
                    .await
                    .map_err(|s| {
                        TserverError::Unavailable(format!(
                            "asking the leader at {addr} for a safe index: {}",
                            s.message()
                        ))
                    })?
                    .into_inner();
                Ok((r.index, r.timestamp))
            })
            .await
    }

    /// The `Get` RPC after authorization: one row by primary key at the tablet's
    /// leader. A latest read takes a fresh snapshot after the client's timestamp and
    /// waits only for writes in flight on its own key ([`cairn_tablet::Tablet::get_point`]),
    /// on a blocking thread only when it must wait; a read at a given snapshot waits
    /// for that snapshot to be safe.
    pub async fn get_row(
        &self,
        req: pb::GetRequest,
        deadline: tokio::time::Instant,
    ) -> Result<pb::GetResponse> {
        self.observe(req.propagated_timestamp)?;
        let replica = self.leader_replica(&req.tablet_id)?;
        let tablet = replica.tablet();
        let schema = tablet.schema();
        let mut r = cairn_common::codec::Reader::new(&req.key, "primary key");
        let mut key = Vec::with_capacity(schema.key_indexes().len());
        for _ in schema.key_indexes() {
            key.push(r.value().map_err(|e| {
                TserverError::InvalidArgument(format!("malformed key of a Get: {e}"))
            })?);
        }
        if !r.is_empty() {
            return Err(TserverError::InvalidArgument(format!(
                "the key of a Get has more values than the table's {} key columns",
                schema.key_indexes().len()
            )));
        }
        let projection: Vec<usize> = if req.projection.is_empty() {
            (0..schema.num_columns()).collect()
        } else {
            req.projection
                .iter()
                .map(|c| schema.index_of(c))
                .collect::<cairn_common::Result<_>>()?
        };
        let (snap, row) = if req.snapshot_timestamp == 0 {
            replica.group.confirm_leadership(deadline).await?;
            let std_deadline = deadline.into_std();
            match tablet.get_point(&key, std_deadline, false, Some(&projection))? {
                Some(found) => found,
                None => {
                    let t = tablet.clone();
                    let want = projection.clone();
                    tokio::task::spawn_blocking(move || {
                        t.get_point(&key, std_deadline, true, Some(&want))
                    })
                    .await
                    .map_err(|e| TserverError::Internal(e.to_string()))??
                    .ok_or_else(|| {
                        TserverError::Internal("a blocking point read did not read".into())
                    })?
                }
            }
        } else {
            let mode = self
                .resolve_mode(
                    &replica,
                    pb::ReadMode::ReadAtSnapshot as i32,
                    req.snapshot_timestamp,
                    deadline,
                )
                .await?;
            let t = tablet.clone();
            let want = projection.clone();
            let row = tokio::task::spawn_blocking(move || t.get_projected(&key, mode, Some(&want)))
                .await
                .map_err(|e| TserverError::Internal(e.to_string()))??;
            (HybridTime(req.snapshot_timestamp), row)
        };
        let mut out = Vec::new();
        if let Some(row) = &row {
            for &i in &projection {
                let v = row.get(i).ok_or_else(|| {
                    TserverError::Unavailable(
                        "the table's columns changed during the read (ALTER TABLE); retry".into(),
                    )
                })?;
                cairn_common::codec::put_value(&mut out, v);
            }
        }
        Ok(pb::GetResponse {
            found: row.is_some(),
            row: out.into(),
            snapshot_timestamp: snap.0,
        })
    }

    /// The `Scan` RPC for a caller in this process: the response with `arrow_ipc` left
    /// empty and the rows as they were read (no IPC encoding), with the scan's schema
    /// (`None` when a scanner was only closed).
    pub async fn scan_batches(
        &self,
        req: pb::ScanRequest,
        deadline: tokio::time::Instant,
    ) -> Result<(pb::InProcessScan, Option<arrow::datatypes::SchemaRef>)> {
        self.observe(req.propagated_timestamp)?;
        if req.close && !req.scanner_id.is_empty() {
            // Closing: drop the scanner without reading on.
            self.scanners.lock().remove(&req.scanner_id);
            let closed = pb::InProcessScan {
                response: pb::ScanResponse::default(),
                batches: vec![],
            };
            return Ok((closed, None));
        }
        if req.batch_rows > self.limits.max_scan_batch_rows {
            // Final, not retryable: the same request would fail again.
            return Err(TserverError::InvalidArgument(format!(
                "a scan batch of {} rows exceeds --max-scan-batch-rows ({}): ask for fewer \
                 rows per batch",
                req.batch_rows, self.limits.max_scan_batch_rows
            )));
        }
        let target_rows = if req.batch_rows == 0 {
            DEFAULT_SCAN_ROWS.min(self.limits.max_scan_batch_rows as usize)
        } else {
            req.batch_rows as usize
        };
        let (scanner, batches, has_more) = if req.scanner_id.is_empty() {
            let open = self.scanners.lock().len();
            if open >= self.limits.max_open_scanners {
                return Err(TserverError::LimitExceeded {
                    what: format!("{} open scanners", open + 1),
                    flag: "--max-open-scanners",
                    limit: self.limits.max_open_scanners as u64,
                    hint: ": finish or close scans, or retry when idle ones expire",
                });
            }
            let replica = self.manager.get(&req.tablet_id)?;
            let mode = self
                .resolve_mode(&replica, req.read_mode, req.snapshot_timestamp, deadline)
                .await?;
            let predicates: Vec<ColumnPredicate> = if req.predicates_json.is_empty() {
                vec![]
            } else {
                serde_json::from_slice(&req.predicates_json).map_err(|e| {
                    TserverError::InvalidArgument(format!("malformed predicates: {e}"))
                })?
            };
            let spec = ScanSpec {
                projection: if req.all_columns || req.projection.is_empty() {
                    None
                } else {
                    Some(req.projection.clone())
                },
                predicates,
                read_mode: mode,
                limit: (req.limit > 0).then_some(req.limit as usize),
                ordered: req.ordered,
                // No larger than the limit: a point read builds one-row batches.
                batch_size: target_rows
                    .min(if req.limit > 0 {
                        req.limit as usize
                    } else {
                        usize::MAX
                    })
                    .clamp(1, 8192),
                lower_key: (!req.lower_key.is_empty()).then(|| req.lower_key.to_vec()),
                upper_key: (!req.upper_key.is_empty()).then(|| req.upper_key.to_vec()),
                txn: req.txn_id.map(cairn_tablet::TxnId),
            };
            // A small scan (a search's cell, a key's few versions) is read on this
            // task, as a point read is: a hop to the blocking pool and back costs
            // more than reading it. Anything larger, or a snapshot that needs a wait,
            // is opened and read on one blocking task.
            let tablet = replica.tablet();
            match tablet.scan_if_ready(spec.clone())? {
                Some(scanner) if scanner.stored_rows_at_most(INLINE_SCAN_ROWS) => {
                    read_batches(scanner, target_rows)?
                }
                _ => tokio::task::spawn_blocking(move || {
                    read_batches(tablet.scan(spec)?, target_rows)
                })
                .await
                .map_err(|e| TserverError::Internal(e.to_string()))??,
            }
        } else {
            let scanner = {
                let mut scanners = self.scanners.lock();
                match scanners.get(&req.scanner_id) {
                    // A scanner continues only with the tablet it was opened on (whose
                    // privileges the caller was checked for).
                    Some(s) if s.tablet_id == req.tablet_id => {}
                    _ => return Err(TserverError::ScannerNotFound(req.scanner_id.clone())),
                }
                scanners
                    .remove(&req.scanner_id)
                    .ok_or_else(|| TserverError::ScannerNotFound(req.scanner_id.clone()))?
                    .scanner
            };
            tokio::task::spawn_blocking(move || read_batches(scanner, target_rows))
                .await
                .map_err(|e| TserverError::Internal(e.to_string()))??
        };
        let schema = scanner.schema();
        let snapshot = scanner.snapshot().0;
        let last_key = scanner.last_key().map(|k| k.to_vec()).unwrap_or_default();
        let mut id = String::new();
        if has_more && !req.close {
            id = if req.scanner_id.is_empty() {
                format!("{:016x}", rand::random::<u64>())
            } else {
                req.scanner_id.clone()
            };
            self.scanners.lock().insert(
                id.clone(),
                OpenScanner {
                    scanner,
                    last_used: Instant::now(),
                    tablet_id: req.tablet_id.clone(),
                },
            );
        }
        let response = pb::ScanResponse {
            scanner_id: id,
            arrow_ipc: Default::default(),
            has_more: has_more && !req.close,
            snapshot_timestamp: snapshot,
            last_key: last_key.into(),
        };
        Ok((pb::InProcessScan { response, batches }, Some(schema)))
    }

    /// The `BulkInsert` RPC for a caller in this process (rows already decoded).
    pub async fn bulk_insert_rows(
        &self,
        req: pb::BulkInsertRequest,
        rows: arrow::array::RecordBatch,
        deadline: tokio::time::Instant,
    ) -> Result<pb::WriteResponse> {
        self.observe(req.propagated_timestamp)?;
        crate::convert::check_row_sizes(&rows, self.limits.max_row_bytes)?;
        let replica = self.leader_replica(&req.tablet_id)?;
        let request = request_id(req.request_id.as_ref())?;
        let (ts, errs) = if replica.subspaces().is_empty() {
            replica.bulk_insert(rows, request, deadline).await?
        } else {
            self.chained_bulk_insert(&replica, rows, request, deadline)
                .await?
        };
        Ok(pb::WriteResponse {
            row_errors: errs.iter().map(|(i, e)| row_error(*i, e)).collect(),
            timestamp: ts.0,
        })
    }

    /// The `Write` RPC for a caller in this process.
    pub async fn write_ops(
        &self,
        req: pb::WriteRequest,
        deadline: tokio::time::Instant,
    ) -> Result<pb::WriteResponse> {
        self.observe(req.propagated_timestamp)?;
        let replica = self.leader_replica(&req.tablet_id)?;
        let schema = replica.tablet().schema();
        let ops = row_ops(&schema, &req.batches, self.limits.max_row_bytes)?;
        let wo = WriteOptions {
            atomic: req.atomic,
            request: request_id(req.request_id.as_ref())?,
            deadline,
            txn: req.txn_id.map(cairn_tablet::TxnId),
            decoded_with: Some(schema.clone()),
        };
        let (ts, errs) = if replica.subspaces().is_empty() {
            replica.write(ops, wo).await?
        } else {
            self.chained_write(&replica, &schema, ops, wo).await?
        };
        Ok(pb::WriteResponse {
            row_errors: errs.iter().map(|(i, e)| row_error(*i, e)).collect(),
            timestamp: ts.0,
        })
    }
}

impl TabletService {
    /// The `TxnControl` RPC after authorization: one step of a transaction on the
    /// tablet's leader.
    pub async fn txn_step(
        &self,
        req: pb::TxnControlRequest,
        deadline: tokio::time::Instant,
    ) -> Result<pb::TxnControlResponse> {
        self.observe(req.propagated_timestamp)?;
        let replica = self.leader_replica(&req.tablet_id)?;
        let txn = cairn_tablet::TxnId(req.txn_id);
        let step = match pb::TxnAction::try_from(req.action) {
            Ok(pb::TxnAction::TxnBeginCommit) => TxnStep::BeginCommit(if req.is_home {
                Some(TxnRole::Home)
            } else if !req.home_tablet_id.is_empty() {
                cairn_common::validate_id(cairn_common::IdKind::Tablet, &req.home_tablet_id)?;
                cairn_common::validate_id(cairn_common::IdKind::Table, &req.home_table_id)?;
                Some(TxnRole::Participant {
                    table_id: req.home_table_id.clone(),
                    tablet_id: req.home_tablet_id.clone(),
                })
            } else {
                None
            }),
            Ok(pb::TxnAction::TxnStatus) => {
                let state = replica
                    .txn_status(txn, HybridTime(req.prepared_at), deadline)
                    .await?;
                let (state, timestamp) = match state {
                    HomeState::Pending => (pb::TxnState::Pending, 0),
                    HomeState::Committed(ts) => (pb::TxnState::Committed, ts.0),
                    HomeState::Aborted => (pb::TxnState::Aborted, 0),
                    HomeState::Unknown => (pb::TxnState::Unknown, 0),
                };
                return Ok(pb::TxnControlResponse {
                    timestamp,
                    state: state as i32,
                });
            }
            Ok(pb::TxnAction::TxnCommit) => TxnStep::Finish(TxnDecision::Commit(
                (req.commit_timestamp != 0).then_some(HybridTime(req.commit_timestamp)),
            )),
            Ok(pb::TxnAction::TxnAbort) => TxnStep::Finish(TxnDecision::Abort),
            Ok(pb::TxnAction::TxnKeepalive) => TxnStep::KeepAlive,
            Err(_) => {
                return Err(TserverError::InvalidArgument(format!(
                    "unknown transaction action {}",
                    req.action
                )));
            }
        };
        if let TxnStep::Finish(TxnDecision::Commit(Some(ts))) = step {
            self.observe(ts.0)?;
        }
        let commits = matches!(step, TxnStep::Finish(TxnDecision::Commit(_)));
        if commits && !replica.subspaces().is_empty() {
            return self.commit_chained(&replica, txn, step, deadline).await;
        }
        let ts = replica.txn_control(txn, step, deadline).await?;
        Ok(pb::TxnControlResponse {
            timestamp: ts.map_or(0, |t| t.0),
            state: pb::TxnState::Pending as i32,
        })
    }
}

/// The deadline of a call without one.
fn default_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + DEFAULT_DEADLINE
}

/// A request's deadline: its `grpc-timeout` (capped at the default), else the default.
fn deadline_of<T>(req: &Request<T>) -> tokio::time::Instant {
    let timeout = req
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .map_or(DEFAULT_DEADLINE, |t| t.min(DEFAULT_DEADLINE));
    tokio::time::Instant::now() + timeout
}

/// Parses a `grpc-timeout` header value (an integer and a unit: H, M, S, m, u, n).
fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    let (num, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A replica's report for the master.
pub fn report(r: &TabletReplica) -> pb::TabletReport {
    let st = r.group.status();
    let role = match st.role {
        ReplicaRole::Leader => pb::RaftRole::Leader,
        ReplicaRole::Follower => pb::RaftRole::Follower,
        ReplicaRole::Learner => pb::RaftRole::Learner,
        ReplicaRole::Candidate => pb::RaftRole::Candidate,
        ReplicaRole::Shutdown => pb::RaftRole::Shutdown,
    };
    let stats = r.tablet().stats();
    let peers = |m: &std::collections::BTreeMap<u64, String>| {
        m.iter()
            .map(|(id, a)| pb::Peer {
                node_id: *id,
                addr: a.clone(),
            })
            .collect()
    };
    pb::TabletReport {
        tablet_id: r.meta.tablet_id.clone(),
        table_id: r.meta.table_id.clone(),
        role: role as i32,
        term: st.term,
        leader_id: st.leader.unwrap_or(0),
        voters: peers(&st.voters),
        learners: peers(&st.learners),
        last_applied: st.last_applied,
        last_log_index: st.last_log_index,
        num_rows_estimate: (stats.disk_rows + stats.mrs_rows) as u64,
        disk_bytes: stats.disk_bytes,
        // A replica whose tablet failed (a log or metadata write failed: disk full,
        // I/O error) or whose group stopped is reported FAILED; the master replaces it.
        state: if r.tablet().failure().is_some() || st.role == ReplicaRole::Shutdown {
            "FAILED".into()
        } else {
            "RUNNING".into()
        },
        millis_since_contact: Default::default(),
        column_stats_json: Default::default(),
    }
}

/// An order-independent checksum of rows: the wrapping sum of each row's hash.
fn checksum_batch(b: &arrow::array::RecordBatch, types: &[cairn_common::DataType]) -> Result<u64> {
    let mut sum = 0u64;
    let mut buf = Vec::new();
    for r in 0..b.num_rows() {
        buf.clear();
        for (c, t) in b.columns().iter().zip(types) {
            let v = Value::from_array(c.as_ref(), r, t)?;
            cairn_common::codec::put_value(&mut buf, &v);
        }
        sum = sum.wrapping_add(xxhash_rust::xxh64::xxh64(&buf, 0));
    }
    Ok(sum)
}

#[tonic::async_trait]
impl pb::tablet_server_server::TabletServer for TabletService {
    async fn create_tablet(
        &self,
        request: Request<pb::CreateTabletRequest>,
    ) -> Result<Response<pb::CreateTabletResponse>, Status> {
        self.admin(&request, "CreateTablet")?;
        self.manager.create(request.into_inner()).await?;
        Ok(Response::new(pb::CreateTabletResponse {}))
    }

    async fn delete_tablet(
        &self,
        request: Request<pb::DeleteTabletRequest>,
    ) -> Result<Response<pb::DeleteTabletResponse>, Status> {
        self.admin(&request, "DeleteTablet")?;
        self.manager.delete(&request.into_inner().tablet_id).await?;
        Ok(Response::new(pb::DeleteTabletResponse {}))
    }

    async fn write(
        &self,
        request: Request<pb::WriteRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let deadline = deadline_of(&request);
        let need = write_privileges(request.get_ref());
        self.check_table(&request, &request.get_ref().tablet_id, need)?;
        Ok(Response::new(
            self.write_ops(request.into_inner(), deadline).await?,
        ))
    }

    async fn txn_control(
        &self,
        request: Request<pb::TxnControlRequest>,
    ) -> Result<Response<pb::TxnControlResponse>, Status> {
        let deadline = deadline_of(&request);
        // Whoever may write the table in some way may end a transaction's writes to
        // it (the transaction's writes themselves were checked one by one).
        let mut allowed = Ok(());
        for need in [Privileges::INSERT, Privileges::UPDATE, Privileges::DELETE] {
            allowed = self.check_table(&request, &request.get_ref().tablet_id, need);
            if allowed.is_ok() {
                break;
            }
        }
        allowed?;
        Ok(Response::new(
            self.txn_step(request.into_inner(), deadline).await?,
        ))
    }

    async fn bulk_insert(
        &self,
        request: Request<pb::BulkInsertRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let deadline = deadline_of(&request);
        cairn_common::validate_id(cairn_common::IdKind::Tablet, &request.get_ref().tablet_id)
            .map_err(TserverError::from)?;
        self.check_table(&request, &request.get_ref().tablet_id, Privileges::INSERT)?;
        let mut req = request.into_inner();
        let batches = decode_ipc(&req.arrow_ipc)?;
        req.arrow_ipc = Default::default();
        let rows = match batches.first() {
            Some(first) => arrow::compute::concat_batches(&first.schema(), &batches)
                .map_err(|e| TserverError::InvalidArgument(format!("bad bulk batch: {e}")))?,
            None => {
                return Err(
                    TserverError::InvalidArgument("a bulk insert needs rows".into()).into(),
                );
            }
        };
        Ok(Response::new(
            self.bulk_insert_rows(req, rows, deadline).await?,
        ))
    }

    async fn scan(
        &self,
        request: Request<pb::ScanRequest>,
    ) -> Result<Response<pb::ScanResponse>, Status> {
        let deadline = deadline_of(&request);
        if !request.get_ref().close {
            self.check_table(&request, &request.get_ref().tablet_id, Privileges::SELECT)?;
        }
        let (scan, schema) = self.scan_batches(request.into_inner(), deadline).await?;
        let mut response = scan.response;
        if let Some(schema) = schema {
            response.arrow_ipc = encode_ipc(&schema, &scan.batches)?.into();
        }
        Ok(Response::new(response))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let deadline = deadline_of(&request);
        self.check_table(&request, &request.get_ref().tablet_id, Privileges::SELECT)?;
        Ok(Response::new(
            self.get_row(request.into_inner(), deadline).await?,
        ))
    }

    async fn scanner_keep_alive(
        &self,
        request: Request<pb::ScannerKeepAliveRequest>,
    ) -> Result<Response<pb::ScannerKeepAliveResponse>, Status> {
        self.gate.principal(&request)?;
        let id = request.into_inner().scanner_id;
        match self.scanners.lock().get_mut(&id) {
            Some(s) => s.last_used = Instant::now(),
            None => return Err(TserverError::ScannerNotFound(id).into()),
        }
        Ok(Response::new(pb::ScannerKeepAliveResponse {}))
    }

    async fn list_tablets(
        &self,
        request: Request<pb::ListTabletsRequest>,
    ) -> Result<Response<pb::ListTabletsResponse>, Status> {
        self.admin(&request, "ListTablets")?;
        Ok(Response::new(pb::ListTabletsResponse {
            node_id: self.manager.node_id(),
            tablets: self
                .manager
                .list()
                .iter()
                .map(|r| {
                    let mut rep = report(r);
                    // Statistics for SQL planners; unserializable ones are left out.
                    rep.column_stats_json = serde_json::to_vec(&r.tablet().column_statistics())
                        .unwrap_or_default()
                        .into();
                    rep
                })
                .collect(),
        }))
    }

    async fn checksum(
        &self,
        request: Request<pb::ChecksumRequest>,
    ) -> Result<Response<pb::ChecksumResponse>, Status> {
        self.admin(&request, "Checksum")?;
        let deadline = deadline_of(&request);
        let req = request.into_inner();
        let replica = self.manager.get(&req.tablet_id)?;
        let mode = self
            .resolve_mode(
                &replica,
                pb::ReadMode::ReadAtSnapshot as i32,
                req.snapshot_timestamp,
                deadline,
            )
            .await?;
        let tablet = replica.tablet();
        let (sum, rows, ts) = tokio::task::spawn_blocking(move || -> Result<(u64, u64, u64)> {
            let schema = tablet.schema();
            let types: Vec<_> = schema
                .columns()
                .iter()
                .map(|c| c.data_type.clone())
                .collect();
            let mut s = tablet.scan(ScanSpec {
                read_mode: mode,
                ..Default::default()
            })?;
            let (mut sum, mut rows) = (0u64, 0u64);
            while let Some(b) = s.next_batch()? {
                sum = sum.wrapping_add(checksum_batch(&b, &types)?);
                rows += b.num_rows() as u64;
            }
            Ok((sum, rows, s.snapshot().0))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(pb::ChecksumResponse {
            checksum: sum,
            rows,
            snapshot_timestamp: ts,
        }))
    }

    async fn change_config(
        &self,
        request: Request<pb::ChangeConfigRequest>,
    ) -> Result<Response<pb::ChangeConfigResponse>, Status> {
        self.admin(&request, "ChangeConfig")?;
        let req = request.into_inner();
        let replica = self.manager.get(&req.tablet_id)?;
        if let Some(p) = req.add_voter {
            replica
                .group
                .add_voter(p.node_id, &p.addr)
                .await
                .map_err(TserverError::from)?;
        }
        if req.remove_node != 0 {
            replica
                .group
                .remove_member(req.remove_node)
                .await
                .map_err(TserverError::from)?;
        }
        Ok(Response::new(pb::ChangeConfigResponse {}))
    }

    async fn step_down(
        &self,
        request: Request<pb::StepDownRequest>,
    ) -> Result<Response<pb::StepDownResponse>, Status> {
        self.admin(&request, "StepDown")?;
        let replica = self.manager.get(&request.into_inner().tablet_id)?;
        replica.group.step_down().map_err(TserverError::from)?;
        Ok(Response::new(pb::StepDownResponse {}))
    }

    async fn flush_tablet(
        &self,
        request: Request<pb::FlushTabletRequest>,
    ) -> Result<Response<pb::FlushTabletResponse>, Status> {
        self.admin(&request, "FlushTablet")?;
        let replica = self.manager.get(&request.into_inner().tablet_id)?;
        let tablet = replica.tablet();
        let flushed = tokio::task::spawn_blocking(move || tablet.flush_mrs())
            .await
            .map_err(|e| TserverError::Internal(e.to_string()))?
            .map_err(TserverError::from)?;
        Ok(Response::new(pb::FlushTabletResponse { flushed }))
    }

    async fn safe_index(
        &self,
        request: Request<pb::SafeIndexRequest>,
    ) -> Result<Response<pb::SafeIndexResponse>, Status> {
        self.admin(&request, "SafeIndex")?;
        let deadline = deadline_of(&request);
        let req = request.into_inner();
        let replica = self.leader_replica(&req.tablet_id)?;
        let (index, timestamp) = replica.safe_index(req.timestamp, deadline).await?;
        Ok(Response::new(pb::SafeIndexResponse { index, timestamp }))
    }

    async fn alter_schema(
        &self,
        request: Request<pb::AlterSchemaRequest>,
    ) -> Result<Response<pb::AlterSchemaResponse>, Status> {
        self.admin(&request, "AlterSchema")?;
        let deadline = deadline_of(&request);
        let req = request.into_inner();
        let replica = self.leader_replica(&req.tablet_id)?;
        let steps: Vec<cairn_common::AlterOp> = serde_json::from_slice(&req.steps_json)
            .map_err(|e| TserverError::InvalidArgument(format!("malformed alter steps: {e}")))?;
        let version = replica.tablet().schema().version();
        if version < req.target_version {
            let missing = (req.target_version - version) as usize;
            if missing > steps.len() {
                return Err(TserverError::InvalidArgument(format!(
                    "tablet schema version {version} is too old for target {} with {} steps",
                    req.target_version,
                    steps.len()
                ))
                .into());
            }
            for step in &steps[steps.len() - missing..] {
                let rec = replica
                    .tablet()
                    .prepare_alter(step)
                    .map_err(TserverError::from)?;
                replica.propose_record(rec, deadline).await?;
            }
        }
        let (subspaces_version, subspaces_timestamp) = if req.subspaces_version > 0 {
            replica
                .set_subspaces(req.subspaces_version, req.subspaces_json.to_vec(), deadline)
                .await?
        } else {
            replica.subspaces_version()
        };
        Ok(Response::new(pb::AlterSchemaResponse {
            version: replica.tablet().schema().version(),
            subspaces_version,
            subspaces_timestamp,
        }))
    }
}

impl pb::InProcessTabletServer for TabletService {
    fn scan(
        &self,
        req: pb::ScanRequest,
    ) -> futures::future::BoxFuture<'static, std::result::Result<pb::InProcessScan, Status>> {
        let svc = self.clone();
        Box::pin(async move { Ok(svc.scan_batches(req, default_deadline()).await?.0) })
    }

    fn write(
        &self,
        req: pb::WriteRequest,
    ) -> futures::future::BoxFuture<'static, std::result::Result<pb::WriteResponse, Status>> {
        let svc = self.clone();
        Box::pin(async move { Ok(svc.write_ops(req, default_deadline()).await?) })
    }

    fn txn_control(
        &self,
        req: pb::TxnControlRequest,
    ) -> futures::future::BoxFuture<'static, std::result::Result<pb::TxnControlResponse, Status>>
    {
        let svc = self.clone();
        Box::pin(async move { Ok(svc.txn_step(req, default_deadline()).await?) })
    }

    fn get(
        &self,
        req: pb::GetRequest,
    ) -> futures::future::BoxFuture<'static, std::result::Result<pb::GetResponse, Status>> {
        let svc = self.clone();
        Box::pin(async move { Ok(svc.get_row(req, default_deadline()).await?) })
    }

    fn bulk_insert(
        &self,
        req: pb::BulkInsertRequest,
        rows: arrow::array::RecordBatch,
    ) -> futures::future::BoxFuture<'static, std::result::Result<pb::WriteResponse, Status>> {
        let svc = self.clone();
        Box::pin(async move { Ok(svc.bulk_insert_rows(req, rows, default_deadline()).await?) })
    }
}

/// The most rows (at any version, matching or not) a scan's stores may hold in its
/// key range for the scan to be read on the async task that received it.
const INLINE_SCAN_ROWS: usize = 512;

/// Reads batches from `scanner` until `target_rows` rows or its end; returns the
/// scanner, the batches and whether rows remain.
/// REQUIRES: a blocking context (the scanner reads files), unless the scanner's
/// stores hold at most [`INLINE_SCAN_ROWS`] rows in its range.
fn read_batches(
    mut scanner: Scanner,
    target_rows: usize,
) -> Result<(Scanner, Vec<arrow::record_batch::RecordBatch>, bool)> {
    let mut batches = Vec::new();
    let mut rows = 0;
    while rows < target_rows {
        match scanner.next_batch()? {
            Some(b) => {
                rows += b.num_rows();
                batches.push(b);
            }
            None => return Ok((scanner, batches, false)),
        }
    }
    Ok((scanner, batches, true))
}
