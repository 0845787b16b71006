//! `cairn perf loadgen`: writes generated rows with concurrent write sessions and
//! measures throughput and latency; optionally follows with random point reads.
//!
//! Each of `--threads` tasks owns one session (manual flush) and a disjoint slice of
//! the key range `[--key-start, --key-start + --rows)`. A task applies `--batch-rows`
//! rows, then flushes and times the flush: that is one "batch latency" sample (the
//! flush writes to every tablet the batch touches, in parallel).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn_client::{
    Client, ClientError, CreateTableSpec, FlushMode, Operation, RowErrorInfo, Table,
};
use cairn_common::{
    ColumnPredicate, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value,
};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::distr::Alphanumeric;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use super::fmt::{group_thousands, latency_summary, per_sec};
use super::table::{check_enough_servers, check_replicas};
use super::{MasterArgs, ToolResult};

/// How many row errors are shown.
const SHOW_ERRORS: usize = 10;
/// Hash buckets of a table loadgen creates.
const BUCKETS: u32 = 4;
/// Length of the generated strings.
const STRING_LEN: usize = 32;

/// `cairn perf loadgen`
#[derive(Args, Debug)]
#[command(
    after_help = "The table (created if missing) has the columns key INT64 (primary key, \
    hashed into 4 buckets), int_val INT64, double_val DOUBLE, string_val STRING (32 random \
    characters) and ts TIMESTAMP.\n\
    Example:\n  cairn perf loadgen --table lg --rows 1000000 --threads 8 --reads 10000"
)]
pub struct LoadgenArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The table to write (created with the loadgen schema if it does not exist).
    #[arg(long, value_name = "NAME")]
    pub table: String,
    /// How many rows to write.
    #[arg(long, value_name = "N")]
    pub rows: u64,
    /// Replicas per tablet of a table created here (default: 3, or 1 when the cluster
    /// has fewer than 3 live tablet servers).
    #[arg(long, value_name = "N")]
    pub replicas: Option<u32>,
    /// Rows per flush of a session (one latency sample per flush).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub batch_rows: usize,
    /// Concurrent write sessions, each with its own slice of the key range.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub threads: usize,
    /// First key written; rows get keys key-start, key-start+1, … (use a fresh range
    /// to append to a table, or --upsert to overwrite).
    #[arg(
        long,
        default_value_t = 0,
        value_name = "KEY",
        allow_negative_numbers = true
    )]
    pub key_start: i64,
    /// Upsert instead of insert, so that re-running over the same keys succeeds.
    #[arg(long)]
    pub upsert: bool,
    /// After writing, do this many point reads of random written keys (a scan with
    /// `key = K`, limit 1), spread over the threads, and report their latency.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub reads: u64,
}

/// The loadgen schema.
pub fn loadgen_schema() -> Schema {
    let cols = vec![
        ColumnSpec::new("key", DataType::Int64),
        ColumnSpec::new("int_val", DataType::Int64),
        ColumnSpec::new("double_val", DataType::Double),
        ColumnSpec::new("string_val", DataType::String),
        ColumnSpec::new("ts", DataType::Timestamp),
    ];
    match Schema::new(cols, &["key"]) {
        Ok(s) => s,
        // A constant, well-formed schema.
        Err(e) => unreachable!("the loadgen schema is invalid: {e}"),
    }
}

