//! The cluster under test: real `cairn master` and `cairn tserver` processes.
//!
//! Every process keeps its ports for the whole run ([`reserve_port`]: below the
//! kernel's ephemeral range and locked against other test processes, so a restart
//! never finds them taken) and serves its web endpoint,
//! through which the harness sets failpoints (`PUT /failpoints/<name>` with the `fail`
//! crate's action as body, `DELETE` to clear). Processes run with fsync on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{FaultsError, Result};

/// A server's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A master.
    Master,
    /// A tablet server.
    Tserver,
}

/// One server process.
#[derive(Debug)]
pub struct Node {
    /// Its role.
    pub role: Role,
    /// Index among the nodes of its role.
    pub index: usize,
    /// RPC address.
    pub rpc_addr: String,
    /// Web address (status, failpoints).
    pub web_addr: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    /// Stopped with SIGSTOP.
    pub paused: bool,
}

impl Node {
    /// Whether the process is running (possibly paused).
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// A name for reports: `m0`, `t3`.
    pub fn name(&self) -> String {
        match self.role {
            Role::Master => format!("m{}", self.index),
            Role::Tserver => format!("t{}", self.index),
        }
    }

    fn start(&mut self, bin: &Path) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| FaultsError::io(format!("opening {}", self.log.display()), e))?;
        let err = log
            .try_clone()
            .map_err(|e| FaultsError::io("cloning a log handle", e))?;
        let child = Command::new(bin)
            .args(&self.args)
            .env(
                "RUST_LOG",
                std::env::var("CAIRN_FAULTS_SERVER_LOG").unwrap_or("warn".into()),
            )
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| FaultsError::io(format!("starting {}", bin.display()), e))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on a child process id we own; no memory is touched.
            unsafe {
                libc::kill(c.id() as libc::pid_t, sig);
            }
        }
    }
}

/// Settings of a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The `cairn` binary (built with failpoints).
    pub bin: PathBuf,
    /// Where data and logs go.
    pub dir: PathBuf,
    /// Masters (1 or 3).
    pub masters: usize,
    /// Tablet servers.
    pub tservers: usize,
    /// Raft heartbeat (ms).
    pub heartbeat_ms: u64,
    /// Raft election timeout (ms).
    pub election_ms: u64,
    /// Seconds a silent tablet server's replicas wait before re-replication.
    pub dead_after_secs: u64,
    /// The servers' maximum clock offset (ms).
    pub max_clock_offset_ms: u64,
}

/// The running cluster.
pub struct Cluster {
    /// Settings.
    pub cfg: ClusterConfig,
    /// Masters, then tablet servers.
    pub nodes: Vec<Node>,
}

/// A loopback port reserved for the servers this process starts, until it exits.
///
/// Servers that are stopped and restarted keep their address, so the port must stay
/// theirs while they are down. A port the kernel picked (`bind(:0)`) does not: another
/// test — or an outgoing connection — may be given it in between, and the restart fails
/// with "Address already in use". Ports handed out here
/// - come from below the kernel's ephemeral range, which it never assigns on its own;
/// - are never handed out twice by this process;
/// - are locked against every other process that uses this function (the test
///   binaries, `cairn-faults` runs side by side): a file lock on
///   `$TMPDIR/cairn-ports/<port>`, held until this process exits (the kernel drops it
///   even on kill -9);
/// - are free when handed out (a port something else holds is skipped).
///
/// # Panics
/// If no port in the range passes all of this.
pub fn reserve_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Mutex, OnceLock};
    static RANGE: OnceLock<(u32, u32)> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let (lo, hi) = *RANGE.get_or_init(|| {
        let ephemeral_lo = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32768);
        let (lo, hi) = if ephemeral_lo > 12_000 {
            (10_000, ephemeral_lo)
        } else {
            (61_000, 65_000)
        };
        NEXT.store((std::process::id() * 211) % (hi - lo), Ordering::Relaxed);
        (lo, hi)
    });
    let locks = std::env::temp_dir().join("cairn-ports");
    let have_locks = std::fs::create_dir_all(&locks).is_ok();
    let span = hi - lo;
    for _ in 0..span {
        let port = (lo + NEXT.fetch_add(1, Ordering::Relaxed) % span) as u16;
        let lock = if have_locks {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(locks.join(port.to_string()));
            match file {
                Ok(f) if f.try_lock().is_ok() => Some(f),
                // Another process holds it, or the file cannot be opened.
                _ => continue,
            }
        } else {
            None
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            if let Some(f) = lock {
                HELD.lock().unwrap_or_else(|e| e.into_inner()).push(f);
            }
            return port;
        }
    }
    panic!(
        "no free loopback port in {lo}..{hi} (see {})",
        locks.display()
    );
}

