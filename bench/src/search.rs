//! `cairn-bench search`: hyperspace search (HyperDex §2.3) against a full scan and
//! PostgreSQL's B-tree indexes, on the same objects in the same run.
//!
//! On a fresh `cairn local` (one tablet server, or `--tservers 3 --replicas 3`) it loads
//! `--objects` objects `(id, a, b, c, v)` with the bulk loader into a table with three
//! subspaces:
//!
//! - `a`: `BIGINT`, about 10 objects per value (hashed axis) — the equality search;
//! - `b`: `BIGINT`, uniform in `[0, objects)` (ordered axis) — the range search
//!   `b >= x AND b < x + 100`, about 100 objects;
//! - `c`: `TEXT`, 1,000 categories — the count `count(*) WHERE c = 'cNNNN'`;
//! - `v`: a 32-byte payload.
//!
//! and measures, from one client, the latency of each search through the native client
//! (`Client::search` / `Client::count`) against the same predicates pushed into a scan
//! of the table itself (Cairn without the subspace: a full scan), and against
//! PostgreSQL with B-tree indexes on `a`, `b` and `c` (`--pg-url`; prepared statements).
//! Then a mixed workload of 16 clients, half equality searches and half puts of existing
//! objects (new attribute values, so puts move objects between regions), on Cairn and
//! PostgreSQL (`INSERT … ON CONFLICT DO UPDATE`). A primary-key `get` through the same
//! client is timed as the floor of one round trip. Last, the price of chaining: single-row
//! puts from 16 clients into empty tables with 0, 1 and 2 subspaces.
//!
//! It writes the objects to `--parquet-out` and the searched values to the result, so
//! that `bench/run search` can time DuckDB on the same data; the figures go to `--out`
//! as one JSON object.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use cairn_client::{Client, CreateTableSpec, Operation, SubspaceSpec, Table};
use cairn_common::{
    ColumnPredicate, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value,
};
use clap::Args;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::procs::{BoxResult, pg_connect, pg_err, settle, start_local};

/// `cairn-bench search`
#[derive(Args)]
pub struct SearchArgs {
    /// The `cairn` binary to run (build it with `cargo build --release -p cairn`).
    #[arg(long, default_value = "target/release/cairn")]
    cairn: PathBuf,
    /// Objects in the searched table.
    #[arg(long, default_value_t = 10_000_000)]
    objects: u64,
    /// Tablet servers of `cairn local`.
    #[arg(long, default_value_t = 1)]
    tservers: u32,
    /// Replicas of every table.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Regions of each of the subspaces on `a` and `b`.
    #[arg(long, default_value_t = 65_536)]
    regions: u32,
    /// Searches of each kind from the single client.
    #[arg(long, default_value_t = 2_000)]
    searches: usize,
    /// Full-scan queries of each kind (each reads every object).
    #[arg(long, default_value_t = 5)]
    scans: usize,
    /// Operations of the mixed workload (16 clients together).
    #[arg(long, default_value_t = 40_000)]
    mixed_ops: usize,
    /// Puts into each of the tables with 0, 1 and 2 subspaces (16 clients together).
    #[arg(long, default_value_t = 40_000)]
    puts: usize,
    /// Where the cluster lives (default: the system's temporary folder).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Write the figures here, as one JSON object.
    #[arg(long)]
    out: PathBuf,
    /// Write the objects here as Parquet (for DuckDB); not written when absent.
    #[arg(long)]
    parquet_out: Option<PathBuf>,
    /// A PostgreSQL server to compare with (`host=… port=… user=… dbname=…`); its
    /// table `objs` is replaced. Without it PostgreSQL is not measured.
    #[arg(long)]
    pg_url: Option<String>,
}

/// SplitMix64: the generator of every attribute, so a run is reproducible.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The attributes of object `id` in generation `gen` (0: loaded; puts use others).
fn object(id: u64, generation: u64, objects: u64) -> [Value; 5] {
    let r = |salt: u64| mix(id ^ generation.wrapping_mul(0x5851_f42d_4c95_7f2d) ^ salt);
    [
        Value::Int64(id as i64),
        Value::Int64((r(1) % (objects / 10).max(1)) as i64),
        Value::Int64((r(2) % objects) as i64),
        Value::String(format!("c{:04}", r(3) % 1000)),
        Value::String(format!("{:016x}{:016x}", r(4), r(5))),
    ]
}

