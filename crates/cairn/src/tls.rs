//! TLS for the command line: the `--tls-*` flags every server and tool takes, the
//! loopback rule that decides when they are required, and `cairn cert`, which makes a
//! cluster CA and the certificates signed by it.
//!
//! A cluster runs either with TLS everywhere or without it. With TLS, every gRPC
//! connection (Raft, heartbeats, the master's calls, the native client) is mutual TLS
//! against the cluster CA (see `cairn_proto::tls`), the PostgreSQL front end requires
//! TLS from its clients, and Flight SQL is served over TLS.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_proto::TlsConfig;
use clap::{Args, Subcommand};

/// Where a process finds its TLS files: all three, or none, or (for a client that logs
/// in as a user) only the CA certificate.
#[derive(Args, Clone, Debug, Default)]
pub struct TlsFlags {
    /// The cluster CA certificate (PEM): peers and clients must present certificates
    /// it signed (`cairn cert ca` makes it).
    #[arg(long, env = "CAIRN_TLS_CA_CERT", value_name = "FILE")]
    pub tls_ca_cert: Option<PathBuf>,
    /// This process's certificate (PEM), signed by the cluster CA (`cairn cert node`).
    #[arg(long, env = "CAIRN_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "CAIRN_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
}

impl TlsFlags {
    /// The TLS configuration, if the flags give one.
    pub fn load(&self) -> Result<Option<Arc<TlsConfig>>, String> {
        match (&self.tls_ca_cert, &self.tls_cert, &self.tls_key) {
            (None, None, None) => Ok(None),
            (Some(ca), None, None) => TlsConfig::ca_only(ca).map(Some).map_err(|e| e.to_string()),
            (Some(ca), Some(cert), Some(key)) => TlsConfig::load(ca, cert, key)
                .map(Some)
                .map_err(|e| e.to_string()),
            _ => Err(
                "give all of --tls-ca-cert, --tls-cert and --tls-key, only --tls-ca-cert (a \
                 client logging in as a user), or none"
                    .into(),
            ),
        }
    }
}

/// Whether `addr` (`host:port`) only accepts connections from this machine.
pub fn is_loopback(addr: &str) -> bool {
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(addr)
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `cairn cert …`
#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Create a cluster CA: DIR/ca.pem (the certificate every node and client is
    /// given) and DIR/ca.key (keep it off the servers, readable only by you).
    Ca(CaArgs),
    /// Create a certificate signed by the CA in DIR: DIR/NAME.pem and DIR/NAME.key,
    /// valid for every --host (the names and addresses others dial it at).
    Node(NodeArgs),
}

/// Flags of `cairn cert ca`.
#[derive(Args, Debug)]
pub struct CaArgs {
    /// Where to write ca.pem and ca.key.
    #[arg(long, default_value = "./cairn-certs")]
    pub dir: PathBuf,
    /// The CA's common name.
    #[arg(long, default_value = "Cairn cluster CA")]
    pub name: String,
    /// Days the CA is valid.
    #[arg(long, default_value_t = 3650)]
    pub days: u32,
}

/// Flags of `cairn cert node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// Where the CA is (ca.pem, ca.key) and where to write the certificate.
    #[arg(long, default_value = "./cairn-certs")]
    pub dir: PathBuf,
    /// The certificate's name: the files are NAME.pem and NAME.key.
    #[arg(long)]
    pub name: String,
    /// Host names and IP addresses the node is reached at (comma-separated); every
    /// one that peers, clients or psql's `verify-full` use must be listed.
    #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    pub host: Vec<String>,
    /// Days the certificate is valid.
    #[arg(long, default_value_t = 825)]
    pub days: u32,
}

