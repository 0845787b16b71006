//! The catalog: tables, tablets, users with their privileges, and the token key,
//! replicated by Raft.
//!
//! Every change is a [`CatalogOp`] proposed by the leader master and applied, in log
//! order, on every master. Applying is deterministic; an op that no longer makes sense
//! (a table dropped meanwhile) is answered with an error and changes nothing. The
//! checkpoint is one JSON file (`catalog.json`) written atomically with the log index
//! it covers.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use cairn_common::{AlterOp, Partition, PartitionSchema, SchemaMeta};
use cairn_consensus::{SmError, StateMachine};
use cairn_proto::auth::{Privileges, UserEntry, UserOp};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

/// A table's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TableState {
    /// Tablets are being created.
    Creating,
    /// Serving.
    Running,
    /// A schema change is being pushed to the tablets.
    Altering,
    /// Replicas are being deleted.
    Deleting,
}

impl TableState {
    /// Upper-case name.
    pub fn name(self) -> &'static str {
        match self {
            TableState::Creating => "CREATING",
            TableState::Running => "RUNNING",
            TableState::Altering => "ALTERING",
            TableState::Deleting => "DELETING",
        }
    }
}

/// A replica placement: server id and address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Server node id.
    pub node_id: u64,
    /// Its address.
    pub addr: String,
}

/// A table in the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableEntry {
    /// Table id.
    pub id: String,
    /// Name (unique).
    pub name: String,
    /// Current schema.
    pub schema: SchemaMeta,
    /// Partition schema.
    pub partition_schema: PartitionSchema,
    /// Replication factor.
    pub replicas: u32,
    /// Lifecycle state.
    pub state: TableState,
    /// Its tablets, in partition order.
    pub tablets: Vec<String>,
    /// Bumped by every change.
    pub version: u64,
    /// The alter steps being pushed (state `Altering`).
    pub pending_steps: Vec<AlterOp>,
    /// The user who created it (may alter and drop it, holds ALL on it).
    #[serde(default)]
    pub owner: String,
    /// The first value of the hidden auto-incrementing key not yet handed out (tables
    /// created without a primary key; see [`CatalogOp::AllocateAutoIds`]).
    #[serde(default = "first_auto_id")]
    pub next_auto_id: i64,
    /// The table's subspaces for hyperspace search, each with the hidden table holding
    /// its regions (`cairn_hyperspace::region`).
    #[serde(default)]
    pub subspaces: Vec<cairn_hyperspace::SubspaceEntry>,
    /// For a subspace's hidden region table: the id of the table it belongs to, whose
    /// lifecycle and privileges it follows.
    #[serde(default)]
    pub subspace_of: Option<String>,
    /// Bumped by every change to `subspaces`: the version its tablets' leaders are
    /// told to replicate (state `Altering` until each has it).
    #[serde(default)]
    pub subspaces_version: u64,
    /// Region tables of dropped subspaces, deleted once every tablet stopped chaining
    /// into them.
    #[serde(default)]
    pub dropped_regions: Vec<String>,
    /// The colocation group the table belongs to (`crate::placement`): bucket *i* of
    /// every table in it is placed on the same servers. `None`: in no group.
    #[serde(default)]
    pub colocation: Option<String>,
}

/// The first value of every table's auto-incrementing key.
pub fn first_auto_id() -> i64 {
    1
}

/// A tablet in the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TabletEntry {
    /// Tablet id.
    pub id: String,
    /// Its table.
    pub table_id: String,
    /// Its slice of the table.
    pub partition: Partition,
    /// The replica configuration last known (placement at creation, then as reported
    /// by the tablet leader).
    pub replicas: Vec<Placement>,
}

