//! The set of rowsets a tablet consists of at one moment, and the interval tree that
//! finds which DiskRowSets may hold a key (Kudu paper §4.3, "rowset key ranges").
//!
//! [`Components`] is immutable: maintenance ops build a new one and swap it in, while
//! readers keep using the one they started with (their files stay until they let go).

use std::sync::Arc;

use crate::diskrowset::DiskRowSet;
use crate::memrowset::MemRowSet;

/// A centered interval tree over DiskRowSet key ranges `[min_key, max_key]`.
#[derive(Debug, Default)]
pub struct IntervalTree {
    root: Option<Box<Node>>,
}

#[derive(Debug)]
struct Node {
    center: Vec<u8>,
    /// Rowsets containing `center`, sorted by min key ascending.
    by_min: Vec<Arc<DiskRowSet>>,
    /// The same rowsets sorted by max key descending.
    by_max: Vec<Arc<DiskRowSet>>,
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

impl IntervalTree {
    /// Builds the tree over non-empty rowsets.
    pub fn new(rowsets: &[Arc<DiskRowSet>]) -> Self {
        let rs: Vec<Arc<DiskRowSet>> = rowsets
            .iter()
            .filter(|r| !r.keys.is_empty())
            .cloned()
            .collect();
        IntervalTree { root: build(rs) }
    }

    /// Rowsets whose key range contains `key`.
    pub fn query(&self, key: &[u8], out: &mut Vec<Arc<DiskRowSet>>) {
        let mut node = self.root.as_deref();
        while let Some(n) = node {
            if key < n.center.as_slice() {
                out.extend(
                    n.by_min
                        .iter()
                        .take_while(|r| r.keys.min_key() <= key)
                        .cloned(),
                );
                node = n.left.as_deref();
            } else {
                out.extend(
                    n.by_max
                        .iter()
                        .take_while(|r| r.keys.max_key() >= key)
                        .cloned(),
                );
                node = if key == n.center.as_slice() {
                    None
                } else {
                    n.right.as_deref()
                };
            }
        }
    }
}

fn build(rs: Vec<Arc<DiskRowSet>>) -> Option<Box<Node>> {
    if rs.is_empty() {
        return None;
    }
    let mut points: Vec<&[u8]> = rs
        .iter()
        .flat_map(|r| [r.keys.min_key(), r.keys.max_key()])
        .collect();
    points.sort_unstable();
    let center = points[points.len() / 2].to_vec();
    let (mut left, mut right, mut here) = (vec![], vec![], vec![]);
    for r in rs {
        if r.keys.max_key() < center.as_slice() {
            left.push(r);
        } else if r.keys.min_key() > center.as_slice() {
            right.push(r);
        } else {
            here.push(r);
        }
    }
    let mut by_min = here.clone();
    by_min.sort_by(|a, b| a.keys.min_key().cmp(b.keys.min_key()));
    let mut by_max = here;
    by_max.sort_by(|a, b| b.keys.max_key().cmp(a.keys.max_key()));
    Some(Box::new(Node {
        center,
        by_min,
        by_max,
        left: build(left),
        right: build(right),
    }))
}

/// The rowsets of a tablet at one moment.
#[derive(Debug)]
pub struct Components {
    /// The MemRowSet taking inserts.
    pub mrs: Arc<MemRowSet>,
    /// MemRowSets being flushed: no new inserts, still readable and mutable.
    pub frozen: Vec<Arc<MemRowSet>>,
    /// DiskRowSets.
    pub disk: Vec<Arc<DiskRowSet>>,
    /// Key-range index over `disk`.
    pub tree: IntervalTree,
}

impl Components {
    /// Assembles components and builds the interval tree.
    pub fn new(
        mrs: Arc<MemRowSet>,
        frozen: Vec<Arc<MemRowSet>>,
        disk: Vec<Arc<DiskRowSet>>,
    ) -> Self {
        let tree = IntervalTree::new(&disk);
        Components {
            mrs,
            frozen,
            disk,
            tree,
        }
    }
}
