//! # cairn — the Cairn binary
//!
//! One binary for every Cairn process and tool (DESIGN.md, "Processes"):
//!
//! - servers ([`servers`]): `cairn master`, `cairn tserver`, and `cairn local` (a master
//!   and N tablet servers in one process);
//! - client tools ([`tools`]): `cairn table …` (create, list, describe, alter, drop,
//!   scan, insert from CSV / Parquet), `cairn cluster ksck`, `cairn perf loadgen`;
//! - `cairn tablet-demo`: one tablet's storage engine on generated data, end to end.

/// mimalloc instead of the system allocator: the write path allocates many small values,
/// and glibc malloc spent over a third of a COPY profile in malloc/free.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::Instant;

use arrow::util::pretty::pretty_format_batches;
use cairn_common::{ColumnPredicate, ColumnSpec, DataType, Schema, Value};
use cairn_tablet::{LocalTablet, ReadMode, RowOp, ScanSpec, TabletOptions};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};

mod servers;
mod tls;
mod tools;
mod web;

/// Cairn: mutable columnar tables with fast scans and fast random access.
#[derive(Parser)]
#[command(name = "cairn", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a master: the catalog, tablet directory and cluster coordinator. Give all
    /// three addresses in --masters to run replicated masters.
    Master(servers::MasterArgs),
    /// Run a tablet server: hosts tablet replicas and serves reads and writes.
    Tserver(servers::TserverArgs),
    /// Run a whole cluster in this process: one master and --tservers tablet servers,
    /// data under ./cairn-data (survives restarts).
    Local(servers::LocalArgs),
    /// Create a cluster CA and certificates signed by it, for --tls-ca-cert,
    /// --tls-cert and --tls-key (see the README's "Securing a cluster").
    #[command(subcommand)]
    Cert(tls::CertCommand),
    #[command(flatten)]
    Tool(tools::Tool),
    /// Run the storage engine on generated sensor data: create a tablet, load it (with
    /// the maintenance manager flushing and compacting), query, update, read the past,
    /// reopen from disk. Safe to run again: it reuses the tablet in the data directory.
    TabletDemo {
        /// Where the tablet lives.
        #[arg(
            long,
            env = "CAIRN_DATA_DIR",
            default_value = "./cairn-data/demo-tablet"
        )]
        data_dir: PathBuf,
        /// How many rows to insert.
        #[arg(long, default_value_t = 200_000)]
        rows: u64,
    },
}

