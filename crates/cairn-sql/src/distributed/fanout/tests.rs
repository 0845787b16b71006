//! The fan-out bound, proved on plans for a simulated cluster of 64 workers: each
//! query is planned as a front end would plan it, every stage's tasks are routed as
//! the coordinator routes them, and the neighbours of every worker (and of the
//! front end) in the resulting stage graph are counted.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use cairn_client::{Client, ReplicaInfo, Table, TabletLocationInfo};
use cairn_common::{ColumnSpec, DataType, HashLevel, Partition, PartitionSchema, Schema};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use datafusion_distributed::{DistributedExec, RouteTasksEvent};

use super::*;
use crate::distributed::drawing::{draw, with_task_servers};
use crate::distributed::tasks::{route_tasks, task_servers};
use crate::distributed::{ClusterWorkers, with_distributed_planner};
use crate::options::{InsertMode, StatementContext};
use crate::partitioning::HashIdentity;
use crate::scan::ScanSpec;

/// The simulated cluster's size.
const WORKERS: usize = 64;

/// The bound the plans are held to.
const N_MAX: usize = 16;

/// Worker `i`'s address.
fn addr(i: usize) -> String {
    format!("10.0.{}.{}:7050", i / 100, i % 100)
}

#[test]
fn groups_keep_every_worker_within_n_max() {
    let workers: Vec<String> = (0..WORKERS).map(addr).collect();
    // A cluster within the bound needs no hubs.
    assert_eq!(Topology::new(workers[..16].to_vec(), N_MAX), None);
    assert_eq!(Topology::new(workers.clone(), 0), None);
    let t = Topology::new(workers.clone(), N_MAX).unwrap();
    // 11 groups of 5 or 6: a hub has 5 members, 10 hubs and the front end.
    assert_eq!(t.groups(), 11);
    assert_eq!(t.max_neighbours(), 16);
    let sizes: Vec<usize> = (0..t.groups()).map(|k| t.group(k).len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), WORKERS);
    assert!(sizes.iter().all(|&s| s == 5 || s == 6), "{sizes:?}");
    for w in &workers {
        let k = t.group_of(w).unwrap();
        assert!(
            t.group(k)
                .contains(&t.workers.iter().position(|x| x == w).unwrap())
        );
    }
    assert_eq!(t.group_of("10.9.9.9:1"), None);
    // Below about 2√W no grouping fits: the fewest neighbours possible.
    let tight = Topology::new(workers, 8).unwrap();
    assert_eq!(tight.groups(), 8);
    assert_eq!(tight.max_neighbours(), 15);
}

/// A table the simulated cluster serves: `(k BIGINT PRIMARY KEY, v TEXT, x BIGINT)`
/// hashed on `k` into one bucket per worker, bucket *i* led by worker *i + shift*
/// with followers on the next two.
struct Simulated {
    table: Table,
    tablets: Vec<TabletLocationInfo>,
    client: Client,
}

impl Simulated {
    async fn new(name: &str, shift: usize) -> Simulated {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String).nullable(),
                ColumnSpec::new("x", DataType::Int64).nullable(),
            ],
            &["k"],
        )
        .unwrap();
        let table = Table {
            id: format!("{name}-id"),
            name: name.into(),
            schema: Arc::new(schema),
            partition_schema: PartitionSchema {
                hash_levels: vec![HashLevel {
                    columns: vec!["k".into()],
                    num_buckets: WORKERS as u32,
                    seed: 7,
                }],
                range_columns: vec![],
            },
            replicas: 3,
            subspaces: vec![],
            colocation: None,
        };
        let tablets = (0..WORKERS)
            .map(|i| TabletLocationInfo {
                tablet_id: format!("{name}-{i}"),
                partition: Partition {
                    hash_buckets: vec![i as u32],
                    range_lower: vec![],
                    range_upper: vec![],
                },
                replicas: (0..3)
                    .map(|r| ReplicaInfo {
                        node_id: r as u64,
                        addr: addr((i + shift + r) % WORKERS),
                        leader: r == 0,
                        voter: true,
                        live: true,
                    })
                    .collect(),
            })
            .collect();
        let client = Client::connect(&["127.0.0.1:1".to_string()]).await.unwrap();
        Simulated {
            table,
            tablets,
            client,
        }
    }
}

