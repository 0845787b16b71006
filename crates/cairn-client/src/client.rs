//! The [`Client`] handle: master RPCs with leader discovery, DDL, the tablet-location
//! cache, shared connections and timestamp propagation.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cairn_common::{AlterOp, Colocation, SchemaMeta};
use cairn_proto::InProcessTabletServer;
use cairn_proto::auth::Bearer;
use cairn_proto::master_client::MasterClient;
use cairn_proto::read_only_store_client::ReadOnlyStoreClient;
use cairn_proto::tablet_server_client::TabletServerClient;
use cairn_proto::{
    AlterTableRequest, CreateTableRequest, DropTableRequest, FlushTabletRequest,
    GetTableLocationsRequest, GetTableRequest, ListMastersRequest, ListTablesRequest,
    ListTabletServersRequest, MasterInfo, TableSummary, TabletServerInfo,
};
use parking_lot::RwLock;
use tokio::time::Instant;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::error::{ClientError, Failure, Result, classify, normalize_addr};
use crate::requests::{Request, RequestTracker};
use crate::retry::{Backoff, Deadline, attempt, request};
use crate::scan::ScanBuilder;
use crate::session::WriteSession;
use crate::table::{CreateTableSpec, Table, TabletLocationInfo, locations_from_proto};

/// Largest gRPC message the client sends or accepts (scan batches can be large).
const MAX_MESSAGE_BYTES: usize = 256 << 20;
/// How long establishing a TCP connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Timeouts of a client handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// Longest wait for one RPC attempt (default 10 s).
    pub rpc_timeout: Duration,
    /// Longest time one operation may take, retries included (default 30 s).
    pub operation_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            rpc_timeout: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(30),
        }
    }
}

impl ClientOptions {
    /// Sets the per-attempt RPC timeout.
    pub fn rpc_timeout(mut self, d: Duration) -> Self {
        self.rpc_timeout = d;
        self
    }
    /// Sets the per-operation timeout.
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = d;
        self
    }
}

/// A stub for a tablet server, on a shared connection, sending the client's token.
pub type TabletServerStub = TabletServerClient<InterceptedService<Channel, Bearer>>;
/// A stub for a master, on a shared connection, sending the client's token.
pub type MasterStub = MasterClient<InterceptedService<Channel, Bearer>>;
/// A stub for a tablet server's read-only stores, sending the client's token.
pub type StoreStub = ReadOnlyStoreClient<InterceptedService<Channel, Bearer>>;

/// How long cached tablet locations are used before asking the master again.
pub const LOCATIONS_TTL: Duration = Duration::from_secs(5);

/// A cached copy of a table's tablet locations.
#[derive(Clone)]
struct CachedLocations {
    fetched: Instant,
    locs: Arc<Vec<TabletLocationInfo>>,
}

/// State shared by all clones of a client.
struct Shared {
    /// Master addresses: the configured ones, plus leaders named by hints.
    masters: RwLock<Vec<String>>,
    /// The master that last answered a leader-only call.
    leader: RwLock<Option<String>>,
    channels: RwLock<HashMap<String, Channel>>,
    /// Mutual TLS for every channel, when the cluster runs with TLS.
    tls: RwLock<Option<Arc<cairn_proto::TlsConfig>>>,
    /// Tablet locations per table id.
    locations: RwLock<HashMap<String, CachedLocations>>,
    /// Tablet servers in this process, by the address they advertise.
    in_process: RwLock<HashMap<String, Arc<dyn InProcessTabletServer>>>,
    /// Highest HybridTime seen in responses.
    last_ts: AtomicU64,
    /// The client id and its requests in progress (exactly-once writes and DDL).
    requests: Arc<RequestTracker>,
    /// The token of the user logged in ([`Client::login`]), sent with every call.
    bearer: Bearer,
    /// The unused rest of the last auto-increment block reserved, per table id.
    auto_ids: parking_lot::Mutex<HashMap<String, std::ops::Range<i64>>>,
    /// Region-table handles already built ([`Client::region_table_of`]).
    region_tables: crate::region_tables::RegionTables,
}

