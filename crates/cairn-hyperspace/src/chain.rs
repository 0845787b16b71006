//! Value-dependent chains (HyperDex §4.1): which regions a change visits, in what order,
//! and when a region may apply it.
//!
//! An object lives once in its key tablet and once in every subspace, in the region its
//! attribute values select. A change to the object is decided by the *point leader* (the
//! leader of its key tablet), which gives it a [`Version`] (its commit timestamp) and then
//! sends it along a chain: for each subspace in order, the region of the new value and,
//! if the object moves, the region of the old value ([`build_chain`]). An object moves
//! when its region changes or, within a region, its [`Cell`] (the first attribute's
//! coordinate, which orders a region's rows) does. Each link is
//! applied by that region's Raft group before the next is sent; the client is answered
//! when the last link is applied.
//!
//! **Order within a subspace.** HyperDex sends the old region first but keeps the object
//! there, pending, until the acknowledgement flows back, so that "there is no instant
//! during an update where the object may disappear". Cairn's regions apply a link at
//! once, so the same guarantee needs the opposite order: the new region stores the
//! object ([`LinkAction::Put`]) before the old one drops it ([`LinkAction::Remove`]).
//! A search that runs in between can meet the object twice, at two versions; it keeps the
//! newer (see the search rules in the architecture guide).
//!
//! **Concurrent changes to one object.** The point leader does not wait for one chain to
//! finish before starting the next, so two chains of the same object can overlap in a
//! region and arrive there out of order (HyperDex's u₂ and u₃). HyperDex embeds the
//! previous update's version in each message; Cairn embeds, per link, the newest version
//! *still at work* whose chain also visits that region ([`LinkMessage::after`],
//! computed by [`KeyChains`]). A region holding the object at `applied` then decides with
//! [`admit`]:
//! - `applied >= version`: the link was applied before (a retransmission): acknowledge
//!   again, change nothing. Each `(key, version)` is applied once.
//! - `after` is set and `applied < after`: a predecessor has not arrived: wait.
//! - otherwise apply.
//!
//! Earlier versions that visit the region but whose chains are complete have been
//! applied everywhere on their chain, so the region already reflects them. Because a region must
//! remember `applied` for an object it dropped, a [`LinkAction::Remove`] leaves a
//! tombstone carrying its version. The oldest chain in flight never waits, so chains
//! always make progress.
//!
//! **Acknowledgement.** The client of a change is answered once its chain *and every
//! older chain of the object* are complete ([`KeyChains::complete`] says which): a
//! younger chain can finish before an older one, which may still have a stale copy to
//! remove somewhere. Answering in order means that once a change is acknowledged, no
//! region holds a live copy of the object older than it.
//!
//! **Point leader failover.** A new point leader rebuilds the unacknowledged chains from
//! its log (every change whose acknowledgement it has not logged), and sends each again
//! from its first link; regions acknowledge the links they applied before as duplicates.

use std::collections::BTreeMap;

use cairn_common::{Schema, Value};

use crate::error::Result;
use crate::grid::{Cell, RegionId, Subspace};

/// The version of an object: the HybridTime (raw) at which its point leader committed the
/// change. Versions of one object only grow.
pub type Version = u64;

/// What a link asks its region to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum LinkAction {
    /// Store the object's new value (insert, or overwrite an older version).
    Put,
    /// Drop the object (it moved to another region, or was deleted), leaving a tombstone
    /// with the version.
    Remove,
}

/// One step of a chain: a region of a subspace and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ChainLink {
    /// The subspace's position in the table's subspace list.
    pub subspace: usize,
    /// The region within that subspace.
    pub region: RegionId,
    /// The row's cell within the region ([`Cell`]): a change of the subspace's first
    /// attribute moves the row even when its region stays.
    pub cell: Cell,
    /// Put or remove.
    pub action: LinkAction,
}

