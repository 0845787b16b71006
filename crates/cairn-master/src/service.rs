//! The gRPC `Master` service and the leader's in-memory view of the tablet servers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_common::{Colocation, IdKind, PartitionSchema, SchemaMeta, validate_id};
use cairn_consensus::RaftGroup;
use cairn_consensus::network::ChannelPool;
use cairn_proto as pb;
use cairn_proto::auth::{Action, Principal};
use parking_lot::{Mutex, RwLock};
use tonic::{Request, Response, Status};

use crate::catalog::{CatalogOp, CatalogSm, TableEntry, TableState, TabletEntry};
use crate::error::{MasterError, Result};
use crate::placement::{Layout, choose_group, group_key, group_layout, place_tablets};
use crate::server::MasterOptions;

mod subspaces;
use subspaces::RegionColumns;

/// What the leader knows of one tablet server.
#[derive(Clone, Debug)]
pub struct TsInfo {
    /// Its address.
    pub addr: String,
    /// When it last heartbeated.
    pub last_heartbeat: Instant,
    /// Its replicas' latest reports.
    pub reports: HashMap<String, pb::TabletReport>,
}

/// State shared by the service and the reconciler.
pub struct MasterState {
    /// The catalog's Raft group member.
    pub group: Arc<RaftGroup>,
    /// The catalog.
    pub catalog: Arc<CatalogSm>,
    /// Tablet servers by node id (leader only; rebuilt from heartbeats).
    pub tservers: RwLock<HashMap<u64, TsInfo>>,
    /// Flags.
    pub opts: MasterOptions,
    /// gRPC channels.
    pub pool: ChannelPool,
    /// All masters' addresses.
    pub masters: Vec<String>,
    /// Since when this master has been the ready leader.
    pub leader_since: Mutex<Option<Instant>>,
    /// Tablets being re-replicated, each with the server its new replica is being
    /// added on (`None`: only a dead replica is being removed).
    pub in_progress: Mutex<HashMap<String, Option<u64>>>,
    /// Serialises DDL on the leader.
    pub ddl: tokio::sync::Mutex<()>,
    /// Serialises auto-incrementing key allocations on the leader (read the next
    /// value, then propose the block starting there).
    pub auto_ids: tokio::sync::Mutex<()>,
    /// Decides who is calling.
    pub gate: Arc<cairn_proto::auth::AuthGate>,
    /// Recent failed logins per user.
    pub login_failures: cairn_proto::auth::LoginFailures,
    /// The parsed token key and the bytes it came from.
    pub token_key_cache: Mutex<Option<(Vec<u8>, Arc<cairn_proto::auth::TokenKey>)>>,
    /// The last push of each read-only store this master drove, by store id.
    pub store_pushes: Mutex<HashMap<String, cairn_readonly::PushReport>>,
    /// Stores whose push this master is driving now.
    pub store_drivers: Mutex<HashSet<String>>,
}

