//! Test clusters: in-process (master and tablet servers as tasks of the test) and
//! multi-process (real `cairn` processes on loopback ports).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_client::{Client, CreateTableSpec, Operation, Table};
use cairn_common::{ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value};
use cairn_consensus::GroupOptions;
use cairn_master::{MasterOptions, MasterServer};
use cairn_tserver::{TabletServer, TserverOptions};

/// Raft timings short enough for tests.
pub fn fast_group() -> GroupOptions {
    GroupOptions {
        heartbeat: Duration::from_millis(100),
        election_timeout: Duration::from_millis(500),
        ..GroupOptions::default()
    }
}

/// An in-process cluster.
pub struct InProc {
    pub dir: tempfile::TempDir,
    pub master: Option<MasterServer>,
    pub master_addr: String,
    pub tservers: Vec<Option<TabletServer>>,
    pub ts_addrs: Vec<String>,
    pub dead_after: Duration,
    pub group: GroupOptions,
    /// Limits tablet servers start with.
    pub ts_limits: cairn_tserver::ServiceLimits,
    /// Mutual TLS for the master, the tablet servers and clients.
    pub tls: Option<std::sync::Arc<cairn_proto::TlsConfig>>,
    /// Whether tablet servers host a worker for distributed SQL, as `cairn tserver`
    /// does.
    pub workers: bool,
}

impl InProc {
    pub async fn start(n: usize, dead_after: Duration) -> InProc {
        Self::start_with(n, dead_after, fast_group()).await
    }

    pub async fn start_with(n: usize, dead_after: Duration, group: GroupOptions) -> InProc {
        Self::start_full(n, dead_after, group, None).await
    }

    /// A cluster whose tablet servers host workers for distributed SQL.
    #[allow(dead_code)]
    pub async fn start_with_workers(n: usize) -> InProc {
        Self::start_workers(n, None).await
    }

    /// [`InProc::start_with_workers`] on a cluster whose servers and clients all use
    /// mutual TLS with `tls`.
    #[allow(dead_code)]
    pub async fn start_tls_with_workers(
        n: usize,
        tls: std::sync::Arc<cairn_proto::TlsConfig>,
    ) -> InProc {
        Self::start_workers(n, Some(tls)).await
    }

    async fn start_workers(
        n: usize,
        tls: Option<std::sync::Arc<cairn_proto::TlsConfig>>,
    ) -> InProc {
        let mut c = Self::start_full(0, Duration::from_secs(300), fast_group(), tls).await;
        c.workers = true;
        for i in 0..n {
            c.ts_addrs.push(reserve_addr());
            c.tservers.push(None);
            c.start_tserver(i).await;
        }
        c.wait_live(n).await;
        c
    }

    /// A cluster whose servers and clients all use mutual TLS with `tls`.
    pub async fn start_tls(n: usize, tls: std::sync::Arc<cairn_proto::TlsConfig>) -> InProc {
        Self::start_full(n, Duration::from_secs(300), fast_group(), Some(tls)).await
    }

    async fn start_full(
        n: usize,
        dead_after: Duration,
        group: GroupOptions,
        tls: Option<std::sync::Arc<cairn_proto::TlsConfig>>,
    ) -> InProc {
        let dir = tempfile::tempdir().unwrap();
        let mut c = InProc {
            dir,
            master: None,
            master_addr: reserve_addr(),
            tservers: vec![],
            ts_addrs: (0..n).map(|_| reserve_addr()).collect(),
            dead_after,
            group,
            ts_limits: Default::default(),
            tls,
            workers: false,
        };
        c.start_master().await;
        for i in 0..n {
            c.tservers.push(None);
            c.start_tserver(i).await;
        }
        c.wait_live(n).await;
        c
    }

    pub async fn start_master(&mut self) {
        let mut o = MasterOptions::new(&self.dir.path().join("master"), &self.master_addr);
        o.group = fast_group();
        o.tserver_dead_after = self.dead_after;
        o.tserver_live_timeout = Duration::from_millis(1500);
        o.tls = self.tls.clone();
        let m = MasterServer::start(o).await.unwrap();
        self.master_addr = m.addr().to_string();
        self.master = Some(m);
    }

