//! `cairn master`, `cairn tserver` and `cairn local`: running the servers, with
//! graceful shutdown on Ctrl-C / SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use cairn_consensus::GroupOptions;
use cairn_master::{MasterOptions, MasterServer};
use cairn_tablet::FsyncPolicy;
use cairn_tserver::{TabletServer, TserverOptions};
use clap::Args;

/// Raft and durability flags shared by both server roles.
#[derive(Args, Clone, Debug)]
pub struct RaftFlags {
    /// Raft leader heartbeat interval in milliseconds (Kudu's default: 500).
    #[arg(long, env = "CAIRN_RAFT_HEARTBEAT_MS", default_value_t = 500)]
    pub raft_heartbeat_ms: u64,
    /// Raft election timeout in milliseconds (lower bound; the upper is 1.5 times it).
    #[arg(long, env = "CAIRN_RAFT_ELECTION_TIMEOUT_MS", default_value_t = 1500)]
    pub raft_election_timeout_ms: u64,
    /// Fsync the Raft log on every append ("always") or leave it to the OS ("never":
    /// faster, loses the last writes if the machine — not just the process — crashes).
    #[arg(long, env = "CAIRN_FSYNC", default_value = "always", value_parser = ["always", "never"])]
    pub fsync: String,
    /// How far ahead of this server's clock a timestamp from a client or another server
    /// may be, in milliseconds (Kudu's max_clock_error). Further ones are refused, so
    /// they cannot move the clock or the history GC mark.
    #[arg(long, env = "CAIRN_MAX_CLOCK_OFFSET_MS", default_value_t = 500)]
    pub max_clock_offset_ms: u64,
}

impl RaftFlags {
    fn group_options(&self) -> GroupOptions {
        GroupOptions {
            heartbeat: Duration::from_millis(self.raft_heartbeat_ms),
            election_timeout: Duration::from_millis(self.raft_election_timeout_ms),
            fsync: if self.fsync == "never" {
                FsyncPolicy::Never
            } else {
                FsyncPolicy::Always
            },
            ..GroupOptions::default()
        }
    }
}

/// Limits: what one client, query or table may take. Each trips with an error that
/// names its flag.
#[derive(Args, Clone, Debug)]
pub struct LimitFlags {
    /// PostgreSQL clients served at once by a front end; one more is refused with
    /// SQLSTATE 53300.
    #[arg(long, env = "CAIRN_PG_MAX_CONNECTIONS", default_value_t = 100)]
    pub pg_max_connections: usize,
    /// Flight SQL connections served at once by a front end; the calls of one more
    /// fail with RESOURCE_EXHAUSTED.
    #[arg(long, env = "CAIRN_FLIGHT_MAX_CONNECTIONS", default_value_t = 100)]
    pub flight_max_connections: usize,
    /// Memory one SQL statement may hold, in MiB (0: unlimited). Sorts and grouped
    /// aggregates spill to temporary files past it; other operators fail with
    /// SQLSTATE 53200.
    #[arg(long, env = "CAIRN_QUERY_MEMORY_LIMIT_MB", default_value_t = 1024)]
    pub query_memory_limit_mb: usize,
    /// Tablet servers: the most rows a scan request may ask for in one batch.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_scan_batch_rows: u32,
    /// Tablet servers: the most scanners open at once (idle ones expire after
    /// --scanner-ttl-secs).
    #[arg(long, default_value_t = 10_000)]
    pub max_open_scanners: usize,
    /// Tablet servers: the largest row a write may carry, in bytes (strings and
    /// binaries count their length, other cells 8 bytes).
    #[arg(long, default_value_t = 64 << 20)]
    pub max_row_bytes: usize,
    /// Tablet servers: abort an open transaction whose coordinator (a SQL front end
    /// or native client) has sent nothing for this many seconds, freeing the rows it
    /// holds. Live coordinators send keep-alives every 2 s.
    #[arg(long, default_value_t = 30)]
    pub txn_abandon_secs: u64,
    /// Masters: the most hash buckets of a table (the product over its hash levels).
    #[arg(long, default_value_t = 1024)]
    pub max_hash_buckets: u64,
    /// Masters: the most tablets of a table (hash buckets times range partitions).
    #[arg(long, default_value_t = 10_000)]
    pub max_tablets_per_table: u64,
}

