//! `cairn-bench readonly-serve`: a read-only store served by a running cluster,
//! end to end, against a Cairn table holding the same rows.
//!
//! On a fresh `cairn local` (one tablet server, real gRPC on loopback) it
//! measures what the `readonly` benchmark cannot on files alone:
//!
//! - build with the catalog's ring, then `push` (fetch into the server's folder,
//!   verify every MD5, swap): the time from `PushStore` to the version being live;
//! - lookups through the native client's `StoreReader` (ring routing, `StoreGet`
//!   over the network, served from the memory-mapped files) from 1 client (latency)
//!   and 16 concurrent ones (throughput and latency), against `Client::get` point
//!   lookups on a Cairn table with the same keys and values (bulk-loaded and flushed);
//! - a second push and a `RollbackStore` through the master (the server's swap time
//!   and the whole call);
//! - with `--pg-url`, PostgreSQL primary-key lookups on the same rows (`COPY`-loaded,
//!   `VACUUM ANALYZE`d, read once to warm), one connection per client and a
//!   prepared `SELECT v FROM recs_pg WHERE id = $1`.
//!
//! Results are appended to `bench/results/readonly-serve.jsonl`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_client::{Client, CreateStoreSpec, CreateTableSpec, ReadMode, StoreReader, Table};
use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_readonly::{BuildOptions, StoreBuilder, StoreSchema};
use clap::Args;
use rand::{Rng, SeedableRng};

use crate::readonly::{add_batches, generate};
use crate::storage::report::{git_revision, json_num, json_str, proc_field, utc_now};

use crate::procs::{BoxResult, pg_connect, start_local};

/// `cairn-bench readonly-serve`
#[derive(Args)]
pub struct ReadonlyServeArgs {
    /// The `cairn` binary to run (build it with `cargo build --release -p cairn`).
    #[arg(long, default_value = "target/release/cairn")]
    cairn: PathBuf,
    /// Rows in the store and the table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Lookups by the single client.
    #[arg(long, default_value_t = 20_000)]
    gets: usize,
    /// Lookups by the 16 concurrent clients together.
    #[arg(long, default_value_t = 200_000)]
    concurrent_gets: usize,
    /// Where the cluster and the build live (default: the system's temporary folder).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Append the results here.
    #[arg(long, default_value = "bench/results/readonly-serve.jsonl")]
    jsonl: PathBuf,
    /// A PostgreSQL server to compare with (`host=… port=… user=… dbname=…`); its
    /// table `recs_pg` is replaced. Without it PostgreSQL is not measured.
    #[arg(long)]
    pg_url: Option<String>,
}

/// Latency percentiles (µs) and throughput of a lookup run.
struct Stats {
    p50: f64,
    p99: f64,
    ops: f64,
}

/// Runs `total` lookups of random ids in `0..rows` from `clients` concurrent tasks;
/// `get(client, id)` returns whether the key was found (a miss fails the run).
async fn measure<F, Fut>(rows: usize, total: usize, clients: usize, get: F) -> BoxResult<Stats>
where
    F: Fn(usize, i64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = BoxResult<bool>> + Send,
{
    let per = total / clients;
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let get = get.clone();
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(c as u64 + 11);
                let mut out = Vec::with_capacity(per);
                for _ in 0..per {
                    let id = rng.random_range(0..rows as i64);
                    let t0 = Instant::now();
                    let found = get(c, id).await?;
                    out.push(t0.elapsed());
                    if !found {
                        return Err::<_, Box<dyn std::error::Error + Send + Sync>>(
                            format!("key {id} was not found").into(),
                        );
                    }
                }
                Ok(out)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(total);
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Ok(Stats {
        p50: pct(0.5).as_secs_f64() * 1e6,
        p99: pct(0.99).as_secs_f64() * 1e6,
        ops: all.len() as f64 / elapsed.as_secs_f64(),
    })
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            n += if p.is_dir() {
                dir_bytes(&p)
            } else {
                e.metadata().map_or(0, |m| m.len())
            };
        }
    }
    n
}

