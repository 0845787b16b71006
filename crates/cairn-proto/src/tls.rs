//! Transport security for Cairn's gRPC services: mutual TLS with a cluster CA.
//!
//! Every master and tablet server holds a certificate signed by the cluster's CA
//! (`cairn cert ca`, `cairn cert node`). With TLS configured, a server checks any
//! client certificate against that CA (a certificate from another CA fails the
//! handshake) and dials its peers with its own certificate, checking theirs. A caller
//! with a cluster certificate is *internal* ([`crate::auth::Principal::Internal`]); a
//! caller without one must present a user's token, and may then do only what that
//! user may. Raft, heartbeats and administrative RPCs need internal callers (or, for
//! administration, a superuser): a process without the cluster CA's certificate
//! cannot join a Raft group or heartbeat to the master. Operator tools may hold a
//! CA-signed certificate too (`cairn cert node --client`).
//!
//! Servers are named by the address they are dialled at: a certificate must carry
//! every host name and IP address peers and clients use for the server as a subject
//! alternative name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// A node's TLS material: the cluster CA's certificate and this node's certificate
/// and private key, all PEM.
#[derive(Clone)]
pub struct TlsConfig {
    /// The cluster CA certificate: peers must present certificates it signed.
    pub ca_pem: Vec<u8>,
    /// This node's certificate (signed by the CA).
    pub cert_pem: Vec<u8>,
    /// This node's private key.
    pub key_pem: Vec<u8>,
    /// Where the files came from (for messages).
    pub source: PathBuf,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsConfig")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Why TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read TLS file {path}: {source} (create them with `cairn cert`)")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file does not hold what it should.
    #[error("{path} is not a PEM {what}: create it with `cairn cert`")]
    NotPem {
        /// The file.
        path: PathBuf,
        /// What it should hold.
        what: &'static str,
    },
}

impl TlsConfig {
    /// Reads the CA certificate, the node certificate and its key (PEM files).
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<Arc<TlsConfig>, TlsError> {
        let read = |p: &Path, marker: &str, what: &'static str| {
            let b = std::fs::read(p).map_err(|source| TlsError::Read {
                path: p.to_path_buf(),
                source,
            })?;
            if !String::from_utf8_lossy(&b).contains(marker) {
                return Err(TlsError::NotPem {
                    path: p.to_path_buf(),
                    what,
                });
            }
            Ok(b)
        };
        Ok(Arc::new(TlsConfig {
            ca_pem: read(ca, "BEGIN CERTIFICATE", "certificate")?,
            cert_pem: read(cert, "BEGIN CERTIFICATE", "certificate")?,
            key_pem: read(key, "PRIVATE KEY", "private key")?,
            source: cert.to_path_buf(),
        }))
    }

    /// The server side: this node's identity, and client certificates checked
    /// against the CA (mutual TLS). A client without a certificate is let through the
    /// handshake as a user, who must then present a token.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .client_ca_root(Certificate::from_pem(&self.ca_pem))
            .client_auth_optional(true)
    }

    /// The client side: the CA to check servers against, and this node's identity
    /// for the server to check (none for a [`TlsConfig::ca_only`] user client).
    pub fn client(&self) -> ClientTlsConfig {
        let c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        if self.cert_pem.is_empty() {
            c
        } else {
            c.identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
        }
    }

    /// Only the CA certificate: for a client that logs in as a user instead of
    /// presenting a certificate of its own.
    pub fn ca_only(ca: &Path) -> Result<Arc<TlsConfig>, TlsError> {
        let b = std::fs::read(ca).map_err(|source| TlsError::Read {
            path: ca.to_path_buf(),
            source,
        })?;
        if !String::from_utf8_lossy(&b).contains("BEGIN CERTIFICATE") {
            return Err(TlsError::NotPem {
                path: ca.to_path_buf(),
                what: "certificate",
            });
        }
        Ok(Arc::new(TlsConfig {
            ca_pem: b,
            cert_pem: vec![],
            key_pem: vec![],
            source: ca.to_path_buf(),
        }))
    }
}

/// A gRPC endpoint for `addr` (`host:port`): `https` with [`TlsConfig::client`] when
/// `tls` is given, plain `http` otherwise.
pub fn endpoint(
    addr: &str,
    tls: Option<&TlsConfig>,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    match tls {
        Some(t) => tonic::transport::Endpoint::from_shared(format!("https://{addr}"))?
            .tls_config(t.client()),
        None => tonic::transport::Endpoint::from_shared(format!("http://{addr}")),
    }
}

/// A gRPC server builder, with [`TlsConfig::server`] when `tls` is given.
pub fn server_builder(
    tls: Option<&TlsConfig>,
) -> Result<tonic::transport::Server, tonic::transport::Error> {
    let b = tonic::transport::Server::builder();
    match tls {
        Some(t) => b.tls_config(t.server()),
        None => Ok(b),
    }
}
