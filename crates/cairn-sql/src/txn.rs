//! A SQL session's transaction: `BEGIN` … `COMMIT` over Cairn's multi-row
//! transactions.
//!
//! A [`SessionTxn`] wraps a [`cairn_client::Transaction`] with what SQL adds to it:
//!
//! - **Isolation.** PostgreSQL's default, READ COMMITTED, gives every statement a
//!   new snapshot; REPEATABLE READ reads every statement at the snapshot the first
//!   read of the transaction chose. SERIALIZABLE is accepted and runs as REPEATABLE
//!   READ, which in Cairn is snapshot isolation (as PostgreSQL's SERIALIZABLE was
//!   before 9.1): write skew between two transactions is not prevented.
//! - **Reading and writing as the transaction.** Scans read the transaction's own
//!   provisional rows over the snapshot; writes are provisional until `COMMIT`.
//!   UPDATE and DELETE write each row on the condition that it has not changed since
//!   the snapshot they read it at. Under READ COMMITTED a row that did change is read
//!   again and re-evaluated (PostgreSQL's EvalPlanQual); under REPEATABLE READ it
//!   fails the statement with SQLSTATE 40001 — the first committer wins.
//! - **Locks.** A row written by a transaction belongs to it until it ends: another
//!   writer waits, and a wait that would deadlock is refused with 40P01.
//! - **Read only.** `BEGIN READ ONLY` (or `SET TRANSACTION READ ONLY`) refuses
//!   writes with 25006.
//!
//! Statements outside a block are their own transaction: a write statement that
//! reaches one tablet in one request commits in that request; one that spans
//! several tablets (or requests) runs in an implicit transaction committed with it
//! (`crate::write`).

use std::sync::Arc;

use cairn_client::{Client, Transaction};

use crate::error::{Result, SqlError};
use crate::session::{QueryResult, SqlSession};
use datafusion::sql::sqlparser::ast;

/// A transaction isolation level, as SQL names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Each statement reads a new snapshot (READ UNCOMMITTED means this too, as in
    /// PostgreSQL).
    #[default]
    ReadCommitted,
    /// Every statement reads the transaction's snapshot.
    RepeatableRead,
    /// Accepted; runs as [`Isolation::RepeatableRead`] (snapshot isolation).
    Serializable,
}

impl Isolation {
    /// The level named by `words` (`read committed`, `repeatable read`, ...), in any
    /// case and spacing.
    pub fn parse(words: &str) -> Option<Isolation> {
        let w: Vec<String> = words
            .split_whitespace()
            .map(|w| w.trim_matches('\'').to_ascii_lowercase())
            .collect();
        let w: Vec<&str> = w.iter().map(String::as_str).collect();
        match w.as_slice() {
            ["read", "committed"] | ["read", "uncommitted"] => Some(Isolation::ReadCommitted),
            ["repeatable", "read"] => Some(Isolation::RepeatableRead),
            ["serializable"] => Some(Isolation::Serializable),
            _ => None,
        }
    }

    /// The name `SHOW transaction_isolation` reports.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
            Isolation::Serializable => "serializable",
        }
    }

    /// Whether every statement reads at the transaction's snapshot.
    pub fn fixed_snapshot(self) -> bool {
        !matches!(self, Isolation::ReadCommitted)
    }
}

/// Transaction characteristics given to `BEGIN` / `SET TRANSACTION` (unset ones keep
/// their defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxnModes {
    /// `ISOLATION LEVEL …`.
    pub isolation: Option<Isolation>,
    /// `READ ONLY` (true) or `READ WRITE` (false).
    pub read_only: Option<bool>,
}

