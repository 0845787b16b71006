//! The error type of the write-ahead log.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while opening, writing or reading a [`Log`](crate::Log).
///
/// Messages say what was wrong and what the caller (or operator) can do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// An operating-system I/O call failed on `path` (a segment file or the log directory).
    #[error(
        "WAL I/O error on {path}: {source}; check the disk (space, permissions, health) and retry, \
         reopening the log if a write or fsync was interrupted"
    )]
    Io {
        /// The file or directory the failed call was made on.
        path: PathBuf,
        /// The underlying operating-system error.
        source: io::Error,
    },

    /// On-disk data failed validation somewhere other than a torn tail (see the crate docs for
    /// the rule). The log refuses to open rather than silently drop data.
    #[error(
        "WAL corruption in {path} at byte offset {offset}: {detail}; the file was left untouched; \
         restore this tablet from a replica or backup, or move the damaged segment aside by hand \
         if losing the entries from this point on is acceptable"
    )]
    Corruption {
        /// The segment file holding the bad bytes.
        path: PathBuf,
        /// Byte offset within that file where the bad header or entry starts.
        offset: u64,
        /// What exactly failed to validate.
        detail: String,
    },

    /// A segment header carries a valid checksum but a format version this build cannot read.
    #[error(
        "WAL segment {path} has format version {found}, but this build only reads version \
         {supported}; open it with the Cairn release that wrote it"
    )]
    UnsupportedVersion {
        /// The segment file.
        path: PathBuf,
        /// Version found in the header.
        found: u32,
        /// Version this build understands.
        supported: u32,
    },

    /// An append did not continue the log contiguously.
    #[error(
        "WAL append out of order: expected index {expected}, got {got}; entries must be appended \
         with consecutive indexes (use truncate_suffix or reset to move the write position)"
    )]
    OutOfOrder {
        /// The only index the log accepts next.
        expected: u64,
        /// The index the caller passed.
        got: u64,
    },

    /// An index the log cannot store (currently only `u64::MAX`, which would leave no valid
    /// "next index").
    #[error("WAL index {index} is not allowed: {detail}")]
    InvalidIndex {
        /// The offending index.
        index: u64,
        /// Why it is not allowed.
        detail: &'static str,
    },

    /// A payload is larger than an entry's `u32` length field can describe.
    #[error(
        "WAL entry {index} has a {len}-byte payload, over the {max}-byte limit; split it into \
         smaller operations"
    )]
    EntryTooLarge {
        /// Index of the entry being appended.
        index: u64,
        /// Payload length in bytes.
        len: u64,
        /// Largest payload allowed.
        max: u64,
    },

    /// An earlier write, fsync or file operation failed midway, so this handle no longer knows
    /// what is on disk and refuses to change the log.
    #[error(
        "WAL in {dir} is unusable after an earlier failed write or fsync; the on-disk state is \
         unknown, so drop this Log and open it again (recovery repairs a torn tail)"
    )]
    Poisoned {
        /// The log directory.
        dir: PathBuf,
    },
}

impl WalError {
    /// Builds a closure that wraps an [`io::Error`] with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> WalError {
        let path = path.into();
        move |source| WalError::Io { path, source }
    }

    /// Shorthand for [`WalError::Corruption`].
    pub(crate) fn corruption(
        path: impl Into<PathBuf>,
        offset: u64,
        detail: impl Into<String>,
    ) -> WalError {
        WalError::Corruption {
            path: path.into(),
            offset,
            detail: detail.into(),
        }
    }
}
