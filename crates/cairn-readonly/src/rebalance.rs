//! Rebalancing: a node's folder for a new ring, made of chunk files it has and
//! chunk files other servers have.
//!
//! When tablet servers join, Voldemort moves whole partitions to them rather than
//! rebuilding (the Voldemort read-only paper, §3.1.2 and §4.3): the new ring
//! ([`StoreLayout::rebalanced`]) gives the new nodes partitions of the existing ones,
//! and every node whose preference lists changed needs chunk files it does not have.
//! A rebalance is a push whose files come from the servers instead of a build:
//!
//! - each node *assembles* the next version, `version-N+1.fetch/`, with [`assemble`]:
//!   the chunks of its live version it keeps are hard-linked (free, and the bytes are
//!   immutable), the partitions it lacks are copied from a server that holds them
//!   (resumable, throttled and MD5-checked like any fetch, through [`FetchSource`]);
//! - the folder keeps the partitions of the *previous* ring as well as the new
//!   ring's ([`NodeMetadata::held`]), so during and after the swap a client routing
//!   by either ring is answered by every node it asks: there is no moment without a
//!   replica. The next push, built for the new ring, drops the extra partitions;
//! - then the master swaps every node as in a push, and records the new ring.
//!
//! All replicas of a bucket are the same bytes (a bucket `p_r` holds the tuples of
//! primary partition `p` whatever `r` is), so a partition copied from a donor's
//! `p_1_*` files is stored under this node's own replica number.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::error::{ReadOnlyError, Result};
use crate::fetch::{Copier, FetchProgress, FetchSource, finish_folder, read_metadata};
use crate::format::{FORMAT_VERSION, FileEntry, NodeMetadata, chunk_files};
use crate::layout::{ChunkId, NodeId, StoreLayout};
use crate::reader::{StoreVersion, count_tuples};
use crate::schema::StoreSchema;

/// A server that holds a partition a node must copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Donor {
    /// Its RPC address.
    pub addr: String,
    /// The replica number of the partition's files there.
    pub replica: u32,
}

/// What one node is told to assemble.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalancePlan {
    /// The store's name.
    pub store: String,
    /// The store's columns.
    pub schema: StoreSchema,
    /// The new ring.
    pub layout: StoreLayout,
    /// The version the donors serve (the one the files are copied from).
    pub from_version: u64,
    /// For every partition this node must copy, the servers that hold it, the
    /// preferred first.
    pub donors: BTreeMap<u32, Vec<Donor>>,
}

impl RebalancePlan {
    /// The partitions node `node` must copy when moving from `old` to `new`: the
    /// ones the new ring gives it that the old one did not.
    pub fn partitions_to_copy(old: &StoreLayout, new: &StoreLayout, node: NodeId) -> Vec<u32> {
        let had = if old.nodes().contains(&node) {
            old.partitions_of_node(node)
        } else {
            BTreeSet::new()
        };
        new.partitions_of_node(node)
            .into_iter()
            .filter(|p| !had.contains(p))
            .collect()
    }
}

/// Opens a donor's live-version folder (`addr`, version `v`) as a fetch source.
pub type Connect<'a> = dyn Fn(&str, u64) -> Result<Box<dyn FetchSource + 'a>> + 'a;

