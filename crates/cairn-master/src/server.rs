//! Wiring of a master: the catalog group, the RPC listener and the reconciler.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::network::{ChannelPool, consensus_server, spawn_rpc_server};
use cairn_consensus::{GroupOptions, GroupRegistry, RaftGroup};
use cairn_proto as pb;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::catalog::CatalogSm;
use crate::error::{MasterError, Result};
use crate::service::{MasterService, MasterState};

/// Flags of a master.
#[derive(Clone, Debug)]
pub struct MasterOptions {
    /// Catalog data.
    pub data_dir: PathBuf,
    /// Address to listen on (`host:port`; port 0 picks one, single master only).
    pub rpc_addr: String,
    /// Every master's address, this one included (empty: just this one).
    pub masters: Vec<String>,
    /// A tablet server silent for longer than this has its replicas re-replicated
    /// (300 s, Kudu's `follower_unavailable_considered_failed_sec`).
    pub tserver_dead_after: Duration,
    /// A tablet server silent for longer than this is reported not live (5 s).
    pub tserver_live_timeout: Duration,
    /// Replication factor when a create request names none.
    pub default_replicas: u32,
    /// How long DDL calls wait for their effect before answering (30 s).
    pub ddl_wait: Duration,
    /// Raft timing.
    pub group: GroupOptions,
    /// The most hash buckets a table may have: the product of its hash levels'
    /// bucket counts (`--max-hash-buckets`, 1024).
    pub max_hash_buckets: u64,
    /// The most tablets a table may have: hash buckets times range partitions
    /// (`--max-tablets-per-table`, 10,000).
    pub max_tablets_per_table: u64,
    /// Mutual TLS for every RPC served and made (`None`: plain TCP). With TLS,
    /// callers must present a cluster certificate or a user's token.
    pub tls: Option<Arc<cairn_proto::TlsConfig>>,
    /// The bootstrap superuser's password, set when the catalog is first created
    /// (`--admin-password`; later changes go through `ALTER USER`).
    pub admin_password: Option<String>,
    /// How long a token is valid (`--token-validity-secs`, 300). A REVOKE reaches
    /// native clients' tokens within this time.
    pub token_validity: Duration,
    /// How long a read-only store push waits for an unreachable tablet server before
    /// it gives up and leaves the previous version live (`--store-push-grace-secs`, 60).
    pub store_push_grace: Duration,
    /// More gRPC services to serve on the RPC port, such as the SQL layer's worker
    /// for distributed queries (built above this crate, which knows nothing of SQL).
    pub extra_routes: Option<tonic::service::Routes>,
}

impl MasterOptions {
    /// Defaults for a master with data in `data_dir`.
    pub fn new(data_dir: &Path, rpc_addr: &str) -> Self {
        MasterOptions {
            data_dir: data_dir.to_path_buf(),
            rpc_addr: rpc_addr.to_string(),
            masters: vec![],
            tserver_dead_after: Duration::from_secs(300),
            tserver_live_timeout: Duration::from_secs(5),
            default_replicas: 1,
            ddl_wait: Duration::from_secs(30),
            group: GroupOptions::default(),
            max_hash_buckets: 1024,
            max_tablets_per_table: 10_000,
            tls: None,
            admin_password: None,
            token_validity: Duration::from_secs(300),
            store_push_grace: Duration::from_secs(60),
            extra_routes: None,
        }
    }
}

/// A running master.
pub struct MasterServer {
    addr: String,
    state: Arc<MasterState>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl MasterServer {
    /// Starts a master.
    pub async fn start(opts: MasterOptions) -> Result<MasterServer> {
        let listener = tokio::net::TcpListener::bind(&opts.rpc_addr)
            .await
            .map_err(|e| {
                MasterError::Internal(format!("cannot listen on {}: {e}", opts.rpc_addr))
            })?;
        let bound: SocketAddr = listener
            .local_addr()
            .map_err(|e| MasterError::Internal(e.to_string()))?;
        let addr = if opts.masters.is_empty() {
            bound.to_string()
        } else {
            let a = opts.rpc_addr.clone();
            if !opts.masters.contains(&a) {
                return Err(MasterError::InvalidArgument(format!(
                    "--masters ({}) must include this master's --rpc-addr {a}",
                    opts.masters.join(",")
                )));
            }
            a
        };
        let masters = if opts.masters.is_empty() {
            vec![addr.clone()]
        } else {
            opts.masters.clone()
        };
        let node_id = crate::master_node_id(&addr);
        let registry = GroupRegistry::default();
        let pool = ChannelPool::new(opts.tls.clone());
        let catalog_dir = opts.data_dir.join("catalog");
        let catalog = Arc::new(CatalogSm::open(&catalog_dir)?);
        let group = RaftGroup::open(
            crate::CATALOG_GROUP,
            node_id,
            &catalog_dir,
            catalog.clone(),
            &opts.group,
            pool.clone(),
            registry.clone(),
        )
        .await?;
        let voters: BTreeMap<u64, cairn_consensus::Node> = masters
            .iter()
            .map(|a| {
                (
                    crate::master_node_id(a),
                    cairn_consensus::Node::new(a.clone()),
                )
            })
            .collect();
        if voters.keys().next() == Some(&node_id) {
            group.bootstrap(voters).await?;
        }
        let state = Arc::new(MasterState {
            group,
            catalog,
            tservers: RwLock::new(HashMap::new()),
            opts: opts.clone(),
            pool,
            masters,
            leader_since: Mutex::new(None),
            in_progress: Mutex::new(HashMap::new()),
            ddl: tokio::sync::Mutex::new(()),
            auto_ids: tokio::sync::Mutex::new(()),
            gate: cairn_proto::auth::AuthGate::new(opts.tls.is_some()),
            login_failures: Default::default(),
            token_key_cache: Mutex::new(None),
            store_pushes: Mutex::new(HashMap::new()),
            store_drivers: Mutex::new(HashSet::new()),
        });
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let routes = opts
            .extra_routes
            .clone()
            .unwrap_or_default()
            .add_service(pb::master_server::MasterServer::new(MasterService::new(
                state.clone(),
            )))
            .add_service(consensus_server(registry, state.gate.clone()));
        let router = cairn_proto::tls::server_builder(opts.tls.as_deref())
            .map_err(|e| MasterError::Internal(format!("bad TLS configuration: {e}")))?
            .add_routes(routes);
        tasks.push(spawn_rpc_server(
            listener,
            router,
            stop_rx.clone(),
            "master",
        ));
        tasks.push(tokio::spawn(crate::reconcile::run(state.clone(), stop_rx)));
        tracing::info!(%addr, node_id, "master started");
        Ok(MasterServer {
            addr,
            state,
            stop,
            tasks,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Shared state (tests and tools).
    pub fn state(&self) -> &Arc<MasterState> {
        &self.state
    }

    /// Stops the master.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        self.state.group.shutdown().await;
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}
