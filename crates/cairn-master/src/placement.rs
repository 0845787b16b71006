//! Where the master puts a new table's tablets, and colocation groups.
//!
//! An ordinary table's tablets go to the least-loaded live tablet servers, one tablet
//! at a time, so the cluster fills evenly.
//!
//! A table hashed on one level, with no range partitioning, has one tablet per bucket,
//! and the SQL layer knows which bucket holds a key: two such tables hashed alike (the
//! same column types, bucket count and seed) keep equal keys in equal buckets, so a
//! join or an aggregation on those columns can run bucket by bucket with no shuffle.
//! That only pays if bucket *i* of both tables lives on the same servers; otherwise
//! one side crosses the network anyway. A **colocation group** is a set of such tables
//! (HRDBMS, "Hash partitioning and co-location", keeps related tables' partitions on
//! the same node for the same reason):
//! - By default a colocatable table joins the group of every table hashed alike with
//!   the same replication factor; `colocate_with = 'none'` keeps it out, and
//!   `colocate_with = 'orders'` asks for `orders`' group and fails when the two cannot
//!   share one.
//! - The group's first table is laid out round-robin: bucket *i*'s replicas on
//!   servers *i*, *i + 1*, … of the live servers ordered by load. Buckets *i* and
//!   *i + N* then share servers, which is how the distributed planner deals buckets to
//!   its *N* tasks (task *t* takes buckets *t*, *t + N*, …).
//! - Every later table follows the group: bucket *i* on the servers that hold bucket
//!   *i* of one of its tables now, with the least-loaded servers standing in
//!   for any that are not live.
//! - Re-replication keeps the group together: a bucket's new replica goes first to a
//!   server holding the same bucket of another table of the group
//!   ([`sibling_servers`]).

use std::collections::{HashMap, HashSet};

use cairn_common::{Colocation, Partition, PartitionSchema, Schema};

use crate::catalog::{Catalog, Placement, TableEntry, TableState, TabletEntry};
use crate::error::{MasterError, Result};

/// A live tablet server as the master places tablets: (node id, address, replicas it
/// holds).
pub type LiveServer = (u64, String, usize);

/// The implicit colocation group of a table: its hash identity and replication factor,
/// written for people (`describe` shows it). `None`: the table cannot be colocated
/// (not exactly one hash level, or range partitioned).
pub fn group_key(schema: &Schema, ps: &PartitionSchema, replicas: u32) -> Option<String> {
    let [level] = ps.hash_levels.as_slice() else {
        return None;
    };
    if !ps.range_columns.is_empty() {
        return None;
    }
    let types: Option<Vec<String>> = level
        .columns
        .iter()
        .map(|c| {
            schema
                .index_of(c)
                .map(|i| schema.column(i).data_type.to_string())
                .ok()
        })
        .collect();
    Some(format!(
        "hash({}) x{} seed {} replicas {replicas}",
        types?.join(", "),
        level.num_buckets,
        level.seed
    ))
}

/// The group a new table joins under `wanted`: `Ok(None)` for none.
///
/// REQUIRES: `key` is [`group_key`] of the new table.
pub fn choose_group(
    c: &Catalog,
    key: Option<String>,
    wanted: &Colocation,
) -> Result<Option<String>> {
    match wanted {
        Colocation::None => Ok(None),
        Colocation::Default => Ok(key),
        Colocation::With(other) => {
            let Some(t) = c
                .table_by_name(other)
                .filter(|t| t.state != TableState::Deleting && t.subspace_of.is_none())
            else {
                return Err(MasterError::InvalidArgument(format!(
                    "colocate_with = '{other}': there is no table '{other}'"
                )));
            };
            let Some(mine) = key else {
                return Err(MasterError::InvalidArgument(format!(
                    "colocate_with = '{other}': only a table hashed on one level, with no \
                     range partitioning, can be colocated; write PARTITION BY HASH (…) \
                     PARTITIONS n without ranges"
                )));
            };
            match &t.colocation {
                Some(g) if *g == mine => Ok(Some(mine)),
                Some(g) => Err(MasterError::InvalidArgument(format!(
                    "colocate_with = '{other}': '{other}' is partitioned {g}, this table \
                     {mine}; colocated tables need the same hash column types, bucket \
                     count, seed and replicas"
                ))),
                None => Err(MasterError::InvalidArgument(format!(
                    "colocate_with = '{other}': '{other}' is in no colocation group (it \
                     was created with colocate_with = 'none' or cannot be colocated)"
                ))),
            }
        }
    }
}

