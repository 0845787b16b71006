//! `cairn-bench cluster`: the cluster figures of the cluster issue, measured on real
//! `cairn` processes.
//!
//! - `cairn perf loadgen` on `cairn local` with 1 tablet server / replication 1 and
//!   with 3 tablet servers / replication 3: insert rows/s, per-batch write latency
//!   p50/p99, and point-read latency through the client. The comparison is between
//!   the two replication factors (the cost of replication); no external peer runs here.
//! - Failover: a master and 3 tablet servers as separate processes with Kudu's default
//!   Raft timings (500 ms heartbeat, 1.5–2.25 s election timeout); a client writes small
//!   batches to a 3-replica tablet; the tablet leader's process is killed with SIGKILL;
//!   the time from the kill to the next acknowledged write is measured, 5 times.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn_client::{Client, CreateTableSpec, FlushMode, Operation};
use cairn_common::{ColumnSpec, DataType, Schema, Value};

use crate::procs::{BoxResult, Proc, free_port};

/// Flags of `cairn-bench cluster`.
#[derive(clap::Args)]
pub struct ClusterArgs {
    /// The `cairn` binary to run (build it with `cargo build --release -p cairn`).
    #[arg(long, default_value = "target/release/cairn")]
    pub cairn: PathBuf,
    /// Rows each loadgen run writes.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Point reads after each load.
    #[arg(long, default_value_t = 10_000)]
    pub reads: u64,
    /// Concurrent loadgen sessions.
    #[arg(long, default_value_t = 4)]
    pub threads: u32,
    /// Failover rounds (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub failovers: u32,
    /// Markdown report.
    #[arg(long, default_value = "bench/results/cluster.md")]
    pub out: PathBuf,
}

fn spawn(cairn: &Path, args: &[String], log: &Path) -> BoxResult<Proc> {
    let f = std::fs::File::create(log)?;
    Ok(Proc(
        Command::new(cairn)
            .args(args)
            .stdout(Stdio::from(f.try_clone()?))
            .stderr(Stdio::from(f))
            .spawn()?,
    ))
}

/// Runs loadgen against a fresh `cairn local` and returns its report lines.
fn loadgen_on_local(
    a: &ClusterArgs,
    work: &Path,
    tservers: u32,
    replicas: u32,
) -> BoxResult<String> {
    let dir = work.join(format!("local-{tservers}x{replicas}"));
    let master = format!("127.0.0.1:{}", free_port()?);
    let ts_port = free_port()?;
    let _local = spawn(
        &a.cairn,
        &[
            "local".into(),
            "--data-dir".into(),
            dir.display().to_string(),
            "--tservers".into(),
            tservers.to_string(),
            "--replicas".into(),
            replicas.to_string(),
            "--master-addr".into(),
            master.clone(),
            "--tserver-port".into(),
            ts_port.to_string(),
            "--pg-addr".into(),
            String::new(),
            "--flight-sql-addr".into(),
            String::new(),
        ],
        &work.join(format!("local-{tservers}.log")),
    )?;
    std::thread::sleep(Duration::from_secs(4));
    let out = Command::new(&a.cairn)
        .args([
            "perf",
            "loadgen",
            "--masters",
            &master,
            "--table",
            "bench",
            "--rows",
            &a.rows.to_string(),
            "--reads",
            &a.reads.to_string(),
            "--threads",
            &a.threads.to_string(),
        ])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "loadgen failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(text)
}

fn schema() -> BoxResult<Schema> {
    Ok(Schema::new(
        vec![
            ColumnSpec::new("id", DataType::Int64),
            ColumnSpec::new("v", DataType::String),
        ],
        &["id"],
    )?)
}