/// A catalog change.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum CatalogOp {
    /// Adds a table (state `Creating`) and its tablets, with the region tables of its
    /// subspaces.
    CreateTable {
        /// The table.
        table: TableEntry,
        /// Its tablets.
        tablets: Vec<TabletEntry>,
        /// The hidden region table of each of its subspaces, with its tablets.
        #[serde(default)]
        regions: Vec<(TableEntry, Vec<TabletEntry>)>,
    },
    /// Sets a table's state.
    SetTableState {
        /// Table id.
        id: String,
        /// New state.
        state: TableState,
    },
    /// Starts a schema change.
    AlterTable {
        /// Table id.
        id: String,
        /// The schema after the steps.
        schema: SchemaMeta,
        /// The steps.
        steps: Vec<AlterOp>,
    },
    /// Adds and drops range partitions: the dropped tablets leave the catalog (their
    /// replicas become orphans the reconciler deletes); added tablets put the table
    /// back in `Creating` until each has a leader.
    AlterPartitions {
        /// Table id.
        id: String,
        /// Tablets to add.
        add: Vec<TabletEntry>,
        /// Ids of tablets to drop.
        drop: Vec<String>,
    },
    /// Changes a table's subspaces (`ALTER TABLE … ADD/DROP SUBSPACE`): sets them,
    /// adds the region table of a new one (state `Creating`), remembers a dropped one's
    /// region table for deletion, and puts the table in `Altering` until its tablets
    /// chain into the new set ([`CatalogOp::SubspacesPushed`]).
    AlterSubspaces {
        /// Table id.
        id: String,
        /// The table's subspaces after the change.
        subspaces: Vec<cairn_hyperspace::SubspaceEntry>,
        /// The region table of an added subspace, with its tablets.
        add_region: Option<(TableEntry, Vec<TabletEntry>)>,
        /// The region table of a dropped subspace.
        drop_region: Option<String>,
    },
    /// Every tablet of a table chains into its subspaces as of `version` from
    /// `timestamp` on: subspaces being built record it (their backfill reads after it),
    /// the region tables of dropped ones start being deleted, and the table runs again.
    SubspacesPushed {
        /// Table id.
        id: String,
        /// The subspaces version pushed.
        version: u64,
        /// The newest of the tablets' timestamps.
        timestamp: u64,
        /// The schema version every tablet was found at (0: not checked). A table
        /// altering its columns runs again only if this is its schema's version.
        #[serde(default)]
        schema_version: u32,
    },
    /// A subspace's backfill is done: searches may use it.
    SubspaceLive {
        /// Table id.
        id: String,
        /// The subspace.
        name: String,
    },
    /// Removes a table and its tablets.
    RemoveTable {
        /// Table id.
        id: String,
    },
    /// Records a tablet's replica configuration.
    SetTabletReplicas {
        /// Tablet id.
        id: String,
        /// The configuration.
        replicas: Vec<Placement>,
    },
    /// Hands out the block `[from, from + count)` of a table's auto-incrementing key.
    /// `from` must be the table's `next_auto_id` when the op is applied (the leader
    /// reads it, then proposes), so a block is never handed out twice even if two
    /// leaders raced.
    AllocateAutoIds {
        /// Table id.
        id: String,
        /// The block's first value.
        from: i64,
        /// Its length.
        count: u64,
    },
    /// Adds a read-only store (see [`crate::stores`]).
    CreateStore {
        /// The store.
        store: crate::stores::StoreEntry,
    },
    /// Removes a read-only store.
    RemoveStore {
        /// Store id.
        id: String,
    },
    /// Sets a read-only store's current version and push (see
    /// [`crate::store_push`]).
    SetStoreState {
        /// Store id.
        id: String,
        /// The version served.
        current_version: Option<u64>,
        /// The push under way, if any.
        push: Option<cairn_readonly::PushState>,
        /// A new ring, when a rebalance finishes.
        #[serde(default)]
        ring: Option<cairn_readonly::RingChange>,
    },
    /// Changes users or privileges (table names already resolved to ids).
    User(UserOp),
    /// Sets the cluster's token-signing key (PKCS#8 of an Ed25519 key), once.
    SetTokenKey {
        /// The key.
        pkcs8: Vec<u8>,
    },
    /// `op`, made for a client's DDL request (`<client id>:<seq no>`): once applied,
    /// the request is remembered with the table it concerned, so a retry of the same
    /// request gets that table as its answer instead of running again.
    Requested {
        /// The request.
        request: String,
        /// The table the request concerned.
        table_id: String,
        /// The change.
        op: Box<CatalogOp>,
    },
}

/// How many answered DDL requests the catalog remembers (the oldest are forgotten).
pub const ANSWERED_DDL_KEPT: usize = 4096;

/// The catalog contents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// Tables by id.
    pub tables: BTreeMap<String, TableEntry>,
    /// Tablets by id.
    pub tablets: BTreeMap<String, TabletEntry>,
    /// Answered DDL requests: request → table id.
    #[serde(default)]
    pub answered: BTreeMap<String, String>,
    /// The same requests, oldest first (to forget the oldest).
    #[serde(default)]
    pub answered_order: std::collections::VecDeque<String>,
    /// Users by name.
    #[serde(default)]
    pub users: BTreeMap<String, UserEntry>,
    /// The token-signing key (PKCS#8), set by the first leader.
    #[serde(default)]
    pub token_key: Option<Vec<u8>>,
    /// Read-only stores by id.
    #[serde(default)]
    pub stores: BTreeMap<String, crate::stores::StoreEntry>,
}

