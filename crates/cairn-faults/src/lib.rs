//! # cairn-faults — a fault harness with history checkers
//!
//! Jepsen's method applied to Cairn: run a real cluster, hurt it, record what clients
//! saw, and check the record against what Cairn promises.
//!
//! - [`cluster`]: real `cairn` processes — 3 masters and 5 tablet servers by default,
//!   fsync on, tables with 3 replicas — on loopback ports reserved for the whole run,
//!   each with a web port through which failpoints are set (the binary must be built
//!   with the `fail` crate's failpoints, as test builds are).
//! - [`nemesis`]: the faults, each scheduled at random and healed: kill -9 and
//!   restart, SIGSTOP / SIGCONT, network partitions (a minority cut off, a tablet
//!   leader isolated, a bridge), clock skew within and beyond the allowed offset, a
//!   full disk, a slow disk, and killing the leader master.
//! - [`workload`]: clients that record every operation as invoke / ok / fail / info
//!   events with monotonic timestamps ([`history`]): single-key registers (read,
//!   write, compare-and-set) through the native client and through SQL, a counter of
//!   atomic increments through SQL, a set of unique inserts searched and counted by
//!   group through a subspace (hyperspace search), and a bank (transfers in SQL
//!   transactions across tablets, with snapshot reads of every balance).
//! - [`check`]: the checkers — linearizability of the register histories with
//!   porcupine (a small Go program in `porcupine/`, built by the harness), the counter
//!   within [acknowledged, attempted], the set (no acknowledged insert lost,
//!   nothing that was never attempted), its searches (each finds every element
//!   acknowledged before it began, once, and nothing outside its group; counts in
//!   range), and the bank (every snapshot read totals what the accounts opened with).
//! - [`run`]: one run — start, load, fault cycles, heal, final reads, checks, report.
//!
//! `cairn-faults run --help` explains the flags; `crates/cairn/tests/faults.rs` runs a
//! short run in CI with every fault kind.

pub mod check;
pub mod cluster;
pub mod history;
pub mod nemesis;
pub mod run;
pub mod workload;

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum FaultsError {
    /// A process or file could not be handled.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The cluster did not get ready or a setup step failed.
    #[error("{0}")]
    Setup(String),
    /// A checker could not run.
    #[error("checker: {0}")]
    Checker(String),
}

impl FaultsError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        FaultsError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result alias.
pub type Result<T, E = FaultsError> = std::result::Result<T, E>;
