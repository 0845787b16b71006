//! The web endpoints of a server (`--web-addr`): `/` a plain-text status page and
//! `/metrics` in Prometheus text format. `cairn local` serves them on 127.0.0.1:8050
//! by default. A build with failpoints compiled in (test builds, for the fault harness)
//! also takes `PUT` / `DELETE /failpoints/<name>`; release builds have no such route.
//!
//! With `--web-password` every request needs it, as HTTP basic authentication (any
//! user name; what browsers ask for) or as a bearer token (Prometheus'
//! `authorization: { credentials: … }`). With TLS configured the pages are served
//! over HTTPS with the node's certificate.

use std::fmt::Write;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use cairn_master::MasterServer;
use cairn_tserver::TabletServer;

/// What the pages show: the servers of this process.
#[derive(Clone, Default)]
pub struct WebState {
    /// The master, if this process runs one.
    pub master: Option<Arc<cairn_master::service::MasterState>>,
    /// Tablet managers of this process's tablet servers, with their addresses.
    pub tservers: Vec<(String, Arc<cairn_tserver::manager::TabletManager>)>,
    /// Set when the process runs with `--insecure`: what is exposed without
    /// protection, shown at the top of the status page.
    pub insecure: Option<String>,
}

impl WebState {
    /// State for a master.
    pub fn of_master(m: &MasterServer) -> Self {
        WebState {
            master: Some(m.state().clone()),
            tservers: vec![],
            insecure: None,
        }
    }
    /// Adds a tablet server.
    pub fn with_tserver(mut self, t: &TabletServer) -> Self {
        self.tservers
            .push((t.addr().to_string(), t.manager().clone()));
        self
    }

    /// The state with the `--insecure` warning `w`.
    pub fn with_insecure_warning(mut self, w: Option<String>) -> Self {
        self.insecure = w;
        self
    }

    fn status(&self) -> String {
        let mut out = String::from("Cairn\n=====\n\n");
        if let Some(w) = &self.insecure {
            let _ = writeln!(out, "WARNING: running with --insecure: {w}\n");
        }
        if let Some(m) = &self.master {
            let st = m.group.status();
            let _ = writeln!(
                out,
                "master: role {:?}, term {}, catalog applied index {}",
                st.role, st.term, st.last_applied
            );
            let cat = m.catalog.snapshot();
            let _ = writeln!(out, "\ntables ({}):", cat.tables.len());
            // The leaders' row estimates, by tablet.
            let estimates: std::collections::HashMap<String, u64> = m
                .tservers
                .read()
                .values()
                .flat_map(|t| t.reports.values())
                .filter(|r| r.role == cairn_proto::RaftRole::Leader as i32)
                .map(|r| (r.tablet_id.clone(), r.num_rows_estimate))
                .collect();
            for t in cat.tables.values().filter(|t| t.subspace_of.is_none()) {
                let _ = writeln!(
                    out,
                    "  {:<24} {:<9} {} tablet(s) x {} replica(s)",
                    t.name,
                    t.state.name(),
                    t.tablets.len(),
                    t.replicas
                );
                for s in &t.subspaces {
                    let rows: u64 = cat.tables.get(&s.table_id).map_or(0, |r| {
                        r.tablets.iter().filter_map(|id| estimates.get(id)).sum()
                    });
                    let _ = writeln!(
                        out,
                        "    subspace {} ({}): {} regions in {} tablet(s), about {rows} row \
                         copies{}",
                        s.layout.name,
                        s.layout.columns().join(", "),
                        s.layout.region_count(),
                        s.tablet_count(),
                        if s.building { " (being built)" } else { "" }
                    );
                }
            }
            let _ = writeln!(out, "\nread-only stores ({}):", cat.stores.len());
            let pushes = m.store_pushes.lock().clone();
            for s in cat.stores.values() {
                let _ = writeln!(
                    out,
                    "  {:<24} version {:<8} {} partition(s) x {} replica(s) on {} server(s)",
                    s.name,
                    s.current_version
                        .map_or_else(|| "none".to_string(), |v| v.to_string()),
                    s.layout.partition_nodes.len(),
                    s.layout.replication,
                    s.nodes.len()
                );
                if let Some(r) = pushes.get(&s.id) {
                    let (done, total) = r
                        .nodes
                        .iter()
                        .fold((0, 0), |(d, t), n| (d + n.bytes_done, t + n.bytes_total));
                    let _ = writeln!(
                        out,
                        "    last push: version {} {}, {done}/{total} bytes fetched{}",
                        r.version,
                        r.state,
                        r.error
                            .as_ref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    );
                }
            }
            let ts = m.tservers.read();
            let _ = writeln!(out, "\ntablet servers ({}):", ts.len());
            for (id, t) in ts.iter() {
                let _ = writeln!(
                    out,
                    "  {:<22} node {:<20} last heartbeat {:.1} s ago, {} replica(s)",
                    t.addr,
                    id,
                    t.last_heartbeat.elapsed().as_secs_f64(),
                    t.reports.len()
                );
            }
        }
        for (addr, mgr) in &self.tservers {
            let _ = writeln!(out, "\ntablet server {addr} (node {}):", mgr.node_id());
            for r in mgr.list() {
                let st = r.group.status();
                let _ = writeln!(
                    out,
                    "  tablet {} of {}: {:?}, term {}, applied {}",
                    r.meta.tablet_id, r.meta.table_name, st.role, st.term, st.last_applied
                );
            }
        }
        out
    }

