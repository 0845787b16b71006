//! One run of the harness: start the cluster, create the tables, start the clients,
//! inject and heal faults for the given number of cycles, heal everything, read the
//! final state, and check every history.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::check::{self, Verdict};
use crate::cluster::{Cluster, ClusterConfig};
use crate::history::{History, Kind, write_jsonl};
use crate::nemesis::{self, FaultKind};
use crate::workload::{self, ACCOUNT_COUNT, COUNTERS, ELEMENTS, OPENING_BALANCE, REGISTERS};
use crate::{FaultsError, Result};

/// Settings of a run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The cluster.
    pub cluster: ClusterConfig,
    /// Fault cycles (inject, wait, heal, wait).
    pub cycles: usize,
    /// Fault kinds to draw from; the first cycles go through them in order, so a run
    /// of at least as many cycles has each kind at least once.
    pub kinds: Vec<FaultKind>,
    /// How long a fault lasts.
    pub fault_for: Duration,
    /// How long the cluster runs healed between faults.
    pub heal_for: Duration,
    /// Random seed (faults, targets, client operations).
    pub seed: u64,
    /// Native-client register processes.
    pub native_registers: usize,
    /// SQL register processes.
    pub sql_registers: usize,
    /// Counter processes.
    pub counters: usize,
    /// Set processes.
    pub sets: usize,
    /// Bank transfer processes (with one bank reader when there are any).
    pub banks: usize,
    /// Live keys per register workload.
    pub keys: usize,
    /// Operations per register key before it is retired for a fresh one.
    pub ops_per_key: usize,
    /// Where the checker binary is built (and cached).
    pub tools_dir: PathBuf,
}

/// What a run found.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Fault cycles run.
    pub cycles: usize,
    /// Faults injected per kind.
    pub faults: BTreeMap<String, usize>,
    /// Operations completed per outcome (ok, fail, info).
    pub operations: BTreeMap<String, usize>,
    /// The checkers' verdicts.
    pub verdicts: Vec<Verdict>,
    /// Seconds the run took.
    pub seconds: f64,
    /// Where the histories and logs are.
    pub dir: PathBuf,
}

impl Report {
    /// Anomalies found (failed checks).
    pub fn anomalies(&self) -> usize {
        self.verdicts.iter().filter(|v| !v.ok).count()
    }

    /// A readable summary.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "fault run: seed {}, {} cycles in {:.0} s\n  faults: {}\n  operations: {}\n",
            self.seed,
            self.cycles,
            self.seconds,
            self.faults
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.operations
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for v in &self.verdicts {
            s.push_str(&format!(
                "  {:<22} {:<4} ({} ops) {}\n",
                v.checker,
                if v.ok { "ok" } else { "FAIL" },
                v.operations,
                v.detail
            ));
        }
        s.push_str(&format!(
            "  anomalies: {}\n  histories and server logs: {}\n",
            self.anomalies(),
            self.dir.display()
        ));
        s
    }
}

/// A SQL engine over a fresh client of `cluster`, with the workloads' timeouts.
async fn sql_engine(cluster: &Cluster) -> Result<cairn_sql::SqlEngine> {
    let client = cluster
        .client()
        .await?
        .with_options(workload::client_options());
    cairn_sql::SqlEngine::new(client).map_err(|e| FaultsError::Setup(e.to_string()))
}

