//! The leader master's reconciliation loop (see the crate docs). Every action is
//! idempotent and re-derived from the catalog and the latest tablet reports each
//! round, so a new leader resumes whatever its predecessor left unfinished.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_proto as pb;
use cairn_proto::tablet_server_client::TabletServerClient;
use tokio::sync::watch;

use crate::catalog::{CatalogOp, Placement, TableEntry, TableState, TabletEntry};
use crate::service::MasterState;

const RPC_TIMEOUT: Duration = Duration::from_secs(10);

async fn ts_client(
    st: &MasterState,
    addr: &str,
) -> Option<TabletServerClient<tonic::transport::Channel>> {
    st.pool.get(addr).ok().map(TabletServerClient::new)
}

fn create_request(
    t: &TableEntry,
    e: &TabletEntry,
    peers: &[Placement],
    learner: bool,
) -> pb::CreateTabletRequest {
    pb::CreateTabletRequest {
        tablet_id: e.id.clone(),
        table_id: t.id.clone(),
        table_name: t.name.clone(),
        schema_json: serde_json::to_vec(&t.schema).unwrap_or_default().into(),
        partition_schema_json: serde_json::to_vec(&t.partition_schema)
            .unwrap_or_default()
            .into(),
        partition_json: serde_json::to_vec(&e.partition).unwrap_or_default().into(),
        peers: peers
            .iter()
            .map(|p| pb::Peer {
                node_id: p.node_id,
                addr: p.addr.clone(),
            })
            .collect(),
        learner,
        subspaces_json: if t.subspaces.is_empty() {
            Default::default()
        } else {
            serde_json::to_vec(&t.subspaces).unwrap_or_default().into()
        },
        privileges_of: t.subspace_of.clone().unwrap_or_default(),
    }
}

/// Runs until `stop` turns true.
pub async fn run(st: Arc<MasterState>, mut stop: watch::Receiver<bool>) {
    let mut last_attempt: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        if st.check_leader().is_err() {
            *st.leader_since.lock() = None;
            continue;
        }
        let since = *st.leader_since.lock().get_or_insert_with(Instant::now);
        if let Err(e) = st.bootstrap_security().await {
            tracing::warn!(error = %e, "cannot create the token key or bootstrap user yet");
        }
        if let Err(e) = round(&st, since, &mut last_attempt).await {
            tracing::warn!(error = %e, "reconciliation round failed");
        }
    }
}

fn due(last: &mut HashMap<String, Instant>, key: &str, every: Duration) -> bool {
    match last.get(key) {
        Some(t) if t.elapsed() < every => false,
        _ => {
            last.insert(key.to_string(), Instant::now());
            true
        }
    }
}

