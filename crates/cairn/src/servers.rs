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
    /// Serve a status page (`/`) and Prometheus metrics (`/metrics`) here.
    #[arg(long, env = "CAIRN_WEB_ADDR")]
    pub web_addr: Option<String>,
    #[command(flatten)]
    pub raft: RaftFlags,
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
        o.group = self.raft.group_options();
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
    /// Seconds an idle scanner is kept.
    #[arg(long, default_value_t = 60)]
    pub scanner_ttl_secs: u64,
    /// Serve a status page (`/`) and Prometheus metrics (`/metrics`) here.
    #[arg(long, env = "CAIRN_WEB_ADDR")]
    pub web_addr: Option<String>,
    #[command(flatten)]
    pub raft: RaftFlags,
}

impl TserverArgs {
    fn options(&self) -> TserverOptions {
        let mut o = TserverOptions::new(&self.data_dir, &self.rpc_addr, self.masters.clone());
        o.heartbeat_interval = Duration::from_millis(self.heartbeat_interval_ms.max(10));
        o.scanner_ttl = Duration::from_secs(self.scanner_ttl_secs.max(1));
        o.group = self.raft.group_options();
        o.tablet.fsync = o.group.fsync;
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
    #[command(flatten)]
    pub raft: RaftFlags,
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

/// Runs a master until a shutdown signal.
pub async fn run_master(args: MasterArgs) -> Result<(), BoxError> {
    let m = MasterServer::start(args.options()).await?;
    println!(
        "cairn master listening on {} (data in {})",
        m.addr(),
        args.data_dir.display()
    );
    if let Some(w) = &args.web_addr {
        let bound = crate::web::serve(w, crate::web::WebState::of_master(&m)).await?;
        println!("status page http://{bound}/ and metrics http://{bound}/metrics");
    }
    shutdown_signal().await;
    println!("shutting down");
    m.shutdown().await;
    Ok(())
}

/// Runs a tablet server until a shutdown signal.
pub async fn run_tserver(args: TserverArgs) -> Result<(), BoxError> {
    let t = TabletServer::start(args.options()).await?;
    println!(
        "cairn tserver {} listening on {} (data in {}, masters {})",
        t.node_id(),
        t.addr(),
        args.data_dir.display(),
        args.masters.join(",")
    );
    if let Some(w) = &args.web_addr {
        let bound = crate::web::serve(w, crate::web::WebState::default().with_tserver(&t)).await?;
        println!("status page http://{bound}/ and metrics http://{bound}/metrics");
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
    let margs = MasterArgs {
        data_dir: args.data_dir.join("master"),
        rpc_addr: args.master_addr.clone(),
        masters: vec![],
        tserver_dead_after_secs: 300,
        tserver_live_timeout_secs: 5,
        default_replicas: args.replicas,
        web_addr: None,
        raft: args.raft.clone(),
    };
    let master = MasterServer::start(margs.options()).await?;
    let mut tservers = Vec::new();
    for i in 0..args.tservers {
        let targs = TserverArgs {
            data_dir: args.data_dir.join(format!("tserver-{i}")),
            rpc_addr: format!("{host}:{}", args.tserver_port as u32 + i),
            masters: vec![master.addr().to_string()],
            heartbeat_interval_ms: 1000,
            scanner_ttl_secs: 60,
            web_addr: None,
            raft: args.raft.clone(),
        };
        tservers.push(TabletServer::start(targs.options()).await?);
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
        let mut state = crate::web::WebState::of_master(&master);
        for t in &tservers {
            state = state.with_tserver(t);
        }
        match crate::web::serve(&args.web_addr, state).await {
            Ok(bound) => println!("  web      http://{bound}/  (metrics: /metrics)"),
            Err(e) => eprintln!("warning: no web page: {e}"),
        }
    }
    println!(
        "default replication factor {}; try:\n  cairn table create demo --columns 'id:int64,name:string?' --key id\n  cairn perf loadgen --table bench --rows 100000\n  cairn table scan bench --count\nPress Ctrl-C to stop.",
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
