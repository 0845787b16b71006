//! `cairn-bench readonly`: a read-only store's build, lookups, swap and rollback on
//! one node, against LMDB (through the `heed` crate) on the same keys and values.
//!
//! The data is N rows of an INT64 key and a 100-byte string value. Both stores hold the
//! same key bytes (Cairn's key encoding) and the same value bytes (Cairn's value
//! codec), and a lookup returns a borrowed slice in both, so the comparison is of the
//! storage engines alone. Nothing but the two stores' own work is timed, and nothing
//! holds a copy of every row while lookups run, so 100 M rows fit in memory:
//!
//! - build: in a child process (so the input's memory is gone when it exits), the
//!   rows, in a scrambled order, are generated as Arrow batches (about 11 GB at 100 M
//!   rows) before the clock starts, then fed to [`StoreBuilder`] from every core
//!   (bounded memory, spilling past the default budget of an eighth of the
//!   machine's memory). LMDB loads the same rows in key
//!   order with `MDB_APPEND`, its fastest path (our input is not sorted; LMDB's is
//!   given sorted); its rows are made in chunks and only the `put` calls and the final
//!   commit and sync are timed;
//! - get: uniformly random keys, all present (the key is encoded before the clock
//!   starts), from 1 thread (latency percentiles) and 16 threads (throughput). Each store
//!   is warmed, by reading every key once, and measured in turn: the "hot" case of the
//!   Voldemort paper's §5, all in the page cache. At 100 M rows the two stores (about
//!   14 GB each) do not fit in memory together, so measuring both after one warm-up
//!   would measure the disk;
//! - swap and rollback: [`VersionedStore`] with two installed versions, timed over
//!   repeated swaps (median and maximum).
//!
//! Results go to `bench/results/readonly.jsonl`, one line per run; `bench/run report`
//! puts them in REPORT.md.

use std::error::Error;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
use cairn_readonly::{
    BuildOptions, StoreBuilder, StoreLayout, StoreSchema, StoreVersion, Verify, VersionedStore,
    node_dir,
};
use clap::Args;
use heed::types::Bytes;
use heed::{Database, EnvOpenOptions, PutFlags};
use rand::{Rng, SeedableRng};

use crate::storage::report::{
    fs_type, git_revision, json_num, json_str, proc_field, total_memory, utc_now,
};

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Rows per generated batch.
const BATCH_ROWS: usize = 8192;
/// Swaps (and rollbacks) timed.
const SWAPS: usize = 21;
/// Lookup threads measured: latency from one, throughput from sixteen.
const GET_THREADS: [usize; 2] = [1, 16];

/// `cairn-bench readonly`
#[derive(Args)]
pub struct ReadonlyArgs {
    /// Rows in the store.
    #[arg(long, default_value_t = 10_000_000)]
    rows: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Lookups per measurement.
    #[arg(long, default_value_t = 1_000_000)]
    gets: usize,
    /// Where the store and LMDB live (default: the system's temporary folder).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Append the results here.
    #[arg(long, default_value = "bench/results/readonly.jsonl")]
    jsonl: PathBuf,
    /// Internal: only generate and build into this folder, then print the build's
    /// figures (the benchmark runs the build in a child process this way).
    #[arg(long, hide = true)]
    build_only: Option<PathBuf>,
}

fn value_of(i: u64, len: usize) -> String {
    // Deterministic, incompressible-looking letters.
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (b'a' + (x % 26) as u8) as char
        })
        .collect()
}

/// The generated rows' Arrow schema: `id INT64, v UTF8`.
fn rows_schema() -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(vec![
        Field::new("id", ArrowType::Int64, false),
        Field::new("v", ArrowType::Utf8, false),
    ]))
}

/// `rows` rows as batches of [`BATCH_ROWS`]: ids `0..rows` in a scrambled (seeded) order,
/// as a batch job would emit them, each with the value [`value_of`] gives it. The
/// batches are made on every core.
pub(crate) fn generate(rows: usize, value_bytes: usize) -> BoxResult<Vec<RecordBatch>> {
    let schema = rows_schema();
    let mut ids: Vec<i64> = (0..rows as i64).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.random_range(0..=i));
    }
    let chunks: Vec<&[i64]> = ids.chunks(BATCH_ROWS).collect();
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let per = chunks.len().div_ceil(cpus).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .chunks(per)
            .map(|part| {
                let schema = schema.clone();
                s.spawn(move || -> BoxResult<Vec<RecordBatch>> {
                    part.iter()
                        .map(|c| {
                            Ok(RecordBatch::try_new(
                                schema.clone(),
                                vec![
                                    Arc::new(Int64Array::from(c.to_vec())),
                                    Arc::new(StringArray::from_iter_values(
                                        c.iter().map(|&i| value_of(i as u64, value_bytes)),
                                    )),
                                ],
                            )?)
                        })
                        .collect()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(chunks.len());
        for h in handles {
            all.extend(h.join().map_err(|_| "a generating thread panicked")??);
        }
        Ok(all)
    })
}

/// Feeds `batches` to `builder` from `threads` threads (batch `i` to thread
/// `i % threads`).
pub(crate) fn add_batches(
    builder: &StoreBuilder,
    batches: &[RecordBatch],
    threads: usize,
) -> BoxResult<()> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    batches
                        .iter()
                        .skip(t)
                        .step_by(threads)
                        .try_for_each(|x| builder.add_batch(x))
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a build thread panicked")??;
        }
        Ok(())
    })
}

