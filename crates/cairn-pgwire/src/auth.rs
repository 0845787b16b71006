//! Connection startup: authentication ([`PgAuth`]) against the users in the master's
//! catalog — SCRAM-SHA-256 (RFC 7677, what libpq, psycopg and pgJDBC speak), a
//! cleartext password over TLS, or trust on loopback — with failed logins logged and
//! rate-limited; then the parameters reported to the client and registration for
//! cancel requests.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    ServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use pgwire::api::{
    ClientInfo, ConnectionGuard, ConnectionHandle, METADATA_APPLICATION_NAME, METADATA_USER,
    PgWireConnectionState, PidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use cairn_proto::auth::{AuthError, ScramServer, UserEntry};

use super::PgAuth;
use super::handlers::{ConnHandler, Shared};

/// Parameters reported to every client after authentication.
struct ServerParams;

impl ServerParameterProvider for ServerParams {
    fn server_parameters<C>(&self, client: &C) -> Option<HashMap<String, String>>
    where
        C: ClientInfo,
    {
        let on = |b: bool| if b { "on" } else { "off" }.to_string();
        let mut p = HashMap::new();
        p.insert("server_version".into(), super::SERVER_VERSION.into());
        p.insert("server_encoding".into(), "UTF8".into());
        p.insert("client_encoding".into(), "UTF8".into());
        p.insert("DateStyle".into(), "ISO, MDY".into());
        p.insert("IntervalStyle".into(), "postgres".into());
        p.insert("TimeZone".into(), "UTC".into());
        p.insert("integer_datetimes".into(), on(true));
        p.insert("standard_conforming_strings".into(), on(true));
        let superuser = client
            .metadata()
            .get(METADATA_SUPERUSER)
            .map(String::as_str);
        p.insert("is_superuser".into(), on(superuser != Some("off")));
        p.insert("in_hot_standby".into(), on(false));
        p.insert("default_transaction_read_only".into(), on(false));
        p.insert("search_path".into(), "public".into());
        if let Some(user) = client.metadata().get(METADATA_USER) {
            p.insert("session_authorization".into(), user.clone());
        }
        p.insert(
            "application_name".into(),
            client
                .metadata()
                .get(METADATA_APPLICATION_NAME)
                .cloned()
                .unwrap_or_default(),
        );
        Some(p)
    }
}

fn fatal(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        code.into(),
        message,
    )))
}

/// Removes a connection's cancel signal when the connection ends.
struct CancelGuard {
    shared: Arc<Shared>,
    key: super::handlers::CancelKey,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.shared.cancels.lock().remove(&self.key);
    }
}

impl ConnHandler {
    /// Authentication succeeded: assign the process id and secret key, register for
    /// cancel requests, report the parameters and become ready for queries.
    async fn finish<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let shared = &self.conn.shared;
        let (pid, key) = shared.pids.generate(&*client);
        client.set_pid_and_secret_key(pid, key.clone());
        let (handle, guard) = shared.manager.register(pid, key.clone());
        client
            .session_extensions()
            .insert::<Arc<ConnectionHandle>>(handle);
        client.session_extensions().insert::<ConnectionGuard>(guard);
        let cancel_key = (pid, key.to_bytes());
        shared
            .cancels
            .lock()
            .insert(cancel_key.clone(), self.conn.cancel.clone());
        client.session_extensions().insert(CancelGuard {
            shared: shared.clone(),
            key: cancel_key,
        });
        if let Some(app) = client.metadata().get(METADATA_APPLICATION_NAME) {
            // Only client_encoding can fail, so this cannot.
            let _ = self.conn.vars.set("application_name", Some(app.clone()));
        }
        finish_authentication(client, &ServerParams).await
    }
}

/// Where a connection's SCRAM exchange stands.
#[derive(Debug, Default)]
pub(crate) enum ScramStage {
    /// Nothing sent yet, or not SCRAM.
    #[default]
    Idle,
    /// `AuthenticationSASL` sent; the client's first message is next.
    Offered,
    /// Server-first sent; the client's proof is next.
    Started(Box<ScramServer>),
}

/// The metadata key marking a superuser session (for `is_superuser`).
const METADATA_SUPERUSER: &str = "cairn.superuser";

impl ConnHandler {
    /// The failed login of `user`: logged, counted, answered like PostgreSQL.
    fn login_failed<C: ClientInfo>(&self, client: &C, user: &str) -> PgWireError {
        let shared = &self.conn.shared;
        shared
            .login_failures
            .failed(user, &client.socket_addr().to_string());
        fatal(
            "28P01",
            format!("password authentication failed for user \"{user}\""),
        )
    }

    /// The catalog's entry for `user` (None: no such user).
    async fn user_entry(&self, user: &str) -> PgWireResult<Option<UserEntry>> {
        let dir = self.conn.shared.engine.users().get().await.map_err(|e| {
            fatal(
                "57P03",
                format!("cannot look the user up: the masters cannot be reached: {e}"),
            )
        })?;
        Ok(dir.users.get(user).cloned())
    }

