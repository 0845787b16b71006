//! Wiring of a tablet server: its RPC listener (tablets, read-only stores, Raft) and
//! its heartbeat to the master.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn_common::HybridClock;
use cairn_consensus::network::{
    ChannelPool, MAX_MESSAGE_BYTES, consensus_server, spawn_rpc_server,
};
use cairn_consensus::{GroupOptions, GroupRegistry};
use cairn_proto as pb;
use cairn_proto::master_client::MasterClient;
use cairn_tablet::TabletOptions;
use tokio::sync::watch;

use crate::error::{Result, TserverError};
use crate::manager::TabletManager;
use crate::replica::{AskHome, HomeState};
use crate::service::{ServiceLimits, TabletService, report};
use crate::store_service::StoreService;
use crate::stores::StoreHost;

/// Flags of a tablet server.
#[derive(Clone, Debug)]
pub struct TserverOptions {
    /// Where replicas live.
    pub data_dir: PathBuf,
    /// Address to listen on (`host:port`; port 0 picks one).
    pub rpc_addr: String,
    /// Address peers and clients use (defaults to the bound address).
    pub advertise_addr: Option<String>,
    /// The masters.
    pub masters: Vec<String>,
    /// How often to heartbeat to the master (1 s).
    pub heartbeat_interval: Duration,
    /// Idle scanners are dropped after this (60 s).
    pub scanner_ttl: Duration,
    /// Raft timing.
    pub group: GroupOptions,
    /// Storage tunables.
    pub tablet: TabletOptions,
    /// How far ahead of this server's clock a timestamp from a client or peer may be
    /// (Kudu's `max_clock_error`; 500 ms).
    pub max_clock_offset: Duration,
    /// Server-wide caps on what one client can ask for.
    pub limits: ServiceLimits,
    /// Mutual TLS for every RPC served and made (`None`: plain TCP).
    pub tls: Option<Arc<cairn_proto::TlsConfig>>,
    /// More gRPC services to serve on the RPC port, such as the SQL layer's worker
    /// for distributed queries (built above this crate, which knows nothing of SQL).
    pub extra_routes: Option<tonic::service::Routes>,
}

impl TserverOptions {
    /// Defaults for a server with data in `data_dir`.
    pub fn new(data_dir: &Path, rpc_addr: &str, masters: Vec<String>) -> Self {
        TserverOptions {
            data_dir: data_dir.to_path_buf(),
            rpc_addr: rpc_addr.to_string(),
            advertise_addr: None,
            masters,
            heartbeat_interval: Duration::from_secs(1),
            scanner_ttl: Duration::from_secs(60),
            group: GroupOptions::default(),
            tablet: TabletOptions::default(),
            max_clock_offset: cairn_common::clock::DEFAULT_MAX_OFFSET,
            limits: ServiceLimits::default(),
            tls: None,
            extra_routes: None,
        }
    }
}