/// The chain of a change from `old` to `new` (full rows of `schema`; `None` for an object
/// that did not exist before, or that the change deletes). Per subspace in order: the new
/// value's region (put), then the old value's region if the object leaves it or moves
/// to another cell of it (remove). A change that neither had nor leaves an object has an
/// empty chain.
pub fn build_chain(
    subspaces: &[Subspace],
    schema: &Schema,
    old: Option<&[Value]>,
    new: Option<&[Value]>,
) -> Result<Vec<ChainLink>> {
    let mut links = Vec::with_capacity(subspaces.len() * 2);
    for (i, s) in subspaces.iter().enumerate() {
        let old_place = old.map(|row| s.place_of_row(schema, row)).transpose()?;
        let new_place = new.map(|row| s.place_of_row(schema, row)).transpose()?;
        if let Some((region, cell)) = new_place {
            links.push(ChainLink {
                subspace: i,
                region,
                cell,
                action: LinkAction::Put,
            });
        }
        if let Some((region, cell)) = old_place.filter(|p| Some(*p) != new_place) {
            links.push(ChainLink {
                subspace: i,
                region,
                cell,
                action: LinkAction::Remove,
            });
        }
    }
    Ok(links)
}

/// A link as sent to its region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkMessage {
    /// Where it goes and what it does.
    pub link: ChainLink,
    /// The change's version.
    pub version: Version,
    /// The newest version older than `version` whose chain is still at work and visits
    /// the same region and cell: the region applies this link only once it has applied
    /// that one.
    pub after: Option<Version>,
}

/// What a region does with an arriving link ([`admit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Apply it, then acknowledge.
    Apply,
    /// Already applied: acknowledge without applying again.
    Duplicate,
    /// A predecessor has not been applied here yet: hold the link until it is.
    Wait,
}

/// The decision for link `version` (with predecessor `after`) at a region that has
/// applied the object up to `applied` (`None`: never seen it; a tombstone counts).
pub fn admit(applied: Option<Version>, version: Version, after: Option<Version>) -> Admission {
    if applied.is_some_and(|a| a >= version) {
        return Admission::Duplicate;
    }
    match after {
        Some(pred) if applied.is_none_or(|a| a < pred) => Admission::Wait,
        _ => Admission::Apply,
    }
}

/// The chains in flight for one object, kept by its point leader: the state that tells
/// each link which predecessor to wait for, and which changes may be acknowledged.
#[derive(Clone, Debug, Default)]
pub struct KeyChains {
    /// Changes not yet acknowledged: their chains, and whether every link was applied.
    unacknowledged: BTreeMap<Version, (Vec<ChainLink>, bool)>,
}

impl KeyChains {
    /// Registers the chain of change `version` and returns its messages in chain order.
    /// Each message waits for the newest older chain whose links are not all applied and
    /// that visits the same region and cell.
    ///
    /// REQUIRES: `version` is newer than every version registered for this object (the
    /// point leader assigns versions in order under the object's row lock), or is one of
    /// them being resent after a failover, in which case its messages are rebuilt.
    pub fn start(&mut self, version: Version, links: Vec<ChainLink>) -> Vec<LinkMessage> {
        let messages = links
            .iter()
            .map(|link| LinkMessage {
                link: *link,
                version,
                after: self
                    .unacknowledged
                    .range(..version)
                    .rev()
                    .find(|(_, (chain, done))| {
                        !done
                            && chain.iter().any(|l| {
                                l.subspace == link.subspace
                                    && (l.region, l.cell) == (link.region, link.cell)
                            })
                    })
                    .map(|(v, _)| *v),
            })
            .collect();
        self.unacknowledged.insert(version, (links, false));
        messages
    }

    /// Records that every link of `version` has been applied, and returns the changes
    /// that may now be acknowledged to their clients, oldest first: those whose chain and
    /// every older chain of the object are complete.
    ///
    /// A change is acknowledged only after every older one because a younger chain can
    /// finish first (it need not visit the regions where an older one is still at work),
    /// and until the older one finishes, a region it has yet to visit may still hold an
    /// outdated copy of the object. Acknowledging in order means that once a client has
    /// its answer, no region holds a live copy older than its change.
    pub fn complete(&mut self, version: Version) -> Vec<Version> {
        if let Some((_, done)) = self.unacknowledged.get_mut(&version) {
            *done = true;
        }
        let mut acknowledged = vec![];
        while let Some(entry) = self.unacknowledged.first_entry() {
            if !entry.get().1 {
                break;
            }
            acknowledged.push(entry.remove_entry().0);
        }
        acknowledged
    }

