//! Transport security for Cairn's gRPC services: mutual TLS with a cluster CA.
//!
//! Every master and tablet server holds a certificate signed by the cluster's CA
//! (`cairn cert ca`, `cairn cert node`). With TLS configured, a server accepts only
//! connections whose client presents a certificate signed by that CA, and dials its
//! peers with its own certificate, checking theirs against the same CA. A process
//! without a certificate from the cluster CA therefore cannot join a Raft group,
//! heartbeat to the master, or call any RPC: the TLS handshake fails before a request
//! is read. Clients (the CLI, the SQL front ends' engines) hold a CA-signed
//! certificate too (`cairn cert node --client`).
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

    /// The server side: this node's identity, and client certificates required and
    /// checked against the CA (mutual TLS).
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .client_ca_root(Certificate::from_pem(&self.ca_pem))
    }

    /// The client side: the CA to check servers against, and this node's identity
    /// for the server to check.
    pub fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
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
