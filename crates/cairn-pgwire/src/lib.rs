//! # cairn-pgwire — Cairn's PostgreSQL front end
//!
//! psql, psycopg, pgJDBC and other PostgreSQL clients talk to Cairn over the PostgreSQL
//! wire protocol (v3, served by `pgwire`).
//!
//! [`serve`] accepts connections on a listener; each connection gets its own
//! [`SqlSession`](cairn_sql::SqlSession), so `SET cairn.…` settings are per connection.
//!
//! - **Simple query protocol**: the query string is split into statements, which run
//!   one after the other; an error ends the string, like in PostgreSQL.
//! - **Extended query protocol** (Parse/Bind/Describe/Execute): statements are prepared
//!   once with `$n` parameters. Parameter types come from the client where it declares
//!   them and from the engine's inference otherwise (`text` where neither knows).
//!   Parameters and results may be text or binary, per the client's format codes;
//!   `Execute` with a row limit suspends the portal.
//! - **Session statements** (`SET application_name …`, `SET extra_float_digits …`,
//!   `SHOW TRANSACTION ISOLATION LEVEL`, `BEGIN`/`COMMIT`/`ROLLBACK`, savepoints,
//!   `DISCARD ALL`) are answered by the front end itself. `SET` of PostgreSQL
//!   variables is accepted and shown by `SHOW` and `current_setting()`; of them only
//!   `statement_timeout` and the `default_transaction_…` settings change anything: a
//!   statement (its rows streaming included) that runs past the timeout ends with
//!   SQLSTATE 57014, as in PostgreSQL.
//! - **Transactions.** `BEGIN` … `COMMIT` is a Cairn transaction ([`cairn_sql::txn`]):
//!   its writes are seen by its own statements only until `COMMIT`, and `ROLLBACK`
//!   discards them. `BEGIN ISOLATION LEVEL …`, `SET TRANSACTION …`, `READ ONLY` and
//!   `SET SESSION CHARACTERISTICS AS TRANSACTION …` work as in PostgreSQL. The block
//!   follows PostgreSQL (`txn.rs`): after an error every statement fails with 25P02
//!   until `ROLLBACK`, and `ROLLBACK TO SAVEPOINT` is honoured when there is nothing
//!   to undo and refused (0A000) when there is. A connection that closes inside a
//!   block rolls it back.
//! - **Catalog queries** of psql (`\dt`, `\d t`, `\l`) and drivers (pgJDBC's
//!   `getTables`, `pg_type` lookups) read the `pg_catalog` the engine installs, after
//!   `datafusion-pg-catalog`'s compatibility rewrite (`::regclass`,
//!   `OPERATOR(pg_catalog.~)`, ...).
//! - **Errors** carry the SQLSTATE of [`SqlError::sqlstate`](cairn_sql::SqlError::sqlstate).
//! - **Cancel requests** (`pg_cancel_backend`-style, e.g. psycopg's `conn.cancel()` or
//!   psql's Ctrl-C) abort the running statement with SQLSTATE 57014, also while its
//!   rows are streaming.
//! - **Authentication** per [`PgAuth`]: one user ([`PgOptions::user`]), with no
//!   password, a cleartext password or an MD5-hashed one. Another user name is refused
//!   with SQLSTATE 28000. Any database name is accepted. There is no TLS: a client
//!   asking for it is told the server does not support it and continues in plain text
//!   (psql's default `sslmode=prefer`).
//!
//! - **Limits**: at most [`PgOptions::max_connections`] clients at once (one more is
//!   refused at startup with SQLSTATE 53300), and each session's statements hold at
//!   most the engine's per-statement memory ([`EngineLimits`](cairn_sql::EngineLimits)).
//!
//! The server reports itself as PostgreSQL [`SERVER_VERSION`], with UTF8 encoding,
//! `DateStyle` ISO, integer datetimes and time zone UTC.

mod auth;
mod coalesce;
mod colnames;
mod copy;
mod encode;
mod handlers;
mod local;
mod params;
mod sqltext;
mod txn;

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use cairn_sql::session::SqlEngine;
use handlers::{CairnHandlers, Shared};

/// The PostgreSQL version Cairn reports (`server_version`, `SHOW server_version`,
/// `version()`): clients enable features by it, and Cairn's catalog follows 16.
pub const SERVER_VERSION: &str = "16.0 (Cairn)";
/// [`SERVER_VERSION`] as a number (`SHOW server_version_num`).
pub const SERVER_VERSION_NUM: &str = "160000";

/// How clients authenticate. Users and their password verifiers live in the master's
/// catalog (`CREATE USER … PASSWORD`); the user must exist in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PgAuth {
    /// No password is asked for. Meant for a server that listens on loopback only.
    #[default]
    Trust,
    /// SCRAM-SHA-256: the password never crosses the network and the server proves it
    /// knows the verifier (PostgreSQL's default).
    ScramSha256,
    /// The client sends the password in clear text, checked against the verifier
    /// (for old clients; use only with TLS).
    Password,
}

