//! The tablet manager: the replicas on this server, on disk under
//! `<data>/tablets/<tablet id>/` as `tablet/` (the storage engine's files), `raft/` (the
//! Raft log, vote and snapshot bookkeeping) and `replica.json` (written last: a
//! directory without it is an interrupted creation and is removed at startup).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_common::{HybridClock, IdKind, Partition, PartitionSchema, SchemaMeta, validate_id};
use cairn_consensus::network::ChannelPool;
use cairn_consensus::{GroupOptions, GroupRegistry, RaftGroup};
use cairn_proto as pb;
use cairn_tablet::TabletOptions;
use parking_lot::RwLock;

use crate::error::{Result, TserverError};
use crate::replica::{ReplicaMeta, TabletReplica, TabletSm};

const REPLICA_FILE: &str = "replica.json";

/// Everything replicas on one server share.
pub struct TabletManager {
    dir: PathBuf,
    node_id: u64,
    clock: Arc<HybridClock>,
    tablet_opts: TabletOptions,
    group_opts: GroupOptions,
    pool: ChannelPool,
    registry: GroupRegistry,
    replicas: RwLock<HashMap<String, Arc<TabletReplica>>>,
    creating: tokio::sync::Mutex<()>,
}

fn json_err(what: &str, e: serde_json::Error) -> TserverError {
    TserverError::InvalidArgument(format!("malformed {what}: {e}"))
}

impl TabletManager {
    /// A manager for the replicas under `data_dir/tablets`.
    pub fn new(
        data_dir: &Path,
        node_id: u64,
        clock: Arc<HybridClock>,
        tablet_opts: TabletOptions,
        group_opts: GroupOptions,
        pool: ChannelPool,
        registry: GroupRegistry,
    ) -> Result<Arc<TabletManager>> {
        let dir = data_dir.join("tablets");
        std::fs::create_dir_all(&dir).map_err(|e| TserverError::io(&dir, e))?;
        Ok(Arc::new(TabletManager {
            dir,
            node_id,
            clock,
            tablet_opts,
            group_opts,
            pool,
            registry,
            replicas: RwLock::new(HashMap::new()),
            creating: tokio::sync::Mutex::new(()),
        }))
    }

    /// The block cache every tablet of this server reads base data through.
    pub fn block_cache(&self) -> &Arc<cairn_tablet::cache::BlockCache> {
        &self.tablet_opts.block_cache
    }

    /// This server's node id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }
    /// The shared clock.
    pub fn clock(&self) -> &Arc<HybridClock> {
        &self.clock
    }
    /// The shared channel pool.
    pub fn pool(&self) -> &ChannelPool {
        &self.pool
    }

    /// Opens every replica found on disk (after a restart).
    pub async fn open_all(&self) -> Result<usize> {
        let mut n = 0;
        let entries = std::fs::read_dir(&self.dir).map_err(|e| TserverError::io(&self.dir, e))?;
        for e in entries {
            let e = e.map_err(|e| TserverError::io(&self.dir, e))?;
            let d = e.path();
            if !d.is_dir() {
                continue;
            }
            let meta_path = d.join(REPLICA_FILE);
            if !meta_path.exists() {
                tracing::warn!(dir = %d.display(), "removing an interrupted tablet creation");
                let _ = std::fs::remove_dir_all(&d);
                continue;
            }
            let b = std::fs::read(&meta_path).map_err(|e| TserverError::io(&meta_path, e))?;
            let meta: ReplicaMeta =
                serde_json::from_slice(&b).map_err(|e| json_err("replica.json", e))?;
            let r = self.open_replica(meta, None).await?;
            self.replicas.write().insert(r.meta.tablet_id.clone(), r);
            n += 1;
        }
        Ok(n)
    }

    async fn open_replica(
        &self,
        meta: ReplicaMeta,
        create_schema: Option<cairn_common::Schema>,
    ) -> Result<Arc<TabletReplica>> {
        let rdir = self.dir.join(&meta.tablet_id);
        let tdir = rdir.join("tablet");
        let opts = self.tablet_opts.clone();
        let clock = self.clock.clone();
        let t2 = tdir.clone();
        // A tablet of a table with subspaces tracks the changes its leader must chain.
        let chained = !meta.subspaces.is_empty();
        let sm = tokio::task::spawn_blocking(move || {
            TabletSm::open(&t2, create_schema, opts, clock, chained)
        })
        .await
        .map_err(|e| TserverError::Internal(e.to_string()))??;
        let group = RaftGroup::open(
            &meta.tablet_id,
            self.node_id,
            &rdir,
            sm.clone(),
            &self.group_opts,
            self.pool.clone(),
            self.registry.clone(),
        )
        .await?;
        Ok(Arc::new(TabletReplica::new(meta, sm, group)))
    }

