//! The master (`cairn master`): the cluster's catalog manager, coordinator and tablet
//! directory (Kudu paper §3.4).
//!
//! - [`catalog`]: the catalog — tables and tablets — as a deterministic
//!   [`cairn_consensus::StateMachine`] replicated by Raft across 1 or 3 masters, with an
//!   in-memory copy serving reads. Its durable form is a checkpoint file; the Raft log
//!   replays what came after.
//! - [`service`]: the gRPC `Master` service on the leader master (followers redirect):
//!   DDL, `GetTableLocations`, tablet-server heartbeats.
//! - [`reconcile`]: the leader's background loop that drives every table towards its
//!   catalog state — creating tablets on their assigned servers, pushing schema
//!   changes, deleting dropped tables' replicas and orphans — and re-replicates tablets
//!   that lost a replica to a dead server (it *suggests* config changes to the tablet
//!   leader, which decides). All steps are idempotent, so a new leader master simply
//!   resumes them.
//! - [`users`]: users, logins and tokens — the bootstrap superuser, `Authenticate`
//!   (signed tokens; failed logins logged and rate-limited), `ListUsers` for the SQL
//!   front ends, and user DDL. Every RPC first asks the service's
//!   [`cairn_proto::auth::AuthGate`] who is calling and whether they may.
//! - [`placement`]: which servers a new table's tablets go to, and colocation groups
//!   (tables hashed alike whose bucket *i* shares servers, so joins stay local).
//! - [`stores`]: read-only stores in the catalog — their columns and the ring of
//!   partitions laid out over the tablet servers (`CreateStore`, `GetStore`).
//! - [`store_push`]: pushing a built version of a store to its servers (all fetch,
//!   then all swap, or none does), rolling back, and keeping servers on the catalog's
//!   version.
//! - [`server`]: wiring (listener, catalog group, reconciler).

pub mod catalog;
pub mod error;
pub mod placement;
pub mod reconcile;
pub mod server;
pub mod service;
pub mod store_push;
pub mod stores;
pub mod users;

pub use error::{MasterError, Result};
pub use server::{MasterOptions, MasterServer};

/// The Raft group id of the catalog.
pub const CATALOG_GROUP: &str = "master-catalog";

/// A master's node id, derived from its address so that every master agrees on the
/// ids of all of them without coordination.
pub fn master_node_id(addr: &str) -> u64 {
    (xxhash_rust::xxh64::xxh64(addr.as_bytes(), 0x4d41_5354) >> 1).max(1)
}
