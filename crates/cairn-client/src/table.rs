//! Tables as the client sees them: the handle returned by `open_table`, the spec of
//! `create_table`, tablet locations and the routing of partition keys to tablets.

use std::sync::Arc;

use cairn_common::{Colocation, Partition, PartitionSchema, Schema, SchemaMeta, Value};
use cairn_hyperspace::{SubspaceEntry, SubspaceSpec};

use crate::error::{ClientError, Result, normalize_addr};

/// What `Client::create_table` creates.
#[derive(Clone, Debug)]
pub struct CreateTableSpec {
    /// Table name (unique in the cluster).
    pub name: String,
    /// Columns and primary key.
    pub schema: Schema,
    /// Hash levels and range columns.
    pub partition: PartitionSchema,
    /// Range partitions as `[lower, upper)` encoded range keys (see
    /// [`PartitionSchema::encode_range_key`]); empty bytes are unbounded, and an empty
    /// list means one unbounded range.
    pub range_bounds: Vec<(Vec<u8>, Vec<u8>)>,
    /// Replicas per tablet (an odd number: 1, 3, 5).
    pub replicas: u32,
    /// Succeed (returning the existing table's id) if the table exists already.
    pub if_not_exists: bool,
    /// The user to own the table, for a Cairn server acting for one (the SQL front
    /// ends); `None`: the caller (a token's user).
    pub owner: Option<String>,
    /// Subspaces for hyperspace search ([`Client::search`](crate::Client::search)): each
    /// keeps a copy of every row partitioned by its attributes' values.
    pub subspaces: Vec<SubspaceSpec>,
    /// The colocation group to join ([`Colocation::Default`]: that of the tables
    /// hashed alike).
    pub colocation: Colocation,
}

impl CreateTableSpec {
    /// A spec for one unpartitioned tablet with 3 replicas; adjust with the builder
    /// methods.
    pub fn new(name: impl Into<String>, schema: Schema) -> Self {
        CreateTableSpec {
            name: name.into(),
            schema,
            partition: PartitionSchema::default(),
            range_bounds: vec![],
            replicas: 3,
            if_not_exists: false,
            owner: None,
            subspaces: vec![],
            colocation: Colocation::Default,
        }
    }
    /// Sets the colocation group to join: `Colocation::With("orders".into())` places
    /// bucket *i* on the servers of `orders`' bucket *i*, `Colocation::None` opts out.
    pub fn colocation(mut self, c: Colocation) -> Self {
        self.colocation = c;
        self
    }
    /// Adds a subspace (HyperDex's search on secondary attributes): e.g.
    /// `SubspaceSpec::new(&["city", "age"])`.
    pub fn subspace(mut self, s: SubspaceSpec) -> Self {
        self.subspaces.push(s);
        self
    }
    /// Sets the owner (honoured from Cairn servers only).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
    /// Sets the partition schema.
    pub fn partition(mut self, p: PartitionSchema) -> Self {
        self.partition = p;
        self
    }
    /// Sets the range partitions (`[lower, upper)` encoded range keys).
    pub fn range_bounds(mut self, bounds: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        self.range_bounds = bounds;
        self
    }
    /// Sets the replication factor.
    pub fn replicas(mut self, n: u32) -> Self {
        self.replicas = n;
        self
    }
    /// Accepts an existing table of the same name.
    pub fn if_not_exists(mut self, yes: bool) -> Self {
        self.if_not_exists = yes;
        self
    }
}

/// An open table: its id, schema and partitioning as of `open_table`. Cheap to clone.
///
/// The schema is not refreshed: after an `alter_table`, open the table again.
#[derive(Clone, Debug)]
pub struct Table {
    /// The table's id (stable for its life; a recreated table gets a new one).
    pub id: String,
    /// The table's name.
    pub name: String,
    /// The schema.
    pub schema: Arc<Schema>,
    /// How rows map to tablets.
    pub partition_schema: PartitionSchema,
    /// Replication factor.
    pub replicas: u32,
    /// The table's subspaces, each with the hidden table holding its regions.
    pub subspaces: Vec<SubspaceEntry>,
    /// The colocation group the table is in, if any (see [`Colocation`]).
    pub colocation: Option<String>,
}

impl Table {
    /// The subspaces searches may use: all but those still being built
    /// (`ALTER TABLE … ADD SUBSPACE` before its backfill is done).
    pub fn searchable_subspaces(&self) -> Vec<&SubspaceEntry> {
        self.subspaces.iter().filter(|s| !s.building).collect()
    }

