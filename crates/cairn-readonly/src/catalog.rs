//! A store as the cluster's catalog records it: what the master keeps and clients
//! read back (`cairn store describe`), shared here so both sides use one type.

use serde::{Deserialize, Serialize};

use crate::layout::StoreLayout;
use crate::schema::StoreSchema;

/// A tablet server that is one node of a store's ring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreNode {
    /// The server's node id.
    pub node_id: u64,
    /// Its RPC address.
    pub addr: String,
}

/// A read-only store in the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreEntry {
    /// Store id.
    pub id: String,
    /// Name (unique among stores).
    pub name: String,
    /// Key and value columns.
    pub schema: StoreSchema,
    /// The ring: partition → node, replication, chunks per partition.
    pub layout: StoreLayout,
    /// `nodes[n]` is the tablet server that is node `n` of the ring.
    pub nodes: Vec<StoreNode>,
    /// Versions kept on the servers for rollback.
    pub retained: u32,
    /// The version being served; `None` until the first push.
    #[serde(default)]
    pub current_version: Option<u64>,
    /// The user who created it.
    pub owner: String,
    /// A push under way, recorded so that a new leader master finishes or undoes it.
    #[serde(default)]
    pub push: Option<PushState>,
    /// The highest version any server may have installed (every push that reached
    /// its swap): a new push must be numbered above it, since a server that still
    /// holds an old version of that number would serve it instead.
    #[serde(default)]
    pub newest_version: u64,
}

/// Where a push is: every server fetches, then every server swaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PushPhase {
    /// The servers are pulling their files; nothing is live yet.
    Fetching,
    /// Every server has its files; they are being told to swap.
    Swapping,
}

/// A push in the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushState {
    /// The version being pushed.
    pub version: u64,
    /// The build's output folder (`node-<n>` folders inside).
    pub source: String,
    /// Bytes per second each server may fetch at (0: unlimited).
    pub throttle_bytes_per_sec: u64,
    /// Where it is.
    pub phase: PushPhase,
    /// Set when this push is a rebalance: the servers assemble the version from
    /// each other's files ([`crate::rebalance`]) instead of fetching `source`, and
    /// once they have swapped the store takes this ring.
    #[serde(default)]
    pub rebalance: Option<RingChange>,
}

/// The ring a store moves to in a rebalance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingChange {
    /// The new ring.
    pub layout: StoreLayout,
    /// The tablet server of every node of the new ring (the old ones first, in
    /// their order, then the new ones).
    pub nodes: Vec<StoreNode>,
}

/// One server's part in a push, as the master last saw it (`cairn store describe`
/// and the push's progress bar show it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProgress {
    /// The server's node id.
    pub node_id: u64,
    /// Bytes fetched so far.
    pub bytes_done: u64,
    /// Bytes to fetch.
    pub bytes_total: u64,
    /// Whether its files are all in place and verified.
    pub fetched: bool,
    /// Whether it serves the pushed version.
    pub swapped: bool,
    /// Its last error, if any.
    pub error: Option<String>,
}

/// A push as `GetStore` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushReport {
    /// The version being (or last) pushed.
    pub version: u64,
    /// `fetching`, `swapping`, `done`, `failed` or `rolled back`.
    pub state: String,
    /// One entry per node of the ring.
    pub nodes: Vec<NodeProgress>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}
