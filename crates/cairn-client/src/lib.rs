//! # cairn-client — the thick client of Cairn
//!
//! Applications, tools and SQL talk to a Cairn cluster through this crate. Like Kudu's
//! client (Kudu paper §3), it is *thick*: it does the work that lets servers stay
//! simple and requests go straight to the right machine.
//!
//! - **Metadata and leader discovery.** A [`Client`] knows the master addresses and
//!   finds the leader master lazily, following "not the leader" hints
//!   ([`cairn_proto::LEADER_ADDR_HEADER`]) and retrying unreachable masters with
//!   exponential backoff. DDL ([`Client::create_table`], [`Client::alter_table`],
//!   [`Client::drop_table`]) goes to the leader master.
//! - **Routing.** Tablet locations are cached per table ([`Client::table_locations`]).
//!   Each written row's partition key
//!   ([`PartitionSchema::partition_key`](cairn_common::PartitionSchema::partition_key))
//!   selects its tablet, and writes go directly to that tablet's leader. Stale locations
//!   (leader changed, tablet moved, server down) are refreshed and the request retried.
//! - **Writes.** A [`WriteSession`] buffers [`Operation`]s per tablet and sends them as
//!   Arrow IPC row batches ([`encode_write`]), synchronously, in the background or on
//!   demand ([`FlushMode`]). Row errors come back per operation ([`RowErrorInfo`]).
//! - **Bulk loads.** A [`BulkLoader`] ([`Client::bulk_loader`]) routes Arrow batches of
//!   new rows to their tablets in chunks of about 16 MiB, which each tablet writes
//!   straight into DiskRowSets (`BulkInsert`); see [`bulk`].
//! - **Scans.** A [`ScanBuilder`] pushes projection, predicates and limit down to the
//!   tablet servers, prunes tablets that cannot match, reads every tablet at one
//!   snapshot, and survives server failures by reopening the scan on another replica
//!   (see [`scan`] for what is resumed how).
//! - **Exactly once.** Every write request, bulk-insert chunk and DDL call carries a
//!   request id ([`requests`]); retries after a timeout or a leader change get the
//!   first attempt's answer. Operations may carry a [`Condition`] (row unchanged since
//!   a timestamp, or predicates on the row), checked by the leader under the row lock,
//!   and a session can write each tablet's share all or nothing
//!   ([`WriteSession::set_atomic`]).
//! - **Transactions.** A [`Transaction`] ([`Client::begin_transaction`]) writes
//!   provisional rows across tablets and tables and commits them at one timestamp —
//!   in one phase on a single tablet, by two-phase commit across several — or aborts
//!   them everywhere; see [`txn`].
//! - **Hidden keys.** A table created without a primary key is keyed by a hidden
//!   auto-incrementing column; [`Client::next_auto_ids`] hands out its values in
//!   blocks the master reserves (see [`auto_id`]).
//! - **Hyperspace search.** [`Client::search`], `count` and `sorted_search` read a
//!   table's subspaces ([`hyperspace`]); [`Client::add_subspace`] and
//!   [`Client::drop_subspace`] change them on a table with rows ([`subspace_ddl`]).
//! - **Consistency.** The client tracks the highest HybridTime seen in responses
//!   ([`Client::last_timestamp`]) and propagates it with every request, so a client's
//!   reads with [`ReadMode::ReadYourWrites`] see its writes, and causality can be passed
//!   between clients with [`Client::observe_timestamp`].
//!
//! Every call is bounded by [`ClientOptions`]: `rpc_timeout` per attempt and
//! `operation_timeout` for the whole call with its retries. Transient failures are
//! retried inside that budget; what reaches the caller is a final, typed
//! [`ClientError`].
//!
//! ```no_run
//! # async fn demo() -> cairn_client::Result<()> {
//! use cairn_client::{Client, FlushMode, Operation};
//! use cairn_common::{ColumnPredicate, Value};
//!
//! let client = Client::connect(&["127.0.0.1:7051".to_string()]).await?;
//! let table = client.open_table("metrics").await?;
//! let mut session = client.new_session(&table);
//! session.set_flush_mode(FlushMode::AutoFlushBackground);
//! session
//!     .apply(Operation::insert(vec![Value::String("host1".into()), Value::Int64(1), Value::Double(0.5)]))
//!     .await?;
//! let row_errors = session.flush().await?;
//! assert!(row_errors.is_empty());
//! let result = client
//!     .scan(&table)
//!     .predicate(ColumnPredicate::eq("host", Value::String("host1".into())))
//!     .execute()
//!     .await?;
//! println!("{} rows at snapshot {}", result.num_rows(), result.snapshot_timestamp);
//! # Ok(()) }
//! ```

pub mod auto_id;
pub mod bulk;
pub mod client;
pub mod error;
pub mod get;
pub mod hyperspace;
mod region_tables;
pub mod requests;
mod retry;
pub mod scan;
pub mod session;
pub mod store_get;
pub mod stores;
pub mod subspace_ddl;
pub mod table;
pub mod txn;
pub mod write;

pub use bulk::{BulkLoadSummary, BulkLoader, BulkRowError};
pub use cairn_common::Colocation;
pub use cairn_hyperspace::SubspaceSpec;
pub use cairn_proto::{InProcessScan, InProcessTabletServer};
pub use client::{Client, ClientOptions, LOCATIONS_TTL, MasterStub, TabletServerStub};
pub use error::{ClientError, Result};
pub use hyperspace::{SearchPlanInfo, SearchResult};
pub use scan::{READ_AHEAD_BATCHES, ReadMode, ScanBuilder, ScanCursor, ScanResult};
pub use session::{FlushMode, RowErrorInfo, WriteSession};
pub use store_get::{StoreReader, StoreRow};
pub use stores::{CreateStoreSpec, PushReport, StoreEntry, StoreNode};
pub use table::{CreateTableSpec, ReplicaInfo, Table, TabletLocationInfo, locate_tablet};
pub use txn::Transaction;
pub use write::{Condition, EncodedWrite, Operation, decode_ipc, encode_write};

/// Raw gRPC stubs returned by [`Client::tablet_server`] and [`Client::master`].
pub use cairn_proto::master_client::MasterClient;
pub use cairn_proto::tablet_server_client::TabletServerClient;
/// The channel type of the raw stubs.
pub use tonic::transport::Channel;