    pub fn ts_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("ts-{i}"))
    }

    pub async fn start_tserver(&mut self, i: usize) {
        let mut o = TserverOptions::new(
            &self.ts_dir(i),
            &self.ts_addrs[i],
            vec![self.master_addr.clone()],
        );
        o.group = self.group.clone();
        o.limits = self.ts_limits.clone();
        o.tls = self.tls.clone();
        o.heartbeat_interval = Duration::from_millis(200);
        o.tablet.fsync = cairn_tablet::FsyncPolicy::Never;
        o.group.fsync = cairn_tablet::FsyncPolicy::Never;
        let worker = if self.workers {
            let engine = cairn_sql::SqlEngine::new(self.client().await).unwrap();
            o.extra_routes = Some(cairn_sql::distributed::worker_routes(&engine));
            Some(engine)
        } else {
            None
        };
        let t = TabletServer::start(o).await.unwrap();
        if let Some(w) = worker {
            w.client()
                .register_in_process(t.addr(), std::sync::Arc::new(t.service()));
        }
        self.ts_addrs[i] = t.addr().to_string();
        self.tservers[i] = Some(t);
    }

    pub async fn stop_tserver(&mut self, i: usize) {
        if let Some(t) = self.tservers[i].take() {
            t.shutdown().await;
        }
    }

    /// Stops the master and starts it again on the same address and data.
    pub async fn restart_master(&mut self) {
        if let Some(m) = self.master.take() {
            m.shutdown().await;
        }
        self.start_master().await;
    }

    pub async fn restart_all(&mut self) {
        for i in 0..self.tservers.len() {
            self.stop_tserver(i).await;
        }
        if let Some(m) = self.master.take() {
            m.shutdown().await;
        }
        self.start_master().await;
        for i in 0..self.tservers.len() {
            self.start_tserver(i).await;
        }
        self.wait_live(self.tservers.len()).await;
    }

    pub async fn client(&self) -> Client {
        Client::connect(std::slice::from_ref(&self.master_addr))
            .await
            .unwrap()
            .with_tls(self.tls.clone())
    }

    /// A client that calls this cluster's running tablet servers in process (as the
    /// SQL engine of `cairn local` does), not over gRPC.
    pub async fn in_process_client(&self) -> Client {
        let c = self.client().await;
        for t in self.tservers.iter().flatten() {
            c.register_in_process(t.addr(), std::sync::Arc::new(t.service()));
        }
        c
    }

    pub async fn wait_live(&self, n: usize) {
        wait_live_servers(&self.client().await, n, Duration::from_secs(20)).await;
    }
}

/// Waits until at least `n` tablet servers heartbeat the leader master.
pub async fn wait_live_servers(c: &Client, n: usize, timeout: Duration) {
    wait_for(timeout, "tablet servers to register", || {
        let c = c.clone();
        async move {
            c.list_tablet_servers()
                .await
                .map(|v| v.iter().filter(|s| s.live).count() >= n)
                .unwrap_or(false)
        }
    })
    .await;
}

/// Waits until every replica among `live` agrees with its leader and the table holds
/// `rows` rows (replicas may still be catching up meanwhile).
pub async fn wait_replicas_agree(c: &Client, t: &Table, live: &[String], rows: u64, what: &str) {
    wait_for(Duration::from_secs(60), what, || {
        let c = c.clone();
        let t = t.clone();
        let live = live.to_vec();
        async move {
            let h = tokio::spawn(async move { check_replicas_agree(&c, &t, &live).await });
            matches!(h.await, Ok(n) if n == rows)
        }
    })
    .await;
}

