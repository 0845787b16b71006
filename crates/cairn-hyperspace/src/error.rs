//! The error type of `cairn-hyperspace`.

/// Everything that can be wrong with a subspace definition, a row or a predicate handed
/// to the hyperspace logic. Messages say what was wrong and how to fix it.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum HyperspaceError {
    /// A subspace definition is unusable (no attributes, a repeated attribute, a column
    /// type that has no coordinate, a region count of zero).
    #[error("invalid subspace: {0}")]
    InvalidSubspace(String),
    /// A value does not have the type of the attribute it is mapped on.
    #[error("attribute '{column}' is {expected} but the value is {got}: {hint}")]
    WrongType {
        /// The attribute (column) name.
        column: String,
        /// The attribute's type.
        expected: String,
        /// The value's type.
        got: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// A region id outside the subspace's grid.
    #[error("region {region} does not exist: the subspace has {regions} regions")]
    NoSuchRegion {
        /// The id asked for.
        region: u32,
        /// How many regions the subspace has.
        regions: u32,
    },
    /// An error from the shared vocabulary (an unknown column, a row of the wrong shape).
    #[error(transparent)]
    Common(#[from] cairn_common::CommonError),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, HyperspaceError>;
