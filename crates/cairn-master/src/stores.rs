//! Read-only stores in the catalog: what the master knows of each store built
//! offline and served by the tablet servers (Voldemort's read-only stores, "Project
//! Voldemort" §3.1 and §4).
//!
//! A store's entry holds its key and value columns, its *ring* — a fixed number of
//! equal partitions, each assigned to one node, the replicas of a key going to the
//! next partitions clockwise on distinct nodes (§3.1.2) — and which tablet server
//! each node of the ring is. The ring is laid out once, when the store is created,
//! over the tablet servers live then: partition `p` on node `p mod nodes`, nodes in
//! order of server id so that every master computes the same entry. Builds read it
//! (`cairn store build --store NAME`) so that the chunk files they write match the
//! servers that will hold them.

use std::collections::BTreeMap;

use cairn_proto as pb;
use cairn_proto::auth::Principal;
pub use cairn_readonly::{StoreEntry, StoreNode};
use cairn_readonly::{StoreLayout, StoreSchema};

use crate::catalog::CatalogOp;
use crate::error::{MasterError, Result};
use crate::service::MasterState;

/// Ring partitions per live tablet server when a create does not say.
pub const DEFAULT_PARTITIONS_PER_SERVER: u32 = 4;
/// Versions a store keeps on its servers for rollback when a create does not say.
pub const DEFAULT_RETAINED: u32 = 2;
/// The most ring partitions a store may have.
pub const MAX_PARTITIONS: u32 = 65_536;

/// What a create asks for; zeros take the defaults.
#[derive(Clone, Debug)]
pub struct StoreRequest {
    /// Name.
    pub name: String,
    /// Key and value columns.
    pub schema: StoreSchema,
    /// Ring partitions (0: [`DEFAULT_PARTITIONS_PER_SERVER`] per server).
    pub partitions: u32,
    /// Copies of every key (0: 1).
    pub replication: u32,
    /// Chunk files per partition and replica (0: 1).
    pub chunks: u32,
    /// Versions kept (0: [`DEFAULT_RETAINED`]).
    pub retained: u32,
}

/// Lays out a new store over the tablet servers `live` (id, address), checking the
/// request. The servers are taken in id order, so the entry does not depend on
/// which of them happens to be least loaded.
pub fn plan_store(
    id: String,
    req: StoreRequest,
    live: &[(u64, String)],
    owner: String,
) -> Result<StoreEntry> {
    let name = req.name.trim().to_string();
    if name.is_empty() || name.len() > 256 {
        return Err(MasterError::InvalidArgument(
            "a store name must have 1 to 256 characters".into(),
        ));
    }
    if req.schema.key.is_empty() {
        return Err(MasterError::InvalidArgument(format!(
            "store '{name}' needs at least one key column"
        )));
    }
    let mut servers: Vec<&(u64, String)> = live.iter().collect();
    servers.sort_by_key(|(id, _)| *id);
    servers.dedup_by_key(|(id, _)| *id);
    let replication = req.replication.max(1);
    if servers.len() < replication as usize {
        return Err(MasterError::Unavailable(format!(
            "store '{name}' needs {replication} copies of every key on distinct tablet \
             servers, but only {} are live; start more tablet servers or lower the \
             replication",
            servers.len()
        )));
    }
    let nodes = servers.len() as u32;
    let partitions = if req.partitions == 0 {
        nodes * DEFAULT_PARTITIONS_PER_SERVER
    } else {
        req.partitions
    };
    if partitions < nodes || partitions > MAX_PARTITIONS {
        return Err(MasterError::InvalidArgument(format!(
            "store '{name}' needs between {nodes} (one per live tablet server) and \
             {MAX_PARTITIONS} ring partitions, not {partitions}"
        )));
    }
    let chunks = req.chunks.max(1);
    let layout = StoreLayout::round_robin(nodes, partitions, replication, chunks)
        .map_err(|e| MasterError::InvalidArgument(format!("store '{name}': {e}")))?;
    Ok(StoreEntry {
        id,
        name,
        schema: req.schema,
        layout,
        nodes: servers
            .into_iter()
            .map(|(node_id, addr)| StoreNode {
                node_id: *node_id,
                addr: addr.clone(),
            })
            .collect(),
        retained: if req.retained == 0 {
            DEFAULT_RETAINED
        } else {
            req.retained
        },
        current_version: None,
        owner,
        push: None,
        newest_version: 0,
    })
}

/// The store named `name` in `stores`.
pub fn by_name<'a>(stores: &'a BTreeMap<String, StoreEntry>, name: &str) -> Option<&'a StoreEntry> {
    stores.values().find(|s| s.name == name)
}

