//! `cairn cluster ksck`: the cluster health check.
//!
//! 1. **Masters.** Every master address (given, or named by another master) is asked
//!    for its view of the master group; one must be the leader, all must answer.
//! 2. **Tablet servers.** The leader master's list, with liveness; every live server
//!    is asked which replicas it hosts and in what Raft role (`ListTablets`), so the
//!    check sees the servers' own state, not only the master's cached view.
//! 3. **Tablets.** For every tablet of every table: a leader exists (a live replica
//!    that reports itself leader), and a majority of its voters is up (live server,
//!    replica actually hosted). Down or missing replicas and fewer voters than the
//!    table's replication factor are warnings: the table still works, and the master
//!    re-replicates.
//! 4. **Checksums** (`--checksum`). The leader checksums the tablet at a snapshot it
//!    picks; every other voter is asked for the checksum at that same snapshot (it
//!    waits until it has applied everything up to it). Replicas must agree.
//!
//! Problems make the cluster unhealthy (non-zero exit); warnings do not.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use cairn_client::{Client, Table, TabletLocationInfo};
use cairn_proto::master_client::MasterClient;
use cairn_proto::{
    ChecksumRequest, ListMastersRequest, ListTabletsRequest, MasterInfo, RaftRole, TabletReport,
    TabletServerInfo,
};
use clap::Args;
use tokio::task::JoinSet;
use tokio::time::timeout;

use super::fmt::{group_thousands, text_table};
use super::parse::parse_names;
use super::table::describe_partition;
use super::{MasterArgs, ToolResult};

/// `cairn cluster ksck`
#[derive(Args, Debug)]
pub struct KsckArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// Also check that the replicas of every tablet hold identical data, by
    /// checksumming every voter at one snapshot (reads all rows: slow on big tables).
    #[arg(long)]
    pub checksum: bool,
    /// How long one replica's checksum may take, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub checksum_timeout: u64,
    /// How many tablets are checksummed at the same time.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub checksum_concurrency: usize,
    /// Check only these tables (comma-separated; default: all).
    #[arg(long, value_name = "NAME[,NAME...]")]
    pub tables: Option<String>,
    /// List every tablet, not only the unhealthy ones.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Also check that every subspace of every table holds exactly the table's rows
    /// (reads all rows; run it with writes stopped, or in-flight writes show up).
    #[arg(long)]
    pub subspaces: bool,
    /// With --subspaces: first make every subspace hold exactly its table's rows at a
    /// snapshot (write missing or stale copies, mark misplaced ones removed), then
    /// check. Safe while writes go on; repairs what a chain that never finished left
    /// behind (its point leader died and its writer gave up).
    #[arg(long, requires = "subspaces")]
    pub repair: bool,
}

/// The outcome of a check.
#[derive(Debug, Default)]
pub struct KsckReport {
    /// What makes the cluster unhealthy.
    pub problems: Vec<String>,
    /// What deserves attention but does not stop the cluster from working.
    pub warnings: Vec<String>,
}

impl KsckReport {
    /// No problems found.
    pub fn healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The health of one tablet, worst last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TabletStatus {
    /// Leader, all voters up.
    Healthy,
    /// Works, but some replica is down, missing or not yet a voter.
    UnderReplicated,
    /// Replicas disagree (checksum).
    Inconsistent,
    /// No leader.
    NoLeader,
    /// Fewer than a majority of voters up.
    Unavailable,
}

impl TabletStatus {
    fn name(self) -> &'static str {
        match self {
            TabletStatus::Healthy => "HEALTHY",
            TabletStatus::UnderReplicated => "UNDER-REPLICATED",
            TabletStatus::Inconsistent => "INCONSISTENT",
            TabletStatus::NoLeader => "NO LEADER",
            TabletStatus::Unavailable => "UNAVAILABLE",
        }
    }
}

/// What the check knows about one tablet server.
#[derive(Clone, Debug, Default)]
pub struct ServerState {
    /// The master considers it live (heartbeating).
    pub live: bool,
    /// Its replicas as it reported them (`None`: not asked or did not answer).
    pub reports: Option<HashMap<String, TabletReport>>,
    /// It was asked and did not answer.
    pub unreachable: bool,
}

