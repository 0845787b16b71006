//! Pushing, rolling back and keeping in step the versions of read-only stores.
//!
//! Voldemort swaps a new version in only once every node has fetched its files
//! (the Voldemort read-only paper, §4.2.2 and §4.3); Cairn's leader master runs that
//! protocol:
//!
//! 1. **Fetching.** The push is recorded in the catalog ([`PushState`], phase
//!    `Fetching`). Every node of the ring is told to fetch its `node-<n>` folder of the
//!    build; the master polls them (the same idempotent `StoreFetch`, which starts,
//!    resumes or reports) until all have their files verified. A node that fails, or
//!    stays unreachable for longer than [`MasterOptions::store_push_grace`], fails the
//!    push: the others' partial copies are deleted and nothing was ever served.
//! 2. **Swapping.** The phase becomes `Swapping` in the catalog, then every node swaps
//!    (`StoreSwap`, idempotent). If one cannot, the nodes that did swap are swapped
//!    back to the version the catalog says is current, and the push fails.
//! 3. The catalog's `current_version` becomes the new version and the push is cleared.
//!
//! Because every step is recorded before it starts and every RPC is idempotent, a new
//! leader master that finds a push in the catalog ([`reconcile`]) simply drives it
//! again from its phase: a fetch resumes, a swap completes or rolls back.
//!
//! [`reconcile`] also keeps servers in step with the catalog: a server that comes
//! back from a crash serving a version other than `current_version` (it had swapped
//! just before a failed push rolled the others back) is swapped to it.
//!
//! [`MasterOptions::store_push_grace`]: crate::server::MasterOptions::store_push_grace

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_proto as pb;
use cairn_proto::read_only_store_client::ReadOnlyStoreClient;
use cairn_readonly::{
    Donor, NodeProgress, PushPhase, PushReport, PushState, RebalancePlan, RingChange, StoreEntry,
    StoreNode,
};

use crate::catalog::CatalogOp;
use crate::error::{MasterError, Result};
use crate::service::MasterState;
use crate::stores::by_name;

/// How long one store RPC to a tablet server may take.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a rollback waits for a server's status before leaving it out.
const QUICK_RPC_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a push polls the servers.
const POLL: Duration = Duration::from_millis(200);

fn client(st: &MasterState, addr: &str) -> Result<ReadOnlyStoreClient<tonic::transport::Channel>> {
    Ok(ReadOnlyStoreClient::new(st.pool.get(addr).map_err(
        |e| MasterError::Unavailable(format!("tablet server {addr}: {e}")),
    )?))
}

/// The address of node `n` of `store` now: the live server's own address when it
/// has heartbeated (it may have moved), else the one recorded at creation.
fn node_addr(st: &MasterState, store: &StoreEntry, n: usize) -> String {
    let node = &store.nodes[n];
    st.tservers
        .read()
        .get(&node.node_id)
        .map_or_else(|| node.addr.clone(), |t| t.addr.clone())
}

/// `store` with every node's current address (see [`node_addr`]).
pub(crate) fn with_current_addrs(st: &MasterState, mut store: StoreEntry) -> StoreEntry {
    let addrs: Vec<String> = (0..store.nodes.len())
        .map(|n| node_addr(st, &store, n))
        .collect();
    for (node, addr) in store.nodes.iter_mut().zip(addrs) {
        node.addr = addr;
    }
    store
}

/// Records the store's version and push in the catalog.
async fn set_state(
    st: &MasterState,
    id: &str,
    current_version: Option<u64>,
    push: Option<PushState>,
) -> Result<()> {
    set_state_and_ring(st, id, current_version, push, None).await
}

/// [`set_state`], and the store's new ring when a rebalance finishes.
async fn set_state_and_ring(
    st: &MasterState,
    id: &str,
    current_version: Option<u64>,
    push: Option<PushState>,
    ring: Option<RingChange>,
) -> Result<()> {
    st.propose(&CatalogOp::SetStoreState {
        id: id.to_string(),
        current_version,
        push,
        ring,
    })
    .await?
    .map_err(MasterError::InvalidArgument)
}

fn publish(st: &MasterState, id: &str, report: &PushReport) {
    st.store_pushes
        .lock()
        .insert(id.to_string(), report.clone());
}