/// Applies the creation of `store`; `Err` changes nothing.
pub fn apply_create(
    stores: &mut BTreeMap<String, StoreEntry>,
    store: StoreEntry,
) -> std::result::Result<(), String> {
    if by_name(stores, &store.name).is_some() {
        return Err(format!("store '{}' already exists", store.name));
    }
    if stores.contains_key(&store.id) {
        return Err(format!("store id {} is taken", store.id));
    }
    stores.insert(store.id.clone(), store);
    Ok(())
}

/// Applies the removal of store `id`; `Err` changes nothing.
pub fn apply_remove(
    stores: &mut BTreeMap<String, StoreEntry>,
    id: &str,
) -> std::result::Result<(), String> {
    stores
        .remove(id)
        .map(|_| ())
        .ok_or_else(|| format!("no store with id {id}"))
}

/// The `CreateStore` RPC after authorization: lays the store out over the live
/// tablet servers and adds it to the catalog. Returns its id.
/// REQUIRES: the caller may create stores.
pub(crate) async fn create(
    st: &MasterState,
    who: &Principal,
    req: pb::CreateStoreRequest,
) -> Result<String> {
    st.check_leader()?;
    let _ddl = st.ddl.lock().await;
    let name = req.name.trim().to_string();
    if let Some(s) = st.catalog.read(|c| by_name(&c.stores, &name).cloned()) {
        if req.if_not_exists {
            return Ok(s.id);
        }
        return Err(MasterError::StoreExists(name));
    }
    let schema: StoreSchema = serde_json::from_slice(&req.schema_json)
        .map_err(|e| MasterError::InvalidArgument(format!("malformed store schema: {e}")))?;
    let live: Vec<(u64, String)> = st
        .live_servers()
        .into_iter()
        .map(|(id, addr, _)| (id, addr))
        .collect();
    let store = plan_store(
        crate::service::new_id(),
        StoreRequest {
            name,
            schema,
            partitions: req.partitions,
            replication: req.replication,
            chunks: req.chunks,
            retained: req.retained,
        },
        &live,
        who.name().to_string(),
    )?;
    let id = store.id.clone();
    st.propose(&CatalogOp::CreateStore { store })
        .await?
        .map_err(MasterError::InvalidArgument)?;
    Ok(id)
}

/// The `DropStore` RPC after authorization: removes the store from the catalog.
/// REQUIRES: the caller may drop stores.
pub(crate) async fn drop(st: &MasterState, req: pb::DropStoreRequest) -> Result<()> {
    st.check_leader()?;
    let _ddl = st.ddl.lock().await;
    let name = req.name.trim();
    let Some(id) = st
        .catalog
        .read(|c| by_name(&c.stores, name).map(|s| s.id.clone()))
    else {
        if req.if_exists {
            return Ok(());
        }
        return Err(MasterError::StoreNotFound(name.to_string()));
    };
    let store = st.catalog.read(|c| c.stores.get(&id).cloned());
    st.propose(&CatalogOp::RemoveStore { id })
        .await?
        .map_err(MasterError::InvalidArgument)?;
    if let Some(store) = store {
        crate::store_push::drop_files(st, &store).await;
    }
    Ok(())
}

/// Every store's entry, as the JSON `ListStores` answers with.
pub(crate) fn list_json(st: &MasterState) -> Result<Vec<u8>> {
    st.check_leader()?;
    let stores: Vec<StoreEntry> = st.catalog.read(|c| c.stores.values().cloned().collect());
    serde_json::to_vec(&stores).map_err(|e| MasterError::Internal(e.to_string()))
}

