//! `cairn-bench tpch`: the 22 TPC-H queries on `cairn local` (1 tablet server,
//! replicas 1) against DataFusion reading the same rows from Parquet files, in one run.
//!
//! 1. Generates the tables with `tpchgen-arrow` as Parquet files (kept for reuse).
//! 2. Starts `cairn local` as a process and loads every file with `COPY … FROM`
//!    through an embedded [`SqlEngine`] (the same engine the SQL front ends run);
//!    the load is timed, and DuckDB (if its Python package is installed) loads the
//!    same files for comparison.
//! 3. Runs each query once to warm up, then `--runs` times on both systems; reports
//!    the median, the ratio Cairn / DataFusion per query and the geometric mean, and
//!    checks that both return the same rows.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use cairn_sql::SqlEngine;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

use crate::procs::{BoxResult, Proc, free_port, settle};

/// Flags of `cairn-bench tpch`.
#[derive(clap::Args)]
pub struct TpchArgs {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Timed runs per query and system (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The `cairn` binary to run.
    #[arg(long, default_value = "target/release/cairn")]
    pub cairn: PathBuf,
    /// Where the Parquet files and Cairn's data go.
    #[arg(long, default_value = "/tmp/cairn-bench-tpch")]
    pub work_dir: PathBuf,
    /// Markdown report.
    #[arg(long, default_value = "bench/results/tpch.md")]
    pub out: PathBuf,
    /// Only these queries (comma-separated numbers); default all 22.
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<usize>,
}

const TABLES: [&str; 8] = [
    "nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem",
];

/// Runs the benchmark.
pub fn tpch(a: TpchArgs) -> BoxResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(a))
}

async fn run(a: TpchArgs) -> BoxResult<()> {
    let data = a.work_dir.join(format!("sf{}", a.sf));
    std::fs::create_dir_all(&data)?;
    for t in TABLES {
        let path = data.join(format!("{t}.parquet"));
        if !path.exists() {
            eprintln!("generating {t} at SF {}", a.sf);
            write_parquet(t, a.sf, &path)?;
        }
    }

    // Cairn: a fresh `cairn local`.
    let cairn_dir = a.work_dir.join("cairn-data");
    let _ = std::fs::remove_dir_all(&cairn_dir);
    let master = format!("127.0.0.1:{}", free_port()?);
    let log = std::fs::File::create(a.work_dir.join("local.log"))?;
    let _local = Proc(
        Command::new(&a.cairn)
            .args([
                "local",
                "--data-dir",
                &cairn_dir.display().to_string(),
                "--master-addr",
                &master,
                "--tserver-port",
                &free_port()?.to_string(),
                "--web-addr",
                "",
                "--pg-addr",
                "",
                "--flight-sql-addr",
                "",
                "--fsync",
                "never",
            ])
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?,
    );
    let engine = connect(&master).await?;
    let s = engine.session();
    let schema_sql = std::fs::read_to_string("bench/tpch/schema.sql")?;
    s.execute(&schema_sql).await?;
    let started = Instant::now();
    for t in TABLES {
        let path = data.join(format!("{t}.parquet"));
        let t0 = Instant::now();
        s.execute(&format!("COPY {t} FROM '{}'", path.display()))
            .await?;
        eprintln!("loaded {t} in {:.1} s", t0.elapsed().as_secs_f64());
    }
    let cairn_load = started.elapsed().as_secs_f64();
    // The load leaves flushes and compactions running in `cairn local`; on a small
    // machine they would steal the CPU from both systems' queries.
    let settle = settle(_local.0.id(), Duration::from_secs(900)).await;
    eprintln!("background maintenance settled after {settle:.0} s");
    let duckdb_load = duckdb_load(&data);

    let df = SessionContext::new();
    for t in TABLES {
        df.register_parquet(
            t,
            data.join(format!("{t}.parquet"))
                .to_str()
                .unwrap_or_default(),
            ParquetReadOptions::default(),
        )
        .await?;
    }

    let queries: Vec<usize> = if a.queries.is_empty() {
        (1..=22).collect()
    } else {
        a.queries.clone()
    };
    let mut rows = vec![];
    for n in queries {
        let mut sql = std::fs::read_to_string(format!("bench/tpch/queries/q{n}.sql"))?;
        if n == 11 && a.sf != 1.0 {
            sql = sql.replace("0.0001", &format!("{}", 0.0001 / a.sf));
        }
        let (c_time, c_rows) = time_runs(a.runs, || {
            let s = &s;
            let sql = sql.clone();
            async move { Ok::<_, Box<dyn std::error::Error + Send + Sync>>(s.query(&sql).await?) }
        })
        .await?;
        let (d_time, d_rows) = time_runs(a.runs, || {
            let df = &df;
            let sql = sql.clone();
            async move { Ok(df.sql(&sql).await?.collect().await?) }
        })
        .await?;
        let same = normalized(&c_rows) == normalized(&d_rows);
        eprintln!(
            "q{n}: cairn {:.3} s, datafusion {:.3} s, ratio {:.2}{}",
            c_time,
            d_time,
            c_time / d_time,
            if same { "" } else { "  ANSWERS DIFFER" }
        );
        rows.push((n, c_time, d_time, same));
    }
    report(&a, cairn_load, duckdb_load, &rows)
}