impl LimitFlags {
    fn apply_tserver(&self, o: &mut TserverOptions) {
        o.limits.max_scan_batch_rows = self.max_scan_batch_rows.max(1);
        o.limits.max_open_scanners = self.max_open_scanners.max(1);
        o.limits.max_row_bytes = self.max_row_bytes.max(1024);
        o.limits.txn_abandon_after = std::time::Duration::from_secs(self.txn_abandon_secs.max(5));
    }

    fn apply_master(&self, o: &mut MasterOptions) {
        o.max_hash_buckets = self.max_hash_buckets.max(2);
        o.max_tablets_per_table = self.max_tablets_per_table.max(1);
    }
}

/// Transport security, and the loopback rule: a server listening on an address other
/// machines can reach must have TLS (and the PostgreSQL front end a password), or be
/// started with --insecure.
#[derive(Args, Clone, Debug)]
pub struct SecurityFlags {
    #[command(flatten)]
    pub tls: crate::tls::TlsFlags,
    /// Require this password for the status page and /metrics (HTTP basic
    /// authentication with any user name, or a bearer token).
    #[arg(long, env = "CAIRN_WEB_PASSWORD", hide_env_values = true)]
    pub web_password: Option<String>,
    /// Listen on non-loopback addresses without TLS or authentication. Anyone who can
    /// reach the ports can then read, change and delete everything: use only on a
    /// network you trust entirely. The logs and the status page say so.
    #[arg(long, env = "CAIRN_INSECURE")]
    pub insecure: bool,
}

/// A process's TLS configuration and, with --insecure, what it exposes unprotected.
struct Security {
    tls: Option<std::sync::Arc<cairn_proto::TlsConfig>>,
    warning: Option<String>,
    web: crate::web::WebAccess,
}

impl SecurityFlags {
    /// Loads the TLS files and applies the loopback rule to `listeners` (flag name,
    /// address): refuses to start if a non-loopback listener lacks protection, unless
    /// --insecure, which only warns.
    fn check(
        &self,
        listeners: &[(&str, Option<&str>)],
        auth: &PgAuthFlags,
    ) -> Result<Security, BoxError> {
        let tls = self.tls.load()?;
        if tls.as_ref().is_some_and(|t| t.cert_pem.is_empty()) {
            return Err("a server needs --tls-cert and --tls-key as well as --tls-ca-cert".into());
        }
        let mut exposed = vec![];
        for (flag, addr) in listeners {
            let Some(addr) = addr.filter(|a| !a.is_empty()) else {
                continue;
            };
            if crate::tls::is_loopback(addr) {
                continue;
            }
            let problem = match *flag {
                "--pg-addr" if tls.is_none() || auth.pg_auth == "trust" => {
                    Some("PostgreSQL clients need TLS and --pg-auth scram-sha-256")
                }
                "--pg-addr" => None,
                "--flight-sql-addr" if tls.is_none() => {
                    Some("Flight SQL clients need TLS (they then log in with a user and password)")
                }
                "--flight-sql-addr" => None,
                "--web-addr" if tls.is_none() || self.web_password.is_none() => {
                    Some("the status page needs TLS and --web-password")
                }
                "--web-addr" => None,
                _ if tls.is_none() => Some("RPC without TLS: anyone can join or call"),
                _ => None,
            };
            if let Some(p) = problem {
                exposed.push(format!("{flag} {addr}: {p}"));
            }
        }
        let web = crate::web::WebAccess {
            password: self.web_password.clone(),
            tls: tls.clone(),
        };
        if exposed.is_empty() {
            return Ok(Security {
                tls,
                warning: None,
                web,
            });
        }
        let list = exposed.join("; ");
        if !self.insecure {
            return Err(format!(
                "refusing to listen unprotected on addresses other machines can reach ({list}). \
                 Bind to 127.0.0.1, or secure the cluster: make certificates with `cairn cert ca` \
                 and `cairn cert node` and pass --tls-ca-cert, --tls-cert and --tls-key to every \
                 server (clients log in with --user, or hold a certificate too), and set \
                 --pg-auth scram-sha-256 (users: CREATE USER … PASSWORD …, the first one \
                 `cairn` with --admin-password). To run unprotected \
                 on a network you trust entirely, pass --insecure"
            )
            .into());
        }
        tracing::warn!(exposed = %list, "running with --insecure");
        eprintln!("WARNING: running with --insecure, unprotected: {list}");
        Ok(Security {
            tls,
            warning: Some(list),
            web,
        })
    }
}

