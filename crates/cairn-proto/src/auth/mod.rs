//! Who is calling, and what may they do: users, privileges, tokens and the check
//! every service makes before it acts.
//!
//! Cairn knows two kinds of caller ([`Principal`]):
//!
//! - **Internal**: a Cairn server or an operator tool holding a certificate signed by
//!   the cluster CA (mutual TLS, see [`crate::tls`]). Internal callers may do
//!   everything; only they may heartbeat, vote or append Raft entries. On a cluster
//!   without TLS (loopback, or `--insecure`) every caller is internal: there is nothing
//!   to tell them apart by.
//! - **A user**, named in the catalog with a SCRAM-SHA-256 verifier ([`ScramVerifier`]),
//!   privileges on tables ([`Privileges`]) and two attributes: *superuser* (everything,
//!   administrative RPCs included) and *create* (may create tables). Native clients
//!   present a token ([`token`]) signed by the master; the SQL front ends check the
//!   password themselves and act for the user, checking privileges while planning.
//!
//! One function, [`Principal::check`], decides every question of the form "may this
//! caller do that", for the master, the tablet servers and the SQL planner alike.

pub mod scram;
pub mod token;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tonic::Status;

pub use scram::{ScramServer, ScramVerifier};
pub use token::{Claims, TokenKey, TokenVerifier, now_ms};

/// The metadata key carrying a client's token (`authorization: Bearer <token>`).
pub const AUTHORIZATION_HEADER: &str = "authorization";

/// The user every new cluster starts with: a superuser (PostgreSQL's bootstrap role).
pub const BOOTSTRAP_USER: &str = "cairn";

/// Why a caller was not let in or not allowed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A message of an authentication exchange is malformed.
    #[error("authentication protocol error: {0}")]
    Protocol(String),
    /// The password (or SCRAM proof) is wrong, or the user does not exist.
    #[error("password authentication failed")]
    BadPassword,
    /// A token is malformed, forged or expired.
    #[error("{0}")]
    BadToken(String),
    /// No credentials where they are required.
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but not allowed (SQLSTATE 42501).
    #[error("{0}")]
    Denied(String),
    /// Too many failed logins: wait before trying again.
    #[error("too many failed logins for user \"{0}\": wait a minute before trying again")]
    RateLimited(String),
    /// Something that should not fail did.
    #[error("authentication failed inside the server: {0}")]
    Internal(String),
}

impl From<AuthError> for Status {
    fn from(e: AuthError) -> Status {
        match e {
            AuthError::Denied(m) => Status::permission_denied(m),
            AuthError::Internal(_) => Status::internal(e.to_string()),
            AuthError::Protocol(_) => Status::invalid_argument(e.to_string()),
            _ => Status::unauthenticated(e.to_string()),
        }
    }
}

/// Table privileges, a set of SELECT, INSERT, UPDATE and DELETE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Privileges(pub u8);

impl Privileges {
    /// None.
    pub const NONE: Privileges = Privileges(0);
    /// Read rows.
    pub const SELECT: Privileges = Privileges(1);
    /// Insert rows.
    pub const INSERT: Privileges = Privileges(2);
    /// Change rows.
    pub const UPDATE: Privileges = Privileges(4);
    /// Delete rows.
    pub const DELETE: Privileges = Privileges(8);
    /// All four.
    pub const ALL: Privileges = Privileges(15);

    /// The privilege named `name` (`SELECT`, `INSERT`, `UPDATE`, `DELETE`, `ALL`),
    /// any case.
    pub fn parse(name: &str) -> Option<Privileges> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SELECT" => Self::SELECT,
            "INSERT" => Self::INSERT,
            "UPDATE" => Self::UPDATE,
            "DELETE" => Self::DELETE,
            "ALL" | "ALL PRIVILEGES" => Self::ALL,
            _ => return None,
        })
    }

    /// Whether every privilege of `other` is in `self`.
    pub fn contains(self, other: Privileges) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets.
    pub fn union(self, other: Privileges) -> Privileges {
        Privileges(self.0 | other.0)
    }

    /// `self` without `other`.
    pub fn without(self, other: Privileges) -> Privileges {
        Privileges(self.0 & !other.0 & Self::ALL.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 & Self::ALL.0 == 0
    }

    /// The names in the set, lower case (`select, insert`), as PostgreSQL's messages
    /// say them.
    pub fn names(self) -> Vec<&'static str> {
        [
            (Self::SELECT, "select"),
            (Self::INSERT, "insert"),
            (Self::UPDATE, "update"),
            (Self::DELETE, "delete"),
        ]
        .into_iter()
        .filter(|(p, _)| self.contains(*p))
        .map(|(_, n)| n)
        .collect()
    }
}

