//! The transaction block of one PostgreSQL connection: its state as the protocol
//! sees it.
//!
//! The block's writes are a Cairn transaction held by the session
//! ([`cairn_sql::txn::SessionTxn`]): `COMMIT` commits them and `ROLLBACK` discards them.
//! [`TxBlock`] follows PostgreSQL's rules around that:
//!
//! - an error inside a block fails the block: every statement but `COMMIT`, `ROLLBACK`
//!   and `ROLLBACK TO SAVEPOINT` is refused with SQLSTATE 25P02 until one of those, and
//!   `COMMIT` of a failed block rolls it back and answers `ROLLBACK`;
//! - `SAVEPOINT`, `RELEASE` and `ROLLBACK TO` keep a stack of savepoints (25P01
//!   outside a block, 3B001 for an unknown name);
//! - `ROLLBACK TO` a savepoint succeeds when no statement since the savepoint may
//!   have written: then there is nothing to undo, and it is exactly what PostgreSQL
//!   does. When one may have written, it is refused with 0A000: a Cairn transaction
//!   can be rolled back only as a whole, and claiming to undo part of it would hide
//!   the rows that stay.

use cairn_sql::error::SqlError;

/// A savepoint: its name and the block's write count when it was set.
#[derive(Debug, Clone)]
struct Savepoint {
    name: String,
    writes: u64,
}

/// The state of a connection's transaction block.
#[derive(Debug, Default)]
pub(crate) struct TxBlock {
    /// Inside `BEGIN` … `COMMIT`.
    open: bool,
    /// A statement of the block failed: only ending it (or rolling back to a
    /// savepoint) is allowed.
    failed: bool,
    /// Statements of the block that wrote, or may have written.
    writes: u64,
    /// Savepoints, oldest first.
    savepoints: Vec<Savepoint>,
}

/// The error for a savepoint command outside a transaction block.
fn outside_block(what: &str) -> SqlError {
    SqlError::other(
        "25P01",
        format!("{what} can only be used in transaction blocks: run BEGIN first"),
    )
}

impl TxBlock {
    /// `BEGIN`: opens a block (a second `BEGIN` inside one changes nothing, as in
    /// PostgreSQL, which only warns).
    pub(crate) fn begin(&mut self) {
        if !self.open {
            *self = TxBlock {
                open: true,
                ..TxBlock::default()
            };
        }
    }

    /// `COMMIT` or `ROLLBACK`: closes the block. Returns the command tag PostgreSQL
    /// answers: `ROLLBACK` for a `COMMIT` of a failed block.
    pub(crate) fn end(&mut self, commit: bool) -> &'static str {
        let tag = if commit && !self.failed {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        *self = TxBlock::default();
        tag
    }

    /// Whether a statement may run now; `ends_block` for the statements that end a
    /// failed block or roll back within it.
    pub(crate) fn check(&self, ends_block: bool) -> Result<(), SqlError> {
        if self.failed && !ends_block {
            return Err(SqlError::other(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction \
                 block: run ROLLBACK (or ROLLBACK TO a savepoint set before the error)",
            ));
        }
        Ok(())
    }

    /// A statement failed; `may_have_written` unless it surely changed nothing.
    pub(crate) fn failed(&mut self, may_have_written: bool) {
        if self.open {
            self.failed = true;
        }
        if may_have_written {
            self.wrote();
        }
    }

    /// A statement that wrote (or may have) completed.
    pub(crate) fn wrote(&mut self) {
        if self.open {
            self.writes += 1;
        }
    }

    /// `SAVEPOINT name`.
    pub(crate) fn savepoint(&mut self, name: &str) -> Result<(), SqlError> {
        if !self.open {
            return Err(outside_block("SAVEPOINT"));
        }
        self.check(false)?;
        self.savepoints.push(Savepoint {
            name: name.to_string(),
            writes: self.writes,
        });
        Ok(())
    }

    /// The newest savepoint called `name`.
    fn find(&self, what: &str, name: &str) -> Result<usize, SqlError> {
        if !self.open {
            return Err(outside_block(what));
        }
        self.savepoints
            .iter()
            .rposition(|s| s.name == name)
            .ok_or_else(|| SqlError::other("3B001", format!("savepoint \"{name}\" does not exist")))
    }