/// The listeners of `cairn master` and `cairn tserver`, by flag, for the loopback rule.
fn server_listeners<'a>(
    rpc_addr: &'a str,
    sql: &'a SqlFlags,
    web_addr: Option<&'a str>,
) -> [(&'static str, Option<&'a str>); 4] {
    [
        ("--rpc-addr", Some(rpc_addr)),
        ("--pg-addr", sql.pg_addr.as_deref()),
        ("--flight-sql-addr", sql.flight_sql_addr.as_deref()),
        ("--web-addr", web_addr),
    ]
}

/// SQL front-end flags of `cairn master` and `cairn tserver` (off unless given).
#[derive(Args, Clone, Debug)]
pub struct SqlFlags {
    /// Serve SQL over the PostgreSQL wire protocol here (e.g. 127.0.0.1:5433).
    #[arg(long, env = "CAIRN_PG_ADDR")]
    pub pg_addr: Option<String>,
    /// Serve SQL over Arrow Flight SQL here (e.g. 127.0.0.1:50051).
    #[arg(long, env = "CAIRN_FLIGHT_SQL_ADDR")]
    pub flight_sql_addr: Option<String>,
    #[command(flatten)]
    pub auth: PgAuthFlags,
    /// Run queries distributed: their fragments go to the workers every tablet
    /// server and master hosts, each scan to a server holding replicas of the
    /// tablets it reads, with shuffles streamed between them. A query whose
    /// worker fails before it returned rows runs again here. A session can still turn
    /// it off with SET cairn.distributed = false.
    #[arg(long, env = "CAIRN_DISTRIBUTED_SQL", default_value_t = true, action = clap::ArgAction::Set)]
    pub distributed_sql: bool,
}

/// How PostgreSQL clients authenticate.
#[derive(Args, Clone, Debug)]
pub struct PgAuthFlags {
    /// How PostgreSQL clients prove who they are. Users live in the cluster's catalog
    /// (CREATE USER name PASSWORD '…'; a new cluster has the superuser `cairn`).
    /// "scram-sha-256" checks the password without it crossing the network;
    /// "password" takes it in clear (old clients; use with TLS); "trust" asks for no
    /// password (fit for loopback only).
    #[arg(long, env = "CAIRN_PG_AUTH", default_value = "trust", value_parser = ["trust", "scram-sha-256", "password"])]
    pub pg_auth: String,
}

impl PgAuthFlags {
    fn options(&self) -> Result<cairn_pgwire::PgOptions, BoxError> {
        let auth = cairn_pgwire::PgAuth::parse(&self.pg_auth)
            .ok_or_else(|| format!("unknown --pg-auth {}", self.pg_auth))?;
        Ok(cairn_pgwire::PgOptions {
            auth,
            ..Default::default()
        })
    }
}

/// Flags of the masters for users and tokens.
#[derive(Args, Clone, Debug)]
pub struct UserFlags {
    /// The password of the bootstrap superuser `cairn`, set when the cluster's catalog
    /// is first created (change it later with ALTER USER cairn PASSWORD '…').
    #[arg(long, env = "CAIRN_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// How long a login token of a native client is valid, in seconds (clients renew
    /// theirs). A REVOKE reaches native clients within this time.
    #[arg(long, default_value_t = 300)]
    pub token_validity_secs: u64,
}