/// Checks that an existing table can take loadgen rows (same columns by name and type,
/// and `key` alone as the primary key).
fn check_compatible(table: &Table) -> ToolResult<()> {
    let want = loadgen_schema();
    let have = &table.schema;
    let describe = |s: &Schema| {
        s.columns()
            .iter()
            .map(|c| format!("{} {}", c.name, c.data_type))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same_columns = have.num_columns() == want.num_columns()
        && want
            .columns()
            .iter()
            .zip(have.columns())
            .all(|(w, h)| w.name == h.name && w.data_type == h.data_type);
    let same_key = have.key_indexes() == want.key_indexes();
    if !same_columns || !same_key {
        return Err(format!(
            "table '{}' exists but does not have the loadgen schema ({}); it has ({}). Use \
             another --table",
            table.name,
            describe(&want),
            describe(have)
        )
        .into());
    }
    Ok(())
}

/// Splits `[start, start + rows)` into `parts` contiguous, disjoint slices.
pub fn key_slices(start: i64, rows: u64, parts: usize) -> Vec<(i64, u64)> {
    let parts = parts.max(1) as u64;
    let base = rows / parts;
    let extra = rows % parts;
    let mut out = Vec::new();
    let mut next = start;
    for i in 0..parts {
        let n = base + u64::from(i < extra);
        if n == 0 {
            continue;
        }
        out.push((next, n));
        next = next.wrapping_add(n as i64);
    }
    out
}

/// One generated row.
fn make_row(key: i64, rng: &mut StdRng, now_us: i64) -> Vec<Value> {
    let s: String = (0..STRING_LEN)
        .map(|_| char::from(rng.sample(Alphanumeric)))
        .collect();
    vec![
        Value::Int64(key),
        Value::Int64(rng.random_range(0..1_000_000)),
        Value::Double(rng.random::<f64>() * 1000.0),
        Value::String(s),
        Value::Timestamp(now_us.wrapping_add(key)),
    ]
}

/// What one writer did.
#[derive(Default)]
struct WriterResult {
    written: u64,
    latencies: Vec<Duration>,
    row_errors: u64,
    shown: Vec<String>,
    in_doubt: u64,
    causes: Vec<String>,
}

fn describe_row_error(e: &RowErrorInfo) -> String {
    let key = match e.op.values.first() {
        Some(Some(v)) => v.to_string(),
        _ => "?".into(),
    };
    format!("key {key}: {}: {}", e.kind.as_str_name(), e.message)
}

async fn writer(
    client: Client,
    table: Table,
    (start, rows): (i64, u64),
    batch_rows: usize,
    upsert: bool,
    seed: u64,
    bar: ProgressBar,
) -> ToolResult<WriterResult> {
    let mut session = client.new_session(&table);
    session.set_flush_mode(FlushMode::Manual);
    let mut rng = StdRng::seed_from_u64(seed);
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    let mut out = WriterResult::default();
    let mut done = 0u64;
    while done < rows {
        let n = (rows - done).min(batch_rows as u64);
        for i in 0..n {
            let key = start.wrapping_add((done + i) as i64);
            let row = make_row(key, &mut rng, now_us);
            let op = if upsert {
                Operation::upsert(row)
            } else {
                Operation::insert(row)
            };
            session.apply(op).await?;
        }
        let t0 = Instant::now();
        let flushed = session.flush().await;
        out.latencies.push(t0.elapsed());
        let (errors, in_doubt) = match flushed {
            Ok(errors) => (errors, 0u64),
            Err(ClientError::WriteFailed {
                cause,
                failed_ops,
                row_errors,
            }) => {
                if out.causes.len() < SHOW_ERRORS {
                    out.causes.push(cause.to_string());
                }
                (row_errors, failed_ops.len() as u64)
            }
            Err(e) => return Err(e.into()),
        };
        for e in &errors {
            if out.shown.len() < SHOW_ERRORS {
                out.shown.push(describe_row_error(e));
            }
        }
        out.row_errors += errors.len() as u64;
        out.in_doubt += in_doubt;
        out.written += n - errors.len() as u64 - in_doubt;
        done += n;
        bar.inc(n);
    }
    Ok(out)
}

async fn reader(
    client: Client,
    table: Table,
    (start, rows): (i64, u64),
    reads: u64,
    seed: u64,
    bar: ProgressBar,
) -> ToolResult<(Vec<Duration>, u64)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut latencies = Vec::with_capacity(reads as usize);
    let mut found = 0u64;
    for _ in 0..reads {
        let key = start.wrapping_add(rng.random_range(0..rows) as i64);
        let t0 = Instant::now();
        let r = client
            .scan(&table)
            .predicate(ColumnPredicate::eq("key", Value::Int64(key)))
            .limit(1)
            .execute()
            .await?;
        latencies.push(t0.elapsed());
        if r.num_rows() > 0 {
            found += 1;
        }
        bar.inc(1);
    }
    Ok((latencies, found))
}