impl TxnModes {
    /// Parses the modes in the words after `BEGIN` / `SET TRANSACTION`
    /// (`ISOLATION LEVEL REPEATABLE READ, READ ONLY`, `DEFERRABLE`, ...).
    /// Unknown words are an error (42601).
    pub fn parse(words: &[&str]) -> Result<TxnModes> {
        let w: Vec<String> = words
            .iter()
            .map(|w| w.trim_matches(',').to_ascii_lowercase())
            .filter(|w| !w.is_empty())
            .collect();
        let mut modes = TxnModes::default();
        let mut i = 0;
        let bad = |rest: &[String]| {
            SqlError::other(
                "42601",
                format!(
                    "syntax error in transaction modes at \"{}\": expected ISOLATION LEVEL \
                     {{READ COMMITTED | REPEATABLE READ | SERIALIZABLE}}, READ ONLY or READ \
                     WRITE",
                    rest.join(" ")
                ),
            )
        };
        while i < w.len() {
            match (w[i].as_str(), w.get(i + 1).map(String::as_str)) {
                ("transaction" | "work", _) if i == 0 => i += 1,
                ("isolation", Some("level")) => {
                    let two = w.get(i + 2..i + 4).map(|s| s.join(" "));
                    let one = w.get(i + 2).cloned();
                    if let Some(l) = two.as_deref().and_then(Isolation::parse) {
                        modes.isolation = Some(l);
                        i += 4;
                    } else if let Some(l) = one.as_deref().and_then(Isolation::parse) {
                        modes.isolation = Some(l);
                        i += 3;
                    } else {
                        return Err(bad(&w[i..]));
                    }
                }
                ("read", Some("only")) => {
                    modes.read_only = Some(true);
                    i += 2;
                }
                ("read", Some("write")) => {
                    modes.read_only = Some(false);
                    i += 2;
                }
                ("deferrable", _) => i += 1,
                ("not", Some("deferrable")) => i += 2,
                _ => return Err(bad(&w[i..])),
            }
        }
        Ok(modes)
    }
}

