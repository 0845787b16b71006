//! SQL errors as gRPC statuses.
//!
//! Every error a Flight SQL call returns carries its PostgreSQL SQLSTATE at the start
//! of the message (`42P01: table 'x' does not exist`), so that clients can tell errors
//! apart the way PostgreSQL clients do, and a gRPC code that fits it.

use tonic::{Code, Status};

use cairn_sql::error::SqlError;

/// The gRPC status for a SQL error: a code that fits its SQLSTATE and the message
/// `"<SQLSTATE>: <error>"`.
pub fn sql_error_status(e: &SqlError) -> Status {
    status_with_state(e.sqlstate(), &e.to_string())
}

/// A status for `message` with the SQLSTATE `state` in front of it.
pub(crate) fn status_with_state(state: &str, message: &str) -> Status {
    Status::new(grpc_code(state), format!("{state}: {message}"))
}

/// The gRPC code that fits a SQLSTATE:
///
/// | SQLSTATE | code |
/// |---|---|
/// | `42P01` (unknown table), `02000` (no such row), `26000` (unknown prepared statement), `34000` (unknown ticket) | `NotFound` |
/// | `42P07` (table exists), `23505` (duplicate key) | `AlreadyExists` |
/// | `57P03` (cluster unavailable, timeout) | `Unavailable` |
/// | `42501` (insufficient privilege) | `PermissionDenied` |
/// | `28000`, `28P01` (no or wrong login) | `Unauthenticated` |
/// | `0A000` (not supported) | `Unimplemented` |
/// | `40001` (retry: the table changed) | `Aborted` |
/// | `53xxx` (out of resources) | `ResourceExhausted` |
/// | `57014` (cancelled) | `Cancelled` |
/// | other `42xxx` (syntax, names), `22xxx` (data), `23xxx` (constraints), `08P01` (protocol) | `InvalidArgument` |
/// | anything else | `Internal` |
pub fn grpc_code(sqlstate: &str) -> Code {
    match sqlstate {
        "42P01" | "02000" | "26000" | "34000" => Code::NotFound,
        "42P07" | "23505" => Code::AlreadyExists,
        "57P03" => Code::Unavailable,
        "42501" => Code::PermissionDenied,
        "28000" | "28P01" => Code::Unauthenticated,
        "0A000" => Code::Unimplemented,
        "40001" | "40P01" => Code::Aborted,
        "57014" => Code::Cancelled,
        "08P01" => Code::InvalidArgument,
        s if s.starts_with("53") => Code::ResourceExhausted,
        s if s.starts_with("25") => Code::FailedPrecondition,
        s if s.starts_with("42") || s.starts_with("22") || s.starts_with("23") => {
            Code::InvalidArgument
        }
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_fit_sqlstates() {
        assert_eq!(grpc_code("42P01"), Code::NotFound);
        assert_eq!(grpc_code("42P07"), Code::AlreadyExists);
        assert_eq!(grpc_code("23505"), Code::AlreadyExists);
        assert_eq!(grpc_code("57P03"), Code::Unavailable);
        assert_eq!(grpc_code("42601"), Code::InvalidArgument);
        assert_eq!(grpc_code("42703"), Code::InvalidArgument);
        assert_eq!(grpc_code("22012"), Code::InvalidArgument);
        assert_eq!(grpc_code("23502"), Code::InvalidArgument);
        assert_eq!(grpc_code("0A000"), Code::Unimplemented);
        assert_eq!(grpc_code("XX000"), Code::Internal);
    }

    #[test]
    fn message_starts_with_sqlstate() {
        let e = SqlError::other("42P01", "table 'x' does not exist");
        let s = sql_error_status(&e);
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "42P01: table 'x' does not exist");
    }
}