/// The `PushStore` RPC after authorization: records the push and starts driving it.
/// Returns the version being pushed.
/// REQUIRES: the caller may push stores.
pub(crate) async fn start(st: &Arc<MasterState>, req: pb::PushStoreRequest) -> Result<u64> {
    st.check_leader()?;
    let _ddl = st.ddl.lock().await;
    let name = req.name.trim();
    let store = st
        .catalog
        .read(|c| by_name(&c.stores, name).cloned())
        .ok_or_else(|| MasterError::StoreNotFound(name.to_string()))?;
    if let Some(p) = &store.push {
        return Err(MasterError::FailedPrecondition(format!(
            "store '{name}' is already being pushed (version {}); wait for that push to \
             finish (cairn store describe {name})",
            p.version
        )));
    }
    let rebalance = if req.rebalance {
        Some(plan_ring_change(st, &store)?)
    } else {
        cairn_readonly::source_location(&req.source)
            .map_err(|e| MasterError::InvalidArgument(e.to_string()))?;
        None
    };
    let newest = st
        .store_pushes
        .lock()
        .get(&store.id)
        .map_or(0, |r| r.version)
        .max(store.current_version.unwrap_or(0))
        .max(store.newest_version);
    let version = if req.version == 0 {
        newest + 1
    } else {
        req.version
    };
    if version <= store.newest_version && store.current_version.is_none_or(|c| version > c) {
        return Err(MasterError::InvalidArgument(format!(
            "version {version} of store '{name}' was pushed before (up to version {}), and \
             servers may still hold it; push a higher version",
            store.newest_version
        )));
    }
    if store.current_version.is_some_and(|c| version <= c) {
        return Err(MasterError::InvalidArgument(format!(
            "store '{name}' serves version {}; push a higher version, or use \
             `cairn store rollback` to return to an older one",
            store.current_version.unwrap_or(0)
        )));
    }
    let push = PushState {
        version,
        source: req.source.trim_end_matches('/').to_string(),
        throttle_bytes_per_sec: req.throttle_bytes_per_sec,
        phase: PushPhase::Fetching,
        rebalance,
    };
    set_state(st, &store.id, store.current_version, Some(push)).await?;
    spawn_driver(st, &store.id);
    Ok(version)
}

/// The ring a rebalance of `store` moves to: the live tablet servers not on its
/// ring join it (in id order) and take their share of the partitions
/// ([`cairn_readonly::StoreLayout::rebalanced`]).
fn plan_ring_change(st: &MasterState, store: &StoreEntry) -> Result<RingChange> {
    let name = &store.name;
    if store.current_version.is_none() {
        return Err(MasterError::FailedPrecondition(format!(
            "store '{name}' has never been pushed: build it for the servers now live \
             (cairn store build {name} --cluster) instead of rebalancing"
        )));
    }
    let on_ring: BTreeSet<u64> = store.nodes.iter().map(|n| n.node_id).collect();
    let mut joining: Vec<(u64, String)> = st
        .live_servers()
        .into_iter()
        .filter(|(id, _, _)| !on_ring.contains(id))
        .map(|(id, addr, _)| (id, addr))
        .collect();
    joining.sort();
    if joining.is_empty() {
        return Err(MasterError::FailedPrecondition(format!(
            "every live tablet server is already on store '{name}''s ring ({} servers); \
             start a new tablet server, then rebalance",
            store.nodes.len()
        )));
    }
    let total = store.nodes.len() + joining.len();
    if (store.layout.partitions() as usize) < total {
        return Err(MasterError::FailedPrecondition(format!(
            "store '{name}' has {} ring partitions, fewer than the {total} servers it would \
             span; create it with more partitions",
            store.layout.partitions()
        )));
    }
    let layout = store
        .layout
        .rebalanced(total as u32)
        .map_err(|e| MasterError::FailedPrecondition(format!("store '{name}': {e}")))?;
    let mut nodes = store.nodes.clone();
    nodes.extend(
        joining
            .into_iter()
            .map(|(node_id, addr)| StoreNode { node_id, addr }),
    );
    Ok(RingChange { layout, nodes })
}