/// A running tablet server.
pub struct TabletServer {
    node_id: u64,
    addr: String,
    manager: Arc<TabletManager>,
    service: TabletService,
    stores: Arc<StoreHost>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Reads (or creates) the server's permanent node id in `data_dir/node-id`.
pub fn load_node_id(data_dir: &Path) -> Result<u64> {
    std::fs::create_dir_all(data_dir).map_err(|e| TserverError::io(data_dir, e))?;
    let p = data_dir.join("node-id");
    match std::fs::read_to_string(&p) {
        Ok(s) => s.trim().parse().map_err(|_| {
            TserverError::Internal(format!("{} does not hold a node id", p.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = loop {
                let id = rand::random::<u64>() >> 1;
                if id != 0 {
                    break id;
                }
            };
            cairn_tablet::metadata::write_atomic(data_dir, "node-id", id.to_string().as_bytes())?;
            Ok(id)
        }
        Err(e) => Err(TserverError::io(&p, e)),
    }
}

impl TabletServer {
    /// Starts a tablet server: opens its replicas, listens, heartbeats.
    pub async fn start(opts: TserverOptions) -> Result<TabletServer> {
        let node_id = load_node_id(&opts.data_dir)?;
        let listener = tokio::net::TcpListener::bind(&opts.rpc_addr)
            .await
            .map_err(|e| {
                TserverError::Internal(format!("cannot listen on {}: {e}", opts.rpc_addr))
            })?;
        let bound: SocketAddr = listener
            .local_addr()
            .map_err(|e| TserverError::Internal(e.to_string()))?;
        let addr = opts
            .advertise_addr
            .clone()
            .unwrap_or_else(|| bound.to_string());
        let registry = GroupRegistry::default();
        let pool = ChannelPool::new(opts.tls.clone());
        let manager = TabletManager::new(
            &opts.data_dir,
            node_id,
            Arc::new(HybridClock::with_max_offset(opts.max_clock_offset)),
            opts.tablet.clone(),
            opts.group.clone(),
            pool.clone(),
            registry.clone(),
        )?;
        let n = manager.open_all().await?;
        let stores = Arc::new(StoreHost::open(&opts.data_dir)?);
        stores.set_peers(crate::store_service::peer_connect(pool.clone()));
        let (stop, stop_rx) = watch::channel(false);
        let gate = cairn_proto::auth::AuthGate::new(opts.tls.is_some());
        let service = TabletService::new(manager.clone(), opts.limits.clone(), gate.clone());
        // The point leader's client for chaining writes into subspaces: it acts as this
        // server (its cluster certificate on a TLS cluster), and calls the region
        // tablets this server leads directly rather than through its own RPC port.
        match cairn_client::Client::connect(&opts.masters).await {
            Ok(c) => {
                let c = c.with_tls(opts.tls.clone());
                c.register_in_process(&addr, Arc::new(service.clone()));
                service.set_chain_driver(Arc::new(crate::chain::ChainDriver::new(c)))
            }
            Err(e) => tracing::warn!(error = %e, "no client for chaining writes into subspaces"),
        }
        let mut tasks = Vec::new();

        let routes = opts
            .extra_routes
            .clone()
            .unwrap_or_default()
            .add_service(
                pb::tablet_server_server::TabletServerServer::new(service.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(
                pb::read_only_store_server::ReadOnlyStoreServer::new(StoreService::new(
                    stores.clone(),
                    gate.clone(),
                ))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(consensus_server(registry, gate.clone()));
        let router = cairn_proto::tls::server_builder(opts.tls.as_deref())
            .map_err(|e| TserverError::Internal(format!("bad TLS configuration: {e}")))?
            .add_routes(routes);
        tasks.push(spawn_rpc_server(
            listener,
            router,
            stop_rx.clone(),
            "tablet server",
        ));

        let mut rx = stop_rx.clone();
        let svc = service.clone();
        let ttl = opts.scanner_ttl;
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = rx.wait_for(|s| *s) => break,
                    _ = tokio::time::sleep(Duration::from_secs(1).min(ttl)) => {
                        let n = svc.expire_scanners(ttl);
                        if n > 0 { tracing::debug!(n, "expired idle scanners"); }
                    }
                }
            }
        }));

        // The resolver of abandoned transactions.
        let mut rx = stop_rx.clone();
        let replicas = manager.clone();
        let idle = opts.limits.txn_abandon_after;
        let ask = home_asker(pool.clone(), opts.masters.clone());
        tasks.push(tokio::spawn(async move {
            let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
            loop {
                let stop = tokio::select! {
                    _ = rx.wait_for(|s| *s) => true,
                    _ = tokio::time::sleep(every) => false,
                };
                if stop {
                    break;
                }
                for r in replicas.list() {
                    r.resolve_abandoned(idle, &ask).await;
                }
            }
        }));

        // The point leaders' chain bookkeeping (`crate::point_leader`).
        let mut rx = stop_rx.clone();
        let svc = service.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let stop = tokio::select! {
                    _ = rx.wait_for(|s| *s) => true,
                    _ = tokio::time::sleep(crate::point_leader::TEND_EVERY) => false,
                };
                if stop {
                    break;
                }
                svc.tend_chains().await;
            }
        }));

        tasks.push(tokio::spawn(heartbeat_loop(
            manager.clone(),
            node_id,
            addr.clone(),
            Heartbeats {
                masters: opts.masters.clone(),
                interval: opts.heartbeat_interval,
                pool,
                gate,
            },
            stop_rx,
        )));
        tracing::info!(node_id, %addr, replicas = n, "tablet server started");
        Ok(TabletServer {
            node_id,
            addr,
            manager,
            service,
            stores,
            stop,
            tasks,
        })
    }

    /// The server's node id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }
    /// Where it listens.
    pub fn addr(&self) -> &str {
        &self.addr
    }
    /// Its tablet manager.
    pub fn manager(&self) -> &Arc<TabletManager> {
        &self.manager
    }

    /// Its read-only stores.
    pub fn stores(&self) -> &Arc<StoreHost> {
        &self.stores
    }

    /// Its RPC service, for callers in the same process (the `cairn` binary lets its
    /// SQL engine's client scan and write through it without the network).
    pub fn service(&self) -> TabletService {
        self.service.clone()
    }

    /// Stops serving and closes every replica.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Ok(d) = self.service.chain_driver() {
            d.client().unregister_in_process(&self.addr);
        }
        self.manager.shutdown().await;
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

