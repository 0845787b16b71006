//! The client's error type, and the classification of gRPC statuses into "retry
//! elsewhere", "retry later" and "give up" (the conventions of `cairn_proto::conventions`).

use std::time::Duration;

use cairn_common::CommonError;
use cairn_proto::LEADER_ADDR_HEADER;
use tonic::{Code, Status};

use crate::session::RowErrorInfo;
use crate::write::Operation;

/// Result alias of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Everything a client call can fail with. Messages say what went wrong and what to do.
///
/// Transient failures (a server down, a leader election, a moved tablet) are retried
/// inside the client until the operation timeout; what reaches the caller is either
/// final (bad input, a missing table) or a [`ClientError::Timeout`] carrying the last
/// transient error.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `Client::connect` got an empty address list.
    #[error("no master address given: pass at least one \"host:port\" to Client::connect")]
    NoMasters,
    /// An address is not a valid `host:port`.
    #[error("invalid server address '{addr}': {detail}; use the form \"host:port\"")]
    InvalidAddress {
        /// The address as given.
        addr: String,
        /// Why it was rejected.
        detail: String,
    },
    /// The named table does not exist.
    #[error("table '{0}' does not exist: check the name against list_tables()")]
    TableNotFound(String),
    /// The table was dropped and recreated under the same name after it was opened.
    #[error(
        "table '{name}' changed since it was opened (opened as id {opened}, now {current}): \
         it was dropped or recreated; open it again with open_table()"
    )]
    TableChanged {
        /// Table name.
        name: String,
        /// The id the `Table` handle was opened with.
        opened: String,
        /// The id the master reports now.
        current: String,
    },
    /// Something other than a table was not found (a tablet, a scanner, a server).
    #[error("not found: {0}")]
    NotFound(String),
    /// The request was rejected as invalid; retrying it unchanged will not help.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The caller is authenticated but lacks a privilege (SQLSTATE 42501).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The caller could not be authenticated: no or wrong credentials, or an expired
    /// token.
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    /// The object to create exists already.
    #[error("already exists: {0} (use if_not_exists to accept an existing one)")]
    AlreadyExists(String),
    /// An operation did not succeed before its deadline; `last` is the last transient
    /// error seen.
    #[error(
        "{what} did not complete within {timeout:?}; last error: {last}. The servers may be \
         down, overloaded or electing a leader: check the cluster (list_masters, \
         list_tablet_servers) or raise the operation timeout"
    )]
    Timeout {
        /// What was attempted.
        what: String,
        /// The operation timeout that ran out.
        timeout: Duration,
        /// The last error before giving up.
        last: String,
    },
    /// A server answered with an error that is neither retryable nor one of the typed
    /// ones above.
    #[error("{what} failed: the server answered {code:?}: {message}")]
    Rpc {
        /// What was attempted.
        what: String,
        /// The gRPC status code.
        code: Code,
        /// The server's message.
        message: String,
    },
    /// In `FlushMode::AutoFlushSync`, the server rejected the row just applied.
    #[error("operation #{} was rejected ({:?}): {}", .0.op_index, .0.kind, .0.message)]
    Row(Box<RowErrorInfo>),
    /// A flush could not deliver some operations: their tablet stayed unreachable until
    /// the timeout, or the server rejected the whole request. Those operations may or may
    /// not have been applied (a timed-out write can still land).
    #[error(
        "{} operation(s) of the write session may not have been applied: {cause} \
         ({} other row error(s)); see failed_ops and row_errors, and re-apply what is \
         missing",
        failed_ops.len(),
        row_errors.len()
    )]
    WriteFailed {
        /// The first cause.
        cause: Box<ClientError>,
        /// The operations in doubt, with their index in session order.
        failed_ops: Vec<(usize, Operation)>,
        /// Row errors of the operations that did reach their tablet.
        row_errors: Vec<RowErrorInfo>,
    },
    /// An unordered streaming scan lost its server after returning rows of a tablet; it
    /// cannot resume without returning rows twice or skipping some.
    #[error(
        "the unordered scan of tablet {tablet_id} failed after returning {rows} row(s) of it \
         and cannot resume exactly: {cause}. Use ScanBuilder::ordered(true) for streaming \
         scans that survive server failures, or run the scan again"
    )]
    ScanInterrupted {
        /// The tablet being scanned.
        tablet_id: String,
        /// Rows of that tablet already returned.
        rows: u64,
        /// The failure.
        cause: Box<ClientError>,
    },
    /// A server sent something this client cannot decode.
    #[error(
        "cannot decode {what} sent by the server: {detail} (client and server versions may not match)"
    )]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// The decoder's complaint.
        detail: String,
    },
    /// Invalid schema, value, key or predicate, found before anything was sent.
    #[error("invalid input: {0}")]
    Common(#[from] CommonError),
    /// Building or decoding Arrow data failed.
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// A transaction's step named a transaction that already ended (or, for a write,
    /// is committing) on a tablet: start a new transaction.
    #[error("{0}")]
    TxnNotOpen(String),
    /// A transaction's write was refused because waiting for the owner of its row
    /// would deadlock: roll the transaction back and run it again.
    #[error("{0}")]
    TxnDeadlock(String),
    /// A transaction's commit was sent but whether it took effect could not be
    /// learned (its home tablet stayed unreachable): check the data before running
    /// it again. PostgreSQL's `transaction_resolution_unknown`.
    #[error("{0}")]
    TxnOutcomeUnknown(String),
    /// No server holding some key of a read-only store answered: every replica in
    /// the key's preference list is down or has no live version.
    #[error("{0}; check the store's servers with `cairn store describe`")]
    StoreUnavailable(String),
    /// A subspace's region rows could not be written: a region refused a row (final),
    /// or rows kept racing other writers of the same region rows (retryable).
    #[error("{message}")]
    Subspace {
        /// What went wrong.
        message: String,
        /// Whether trying again later may succeed.
        retryable: bool,
    },
    /// A bug in the client.
    #[error("internal client error: {0} (this is a bug; please report it)")]
    Internal(String),
}

