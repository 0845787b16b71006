//! Cairn's wire protocol: the `.proto` definitions of the consensus, tablet-server and
//! master services, compiled with `tonic-prost-build` (vendored `protoc`).
//!
//! Row data crosses the wire as Arrow IPC streams; schemas, partition schemas and
//! predicates as the JSON of their `cairn-common` types. Higher crates convert between
//! these messages and their own types at their boundaries.
#![allow(missing_docs, clippy::all)]

/// Generated messages and service stubs (package `cairn`).
pub mod pb {
    tonic::include_proto!("cairn");
}

pub use pb::*;

pub mod auth;
pub mod in_process;
pub mod tls;
pub use in_process::{InProcessScan, InProcessTabletServer};
pub use tls::TlsConfig;

/// The conventions every service follows (documented once, here).
///
/// - `schema_json`: JSON of `cairn_common::SchemaMeta`; `partition_schema_json`: of
///   `cairn_common::PartitionSchema`; `partition_json`: of `cairn_common::Partition`;
///   `range_bounds_json`: of `Vec<(Vec<u8>, Vec<u8>)>` (encoded range keys, `[lower,
///   upper)`, empty = unbounded); `predicates_json`: of `Vec<cairn_common::ColumnPredicate>`;
///   `steps_json`: of `Vec<cairn_common::AlterOp>`.
/// - `arrow_ipc`: an Arrow IPC *stream* (schema message, then batches). Write batches
///   hold exactly the columns given, by name; a null cell sets NULL.
/// - Errors are gRPC statuses: `NOT_FOUND` (unknown table or tablet),
///   `INVALID_ARGUMENT` (bad input, do not retry), `ALREADY_EXISTS`,
///   `FAILED_PRECONDITION` whose message starts with "not the leader" (retry at the
///   leader; metadata [`LEADER_ADDR_HEADER`] names it when known), `UNAVAILABLE` (retry
///   after a backoff).
pub mod conventions {}

/// Metadata key carrying the leader's address on a "not the leader" error.
pub const LEADER_ADDR_HEADER: &str = "cairn-leader-addr";
