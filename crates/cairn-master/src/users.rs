//! Users on the master: the bootstrap superuser and the token key, logins
//! (`Authenticate`, with failed logins logged and rate-limited), `ListUsers` for the
//! SQL front ends, and `UserDdl` (CREATE/ALTER/DROP USER, GRANT, REVOKE).
//!
//! Users and privileges live in the replicated catalog ([`crate::catalog::Catalog`]):
//! each change is a [`CatalogOp::User`] applied on every master. The token key is
//! created by the first leader and stored there too, so tokens signed by one leader
//! verify after a failover.

use std::collections::HashMap;
use std::sync::Arc;

use cairn_proto::auth::{
    Action, AuthError, BOOTSTRAP_USER, Principal, ScramVerifier, TokenKey, TokenVerifier,
    UserEntry, UserOp, now_ms,
};

use crate::catalog::CatalogOp;
use crate::error::{MasterError, Result};
use crate::service::MasterState;

impl MasterState {
    /// The token key, parsed once per stored key.
    pub fn token_key(&self) -> Option<Arc<TokenKey>> {
        let stored = self.catalog.read(|c| c.token_key.clone())?;
        let mut cache = self.token_key_cache.lock();
        if let Some((bytes, key)) = cache.as_ref()
            && *bytes == stored
        {
            return Some(key.clone());
        }
        match TokenKey::from_pkcs8(&stored) {
            Ok(k) => {
                let k = Arc::new(k);
                self.gate.set_verifier(TokenVerifier::new(k.public_key()));
                *cache = Some((stored, k.clone()));
                Some(k)
            }
            Err(e) => {
                tracing::error!(error = %e, "the catalog's token key is unreadable");
                None
            }
        }
    }

    /// The caller of `req`, who must be allowed `action`.
    pub fn authorize<T>(
        &self,
        req: &tonic::Request<T>,
        action: Action<'_>,
    ) -> std::result::Result<Principal, tonic::Status> {
        if !self.gate.has_verifier() {
            // Learns the key (and so the verifier) from the catalog if it is there.
            let _ = self.token_key();
        }
        self.gate.check(req, action)
    }

    /// Creates the token key and the bootstrap superuser now if the catalog lacks
    /// them (a new cluster's first calls may come before the reconciler's first round).
    /// REQUIRES: this master is the leader.
    pub async fn ensure_bootstrapped(&self) -> Result<()> {
        if self
            .catalog
            .read(|c| c.token_key.is_none() || c.users.is_empty())
        {
            self.bootstrap_security().await?;
        }
        Ok(())
    }

    /// On a new leader: creates the token key and the bootstrap superuser if the
    /// catalog lacks them. REQUIRES: this master is the leader.
    pub async fn bootstrap_security(&self) -> Result<()> {
        if self.catalog.read(|c| c.token_key.is_none()) {
            let key = TokenKey::generate()?;
            self.propose(&CatalogOp::SetTokenKey {
                pkcs8: key.pkcs8().to_vec(),
            })
            .await?
            .map_err(MasterError::Internal)?;
            tracing::info!("created the cluster's token key");
        }
        if self.catalog.read(|c| c.users.is_empty()) {
            let password = match &self.opts.admin_password {
                Some(p) => Some(ScramVerifier::from_password(p)?.to_string()),
                None => None,
            };
            self.propose(&CatalogOp::User(UserOp::Create {
                name: BOOTSTRAP_USER.into(),
                password,
                superuser: true,
                create: true,
                if_not_exists: true,
            }))
            .await?
            .map_err(MasterError::Internal)?;
            tracing::info!(user = BOOTSTRAP_USER, "created the bootstrap superuser");
        }
        Ok(())
    }

    /// `Authenticate`: checks a password and signs a token for the user.
    pub async fn authenticate(
        &self,
        user: &str,
        password: &str,
        peer: &str,
    ) -> Result<(String, u64)> {
        self.check_leader()?;
        self.ensure_bootstrapped().await?;
        self.login_failures.check(user)?;
        let entry = self.catalog.read(|c| c.users.get(user).cloned());
        let ok = entry
            .as_ref()
            .and_then(UserEntry::verifier)
            .is_some_and(|v| v.check_password(password));
        let Some(entry) = entry.filter(|_| ok) else {
            self.login_failures.failed(user, peer);
            return Err(AuthError::BadPassword.into());
        };
        self.login_failures.succeeded(user);
        let key = self.token_key().ok_or_else(|| {
            MasterError::Unavailable("the cluster's token key is being created: retry".into())
        })?;
        let expires_ms = now_ms() + self.opts.token_validity.as_millis() as u64;
        let token = key.sign(&entry.claims(expires_ms))?;
        Ok((token, expires_ms))
    }

    /// The users (for `ListUsers`) and each table's owner.
    pub fn users_and_owners(&self) -> (Vec<UserEntry>, HashMap<String, String>) {
        self.catalog.read(|c| {
            (
                c.users.values().cloned().collect(),
                c.tables
                    .values()
                    .map(|t| (t.id.clone(), t.owner.clone()))
                    .collect(),
            )
        })
    }

    /// `UserDdl`: checks that `who` may make the change, resolves table (or read-only
    /// store) names to ids and replicates it. REQUIRES: the caller holds no catalog
    /// lock.
    pub async fn user_ddl(&self, who: &Principal, mut op: UserOp) -> Result<()> {
        self.check_leader()?;
        self.ensure_bootstrapped().await?;
        let _ddl = self.ddl.lock().await;
        cairn_proto::auth::check_user_op(who, &op)?;
        match &mut op {
            UserOp::Create { name, password, .. }
            | UserOp::Alter {
                name,
                password: Some(password),
                ..
            } => {
                check_user_name(name)?;
                if let Some(p) = password {
                    check_verifier(p)?;
                }
            }
            UserOp::Alter { name, .. } | UserOp::Drop { name, .. } => check_user_name(name)?,
            UserOp::Grant { tables, .. } => {
                let mut ids = Vec::with_capacity(tables.len());
                for t in tables.iter() {
                    // A store is a read-only table to SQL, and its readers are
                    // granted SELECT on it the same way.
                    let id = self
                        .catalog
                        .read(|c| {
                            c.table_by_name(t).map(|e| e.id.clone()).or_else(|| {
                                crate::stores::by_name(&c.stores, t).map(|s| s.id.clone())
                            })
                        })
                        .ok_or_else(|| MasterError::TableNotFound(t.clone()))?;
                    ids.push(id);
                }
                *tables = ids;
            }
        }
        self.propose(&CatalogOp::User(op))
            .await?
            .map_err(MasterError::InvalidArgument)
    }
}

/// A user name: 1 to 63 characters (PostgreSQL's NAMEDATALEN), no control characters.
fn check_user_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 63 || name.chars().any(char::is_control) {
        return Err(MasterError::InvalidArgument(
            "a user name must have 1 to 63 characters and no control characters".into(),
        ));
    }
    Ok(())
}

/// Passwords reach the master as verifiers only.
fn check_verifier(v: &str) -> Result<()> {
    if ScramVerifier::parse(v).is_none() {
        return Err(MasterError::InvalidArgument(
            "passwords are stored as SCRAM-SHA-256 verifiers: send the verifier, not the \
             password"
                .into(),
        ));
    }
    Ok(())
}