fn progress(len: u64, what: &str) -> ToolResult<ProgressBar> {
    let b = ProgressBar::new(len);
    b.set_style(ProgressStyle::with_template(&format!(
        "[{{elapsed_precise}}] {{bar:40}} {{human_pos}}/{{human_len}} {what} ({{per_sec}}, eta {{eta}})"
    ))?);
    Ok(b)
}

/// Opens the table, creating it with the loadgen schema if it does not exist.
async fn open_or_create(client: &Client, a: &LoadgenArgs) -> ToolResult<Table> {
    match client.open_table(&a.table).await {
        Ok(t) => {
            check_compatible(&t)?;
            if a.replicas.is_some_and(|r| r != t.replicas) {
                eprintln!(
                    "note: table '{}' exists with {} replica(s); --replicas applies only to a new table",
                    t.name, t.replicas
                );
            }
            return Ok(t);
        }
        Err(ClientError::TableNotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    // Without --replicas the master's default applies.
    let replicas = a.replicas.unwrap_or(0);
    check_enough_servers(client, replicas).await?;
    let spec = CreateTableSpec::new(&a.table, loadgen_schema())
        .partition(PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["key".into()],
                num_buckets: BUCKETS,
                seed: 0,
            }],
            range_columns: vec![],
        })
        .replicas(replicas)
        .if_not_exists(true);
    client.create_table(spec).await?;
    let t = client.open_table(&a.table).await?;
    println!(
        "created table '{}': {BUCKETS} tablets (key hashed), {} replica(s) each",
        a.table, t.replicas
    );
    Ok(t)
}