/// Latency percentiles and throughput of a lookup loop.
struct GetStats {
    p50_us: f64,
    p99_us: f64,
    ops_per_s: f64,
}

/// Runs `gets` lookups of random keys (of ids `0..rows`, encoded by `key` before the
/// clock starts) on `threads` threads; `get` returns the value length (0 when absent,
/// which fails the run).
fn measure(
    rows: usize,
    key: &(dyn Fn(i64) -> BoxResult<Vec<u8>> + Sync),
    gets: usize,
    threads: usize,
    get: &(dyn Fn(&[u8]) -> BoxResult<usize> + Sync),
) -> BoxResult<GetStats> {
    let per = gets / threads;
    let started = Instant::now();
    let mut samples: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> BoxResult<Vec<Duration>> {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                    let mut out = Vec::with_capacity(per);
                    for _ in 0..per {
                        let k = key(rng.random_range(0..rows as i64))?;
                        let t0 = Instant::now();
                        let n = get(&k)?;
                        out.push(t0.elapsed());
                        if n == 0 {
                            return Err("a present key was not found".into());
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| "a lookup thread panicked")??);
        }
        Ok::<_, Box<dyn Error + Send + Sync>>(all)
    })?;
    let elapsed = started.elapsed();
    samples.sort_unstable();
    let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    Ok(GetStats {
        p50_us: pct(0.50).as_secs_f64() * 1e6,
        p99_us: pct(0.99).as_secs_f64() * 1e6,
        ops_per_s: samples.len() as f64 / elapsed.as_secs_f64(),
    })
}