fn schema() -> BoxResult<Schema> {
    Ok(Schema::new(
        vec![
            ColumnSpec::new("id", DataType::Int64),
            ColumnSpec::new("a", DataType::Int64),
            ColumnSpec::new("b", DataType::Int64),
            ColumnSpec::new("c", DataType::String),
            ColumnSpec::new("v", DataType::String),
        ],
        &["id"],
    )?)
}

fn table_spec(
    name: &str,
    replicas: u32,
    subspaces: Vec<SubspaceSpec>,
) -> BoxResult<CreateTableSpec> {
    let mut spec = CreateTableSpec::new(name, schema()?)
        .partition(PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["id".into()],
                num_buckets: 4,
                seed: 0,
            }],
            range_columns: vec![],
        })
        .replicas(replicas);
    for s in subspaces {
        spec = spec.subspace(s);
    }
    Ok(spec)
}

/// Latency percentiles (µs) and throughput of a run of operations.
#[derive(Clone, Copy, Debug)]
struct Stats {
    p50: f64,
    p99: f64,
    ops: f64,
    /// Average rows an operation returned (or counted).
    rows: f64,
}

impl Stats {
    fn of(mut lat: Vec<Duration>, rows: u64, elapsed: Duration) -> Stats {
        lat.sort_unstable();
        let n = lat.len().max(1);
        let pct = |p: f64| lat.get(((n as f64 * p) as usize).min(n - 1)).copied();
        let us = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e6);
        Stats {
            p50: us(pct(0.5)),
            p99: us(pct(0.99)),
            ops: lat.len() as f64 / elapsed.as_secs_f64().max(1e-9),
            rows: rows as f64 / n as f64,
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({"p50_us": self.p50, "p99_us": self.p99, "ops": self.ops, "rows": self.rows})
    }
}

/// One kind of search: its predicate for a drawn parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `a = x`
    Equality,
    /// `b >= x AND b < x + 100`
    Range,
    /// `count(*) WHERE c = 'cNNNN'`
    Count,
}

const KINDS: [Kind; 3] = [Kind::Equality, Kind::Range, Kind::Count];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Equality => "equality",
            Kind::Range => "range",
            Kind::Count => "count",
        }
    }

    /// The parameters of `n` searches (seeded per kind).
    fn params(self, n: usize, objects: u64) -> Vec<i64> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(self as u64 + 101);
        (0..n)
            .map(|_| match self {
                Kind::Equality => rng.random_range(0..(objects / 10).max(1)) as i64,
                Kind::Range => rng.random_range(0..objects.saturating_sub(100).max(1)) as i64,
                Kind::Count => rng.random_range(0..1000),
            })
            .collect()
    }

    fn predicate(self, x: i64) -> ColumnPredicate {
        match self {
            Kind::Equality => ColumnPredicate::eq("a", Value::Int64(x)),
            Kind::Range => ColumnPredicate::range("b", Value::Int64(x), Value::Int64(x + 100)),
            Kind::Count => ColumnPredicate::eq("c", Value::String(format!("c{x:04}"))),
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Kind::Equality => "SELECT id, a, b, c, v FROM objs WHERE a = $1",
            Kind::Range => "SELECT id, a, b, c, v FROM objs WHERE b >= $1 AND b < $1 + 100",
            Kind::Count => "SELECT count(*) FROM objs WHERE c = $1",
        }
    }
}

/// How a search is answered.
#[derive(Clone, Copy)]
enum Way {
    Subspace,
    FullScan,
}

/// Runs one search; returns the rows found (or counted).
async fn cairn_search(c: &Client, t: &Table, kind: Kind, x: i64, way: Way) -> BoxResult<u64> {
    let p = kind.predicate(x);
    Ok(match way {
        Way::Subspace if kind == Kind::Count => c.count(t, &[p]).await?,
        Way::Subspace => c.search(t, &[p]).await?.batch.num_rows() as u64,
        Way::FullScan => c.scan(t).predicate(p).execute().await?.num_rows() as u64,
    })
}

