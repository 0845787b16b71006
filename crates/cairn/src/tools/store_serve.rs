//! `cairn store push | rollback | get STORE`: serving read-only stores in a cluster.
//!
//! - `push` asks the leader master to push a build (every tablet server fetches its
//!   node folder, then all swap) and follows it with a progress bar over the bytes
//!   fetched by all servers, until the new version is live or the push failed and the
//!   previous version stayed live.
//! - `rollback` makes an earlier retained version live on every server.
//! - `rebalance` moves partitions to tablet servers that joined since the store
//!   was created, followed like a push.
//! - `get` looks a key up through the store's ring, with failover.

use std::time::{Duration, Instant};

use cairn_client::PushReport;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::fmt::group_thousands;
use super::store::{GetArgs, parse_key, print_row};
use super::{MasterArgs, ToolResult};

/// `cairn store push`
#[derive(Args, Debug)]
#[command(
    after_help = "Every tablet server fetches its own files from the build (cairn store \
    build NAME --cluster --output DIR_OR_URL): a folder every server can read at the same \
    path (e.g. a shared mount), an s3:// prefix, or an http(s):// URL of a web server that \
    answers Range requests. For S3 the tablet servers take their credentials and endpoint \
    from their own AWS_* environment variables.\n\
    Examples:\n  cairn store push recs --from /shared/recs-2026-11-26 --throttle-mbps 200\n  \
    cairn store push recs --from s3://builds/recs/v2"
)]
pub struct PushArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The store.
    pub name: String,
    /// The build's output (holding node-<n> folders): a path or file:/// URL the
    /// tablet servers can read, or an s3:// or http(s):// URL.
    #[arg(long, value_name = "DIR_OR_URL")]
    pub from: String,
    /// The version number to give it (default: one more than the newest pushed).
    #[arg(long, value_name = "N")]
    pub version: Option<u64>,
    /// Limit each server's fetch to this many MB/s (default: unlimited), so that
    /// fetching does not slow live lookups down.
    #[arg(long, value_name = "MB/S")]
    pub throttle_mbps: Option<f64>,
    /// Start the push and return at once (follow it with `cairn store describe`).
    #[arg(long)]
    pub no_wait: bool,
}

/// `cairn store rollback`
#[derive(Args, Debug)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The store.
    pub name: String,
    /// The version to return to (default: the newest one older than the current).
    #[arg(long, value_name = "N")]
    pub to: Option<u64>,
}

/// `cairn store rebalance`
#[derive(Args, Debug)]
#[command(
    after_help = "Start the new tablet servers first; every live server that \
    is not on the store's ring joins it.\nExample:\n  cairn store rebalance recs \
    --throttle-mbps 100"
)]
pub struct RebalanceArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The store.
    pub name: String,
    /// Limit each server's copying to this many MB/s (default: unlimited).
    #[arg(long, value_name = "MB/S")]
    pub throttle_mbps: Option<f64>,
    /// Start the rebalance and return at once (follow it with `cairn store describe`).
    #[arg(long)]
    pub no_wait: bool,
}

/// `--throttle-mbps` in bytes per second (0: unlimited).
fn throttle(mbps: Option<f64>) -> ToolResult<u64> {
    match mbps {
        Some(m) if !(m > 0.0 && m.is_finite()) => {
            Err("--throttle-mbps must be a positive number of MB/s".into())
        }
        Some(m) => Ok((m * 1_000_000.0) as u64),
        None => Ok(0),
    }
}

/// The absolute form of a local `--from` (the servers resolve it, not this shell).
fn absolute_source(from: &str) -> ToolResult<String> {
    if from.contains("://") {
        return Ok(from.to_string());
    }
    let p = std::path::Path::new(from);
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    Ok(abs.to_string_lossy().to_string())
}

/// Bytes fetched and to fetch over all servers.
fn bytes(r: &PushReport) -> (u64, u64) {
    r.nodes
        .iter()
        .fold((0, 0), |(d, t), n| (d + n.bytes_done, t + n.bytes_total))
}