/// The entry of store `name` (with its servers' current addresses) and the report
/// of its last push this master drove (empty if none), as the JSON `GetStore`
/// answers with.
pub(crate) fn get_json(st: &MasterState, name: &str) -> Result<(Vec<u8>, Vec<u8>)> {
    st.check_leader()?;
    let name = name.trim();
    let store = st
        .catalog
        .read(|c| by_name(&c.stores, name).cloned())
        .ok_or_else(|| MasterError::StoreNotFound(name.to_string()))?;
    let push = st.store_pushes.lock().get(&store.id).cloned();
    let store = crate::store_push::with_current_addrs(st, store);
    let store_json =
        serde_json::to_vec(&store).map_err(|e| MasterError::Internal(e.to_string()))?;
    let push_json = match push {
        Some(p) => serde_json::to_vec(&p).map_err(|e| MasterError::Internal(e.to_string()))?,
        None => Vec::new(),
    };
    Ok((store_json, push_json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::DataType;
    use cairn_readonly::StoreColumn;

    fn schema() -> StoreSchema {
        let col = |name: &str, data_type, nullable| StoreColumn {
            name: name.into(),
            data_type,
            nullable,
        };
        StoreSchema {
            key: vec![col("user_id", DataType::Int64, false)],
            value: vec![col("score", DataType::Double, true)],
        }
    }

    fn request(partitions: u32, replication: u32) -> StoreRequest {
        StoreRequest {
            name: "recs".into(),
            schema: schema(),
            partitions,
            replication,
            chunks: 0,
            retained: 0,
        }
    }

    fn live(n: u64) -> Vec<(u64, String)> {
        // Deliberately not in id order.
        (0..n)
            .rev()
            .map(|i| (100 + i, format!("ts{i}:7050")))
            .collect()
    }

    /// SELECT on a store is granted by its id, like a table's, and leaves with it.
    #[test]
    fn grants_follow_a_store_through_the_catalog() {
        use crate::catalog::{Catalog, CatalogOp};
        use cairn_proto::auth::{Privileges, UserOp};
        let mut c = Catalog::default();
        c.apply(CatalogOp::User(UserOp::Create {
            name: "ann".into(),
            password: None,
            superuser: false,
            create: false,
            if_not_exists: false,
        }))
        .unwrap();
        let store = plan_store("s1".into(), request(0, 1), &live(1), "cairn".into()).unwrap();
        c.apply(CatalogOp::CreateStore { store }).unwrap();
        let grant = CatalogOp::User(UserOp::Grant {
            users: vec!["ann".into()],
            tables: vec!["s1".into()],
            privileges: Privileges::SELECT,
            create: false,
            revoke: false,
        });
        c.apply(grant.clone()).unwrap();
        assert_eq!(c.users["ann"].grants["s1"], Privileges::SELECT);
        c.apply(CatalogOp::RemoveStore { id: "s1".into() }).unwrap();
        assert!(
            c.users["ann"].grants.is_empty(),
            "grants leave with the store"
        );
        assert!(c.apply(grant).is_err(), "no grant on a dropped store");
    }

    #[test]
    fn the_ring_spreads_partitions_over_servers_in_id_order() {
        let s = plan_store("id1".into(), request(0, 2), &live(3), "ann".into()).unwrap();
        assert_eq!(
            s.layout.partition_nodes.len(),
            12,
            "4 partitions per server"
        );
        assert_eq!(&s.layout.partition_nodes[..4], &[0, 1, 2, 0]);
        let ids: Vec<u64> = s.nodes.iter().map(|p| p.node_id).collect();
        assert_eq!(ids, vec![100, 101, 102]);
        assert_eq!((s.layout.replication, s.layout.chunks), (2, 1));
        assert_eq!((s.retained, s.current_version), (DEFAULT_RETAINED, None));
        // Every master computes the same entry from the same servers.
        let again = plan_store("id1".into(), request(0, 2), &live(3), "ann".into()).unwrap();
        assert_eq!(s, again);
    }

    #[test]
    fn bad_requests_say_what_to_change() {
        let e = plan_store("i".into(), request(0, 4), &live(3), "a".into()).unwrap_err();
        assert!(e.to_string().contains("only 3 are live"), "{e}");
        let e = plan_store("i".into(), request(2, 1), &live(3), "a".into()).unwrap_err();
        assert!(e.to_string().contains("between 3"), "{e}");
        let mut r = request(0, 1);
        r.name = " ".into();
        let e = plan_store("i".into(), r, &live(3), "a".into()).unwrap_err();
        assert!(e.to_string().contains("1 to 256"), "{e}");
        let mut r = request(0, 1);
        r.schema.key.clear();
        let e = plan_store("i".into(), r, &live(3), "a".into()).unwrap_err();
        assert!(e.to_string().contains("key column"), "{e}");
    }

    #[test]
    fn names_are_unique_and_removal_needs_the_id() {
        let mut stores = BTreeMap::new();
        let s = plan_store("id1".into(), request(0, 1), &live(2), "a".into()).unwrap();
        apply_create(&mut stores, s.clone()).unwrap();
        let mut twin = s.clone();
        twin.id = "id2".into();
        assert!(apply_create(&mut stores, twin).is_err());
        assert_eq!(by_name(&stores, "recs").map(|s| s.id.as_str()), Some("id1"));
        assert!(apply_remove(&mut stores, "nope").is_err());
        apply_remove(&mut stores, "id1").unwrap();
        assert!(stores.is_empty());
    }
}