impl PgAuth {
    /// Parses a method name: `trust`, `scram-sha-256` (also `scram`), `password`.
    pub fn parse(s: &str) -> Option<PgAuth> {
        Some(match s.to_ascii_lowercase().as_str() {
            "trust" => PgAuth::Trust,
            "scram-sha-256" | "scram" => PgAuth::ScramSha256,
            "password" => PgAuth::Password,
            _ => return None,
        })
    }
}

/// Settings of the PostgreSQL front end.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// How clients authenticate.
    pub auth: PgAuth,
    /// The most client connections served at once (`--pg-max-connections`, 100 like
    /// PostgreSQL's `max_connections`); one more is refused with SQLSTATE 53300.
    pub max_connections: usize,
    /// TLS: the server's certificate and key (the node's, signed by the cluster CA).
    /// Set, clients must use TLS (`sslmode=require` or stricter); a plaintext
    /// connection is refused with SQLSTATE 28000.
    pub tls: Option<Arc<cairn_proto::TlsConfig>>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            auth: PgAuth::Trust,
            max_connections: 100,
            tls: None,
        }
    }
}

/// Binds a listener for [`serve`] (`"127.0.0.1:5433"`; port 0 picks a free one).
pub async fn bind(addr: &str) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves PostgreSQL clients on `listener` until `shutdown` completes; then stops
/// accepting and closes every open connection.
pub async fn serve(
    engine: SqlEngine,
    listener: TcpListener,
    opts: PgOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let acceptor = match &opts.tls {
        Some(t) => Some(tls_acceptor(t)?),
        None => None,
    };
    let shared = Arc::new(Shared::new(engine, opts));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                // pgwire's decoder panics on some malformed messages (found by the
                // hostile-input test): only that connection ends.
                if let Err(e) = done && e.is_panic() {
                    tracing::warn!("a PostgreSQL connection ended with a panic (malformed message?)");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let _ = socket.set_nodelay(true);
                    let refuse = connections.len() >= shared.opts.max_connections;
                    if refuse {
                        tracing::warn!(%peer, max = shared.opts.max_connections,
                            "refusing a PostgreSQL client: too many connections");
                    }
                    let handlers = CairnHandlers::new(shared.clone(), refuse);
                    let acceptor = acceptor.clone();
                    connections.spawn(async move {
                        if let Err(e) = pgwire::tokio::process_socket(socket, acceptor, handlers).await {
                            tracing::debug!(%peer, error = %e, "PostgreSQL connection ended");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "PostgreSQL listener cannot accept");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
    }
    connections.shutdown().await;
    Ok(())
}

/// A TLS acceptor with the node's certificate and key (no client certificates: clients
/// authenticate with a password).
fn tls_acceptor(t: &cairn_proto::TlsConfig) -> io::Result<pgwire::tokio::TlsAcceptor> {
    use pgwire::tokio::tokio_rustls::rustls;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} for PostgreSQL TLS ({}): {e}", t.source.display()),
        )
    };
    let certs = CertificateDer::pem_slice_iter(&t.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("cannot read the certificate", &e))?;
    let key = PrivateKeyDer::from_pem_slice(&t.key_pem)
        .map_err(|e| bad("cannot read the private key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("no TLS protocol version", &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad("unusable certificate or key", &e))?;
    cfg.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(cfg)))
}

#[cfg(test)]
mod serve_by_hand {
    use super::*;

    /// Serves a running cluster for trying clients by hand:
    ///
    /// ```text
    /// CAIRN_MASTERS=127.0.0.1:7051 CAIRN_PG_PORT=5433 \
    ///   cargo test -p cairn-pgwire --lib serve_by_hand::serve_cluster -- --ignored --nocapture
    /// ```
    ///
    /// `CAIRN_PG_AUTH` (`trust`, `scram-sha-256`, `password`) picks the
    /// authentication; `CAIRN_PG_SECONDS` how long to serve (default 3600).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a running cluster: set CAIRN_MASTERS"]
    async fn serve_cluster() {
        let env = |k: &str| std::env::var(k).ok();
        let masters: Vec<String> = env("CAIRN_MASTERS")
            .unwrap_or_else(|| "127.0.0.1:7051".into())
            .split(',')
            .map(str::to_string)
            .collect();
        let port = env("CAIRN_PG_PORT").unwrap_or_else(|| "5433".into());
        let seconds: u64 = env("CAIRN_PG_SECONDS")
            .and_then(|s| s.parse().ok())
            .unwrap_or(3600);
        let auth = env("CAIRN_PG_AUTH")
            .and_then(|a| PgAuth::parse(&a))
            .unwrap_or_default();
        let opts = PgOptions {
            auth,
            ..PgOptions::default()
        };
        let engine = SqlEngine::connect(&masters)
            .await
            .expect("connect to the cluster");
        let listener = bind(&format!("127.0.0.1:{port}")).await.expect("bind");
        eprintln!("serving PostgreSQL on 127.0.0.1:{port} for {seconds} s");
        serve(
            engine,
            listener,
            opts,
            tokio::time::sleep(std::time::Duration::from_secs(seconds)),
        )
        .await
        .expect("serve");
    }
}
