//! # cairn-readonly — batch-built, read-only key-value stores
//!
//! Some data is computed, not written: a nightly batch job produces recommendations,
//! features or "people you may know" for every user, and the whole set must be served
//! by key at low latency and replaced in full the next day — or undone in
//! milliseconds when the job was wrong. Writing such a set row by row into a table
//! would hurt live traffic and take hours. Project Voldemort's answer (the Voldemort
//! read-only paper, "Serving Large-scale Batch Computed Data with Project Voldemort")
//! is to build the serving files offline, copy them to the servers, and swap them in
//! atomically. This crate is that storage engine:
//!
//! - [`layout`]: the ring of equal partitions, the preference list of a key
//!   (distinct nodes, and distinct zones first), and which chunks a node stores
//!   (paper §3.1.2, §4.1).
//! - [`schema`]: a store's key and value columns and their byte encodings.
//! - [`format`]: the chunk files — a sorted index of 8-byte MD5 prefixes with
//!   offsets, and data files of collided tuples with full keys — and the per-node
//!   `.metadata` with checksums (paper §4.1, §4.3).
//! - [`build`]: the offline builder: parallel over cores, bounded memory with sorted
//!   runs spilled to disk, deterministic output (paper §4.2.1).
//! - [`reader`]: opening a node's folder with verification, and lookups through
//!   memory-mapped files with interpolation search (paper §4.2.2).
//! - [`fetch`]: pulling a built node folder to the server that serves it —
//!   throttled, resumable, every file checked against `.metadata` (paper §4.2.2).
//! - [`versions`]: a store's versions on one server — install a fetched folder after
//!   checking its checksums, swap the `latest` link atomically, roll back, delete
//!   versions beyond retention (paper §4.2, §4.3).
//! - [`rebalance`]: a node's folder for a ring with more nodes, assembled from
//!   the chunk files it has and ones copied from other servers (paper §3.1.2).
//! - [`remote`]: build inputs and outputs and fetch sources named by URL — a path,
//!   `s3://` or `http(s)://` — through the `object_store` crate.
//! - [`catalog`]: a store's entry in the cluster's catalog (its ring and the tablet
//!   server of each node), the type the master keeps and clients read.
//!
//! Everything here is synchronous (object-store requests run on a private runtime). Deciding when servers fetch and swap,
//! routing requests and SQL access live in the layers above (the master drives a
//! push, the tablet server hosts versions, the client routes by the ring).

pub mod build;
pub mod catalog;
pub mod error;
pub mod fetch;
pub mod format;
pub mod layout;
pub mod reader;
pub mod rebalance;
pub mod remote;
pub mod schema;
pub mod versions;

#[cfg(test)]
mod tests;

pub use build::{
    BuildOptions, BuildProgress, BuildSummary, StoreBuilder, default_memory_bytes, node_dir,
};
pub use catalog::{
    NodeProgress, PushPhase, PushReport, PushState, RingChange, StoreEntry, StoreNode,
};
pub use error::{ReadOnlyError, Result};
pub use fetch::{DirSource, FetchProgress, FetchSource, FetchTarget, fetch_node, source_location};
pub use format::NodeMetadata;
pub use layout::{ChunkId, KeyHash, NodeId, PreferenceList, StoreLayout};
pub use reader::{ScanCursor, StoreVersion, Verify};
pub use rebalance::{Donor, RebalancePlan};
pub use remote::{Location, RemoteDir, RemoteSource};
pub use schema::{StoreColumn, StoreSchema};
pub use versions::{SwapOrder, SwapReport, VersionedStore};
