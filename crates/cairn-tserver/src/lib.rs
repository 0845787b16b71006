//! The tablet server (`cairn tserver`): hosts tablet replicas, each a Raft group whose
//! state machine is a [`cairn_tablet::Tablet`] (Kudu paper §3.3–3.4), and the
//! read-only stores' files (Voldemort read-only paper §4.2).
//!
//! - [`replica`]: one replica — the tablet as a [`cairn_consensus::StateMachine`], the
//!   leader's write path (validate, lock rows, take a HybridTime, submit to Raft in
//!   timestamp order, apply on commit) and snapshot reads on followers.
//! - [`proposer`]: group commit — the leader's queue of records into the Raft log;
//!   concurrent row writes share one entry, one append and one fsync.
//! - [`manager`]: the tablet manager — creates, opens (after a restart) and deletes
//!   replicas on disk.
//! - [`service`]: the gRPC `TabletServer` service: writes, stateful scanners with
//!   expiry, keyed reads (`Get`), checksums, membership changes, schema changes.
//! - [`stores`]: read-only stores hosted here (Voldemort): each store's versions,
//!   fetches of new ones, swap and rollback when the master says, lookups.
//! - [`store_service`]: the gRPC `ReadOnlyStore` service over [`stores`].
//! - [`server`]: wiring — the RPC listener (tablet server + consensus services) and the
//!   heartbeat to the master with incremental tablet reports.
//! - [`chain`]: the point leader's side of hyperspace search (HyperDex §4.1) — a write
//!   to a table with subspaces is chained through their region tables before it is
//!   answered.
//! - [`point_leader`]: the service's chained writes and commits, and the leader's
//!   bookkeeping that resumes every chain nobody finished.
//! - [`convert`]: Arrow IPC and error conversions at the RPC boundary.

pub mod chain;
pub mod convert;
pub mod error;
pub mod manager;
pub mod point_leader;
pub mod proposer;
pub mod replica;
pub mod server;
pub mod service;
pub mod store_service;
pub mod stores;

pub use error::{Result, TserverError};
pub use server::{TabletServer, TserverOptions};
pub use service::ServiceLimits;
