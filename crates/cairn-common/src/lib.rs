//! # cairn-common — the vocabulary every Cairn crate shares
//!
//! This crate sits at the bottom of Cairn's dependency graph (see `DESIGN.md`,
//! "Crates"). It owns the things that must mean exactly the same to the storage engine,
//! the replication layer, the master, the client and SQL:
//!
//! - [`types`]: the column [`DataType`]s of the data model, cell [`Value`]s, and their
//!   1:1 mapping onto Arrow types and arrays (Arrow `RecordBatch` is the in-memory batch
//!   format everywhere).
//! - [`schema`]: table [`Schema`]s with stable column ids, nullability, defaults and a
//!   primary key, and schema evolution (add / drop / rename column) that never needs a
//!   data rewrite because storage refers to columns by id.
//! - [`key`]: the order-preserving primary-key encoding, so every key comparison in the
//!   system is a `memcmp` of byte strings.
//! - [`codec`]: a compact, versionless binary encoding of values and row changes used by
//!   the write-ahead log and delta files.
//! - [`partition`]: hash + range partition schemas (Kudu paper §2), partition keys, and
//!   partition pruning by predicates.
//! - [`predicate`]: column predicates (comparison, range, IN-list, IS [NOT] NULL and
//!   their conjunctions), evaluated on Arrow arrays or single values, with the
//!   implication test that predicate-based data skipping (HRDBMS §III) needs.
//! - [`atomic`]: atomic operations on one cell ([`AtomicOp`], [`CellMutation`]) that a
//!   row's leader evaluates under its row lock.
//! - [`clock`]: [`HybridTime`] and the hybrid logical clock (Kudu paper §3.4).
//! - [`ids`]: the one validation of tablet, table, Raft group and store ids that every
//!   RPC applies before an id reaches a lookup or a path.
//! - [`stats`]: per-column [`ColumnStatistics`] (min, max, NULLs, bytes) that tablets
//!   report for query planning.
//!
//! Errors from all of these are one [`CommonError`] enum.

pub mod atomic;
pub mod clock;
pub mod codec;
pub mod error;
pub mod ids;
pub mod key;
pub mod partition;
pub mod predicate;
pub mod schema;
pub mod stats;
pub mod types;

pub use atomic::{AtomicOp, CellMutation};
pub use clock::{HybridClock, HybridTime};
pub use error::{CommonError, Result};
pub use ids::{IdKind, validate_id};
pub use partition::{Colocation, HashLevel, Partition, PartitionSchema};
pub use predicate::{ColumnPredicate, PredicateOp};
pub use schema::{
    AUTO_INCREMENTING_ID, AlterOp, ColumnId, ColumnSchema, ColumnSpec, Schema, SchemaMeta,
};
pub use stats::ColumnStatistics;
pub use types::{DataType, Value};
