//! The ring: where a key lives.
//!
//! Voldemort's routing (the Voldemort read-only paper, §3.1.2) splits the hash ring
//! into a fixed number of equal partitions and assigns each to a node. A key hashes
//! (MD5) to one point of the ring; the partition holding that point is its *primary*
//! partition. Its [`PreferenceList`] is the primary partition's node, then — walking
//! clockwise — the next partitions whose nodes are not in the list yet, until it has
//! `replication` entries. With zones, the walk first takes only nodes of zones not yet
//! in the list; once every zone is present (or if there are fewer zones than
//! replicas) it takes any new node.
//!
//! Files follow the same vocabulary (§4.1): the tuples a node stores as replica `r` of
//! primary partition `p` form the *bucket* `p_r`, split by the key's hash into
//! `chunks` chunk files `p_r_c.index` / `p_r_c.data`.
//!
//! Positions on the ring come from the key's MD5 ([`KeyHash`]): its first 8 bytes,
//! read big-endian, are both the ring position (partition = position × P / 2^64, so
//! partitions are equal ranges) and the index entry; bytes 8..12 pick the chunk, so
//! chunks split a partition evenly whatever its range.

use std::collections::{BTreeMap, BTreeSet};

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use crate::error::{ReadOnlyError, Result};

/// A node of the ring. The master maps tablet servers to ring node ids.
pub type NodeId = u32;

/// The MD5 of an encoded key, the only hash the format uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyHash(pub [u8; 16]);

impl KeyHash {
    /// Hashes an encoded key.
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(Md5::digest(key).into())
    }

    /// The first 8 bytes, big-endian: the ring position and the index entry's key.
    pub fn prefix(&self) -> u64 {
        u64::from_be_bytes([
            self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5], self.0[6], self.0[7],
        ])
    }

    /// Bytes 8..12, big-endian: what picks the chunk within a bucket.
    fn chunk_selector(&self) -> u32 {
        u32::from_be_bytes([self.0[8], self.0[9], self.0[10], self.0[11]])
    }
}

/// One bucket's chunk: the tuples a node holds as replica `replica` of primary
/// partition `partition`, chunk `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChunkId {
    /// The key's primary partition.
    pub partition: u32,
    /// The position in the key's preference list (0: the primary).
    pub replica: u32,
    /// The chunk within the bucket.
    pub chunk: u32,
}

impl ChunkId {
    /// The file name stem, `partition_replica_chunk`.
    pub fn stem(&self) -> String {
        format!("{}_{}_{}", self.partition, self.replica, self.chunk)
    }
}

/// The replicas of one primary partition, in preference order: `(partition, node)`
/// pairs, the primary first.
pub type PreferenceList = Vec<(u32, NodeId)>;

/// How a store is spread: the ring (partition → node), the zone of each node, the
/// replication factor and the chunks per bucket. Every node's `.metadata` carries it,
/// so a store built for one ring is never served by another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreLayout {
    /// `partition_nodes[p]` is the node holding partition `p`.
    pub partition_nodes: Vec<NodeId>,
    /// The zone of each node; empty when zones are not used.
    #[serde(default)]
    pub zones: BTreeMap<NodeId, String>,
    /// Copies of every tuple, on distinct nodes.
    pub replication: u32,
    /// Chunk files per bucket.
    pub chunks: u32,
}

impl StoreLayout {
    /// The default ring over `nodes` nodes: partition `p` on node `p mod nodes`.
    pub fn round_robin(
        nodes: u32,
        partitions: u32,
        replication: u32,
        chunks: u32,
    ) -> Result<StoreLayout> {
        if nodes == 0 {
            return Err(ReadOnlyError::InvalidLayout(
                "a store needs at least one node".into(),
            ));
        }
        let layout = StoreLayout {
            partition_nodes: (0..partitions).map(|p| p % nodes).collect(),
            zones: BTreeMap::new(),
            replication,
            chunks,
        };
        layout.validate()?;
        Ok(layout)
    }

    /// Sets the zone of every node, `zones[i]` for node `i`.
    pub fn with_zones(mut self, zones: &[String]) -> Result<StoreLayout> {
        self.zones = zones
            .iter()
            .enumerate()
            .map(|(i, z)| (i as NodeId, z.clone()))
            .collect();
        self.validate()?;
        Ok(self)
    }