/// One put: object `id` at generation `generation`, upserted through its own session.
async fn cairn_put(c: &Client, t: &Table, id: u64, generation: u64, objects: u64) -> BoxResult<()> {
    let mut s = c.new_session(t);
    s.apply(Operation::upsert(object(id, generation, objects).to_vec()))
        .await?;
    Ok(())
}

async fn pg_search(
    c: &tokio_postgres::Client,
    st: &tokio_postgres::Statement,
    kind: Kind,
    x: i64,
) -> BoxResult<u64> {
    Ok(match kind {
        Kind::Count => {
            let row = c
                .query_one(st, &[&format!("c{x:04}")])
                .await
                .map_err(pg_err)?;
            row.get::<_, i64>(0) as u64
        }
        _ => c.query(st, &[&x]).await.map_err(pg_err)?.len() as u64,
    })
}

/// The objects `[from, to)` as an Arrow batch.
fn batch_of(from: u64, to: u64, objects: u64) -> BoxResult<RecordBatch> {
    let rows: Vec<[Value; 5]> = (from..to).map(|id| object(id, 0, objects)).collect();
    let int = |i: usize| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| {
            match r[i] {
                Value::Int64(v) => v,
                _ => 0,
            }
        })))
    };
    let text = |i: usize| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(
            |r| match &r[i] {
                Value::String(s) => s.clone(),
                _ => String::new(),
            },
        )))
    };
    Ok(RecordBatch::try_from_iter(vec![
        ("id", int(0)),
        ("a", int(1)),
        ("b", int(2)),
        ("c", text(3)),
        ("v", text(4)),
    ])?)
}

fn progress(what: &str, total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "  {msg} [{bar:30}] {pos}/{len} ({per_sec}, {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Bulk loads every object into `t` (the point leaders chain each chunk into the
/// subspaces before they answer it); returns seconds.
async fn cairn_load(c: &Client, t: &Table, objects: u64) -> BoxResult<f64> {
    const BATCH: u64 = 10_000;
    let bar = progress("cairn load", objects);
    let t0 = Instant::now();
    let mut loader = c.bulk_loader(t).await?;
    let mut from = 0;
    while from < objects {
        let to = (from + BATCH).min(objects);
        loader.add(batch_of(from, to, objects)?).await?;
        bar.inc(to - from);
        from = to;
    }
    let summary = loader.finish().await?;
    if let Some(e) = summary.row_errors.first() {
        return Err(format!(
            "load: {} rows failed, first: {e:?}",
            summary.row_errors.len()
        )
        .into());
    }
    bar.finish_and_clear();
    Ok(t0.elapsed().as_secs_f64())
}

/// Loads every object into PostgreSQL with `COPY`, builds the three B-tree indexes,
/// analyzes and warms the table; returns seconds.
async fn pg_load(url: &str, objects: u64) -> BoxResult<f64> {
    use futures::SinkExt;
    let c = pg_connect(url).await?;
    c.batch_execute(
        "DROP TABLE IF EXISTS objs; CREATE TABLE objs (id BIGINT PRIMARY KEY, a BIGINT NOT NULL, \
         b BIGINT NOT NULL, c TEXT NOT NULL, v TEXT NOT NULL)",
    )
    .await
    .map_err(pg_err)?;
    let t0 = Instant::now();
    let sink = c
        .copy_in("COPY objs (id, a, b, c, v) FROM STDIN")
        .await
        .map_err(pg_err)?;
    futures::pin_mut!(sink);
    let mut from = 0;
    while from < objects {
        let to = (from + 100_000).min(objects);
        let mut text = String::with_capacity(((to - from) * 64) as usize);
        for id in from..to {
            let o = object(id, 0, objects);
            // Integers and hexadecimal strings: nothing to escape for COPY.
            let f = |v: &Value| match v {
                Value::Int64(x) => x.to_string(),
                Value::String(s) => s.clone(),
                _ => String::new(),
            };
            text.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\n",
                f(&o[0]),
                f(&o[1]),
                f(&o[2]),
                f(&o[3]),
                f(&o[4])
            ));
        }
        sink.send(bytes::Bytes::from(text)).await.map_err(pg_err)?;
        from = to;
    }
    sink.finish().await.map_err(pg_err)?;
    c.batch_execute(
        "CREATE INDEX objs_a ON objs (a); CREATE INDEX objs_b ON objs (b); \
         CREATE INDEX objs_c ON objs (c)",
    )
    .await
    .map_err(pg_err)?;
    // Alone: a multi-statement batch is one transaction, which VACUUM refuses.
    c.batch_execute("VACUUM ANALYZE objs")
        .await
        .map_err(pg_err)?;
    let load_s = t0.elapsed().as_secs_f64();
    c.batch_execute("SELECT sum(length(v)) FROM objs")
        .await
        .map_err(pg_err)?;
    Ok(load_s)
}

