//! Object ids: the one check every RPC applies to a tablet, table, Raft group or store
//! id it receives before the id reaches a map lookup or, worse, a path.
//!
//! Tablet servers name a replica's directory after its tablet id
//! (`<data>/tablets/<id>/`), so an id is a path component and must never be able to
//! name anything else: an empty id would name the `tablets` directory itself, `..` its
//! parent, and `/x` or `a/b` another directory altogether. Ids that the master issues
//! are 16 lowercase hex digits; the check is wider than that (ASCII letters, digits, `-`
//! and `_`, at most [`MAX_ID_LEN`] bytes) so that test fixtures and the master's own
//! group name (`master`) pass, but it admits nothing with a separator, a dot, a NUL or
//! any other byte a file system or a log line would treat specially.

use crate::error::{CommonError, Result};

/// The longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Which kind of object an id names (only used in error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// A tablet (and the directory of its replica on a tablet server).
    Tablet,
    /// A table in the master's catalog.
    Table,
    /// A Raft group (a tablet's or the master catalog's).
    RaftGroup,
    /// A read-only store.
    Store,
}

impl IdKind {
    fn name(self) -> &'static str {
        match self {
            IdKind::Tablet => "tablet",
            IdKind::Table => "table",
            IdKind::RaftGroup => "raft group",
            IdKind::Store => "store",
        }
    }
}

/// Checks that `id` is a well-formed object id of `kind`: 1 to [`MAX_ID_LEN`] bytes
/// of ASCII letters, digits, `-` and `_`. Anything else (empty, `.`, `..`, a path
/// separator, a NUL, non-ASCII) is refused with [`CommonError::InvalidId`].
pub fn validate_id(kind: IdKind, id: &str) -> Result<()> {
    let why = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_ID_LEN {
        Some("it is longer than 128 bytes")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Some("only ASCII letters, digits, '-' and '_' are allowed")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(CommonError::InvalidId {
            kind: kind.name(),
            id: printable(id),
            why,
        }),
    }
}

/// `id` shortened and escaped for an error message, so a hostile id cannot forge log
/// lines or flood them.
fn printable(id: &str) -> String {
    let mut s: String = id.chars().take(64).flat_map(char::escape_default).collect();
    if id.chars().count() > 64 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_issued_and_fixture_ids_pass() {
        for id in [
            "0123456789abcdef",
            "master",
            "t1",
            "no-such",
            "a_b",
            &"x".repeat(128),
        ] {
            assert!(validate_id(IdKind::Tablet, id).is_ok(), "{id}");
        }
    }

    #[test]
    fn path_like_and_odd_ids_are_refused() {
        for id in [
            "",
            ".",
            "..",
            "/x",
            "a/b",
            "a\\b",
            "/",
            "../etc",
            "a.b",
            "a\0b",
            "a b",
            "é",
            "a\nb",
            &"x".repeat(129),
        ] {
            let e = validate_id(IdKind::Tablet, id).unwrap_err();
            assert!(
                matches!(e, CommonError::InvalidId { kind: "tablet", .. }),
                "{id}"
            );
        }
    }

    #[test]
    fn error_names_the_kind_and_escapes_the_id() {
        let e = validate_id(IdKind::Store, "a\nb").unwrap_err().to_string();
        assert!(e.contains("invalid store id 'a\\nb'"), "{e}");
        let e = validate_id(IdKind::Table, &"/".repeat(1000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 400, "{e}");
    }
}