/// Runs the harness.
pub async fn run(cfg: RunConfig) -> Result<Report> {
    let t0 = Instant::now();
    let checker = check::build_porcupine(&cfg.tools_dir)?;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut cluster = Cluster::start(cfg.cluster.clone()).await?;
    let client = cluster
        .client()
        .await?
        .with_options(workload::client_options());
    workload::create_tables(&client).await?;
    let history = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    let setup = |e: cairn_client::ClientError| FaultsError::Setup(e.to_string());
    let registers = client.open_table(REGISTERS).await.map_err(setup)?;
    let elements = client.open_table(ELEMENTS).await.map_err(setup)?;
    let native_keys = workload::KeySpace::new("n", cfg.keys, cfg.ops_per_key);
    let sql_keys = workload::KeySpace::new("s", cfg.keys, cfg.ops_per_key);
    let mut process = 0;
    for _ in 0..cfg.native_registers {
        tasks.spawn(workload::native_register(
            client.clone(),
            registers.clone(),
            process,
            native_keys.clone(),
            history.clone(),
            stop.clone(),
            cfg.seed ^ process as u64,
        ));
        process += 1;
    }
    for _ in 0..cfg.sql_registers + cfg.counters {
        let engine = sql_engine(&cluster).await?;
        if process < cfg.native_registers + cfg.sql_registers {
            tasks.spawn(workload::sql_register(
                engine,
                process,
                sql_keys.clone(),
                history.clone(),
                stop.clone(),
                cfg.seed ^ process as u64,
            ));
        } else {
            tasks.spawn(workload::counter(
                engine,
                process,
                history.clone(),
                stop.clone(),
                cfg.seed ^ process as u64,
            ));
        }
        process += 1;
    }
    for _ in 0..cfg.sets {
        tasks.spawn(workload::set_inserts(
            client.clone(),
            elements.clone(),
            process,
            history.clone(),
            stop.clone(),
            cfg.seed ^ process as u64,
        ));
        process += 1;
    }
    // With the set, one searcher reads its groups through the subspace.
    if cfg.sets > 0 {
        tasks.spawn(workload::set_searches(
            client.clone(),
            elements.clone(),
            process,
            history.clone(),
            stop.clone(),
            cfg.seed ^ process as u64,
        ));
        process += 1;
    }

    let bank_engine = sql_engine(&cluster).await?;
    for i in 0..cfg.banks + usize::from(cfg.banks > 0) {
        let (engine, seed) = (bank_engine.clone(), cfg.seed ^ process as u64);
        if i < cfg.banks {
            tasks.spawn(workload::bank_transfers(
                engine,
                process,
                history.clone(),
                stop.clone(),
                seed,
            ));
        } else {
            tasks.spawn(workload::bank_reads(
                engine,
                process,
                history.clone(),
                stop.clone(),
                seed,
            ));
        }
        process += 1;
    }

    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let jitter = |rng: &mut StdRng, d: Duration| d.mul_f64(rng.random_range(0.5..1.5));
    tokio::time::sleep(cfg.heal_for).await;
    for cycle in 0..cfg.cycles {
        let kind = if cycle < cfg.kinds.len() {
            cfg.kinds[cycle]
        } else {
            cfg.kinds[rng.random_range(0..cfg.kinds.len())]
        };
        tracing::info!(cycle, fault = kind.name(), "injecting");
        let injected = nemesis::inject(&mut cluster, kind, &mut rng).await?;
        *faults.entry(kind.name().to_string()).or_default() += 1;
        tokio::time::sleep(jitter(&mut rng, cfg.fault_for)).await;
        tracing::info!(cycle, fault = kind.name(), "healing");
        nemesis::heal(&mut cluster, injected).await?;
        tokio::time::sleep(jitter(&mut rng, cfg.heal_for)).await;
    }
    // Everything healed: let the clients run a little on the whole cluster, then stop.
    tokio::time::sleep(cfg.heal_for).await;
    stop.store(true, Ordering::Release);
    while tasks.join_next().await.is_some() {}

    // Final reads and checks.
    let counters = client.open_table(COUNTERS).await.map_err(setup)?;
    let final_count = workload::read_counter(&client, &counters).await?;
    let final_set = workload::read_set(&client, &elements).await?;
    let events = history.events();
    let dir = cluster.cfg.dir.clone();
    let mut verdicts = Vec::new();
    for (name, fs) in [("registers (native)", "n"), ("registers (SQL)", "s")] {
        let file = dir.join(format!("history-{fs}.jsonl"));
        // Only this workload's keys.
        let mine: Vec<_> = events
            .iter()
            .filter(|e| matches!(e.f, "read" | "write" | "cas") && e.key.starts_with(fs))
            .cloned()
            .collect();
        write_jsonl(&file, &mine)?;
        verdicts.push(check::linearizable(
            &checker,
            &file,
            name,
            &dir.join(format!("linearizability-{fs}.html")),
        )?);
    }
    verdicts.push(check::counter(&events, final_count));
    verdicts.push(check::set(&events, &final_set));
    if cfg.sets > 0 {
        verdicts.push(check::search(&events, workload::GROUPS));
    }
    if cfg.banks > 0 {
        let final_bank = workload::read_bank(&bank_engine).await?;
        verdicts.push(check::bank(
            &events,
            &final_bank,
            ACCOUNT_COUNT,
            ACCOUNT_COUNT * OPENING_BALANCE,
        ));
    }
    write_jsonl(&dir.join("history.jsonl"), &events)?;
    let mut operations: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events {
        let k = match e.kind {
            Kind::Invoke => continue,
            Kind::Ok => "ok",
            Kind::Fail => "fail",
            Kind::Info => "info",
        };
        *operations.entry(k.to_string()).or_default() += 1;
    }
    cluster.stop_all();
    Ok(Report {
        seed: cfg.seed,
        cycles: cfg.cycles,
        faults,
        operations,
        verdicts,
        seconds: t0.elapsed().as_secs_f64(),
        dir,
    })
}