/// Per bucket, the replicas of bucket *i* of a live table of `group` (the one with the
/// lowest id, so the choice is stable): where a new table of the group follows.
pub fn group_layout(c: &Catalog, group: &str, buckets: usize) -> Option<Vec<Vec<Placement>>> {
    let t = c
        .tables
        .values()
        .filter(|t| {
            t.colocation.as_deref() == Some(group)
                && t.state != TableState::Deleting
                && t.tablets.len() == buckets
        })
        .min_by(|a, b| a.id.cmp(&b.id))?;
    t.tablets
        .iter()
        .map(|id| c.tablets.get(id).map(|e| e.replicas.clone()))
        .collect()
}

/// How [`place_tablets`] lays tablets out.
#[derive(Debug, Clone, Copy)]
pub enum Layout<'a> {
    /// Each tablet on the least-loaded servers (random among equals).
    Spread,
    /// Tablet *i* on servers *i*, *i + 1*, … of the servers ordered by load: a
    /// colocation group's first table.
    RoundRobin,
    /// Tablet *i* on the servers of `layout[i]` that are live, the least-loaded
    /// servers standing in for the others: a later table of a group.
    Follow(&'a [Vec<Placement>]),
}

/// Places one tablet per partition of a new table: `replicas` distinct live servers
/// each, laid out as `layout` says.
///
/// REQUIRES: `live` holds at least `replicas` servers (the caller refuses otherwise).
pub fn place_tablets(
    table_id: &str,
    partitions: Vec<Partition>,
    replicas: u32,
    live: &[LiveServer],
    layout: Layout<'_>,
) -> Vec<TabletEntry> {
    let replicas = replicas as usize;
    let mut load: HashMap<u64, usize> = live.iter().map(|(id, _, l)| (*id, *l)).collect();
    let mut ordered: Vec<&LiveServer> = live.iter().collect();
    ordered.sort_by_key(|(id, _, l)| (*l, *id));
    let placement = |s: &LiveServer| Placement {
        node_id: s.0,
        addr: s.1.clone(),
    };
    let mut tablets = Vec::with_capacity(partitions.len());
    for (i, p) in partitions.into_iter().enumerate() {
        let mut chosen: Vec<Placement> = match layout {
            Layout::Spread => vec![],
            Layout::RoundRobin => (0..replicas.min(ordered.len()))
                .map(|r| placement(ordered[(i + r) % ordered.len()]))
                .collect(),
            Layout::Follow(layout) => layout
                .get(i)
                .into_iter()
                .flatten()
                .filter_map(|want| live.iter().find(|s| s.0 == want.node_id))
                .take(replicas)
                .map(placement)
                .collect(),
        };
        if chosen.len() < replicas {
            let mut cands: Vec<&LiveServer> = live
                .iter()
                .filter(|s| !chosen.iter().any(|c| c.node_id == s.0))
                .collect();
            cands.sort_by_key(|(id, _, _)| (load[id], rand::random::<u32>()));
            let missing = replicas - chosen.len();
            chosen.extend(cands.into_iter().take(missing).map(placement));
        }
        for c in &chosen {
            *load.entry(c.node_id).or_default() += 1;
        }
        tablets.push(TabletEntry {
            id: crate::service::new_id(),
            table_id: table_id.to_string(),
            partition: p,
            replicas: chosen,
        });
    }
    tablets
}

