//! # cairn-bench — Cairn measured against its peers
//!
//! The suites, each running its peer on the same data in the same run:
//! - `storage` ([`storage`]): one tablet vs one Parquet file on TPC-H `lineitem`;
//! - `cluster` ([`cluster`]): loadgen at replication 1 and 3, failover time;
//! - `tpch` ([`tpch`]): the 22 TPC-H queries through Cairn's SQL engine vs DataFusion;
//! - `readonly` ([`readonly`]): a read-only store's build, lookups, swap and rollback
//!   vs LMDB;
//! - `search` ([`search`]): hyperspace search vs a full scan and PostgreSQL's indexes.

/// The allocator the `cairn` binary uses (mimalloc), so that Cairn's embedded SQL
/// engine and DataFusion in this process run on the same one as the servers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

mod cluster;
mod procs;
mod readonly;
mod readonly_serve;
mod search;
mod storage;
mod tpch;

/// Cairn benchmarks against peers.
#[derive(Parser)]
#[command(name = "cairn-bench", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Storage micro-benchmark: one tablet vs one Parquet file, TPC-H lineitem.
    Storage(storage::StorageArgs),
    /// Cluster figures: loadgen at replication 1 and 3 on `cairn local`, and the
    /// failover time after kill -9 of a tablet leader.
    Cluster(cluster::ClusterArgs),
    /// TPC-H: the 22 queries on `cairn local` vs DataFusion on Parquet, and the load
    /// time vs DuckDB.
    Tpch(tpch::TpchArgs),
    /// Read-only store: build, lookups from 1 and 16 threads, swap and rollback, on
    /// one node, vs LMDB on the same keys and values.
    Readonly(readonly::ReadonlyArgs),
    /// Read-only store served by `cairn local`: build, push, lookups through the
    /// native client from 1 and 16 clients vs point lookups on a Cairn table with
    /// the same rows, and a rollback through the master.
    ReadonlyServe(readonly_serve::ReadonlyServeArgs),
    /// Hyperspace search on `cairn local`: equality, range and count searches through
    /// subspaces vs a full scan and PostgreSQL's B-tree indexes, a mixed search/put
    /// workload, and the put cost of 0, 1 and 2 subspaces.
    Search(search::SearchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Storage(args) => storage::storage(args),
        Command::Cluster(args) => cluster::cluster(args).map_err(|e| e.to_string().into()),
        Command::Tpch(args) => tpch::tpch(args).map_err(|e| e.to_string().into()),
        Command::Readonly(args) => readonly::readonly(args).map_err(|e| e.to_string().into()),
        Command::ReadonlyServe(args) => {
            readonly_serve::readonly_serve(args).map_err(|e| e.to_string().into())
        }
        Command::Search(args) => search::search(args).map_err(|e| e.to_string().into()),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