impl Cluster {
    /// Starts every process and waits until the tablet servers have registered.
    pub async fn start(cfg: ClusterConfig) -> Result<Cluster> {
        std::fs::create_dir_all(&cfg.dir)
            .map_err(|e| FaultsError::io(format!("creating {}", cfg.dir.display()), e))?;
        let master_addrs: Vec<String> = (0..cfg.masters)
            .map(|_| format!("127.0.0.1:{}", reserve_port()))
            .collect();
        let raft = |c: &ClusterConfig| {
            vec![
                "--raft-heartbeat-ms".to_string(),
                c.heartbeat_ms.to_string(),
                "--raft-election-timeout-ms".into(),
                c.election_ms.to_string(),
                "--fsync".into(),
                "always".into(),
                "--max-clock-offset-ms".into(),
                c.max_clock_offset_ms.to_string(),
            ]
        };
        let mut nodes = Vec::new();
        for (i, addr) in master_addrs.iter().enumerate() {
            let web = format!("127.0.0.1:{}", reserve_port());
            let mut args = vec![
                "master".to_string(),
                "--data-dir".into(),
                cfg.dir.join(format!("m{i}")).display().to_string(),
                "--rpc-addr".into(),
                addr.clone(),
                "--web-addr".into(),
                web.clone(),
                "--tserver-live-timeout-secs".into(),
                "3".into(),
                "--tserver-dead-after-secs".into(),
                cfg.dead_after_secs.to_string(),
                "--default-replicas".into(),
                "3".into(),
            ];
            if cfg.masters > 1 {
                args.push("--masters".into());
                args.push(master_addrs.join(","));
            }
            args.extend(raft(&cfg));
            nodes.push(Node {
                role: Role::Master,
                index: i,
                rpc_addr: addr.clone(),
                web_addr: web,
                args,
                log: cfg.dir.join(format!("m{i}.log")),
                child: None,
                paused: false,
            });
        }
        for i in 0..cfg.tservers {
            let addr = format!("127.0.0.1:{}", reserve_port());
            let web = format!("127.0.0.1:{}", reserve_port());
            let mut args = vec![
                "tserver".to_string(),
                "--data-dir".into(),
                cfg.dir.join(format!("t{i}")).display().to_string(),
                "--rpc-addr".into(),
                addr.clone(),
                "--masters".into(),
                master_addrs.join(","),
                "--web-addr".into(),
                web.clone(),
                "--heartbeat-interval-ms".into(),
                "500".into(),
            ];
            args.extend(raft(&cfg));
            nodes.push(Node {
                role: Role::Tserver,
                index: i,
                rpc_addr: addr,
                web_addr: web,
                args,
                log: cfg.dir.join(format!("t{i}.log")),
                child: None,
                paused: false,
            });
        }
        let mut c = Cluster { cfg, nodes };
        for i in 0..c.nodes.len() {
            c.nodes[i].start(&c.cfg.bin)?;
        }
        let client = c.client().await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live = client
                .list_tablet_servers()
                .await
                .map(|v| v.iter().filter(|s| s.live).count())
                .unwrap_or(0);
            if live >= c.cfg.tservers {
                break;
            }
            if Instant::now() > deadline {
                return Err(FaultsError::Setup(format!(
                    "only {live} of {} tablet servers registered within 60 s; see the logs in {}",
                    c.cfg.tservers,
                    c.cfg.dir.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Failpoints need a build with them compiled in: say so now, not mid-run.
        c.set_failpoint(0, "harness::probe", "off")
            .await
            .map_err(|e| {
                FaultsError::Setup(format!(
                    "the cairn binary does not accept failpoints ({e}); build it with failpoints \
                 (a test build, `cargo build --features cairn/failpoints`)"
                ))
            })?;
        Ok(c)
    }

    /// The masters' addresses.
    pub fn master_addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.role == Role::Master)
            .map(|n| n.rpc_addr.clone())
            .collect()
    }

    /// A client of the cluster.
    pub async fn client(&self) -> Result<Client> {
        Client::connect(&self.master_addrs())
            .await
            .map_err(|e| FaultsError::Setup(format!("connecting: {e}")))
    }

    /// Indexes (into `nodes`) of the tablet servers.
    pub fn tservers(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].role == Role::Tserver)
            .collect()
    }

