//! The tablet server's error type and its mapping to gRPC statuses.

/// Errors of the tablet server.
#[derive(Debug, thiserror::Error)]
pub enum TserverError {
    /// No such tablet replica here.
    #[error("tablet {0} is not hosted on this server; refresh the tablet locations")]
    TabletNotFound(String),
    /// No such read-only store here.
    #[error("read-only store {0} is not hosted on this server; refresh the store's ring")]
    StoreNotFound(String),
    /// A read-only store operation failed.
    #[error(transparent)]
    ReadOnly(#[from] cairn_readonly::ReadOnlyError),
    /// No such scanner (expired or never opened).
    #[error("scanner {0} does not exist (it expired or was closed); open a new scan")]
    ScannerNotFound(String),
    /// Bad request.
    #[error("{0}")]
    InvalidArgument(String),
    /// The storage engine failed.
    #[error(transparent)]
    Tablet(#[from] cairn_tablet::TabletError),
    /// Consensus failed or this replica is not the leader.
    #[error(transparent)]
    Consensus(#[from] cairn_consensus::ConsensusError),
    /// Files.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A transient condition (a peer is unreachable, an election is running): retry.
    #[error("{0}")]
    Unavailable(String),
    /// A request would pass one of the server's limits; the message names the flag.
    #[error("{what} exceeds {flag} ({limit}){hint}")]
    LimitExceeded {
        /// What was too large or too many.
        what: String,
        /// The flag that sets the limit.
        flag: &'static str,
        /// The limit.
        limit: u64,
        /// What to do about it.
        hint: &'static str,
    },
    /// The server is stopping.
    #[error("the tablet server is shutting down")]
    ShuttingDown,
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}

impl TserverError {
    /// An I/O error.
    pub fn io(path: impl Into<std::path::PathBuf>, source: std::io::Error) -> Self {
        TserverError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<cairn_common::CommonError> for TserverError {
    fn from(e: cairn_common::CommonError) -> Self {
        TserverError::InvalidArgument(e.to_string())
    }
}

impl From<TserverError> for tonic::Status {
    fn from(e: TserverError) -> Self {
        use cairn_consensus::ConsensusError as C;
        use cairn_tablet::TabletError as T;
        let msg = e.to_string();
        match e {
            TserverError::TabletNotFound(_)
            | TserverError::ScannerNotFound(_)
            | TserverError::StoreNotFound(_) => tonic::Status::not_found(msg),
            TserverError::ReadOnly(cairn_readonly::ReadOnlyError::Corrupt { .. }) => {
                tonic::Status::data_loss(msg)
            }
            TserverError::ReadOnly(cairn_readonly::ReadOnlyError::Io { .. }) => {
                tonic::Status::internal(msg)
            }
            TserverError::ReadOnly(_) => tonic::Status::failed_precondition(msg),
            TserverError::InvalidArgument(_) => tonic::Status::invalid_argument(msg),
            TserverError::LimitExceeded { .. } => tonic::Status::resource_exhausted(msg),
            TserverError::Consensus(C::NotLeader { leader_addr, .. }) => {
                let mut s = tonic::Status::failed_precondition(msg);
                if let Some(a) = leader_addr
                    && let Ok(v) = a.parse()
                {
                    s.metadata_mut().insert(cairn_proto::LEADER_ADDR_HEADER, v);
                }
                s
            }
            TserverError::Consensus(
                C::LeaderNotReady | C::ShutDown | C::Raft(_) | C::Membership(_) | C::Unavailable(_),
            )
            | TserverError::ShuttingDown
            | TserverError::Unavailable(_) => tonic::Status::unavailable(msg),
            TserverError::Tablet(
                T::InvalidRequest(_) | T::SnapshotTooOld { .. } | T::Common(_),
            ) => tonic::Status::invalid_argument(msg),
            TserverError::Tablet(
                T::ShutDown | T::Failed(_) | T::LockTimeout | T::SafeTimeTimeout { .. },
            ) => tonic::Status::unavailable(msg),
            TserverError::Tablet(T::TxnNotOpen { .. }) => tonic::Status::failed_precondition(msg),
            TserverError::Tablet(T::Deadlock { .. }) => tonic::Status::aborted(msg),
            _ => tonic::Status::internal(msg),
        }
    }
}

/// Result alias.
pub type Result<T, E = TserverError> = std::result::Result<T, E>;