/// Runs a `cairn cert` command.
pub fn run_cert(cmd: CertCommand) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    match cmd {
        CertCommand::Ca(a) => {
            let (cert, key) = make_ca(&a.name, a.days)?;
            std::fs::create_dir_all(&a.dir)?;
            let (cp, kp) = (a.dir.join("ca.pem"), a.dir.join("ca.key"));
            if cp.exists() || kp.exists() {
                return Err(format!(
                    "{} already holds a CA: remove ca.pem and ca.key first (every certificate \
                     it signed stops being trusted)",
                    a.dir.display()
                )
                .into());
            }
            write_file(&cp, cert.as_bytes(), false)?;
            write_file(&kp, key.as_bytes(), true)?;
            println!("wrote {} and {}", cp.display(), kp.display());
        }
        CertCommand::Node(a) => {
            let ca_cert = read(&a.dir.join("ca.pem"))?;
            let ca_key = read(&a.dir.join("ca.key"))?;
            let (cert, key) = make_node(&ca_cert, &ca_key, &a.name, &a.host, a.days)?;
            let (cp, kp) = (
                a.dir.join(format!("{}.pem", a.name)),
                a.dir.join(format!("{}.key", a.name)),
            );
            write_file(&cp, cert.as_bytes(), false)?;
            write_file(&kp, key.as_bytes(), true)?;
            println!(
                "wrote {} and {} (valid for {})",
                cp.display(),
                kp.display(),
                a.host.join(", ")
            );
        }
    }
    Ok(())
}

fn read(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| {
        format!(
            "cannot read {}: {e} (run `cairn cert ca --dir {}` first)",
            p.display(),
            p.parent().unwrap_or(Path::new(".")).display()
        )
    })
}

/// Writes `bytes` to `p`; a private key is readable by its owner only.
fn write_file(p: &Path, bytes: &[u8], private: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = o.open(p)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn validity(params: &mut rcgen::CertificateParams, days: u32) {
    let now = rcgen::date_time_ymd(1970, 1, 1)
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
    // A little slack for clocks that lag.
    params.not_before = now - std::time::Duration::from_secs(3600);
    params.not_after = now + std::time::Duration::from_secs(u64::from(days) * 86_400);
}

/// A self-signed CA certificate and its key (PEM).
pub fn make_ca(name: &str, days: u32) -> Result<(String, String), rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A certificate for `hosts`, signed by the CA, usable as server and as client
/// (nodes are both), and its key (PEM).
pub fn make_node(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    name: &str,
    hosts: &[String],
    days: u32,
) -> Result<(String, String), rcgen::Error> {
    let ca_key = rcgen::KeyPair::from_pem(ca_key_pem)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)?;
    let hosts: Vec<String> = hosts
        .iter()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect();
    let mut params = rcgen::CertificateParams::new(hosts)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses() {
        for a in ["127.0.0.1:7051", "localhost:5433", "[::1]:1", "127.1.2.3:9"] {
            assert!(is_loopback(a), "{a}");
        }
        for a in [
            "0.0.0.0:7051",
            "10.0.0.5:1",
            "[::]:1",
            "db.example.com:5433",
            ":7051",
        ] {
            assert!(!is_loopback(a), "{a}");
        }
    }

    #[test]
    fn node_certificates_chain_to_the_ca() {
        let (ca, ca_key) = make_ca("test CA", 1).unwrap();
        let hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let (cert, key) = make_node(&ca, &ca_key, "n1", &hosts, 1).unwrap();
        assert!(ca.contains("BEGIN CERTIFICATE") && cert.contains("BEGIN CERTIFICATE"));
        assert!(key.contains("PRIVATE KEY"));
        // The files load as a TLS configuration.
        let dir = tempfile::tempdir().unwrap();
        for (n, b) in [("ca.pem", &ca), ("n1.pem", &cert), ("n1.key", &key)] {
            std::fs::write(dir.path().join(n), b).unwrap();
        }
        let p = |n: &str| dir.path().join(n);
        TlsConfig::load(&p("ca.pem"), &p("n1.pem"), &p("n1.key")).unwrap();
        // A key where a certificate belongs is refused with a message.
        let e = TlsConfig::load(&p("ca.pem"), &p("n1.key"), &p("n1.key")).unwrap_err();
        assert!(e.to_string().contains("cairn cert"), "{e}");
    }
}