/// Runs `cairn store push`.
pub async fn push(a: PushArgs) -> ToolResult<()> {
    let throttle = throttle(a.throttle_mbps)?;
    let source = absolute_source(&a.from)?;
    let client = a.conn.connect().await?;
    let started = Instant::now();
    let version = client
        .push_store(&a.name, &source, a.version.unwrap_or(0), throttle)
        .await?;
    if a.no_wait {
        println!(
            "pushing version {version} of store '{}'; follow it with `cairn store describe {}`",
            a.name, a.name
        );
        return Ok(());
    }
    let (total, servers) = follow(&client, &a.name, version, "push").await?;
    println!(
        "store '{}' now serves version {version}: {} bytes fetched by {servers} \
         server(s), pushed in {:.1} s",
        a.name,
        group_thousands(total),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs `cairn store rebalance`.
pub async fn rebalance(a: RebalanceArgs) -> ToolResult<()> {
    let throttle = throttle(a.throttle_mbps)?;
    let client = a.conn.connect().await?;
    let started = Instant::now();
    let version = client.rebalance_store(&a.name, throttle).await?;
    if a.no_wait {
        println!(
            "rebalancing store '{}' as version {version}; follow it with `cairn store \
             describe {}`",
            a.name, a.name
        );
        return Ok(());
    }
    let (total, servers) = follow(&client, &a.name, version, "rebalance").await?;
    println!(
        "store '{}' is rebalanced over {servers} server(s) and serves version {version}: \
         {} bytes assembled in {:.1} s",
        a.name,
        group_thousands(total),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Follows push `version` of store `name` with a progress bar until it is done
/// (`(bytes in all, servers)`) or failed (an error that says why, per server).
async fn follow(
    client: &cairn_client::Client,
    name: &str,
    version: u64,
    what: &str,
) -> ToolResult<(u64, usize)> {
    let bar = ProgressBar::new(0);
    bar.set_style(ProgressStyle::with_template(
        "[{elapsed_precise}] {bar:40} {msg}: {binary_bytes}/{binary_total_bytes} \
         ({binary_bytes_per_sec}, eta {eta})",
    )?);
    bar.set_message("fetching");
    let report = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (entry, report) = client.get_store_and_push(name).await?;
        let Some(r) = report.filter(|r| r.version == version) else {
            if entry.push.is_none() && entry.current_version == Some(version) {
                break None; // a new leader master finished it
            }
            continue;
        };
        let (done, total) = bytes(&r);
        bar.set_length(total);
        bar.set_position(done);
        bar.set_message(r.state.clone());
        if matches!(r.state.as_str(), "done" | "failed" | "rolled back") {
            break Some(r);
        }
    };
    bar.finish_and_clear();
    match report {
        Some(r) if r.state != "done" => {
            let mut msg = format!(
                "{what} of version {version} of store '{name}' failed ({}); the previous \
                 version stays live: {}",
                r.state,
                r.error.unwrap_or_default()
            );
            for (i, n) in r.nodes.iter().enumerate() {
                if let Some(e) = &n.error {
                    msg.push_str(&format!("\n  node {i} ({:016x}): {e}", n.node_id));
                }
            }
            Err(msg.into())
        }
        r => Ok((
            r.as_ref().map_or(0, |r| bytes(r).1),
            r.as_ref().map_or(0, |r| r.nodes.len()),
        )),
    }
}

/// Runs `cairn store rollback`.
pub async fn rollback(a: RollbackArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let r = client.rollback_store(&a.name, a.to.unwrap_or(0)).await?;
    println!(
        "store '{}' now serves version {} (was {}); slowest server's swap took {:.2} ms",
        a.name,
        r.current,
        r.previous,
        r.max_swap_micros as f64 / 1000.0
    );
    Ok(())
}

/// Runs `cairn store get STORE KEY…` against the cluster.
pub async fn get(a: GetArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let reader = client.open_store(&a.store).await.map_err(|e| {
        format!(
            "{e} (to read a build's node folder, give its path: no .metadata was found at {})",
            a.store
        )
    })?;
    let entry = reader.entry();
    if entry.current_version.is_none() {
        return Err(format!(
            "store '{}' has no version yet: build one and push it (cairn store push)",
            entry.name
        )
        .into());
    }
    let key = parse_key(&entry.schema, &a.key)?;
    let row = reader.get(&key).await?;
    print_row(&entry.schema, row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_sources_become_absolute_and_urls_stay() {
        assert!(absolute_source("b/out").unwrap().starts_with('/'));
        assert_eq!(absolute_source("/x/y").unwrap(), "/x/y");
        assert_eq!(absolute_source("file:///x").unwrap(), "file:///x");
        assert_eq!(absolute_source("s3://b/v2").unwrap(), "s3://b/v2");
    }
}
