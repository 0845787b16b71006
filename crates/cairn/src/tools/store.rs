//! `cairn store …`: read-only stores (the Voldemort half of Cairn).
//!
//! - `store build` reads Parquet, CSV or JSON lines (a file, a folder of part files or
//!   a glob; local, `s3://` or `http(s)://`) with DataFusion's readers, one input
//!   partition per core, and runs [`cairn_readonly::StoreBuilder`] over them: one
//!   folder of chunk files per node, with a progress bar and a summary. An `s3://`
//!   output is built in a local staging folder and then uploaded.
//! - `store verify` opens a node folder the way a server does and checks every file
//!   against its `.metadata` checksums.
//! - `store get` looks keys up in a node folder, for checking a build by hand.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_common::Value;
use cairn_readonly::{
    BuildOptions, Location, RemoteDir, StoreBuilder, StoreLayout, StoreSchema, StoreVersion,
    Verify, node_dir,
};
use clap::{Args, ValueEnum};
use datafusion::datasource::file_format::options::JsonReadOptions;
use datafusion::prelude::{
    CsvReadOptions, DataFrame, ParquetReadOptions, SessionConfig, SessionContext,
};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use super::fmt::{format_value, group_thousands, per_sec, text_table};
use super::parse::{parse_names, parse_value};
use super::{ToolError, ToolResult};

/// Input formats of `store build`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    /// Apache Parquet.
    Parquet,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// `cairn store build`
#[derive(Args, Debug)]
#[command(
    after_help = "Each node of the ring gets a folder OUTPUT/node-<id> holding its \
    chunk files (partition_replica_chunk.index / .data) and a .metadata file with their \
    checksums. A key may appear only once in the input.\n\
    Example:\n  cairn store build recs --input recs.parquet --key user_id \
    --output /data/recs-build --nodes 3 --replication 2\n\
    For a store created in a cluster (`cairn store create`), --cluster takes the ring and \
    the columns from its catalog entry, so the files fit the servers that will hold them:\n  \
    cairn store build recs --cluster --input recs.parquet --output /shared/recs-v2\n\
    Input and output may be in S3 (or an S3-compatible store) and the input on a web \
    server; a folder URL ends with '/':\n  \
    cairn store build recs --cluster --input s3://jobs/recs/2026-11-27/ --format parquet \
    --output s3://builds/recs/v2\n\
    S3 access is configured by the usual environment variables: AWS_ACCESS_KEY_ID, \
    AWS_SECRET_ACCESS_KEY, AWS_REGION, and AWS_ENDPOINT for a store other than AWS."
)]
pub struct BuildArgs {
    /// Take the ring (nodes, partitions, replication, chunks) and the key and value
    /// columns from the catalog entry of store NAME in the cluster, instead of from
    /// the flags below.
    #[arg(long)]
    pub cluster: bool,
    #[command(flatten)]
    pub conn: super::MasterArgs,
    /// The store's name (recorded in every node's .metadata).
    pub name: String,
    /// The input: a file, a folder of files of one format, or a glob. A path, or an
    /// s3:// or http(s):// URL (a folder URL ends with '/').
    #[arg(long, short = 'i', value_name = "PATH|URL")]
    pub input: String,
    /// The input's format (default: from the file extension).
    #[arg(long, value_enum)]
    pub format: Option<InputFormat>,
    /// The key columns, comma-separated, in key order (required without --cluster).
    #[arg(long, value_name = "COL[,COL...]")]
    pub key: Option<String>,
    /// The value columns, comma-separated (default: every non-key column).
    #[arg(long, value_name = "COL[,COL...]")]
    pub value: Option<String>,
    /// Where to write the node folders: a folder, or s3://bucket/prefix (built in
    /// --tmp-dir, then uploaded). Must not hold an earlier build.
    #[arg(long, short = 'o', value_name = "DIR|URL")]
    pub output: String,
    /// Nodes on the ring (partition p goes to node p mod N).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub nodes: u32,
    /// Partitions on the ring (default: 8 per node).
    #[arg(long, value_name = "P")]
    pub partitions: Option<u32>,
    /// Copies of every row, on distinct nodes (default: 2, or 1 with one node).
    #[arg(long, value_name = "R")]
    pub replication: Option<u32>,
    /// Chunk files per partition and replica (more chunks: smaller files).
    #[arg(long, default_value_t = 1, value_name = "C")]
    pub chunks: u32,
    /// The zone of each node, comma-separated in node order: replicas then go to
    /// distinct zones first.
    #[arg(long, value_name = "ZONE[,ZONE...]")]
    pub zones: Option<String>,
    /// Memory for buffering rows before sorted runs spill to disk (default: an
    /// eighth of the machine's memory, between 256 MiB and 8 GiB). A build may
    /// briefly hold up to about twice this while a run is being written.
    #[arg(long, value_name = "MIB")]
    pub memory_mb: Option<usize>,
    /// Where spilled runs, and an S3 output before its upload, go (default: the
    /// system's temporary folder).
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// Threads (default: one per core).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}

/// `cairn store verify`
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A node folder (OUTPUT/node-<id> of a build).
    pub dir: PathBuf,
}