impl ClientError {
    /// Whether retrying the same call later might succeed (timeouts, unreachable
    /// servers). Typed errors such as [`ClientError::TableNotFound`] or
    /// [`ClientError::InvalidArgument`] are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Timeout { .. } | ClientError::StoreUnavailable(_) => true,
            ClientError::Subspace { retryable, .. } => *retryable,
            ClientError::WriteFailed { cause, .. } | ClientError::ScanInterrupted { cause, .. } => {
                cause.is_retryable()
            }
            ClientError::Rpc { code, .. } => matches!(
                code,
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::ResourceExhausted
                    | Code::Aborted
            ),
            _ => false,
        }
    }

    /// Maps a generic "not found" to [`ClientError::TableNotFound`] for `table`.
    pub(crate) fn for_table(self, table: &str) -> ClientError {
        match self {
            ClientError::NotFound(_) => ClientError::TableNotFound(table.to_string()),
            e => e,
        }
    }
}

/// What to do about a failed RPC.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server is not the leader; `hint` names the leader when the server knows it.
    NotLeader {
        hint: Option<String>,
        message: String,
    },
    /// Transient: the server is unreachable, overloaded or timed out.
    Retry(String),
    /// `NOT_FOUND`: unknown table, tablet (moved?) or scanner (expired?).
    NotFound(String),
    /// Final.
    Fatal(ClientError),
}

impl Failure {
    /// A one-line description for timeout messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Failure::NotLeader { message, .. } => message.clone(),
            Failure::Retry(m) | Failure::NotFound(m) => m.clone(),
            Failure::Fatal(e) => e.to_string(),
        }
    }
}

/// Classifies a gRPC status from `addr` while doing `what`.
pub(crate) fn classify(what: &str, addr: &str, status: &Status) -> Failure {
    let msg = status.message().to_string();
    match status.code() {
        Code::FailedPrecondition if msg.contains("is no longer open") => {
            Failure::Fatal(ClientError::TxnNotOpen(msg))
        }
        Code::Aborted if msg.contains("deadlock detected") => {
            Failure::Fatal(ClientError::TxnDeadlock(msg))
        }
        Code::FailedPrecondition if msg.contains("not the leader") => Failure::NotLeader {
            hint: status
                .metadata()
                .get(LEADER_ADDR_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(normalize_addr)
                .filter(|a| !a.is_empty()),
            message: format!("{addr}: {msg}"),
        },
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Cancelled => Failure::Retry(format!("{addr}: {:?}: {msg}", status.code())),
        // Transport failures that tonic did not map to UNAVAILABLE (a connection reset
        // mid-call) surface as UNKNOWN with a transport source.
        Code::Unknown if is_transport(status) => {
            Failure::Retry(format!("{addr}: transport error: {msg}"))
        }
        Code::NotFound => Failure::NotFound(msg),
        Code::InvalidArgument | Code::OutOfRange => {
            Failure::Fatal(ClientError::InvalidArgument(msg))
        }
        Code::AlreadyExists => Failure::Fatal(ClientError::AlreadyExists(msg)),
        Code::PermissionDenied => Failure::Fatal(ClientError::PermissionDenied(msg)),
        Code::Unauthenticated => Failure::Fatal(ClientError::Unauthenticated(msg)),
        code => Failure::Fatal(ClientError::Rpc {
            what: what.to_string(),
            code,
            message: msg,
        }),
    }
}

fn is_transport(status: &Status) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = src {
        if e.is::<tonic::transport::Error>() || e.is::<std::io::Error>() {
            return true;
        }
        src = e.source();
    }
    false
}

/// Trims an address and drops an `http://` prefix (addresses are `host:port`).
pub(crate) fn normalize_addr(a: &str) -> String {
    let a = a.trim();
    let a = a.strip_prefix("http://").unwrap_or(a);
    a.trim_end_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        let mut s = Status::failed_precondition("not the leader; the leader is node 2");
        s.metadata_mut()
            .insert(LEADER_ADDR_HEADER, "http://10.0.0.2:7051".parse().unwrap());
        match classify("x", "a:1", &s) {
            Failure::NotLeader { hint, .. } => assert_eq!(hint.as_deref(), Some("10.0.0.2:7051")),
            f => panic!("{f:?}"),
        }
        assert!(matches!(
            classify(
                "x",
                "a:1",
                &Status::failed_precondition("table is being deleted")
            ),
            Failure::Fatal(ClientError::Rpc { .. })
        ));
        assert!(matches!(
            classify("x", "a:1", &Status::unavailable("down")),
            Failure::Retry(_)
        ));
        assert!(matches!(
            classify("x", "a:1", &Status::not_found("t")),
            Failure::NotFound(_)
        ));
        assert!(matches!(
            classify("x", "a:1", &Status::invalid_argument("bad")),
            Failure::Fatal(ClientError::InvalidArgument(_))
        ));
        assert!(matches!(
            classify("x", "a:1", &Status::already_exists("t")),
            Failure::Fatal(ClientError::AlreadyExists(_))
        ));
        assert!(
            ClientError::NotFound("x".into())
                .for_table("t")
                .to_string()
                .contains("'t'")
        );
    }
}