impl Catalog {
    /// A table by name.
    pub fn table_by_name(&self, name: &str) -> Option<&TableEntry> {
        self.tables.values().find(|t| t.name == name)
    }

    /// Applies one op; `Err` leaves the catalog unchanged.
    pub fn apply(&mut self, op: CatalogOp) -> Result<(), String> {
        match op {
            CatalogOp::CreateTable {
                table,
                tablets,
                regions,
            } => {
                for t in std::iter::once(&table).chain(regions.iter().map(|(t, _)| t)) {
                    if self.table_by_name(&t.name).is_some() {
                        return Err(format!("table '{}' already exists", t.name));
                    }
                    if self.tables.contains_key(&t.id) {
                        return Err(format!("table id {} is taken", t.id));
                    }
                }
                if let Some(u) = self.users.get_mut(&table.owner) {
                    u.grants.insert(table.id.clone(), Privileges::ALL);
                }
                for (t, tablets) in std::iter::once((table, tablets)).chain(regions) {
                    for tablet in tablets {
                        self.tablets.insert(tablet.id.clone(), tablet);
                    }
                    self.tables.insert(t.id.clone(), t);
                }
            }
            CatalogOp::SetTableState { id, state } => {
                let t = self.tables.get_mut(&id).ok_or("no such table")?;
                t.state = state;
                if state == TableState::Running {
                    t.pending_steps.clear();
                }
                t.version += 1;
                // A table's region tables are dropped with it.
                if state == TableState::Deleting {
                    let regions: Vec<String> = t
                        .subspaces
                        .iter()
                        .map(|s| s.table_id.clone())
                        .chain(t.dropped_regions.drain(..))
                        .collect();
                    for r in regions {
                        if let Some(rt) = self.tables.get_mut(&r) {
                            rt.state = TableState::Deleting;
                            rt.version += 1;
                        }
                    }
                }
            }
            CatalogOp::AlterSubspaces {
                id,
                subspaces,
                add_region,
                drop_region,
            } => {
                let t = self.tables.get(&id).ok_or("no such table")?;
                if t.state == TableState::Deleting {
                    return Err("the table is being dropped".into());
                }
                if let Some((r, _)) = &add_region
                    && (self.table_by_name(&r.name).is_some() || self.tables.contains_key(&r.id))
                {
                    return Err(format!("table '{}' already exists", r.name));
                }
                let t = self.tables.get_mut(&id).ok_or("no such table")?;
                t.subspaces = subspaces;
                t.subspaces_version += 1;
                t.version += 1;
                t.state = TableState::Altering;
                if let Some(d) = drop_region {
                    t.dropped_regions.push(d);
                }
                if let Some((r, tablets)) = add_region {
                    for tablet in tablets {
                        self.tablets.insert(tablet.id.clone(), tablet);
                    }
                    self.tables.insert(r.id.clone(), r);
                }
            }
            CatalogOp::SubspacesPushed {
                id,
                version,
                timestamp,
                schema_version,
            } => {
                let t = self.tables.get_mut(&id).ok_or("no such table")?;
                if t.subspaces_version != version {
                    return Err("the table's subspaces changed again meanwhile".into());
                }
                for s in t.subspaces.iter_mut().filter(|s| s.building) {
                    if s.chained_after == 0 {
                        s.chained_after = timestamp.max(1);
                    }
                }
                let schema_pushed = t.pending_steps.is_empty()
                    || (schema_version != 0 && schema_version == t.schema.version);
                if t.state == TableState::Altering && schema_pushed {
                    t.state = TableState::Running;
                    t.pending_steps.clear();
                }
                t.version += 1;
                let dropped = std::mem::take(&mut t.dropped_regions);
                for r in dropped {
                    if let Some(rt) = self.tables.get_mut(&r) {
                        rt.state = TableState::Deleting;
                        rt.version += 1;
                    }
                }
            }
            CatalogOp::SubspaceLive { id, name } => {
                let t = self.tables.get_mut(&id).ok_or("no such table")?;
                let s = t
                    .subspaces
                    .iter_mut()
                    .find(|s| s.layout.name == name)
                    .ok_or_else(|| format!("the table has no subspace '{name}'"))?;
                s.building = false;
                t.version += 1;
            }
            CatalogOp::AlterTable { id, schema, steps } => {
                let t = self.tables.get_mut(&id).ok_or("no such table")?;
                if t.state == TableState::Deleting {
                    return Err("the table is being dropped".into());
                }
                t.schema = schema;
                t.pending_steps.extend(steps);
                t.state = TableState::Altering;
                t.version += 1;
            }
            CatalogOp::AlterPartitions { id, add, drop } => {
                let t = self.tables.get(&id).ok_or("no such table")?;
                if t.state == TableState::Deleting {
                    return Err("the table is being dropped".into());
                }
                if let Some(d) = drop.iter().find(|d| !t.tablets.contains(d)) {
                    return Err(format!("tablet {d} is not a tablet of the table"));
                }
                if let Some(a) = add.iter().find(|a| self.tablets.contains_key(&a.id)) {
                    return Err(format!("tablet id {} is taken", a.id));
                }
                let t = self.tables.get_mut(&id).ok_or("no such table")?;
                t.tablets.retain(|x| !drop.contains(x));
                for d in &drop {
                    self.tablets.remove(d);
                }
                if !add.is_empty() {
                    t.state = TableState::Creating;
                }
                for a in add {
                    t.tablets.push(a.id.clone());
                    self.tablets.insert(a.id.clone(), a);
                }
                let tablets = &self.tablets;
                t.tablets.sort_by(|a, b| {
                    let key = |id: &String| {
                        tablets.get(id).map(|e| {
                            (
                                e.partition.hash_buckets.clone(),
                                e.partition.range_lower.clone(),
                            )
                        })
                    };
                    key(a).cmp(&key(b))
                });
                t.version += 1;
            }
            CatalogOp::RemoveTable { id } => {
                let t = self.tables.remove(&id).ok_or("no such table")?;
                for tablet in t.tablets {
                    self.tablets.remove(&tablet);
                }
                for u in self.users.values_mut() {
                    u.grants.remove(&id);
                }
            }
            CatalogOp::SetTabletReplicas { id, replicas } => {
                let t = self.tablets.get_mut(&id).ok_or("no such tablet")?;
                t.replicas = replicas;
            }
            CatalogOp::AllocateAutoIds { id, from, count } => {
                let t = self.tables.get_mut(&id).ok_or("no such table")?;
                if t.next_auto_id != from {
                    return Err(format!(
                        "auto-increment block starts at {}, not {from}",
                        t.next_auto_id
                    ));
                }
                let count = i64::try_from(count).map_err(|_| "block too large")?;
                t.next_auto_id = from
                    .checked_add(count)
                    .ok_or("the table's auto-incrementing key is exhausted")?;
            }
            CatalogOp::CreateStore { store } => {
                crate::stores::apply_create(&mut self.stores, store)?
            }
            CatalogOp::RemoveStore { id } => {
                crate::stores::apply_remove(&mut self.stores, &id)?;
                for u in self.users.values_mut() {
                    u.grants.remove(&id);
                }
            }
            CatalogOp::SetStoreState {
                id,
                current_version,
                push,
                ring,
            } => {
                let s = self
                    .stores
                    .get_mut(&id)
                    .ok_or_else(|| format!("no store with id {id}"))?;
                s.current_version = current_version;
                let swapping = push
                    .as_ref()
                    .filter(|p| p.phase == cairn_readonly::PushPhase::Swapping);
                s.newest_version = s
                    .newest_version
                    .max(current_version.unwrap_or(0))
                    .max(swapping.map_or(0, |p| p.version));
                s.push = push;
                if let Some(ring) = ring {
                    s.layout = ring.layout;
                    s.nodes = ring.nodes;
                }
            }
            CatalogOp::User(op) => self.apply_user(op)?,
            CatalogOp::SetTokenKey { pkcs8 } => {
                if self.token_key.is_none() {
                    self.token_key = Some(pkcs8);
                }
            }
            CatalogOp::Requested {
                request,
                table_id,
                op,
            } => {
                self.apply(*op)?;
                if self.answered.insert(request.clone(), table_id).is_none() {
                    self.answered_order.push_back(request);
                }
                while self.answered_order.len() > ANSWERED_DDL_KEPT {
                    if let Some(old) = self.answered_order.pop_front() {
                        self.answered.remove(&old);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Catalog {
    /// Applies a user op; `Err` (PostgreSQL's message) leaves the catalog unchanged.
    fn apply_user(&mut self, op: UserOp) -> Result<(), String> {
        match op {
            UserOp::Create {
                name,
                password,
                superuser,
                create,
                if_not_exists,
            } => {
                if self.users.contains_key(&name) {
                    return if if_not_exists {
                        Ok(())
                    } else {
                        Err(format!("role \"{name}\" already exists"))
                    };
                }
                self.users.insert(
                    name.clone(),
                    UserEntry {
                        name,
                        password,
                        superuser,
                        create,
                        grants: BTreeMap::new(),
                    },
                );
            }
            UserOp::Alter {
                name,
                password,
                superuser,
                create,
            } => {
                let u = self
                    .users
                    .get_mut(&name)
                    .ok_or_else(|| format!("role \"{name}\" does not exist"))?;
                if let Some(p) = password {
                    u.password = p;
                }
                if let Some(s) = superuser {
                    u.superuser = s;
                }
                if let Some(c) = create {
                    u.create = c;
                }
            }
            UserOp::Drop { name, if_exists } => {
                if let Some(t) = self.tables.values().find(|t| t.owner == name) {
                    return Err(format!(
                        "role \"{name}\" cannot be dropped because it owns table {}: drop \
                         the table first",
                        t.name
                    ));
                }
                if self.users.remove(&name).is_none() && !if_exists {
                    return Err(format!("role \"{name}\" does not exist"));
                }
            }
            UserOp::Grant {
                users,
                tables,
                privileges,
                create,
                revoke,
            } => {
                if let Some(u) = users.iter().find(|u| !self.users.contains_key(*u)) {
                    return Err(format!("role \"{u}\" does not exist"));
                }
                if let Some(t) = tables
                    .iter()
                    .find(|t| !self.tables.contains_key(*t) && !self.stores.contains_key(*t))
                {
                    return Err(format!("table or store {t} no longer exists"));
                }
                for name in &users {
                    let Some(u) = self.users.get_mut(name) else {
                        continue;
                    };
                    if create {
                        u.create = !revoke;
                    }
                    for t in &tables {
                        let have = u.grants.get(t).copied().unwrap_or_default();
                        let now = if revoke {
                            have.without(privileges)
                        } else {
                            have.union(privileges)
                        };
                        if now.is_empty() {
                            u.grants.remove(t);
                        } else {
                            u.grants.insert(t.clone(), now);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    index: u64,
    catalog: Catalog,
}

const CATALOG_FILE: &str = "catalog.json";

/// The catalog as a replicated state machine.
pub struct CatalogSm {
    dir: PathBuf,
    state: RwLock<(Catalog, u64)>,
    durable: RwLock<u64>,
}

impl CatalogSm {
    /// Loads the checkpoint in `dir`, if any.
    pub fn open(dir: &Path) -> crate::Result<CatalogSm> {
        std::fs::create_dir_all(dir).map_err(|e| crate::MasterError::Io {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let (catalog, index) = match Self::load(&dir.join(CATALOG_FILE)) {
            Ok(c) => c,
            Err(e) => return Err(crate::MasterError::Internal(e.to_string())),
        };
        Ok(CatalogSm {
            dir: dir.to_path_buf(),
            state: RwLock::new((catalog, index)),
            durable: RwLock::new(index),
        })
    }

    fn load(path: &Path) -> Result<(Catalog, u64), SmError> {
        match std::fs::read(path) {
            Ok(b) => {
                let c: Checkpoint = serde_json::from_slice(&b)
                    .map_err(|e| format!("corrupt catalog checkpoint {}: {e}", path.display()))?;
                Ok((c.catalog, c.index))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Catalog::default(), 0)),
            Err(e) => Err(Box::new(e)),
        }
    }

    /// A copy of the catalog.
    pub fn snapshot(&self) -> Catalog {
        self.state.read().0.clone()
    }

    /// Reads the catalog under its lock.
    pub fn read<T>(&self, f: impl FnOnce(&Catalog) -> T) -> T {
        f(&self.state.read().0)
    }

    fn write_checkpoint(dir: &Path, catalog: &Catalog, index: u64) -> Result<(), SmError> {
        let b = serde_json::to_vec(&Checkpoint {
            index,
            catalog: catalog.clone(),
        })?;
        let tmp = dir.join(format!("{CATALOG_FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&b)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(CATALOG_FILE))?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    }
}

impl StateMachine for CatalogSm {
    fn apply(&self, index: u64, data: &[u8]) -> Result<Vec<u8>, SmError> {
        let op: CatalogOp = serde_json::from_slice(data)?;
        let mut s = self.state.write();
        let res = s.0.apply(op);
        s.1 = index;
        Ok(serde_json::to_vec(&res)?)
    }

    fn durable_index(&self) -> u64 {
        *self.durable.read()
    }

    fn flush(&self) -> Result<(), SmError> {
        let (c, i) = self.state.read().clone();
        Self::write_checkpoint(&self.dir, &c, i)?;
        *self.durable.write() = i;
        Ok(())
    }

    fn checkpoint(&self, into: &Path) -> Result<(Vec<PathBuf>, u64), SmError> {
        let (c, i) = self.state.read().clone();
        Self::write_checkpoint(into, &c, i)?;
        Ok((vec![PathBuf::from(CATALOG_FILE)], i))
    }

    fn restore(&self, from: &Path) -> Result<(), SmError> {
        let (c, i) = Self::load(&from.join(CATALOG_FILE))?;
        Self::write_checkpoint(&self.dir, &c, i)?;
        *self.state.write() = (c, i);
        *self.durable.write() = i;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(id: &str, name: &str) -> TableEntry {
        TableEntry {
            id: id.into(),
            name: name.into(),
            schema: SchemaMeta {
                columns: vec![],
                key_indexes: vec![],
                next_column_id: 0,
                version: 0,
            },
            partition_schema: PartitionSchema::default(),
            replicas: 1,
            state: TableState::Creating,
            tablets: vec![format!("{id}-t0")],
            version: 0,
            pending_steps: vec![],
            owner: "ann".into(),
            next_auto_id: first_auto_id(),
            subspaces: vec![],
            subspace_of: None,
            subspaces_version: 0,
            dropped_regions: vec![],
            colocation: None,
        }
    }

    #[test]
    fn users_and_grants_follow_their_tables() {
        let mut c = Catalog::default();
        let create = |name: &str| {
            CatalogOp::User(UserOp::Create {
                name: name.into(),
                password: None,
                superuser: false,
                create: true,
                if_not_exists: false,
            })
        };
        c.apply(create("ann")).unwrap();
        c.apply(create("bob")).unwrap();
        assert!(
            c.apply(create("bob"))
                .unwrap_err()
                .contains("already exists")
        );
        c.apply(CatalogOp::CreateTable {
            table: table("a", "t"),
            tablets: vec![],
            regions: vec![],
        })
        .unwrap();
        assert_eq!(
            c.users["ann"].grants["a"],
            Privileges::ALL,
            "the owner holds ALL"
        );
        let grant = |revoke, p| {
            CatalogOp::User(UserOp::Grant {
                users: vec!["bob".into()],
                tables: vec!["a".into()],
                privileges: p,
                create: false,
                revoke,
            })
        };
        c.apply(grant(false, Privileges::ALL)).unwrap();
        c.apply(grant(true, Privileges::INSERT)).unwrap();
        assert_eq!(
            c.users["bob"].grants["a"].names(),
            ["select", "update", "delete"]
        );
        assert!(
            c.apply(CatalogOp::User(UserOp::Drop {
                name: "ann".into(),
                if_exists: false
            }))
            .unwrap_err()
            .contains("owns table t")
        );
        c.apply(CatalogOp::RemoveTable { id: "a".into() }).unwrap();
        assert!(
            c.users["bob"].grants.is_empty(),
            "grants leave with the table"
        );
        assert!(c.apply(grant(false, Privileges::SELECT)).is_err());
    }

    #[test]
    fn region_tables_are_created_and_dropped_with_their_table() {
        let mut c = Catalog::default();
        let mut base = table("a", "t");
        let mut region = table("r", "__subspace/a/x");
        region.subspace_of = Some("a".into());
        let schema = cairn_common::Schema::new(
            vec![
                cairn_common::ColumnSpec::new("k", cairn_common::DataType::Int64),
                cairn_common::ColumnSpec::new("x", cairn_common::DataType::Int64),
            ],
            &["k"],
        )
        .unwrap();
        base.subspaces = cairn_hyperspace::SubspaceEntry::for_new_table(
            "a",
            &schema,
            1,
            &[cairn_hyperspace::SubspaceSpec::new(&["x"]).regions(2)],
            &["r".to_string()],
        )
        .unwrap();
        c.apply(CatalogOp::CreateTable {
            table: base,
            tablets: vec![],
            regions: vec![(region.clone(), vec![])],
        })
        .unwrap();
        assert_eq!(c.tables.len(), 2);
        // A second table whose region table's name is taken is refused whole.
        let mut other = table("b", "u");
        other.subspaces = vec![];
        assert!(
            c.apply(CatalogOp::CreateTable {
                table: other,
                tablets: vec![],
                regions: vec![(region, vec![])],
            })
            .is_err()
        );
        assert!(!c.tables.contains_key("b"));
        c.apply(CatalogOp::SetTableState {
            id: "a".into(),
            state: TableState::Deleting,
        })
        .unwrap();
        assert_eq!(c.tables["r"].state, TableState::Deleting);
    }

    #[test]
    fn a_subspace_is_built_pushed_made_live_and_dropped() {
        let mut c = Catalog::default();
        let mut base = table("a", "t");
        base.state = TableState::Running;
        c.apply(CatalogOp::CreateTable {
            table: base,
            tablets: vec![],
            regions: vec![],
        })
        .unwrap();
        let schema = cairn_common::Schema::new(
            vec![
                cairn_common::ColumnSpec::new("k", cairn_common::DataType::Int64),
                cairn_common::ColumnSpec::new("x", cairn_common::DataType::Int64),
            ],
            &["k"],
        )
        .unwrap();
        let spec = cairn_hyperspace::SubspaceSpec::new(&["x"]).regions(4);
        let entry =
            cairn_hyperspace::SubspaceEntry::for_existing_table("a", &schema, 1, &[], &spec, "r")
                .unwrap();
        assert!(entry.building);
        let mut region = table("r", "__subspace/a/x");
        region.subspace_of = Some("a".into());
        c.apply(CatalogOp::AlterSubspaces {
            id: "a".into(),
            subspaces: vec![entry.clone()],
            add_region: Some((region, vec![])),
            drop_region: None,
        })
        .unwrap();
        assert_eq!(c.tables["a"].state, TableState::Altering);
        assert_eq!(c.tables["a"].subspaces_version, 1);
        assert!(c.tables.contains_key("r"));
        // A second subspace with the same attributes is refused.
        assert!(
            cairn_hyperspace::SubspaceEntry::for_existing_table(
                "a",
                &schema,
                1,
                &c.tables["a"].subspaces,
                &spec.clone().named("y"),
                "r2"
            )
            .is_err()
        );
        // A push of an older version is refused; the current one records the moment.
        assert!(
            c.apply(CatalogOp::SubspacesPushed {
                id: "a".into(),
                version: 0,
                timestamp: 9,
                schema_version: 0,
            })
            .is_err()
        );
        c.apply(CatalogOp::SubspacesPushed {
            id: "a".into(),
            version: 1,
            timestamp: 42,
            schema_version: 0,
        })
        .unwrap();
        assert_eq!(c.tables["a"].state, TableState::Running);
        assert_eq!(c.tables["a"].subspaces[0].chained_after, 42);
        assert!(c.tables["a"].subspaces[0].building);
        c.apply(CatalogOp::SubspaceLive {
            id: "a".into(),
            name: "x".into(),
        })
        .unwrap();
        assert!(!c.tables["a"].subspaces[0].building);
        // Dropped: out of the catalog at once, its region table deleted after the push.
        c.apply(CatalogOp::AlterSubspaces {
            id: "a".into(),
            subspaces: vec![],
            add_region: None,
            drop_region: Some("r".into()),
        })
        .unwrap();
        assert_eq!(c.tables["r"].state, TableState::Creating);
        c.apply(CatalogOp::SubspacesPushed {
            id: "a".into(),
            version: 2,
            timestamp: 50,
            schema_version: 0,
        })
        .unwrap();
        assert_eq!(c.tables["r"].state, TableState::Deleting);
        assert!(c.tables["a"].dropped_regions.is_empty());

        // A column change of the table, whose subspaces changed before: a push that
        // found every tablet at the new schema lets it run again; one from before the
        // change (or from a reconciler that did not check the schema) does not.
        let mut schema = c.tables["a"].schema.clone();
        schema.version += 1;
        let add = cairn_common::AlterOp::AddColumn(
            cairn_common::ColumnSpec::new("y", cairn_common::DataType::Int64).nullable(),
        );
        c.apply(CatalogOp::AlterTable {
            id: "a".into(),
            schema: schema.clone(),
            steps: vec![add],
        })
        .unwrap();
        assert_eq!(c.tables["a"].state, TableState::Altering);
        for (schema_version, state) in [
            (0, TableState::Altering),
            (schema.version - 1, TableState::Altering),
            (schema.version, TableState::Running),
        ] {
            c.apply(CatalogOp::SubspacesPushed {
                id: "a".into(),
                version: 2,
                timestamp: 60,
                schema_version,
            })
            .unwrap();
            assert_eq!(c.tables["a"].state, state, "pushed at {schema_version}");
        }
        assert!(c.tables["a"].pending_steps.is_empty());
    }

    #[test]
    fn auto_id_blocks_never_overlap() {
        let mut c = Catalog::default();
        c.apply(CatalogOp::CreateTable {
            table: table("a", "t"),
            tablets: vec![],
            regions: vec![],
        })
        .unwrap();
        let alloc = |from, count| CatalogOp::AllocateAutoIds {
            id: "a".into(),
            from,
            count,
        };
        c.apply(alloc(1, 10)).unwrap();
        assert_eq!(c.tables["a"].next_auto_id, 11);
        // A block proposed from a stale read is refused and changes nothing.
        assert!(c.apply(alloc(1, 5)).unwrap_err().contains("starts at 11"));
        assert_eq!(c.tables["a"].next_auto_id, 11);
        c.apply(alloc(11, 1)).unwrap();
        assert_eq!(c.tables["a"].next_auto_id, 12);
        assert!(c.apply(alloc(12, u64::MAX)).is_err(), "overflow is refused");
        assert!(
            c.apply(CatalogOp::AllocateAutoIds {
                id: "zz".into(),
                from: 1,
                count: 1
            })
            .is_err()
        );
        // Catalogs written before the field existed start at 1.
        let mut v = serde_json::to_value(&c.tables["a"]).unwrap();
        v.as_object_mut().unwrap().remove("next_auto_id");
        let old: TableEntry = serde_json::from_value(v).unwrap();
        assert_eq!(old.next_auto_id, 1);
    }

    #[test]
    fn ops_apply_deterministically_and_checkpoint_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let sm = CatalogSm::open(d.path()).unwrap();
        let create = |id: &str, name: &str| CatalogOp::CreateTable {
            table: table(id, name),
            tablets: vec![TabletEntry {
                id: format!("{id}-t0"),
                table_id: id.into(),
                partition: Partition {
                    hash_buckets: vec![],
                    range_lower: vec![],
                    range_upper: vec![],
                },
                replicas: vec![],
            }],
            regions: vec![],
        };
        let enc = |op: &CatalogOp| serde_json::to_vec(op).unwrap();
        let r: Result<(), String> =
            serde_json::from_slice(&sm.apply(1, &enc(&create("a", "t"))).unwrap()).unwrap();
        assert!(r.is_ok());
        // Same name again: refused, nothing changes.
        let r: Result<(), String> =
            serde_json::from_slice(&sm.apply(2, &enc(&create("b", "t"))).unwrap()).unwrap();
        assert!(r.unwrap_err().contains("already exists"));
        assert_eq!(sm.snapshot().tables.len(), 1);
        sm.flush().unwrap();
        assert_eq!(sm.durable_index(), 2);
        let reopened = CatalogSm::open(d.path()).unwrap();
        assert_eq!(reopened.snapshot(), sm.snapshot());
        assert_eq!(reopened.durable_index(), 2);
        // Range partitions: drop the one tablet, add two; the table waits in Creating.
        let tablet = |n: &str, lo: u8, hi: u8| TabletEntry {
            id: n.into(),
            table_id: "a".into(),
            partition: Partition {
                hash_buckets: vec![],
                range_lower: vec![lo],
                range_upper: vec![hi],
            },
            replicas: vec![],
        };
        let alter = CatalogOp::AlterPartitions {
            id: "a".into(),
            add: vec![tablet("a-t2", 5, 9), tablet("a-t1", 1, 5)],
            drop: vec!["a-t0".into()],
        };
        let r: Result<(), String> =
            serde_json::from_slice(&sm.apply(3, &enc(&alter)).unwrap()).unwrap();
        assert!(r.is_ok(), "{r:?}");
        let c = sm.snapshot();
        assert_eq!(
            c.tables["a"].tablets,
            vec!["a-t1", "a-t2"],
            "partition order"
        );
        assert_eq!(c.tables["a"].state, TableState::Creating);
        assert!(!c.tablets.contains_key("a-t0"));
        // Dropping a tablet that is not the table's: refused, nothing changes.
        let bad = CatalogOp::AlterPartitions {
            id: "a".into(),
            add: vec![tablet("a-t3", 9, 10)],
            drop: vec!["a-t0".into()],
        };
        let r: Result<(), String> =
            serde_json::from_slice(&sm.apply(4, &enc(&bad)).unwrap()).unwrap();
        assert!(r.unwrap_err().contains("not a tablet"));
        assert_eq!(sm.snapshot(), c);
        // Remove drops the tablets too.
        sm.apply(5, &enc(&CatalogOp::RemoveTable { id: "a".into() }))
            .unwrap();
        assert!(sm.snapshot().tablets.is_empty());
    }
}
