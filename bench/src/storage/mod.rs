//! `cairn-bench storage`: the storage micro-benchmark — one tablet loaded with TPC-H
//! `lineitem` (generated in process by `tpchgen-arrow`), measured next to the same rows
//! in one Parquet file written by the `parquet` crate with the same compression, in the
//! same run:
//!
//! 1. insert throughput (batches of 1000 rows through `LocalTablet::write`, no fsync), with
//!    the time `ArrowWriter` takes to write the same rows as a reference;
//! 2. a full scan of four numeric columns from compacted DiskRowSets vs a projected
//!    Parquet read;
//! 3. the same scan after updating 10% of the rows, with the deltas flushed but not
//!    compacted, and again after major delta compaction;
//! 4. a 1%-selective predicate scan of every column: Cairn (lazy materialisation) vs
//!    Parquet read fully then filtered, and Parquet with a `RowFilter`;
//! 5. random point lookups: hot (p50 / p99, all columns and one column) and cold
//!    (the block cache off).
//!
//! It prints a table, writes it as Markdown (`--out`) and appends one JSON line per
//! measurement to `--jsonl`.

use std::error::Error;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, BooleanArray, Decimal128Array, Int32Array, Int64Array};
use arrow::compute::kernels::cmp::gt_eq;
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_common::{ColumnPredicate, ColumnSpec, DataType, Schema, Value};
use cairn_tablet::cache::BlockCache;
use cairn_tablet::writer::DICTIONARY_PAGE_BYTES;
use cairn_tablet::{
    Codec, FsyncPolicy, LocalTablet, ReadMode, RowOp, ScanSpec, TabletOptions, WriteResult,
};
use parquet::basic::Compression;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowPredicateFn, ParquetRecordBatchReaderBuilder, RowFilter};
use rand::{Rng, SeedableRng};
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

mod keys;
pub(crate) mod report;
use report::{
    Env, Figure, Measurement, fs_type, git_revision, json_line, markdown_table, proc_field,
    rowset_file_sizes, text_table, total_memory, utc_now,
};

pub(crate) type BoxResult<T> = Result<T, Box<dyn Error>>;

/// Rows per `LocalTablet::write` batch (inserts and updates).
const WRITE_BATCH: usize = 1000;
/// Rows inserted with the log fsynced per batch (each batch waits for the disk).
const FSYNC_INSERT_ROWS: usize = 200_000;
/// Rows per batch, and writer threads, of the group-commit measurement.
const SMALL_BATCH: usize = 100;
const GROUP_COMMIT_WRITERS: usize = 4;
/// Rows per Parquet row group, in the tablet and in the peer file alike.
const ROWS_PER_ROW_GROUP: usize = 65536;
/// Rows per data page of the Parquet peer file.
const PEER_PAGE_ROWS: usize = 4096;
/// Distinct keys in the point-lookup working set.
const LOOKUP_KEYS: usize = 10_000;
/// Timed point lookups.
const LOOKUPS: usize = 100_000;
/// Timed repetitions of each scan (after one warm-up run); the best is reported.
const SCAN_RUNS: usize = 3;
/// The four numeric columns of the projected scans.
const SCAN_COLUMNS: [&str; 4] = ["l_quantity", "l_extendedprice", "l_discount", "l_tax"];

#[derive(clap::Args)]
pub struct StorageArgs {
    /// TPC-H scale factor (1.0 ≈ 6 million lineitem rows).
    #[arg(long, default_value_t = 1.0, conflicts_with = "quick")]
    sf: f64,
    /// Quick run at scale factor 0.01 (≈ 60 thousand rows).
    #[arg(long)]
    quick: bool,
    /// Markdown report.
    #[arg(long, default_value = "bench/results/storage.md")]
    out: PathBuf,
    /// JSON lines file; one line per measurement is appended.
    #[arg(long, default_value = "bench/results/storage.jsonl")]
    jsonl: PathBuf,
    /// Directory for the tablet and the Parquet file (a temporary directory inside it is
    /// removed at the end). Default: the system temporary directory.
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

// ----- data -----------------------------------------------------------------------

/// lineitem converted to Cairn's types, plus what the measurements need from it.
struct Data {
    schema: Schema,
    arrow_schema: SchemaRef,
    types: Vec<DataType>,
    batches: Vec<RecordBatch>,
    rows: usize,
}

fn lineitem_schema() -> BoxResult<(Schema, SchemaRef, Vec<DataType>)> {
    let src = LineItemArrow::schema_ref();
    let mut specs = Vec::new();
    let mut fields = Vec::new();
    let mut types = Vec::new();
    for f in src.fields() {
        let t = DataType::from_arrow(f.data_type())?;
        fields.push(Field::new(f.name(), t.to_arrow(), f.is_nullable()));
        let mut spec = ColumnSpec::new(f.name(), t.clone());
        if f.is_nullable() {
            spec = spec.nullable();
        }
        specs.push(spec);
        types.push(t);
    }
    let schema = Schema::new(specs, &["l_orderkey", "l_linenumber"])?;
    Ok((schema, Arc::new(ArrowSchema::new(fields)), types))
}

/// Generates lineitem and casts each column to the Arrow type of its Cairn type
/// (Utf8View → Utf8; decimals and dates stay).
fn generate(sf: f64) -> BoxResult<Data> {
    let (schema, arrow_schema, types) = lineitem_schema()?;
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(ProgressStyle::with_template(
        "{spinner} generating lineitem (SF {msg}): {pos} rows ({per_sec})",
    )?);
    spinner.set_message(format!("{sf}"));
    let generator = LineItemGenerator::new(sf, 1, 1);
    let mut batches = Vec::new();
    let mut rows = 0;
    for b in LineItemArrow::new(generator).with_batch_size(ROWS_PER_ROW_GROUP) {
        let b = b?;
        let cols = b
            .columns()
            .iter()
            .zip(&types)
            .map(|(c, t)| {
                let want = t.to_arrow();
                if c.data_type() == &want {
                    Ok(c.clone())
                } else {
                    cast(c.as_ref(), &want)
                }
            })
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        rows += b.num_rows();
        spinner.inc(b.num_rows() as u64);
        batches.push(RecordBatch::try_new(arrow_schema.clone(), cols)?);
    }
    spinner.finish_and_clear();
    Ok(Data {
        schema,
        arrow_schema,
        types,
        batches,
        rows,
    })
}

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> BoxResult<&'a T> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| format!("column {name} is missing or has an unexpected type").into())
}