/// A user as the catalog stores it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserEntry {
    /// The name (unique; PostgreSQL's identifier rules: folded to lower case unless
    /// quoted).
    pub name: String,
    /// The SCRAM-SHA-256 verifier in PostgreSQL's text form; `None`: cannot log in
    /// with a password.
    pub password: Option<String>,
    /// May do everything.
    pub superuser: bool,
    /// May create tables (`GRANT CREATE ON DATABASE`/`SCHEMA`, or `CREATEDB`).
    pub create: bool,
    /// Privileges per table id (the creator of a table holds ALL on it).
    pub grants: BTreeMap<String, Privileges>,
}

impl UserEntry {
    /// The verifier, if the user has a readable one.
    pub fn verifier(&self) -> Option<ScramVerifier> {
        self.password.as_deref().and_then(ScramVerifier::parse)
    }

    /// Token claims for this user, valid until `expires_ms`.
    pub fn claims(&self, expires_ms: u64) -> Claims {
        Claims {
            user: self.name.clone(),
            superuser: self.superuser,
            create: self.create,
            tables: self.grants.clone(),
            expires_ms,
        }
    }
}

/// A change to users or privileges (the `UserDdl` RPC and the catalog's op). Table
/// names in requests are replaced by ids by the master before the op is logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UserOp {
    /// `CREATE USER`.
    Create {
        /// The user.
        name: String,
        /// The verifier (text form).
        password: Option<String>,
        /// `SUPERUSER`.
        superuser: bool,
        /// `CREATEDB`.
        create: bool,
        /// `IF NOT EXISTS`: an existing user is not an error.
        if_not_exists: bool,
    },
    /// `ALTER USER`: each `Some` field changes.
    Alter {
        /// The user.
        name: String,
        /// A new verifier (`Some(None)`: `PASSWORD NULL`).
        password: Option<Option<String>>,
        /// `SUPERUSER` / `NOSUPERUSER`.
        superuser: Option<bool>,
        /// `CREATEDB` / `NOCREATEDB`.
        create: Option<bool>,
    },
    /// `DROP USER`.
    Drop {
        /// The user.
        name: String,
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// `GRANT` (`revoke: false`) or `REVOKE` (`true`).
    Grant {
        /// The users.
        users: Vec<String>,
        /// The tables (names in requests, ids in the log).
        tables: Vec<String>,
        /// The table privileges.
        privileges: Privileges,
        /// The CREATE privilege (on the database or schema).
        create: bool,
        /// Take away instead of give.
        revoke: bool,
    },
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// A Cairn server or operator tool (cluster certificate), or anyone on a cluster
    /// without TLS.
    Internal,
    /// A user, with what the token or catalog says about them.
    User(Claims),
}