    /// The versions not yet acknowledged, oldest first: what a new point leader resends
    /// after a failover.
    pub fn unacknowledged(&self) -> impl Iterator<Item = Version> + '_ {
        self.unacknowledged.keys().copied()
    }

    /// Whether every change of this object has been acknowledged.
    pub fn is_idle(&self) -> bool {
        self.unacknowledged.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::Axis;
    use cairn_common::{ColumnSpec, DataType};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("a", DataType::Int64).nullable(),
            ],
            &["k"],
        )
        .unwrap()
    }

    fn subspaces() -> Vec<Subspace> {
        vec![Subspace::new("a", vec![Axis::new("a", DataType::Int64)], 4).unwrap()]
    }

    fn row(a: i64) -> Vec<Value> {
        vec![Value::Int64(1), Value::Int64(a)]
    }

    #[test]
    fn chains_put_new_before_removing_old() {
        let (s, sc) = (subspaces(), schema());
        let r = |a: i64| s[0].region_of_row(&sc, &row(a)).unwrap();
        let (small, big) = (row(0), row(1 << 40));
        assert_ne!(r(0), r(1 << 40));
        let insert = build_chain(&s, &sc, None, Some(&small)).unwrap();
        assert_eq!(insert.len(), 1);
        assert_eq!(insert[0].action, LinkAction::Put);
        let same = build_chain(&s, &sc, Some(&small), Some(&small)).unwrap();
        assert_eq!(same.len(), 1, "an update in place visits one region");
        // Another value in the same region is another cell: put there, then remove.
        let near = build_chain(&s, &sc, Some(&small), Some(&row(-3))).unwrap();
        assert_eq!(r(-3), r(0));
        assert_eq!(
            near.iter()
                .map(|l| (l.region, l.action))
                .collect::<Vec<_>>(),
            vec![(r(0), LinkAction::Put), (r(0), LinkAction::Remove)]
        );
        assert_ne!(near[0].cell, near[1].cell);
        let moved = build_chain(&s, &sc, Some(&small), Some(&big)).unwrap();
        assert_eq!(
            moved
                .iter()
                .map(|l| (l.region, l.action))
                .collect::<Vec<_>>(),
            vec![(r(1 << 40), LinkAction::Put), (r(0), LinkAction::Remove)]
        );
        let delete = build_chain(&s, &sc, Some(&big), None).unwrap();
        assert_eq!(delete[0].action, LinkAction::Remove);
        assert!(build_chain(&s, &sc, None, None).unwrap().is_empty());
    }

    #[test]
    fn admission_rules() {
        assert_eq!(admit(None, 5, None), Admission::Apply);
        assert_eq!(admit(Some(5), 5, None), Admission::Duplicate);
        assert_eq!(admit(Some(7), 5, Some(3)), Admission::Duplicate);
        assert_eq!(admit(None, 5, Some(3)), Admission::Wait);
        assert_eq!(admit(Some(2), 5, Some(3)), Admission::Wait);
        assert_eq!(admit(Some(3), 5, Some(3)), Admission::Apply);
        assert_eq!(admit(Some(4), 5, Some(3)), Admission::Apply);
    }

    #[test]
    fn predecessors_are_the_newest_overlapping_chain_in_flight() {
        let link = |region, action| ChainLink {
            subspace: 0,
            region,
            cell: 0,
            action,
        };
        let mut k = KeyChains::default();
        let m1 = k.start(1, vec![link(0, LinkAction::Put)]);
        assert_eq!(m1[0].after, None);
        let m2 = k.start(
            2,
            vec![link(1, LinkAction::Put), link(0, LinkAction::Remove)],
        );
        assert_eq!((m2[0].after, m2[1].after), (None, Some(1)));
        let m3 = k.start(
            3,
            vec![link(0, LinkAction::Put), link(1, LinkAction::Remove)],
        );
        assert_eq!((m3[0].after, m3[1].after), (Some(2), Some(2)));
        // 2 finishes first but waits for 1 to be acknowledged.
        assert_eq!(k.complete(2), Vec::<Version>::new());
        assert_eq!(k.complete(1), vec![1, 2]);
        let m4 = k.start(4, vec![link(0, LinkAction::Put)]);
        assert_eq!(m4[0].after, Some(3));
        assert_eq!(k.complete(3), vec![3]);
        assert_eq!(k.unacknowledged().collect::<Vec<_>>(), vec![4]);
        assert_eq!(k.complete(4), vec![4]);
        assert!(k.is_idle());
        assert_eq!(k.start(5, vec![link(0, LinkAction::Put)])[0].after, None);
    }
}