    fn metrics(&self) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, v: f64, labels: &str| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{labels} {v}"
            );
        };
        if let Some(m) = &self.master {
            let cat = m.catalog.snapshot();
            gauge(
                "cairn_master_tables",
                "Tables in the catalog.",
                cat.tables.len() as f64,
                "",
            );
            gauge(
                "cairn_master_tablets",
                "Tablets in the catalog.",
                cat.tablets.len() as f64,
                "",
            );
            let leader = m.check_leader().is_ok();
            gauge(
                "cairn_master_is_leader",
                "1 on the leader master.",
                leader as u8 as f64,
                "",
            );
            let live = m.live_servers().len();
            gauge(
                "cairn_master_tservers_live",
                "Live tablet servers.",
                live as f64,
                "",
            );
        }
        let mut counters = vec![];
        for (addr, mgr) in &self.tservers {
            let reps = mgr.list();
            let leaders = reps
                .iter()
                .filter(|r| r.group.check_leader_ready().is_ok())
                .count();
            let l = format!("{{server=\"{addr}\"}}");
            gauge(
                "cairn_tserver_replicas",
                "Tablet replicas hosted.",
                reps.len() as f64,
                &l,
            );
            gauge(
                "cairn_tserver_leaders",
                "Replicas that lead their tablet.",
                leaders as f64,
                &l,
            );
            let rows: usize = reps
                .iter()
                .map(|r| {
                    let s = r.tablet().stats();
                    s.disk_rows + s.mrs_rows
                })
                .sum();
            gauge(
                "cairn_tserver_rows_estimate",
                "Rows stored (estimate, all replicas).",
                rows as f64,
                &l,
            );
            let log: u64 = reps.iter().map(|r| r.group.log_bytes()).sum();
            gauge(
                "cairn_tserver_raft_log_bytes",
                "Bytes in Raft logs.",
                log as f64,
                &l,
            );
            let bc = mgr.block_cache().stats();
            gauge(
                "cairn_tserver_block_cache_capacity_bytes",
                "Byte budget of the block cache (--block-cache-mb).",
                bc.capacity_bytes as f64,
                &l,
            );
            gauge(
                "cairn_tserver_block_cache_used_bytes",
                "Bytes of decoded pages in the block cache.",
                bc.used_bytes as f64,
                &l,
            );
            gauge(
                "cairn_tserver_block_cache_pages",
                "Decoded pages in the block cache.",
                bc.pages as f64,
                &l,
            );
            counters.push((addr.clone(), bc));
        }
        for (name, help, pick) in [
            (
                "cairn_tserver_block_cache_hits_total",
                "Block cache lookups that found their page.",
                (|s| s.hits) as fn(&cairn_tablet::cache::BlockCacheStats) -> u64,
            ),
            (
                "cairn_tserver_block_cache_misses_total",
                "Block cache lookups that decoded their page from disk.",
                |s| s.misses,
            ),
            (
                "cairn_tserver_block_cache_evictions_total",
                "Pages evicted from the block cache to make room.",
                |s| s.evictions,
            ),
        ] {
            if counters.is_empty() {
                break;
            }
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (addr, st) in &counters {
                let _ = writeln!(out, "{name}{{server=\"{addr}\"}} {}", pick(st));
            }
        }
        let peers = cairn_sql::distributed::worker_peers();
        let _ = writeln!(
            out,
            "# HELP cairn_worker_peers Workers this process has called for a distributed query since it started: read rows from (kind=data, the exchanges cairn.n_max bounds) or sent fragments to (kind=control).\n# TYPE cairn_worker_peers gauge\ncairn_worker_peers{{kind=\"data\"}} {}\ncairn_worker_peers{{kind=\"control\"}} {}",
            peers.data.len(),
            peers.control.len()
        );
        let _ = writeln!(
            out,
            "# HELP cairn_worker_peer 1 for each worker this process has called, by kind (see cairn_worker_peers).\n# TYPE cairn_worker_peer gauge"
        );
        for (kind, set) in [("data", &peers.data), ("control", &peers.control)] {
            for peer in set {
                let _ = writeln!(
                    out,
                    "cairn_worker_peer{{kind=\"{kind}\",peer=\"{peer}\"}} 1"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP cairn_worker_tasks_total Tasks (fragments of distributed queries) this process's worker ran.\n# TYPE cairn_worker_tasks_total counter\ncairn_worker_tasks_total {}",
            cairn_sql::distributed::tasks_run_by_worker()
        );
        let _ = writeln!(
            out,
            "# HELP cairn_worker_rows_written_total Rows this process's worker wrote for distributed INSERT ... SELECT and CREATE TABLE AS statements.\n# TYPE cairn_worker_rows_written_total counter\ncairn_worker_rows_written_total {}",
            cairn_sql::distributed::rows_written_by_worker()
        );
        let _ = writeln!(
            out,
            "# HELP cairn_tablet_copies_installed_total Tablet copies installed by this process.\n# TYPE cairn_tablet_copies_installed_total counter\ncairn_tablet_copies_installed_total {}",
            cairn_consensus::state_machine::snapshots_installed()
        );
        let _ = writeln!(
            out,
            "# HELP cairn_tablet_copies_sent_total Tablet copies produced for sending.\n# TYPE cairn_tablet_copies_sent_total counter\ncairn_tablet_copies_sent_total {}",
            cairn_consensus::state_machine::snapshots_sent()
        );
        out
    }
}