async fn round(
    st: &Arc<MasterState>,
    leader_since: Instant,
    last: &mut HashMap<String, Instant>,
) -> crate::Result<()> {
    if due(last, "read-only stores", Duration::from_secs(2)) {
        crate::store_push::reconcile(st).await;
    }
    let catalog = st.catalog.snapshot();
    for t in catalog.tables.values() {
        let tablets: Vec<&TabletEntry> = t
            .tablets
            .iter()
            .filter_map(|id| catalog.tablets.get(id))
            .collect();
        match t.state {
            TableState::Creating => {
                let mut ready = true;
                for e in &tablets {
                    if st.tablet_leader(&e.id).is_some() {
                        continue;
                    }
                    ready = false;
                    if !due(last, &e.id, Duration::from_secs(3)) {
                        continue;
                    }
                    for p in &e.replicas {
                        if let Some(mut c) = ts_client(st, &p.addr).await {
                            let req = create_request(t, e, &e.replicas, false);
                            match tokio::time::timeout(RPC_TIMEOUT, c.create_tablet(req)).await {
                                Ok(Ok(_)) => {}
                                Ok(Err(s)) => {
                                    tracing::warn!(tablet = %e.id, server = %p.addr, error = %s.message(), "create tablet failed")
                                }
                                Err(_) => {
                                    tracing::warn!(tablet = %e.id, server = %p.addr, "create tablet timed out")
                                }
                            }
                        }
                    }
                }
                if ready {
                    st.propose(&CatalogOp::SetTableState {
                        id: t.id.clone(),
                        state: TableState::Running,
                    })
                    .await?
                    .ok();
                    tracing::info!(table = %t.name, "table is running");
                }
            }
            TableState::Altering => {
                // Tablets chain into the subspaces only once their region tables run.
                let regions_ready = t.subspaces.iter().all(|s| {
                    catalog
                        .tables
                        .get(&s.table_id)
                        .is_some_and(|r| r.state == TableState::Running)
                });
                let subspaces_json: Vec<u8> = if t.subspaces_version > 0 {
                    serde_json::to_vec(&t.subspaces).unwrap_or_default()
                } else {
                    vec![]
                };
                let mut ok = regions_ready;
                let mut newest = 0u64;
                for e in &tablets {
                    let Some((_, addr, _)) = st.tablet_leader(&e.id) else {
                        ok = false;
                        continue;
                    };
                    let Some(mut c) = ts_client(st, &addr).await else {
                        ok = false;
                        continue;
                    };
                    let req = pb::AlterSchemaRequest {
                        tablet_id: e.id.clone(),
                        steps_json: serde_json::to_vec(&t.pending_steps)
                            .unwrap_or_default()
                            .into(),
                        target_version: t.schema.version,
                        subspaces_version: if regions_ready {
                            t.subspaces_version
                        } else {
                            0
                        },
                        subspaces_json: subspaces_json.clone().into(),
                    };
                    match tokio::time::timeout(RPC_TIMEOUT, c.alter_schema(req)).await {
                        Ok(Ok(r))
                            if r.get_ref().version >= t.schema.version
                                && r.get_ref().subspaces_version >= t.subspaces_version =>
                        {
                            newest = newest.max(r.get_ref().subspaces_timestamp);
                        }
                        Ok(Ok(_)) => ok = false,
                        Ok(Err(s)) => {
                            ok = false;
                            tracing::warn!(tablet = %e.id, error = %s.message(), "alter tablet failed");
                        }
                        Err(_) => ok = false,
                    }
                }
                if ok && t.subspaces_version > 0 {
                    st.propose(&CatalogOp::SubspacesPushed {
                        id: t.id.clone(),
                        version: t.subspaces_version,
                        timestamp: newest,
                        schema_version: t.schema.version,
                    })
                    .await?
                    .ok();
                    tracing::info!(table = %t.name, version = t.subspaces_version,
                        "every tablet chains into the table's subspaces");
                } else if ok {
                    st.propose(&CatalogOp::SetTableState {
                        id: t.id.clone(),
                        state: TableState::Running,
                    })
                    .await?
                    .ok();
                    tracing::info!(table = %t.name, version = t.schema.version, "schema change applied");
                }
            }
            TableState::Deleting => {
                let mut ok = true;
                for e in &tablets {
                    let mut nodes: HashMap<u64, String> = e
                        .replicas
                        .iter()
                        .map(|p| (p.node_id, p.addr.clone()))
                        .collect();
                    for (id, ts) in st.tservers.read().iter() {
                        if ts.reports.contains_key(&e.id) {
                            nodes.insert(*id, ts.addr.clone());
                        }
                    }
                    for (id, addr) in nodes {
                        if !st.is_live(id) {
                            continue;
                        }
                        if let Some(mut c) = ts_client(st, &addr).await {
                            let req = pb::DeleteTabletRequest {
                                tablet_id: e.id.clone(),
                            };
                            if !matches!(
                                tokio::time::timeout(RPC_TIMEOUT, c.delete_tablet(req)).await,
                                Ok(Ok(_))
                            ) {
                                ok = false;
                            }
                        }
                    }
                }
                if ok {
                    st.propose(&CatalogOp::RemoveTable { id: t.id.clone() })
                        .await?
                        .ok();
                    tracing::info!(table = %t.name, "table dropped");
                }
            }
            TableState::Running => {
                for e in &tablets {
                    maintain_tablet(st, t, e, leader_since).await?;
                }
            }
        }
    }
    delete_orphans(st, &catalog, last).await;
    Ok(())
}

/// Keeps the catalog's record of a tablet's configuration current, and replaces
/// voters on servers dead for longer than the timeout, and voters reported FAILED.
async fn maintain_tablet(
    st: &Arc<MasterState>,
    t: &TableEntry,
    e: &TabletEntry,
    leader_since: Instant,
) -> crate::Result<()> {
    let Some((_, leader_addr, report)) = st.tablet_leader(&e.id) else {
        return Ok(());
    };
    let voters: Vec<Placement> = report
        .voters
        .iter()
        .map(|p| Placement {
            node_id: p.node_id,
            addr: p.addr.clone(),
        })
        .collect();
    if !voters.is_empty() && voters != e.replicas {
        st.propose(&CatalogOp::SetTabletReplicas {
            id: e.id.clone(),
            replicas: voters.clone(),
        })
        .await?
        .ok();
    }
    let dead_after = st.opts.tserver_dead_after;
    let dead: Vec<u64> = {
        let ts = st.tservers.read();
        voters
            .iter()
            .filter(|v| match ts.get(&v.node_id) {
                // A replica reported FAILED (its disk failed under it) is replaced at
                // once, like one on a dead server.
                Some(i) => {
                    i.last_heartbeat.elapsed() > dead_after
                        || i.reports.get(&e.id).is_some_and(|r| r.state == "FAILED")
                }
                None => leader_since.elapsed() > dead_after,
            })
            .map(|v| v.node_id)
            .collect()
    };
    if dead.is_empty() || st.in_progress.lock().contains_key(&e.id) {
        return Ok(());
    }
    let members: HashSet<u64> = report
        .voters
        .iter()
        .chain(report.learners.iter())
        .map(|p| p.node_id)
        .collect();
    let live_voters = voters.len() - dead.len();
    let target = if live_voters >= t.replicas as usize {
        None
    } else {
        // A server holding the same bucket of another table of the colocation group
        // first (keeps the group together), else the least loaded.
        let siblings = {
            let pending = st.in_progress.lock();
            st.catalog
                .read(|c| crate::placement::sibling_servers(c, t, &e.id, &pending))
        };
        let mut free: Vec<_> = st
            .live_servers()
            .into_iter()
            .filter(|(id, _, _)| !members.contains(id))
            .collect();
        free.sort_by_key(|(id, _, _)| !siblings.contains(id));
        free.into_iter().next()
    };
    if target.is_none() && live_voters < t.replicas as usize {
        tracing::warn!(tablet = %e.id, "a replica is on a dead server but no other live server can take it");
        return Ok(());
    }
    st.in_progress
        .lock()
        .insert(e.id.clone(), target.as_ref().map(|(id, _, _)| *id));
    let st2 = st.clone();
    let t = t.clone();
    let e = e.clone();
    let dead_node = dead[0];
    tokio::spawn(async move {
        let r = rereplicate(&st2, &t, &e, &leader_addr, target, dead_node).await;
        if let Err(msg) = r {
            tracing::warn!(tablet = %e.id, error = %msg, "re-replication failed; will retry");
        }
        st2.in_progress.lock().remove(&e.id);
    });
    Ok(())
}

