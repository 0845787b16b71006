//! The error type of `cairn-tablet`.

use std::path::PathBuf;

use cairn_common::{CommonError, HybridTime};

/// Everything that can go wrong in a tablet. Messages say what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TabletError {
    /// Bad input: schema, values, predicates.
    #[error(transparent)]
    Common(#[from] CommonError),
    /// The write-ahead log failed.
    #[error("write-ahead log: {0}")]
    Wal(#[from] cairn_wal::WalError),
    /// A file could not be read or written.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file's contents do not match their checksum or cannot be parsed.
    #[error(
        "corruption detected in {path}: {detail}. The tablet cannot be opened safely; restore \
         it from a replica or backup"
    )]
    Corruption {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Parquet reading or writing failed.
    #[error("parquet error in {path}: {detail}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The cause.
        detail: String,
    },
    /// Arrow computation failed.
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// A snapshot older than the history retention window was requested.
    #[error(
        "snapshot {requested} is older than the history retention window (oldest readable: \
         {oldest}); read at a later timestamp or raise --history-retention"
    )]
    SnapshotTooOld {
        /// The requested snapshot.
        requested: HybridTime,
        /// The oldest readable timestamp.
        oldest: HybridTime,
    },
    /// The tablet directory already holds a tablet, or holds none.
    #[error("{0}")]
    BadTabletDir(String),
    /// The tablet was closed.
    #[error("the tablet is shut down")]
    ShutDown,
    /// The tablet stopped after a failure it cannot recover from in place (a metadata
    /// write or a log append failed: disk full, I/O error). Its data on disk is
    /// consistent; the replica must be replaced or the tablet reopened once the cause
    /// is fixed.
    #[error(
        "the tablet has failed and accepts no more writes: {0}. Free space or fix the disk,          then restart the server (a replicated tablet is re-replicated elsewhere)"
    )]
    Failed(String),
    /// A write waited too long for the row locks of its keys.
    #[error(
        "timed out waiting for other writes to the same rows to finish (a leader may be cut \
         off from its followers); retry"
    )]
    LockTimeout,
    /// A read waited too long for writes in flight at or below its snapshot.
    #[error(
        "timed out after {waited_ms} ms waiting for writes at or below {snapshot} to finish          (a leader may be cut off from its followers); retry, or read at an earlier snapshot"
    )]
    SafeTimeTimeout {
        /// The snapshot read.
        snapshot: HybridTime,
        /// How long it waited.
        waited_ms: u64,
    },

    /// An invalid request that is not about a particular value.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A write or commit named a transaction that already ended here (or, for a
    /// write, is already preparing to commit).
    #[error(
        "transaction {txn} is no longer open on this tablet ({state}); start a new \
         transaction"
    )]
    TxnNotOpen {
        /// The transaction.
        txn: crate::ops::TxnId,
        /// What became of it.
        state: String,
    },
    /// A transaction's write would wait for a key owned by a transaction that
    /// (directly or through others) waits for it, or waited past the deadlock timeout.
    #[error(
        "deadlock detected: transaction {txn} waits for a row owned by transaction \
         {owner}, which waits for it (or has held it past the deadlock timeout); roll \
         back and retry the transaction"
    )]
    Deadlock {
        /// The transaction refused.
        txn: crate::ops::TxnId,
        /// The owner it waited for.
        owner: crate::ops::TxnId,
    },
}

impl TabletError {
    /// Wraps an I/O error with the file it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TabletError::Io {
            path: path.into(),
            source,
        }
    }
    /// A corruption error for `path`.
    pub fn corruption(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        TabletError::Corruption {
            path: path.into(),
            detail: detail.into(),
        }
    }
    /// A parquet error for `path`.
    pub fn parquet(path: impl Into<PathBuf>, e: impl std::fmt::Display) -> Self {
        TabletError::Parquet {
            path: path.into(),
            detail: e.to_string(),
        }
    }
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, TabletError>;