/// `cairn store get`
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  cairn store get recs 42            (the cluster's \
    servers, routed by the ring)\n  cairn store get /data/recs-build/node-0 42   (a build's \
    node folder)\nA two-column key takes two values: … get recs alice 7"
)]
pub struct GetArgs {
    #[command(flatten)]
    pub conn: super::MasterArgs,
    /// A store in the cluster, or a node folder of a build (OUTPUT/node-<id>).
    pub store: String,
    /// The key: one value per key column, in key order.
    #[arg(required = true)]
    pub key: Vec<String>,
}

fn input_format(args: &BuildArgs) -> ToolResult<InputFormat> {
    if let Some(f) = args.format {
        return Ok(f);
    }
    let lower = args.input.to_ascii_lowercase();
    let lower = lower.trim_end_matches('/');
    if lower.ends_with(".parquet") || lower.ends_with(".pq") {
        Ok(InputFormat::Parquet)
    } else if lower.ends_with(".csv") {
        Ok(InputFormat::Csv)
    } else if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") || lower.ends_with(".json") {
        Ok(InputFormat::Jsonl)
    } else {
        Err(format!(
            "cannot tell the format of {} from its name: give --format parquet, csv or jsonl",
            args.input
        )
        .into())
    }
}

/// The file extension DataFusion should read: a file's (or a glob's) own, or none; for a folder,
/// the first of the format's usual `extensions` that a file in it has (so a folder of
/// `.jsonl` files reads as JSON lines), else the first of them.
async fn extension(input: &str, location: &Location, extensions: &[&str]) -> ToolResult<String> {
    let folder = match location {
        Location::Local(p) => p.is_dir(),
        Location::Remote(_) => input.ends_with('/'),
    };
    if !folder {
        return Ok(Path::new(input)
            .extension()
            .map_or(String::new(), |e| format!(".{}", e.to_string_lossy())));
    }
    let names: Vec<String> = match location {
        Location::Local(p) => std::fs::read_dir(p)
            .map_err(|e| format!("cannot list {input}: {e}"))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect(),
        Location::Remote(r) => r
            .store
            .list(Some(&r.prefix))
            .take(10_000)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .map(|m| m.map(|m| m.location.filename().unwrap_or_default().to_string()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot list {input}: {e}"))?,
    };
    let found = extensions
        .iter()
        .find(|ext| names.iter().any(|n| n.ends_with(*ext)));
    Ok(found.unwrap_or(&extensions[0]).to_string())
}

async fn read_input(ctx: &SessionContext, args: &BuildArgs) -> ToolResult<DataFrame> {
    let input = args.input.as_str();
    let location = Location::parse(input)?;
    if let Location::Remote(r) = &location {
        ctx.register_object_store(&r.base, r.store.clone());
    }
    let df = match input_format(args)? {
        InputFormat::Parquet => {
            let ext = extension(input, &location, &[".parquet", ".pq"]).await?;
            ctx.read_parquet(input, ParquetReadOptions::default().file_extension(&ext))
                .await
        }
        InputFormat::Csv => {
            let ext = extension(input, &location, &[".csv"]).await?;
            ctx.read_csv(input, CsvReadOptions::new().file_extension(&ext))
                .await
        }
        InputFormat::Jsonl => {
            let ext = extension(input, &location, &[".jsonl", ".ndjson", ".json"]).await?;
            ctx.read_json(input, JsonReadOptions::default().file_extension(&ext))
                .await
        }
    };
    df.map_err(|e| format!("cannot read {input}: {e}").into())
}

fn layout(args: &BuildArgs) -> ToolResult<StoreLayout> {
    let partitions = args.partitions.unwrap_or(8 * args.nodes.max(1));
    let replication = args.replication.unwrap_or(args.nodes.clamp(1, 2));
    let mut l = StoreLayout::round_robin(args.nodes, partitions, replication, args.chunks)?;
    if let Some(z) = &args.zones {
        let zones: Vec<String> = z.split(',').map(|s| s.trim().to_string()).collect();
        if zones.iter().any(String::is_empty) {
            return Err(format!("--zones {z}: a zone name is empty").into());
        }
        if zones.len() != args.nodes as usize {
            return Err(format!(
                "--zones names {} zones for {} nodes: give one zone per node, in node order",
                zones.len(),
                args.nodes
            )
            .into());
        }
        l = l.with_zones(&zones)?;
    }
    Ok(l)
}

/// The ring and columns of a build with --cluster: the store's catalog entry, after
/// checking the input has its columns with its types.
async fn cluster_plan(
    args: &BuildArgs,
    input: &arrow::datatypes::Schema,
) -> ToolResult<(StoreLayout, StoreSchema)> {
    if args.key.is_some() || args.value.is_some() || args.zones.is_some() {
        return Err("--cluster takes the key, value columns and zones from the store's                     catalog entry: drop --key, --value and --zones"
            .into());
    }
    let client = args.conn.connect().await?;
    let entry = client.get_store(&args.name).await?;
    let names = |cs: &[cairn_readonly::StoreColumn]| -> Vec<String> {
        cs.iter().map(|c| c.name.clone()).collect()
    };
    let found = StoreSchema::from_arrow(
        input,
        &names(&entry.schema.key),
        Some(&names(&entry.schema.value)),
    )?;
    for (want, got) in entry
        .schema
        .key
        .iter()
        .chain(&entry.schema.value)
        .zip(found.key.iter().chain(&found.value))
    {
        if want.data_type != got.data_type {
            return Err(format!(
                "column '{}' is {} in the input but {} in store '{}': cast it in the input",
                want.name,
                super::parse::type_name(&got.data_type),
                super::parse::type_name(&want.data_type),
                entry.name
            )
            .into());
        }
    }
    Ok((entry.layout, entry.schema))
}

/// Where a build writes: straight into a local folder, or into a staging folder that
/// is uploaded to an object store afterwards.
enum Output {
    Local(PathBuf),
    Upload {
        remote: RemoteDir,
        staging: tempfile::TempDir,
    },
}

impl Output {
    /// The output `args` asks for, checked before any work: an object-store prefix
    /// must be writable (not a web server) and empty.
    async fn plan(args: &BuildArgs) -> ToolResult<Output> {
        let remote = match Location::parse(&args.output)? {
            Location::Local(p) => return Ok(Output::Local(p)),
            Location::Remote(r) => r,
        };
        if matches!(remote.base.scheme(), "http" | "https") {
            return Err(format!(
                "--output {}: a web server is read-only here; write the build to a folder or \
                 s3:// and serve it from there",
                args.output
            )
            .into());
        }
        let mut listing = remote.store.list(Some(&remote.prefix));
        if let Some(first) = listing.next().await {
            let first = first.map_err(|e| format!("cannot list {}: {e}", remote.url))?;
            return Err(format!(
                "--output {} already holds files ({} among them), from an earlier build? Give \
                 a new prefix, e.g. one per version",
                remote.url, first.location
            )
            .into());
        }
        let parent = args.tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
        let staging = tempfile::Builder::new()
            .prefix("cairn-store-build-")
            .tempdir_in(&parent)
            .map_err(|e| {
                format!(
                    "cannot create a staging folder in {}: {e}",
                    parent.display()
                )
            })?;
        Ok(Output::Upload { remote, staging })
    }

    /// The local folder the builder writes.
    fn dir(&self) -> PathBuf {
        match self {
            Output::Local(p) => p.clone(),
            Output::Upload { staging, .. } => staging.path().join("out"),
        }
    }

    /// Uploads a staged build, with a progress bar; returns where each node's folder
    /// ended up.
    async fn publish(
        self,
        nodes: &std::collections::BTreeMap<cairn_readonly::NodeId, PathBuf>,
    ) -> ToolResult<Vec<(cairn_readonly::NodeId, String)>> {
        let (remote, staging) = match self {
            Output::Local(_) => {
                let shown = nodes.iter().map(|(n, d)| (*n, d.display().to_string()));
                return Ok(shown.collect());
            }
            Output::Upload { remote, staging } => (remote, staging),
        };
        let dir = staging.path().join("out");
        let bar = ProgressBar::new(0);
        bar.set_style(ProgressStyle::with_template(
            "[{elapsed_precise}] {bar:40} uploading: {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
        )?);
        let (b, r) = (bar.clone(), remote.clone());
        tokio::task::spawn_blocking(move || {
            cairn_readonly::remote::upload_dir(&dir, &r, &|sent, total| {
                b.set_length(total);
                b.set_position(sent);
            })
        })
        .await?
        .inspect_err(|_| bar.abandon())?;
        bar.finish_and_clear();
        drop(staging);
        Ok(nodes
            .keys()
            .map(|n| (*n, remote.child(&format!("node-{n}")).url))
            .collect())
    }
}

/// Runs `cairn store build`.
pub async fn build(args: BuildArgs) -> ToolResult<()> {
    let started = Instant::now();
    let output = Output::plan(&args).await?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(threads));
    let df = read_input(&ctx, &args).await?;
    let arrow_schema = df.schema().as_arrow().clone();
    let (layout, schema) = if args.cluster {
        cluster_plan(&args, &arrow_schema).await?
    } else {
        let key = args
            .key
            .as_deref()
            .ok_or("--key is required: name the key columns (or use --cluster)")?;
        let key = parse_names(key, "key column")?;
        let value = args
            .value
            .as_deref()
            .map(|v| parse_names(v, "value column"))
            .transpose()?;
        (
            layout(&args)?,
            StoreSchema::from_arrow(&arrow_schema, &key, value.as_deref())?,
        )
    };
    let options = BuildOptions {
        threads,
        memory_bytes: args
            .memory_mb
            .map_or_else(cairn_readonly::default_memory_bytes, |mb| mb.max(1) << 20),
        spill_dir: args.tmp_dir.clone().unwrap_or_else(std::env::temp_dir),
    };
    let builder = Arc::new(StoreBuilder::new(
        &args.name,
        schema,
        layout.clone(),
        &options,
    )?);
    let progress = builder.progress();

    // Map phase: every input partition feeds the builder from its own task.
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template(
        "[{elapsed_precise}] {spinner} reading: {human_pos} rows ({per_sec})",
    )?);
    bar.enable_steady_tick(Duration::from_millis(200));
    let streams = df
        .execute_stream_partitioned()
        .await
        .map_err(|e| format!("cannot read {}: {e}", args.input))?;
    let mut tasks = Vec::new();
    for mut stream in streams {
        let builder = builder.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                let b = builder.clone();
                tokio::task::block_in_place(|| b.add_batch(&batch))?;
            }
            Ok::<(), ToolError>(())
        }));
    }
    let reading = futures::future::try_join_all(tasks);
    tokio::pin!(reading);
    let results = loop {
        tokio::select! {
            r = &mut reading => break r?,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                bar.set_position(progress.rows.load(std::sync::atomic::Ordering::Relaxed));
            }
        }
    };
    for r in results {
        r.inspect_err(|_| bar.abandon())?;
    }
    let rows = progress.rows.load(std::sync::atomic::Ordering::Relaxed);
    bar.set_position(rows);
    bar.finish();
    let read_time = started.elapsed();

    // Reduce phase: sort, merge and write, with a bar over the tuples to write.
    let bar = ProgressBar::new(rows * layout.replication as u64);
    bar.set_style(ProgressStyle::with_template(
        "[{elapsed_precise}] {bar:40} writing: {human_pos}/{human_len} tuples ({per_sec}, eta {eta})",
    )?);
    let builder = Arc::into_inner(builder).ok_or("a reader task still holds the builder")?;
    let out_dir = output.dir();
    let writing = tokio::task::spawn_blocking(move || builder.finish(&out_dir));
    tokio::pin!(writing);
    let summary = loop {
        tokio::select! {
            r = &mut writing => break r??,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                bar.set_position(progress.tuples_written.load(std::sync::atomic::Ordering::Relaxed));
            }
        }
    };
    bar.finish_and_clear();
    let node_dirs = output.publish(&summary.node_dirs).await?;
    let elapsed = started.elapsed();
    println!(
        "built store '{}': {} rows ({} tuples with replication {}) in {:.1} s ({} rows/s; \
         reading and hashing {:.1} s, sorting and writing {:.1} s)",
        args.name,
        group_thousands(summary.rows),
        group_thousands(summary.tuples),
        layout.replication,
        elapsed.as_secs_f64(),
        per_sec(summary.rows, elapsed),
        read_time.as_secs_f64(),
        (elapsed - read_time).as_secs_f64(),
    );
    println!(
        "{} bytes of chunk files, {} hash-prefix collisions, {} bytes spilled; {} partitions \
         on {} node(s), {} chunk(s) per bucket",
        group_thousands(summary.bytes),
        group_thousands(summary.collisions),
        group_thousands(summary.spilled_bytes),
        layout.partitions(),
        layout.nodes().len(),
        layout.chunks,
    );
    for (node, dir) in &node_dirs {
        println!("  node {node}: {dir}");
    }
    Ok(())
}