/// A connection to a Cairn cluster. Cheap to clone; clones share connections, the
/// leader-master hint, the location cache and the propagated timestamp.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    opts: ClientOptions,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("masters", &*self.shared.masters.read())
            .field("leader", &*self.shared.leader.read())
            .field("last_timestamp", &self.last_timestamp())
            .field("options", &self.opts)
            .finish()
    }
}

impl Client {
    /// A client for the cluster whose masters are at `masters` (`"host:port"` each; an
    /// entry may also hold a comma-separated list). Nothing is contacted yet: the leader
    /// master is found by the first call that needs it.
    pub async fn connect(masters: &[String]) -> Result<Client> {
        let mut list: Vec<String> = Vec::new();
        for m in masters {
            for a in m.split(',') {
                let a = normalize_addr(a);
                if a.is_empty() {
                    continue;
                }
                check_addr(&a)?;
                if !list.contains(&a) {
                    list.push(a);
                }
            }
        }
        if list.is_empty() {
            return Err(ClientError::NoMasters);
        }
        Ok(Client {
            shared: Arc::new(Shared {
                masters: RwLock::new(list),
                leader: RwLock::new(None),
                channels: RwLock::new(HashMap::new()),
                tls: RwLock::new(None),
                locations: RwLock::new(HashMap::new()),
                in_process: RwLock::new(HashMap::new()),
                last_ts: AtomicU64::new(0),
                requests: RequestTracker::new(),
                bearer: Bearer::default(),
                auto_ids: parking_lot::Mutex::new(HashMap::new()),
                region_tables: Default::default(),
            }),
            opts: ClientOptions::default(),
        })
    }

    /// Uses mutual TLS with `tls` (a certificate signed by the cluster CA) for every
    /// connection from now on, in every clone of this client: a cluster running with
    /// TLS accepts no other. Connections made before are dropped.
    pub fn with_tls(self, tls: Option<Arc<cairn_proto::TlsConfig>>) -> Client {
        *self.shared.tls.write() = tls;
        self.shared.channels.write().clear();
        self
    }

    /// The TLS material this client dials with ([`Client::with_tls`]), if any.
    pub fn tls(&self) -> Option<Arc<cairn_proto::TlsConfig>> {
        self.shared.tls.read().clone()
    }

    /// Logs in as `user`: the master checks the password and signs a token that every
    /// call of this client (and its clones) then carries; tablet servers check it
    /// without asking the master. The token is renewed in the background before it
    /// expires, for as long as a clone of the client lives. Needed on a cluster with
    /// TLS unless the client holds a cluster certificate; send passwords only over TLS.
    pub async fn login(self, user: &str, password: &str) -> Result<Client> {
        let expires_ms = self.authenticate(user, password).await?;
        let weak = Arc::downgrade(&self.shared);
        let opts = self.opts.clone();
        let (user, password) = (user.to_string(), password.to_string());
        tokio::spawn(async move {
            let mut expires_ms = expires_ms;
            loop {
                // Renew at half the remaining validity (at least every 5 s on failure).
                let left = expires_ms.saturating_sub(cairn_proto::auth::now_ms());
                tokio::time::sleep(Duration::from_millis((left / 2).max(5_000))).await;
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                let c = Client {
                    shared,
                    opts: opts.clone(),
                };
                match c.authenticate(&user, &password).await {
                    Ok(e) => expires_ms = e,
                    Err(e) => {
                        tracing::warn!(user, error = %e, "cannot renew the login token");
                        expires_ms = cairn_proto::auth::now_ms() + 10_000;
                    }
                }
            }
        });
        Ok(self)
    }

    /// One `Authenticate` call; sets the token and returns its expiry.
    async fn authenticate(&self, user: &str, password: &str) -> Result<u64> {
        let req = cairn_proto::AuthenticateRequest {
            user: user.to_string(),
            password: password.to_string(),
        };
        let resp = self
            .call_master(&format!("logging in as {user}"), move |mut m, t| {
                let r = request(req.clone(), t);
                async move { m.authenticate(r).await }
            })
            .await?;
        self.shared.bearer.set(Some(resp.token));
        Ok(resp.expires_ms)
    }

