//! Errors of the SQL layer and their SQLSTATE codes.
//!
//! Everything that can go wrong while a statement is parsed, planned or executed ends
//! up as a [`SqlError`]. Front ends use [`SqlError::sqlstate`] to answer with the
//! code PostgreSQL clients expect (42P01 for an unknown table, 23505 for a duplicate
//! key, ...).

use cairn_client::ClientError;
use cairn_proto::RowErrorKind;
use datafusion::error::DataFusionError;

use crate::parser::ParseError;

/// Result alias of this crate.
pub type Result<T, E = SqlError> = std::result::Result<T, E>;

/// An error of a SQL statement.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The statement does not parse, or uses a form Cairn does not support.
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// Planning or execution failed inside DataFusion.
    #[error("{0}")]
    DataFusion(Box<DataFusionError>),
    /// The cluster rejected a request or could not be reached.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// A row of a write statement was rejected.
    #[error("{message}")]
    Row {
        /// Why the server rejected it.
        kind: RowErrorKind,
        /// What happened, with the row.
        message: String,
        /// Rows of the statement written (to other tablets) before it failed.
        written: u64,
    },
    /// Any other error, with its SQLSTATE.
    #[error("{message}")]
    Other {
        /// SQLSTATE code.
        code: &'static str,
        /// What was wrong and what to do.
        message: String,
    },
}

impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        if let DataFusionError::ResourcesExhausted(m) = e.find_root() {
            return SqlError::other(
                "53200",
                format!(
                    "out of memory for this statement: {m}; the per-statement limit is \
                     --query-memory-limit-mb: raise it, or make the statement need less"
                ),
            );
        }
        // Errors raised by Cairn code inside DataFusion travel as `External`: unwrap
        // them so their SQLSTATE survives.
        match e {
            DataFusionError::External(inner) => match inner.downcast::<SqlError>() {
                Ok(sql) => *sql,
                Err(other) => SqlError::DataFusion(Box::new(DataFusionError::External(other))),
            },
            DataFusionError::Context(ctx, inner) => match SqlError::from(*inner) {
                SqlError::DataFusion(d) => {
                    SqlError::DataFusion(Box::new(DataFusionError::Context(ctx, d)))
                }
                other => other,
            },
            DataFusionError::Shared(shared) => match shared.find_root() {
                DataFusionError::External(inner) => match inner.downcast_ref::<SqlError>() {
                    Some(sql) => SqlError::other(sql.sqlstate(), sql.to_string()),
                    None => SqlError::DataFusion(Box::new(DataFusionError::Shared(shared))),
                },
                _ => SqlError::DataFusion(Box::new(DataFusionError::Shared(shared))),
            },
            other => SqlError::DataFusion(Box::new(other)),
        }
    }
}

impl From<SqlError> for DataFusionError {
    fn from(e: SqlError) -> Self {
        match e {
            SqlError::DataFusion(d) => *d,
            other => DataFusionError::External(Box::new(other)),
        }
    }
}

impl From<cairn_proto::auth::AuthError> for SqlError {
    fn from(e: cairn_proto::auth::AuthError) -> Self {
        use cairn_proto::auth::AuthError as A;
        let code = match &e {
            A::Denied(_) => "42501",
            A::BadPassword | A::RateLimited(_) => "28P01",
            A::BadToken(_) | A::Unauthenticated(_) => "28000",
            A::Protocol(_) => "08P01",
            A::Internal(_) => "XX000",
        };
        SqlError::other(code, e.to_string())
    }
}

impl From<cairn_common::CommonError> for SqlError {
    fn from(e: cairn_common::CommonError) -> Self {
        SqlError::other(common_sqlstate(&e), e.to_string())
    }
}

/// The SQLSTATE PostgreSQL gives the problem a Cairn value or schema check found.
fn common_sqlstate(e: &cairn_common::CommonError) -> &'static str {
    use cairn_common::CommonError as C;
    match e {
        C::NullValue { .. } => "23502",
        C::ValueTooLong { .. } => "22001",
        C::UnknownColumn(_) => "42703",
        _ => "22023",
    }
}