impl UserFlags {
    fn apply(&self, o: &mut MasterOptions) {
        o.admin_password = self.admin_password.clone();
        o.token_validity = Duration::from_secs(self.token_validity_secs.max(10));
    }
}

/// Starts the SQL front ends that have an address; returns what they listen on. The
/// engine calls the tablet servers of this process (`in_process`) without the network.
async fn start_sql(
    masters: &[String],
    sql: &SqlFlags,
    limits: &LimitFlags,
    tls: Option<&std::sync::Arc<cairn_proto::TlsConfig>>,
    in_process: &[&TabletServer],
) -> Result<Vec<String>, BoxError> {
    let (pg_addr, flight_addr, auth) = (
        sql.pg_addr.as_deref(),
        sql.flight_sql_addr.as_deref(),
        &sql.auth,
    );
    let mut lines = vec![];
    if pg_addr.is_none() && flight_addr.is_none() {
        return Ok(lines);
    }
    let client = cairn_client::Client::connect(masters)
        .await?
        .with_tls(tls.cloned());
    let mut engine =
        cairn_sql::SqlEngine::new(client.clone())?.with_limits(cairn_sql::EngineLimits {
            query_memory_bytes: limits.query_memory_limit_mb.saturating_mul(1 << 20),
        });
    if sql.distributed_sql {
        engine = engine.with_workers(cairn_sql::distributed::ClusterWorkers::watch(client));
    }
    for t in in_process {
        engine
            .client()
            .register_in_process(t.addr(), std::sync::Arc::new(t.service()));
    }
    if let Some(addr) = pg_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen for PostgreSQL clients on {addr}: {e}"))?;
        let bound = listener.local_addr()?;
        let mut opts = auth.options()?;
        opts.max_connections = limits.pg_max_connections.max(1);
        opts.tls = tls.cloned();
        let e = engine.clone();
        tokio::spawn(async move {
            if let Err(err) = cairn_pgwire::serve(e, listener, opts, std::future::pending()).await {
                eprintln!("PostgreSQL front end stopped: {err}");
            }
        });
        lines.push(format!(
            "  pgwire   {bound}  (psql -h {} -p {} -U {} cairn{})",
            bound.ip(),
            bound.port(),
            cairn_proto::auth::BOOTSTRAP_USER,
            if tls.is_some() {
                ", sslmode=require"
            } else {
                ""
            }
        ));
    }
    if let Some(addr) = flight_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen for Flight SQL clients on {addr}: {e}"))?;
        let bound = listener.local_addr()?;
        let opts = cairn_flightsql::FlightOptions {
            max_connections: limits.flight_max_connections.max(1),
            tls: tls.cloned(),
            // The SQL front ends ask for passwords alike: with TLS, or whenever the
            // PostgreSQL front end does.
            auth_required: tls.is_some() || auth.pg_auth != "trust",
        };
        tokio::spawn(async move {
            if let Err(err) =
                cairn_flightsql::serve(engine, listener, opts, std::future::pending()).await
            {
                eprintln!("Flight SQL front end stopped: {err}");
            }
        });
        let scheme = if tls.is_some() { "grpc+tls" } else { "grpc" };
        lines.push(format!(
            "  flight   {bound}  (Flight SQL: {scheme}://{bound})"
        ));
    }
    Ok(lines)
}