/// Runs `cairn store verify`.
pub fn verify(args: VerifyArgs) -> ToolResult<()> {
    let started = Instant::now();
    let v = StoreVersion::open(&args.dir, Verify::Checksums)?;
    let m = v.metadata();
    println!(
        "{}: store '{}', node {} of {}, {} rows in {} files, checksum {} — all files match \
         ({:.2} s)",
        args.dir.display(),
        m.store,
        m.node,
        m.layout.nodes().len(),
        group_thousands(m.rows),
        m.files.len(),
        m.checksum,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The key `raw` gives for `schema` (one value per key column).
pub fn parse_key(schema: &StoreSchema, raw: &[String]) -> ToolResult<Vec<Value>> {
    if raw.len() != schema.key.len() {
        return Err(format!(
            "the store's key has {} column(s) ({}): give one value for each",
            schema.key.len(),
            schema
                .key
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into());
    }
    raw.iter()
        .zip(&schema.key)
        .map(|(raw, c)| {
            parse_value(raw, &c.data_type)
                .map_err(|e| format!("key column '{}': {e}", c.name).into())
        })
        .collect()
}

/// Prints a row of value columns, or fails with "no row" for `None`.
pub fn print_row(schema: &StoreSchema, row: Option<Vec<Value>>) -> ToolResult<()> {
    let Some(values) = row else {
        return Err("no row with this key".into());
    };
    let headers: Vec<&str> = schema.value.iter().map(|c| c.name.as_str()).collect();
    let row: Vec<String> = values
        .iter()
        .zip(&schema.value)
        .map(|(v, c)| format_value(v, &c.data_type))
        .collect();
    println!("{}", text_table(&headers, &[row]).trim_end());
    Ok(())
}

/// Runs `cairn store get`: in a node folder if `store` is one, else in the cluster.
pub async fn get(args: GetArgs) -> ToolResult<()> {
    let dir = PathBuf::from(&args.store);
    if !dir.join(cairn_readonly::format::METADATA_FILE).is_file() {
        return super::store_serve::get(args).await;
    }
    let v = StoreVersion::open(&dir, Verify::Structure)?;
    let schema = &v.metadata().schema;
    let key = parse_key(schema, &args.key)?;
    let encoded = schema.encode_key(&key)?;
    if !v.holds(&encoded) {
        let others = other_holders(&dir, &v, &encoded);
        return Err(format!(
            "node {} does not hold this key's partition; it is on node(s) {others}",
            v.metadata().node
        )
        .into());
    }
    print_row(schema, v.get_row(&key)?)
}

/// The nodes of a key's preference list, with their folders when they sit next to
/// `dir` (as a build writes them).
fn other_holders(dir: &Path, v: &StoreVersion, key: &[u8]) -> String {
    let layout = &v.metadata().layout;
    let p = layout.partition_of(&cairn_readonly::KeyHash::of(key));
    layout
        .preference_list(p)
        .iter()
        .map(|&(_, n)| match dir.parent() {
            Some(parent) => format!("{n} ({})", node_dir(parent, n).display()),
            None => n.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
