//! The master's error type and its gRPC mapping.

/// Errors of the master.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    /// No such table.
    #[error("table '{0}' does not exist; list tables with `cairn table list`")]
    TableNotFound(String),
    /// The table exists.
    #[error("table '{0}' already exists")]
    TableExists(String),
    /// No such read-only store.
    #[error("store '{0}' does not exist; list stores with `cairn store list`")]
    StoreNotFound(String),
    /// The store exists.
    #[error("store '{0}' already exists")]
    StoreExists(String),
    /// Bad request.
    #[error("{0}")]
    InvalidArgument(String),
    /// The request does not fit the object's state (a push while another runs).
    #[error("{0}")]
    FailedPrecondition(String),
    /// Not the leader master.
    #[error("not the leader master{}", match .0 { Some(a) => format!("; the leader is at {a}"), None => "; no leader is known yet, retry shortly".into() })]
    NotLeader(Option<String>),
    /// Not enough live servers, or similar transient conditions.
    #[error("{0}")]
    Unavailable(String),
    /// Consensus failed.
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
    /// Not authenticated or not allowed.
    #[error(transparent)]
    Auth(#[from] cairn_proto::auth::AuthError),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}

impl From<cairn_common::CommonError> for MasterError {
    fn from(e: cairn_common::CommonError) -> Self {
        MasterError::InvalidArgument(e.to_string())
    }
}

impl From<MasterError> for tonic::Status {
    fn from(e: MasterError) -> Self {
        use cairn_consensus::ConsensusError as C;
        let msg = e.to_string();
        match e {
            MasterError::Auth(a) => a.into(),
            MasterError::TableNotFound(_) | MasterError::StoreNotFound(_) => {
                tonic::Status::not_found(msg)
            }
            MasterError::TableExists(_) | MasterError::StoreExists(_) => {
                tonic::Status::already_exists(msg)
            }
            MasterError::InvalidArgument(_) => tonic::Status::invalid_argument(msg),
            MasterError::FailedPrecondition(_) => tonic::Status::failed_precondition(msg),
            MasterError::NotLeader(addr)
            | MasterError::Consensus(C::NotLeader {
                leader_addr: addr, ..
            }) => {
                let mut s =
                    tonic::Status::failed_precondition(if msg.starts_with("not the leader") {
                        msg
                    } else {
                        format!("not the leader: {msg}")
                    });
                if let Some(a) = addr
                    && let Ok(v) = a.parse()
                {
                    s.metadata_mut().insert(cairn_proto::LEADER_ADDR_HEADER, v);
                }
                s
            }
            MasterError::Unavailable(_)
            | MasterError::Consensus(C::LeaderNotReady | C::ShutDown) => {
                tonic::Status::unavailable(msg)
            }
            _ => tonic::Status::internal(msg),
        }
    }
}

/// Result alias.
pub type Result<T, E = MasterError> = std::result::Result<T, E>;