    /// Builds a handle from a `GetTable` response.
    pub(crate) fn from_proto(resp: cairn_proto::GetTableResponse) -> Result<Table> {
        let meta: SchemaMeta =
            serde_json::from_slice(&resp.schema_json).map_err(|e| ClientError::Decode {
                what: "table schema",
                detail: e.to_string(),
            })?;
        let schema = meta.to_schema()?;
        let partition_schema: PartitionSchema = serde_json::from_slice(&resp.partition_schema_json)
            .map_err(|e| ClientError::Decode {
                what: "partition schema",
                detail: e.to_string(),
            })?;
        let subspaces: Vec<SubspaceEntry> = if resp.subspaces_json.is_empty() {
            vec![]
        } else {
            serde_json::from_slice(&resp.subspaces_json).map_err(|e| ClientError::Decode {
                what: "table subspaces",
                detail: e.to_string(),
            })?
        };
        Ok(Table {
            id: resp.table_id,
            name: resp.name,
            schema: Arc::new(schema),
            partition_schema,
            replicas: resp.replicas,
            subspaces,
            colocation: Some(resp.colocation_group).filter(|g| !g.is_empty()),
        })
    }

    /// The handle as bytes, for another process to rebuild with
    /// [`Table::from_bytes`] without asking the master (a query fragment shipped to a
    /// worker carries the tables it reads this way, at the schema it was planned at).
    pub fn to_bytes(&self) -> Vec<u8> {
        let wire = TableWire {
            id: &self.id,
            name: &self.name,
            schema: SchemaMeta::from_schema(&self.schema),
            partition_schema: &self.partition_schema,
            replicas: self.replicas,
            subspaces: &self.subspaces,
            colocation: &self.colocation,
        };
        // Plain data: serializing it cannot fail.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// A handle from [`Table::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Table> {
        #[derive(serde::Deserialize)]
        struct Owned {
            id: String,
            name: String,
            schema: SchemaMeta,
            partition_schema: PartitionSchema,
            replicas: u32,
            subspaces: Vec<SubspaceEntry>,
            #[serde(default)]
            colocation: Option<String>,
        }
        let w: Owned = serde_json::from_slice(bytes).map_err(|e| ClientError::Decode {
            what: "table handle",
            detail: e.to_string(),
        })?;
        Ok(Table {
            id: w.id,
            name: w.name,
            schema: Arc::new(w.schema.to_schema()?),
            partition_schema: w.partition_schema,
            replicas: w.replicas,
            subspaces: w.subspaces,
            colocation: w.colocation,
        })
    }

    /// The partition key of a row given as one optional value per schema column (only
    /// the key columns matter; they must be present).
    pub fn partition_key(&self, values: &[Option<Value>]) -> Result<Vec<u8>> {
        if values.len() != self.schema.num_columns() {
            return Err(ClientError::InvalidArgument(format!(
                "row has {} cells but table '{}' has {} columns",
                values.len(),
                self.name,
                self.schema.num_columns()
            )));
        }
        let row: Vec<Value> = values
            .iter()
            .map(|v| v.clone().unwrap_or(Value::Null))
            .collect();
        Ok(self.partition_schema.partition_key(&self.schema, &row)?)
    }
}

/// The serialized form of a [`Table`].
#[derive(serde::Serialize)]
struct TableWire<'a> {
    id: &'a str,
    name: &'a str,
    schema: SchemaMeta,
    partition_schema: &'a PartitionSchema,
    replicas: u32,
    subspaces: &'a [SubspaceEntry],
    colocation: &'a Option<String>,
}

/// One replica of a tablet.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplicaInfo {
    /// The tablet server's node id.
    pub node_id: u64,
    /// Its RPC address (`host:port`).
    pub addr: String,
    /// Whether the master believes it leads the tablet's Raft group.
    pub leader: bool,
    /// Voter (false: a learner being caught up).
    pub voter: bool,
    /// Whether its server heartbeats the master.
    pub live: bool,
}

/// Where a tablet lives: its partition and replicas.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TabletLocationInfo {
    /// The tablet's id.
    pub tablet_id: String,
    /// The slice of the partition-key space it owns.
    pub partition: Partition,
    /// Its replicas.
    pub replicas: Vec<ReplicaInfo>,
}

impl TabletLocationInfo {
    /// The address of the replica believed to lead, if any.
    pub fn leader_addr(&self) -> Option<&str> {
        self.replicas
            .iter()
            .find(|r| r.leader)
            .map(|r| r.addr.as_str())
    }

    /// Replica addresses in the order reads try them: the leader, then other live
    /// voters, other live replicas, and last the ones the master thinks are down.
    pub fn read_order(&self) -> Vec<&str> {
        let mut rs: Vec<&ReplicaInfo> = self.replicas.iter().collect();
        rs.sort_by_key(|r| (!r.leader, !r.live, !r.voter));
        rs.into_iter().map(|r| r.addr.as_str()).collect()
    }
}