/// `store` as it is once `push` is done: with the push's new ring if it is a
/// rebalance. Its nodes are the servers the push drives.
fn target_of(store: &StoreEntry, push: &PushState) -> StoreEntry {
    let mut target = store.clone();
    if let Some(r) = &push.rebalance {
        target.layout = r.layout.clone();
        target.nodes = r.nodes.clone();
    }
    target
}

/// Starts driving store `id`'s recorded push, unless this master already does.
fn spawn_driver(st: &Arc<MasterState>, id: &str) {
    if !st.store_drivers.lock().insert(id.to_string()) {
        return;
    }
    let (st, id) = (st.clone(), id.to_string());
    tokio::spawn(async move {
        if let Err(e) = drive(&st, &id).await {
            tracing::warn!(store = %id, error = %e, "read-only store push stopped");
        }
        st.store_drivers.lock().remove(&id);
    });
}

/// Drives store `id`'s push from its recorded phase to the end (module docs).
async fn drive(st: &Arc<MasterState>, id: &str) -> Result<()> {
    let Some(store) = st.catalog.read(|c| c.stores.get(id).cloned()) else {
        return Ok(());
    };
    let Some(mut push) = store.push.clone() else {
        return Ok(());
    };
    let target = target_of(&store, &push);
    let mut report = PushReport {
        version: push.version,
        state: "fetching".into(),
        nodes: target
            .nodes
            .iter()
            .map(|n| NodeProgress {
                node_id: n.node_id,
                ..Default::default()
            })
            .collect(),
        error: None,
    };
    tracing::info!(store = %store.name, version = push.version, phase = ?push.phase,
        "driving read-only store push");
    if push.phase == PushPhase::Fetching {
        if let Err(e) = fetch_all(st, &store, &target, &push, &mut report).await {
            if st.check_leader().is_err() {
                // The next leader resumes the push; the fetched files stay for it.
                return Err(e);
            }
            for n in 0..target.nodes.len() {
                let _ = abort_fetch(st, &target, n, push.version).await;
            }
            report.state = "failed".into();
            report.error = Some(e.to_string());
            publish(st, id, &report);
            set_state(st, id, store.current_version, None).await?;
            return Err(e);
        }
        push.phase = PushPhase::Swapping;
        set_state(st, id, store.current_version, Some(push.clone())).await?;
    }
    report.state = "swapping".into();
    publish(st, id, &report);
    match swap_all(st, &target, push.version, &mut report).await {
        Ok(()) => {
            report.state = "done".into();
            publish(st, id, &report);
            set_state_and_ring(st, id, Some(push.version), None, push.rebalance.clone()).await?;
            tracing::info!(store = %store.name, version = push.version, "pushed read-only store");
            Ok(())
        }
        Err(e) => {
            report.error = Some(e.to_string());
            report.state = "rolled back".into();
            if let Some(prev) = store.current_version {
                // Servers joining in a failed rebalance have no earlier version; the
                // old ring never sends them lookups, so they are left as they are.
                let swapped: Vec<usize> = (0..store.nodes.len())
                    .filter(|&n| report.nodes[n].swapped)
                    .collect();
                for n in swapped {
                    match swap_node(st, &target, n, prev).await {
                        Ok(_) => report.nodes[n].swapped = false,
                        Err(e2) => {
                            // The server will be swapped back by `reconcile` once it
                            // answers again.
                            report.nodes[n].error = Some(e2.to_string());
                        }
                    }
                }
            }
            publish(st, id, &report);
            set_state(st, id, store.current_version, None).await?;
            Err(e)
        }
    }
}

/// What node `n` of `target` must assemble in a rebalance of `store` (the ring
/// before): for every partition it gains, the servers of the old ring holding it.
fn rebalance_plan(st: &MasterState, store: &StoreEntry, target: &StoreEntry, n: usize) -> String {
    let from_version = store.current_version.unwrap_or(0);
    let donors = RebalancePlan::partitions_to_copy(&store.layout, &target.layout, n as u32)
        .into_iter()
        .map(|p| {
            let list = store
                .layout
                .preference_list(p)
                .iter()
                .enumerate()
                .map(|(replica, &(_, m))| Donor {
                    addr: node_addr(st, store, m as usize),
                    replica: replica as u32,
                })
                .collect();
            (p, list)
        })
        .collect();
    let plan = RebalancePlan {
        store: store.name.clone(),
        schema: store.schema.clone(),
        layout: target.layout.clone(),
        from_version,
        donors,
    };
    serde_json::to_string(&plan).unwrap_or_default()
}