    /// Creates a replica (idempotent: an existing one is left alone). With initial
    /// peers, the lowest node id forms the group; a learner waits to be added by the
    /// leader and receives the tablet by log replication or tablet copy.
    pub async fn create(&self, req: pb::CreateTabletRequest) -> Result<Arc<TabletReplica>> {
        validate_id(IdKind::Tablet, &req.tablet_id)?;
        validate_id(IdKind::Table, &req.table_id)?;
        let _g = self.creating.lock().await;
        if let Some(r) = self.replicas.read().get(&req.tablet_id) {
            return Ok(r.clone());
        }
        let schema_meta: SchemaMeta =
            serde_json::from_slice(&req.schema_json).map_err(|e| json_err("schema", e))?;
        let schema = schema_meta.to_schema()?;
        let partition_schema: PartitionSchema = serde_json::from_slice(&req.partition_schema_json)
            .map_err(|e| json_err("partition schema", e))?;
        let partition: Partition =
            serde_json::from_slice(&req.partition_json).map_err(|e| json_err("partition", e))?;
        let meta = ReplicaMeta {
            tablet_id: req.tablet_id.clone(),
            table_id: req.table_id.clone(),
            table_name: req.table_name.clone(),
            partition_schema,
            partition,
            initial_schema: schema_meta,
            subspaces: if req.subspaces_json.is_empty() {
                vec![]
            } else {
                serde_json::from_slice(&req.subspaces_json).map_err(|e| json_err("subspaces", e))?
            },
            privileges_of: if req.privileges_of.is_empty() {
                None
            } else {
                validate_id(IdKind::Table, &req.privileges_of)?;
                Some(req.privileges_of.clone())
            },
        };
        let rdir = self.dir.join(&req.tablet_id);
        if rdir.exists() && !rdir.join(REPLICA_FILE).exists() {
            let _ = std::fs::remove_dir_all(&rdir);
        }
        std::fs::create_dir_all(&rdir).map_err(|e| TserverError::io(&rdir, e))?;
        let r = self.open_replica(meta.clone(), Some(schema)).await?;
        let b =
            serde_json::to_vec_pretty(&meta).map_err(|e| TserverError::Internal(e.to_string()))?;
        write_atomic(&rdir, REPLICA_FILE, &b)?;
        if !req.learner && !req.peers.is_empty() {
            let lowest = req.peers.iter().map(|p| p.node_id).min();
            if lowest == Some(self.node_id) {
                let voters: BTreeMap<u64, cairn_consensus::Node> = req
                    .peers
                    .iter()
                    .map(|p| (p.node_id, cairn_consensus::Node::new(p.addr.clone())))
                    .collect();
                r.group.bootstrap(voters).await?;
            }
        }
        self.replicas
            .write()
            .insert(req.tablet_id.clone(), r.clone());
        tracing::info!(tablet = %req.tablet_id, table = %req.table_name, learner = req.learner, "created tablet replica");
        Ok(r)
    }

    /// Deletes a replica and its files. The id is validated first: it names the
    /// directory that is removed.
    pub async fn delete(&self, tablet_id: &str) -> Result<()> {
        validate_id(IdKind::Tablet, tablet_id)?;
        let r = self.replicas.write().remove(tablet_id);
        if let Some(r) = r {
            r.group.shutdown().await;
            let sm = r.sm.clone();
            tokio::task::spawn_blocking(move || sm.shutdown())
                .await
                .map_err(|e| TserverError::Internal(e.to_string()))?;
        }
        let rdir = self.dir.join(tablet_id);
        if rdir.exists() {
            std::fs::remove_dir_all(&rdir).map_err(|e| TserverError::io(&rdir, e))?;
            tracing::info!(tablet = %tablet_id, "deleted tablet replica");
        }
        Ok(())
    }

    /// A replica by tablet id.
    pub fn get(&self, tablet_id: &str) -> Result<Arc<TabletReplica>> {
        validate_id(IdKind::Tablet, tablet_id)?;
        self.replicas
            .read()
            .get(tablet_id)
            .cloned()
            .ok_or_else(|| TserverError::TabletNotFound(tablet_id.to_string()))
    }

    /// Every replica.
    pub fn list(&self) -> Vec<Arc<TabletReplica>> {
        let mut v: Vec<_> = self.replicas.read().values().cloned().collect();
        v.sort_by(|a, b| a.meta.tablet_id.cmp(&b.meta.tablet_id));
        v
    }

    /// Stops every replica (graceful shutdown).
    pub async fn shutdown(&self) {
        let all: Vec<_> = self.replicas.write().drain().map(|(_, r)| r).collect();
        for r in all {
            r.group.shutdown().await;
            let sm = r.sm.clone();
            let _ = tokio::task::spawn_blocking(move || sm.shutdown()).await;
        }
    }
}

fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    cairn_tablet::metadata::write_atomic(dir, name, bytes).map_err(TserverError::from)
}