/// One failover round on a fresh process cluster; returns kill → next ack.
async fn failover_round(a: &ClusterArgs, work: &Path, round: u32) -> BoxResult<Duration> {
    let dir = work.join(format!("failover-{round}"));
    let master = format!("127.0.0.1:{}", free_port()?);
    let _m = spawn(
        &a.cairn,
        &[
            "master".into(),
            "--data-dir".into(),
            dir.join("m").display().to_string(),
            "--rpc-addr".into(),
            master.clone(),
        ],
        &dir.with_extension("m.log"),
    )?;
    let mut ts = Vec::new();
    for i in 0..3 {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let p = spawn(
            &a.cairn,
            &[
                "tserver".into(),
                "--data-dir".into(),
                dir.join(format!("t{i}")).display().to_string(),
                "--rpc-addr".into(),
                addr.clone(),
                "--masters".into(),
                master.clone(),
            ],
            &dir.with_extension(format!("t{i}.log")),
        )?;
        ts.push((addr, Some(p)));
    }
    std::fs::create_dir_all(&dir)?;
    let client = Client::connect(std::slice::from_ref(&master)).await?;
    let t0 = Instant::now();
    loop {
        let live = client
            .list_tablet_servers()
            .await
            .map(|v| v.iter().filter(|s| s.live).count())
            .unwrap_or(0);
        if live == 3 {
            break;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err("tablet servers did not register".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client
        .create_table(CreateTableSpec::new("f", schema()?).replicas(3))
        .await?;
    let table = client.open_table("f").await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let wc = client.clone();
    let wt = table.clone();
    let writer = tokio::spawn(async move {
        let mut acks = Vec::new();
        let mut s = wc.new_session(&wt);
        s.set_flush_mode(FlushMode::Manual);
        let mut id = 0i64;
        while !*stop_rx.borrow() {
            for _ in 0..10 {
                let _ = s
                    .apply(Operation::insert(vec![
                        Value::Int64(id),
                        Value::String("x".into()),
                    ]))
                    .await;
                id += 1;
            }
            if s.flush().await.is_ok() {
                acks.push(Instant::now());
            }
        }
        acks
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let locs = client.table_locations(&table, true).await?;
    let leader = locs[0].leader_addr().ok_or("no leader")?.to_string();
    let killed = Instant::now();
    for (addr, p) in ts.iter_mut() {
        if *addr == leader {
            drop(p.take());
        }
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop_tx.send(true)?;
    let acks = writer.await?;
    let first = acks
        .iter()
        .find(|t| **t > killed)
        .ok_or("no write succeeded after the kill")?;
    Ok(first.duration_since(killed))
}

fn grab<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or("(missing)")
        .trim()
}

/// `cairn-bench cluster`.
pub fn cluster(a: ClusterArgs) -> BoxResult<()> {
    if !a.cairn.exists() {
        return Err(format!(
            "{} does not exist: build it with `cargo build --release -p cairn` or pass --cairn",
            a.cairn.display()
        )
        .into());
    }
    let work = tempfile::tempdir()?;
    println!("loadgen, cairn local, 1 tablet server, replication 1 ...");
    let r1 = loadgen_on_local(&a, work.path(), 1, 1)?;
    println!("{r1}");
    println!("loadgen, cairn local, 3 tablet servers, replication 3 ...");
    let r3 = loadgen_on_local(&a, work.path(), 3, 3)?;
    println!("{r3}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut fo = Vec::new();
    for round in 0..a.failovers {
        let d = rt.block_on(failover_round(&a, work.path(), round))?;
        println!("failover round {round}: {:.2} s", d.as_secs_f64());
        fo.push(d);
    }
    fo.sort();
    let median = fo.get(fo.len() / 2).copied().unwrap_or_default();
    let machine = format!(
        "{} CPU(s), {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::env::consts::ARCH
    );
    let report = format!(
        "# Cluster benchmark\n\nMachine: {machine}. `cairn-bench cluster --rows {} --reads {} --threads {}` (release build).\n\
         No external peer runs in this benchmark: Kudu is not installable here; the comparison is replication 3 against replication 1.\n\n\
         ## Inserts and point reads (`cairn perf loadgen` on `cairn local`)\n\n\
         | setup | insert | write latency per batch of 1000 | point reads |\n|---|---|---|---|\n\
         | 1 tserver, replication 1 | {} | {} | {} |\n| 3 tservers, replication 3 | {} | {} | {} |\n\n\
         ## Failover (kill -9 of the tablet leader → next acknowledged write)\n\n\
         Default timings: 500 ms heartbeat, election timeout 1.5–2.25 s (openraft voters honour a leader lease of the upper bound, so the first election after the kill is refused and the second wins). Rounds: {}. **Median {:.2} s.**\n",
        a.rows,
        a.reads,
        a.threads,
        grab(&r1, "wrote"),
        grab(&r1, "write latency"),
        grab(&r1, "read latency"),
        grab(&r3, "wrote"),
        grab(&r3, "write latency"),
        grab(&r3, "read latency"),
        fo.iter()
            .map(|d| format!("{:.2} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", "),
        median.as_secs_f64()
    );
    if let Some(p) = a.out.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::write(&a.out, &report)?;
    println!("{report}\nwritten to {}", a.out.display());
    Ok(())
}
