//! Flight SQL logins: the handshake takes a user and password (HTTP basic auth in the
//! `authorization` header, as ADBC and arrow-flight's client send it) and answers with
//! a bearer token that later calls carry.
//!
//! Tokens are random and live in this process only ([`FlightLogins`]): they name a
//! session, not a grant, so the user's privileges are read from the catalog for every
//! statement (a REVOKE applies within a second). A token unused for
//! [`IDLE_TOKEN_TTL`] expires. Failed logins are logged and rate-limited per user.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use cairn_proto::auth::{AuthError, LoginFailures, UserEntry};
use parking_lot::Mutex;
use tonic::Status;

use cairn_sql::session::SqlEngine;

/// A session token unused this long expires.
pub const IDLE_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// The most live tokens kept (the oldest go first).
const MAX_TOKENS: usize = 100_000;

/// Live session tokens and recent failed logins.
#[derive(Debug, Default)]
pub(crate) struct FlightLogins {
    tokens: Mutex<HashMap<String, (String, Instant)>>,
    failures: LoginFailures,
}

fn unauthenticated(message: &str) -> Status {
    Status::unauthenticated(format!("28000: {message}"))
}

impl FlightLogins {
    /// Checks `user`'s password against the catalog's verifier.
    pub(crate) async fn check_password(
        &self,
        engine: &SqlEngine,
        user: &str,
        password: &str,
        peer: &str,
    ) -> Result<(), Status> {
        self.failures
            .check(user)
            .map_err(|e| unauthenticated(&e.to_string()))?;
        let dir = engine
            .users()
            .get()
            .await
            .map_err(|e| super::sql_error_status(&e))?;
        let ok = dir
            .users
            .get(user)
            .and_then(UserEntry::verifier)
            .is_some_and(|v| v.check_password(password));
        if !ok {
            self.failures.failed(user, peer);
            return Err(Status::unauthenticated(format!(
                "28P01: password authentication failed for user \"{user}\""
            )));
        }
        self.failures.succeeded(user);
        Ok(())
    }

    /// A new session token for `user`.
    pub(crate) fn issue(&self, user: &str) -> Result<String, Status> {
        let bytes = cairn_proto::auth::scram::random_token()
            .map_err(|e: AuthError| Status::internal(e.to_string()))?;
        let mut m = self.tokens.lock();
        if m.len() >= MAX_TOKENS {
            m.retain(|_, (_, used)| used.elapsed() < IDLE_TOKEN_TTL);
            if m.len() >= MAX_TOKENS
                && let Some(oldest) = m
                    .iter()
                    .min_by_key(|(_, (_, u))| *u)
                    .map(|(k, _)| k.clone())
            {
                m.remove(&oldest);
            }
        }
        m.insert(bytes.clone(), (user.to_string(), Instant::now()));
        Ok(bytes)
    }

    /// The user of a live token (and marks it used).
    fn user_of_token(&self, token: &str) -> Option<String> {
        let mut m = self.tokens.lock();
        match m.get_mut(token) {
            Some((user, used)) if used.elapsed() < IDLE_TOKEN_TTL => {
                *used = Instant::now();
                Some(user.clone())
            }
            Some(_) => {
                m.remove(token);
                None
            }
            None => None,
        }
    }
}

/// `user:password` from a basic-auth header value.
pub(crate) fn basic_credentials(value: &str) -> Option<(String, String)> {
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = String::from_utf8(B64.decode(encoded.trim()).ok()?).ok()?;
    let (u, p) = decoded.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

impl super::CairnFlightSql {
    /// The user a call runs as: the bearer token's, or a basic-auth header's (checked
    /// now). `None` when the server requires no login and the call brings none.
    pub(crate) async fn user_of<T>(
        &self,
        request: &tonic::Request<T>,
    ) -> Result<Option<String>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        match header {
            Some(h) if h.starts_with("Bearer ") => {
                let token = h.trim_start_matches("Bearer ").trim();
                self.logins.user_of_token(token).map(Some).ok_or_else(|| {
                    unauthenticated(
                        "the session token is unknown or expired: log in again (handshake \
                         with a user and password)",
                    )
                })
            }
            Some(h) if h.starts_with("Basic ") => self.basic_login(request).await.map(Some),
            Some(_) => Err(unauthenticated("unsupported authorization header")),
            None if self.auth_required => Err(unauthenticated(
                "this server requires a login: connect with a user and password (the \
                 Flight SQL handshake with basic authentication)",
            )),
            None => Ok(None),
        }
    }

    /// The user whose basic-auth header `request` carries, once their password is
    /// checked (the handshake, and clients that send basic auth on every call).
    pub(crate) async fn basic_login<T>(
        &self,
        request: &tonic::Request<T>,
    ) -> Result<String, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let (user, password) = basic_credentials(header).ok_or_else(|| {
            unauthenticated("a login needs a user and password (basic authorization)")
        })?;
        let peer = request
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        self.logins
            .check_password(&self.engine, &user, &password, &peer)
            .await?;
        Ok(user)
    }

    /// A fresh session for the caller of `request`.
    pub(crate) async fn session_for<T>(
        &self,
        request: &tonic::Request<T>,
    ) -> Result<cairn_sql::SqlSession, Status> {
        let user = self.user_of(request).await?;
        let session = self.engine.session();
        if let Some(u) = user {
            session.set_user(&u);
        }
        Ok(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_parse() {
        let h = format!("Basic {}", B64.encode("ann:pa:ss"));
        assert_eq!(
            basic_credentials(&h),
            Some(("ann".to_string(), "pa:ss".to_string()))
        );
        assert_eq!(basic_credentials("Basic !!!"), None);
        assert_eq!(basic_credentials("Bearer x"), None);
    }

    #[test]
    fn tokens_name_their_user_until_dropped() {
        let l = FlightLogins::default();
        let t = l.issue("ann").unwrap();
        assert_eq!(l.user_of_token(&t).as_deref(), Some("ann"));
        assert_eq!(l.user_of_token("forged"), None);
    }
}