/// How this server's participants ask a transaction's home tablet for its decision
/// (see [`crate::replica::AskHome`]): the master says where the home tablet's
/// replicas are, and its leader answers `TxnControl(TXN_STATUS)`.
fn home_asker(pool: ChannelPool, masters: Vec<String>) -> AskHome {
    Arc::new(move |table_id, tablet_id, txn, prepared_at| {
        let pool = pool.clone();
        let masters = masters.clone();
        Box::pin(
            async move { ask_home(&pool, &masters, &table_id, &tablet_id, txn, prepared_at).await },
        )
    })
}

/// One attempt of [`home_asker`]'s question.
async fn ask_home(
    pool: &ChannelPool,
    masters: &[String],
    table_id: &str,
    tablet_id: &str,
    txn: cairn_tablet::TxnId,
    prepared_at: cairn_common::HybridTime,
) -> std::result::Result<HomeState, String> {
    const WAIT: Duration = Duration::from_secs(5);
    let mut last = format!("no master answered for table {table_id}");
    let mut replicas = None;
    for m in masters {
        let ch = match pool.get(m) {
            Ok(ch) => ch,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let req = pb::GetTableLocationsRequest {
            table_id: table_id.to_string(),
            ..Default::default()
        };
        let mut c = MasterClient::new(ch);
        match tokio::time::timeout(WAIT, c.get_table_locations(req)).await {
            Ok(Ok(r)) => {
                let r = r.into_inner();
                let Some(t) = r.tablets.into_iter().find(|t| t.tablet_id == tablet_id) else {
                    return Err(format!(
                        "tablet {tablet_id} is no longer part of table {table_id}"
                    ));
                };
                let mut rs = t.replicas;
                rs.sort_by_key(|r| !r.leader);
                replicas = Some(rs);
                break;
            }
            Ok(Err(s)) => last = s.message().to_string(),
            Err(_) => last = format!("master {m} did not answer in time"),
        }
    }
    let replicas = replicas.ok_or(last.clone())?;
    for r in replicas {
        let ch = match pool.get(&r.addr) {
            Ok(ch) => ch,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let req = pb::TxnControlRequest {
            tablet_id: tablet_id.to_string(),
            txn_id: txn.0,
            action: pb::TxnAction::TxnStatus as i32,
            prepared_at: prepared_at.0,
            ..Default::default()
        };
        let mut c = pb::tablet_server_client::TabletServerClient::new(ch);
        match tokio::time::timeout(WAIT * 2, c.txn_control(req)).await {
            Ok(Ok(a)) => {
                let a = a.into_inner();
                return Ok(match a.state() {
                    pb::TxnState::Pending => HomeState::Pending,
                    pb::TxnState::Committed => {
                        HomeState::Committed(cairn_common::HybridTime(a.timestamp))
                    }
                    pb::TxnState::Aborted => HomeState::Aborted,
                    pb::TxnState::Unknown => HomeState::Unknown,
                });
            }
            Ok(Err(s)) => last = format!("{}: {}", r.addr, s.message()),
            Err(_) => last = format!("{} did not answer in time", r.addr),
        }
    }
    Err(last)
}

/// Where and how often a tablet server heartbeats, and the gate that learns the
/// cluster's token key from the answers.
struct Heartbeats {
    masters: Vec<String>,
    interval: Duration,
    pool: ChannelPool,
    gate: Arc<cairn_proto::auth::AuthGate>,
}

async fn heartbeat_loop(
    manager: Arc<TabletManager>,
    node_id: u64,
    addr: String,
    hb: Heartbeats,
    mut stop: watch::Receiver<bool>,
) {
    let Heartbeats {
        masters,
        interval,
        pool,
        gate,
    } = hb;
    let mut leader = 0usize;
    let mut full = true;
    let mut sent: HashMap<String, pb::TabletReport> = HashMap::new();
    loop {
        if masters.is_empty() {
            return;
        }
        let reports: Vec<pb::TabletReport> = manager.list().iter().map(|r| report(r)).collect();
        let changed: Vec<pb::TabletReport> = if full {
            reports.clone()
        } else {
            reports
                .iter()
                .filter(|r| sent.get(&r.tablet_id).is_none_or(|s| differs(s, r)))
                .cloned()
                .collect()
        };
        let req = pb::HeartbeatRequest {
            node_id,
            addr: addr.clone(),
            tablets: changed.clone(),
            full_report: full,
        };
        let m = &masters[leader % masters.len()];
        let res = match pool.get(m) {
            Ok(ch) => {
                let mut c = MasterClient::new(ch);
                tokio::time::timeout(interval.max(Duration::from_secs(2)), c.heartbeat(req)).await
            }
            Err(e) => {
                tracing::warn!(master = %m, error = %e, "bad master address");
                Ok(Err(tonic::Status::unavailable(e.to_string())))
            }
        };
        match res {
            Ok(Ok(r)) => {
                let r = r.into_inner();
                if !r.token_public_key.is_empty() {
                    gate.set_verifier(cairn_proto::auth::TokenVerifier::new(
                        r.token_public_key.to_vec(),
                    ));
                }
                if !r.leader {
                    leader += 1;
                    full = true;
                } else {
                    if full {
                        sent.clear();
                    }
                    for c in changed {
                        sent.insert(c.tablet_id.clone(), c);
                    }
                    sent.retain(|id, _| reports.iter().any(|r| &r.tablet_id == id));
                    full = r.need_full_report;
                }
            }
            _ => {
                leader += 1;
                full = true;
            }
        }
        // Sleep until the next heartbeat, but report at once when a replica's role or
        // configuration changes (a new leader must reach the master quickly).
        let until = tokio::time::Instant::now() + interval;
        loop {
            let step = Duration::from_millis(100).min(interval);
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(step) => {}
            }
            if tokio::time::Instant::now() >= until {
                break;
            }
            let changed = manager.list().iter().any(|r| {
                let rep = report(r);
                sent.get(&rep.tablet_id).is_none_or(|s| differs(s, &rep))
            });
            if changed {
                break;
            }
        }
    }
}

/// Whether a report changed in a way the master cares about.
fn differs(a: &pb::TabletReport, b: &pb::TabletReport) -> bool {
    a.role != b.role
        || a.term != b.term
        || a.leader_id != b.leader_id
        || a.voters != b.voters
        || a.learners != b.learners
        || a.state != b.state
}
