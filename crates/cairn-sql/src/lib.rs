//! # cairn-sql — SQL for Cairn
//!
//! Cairn answers SQL itself (Kudu needed Impala for that). This crate puts Apache
//! DataFusion on top of `cairn-client`, so SQL works the same on `cairn local` and on
//! a cluster:
//!
//! - [`catalog`]: catalog `cairn`, schema `public`, the cluster's tables, kept in sync
//!   with the master.
//! - [`provider`] / [`scan`] / [`pushdown`]: a `TableProvider` per table with exact
//!   predicate, projection and limit pushdown, partition pruning, one DataFusion
//!   partition per tablet, and one snapshot per statement.
//! - [`distributed`]: a query's fragments run on the tablet servers' workers, split
//!   by tablet and sent to the servers that lead them, with streamed shuffles
//!   between them (HRDBMS's distributed execution, on `datafusion-distributed`).
//! - [`search`]: a scan whose predicates narrow a subspace of the table (hyperspace
//!   search) reads only the regions they intersect.
//! - [`store_table`]: a read-only store as a table (key lookups and `IN` lists
//!   pushed down to the store's servers, full scans otherwise; writes refused).
//! - [`write`] / [`copy`]: INSERT, UPSERT, UPDATE, DELETE and COPY FROM as batched
//!   keyed row operations.
//! - [`parser`] / [`ddl`]: Cairn's SQL dialect (PostgreSQL plus `PARTITION BY HASH …
//!   PARTITIONS n`, `RANGE`, `WITH (replicas = n)`, `UPSERT INTO`, `FOR SYSTEM_TIME AS
//!   OF`) and its translation into table specs.
//! - [`session`]: [`SqlEngine`] (shared per process) and [`SqlSession`] (one per
//!   connection) run statements and prepared statements.
//! - [`authz`] / [`dcl`]: who runs a statement and whether they may (privileges are
//!   checked on the logical plan), and the user statements (`CREATE USER`, `GRANT`,
//!   …) the master carries out.
//! - [`txn`]: `BEGIN` … `COMMIT` as Cairn transactions, with PostgreSQL's isolation
//!   levels.
//! - [`information_schema`]: DataFusion's `information_schema` plus the constraint
//!   views (`table_constraints`, `key_column_usage`, …) that show primary keys.
//! - [`options`]: `SET cairn.…` settings.
//! - [`error`]: [`SqlError`] with PostgreSQL SQLSTATE codes.
//!
//! The front ends that put this engine on the network live in crates of their own:
//! `cairn-pgwire` (the PostgreSQL wire protocol) and `cairn-flightsql` (Arrow Flight
//! SQL). Both hold one [`SqlSession`] per client connection and know nothing of
//! DataFusion's plans beyond the results [`SqlSession`] hands them.

pub mod authz;
pub mod catalog;
pub mod copy;
pub mod dcl;
pub mod ddl;
pub mod distributed;
pub mod error;
pub mod information_schema;
pub mod options;
pub mod parser;
pub mod partitioning;
mod point;
pub mod provider;
pub mod pushdown;
pub mod scan;
pub mod search;
pub mod session;
pub mod store_table;
pub mod system;
pub mod txn;
pub mod types;
mod upsert;
pub mod write;

pub use error::{Result, SqlError};
pub use session::{
    CATALOG, EngineLimits, Notice, Prepared, QueryResult, SCHEMA, SqlEngine, SqlSession,
};
