//! The client-side command-line tools: `cairn table …`, `cairn cluster ksck` and
//! `cairn perf loadgen`.
//!
//! Every command talks to a running cluster through [`cairn_client`]; `--masters`
//! (env `CAIRN_MASTERS`, default `127.0.0.1:7051`, the address `cairn local` listens
//! on) names the masters. Commands are async functions returning a [`ToolResult`]; the
//! error text is written for the person at the terminal.
//!
//! - [`table`]: create, list, describe, alter, drop, scan;
//! - [`insert`]: `table insert`, bulk loading of CSV and Parquet files;
//! - [`ksck`]: `cluster ksck`, the health check;
//! - [`loadgen`]: `perf loadgen`, a write / point-read load generator;
//! - [`store`]: `store build`, `store verify` and `store get` for read-only stores;
//! - [`store_catalog`]: `store create`, `list`, `describe` and `drop` in the catalog;
//! - [`wal`]: `wal dump`, an offline reader of a replica's Raft log;
//! - [`parse`]: the little languages of the flags (column specs, values, `--where`,
//!   `--hash`, `--split`), pure and unit-tested.

use std::time::Duration;

use cairn_client::{Client, ClientError, ClientOptions};
use clap::{Args, Subcommand};

mod fmt;
pub mod insert;
pub mod ksck;
pub mod ksck_subspaces;
pub mod loadgen;
pub mod parse;
pub mod search;
pub mod sql;
pub mod store;
pub mod store_catalog;
pub mod store_serve;
pub mod table;
pub mod wal;

/// The error of every tool: a message for the user (any error type converts with `?`).
pub type ToolError = Box<dyn std::error::Error + Send + Sync>;
/// Result alias of the tools.
pub type ToolResult<T> = Result<T, ToolError>;

/// How to reach the cluster; flattened into every tool command.
#[derive(Args, Debug, Clone)]
pub struct MasterArgs {
    /// The cluster's master addresses, comma-separated host:port (for replicated
    /// masters list all of them; any reachable one leads the client to the leader).
    #[arg(
        long,
        env = "CAIRN_MASTERS",
        default_value = "127.0.0.1:7051",
        value_name = "HOST:PORT[,...]"
    )]
    pub masters: String,
    /// Give up on one operation (a DDL call, a batch of writes, a scan step, retries
    /// included) after this many seconds.
    #[arg(long, env = "CAIRN_TIMEOUT", default_value_t = 30, value_name = "SECS")]
    pub timeout: u64,
    /// TLS: the cluster CA and a certificate it signed (for a cluster run with TLS),
    /// or only the CA with --user.
    #[command(flatten)]
    pub tls: crate::tls::TlsFlags,
    /// Log in as this user (its password from CAIRN_PASSWORD): every call then has
    /// that user's privileges. Needed on a cluster with TLS unless --tls-cert gives a
    /// cluster certificate.
    #[arg(long, env = "CAIRN_USER")]
    pub user: Option<String>,
}

impl MasterArgs {
    /// A client for these masters with the requested timeout. Nothing is contacted yet.
    pub async fn connect(&self) -> ToolResult<Client> {
        if self.timeout == 0 {
            return Err("--timeout must be at least 1 second".into());
        }
        let client = Client::connect(std::slice::from_ref(&self.masters))
            .await?
            .with_tls(self.tls.load()?);
        let op = Duration::from_secs(self.timeout);
        let opts = ClientOptions::default()
            .operation_timeout(op)
            .rpc_timeout(op.min(Duration::from_secs(10)));
        let client = client.with_options(opts);
        match &self.user {
            Some(user) => {
                let password = std::env::var("CAIRN_PASSWORD").map_err(|_| {
                    format!("--user {user} needs the password in the environment variable CAIRN_PASSWORD")
                })?;
                Ok(client.login(user, &password).await?)
            }
            None => Ok(client),
        }
    }

    /// The master addresses as given, split and trimmed.
    pub fn addresses(&self) -> Vec<String> {
        self.masters
            .split(',')
            .map(|a| a.trim().trim_start_matches("http://").trim_end_matches('/'))
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The per-operation timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }
}

/// All client tools, as one group of subcommands. `main.rs` can flatten it into its
/// own `Command` enum (`#[command(flatten)] Tool(tools::Tool)`), or embed
/// [`TableCommand`], [`ClusterCommand`] and [`PerfCommand`] one by one.
#[derive(Subcommand, Debug)]
pub enum Tool {
    /// Create, inspect, change, scan and load tables.
    #[command(subcommand)]
    Table(TableCommand),
    /// Inspect the cluster as a whole.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Load generators and benchmarks.
    #[command(subcommand)]
    Perf(PerfCommand),
    /// Run SQL: an interactive shell (history, multi-line statements ending in ';',
    /// tables, timing), or `-c "SQL"` / `-f file.sql` to run statements and exit.
    Sql(sql::SqlArgs),
    /// Read-only stores: build one offline from Parquet, CSV or JSON lines, verify a
    /// node's folder, look keys up in it.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Read a tablet replica's Raft log offline (post-mortems, debugging).
    #[command(subcommand)]
    Wal(WalCommand),
}

