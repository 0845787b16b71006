//! How a Cairn scan is split among distributed tasks and where the tasks run.
//!
//! The distributed planner asks three questions of each leaf it does not know:
//! - how many tasks its stage wants ([`desired_task_count`]): one per tablet server
//!   holding a replica of some of the scan's tablets (a fragment reads at the
//!   statement's snapshot, which any replica serves), and one only for a scan that
//!   must return its first rows in key order;
//! - what each task reads ([`scale_up_leaf`]): a share of the tablets, padded so
//!   every share declares the same number of partitions. A scan that declares
//!   Cairn's hash partitioning (partition *i* is bucket *i*) gives task *t* buckets
//!   *t*, *t + T*, *t + 2T*, …, so two scans hashed alike still pair bucket with
//!   bucket inside each task; other scans give each tablet to one of its replicas'
//!   servers, spreading them, and each task whole servers' tablets where they can,
//!   balanced by tablet count. Each share names the server it reads from: the one
//!   holding replicas of most of its tablets;
//! - where each task runs ([`route_tasks`]): on the worker of that server, whose
//!   scans then read the replicas in its own process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::Partitioning;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{
    BroadcastExec, DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedGetterExt,
    DistributedLeafExec, NetworkBoundaryExt, RouteTasksEvent, RouteTasksEventResponse,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};

use cairn_client::TabletLocationInfo;

use super::fanout::{Topology, is_union};
use super::worker::{worker_addr, worker_addrs};
use crate::scan::CairnScanExec;

/// The task count a Cairn scan's stage asks for (see the module docs); and, on a
/// cluster whose fan-out is bounded ([`Topology`]), at most one task per hub for a
/// stage that reads a shuffle or a broadcast, since those stages run on the hubs.
pub fn desired_task_count(
    ev: DesiredTaskCountEvent,
) -> Option<Result<DesiredTaskCountEventResponse>> {
    let Some(scan) = ev.plan.downcast_ref::<CairnScanExec>() else {
        let reads_exchange = ev.plan.children().iter().any(|c| {
            c.is::<BroadcastExec>()
                || c.downcast_ref::<RepartitionExec>()
                    .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)))
        });
        if !reads_exchange {
            return None;
        }
        let topology = Topology::of_session(ev.session_config)?;
        return Some(Ok(DesiredTaskCountEventResponse::maximum(
            topology.groups(),
        )));
    };
    let tablets = &scan.spec().tablets;
    if scan.key_ordered() || tablets.len() <= 1 {
        return Some(Ok(DesiredTaskCountEventResponse::maximum(1)));
    }
    let workers = workers_of(ev.session_config);
    let mut servers: Vec<&str> = tablets
        .iter()
        .flat_map(|t| readable_at(t, &workers))
        .collect();
    servers.sort_unstable();
    servers.dedup();
    Some(Ok(DesiredTaskCountEventResponse::desired(
        servers.len().clamp(1, tablets.len()),
    )))
}

/// The addresses (`host:port`) of the workers a session may send tasks to (those
/// its worker resolver lists, without any found unreachable), if it knows them.
pub(crate) type Workers = Option<HashSet<String>>;

/// The [`Workers`] of the session configured by `config`.
fn workers_of(config: &SessionConfig) -> Workers {
    Some(worker_addrs(config)?.into_iter().collect())
}

/// The servers a tablet can be read at a snapshot on: its live replicas (all of
/// them if none is known to be live), those with a worker in `workers` if any has.
fn readable_at<'a>(t: &'a TabletLocationInfo, workers: &Workers) -> Vec<&'a str> {
    let live: Vec<&str> = t
        .replicas
        .iter()
        .filter(|r| r.live)
        .map(|r| r.addr.as_str())
        .collect();
    let known = if live.is_empty() {
        t.replicas.iter().map(|r| r.addr.as_str()).collect()
    } else {
        live
    };
    let Some(workers) = workers else {
        return known;
    };
    let with_worker: Vec<&str> = known
        .iter()
        .copied()
        .filter(|a| workers.contains(*a))
        .collect();
    if with_worker.is_empty() {
        known
    } else {
        with_worker
    }
}