/// The verdict on one tablet.
#[derive(Debug)]
pub struct TabletCheck {
    /// Its status.
    pub status: TabletStatus,
    /// The replica that leads it (node id, address).
    pub leader: Option<(u64, String)>,
    /// Voters that are up (node id, address), the leader included.
    pub up_voters: Vec<(u64, String)>,
    /// Problems (unhealthy).
    pub problems: Vec<String>,
    /// Warnings.
    pub warnings: Vec<String>,
}

fn role_name(r: &TabletReport) -> &'static str {
    match r.role() {
        RaftRole::Leader => "leader",
        RaftRole::Follower => "follower",
        RaftRole::Learner => "learner",
        RaftRole::Candidate => "candidate",
        RaftRole::Shutdown => "shut down",
    }
}

/// Checks one tablet against what the servers report. `expected` is the table's
/// replication factor.
pub fn check_tablet(
    t: &TabletLocationInfo,
    expected: u32,
    servers: &HashMap<u64, ServerState>,
) -> TabletCheck {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut up_voters = Vec::new();
    let mut reported_leaders: Vec<(u64, String, u64)> = Vec::new();
    let mut roles = Vec::new();
    let voters: Vec<_> = t.replicas.iter().filter(|r| r.voter).collect();
    for r in &t.replicas {
        let server = servers.get(&r.node_id);
        let kind = if r.voter { "replica" } else { "learner" };
        let who = format!("{kind} on node {} ({})", r.node_id, r.addr);
        let server_live = server.map_or(r.live, |s| s.live) && r.live;
        if !server_live {
            warnings.push(format!(
                "{who} is down: its server does not heartbeat the master"
            ));
            continue;
        }
        if server.is_some_and(|s| s.unreachable) {
            warnings.push(format!(
                "{who} is unreachable: its server did not answer ListTablets"
            ));
            continue;
        }
        let report = server
            .and_then(|s| s.reports.as_ref())
            .map(|reps| reps.get(&t.tablet_id));
        match report {
            Some(None) => {
                warnings.push(format!(
                    "{who} is missing: the server does not host the tablet"
                ));
                continue;
            }
            Some(Some(rep)) => {
                roles.push(format!("node {}: {}", r.node_id, role_name(rep)));
                if rep.role() == RaftRole::Leader {
                    reported_leaders.push((r.node_id, r.addr.clone(), rep.term));
                }
                if !rep.state.is_empty() && !rep.state.eq_ignore_ascii_case("RUNNING") {
                    warnings.push(format!("{who} is in state {}", rep.state));
                }
            }
            None => {
                // Nothing reported: trust the master's view.
                if r.leader {
                    reported_leaders.push((r.node_id, r.addr.clone(), 0));
                }
            }
        }
        if r.voter {
            up_voters.push((r.node_id, r.addr.clone()));
        } else {
            warnings.push(format!("{who} is still being caught up (not a voter yet)"));
        }
    }

    let mut status = TabletStatus::Healthy;
    if voters.len() < expected as usize {
        warnings.push(format!(
            "has {} voter(s); the table asks for {expected}",
            voters.len()
        ));
    }
    if up_voters.len() < voters.len() || voters.len() < expected as usize {
        status = status.max(TabletStatus::UnderReplicated);
    }
    let majority = voters.len() / 2 + 1;
    if voters.is_empty() {
        problems.push("has no voters at all".to_string());
        status = TabletStatus::Unavailable;
    } else if up_voters.len() < majority {
        problems.push(format!(
            "only {} of {} voters are up (a majority, {majority}, is needed): the tablet \
             cannot elect a leader or accept writes",
            up_voters.len(),
            voters.len()
        ));
        status = TabletStatus::Unavailable;
    }
    reported_leaders.sort_by_key(|(_, _, term)| std::cmp::Reverse(*term));
    let leader = reported_leaders.first().map(|(n, a, _)| (*n, a.clone()));
    match &leader {
        None => {
            let seen = if roles.is_empty() {
                String::new()
            } else {
                format!(" (replicas report: {})", roles.join(", "))
            };
            problems.push(format!("has no leader{seen}"));
            status = status.max(TabletStatus::NoLeader);
        }
        Some((node, _)) => {
            if reported_leaders.len() > 1 {
                warnings.push(format!(
                    "{} replicas report being leader; the one with the highest term (node {node}) counts",
                    reported_leaders.len()
                ));
            }
            if let Some(m) = t.replicas.iter().find(|r| r.leader)
                && m.node_id != *node
            {
                warnings.push(format!(
                    "the master believes node {} leads, but node {node} does (the master's view \
                     is refreshed by heartbeats)",
                    m.node_id
                ));
            }
        }
    }
    TabletCheck {
        status,
        leader,
        up_voters,
        problems,
        warnings,
    }
}

