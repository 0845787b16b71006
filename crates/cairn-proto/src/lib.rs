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