/// The servers holding the same bucket as `tablet` of `table` in the other tables of
/// its colocation group, or getting a new replica of it (`pending`: tablets being
/// re-replicated, each with its new replica's server): where a new replica of
/// `tablet` keeps the group together.
pub fn sibling_servers(
    c: &Catalog,
    table: &TableEntry,
    tablet: &str,
    pending: &HashMap<String, Option<u64>>,
) -> HashSet<u64> {
    let (Some(group), Some(i)) = (
        &table.colocation,
        table.tablets.iter().position(|t| t == tablet),
    ) else {
        return HashSet::new();
    };
    let mut out = HashSet::new();
    for t in c.tables.values() {
        if t.id == table.id
            || t.colocation.as_ref() != Some(group)
            || t.tablets.len() != table.tablets.len()
        {
            continue;
        }
        let Some(e) = c.tablets.get(&t.tablets[i]) else {
            continue;
        };
        out.extend(e.replicas.iter().map(|p| p.node_id));
        out.extend(pending.get(&e.id).copied().flatten());
    }
    out
}

#[cfg(test)]
mod tests {
    use cairn_common::{ColumnSpec, DataType, HashLevel};

    use super::*;

    fn servers(n: u64) -> Vec<LiveServer> {
        (1..=n).map(|i| (i, format!("ts{i}:1"), 0)).collect()
    }