    /// The users with their verifiers and privileges, and each table's owner by table
    /// id (superusers and cluster certificates only).
    pub async fn list_users(
        &self,
    ) -> Result<(Vec<cairn_proto::auth::UserEntry>, HashMap<String, String>)> {
        let resp = self
            .call_master("listing users", |mut m, t| {
                let r = request(cairn_proto::ListUsersRequest {}, t);
                async move { m.list_users(r).await }
            })
            .await?;
        let bad = |e: serde_json::Error| ClientError::Internal(format!("malformed user list: {e}"));
        Ok((
            serde_json::from_slice(&resp.users_json).map_err(bad)?,
            serde_json::from_slice(&resp.owners_json).map_err(bad)?,
        ))
    }

    /// Creates, changes or drops a user, or grants or revokes privileges (tables by
    /// name). Passwords travel as SCRAM verifiers only.
    pub async fn user_ddl(&self, op: &cairn_proto::auth::UserOp) -> Result<()> {
        let op_json = to_json(op)?;
        self.call_master("changing users", move |mut m, t| {
            let r = request(
                cairn_proto::UserDdlRequest {
                    op_json: op_json.clone().into(),
                },
                t,
            );
            async move { m.user_ddl(r).await }
        })
        .await?;
        Ok(())
    }

    /// Whether this client logged in as a user.
    pub fn logged_in(&self) -> bool {
        self.shared.bearer.is_set()
    }

    /// This handle with other timeouts (other clones keep theirs; sessions and scans
    /// created from this handle use these).
    pub fn with_options(mut self, opts: ClientOptions) -> Client {
        self.opts = opts;
        self
    }

    /// The handle's timeouts.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    // ------------------------------------------------------------------ DDL

    /// Creates a table; returns its id. With `if_not_exists`, an existing table of the
    /// same name is accepted and its id returned. `replicas == 0` takes the master's
    /// default replication factor.
    pub async fn create_table(&self, spec: CreateTableSpec) -> Result<String> {
        spec.partition.validate(&spec.schema)?;
        spec.partition.create_partitions(&spec.range_bounds)?;
        let id = self.start_request();
        let req = CreateTableRequest {
            name: spec.name.clone(),
            schema_json: to_json(&SchemaMeta::from_schema(&spec.schema))?.into(),
            partition_schema_json: to_json(&spec.partition)?.into(),
            range_bounds_json: to_json(&spec.range_bounds)?.into(),
            replicas: spec.replicas,
            if_not_exists: spec.if_not_exists,
            request_id: Some(id.id()),
            owner: spec.owner.clone().unwrap_or_default(),
            subspaces_json: if spec.subspaces.is_empty() {
                Default::default()
            } else {
                to_json(&spec.subspaces)?.into()
            },
            colocate_with: match &spec.colocation {
                Colocation::With(t) => t.clone(),
                _ => String::new(),
            },
            no_colocation: spec.colocation == Colocation::None,
        };
        let what = format!("creating table '{}'", spec.name);
        let resp = self
            .call_master(&what, move |mut m, t| {
                let r = request(req.clone(), t);
                async move { m.create_table(r).await }
            })
            .await?;
        Ok(resp.table_id)
    }

    /// Changes a table's schema (add / drop / rename columns). Open `Table` handles keep
    /// the old schema: open the table again to see the change.
    pub async fn alter_table(&self, name: &str, steps: Vec<AlterOp>) -> Result<()> {
        if steps.is_empty() {
            return Ok(());
        }
        self.send_alter(
            name,
            AlterTableRequest {
                name: name.to_string(),
                steps_json: to_json(&steps)?.into(),
                ..Default::default()
            },
        )
        .await
    }

    /// Adds and drops range partitions of a range-partitioned table. Each bound pair is
    /// `[lower, upper)` as encoded range keys (see
    /// [`PartitionSchema::encode_range_key`](cairn_common::PartitionSchema::encode_range_key);
    /// empty = unbounded). Drops happen first, so a range can be split or merged in one
    /// call; the rows of a dropped range are deleted with its tablets. A new range must
    /// not overlap a remaining one, and a dropped range must match an existing one
    /// exactly.
    pub async fn alter_range_partitions(
        &self,
        name: &str,
        add: Vec<(Vec<u8>, Vec<u8>)>,
        drop: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        if add.is_empty() && drop.is_empty() {
            return Ok(());
        }
        self.send_alter(
            name,
            AlterTableRequest {
                name: name.to_string(),
                add_range_partitions_json: to_json(&add)?.into(),
                drop_range_partitions_json: to_json(&drop)?.into(),
                ..Default::default()
            },
        )
        .await?;
        // The table's tablets changed: cached locations would route to dropped
        // tablets and miss new ones.
        self.shared.locations.write().clear();
        Ok(())
    }