    /// Indexes of the masters.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].role == Role::Master)
            .collect()
    }

    /// The node serving `rpc_addr`.
    pub fn node_of(&self, rpc_addr: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.rpc_addr == rpc_addr)
    }

    /// kill -9.
    pub fn kill(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if let Some(mut c) = n.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        n.paused = false;
    }

    /// Starts a killed node again (same ports, same data).
    pub fn restart(&mut self, i: usize) -> Result<()> {
        if self.nodes[i].child.is_none() {
            let bin = self.cfg.bin.clone();
            self.nodes[i].start(&bin)?;
        }
        Ok(())
    }

    /// SIGSTOP.
    pub fn pause(&mut self, i: usize) {
        self.nodes[i].signal(libc::SIGSTOP);
        self.nodes[i].paused = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self, i: usize) {
        self.nodes[i].signal(libc::SIGCONT);
        self.nodes[i].paused = false;
    }

    /// Sets failpoint `name` to `action` (the `fail` crate's syntax) on node `i`.
    pub async fn set_failpoint(&self, i: usize, name: &str, action: &str) -> Result<()> {
        http(
            &self.nodes[i].web_addr,
            "PUT",
            &format!("/failpoints/{name}"),
            action,
        )
        .await
    }

    /// Clears failpoint `name` on node `i`.
    pub async fn clear_failpoint(&self, i: usize, name: &str) -> Result<()> {
        http(
            &self.nodes[i].web_addr,
            "DELETE",
            &format!("/failpoints/{name}"),
            "",
        )
        .await
    }

    /// Stops every process (resuming paused ones first).
    pub fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused {
                self.resume(i);
            }
            if let Some(c) = &self.nodes[i].child {
                // SAFETY: as in `Node::signal`.
                unsafe {
                    libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = c.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// One small HTTP/1.1 request to a server's web endpoint; Ok on a 2xx answer.
async fn http(addr: &str, method: &str, path: &str, body: &str) -> Result<()> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| FaultsError::io(format!("connecting to {addr}"), e))?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| FaultsError::io(format!("writing to {addr}"), e))?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)
            .await
            .map_err(|e| FaultsError::io(format!("reading from {addr}"), e))?;
        let text = String::from_utf8_lossy(&resp);
        let status = text.split_whitespace().nth(1).unwrap_or("");
        if status.starts_with('2') {
            Ok(())
        } else {
            Err(FaultsError::Setup(format!(
                "{method} {path} on {addr}: {}",
                text.lines().last().unwrap_or("no answer")
            )))
        }
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| FaultsError::Setup(format!("{method} {path} on {addr}: no answer in 5 s")))?
}