impl std::fmt::Debug for Simulated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Simulated({})", self.table.name)
    }
}

#[async_trait]
impl TableProvider for Simulated {
    fn schema(&self) -> SchemaRef {
        self.table.schema.project_arrow(&[0, 1, 2])
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projection = projection.cloned().unwrap_or_else(|| vec![0, 1, 2]);
        let names = ["k", "v", "x"];
        let statement = StatementContext::new(None, InsertMode::Insert);
        *statement.chosen_snapshot.lock().await = Some(12345);
        let hash = projection.iter().position(|&c| c == 0).map(|k| {
            (
                vec![k],
                HashIdentity {
                    types: vec![DataType::Int64],
                    buckets: WORKERS as u32,
                    seed: 7,
                },
            )
        });
        Ok(Arc::new(CairnScanExec::new(ScanSpec {
            client: self.client.clone(),
            total_tablets: self.tablets.len(),
            tablet_stats: vec![None; self.tablets.len()],
            tablets: self.tablets.clone(),
            columns: projection.iter().map(|&c| names[c].to_string()).collect(),
            predicates: vec![],
            limit,
            hash,
            statement,
            schema: self.table.schema.project_arrow(&projection),
            table: self.table.clone(),
            pad_to: 0,
            read_from: None,
        })))
    }
}

/// A front end's session on the simulated cluster, bounded by `n_max`, with
/// tables `a` and `b` (hashed alike on `k` and placed alike, a colocation group).
async fn front_end(n_max: usize) -> SessionContext {
    let workers: Vec<String> = (0..WORKERS).map(addr).collect();
    let options = CairnOptions {
        n_max,
        ..Default::default()
    };
    let config = SessionConfig::new()
        .with_target_partitions(4)
        .with_option_extension(options);
    let template = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .build();
    let client = Client::connect(&["127.0.0.1:1".to_string()]).await.unwrap();
    let state = with_distributed_planner(template, &client, ClusterWorkers::fixed(&workers));
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("a", Arc::new(Simulated::new("a", 0).await))
        .unwrap();
    ctx.register_table("b", Arc::new(Simulated::new("b", 0).await))
        .unwrap();
    ctx
}

/// `sql` planned for the simulated cluster, as the front end plans it.
async fn plan(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
    let state: SessionState = ctx.state();
    let logical = state.create_logical_plan(sql).await.unwrap();
    let physical = state.create_physical_plan(&logical).await.unwrap();
    assert!(physical.is::<DistributedExec>(), "not distributed: {sql}");
    bound(physical, state.config()).unwrap()
}

/// Each node's neighbours in `plan`'s stage graph: the workers its tasks read rows
/// from or are read by, tasks routed as the coordinator routes them (the head
/// stage on the front end, `front-end`).
fn neighbours(
    ctx: &SessionContext,
    plan: &Arc<dyn ExecutionPlan>,
) -> BTreeMap<String, BTreeSet<String>> {
    let task_ctx = ctx.state().task_ctx();
    let mut peers = BTreeMap::new();
    let head = Arc::clone(plan.children()[0]);
    visit(&task_ctx, &head, &["front-end".to_string()], &mut peers);
    peers
}