/// One replica's checksum, or why there is none.
type ReplicaSum = (u64, String, Result<(u64, u64), String>);

/// Checksums a tablet on its leader, then on the other up voters at the leader's
/// snapshot.
async fn checksum_tablet(
    client: Client,
    tablet_id: String,
    leader: (u64, String),
    others: Vec<(u64, String)>,
    limit: Duration,
) -> (u64, Vec<ReplicaSum>) {
    async fn one(
        client: &Client,
        addr: &str,
        tablet_id: &str,
        ts: u64,
        limit: Duration,
    ) -> Result<(u64, u64, u64), String> {
        let mut stub = client
            .tablet_server(addr)
            .await
            .map_err(|e| e.to_string())?;
        let req = ChecksumRequest {
            tablet_id: tablet_id.to_string(),
            snapshot_timestamp: ts,
        };
        match timeout(limit, stub.checksum(req)).await {
            Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
            Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
            Ok(Ok(r)) => {
                let r = r.into_inner();
                Ok((r.checksum, r.rows, r.snapshot_timestamp))
            }
        }
    }
    let mut out = Vec::new();
    let snapshot = match one(&client, &leader.1, &tablet_id, 0, limit).await {
        Ok((sum, rows, ts)) => {
            out.push((leader.0, leader.1.clone(), Ok((sum, rows))));
            ts
        }
        Err(e) => {
            out.push((leader.0, leader.1.clone(), Err(e)));
            return (0, out);
        }
    };
    let mut set = JoinSet::new();
    for (node, addr) in others {
        let (client, tablet_id) = (client.clone(), tablet_id.clone());
        set.spawn(async move {
            let r = one(&client, &addr, &tablet_id, snapshot, limit)
                .await
                .map(|(s, n, _)| (s, n));
            (node, addr, r)
        });
    }
    while let Some(r) = set.join_next().await {
        match r {
            Ok(x) => out.push(x),
            Err(e) => out.push((0, "?".into(), Err(format!("checksum task failed: {e}")))),
        }
    }
    (snapshot, out)
}

/// Compares the checksums of a tablet's replicas (the first is the leader's).
/// Returns the leader's row count and the problems.
pub fn compare_checksums(snapshot: u64, sums: &[ReplicaSum]) -> (Option<u64>, Vec<String>) {
    let mut problems = Vec::new();
    let Some((lnode, laddr, lres)) = sums.first() else {
        return (None, problems);
    };
    let (lsum, lrows) = match lres {
        Ok(x) => *x,
        Err(e) => {
            problems.push(format!(
                "checksum on the leader, node {lnode} ({laddr}), failed: {e}"
            ));
            return (None, problems);
        }
    };
    for (node, addr, r) in &sums[1..] {
        match r {
            Err(e) => problems.push(format!(
                "checksum on node {node} ({addr}) at snapshot {snapshot} failed: {e}"
            )),
            Ok((sum, rows)) if (*sum, *rows) != (lsum, lrows) => problems.push(format!(
                "replicas disagree at snapshot {snapshot}: the leader, node {lnode}, has {lrows} \
                 row(s) with checksum {lsum:#018x}; node {node} ({addr}) has {rows} row(s) with \
                 checksum {sum:#018x}"
            )),
            Ok(_) => {}
        }
    }
    (Some(lrows), problems)
}

/// A master's own view of the master group.
async fn master_view(
    addr: &str,
    tls: Option<&cairn_proto::TlsConfig>,
    limit: Duration,
) -> Result<Vec<MasterInfo>, String> {
    let endpoint = cairn_proto::tls::endpoint(addr, tls)
        .map_err(|e| format!("bad address: {}", super::error_chain(&e)))?;
    let connect = async move { endpoint.connect().await.map(MasterClient::new) };
    let mut stub = match timeout(limit, connect).await {
        Err(_) => return Err(format!("no connection within {} s", limit.as_secs())),
        Ok(Err(e)) => return Err(format!("cannot connect: {}", super::error_chain(&e))),
        Ok(Ok(s)) => s,
    };
    match timeout(limit, stub.list_masters(ListMastersRequest {})).await {
        Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
        Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
        Ok(Ok(r)) => Ok(r.into_inner().masters),
    }
}