/// One task's share of a scan: positions in the scan's tablet list, and the server
/// the task runs on and reads them from (`None`: no server holds them all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Share {
    pub tablets: Vec<usize>,
    pub server: Option<String>,
}

/// How a scan is split among `tasks` tasks, and the partitions every share
/// declares; shares are read where `workers` run when they can be.
pub(crate) fn shares(scan: &CairnScanExec, tasks: usize, workers: &Workers) -> (Vec<Share>, usize) {
    let tablets = &scan.spec().tablets;
    let tasks = tasks.max(1);
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); tasks];
    // The server each task's first group of tablets was given to.
    let mut preferred: Vec<Option<String>> = vec![None; tasks];
    if scan.hash_identity().is_some() {
        // Bucket i to task i mod T, as partition i div T.
        for i in 0..tablets.len() {
            out[i % tasks].push(i);
        }
    } else {
        // Each tablet to one of its replicas' servers, the least loaded so far
        // (the leader on a tie), every server that can read one getting at least
        // one; each server's tablets together, the largest groups first, to the
        // task with the fewest tablets so far (which then runs on that server);
        // then tasks left empty take tablets from the fullest.
        let mut load: HashMap<&str, usize> = HashMap::new();
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, t) in tablets.iter().enumerate() {
            let leader = t.leader_addr();
            let at = readable_at(t, workers)
                .into_iter()
                .min_by_key(|a| (load.get(a).copied().unwrap_or(0), Some(*a) != leader, *a))
                .unwrap_or("");
            *load.entry(at).or_default() += 1;
            groups.entry(at).or_default().push(i);
        }
        // A server that can read some tablet but was given none takes one from a
        // server given several, so that a stage of one task per server uses them all.
        let mut readers: Vec<&str> = tablets
            .iter()
            .flat_map(|t| readable_at(t, workers))
            .collect();
        readers.sort_unstable();
        readers.dedup();
        for r in readers {
            if groups.contains_key(r) {
                continue;
            }
            let moved = groups.iter().find_map(|(&from, g)| {
                let i = g
                    .iter()
                    .copied()
                    .find(|&i| readable_at(&tablets[i], workers).contains(&r))?;
                (g.len() > 1).then_some((from, i))
            });
            if let Some((from, i)) = moved {
                if let Some(g) = groups.get_mut(from) {
                    g.retain(|&j| j != i);
                }
                groups.entry(r).or_default().push(i);
            }
        }
        let mut groups: Vec<(&str, Vec<usize>)> = groups.into_iter().collect();
        groups.sort_by_key(|(_, g)| std::cmp::Reverse(g.len()));
        for (at, g) in groups {
            if let Some(least) = (0..tasks).min_by_key(|&t| out[t].len()) {
                if out[least].is_empty() {
                    preferred[least] = Some(at.to_string());
                }
                out[least].extend(g);
            }
        }
        while let Some(empty) = out.iter().position(Vec::is_empty) {
            let Some(fullest) = (0..tasks).max_by_key(|&t| out[t].len()) else {
                break;
            };
            if out[fullest].len() <= 1 {
                break;
            }
            if let Some(moved) = out[fullest].pop() {
                out[empty].push(moved);
            }
        }
    }
    let pad = out.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut taken: Vec<String> = vec![];
    let shares = out
        .into_iter()
        .zip(preferred)
        .map(|(mut share, preferred)| {
            share.sort_unstable();
            let server = home(tablets, &share, &taken, workers, preferred.as_deref());
            taken.extend(server.clone());
            Share {
                tablets: share,
                server,
            }
        })
        .collect();
    (shares, pad)
}