impl MasterState {
    /// Ok when this master is the ready leader.
    pub fn check_leader(&self) -> Result<()> {
        match self.group.check_leader_ready() {
            Ok(()) => Ok(()),
            Err(cairn_consensus::ConsensusError::NotLeader { leader_addr, .. }) => {
                Err(MasterError::NotLeader(leader_addr))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The Raft term this master leads in (see `RaftGroup::leader_term`), to tag
    /// orders to tablet servers with.
    pub fn leader_term(&self) -> Result<u64> {
        self.check_leader()?;
        Ok(self.group.leader_term()?)
    }

    /// Replicates a catalog op; the inner result is the op's own outcome. Gives up
    /// (Unavailable) if it is not applied within the DDL wait (a leader cut off from
    /// the other masters).
    pub async fn propose(&self, op: &CatalogOp) -> Result<std::result::Result<(), String>> {
        let b = serde_json::to_vec(op).map_err(|e| MasterError::Internal(e.to_string()))?;
        let r = tokio::time::timeout(self.opts.ddl_wait, self.group.propose(b))
            .await
            .map_err(|_| {
                MasterError::Unavailable(
                    "the catalog change was not replicated in time (is a majority of the \
                     masters reachable?); retry"
                        .into(),
                )
            })??;
        serde_json::from_slice(&r).map_err(|e| MasterError::Internal(e.to_string()))
    }

    /// Replicates `op` on behalf of DDL request `request` (see
    /// [`CatalogOp::Requested`]).
    pub async fn propose_for(
        &self,
        request: Option<&String>,
        table_id: &str,
        op: CatalogOp,
    ) -> Result<std::result::Result<(), String>> {
        match request {
            Some(r) => {
                self.propose(&CatalogOp::Requested {
                    request: r.clone(),
                    table_id: table_id.to_string(),
                    op: Box::new(op),
                })
                .await
            }
            None => self.propose(&op).await,
        }
    }

    /// The table a DDL request already concerned, if the catalog remembers answering it.
    pub fn answered(&self, request: Option<&String>) -> Option<String> {
        let r = request?;
        self.catalog.read(|c| c.answered.get(r).cloned())
    }

    /// Whether server `id` heartbeated recently.
    pub fn is_live(&self, id: u64) -> bool {
        self.tservers
            .read()
            .get(&id)
            .is_some_and(|t| t.last_heartbeat.elapsed() < self.opts.tserver_live_timeout)
    }

    /// Live servers with their replica counts (from the catalog's placements).
    pub fn live_servers(&self) -> Vec<(u64, String, usize)> {
        let mut load: HashMap<u64, usize> = HashMap::new();
        self.catalog.read(|c| {
            for t in c.tablets.values() {
                for p in &t.replicas {
                    *load.entry(p.node_id).or_default() += 1;
                }
            }
        });
        let ts = self.tservers.read();
        let mut v: Vec<_> = ts
            .iter()
            .filter(|(_, t)| t.last_heartbeat.elapsed() < self.opts.tserver_live_timeout)
            .map(|(id, t)| (*id, t.addr.clone(), load.get(id).copied().unwrap_or(0)))
            .collect();
        v.sort_by_key(|(id, _, l)| (*l, *id));
        v
    }

    /// The tablet's leader as reported: (node id, address, report), highest term wins.
    pub fn tablet_leader(&self, tablet_id: &str) -> Option<(u64, String, pb::TabletReport)> {
        let ts = self.tservers.read();
        let mut best: Option<(u64, String, pb::TabletReport)> = None;
        for (id, t) in ts.iter() {
            if t.last_heartbeat.elapsed() >= self.opts.tserver_live_timeout {
                continue;
            }
            if let Some(r) = t.reports.get(tablet_id)
                && r.role == pb::RaftRole::Leader as i32
                && best.as_ref().is_none_or(|b| b.2.term < r.term)
            {
                best = Some((*id, t.addr.clone(), r.clone()));
            }
        }
        best
    }

    /// Waits (up to `timeout`) until `pred` holds for the catalog.
    async fn wait_catalog(
        &self,
        timeout: Duration,
        pred: impl Fn(&crate::catalog::Catalog) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.catalog.read(&pred) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

pub(crate) fn new_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Refuses a partitioning with more hash buckets than `--max-hash-buckets` or more
/// tablets (buckets times `ranges` range partitions) than `--max-tablets-per-table`,
/// before any partition is computed.
fn check_tablet_limits(opts: &MasterOptions, ps: &PartitionSchema, ranges: usize) -> Result<()> {
    let buckets = ps
        .hash_levels
        .iter()
        .fold(1u64, |n, l| n.saturating_mul(u64::from(l.num_buckets)));
    if buckets > opts.max_hash_buckets {
        return Err(MasterError::InvalidArgument(format!(
            "{buckets} hash buckets exceed --max-hash-buckets ({}): use fewer buckets",
            opts.max_hash_buckets
        )));
    }
    let tablets = buckets.saturating_mul(ranges.max(1) as u64);
    if tablets > opts.max_tablets_per_table {
        return Err(MasterError::InvalidArgument(format!(
            "{tablets} tablets ({buckets} hash buckets times {ranges} range partitions) exceed \
             --max-tablets-per-table ({}): use fewer buckets or range partitions",
            opts.max_tablets_per_table
        )));
    }
    Ok(())
}

fn bad_json(what: &str, e: serde_json::Error) -> MasterError {
    MasterError::InvalidArgument(format!("malformed {what}: {e}"))
}

/// What any authenticated caller may do (read the catalog).
const ANY: Action<'static> = Action::Table {
    id: "",
    name: "",
    need: cairn_proto::auth::Privileges::NONE,
};

/// The gRPC service.
#[derive(Clone)]
pub struct MasterService {
    state: Arc<MasterState>,
}

impl MasterService {
    /// A service over `state`.
    pub fn new(state: Arc<MasterState>) -> Self {
        MasterService { state }
    }

    async fn create_table_inner(
        &self,
        who: &Principal,
        req: pb::CreateTableRequest,
    ) -> Result<String> {
        let st = &self.state;
        st.check_leader()?;
        let _ddl = st.ddl.lock().await;
        let request = request_key(req.request_id.as_ref());
        let name = req.name.trim().to_string();
        if let Some(id) = st.answered(request.as_ref()) {
            // A retry of a create that was applied: answer with the table it made.
            return self.wait_created(id, &name).await;
        }
        if name.is_empty() || name.len() > 256 {
            return Err(MasterError::InvalidArgument(
                "a table name must have 1 to 256 characters".into(),
            ));
        }
        if let Some(t) = st.catalog.read(|c| c.table_by_name(&name).cloned()) {
            if req.if_not_exists && t.state != TableState::Deleting {
                return Ok(t.id);
            }
            return Err(MasterError::TableExists(name));
        }
        let schema_meta: SchemaMeta =
            serde_json::from_slice(&req.schema_json).map_err(|e| bad_json("schema", e))?;
        let schema = schema_meta.to_schema()?;
        let ps: PartitionSchema = if req.partition_schema_json.is_empty() {
            PartitionSchema::default()
        } else {
            serde_json::from_slice(&req.partition_schema_json)
                .map_err(|e| bad_json("partition schema", e))?
        };
        ps.validate(&schema)?;
        let bounds: Vec<(Vec<u8>, Vec<u8>)> = if req.range_bounds_json.is_empty() {
            vec![]
        } else {
            serde_json::from_slice(&req.range_bounds_json)
                .map_err(|e| bad_json("range bounds", e))?
        };
        check_tablet_limits(&st.opts, &ps, bounds.len())?;
        let partitions = ps.create_partitions(&bounds)?;
        let replicas = if req.replicas == 0 {
            st.opts.default_replicas
        } else {
            req.replicas
        };
        if replicas == 0 || replicas > 7 {
            return Err(MasterError::InvalidArgument(format!(
                "replicas must be between 1 and 7, not {replicas}"
            )));
        }
        let live = st.live_servers();
        if live.len() < replicas as usize {
            return Err(MasterError::Unavailable(format!(
                "the table needs {replicas} replicas but only {} tablet servers are live; start more tablet servers or lower the replication factor",
                live.len()
            )));
        }
        let table_id = new_id();
        let key = if bounds.is_empty() {
            group_key(&schema, &ps, replicas)
        } else {
            None
        };
        let wanted = match (req.no_colocation, req.colocate_with.trim()) {
            (true, _) => Colocation::None,
            (false, "") => Colocation::Default,
            (false, other) => Colocation::With(other.to_string()),
        };
        let (colocation, layout) = st.catalog.read(|c| {
            let group = choose_group(c, key, &wanted)?;
            let layout = group
                .as_deref()
                .and_then(|g| group_layout(c, g, partitions.len()));
            Ok::<_, MasterError>((group, layout))
        })?;
        let tablets = place_tablets(
            &table_id,
            partitions,
            replicas,
            &live,
            match (&colocation, &layout) {
                (Some(_), Some(l)) => Layout::Follow(l),
                (Some(_), None) => Layout::RoundRobin,
                (None, _) => Layout::Spread,
            },
        );
        // A Cairn server (a SQL front end) names the user it acts for.
        let owner = match who {
            Principal::Internal if !req.owner.is_empty() => req.owner.clone(),
            p => p.name().to_string(),
        };
        let specs: Vec<cairn_hyperspace::SubspaceSpec> =
            parse_json_list(&req.subspaces_json, "subspaces")?;
        let region_ids: Vec<String> = specs.iter().map(|_| new_id()).collect();
        let subspaces = cairn_hyperspace::SubspaceEntry::for_new_table(
            &table_id,
            &schema,
            tablets.len() as u32,
            &specs,
            &region_ids,
        )
        .map_err(|e| MasterError::InvalidArgument(e.to_string()))?;
        let mut regions = Vec::with_capacity(subspaces.len());
        for s in &subspaces {
            regions.push(self.region_table_entry(&table_id, &schema, &owner, replicas, s, &live)?);
        }
        let table = TableEntry {
            id: table_id.clone(),
            name: name.clone(),
            schema: schema_meta,
            partition_schema: ps,
            replicas,
            state: TableState::Creating,
            tablets: tablets.iter().map(|t| t.id.clone()).collect(),
            version: 0,
            pending_steps: vec![],
            owner,
            next_auto_id: crate::catalog::first_auto_id(),
            subspaces,
            subspace_of: None,
            subspaces_version: 0,
            dropped_regions: vec![],
            colocation,
        };
        st.propose_for(
            request.as_ref(),
            &table_id,
            CatalogOp::CreateTable {
                table,
                tablets,
                regions,
            },
        )
        .await?
        .map_err(MasterError::InvalidArgument)?;
        tracing::info!(table = %name, id = %table_id, "creating table");
        self.wait_created(table_id, &name).await
    }

    /// Waits (up to the DDL wait) for a created table's tablets to run; returns its id.
    async fn wait_created(&self, table_id: String, name: &str) -> Result<String> {
        let st = &self.state;
        let id2 = table_id.clone();
        let done = st
            .wait_catalog(st.opts.ddl_wait, |c| {
                c.tables.get(&id2).is_some_and(|t| {
                    t.state == TableState::Running
                        && t.subspaces.iter().all(|s| {
                            c.tables
                                .get(&s.table_id)
                                .is_some_and(|r| r.state == TableState::Running)
                        })
                })
            })
            .await;
        if !done {
            return Err(MasterError::Unavailable(format!(
                "table '{name}' is created in the catalog but its tablets are not all running yet; it will become usable shortly"
            )));
        }
        Ok(table_id)
    }

    async fn alter_table_inner(&self, req: pb::AlterTableRequest) -> Result<()> {
        let steps: Vec<cairn_common::AlterOp> = parse_json_list(&req.steps_json, "alter steps")?;
        let add: Vec<(Vec<u8>, Vec<u8>)> =
            parse_json_list(&req.add_range_partitions_json, "range partitions to add")?;
        let drop: Vec<(Vec<u8>, Vec<u8>)> =
            parse_json_list(&req.drop_range_partitions_json, "range partitions to drop")?;
        let request = request_key(req.request_id.as_ref());
        if self.state.answered(request.as_ref()).is_some() {
            // A retry of a change that was applied.
            return Ok(());
        }
        if let Some(t) = self
            .state
            .catalog
            .read(|c| c.table_by_name(&req.name).cloned())
        {
            refuse_region_table(&t, "altered")?;
        }
        // Both parts of one request are answered under their own keys, so a retry
        // after the first part ran repeats only the second.
        let part = |n: &str| request.as_ref().map(|r| format!("{r}/{n}"));
        if !steps.is_empty() {
            if self.state.answered(part("columns").as_ref()).is_none() {
                self.alter_schema(&req.name, steps, part("columns")).await?;
            } else {
                // A retry after the table changed: its regions may still hold a column
                // it dropped.
                self.finish_region_columns(&req.name).await?;
            }
        }
        let add_subspaces: Vec<cairn_hyperspace::SubspaceSpec> =
            parse_json_list(&req.add_subspaces_json, "subspaces to add")?;
        let drop_subspaces: Vec<String> =
            parse_json_list(&req.drop_subspaces_json, "subspaces to drop")?;
        if !add_subspaces.is_empty() || !drop_subspaces.is_empty() || !req.subspace_live.is_empty()
        {
            self.alter_subspaces(
                &req.name,
                add_subspaces,
                drop_subspaces,
                &req.subspace_live,
                request.clone(),
            )
            .await?;
        }
        if !add.is_empty() || !drop.is_empty() {
            self.alter_range_partitions(&req.name, add, drop, request)
                .await?;
        }
        Ok(())
    }

    /// Drops and adds range partitions (see `Client::alter_range_partitions`).
    async fn alter_range_partitions(
        &self,
        name: &str,
        add: Vec<(Vec<u8>, Vec<u8>)>,
        drop: Vec<(Vec<u8>, Vec<u8>)>,
        request: Option<String>,
    ) -> Result<()> {
        let st = &self.state;
        st.check_leader()?;
        let _ddl = st.ddl.lock().await;
        let t = self.running_table(name)?;
        if t.partition_schema.range_columns.is_empty() {
            return Err(MasterError::InvalidArgument(format!(
                "table '{name}' is not range partitioned: only a table created with PARTITION BY RANGE (...) has range partitions to add or drop"
            )));
        }
        let entries: Vec<TabletEntry> = st.catalog.read(|c| {
            t.tablets
                .iter()
                .filter_map(|id| c.tablets.get(id).cloned())
                .collect()
        });
        let mut ranges: Vec<(Vec<u8>, Vec<u8>)> = entries
            .iter()
            .map(|e| {
                (
                    e.partition.range_lower.clone(),
                    e.partition.range_upper.clone(),
                )
            })
            .collect();
        ranges.sort();
        ranges.dedup();
        for d in &drop {
            if !ranges.contains(d) {
                return Err(MasterError::InvalidArgument(format!(
                    "table '{name}' has no range partition {}: a dropped range must match an existing one exactly",
                    show_range(d)
                )));
            }
        }
        ranges.retain(|r| !drop.contains(r));
        let partitions = if add.is_empty() {
            vec![]
        } else {
            // Partitioning what remains plus what is added checks for overlap; the new
            // tablets are the partitions of the added ranges.
            let mut all = ranges.clone();
            all.extend(add.iter().cloned());
            check_tablet_limits(&st.opts, &t.partition_schema, all.len())?;
            let mut partitions =
                t.partition_schema
                    .create_partitions(&all)
                    .map_err(|e| match e {
                        cairn_common::CommonError::InvalidPartitioning(m) => {
                            MasterError::InvalidArgument(format!(
                                "cannot add the range partition(s) to '{name}': {m}"
                            ))
                        }
                        other => other.into(),
                    })?;
            partitions
                .retain(|p| !ranges.contains(&(p.range_lower.clone(), p.range_upper.clone())));
            partitions
        };
        let live = st.live_servers();
        if !partitions.is_empty() && live.len() < t.replicas as usize {
            return Err(MasterError::Unavailable(format!(
                "the new tablets need {} replicas but only {} tablet servers are live",
                t.replicas,
                live.len()
            )));
        }
        let added = place_tablets(&t.id, partitions, t.replicas, &live, Layout::Spread);
        let dropped: Vec<String> = entries
            .iter()
            .filter(|e| {
                drop.contains(&(
                    e.partition.range_lower.clone(),
                    e.partition.range_upper.clone(),
                ))
            })
            .map(|e| e.id.clone())
            .collect();
        tracing::info!(table = %name, added = added.len(), dropped = dropped.len(), "altering range partitions");
        st.propose_for(
            request.as_ref(),
            &t.id,
            CatalogOp::AlterPartitions {
                id: t.id.clone(),
                add: added,
                drop: dropped,
            },
        )
        .await?
        .map_err(MasterError::InvalidArgument)?;
        self.wait_running(&t).await
    }

    /// A visible table in state `Running` (DDL waits for the previous change).
    fn running_table(&self, name: &str) -> Result<TableEntry> {
        let t = self.visible_table(name)?;
        if t.state != TableState::Running {
            return Err(MasterError::Unavailable(format!(
                "table '{}' is {}; retry when it is RUNNING",
                t.name,
                t.state.name()
            )));
        }
        Ok(t)
    }

    /// Waits (up to the DDL wait) for the table to be `Running` again.
    async fn wait_running(&self, t: &TableEntry) -> Result<()> {
        let id = t.id.clone();
        let done = self
            .state
            .wait_catalog(self.state.opts.ddl_wait, |c| {
                c.tables
                    .get(&id)
                    .is_some_and(|t| t.state == TableState::Running)
            })
            .await;
        if !done {
            return Err(MasterError::Unavailable(format!(
                "the change to '{}' is recorded but not yet applied on every tablet; it will finish shortly",
                t.name
            )));
        }
        Ok(())
    }

    async fn alter_schema(
        &self,
        name: &str,
        steps: Vec<cairn_common::AlterOp>,
        request: Option<String>,
    ) -> Result<()> {
        let st = &self.state;
        st.check_leader()?;
        let _ddl = st.ddl.lock().await;
        let t = self.running_table(name)?;
        check_column_steps_with_subspaces(&t, &steps)?;
        let mut schema = t.schema.to_schema()?;
        for s in &steps {
            schema = schema.altered(s)?;
        }
        // The regions gain the new columns before the table does, and drop the dropped
        // ones after it did (`cairn_hyperspace::region_columns_to_add`).
        self.alter_region_columns(&t, &schema, RegionColumns::Add)
            .await?;
        st.propose_for(
            request.as_ref(),
            &t.id,
            CatalogOp::AlterTable {
                id: t.id.clone(),
                schema: SchemaMeta::from_schema(&schema),
                steps,
            },
        )
        .await?
        .map_err(MasterError::InvalidArgument)?;
        self.wait_running(&t).await?;
        self.alter_region_columns(&t, &schema, RegionColumns::Drop)
            .await
    }

    async fn drop_table_inner(&self, req: pb::DropTableRequest) -> Result<()> {
        let st = &self.state;
        st.check_leader()?;
        let _ddl = st.ddl.lock().await;
        let request = request_key(req.request_id.as_ref());
        if st.answered(request.as_ref()).is_some() {
            // A retry of a drop that was applied.
            return Ok(());
        }
        let Some(t) = st.catalog.read(|c| c.table_by_name(&req.name).cloned()) else {
            if req.if_exists {
                return Ok(());
            }
            return Err(MasterError::TableNotFound(req.name));
        };
        refuse_region_table(&t, "dropped")?;
        if t.state != TableState::Deleting {
            st.propose_for(
                request.as_ref(),
                &t.id,
                CatalogOp::SetTableState {
                    id: t.id.clone(),
                    state: TableState::Deleting,
                },
            )
            .await?
            .map_err(MasterError::InvalidArgument)?;
        }
        let id = t.id.clone();
        st.wait_catalog(st.opts.ddl_wait, |c| !c.tables.contains_key(&id))
            .await;
        Ok(())
    }

    /// The caller, who must own table `name` (or be a superuser or internal).
    fn check_owner<T>(&self, req: &Request<T>, name: &str) -> std::result::Result<(), Status> {
        let who = self.state.authorize(req, ANY)?;
        if let Some(t) = self.state.catalog.read(|c| c.table_by_name(name).cloned()) {
            who.check(Action::OwnTable {
                name: &t.name,
                owner: &t.owner,
            })?;
        }
        Ok(())
    }

    /// Reserves `count` values of table `id`'s auto-incrementing key: the block
    /// `[first, first + count)`, replicated before it is answered, so no value is
    /// handed out twice, across leader changes too.
    async fn allocate_auto_ids_inner(&self, id: &str, count: u64) -> Result<i64> {
        const MAX_BLOCK: u64 = 1_000_000;
        if count == 0 || count > MAX_BLOCK {
            return Err(MasterError::InvalidArgument(format!(
                "an auto-increment block holds 1 to {MAX_BLOCK} values, not {count}"
            )));
        }
        let st = &self.state;
        st.check_leader()?;
        let _one = st.auto_ids.lock().await;
        let from = st
            .catalog
            .read(|c| {
                c.tables
                    .get(id)
                    .filter(|t| t.state != TableState::Deleting)
                    .map(|t| t.next_auto_id)
            })
            .ok_or_else(|| MasterError::TableNotFound(id.to_string()))?;
        st.propose(&CatalogOp::AllocateAutoIds {
            id: id.to_string(),
            from,
            count,
        })
        .await?
        .map_err(MasterError::InvalidArgument)?;
        Ok(from)
    }

    fn visible_table(&self, name: &str) -> Result<TableEntry> {
        self.state
            .catalog
            .read(|c| c.table_by_name(name).cloned())
            .filter(|t| t.state != TableState::Deleting)
            .ok_or_else(|| MasterError::TableNotFound(name.to_string()))
    }
}

/// Refuses DDL on a subspace's hidden region table: it is changed only with its table.
fn refuse_region_table(t: &TableEntry, what: &str) -> Result<()> {
    match &t.subspace_of {
        Some(base) => Err(MasterError::InvalidArgument(format!(
            "'{}' holds the regions of a subspace of table {base} and cannot be {what} on \
             its own: it follows its table",
            t.name
        ))),
        None => Ok(()),
    }
}

/// Refuses column changes `steps` that table `t`'s subspaces cannot follow
/// ([`cairn_hyperspace::refuse_column_change`]).
fn check_column_steps_with_subspaces(
    t: &TableEntry,
    steps: &[cairn_common::AlterOp],
) -> Result<()> {
    use cairn_hyperspace::ColumnChangeRefusal;
    match cairn_hyperspace::refuse_column_change(&t.subspaces, steps) {
        None => Ok(()),
        Some(r @ ColumnChangeRefusal::Building { .. }) => Err(MasterError::FailedPrecondition(
            format!("table '{}': {r}", t.name),
        )),
        Some(r) => Err(MasterError::InvalidArgument(format!(
            "table '{}': {r}",
            t.name
        ))),
    }
}

/// The catalog's key of a DDL request id (`None`: no id).
fn request_key(r: Option<&pb::RequestId>) -> Option<String> {
    r.filter(|r| !r.client_id.is_empty() && r.client_id.len() <= 128)
        .map(|r| format!("{}:{}", r.client_id, r.seq_no))
}

/// A JSON list from a request field; empty bytes are an empty list.
fn parse_json_list<T: serde::de::DeserializeOwned>(b: &[u8], what: &str) -> Result<Vec<T>> {
    if b.is_empty() {
        return Ok(vec![]);
    }
    serde_json::from_slice(b).map_err(|e| bad_json(what, e))
}

/// `[lower, upper)` of encoded range keys, for messages.
fn show_range(r: &(Vec<u8>, Vec<u8>)) -> String {
    let hex = |b: &[u8]| {
        if b.is_empty() {
            "unbounded".to_string()
        } else {
            b.iter().map(|x| format!("{x:02x}")).collect()
        }
    };
    format!("[{}, {})", hex(&r.0), hex(&r.1))
}

#[tonic::async_trait]
impl pb::master_server::Master for MasterService {
    async fn create_table(
        &self,
        request: Request<pb::CreateTableRequest>,
    ) -> std::result::Result<Response<pb::CreateTableResponse>, Status> {
        let who = self.state.authorize(&request, Action::CreateTable)?;
        let table_id = self.create_table_inner(&who, request.into_inner()).await?;
        // Tests make the answer late here, as a slow network would.
        fail::fail_point!("master::create_table::reply");
        Ok(Response::new(pb::CreateTableResponse { table_id }))
    }

    async fn alter_table(
        &self,
        request: Request<pb::AlterTableRequest>,
    ) -> std::result::Result<Response<pb::AlterTableResponse>, Status> {
        self.check_owner(&request, &request.get_ref().name.clone())?;
        self.alter_table_inner(request.into_inner()).await?;
        Ok(Response::new(pb::AlterTableResponse {}))
    }

    async fn drop_table(
        &self,
        request: Request<pb::DropTableRequest>,
    ) -> std::result::Result<Response<pb::DropTableResponse>, Status> {
        self.check_owner(&request, &request.get_ref().name.clone())?;
        self.drop_table_inner(request.into_inner()).await?;
        Ok(Response::new(pb::DropTableResponse {}))
    }

    async fn create_store(
        &self,
        request: Request<pb::CreateStoreRequest>,
    ) -> std::result::Result<Response<pb::CreateStoreResponse>, Status> {
        let who = self
            .state
            .authorize(&request, Action::Admin("CreateStore"))?;
        let store_id = crate::stores::create(&self.state, &who, request.into_inner()).await?;
        Ok(Response::new(pb::CreateStoreResponse { store_id }))
    }

    async fn drop_store(
        &self,
        request: Request<pb::DropStoreRequest>,
    ) -> std::result::Result<Response<pb::DropStoreResponse>, Status> {
        self.state.authorize(&request, Action::Admin("DropStore"))?;
        crate::stores::drop(&self.state, request.into_inner()).await?;
        Ok(Response::new(pb::DropStoreResponse {}))
    }

    async fn list_stores(
        &self,
        request: Request<pb::ListStoresRequest>,
    ) -> std::result::Result<Response<pb::ListStoresResponse>, Status> {
        self.state.authorize(&request, ANY)?;
        let stores_json = crate::stores::list_json(&self.state)?.into();
        Ok(Response::new(pb::ListStoresResponse { stores_json }))
    }

    async fn get_store(
        &self,
        request: Request<pb::GetStoreRequest>,
    ) -> std::result::Result<Response<pb::GetStoreResponse>, Status> {
        self.state.authorize(&request, ANY)?;
        let (store_json, push_json) =
            crate::stores::get_json(&self.state, &request.into_inner().name)?;
        Ok(Response::new(pb::GetStoreResponse {
            store_json: store_json.into(),
            push_json: push_json.into(),
        }))
    }

    async fn push_store(
        &self,
        request: Request<pb::PushStoreRequest>,
    ) -> std::result::Result<Response<pb::PushStoreResponse>, Status> {
        self.state.authorize(&request, Action::Admin("PushStore"))?;
        let version = crate::store_push::start(&self.state, request.into_inner()).await?;
        Ok(Response::new(pb::PushStoreResponse { version }))
    }

    async fn rollback_store(
        &self,
        request: Request<pb::RollbackStoreRequest>,
    ) -> std::result::Result<Response<pb::RollbackStoreResponse>, Status> {
        self.state
            .authorize(&request, Action::Admin("RollbackStore"))?;
        let r = crate::store_push::rollback(&self.state, request.into_inner()).await?;
        Ok(Response::new(r))
    }

    async fn list_tables(
        &self,
        request: Request<pb::ListTablesRequest>,
    ) -> std::result::Result<Response<pb::ListTablesResponse>, Status> {
        self.state.authorize(&request, ANY)?;
        self.state.check_leader()?;
        let tables = self.state.catalog.read(|c| {
            let mut v: Vec<_> = c
                .tables
                .values()
                .filter(|t| t.state != TableState::Deleting && t.subspace_of.is_none())
                .map(|t| pb::TableSummary {
                    table_id: t.id.clone(),
                    name: t.name.clone(),
                    state: t.state.name().into(),
                    num_tablets: t.tablets.len() as u32,
                    replicas: t.replicas,
                    owner: t.owner.clone(),
                })
                .collect();
            v.sort_by(|a, b| a.name.cmp(&b.name));
            v
        });
        Ok(Response::new(pb::ListTablesResponse { tables }))
    }

    async fn get_table(
        &self,
        request: Request<pb::GetTableRequest>,
    ) -> std::result::Result<Response<pb::GetTableResponse>, Status> {
        self.state.authorize(&request, ANY)?;
        self.state.check_leader()?;
        let t = self.visible_table(&request.into_inner().name)?;
        Ok(Response::new(pb::GetTableResponse {
            owner: t.owner.clone(),
            table_id: t.id,
            name: t.name,
            schema_json: serde_json::to_vec(&t.schema).unwrap_or_default().into(),
            partition_schema_json: serde_json::to_vec(&t.partition_schema)
                .unwrap_or_default()
                .into(),
            replicas: t.replicas,
            state: t.state.name().into(),
            version: t.version,
            subspaces_json: if t.subspaces.is_empty() {
                Default::default()
            } else {
                serde_json::to_vec(&t.subspaces).unwrap_or_default().into()
            },
            colocation_group: t.colocation.unwrap_or_default(),
        }))
    }

    async fn allocate_auto_ids(
        &self,
        request: Request<pb::AllocateAutoIdsRequest>,
    ) -> std::result::Result<Response<pb::AllocateAutoIdsResponse>, Status> {
        let req = request.get_ref();
        let name = self
            .state
            .catalog
            .read(|c| c.tables.get(&req.table_id).map(|t| t.name.clone()))
            .unwrap_or_default();
        self.state.authorize(
            &request,
            Action::Table {
                id: &req.table_id,
                name: &name,
                need: cairn_proto::auth::Privileges::INSERT,
            },
        )?;
        let count = req.count;
        let first = self.allocate_auto_ids_inner(&req.table_id, count).await?;
        Ok(Response::new(pb::AllocateAutoIdsResponse { first, count }))
    }

    async fn get_table_locations(
        &self,
        request: Request<pb::GetTableLocationsRequest>,
    ) -> std::result::Result<Response<pb::GetTableLocationsResponse>, Status> {
        let st = &self.state;
        st.authorize(&request, ANY)?;
        st.check_leader()?;
        let req = request.into_inner();
        let t = if req.table_id.is_empty() {
            self.visible_table(&req.name)?
        } else {
            st.catalog
                .read(|c| c.tables.get(&req.table_id).cloned())
                .filter(|t| t.state != TableState::Deleting)
                .ok_or_else(|| MasterError::TableNotFound(format!("id {}", req.table_id)))?
        };
        let entries: Vec<TabletEntry> = st.catalog.read(|c| {
            t.tablets
                .iter()
                .filter_map(|id| c.tablets.get(id).cloned())
                .collect()
        });
        let mut tablets = Vec::new();
        for e in entries {
            let leader = st.tablet_leader(&e.id);
            let mut replicas = Vec::new();
            let mut seen = BTreeSet::new();
            let (voters, learners): (Vec<(u64, String)>, Vec<(u64, String)>) = match &leader {
                Some((_, _, r)) => (
                    r.voters
                        .iter()
                        .map(|p| (p.node_id, p.addr.clone()))
                        .collect(),
                    r.learners
                        .iter()
                        .map(|p| (p.node_id, p.addr.clone()))
                        .collect(),
                ),
                None => (
                    e.replicas
                        .iter()
                        .map(|p| (p.node_id, p.addr.clone()))
                        .collect(),
                    vec![],
                ),
            };
            for (voter, list) in [(true, voters), (false, learners)] {
                for (id, addr) in list {
                    if seen.insert(id) {
                        replicas.push(pb::ReplicaLocation {
                            node_id: id,
                            addr,
                            leader: leader.as_ref().is_some_and(|l| l.0 == id),
                            voter,
                            live: st.is_live(id),
                        });
                    }
                }
            }
            tablets.push(pb::TabletLocation {
                tablet_id: e.id.clone(),
                partition_json: serde_json::to_vec(&e.partition).unwrap_or_default().into(),
                replicas,
            });
        }
        Ok(Response::new(pb::GetTableLocationsResponse {
            table_id: t.id,
            tablets,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> std::result::Result<Response<pb::HeartbeatResponse>, Status> {
        let st = &self.state;
        st.authorize(&request, Action::Internal("Heartbeat"))?;
        if st.check_leader().is_err() {
            return Ok(Response::new(pb::HeartbeatResponse {
                leader: false,
                need_full_report: false,
                token_public_key: Default::default(),
            }));
        }
        let token_public_key = st.token_key().map(|k| k.public_key()).unwrap_or_default();
        let req = request.into_inner();
        for r in &req.tablets {
            validate_id(IdKind::Tablet, &r.tablet_id).map_err(MasterError::from)?;
            validate_id(IdKind::Table, &r.table_id).map_err(MasterError::from)?;
        }
        let mut ts = st.tservers.write();
        let known = ts.contains_key(&req.node_id);
        let e = ts.entry(req.node_id).or_insert_with(|| TsInfo {
            addr: req.addr.clone(),
            last_heartbeat: Instant::now(),
            reports: HashMap::new(),
        });
        e.addr = req.addr.clone();
        e.last_heartbeat = Instant::now();
        if req.full_report {
            e.reports.clear();
        }
        for r in req.tablets {
            e.reports.insert(r.tablet_id.clone(), r);
        }
        if !known {
            tracing::info!(node = req.node_id, addr = %req.addr, "tablet server registered");
        }
        Ok(Response::new(pb::HeartbeatResponse {
            leader: true,
            need_full_report: !known && !req.full_report,
            token_public_key: token_public_key.into(),
        }))
    }

    async fn list_tablet_servers(
        &self,
        request: Request<pb::ListTabletServersRequest>,
    ) -> std::result::Result<Response<pb::ListTabletServersResponse>, Status> {
        self.state.authorize(&request, ANY)?;
        self.state.check_leader()?;
        let ts = self.state.tservers.read();
        let mut servers: Vec<_> = ts
            .iter()
            .map(|(id, t)| pb::TabletServerInfo {
                node_id: *id,
                addr: t.addr.clone(),
                live: t.last_heartbeat.elapsed() < self.state.opts.tserver_live_timeout,
                millis_since_heartbeat: t.last_heartbeat.elapsed().as_millis() as u64,
                num_replicas: t.reports.len() as u32,
            })
            .collect();
        servers.sort_by(|a, b| a.addr.cmp(&b.addr));
        Ok(Response::new(pb::ListTabletServersResponse { servers }))
    }

    async fn list_masters(
        &self,
        request: Request<pb::ListMastersRequest>,
    ) -> std::result::Result<Response<pb::ListMastersResponse>, Status> {
        self.state.authorize(&request, ANY)?;
        let s = self.state.group.status();
        let masters = self
            .state
            .masters
            .iter()
            .map(|a| {
                let id = crate::master_node_id(a);
                let role = if s.leader == Some(id) {
                    "LEADER"
                } else if s.voters.contains_key(&id) {
                    "FOLLOWER"
                } else {
                    "UNKNOWN"
                };
                pb::MasterInfo {
                    node_id: id,
                    addr: a.clone(),
                    role: role.into(),
                }
            })
            .collect();
        Ok(Response::new(pb::ListMastersResponse { masters }))
    }

    async fn authenticate(
        &self,
        request: Request<pb::AuthenticateRequest>,
    ) -> std::result::Result<Response<pb::AuthenticateResponse>, Status> {
        let peer = request
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let req = request.into_inner();
        let (token, expires_ms) = self
            .state
            .authenticate(&req.user, &req.password, &peer)
            .await?;
        Ok(Response::new(pb::AuthenticateResponse {
            token,
            expires_ms,
        }))
    }

    async fn list_users(
        &self,
        request: Request<pb::ListUsersRequest>,
    ) -> std::result::Result<Response<pb::ListUsersResponse>, Status> {
        self.state
            .authorize(&request, Action::Superuser("list users"))?;
        self.state.check_leader()?;
        self.state.ensure_bootstrapped().await?;
        let (users, owners) = self.state.users_and_owners();
        let enc = |e: serde_json::Error| Status::internal(e.to_string());
        Ok(Response::new(pb::ListUsersResponse {
            users_json: serde_json::to_vec(&users).map_err(enc)?.into(),
            owners_json: serde_json::to_vec(&owners).map_err(enc)?.into(),
        }))
    }

    async fn user_ddl(
        &self,
        request: Request<pb::UserDdlRequest>,
    ) -> std::result::Result<Response<pb::UserDdlResponse>, Status> {
        let who = self.state.authorize(&request, ANY)?;
        let op: cairn_proto::auth::UserOp = serde_json::from_slice(&request.get_ref().op_json)
            .map_err(|e| Status::invalid_argument(format!("malformed user change: {e}")))?;
        self.state.user_ddl(&who, op).await?;
        Ok(Response::new(pb::UserDdlResponse {}))
    }
}