/// Runs `params` one after another from one client; `run(x)` returns the rows found.
async fn serial<F, Fut>(params: &[i64], run: F) -> BoxResult<Stats>
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = BoxResult<u64>>,
{
    let mut lat = Vec::with_capacity(params.len());
    let mut rows = 0;
    let t0 = Instant::now();
    for &x in params {
        let s = Instant::now();
        rows += run(x).await?;
        lat.push(s.elapsed());
    }
    Ok(Stats::of(lat, rows, t0.elapsed()))
}

/// One operation of a concurrent workload: client number, operation number.
type OpFn = Arc<
    dyn Fn(usize, u64) -> futures::future::BoxFuture<'static, BoxResult<(bool, u64)>> + Send + Sync,
>;

/// Runs `total` operations from `clients` concurrent tasks; `op(client, seq)` returns
/// whether it was a search and the rows it found. Returns (all, searches, puts).
async fn concurrent(total: usize, clients: usize, op: OpFn) -> BoxResult<(Stats, Stats, Stats)> {
    let per = total / clients;
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let op = op.clone();
        tasks.spawn(async move {
            let mut out = Vec::with_capacity(per);
            for i in 0..per {
                let s = Instant::now();
                let (search, rows) = op(c, (c * per + i) as u64).await?;
                out.push((s.elapsed(), search, rows));
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(out)
        });
    }
    let mut all = Vec::with_capacity(total);
    while let Some(r) = tasks.join_next().await {
        all.extend(r??);
    }
    let elapsed = t0.elapsed();
    let pick = |f: &dyn Fn(bool) -> bool| {
        let sel: Vec<_> = all.iter().filter(|(_, s, _)| f(*s)).collect();
        let rows = sel.iter().map(|(_, _, r)| r).sum();
        Stats::of(sel.iter().map(|(d, _, _)| *d).collect(), rows, elapsed)
    };
    Ok((pick(&|_| true), pick(&|s| s), pick(&|s| !s)))
}

/// Runs `cairn-bench search`.
pub fn search(a: SearchArgs) -> BoxResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    rt.block_on(run(a))
}