/// Flags of `cairn master`.
#[derive(Args, Clone, Debug)]
pub struct MasterArgs {
    /// Where the catalog lives.
    #[arg(long, env = "CAIRN_DATA_DIR", default_value = "./cairn-data/master")]
    pub data_dir: PathBuf,
    /// Address to listen on (and that peers use to reach this master).
    #[arg(long, env = "CAIRN_RPC_ADDR", default_value = "127.0.0.1:7051")]
    pub rpc_addr: String,
    /// Every master's address, this one included, for 3 replicated masters
    /// (comma-separated). Leave empty for a single master.
    #[arg(long, env = "CAIRN_MASTERS", value_delimiter = ',')]
    pub masters: Vec<String>,
    /// Seconds a tablet server may stay silent before its replicas are re-replicated.
    #[arg(long, default_value_t = 300)]
    pub tserver_dead_after_secs: u64,
    /// Seconds of silence after which a tablet server is reported not live.
    #[arg(long, default_value_t = 5)]
    pub tserver_live_timeout_secs: u64,
    /// Replication factor of tables created without one.
    #[arg(long, default_value_t = 1)]
    pub default_replicas: u32,
    /// Seconds a read-only store push waits for an unreachable tablet server before
    /// it fails and leaves the previous version live.
    #[arg(long, default_value_t = 60)]
    pub store_push_grace_secs: u64,
    /// Serve a status page (`/`) and Prometheus metrics (`/metrics`) here.
    #[arg(long, env = "CAIRN_WEB_ADDR")]
    pub web_addr: Option<String>,
    #[command(flatten)]
    pub raft: RaftFlags,
    #[command(flatten)]
    pub sql: SqlFlags,
    #[command(flatten)]
    pub limits: LimitFlags,
    #[command(flatten)]
    pub security: SecurityFlags,
    #[command(flatten)]
    pub users: UserFlags,
}

impl MasterArgs {
    fn options(&self) -> MasterOptions {
        let mut o = MasterOptions::new(&self.data_dir, &self.rpc_addr);
        o.masters = self
            .masters
            .iter()
            .filter(|m| !m.is_empty())
            .cloned()
            .collect();
        o.tserver_dead_after = Duration::from_secs(self.tserver_dead_after_secs);
        o.tserver_live_timeout = Duration::from_secs(self.tserver_live_timeout_secs.max(1));
        o.default_replicas = self.default_replicas;
        o.store_push_grace = Duration::from_secs(self.store_push_grace_secs.max(1));
        o.group = self.raft.group_options();
        self.limits.apply_master(&mut o);
        self.users.apply(&mut o);
        o
    }
}

/// Flags of `cairn tserver`.
#[derive(Args, Clone, Debug)]
pub struct TserverArgs {
    /// Where the tablet replicas live.
    #[arg(long, env = "CAIRN_DATA_DIR", default_value = "./cairn-data/tserver")]
    pub data_dir: PathBuf,
    /// Address to listen on (and that peers and clients use).
    #[arg(long, env = "CAIRN_RPC_ADDR", default_value = "127.0.0.1:7050")]
    pub rpc_addr: String,
    /// The masters' addresses (comma-separated).
    #[arg(
        long,
        env = "CAIRN_MASTERS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7051"
    )]
    pub masters: Vec<String>,
    /// Milliseconds between heartbeats to the master.
    #[arg(long, default_value_t = 1000)]
    pub heartbeat_interval_ms: u64,
    /// Memory for the block cache, in MiB: decoded pages of on-disk columns, shared
    /// by every tablet of the server, so hot rows are read without decoding
    /// Parquet again. Size it to the data read often (0: off).
    #[arg(long, env = "CAIRN_BLOCK_CACHE_MB", default_value_t = 512)]
    pub block_cache_mb: usize,
    /// Seconds an idle scanner is kept.
    #[arg(long, default_value_t = 60)]
    pub scanner_ttl_secs: u64,
    /// Serve a status page (`/`) and Prometheus metrics (`/metrics`) here.
    #[arg(long, env = "CAIRN_WEB_ADDR")]
    pub web_addr: Option<String>,
    #[command(flatten)]
    pub raft: RaftFlags,
    #[command(flatten)]
    pub sql: SqlFlags,
    #[command(flatten)]
    pub limits: LimitFlags,
    #[command(flatten)]
    pub security: SecurityFlags,
}