/// Reads every key `0..rows` once on `threads` threads, so every page `get` touches is
/// in the page cache and mapped; a missing key fails the run.
fn warm(
    rows: usize,
    threads: usize,
    key: &(dyn Fn(i64) -> BoxResult<Vec<u8>> + Sync),
    get: &(dyn Fn(&[u8]) -> BoxResult<usize> + Sync),
) -> BoxResult<()> {
    let t0 = Instant::now();
    let per = rows.div_ceil(threads) as i64;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads as i64)
            .map(|t| {
                s.spawn(move || -> BoxResult<()> {
                    for i in t * per..((t + 1) * per).min(rows as i64) {
                        if get(&key(i)?)? == 0 {
                            return Err(format!("key {i} was not found while warming up").into());
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a warming thread panicked")??;
        }
        Ok::<_, Box<dyn Error + Send + Sync>>(())
    })?;
    eprintln!(
        "  warmed {rows} keys in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn hard_link_dir(from: &Path, to: &Path) -> BoxResult<()> {
    std::fs::create_dir_all(to)?;
    for f in std::fs::read_dir(from)? {
        let f = f?;
        std::fs::hard_link(f.path(), to.join(f.file_name()))?;
    }
    Ok(())
}

fn median_max(mut d: Vec<Duration>) -> (f64, f64) {
    d.sort_unstable();
    (
        d[d.len() / 2].as_secs_f64() * 1e3,
        d[d.len() - 1].as_secs_f64() * 1e3,
    )
}

/// `--build-only OUT`: generates the rows (not timed), builds them into `OUT` on
/// every core, spilling next to `OUT`, and prints the build's seconds, bytes and
/// spilled bytes on one line.
fn build_only(args: &ReadonlyArgs, out: &Path) -> BoxResult<()> {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let t0 = Instant::now();
    let batches = generate(args.rows, args.value_bytes)?;
    eprintln!(
        "  generated {} batches in {:.1} s (not timed)",
        batches.len(),
        t0.elapsed().as_secs_f64()
    );
    let schema = StoreSchema::from_arrow(&rows_schema(), &["id".to_string()], None)?;
    let layout = StoreLayout::round_robin(1, 8, 1, 1)?;
    let options = BuildOptions {
        threads: cpus,
        spill_dir: out
            .parent()
            .ok_or("--build-only needs a parent folder")?
            .to_path_buf(),
        ..BuildOptions::default()
    };
    let t0 = Instant::now();
    let builder = StoreBuilder::new("bench", schema, layout, &options)?;
    add_batches(&builder, &batches, cpus)?;
    let summary = builder.finish(out)?;
    let build_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "  build: {build_s:.2} s ({:.0} rows/s), {} bytes, {} spilled",
        args.rows as f64 / build_s,
        summary.bytes,
        summary.spilled_bytes
    );
    println!("{build_s} {} {}", summary.bytes, summary.spilled_bytes);
    Ok(())
}

/// Runs the benchmark (module docs).
pub fn readonly(args: ReadonlyArgs) -> BoxResult<()> {
    if args.rows == 0 || args.gets < 16 {
        return Err("--rows must be positive and --gets at least 16".into());
    }
    if let Some(out) = &args.build_only {
        return build_only(&args, out);
    }
    let work = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::Builder::new()
                .prefix("cairn-bench-ro-")
                .tempdir_in(d)?
        }
        None => tempfile::Builder::new()
            .prefix("cairn-bench-ro-")
            .tempdir()?,
    };
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    eprintln!(
        "cairn-bench readonly: {} rows of {}-byte values, {cpus} CPUs, {}; work dir {} ({})",
        args.rows,
        args.value_bytes,
        total_memory(),
        work.path().display(),
        fs_type(work.path())
    );
    // ---- build, in a child process ----
    // The input batches (about 11 GB at 100 M rows) are freed when the child exits;
    // an allocator keeps freed memory for reuse, and here it would crowd the stores
    // out of the page cache.
    let out = work.path().join("build");
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(["readonly", "--rows", &args.rows.to_string()])
        .args(["--value-bytes", &args.value_bytes.to_string()])
        .arg("--build-only")
        .arg(&out)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !child.status.success() {
        return Err(format!("the build process failed ({})", child.status).into());
    }
    let figures = String::from_utf8_lossy(&child.stdout);
    let figures: Vec<f64> = figures
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the build process printed {figures:?}: {e}"))?;
    let [build_s, build_bytes, spilled_bytes] = figures[..] else {
        return Err(format!("the build process printed {figures:?}").into());
    };
    let (build_bytes, spilled_bytes) = (build_bytes as u64, spilled_bytes as u64);
    let schema = StoreSchema::from_arrow(&rows_schema(), &["id".to_string()], None)?;

    // The key bytes and value bytes of id `i`, the same in both stores.
    let key_of =
        |i: i64| -> BoxResult<Vec<u8>> { Ok(schema.encode_key(&[cairn_common::Value::Int64(i)])?) };
    let value_bytes = args.value_bytes;
    let value_bytes_of = |i: i64| -> Vec<u8> {
        let mut v = Vec::with_capacity(value_bytes + 5);
        cairn_common::codec::put_value(
            &mut v,
            &cairn_common::Value::String(value_of(i as u64, value_bytes)),
        );
        v
    };

    // ---- Cairn gets ----
    let version = StoreVersion::open(&node_dir(&out, 0), Verify::Structure)?;
    let cairn_get = |k: &[u8]| -> BoxResult<usize> { Ok(version.get(k)?.map_or(0, |v| v.len())) };
    warm(args.rows, cpus, &key_of, &cairn_get)?;
    let mut cairn_gets = Vec::new();
    for threads in GET_THREADS {
        let c = measure(args.rows, &key_of, args.gets, threads, &cairn_get)?;
        eprintln!(
            "  cairn get, {threads} thread(s): p50 {:.2} µs p99 {:.2} µs {:.0}/s",
            c.p50_us, c.p99_us, c.ops_per_s
        );
        cairn_gets.push(c);
    }
    drop(version);

    // ---- LMDB load ----
    let lmdb_dir = work.path().join("lmdb");
    std::fs::create_dir_all(&lmdb_dir)?;
    let map_size = (args.rows * (args.value_bytes + 64) * 2)
        .max(1 << 30)
        .next_multiple_of(1 << 20);
    // SAFETY: the environment is opened once, by this process only.
    let env = unsafe { EnvOpenOptions::new().map_size(map_size).open(&lmdb_dir)? };
    let mut lmdb_load = Duration::ZERO;
    let mut wtxn = env.write_txn()?;
    let db: Database<Bytes, Bytes> = env.create_database(&mut wtxn, None)?;
    // Keys in order: Cairn's INT64 key encoding sorts like the integers, and
    // `MDB_APPEND` refuses a key that is not greater than the last, so a wrong order
    // fails the run rather than slowing it.
    let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(BATCH_ROWS);
    for start in (0..args.rows as i64).step_by(BATCH_ROWS) {
        chunk.clear();
        for i in start..(start + BATCH_ROWS as i64).min(args.rows as i64) {
            chunk.push((key_of(i)?, value_bytes_of(i)));
        }
        let t0 = Instant::now();
        for (k, v) in &chunk {
            db.put_with_flags(&mut wtxn, PutFlags::APPEND, k, v)?;
        }
        lmdb_load += t0.elapsed();
    }
    let t0 = Instant::now();
    wtxn.commit()?;
    env.force_sync()?;
    lmdb_load += t0.elapsed();
    let lmdb_load_s = lmdb_load.as_secs_f64();
    let lmdb_bytes = std::fs::metadata(lmdb_dir.join("data.mdb"))?.len();
    eprintln!(
        "  LMDB load (sorted, MDB_APPEND): {lmdb_load_s:.2} s ({:.0} rows/s), {lmdb_bytes} bytes",
        args.rows as f64 / lmdb_load_s
    );

    // ---- LMDB gets ----
    let rtxn_env = env.clone();
    let lmdb_get = move |k: &[u8]| -> BoxResult<usize> {
        let rtxn = rtxn_env.read_txn()?;
        Ok(db.get(&rtxn, k)?.map_or(0, |v| v.len()))
    };
    warm(args.rows, cpus, &key_of, &lmdb_get)?;
    let mut gets = Vec::new();
    for (threads, c) in GET_THREADS.into_iter().zip(cairn_gets) {
        let l = measure(args.rows, &key_of, args.gets, threads, &lmdb_get)?;
        eprintln!(
            "  LMDB get, {threads} thread(s): p50 {:.2} µs p99 {:.2} µs {:.0}/s",
            l.p50_us, l.p99_us, l.ops_per_s
        );
        gets.push((threads, c, l));
    }
    drop(lmdb_get);
    drop(env);
    std::fs::remove_dir_all(&lmdb_dir)?;

    // ---- install, swap, rollback ----
    let store = VersionedStore::open(&work.path().join("store"), 3)?;
    hard_link_dir(&node_dir(&out, 0), &store.fetch_dir(1))?;
    hard_link_dir(&node_dir(&out, 0), &store.fetch_dir(2))?;
    let t0 = Instant::now();
    store.install(1)?;
    let install_s = t0.elapsed().as_secs_f64();
    store.install(2)?;
    store.swap(1)?;
    let (mut swaps, mut rollbacks) = (Vec::new(), Vec::new());
    for _ in 0..SWAPS {
        swaps.push(store.swap(2)?.elapsed);
        rollbacks.push(store.rollback(None)?.elapsed);
    }
    let (swap_ms, swap_max_ms) = median_max(swaps);
    let (rollback_ms, rollback_max_ms) = median_max(rollbacks);
    eprintln!(
        "  install (MD5 of every file): {install_s:.2} s; swap median {swap_ms:.3} ms (max \
         {swap_max_ms:.3}); rollback median {rollback_ms:.3} ms (max {rollback_max_ms:.3})"
    );

    // ---- record ----
    let mut line = format!(
        "{{\"date\":{},\"git\":{},\"machine\":{},\"cpus\":{cpus},\"memory\":{},\
         \"rows\":{},\"value_bytes\":{},\"build_s\":{},\"build_bytes\":{},\"spilled_bytes\":{},\
         \"lmdb_load_s\":{},\"lmdb_bytes\":{lmdb_bytes},\"install_s\":{},\"swap_ms\":{},\
         \"swap_max_ms\":{},\"rollback_ms\":{},\"rollback_max_ms\":{}",
        json_str(&utc_now()),
        json_str(&git_revision()),
        json_str(&proc_field("/proc/cpuinfo", "model name").unwrap_or_default()),
        json_str(&total_memory()),
        args.rows,
        args.value_bytes,
        json_num(build_s),
        build_bytes,
        spilled_bytes,
        json_num(lmdb_load_s),
        json_num(install_s),
        json_num(swap_ms),
        json_num(swap_max_ms),
        json_num(rollback_ms),
        json_num(rollback_max_ms),
    );
    for (threads, c, l) in &gets {
        line.push_str(&format!(
            ",\"get{threads}\":{{\"cairn_p50_us\":{},\"cairn_p99_us\":{},\"cairn_ops\":{},\
             \"lmdb_p50_us\":{},\"lmdb_p99_us\":{},\"lmdb_ops\":{}}}",
            json_num(c.p50_us),
            json_num(c.p99_us),
            json_num(c.ops_per_s),
            json_num(l.p50_us),
            json_num(l.p99_us),
            json_num(l.ops_per_s)
        ));
    }
    line.push('}');
    if let Some(dir) = args.jsonl.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.jsonl)?;
    writeln!(f, "{line}")?;
    eprintln!("  appended to {}", args.jsonl.display());
    Ok(())
}
