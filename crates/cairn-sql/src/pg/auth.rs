//! Connection startup: the user check, authentication ([`PgAuth`]), the parameters
//! reported to the client, and registration for cancel requests.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::md5pass::hash_md5_password;
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
        p.insert("is_superuser".into(), on(true));
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

/// Four bytes for an MD5 salt. They only have to differ between connections, so
/// std's randomly keyed hasher (seeded from the OS) is enough.
fn salt() -> [u8; 4] {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    let v = h.finish().to_be_bytes();
    [v[0], v[1], v[2], v[3]]
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
                let user = client
                    .metadata()
                    .get(METADATA_USER)
                    .cloned()
                    .unwrap_or_default();
                if user != opts.user {
                    return Err(fatal(
                        "28000",
                        format!(
                            "role \"{user}\" does not exist: connect as user \"{}\"",
                            opts.user
                        ),
                    ));
                }
                match opts.auth {
                    PgAuth::Trust => self.finish(client).await?,
                    PgAuth::Password => {
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::CleartextPassword,
                            ))
                            .await?;
                    }
                    PgAuth::Md5 => {
                        let s = salt();
                        *self.conn.md5_salt.lock() = Some(s);
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::MD5Password(s.to_vec()),
                            ))
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
                let given = message.into_password()?.password;
                let user = client
                    .metadata()
                    .get(METADATA_USER)
                    .cloned()
                    .unwrap_or_default();
                let expected = match (&opts.auth, &opts.password) {
                    (PgAuth::Password, Some(p)) => Some(p.clone()),
                    (PgAuth::Md5, Some(p)) => {
                        let salt = *self.conn.md5_salt.lock();
                        salt.map(|s| hash_md5_password(&user, p, &s))
                    }
                    _ => None,
                };
                if expected.as_deref() == Some(given.as_str()) {
                    self.finish(client).await?;
                } else {
                    return Err(fatal(
                        "28P01",
                        format!("password authentication failed for user \"{user}\""),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}
