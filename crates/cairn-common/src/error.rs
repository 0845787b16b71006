//! The error type of `cairn-common`.

/// Everything that can go wrong in the shared vocabulary: bad schemas, values that do
/// not fit their column, undecodable bytes. Messages say what was wrong and how to fix it.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum CommonError {
    /// A schema definition or schema change is invalid.
    #[error("invalid schema: {0}")]
    InvalidSchema(String),
    /// A column name was not found in the schema.
    #[error("unknown column '{0}': check the spelling against the table's schema")]
    UnknownColumn(String),
    /// NULL written to a NOT NULL column.
    #[error("null value in column '{column}' violates its NOT NULL constraint")]
    NullValue {
        /// The column name.
        column: String,
    },
    /// A string longer than its column's declared length (`VARCHAR(n)`).
    #[error("value too long for column '{column}': {detail}")]
    ValueTooLong {
        /// The column name.
        column: String,
        /// The lengths.
        detail: String,
    },
    /// A value does not fit the column it is written to.
    #[error("invalid value for column '{column}': {detail}")]
    InvalidValue {
        /// The column name.
        column: String,
        /// What is wrong with the value.
        detail: String,
    },
    /// Bytes (an encoded key, a log record, a delta) could not be decoded.
    #[error("cannot decode {what}: {detail} (the data is corrupt or from an incompatible version)")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// A partition schema is invalid.
    #[error("invalid partition schema: {0}")]
    InvalidPartitioning(String),
    /// A predicate is invalid for its column.
    #[error("invalid predicate: {0}")]
    InvalidPredicate(String),
    /// A timestamp from a client or a peer lies further ahead of this server's clock
    /// than the allowed clock offset.
    #[error(
        "timestamp {observed} is {ahead_ms} ms ahead of this server's clock, more than the \
         allowed clock offset of {max_ms} ms: synchronise the clocks (NTP, chrony) or raise \
         --max-clock-offset-ms"
    )]
    ClockOffset {
        /// The timestamp (HybridTime, raw).
        observed: u64,
        /// How far ahead of the local clock it is.
        ahead_ms: u64,
        /// The bound.
        max_ms: u64,
    },
    /// An object id (tablet, table, Raft group, store) from a request is malformed.
    #[error(
        "invalid {kind} id '{id}': {why}; ids are what the master issued (see `cairn table \
         describe` or ListTablets)"
    )]
    InvalidId {
        /// What kind of object the id names.
        kind: &'static str,
        /// The id, shortened and escaped.
        id: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An Arrow error surfaced while converting data.
    #[error("arrow error: {0}")]
    Arrow(String),
}

impl From<arrow::error::ArrowError> for CommonError {
    fn from(e: arrow::error::ArrowError) -> Self {
        CommonError::Arrow(e.to_string())
    }
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, CommonError>;