/// `cairn perf loadgen`
pub async fn loadgen(a: LoadgenArgs) -> ToolResult<()> {
    if a.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if a.batch_rows == 0 {
        return Err("--batch-rows must be at least 1".into());
    }
    if let Some(r) = a.replicas {
        check_replicas(r)?;
    }
    if a.reads > 0 && a.rows == 0 {
        return Err("--reads picks keys among the rows written: give --rows too".into());
    }
    if a.key_start
        .checked_add(a.rows.min(i64::MAX as u64) as i64)
        .is_none()
    {
        return Err("--key-start + --rows overflows a 64-bit key".into());
    }
    let client = a.conn.connect().await?;
    let table = open_or_create(&client, &a).await?;
    let slices = key_slices(a.key_start, a.rows, a.threads);

    if a.rows > 0 {
        let bar = progress(a.rows, "rows")?;
        let start = Instant::now();
        let mut set = JoinSet::new();
        for (i, slice) in slices.iter().enumerate() {
            set.spawn(writer(
                client.clone(),
                table.clone(),
                *slice,
                a.batch_rows,
                a.upsert,
                a.key_start as u64 ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                bar.clone(),
            ));
        }
        let mut total = WriterResult::default();
        let mut first_error: Option<String> = None;
        while let Some(r) = set.join_next().await {
            match r {
                Ok(Ok(w)) => {
                    total.written += w.written;
                    total.latencies.extend(w.latencies);
                    total.row_errors += w.row_errors;
                    total.in_doubt += w.in_doubt;
                    total.shown.extend(w.shown);
                    total.causes.extend(w.causes);
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert_with(|| e.to_string());
                    set.abort_all();
                }
                Err(e) if e.is_cancelled() => {}
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("a writer task failed: {e}"));
                }
            }
        }
        bar.finish_and_clear();
        let elapsed = start.elapsed();
        if let Some(e) = first_error {
            return Err(format!("writing failed: {e}").into());
        }
        let batches = total.latencies.len();
        println!(
            "wrote {} row(s) in {:.2} s: {} rows/s ({} session(s), {} batch(es) of up to {} rows)",
            group_thousands(total.written),
            elapsed.as_secs_f64(),
            per_sec(total.written, elapsed),
            slices.len(),
            group_thousands(batches as u64),
            a.batch_rows
        );
        println!(
            "write latency per batch: {}",
            latency_summary(&mut total.latencies)
        );
        if total.row_errors > 0 {
            println!("{} row error(s), e.g.:", group_thousands(total.row_errors));
            for e in total.shown.iter().take(SHOW_ERRORS) {
                println!("  {e}");
            }
            if !a.upsert {
                println!("  (rows with existing keys fail: use a fresh --key-start, or --upsert)");
            }
        }
        if total.in_doubt > 0 {
            println!(
                "{} row(s) may not have been written: {}",
                group_thousands(total.in_doubt),
                total
                    .causes
                    .first()
                    .map(String::as_str)
                    .unwrap_or("a write did not complete")
            );
        }
    }

    if a.reads > 0 {
        let bar = progress(a.reads, "reads")?;
        let start = Instant::now();
        let mut set = JoinSet::new();
        let per = key_slices(0, a.reads, a.threads);
        let keys = (a.key_start, a.rows);
        for (i, (_, n)) in per.iter().enumerate() {
            set.spawn(reader(
                client.clone(),
                table.clone(),
                keys,
                *n,
                (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
                bar.clone(),
            ));
        }
        let mut latencies = Vec::new();
        let mut found = 0;
        let mut first_error: Option<String> = None;
        while let Some(r) = set.join_next().await {
            match r {
                Ok(Ok((l, f))) => {
                    latencies.extend(l);
                    found += f;
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert_with(|| e.to_string());
                    set.abort_all();
                }
                Err(e) if e.is_cancelled() => {}
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("a reader task failed: {e}"));
                }
            }
        }
        bar.finish_and_clear();
        let elapsed = start.elapsed();
        if let Some(e) = first_error {
            return Err(format!("reading failed: {e}").into());
        }
        let n = latencies.len() as u64;
        println!(
            "{} point read(s) in {:.2} s: {} reads/s, {} found",
            group_thousands(n),
            elapsed.as_secs_f64(),
            per_sec(n, elapsed),
            group_thousands(found)
        );
        println!("read latency: {}", latency_summary(&mut latencies));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn key_ranges_are_disjoint_and_complete() {
        assert_eq!(key_slices(0, 10, 4), vec![(0, 3), (3, 3), (6, 2), (8, 2)]);
        assert_eq!(key_slices(100, 2, 4), vec![(100, 1), (101, 1)]);
        assert_eq!(key_slices(-5, 0, 3), vec![]);
        let s = key_slices(7, 1_000_003, 8);
        assert_eq!(s.iter().map(|x| x.1).sum::<u64>(), 1_000_003);
        for w in s.windows(2) {
            assert_eq!(w[0].0 + w[0].1 as i64, w[1].0);
        }
    }

    #[test]
    fn rows_fit_the_schema() {
        let schema = loadgen_schema();
        let mut rng = StdRng::seed_from_u64(1);
        let row = make_row(42, &mut rng, 1_700_000_000_000_000);
        schema.validate_row(&row).unwrap();
        assert_eq!(row[0], Value::Int64(42));
        match &row[3] {
            Value::String(s) => assert_eq!(s.len(), STRING_LEN),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn existing_tables_must_match() {
        let mk = |schema: Schema| Table {
            id: "i".into(),
            name: "t".into(),
            schema: Arc::new(schema),
            partition_schema: PartitionSchema::default(),
            replicas: 1,
            subspaces: vec![],
            colocation: None,
        };
        assert!(check_compatible(&mk(loadgen_schema())).is_ok());
        let other = Schema::new(vec![ColumnSpec::new("key", DataType::Int64)], &["key"]).unwrap();
        let e = check_compatible(&mk(other)).unwrap_err().to_string();
        assert!(e.contains("does not have the loadgen schema"), "{e}");
    }
}