/// Polls `f` until it returns true, panicking after `timeout`.
pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// `id int64 key, v string?, n int64?`.
/// Creates read-only store `name` (`id` INT64 key, `v` text value, replication
/// `replication`), builds `rows` rows (`v-<id>`) with the catalog's ring and pushes
/// them; returns once the version is live. The build lives in `dir`.
pub async fn create_and_push_store(
    c: &Client,
    name: &str,
    replication: u32,
    rows: i64,
    dir: &std::path::Path,
) {
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
    let arrow = std::sync::Arc::new(ArrowSchema::new(vec![
        Field::new("id", ArrowType::Int64, false),
        Field::new("v", ArrowType::Utf8, false),
    ]));
    let schema = cairn_readonly::StoreSchema::from_arrow(&arrow, &["id".into()], None).unwrap();
    let mut spec = cairn_client::CreateStoreSpec::new(name, schema.clone());
    spec.replication = replication;
    c.create_store(spec).await.unwrap();
    let entry = c.get_store(name).await.unwrap();
    let opts = cairn_readonly::BuildOptions {
        threads: 2,
        memory_bytes: 1 << 20,
        spill_dir: dir.to_path_buf(),
    };
    let b = cairn_readonly::StoreBuilder::new(name, schema, entry.layout.clone(), &opts).unwrap();
    let batch = RecordBatch::try_new(
        arrow,
        vec![
            std::sync::Arc::new(Int64Array::from_iter_values(0..rows)),
            std::sync::Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("v-{i}")),
            )),
        ],
    )
    .unwrap();
    b.add_batch(&batch).unwrap();
    let out = dir.join(format!("build-{name}"));
    b.finish(&out).unwrap();
    let v = c
        .push_store(name, &out.to_string_lossy(), 0, 0)
        .await
        .unwrap();
    wait_for(Duration::from_secs(60), "the push to finish", || async {
        c.get_store(name).await.unwrap().current_version == Some(v)
    })
    .await;
}

pub fn test_schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("id", DataType::Int64),
            ColumnSpec::new("v", DataType::String).nullable(),
            ColumnSpec::new("n", DataType::Int64).nullable(),
        ],
        &["id"],
    )
    .unwrap()
}

/// A table spec with `buckets` hash buckets on id (1 = a single tablet).
pub fn table_spec(name: &str, buckets: u32, replicas: u32) -> CreateTableSpec {
    let ps = if buckets > 1 {
        PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["id".into()],
                num_buckets: buckets,
                seed: 0,
            }],
            range_columns: vec![],
        }
    } else {
        PartitionSchema::default()
    };
    CreateTableSpec::new(name, test_schema())
        .partition(ps)
        .replicas(replicas)
}

pub fn row(id: i64) -> Operation {
    Operation::insert(vec![
        Value::Int64(id),
        Value::String(format!("row-{id}")),
        Value::Int64(id * 2),
    ])
}

/// Inserts ids in `range`, asserting no row errors.
pub async fn insert_range(c: &Client, t: &Table, range: std::ops::Range<i64>) {
    insert_batched(c, t, range, 500).await
}

/// Inserts ids in `range` in batches of `batch` rows.
pub async fn insert_batched(c: &Client, t: &Table, range: std::ops::Range<i64>, batch: usize) {
    let mut s = c.new_session(t);
    s.set_flush_mode(cairn_client::FlushMode::Manual);
    for id in range {
        s.apply(row(id)).await.unwrap();
        if s.pending() >= batch {
            assert!(s.flush().await.unwrap().is_empty());
        }
    }
    assert!(s.flush().await.unwrap().is_empty());
}

/// The BIGINT first column of `batches`, in order.
pub fn first_column_ids(batches: &[arrow::array::RecordBatch]) -> Vec<i64> {
    let mut ids = Vec::new();
    for b in batches {
        let a = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        ids.extend(a.values().iter().copied());
    }
    ids
}

/// Sorted ids of every row (latest).
pub async fn all_ids(c: &Client, t: &Table) -> Vec<i64> {
    let r = c.scan(t).projection(["id"]).execute().await.unwrap();
    let mut ids = first_column_ids(&r.batches);
    ids.sort_unstable();
    ids
}