/// Adds the exchanges of the stage running `stage` on `nodes` (one per task) with
/// the stages it reads, and theirs.
fn visit(
    task_ctx: &Arc<datafusion::execution::TaskContext>,
    stage: &Arc<dyn ExecutionPlan>,
    nodes: &[String],
    peers: &mut BTreeMap<String, BTreeSet<String>>,
) {
    let mut reads = vec![];
    stage
        .apply(|n| {
            if n.is_network_boundary() {
                reads.push(Arc::clone(n));
                return Ok(TreeNodeRecursion::Jump);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
    for boundary in reads {
        let nb = boundary.as_network_boundary().unwrap();
        let Stage::Local(below) = nb.input_stage() else {
            panic!("a remote stage in a plan not yet run");
        };
        let routed = route_tasks(RouteTasksEvent {
            task_ctx: Arc::clone(task_ctx),
            plan: &below.plan,
            task_count: below.tasks,
        });
        let below_nodes: Vec<String> = routed
            .expect("Cairn routes every stage")
            .unwrap()
            .urls
            .iter()
            .map(|u| format!("{}:{}", u.host_str().unwrap(), u.port().unwrap()))
            .collect();
        for (j, node) in nodes.iter().enumerate() {
            let read: Vec<usize> = if boundary.is::<NetworkCoalesceExec>() {
                coalesced(below.tasks, j, nodes.len())
            } else {
                (0..below.tasks).collect()
            };
            for i in read {
                if below_nodes[i] != *node {
                    peers
                        .entry(node.clone())
                        .or_default()
                        .insert(below_nodes[i].clone());
                    peers
                        .entry(below_nodes[i].clone())
                        .or_default()
                        .insert(node.clone());
                }
            }
        }
        visit(task_ctx, &below.plan, &below_nodes, peers);
    }
}

/// The tasks of a `p`-task stage that task `j` of the `c` tasks coalescing it
/// reads: runs of equal length (one longer for the first `p mod c`).
fn coalesced(p: usize, j: usize, c: usize) -> Vec<usize> {
    let (base, extra) = (p / c, p % c);
    let start = j * base + j.min(extra);
    (start..start + base + usize::from(j < extra)).collect()
}

/// The most neighbours any node has, and which.
fn most(peers: &BTreeMap<String, BTreeSet<String>>) -> (usize, String) {
    peers
        .iter()
        .map(|(n, p)| (p.len(), n.clone()))
        .max()
        .unwrap_or_default()
}

const QUERIES: [&str; 6] = [
    // A shuffle on the grouping column, then the gather.
    "SELECT v, count(*) FROM a GROUP BY v",
    // Both sides shuffled on v, the join's result shuffled again.
    "SELECT a.v, sum(b.x) FROM a JOIN b ON a.v = b.v GROUP BY a.v",
    // A merge of sorted streams.
    "SELECT k, v FROM a ORDER BY x LIMIT 10",
    // A gather of every task's rows.
    "SELECT k FROM a WHERE x > 5",
    // A join of two tables hashed alike: no shuffle.
    "SELECT count(*) FROM a JOIN b ON a.k = b.k",
    // A broadcast or a shuffle of the smaller side, whichever DataFusion picks.
    "SELECT a.k, b.v FROM a JOIN b ON a.x = b.k WHERE b.v = 'z'",
];

#[tokio::test]
async fn no_node_of_64_exchanges_rows_with_more_than_n_max() {
    let bounded = front_end(N_MAX).await;
    let unbounded = front_end(0).await;
    for sql in QUERIES {
        let p = plan(&bounded, sql).await;
        let peers = neighbours(&bounded, &p);
        let (n, who) = most(&peers);
        assert!(
            n <= N_MAX,
            "{sql}: {who} has {n} neighbours\n{}",
            datafusion_distributed::display_plan_ascii(p.as_ref(), false)
        );
        // Every worker still takes part.
        assert_eq!(peers.len(), WORKERS + 1, "{sql}");
        // The same query unbounded: all-to-all, or a gather of 64 tasks.
        let p = plan(&unbounded, sql).await;
        let (n, who) = most(&neighbours(&unbounded, &p));
        assert!(n > N_MAX, "{sql}: unbounded, {who} has only {n} neighbours");
    }
}

#[tokio::test]
async fn relays_gather_each_group_and_re_apply_the_stage_head() {
    let ctx = front_end(N_MAX).await;
    let p = plan(&ctx, "SELECT v, count(*) FROM a GROUP BY v").await;
    let text = datafusion_distributed::display_plan_ascii(p.as_ref(), false);
    // The scan stage, laid out 11 groups of 6 slots (padded), gathered by 11 relays
    // on the hubs, which hash the rows for the 11 tasks aggregating them.
    assert!(text.contains("NetworkCoalesceExec"), "{text}");
    let mut tasks = vec![];
    p.apply(|n| {
        if let Some(nb) = n.as_network_boundary() {
            tasks.push((n.name().to_string(), nb.input_stage().task_count()));
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    assert_eq!(
        tasks,
        vec![
            ("NetworkCoalesceExec".to_string(), 11),
            ("NetworkShuffleExec".to_string(), 11),
            ("NetworkCoalesceExec".to_string(), 66),
        ],
        "{text}"
    );
    // EXPLAIN draws the scan stage below the relay that gathers it (the library
    // alone stops at the relay), one level deeper than the relay's box.
    let drawn = draw(&p);
    let lines: Vec<&str> = drawn.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let scan = lines
        .iter()
        .position(|l| l.contains("─ Stage ") && l.contains("tasks=66"))
        .unwrap_or_else(|| panic!("no scan stage in\n{drawn}"));
    assert!(
        lines[scan..].iter().any(|l| l.contains("CairnScanExec")),
        "{drawn}"
    );
    let parent = lines[..scan]
        .iter()
        .rposition(|l| l.contains("─ Stage ") && indent(l) < indent(lines[scan]))
        .unwrap();
    assert_eq!(indent(lines[parent]) + 2, indent(lines[scan]), "{drawn}");
    assert!(
        lines[parent..scan]
            .iter()
            .any(|l| l.contains("NetworkCoalesceExec") && l.contains("input_tasks=66")),
        "{drawn}"
    );
    // A gather is a relay with nothing above it in its stage: the library alone
    // draws no stage below it.
    let gather = plan(&ctx, "SELECT k FROM a WHERE x > 5").await;
    let library = datafusion_distributed::display_plan_ascii(gather.as_ref(), false);
    let drawn = draw(&gather);
    assert!(!library.contains("CairnScanExec"), "{library}");
    assert!(drawn.contains("CairnScanExec"), "{drawn}");
    assert!(
        drawn.starts_with(&library[..library.find("  ┌").unwrap()]),
        "{drawn}"
    );
    // The relay keeps the shuffle's hash repartition at its head.
    let mut heads = vec![];
    p.apply(|n| {
        if let Some(nb) = n.as_network_boundary()
            && n.is::<NetworkShuffleExec>()
            && let Stage::Local(s) = nb.input_stage()
        {
            heads.push(s.plan.name().to_string());
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    assert_eq!(heads, vec!["RepartitionExec"], "{text}");
    // A sort is a merge tree: each relay merges its group's sorted streams.
    let p = plan(&ctx, "SELECT k, v FROM a ORDER BY x LIMIT 10").await;
    let text = datafusion_distributed::display_plan_ascii(p.as_ref(), false);
    let merges = text.matches("SortPreservingMergeExec").count();
    assert!(merges >= 2, "{text}");
}

/// EXPLAIN names the server of every task, scan or not, and names the ones the
/// query then runs on: routing depends only on the plan and the workers, so two
/// plans of one query go to the same servers. Scan tasks run where they read.
#[tokio::test]
async fn explain_names_the_server_every_task_runs_on() {
    let workers: BTreeSet<String> = (0..WORKERS).map(addr).collect();
    for n_max in [0, N_MAX] {
        let ctx = front_end(n_max).await;
        let task_ctx = ctx.state().task_ctx();
        for sql in QUERIES {
            let p = plan(&ctx, sql).await;
            let servers = task_servers(&p, &task_ctx);
            assert_eq!(servers, task_servers(&plan(&ctx, sql).await, &task_ctx));
            let mut stages = 0;
            let mut leaves = 0;
            p.apply(|n| {
                if let Some(nb) = n.as_network_boundary() {
                    let stage = nb.input_stage();
                    stages += 1;
                    let at = &servers[&stage.num()];
                    assert_eq!(at.len(), stage.task_count(), "{sql}");
                    assert!(at.iter().all(|a| workers.contains(a)), "{sql}: {at:?}");
                    let mut stage_leaves = vec![];
                    stage.local_plan().unwrap().apply(|m| {
                        if m.is_network_boundary() {
                            return Ok(TreeNodeRecursion::Jump);
                        }
                        if let Some(leaf) = m.downcast_ref::<DistributedLeafExec>() {
                            stage_leaves.push(leaf.variants().to_vec());
                        }
                        Ok(TreeNodeRecursion::Continue)
                    })?;
                    // A task of a stage that scans (under no bound) runs on a
                    // server one of its scans reads from.
                    if n_max == 0 && !stage_leaves.is_empty() {
                        leaves += 1;
                        for (t, at) in at.iter().enumerate() {
                            let from: Vec<&String> = stage_leaves
                                .iter()
                                .filter_map(|variants| {
                                    let read = variants[t].downcast_ref::<CairnScanExec>()?;
                                    read.spec().read_from.as_ref()
                                })
                                .collect();
                            assert!(from.is_empty() || from.contains(&at), "{sql}: task {t}");
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
            assert_eq!(servers.len(), stages, "{sql}");
            assert!(n_max > 0 || leaves > 0, "{sql}");
            let shown = with_task_servers(&draw(&p), &servers);
            let headers: Vec<&str> = shown.lines().filter(|l| l.contains("─ Stage ")).collect();
            assert_eq!(headers.len(), stages, "{shown}");
            for header in headers {
                let num: usize = header
                    .split("─ Stage ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{header}"));
                let at = &servers[&num];
                let listed: Vec<String> =
                    (0..at.len()).map(|t| format!("t{t}={}", at[t])).collect();
                assert!(
                    header.ends_with(&format!("── Servers: {}", listed.join(" "))),
                    "{header}"
                );
            }
        }
    }
}

/// The stages above the scans start at different workers, so the single-task
/// stages of one query do not all land on the first worker.
#[tokio::test]
async fn stages_above_the_scans_start_at_different_workers() {
    let ctx = front_end(0).await;
    let p = plan(
        &ctx,
        "SELECT a.v, sum(b.x) FROM a JOIN b ON a.v = b.v GROUP BY a.v",
    )
    .await;
    let servers = task_servers(&p, &ctx.state().task_ctx());
    let firsts: BTreeSet<&String> = servers.values().map(|at| &at[0]).collect();
    assert!(firsts.len() > 1, "{servers:?}");
}

/// EXPLAIN ANALYZE draws stage headers with metrics after the task counts: the
/// servers go between the two.
#[test]
fn servers_follow_the_task_counts_of_a_header_with_metrics() {
    let servers = BTreeMap::from([(2, vec!["a:1".to_string(), "b:2".to_string()])]);
    let drawn = "┌───── DistributedExec ── local_coordinator_channels=0\n\
                 │ [Stage 2] => NetworkCoalesceExec: output_partitions=4, input_tasks=2\n\
                 \x20 ┌───── Stage 2 ── tasks=2, partitions=2 plan_added_at={0:6.53ms}\n\
                 \x20 ┌───── Stage 3 ── tasks=1, partitions=12\n";
    assert_eq!(
        with_task_servers(drawn, &servers),
        "┌───── DistributedExec ── local_coordinator_channels=0\n\
         │ [Stage 2] => NetworkCoalesceExec: output_partitions=4, input_tasks=2\n\
         \x20 ┌───── Stage 2 ── tasks=2, partitions=2 ── Servers: t0=a:1 t1=b:2 \
         plan_added_at={0:6.53ms}\n\
         \x20 ┌───── Stage 3 ── tasks=1, partitions=12\n"
    );
}