impl TserverArgs {
    fn options(&self) -> TserverOptions {
        let mut o = TserverOptions::new(&self.data_dir, &self.rpc_addr, self.masters.clone());
        o.heartbeat_interval = Duration::from_millis(self.heartbeat_interval_ms.max(10));
        o.scanner_ttl = Duration::from_secs(self.scanner_ttl_secs.max(1));
        o.group = self.raft.group_options();
        o.tablet.fsync = o.group.fsync;
        o.tablet.block_cache = std::sync::Arc::new(cairn_tablet::cache::BlockCache::new(
            self.block_cache_mb.saturating_mul(1 << 20),
        ));
        o.max_clock_offset = Duration::from_millis(self.raft.max_clock_offset_ms);
        self.limits.apply_tserver(&mut o);
        o
    }
}

/// Flags of `cairn local`.
#[derive(Args, Clone, Debug)]
pub struct LocalArgs {
    /// Where everything lives (survives restarts: run it again to reopen).
    #[arg(long, env = "CAIRN_DATA_DIR", default_value = "./cairn-data")]
    pub data_dir: PathBuf,
    /// Number of tablet servers.
    #[arg(long, default_value_t = 1)]
    pub tservers: u32,
    /// Replication factor of tables created without one (at most --tservers).
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// The master's address; tablet servers listen on the ports after --tserver-port.
    #[arg(long, default_value = "127.0.0.1:7051")]
    pub master_addr: String,
    /// First tablet server port (on the master's host).
    #[arg(long, default_value_t = 7150)]
    pub tserver_port: u16,
    /// Status page and Prometheus metrics of every server in the process (empty: off).
    #[arg(long, env = "CAIRN_WEB_ADDR", default_value = "127.0.0.1:8050")]
    pub web_addr: String,
    /// SQL over the PostgreSQL wire protocol (empty: off).
    #[arg(long, env = "CAIRN_PG_ADDR", default_value = "127.0.0.1:5433")]
    pub pg_addr: String,
    /// SQL over Arrow Flight SQL (empty: off).
    #[arg(long, env = "CAIRN_FLIGHT_SQL_ADDR", default_value = "127.0.0.1:50051")]
    pub flight_sql_addr: String,
    /// Memory for each tablet server's block cache, in MiB (decoded pages of
    /// on-disk columns, shared by the server's tablets; 0: off).
    #[arg(long, env = "CAIRN_BLOCK_CACHE_MB", default_value_t = 512)]
    pub block_cache_mb: usize,
    #[command(flatten)]
    pub auth: PgAuthFlags,
    #[command(flatten)]
    pub raft: RaftFlags,
    #[command(flatten)]
    pub limits: LimitFlags,
    #[command(flatten)]
    pub security: SecurityFlags,
    #[command(flatten)]
    pub users: UserFlags,
}

/// Resolves when Ctrl-C or SIGTERM arrives.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The engine of the worker a server hosts for distributed queries: a client of
/// the cluster at `masters` with the server's TLS, and the per-query memory limit.
async fn worker_engine(
    masters: &[String],
    tls: Option<&std::sync::Arc<cairn_proto::TlsConfig>>,
    limits: &LimitFlags,
) -> Result<cairn_sql::SqlEngine, BoxError> {
    let client = cairn_client::Client::connect(masters)
        .await?
        .with_tls(tls.cloned());
    Ok(
        cairn_sql::SqlEngine::new(client)?.with_limits(cairn_sql::EngineLimits {
            query_memory_bytes: limits.query_memory_limit_mb.saturating_mul(1 << 20),
        }),
    )
}