fn norm(addr: &str) -> String {
    addr.trim()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// Checks the masters; returns whether a leader that answers was found.
async fn check_masters(args: &KsckArgs, report: &mut KsckReport) -> bool {
    let limit = args.conn.timeout().min(Duration::from_secs(10));
    let mut addrs: Vec<String> = args.conn.addresses();
    let mut views: Vec<(String, Result<Vec<MasterInfo>, String>)> = Vec::new();
    let tls = match args.conn.tls.load() {
        Ok(t) => t,
        Err(e) => {
            report.problems.push(e);
            return false;
        }
    };
    let mut i = 0;
    while i < addrs.len() {
        let addr = addrs[i].clone();
        let view = master_view(&addr, tls.as_deref(), limit).await;
        if let Ok(ms) = &view {
            for m in ms {
                let a = norm(&m.addr);
                if !a.is_empty() && !addrs.contains(&a) {
                    addrs.push(a);
                }
            }
        }
        views.push((addr, view));
        i += 1;
    }
    let mut leaders = BTreeSet::new();
    let mut rows = Vec::new();
    for (addr, view) in &views {
        match view {
            Ok(ms) => {
                let me = ms.iter().find(|m| norm(&m.addr) == *addr);
                if let Some(l) = ms.iter().find(|m| m.role.eq_ignore_ascii_case("leader")) {
                    leaders.insert(norm(&l.addr));
                }
                rows.push(vec![
                    addr.clone(),
                    me.map(|m| m.node_id.to_string()).unwrap_or_default(),
                    me.map(|m| m.role.clone()).unwrap_or_else(|| "?".into()),
                    "ok".into(),
                ]);
            }
            Err(e) => {
                report
                    .problems
                    .push(format!("master {addr} is unreachable: {e}"));
                rows.push(vec![
                    addr.clone(),
                    String::new(),
                    "?".into(),
                    "UNREACHABLE".into(),
                ]);
            }
        }
    }
    println!("Masters");
    print!(
        "{}",
        indent(&text_table(&["address", "node", "role", "status"], &rows))
    );
    if views.iter().all(|(_, v)| v.is_err()) {
        report.problems.push(
            "no master answered: check --masters (or CAIRN_MASTERS) and that the masters run"
                .into(),
        );
        return false;
    }
    let reachable: BTreeSet<&String> = views
        .iter()
        .filter(|(_, v)| v.is_ok())
        .map(|(a, _)| a)
        .collect();
    let live_leaders: Vec<&String> = leaders.iter().filter(|l| reachable.contains(l)).collect();
    if live_leaders.is_empty() {
        let named = if leaders.is_empty() {
            String::new()
        } else {
            format!(
                " (some masters still name {}, which does not answer)",
                leaders.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        };
        report.problems.push(format!(
            "no master that answers is the leader{named}: DDL and tablet locations are \
             unavailable until a majority of masters is up and one is elected"
        ));
        return false;
    } else if leaders.len() > 1 {
        report.warnings.push(format!(
            "masters disagree on the leader ({}); this settles after an election",
            leaders.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    true
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

async fn check_tablet_servers(
    client: &Client,
    servers: &[TabletServerInfo],
    limit: Duration,
    report: &mut KsckReport,
) -> HashMap<u64, ServerState> {
    let mut set = JoinSet::new();
    for s in servers.iter().filter(|s| s.live) {
        let (client, addr, node) = (client.clone(), norm(&s.addr), s.node_id);
        set.spawn(async move {
            let r = async {
                let mut stub = client
                    .tablet_server(&addr)
                    .await
                    .map_err(|e| e.to_string())?;
                match timeout(limit, stub.list_tablets(ListTabletsRequest {})).await {
                    Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
                    Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
                    Ok(Ok(r)) => Ok(r.into_inner()),
                }
            }
            .await;
            (node, r)
        });
    }
    let mut answers = HashMap::new();
    while let Some(r) = set.join_next().await {
        if let Ok((node, r)) = r {
            answers.insert(node, r);
        }
    }
    let mut states = HashMap::new();
    let mut rows = Vec::new();
    for s in servers {
        let mut st = ServerState {
            live: s.live,
            ..Default::default()
        };
        let status = if !s.live {
            report.warnings.push(format!(
                "tablet server {} ({}) is down: no heartbeat for {:.1} s",
                s.node_id,
                s.addr,
                s.millis_since_heartbeat as f64 / 1000.0
            ));
            "DOWN".to_string()
        } else {
            match answers.remove(&s.node_id) {
                Some(Ok(resp)) => {
                    if resp.node_id != 0 && resp.node_id != s.node_id {
                        report.problems.push(format!(
                            "tablet server at {} says it is node {}, the master knows it as node {}",
                            s.addr, resp.node_id, s.node_id
                        ));
                    }
                    st.reports = Some(
                        resp.tablets
                            .into_iter()
                            .map(|t| (t.tablet_id.clone(), t))
                            .collect(),
                    );
                    "live".to_string()
                }
                Some(Err(e)) => {
                    st.unreachable = true;
                    report.warnings.push(format!(
                        "tablet server {} ({}) heartbeats but did not answer ListTablets: {e}",
                        s.node_id, s.addr
                    ));
                    "UNREACHABLE".to_string()
                }
                None => {
                    st.unreachable = true;
                    "UNREACHABLE".to_string()
                }
            }
        };
        rows.push(vec![
            s.node_id.to_string(),
            s.addr.clone(),
            status,
            format!("{:.1} s ago", s.millis_since_heartbeat as f64 / 1000.0),
            s.num_replicas.to_string(),
        ]);
        states.insert(s.node_id, st);
    }
    println!("Tablet servers");
    if rows.is_empty() {
        println!("  none registered");
    } else {
        print!(
            "{}",
            indent(&text_table(
                &["node", "address", "status", "heartbeat", "replicas"],
                &rows
            ))
        );
    }
    states
}

/// Runs the check and prints its report. `Ok` even when unhealthy: see
/// [`KsckReport::healthy`]; `Err` only for a bad command line.
pub async fn ksck(args: &KsckArgs) -> ToolResult<KsckReport> {
    if args.checksum_concurrency == 0 {
        return Err("--checksum-concurrency must be at least 1".into());
    }
    let only: Option<Vec<String>> = match &args.tables {
        Some(t) => Some(parse_names(t, "--tables")?),
        None => None,
    };
    let mut report = KsckReport::default();
    let leader_found = check_masters(args, &mut report).await;
    println!();
    if !leader_found {
        // Everything else comes from the leader master.
        print_verdict(&report);
        return Ok(report);
    }

    let client = args.conn.connect().await?;
    let limit = args.conn.timeout().min(Duration::from_secs(10));
    let servers = match client.list_tablet_servers().await {
        Ok(s) => s,
        Err(e) => {
            report
                .problems
                .push(format!("cannot list the tablet servers: {e}"));
            print_verdict(&report);
            return Ok(report);
        }
    };
    let states = check_tablet_servers(&client, &servers, limit, &mut report).await;
    println!();

    let mut tables = match client.list_tables().await {
        Ok(t) => t,
        Err(e) => {
            report.problems.push(format!("cannot list the tables: {e}"));
            print_verdict(&report);
            return Ok(report);
        }
    };
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(only) = &only {
        for name in only {
            if !tables.iter().any(|t| &t.name == name) {
                report
                    .problems
                    .push(format!("table '{name}' does not exist"));
            }
        }
        tables.retain(|t| only.contains(&t.name));
    }

    struct Checked {
        table: Table,
        locs: Vec<TabletLocationInfo>,
        checks: Vec<TabletCheck>,
        rows: Option<u64>,
    }
    let mut checked: Vec<Checked> = Vec::new();
    let mut summary_rows = Vec::new();
    for ts in &tables {
        if !ts.state.eq_ignore_ascii_case("RUNNING") {
            report
                .warnings
                .push(format!("table '{}' is {}", ts.name, ts.state));
        }
        let table = match client.open_table(&ts.name).await {
            Ok(t) => t,
            Err(e) => {
                report
                    .problems
                    .push(format!("table '{}': cannot open it: {e}", ts.name));
                summary_rows.push(vec![
                    ts.name.clone(),
                    "?".into(),
                    ts.replicas.to_string(),
                    "ERROR".into(),
                    String::new(),
                ]);
                continue;
            }
        };
        let locs = match client.table_locations(&table, true).await {
            Ok(l) => l.as_ref().clone(),
            Err(e) => {
                report.problems.push(format!(
                    "table '{}': cannot get its tablet locations: {e}",
                    ts.name
                ));
                summary_rows.push(vec![
                    ts.name.clone(),
                    "?".into(),
                    ts.replicas.to_string(),
                    "ERROR".into(),
                    String::new(),
                ]);
                continue;
            }
        };
        if locs.is_empty() {
            report
                .problems
                .push(format!("table '{}' has no tablets", ts.name));
        }
        let checks = locs
            .iter()
            .map(|t| check_tablet(t, table.replicas, &states))
            .collect();
        // A subspace's regions are tablets of a hidden table: check them too.
        let regions = super::ksck_subspaces::region_tables(&client, &table, &mut report).await;
        checked.push(Checked {
            table,
            locs,
            checks,
            rows: None,
        });
        for (region, locs) in regions {
            let checks = locs
                .iter()
                .map(|t| check_tablet(t, region.replicas, &states))
                .collect();
            checked.push(Checked {
                table: region,
                locs,
                checks,
                rows: None,
            });
        }
    }
    if args.subspaces {
        for c in &checked {
            if args.repair {
                super::ksck_subspaces::repair(&client, &c.table, &mut report).await;
            }
            super::ksck_subspaces::check_contents(&client, &c.table, &mut report).await;
        }
    }

    if args.checksum {
        let mut set = JoinSet::new();
        let total: usize = checked
            .iter()
            .map(|c| c.checks.iter().filter(|t| t.leader.is_some()).count())
            .sum();
        println!("Checksumming {total} tablet(s) (those with a leader)…");
        let limit = Duration::from_secs(args.checksum_timeout.max(1));
        let mut results: HashMap<(usize, usize), (u64, Vec<ReplicaSum>)> = HashMap::new();
        for (ti, c) in checked.iter().enumerate() {
            for (i, (loc, check)) in c.locs.iter().zip(&c.checks).enumerate() {
                let Some(leader) = check.leader.clone() else {
                    continue;
                };
                let others: Vec<(u64, String)> = check
                    .up_voters
                    .iter()
                    .filter(|(n, _)| *n != leader.0)
                    .cloned()
                    .collect();
                while set.len() >= args.checksum_concurrency {
                    if let Some(Ok((k, r))) = set.join_next().await {
                        results.insert(k, r);
                    }
                }
                let (client, tablet_id) = (client.clone(), loc.tablet_id.clone());
                set.spawn(async move {
                    (
                        (ti, i),
                        checksum_tablet(client, tablet_id, leader, others, limit).await,
                    )
                });
            }
        }
        while let Some(r) = set.join_next().await {
            if let Ok((k, r)) = r {
                results.insert(k, r);
            }
        }
        for ((ti, i), (snapshot, sums)) in results {
            let c = &mut checked[ti];
            let (rows, problems) = compare_checksums(snapshot, &sums);
            if let Some(r) = rows {
                *c.rows.get_or_insert(0) += r;
            }
            if !problems.is_empty() {
                c.checks[i].status = c.checks[i].status.max(TabletStatus::Inconsistent);
                c.checks[i].problems.extend(problems);
            }
        }
        println!();
    }

    for c in &checked {
        let mut worst = TabletStatus::Healthy;
        let mut unhealthy = 0;
        for (loc, check) in c.locs.iter().zip(&c.checks) {
            worst = worst.max(check.status);
            if check.status != TabletStatus::Healthy {
                unhealthy += 1;
            }
            let at = format!("table '{}', tablet {}", c.table.name, loc.tablet_id);
            for p in &check.problems {
                report.problems.push(format!("{at}: {p}"));
            }
            for w in &check.warnings {
                report.warnings.push(format!("{at}: {w}"));
            }
        }
        let status = if unhealthy == 0 {
            worst.name().to_string()
        } else {
            format!("{} ({unhealthy} of {} tablets)", worst.name(), c.locs.len())
        };
        summary_rows.push(vec![
            c.table.name.clone(),
            c.locs.len().to_string(),
            c.table.replicas.to_string(),
            status,
            c.rows.map(group_thousands).unwrap_or_default(),
        ]);
    }
    summary_rows.sort_by(|a, b| a[0].cmp(&b[0]));
    println!("Tables");
    if summary_rows.is_empty() {
        println!("  none");
    } else {
        let headers: &[&str] = if args.checksum {
            &["table", "tablets", "replicas", "status", "rows"]
        } else {
            &["table", "tablets", "replicas", "status"]
        };
        let rows: Vec<Vec<String>> = summary_rows
            .into_iter()
            .map(|mut r| {
                r.truncate(headers.len());
                r
            })
            .collect();
        print!("{}", indent(&text_table(headers, &rows)));
    }

    let tablet_rows: Vec<Vec<String>> = checked
        .iter()
        .flat_map(|c| {
            c.locs
                .iter()
                .zip(&c.checks)
                .filter(move |(_, check)| args.verbose || check.status != TabletStatus::Healthy)
                .map(move |(loc, check)| {
                    vec![
                        c.table.name.clone(),
                        loc.tablet_id.clone(),
                        describe_partition(&c.table, loc),
                        check.status.name().to_string(),
                        check
                            .leader
                            .as_ref()
                            .map(|(n, a)| format!("{a} (node {n})"))
                            .unwrap_or_else(|| "-".into()),
                        format!(
                            "{}/{}",
                            check.up_voters.len(),
                            loc.replicas.iter().filter(|r| r.voter).count()
                        ),
                    ]
                })
        })
        .collect();
    if !tablet_rows.is_empty() {
        println!();
        println!(
            "Tablets{}",
            if args.verbose {
                ""
            } else {
                " needing attention"
            }
        );
        print!(
            "{}",
            indent(&text_table(
                &[
                    "table",
                    "tablet",
                    "partition",
                    "status",
                    "leader",
                    "voters up"
                ],
                &tablet_rows
            ))
        );
    }
    print_verdict(&report);
    Ok(report)
}

fn print_verdict(report: &KsckReport) {
    if !report.warnings.is_empty() {
        println!();
        println!("Warnings ({}):", report.warnings.len());
        for w in &report.warnings {
            println!("  - {w}");
        }
    }
    println!();
    if report.problems.is_empty() && report.warnings.is_empty() {
        println!("OK: the cluster is healthy");
    } else if report.problems.is_empty() {
        println!(
            "OK: every tablet has a leader and a live majority of voters ({} warning(s) above)",
            report.warnings.len()
        );
    } else {
        println!("Problems ({}):", report.problems.len());
        for p in &report.problems {
            println!("  - {p}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_client::ReplicaInfo;
    use cairn_common::Partition;

    fn replica(node: u64, leader: bool, live: bool) -> ReplicaInfo {
        ReplicaInfo {
            node_id: node,
            addr: format!("ts{node}:7050"),
            leader,
            voter: true,
            live,
        }
    }

    fn tablet(replicas: Vec<ReplicaInfo>) -> TabletLocationInfo {
        TabletLocationInfo {
            tablet_id: "t1".into(),
            partition: Partition {
                hash_buckets: vec![],
                range_lower: vec![],
                range_upper: vec![],
            },
            replicas,
        }
    }

    fn report(role: RaftRole, term: u64) -> TabletReport {
        TabletReport {
            tablet_id: "t1".into(),
            role: role as i32,
            term,
            state: "RUNNING".into(),
            ..Default::default()
        }
    }

    fn server(live: bool, tablets: Option<Vec<TabletReport>>) -> ServerState {
        ServerState {
            live,
            reports: tablets.map(|ts| ts.into_iter().map(|t| (t.tablet_id.clone(), t)).collect()),
            unreachable: false,
        }
    }

    #[test]
    fn healthy_tablets_pass() {
        let t = tablet(vec![
            replica(1, true, true),
            replica(2, false, true),
            replica(3, false, true),
        ]);
        let servers: HashMap<u64, ServerState> = [
            (1, server(true, Some(vec![report(RaftRole::Leader, 3)]))),
            (2, server(true, Some(vec![report(RaftRole::Follower, 3)]))),
            (3, server(true, Some(vec![report(RaftRole::Follower, 3)]))),
        ]
        .into();
        let c = check_tablet(&t, 3, &servers);
        assert_eq!(c.status, TabletStatus::Healthy, "{c:?}");
        assert_eq!(c.leader, Some((1, "ts1:7050".into())));
        assert_eq!(c.up_voters.len(), 3);
        assert!(c.problems.is_empty() && c.warnings.is_empty());
    }

    #[test]
    fn a_down_follower_is_a_warning_and_a_lost_majority_a_problem() {
        let t = tablet(vec![
            replica(1, true, true),
            replica(2, false, false),
            replica(3, false, true),
        ]);
        let mut servers: HashMap<u64, ServerState> = [
            (1, server(true, Some(vec![report(RaftRole::Leader, 3)]))),
            (2, server(false, None)),
            (3, server(true, Some(vec![report(RaftRole::Follower, 3)]))),
        ]
        .into();
        let c = check_tablet(&t, 3, &servers);
        assert_eq!(c.status, TabletStatus::UnderReplicated);
        assert!(c.problems.is_empty());
        assert_eq!(c.warnings.len(), 1);
        // Node 3 no longer hosts the replica: 1 of 3 voters up.
        servers.insert(3, server(true, Some(vec![])));
        let c = check_tablet(&t, 3, &servers);
        assert_eq!(c.status, TabletStatus::Unavailable);
        assert!(
            c.problems[0].contains("only 1 of 3 voters"),
            "{:?}",
            c.problems
        );
        assert!(c.warnings.iter().any(|w| w.contains("missing")));
    }

    #[test]
    fn leaders_come_from_the_servers_own_reports() {
        // The master still names node 1, but node 2 won an election.
        let t = tablet(vec![
            replica(1, true, true),
            replica(2, false, true),
            replica(3, false, true),
        ]);
        let servers: HashMap<u64, ServerState> = [
            (1, server(true, Some(vec![report(RaftRole::Follower, 4)]))),
            (2, server(true, Some(vec![report(RaftRole::Leader, 4)]))),
            (3, server(true, Some(vec![report(RaftRole::Follower, 4)]))),
        ]
        .into();
        let c = check_tablet(&t, 3, &servers);
        assert_eq!(c.leader, Some((2, "ts2:7050".into())));
        assert_eq!(c.status, TabletStatus::Healthy);
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("master believes node 1"))
        );
        // Nobody leads.
        let servers: HashMap<u64, ServerState> = [
            (1, server(true, Some(vec![report(RaftRole::Candidate, 5)]))),
            (2, server(true, Some(vec![report(RaftRole::Follower, 4)]))),
            (3, server(true, Some(vec![report(RaftRole::Follower, 4)]))),
        ]
        .into();
        let c = check_tablet(&t, 3, &servers);
        assert_eq!(c.status, TabletStatus::NoLeader);
        assert!(c.problems[0].contains("no leader") && c.problems[0].contains("candidate"));
        // Without reports the master's view is used.
        let servers: HashMap<u64, ServerState> = [
            (1, server(true, None)),
            (2, server(true, None)),
            (3, server(true, None)),
        ]
        .into();
        let c = check_tablet(&t, 3, &servers);
        assert_eq!(c.leader, Some((1, "ts1:7050".into())));
        assert_eq!(c.status, TabletStatus::Healthy);
    }

    #[test]
    fn too_few_voters_is_under_replication() {
        let t = tablet(vec![replica(1, true, true)]);
        let servers: HashMap<u64, ServerState> =
            [(1, server(true, Some(vec![report(RaftRole::Leader, 1)])))].into();
        let c = check_tablet(&t, 3, &servers);
        assert_eq!(c.status, TabletStatus::UnderReplicated);
        assert!(c.problems.is_empty());
        let c = check_tablet(&t, 1, &servers);
        assert_eq!(c.status, TabletStatus::Healthy);
    }

    #[test]
    fn checksums_must_agree() {
        let ok = |n: u64, s: u64, r: u64| (n, format!("ts{n}"), Ok((s, r)));
        let (rows, p) = compare_checksums(9, &[ok(1, 5, 10), ok(2, 5, 10), ok(3, 5, 10)]);
        assert_eq!(rows, Some(10));
        assert!(p.is_empty());
        let (_, p) = compare_checksums(9, &[ok(1, 5, 10), ok(2, 6, 10)]);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].contains("disagree at snapshot 9") && p[0].contains("node 2"),
            "{p:?}"
        );
        let (_, p) = compare_checksums(9, &[ok(1, 5, 10), (3, "ts3".into(), Err("boom".into()))]);
        assert!(p[0].contains("boom"));
        let (rows, p) = compare_checksums(0, &[(1, "ts1".into(), Err("down".into()))]);
        assert_eq!(rows, None);
        assert!(p[0].contains("leader"));
    }
}