/// Something a caller wants to do.
#[derive(Clone, Copy, Debug)]
pub enum Action<'a> {
    /// Use a table's rows.
    Table {
        /// Table id (privileges are held per id).
        id: &'a str,
        /// Its name (for the message).
        name: &'a str,
        /// What is needed.
        need: Privileges,
    },
    /// Create a table.
    CreateTable,
    /// Alter or drop a table: its owner or a superuser.
    OwnTable {
        /// Its name.
        name: &'a str,
        /// Its owner.
        owner: &'a str,
    },
    /// Manage users and grants, or read files on the server (`COPY FROM` a path).
    Superuser(&'a str),
    /// An administrative tablet or cluster RPC (named).
    Admin(&'a str),
    /// Something only Cairn servers do (heartbeats, Raft).
    Internal(&'a str),
}

impl Principal {
    /// The user name (`"cairn"` for internal callers: they act as the bootstrap
    /// superuser).
    pub fn name(&self) -> &str {
        match self {
            Principal::Internal => BOOTSTRAP_USER,
            Principal::User(c) => &c.user,
        }
    }

    /// Whether this caller may do everything users may.
    pub fn is_superuser(&self) -> bool {
        match self {
            Principal::Internal => true,
            Principal::User(c) => c.superuser,
        }
    }

    /// Whether the caller may do `action`; the error is PostgreSQL's message for it.
    pub fn check(&self, action: Action<'_>) -> Result<(), AuthError> {
        if matches!(self, Principal::Internal) {
            return Ok(());
        }
        let Principal::User(c) = self else {
            return Ok(());
        };
        let deny = |m: String| Err(AuthError::Denied(m));
        match action {
            Action::Internal(what) => deny(format!(
                "permission denied: {what} is for Cairn servers only (a cluster certificate)"
            )),
            _ if c.superuser => Ok(()),
            Action::Table { id, name, need } => {
                let have = c.tables.get(id).copied().unwrap_or_default();
                if have.contains(need) {
                    Ok(())
                } else {
                    let missing = need.without(have).names().join(", ");
                    deny(format!(
                        "permission denied for table {name}: user \"{}\" lacks {missing} \
                         (GRANT {} ON {name} TO {})",
                        c.user,
                        missing.to_ascii_uppercase(),
                        c.user
                    ))
                }
            }
            Action::CreateTable if c.create => Ok(()),
            Action::CreateTable => deny(format!(
                "permission denied for schema public: user \"{}\" may not create tables \
                 (GRANT CREATE ON SCHEMA public TO {})",
                c.user, c.user
            )),
            Action::OwnTable { owner, .. } if owner == c.user => Ok(()),
            Action::OwnTable { name, .. } => deny(format!("must be owner of table {name}")),
            Action::Superuser(what) => {
                deny(format!("permission denied: only a superuser may {what}"))
            }
            Action::Admin(what) => deny(format!(
                "permission denied: {what} needs a superuser or a cluster certificate"
            )),
        }
    }
}

/// Whether `who` may make the user change `op`: a superuser may make any; a user may
/// change only their own password.
pub fn check_user_op(who: &Principal, op: &UserOp) -> Result<(), AuthError> {
    match op {
        UserOp::Alter {
            name,
            superuser: None,
            create: None,
            ..
        } if name == who.name() => Ok(()),
        UserOp::Drop { name, .. } if name == who.name() => {
            Err(AuthError::Denied("current user cannot be dropped".into()))
        }
        _ => who.check(Action::Superuser("manage users and privileges")),
    }
}

/// Failed logins a user may have within [`FAILURE_WINDOW`] before further attempts
/// are refused until the window passes.
pub const MAX_LOGIN_FAILURES: u32 = 5;
/// The window over which failed logins are counted.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// Failed logins per user name, per process (a restart or failover forgets them).
/// Every front end that checks passwords keeps one: the master for native clients, the
/// SQL front ends for theirs.
#[derive(Debug, Default)]
pub struct LoginFailures {
    by_user: std::sync::Mutex<std::collections::HashMap<String, (u32, Instant)>>,
}

impl LoginFailures {
    /// Refuses `user` while it has too many recent failures.
    pub fn check(&self, user: &str) -> std::result::Result<(), AuthError> {
        let m = self.by_user.lock().unwrap_or_else(|e| e.into_inner());
        match m.get(user) {
            Some((n, since)) if *n >= MAX_LOGIN_FAILURES && since.elapsed() < FAILURE_WINDOW => {
                Err(AuthError::RateLimited(user.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// Records a failure (and logs it).
    pub fn failed(&self, user: &str, peer: &str) {
        let mut m = self.by_user.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() > 100_000 {
            m.retain(|_, (_, since)| since.elapsed() < FAILURE_WINDOW);
        }
        let e = m.entry(user.to_string()).or_insert((0, Instant::now()));
        if e.1.elapsed() >= FAILURE_WINDOW {
            *e = (0, Instant::now());
        }
        e.0 += 1;
        tracing::warn!(user, peer, failures = e.0, "failed login");
    }

    /// Forgets `user`'s failures after a success.
    pub fn succeeded(&self, user: &str) {
        self.by_user
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(user);
    }
}

/// A server's view of its callers: decides the [`Principal`] of each request.
///
/// `required` is set on clusters with TLS: a caller then needs a cluster certificate
/// or a valid token. Tablet servers learn the token key from the master
/// ([`AuthGate::set_verifier`]); until then, token holders are asked to retry.
#[derive(Debug, Default)]
pub struct AuthGate {
    required: bool,
    verifier: RwLock<Option<TokenVerifier>>,
}

impl AuthGate {
    /// A gate; `required` when the server runs with TLS.
    pub fn new(required: bool) -> Arc<AuthGate> {
        Arc::new(AuthGate {
            required,
            verifier: RwLock::new(None),
        })
    }

    /// Whether callers must prove who they are.
    pub fn required(&self) -> bool {
        self.required
    }

    /// Sets the token key's public half.
    pub fn set_verifier(&self, v: TokenVerifier) {
        let mut g = self.verifier.write().unwrap_or_else(|e| e.into_inner());
        if g.as_ref() != Some(&v) {
            *g = Some(v);
        }
    }

    /// Whether the token key is known.
    pub fn has_verifier(&self) -> bool {
        self.verifier
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The caller of `req`: a token's user, an internal caller (cluster certificate,
    /// or no TLS at all), or UNAUTHENTICATED.
    pub fn principal<T>(&self, req: &tonic::Request<T>) -> Result<Principal, Status> {
        if let Some(v) = req.metadata().get(AUTHORIZATION_HEADER) {
            let token = v
                .to_str()
                .ok()
                .and_then(|s| s.strip_prefix("Bearer "))
                .ok_or_else(|| Status::unauthenticated("malformed authorization header"))?;
            let verifier = self
                .verifier
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let Some(verifier) = verifier else {
                return Err(Status::unavailable(
                    "this server has not learned the cluster's token key from the master yet: retry",
                ));
            };
            return Ok(Principal::User(verifier.verify(token, now_ms())?));
        }
        if internal_by_transport(req, self.required) {
            return Ok(Principal::Internal);
        }
        Err(Status::unauthenticated(
            "this cluster requires authentication: log in with a user and password \
             (--user, or CAIRN_USER and CAIRN_PASSWORD) or present a cluster certificate \
             (--tls-cert)",
        ))
    }

    /// The caller of `req`, who must be allowed `action`.
    pub fn check<T>(
        &self,
        req: &tonic::Request<T>,
        action: Action<'_>,
    ) -> Result<Principal, Status> {
        let p = self.principal(req)?;
        p.check(action)?;
        Ok(p)
    }
}

/// Whether the caller of `req` is internal by its connection alone: it presented a
/// certificate the cluster CA signed (the TLS handshake checked it), or the server runs
/// without TLS (`tls_required` false), where every caller is.
pub fn internal_by_transport<T>(req: &tonic::Request<T>, tls_required: bool) -> bool {
    !tls_required || req.peer_certs().is_some_and(|c| !c.is_empty())
}

/// A client's token, added to every call it makes (a tonic interceptor).
#[derive(Clone, Debug, Default)]
pub struct Bearer {
    token: Arc<RwLock<Option<String>>>,
}

impl Bearer {
    /// Sets (or clears) the token.
    pub fn set(&self, token: Option<String>) {
        *self.token.write().unwrap_or_else(|e| e.into_inner()) = token;
    }

    /// Whether a token is set.
    pub fn is_set(&self) -> bool {
        self.token
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        let token = self.token.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(t) = token {
            let v = format!("Bearer {t}")
                .parse()
                .map_err(|_| Status::internal("the token is not a valid header value"))?;
            req.metadata_mut().insert(AUTHORIZATION_HEADER, v);
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(superuser: bool, create: bool, grants: &[(&str, Privileges)]) -> Principal {
        Principal::User(Claims {
            user: "bob".into(),
            superuser,
            create,
            tables: grants.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
            expires_ms: u64::MAX,
        })
    }

    #[test]
    fn check_follows_grants_ownership_and_attributes() {
        let sel = Action::Table {
            id: "t1",
            name: "orders",
            need: Privileges::SELECT,
        };
        let ins = Action::Table {
            id: "t1",
            name: "orders",
            need: Privileges::INSERT,
        };
        let bob = user(false, false, &[("t1", Privileges::SELECT)]);
        assert!(bob.check(sel).is_ok());
        let err = bob.check(ins).unwrap_err().to_string();
        assert!(err.contains("permission denied for table orders"), "{err}");
        assert!(bob.check(Action::CreateTable).is_err());
        assert!(user(false, true, &[]).check(Action::CreateTable).is_ok());
        assert!(
            bob.check(Action::OwnTable {
                name: "x",
                owner: "bob"
            })
            .is_ok()
        );
        assert!(
            bob.check(Action::OwnTable {
                name: "x",
                owner: "ann"
            })
            .is_err()
        );
        assert!(bob.check(Action::Admin("DeleteTablet")).is_err());
        let root = user(true, false, &[]);
        assert!(root.check(ins).is_ok() && root.check(Action::Admin("StepDown")).is_ok());
        assert!(root.check(Action::Internal("Heartbeat")).is_err());
        assert!(
            Principal::Internal
                .check(Action::Internal("Heartbeat"))
                .is_ok()
        );
    }

    #[test]
    fn failed_logins_are_rate_limited_per_user() {
        let f = LoginFailures::default();
        for _ in 0..MAX_LOGIN_FAILURES {
            assert!(f.check("ann").is_ok());
            f.failed("ann", "test");
        }
        assert!(matches!(f.check("ann"), Err(AuthError::RateLimited(_))));
        assert!(f.check("bob").is_ok(), "other users are not affected");
        f.succeeded("ann");
        assert!(f.check("ann").is_ok());
    }

    #[test]
    fn privilege_sets() {
        let p = Privileges::SELECT.union(Privileges::DELETE);
        assert!(p.contains(Privileges::SELECT) && !p.contains(Privileges::INSERT));
        assert_eq!(p.names(), ["select", "delete"]);
        assert_eq!(Privileges::ALL.without(Privileges::SELECT).names().len(), 3);
        assert_eq!(Privileges::parse("all"), Some(Privileges::ALL));
        assert_eq!(Privileges::parse("truncate"), None);
    }
}