async fn run(a: SearchArgs) -> BoxResult<()> {
    if a.objects < 1_000 {
        return Err("--objects must be at least 1000".into());
    }
    let work = match &a.work_dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let (_local, c) = start_local(&a.cairn, work.path(), a.tservers).await?;
    println!(
        "search: {} objects, {} tablet server(s), replicas {}, {} regions on a and b",
        a.objects, a.tservers, a.replicas, a.regions
    );
    c.create_table(table_spec(
        "objs",
        a.replicas,
        vec![
            SubspaceSpec::new(&["a"]).regions(a.regions),
            SubspaceSpec::new(&["b"]).regions(a.regions),
            SubspaceSpec::new(&["c"]).regions(1024),
        ],
    )?)
    .await?;
    let t = c.open_table("objs").await?;
    let load_s = cairn_load(&c, &t, a.objects).await?;
    c.flush_table(&t).await?;
    for s in &t.subspaces {
        let region = cairn_client::hyperspace::region_table(&t.schema, t.replicas, s)?;
        c.flush_table(&region).await?;
    }
    println!(
        "  cairn load with 3 subspaces: {load_s:.1} s ({:.0} objects/s)",
        a.objects as f64 / load_s
    );
    // The load leaves flushes and compactions running; on a small machine they would
    // steal the CPU from every measurement below (the same rule as the TPC-H bench).
    let settle_s = settle(_local.0.id(), Duration::from_secs(900)).await;
    println!("  background maintenance settled after {settle_s:.0} s");
    if let Some(p) = &a.parquet_out {
        let file = std::fs::File::create(p)?;
        let mut w =
            parquet::arrow::ArrowWriter::try_new(file, batch_of(0, 1, a.objects)?.schema(), None)?;
        let mut from = 0;
        while from < a.objects {
            let to = (from + 200_000).min(a.objects);
            w.write(&batch_of(from, to, a.objects)?)?;
            from = to;
        }
        w.close()?;
    }
    let pg = match &a.pg_url {
        Some(url) => {
            let s = pg_load(url, a.objects).await?;
            println!("  PostgreSQL COPY + 3 indexes + VACUUM ANALYZE: {s:.1} s");
            Some((url.clone(), s))
        }
        None => None,
    };

    // The floor of one round trip: a primary-key lookup through the same client.
    let ids: Vec<i64> = Kind::Equality
        .params(a.searches, a.objects)
        .iter()
        .map(|x| mix(*x as u64) as i64 % a.objects as i64)
        .collect();
    let get = serial(&ids, |id| {
        let (c, t) = (&c, &t);
        async move {
            let row = c
                .get(t, &[Value::Int64(id)], &[], cairn_client::ReadMode::Latest)
                .await?;
            Ok(u64::from(row.is_some()))
        }
    })
    .await?;
    println!("  get by key (reference) p50 {:.0} µs", get.p50);
    let mut single = serde_json::Map::new();
    for kind in KINDS {
        let params = kind.params(a.searches, a.objects);
        // Warm the regions once with a few searches, then measure.
        for &x in params.iter().take(20) {
            cairn_search(&c, &t, kind, x, Way::Subspace).await?;
        }
        let sub = serial(&params, |x| cairn_search(&c, &t, kind, x, Way::Subspace)).await?;
        let scan = serial(&params[..a.scans.min(params.len())], |x| {
            cairn_search(&c, &t, kind, x, Way::FullScan)
        })
        .await?;
        let mut entry = json!({"subspace": sub.json(), "full_scan": scan.json(),
                               "params": params});
        let mut line = format!(
            "  {:<8} subspace p50 {:>8.0} µs p99 {:>8.0} µs ({:.1} rows) | full scan p50 {:>9.0} µs ({:.0}x)",
            kind.name(),
            sub.p50,
            sub.p99,
            sub.rows,
            scan.p50,
            scan.p50 / sub.p50.max(1e-9)
        );
        if let Some((url, _)) = &pg {
            let pc = pg_connect(url).await?;
            let st = pc.prepare(kind.sql()).await.map_err(pg_err)?;
            for &x in params.iter().take(20) {
                pg_search(&pc, &st, kind, x).await?;
            }
            let p = serial(&params, |x| pg_search(&pc, &st, kind, x)).await?;
            entry["postgres"] = p.json();
            line.push_str(&format!(
                " | PostgreSQL p50 {:>6.0} µs ({:.2}x of it)",
                p.p50,
                p.p50 / sub.p50.max(1e-9)
            ));
        }
        println!("{line}");
        single.insert(kind.name().to_string(), entry);
    }

    // Mixed: 16 clients, half equality searches and half puts of existing objects.
    const CLIENTS: usize = 16;
    let objects = a.objects;
    let eq = Kind::Equality.params(a.mixed_ops, objects);
    let eq = Arc::new(eq);
    let op: OpFn = {
        let (c, t, eq) = (c.clone(), t.clone(), eq.clone());
        Arc::new(move |_client, seq| {
            let (c, t, eq) = (c.clone(), t.clone(), eq.clone());
            Box::pin(async move {
                if seq % 2 == 0 {
                    let n = cairn_search(&c, &t, Kind::Equality, eq[seq as usize], Way::Subspace)
                        .await?;
                    Ok((true, n))
                } else {
                    cairn_put(&c, &t, mix(seq ^ 0xabc) % objects, seq + 1, objects).await?;
                    Ok((false, 1))
                }
            })
        })
    };
    let (all, searches, puts) = concurrent(a.mixed_ops, CLIENTS, op).await?;
    println!(
        "  mixed (16 clients, 50% search / 50% put): {:.0} ops/s; search p50 {:.0} µs, put p50 {:.0} µs",
        all.ops, searches.p50, puts.p50
    );
    let mut mixed =
        json!({"cairn": {"all": all.json(), "search": searches.json(), "put": puts.json()}});
    if let Some((url, _)) = &pg {
        let mut conns = Vec::with_capacity(CLIENTS);
        for _ in 0..CLIENTS {
            let pc = pg_connect(url).await?;
            let s = pc.prepare(Kind::Equality.sql()).await.map_err(pg_err)?;
            let u = pc
                .prepare(
                    "INSERT INTO objs (id, a, b, c, v) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (id) DO UPDATE SET a = EXCLUDED.a, b = EXCLUDED.b, \
                     c = EXCLUDED.c, v = EXCLUDED.v",
                )
                .await
                .map_err(pg_err)?;
            conns.push((pc, s, u));
        }
        let conns = Arc::new(conns);
        let op: OpFn = {
            let eq = eq.clone();
            Arc::new(move |client, seq| {
                let (conns, eq) = (conns.clone(), eq.clone());
                Box::pin(async move {
                    let (pc, s, u) = &conns[client];
                    if seq % 2 == 0 {
                        let n = pg_search(pc, s, Kind::Equality, eq[seq as usize]).await?;
                        Ok((true, n))
                    } else {
                        let id = mix(seq ^ 0xabc) % objects;
                        let o = object(id, seq + 1, objects);
                        let (Value::Int64(i), Value::Int64(x), Value::Int64(y)) =
                            (&o[0], &o[1], &o[2])
                        else {
                            return Err("generated object has the wrong shape".into());
                        };
                        let (Value::String(z), Value::String(v)) = (&o[3], &o[4]) else {
                            return Err("generated object has the wrong shape".into());
                        };
                        pc.execute(u, &[i, x, y, z, v]).await.map_err(pg_err)?;
                        Ok((false, 1))
                    }
                })
            })
        };
        let (pall, ps, pp) = concurrent(a.mixed_ops, CLIENTS, op).await?;
        println!(
            "  mixed on PostgreSQL: {:.0} ops/s; search p50 {:.0} µs, put p50 {:.0} µs",
            pall.ops, ps.p50, pp.p50
        );
        mixed["postgres"] = json!({"all": pall.json(), "search": ps.json(), "put": pp.json()});
    }

    // The price of chaining: puts into empty tables with 0, 1 and 2 subspaces.
    let mut put_cost = serde_json::Map::new();
    let layouts: [(&str, Vec<SubspaceSpec>); 3] = [
        ("0", vec![]),
        ("1", vec![SubspaceSpec::new(&["a"]).regions(a.regions)]),
        (
            "2",
            vec![
                SubspaceSpec::new(&["a"]).regions(a.regions),
                SubspaceSpec::new(&["b"]).regions(a.regions),
            ],
        ),
    ];
    let mut base_ops = 0.0;
    for (n, subspaces) in layouts {
        let name = format!("put{n}");
        c.create_table(table_spec(&name, a.replicas, subspaces)?)
            .await?;
        let pt = c.open_table(&name).await?;
        let keys = (a.puts as u64 / 2).max(1);
        let op: OpFn = {
            let (c, pt) = (c.clone(), pt.clone());
            Arc::new(move |_client, seq| {
                let (c, pt) = (c.clone(), pt.clone());
                Box::pin(async move {
                    cairn_put(&c, &pt, mix(seq ^ 0x77) % keys, seq + 1, objects).await?;
                    Ok((false, 1))
                })
            })
        };
        let (s, _, _) = concurrent(a.puts, CLIENTS, op).await?;
        if n == "0" {
            base_ops = s.ops;
        }
        println!(
            "  puts with {n} subspace(s): {:.0} puts/s, p50 {:.0} µs ({:.2}x of none)",
            s.ops,
            s.p50,
            s.ops / base_ops.max(1e-9)
        );
        put_cost.insert(n.to_string(), s.json());
    }

    let out = json!({
        "objects": a.objects,
        "settle_s": settle_s,
        "tservers": a.tservers,
        "replicas": a.replicas,
        "regions": a.regions,
        "region_tablets": t.subspaces.first().map(|s| s.tablet_count()),
        "load_s": load_s,
        "pg_load_s": pg.as_ref().map(|(_, s)| *s),
        "get": get.json(),
        "single": single,
        "mixed": mixed,
        "put_cost": put_cost,
    });
    std::fs::write(&a.out, serde_json::to_vec(&out)?)?;
    Ok(())
}