/// Node `n` of `target` starts, resumes or reports its part of `push` (`store` is
/// the store before the push).
async fn fetch_node(
    st: &MasterState,
    store: &StoreEntry,
    target: &StoreEntry,
    n: usize,
    push: &PushState,
) -> Result<pb::StoreStatusResponse> {
    let addr = node_addr(st, target, n);
    let mut c = client(st, &addr)?;
    let (source, rebalance_json) = match push.rebalance {
        Some(_) => (String::new(), rebalance_plan(st, store, target, n)),
        None => (format!("{}/node-{n}", push.source), String::new()),
    };
    let req = pb::StoreFetchRequest {
        store_id: store.id.clone(),
        store_name: store.name.clone(),
        version: push.version,
        source,
        node: n as u32,
        retained: store.retained,
        throttle_bytes_per_sec: push.throttle_bytes_per_sec,
        abort: false,
        rebalance_json,
    };
    let r = tokio::time::timeout(RPC_TIMEOUT, c.store_fetch(req))
        .await
        .map_err(|_| MasterError::Unavailable(format!("tablet server {addr} did not answer")))?
        .map_err(|s| MasterError::Unavailable(format!("tablet server {addr}: {}", s.message())))?;
    Ok(r.into_inner())
}

async fn abort_fetch(st: &MasterState, store: &StoreEntry, n: usize, version: u64) -> Result<()> {
    let addr = node_addr(st, store, n);
    let mut c = client(st, &addr)?;
    let req = pb::StoreFetchRequest {
        store_id: store.id.clone(),
        version,
        abort: true,
        ..Default::default()
    };
    tokio::time::timeout(RPC_TIMEOUT, c.store_fetch(req))
        .await
        .map_err(|_| MasterError::Unavailable(format!("tablet server {addr} did not answer")))?
        .map_err(|s| MasterError::Unavailable(s.message().to_string()))?;
    Ok(())
}

