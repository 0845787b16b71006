//! The error type of `cairn-readonly`.

use std::path::PathBuf;

/// Everything that can go wrong building, opening or reading a read-only store.
/// Messages say what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ReadOnlyError {
    /// The store's layout (ring, replication, zones, chunk count) is not usable.
    #[error("invalid store layout: {0}")]
    InvalidLayout(String),
    /// The input rows do not fit the store's schema (a NULL key, a missing column, an
    /// unsupported type).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Two input rows have the same key. A read-only store maps each key to one value.
    #[error(
        "duplicate key {key} in the input: every key must appear once (deduplicate the input, \
         e.g. keep the newest row per key, and build again)"
    )]
    DuplicateKey {
        /// The key, decoded for display.
        key: String,
    },
    /// A chunk grew past what its 32-bit offsets can address.
    #[error(
        "chunk {chunk} holds more than 4 GiB of data, more than its 32-bit offsets address: \
         build again with more chunks per bucket (--chunks)"
    )]
    ChunkTooLarge {
        /// The chunk's file name stem (`partition_replica_chunk`).
        chunk: String,
    },
    /// A store file is damaged: wrong size or checksum, unsorted index, an offset or a
    /// length pointing outside its file.
    #[error(
        "store file {path} is corrupt: {detail} (fetch this version again, or roll back to \
         an earlier one)"
    )]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// A swap order was refused because a newer one was obeyed since, or the version
    /// it expected live is not (see `SwapOrder`).
    #[error("stale swap refused: {0}")]
    StaleSwap(String),
    /// An I/O error on a store, spill or input file.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A request to an object store (S3, a web server) failed.
    #[error("{url}: {source}")]
    Remote {
        /// The object's URL.
        url: String,
        /// The object store's error.
        #[source]
        source: Box<object_store::Error>,
    },
    /// A value or key could not be encoded or decoded.
    #[error(transparent)]
    Common(#[from] cairn_common::CommonError),
}

impl ReadOnlyError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ReadOnlyError::Io {
            context: context.into(),
            source,
        }
    }

    /// A corrupt-file error.
    pub fn corrupt(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        ReadOnlyError::Corrupt {
            path: path.into(),
            detail: detail.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = ReadOnlyError> = std::result::Result<T, E>;