async fn rereplicate(
    st: &MasterState,
    t: &TableEntry,
    e: &TabletEntry,
    leader_addr: &str,
    target: Option<(u64, String, usize)>,
    dead: u64,
) -> Result<(), String> {
    let mut leader = ts_client(st, leader_addr)
        .await
        .ok_or("no channel to the leader")?;
    if let Some((id, addr, _)) = target {
        tracing::info!(tablet = %e.id, new = %addr, dead, "re-replicating: adding a replica");
        let mut c = ts_client(st, &addr)
            .await
            .ok_or("no channel to the new server")?;
        c.create_tablet(create_request(t, e, &[], true))
            .await
            .map_err(|s| s.message().to_string())?;
        let req = pb::ChangeConfigRequest {
            tablet_id: e.id.clone(),
            add_voter: Some(pb::Peer {
                node_id: id,
                addr: addr.clone(),
            }),
            remove_node: 0,
        };
        tokio::time::timeout(Duration::from_secs(300), leader.change_config(req))
            .await
            .map_err(|_| "adding the replica timed out".to_string())?
            .map_err(|s| s.message().to_string())?;
    }
    tracing::info!(tablet = %e.id, dead, "re-replicating: removing the dead replica");
    let req = pb::ChangeConfigRequest {
        tablet_id: e.id.clone(),
        add_voter: None,
        remove_node: dead,
    };
    tokio::time::timeout(RPC_TIMEOUT, leader.change_config(req))
        .await
        .map_err(|_| "removing the dead replica timed out".to_string())?
        .map_err(|s| s.message().to_string())?;
    Ok(())
}

/// Deletes replicas no table owns any more, and replicas evicted from their tablet's
/// configuration.
async fn delete_orphans(
    st: &Arc<MasterState>,
    catalog: &crate::catalog::Catalog,
    last: &mut HashMap<String, Instant>,
) {
    let mut victims = Vec::new();
    {
        let ts = st.tservers.read();
        for (node, info) in ts.iter() {
            for (tablet_id, r) in &info.reports {
                let orphan = match catalog.tablets.get(tablet_id) {
                    None => true,
                    Some(_) if st.in_progress.lock().contains_key(tablet_id) => false,
                    Some(_) => {
                        // Evicted: the leader's configuration no longer names this server.
                        let mut evicted = false;
                        for (lid, li) in ts.iter() {
                            if let Some(lr) = li.reports.get(tablet_id)
                                && lr.role == pb::RaftRole::Leader as i32
                                && lr.term >= r.term
                                && *lid != *node
                                && !lr
                                    .voters
                                    .iter()
                                    .chain(lr.learners.iter())
                                    .any(|p| p.node_id == *node)
                            {
                                evicted = true;
                            }
                        }
                        evicted
                    }
                };
                if orphan {
                    victims.push((info.addr.clone(), tablet_id.clone(), *node));
                }
            }
        }
    }
    for (addr, tablet, node) in victims {
        if !due(
            last,
            &format!("orphan-{node}-{tablet}"),
            Duration::from_secs(10),
        ) {
            continue;
        }
        tracing::info!(%tablet, server = %addr, "deleting an orphaned replica");
        if let Some(mut c) = ts_client(st, &addr).await {
            let _ = tokio::time::timeout(
                RPC_TIMEOUT,
                c.delete_tablet(pb::DeleteTabletRequest {
                    tablet_id: tablet.clone(),
                }),
            )
            .await;
            if let Some(i) = st.tservers.write().get_mut(&node) {
                i.reports.remove(&tablet);
            }
        }
    }
}