/// An open transaction of a SQL session (see the module docs).
pub struct SessionTxn {
    txn: Transaction,
    isolation: Isolation,
    read_only: bool,
    /// The snapshot of a REPEATABLE READ transaction, once its first read chose it.
    snapshot: parking_lot::Mutex<Option<u64>>,
    /// Statements of the transaction that wrote (or may have).
    wrote: std::sync::atomic::AtomicBool,
    /// Rolled back after an error; only ending the block is left.
    aborted: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for SessionTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTxn")
            .field("txn", &self.txn)
            .field("isolation", &self.isolation)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl SessionTxn {
    /// A new transaction on `client`.
    pub fn begin(client: &Client, isolation: Isolation, read_only: bool) -> Arc<Self> {
        Arc::new(SessionTxn {
            txn: client.begin_transaction(),
            isolation,
            read_only,
            snapshot: parking_lot::Mutex::new(None),
            wrote: Default::default(),
            aborted: Default::default(),
        })
    }

    /// The client transaction.
    pub fn transaction(&self) -> &Transaction {
        &self.txn
    }

    /// The isolation level.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// Whether writes are refused.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The snapshot a statement starting now reads at, if the transaction fixed one.
    pub fn snapshot(&self) -> Option<u64> {
        *self.snapshot.lock()
    }

    /// A statement read at `ts`: under REPEATABLE READ the first such snapshot is
    /// the transaction's.
    pub fn note_snapshot(&self, ts: u64) {
        if self.isolation.fixed_snapshot() {
            self.snapshot.lock().get_or_insert(ts);
        }
    }

    /// Refuses a write in a read-only transaction (25006); otherwise notes that the
    /// transaction writes.
    pub fn check_write(&self, what: &str) -> Result<()> {
        if self.read_only {
            return Err(SqlError::other(
                "25006",
                format!("cannot execute {what} in a read-only transaction"),
            ));
        }
        self.wrote.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Commits on every tablet written. A transaction that cannot commit (a
    /// participant lost it, a prepare failed) is rolled back and reported as 40001.
    pub async fn commit(&self) -> Result<()> {
        self.txn.clone().commit().await.map(|_| ()).map_err(|e| {
            if matches!(e, cairn_client::ClientError::TxnNotOpen(_)) {
                SqlError::other(
                    "40001",
                    format!("could not commit the transaction: {e}; run it again"),
                )
            } else {
                e.into()
            }
        })
    }

    /// Rolls back: every tablet written discards the transaction's rows.
    pub async fn rollback(&self) -> Result<()> {
        Ok(self.txn.clone().rollback().await?)
    }
}

impl SqlSession {
    /// The open transaction block, if any.
    pub fn transaction(&self) -> Option<Arc<SessionTxn>> {
        self.txn.lock().clone()
    }

    /// `BEGIN`: opens a transaction block with `modes` over `defaults` (a session's
    /// `default_transaction_…` settings). Inside a block it changes nothing, as in
    /// PostgreSQL (which only warns).
    pub fn begin(&self, modes: TxnModes, defaults: TxnModes) {
        let mut slot = self.txn.lock();
        if slot.is_none() {
            *slot = Some(SessionTxn::begin(
                self.engine().client(),
                modes.isolation.or(defaults.isolation).unwrap_or_default(),
                modes.read_only.or(defaults.read_only).unwrap_or(false),
            ));
        }
    }

    /// `SET TRANSACTION …`: changes the open block's characteristics before its first
    /// statement (25001 after it). Returns false outside a block, where it has no
    /// effect (PostgreSQL warns).
    pub fn set_transaction(&self, modes: TxnModes) -> Result<bool> {
        let mut slot = self.txn.lock();
        let Some(t) = slot.as_ref() else {
            return Ok(false);
        };
        let isolation = modes.isolation.unwrap_or(t.isolation);
        let read_only = modes.read_only.unwrap_or(t.read_only);
        if (isolation, read_only) == (t.isolation, t.read_only) {
            return Ok(true);
        }
        if t.snapshot().is_some() || t.wrote.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(SqlError::other(
                "25001",
                "SET TRANSACTION must be called before any query of the transaction",
            ));
        }
        *slot = Some(SessionTxn::begin(
            self.engine().client(),
            isolation,
            read_only,
        ));
        Ok(true)
    }

    /// `COMMIT`: commits the open block (nothing outside one). On an error the
    /// transaction is rolled back and the block is over all the same.
    pub async fn commit(&self) -> Result<()> {
        let t = self.txn.lock().take();
        match t {
            Some(t) if t.aborted.load(std::sync::atomic::Ordering::SeqCst) => Err(SqlError::other(
                "40001",
                "the transaction was rolled back after a serialization failure or deadlock: \
                 nothing of it was committed; retry it",
            )),
            Some(t) => match t.commit().await {
                Ok(()) => Ok(()),
                Err(e) => {
                    if let Err(r) = t.rollback().await {
                        tracing::debug!(error = %r, "rolling back after a failed commit");
                    }
                    Err(e)
                }
            },
            None => Ok(()),
        }
    }

    /// `ROLLBACK`: discards the open block's writes (nothing outside one).
    pub async fn rollback(&self) -> Result<()> {
        let t = self.txn.lock().take();
        match t {
            Some(t) if t.aborted.load(std::sync::atomic::Ordering::SeqCst) => Ok(()),
            Some(t) => t.rollback().await,
            None => Ok(()),
        }
    }
}

impl SqlSession {
    /// After a statement failed: a serialization failure (40001) or deadlock (40P01)
    /// dooms the open transaction, as any error does in PostgreSQL. It is rolled
    /// back at once — so that the transaction it collided with can go on — and stays
    /// the session's, refusing statements, until `ROLLBACK` (or `COMMIT`) ends it.
    pub async fn after_error(&self, e: &SqlError) {
        if !matches!(e.sqlstate(), "40001" | "40P01") {
            return;
        }
        let Some(t) = self.transaction() else { return };
        if t.aborted.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if let Err(r) = t.rollback().await {
            tracing::debug!(error = %r, "rolling back a doomed transaction");
        }
    }

    /// Refuses a statement in a transaction rolled back after an error (25P02).
    pub(crate) fn check_not_aborted(&self) -> Result<()> {
        match self.transaction() {
            Some(t) if t.aborted.load(std::sync::atomic::Ordering::SeqCst) => Err(SqlError::other(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction \
                 block: it was rolled back after a serialization failure or deadlock; run \
                 ROLLBACK and retry it",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a write in a read-only transaction block (25006).
    pub(crate) fn check_write(&self, what: &str) -> Result<()> {
        match self.transaction() {
            Some(t) => t.check_write(what),
            None => Ok(()),
        }
    }

    /// Runs a transaction-control statement (`BEGIN`, `START TRANSACTION …`,
    /// `COMMIT`, `ROLLBACK`, `SET TRANSACTION …`); `None` for any other statement.
    pub(crate) async fn transaction_statement(
        &self,
        st: &ast::Statement,
    ) -> Option<Result<QueryResult>> {
        let done = |tag: &str| {
            Ok(QueryResult::Done {
                tag: tag.to_string(),
            })
        };
        Some(match st {
            ast::Statement::StartTransaction { modes, .. } => {
                self.begin(modes_of(modes), TxnModes::default());
                done("BEGIN")
            }
            ast::Statement::Set(ast::Set::SetTransaction {
                modes,
                session: false,
                ..
            }) => self
                .set_transaction(modes_of(modes))
                .and_then(|_| done("SET")),
            ast::Statement::Commit { .. } => self.commit().await.and_then(|()| done("COMMIT")),
            ast::Statement::Rollback {
                savepoint: None, ..
            } => self.rollback().await.and_then(|()| done("ROLLBACK")),
            _ => return None,
        })
    }
}

/// Whether `st` is one of the statements [`SqlSession::transaction_statement`] runs.
pub(crate) fn controls_transaction(st: &ast::Statement) -> bool {
    matches!(
        st,
        ast::Statement::StartTransaction { .. }
            | ast::Statement::Commit { .. }
            | ast::Statement::Rollback {
                savepoint: None,
                ..
            }
            | ast::Statement::Set(ast::Set::SetTransaction { session: false, .. })
    )
}

/// The modes of a parsed `BEGIN` / `SET TRANSACTION`.
fn modes_of(modes: &[ast::TransactionMode]) -> TxnModes {
    let mut out = TxnModes::default();
    for m in modes {
        match m {
            ast::TransactionMode::AccessMode(a) => {
                out.read_only = Some(matches!(a, ast::TransactionAccessMode::ReadOnly));
            }
            ast::TransactionMode::IsolationLevel(l) => {
                out.isolation = Some(match l {
                    ast::TransactionIsolationLevel::ReadUncommitted
                    | ast::TransactionIsolationLevel::ReadCommitted => Isolation::ReadCommitted,
                    ast::TransactionIsolationLevel::RepeatableRead => Isolation::RepeatableRead,
                    _ => Isolation::Serializable,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_postgres_writes_them() {
        let p = |s: &str| TxnModes::parse(&s.split_whitespace().collect::<Vec<_>>());
        assert_eq!(p("").unwrap(), TxnModes::default());
        assert_eq!(
            p("TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").unwrap(),
            TxnModes {
                isolation: Some(Isolation::RepeatableRead),
                read_only: Some(true)
            }
        );
        assert_eq!(
            p("isolation level serializable read write deferrable")
                .unwrap()
                .isolation,
            Some(Isolation::Serializable)
        );
        assert_eq!(
            p("WORK ISOLATION LEVEL READ UNCOMMITTED")
                .unwrap()
                .isolation,
            Some(Isolation::ReadCommitted)
        );
        assert_eq!(p("isolation level bogus").unwrap_err().sqlstate(), "42601");
        assert_eq!(p("read sideways").unwrap_err().sqlstate(), "42601");
        assert_eq!(
            Isolation::parse("'Repeatable  Read'"),
            Some(Isolation::RepeatableRead)
        );
    }
}