fn main() {
    // Colours only on a terminal: a log file or a pipe gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let cli = Cli::parse();
    // SQL runs DataFusion with one partition per core, and an operator may compute for
    // seconds inside one poll (a join, an aggregate over buffered rows). Two workers
    // more than cores keep timers, cancel requests, RPCs and Raft heartbeats served
    // while every core computes, so `statement_timeout` and cancel answer on time.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores + 2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let result: Result<(), Box<dyn std::error::Error + Send + Sync>> = match cli.command {
        Command::Master(a) => runtime.block_on(servers::run_master(a)),
        Command::Tserver(a) => runtime.block_on(servers::run_tserver(a)),
        Command::Local(a) => runtime.block_on(servers::run_local(a)),
        Command::Cert(c) => tls::run_cert(c),
        Command::Tool(t) => {
            restore_sigpipe();
            runtime.block_on(tools::run(t))
        }
        Command::TabletDemo { data_dir, rows } => {
            tablet_demo(&data_dir, rows).map_err(|e| e.to_string().into())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Client tools write to stdout, often into a pipe (`cairn table scan t | head`): when
/// the reader goes away they should end quietly, as Unix tools do, rather than panic
/// on a failed print. (Servers keep Rust's default of ignoring SIGPIPE: a closed
/// socket must never kill them.)
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called before any other thread of the tool writes; it only resets the
    // disposition of SIGPIPE to the default.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn demo_schema() -> Result<Schema, cairn_common::CommonError> {
    Schema::new(
        vec![
            ColumnSpec::new("host", DataType::String),
            ColumnSpec::new("ts", DataType::Timestamp),
            ColumnSpec::new("cpu", DataType::Double),
            ColumnSpec::new("mem_mb", DataType::Int64),
            ColumnSpec::new("status", DataType::Varchar(16)).nullable(),
        ],
        &["host", "ts"],
    )
}

fn tablet_demo(dir: &std::path::Path, rows: u64) -> Result<(), Box<dyn std::error::Error>> {
    let opts = TabletOptions::default();
    let tablet = if dir.join("tablet-meta").exists() {
        println!(
            "opening the tablet in {} (replaying its log)",
            dir.display()
        );
        LocalTablet::open(dir, opts)?
    } else {
        println!("creating a tablet in {}", dir.display());
        LocalTablet::create(dir, demo_schema()?, opts)?
    };
    let maintenance = tablet.start_maintenance();
    let existing = tablet.scan(ScanSpec::default())?.count_rows()? as u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(existing);
    let base_ts = 1_700_000_000_000_000i64 + existing as i64 * 1_000_000;

    let bar = ProgressBar::new(rows);
    bar.set_style(ProgressStyle::with_template(
        "{msg:>8} [{bar:40}] {pos}/{len} rows ({per_sec}, eta {eta})",
    )?);
    bar.set_message("loading");
    let start = Instant::now();
    let mut i = 0u64;
    while i < rows {
        let n = (rows - i).min(1000);
        let ops = (i..i + n)
            .map(|j| {
                RowOp::insert(vec![
                    Value::String(format!("host-{:03}", j % 100)),
                    Value::Timestamp(base_ts + (j / 100) as i64 * 1_000_000),
                    Value::Double(rng.random_range(0.0..100.0)),
                    Value::Int64(rng.random_range(512..65536)),
                    if j % 97 == 0 {
                        Value::String("degraded".into())
                    } else {
                        Value::Null
                    },
                ])
            })
            .collect();
        let r = tablet.write(ops)?;
        if let Some((_, e)) = r.row_errors.first() {
            return Err(format!("a row was rejected: {e}").into());
        }
        i += n;
        bar.inc(n);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "inserted {rows} rows in {secs:.2}s ({:.0} rows/s, every batch in the log before it was acknowledged)",
        rows as f64 / secs
    );
    let loaded_at = tablet.safe_time();

    let total = tablet.scan(ScanSpec::default())?.count_rows()?;
    println!("\nSELECT count(*) → {total}");

    let q = ScanSpec {
        projection: Some(vec![
            "host".into(),
            "ts".into(),
            "cpu".into(),
            "status".into(),
        ]),
        predicates: vec![
            ColumnPredicate::eq("host", Value::String("host-042".into())),
            ColumnPredicate::ge("cpu", Value::Double(99.0)),
        ],
        ordered: true,
        limit: Some(5),
        ..Default::default()
    };
    let t0 = Instant::now();
    let batches = tablet.scan(q)?.collect_all()?;
    println!(
        "\nhost = 'host-042' AND cpu >= 99 (first 5 by key, {:.1} ms):",
        t0.elapsed().as_secs_f64() * 1e3
    );
    println!("{}", pretty_format_batches(&batches)?);

    let key = [Value::String("host-007".into()), Value::Timestamp(base_ts)];
    let t0 = Instant::now();
    let before = tablet.get(&key, ReadMode::Latest)?;
    println!(
        "\npoint lookup host-007 @ first ts ({:.0} µs): {before:?}",
        t0.elapsed().as_secs_f64() * 1e6
    );

    let schema = tablet.schema();
    tablet.write(vec![RowOp::update(
        &schema,
        &key,
        &[("status", Value::String("rebooted".into()))],
    )?])?;
    println!(
        "after UPDATE status = 'rebooted': {:?}",
        tablet.get(&key, ReadMode::Latest)?
    );
    println!(
        "time travel to before the update: {:?}",
        tablet.get(&key, ReadMode::Snapshot(loaded_at))?
    );

    maintenance.stop();
    let t0 = Instant::now();
    tablet.flush_mrs()?;
    tablet.flush_deltas()?;
    tablet.compact_rowsets(None)?;
    let s = tablet.stats();
    println!(
        "\nflushed and compacted in {:.2}s: {} DiskRowSets, {} rows, {:.1} MiB on disk",
        t0.elapsed().as_secs_f64(),
        s.disk_rowsets,
        s.disk_rows,
        s.disk_bytes as f64 / (1 << 20) as f64
    );
    tablet.shutdown()?;
    drop(tablet);
    let reopened = LocalTablet::open(dir, TabletOptions::default())?;
    let again = reopened.scan(ScanSpec::default())?.count_rows()?;
    println!("reopened from disk: {again} rows (run the demo again to add {rows} more)");
    if again != total {
        return Err(format!("row count changed across reopen: {total} → {again}").into());
    }
    Ok(())
}
