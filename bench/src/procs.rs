//! What the benchmarks that start servers share: a child process killed on drop, free
//! loopback ports, a `cairn local` started and waited for, and PostgreSQL connections.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_client::Client;

pub(crate) type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A child process, killed and reaped when dropped.
pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free at the time of the call.
pub(crate) fn free_port() -> BoxResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `cairn local` with `tservers` tablet servers in `dir` (data in `dir/data`,
/// log in `dir/local.log`, no SQL front ends) and waits until they are live; returns
/// the process and a client.
pub(crate) async fn start_local(
    cairn: &Path,
    dir: &Path,
    tservers: u32,
) -> BoxResult<(Proc, Client)> {
    let master = format!("127.0.0.1:{}", free_port()?);
    let log = std::fs::File::create(dir.join("local.log"))?;
    let local = Proc(
        Command::new(cairn)
            .args([
                "local",
                "--data-dir",
                &dir.join("data").to_string_lossy(),
                "--tservers",
                &tservers.to_string(),
                "--master-addr",
                &master,
                "--tserver-port",
                &free_port()?.to_string(),
                "--pg-addr",
                "",
                "--flight-sql-addr",
                "",
            ])
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?,
    );
    let c = Client::connect(std::slice::from_ref(&master)).await?;
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let live = c
            .list_tablet_servers()
            .await
            .map(|s| s.iter().filter(|t| t.live).count())
            .unwrap_or(0);
        if live >= tservers as usize {
            return Ok((local, c));
        }
        if Instant::now() > until {
            return Err("cairn local did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A PostgreSQL error with the server's message (its `Display` says only "db error").
pub(crate) fn pg_err(e: tokio_postgres::Error) -> Box<dyn std::error::Error + Send + Sync> {
    match e.as_db_error() {
        Some(d) => format!("PostgreSQL: {} ({})", d.message(), d.code().code()).into(),
        None => format!("PostgreSQL: {e}").into(),
    }
}

/// A connection to PostgreSQL at `url`, driven on a task of its own.
pub(crate) async fn pg_connect(url: &str) -> BoxResult<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(pg_err)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("PostgreSQL connection: {}", pg_err(e));
        }
    });
    Ok(client)
}

/// CPU seconds a process has used (Linux `/proc`); `None` elsewhere.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Waits until process `pid` uses under 5% of a core over 3 seconds (or `max`
/// passes); returns the seconds waited.
pub(crate) async fn settle(pid: u32, max: Duration) -> f64 {
    let t0 = Instant::now();
    let window = Duration::from_secs(3);
    while t0.elapsed() < max {
        let Some(before) = cpu_seconds(pid) else {
            break;
        };
        tokio::time::sleep(window).await;
        let Some(after) = cpu_seconds(pid) else {
            break;
        };
        if after - before < 0.05 * window.as_secs_f64() {
            break;
        }
    }
    t0.elapsed().as_secs_f64()
}
