//! # cairn-hyperspace — HyperDex's hyperspace hashing, as pure logic
//!
//! A query on a non-key attribute would otherwise scan every tablet of a table. HyperDex
//! ("HyperDex: A Distributed, Searchable Key-Value Store", Escriva, Wong and Sirer,
//! SIGCOMM 2012) keeps extra copies of each object in *subspaces*, each partitioned by
//! the values of a few attributes, so a search asks only the *regions* its predicates
//! intersect. This crate is the geometry and the ordering rules of that design, with no
//! I/O, so that the master, the tablet servers, the client and SQL all compute them the
//! same way and a test can check them exhaustively:
//!
//! - [`coord`]: attribute values → [`Coordinate`]s on an axis: hashed for strings and
//!   binary values (equality only), order-preserving for numbers, dates and timestamps
//!   (ranges). Paper §2.2–2.3.
//! - [`grid`]: a [`Subspace`] cut into a grid of regions, about `N^(1/d)` intervals per
//!   dimension, cut by default or at the quantiles of a sample of the data. Paper §2.2, §3.
//! - [`plan`]: for a conjunction of predicates, the regions of each subspace that can
//!   hold a match, and the subspace with the fewest ([`plan_search`]); the region groups
//!   of a top-k search ([`sorted_groups`]). Paper §2.3, §3.
//! - [`chain`]: the value-dependent chain of a change from an old to a new value
//!   ([`build_chain`]), the predecessor each link waits for ([`KeyChains`]) and the rule
//!   a region applies each arriving link by ([`admit`]). Paper §4.1.
//! - [`region`]: how a subspace is stored: a hidden region table whose tablets hold runs
//!   of regions, rows sorted within a region by the first attribute ([`Cell`]) and
//!   carrying their version and a tombstone flag ([`SubspaceEntry`]). Paper §3.2.
//!
//! The key subspace of the paper (§3.1) is the table's own tablets and needs nothing
//! here. Errors are one [`HyperspaceError`] enum.

pub mod chain;
pub mod coord;
pub mod error;
pub mod grid;
pub mod plan;
pub mod region;

pub use chain::{
    Admission, ChainLink, KeyChains, LinkAction, LinkMessage, Version, admit, build_chain,
};
pub use coord::{Axis, AxisKind, Coordinate, NULL_COORDINATE};
pub use error::{HyperspaceError, Result};
pub use grid::{Cell, Dimension, MAX_DIMENSIONS, MAX_REGIONS, Place, RegionId, Subspace, cell_of};
pub use plan::{
    RegionRun, RegionSet, SearchPlan, cell_bounds, plan_search, region_runs, regions_for,
    sorted_groups,
};
pub use region::{
    CELL_COLUMN, ColumnChangeRefusal, DEFAULT_REGIONS, REGION_COLUMN, REMOVED_COLUMN, RegionRow,
    SubspaceEntry, SubspaceSpec, VERSION_COLUMN, default_region_tablets, is_region_table_name,
    refuse_column_change, region_columns_to_add, region_columns_to_drop, region_partitioning,
    region_row, region_table_name, region_table_schema, split_region_row,
};