    /// `RELEASE SAVEPOINT name`: forgets it and every later one.
    pub(crate) fn release(&mut self, name: &str) -> Result<(), SqlError> {
        let at = self.find("RELEASE SAVEPOINT", name)?;
        self.check(false)?;
        self.savepoints.truncate(at);
        Ok(())
    }

    /// `ROLLBACK TO SAVEPOINT name`: allowed when nothing since the savepoint may have
    /// written; keeps the savepoint, forgets later ones and clears a failure.
    pub(crate) fn rollback_to(&mut self, name: &str) -> Result<(), SqlError> {
        let at = self.find("ROLLBACK TO SAVEPOINT", name)?;
        let since = self.writes - self.savepoints[at].writes;
        if since > 0 {
            return Err(SqlError::unsupported(format!(
                "ROLLBACK TO SAVEPOINT {name} cannot undo the {since} statement(s) that wrote \
                 since it: Cairn rolls a transaction back only as a whole; run ROLLBACK and \
                 run the transaction again without the part to undo"
            )));
        }
        self.savepoints.truncate(at + 1);
        self.failed = false;
        Ok(())
    }
}

/// Whether a failed statement surely wrote nothing: it only reads, it failed before
/// running (a syntax, name or privilege error, an unsupported feature), or the write
/// reports that no row was written.
pub(crate) fn wrote_nothing(read_only: bool, e: &SqlError) -> bool {
    if read_only {
        return true;
    }
    if let SqlError::Row { written: 0, .. } = e {
        return true;
    }
    let code = e.sqlstate();
    ["42", "0A", "25", "3B"].iter().any(|c| code.starts_with(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savepoints_follow_postgres_when_nothing_was_written() {
        let mut b = TxBlock::default();
        assert_eq!(b.savepoint("a").unwrap_err().sqlstate(), "25P01");
        b.begin();
        b.savepoint("a").unwrap();
        b.savepoint("b").unwrap();
        // A failed read fails the block ...
        b.failed(false);
        assert_eq!(b.check(false).unwrap_err().sqlstate(), "25P02");
        assert_eq!(b.savepoint("c").unwrap_err().sqlstate(), "25P02");
        // ... and rolling back to a savepoint set before it recovers it.
        b.rollback_to("b").unwrap();
        b.check(false).unwrap();
        b.release("a").unwrap();
        assert_eq!(b.release("b").unwrap_err().sqlstate(), "3B001");
        assert_eq!(b.end(true), "COMMIT");
        assert_eq!(b.rollback_to("a").unwrap_err().sqlstate(), "25P01");
    }

    #[test]
    fn rollback_to_refuses_to_pretend_writes_were_undone() {
        let mut b = TxBlock::default();
        b.begin();
        b.wrote();
        b.savepoint("s").unwrap();
        b.rollback_to("s").unwrap();
        b.wrote();
        let e = b.rollback_to("s").unwrap_err();
        assert_eq!(e.sqlstate(), "0A000");
        assert!(e.to_string().contains("1 statement(s)"), "{e}");
        // A failed statement that may have written counts as a write.
        b.begin();
        b.savepoint("t").unwrap();
        b.failed(true);
        assert_eq!(b.rollback_to("t").unwrap_err().sqlstate(), "0A000");
        assert_eq!(b.end(true), "ROLLBACK");
    }

    #[test]
    fn writes_outside_a_block_are_not_counted() {
        let mut b = TxBlock::default();
        b.wrote();
        b.failed(true);
        b.check(false).unwrap();
        b.begin();
        b.savepoint("s").unwrap();
        b.rollback_to("s").unwrap();
    }

    #[test]
    fn what_surely_wrote_nothing() {
        let row = |written| SqlError::Row {
            kind: cairn_proto::RowErrorKind::AlreadyPresent,
            message: String::new(),
            written,
        };
        assert!(wrote_nothing(false, &row(0)));
        assert!(!wrote_nothing(false, &row(3)));
        assert!(wrote_nothing(true, &row(3)));
        assert!(wrote_nothing(false, &SqlError::other("42P01", "no table")));
        assert!(!wrote_nothing(
            false,
            &SqlError::other("22012", "division by zero")
        ));
    }
}
