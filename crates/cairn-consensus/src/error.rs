//! The consensus crate's error type.

use std::path::PathBuf;

/// Errors from consensus operations.
#[derive(Debug, thiserror::Error)]
pub enum ConsensusError {
    /// This replica is not the leader; `leader` says who is, when known.
    #[error("not the leader{}", match .leader_addr { Some(a) => format!("; the leader is at {a}"), None => "; no leader is known yet, retry shortly".into() })]
    NotLeader {
        /// Node id of the leader, if known.
        leader: Option<u64>,
        /// Its address, if known.
        leader_addr: Option<String>,
    },
    /// The group is leader but not yet ready (applying its log); retry shortly.
    #[error("the leader is still catching up on its log; retry shortly")]
    LeaderNotReady,
    /// The group has been shut down.
    #[error("the consensus group is shut down")]
    ShutDown,
    /// A transient failure (no quorum answered in time, a wait timed out): retry.
    #[error("{0}")]
    Unavailable(String),
    /// A file could not be read or written.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Persistent state is damaged.
    #[error("corrupt consensus state in {path}: {detail}")]
    Corruption {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The log failed.
    #[error(transparent)]
    Wal(#[from] cairn_wal::WalError),
    /// A membership change was refused.
    #[error("membership change failed: {0}")]
    Membership(String),
    /// Anything else openraft reported.
    #[error("raft: {0}")]
    Raft(String),
    /// A message could not be decoded.
    #[error("bad consensus message: {0}")]
    Decode(String),
}

impl ConsensusError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ConsensusError::Io {
            path: path.into(),
            source,
        }
    }
    /// Whether retrying (possibly elsewhere) can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ConsensusError::NotLeader { .. }
                | ConsensusError::LeaderNotReady
                | ConsensusError::Unavailable(_)
        )
    }
}

/// Result alias.
pub type Result<T, E = ConsensusError> = std::result::Result<T, E>;