/// Inserts the first `rows` rows of `data` into `tablet` in batches of
/// [`WRITE_BATCH`], advancing `bar`; returns the time spent inside
/// `LocalTablet::write` (building the ops from Arrow is not counted).
fn insert_rows(
    tablet: &LocalTablet,
    data: &Data,
    rows: usize,
    bar: &ProgressBar,
) -> BoxResult<Duration> {
    let mut in_write = Duration::ZERO;
    insert_batches(data, rows, WRITE_BATCH, |ops| {
        let n = ops.len() as u64;
        let tw = Instant::now();
        let r = tablet.write(ops)?;
        in_write += tw.elapsed();
        check_write(r)?;
        bar.inc(n);
        Ok(())
    })?;
    Ok(in_write)
}

/// Calls `f` with the first `rows` rows of `data` as insert ops, `batch` rows at a
/// time.
fn insert_batches(
    data: &Data,
    rows: usize,
    batch: usize,
    mut f: impl FnMut(Vec<RowOp>) -> BoxResult<()>,
) -> BoxResult<()> {
    let mut left = rows;
    for b in &data.batches {
        let mut start = 0;
        while start < b.num_rows() && left > 0 {
            let end = (start + batch).min(b.num_rows()).min(start + left);
            let ops = (start..end)
                .map(|r| {
                    b.columns()
                        .iter()
                        .zip(&data.types)
                        .map(|(c, t)| Value::from_array(c.as_ref(), r, t))
                        .collect::<cairn_common::Result<Vec<Value>>>()
                        .map(RowOp::insert)
                })
                .collect::<cairn_common::Result<Vec<RowOp>>>()?;
            f(ops)?;
            left -= end - start;
            start = end;
        }
    }
    Ok(())
}

/// Inserts the first `rows` rows of `data` in batches of `batch` from `writers`
/// threads (batches dealt round-robin, their RowOps built before the clock starts);
/// returns the wall time and the number of batches.
fn insert_concurrently(
    tablet: &Arc<LocalTablet>,
    data: &Data,
    rows: usize,
    batch: usize,
    writers: usize,
) -> BoxResult<(Duration, usize)> {
    let mut batches: Vec<Vec<RowOp>> = vec![];
    insert_batches(data, rows, batch, |ops| {
        batches.push(ops);
        Ok(())
    })?;
    let count = batches.len();
    let mut shares: Vec<Vec<Vec<RowOp>>> = (0..writers).map(|_| vec![]).collect();
    for (i, b) in batches.into_iter().enumerate() {
        shares[i % writers].push(b);
    }
    let t0 = Instant::now();
    let outcome: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .into_iter()
            .map(|share| {
                s.spawn(move || -> Result<(), String> {
                    for ops in share {
                        let r = tablet.write(ops).map_err(|e| e.to_string())?;
                        check_write(r).map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a writer thread panicked".into()))
            })
            .collect()
    });
    let elapsed = t0.elapsed();
    for o in outcome {
        o?;
    }
    Ok((elapsed, count))
}

fn check_write(r: WriteResult) -> BoxResult<()> {
    match r.row_errors.first() {
        None => Ok(()),
        Some((i, e)) => Err(format!("row {i} of a write batch was rejected: {e}").into()),
    }
}

// ----- scans ----------------------------------------------------------------------

/// What a scan returned: rows, and (when asked) the sum of `l_quantity`, unscaled.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ScanOut {
    rows: usize,
    qty_sum: Option<i128>,
}