/// Runs a master until a shutdown signal.
pub async fn run_master(args: MasterArgs) -> Result<(), BoxError> {
    let sec = args.security.check(
        &server_listeners(&args.rpc_addr, &args.sql, args.web_addr.as_deref()),
        &args.sql.auth,
    )?;
    let mut o = args.options();
    o.tls = sec.tls.clone();
    // The worker that runs fragments of distributed queries above the scans
    // (aggregations, joins, merges), on the RPC port, as on every tablet server. Its
    // client finds the cluster through the masters' addresses, this one's included.
    let known = if o.masters.is_empty() {
        vec![args.rpc_addr.clone()]
    } else {
        o.masters.clone()
    };
    let worker = if known.iter().any(|a| a.ends_with(":0")) {
        tracing::warn!("a master listening on port 0 hosts no worker for distributed queries");
        None
    } else {
        Some(worker_engine(&known, sec.tls.as_ref(), &args.limits).await?)
    };
    o.extra_routes = worker.as_ref().map(cairn_sql::distributed::worker_routes);
    let m = MasterServer::start(o).await?;
    println!(
        "cairn master listening on {} (data in {})",
        m.addr(),
        args.data_dir.display()
    );
    if let Some(w) = &args.web_addr {
        let state = crate::web::WebState::of_master(&m).with_insecure_warning(sec.warning.clone());
        let bound = crate::web::serve(w, state, sec.web.clone()).await?;
        let scheme = if sec.tls.is_some() { "https" } else { "http" };
        println!("status page {scheme}://{bound}/ and metrics {scheme}://{bound}/metrics");
    }
    let masters = if args.masters.is_empty() {
        vec![m.addr().to_string()]
    } else {
        args.masters.clone()
    };
    for line in start_sql(&masters, &args.sql, &args.limits, sec.tls.as_ref(), &[]).await? {
        println!("{line}");
    }
    shutdown_signal().await;
    println!("shutting down");
    m.shutdown().await;
    Ok(())
}

/// Runs a tablet server until a shutdown signal.
pub async fn run_tserver(args: TserverArgs) -> Result<(), BoxError> {
    let sec = args.security.check(
        &server_listeners(&args.rpc_addr, &args.sql, args.web_addr.as_deref()),
        &args.sql.auth,
    )?;
    let mut o = args.options();
    o.tls = sec.tls.clone();
    // The worker that runs fragments of distributed queries, on the RPC port (with
    // its TLS, admitting only the cluster's servers). It reads this server's tablets
    // in process.
    let worker = worker_engine(&args.masters, sec.tls.as_ref(), &args.limits).await?;
    o.extra_routes = Some(cairn_sql::distributed::worker_routes(&worker));
    let t = TabletServer::start(o).await?;
    worker
        .client()
        .register_in_process(t.addr(), std::sync::Arc::new(t.service()));
    println!(
        "cairn tserver {} listening on {} (data in {}, masters {})",
        t.node_id(),
        t.addr(),
        args.data_dir.display(),
        args.masters.join(",")
    );
    if let Some(w) = &args.web_addr {
        let state = crate::web::WebState::default()
            .with_tserver(&t)
            .with_insecure_warning(sec.warning.clone());
        let bound = crate::web::serve(w, state, sec.web.clone()).await?;
        let scheme = if sec.tls.is_some() { "https" } else { "http" };
        println!("status page {scheme}://{bound}/ and metrics {scheme}://{bound}/metrics");
    }
    for line in start_sql(
        &args.masters,
        &args.sql,
        &args.limits,
        sec.tls.as_ref(),
        &[&t],
    )
    .await?
    {
        println!("{line}");
    }
    shutdown_signal().await;
    println!("shutting down");
    t.shutdown().await;
    Ok(())
}