/// `PUT /failpoints/<name>` with the `fail` crate's action (e.g. `return(x)`,
/// `delay(100)`, `off`) as body.
async fn set_failpoint(
    axum::extract::Path(name): axum::extract::Path<String>,
    body: String,
) -> (axum::http::StatusCode, String) {
    match fail::cfg(name.clone(), body.trim()) {
        Ok(()) => {
            tracing::warn!(failpoint = %name, action = %body.trim(), "failpoint set");
            (axum::http::StatusCode::OK, "ok\n".into())
        }
        Err(e) => (axum::http::StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
}

/// `DELETE /failpoints/<name>`.
async fn clear_failpoint(
    axum::extract::Path(name): axum::extract::Path<String>,
) -> (axum::http::StatusCode, String) {
    fail::remove(&name);
    tracing::warn!(failpoint = %name, "failpoint cleared");
    (axum::http::StatusCode::OK, "ok\n".into())
}

/// How the pages are protected.
#[derive(Clone, Default)]
pub struct WebAccess {
    /// Every request must carry this password (`--web-password`).
    pub password: Option<String>,
    /// Serve HTTPS with the node's certificate.
    pub tls: Option<Arc<cairn_proto::TlsConfig>>,
}

/// Whether `header` (an `Authorization` value) carries `password`.
fn authorized(header: Option<&str>, password: &str) -> bool {
    use base64::Engine;
    let given = match header {
        Some(h) if h.starts_with("Bearer ") => h["Bearer ".len()..].trim().to_string(),
        Some(h) if h.starts_with("Basic ") => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(h["Basic ".len()..].trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            match decoded.as_deref().and_then(|d| d.split_once(':')) {
                Some((_, p)) => p.to_string(),
                None => return false,
            }
        }
        _ => return false,
    };
    // Constant time in the password's length.
    given.len() == password.len()
        && given
            .bytes()
            .zip(password.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A TCP listener whose connections are TLS (the node's certificate).
struct TlsListener {
    inner: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let handshake = self.acceptor.accept(stream);
                    match tokio::time::timeout(std::time::Duration::from_secs(5), handshake).await {
                        Ok(Ok(tls)) => return (tls, addr),
                        Ok(Err(e)) => {
                            tracing::debug!(%addr, error = %e, "web TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%addr, "web TLS handshake timed out"),
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "web listener cannot accept");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

fn tls_acceptor(
    t: &cairn_proto::TlsConfig,
) -> Result<tokio_rustls::TlsAcceptor, Box<dyn std::error::Error + Send + Sync>> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(&t.cert_pem).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(&t.key_pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

/// Serves the pages on `addr`, protected as `access` says, until the process ends;
/// returns the bound address.
pub async fn serve(
    addr: &str,
    state: WebState,
    access: WebAccess,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on --web-addr {addr}: {e}"))?;
    let bound = listener.local_addr()?.to_string();
    let state = Arc::new(state);
    let s1 = state.clone();
    let s2 = state.clone();
    let mut app = Router::new()
        .route("/", get(move || async move { s1.status() }))
        .route("/metrics", get(move || async move { s2.metrics() }));
    if fail::has_failpoints() {
        // Only builds with failpoints compiled in (tests, the fault harness) have this.
        app = app.route(
            "/failpoints/{name}",
            axum::routing::put(set_failpoint).delete(clear_failpoint),
        );
    }
    if let Some(password) = access.password {
        app = app.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let ok = authorized(
                    req.headers()
                        .get(axum::http::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok()),
                    &password,
                );
                async move {
                    if ok {
                        next.run(req).await
                    } else {
                        axum::response::IntoResponse::into_response((
                            axum::http::StatusCode::UNAUTHORIZED,
                            [(
                                axum::http::header::WWW_AUTHENTICATE,
                                "Basic realm=\"cairn\"",
                            )],
                            "this page needs the --web-password (basic auth or a bearer token)\n",
                        ))
                    }
                }
            },
        ));
    }
    match access.tls {
        Some(t) => {
            let listener = TlsListener {
                inner: listener,
                acceptor: tls_acceptor(&t)?,
            };
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "web server failed");
                }
            });
        }
        None => {
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "web server failed");
                }
            });
        }
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn web_password_as_basic_or_bearer() {
        let basic = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert!(authorized(Some(&basic("admin:pw")), "pw"));
        assert!(authorized(Some(&basic(":pw")), "pw"));
        assert!(authorized(Some("Bearer pw"), "pw"));
        assert!(!authorized(Some(&basic("admin:px")), "pw"));
        assert!(!authorized(Some("Bearer pww"), "pw"));
        assert!(!authorized(Some("Basic !!"), "pw"));
        assert!(!authorized(None, "pw"));
    }
}