/// The first bytes of every partition key a partition holds: its hash buckets, then its
/// range lower bound. Sorting partitions by it gives partition order.
pub(crate) fn partition_start_key(p: &Partition) -> Vec<u8> {
    let mut k = Vec::with_capacity(p.hash_buckets.len() * 4 + p.range_lower.len());
    for b in &p.hash_buckets {
        k.extend_from_slice(&b.to_be_bytes());
    }
    k.extend_from_slice(&p.range_lower);
    k
}

/// Sorts tablets into partition order (hash buckets, then range).
pub(crate) fn sort_locations(locs: &mut [TabletLocationInfo]) {
    locs.sort_by_cached_key(|t| partition_start_key(&t.partition));
}

/// The tablet whose partition holds `partition_key`. Binary search when `locations` is
/// in partition order (as `Client::table_locations` returns it), else a linear scan.
pub fn locate_tablet<'a>(
    locations: &'a [TabletLocationInfo],
    partition_key: &[u8],
) -> Option<&'a TabletLocationInfo> {
    let i = locations
        .partition_point(|t| partition_start_key(&t.partition).as_slice() <= partition_key);
    if i > 0 && locations[i - 1].partition.contains(partition_key) {
        return Some(&locations[i - 1]);
    }
    locations
        .iter()
        .find(|t| t.partition.contains(partition_key))
}