/// Phase 1: until every node has its files, or one fails.
async fn fetch_all(
    st: &MasterState,
    store: &StoreEntry,
    target: &StoreEntry,
    push: &PushState,
    report: &mut PushReport,
) -> Result<()> {
    let grace = st.opts.store_push_grace;
    let mut last_seen = vec![Instant::now(); target.nodes.len()];
    loop {
        st.check_leader()?;
        if st.catalog.read(|c| !c.stores.contains_key(&store.id)) {
            return Err(MasterError::StoreNotFound(store.name.clone()));
        }
        let mut all = true;
        for (n, seen) in last_seen.iter_mut().enumerate() {
            if report.nodes[n].fetched {
                continue;
            }
            match fetch_node(st, store, target, n, push).await {
                Ok(s) => {
                    *seen = Instant::now();
                    let p = &mut report.nodes[n];
                    p.bytes_done = s.bytes_done;
                    p.bytes_total = s.bytes_total;
                    p.fetched = s.fetched;
                    p.error = None;
                    if !s.fetch_error.is_empty() {
                        return Err(MasterError::FailedPrecondition(format!(
                            "tablet server {} (node {n}) could not fetch version {}: {}",
                            target.nodes[n].node_id, push.version, s.fetch_error
                        )));
                    }
                    all &= s.fetched;
                }
                Err(e) => {
                    all = false;
                    report.nodes[n].error = Some(e.to_string());
                    if seen.elapsed() > grace {
                        return Err(MasterError::Unavailable(format!(
                            "tablet server {} (node {n}) was unreachable for more than {} s \
                             while fetching version {}: {e}",
                            target.nodes[n].node_id,
                            grace.as_secs(),
                            push.version
                        )));
                    }
                }
            }
        }
        publish(st, &store.id, report);
        if all {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Tells node `n` to make `version` live; retries while it is unreachable, up to the
/// push grace.
async fn swap_node(
    st: &MasterState,
    store: &StoreEntry,
    n: usize,
    version: u64,
) -> Result<pb::StoreSwapResponse> {
    let deadline = Instant::now() + st.opts.store_push_grace;
    loop {
        let attempt = swap_once(st, store, n, version);
        match attempt.await {
            Err(MasterError::Unavailable(e)) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "swap: tablet server unreachable, retrying");
                tokio::time::sleep(POLL).await;
            }
            other => return other,
        }
    }
}

/// Phase 2: every node swaps, in parallel.
async fn swap_all(
    st: &MasterState,
    store: &StoreEntry,
    version: u64,
    report: &mut PushReport,
) -> Result<()> {
    let results =
        futures::future::join_all((0..store.nodes.len()).map(|n| swap_node(st, store, n, version)))
            .await;
    let mut first_error = None;
    for (n, r) in results.into_iter().enumerate() {
        match r {
            Ok(_) => report.nodes[n].swapped = true,
            Err(e) => {
                report.nodes[n].error = Some(e.to_string());
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The `RollbackStore` RPC after authorization: every reachable node swaps to `to`
/// (or the newest retained version older than the current one), then the catalog
/// records it; nodes that are down follow when they return (`reconcile`). If a
/// reachable node cannot swap, the others are swapped back and nothing changes.
/// REQUIRES: the caller may roll stores back.
pub(crate) async fn rollback(
    st: &MasterState,
    req: pb::RollbackStoreRequest,
) -> Result<pb::RollbackStoreResponse> {
    st.check_leader()?;
    let _ddl = st.ddl.lock().await;
    let name = req.name.trim();
    let store = st
        .catalog
        .read(|c| by_name(&c.stores, name).cloned())
        .ok_or_else(|| MasterError::StoreNotFound(name.to_string()))?;
    if store.push.is_some() {
        return Err(MasterError::FailedPrecondition(format!(
            "store '{name}' is being pushed; roll back once the push has finished"
        )));
    }
    let Some(current) = store.current_version else {
        return Err(MasterError::FailedPrecondition(format!(
            "store '{name}' has never been pushed; there is nothing to roll back"
        )));
    };
    // The versions every reachable node still holds. A node that does not answer is
    // left out: a bad version must be undone even while a server is down, and
    // `reconcile` swaps that server to the catalog's version when it is back.
    let mut common: Option<BTreeSet<u64>> = None;
    let mut reachable = Vec::new();
    let mut unreachable = Vec::new();
    for n in 0..store.nodes.len() {
        let addr = node_addr(st, &store, n);
        let Ok(mut c) = client(st, &addr) else {
            unreachable.push(addr);
            continue;
        };
        let req = pb::StoreStatusRequest {
            store_id: store.id.clone(),
        };
        let Ok(Ok(s)) = tokio::time::timeout(QUICK_RPC_TIMEOUT, c.store_status(req)).await else {
            unreachable.push(addr);
            continue;
        };
        reachable.push(n);
        let held: BTreeSet<u64> = s.into_inner().versions.into_iter().collect();
        common = Some(match common {
            None => held,
            Some(c) => c.intersection(&held).copied().collect(),
        });
    }
    let Some(common) = common else {
        return Err(MasterError::Unavailable(format!(
            "no tablet server of store '{name}' answered ({}); retry when one is up",
            unreachable.join(", ")
        )));
    };
    let target = if req.to > 0 {
        if !common.contains(&req.to) {
            return Err(MasterError::InvalidArgument(format!(
                "version {} of store '{name}' is not retained on every server (retained \
                 everywhere: {common:?})",
                req.to
            )));
        }
        req.to
    } else {
        *common.iter().rev().find(|&&v| v < current).ok_or_else(|| {
            MasterError::FailedPrecondition(format!(
                "no version of store '{name}' older than {current} is retained on every \
                 server (retained everywhere: {common:?})"
            ))
        })?
    };
    let results =
        futures::future::join_all(reachable.iter().map(|&n| swap_once(st, &store, n, target)))
            .await;
    let mut max_micros = 0;
    let mut swapped = Vec::new();
    let mut failed = None;
    for (&n, r) in reachable.iter().zip(results) {
        match r {
            Ok(r) => {
                swapped.push(n);
                max_micros = max_micros.max(r.micros);
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        for n in swapped {
            let _ = swap_once(st, &store, n, current).await;
        }
        return Err(e);
    }
    set_state(st, &store.id, Some(target), None).await?;
    if !unreachable.is_empty() {
        tracing::warn!(store = %name, servers = ?unreachable, version = target,
            "rolled back without unreachable servers; they are swapped when they return");
    }
    Ok(pb::RollbackStoreResponse {
        previous: current,
        current: target,
        max_swap_micros: max_micros,
    })
}

/// One `StoreSwap` of node `n` to `version`, without retries; a server that is
/// down or did not answer is `Unavailable`.
async fn swap_once(
    st: &MasterState,
    store: &StoreEntry,
    n: usize,
    version: u64,
) -> Result<pb::StoreSwapResponse> {
    let addr = node_addr(st, store, n);
    let mut c = client(st, &addr)?;
    let req = pb::StoreSwapRequest {
        store_id: store.id.clone(),
        version,
        term: st.leader_term()?,
        if_live: None,
    };
    match tokio::time::timeout(RPC_TIMEOUT, c.store_swap(req)).await {
        Err(_) => Err(MasterError::Unavailable(format!("{addr} did not answer"))),
        Ok(Err(s)) if s.code() == tonic::Code::Unavailable => {
            Err(MasterError::Unavailable(format!("{addr}: {}", s.message())))
        }
        Ok(Err(s)) => Err(MasterError::FailedPrecondition(format!(
            "tablet server {addr} cannot swap store '{}' to version {version}: {}",
            store.name,
            s.message()
        ))),
        Ok(Ok(r)) => Ok(r.into_inner()),
    }
}

/// Tells every node of a dropped store to delete its files (best effort: a server
/// that is down keeps them until it is told again, which `reconcile` does not do —
/// an operator removes `<data>/stores/<id>` by hand).
pub(crate) async fn drop_files(st: &MasterState, store: &StoreEntry) {
    for n in 0..store.nodes.len() {
        let addr = node_addr(st, store, n);
        let Ok(mut c) = client(st, &addr) else {
            continue;
        };
        let req = pb::StoreDropRequest {
            store_id: store.id.clone(),
        };
        if let Err(e) = tokio::time::timeout(RPC_TIMEOUT, c.store_drop(req)).await {
            tracing::warn!(store = %store.name, %addr, error = %e, "could not delete store files");
        }
    }
}

/// One round of the leader's store upkeep (module docs): resumes recorded pushes
/// this master is not driving, and swaps servers that serve another version than
/// the catalog's back to it.
pub(crate) async fn reconcile(st: &Arc<MasterState>) {
    let stores: Vec<StoreEntry> = st.catalog.read(|c| c.stores.values().cloned().collect());
    for store in stores {
        if store.push.is_some() {
            spawn_driver(st, &store.id);
            continue;
        }
        let Some(current) = store.current_version else {
            continue;
        };
        if st.store_drivers.lock().contains(&store.id) {
            continue;
        }
        for n in 0..store.nodes.len() {
            let addr = node_addr(st, &store, n);
            let Ok(mut c) = client(st, &addr) else {
                continue;
            };
            let req = pb::StoreStatusRequest {
                store_id: store.id.clone(),
            };
            let Ok(Ok(s)) = tokio::time::timeout(RPC_TIMEOUT, c.store_status(req)).await else {
                continue;
            };
            let s = s.into_inner();
            if s.live_version != current && s.versions.contains(&current) {
                // The catalog read above may be old by now: a push that started since
                // swaps servers only after recording itself, so read it again, and
                // swap only from the version the server was seen serving.
                let unchanged = st.catalog.read(|c| {
                    c.stores
                        .get(&store.id)
                        .is_some_and(|e| e.push.is_none() && e.current_version == Some(current))
                });
                if !unchanged || st.store_drivers.lock().contains(&store.id) {
                    break;
                }
                tracing::info!(store = %store.name, %addr, serves = s.live_version, current,
                    "swapping a tablet server back to the store's current version");
                let Ok(term) = st.leader_term() else {
                    return;
                };
                let req = pb::StoreSwapRequest {
                    store_id: store.id.clone(),
                    version: current,
                    term,
                    if_live: Some(s.live_version),
                };
                match tokio::time::timeout(RPC_TIMEOUT, c.store_swap(req)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::warn!(store = %store.name, %addr,
                        error = %e.message(), "swap back refused"),
                    Err(_) => tracing::warn!(store = %store.name, %addr,
                        "swap back: the server did not answer"),
                }
            }
        }
    }
}
