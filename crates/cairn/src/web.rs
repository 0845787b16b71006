//! The web endpoints of a server (`--web-addr`): `/` a plain-text status page and
//! `/metrics` in Prometheus text format. `cairn local` serves them on 127.0.0.1:8050
//! by default. A build with failpoints compiled in (test builds, for the fault harness)
//! also takes `PUT` / `DELETE /failpoints/<name>`; release builds have no such route.

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
            for t in cat.tables.values() {
                let _ = writeln!(
                    out,
                    "  {:<24} {:<9} {} tablet(s) x {} replica(s)",
                    t.name,
                    t.state.name(),
                    t.tablets.len(),
                    t.replicas
                );
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
        }
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

/// Serves the pages on `addr` until the process ends.
pub async fn serve(
    addr: &str,
    state: WebState,
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
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "web server failed");
        }
    });
    Ok(bound)
}