/// Assembles node `node`'s folder for `plan` into `dest` (module docs): keeps what
/// `live` (this node's live version, if any) holds of the old and the new ring,
/// copies the rest from the donors. Returns the folder's metadata once `.metadata`
/// is written. Resumable: files already in `dest` are not copied again.
pub fn assemble(
    plan: &RebalancePlan,
    node: NodeId,
    live: Option<&StoreVersion>,
    dest: &Path,
    connect: &Connect<'_>,
    throttle_bytes_per_sec: u64,
    progress: &FetchProgress,
) -> Result<NodeMetadata> {
    let layout = &plan.layout;
    layout.validate()?;
    fs::create_dir_all(dest)
        .map_err(|e| ReadOnlyError::io(format!("cannot create {dest:?}"), e))?;
    // What the live folder holds, by partition: its chunk ids and file entries.
    let mut have: BTreeMap<u32, Vec<(ChunkId, FileEntry, FileEntry)>> = BTreeMap::new();
    let mut keep: BTreeSet<u32> = layout.partitions_of_node(node);
    if let Some(live) = live {
        let meta = live.metadata();
        if meta.store != plan.store || meta.node != node {
            return Err(ReadOnlyError::InvalidInput(format!(
                "the live version is node {} of store '{}', not node {node} of '{}'",
                meta.node, meta.store, plan.store
            )));
        }
        keep.extend(meta.layout.partitions_of_node(node));
        for (id, pair) in meta.chunk_ids().into_iter().zip(meta.files.chunks(2)) {
            have.entry(id.partition)
                .or_default()
                .push((id, pair[0].clone(), pair[1].clone()));
        }
    }
    let total: u64 = have
        .iter()
        .filter(|(p, _)| keep.contains(p))
        .flat_map(|(_, c)| c.iter().map(|(_, i, d)| i.bytes + d.bytes))
        .sum();
    progress.bytes_total.store(total, Ordering::Relaxed);
    let mut copier = Copier::new(throttle_bytes_per_sec, progress);
    let mut ids = Vec::new();
    let mut files = Vec::new();
    for &p in &keep {
        if let Some(chunks) = have.get(&p) {
            for (id, index, data) in chunks {
                for f in [index, data] {
                    link(live.map(|l| l.dir()), f, dest)?;
                    progress.bytes_done.fetch_add(f.bytes, Ordering::Relaxed);
                    progress.files_done.fetch_add(1, Ordering::Relaxed);
                    files.push(f.clone());
                }
                ids.push(*id);
            }
            continue;
        }
        let donors = plan
            .donors
            .get(&p)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| {
                ReadOnlyError::InvalidInput(format!(
                    "node {node} needs partition {p}, does not have it, and the plan names no \
                 server to copy it from"
                ))
            })?;
        let replica = layout
            .preference_list(p)
            .iter()
            .position(|&(_, n)| n == node)
            .unwrap_or(0) as u32;
        let mut last_error = None;
        let mut copied = None;
        for donor in donors {
            match copy_partition(plan, p, replica, donor, dest, connect, &mut copier) {
                Ok(c) => {
                    copied = Some(c);
                    break;
                }
                Err(e) => {
                    if progress.cancel.load(Ordering::Relaxed) {
                        return Err(e);
                    }
                    tracing::warn!(partition = p, donor = %donor.addr, error = %e,
                        "could not copy a partition; trying the next server that has it");
                    last_error = Some(e);
                }
            }
        }
        let Some(chunks) = copied else {
            return Err(last_error.unwrap_or_else(|| {
                ReadOnlyError::InvalidInput(format!("no server could give partition {p}"))
            }));
        };
        for (id, index, data) in chunks {
            ids.push(id);
            files.push(index);
            files.push(data);
        }
    }
    let mut rows = 0;
    for pair in files.chunks(2) {
        rows += count_tuples(&dest.join(&pair[0].name), &dest.join(&pair[1].name))?;
    }
    let meta = NodeMetadata {
        format_version: FORMAT_VERSION,
        store: plan.store.clone(),
        node,
        schema: plan.schema.clone(),
        layout: layout.clone(),
        rows,
        checksum: NodeMetadata::checksum_of(&files)?,
        files,
        held: Some(ids),
    };
    finish_folder(dest, &meta.to_bytes())?;
    Ok(meta)
}

/// Hard-links file `f` of the live folder into `dest` (a copy where links are not
/// possible), unless it is there.
fn link(live: Option<&Path>, f: &FileEntry, dest: &Path) -> Result<()> {
    let to = dest.join(&f.name);
    if to.exists() {
        return Ok(());
    }
    let Some(live) = live else {
        return Err(ReadOnlyError::InvalidInput(format!(
            "{} is not in a live version",
            f.name
        )));
    };
    let from = live.join(&f.name);
    fs::hard_link(&from, &to)
        .or_else(|_| fs::copy(&from, &to).map(|_| ()))
        .map_err(|e| ReadOnlyError::io(format!("cannot link {from:?} to {to:?}"), e))
}

/// Copies partition `p` from `donor` into `dest` under replica number `replica`:
/// its chunks with their index and data entries.
fn copy_partition(
    plan: &RebalancePlan,
    p: u32,
    replica: u32,
    donor: &Donor,
    dest: &Path,
    connect: &Connect<'_>,
    copier: &mut Copier<'_>,
) -> Result<Vec<(ChunkId, FileEntry, FileEntry)>> {
    let source = connect(&donor.addr, plan.from_version)?;
    let (meta, _) = read_metadata(source.as_ref())?;
    if meta.store != plan.store {
        return Err(ReadOnlyError::InvalidInput(format!(
            "{} serves store '{}', not '{}'",
            donor.addr, meta.store, plan.store
        )));
    }
    let by_name: BTreeMap<&str, &FileEntry> =
        meta.files.iter().map(|f| (f.name.as_str(), f)).collect();
    let mut out = Vec::new();
    for chunk in 0..plan.layout.chunks {
        let theirs = ChunkId {
            partition: p,
            replica: donor.replica,
            chunk,
        };
        let ours = ChunkId { replica, ..theirs };
        let (ti, td) = chunk_files(&theirs);
        let (oi, od) = chunk_files(&ours);
        let mut copy = |their_name: String, our_name: String| -> Result<FileEntry> {
            let f = by_name.get(their_name.as_str()).ok_or_else(|| {
                ReadOnlyError::InvalidInput(format!(
                    "{} has no {their_name} in version {}",
                    donor.addr, plan.from_version
                ))
            })?;
            let entry = FileEntry {
                name: our_name,
                bytes: f.bytes,
                md5: f.md5.clone(),
            };
            copier
                .progress()
                .bytes_total
                .fetch_add(f.bytes, Ordering::Relaxed);
            copier.copy(source.as_ref(), &their_name, &entry, dest)?;
            Ok(entry)
        };
        let index = copy(ti, oi)?;
        let data = copy(td, od)?;
        out.push((ours, index, data));
    }
    Ok(out)
}