/// `cairn wal …`
#[derive(Subcommand, Debug)]
pub enum WalCommand {
    /// Print every entry of a replica's log: index, term, leader and the decoded
    /// records. Run it on a stopped server's folder or a copy.
    Dump(wal::DumpArgs),
}

/// `cairn store …`
#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Build a store's chunk files for every node from Parquet, CSV or JSON lines:
    /// in parallel, in bounded memory, with the same bytes for the same input.
    Build(store::BuildArgs),
    /// Check a node folder's files against its .metadata (sizes, order, MD5s).
    Verify(store::VerifyArgs),
    /// Look a key up — in the cluster, routed by the store's ring with failover to
    /// the next replica, or in a build's node folder — and print its value columns.
    Get(store::GetArgs),
    /// Push a built version to the cluster: every tablet server fetches its files
    /// (throttled, verified, resumable), then all swap at once — or none does.
    Push(store_serve::PushArgs),
    /// Return a store to an earlier retained version on every server, in
    /// milliseconds.
    Rollback(store_serve::RollbackArgs),
    /// Spread a store over tablet servers added since it was created: they take
    /// their share of partitions, copied from the servers holding them, while every
    /// lookup keeps being answered. Makes a new version.
    Rebalance(store_serve::RebalanceArgs),
    /// Add a store to the cluster's catalog: its key and value columns and a ring of
    /// partitions laid out over the live tablet servers.
    Create(store_catalog::CreateArgs),
    /// List the cluster's stores.
    List(store_catalog::ListArgs),
    /// Show a store's columns, ring and which tablet server holds which partitions.
    Describe(store_catalog::DescribeArgs),
    /// Remove a store from the catalog.
    Drop(store_catalog::DropArgs),
}

/// `cairn table …`
#[derive(Subcommand, Debug)]
pub enum TableCommand {
    /// Create a table: columns, primary key, hash and range partitioning, replication.
    Create(table::CreateArgs),
    /// List the tables of the cluster.
    List(table::ListArgs),
    /// Show a table's columns, primary key, partitioning and tablets with their
    /// replicas.
    Describe(table::DescribeArgs),
    /// Add, drop or rename columns.
    Alter(table::AlterArgs),
    /// Drop a table and all its data.
    Drop(table::DropArgs),
    /// Read rows (with a projection, filters and a limit) or count them.
    Scan(table::ScanArgs),
    /// Find rows by secondary attributes through the table's subspaces (hyperspace
    /// search): only the regions the filters intersect are read.
    Search(search::SearchArgs),
    /// Load rows from a CSV or Parquet file.
    Insert(insert::InsertArgs),
}

/// `cairn cluster …`
#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Check the cluster's health: masters, tablet servers, and for every tablet a
    /// leader, a live majority of voters and (with --checksum) identical replicas.
    /// Exits with status 0 only when all of these hold; down servers and
    /// under-replicated tablets are listed as warnings.
    Ksck(ksck::KsckArgs),
}

/// `cairn perf …`
#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Write N generated rows with concurrent sessions (creating the table if needed),
    /// then report throughput and write / point-read latency percentiles.
    Loadgen(loadgen::LoadgenArgs),
}

/// Runs any tool. An unhealthy `cluster ksck` is an error (after its report).
pub async fn run(tool: Tool) -> ToolResult<()> {
    match tool {
        Tool::Table(c) => run_table(c).await,
        Tool::Cluster(c) => run_cluster(c).await,
        Tool::Perf(c) => run_perf(c).await,
        Tool::Sql(a) => sql::run(a).await,
        Tool::Store(c) => match c {
            StoreCommand::Build(a) => store::build(a).await,
            StoreCommand::Verify(a) => store::verify(a),
            StoreCommand::Get(a) => store::get(a).await,
            StoreCommand::Push(a) => store_serve::push(a).await,
            StoreCommand::Rollback(a) => store_serve::rollback(a).await,
            StoreCommand::Rebalance(a) => store_serve::rebalance(a).await,
            StoreCommand::Create(a) => store_catalog::create(a).await,
            StoreCommand::List(a) => store_catalog::list(a).await,
            StoreCommand::Describe(a) => store_catalog::describe(a).await,
            StoreCommand::Drop(a) => store_catalog::drop(a).await,
        },
        Tool::Wal(WalCommand::Dump(a)) => wal::dump(a),
    }
}