/// The address of the current leader of the table's `i`-th tablet, asking the master
/// again (for up to 20 s) while none is known, e.g. during an election.
pub async fn current_leader(c: &Client, t: &Table, i: usize) -> String {
    let t0 = Instant::now();
    loop {
        if let Ok(locs) = c.table_locations(t, true).await
            && let Some(a) = locs.get(i).and_then(|l| l.leader_addr())
        {
            return a.to_string();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "tablet {i} of '{}' has no leader after 20 s",
            t.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checksums of every replica of every tablet at one snapshot; asserts they agree
/// among the given (live) servers. Returns total rows.
///
/// Leadership may move while the check runs (an election under a loaded CI machine);
/// a tablet whose leader answers "not the leader" or is unreachable is checked again
/// with fresh locations, for up to 30 seconds.
pub async fn check_replicas_agree(c: &Client, t: &Table, live: &[String]) -> u64 {
    let tablets: Vec<String> = c
        .table_locations(t, true)
        .await
        .unwrap()
        .iter()
        .map(|l| l.tablet_id.clone())
        .collect();
    let mut total = 0;
    for tablet in tablets {
        let t0 = Instant::now();
        loop {
            match checksum_tablet(c, t, &tablet, live).await {
                Ok(rows) => {
                    total += rows;
                    break;
                }
                Err(s) if t0.elapsed() < Duration::from_secs(30) => {
                    eprintln!("checksum of {tablet} retried: {s}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(s) => panic!("checksum of tablet {tablet} kept failing: {s}"),
            }
        }
    }
    total
}

/// One tablet's leader checksum, compared with every live follower at the same
/// snapshot. `Err` is a transient RPC failure worth retrying; disagreement panics.
async fn checksum_tablet(
    c: &Client,
    t: &Table,
    tablet: &str,
    live: &[String],
) -> Result<u64, tonic::Status> {
    let locs = c
        .table_locations(t, true)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let l = locs
        .iter()
        .find(|l| l.tablet_id == tablet)
        .expect("tablet still exists");
    let leader = l
        .leader_addr()
        .ok_or_else(|| tonic::Status::unavailable("tablet has no leader yet"))?
        .to_string();
    let mut lc = c
        .tablet_server(&leader)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let r = lc
        .checksum(cairn_proto::ChecksumRequest {
            tablet_id: tablet.to_string(),
            snapshot_timestamp: 0,
        })
        .await?
        .into_inner();
    for rep in &l.replicas {
        if !live.contains(&rep.addr) || rep.addr == leader {
            continue;
        }
        let mut rc = c
            .tablet_server(&rep.addr)
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let rr = rc
            .checksum(cairn_proto::ChecksumRequest {
                tablet_id: tablet.to_string(),
                snapshot_timestamp: r.snapshot_timestamp,
            })
            .await?
            .into_inner();
        assert_eq!(
            (rr.rows, rr.checksum),
            (r.rows, r.checksum),
            "replica {} of tablet {} disagrees with the leader",
            rep.addr,
            tablet
        );
    }
    Ok(r.rows)
}

/// A loopback port reserved for this test process until it exits, never handed to
/// another test or test process meanwhile: servers that tests stop and restart keep
/// their address (see [`cairn_faults::cluster::reserve_port`]).
pub fn reserve_port() -> u16 {
    cairn_faults::cluster::reserve_port()
}

/// `127.0.0.1:<reserve_port()>`.
pub fn reserve_addr() -> String {
    format!("127.0.0.1:{}", reserve_port())
}

/// Runs the `cairn` binary with `args`: whether it succeeded, and its stdout and
/// stderr together.
pub fn cairn(args: &[&str]) -> (bool, String) {
    cairn_with_env(args, &[])
}

/// [`cairn`] with extra environment variables.
pub fn cairn_with_env(args: &[&str], env: &[(String, String)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A `cairn` server process.
pub struct Proc {
    pub args: Vec<String>,
    /// Environment variables set on top of this process's own.
    pub env: Vec<(String, String)>,
    pub child: Option<Child>,
    pub addr: String,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(args: Vec<String>, addr: String, log: PathBuf) -> Proc {
        Proc::spawn_with_env(args, addr, log, Vec::new())
    }
    /// [`Proc::spawn`] with extra environment variables (kept for restarts).
    pub fn spawn_with_env(
        args: Vec<String>,
        addr: String,
        log: PathBuf,
        env: Vec<(String, String)>,
    ) -> Proc {
        let mut p = Proc {
            args,
            env,
            child: None,
            addr,
            log,
        };
        p.start();
        p
    }
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
    }
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Raft timings short enough for tests; the multi-process tests kill processes and
/// check that nothing acknowledged was lost, so the log is fsynced as in production.
pub const FAST_RAFT: [&str; 6] = [
    "--raft-heartbeat-ms",
    "100",
    "--raft-election-timeout-ms",
    "500",
    "--fsync",
    "always",
];

pub fn master_proc(dir: &std::path::Path, addr: &str, masters: &[String], log: PathBuf) -> Proc {
    master_proc_with(dir, addr, masters, log, &[])
}

/// [`master_proc`] with `extra` flags.
pub fn master_proc_with(
    dir: &std::path::Path,
    addr: &str,
    masters: &[String],
    log: PathBuf,
    extra: &[&str],
) -> Proc {
    let mut args = vec![
        "master".to_string(),
        "--data-dir".into(),
        dir.display().to_string(),
        "--rpc-addr".into(),
        addr.to_string(),
        "--tserver-live-timeout-secs".into(),
        "2".into(),
    ];
    if !masters.is_empty() {
        args.push("--masters".into());
        args.push(masters.join(","));
    }
    args.extend(FAST_RAFT.iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::spawn(args, addr.to_string(), log)
}

pub fn tserver_proc(dir: &std::path::Path, addr: &str, masters: &[String], log: PathBuf) -> Proc {
    tserver_proc_with(dir, addr, masters, log, &[])
}

/// [`tserver_proc`] with `extra` flags.
pub fn tserver_proc_with(
    dir: &std::path::Path,
    addr: &str,
    masters: &[String],
    log: PathBuf,
    extra: &[&str],
) -> Proc {
    tserver_proc_env(dir, addr, masters, log, extra, Vec::new())
}

/// [`tserver_proc_with`] with extra environment variables.
pub fn tserver_proc_env(
    dir: &std::path::Path,
    addr: &str,
    masters: &[String],
    log: PathBuf,
    extra: &[&str],
    env: Vec<(String, String)>,
) -> Proc {
    let mut args = vec![
        "tserver".to_string(),
        "--data-dir".into(),
        dir.display().to_string(),
        "--rpc-addr".into(),
        addr.to_string(),
        "--masters".into(),
        masters.join(","),
        "--heartbeat-interval-ms".into(),
        "200".into(),
    ];
    args.extend(FAST_RAFT.iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::spawn_with_env(args, addr.to_string(), log, env)
}

/// Sets failpoint `name` to `action` (the `fail` crate's syntax, e.g.
/// `1*sleep(3000)`) on the server whose web page is at `web_addr`.
pub fn put_failpoint(web_addr: &str, name: &str, action: &str) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(web_addr).unwrap();
    write!(
        s,
        "PUT /failpoints/{name} HTTP/1.1\r\nHost: {web_addr}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{action}",
        action.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Makes a cluster CA in `dir` and a certificate for each of `names` (valid for
/// localhost and 127.0.0.1) with `cairn cert`, as a user would.
pub fn make_certs(dir: &std::path::Path, names: &[&str]) {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cairn {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let d = dir.to_str().unwrap();
    run(&["cert", "ca", "--dir", d]);
    for n in names {
        run(&["cert", "node", "--dir", d, "--name", n]);
    }
}

/// The TLS configuration of certificate `name` made by [`make_certs`] in `dir`.
pub fn tls_of(dir: &std::path::Path, name: &str) -> std::sync::Arc<cairn_proto::TlsConfig> {
    cairn_proto::TlsConfig::load(
        &dir.join("ca.pem"),
        &dir.join(format!("{name}.pem")),
        &dir.join(format!("{name}.key")),
    )
    .unwrap()
}

/// How long each fuzz target or hostile-input loop runs: `CAIRN_FUZZ_SECS` (3 s).
pub fn fuzz_budget() -> Duration {
    let secs: f64 = std::env::var("CAIRN_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

/// A Python that can `import` each of `modules`: $CAIRN_PYTHON, else the CI venv
/// (.ci/run installs it), else `python3`.
pub fn python_with(modules: &str) -> Option<PathBuf> {
    let venv =
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/cairn-venv/bin/python"));
    let candidates = match std::env::var_os("CAIRN_PYTHON") {
        Some(p) => vec![PathBuf::from(p)],
        None => venv.into_iter().chain([PathBuf::from("python3")]).collect(),
    };
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", &format!("import {modules}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}