/// The server holding a replica of the most of `share`'s tablets (then one no other
/// share runs on, then `preferred`, the server the share's tablets were given to,
/// then the one leading the most of them, then the lowest address), among those
/// with a worker in `workers` when any has.
fn home(
    tablets: &[TabletLocationInfo],
    share: &[usize],
    taken: &[String],
    workers: &Workers,
    preferred: Option<&str>,
) -> Option<String> {
    let mut score: HashMap<&str, (usize, usize)> = HashMap::new();
    for &i in share {
        let leader = tablets[i].leader_addr();
        for a in readable_at(&tablets[i], workers) {
            let e = score.entry(a).or_default();
            e.0 += 1;
            e.1 += (Some(a) == leader) as usize;
        }
    }
    score
        .into_iter()
        .max_by_key(|(a, (n, leads))| {
            (
                *n,
                !taken.iter().any(|t| t == a),
                Some(*a) == preferred,
                *leads,
                std::cmp::Reverse(*a),
            )
        })
        .map(|(a, _)| a.to_string())
}

/// Splits a Cairn scan into one share per task (see the module docs).
pub fn scale_up_leaf(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = ev.plan.downcast_ref::<CairnScanExec>()?;
    if ev.task_count <= 1 || scan.key_ordered() {
        return None;
    }
    let (shares, pad) = shares(scan, ev.task_count, &workers_of(ev.session_config));
    let variants = shares.into_iter().map(|share| {
        Arc::new(scan.share(&share.tablets, pad, share.server)) as Arc<dyn ExecutionPlan>
    });
    Some(
        DistributedLeafExec::try_new(Arc::clone(ev.plan), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

/// Where each task of a stage that reads Cairn tablets would rather run: the
/// servers its scans' shares read from (see [`shares`]), most tablets first (then
/// by address), per task; `None` for the stage as a whole when it reads no Cairn
/// tablets itself (its leaves are in the stages below).
pub(crate) fn task_homes(plan: &Arc<dyn ExecutionPlan>, tasks: usize) -> Option<Vec<Vec<String>>> {
    // Per task, how many of its scans' tablets each server was chosen for.
    let mut votes: Vec<HashMap<String, usize>> = vec![HashMap::new(); tasks];
    let mut found = false;
    let _ = plan.apply(|node| {
        if node.is_network_boundary() {
            return Ok(TreeNodeRecursion::Jump);
        }
        if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>() {
            for (t, variant) in leaf.variants().iter().enumerate().take(tasks) {
                if let Some(scan) = variant.downcast_ref::<CairnScanExec>() {
                    found = true;
                    if let Some(at) = &scan.spec().read_from {
                        *votes[t].entry(at.clone()).or_default() += scan.spec().tablets.len() + 1;
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found.then(|| {
        votes
            .into_iter()
            .map(|v| {
                let mut ranked: Vec<(String, usize)> = v.into_iter().collect();
                ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                ranked.into_iter().map(|(addr, _)| addr).collect()
            })
            .collect()
    })
}

/// Sends each task of a stage that reads Cairn tablets to the worker of the server
/// its share reads from ([`task_homes`]); on a cluster whose fan-out is bounded
/// ([`Topology`]), every other stage runs on the hubs, task *i* on hub *i* mod the
/// hub count. Every other stage goes round the workers in address order, task *i*
/// of stage *s* to worker *s + i* mod the worker count ([`stage_offset`]): the
/// choice depends only on the plan and the worker list, so EXPLAIN shows where each
/// task will run ([`task_servers`]), and a stage with fewer tasks than workers
/// does not put all its tasks on the first worker of every query.
pub fn route_tasks(ev: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
    let config = ev.task_ctx.session_config();
    let topology = Topology::of_session(config);
    // Under a bound, stages that read other stages, and unions the relays do not
    // split, run on the hubs.
    let on_hubs = topology.is_some()
        && ev
            .plan
            .exists(|n| Ok(n.is_network_boundary() || is_union(n)))
            .unwrap_or(false);
    let homes = if on_hubs {
        None
    } else {
        task_homes(ev.plan, ev.task_count)
    };
    let urls = match config.get_distributed_worker_resolver() {
        Ok(r) => match r.get_urls() {
            Ok(urls) if !urls.is_empty() => urls,
            Ok(_) => return None,
            Err(e) => return Some(Err(e)),
        },
        Err(e) => return Some(Err(e)),
    };
    let by_addr: HashMap<String, &url::Url> = urls
        .iter()
        .filter_map(|u| Some((worker_addr(u)?, u)))
        .collect();
    let chosen: Vec<url::Url> = match (homes, topology) {
        (Some(homes), _) => homes
            .iter()
            .enumerate()
            .map(|(t, ranked)| {
                ranked
                    .iter()
                    .find_map(|a| by_addr.get(a.as_str()).copied())
                    .unwrap_or(&urls[t % urls.len()])
                    .clone()
            })
            .collect(),
        (None, Some(topology)) => (0..ev.task_count)
            .map(|t| {
                let hub = topology.hub_of_task(t);
                by_addr
                    .get(hub)
                    .copied()
                    .unwrap_or(&urls[t % urls.len()])
                    .clone()
            })
            .collect(),
        (None, None) => {
            let offset = stage_offset(ev.plan);
            (0..ev.task_count)
                .map(|t| urls[(offset + t) % urls.len()].clone())
                .collect()
        }
    };
    Some(Ok(RouteTasksEventResponse::new(chosen)))
}

/// Where round-robin routing starts for the stage whose plan is `stage_plan`: the
/// smallest number among the stages it reads, which is the same when EXPLAIN plans
/// the query and when it runs, and differs between the stages of one query.
fn stage_offset(stage_plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut lowest: Option<usize> = None;
    let _ = stage_plan.apply(|n| {
        if let Some(boundary) = n.as_network_boundary() {
            let num = boundary.input_stage().num();
            lowest = Some(lowest.map_or(num, |l| l.min(num)));
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    lowest.unwrap_or(0)
}

/// The servers (`host:port`) each stage of the distributed plan `plan` sends its
/// tasks to, by stage number, in task order: what [`route_tasks`] answers when the
/// query runs with `task_ctx`'s session and the same workers. Stages it cannot
/// route (no workers known) are left out.
pub(crate) fn task_servers(
    plan: &Arc<dyn ExecutionPlan>,
    task_ctx: &Arc<TaskContext>,
) -> BTreeMap<usize, Vec<String>> {
    let mut servers = BTreeMap::new();
    let _ = plan.apply(|n| {
        if let Some(boundary) = n.as_network_boundary()
            && let Some(stage_plan) = boundary.input_stage().local_plan()
        {
            let stage = boundary.input_stage();
            let routed = route_tasks(RouteTasksEvent {
                task_ctx: Arc::clone(task_ctx),
                plan: stage_plan,
                task_count: stage.task_count(),
            });
            if let Some(Ok(routed)) = routed {
                let addrs = routed
                    .urls
                    .iter()
                    .map(|u| worker_addr(u).unwrap_or_else(|| u.to_string()))
                    .collect();
                servers.insert(stage.num(), addrs);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    servers
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::options::{InsertMode, StatementContext};
    use crate::partitioning::HashIdentity;
    use crate::scan::ScanSpec;
    use cairn_client::{Client, ReplicaInfo, Table, TabletLocationInfo};
    use cairn_common::{
        ColumnPredicate, ColumnSpec, DataType, HashLevel, Partition, PartitionSchema, PredicateOp,
        Schema, Value,
    };

    /// A scan of table `t (k BIGINT PRIMARY KEY, v TEXT)` hashed on k into one bucket
    /// per entry of `leaders`, bucket i led by `leaders[i]`; declaring Cairn's hash if
    /// `hashed`.
    pub(crate) async fn scan_of(leaders: &[&str], hashed: bool) -> CairnScanExec {
        let replicas: Vec<Vec<&str>> = leaders.iter().map(|l| vec![*l]).collect();
        scan_with(&replicas, hashed).await
    }

    /// [`scan_of`] with tablet i's replicas on `replicas[i]`, the first leading.
    pub(crate) async fn scan_with(replicas: &[Vec<&str>], hashed: bool) -> CairnScanExec {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String).nullable(),
            ],
            &["k"],
        )
        .unwrap();
        let buckets = replicas.len() as u32;
        let table = Table {
            id: "t-id".into(),
            name: "t".into(),
            schema: Arc::new(schema),
            partition_schema: PartitionSchema {
                hash_levels: vec![HashLevel {
                    columns: vec!["k".into()],
                    num_buckets: buckets,
                    seed: 7,
                }],
                range_columns: vec![],
            },
            replicas: 1,
            subspaces: vec![],
            colocation: None,
        };
        let tablets: Vec<TabletLocationInfo> = replicas
            .iter()
            .enumerate()
            .map(|(i, addrs)| TabletLocationInfo {
                tablet_id: format!("tablet-{i}"),
                partition: Partition {
                    hash_buckets: vec![i as u32],
                    range_lower: vec![],
                    range_upper: vec![],
                },
                replicas: addrs
                    .iter()
                    .enumerate()
                    .map(|(r, addr)| ReplicaInfo {
                        node_id: r as u64,
                        addr: addr.to_string(),
                        leader: r == 0,
                        voter: true,
                        live: true,
                    })
                    .collect(),
            })
            .collect();
        let arrow = table.schema.project_arrow(&[0, 1]);
        let client = Client::connect(&["127.0.0.1:1".to_string()]).await.unwrap();
        let statement = StatementContext::new(None, InsertMode::Insert);
        *statement.chosen_snapshot.lock().await = Some(12345);
        CairnScanExec::new(ScanSpec {
            client,
            total_tablets: tablets.len(),
            tablet_stats: vec![None; tablets.len()],
            tablets,
            columns: vec!["k".into(), "v".into()],
            predicates: vec![ColumnPredicate {
                column: "k".into(),
                op: PredicateOp::Range {
                    lower: Some((Value::Int64(3), true)),
                    upper: None,
                },
            }],
            limit: None,
            hash: hashed.then(|| {
                (
                    vec![0],
                    HashIdentity {
                        types: vec![DataType::Int64],
                        buckets,
                        seed: 7,
                    },
                )
            }),
            statement,
            schema: arrow,
            table,
            pad_to: 0,
            read_from: None,
        })
    }

    /// A share as a (tablets, server) pair.
    type Pair = (Vec<usize>, Option<String>);

    /// The shares as pairs.
    fn split(scan: &CairnScanExec, tasks: usize) -> (Vec<Pair>, usize) {
        let (shares, pad) = shares(scan, tasks, &None);
        let shares = shares.into_iter().map(|s| (s.tablets, s.server)).collect();
        (shares, pad)
    }

    fn at(tablets: &[usize], server: &str) -> Pair {
        (tablets.to_vec(), Some(server.to_string()))
    }

    #[tokio::test]
    async fn hashed_scans_split_bucket_by_bucket() {
        let scan = scan_of(&["a:1", "b:1", "c:1", "a:1", "b:1"], true).await;
        let (got, pad) = split(&scan, 2);
        assert_eq!(got, vec![at(&[0, 2, 4], "a:1"), at(&[1, 3], "b:1")]);
        assert_eq!(pad, 3);
        // Every share declares the same partitions, Cairn's hash among them.
        let share = scan.share(&[1, 3], pad, None);
        assert_eq!(share.properties().partitioning.partition_count(), 3);
        assert!(share.hash_identity().is_some());
    }

    #[tokio::test]
    async fn other_scans_split_by_server() {
        let scan = scan_of(&["b:1", "a:1", "b:1", "a:1", "c:1", "c:1"], false).await;
        let (got, pad) = split(&scan, 3);
        assert_eq!(
            got,
            vec![at(&[1, 3], "a:1"), at(&[0, 2], "b:1"), at(&[4, 5], "c:1")]
        );
        assert_eq!(pad, 2);
        // More tasks than tablets: the extra shares are empty, padded alike.
        let (got, pad) = split(&scan_of(&["a:1", "b:1"], false).await, 3);
        assert_eq!(got, vec![at(&[0], "a:1"), at(&[1], "b:1"), (vec![], None)]);
        assert_eq!(pad, 1);
        // Uneven servers: the big group alone, the small ones shared out.
        let scan = scan_of(&["c:1", "a:1", "c:1", "b:1"], false).await;
        let (got, pad) = split(&scan, 3);
        assert_eq!(
            got,
            vec![at(&[0, 2], "c:1"), at(&[1], "a:1"), at(&[3], "b:1")]
        );
        assert_eq!(pad, 2);
        // One server, two tasks: its tablets are split.
        let scan = scan_of(&["a:1", "a:1", "a:1", "a:1"], false).await;
        let (got, _) = split(&scan, 2);
        assert_eq!(got, vec![at(&[0, 1, 2], "a:1"), at(&[3], "a:1")]);
    }

    #[tokio::test]
    async fn replicated_tablets_are_read_on_every_server_holding_them() {
        // One server leads every tablet; all three hold replicas.
        let replicas = vec![vec!["a:1", "b:1", "c:1"]; 6];
        let scan = scan_with(&replicas, false).await;
        let (got, pad) = split(&scan, 3);
        assert_eq!(
            got,
            vec![at(&[0, 3], "a:1"), at(&[1, 4], "b:1"), at(&[2, 5], "c:1")]
        );
        assert_eq!(pad, 2);
        // Hashed alike: buckets by task, each task at the server holding them.
        let scan = scan_with(&replicas, true).await;
        let (got, _) = split(&scan, 3);
        let servers: Vec<_> = got.iter().map(|(_, s)| s.clone().unwrap()).collect();
        assert_eq!(servers, vec!["a:1", "b:1", "c:1"]);
    }

    #[tokio::test]
    async fn shares_are_read_where_workers_run() {
        // Three servers hold every tablet, but b:1's worker is gone (found
        // unreachable, or no longer listed by the master).
        let replicas = vec![vec!["a:1", "b:1", "c:1"]; 6];
        let scan = scan_with(&replicas, false).await;
        let workers: Workers = Some(["a:1".to_string(), "c:1".to_string()].into());
        let (got, _) = shares(&scan, 2, &workers);
        let got: Vec<Pair> = got.into_iter().map(|s| (s.tablets, s.server)).collect();
        assert_eq!(got, vec![at(&[0, 2, 4], "a:1"), at(&[1, 3, 5], "c:1")]);
        // No replica with a worker: the replicas as known.
        let none: Workers = Some(["z:1".to_string()].into());
        let (got, _) = shares(&scan, 3, &none);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|s| s.server.is_some()));
    }

    #[tokio::test]
    async fn a_stage_wants_a_task_per_server_holding_replicas() {
        let scan: Arc<dyn ExecutionPlan> =
            Arc::new(scan_of(&["b:1", "a:1", "b:1", "a:1"], false).await);
        let config = datafusion::prelude::SessionConfig::new();
        let ask = |plan: &Arc<dyn ExecutionPlan>| {
            desired_task_count(DesiredTaskCountEvent {
                plan,
                session_config: &config,
            })
            .unwrap()
            .unwrap()
            .task_count
            .as_usize()
        };
        assert_eq!(ask(&scan), 2);
        let one: Arc<dyn ExecutionPlan> = Arc::new(scan_of(&["a:1"], false).await);
        assert_eq!(ask(&one), 1);
        // Any replica serves a snapshot: three servers holding replicas, three tasks.
        let replicated: Arc<dyn ExecutionPlan> =
            Arc::new(scan_with(&vec![vec!["a:1", "b:1", "c:1"]; 4], false).await);
        assert_eq!(ask(&replicated), 3);
    }
}
