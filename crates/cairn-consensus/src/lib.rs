//! Raft consensus for Cairn, on `openraft` (DESIGN.md "Replication and cluster"; Kudu
//! paper §3.2–3.3).
//!
//! Every tablet replica — and the master's catalog — is one Raft group. This crate
//! supplies what openraft leaves to the application:
//!
//! - [`log_store::LogStore`]: the Raft log on a [`cairn_wal::Log`] (one per group), plus
//!   the vote and the purge mark in small checksummed files;
//! - [`state_machine::StateMachineStore`]: adapts a [`StateMachine`] (the tablet, or the
//!   catalog) to openraft. Applied state is *not* made durable per entry: the state
//!   machine reports the index its files hold ([`StateMachine::durable_index`]) and the
//!   log is re-applied from there after a restart — the tablet's own skip-what-is-durable
//!   replay makes that idempotent. Snapshots are *checkpoints*: building one makes the
//!   state durable (a flush), and sending one streams the state machine's files (for a
//!   tablet: its rowset files — Kudu's tablet copy);
//! - [`network`]: the Raft RPCs over the gRPC `Consensus` service, routed to a group by
//!   id, with openraft messages encoded by postcard;
//! - [`group::RaftGroup`]: one running group — propose, leadership, membership.
//!
//! Defaults follow Kudu: 500 ms heartbeat, 1.5 s election timeout.

// openraft's `StorageError` is large and its trait signatures require it by value.
#![allow(clippy::result_large_err)]

pub mod error;
pub mod group;
pub mod log_store;
pub mod network;
pub mod state_machine;

pub use error::{ConsensusError, Result};
pub use group::{GroupOptions, RaftGroup, ReplicaRole, ReplicaStatus};
pub use network::{ConsensusService, GroupRegistry};
pub use state_machine::{SmError, StateMachine};

use std::io::Cursor;

/// A Raft node id (a server's permanent id).
pub type NodeId = u64;

/// A Raft node: where it listens.
pub type Node = openraft::BasicNode;

/// The payload of a normal log entry: opaque bytes the state machine understands.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Request(pub bytes::Bytes);

/// What applying an entry returned to its proposer.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Response(pub bytes::Bytes);

openraft::declare_raft_types!(
    /// Cairn's openraft type configuration.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = Node,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

// Keep the default snapshot type name in scope for readers of the macro above.
#[allow(dead_code)]
type _DefaultSnapshot = Cursor<Vec<u8>>;

/// openraft's `Raft` for Cairn.
pub type Raft = openraft::Raft<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// Membership as stored.
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// Storage errors as openraft wants them.
pub type StorageError = openraft::StorageError<NodeId>;