/// Builds the generated rows with `entry`'s ring into `out`.
fn build(
    layout: &cairn_readonly::StoreLayout,
    schema: &StoreSchema,
    batches: &[arrow::array::RecordBatch],
    out: &Path,
) -> BoxResult<f64> {
    let opts = BuildOptions {
        threads: 2,
        memory_bytes: 1 << 30,
        spill_dir: out.parent().unwrap_or(Path::new("/tmp")).to_path_buf(),
    };
    let t0 = Instant::now();
    let b = StoreBuilder::new("recs", schema.clone(), layout.clone(), &opts)?;
    add_batches(&b, batches, opts.threads)?;
    b.finish(out)?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Pushes `from` and waits for it to be live: seconds.
async fn push(c: &Client, from: &Path) -> BoxResult<(u64, f64)> {
    let t0 = Instant::now();
    let v = c.push_store("recs", &from.to_string_lossy(), 0, 0).await?;
    loop {
        let (e, r) = c.get_store_and_push("recs").await?;
        if e.current_version == Some(v) && e.push.is_none() {
            return Ok((v, t0.elapsed().as_secs_f64()));
        }
        if let Some(r) =
            r.filter(|r| r.version == v && (r.state == "failed" || r.state == "rolled back"))
        {
            return Err(format!("push failed: {r:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn store_get(r: StoreReader, id: i64) -> BoxResult<bool> {
    Ok(r.get(&[Value::Int64(id)]).await?.is_some())
}

async fn table_get(c: Client, t: Arc<Table>, id: i64) -> BoxResult<bool> {
    Ok(c.get(&t, &[Value::Int64(id)], &[], ReadMode::Latest)
        .await?
        .is_some())
}

/// PostgreSQL holding the same rows: one connection and prepared lookup per client.
struct Postgres {
    conns: Vec<(tokio_postgres::Client, tokio_postgres::Statement)>,
    load_s: f64,
}

/// Loads `batches` (columns `id` INT64, `v` UTF-8) into `recs_pg` with `COPY`,
/// analyzes and warms it, and opens `clients` connections.
async fn pg_load(
    url: &str,
    batches: &[arrow::array::RecordBatch],
    clients: usize,
) -> BoxResult<Postgres> {
    use arrow::array::{Int64Array, StringArray};
    use futures::SinkExt;
    let c = pg_connect(url).await?;
    c.batch_execute(
        "DROP TABLE IF EXISTS recs_pg; CREATE TABLE recs_pg (id BIGINT PRIMARY KEY, v TEXT NOT NULL)",
    )
    .await?;
    let t0 = Instant::now();
    let sink = c.copy_in("COPY recs_pg (id, v) FROM STDIN").await?;
    futures::pin_mut!(sink);
    for b in batches {
        let ids = b
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or("column id is not INT64")?;
        let vs = b
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or("column v is not UTF-8")?;
        let mut text = String::with_capacity(b.num_rows() * 128);
        for i in 0..b.num_rows() {
            // The generated values are alphanumeric: nothing to escape for COPY.
            text.push_str(&format!("{}\t{}\n", ids.value(i), vs.value(i)));
        }
        sink.send(bytes::Bytes::from(text)).await?;
    }
    sink.finish().await?;
    c.batch_execute("VACUUM ANALYZE recs_pg").await?;
    let load_s = t0.elapsed().as_secs_f64();
    // Warm the heap and the index into the caches.
    c.batch_execute(
        "SELECT sum(length(v)) FROM recs_pg; SET enable_seqscan = off; \
         SELECT count(*) FROM recs_pg WHERE id >= 0; RESET enable_seqscan",
    )
    .await?;
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        let c = pg_connect(url).await?;
        let st = c.prepare("SELECT v FROM recs_pg WHERE id = $1").await?;
        conns.push((c, st));
    }
    Ok(Postgres { conns, load_s })
}

async fn pg_get(pg: Arc<Postgres>, client: usize, id: i64) -> BoxResult<bool> {
    let (c, st) = &pg.conns[client % pg.conns.len()];
    Ok(c.query_opt(st, &[&id]).await?.is_some())
}

/// Runs `cairn-bench readonly-serve`.
pub fn readonly_serve(a: ReadonlyServeArgs) -> BoxResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    rt.block_on(run(a))
}

async fn run(a: ReadonlyServeArgs) -> BoxResult<()> {
    let work = match &a.work_dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let (_local, c) = start_local(&a.cairn, work.path(), 1).await?;
    println!(
        "readonly-serve: {} rows of {}-byte values, 1 tablet server on loopback",
        a.rows, a.value_bytes
    );
    let batches = generate(a.rows, a.value_bytes)?;
    let schema = StoreSchema::from_arrow(&batches[0].schema(), &["id".into()], None)?;
    c.create_store(CreateStoreSpec::new("recs", schema.clone()))
        .await?;
    let entry = c.get_store("recs").await?;

    let out1 = work.path().join("build-1");
    let build_s = build(&entry.layout, &schema, &batches, &out1)?;
    let bytes = dir_bytes(&out1);
    let (_, push_s) = push(&c, &out1).await?;
    println!(
        "  build {build_s:.2} s ({:.0} rows/s); push {push_s:.2} s for {bytes} bytes ({:.0} MB/s)",
        a.rows as f64 / build_s,
        bytes as f64 / push_s / 1e6
    );

    // The same rows in a table, bulk-loaded and flushed.
    let tschema = Schema::new(
        vec![
            ColumnSpec::new("id", DataType::Int64),
            ColumnSpec::new("v", DataType::String),
        ],
        &["id"],
    )?;
    c.create_table(CreateTableSpec::new("recs_t", tschema).replicas(1))
        .await?;
    let table = Arc::new(c.open_table("recs_t").await?);
    let t0 = Instant::now();
    let mut loader = c.bulk_loader(&table).await?;
    for b in &batches {
        loader.add(b.clone()).await?;
    }
    loader.finish().await?;
    c.flush_table(&table).await?;
    let load_s = t0.elapsed().as_secs_f64();
    println!("  table bulk load {load_s:.2} s");
    let pg = match &a.pg_url {
        Some(url) => {
            let pg = pg_load(url, &batches, 16).await?;
            println!("  PostgreSQL COPY + VACUUM ANALYZE {:.2} s", pg.load_s);
            Some(Arc::new(pg))
        }
        None => None,
    };
    drop(batches);

    let reader = c.open_store("recs").await?;
    // Warm both up: every key once (and check it is there).
    let keys: Vec<Vec<Value>> = (0..a.rows as i64).map(|i| vec![Value::Int64(i)]).collect();
    for chunk in keys.chunks(2_000) {
        let rows = reader.get_all(chunk).await?;
        if rows.iter().any(|r| r.value.is_none()) {
            return Err("the store lost a key".into());
        }
    }
    drop(keys);
    let (cc, t) = (c.clone(), table.clone());
    measure(a.rows, a.gets, 4, move |_, id| {
        table_get(cc.clone(), t.clone(), id)
    })
    .await?;

    let r = reader.clone();
    let s1 = measure(a.rows, a.gets, 1, move |_, id| store_get(r.clone(), id)).await?;
    let r = reader.clone();
    let s16 = measure(a.rows, a.concurrent_gets, 16, move |_, id| {
        store_get(r.clone(), id)
    })
    .await?;
    let (cc, t) = (c.clone(), table.clone());
    let t1 = measure(a.rows, a.gets, 1, move |_, id| {
        table_get(cc.clone(), t.clone(), id)
    })
    .await?;
    let (cc, t) = (c.clone(), table.clone());
    let t16 = measure(a.rows, a.concurrent_gets, 16, move |_, id| {
        table_get(cc.clone(), t.clone(), id)
    })
    .await?;
    let (p1, p16) = match &pg {
        Some(pg) => {
            let p = pg.clone();
            measure(a.rows, a.gets, 4, move |c, id| pg_get(p.clone(), c, id)).await?;
            let p = pg.clone();
            let p1 = measure(a.rows, a.gets, 1, move |c, id| pg_get(p.clone(), c, id)).await?;
            let p = pg.clone();
            let p16 = measure(a.rows, a.concurrent_gets, 16, move |c, id| {
                pg_get(p.clone(), c, id)
            })
            .await?;
            (Some(p1), Some(p16))
        }
        None => (None, None),
    };
    for (what, s) in [
        ("store, 1 client ", Some(&s1)),
        ("table, 1 client ", Some(&t1)),
        ("PostgreSQL, 1 client ", p1.as_ref()),
        ("store, 16 clients", Some(&s16)),
        ("table, 16 clients", Some(&t16)),
        ("PostgreSQL, 16 clients", p16.as_ref()),
    ] {
        if let Some(s) = s {
            println!(
                "  get {what}: p50 {:.0} µs, p99 {:.0} µs, {:.0} gets/s",
                s.p50, s.p99, s.ops
            );
        }
    }

    // A second version, then a rollback through the master.
    let out2 = work.path().join("build-2");
    let batches = generate(a.rows, a.value_bytes)?;
    build(&entry.layout, &schema, &batches, &out2)?;
    drop(batches);
    let (_, push2_s) = push(&c, &out2).await?;
    let t0 = Instant::now();
    let rb = c.rollback_store("recs", 0).await?;
    let rollback_call_ms = t0.elapsed().as_secs_f64() * 1e3;
    let rollback_swap_ms = rb.max_swap_micros as f64 / 1e3;
    println!(
        "  second push {push2_s:.2} s; rollback: server swap {rollback_swap_ms:.2} ms, whole \
         call {rollback_call_ms:.1} ms"
    );

    let line = format!(
        "{{\"at\":{},\"rev\":{},\"cpu\":{},\"rows\":{},\"value_bytes\":{},\"bytes\":{},\
         \"build_s\":{},\"push_s\":{},\"push2_s\":{},\"table_load_s\":{},\
         \"store_p50_us\":{},\"store_p99_us\":{},\"store_ops\":{},\
         \"table_p50_us\":{},\"table_p99_us\":{},\"table_ops\":{},\
         \"store16_p50_us\":{},\"store16_p99_us\":{},\"store16_ops\":{},\
         \"table16_p50_us\":{},\"table16_p99_us\":{},\"table16_ops\":{},\
         \"rollback_swap_ms\":{},\"rollback_call_ms\":{}{}}}",
        json_str(&utc_now()),
        json_str(&git_revision()),
        json_str(&proc_field("/proc/cpuinfo", "model name").unwrap_or_default()),
        a.rows,
        a.value_bytes,
        bytes,
        json_num(build_s),
        json_num(push_s),
        json_num(push2_s),
        json_num(load_s),
        json_num(s1.p50),
        json_num(s1.p99),
        json_num(s1.ops),
        json_num(t1.p50),
        json_num(t1.p99),
        json_num(t1.ops),
        json_num(s16.p50),
        json_num(s16.p99),
        json_num(s16.ops),
        json_num(t16.p50),
        json_num(t16.p99),
        json_num(t16.ops),
        json_num(rollback_swap_ms),
        json_num(rollback_call_ms),
        pg_fields(pg.as_deref(), p1.as_ref(), p16.as_ref()),
    );
    if let Some(p) = a.jsonl.parent() {
        std::fs::create_dir_all(p)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.jsonl)?;
    writeln!(f, "{line}")?;
    println!("  appended to {}", a.jsonl.display());
    Ok(())
}

/// The PostgreSQL figures as extra JSON fields (`,"pg_…":…`), empty without them.
fn pg_fields(pg: Option<&Postgres>, p1: Option<&Stats>, p16: Option<&Stats>) -> String {
    let (Some(pg), Some(p1), Some(p16)) = (pg, p1, p16) else {
        return String::new();
    };
    format!(
        ",\"pg_load_s\":{},\"pg_p50_us\":{},\"pg_p99_us\":{},\"pg_ops\":{},\
         \"pg16_p50_us\":{},\"pg16_p99_us\":{},\"pg16_ops\":{}",
        json_num(pg.load_s),
        json_num(p1.p50),
        json_num(p1.p99),
        json_num(p1.ops),
        json_num(p16.p50),
        json_num(p16.p99),
        json_num(p16.ops),
    )
}