    fn hashed(buckets: u32) -> (Schema, PartitionSchema) {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String),
            ],
            &["k"],
        )
        .unwrap();
        let ps = PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["k".into()],
                num_buckets: buckets,
                seed: 0,
            }],
            range_columns: vec![],
        };
        (schema, ps)
    }

    /// One tablet per bucket of `ps` for table `id`.
    fn place(
        id: &str,
        ps: &PartitionSchema,
        replicas: u32,
        live: &[LiveServer],
        layout: Layout<'_>,
    ) -> Vec<TabletEntry> {
        place_tablets(
            id,
            ps.create_partitions(&[]).unwrap(),
            replicas,
            live,
            layout,
        )
    }

    fn nodes(t: &TabletEntry) -> Vec<u64> {
        t.replicas.iter().map(|p| p.node_id).collect()
    }

    fn table(id: &str, name: &str, group: Option<&str>, tablets: &[TabletEntry]) -> TableEntry {
        let (schema, ps) = hashed(tablets.len() as u32);
        TableEntry {
            id: id.into(),
            name: name.into(),
            schema: cairn_common::SchemaMeta::from_schema(&schema),
            partition_schema: ps,
            replicas: 1,
            state: TableState::Running,
            tablets: tablets.iter().map(|t| t.id.clone()).collect(),
            version: 0,
            pending_steps: vec![],
            owner: "ann".into(),
            next_auto_id: 1,
            subspaces: vec![],
            subspace_of: None,
            subspaces_version: 0,
            dropped_regions: vec![],
            colocation: group.map(str::to_string),
        }
    }

    fn catalog(tables: &[(TableEntry, Vec<TabletEntry>)]) -> Catalog {
        let mut c = Catalog::default();
        for (t, ts) in tables {
            c.tables.insert(t.id.clone(), t.clone());
            for e in ts {
                c.tablets.insert(e.id.clone(), e.clone());
            }
        }
        c
    }

    #[test]
    fn only_one_hash_level_without_ranges_is_colocatable() {
        let (schema, mut ps) = hashed(8);
        assert_eq!(
            group_key(&schema, &ps, 3).as_deref(),
            Some("hash(INT64) x8 seed 0 replicas 3")
        );
        ps.range_columns = vec!["k".into()];
        assert_eq!(group_key(&schema, &ps, 3), None);
        ps.range_columns.clear();
        ps.hash_levels.push(ps.hash_levels[0].clone());
        assert_eq!(group_key(&schema, &ps, 3), None);
        assert_eq!(group_key(&schema, &PartitionSchema::default(), 3), None);
    }

    #[test]
    fn round_robin_puts_bucket_i_and_i_plus_n_together() {
        let (_, ps) = hashed(8);
        let parts = ps.create_partitions(&[]).unwrap();
        let ts = place_tablets("t", parts, 2, &servers(4), Layout::RoundRobin);
        for i in 0..4 {
            assert_eq!(nodes(&ts[i]), nodes(&ts[i + 4]));
        }
        let firsts: HashSet<u64> = ts[..4].iter().map(|t| t.replicas[0].node_id).collect();
        assert_eq!(firsts.len(), 4, "each server leads one bucket in four");
        assert!(ts.iter().all(|t| nodes(t)[0] != nodes(t)[1]));
    }

    #[test]
    fn a_later_table_follows_the_group_and_replaces_dead_servers() {
        let (_, ps) = hashed(8);
        let first = place("a", &ps, 1, &servers(4), Layout::RoundRobin);
        let group = "hash(INT64) x8 seed 0 replicas 1";
        let c = catalog(&[(table("a", "a", Some(group), &first), first.clone())]);
        let layout = group_layout(&c, group, 8).unwrap();
        let second = place("b", &ps, 1, &servers(4), Layout::Follow(&layout));
        for i in 0..8 {
            assert_eq!(nodes(&first[i]), nodes(&second[i]), "bucket {i}");
        }
        // Server 2 is gone: its buckets go elsewhere, the others stay.
        let live: Vec<LiveServer> = servers(4).into_iter().filter(|s| s.0 != 2).collect();
        let third = place("c", &ps, 1, &live, Layout::Follow(&layout));
        for i in 0..8 {
            if nodes(&first[i]) == [2] {
                assert_ne!(nodes(&third[i]), [2]);
            } else {
                assert_eq!(nodes(&first[i]), nodes(&third[i]), "bucket {i}");
            }
        }
        // Another bucket count is another group.
        assert!(group_layout(&c, group, 4).is_none());
    }

    #[test]
    fn colocate_with_names_a_table_hashed_alike() {
        let (schema, ps) = hashed(8);
        let tablets = place("a", &ps, 1, &servers(2), Layout::RoundRobin);
        let key = group_key(&schema, &ps, 1);
        let mut c = catalog(&[(
            table("a", "orders", key.as_deref(), &tablets),
            tablets.clone(),
        )]);
        let with = Colocation::With("orders".into());
        assert_eq!(choose_group(&c, key.clone(), &with).unwrap(), key);
        assert_eq!(
            choose_group(&c, key.clone(), &Colocation::None).unwrap(),
            None
        );
        let e = choose_group(&c, group_key(&schema, &hashed(4).1, 1), &with).unwrap_err();
        assert!(
            e.to_string().contains("x8") && e.to_string().contains("x4"),
            "{e}"
        );
        let e = choose_group(&c, None, &with).unwrap_err();
        assert!(e.to_string().contains("one level"), "{e}");
        let e = choose_group(&c, key.clone(), &Colocation::With("nope".into())).unwrap_err();
        assert!(e.to_string().contains("no table 'nope'"), "{e}");
        c.tables.get_mut("a").unwrap().colocation = None;
        let e = choose_group(&c, key, &with).unwrap_err();
        assert!(e.to_string().contains("no colocation group"), "{e}");
    }

    #[test]
    fn siblings_are_the_same_bucket_of_the_group() {
        let (_, ps) = hashed(2);
        let a = place("a", &ps, 1, &servers(2), Layout::RoundRobin);
        let b = place("b", &ps, 1, &servers(2), Layout::RoundRobin);
        let ta = table("a", "a", Some("g"), &a);
        let tb = table("b", "b", Some("g"), &b);
        let lone = table("c", "c", None, &b);
        let c = catalog(&[(ta.clone(), a.clone()), (tb, b.clone())]);
        let none = HashMap::new();
        assert_eq!(
            sibling_servers(&c, &ta, &a[1].id, &none),
            nodes(&b[1]).into_iter().collect()
        );
        assert!(sibling_servers(&c, &lone, &b[1].id, &none).is_empty());
        // A sibling getting a new replica counts its new server.
        let pending = HashMap::from([(b[1].id.clone(), Some(9))]);
        assert!(sibling_servers(&c, &ta, &a[1].id, &pending).contains(&9));
    }
}