async fn connect(master: &str) -> BoxResult<SqlEngine> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(e) = SqlEngine::connect(&[master.to_string()]).await
            && let Ok(servers) = e.client().list_tablet_servers().await
            && servers.iter().any(|s| s.live)
        {
            return Ok(e);
        }
        if Instant::now() > deadline {
            return Err("cairn local did not come up within 60 s (see local.log)".into());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn time_runs<F, Fut>(runs: usize, mut f: F) -> BoxResult<(f64, Vec<RecordBatch>)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = BoxResult<Vec<RecordBatch>>>,
{
    let result = f().await?;
    let mut times = vec![];
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        f().await?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok((times[times.len() / 2], result))
}

fn normalized(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let opts = FormatOptions::default();
    let mut out = vec![];
    for b in batches {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .filter_map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).ok())
            .collect();
        for r in 0..b.num_rows() {
            out.push(
                fmts.iter()
                    .map(|f| {
                        let c = f.value(r).to_string();
                        match c.parse::<f64>() {
                            Ok(x) if c.contains('.') || c.contains('e') => format!("{x:.4e}"),
                            _ => c,
                        }
                    })
                    .collect(),
            );
        }
    }
    out.sort();
    out
}

/// Seconds DuckDB takes to load the same files into native tables, if the `duckdb`
/// Python package is installed.
fn duckdb_load(data: &Path) -> Option<f64> {
    let script = format!(
        "import duckdb, time\ncon = duckdb.connect()\nt = time.time()\nfor n in {:?}:\n    con.execute(f\"CREATE TABLE {{n}} AS SELECT * FROM read_parquet('{}/{{n}}.parquet')\")\nprint(time.time() - t)\n",
        TABLES,
        data.display()
    );
    let python = std::env::var("CAIRN_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python).arg("-c").arg(script).output().ok()?;
    if !out.status.success() {
        eprintln!(
            "DuckDB load skipped: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn write_parquet(table: &str, sf: f64, path: &Path) -> BoxResult<()> {
    use tpchgen::generators::*;
    use tpchgen_arrow::*;
    let batches: Box<dyn Iterator<Item = Result<RecordBatch, arrow::error::ArrowError>>> =
        match table {
            "nation" => Box::new(NationArrow::new(NationGenerator::new(sf, 1, 1))),
            "region" => Box::new(RegionArrow::new(RegionGenerator::new(sf, 1, 1))),
            "part" => Box::new(PartArrow::new(PartGenerator::new(sf, 1, 1))),
            "supplier" => Box::new(SupplierArrow::new(SupplierGenerator::new(sf, 1, 1))),
            "partsupp" => Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, 1, 1))),
            "customer" => Box::new(CustomerArrow::new(CustomerGenerator::new(sf, 1, 1))),
            "orders" => Box::new(OrderArrow::new(OrderGenerator::new(sf, 1, 1))),
            _ => Box::new(LineItemArrow::new(LineItemGenerator::new(sf, 1, 1))),
        };
    let mut writer: Option<parquet::arrow::ArrowWriter<std::fs::File>> = None;
    for b in batches {
        let b = b?;
        let fields: Vec<Field> = b
            .schema()
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                ArrowType::Utf8View => f.as_ref().clone().with_data_type(ArrowType::Utf8),
                _ => f.as_ref().clone(),
            })
            .collect();
        let schema = Arc::new(ArrowSchema::new(fields));
        let cols = b
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(c, f)| arrow::compute::cast(c, f.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        let b = RecordBatch::try_new(schema.clone(), cols)?;
        if writer.is_none() {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::SNAPPY)
                .build();
            writer = Some(parquet::arrow::ArrowWriter::try_new(
                std::fs::File::create(path)?,
                schema,
                Some(props),
            )?);
        }
        if let Some(w) = writer.as_mut() {
            w.write(&b)?;
        }
    }
    if let Some(w) = writer {
        w.close()?;
    }
    Ok(())
}

fn report(
    a: &TpchArgs,
    cairn_load: f64,
    duckdb_load: Option<f64>,
    rows: &[(usize, f64, f64, bool)],
) -> BoxResult<()> {
    let geomean = (rows.iter().map(|(_, c, d, _)| (c / d).ln()).sum::<f64>()
        / rows.len().max(1) as f64)
        .exp();
    let mut md = String::new();
    md.push_str(&format!(
        "# TPC-H SF {}: Cairn vs DataFusion on Parquet\n\n\
         Machine: {} cores, {}. Cairn: `cairn local`, 1 tablet server, replicas 1, \
         tables hash-partitioned on their keys (bench/tpch/schema.sql), queried through an \
         embedded SQL engine. DataFusion 55.2.0 reads the same rows from Parquet files \
         (Snappy) in the same process. One warm-up, median of {} runs. Cairn binary: `{}`; \
         queries start once its background flushes and compactions after the load have \
         settled.\n\n",
        a.sf,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::env::consts::ARCH,
        a.runs,
        a.cairn.display()
    ));
    md.push_str("| query | Cairn (s) | DataFusion (s) | ratio Cairn/DataFusion | same answer |\n|---|---|---|---|---|\n");
    for (n, c, d, same) in rows {
        md.push_str(&format!(
            "| q{n} | {c:.3} | {d:.3} | {:.2} | {} |\n",
            c / d,
            if *same { "yes" } else { "NO" }
        ));
    }
    md.push_str(&format!(
        "\n**Geometric mean of the ratios: {geomean:.2}** (target ≤ 1.3; lower is better).\n\n\
         Load (COPY FROM Parquet, all 8 tables): Cairn {cairn_load:.1} s; DuckDB {}.\n",
        match duckdb_load {
            Some(d) => format!("{d:.1} s (ratio {:.1})", cairn_load / d),
            None => "not measured (python3 -c 'import duckdb' failed)".into(),
        }
    ));
    if let Some(dir) = a.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&a.out, &md)?;
    println!("{md}");
    Ok(())
}
