//! `cairn-faults`: runs the fault harness against a real cluster (see the crate docs).

use std::path::PathBuf;
use std::time::Duration;

use cairn_faults::cluster::ClusterConfig;
use cairn_faults::nemesis::FaultKind;
use cairn_faults::run::{RunConfig, run};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cairn-faults",
    about = "Jepsen-style fault harness for Cairn: a real cluster, faults, recorded histories, checkers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a cluster, run the workloads while injecting faults, then check the
    /// histories. Exits with status 1 if any checker finds an anomaly.
    Run(Box<RunArgs>),
    /// List the fault kinds.
    Kinds,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The `cairn` binary, built with failpoints (a test build of the workspace is:
    /// target/debug/cairn after `cargo test --no-run`).
    #[arg(long, default_value = "target/debug/cairn")]
    cairn_bin: PathBuf,
    /// Where the cluster's data, logs and the histories go (a fresh directory).
    #[arg(long, default_value = "/tmp/cairn-faults")]
    dir: PathBuf,
    /// Fault cycles (each: inject, wait, heal, wait). The first cycles take every
    /// chosen kind once; the rest are drawn at random.
    #[arg(long, default_value_t = 10)]
    cycles: usize,
    /// Fault kinds, comma-separated (default: all; see `cairn-faults kinds`).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Seconds a fault lasts (each fault varies it by ±50 %).
    #[arg(long, default_value_t = 6.0)]
    fault_secs: f64,
    /// Seconds of healed running between faults (±50 %).
    #[arg(long, default_value_t = 6.0)]
    heal_secs: f64,
    /// Random seed (default: from the clock; printed in the report).
    #[arg(long)]
    seed: Option<u64>,
    /// Masters (1 or 3).
    #[arg(long, default_value_t = 3)]
    masters: usize,
    /// Tablet servers.
    #[arg(long, default_value_t = 5)]
    tservers: usize,
    /// Clients of each workload: native registers, SQL registers, counter, set, bank
    /// transfers (the bank adds one reader).
    #[arg(long, default_value_t = 3)]
    clients: usize,
    /// Live keys of each register workload.
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// Operations on a register key before it is retired for a fresh one; keeps
    /// each key's history short enough to check for linearizability.
    #[arg(long, default_value_t = 100)]
    ops_per_key: usize,
    /// The servers' --max-clock-offset-ms.
    #[arg(long, default_value_t = 500)]
    max_clock_offset_ms: u64,
    /// Where the Go linearizability checker is built.
    #[arg(long, default_value = "/tmp/cairn-faults-tools")]
    tools_dir: PathBuf,
    /// Write the report as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,cairn_client=warn,cairn_sql=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let args = match cli.cmd {
        Cmd::Kinds => {
            for k in FaultKind::ALL {
                println!("{}", k.name());
            }
            return;
        }
        Cmd::Run(a) => *a,
    };
    let kinds: Vec<FaultKind> = if args.kinds.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        let mut v = vec![];
        for k in &args.kinds {
            match FaultKind::parse(k) {
                Some(k) => v.push(k),
                None => {
                    eprintln!("error: unknown fault kind '{k}' (see `cairn-faults kinds`)");
                    std::process::exit(2);
                }
            }
        }
        v
    };
    if !args.cairn_bin.exists() {
        eprintln!(
            "error: {} does not exist: build the workspace's tests first (`cargo test --no-run`) \
             or pass --cairn-bin",
            args.cairn_bin.display()
        );
        std::process::exit(2);
    }
    let _ = std::fs::remove_dir_all(&args.dir);
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let cfg = RunConfig {
        cluster: ClusterConfig {
            bin: args.cairn_bin.clone(),
            dir: args.dir.clone(),
            masters: args.masters,
            tservers: args.tservers,
            heartbeat_ms: 200,
            election_ms: 1000,
            dead_after_secs: 20,
            max_clock_offset_ms: args.max_clock_offset_ms,
        },
        cycles: args.cycles,
        kinds,
        fault_for: Duration::from_secs_f64(args.fault_secs),
        heal_for: Duration::from_secs_f64(args.heal_secs),
        seed,
        native_registers: args.clients,
        sql_registers: args.clients,
        counters: args.clients,
        sets: args.clients,
        banks: args.clients,
        keys: args.keys,
        ops_per_key: args.ops_per_key,
        tools_dir: args.tools_dir,
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    match rt.block_on(run(cfg)) {
        Ok(report) => {
            print!("{}", report.summary());
            if let Some(p) = &args.json
                && let Err(e) =
                    std::fs::write(p, serde_json::to_string_pretty(&report).unwrap_or_default())
            {
                eprintln!("error: writing {}: {e}", p.display());
            }
            std::process::exit(if report.anomalies() == 0 { 0 } else { 1 });
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