    /// Authenticated as `user`: the session runs as them.
    async fn logged_in<C>(&self, client: &mut C, user: &str, superuser: bool) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.conn.shared.login_failures.succeeded(user);
        self.conn.session.set_user(user);
        client.metadata_mut().insert(
            METADATA_SUPERUSER.into(),
            if superuser { "on" } else { "off" }.into(),
        );
        self.finish(client).await
    }
}

#[async_trait]
impl StartupHandler for ConnHandler {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let opts = &self.conn.shared.opts;
        fn user<C: ClientInfo>(client: &C) -> String {
            client
                .metadata()
                .get(METADATA_USER)
                .cloned()
                .unwrap_or_default()
        }
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                if self.refuse {
                    return Err(fatal(
                        "53300",
                        format!(
                            "sorry, too many clients already: the server allows {} \
                             (--pg-max-connections)",
                            opts.max_connections
                        ),
                    ));
                }
                if opts.tls.is_some() && !client.is_secure() {
                    return Err(fatal(
                        "28000",
                        "this server requires TLS: connect with sslmode=require (or verify-ca / \
                         verify-full with the cluster CA)"
                            .into(),
                    ));
                }
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let user = user(client);
                self.conn
                    .shared
                    .login_failures
                    .check(&user)
                    .map_err(|e| fatal("28P01", e.to_string()))?;
                match opts.auth {
                    PgAuth::Trust => match self.user_entry(&user).await? {
                        Some(u) => self.logged_in(client, &user, u.superuser).await?,
                        None => {
                            return Err(fatal(
                                "28000",
                                format!(
                                    "role \"{user}\" does not exist: connect as an existing \
                                     user (\"{}\" on a new cluster)",
                                    cairn_proto::auth::BOOTSTRAP_USER
                                ),
                            ));
                        }
                    },
                    PgAuth::Password => {
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::CleartextPassword,
                            ))
                            .await?;
                    }
                    PgAuth::ScramSha256 => {
                        *self.conn.scram.lock() = ScramStage::Offered;
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                                vec!["SCRAM-SHA-256".into()],
                            )))
                            .await?;
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                if !matches!(
                    client.state(),
                    PgWireConnectionState::AuthenticationInProgress
                ) {
                    return Err(fatal("08P01", "unexpected password message".into()));
                }
                let user = user(client);
                let entry = self.user_entry(&user).await?;
                match opts.auth {
                    PgAuth::Trust => {
                        return Err(fatal("08P01", "unexpected password message".into()));
                    }
                    PgAuth::Password => {
                        let given = message.into_password()?.password;
                        match entry
                            .filter(|u| u.verifier().is_some_and(|v| v.check_password(&given)))
                        {
                            Some(u) => self.logged_in(client, &user, u.superuser).await?,
                            None => return Err(self.login_failed(client, &user)),
                        }
                    }
                    PgAuth::ScramSha256 => {
                        let stage = std::mem::take(&mut *self.conn.scram.lock());
                        match stage {
                            ScramStage::Offered => {
                                let first = message.into_sasl_initial_response()?;
                                if first.auth_method != "SCRAM-SHA-256" {
                                    return Err(fatal(
                                        "28000",
                                        format!(
                                            "SASL mechanism {} is not offered: use SCRAM-SHA-256",
                                            first.auth_method
                                        ),
                                    ));
                                }
                                let verifier = entry.as_ref().and_then(UserEntry::verifier);
                                let data = first.data.unwrap_or_default();
                                let (server, server_first) =
                                    ScramServer::start(verifier.as_ref(), &data)
                                        .map_err(|e| fatal("08P01", e.to_string()))?;
                                *self.conn.scram.lock() = ScramStage::Started(Box::new(server));
                                client
                                    .send(PgWireBackendMessage::Authentication(
                                        Authentication::SASLContinue(
                                            server_first.into_bytes().into(),
                                        ),
                                    ))
                                    .await?;
                            }
                            ScramStage::Started(server) => {
                                let resp = message.into_sasl_response()?;
                                match server.finish(&resp.data) {
                                    Ok(server_final) => {
                                        client
                                            .send(PgWireBackendMessage::Authentication(
                                                Authentication::SASLFinal(
                                                    server_final.into_bytes().into(),
                                                ),
                                            ))
                                            .await?;
                                        let superuser = entry.is_some_and(|u| u.superuser);
                                        self.logged_in(client, &user, superuser).await?;
                                    }
                                    Err(AuthError::BadPassword) => {
                                        return Err(self.login_failed(client, &user));
                                    }
                                    Err(e) => return Err(fatal("08P01", e.to_string())),
                                }
                            }
                            ScramStage::Idle => {
                                return Err(fatal("08P01", "unexpected SASL message".into()));
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}