/// An error with its sources ("a: b: c"), for errors whose own text is terse.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

/// Adds a hint to errors that usually mean a wrong address.
fn explain(e: ToolError) -> ToolError {
    /// gRPC's UNIMPLEMENTED status (the codes are fixed by the gRPC protocol).
    const UNIMPLEMENTED: i32 = 12;
    match e.downcast_ref::<ClientError>() {
        Some(ClientError::Rpc { code, .. }) if *code as i32 == UNIMPLEMENTED => format!(
            "{e} (the server does not offer that service: does --masters name the masters, \
             not tablet servers?)"
        )
        .into(),
        Some(ClientError::TableNotFound(name)) => {
            format!("table '{name}' does not exist (`cairn table list` shows the tables)").into()
        }
        Some(ClientError::Timeout {
            what,
            timeout,
            last,
        }) => format!(
            "{what} did not complete within {} s; last error: {last}. The servers may be down, \
             overloaded or electing a leader: `cairn cluster ksck` shows the cluster's state; \
             --timeout allows more time",
            timeout.as_secs_f64()
        )
        .into(),
        _ => e,
    }
}

/// Runs a `cairn table` command.
pub async fn run_table(cmd: TableCommand) -> ToolResult<()> {
    let r = match cmd {
        TableCommand::Create(a) => table::create(a).await,
        TableCommand::List(a) => table::list(a).await,
        TableCommand::Describe(a) => table::describe(a).await,
        TableCommand::Alter(a) => table::alter(a).await,
        TableCommand::Drop(a) => table::drop(a).await,
        TableCommand::Scan(a) => table::scan(a).await,
        TableCommand::Search(a) => search::search(a).await,
        TableCommand::Insert(a) => insert::insert(a).await,
    };
    r.map_err(explain)
}

/// Runs a `cairn cluster` command. `ksck` prints its report and returns an error when
/// the cluster is not healthy, so the process exits with a non-zero status.
pub async fn run_cluster(cmd: ClusterCommand) -> ToolResult<()> {
    match cmd {
        ClusterCommand::Ksck(a) => {
            let report = ksck::ksck(&a).await.map_err(explain)?;
            if report.healthy() {
                Ok(())
            } else {
                Err(format!(
                    "the cluster is not healthy: {} problem(s), listed above",
                    report.problems.len()
                )
                .into())
            }
        }
    }
}

/// Runs a `cairn perf` command.
pub async fn run_perf(cmd: PerfCommand) -> ToolResult<()> {
    match cmd {
        PerfCommand::Loadgen(a) => loadgen::loadgen(a).await.map_err(explain),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct TestCli {
        #[command(subcommand)]
        tool: Tool,
    }

    #[test]
    fn error_chains_include_sources() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "transport error")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(error_chain(&e), "transport error: connection refused");
        let plain: ToolError = "x".into();
        assert_eq!(explain(plain).to_string(), "x");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        TestCli::command().debug_assert();
    }

    #[test]
    fn flags_parse() {
        let cli = TestCli::try_parse_from([
            "cairn",
            "table",
            "create",
            "t",
            "--columns",
            "id:int64,price:decimal(10,2)?",
            "--key",
            "id",
            "--hash",
            "id:8",
            "--masters",
            "a:1,b:2",
        ])
        .unwrap();
        match cli.tool {
            Tool::Table(TableCommand::Create(a)) => {
                assert_eq!(a.name, "t");
                assert_eq!(a.hash, vec!["id:8".to_string()]);
                assert_eq!(
                    a.conn.addresses(),
                    vec!["a:1".to_string(), "b:2".to_string()]
                );
            }
            other => panic!("{other:?}"),
        }
        let cli = TestCli::try_parse_from([
            "cairn", "table", "scan", "t", "--where", "a >= 3", "--where", "b = 'x'", "--count",
        ])
        .unwrap();
        match cli.tool {
            Tool::Table(TableCommand::Scan(a)) => {
                assert_eq!(a.r#where.len(), 2);
                assert!(a.count);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            TestCli::try_parse_from(["cairn", "table", "create", "t", "--key", "id"]).is_err(),
            "--columns is required"
        );
        assert!(
            TestCli::try_parse_from([
                "cairn",
                "table",
                "create",
                "t",
                "--columns",
                "id:int64",
                "--key",
                "id",
                "--split",
                "5"
            ])
            .is_err(),
            "--split needs --range"
        );
        let cli =
            TestCli::try_parse_from(["cairn", "perf", "loadgen", "--table", "x", "--rows", "10"])
                .unwrap();
        match cli.tool {
            Tool::Perf(PerfCommand::Loadgen(a)) => {
                assert_eq!(a.threads, 4);
                assert_eq!(a.batch_rows, 1000);
            }
            other => panic!("{other:?}"),
        }
    }
}
