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
}