fn tally(batches: impl Iterator<Item = BoxResult<RecordBatch>>, sum: bool) -> BoxResult<ScanOut> {
    let mut out = ScanOut {
        rows: 0,
        qty_sum: sum.then_some(0),
    };
    for b in batches {
        let b = b?;
        out.rows += b.num_rows();
        if let Some(s) = &mut out.qty_sum {
            let q: &Decimal128Array = col(&b, "l_quantity")?;
            *s += q.iter().flatten().sum::<i128>();
        }
    }
    Ok(out)
}

fn cairn_scan(
    t: &LocalTablet,
    projection: Option<&[&str]>,
    predicates: &[ColumnPredicate],
    sum: bool,
) -> BoxResult<ScanOut> {
    let spec = ScanSpec {
        projection: projection.map(|p| p.iter().map(|s| s.to_string()).collect()),
        predicates: predicates.to_vec(),
        batch_size: ROWS_PER_ROW_GROUP,
        ..Default::default()
    };
    let scanner = t.scan(spec)?;
    tally(scanner.map(|b| b.map_err(Into::into)), sum)
}

/// How the Parquet peer filters, if at all.
#[derive(Clone, Copy)]
enum PqFilter {
    None,
    /// Read every projected column, then `filter_record_batch` (no lazy materialisation).
    After(i128),
    /// `RowFilter` with an `ArrowPredicateFn` (lazy materialisation).
    RowFilter(i128),
}

fn price_scalar(bound: i128) -> BoxResult<arrow::array::Scalar<Decimal128Array>> {
    Ok(arrow::array::Scalar::new(
        Decimal128Array::from(vec![bound]).with_precision_and_scale(15, 2)?,
    ))
}

fn parquet_scan(
    path: &Path,
    columns: Option<&[&str]>,
    filter: PqFilter,
    sum: bool,
) -> BoxResult<ScanOut> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)?
        .with_batch_size(ROWS_PER_ROW_GROUP);
    let arrow_schema = builder.schema().clone();
    let pq_schema = builder.parquet_schema();
    let mask = match columns {
        None => ProjectionMask::all(),
        Some(names) => {
            let idx = names
                .iter()
                .map(|n| arrow_schema.index_of(n))
                .collect::<Result<Vec<_>, _>>()?;
            ProjectionMask::roots(pq_schema, idx)
        }
    };
    let price_idx = arrow_schema.index_of("l_extendedprice")?;
    let mut builder = match filter {
        PqFilter::RowFilter(bound) => {
            let scalar = price_scalar(bound)?;
            let pmask = ProjectionMask::roots(pq_schema, [price_idx]);
            let pred =
                ArrowPredicateFn::new(pmask, move |b: RecordBatch| gt_eq(b.column(0), &scalar));
            builder.with_row_filter(RowFilter::new(vec![Box::new(pred)]))
        }
        _ => builder,
    };
    builder = builder.with_projection(mask);
    let reader = builder.build()?;
    match filter {
        PqFilter::After(bound) => {
            let scalar = price_scalar(bound)?;
            let it = reader.map(|b| -> BoxResult<RecordBatch> {
                let b = b?;
                let keep: BooleanArray = gt_eq(
                    b.column_by_name("l_extendedprice")
                        .ok_or("l_extendedprice missing")?,
                    &scalar,
                )?;
                Ok(filter_record_batch(&b, &keep)?)
            });
            tally(it, sum)
        }
        _ => tally(reader.map(|b| b.map_err(Into::into)), sum),
    }
}

/// Runs `f` once to warm up (returning its output, computed with verification on), then
/// `SCAN_RUNS` more times; returns the best time and the warm-up's output.
fn best_of(mut f: impl FnMut(bool) -> BoxResult<ScanOut>) -> BoxResult<(f64, ScanOut)> {
    let warm = f(true)?;
    let mut best = f64::INFINITY;
    for _ in 0..SCAN_RUNS {
        let t0 = Instant::now();
        let out = f(false)?;
        best = best.min(t0.elapsed().as_secs_f64());
        if out.rows != warm.rows {
            return Err(format!(
                "a scan returned {} rows, then {}: the runs disagree",
                warm.rows, out.rows
            )
            .into());
        }
    }
    Ok((best, warm))
}

fn expect_rows(what: &str, got: ScanOut, rows: usize, qty: Option<i128>) -> BoxResult<()> {
    if got.rows != rows {
        return Err(format!("{what}: {} rows, expected {rows}", got.rows).into());
    }
    if let (Some(want), Some(have)) = (qty, got.qty_sum)
        && want != have
    {
        return Err(format!("{what}: sum(l_quantity) is {have}, expected {want}").into());
    }
    Ok(())
}

// ----- the benchmark --------------------------------------------------------------