    /// Checks the layout can place every tuple: partitions exist, the replication
    /// factor is at most the number of nodes, zones (if any) name every node.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ReadOnlyError::InvalidLayout(m));
        if self.partition_nodes.is_empty() {
            return bad("the ring needs at least one partition".into());
        }
        if self.chunks == 0 {
            return bad("a bucket needs at least one chunk".into());
        }
        let nodes = self.nodes();
        if self.replication == 0 || self.replication as usize > nodes.len() {
            return bad(format!(
                "replication factor {} needs between 1 and {} (the number of nodes on the ring)",
                self.replication,
                nodes.len()
            ));
        }
        if !self.zones.is_empty()
            && let Some(n) = nodes.iter().find(|n| !self.zones.contains_key(n))
        {
            return bad(format!(
                "node {n} has no zone: give every node a zone or none"
            ));
        }
        Ok(())
    }

    /// The nodes on the ring, ascending.
    pub fn nodes(&self) -> BTreeSet<NodeId> {
        self.partition_nodes.iter().copied().collect()
    }

    /// The number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partition_nodes.len() as u32
    }

    /// The primary partition of a key.
    pub fn partition_of(&self, hash: &KeyHash) -> u32 {
        ((hash.prefix() as u128 * self.partitions() as u128) >> 64) as u32
    }

    /// The chunk (within its bucket) of a key.
    pub fn chunk_of(&self, hash: &KeyHash) -> u32 {
        hash.chunk_selector() % self.chunks
    }

    /// The preference list of primary partition `primary`: `replication` distinct
    /// nodes, in distinct zones while unused zones remain (module docs).
    pub fn preference_list(&self, primary: u32) -> PreferenceList {
        let p = self.partitions();
        let want = self.replication as usize;
        let zone_count = self.zones.values().collect::<BTreeSet<_>>().len();
        let mut list: PreferenceList = Vec::with_capacity(want);
        let mut used_zones = BTreeSet::new();
        // Pass 0 takes only new zones (when zones are in use); pass 1 any new node.
        for pass in 0..2 {
            if pass == 0 && zone_count == 0 {
                continue;
            }
            for step in 0..p {
                if list.len() == want || (pass == 0 && used_zones.len() == zone_count) {
                    break;
                }
                let part = (primary + step) % p;
                let node = self.partition_nodes[part as usize];
                if list.iter().any(|&(_, n)| n == node) {
                    continue;
                }
                let zone = self.zones.get(&node);
                if pass == 0 && zone.is_some_and(|z| used_zones.contains(z)) {
                    continue;
                }
                used_zones.extend(zone);
                list.push((part, node));
            }
        }
        list
    }

    /// The primary partitions node `node` holds a replica of.
    pub fn partitions_of_node(&self, node: NodeId) -> BTreeSet<u32> {
        self.chunks_of_node(node)
            .iter()
            .map(|id| id.partition)
            .collect()
    }

    /// The ring after adding nodes until there are `nodes` (the new ones numbered
    /// after the existing ones): each new node takes partitions, one at a time, from
    /// the node holding the most (the highest-numbered such partition), until it
    /// holds its fair share `partitions / nodes`. Partitions only ever move to new
    /// nodes, so existing nodes keep all they still hold (Voldemort's rebalancing,
    /// the Voldemort read-only paper §3.1.2: partitions, not keys, move).
    pub fn rebalanced(&self, nodes: u32) -> Result<StoreLayout> {
        let old = self.nodes();
        let first_new = old.iter().next_back().map_or(0, |n| n + 1);
        if nodes < first_new {
            return Err(ReadOnlyError::InvalidLayout(format!(
                "the ring has {first_new} nodes; a rebalance can only add nodes"
            )));
        }
        if !self.zones.is_empty() {
            return Err(ReadOnlyError::InvalidLayout(
                "rebalancing a ring with zones needs the new nodes' zones; this ring has \
                 zones, so rebuild and push the store for the new servers instead"
                    .into(),
            ));
        }
        let mut ring = self.clone();
        let share = self.partitions() / nodes;
        for new in first_new..nodes {
            for _ in 0..share {
                let mut counts: BTreeMap<NodeId, u32> = BTreeMap::new();
                for &n in &ring.partition_nodes {
                    *counts.entry(n).or_default() += 1;
                }
                // The fullest node, the lowest-numbered among equals.
                let Some((&donor, _)) = counts
                    .iter()
                    .filter(|&(&n, _)| n != new)
                    .max_by_key(|&(&n, &c)| (c, std::cmp::Reverse(n)))
                else {
                    break;
                };
                let Some(p) = ring.partition_nodes.iter().rposition(|&n| n == donor) else {
                    break;
                };
                ring.partition_nodes[p] = new;
            }
        }
        ring.validate()?;
        Ok(ring)
    }

    /// Every chunk node `node` stores, in file order.
    pub fn chunks_of_node(&self, node: NodeId) -> Vec<ChunkId> {
        let mut out = Vec::new();
        for partition in 0..self.partitions() {
            for (replica, &(_, n)) in self.preference_list(partition).iter().enumerate() {
                if n == node {
                    out.extend((0..self.chunks).map(|chunk| ChunkId {
                        partition,
                        replica: replica as u32,
                        chunk,
                    }));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rebalance_moves_partitions_only_to_new_nodes() {
        let l = StoreLayout::round_robin(3, 12, 2, 2).unwrap();
        let r = l.rebalanced(4).unwrap();
        let count = |n| r.partition_nodes.iter().filter(|&&x| x == n).count();
        assert_eq!([count(0), count(1), count(2), count(3)], [3, 3, 3, 3]);
        for (p, (&a, &b)) in l.partition_nodes.iter().zip(&r.partition_nodes).enumerate() {
            assert!(a == b || b == 3, "partition {p} moved from {a} to {b}");
        }
        assert_eq!(r, l.rebalanced(4).unwrap(), "deterministic");
        assert_eq!(l.rebalanced(3).unwrap(), l, "no new node, no move");
        let two = l.rebalanced(6).unwrap();
        assert_eq!(two.nodes().len(), 6);
        assert!(l.rebalanced(2).is_err());
        let zoned = l.with_zones(&["a".into(), "b".into(), "c".into()]).unwrap();
        assert!(zoned.rebalanced(4).is_err());
    }

    #[test]
    fn paper_example_without_zones() {
        // 12 partitions on 3 nodes, replication 2 (the paper's §4.1 table): node 0
        // holds 0_0, 3_0, 6_0, 9_0 and as replica 1 the partitions before its own.
        let l = StoreLayout::round_robin(3, 12, 2, 1).unwrap();
        let stems: Vec<String> = l.chunks_of_node(0).iter().map(ChunkId::stem).collect();
        assert_eq!(
            stems,
            [
                "0_0_0", "2_1_0", "3_0_0", "5_1_0", "6_0_0", "8_1_0", "9_0_0", "11_1_0"
            ]
        );
        assert_eq!(l.preference_list(11), vec![(11, 2), (0, 0)]);
    }

    #[test]
    fn zones_come_first_then_any_node() {
        // Nodes 0, 1 in zone a; 2, 3 in zone b. Ring 0 1 2 3.
        let zones: Vec<String> = ["a", "a", "b", "b"].iter().map(|s| s.to_string()).collect();
        let l = StoreLayout::round_robin(4, 4, 2, 1)
            .unwrap()
            .with_zones(&zones)
            .unwrap();
        // From partition 0 (node 0, zone a) the next zone-b node is node 2.
        assert_eq!(l.preference_list(0), vec![(0, 0), (2, 2)]);
        let l3 = StoreLayout {
            replication: 3,
            ..l.clone()
        };
        // Zones exhausted after two: the third is the next new node clockwise.
        assert_eq!(l3.preference_list(0), vec![(0, 0), (2, 2), (1, 1)]);
    }

    #[test]
    fn invalid_layouts_are_refused() {
        assert!(StoreLayout::round_robin(0, 4, 1, 1).is_err());
        assert!(StoreLayout::round_robin(2, 0, 1, 1).is_err());
        assert!(StoreLayout::round_robin(2, 4, 3, 1).is_err());
        assert!(StoreLayout::round_robin(2, 4, 1, 0).is_err());
        let l = StoreLayout::round_robin(2, 4, 1, 1).unwrap();
        assert!(l.with_zones(&["a".to_string()]).is_err());
    }

    proptest! {
        #[test]
        fn preference_lists_are_distinct_and_complete(
            nodes in 1u32..7, extra in 0u32..20, rep_seed in 0u32..7, zones in 0usize..4,
        ) {
            let partitions = nodes + extra;
            let replication = 1 + rep_seed % nodes;
            let mut l = StoreLayout::round_robin(nodes, partitions, replication, 2).unwrap();
            if zones > 0 {
                let z: Vec<String> = (0..nodes).map(|n| format!("z{}", n as usize % zones)).collect();
                l = l.with_zones(&z).unwrap();
            }
            let zone_count = l.zones.values().collect::<BTreeSet<_>>().len();
            let mut copies = 0usize;
            for p in 0..partitions {
                let list = l.preference_list(p);
                prop_assert_eq!(list.len(), replication as usize);
                prop_assert_eq!(list[0], (p, l.partition_nodes[p as usize]));
                let distinct: BTreeSet<_> = list.iter().map(|x| x.1).collect();
                prop_assert_eq!(distinct.len(), list.len());
                if zone_count > 0 {
                    let zs: BTreeSet<_> = list.iter().map(|x| &l.zones[&x.1]).collect();
                    prop_assert_eq!(zs.len(), list.len().min(zone_count));
                }
                copies += list.len();
            }
            let held: usize = l.nodes().iter().map(|&n| l.chunks_of_node(n).len()).sum();
            prop_assert_eq!(held, copies * 2);
        }

        #[test]
        fn partitions_and_chunks_are_in_range(key in proptest::collection::vec(any::<u8>(), 0..40), p in 1u32..100, c in 1u32..9) {
            let l = StoreLayout::round_robin(1, p, 1, c).unwrap();
            let h = KeyHash::of(&key);
            prop_assert!(l.partition_of(&h) < p);
            prop_assert!(l.chunk_of(&h) < c);
        }
    }
}