    /// Sends an `AlterTable` request under a new request id (retried until answered).
    pub(crate) async fn send_alter(&self, name: &str, mut req: AlterTableRequest) -> Result<()> {
        let id = self.start_request();
        req.request_id = Some(id.id());
        self.call_master(&format!("altering table '{name}'"), move |mut m, t| {
            let r = request(req.clone(), t);
            async move { m.alter_table(r).await }
        })
        .await
        .map_err(|e| e.for_table(name))?;
        Ok(())
    }

    /// Drops a table. With `if_exists`, a missing table is not an error.
    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<()> {
        let id = self.start_request();
        let req = DropTableRequest {
            name: name.to_string(),
            if_exists,
            request_id: Some(id.id()),
        };
        let r = self
            .call_master(&format!("dropping table '{name}'"), move |mut m, t| {
                let r = request(req.clone(), t);
                async move { m.drop_table(r).await }
            })
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(ClientError::NotFound(_)) if if_exists => Ok(()),
            Err(e) => Err(e.for_table(name)),
        }
    }

    /// All tables.
    pub async fn list_tables(&self) -> Result<Vec<TableSummary>> {
        let resp = self
            .call_master("listing tables", |mut m, t| async move {
                m.list_tables(request(ListTablesRequest {}, t)).await
            })
            .await?;
        Ok(resp.tables)
    }

    /// Opens a table: fetches its id, schema and partitioning.
    pub async fn open_table(&self, name: &str) -> Result<Table> {
        let req = GetTableRequest {
            name: name.to_string(),
        };
        let resp = self
            .call_master(&format!("opening table '{name}'"), move |mut m, t| {
                let r = request(req.clone(), t);
                async move { m.get_table(r).await }
            })
            .await
            .map_err(|e| e.for_table(name))?;
        Table::from_proto(resp)
    }

    /// The table's tablets in partition order, with their replicas. Cached per table id;
    /// `refresh` fetches them again from the master. Schedulers use this for locality.
    pub async fn table_locations(
        &self,
        table: &Table,
        refresh: bool,
    ) -> Result<Arc<Vec<TabletLocationInfo>>> {
        let stale = refresh.then(Instant::now);
        Ok(self.locations(table, stale).await?.1)
    }

    /// All tablet servers the master knows, with liveness.
    pub async fn list_tablet_servers(&self) -> Result<Vec<TabletServerInfo>> {
        let resp = self
            .call_master("listing tablet servers", |mut m, t| async move {
                m.list_tablet_servers(request(ListTabletServersRequest {}, t))
                    .await
            })
            .await?;
        Ok(resp.servers)
    }

    /// The masters and their roles.
    pub async fn list_masters(&self) -> Result<Vec<MasterInfo>> {
        let resp = self
            .call_master("listing masters", |mut m, t| async move {
                m.list_masters(request(ListMastersRequest {}, t)).await
            })
            .await?;
        Ok(resp.masters)
    }

    // ------------------------------------------------------------------ data

    /// A write session for `table` (default [`crate::FlushMode::AutoFlushSync`]).
    pub fn new_session(&self, table: &Table) -> WriteSession {
        WriteSession::new(self.clone(), table.clone())
    }

    /// A scan of `table`; configure it, then `execute`, `count`, `cursor` or `stream`.
    pub fn scan(&self, table: &Table) -> ScanBuilder {
        ScanBuilder::new(self.clone(), table.clone())
    }

    /// The highest HybridTime this client has seen in server responses (0: none). Pass
    /// it to another client's [`Client::observe_timestamp`] to order its reads after
    /// this client's writes.
    pub fn last_timestamp(&self) -> u64 {
        self.shared.last_ts.load(Ordering::Acquire)
    }

    /// Records a HybridTime seen elsewhere; later requests propagate it.
    pub fn observe_timestamp(&self, ts: u64) {
        self.shared.last_ts.fetch_max(ts, Ordering::AcqRel);
    }

    /// Calls the tablet server advertised at `addr` directly from now on, instead of
    /// over gRPC (see [`cairn_proto::in_process`]); all clones of this client do.
    pub fn register_in_process(&self, addr: &str, server: Arc<dyn InProcessTabletServer>) {
        self.shared
            .in_process
            .write()
            .insert(normalize_addr(addr), server);
    }

    /// Calls the tablet server at `addr` over gRPC again (undoes
    /// [`Client::register_in_process`]; a stopping server breaks the reference from
    /// its own client back to itself this way).
    pub fn unregister_in_process(&self, addr: &str) {
        self.shared.in_process.write().remove(&normalize_addr(addr));
    }

    /// The in-process server advertised at `addr`, if one is registered.
    pub(crate) fn in_process(&self, addr: &str) -> Option<Arc<dyn InProcessTabletServer>> {
        self.shared.in_process.read().get(addr).cloned()
    }

    /// Asks every live replica of every tablet of `table` to flush its MemRowSet, so
    /// that rows loaded so far are scanned in columnar form (DiskRowSets) rather than
    /// row by row. Best effort: returns the replicas that could not be asked (each
    /// flushes on its own schedule anyway).
    pub async fn flush_table(&self, table: &Table) -> Result<Vec<String>> {
        let locs = self.table_locations(table, true).await?;
        let t = self.opts.operation_timeout;
        let calls = locs.iter().flat_map(|l| {
            l.replicas.iter().filter(|r| r.live).map(move |r| {
                let addr = r.addr.clone();
                let tablet_id = l.tablet_id.clone();
                async move {
                    let req = request(
                        FlushTabletRequest {
                            tablet_id: tablet_id.clone(),
                        },
                        t,
                    );
                    let res = match self.tablet_server_stub(&addr) {
                        Ok(mut stub) => attempt(t, stub.flush_tablet(req)).await.map(|_| ()),
                        Err(e) => Err(Status::unavailable(e.to_string())),
                    };
                    res.err()
                        .map(|e| format!("tablet {tablet_id} at {addr}: {}", e.message()))
                }
            })
        });
        Ok(futures::future::join_all(calls)
            .await
            .into_iter()
            .flatten()
            .collect())
    }

    // ------------------------------------------------------------------ raw access

    /// A raw tablet-server stub for `addr` (`host:port`), on the shared connection; for
    /// tools (ksck, checksums). No retries are done for calls made through it.
    pub async fn tablet_server(&self, addr: &str) -> Result<TabletServerStub> {
        self.tablet_server_stub(addr)
    }

    /// A raw stub for the leader master (found by a probing call if not yet known).
    pub async fn master(&self) -> Result<MasterStub> {
        if let Some(l) = self.shared.leader.read().clone() {
            return self.master_stub(&l);
        }
        // A master that knows the roles names the leader...
        if let Ok(masters) = self.list_masters().await
            && let Some(m) = masters
                .iter()
                .find(|m| m.role.eq_ignore_ascii_case("leader"))
        {
            let addr = normalize_addr(&m.addr);
            check_addr(&addr)?;
            *self.shared.leader.write() = Some(addr.clone());
            return self.master_stub(&addr);
        }
        // ...otherwise the master that serves a leader-only call is the leader.
        self.list_tables().await?;
        let leader = self.shared.leader.read().clone();
        match leader {
            Some(l) => self.master_stub(&l),
            None => Err(ClientError::Internal(
                "a master answered but was not recorded as the leader".into(),
            )),
        }
    }

    /// This client's id for exactly-once requests (shared by its clones).
    pub fn client_id(&self) -> &str {
        self.shared.requests.client_id()
    }

    /// The unused auto-increment values per table id (see [`crate::auto_id`]).
    pub(crate) fn auto_id_cache(
        &self,
    ) -> &parking_lot::Mutex<HashMap<String, std::ops::Range<i64>>> {
        &self.shared.auto_ids
    }

    /// The region tables this client has built handles for.
    pub(crate) fn region_tables(&self) -> &crate::region_tables::RegionTables {
        &self.shared.region_tables
    }

    /// Starts a request that retries must name alike (see [`crate::requests`]).
    pub(crate) fn start_request(&self) -> Request {
        self.shared.requests.start()
    }

    // ------------------------------------------------------------------ internals

    fn channel(&self, addr: &str) -> Result<Channel> {
        if let Some(c) = self.shared.channels.read().get(addr) {
            return Ok(c.clone());
        }
        let tls = self.shared.tls.read().clone();
        let ep = endpoint(addr, tls.as_deref())?;
        let ch = ep.connect_lazy();
        Ok(self
            .shared
            .channels
            .write()
            .entry(addr.to_string())
            .or_insert(ch)
            .clone())
    }

    pub(crate) fn tablet_server_stub(&self, addr: &str) -> Result<TabletServerStub> {
        Ok(
            TabletServerClient::with_interceptor(self.channel(addr)?, self.shared.bearer.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }

    /// A stub for the read-only stores of the tablet server at `addr`.
    pub(crate) fn store_stub(&self, addr: &str) -> Result<StoreStub> {
        Ok(
            ReadOnlyStoreClient::with_interceptor(self.channel(addr)?, self.shared.bearer.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }

    fn master_stub(&self, addr: &str) -> Result<MasterStub> {
        Ok(
            MasterClient::with_interceptor(self.channel(addr)?, self.shared.bearer.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }

    /// Calls the leader master: the known leader first, else each master in turn; "not
    /// the leader" (following its hint), UNAVAILABLE and transport errors move on to
    /// the next master, with backoff after a full round, until the operation timeout.
    /// `NOT_FOUND` comes back as [`ClientError::NotFound`]; other errors at once.
    pub(crate) async fn call_master<T, F, Fut>(&self, what: &str, mut f: F) -> Result<T>
    where
        F: FnMut(MasterStub, Duration) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let deadline = Deadline::after(self.opts.operation_timeout);
        let mut backoff = Backoff::new();
        let mut next = 0usize;
        let mut hint: Option<String> = None;
        let mut failures_since_sleep = 0usize;
        loop {
            let known = self.shared.leader.read().clone();
            let addr = match hint.take().or(known) {
                Some(a) => a,
                None => {
                    let masters = self.shared.masters.read();
                    let a = masters[next % masters.len()].clone();
                    next += 1;
                    a
                }
            };
            let t = deadline.rpc_timeout(self.opts.rpc_timeout);
            let result = match self.master_stub(&addr) {
                Ok(stub) => attempt(t, f(stub, t)).await,
                Err(e) => Err(Status::unavailable(e.to_string())),
            };
            let status = match result {
                Ok(v) => {
                    *self.shared.leader.write() = Some(addr);
                    return Ok(v);
                }
                Err(status) => status,
            };
            let failure = classify(what, &addr, &status);
            let last = failure.describe();
            match failure {
                Failure::Fatal(e) => return Err(e),
                Failure::NotFound(m) => {
                    // The master answered, so it is the leader.
                    *self.shared.leader.write() = Some(addr);
                    return Err(ClientError::NotFound(m));
                }
                Failure::NotLeader { hint: h, .. } => {
                    self.forget_leader(&addr);
                    if let Some(h) = h.filter(|h| *h != addr && check_addr(h).is_ok()) {
                        let mut masters = self.shared.masters.write();
                        if !masters.contains(&h) {
                            masters.push(h.clone());
                        }
                        hint = Some(h);
                    }
                }
                Failure::Retry(_) => self.forget_leader(&addr),
            }
            tracing::debug!(%addr, error = %last, "{what}: master attempt failed");
            if deadline.expired() {
                return Err(deadline.timeout_error(what, last));
            }
            failures_since_sleep += 1;
            let round = self.shared.masters.read().len().max(1);
            if failures_since_sleep >= round {
                failures_since_sleep = 0;
                if !deadline.backoff(&mut backoff).await {
                    return Err(deadline.timeout_error(what, last));
                }
            }
        }
    }

    fn forget_leader(&self, addr: &str) {
        let mut l = self.shared.leader.write();
        if l.as_deref() == Some(addr) {
            *l = None;
        }
    }

    /// A table's locations: the cached copy, unless `stale` is given and the cached
    /// copy was fetched at or before it (the caller saw that copy fail), or the copy is
    /// older than [`LOCATIONS_TTL`] (another client may have added or dropped range
    /// partitions), in which case they are fetched again. Returns when the returned
    /// copy was fetched.
    pub(crate) async fn locations(
        &self,
        table: &Table,
        stale: Option<Instant>,
    ) -> Result<(Instant, Arc<Vec<TabletLocationInfo>>)> {
        if let Some(c) = self.shared.locations.read().get(&table.id)
            && stale.is_none_or(|s| c.fetched > s)
            && c.fetched.elapsed() < LOCATIONS_TTL
        {
            return Ok((c.fetched, c.locs.clone()));
        }
        let req = GetTableLocationsRequest {
            name: table.name.clone(),
            ..Default::default()
        };
        let fetched = Instant::now();
        let resp = self
            .call_master(
                &format!("fetching the tablet locations of table '{}'", table.name),
                move |mut m, t| {
                    let r = request(req.clone(), t);
                    async move { m.get_table_locations(r).await }
                },
            )
            .await
            .map_err(|e| e.for_table(&table.name))?;
        if !resp.table_id.is_empty() && resp.table_id != table.id {
            self.shared.locations.write().remove(&table.id);
            return Err(ClientError::TableChanged {
                name: table.name.clone(),
                opened: table.id.clone(),
                current: resp.table_id,
            });
        }
        let locs = Arc::new(locations_from_proto(resp)?);
        let mut cache = self.shared.locations.write();
        // Keep a copy fetched later by someone else.
        if let Some(c) = cache.get(&table.id)
            && c.fetched > fetched
        {
            return Ok((c.fetched, c.locs.clone()));
        }
        cache.insert(
            table.id.clone(),
            CachedLocations {
                fetched,
                locs: locs.clone(),
            },
        );
        Ok((fetched, locs))
    }

    /// Records that `addr` leads `tablet_id` (learned from a hint that worked), so
    /// later requests go there directly.
    pub(crate) fn note_leader(&self, table_id: &str, tablet_id: &str, addr: &str) {
        let mut cache = self.shared.locations.write();
        let Some(c) = cache.get_mut(table_id) else {
            return;
        };
        let Some(pos) = c.locs.iter().position(|t| t.tablet_id == tablet_id) else {
            return;
        };
        if !c.locs[pos].replicas.iter().any(|r| r.addr == addr) {
            return;
        }
        let mut locs = (*c.locs).clone();
        for r in &mut locs[pos].replicas {
            r.leader = r.addr == addr;
        }
        c.locs = Arc::new(locs);
    }
}

fn endpoint(addr: &str, tls: Option<&cairn_proto::TlsConfig>) -> Result<Endpoint> {
    Ok(cairn_proto::tls::endpoint(addr, tls)
        .map_err(|e| ClientError::InvalidAddress {
            addr: addr.to_string(),
            detail: e.to_string(),
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_while_idle(true))
}

/// Checks an address parses as `host:port`.
fn check_addr(addr: &str) -> Result<()> {
    let bad = |detail: &str| ClientError::InvalidAddress {
        addr: addr.to_string(),
        detail: detail.to_string(),
    };
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| bad("the port is missing"))?;
    if host.is_empty() {
        return Err(bad("the host is missing"));
    }
    port.parse::<u16>()
        .map_err(|_| bad("the port is not a number in 0..=65535"))?;
    endpoint(addr, None).map(|_| ())
}

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| ClientError::Internal(format!("JSON encoding failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_validates_addresses() {
        assert!(matches!(
            Client::connect(&[]).await,
            Err(ClientError::NoMasters)
        ));
        assert!(matches!(
            Client::connect(&["localhost".to_string()]).await,
            Err(ClientError::InvalidAddress { .. })
        ));
        let c = Client::connect(&["a:1, http://b:2".to_string(), "a:1".to_string()])
            .await
            .unwrap();
        assert_eq!(
            *c.shared.masters.read(),
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        c.observe_timestamp(5);
        c.observe_timestamp(3);
        assert_eq!(c.clone().last_timestamp(), 5);
        let c2 = c
            .clone()
            .with_options(ClientOptions::default().rpc_timeout(Duration::from_secs(1)));
        assert_eq!(c2.options().rpc_timeout, Duration::from_secs(1));
        assert_eq!(c.options().rpc_timeout, Duration::from_secs(10));
    }
}