/// Times point lookups of `keys[i]` for each `i` of `order` (the columns at `want`,
/// or all); checks every one finds its row. Returns p50 and p99 in microseconds.
fn time_lookups(
    tablet: &LocalTablet,
    keys: &[[Value; 2]],
    order: &[usize],
    want: Option<&[usize]>,
) -> BoxResult<(f64, f64)> {
    let mut lat = Vec::with_capacity(order.len());
    let mut found = 0usize;
    for &i in order {
        let t0 = Instant::now();
        let row = tablet
            .tablet()
            .get_projected(&keys[i], ReadMode::Latest, want)?;
        lat.push(t0.elapsed());
        found += usize::from(row.is_some());
    }
    if found != order.len() {
        return Err(format!(
            "{} of {} lookups found nothing",
            order.len() - found,
            order.len()
        )
        .into());
    }
    lat.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok((us(lat[lat.len() / 2]), us(lat[lat.len() * 99 / 100])))
}

pub fn storage(args: StorageArgs) -> BoxResult<()> {
    let sf = if args.quick { 0.01 } else { args.sf };
    if sf.is_nan() || sf <= 0.0 {
        return Err("the scale factor must be positive".into());
    }
    let work = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::Builder::new()
                .prefix("cairn-bench-")
                .tempdir_in(d)?
        }
        None => tempfile::Builder::new().prefix("cairn-bench-").tempdir()?,
    };
    let mut env = Env {
        date: utc_now(),
        git: git_revision(),
        sf,
        rows: 0,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        mem: total_memory(),
        cpu_model: proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into()),
        work_dir: format!("{} ({})", work.path().display(), fs_type(work.path())),
    };
    eprintln!(
        "cairn-bench storage: SF {sf}, {} CPUs, {}, {}; work dir {}",
        env.cpus, env.mem, env.cpu_model, env.work_dir
    );
    let mut results: Vec<Measurement> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    let t0 = Instant::now();
    let data = generate(sf)?;
    env.rows = data.rows;
    eprintln!(
        "generated {} lineitem rows in {:.2}s",
        data.rows,
        t0.elapsed().as_secs_f64()
    );

    // The Parquet peer: one file, with the same compression and row groups as Cairn's
    // base data, and the page and dictionary limits of a file tuned for scans.
    let pq_path = work.path().join("lineitem.parquet");
    let t0 = Instant::now();
    {
        let props = WriterProperties::builder()
            .set_compression(Compression::LZ4_RAW)
            .set_max_row_group_row_count(Some(ROWS_PER_ROW_GROUP))
            .set_data_page_row_count_limit(PEER_PAGE_ROWS)
            .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
            .set_write_batch_size(1024)
            .set_statistics_enabled(EnabledStatistics::Page)
            .build();
        let mut w = ArrowWriter::try_new(
            File::create(&pq_path)?,
            data.arrow_schema.clone(),
            Some(props),
        )?;
        for b in &data.batches {
            w.write(b)?;
        }
        w.close()?;
    }
    let pq_write_secs = t0.elapsed().as_secs_f64();
    let pq_bytes = std::fs::metadata(&pq_path)?.len();

    // ---- 1. inserts ----
    eprintln!("inserting {} rows in batches of {WRITE_BATCH}", data.rows);
    let tablet_dir = work.path().join("tablet");
    let opts = TabletOptions {
        fsync: FsyncPolicy::Never,
        mrs_flush_bytes: 16 << 30,
        block_cache: Arc::new(BlockCache::new(2 << 30)),
        rows_per_row_group: ROWS_PER_ROW_GROUP,
        codec: Codec::Lz4,
        ..Default::default()
    };
    let tablet = LocalTablet::create(&tablet_dir, data.schema.clone(), opts.clone())?;
    let bar = ProgressBar::new(data.rows as u64);
    bar.set_style(ProgressStyle::with_template(
        "{msg:>9} [{bar:40}] {pos}/{len} rows ({per_sec}, eta {eta})",
    )?);
    bar.set_message("inserting");
    let t_all = Instant::now();
    let in_write = insert_rows(&tablet, &data, data.rows, &bar)?;
    let all_secs = t_all.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let insert_rate = data.rows as f64 / in_write.as_secs_f64();
    results.push(
        Measurement::new(
            "insert",
            format!("insert, batches of {WRITE_BATCH} (time in LocalTablet::write)"),
            Figure::Rate(insert_rate),
        )
        .peer(
            "Parquet ArrowWriter, same rows",
            Figure::Rate(data.rows as f64 / pq_write_secs),
        )
        .target(">= 500 k rows/s", insert_rate >= 500_000.0),
    );
    results.push(
        Measurement::new(
            "insert_end_to_end",
            "insert incl. building the RowOps from Arrow",
            Figure::Rate(data.rows as f64 / all_secs),
        )
        .peer(
            "Parquet ArrowWriter, same rows",
            Figure::Rate(data.rows as f64 / pq_write_secs),
        ),
    );
    // The same inserts with the log fsynced on every batch (fewer rows: each batch
    // waits for the disk).
    let durable_rows = FSYNC_INSERT_ROWS.min(data.rows);
    let durable = LocalTablet::create(
        &work.path().join("tablet-fsync"),
        data.schema.clone(),
        TabletOptions {
            fsync: FsyncPolicy::Always,
            ..opts.clone()
        },
    )?;
    let bar = ProgressBar::hidden();
    let durable_secs = insert_rows(&durable, &data, durable_rows, &bar)?.as_secs_f64();
    durable.shutdown()?;
    drop(durable);
    results.push(Measurement::new(
        "insert_fsync",
        format!(
            "insert, batches of {WRITE_BATCH}, log fsynced per batch (first {durable_rows} rows)"
        ),
        Figure::Rate(durable_rows as f64 / durable_secs),
    ));
    // Small durable batches from one writer and from several: concurrent writers'
    // records share fsyncs (LocalTablet's group commit).
    let mut small = vec![];
    for writers in [1, GROUP_COMMIT_WRITERS] {
        let dir = work.path().join(format!("tablet-fsync-{writers}"));
        let t = LocalTablet::create(
            &dir,
            data.schema.clone(),
            TabletOptions {
                fsync: FsyncPolicy::Always,
                ..opts.clone()
            },
        )?;
        let (took, batches) = insert_concurrently(&t, &data, durable_rows, SMALL_BATCH, writers)?;
        small.push((
            durable_rows as f64 / took.as_secs_f64(),
            batches as f64 / t.group_syncs().max(1) as f64,
        ));
        t.shutdown()?;
        drop(t);
        std::fs::remove_dir_all(&dir)?;
    }
    results.push(
        Measurement::new(
            "insert_fsync_group_commit",
            format!(
                "insert, batches of {SMALL_BATCH}, log fsynced, {GROUP_COMMIT_WRITERS} writer \
                 threads (group commit: {:.1} batches per fsync)",
                small[1].1
            ),
            Figure::Rate(small[1].0),
        )
        .peer(
            format!(
                "Cairn, 1 writer thread ({:.1} batches per fsync)",
                small[0].1
            ),
            Figure::Rate(small[0].0),
        ),
    );

    // ---- flush + compaction ----
    eprintln!("flushing the MemRowSet, then compacting rowsets");
    let t0 = Instant::now();
    tablet.flush_mrs()?;
    let flush_secs = t0.elapsed().as_secs_f64();
    let flushed_rowsets = tablet.stats().disk_rowsets;
    let t0 = Instant::now();
    let compacted = tablet.compact_rowsets(None)?;
    let compact_secs = t0.elapsed().as_secs_f64();
    let stats = tablet.stats();
    let flush_rate = data.rows as f64 / flush_secs;
    let compact_rate = data.rows as f64 / compact_secs;
    results.push(
        Measurement::new(
            "flush_mrs",
            format!(
                "flush_mrs ({} rows → {flushed_rowsets} rowsets; {:.2} M rows/s)",
                data.rows,
                flush_rate / 1e6
            ),
            Figure::Secs(flush_secs),
        )
        .target(">= 2 M rows/s", flush_rate >= 2e6),
    );
    results.push(
        Measurement::new(
            "compact_rowsets",
            format!(
                "compact_rowsets(None) → {} rowsets{}; {:.2} M rows/s",
                stats.disk_rowsets,
                if compacted { "" } else { " (nothing to do)" },
                compact_rate / 1e6
            ),
            Figure::Secs(compact_secs),
        )
        .target(">= 1 M rows/s", compact_rate >= 1e6),
    );
    results.push(
        Measurement::new(
            "disk_bytes",
            "size on disk after compaction (smaller is better)",
            Figure::Bytes(stats.disk_bytes),
        )
        .peer("one Parquet file", Figure::Bytes(pq_bytes))
        .target(
            "<= 1.2x Parquet",
            stats.disk_bytes as f64 <= 1.2 * pq_bytes as f64,
        ),
    );
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let sizes = rowset_file_sizes(&tablet_dir.join("rowsets"));
    notes.push(format!(
        "Cairn's bytes on disk after the load and compaction: base data {:.1} MiB, key \
         indexes {:.1} MiB, UNDO deltas {:.1} MiB, REDO deltas {:.1} MiB, other {:.1} MiB \
         (Parquet peer file: {:.1} MiB).",
        mib(sizes[0]),
        mib(sizes[1]),
        mib(sizes[2]),
        mib(sizes[3]),
        mib(sizes[4]),
        mib(pq_bytes)
    ));

    // Reference answers, from the Arrow data.
    let mut qty_sum: i128 = 0;
    let mut prices: Vec<i128> = Vec::with_capacity(data.rows);
    for b in &data.batches {
        qty_sum += col::<Decimal128Array>(b, "l_quantity")?
            .values()
            .iter()
            .sum::<i128>();
        prices.extend_from_slice(col::<Decimal128Array>(b, "l_extendedprice")?.values());
    }

    // ---- 2. projected scan, compacted base data ----
    eprintln!("scanning 4 columns");
    let proj: &[&str] = &SCAN_COLUMNS;
    let (pq_secs, out) = best_of(|v| parquet_scan(&pq_path, Some(proj), PqFilter::None, v))?;
    expect_rows("Parquet 4-column scan", out, data.rows, Some(qty_sum))?;
    let pq_rate = data.rows as f64 / pq_secs;
    let pq_name = "Parquet, projected read";
    let (secs, out) = best_of(|v| cairn_scan(&tablet, Some(proj), &[], v))?;
    expect_rows("Cairn 4-column scan", out, data.rows, Some(qty_sum))?;
    let rate = data.rows as f64 / secs;
    let compacted_scan_rate = rate;
    results.push(
        Measurement::new(
            "scan4_compacted",
            "scan 4 numeric columns, compacted DiskRowSets",
            Figure::Rate(rate),
        )
        .peer(pq_name, Figure::Rate(pq_rate))
        .target("ratio >= 0.9", rate / pq_rate >= 0.9),
    );

    // ---- 3. update 10%, flush deltas, scan; major delta compaction, scan ----
    eprintln!(
        "updating every 10th row, then scanning with REDO deltas and after major delta compaction"
    );
    let bar = ProgressBar::new(data.rows.div_ceil(10) as u64);
    bar.set_style(ProgressStyle::with_template(
        "{msg:>9} [{bar:40}] {pos}/{len} rows ({per_sec}, eta {eta})",
    )?);
    bar.set_message("updating");
    let schema = tablet.schema();
    let mut updated = 0usize;
    let mut in_write = Duration::ZERO;
    let mut ops = Vec::with_capacity(WRITE_BATCH);
    let mut global = 0usize;
    let flush_ops = |ops: &mut Vec<RowOp>, in_write: &mut Duration| -> BoxResult<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let n = ops.len();
        let tw = Instant::now();
        let r = tablet.write(std::mem::take(ops))?;
        *in_write += tw.elapsed();
        bar.inc(n as u64);
        check_write(r)
    };
    for b in &data.batches {
        let ok: &Int64Array = col(b, "l_orderkey")?;
        let ln: &Int32Array = col(b, "l_linenumber")?;
        let q: &Decimal128Array = col(b, "l_quantity")?;
        for r in 0..b.num_rows() {
            if global.is_multiple_of(10) {
                ops.push(RowOp::update(
                    &schema,
                    &[Value::Int64(ok.value(r)), Value::Int32(ln.value(r))],
                    &[("l_quantity", Value::Decimal(q.value(r) + 100))],
                )?);
                updated += 1;
                if ops.len() == WRITE_BATCH {
                    flush_ops(&mut ops, &mut in_write)?;
                }
            }
            global += 1;
        }
    }
    flush_ops(&mut ops, &mut in_write)?;
    bar.finish_and_clear();
    let qty_after = qty_sum + 100 * updated as i128;
    let update_rate = updated as f64 / in_write.as_secs_f64();
    results.push(Measurement::new(
        "update",
        format!("update l_quantity of every 10th row ({updated} rows, time in Tablet::write)"),
        Figure::Rate(update_rate),
    ));
    let t0 = Instant::now();
    let flushed = tablet.flush_deltas()?;
    results.push(Measurement::new(
        "flush_deltas",
        format!("flush_deltas ({flushed} DeltaMemStores)"),
        Figure::Secs(t0.elapsed().as_secs_f64()),
    ));
    let (secs, out) = best_of(|v| cairn_scan(&tablet, Some(proj), &[], v))?;
    expect_rows(
        "Cairn 4-column scan with REDO deltas",
        out,
        data.rows,
        Some(qty_after),
    )?;
    let rate = data.rows as f64 / secs;
    results.push(
        Measurement::new(
            "scan4_redo_deltas",
            "scan 4 columns, 10% rows updated, REDO deltas flushed not compacted",
            Figure::Rate(rate),
        )
        .peer(pq_name, Figure::Rate(pq_rate)),
    );
    results.push(
        Measurement::new(
            "scan4_redo_vs_compacted",
            "the same scan over REDO deltas, against the compacted scan",
            Figure::Rate(rate),
        )
        .peer(
            "Cairn, compacted DiskRowSets (above)",
            Figure::Rate(compacted_scan_rate),
        )
        .target("ratio >= 0.8", rate / compacted_scan_rate >= 0.8),
    );
    let t0 = Instant::now();
    let mut majors = 0;
    for rs in tablet.components().disk.iter() {
        if tablet.major_delta_compaction(rs)? {
            majors += 1;
        }
    }
    results.push(Measurement::new(
        "major_delta_compaction",
        format!("major_delta_compaction ({majors} rowsets)"),
        Figure::Secs(t0.elapsed().as_secs_f64()),
    ));
    let (secs, out) = best_of(|v| cairn_scan(&tablet, Some(proj), &[], v))?;
    expect_rows(
        "Cairn 4-column scan after major delta compaction",
        out,
        data.rows,
        Some(qty_after),
    )?;
    let rate = data.rows as f64 / secs;
    results.push(
        Measurement::new(
            "scan4_major_compacted",
            "scan 4 columns after major delta compaction",
            Figure::Rate(rate),
        )
        .peer(pq_name, Figure::Rate(pq_rate)),
    );

    // ---- 4. 1%-selective predicate, every column ----
    eprintln!("1% predicate scans");
    let k = (prices.len() * 99 / 100).min(prices.len().saturating_sub(1));
    let (_, p99, _) = prices.select_nth_unstable(k);
    let bound = *p99;
    let matching = prices.iter().filter(|p| **p >= bound).count();
    drop(prices);
    let pred = [ColumnPredicate::ge(
        "l_extendedprice",
        Value::Decimal(bound),
    )];
    let selectivity = 100.0 * matching as f64 / data.rows as f64;
    notes.push(format!(
        "Predicate scan: l_extendedprice >= {}.{:02} matches {matching} rows ({selectivity:.2}%); \
         it runs after the updates and major delta compaction (the predicate column is \
         untouched by them).",
        bound / 100,
        bound % 100
    ));
    let (c_secs, out) = best_of(|v| cairn_scan(&tablet, None, &pred, v))?;
    expect_rows("Cairn predicate scan", out, matching, None)?;
    let (eager_secs, out) = best_of(|v| parquet_scan(&pq_path, None, PqFilter::After(bound), v))?;
    expect_rows("Parquet read-all-then-filter", out, matching, None)?;
    let (lazy_secs, out) =
        best_of(|v| parquet_scan(&pq_path, None, PqFilter::RowFilter(bound), v))?;
    expect_rows("Parquet RowFilter", out, matching, None)?;
    results.push(
        Measurement::new(
            "pred_scan_vs_eager",
            format!("1% predicate scan, all columns ({selectivity:.2}% match)"),
            Figure::Secs(c_secs),
        )
        .peer("Parquet read all + filter", Figure::Secs(eager_secs)),
    );
    results.push(
        Measurement::new(
            "pred_scan_vs_rowfilter",
            format!("1% predicate scan, all columns ({selectivity:.2}% match)"),
            Figure::Secs(c_secs),
        )
        .peer("Parquet RowFilter", Figure::Secs(lazy_secs)),
    );

    // ---- 5. hot point lookups ----
    eprintln!("point lookups");
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let picks = rand::seq::index::sample(&mut rng, data.rows, LOOKUP_KEYS.min(data.rows));
    let mut wanted: Vec<usize> = picks.into_vec();
    wanted.sort_unstable();
    let mut keys: Vec<[Value; 2]> = Vec::with_capacity(wanted.len());
    let mut base = 0;
    let mut next = wanted.iter().peekable();
    for b in &data.batches {
        let ok: &Int64Array = col(b, "l_orderkey")?;
        let ln: &Int32Array = col(b, "l_linenumber")?;
        while let Some(&&g) = next.peek() {
            if g >= base + b.num_rows() {
                break;
            }
            keys.push([
                Value::Int64(ok.value(g - base)),
                Value::Int32(ln.value(g - base)),
            ]);
            next.next();
        }
        base += b.num_rows();
    }
    for k in &keys {
        if tablet.get(k, ReadMode::Latest)?.is_none() {
            return Err(format!("point lookup of {k:?} found nothing").into());
        }
    }
    let order: Vec<usize> = (0..LOOKUPS)
        .map(|_| rng.random_range(0..keys.len()))
        .collect();
    let (p50, p99) = time_lookups(&tablet, &keys, &order, None)?;
    let cache = tablet.tablet().options().block_cache.stats();
    results.push(
        Measurement::new(
            "lookup_p50",
            format!(
                "hot point lookup p50, all columns ({LOOKUPS} lookups over {} keys)",
                keys.len()
            ),
            Figure::Micros(p50),
        )
        .target("<= 20 µs", p50 <= 20.0),
    );
    results.push(
        Measurement::new("lookup_p99", "hot point lookup p99", Figure::Micros(p99))
            .target("<= 100 µs", p99 <= 100.0),
    );
    notes.push(format!(
        "Block cache after the hot lookups: {} MiB of decoded pages ({} pages) in a \
         {} MiB cache; {} hits, {} misses, {} evictions since the tablet opened.",
        cache.used_bytes >> 20,
        cache.pages,
        cache.capacity_bytes >> 20,
        cache.hits,
        cache.misses,
        cache.evictions
    ));
    let price = data.schema.index_of("l_extendedprice")?;
    let want = [price];
    let (p50, _) = time_lookups(&tablet, &keys, &order, Some(&want))?;
    results.push(Measurement::new(
        "lookup_projected_p50",
        "hot point lookup p50, one column (l_extendedprice)",
        Figure::Micros(p50),
    ));
    // What the key index buys: key → row ordinal through it, and through the Parquet
    // key columns alone, with no cache either way.
    let ((by_index, by_index_99), (by_columns, _)) =
        keys::key_to_ordinal_costs(&tablet, &data.schema, &keys, &order[..order.len() / 10])?;
    results.push(
        Measurement::new(
            "key_to_ordinal",
            format!(
                "key → row ordinal through the key index, no cache (p50; p99 {by_index_99:.1} µs)"
            ),
            Figure::Micros(by_index),
        )
        .peer(
            "Parquet key columns alone: statistics, column index, decode the key pages",
            Figure::Micros(by_columns),
        ),
    );
    // Cold: the same lookups with the block cache off, so each one decodes a page of
    // every column (the base files stay in the OS page cache).
    tablet.shutdown()?;
    drop(tablet);
    let cold_opts = TabletOptions {
        block_cache: Arc::new(BlockCache::new(0)),
        ..opts.clone()
    };
    let tablet = LocalTablet::open(&tablet_dir, cold_opts)?;
    let few = &order[..order.len() / 10];
    let (p50, p99) = time_lookups(&tablet, &keys, few, None)?;
    results.push(
        Measurement::new(
            "lookup_cold_p50",
            format!(
                "cold point lookup p50, all columns (block cache off, files in the OS \
                 page cache; {} lookups)",
                few.len()
            ),
            Figure::Micros(p50),
        )
        .target("<= 200 µs", p50 <= 200.0),
    );
    results.push(Measurement::new(
        "lookup_cold_p99",
        "cold point lookup p99",
        Figure::Micros(p99),
    ));
    tablet.shutdown()?;
    drop(tablet);

    notes.push(
        "ratio = Cairn speed / peer speed (rows/s ÷ rows/s, or peer time ÷ Cairn time; for sizes peer ÷ Cairn): \
         above 1 Cairn is faster."
            .into(),
    );
    notes.push(format!(
        "Peer file: one Parquet file written by ArrowWriter with Cairn's \
         compression and row groups (LZ4_RAW, {ROWS_PER_ROW_GROUP}-row row groups), \
         {PEER_PAGE_ROWS}-row pages, 64 KiB dictionary pages and page statistics, read with \
         ParquetRecordBatchReaderBuilder from a std::fs::File (warm page cache), batch size \
         {ROWS_PER_ROW_GROUP}. Cairn reads its base files through mmap."
    ));
    notes.push(format!(
        "Scans: one warm-up run (which also checks the row count and sum(l_quantity)), then \
         the best of {SCAN_RUNS}. Inserts and updates: single thread, FsyncPolicy::Never \
         (except the fsync rows: FsyncPolicy::Always, tablets of their own), one MemRowSet \
         flush after the load. Updated-row scans are compared with the same \
         Parquet baseline (the file is not updated)."
    ));

    // ---- report ----
    let table = text_table(&results);
    println!();
    println!(
        "Cairn storage micro-benchmark — TPC-H lineitem SF {sf} ({} rows), git {}, {}",
        env.rows, env.git, env.date
    );
    println!(
        "machine: {} CPUs, {} RAM, {}; work dir {}",
        env.cpus, env.mem, env.cpu_model, env.work_dir
    );
    println!();
    print!("{table}");
    println!();
    for n in &notes {
        println!("- {n}");
    }

    let mut md = String::new();
    let _ = writeln!(md, "# Cairn storage micro-benchmark\n");
    let _ = writeln!(md, "- date: {}", env.date);
    let _ = writeln!(md, "- git revision: {}", env.git);
    let _ = writeln!(
        md,
        "- machine: {} CPUs (nproc), {} RAM, {}",
        env.cpus, env.mem, env.cpu_model
    );
    let _ = writeln!(md, "- work dir: {}", env.work_dir);
    let _ = writeln!(
        md,
        "- data: TPC-H lineitem, scale factor {sf}, {} rows, primary key (l_orderkey, l_linenumber)",
        env.rows
    );
    let _ = writeln!(
        md,
        "- command: `cairn-bench {}`\n",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    md.push_str(&markdown_table(&results));
    md.push('\n');
    for n in &notes {
        let _ = writeln!(md, "- {n}");
    }
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, md)?;
    if let Some(dir) = args.jsonl.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut jf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.jsonl)?;
    for m in &results {
        writeln!(jf, "{}", json_line(&env, m))?;
    }
    println!(
        "\nwrote {} and appended {} lines to {}",
        args.out.display(),
        results.len(),
        args.jsonl.display()
    );
    Ok(())
}