/// Runs a master and `--tservers` tablet servers in this process.
pub async fn run_local(args: LocalArgs) -> Result<(), BoxError> {
    if args.tservers == 0 {
        return Err("--tservers must be at least 1".into());
    }
    if args.replicas == 0 || args.replicas > args.tservers {
        return Err(format!(
            "--replicas must be between 1 and --tservers ({}), not {}",
            args.tservers, args.replicas
        )
        .into());
    }
    let host = args
        .master_addr
        .rsplit_once(':')
        .map(|(h, _)| h.to_string())
        .ok_or("--master-addr must be host:port")?;
    let sec = args.security.check(
        &[
            ("--master-addr", Some(&args.master_addr)),
            ("--pg-addr", Some(&args.pg_addr)),
            ("--flight-sql-addr", Some(&args.flight_sql_addr)),
            ("--web-addr", Some(&args.web_addr)),
        ],
        &args.auth,
    )?;
    let margs = MasterArgs {
        data_dir: args.data_dir.join("master"),
        rpc_addr: args.master_addr.clone(),
        masters: vec![],
        tserver_dead_after_secs: 300,
        tserver_live_timeout_secs: 5,
        default_replicas: args.replicas,
        store_push_grace_secs: 60,
        web_addr: None,
        raft: args.raft.clone(),
        sql: SqlFlags {
            pg_addr: None,
            flight_sql_addr: None,
            auth: args.auth.clone(),
            distributed_sql: false,
        },
        limits: args.limits.clone(),
        security: args.security.clone(),
        users: args.users.clone(),
    };
    let mut mo = margs.options();
    mo.tls = sec.tls.clone();
    let master = MasterServer::start(mo).await?;
    let mut tservers = Vec::new();
    for i in 0..args.tservers {
        let targs = TserverArgs {
            data_dir: args.data_dir.join(format!("tserver-{i}")),
            rpc_addr: format!("{host}:{}", args.tserver_port as u32 + i),
            masters: vec![master.addr().to_string()],
            heartbeat_interval_ms: 1000,
            block_cache_mb: args.block_cache_mb,
            scanner_ttl_secs: 60,
            web_addr: None,
            raft: args.raft.clone(),
            sql: SqlFlags {
                pg_addr: None,
                flight_sql_addr: None,
                auth: args.auth.clone(),
                distributed_sql: false,
            },
            limits: args.limits.clone(),
            security: args.security.clone(),
        };
        let mut to = targs.options();
        to.tls = sec.tls.clone();
        tservers.push(TabletServer::start(to).await?);
    }
    println!(
        "cairn local is running (data in {})",
        args.data_dir.display()
    );
    println!("  master   {}", master.addr());
    for t in &tservers {
        println!("  tserver  {}  (node {})", t.addr(), t.node_id());
    }
    if !args.web_addr.is_empty() {
        let mut state =
            crate::web::WebState::of_master(&master).with_insecure_warning(sec.warning.clone());
        for t in &tservers {
            state = state.with_tserver(t);
        }
        match crate::web::serve(&args.web_addr, state, sec.web.clone()).await {
            Ok(bound) => println!(
                "  web      {}://{bound}/  (metrics: /metrics)",
                if sec.tls.is_some() { "https" } else { "http" }
            ),
            Err(e) => eprintln!("warning: no web page: {e}"),
        }
    }
    let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let sql = SqlFlags {
        pg_addr: nonempty(&args.pg_addr),
        flight_sql_addr: nonempty(&args.flight_sql_addr),
        auth: args.auth.clone(),
        // One process: nothing to distribute to.
        distributed_sql: false,
    };
    for line in start_sql(
        &[master.addr().to_string()],
        &sql,
        &args.limits,
        sec.tls.as_ref(),
        &tservers.iter().collect::<Vec<_>>(),
    )
    .await?
    {
        println!("{line}");
    }
    println!(
        "default replication factor {}; try:\n  cairn sql -c \"CREATE TABLE demo (id BIGINT PRIMARY KEY, name TEXT)\"\n  cairn sql -c \"INSERT INTO demo VALUES (1, 'one'), (2, 'two')\"\n  cairn sql -c \"SELECT * FROM demo\"\n  (or psql, if installed: psql -h 127.0.0.1 -p 5433 -U cairn cairn)\nPress Ctrl-C to stop.",
        args.replicas
    );
    shutdown_signal().await;
    println!("shutting down");
    for t in tservers {
        t.shutdown().await;
    }
    master.shutdown().await;
    Ok(())
}