/// Converts a `GetTableLocations` response into tablets in partition order.
pub(crate) fn locations_from_proto(
    resp: cairn_proto::GetTableLocationsResponse,
) -> Result<Vec<TabletLocationInfo>> {
    let mut out = Vec::with_capacity(resp.tablets.len());
    for t in resp.tablets {
        let partition: Partition =
            serde_json::from_slice(&t.partition_json).map_err(|e| ClientError::Decode {
                what: "tablet partition",
                detail: format!("tablet {}: {e}", t.tablet_id),
            })?;
        out.push(TabletLocationInfo {
            tablet_id: t.tablet_id,
            partition,
            replicas: t
                .replicas
                .into_iter()
                .map(|r| ReplicaInfo {
                    node_id: r.node_id,
                    addr: normalize_addr(&r.addr),
                    leader: r.leader,
                    voter: r.voter,
                    live: r.live,
                })
                .collect(),
        });
    }
    sort_locations(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::{ColumnSpec, DataType, HashLevel};

    fn replica(node: u64, leader: bool, live: bool) -> ReplicaInfo {
        ReplicaInfo {
            node_id: node,
            addr: format!("ts{node}:7050"),
            leader,
            voter: true,
            live,
        }
    }

    /// host, metric, ts, value; hash(host) x hash(metric) x range(ts).
    fn metrics_table() -> Table {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("host", DataType::String),
                ColumnSpec::new("metric", DataType::String),
                ColumnSpec::new("ts", DataType::Int64),
                ColumnSpec::new("value", DataType::Double).nullable(),
            ],
            &["host", "metric", "ts"],
        )
        .unwrap();
        let ps = PartitionSchema {
            hash_levels: vec![
                HashLevel {
                    columns: vec!["host".into()],
                    num_buckets: 4,
                    seed: 7,
                },
                HashLevel {
                    columns: vec!["metric".into()],
                    num_buckets: 3,
                    seed: 0,
                },
            ],
            range_columns: vec!["ts".into()],
        };
        ps.validate(&schema).unwrap();
        Table {
            id: "tid".into(),
            name: "metrics".into(),
            schema: Arc::new(schema),
            partition_schema: ps,
            replicas: 3,
            subspaces: vec![],
            colocation: None,
        }
    }

    fn tablets_for(
        table: &Table,
        bounds: &[(Option<i64>, Option<i64>)],
    ) -> Vec<TabletLocationInfo> {
        let enc = |x: &Option<i64>| {
            x.map(|v| {
                table
                    .partition_schema
                    .encode_range_key(&[Value::Int64(v)])
                    .unwrap()
            })
            .unwrap_or_default()
        };
        let bounds: Vec<(Vec<u8>, Vec<u8>)> =
            bounds.iter().map(|(l, u)| (enc(l), enc(u))).collect();
        let parts = table.partition_schema.create_partitions(&bounds).unwrap();
        // Hand them out in a scrambled order, as a master might.
        let n = parts.len();
        let mut locs: Vec<TabletLocationInfo> = parts
            .into_iter()
            .enumerate()
            .map(|(i, p)| TabletLocationInfo {
                tablet_id: format!("tablet-{i}"),
                partition: p,
                replicas: vec![replica(i as u64 % 3, true, true)],
            })
            .collect();
        for i in 0..n {
            locs.swap(i, (i * 7 + 3) % n);
        }
        locs
    }

    #[test]
    fn rows_route_to_the_one_tablet_that_owns_them() {
        let table = metrics_table();
        let mut locs = tablets_for(
            &table,
            &[(None, Some(0)), (Some(0), Some(1000)), (Some(1000), None)],
        );
        assert_eq!(locs.len(), 4 * 3 * 3);
        let scrambled = locs.clone();
        sort_locations(&mut locs);
        // Partition order: hash buckets, then range.
        for w in locs.windows(2) {
            let (a, b) = (&w[0].partition, &w[1].partition);
            assert!(
                a.hash_buckets < b.hash_buckets
                    || a.hash_buckets == b.hash_buckets && a.range_lower < b.range_lower
            );
        }
        let mut hit = std::collections::HashSet::new();
        for h in 0..20 {
            for m in (0..10).map(|i| format!("metric{i}")) {
                for ts in [i64::MIN, -5, -1, 0, 1, 999, 1000, 5000, i64::MAX] {
                    let values = vec![
                        Some(Value::String(format!("host{h}"))),
                        Some(Value::String(m.clone())),
                        Some(Value::Int64(ts)),
                        None,
                    ];
                    let pkey = table.partition_key(&values).unwrap();
                    let owners: Vec<&str> = locs
                        .iter()
                        .filter(|t| t.partition.contains(&pkey))
                        .map(|t| t.tablet_id.as_str())
                        .collect();
                    assert_eq!(owners.len(), 1, "exactly one owner");
                    let found = locate_tablet(&locs, &pkey).unwrap();
                    assert_eq!(found.tablet_id, owners[0]);
                    // Unsorted input falls back to a linear scan.
                    assert_eq!(
                        locate_tablet(&scrambled, &pkey).unwrap().tablet_id,
                        owners[0]
                    );
                    // The owner's buckets are the row's hash buckets, its range holds ts.
                    let row: Vec<Value> = values
                        .iter()
                        .map(|v| v.clone().unwrap_or(Value::Null))
                        .collect();
                    let b0 = table
                        .partition_schema
                        .hash_bucket(&table.schema, 0, &row)
                        .unwrap();
                    let b1 = table
                        .partition_schema
                        .hash_bucket(&table.schema, 1, &row)
                        .unwrap();
                    assert_eq!(found.partition.hash_buckets, vec![b0, b1]);
                    let range_ok = match ts {
                        t if t < 0 => found.partition.range_lower.is_empty(),
                        t if t < 1000 => {
                            !found.partition.range_lower.is_empty()
                                && !found.partition.range_upper.is_empty()
                        }
                        _ => found.partition.range_upper.is_empty(),
                    };
                    assert!(range_ok, "ts {ts} in {:?}", found.partition);
                    hit.insert(found.tablet_id.clone());
                }
            }
        }
        assert!(
            hit.len() > 30,
            "rows spread over the tablets ({} hit)",
            hit.len()
        );
    }

    #[test]
    fn rows_outside_every_range_have_no_tablet() {
        let table = metrics_table();
        let mut locs = tablets_for(&table, &[(Some(0), Some(100)), (Some(200), Some(300))]);
        sort_locations(&mut locs);
        let key = |ts: i64| {
            table
                .partition_key(&[
                    Some(Value::String("h".into())),
                    Some(Value::String("m".into())),
                    Some(Value::Int64(ts)),
                    None,
                ])
                .unwrap()
        };
        assert!(locate_tablet(&locs, &key(50)).is_some());
        assert!(locate_tablet(&locs, &key(250)).is_some());
        assert!(locate_tablet(&locs, &key(150)).is_none());
        assert!(locate_tablet(&locs, &key(-1)).is_none());
        assert!(locate_tablet(&locs, &key(300)).is_none());
    }

    #[test]
    fn read_order_prefers_leader_then_live() {
        let t = TabletLocationInfo {
            tablet_id: "t".into(),
            partition: Partition {
                hash_buckets: vec![],
                range_lower: vec![],
                range_upper: vec![],
            },
            replicas: vec![
                replica(1, false, false),
                replica(2, false, true),
                replica(3, true, true),
            ],
        };
        assert_eq!(t.read_order(), vec!["ts3:7050", "ts2:7050", "ts1:7050"]);
        assert_eq!(t.leader_addr(), Some("ts3:7050"));
    }

    #[test]
    fn partition_key_needs_full_width_rows() {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::Int64).nullable(),
            ],
            &["k"],
        )
        .unwrap();
        let t = Table {
            id: "id".into(),
            name: "t".into(),
            schema: Arc::new(schema),
            partition_schema: PartitionSchema {
                hash_levels: vec![HashLevel {
                    columns: vec!["k".into()],
                    num_buckets: 2,
                    seed: 0,
                }],
                range_columns: vec![],
            },
            replicas: 1,
            subspaces: vec![],
            colocation: None,
        };
        assert!(t.partition_key(&[Some(Value::Int64(1)), None]).is_ok());
        assert!(t.partition_key(&[Some(Value::Int64(1))]).is_err());
        assert!(t.partition_key(&[None, None]).is_err());
    }
}