impl From<arrow::error::ArrowError> for SqlError {
    fn from(e: arrow::error::ArrowError) -> Self {
        SqlError::DataFusion(Box::new(DataFusionError::ArrowError(Box::new(e), None)))
    }
}

impl SqlError {
    /// An error with an explicit SQLSTATE.
    pub fn other(code: &'static str, message: impl Into<String>) -> Self {
        SqlError::Other {
            code,
            message: message.into(),
        }
    }

    /// A feature Cairn does not support (SQLSTATE 0A000).
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::other("0A000", message)
    }

    /// The PostgreSQL SQLSTATE code for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SqlError::Parse(p) => p.sqlstate(),
            SqlError::DataFusion(d) => datafusion_sqlstate(d),
            SqlError::Client(c) => client_sqlstate(c),
            SqlError::Row { kind, .. } => row_sqlstate(*kind),
            SqlError::Other { code, .. } => code,
        }
    }
}

fn row_sqlstate(kind: RowErrorKind) -> &'static str {
    match kind {
        RowErrorKind::AlreadyPresent => "23505",
        RowErrorKind::NotFound => "02000",
        RowErrorKind::Conflict | RowErrorKind::ConditionFailed | RowErrorKind::Aborted => "40001",
        _ => "22023",
    }
}

fn client_sqlstate(e: &ClientError) -> &'static str {
    match e {
        ClientError::TableNotFound(_) => "42P01",
        ClientError::AlreadyExists(_) => "42P07",
        ClientError::InvalidArgument(_) => "22023",
        ClientError::Row(r) => row_sqlstate(r.kind),
        ClientError::Common(c) => common_sqlstate(c),
        ClientError::TableChanged { .. } | ClientError::TxnNotOpen(_) => "40001",
        ClientError::TxnDeadlock(_) => "40P01",
        ClientError::TxnOutcomeUnknown(_) => "08007",
        ClientError::WriteFailed { cause, .. } => client_sqlstate(cause),
        ClientError::PermissionDenied(_) => "42501",
        ClientError::Unauthenticated(_) => "28000",
        ClientError::Timeout { .. } => "57P03",
        e if e.is_retryable() => "57P03",
        _ => "XX000",
    }
}

fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
    use datafusion::common::SchemaError;
    match e.find_root() {
        DataFusionError::SQL(..) => "42601",
        DataFusionError::SchemaError(s, _) => match s.as_ref() {
            SchemaError::FieldNotFound { .. } => "42703",
            SchemaError::AmbiguousReference { .. } => "42702",
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::Plan(msg) => {
            if msg.contains("table") && msg.contains("not found") {
                "42P01"
            } else if msg.contains("No field named") {
                "42703"
            } else {
                "42000"
            }
        }
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            arrow::error::ArrowError::DivideByZero => "22012",
            arrow::error::ArrowError::CastError(_) | arrow::error::ArrowError::ParseError(_) => {
                "22P02"
            }
            arrow::error::ArrowError::ArithmeticOverflow(_) => "22003",
            arrow::error::ArrowError::InvalidArgumentError(m) if m.contains("non-nullable") => {
                "23502"
            }
            _ => "XX000",
        },
        DataFusionError::Execution(msg) if msg.contains("Cannot cast") => "22P02",
        DataFusionError::External(inner) => match inner.downcast_ref::<SqlError>() {
            Some(s) => s.sqlstate(),
            None => "XX000",
        },
        DataFusionError::ResourcesExhausted(_) => "53200",
        _ => "XX000",
    }
}

/// Wraps a Cairn error for a DataFusion API.
pub(crate) fn df_err(e: impl Into<SqlError>) -> DataFusionError {
    DataFusionError::from(e.into())
}
