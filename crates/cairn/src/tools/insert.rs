//! `cairn table insert`: loads a CSV or Parquet file into a table through a write
//! session in background-flush mode.
//!
//! The file is read on a blocking thread and handed over batch by batch; its columns
//! are matched to the table's by name. Values are converted with Arrow's casts (the
//! parsers Arrow's CSV reader uses), so a value that does not parse fails its row, not
//! the load: failed rows are counted and the first ones are shown with their line (CSV)
//! or row number (Parquet) and the reason. Rows the servers reject (a duplicate key
//! without `--upsert`, a row outside every range partition) are reported the same way.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use cairn_client::{ClientError, FlushMode, Operation, RowErrorInfo};
use cairn_common::{Schema, Value};
use cairn_proto::OpKind;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::fmt::{group_thousands, per_sec};
use super::parse::type_name;
use super::{MasterArgs, ToolError, ToolResult};

/// How many failed rows are shown.
const SHOW_FAILURES: usize = 10;

/// Input file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FileFormat {
    /// Comma-separated values with a header line naming the columns.
    Csv,
    /// Apache Parquet.
    Parquet,
}

/// `cairn table insert`
#[derive(Args, Debug)]
#[command(
    after_help = "CSV files need a header line with column names. Empty CSV fields \
    are NULL (a NOT NULL column with a default gets its default). Columns missing from the \
    file get their default or NULL; key columns must be present.\n\
    Example:\n  cairn table insert orders --file orders.csv --batch-rows 5000"
)]
pub struct InsertArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The table to load into.
    pub name: String,
    /// The file to load.
    #[arg(long, short = 'f', value_name = "PATH")]
    pub file: PathBuf,
    /// The file's format (default: from its extension, .csv / .tsv or .parquet / .pq).
    #[arg(long, value_enum)]
    pub format: Option<FileFormat>,
    /// Replace rows whose primary key exists already instead of failing them.
    #[arg(long)]
    pub upsert: bool,
    /// Rows per write batch sent to one tablet (also rows read from the file at a time).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub batch_rows: usize,
    /// CSV field delimiter (default ',', or a tab for .tsv files).
    #[arg(long, value_name = "CHAR")]
    pub delimiter: Option<char>,
    /// Ignore file columns the table does not have (default: refuse to load).
    #[arg(long)]
    pub skip_unknown_columns: bool,
    /// Stop reading once this many rows failed to convert (0: never stop).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub max_failures: u64,
}

/// The format of `path` from its extension.
pub fn format_from_extension(path: &Path) -> ToolResult<FileFormat> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("csv") | Some("tsv") | Some("txt") => Ok(FileFormat::Csv),
        Some("parquet") | Some("pq") => Ok(FileFormat::Parquet),
        _ => Err(format!(
            "cannot tell the format of '{}' from its extension: pass --format csv or --format parquet",
            path.display()
        )
        .into()),
    }
}

/// Matches file columns to table columns by name: for each file column, the table
/// column it fills (`None`: ignored). Checks that every key column, and every NOT NULL
/// column without a default, is present.
pub fn map_columns(
    file_columns: &[String],
    schema: &Schema,
    skip_unknown: bool,
) -> Result<Vec<Option<usize>>, String> {
    let mut targets = Vec::with_capacity(file_columns.len());
    let mut unknown = Vec::new();
    for (i, name) in file_columns.iter().enumerate() {
        if file_columns[..i].contains(name) {
            return Err(format!("the file has two columns named '{name}'"));
        }
        match schema.index_of(name) {
            Ok(c) => targets.push(Some(c)),
            Err(_) => {
                unknown.push(name.clone());
                targets.push(None);
            }
        }
    }
    let table_columns = || {
        schema
            .columns()
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !unknown.is_empty() && !skip_unknown {
        return Err(format!(
            "the file has column(s) the table does not have: {}. The table's columns are: {}. \
             Rename them, or pass --skip-unknown-columns to ignore them",
            unknown.join(", "),
            table_columns()
        ));
    }
    let mut missing = Vec::new();
    for (i, c) in schema.columns().iter().enumerate() {
        let present = targets.contains(&Some(i));
        if !present && (schema.is_key_column(i) || (!c.nullable && c.default.is_none())) {
            missing.push(c.name.clone());
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "the file lacks column(s) every row needs (primary key, or NOT NULL without a \
             default): {}; the file has: {}",
            missing.join(", "),
            file_columns.join(", ")
        ));
    }
    Ok(targets)
}

/// An open input file.
struct Source {
    batches: Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>,
    /// The table column each batch column fills.
    targets: Vec<usize>,
    /// Ignored file columns.
    ignored: Vec<String>,
    /// Rows in the file, when known up front.
    total_rows: Option<u64>,
}

fn open_source(
    path: &Path,
    format: FileFormat,
    schema: &Schema,
    batch_rows: usize,
    delimiter: u8,
    skip_unknown: bool,
) -> ToolResult<Source> {
    let file = File::open(path).map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
    match format {
        FileFormat::Csv => {
            let mut file = file;
            let (header, _) = arrow::csv::reader::Format::default()
                .with_header(true)
                .with_delimiter(delimiter)
                .infer_schema(&mut file, Some(0))
                .map_err(|e| format!("cannot read the header line of '{}': {e}", path.display()))?;
            let names: Vec<String> = header
                .fields()
                .iter()
                .map(|f| f.name().trim().to_string())
                .collect();
            if names.is_empty() || names.iter().all(String::is_empty) {
                return Err(format!(
                    "'{}' has no header line: its first line must name the columns",
                    path.display()
                )
                .into());
            }
            let targets = map_columns(&names, schema, skip_unknown)?;
            // Read every field as text; values are converted (with row-level errors)
            // afterwards.
            let text_schema = Arc::new(ArrowSchema::new(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| Field::new(format!("{i}:{n}"), ArrowType::Utf8, true))
                    .collect::<Vec<_>>(),
            ));
            let keep: Vec<usize> = (0..names.len()).filter(|&i| targets[i].is_some()).collect();
            use std::io::Seek;
            file.rewind()?;
            let reader = arrow::csv::ReaderBuilder::new(text_schema)
                .with_header(true)
                .with_delimiter(delimiter)
                .with_batch_size(batch_rows)
                .with_projection(keep.clone())
                .build(file)?;
            Ok(Source {
                batches: Box::new(reader),
                targets: keep.iter().filter_map(|&i| targets[i]).collect(),
                ignored: (0..names.len())
                    .filter(|&i| targets[i].is_none())
                    .map(|i| names[i].clone())
                    .collect(),
                total_rows: None,
            })
        }
        FileFormat::Parquet => {
            let builder = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| format!("cannot read '{}' as Parquet: {e}", path.display()))?;
            let names: Vec<String> = builder
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            let targets = map_columns(&names, schema, skip_unknown)?;
            let keep: Vec<usize> = (0..names.len()).filter(|&i| targets[i].is_some()).collect();
            let total = builder.metadata().file_metadata().num_rows().max(0) as u64;
            let mask = ProjectionMask::roots(builder.parquet_schema(), keep.iter().copied());
            let reader = builder
                .with_projection(mask)
                .with_batch_size(batch_rows)
                .build()?;
            Ok(Source {
                batches: Box::new(reader),
                targets: keep.iter().filter_map(|&i| targets[i]).collect(),
                ignored: (0..names.len())
                    .filter(|&i| targets[i].is_none())
                    .map(|i| names[i].clone())
                    .collect(),
                total_rows: Some(total),
            })
        }
    }
}

/// Where data row `row` (0-based) is in the file, for messages.
fn locate(format: FileFormat, row: u64) -> String {
    match format {
        // Line 1 is the header (a quoted field with line breaks shifts this).
        FileFormat::Csv => format!("line {}", row + 2),
        FileFormat::Parquet => format!("row {}", row + 1),
    }
}

/// A cell of the file as text, for messages.
fn raw_cell(array: &dyn Array, row: usize) -> String {
    match ArrayFormatter::try_new(array, &FormatOptions::default()) {
        Ok(f) => {
            let s = f.value(row).to_string();
            if s.chars().count() > 60 {
                format!("'{}…'", s.chars().take(60).collect::<String>())
            } else {
                format!("'{s}'")
            }
        }
        Err(_) => "the value".into(),
    }
}

/// The rows of one file batch as operations, and the rows that failed to convert.
struct Converted {
    /// (data row, operation), in row order.
    ops: Vec<(u64, Operation)>,
    /// (data row, reason), in row order.
    failed: Vec<(u64, String)>,
}

/// Converts one batch of the file (whose rows start at data row `first_row`) into
/// operations of `kind`. A value that does not convert to its column's type fails its
/// row; a column whose type cannot be converted at all fails the load.
fn convert_batch(
    batch: &RecordBatch,
    targets: &[usize],
    schema: &Schema,
    kind: OpKind,
    first_row: u64,
    format: FileFormat,
) -> Result<Converted, String> {
    let n = batch.num_rows();
    let mut reasons: Vec<Option<String>> = vec![None; n];
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(targets.len());
    let opts = CastOptions {
        safe: true,
        ..Default::default()
    };
    for (j, &c) in targets.iter().enumerate() {
        let col = schema.column(c);
        let src = batch.column(j);
        let want = col.data_type.to_arrow();
        let arr = if src.data_type() == &want {
            src.clone()
        } else {
            let a = cast_with_options(src.as_ref(), &want, &opts).map_err(|e| {
                format!(
                    "column '{}' is {} in the file, which cannot be converted to {}: {e}",
                    col.name,
                    src.data_type(),
                    type_name(&col.data_type)
                )
            })?;
            for (r, reason) in reasons.iter_mut().enumerate() {
                if reason.is_none() && src.is_valid(r) && a.is_null(r) {
                    *reason = Some(format!(
                        "column '{}': cannot read {} as {}",
                        col.name,
                        raw_cell(src.as_ref(), r),
                        type_name(&col.data_type)
                    ));
                }
            }
            a
        };
        columns.push(arr);
    }
    let mut out = Converted {
        ops: Vec::with_capacity(n),
        failed: Vec::new(),
    };
    for (r, reason) in reasons.into_iter().enumerate() {
        let row = first_row + r as u64;
        if let Some(reason) = reason {
            out.failed
                .push((row, format!("{}: {reason}", locate(format, row))));
            continue;
        }
        let mut values: Vec<Option<Value>> = vec![None; schema.num_columns()];
        let mut bad = None;
        for (j, &c) in targets.iter().enumerate() {
            let col = schema.column(c);
            match Value::from_array(columns[j].as_ref(), r, &col.data_type) {
                Ok(v) if v.is_null() && !col.nullable && col.default.is_some() => {}
                Ok(v) => values[c] = Some(v),
                Err(e) => {
                    bad = Some(format!("column '{}': {e}", col.name));
                    break;
                }
            }
        }
        match bad {
            Some(reason) => out
                .failed
                .push((row, format!("{}: {reason}", locate(format, row)))),
            None => out.ops.push((row, Operation::new(kind, values))),
        }
    }
    Ok(out)
}

/// The data row of the `op_index`-th applied operation, given the (sorted) data rows
/// that were never applied.
fn row_of_op(op_index: u64, skipped: &[u64]) -> u64 {
    let mut row = op_index;
    for &s in skipped {
        if s <= row {
            row += 1;
        } else {
            break;
        }
    }
    row
}

/// What a load did.
#[derive(Default)]
struct Tally {
    /// Data rows taken from the file.
    read: u64,
    /// Operations accepted by the session (= the next op index).
    applied: u64,
    /// Data rows that never reached the session, sorted.
    skipped: Vec<u64>,
    /// (data row, reason) of the first failures.
    shown: Vec<(u64, String)>,
}

impl Tally {
    fn fail(&mut self, row: u64, reason: String) {
        self.skipped.push(row);
        self.show(row, reason);
    }

    fn show(&mut self, row: u64, reason: String) {
        self.shown.push((row, reason));
        if self.shown.len() > SHOW_FAILURES * 4 {
            self.shown.sort_by_key(|(r, _)| *r);
            self.shown.truncate(SHOW_FAILURES);
        }
    }

    fn server_errors(&mut self, errors: &[RowErrorInfo], format: FileFormat) {
        for e in errors.iter().take(SHOW_FAILURES * 2) {
            let row = row_of_op(e.op_index as u64, &self.skipped);
            self.show(
                row,
                format!(
                    "{}: {}: {}",
                    locate(format, row),
                    e.kind.as_str_name(),
                    e.message
                ),
            );
        }
    }
}

/// `cairn table insert`
pub async fn insert(a: InsertArgs) -> ToolResult<()> {
    if a.batch_rows == 0 {
        return Err("--batch-rows must be at least 1".into());
    }
    let format = match a.format {
        Some(f) => f,
        None => format_from_extension(&a.file)?,
    };
    let is_tsv = a
        .file
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("tsv"));
    let delimiter = match a.delimiter {
        Some(c) if c.is_ascii() => c as u8,
        Some(c) => return Err(format!("--delimiter '{c}' must be one ASCII character").into()),
        None if is_tsv => b'\t',
        None => b',',
    };
    let client = a.conn.connect().await?;
    let table = client.open_table(&a.name).await?;
    let schema = table.schema.clone();
    let path = a.file.clone();
    let (batch_rows, skip_unknown) = (a.batch_rows, a.skip_unknown_columns);
    let source = {
        let schema = schema.clone();
        tokio::task::spawn_blocking(move || {
            open_source(&path, format, &schema, batch_rows, delimiter, skip_unknown)
        })
        .await
        .map_err(|e| format!("the file reader thread failed: {e}"))??
    };
    if !source.ignored.is_empty() {
        eprintln!(
            "ignoring file column(s) the table lacks: {}",
            source.ignored.join(", ")
        );
    }
    let targets = source.targets.clone();
    let total_rows = source.total_rows;

    // The file is read on a blocking thread, a few batches ahead of the writes.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, String>>(4);
    let batches = source.batches;
    let reader = tokio::task::spawn_blocking(move || {
        for b in batches {
            let stop = b.is_err();
            if tx.blocking_send(b.map_err(|e| e.to_string())).is_err() || stop {
                break;
            }
        }
    });

    let bar = match total_rows {
        Some(n) => {
            let b = ProgressBar::new(n);
            b.set_style(ProgressStyle::with_template(
                "[{elapsed_precise}] {bar:40} {human_pos}/{human_len} rows ({per_sec}, eta {eta})",
            )?);
            b
        }
        None => {
            let b = ProgressBar::new_spinner();
            b.set_style(ProgressStyle::with_template(
                "[{elapsed_precise}] {spinner} {human_pos} rows ({per_sec})",
            )?);
            b
        }
    };

    let kind = if a.upsert {
        OpKind::Upsert
    } else {
        OpKind::Insert
    };
    let mut session = client.new_session(&table);
    session.set_flush_mode(FlushMode::AutoFlushBackground);
    session.set_batch_rows(a.batch_rows);
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut reader_error: Option<String> = None;
    let mut fatal: Option<ToolError> = None;
    let mut stopped = false;

    'read: while let Some(item) = rx.recv().await {
        let batch = match item {
            Ok(b) => b,
            Err(e) => {
                reader_error = Some(e);
                break;
            }
        };
        let first_row = tally.read;
        tally.read += batch.num_rows() as u64;
        let converted = match convert_batch(&batch, &targets, &schema, kind, first_row, format) {
            Ok(c) => c,
            Err(e) => {
                fatal = Some(e.into());
                break;
            }
        };
        // Failures and operations interleave by row; keep `skipped` sorted.
        let mut failed = converted.failed.into_iter().peekable();
        for (row, op) in converted.ops {
            while let Some((r, _)) = failed.peek()
                && *r < row
            {
                if let Some((r, reason)) = failed.next() {
                    tally.fail(r, reason);
                }
            }
            match session.apply(op).await {
                Ok(()) => tally.applied += 1,
                Err(e @ (ClientError::Common(_) | ClientError::InvalidArgument(_))) => {
                    tally.fail(row, format!("{}: {e}", locate(format, row)));
                }
                Err(e) => {
                    fatal = Some(e.into());
                    break 'read;
                }
            }
        }
        for (r, reason) in failed {
            tally.fail(r, reason);
        }
        bar.inc(batch.num_rows() as u64);
        if a.max_failures > 0 && tally.skipped.len() as u64 > a.max_failures {
            stopped = true;
            break;
        }
    }
    drop(rx);
    let flushed = session.flush().await;
    bar.finish_and_clear();
    let elapsed = start.elapsed();
    // The reader stops at its next send once the channel is closed.
    let _ = reader.await;

    let mut in_doubt = 0u64;
    let mut server_failed = 0u64;
    let mut flush_error: Option<String> = None;
    match flushed {
        Ok(errors) => {
            server_failed = errors.len() as u64;
            tally.server_errors(&errors, format);
        }
        Err(ClientError::WriteFailed {
            cause,
            failed_ops,
            row_errors,
        }) => {
            server_failed = row_errors.len() as u64;
            in_doubt = failed_ops.len() as u64;
            tally.server_errors(&row_errors, format);
            flush_error = Some(cause.to_string());
        }
        Err(e) => {
            flush_error = Some(e.to_string());
            in_doubt = tally.applied;
        }
    }
    let inserted = tally.applied.saturating_sub(server_failed + in_doubt);
    let failed = tally.skipped.len() as u64 + server_failed;
    let verb = if a.upsert { "upserted" } else { "inserted" };
    println!(
        "{verb} {} row(s) into '{}' from {} in {:.2} s ({} rows/s)",
        group_thousands(inserted),
        table.name,
        a.file.display(),
        elapsed.as_secs_f64(),
        per_sec(inserted, elapsed)
    );
    if failed > 0 {
        println!("{} row(s) failed:", group_thousands(failed));
        tally.shown.sort_by_key(|(r, _)| *r);
        for (_, reason) in tally.shown.iter().take(SHOW_FAILURES) {
            println!("  {reason}");
        }
        let listed = tally.shown.len().min(SHOW_FAILURES) as u64;
        if failed > listed {
            println!("  … and {} more", group_thousands(failed - listed));
        }
    }
    if in_doubt > 0 {
        println!(
            "{} row(s) may or may not have been written: {}. Load the file again with \
             --upsert to make sure every row is there",
            group_thousands(in_doubt),
            flush_error
                .as_deref()
                .unwrap_or("the write did not complete")
        );
    }
    if let Some(e) = fatal {
        return Err(format!(
            "the load stopped after {} row(s) of the file: {e}",
            tally.read
        )
        .into());
    }
    if let Some(e) = reader_error {
        return Err(format!(
            "reading '{}' failed after {} row(s): {e}",
            a.file.display(),
            tally.read
        )
        .into());
    }
    if let Some(e) = flush_error
        && in_doubt == 0
    {
        return Err(e.into());
    }
    if stopped {
        return Err(format!(
            "stopped after more than {} rows failed (--max-failures); the rest of the file was not read",
            a.max_failures
        )
        .into());
    }
    if failed + in_doubt > 0 {
        return Err(format!(
            "{} of {} row(s) were not {verb}",
            group_thousands(failed + in_doubt),
            group_thousands(tally.read)
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::parse::build_schema;
    use arrow::array::{Int32Array, StringArray};

    fn schema() -> Schema {
        build_schema(
            "id:int64,name:string?,price:decimal(10,2),qty:int32=1,ts:timestamp?",
            "id",
        )
        .unwrap()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn formats_come_from_extensions() {
        assert_eq!(
            format_from_extension(Path::new("a/b.CSV")).unwrap(),
            FileFormat::Csv
        );
        assert_eq!(
            format_from_extension(Path::new("x.parquet")).unwrap(),
            FileFormat::Parquet
        );
        assert!(format_from_extension(Path::new("x.json")).is_err());
        assert!(format_from_extension(Path::new("noext")).is_err());
    }

    #[test]
    fn columns_map_by_name() {
        let s = schema();
        assert_eq!(
            map_columns(&names(&["price", "id"]), &s, false).unwrap(),
            vec![Some(2), Some(0)]
        );
        let e = map_columns(&names(&["id", "price", "color"]), &s, false).unwrap_err();
        assert!(
            e.contains("color") && e.contains("--skip-unknown-columns"),
            "{e}"
        );
        assert_eq!(
            map_columns(&names(&["id", "price", "color"]), &s, true).unwrap(),
            vec![Some(0), Some(2), None]
        );
        let e = map_columns(&names(&["name", "price"]), &s, false).unwrap_err();
        assert!(e.contains("id"), "{e}");
        let e = map_columns(&names(&["id"]), &s, false).unwrap_err();
        assert!(e.contains("price") && !e.contains("qty"), "{e}");
        assert!(map_columns(&names(&["id", "id", "price"]), &s, false).is_err());
    }

    #[test]
    fn text_batches_convert_with_row_level_errors() {
        let s = schema();
        let batch = RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(StringArray::from(vec![
                    Some("1"),
                    Some("2"),
                    Some("x"),
                    Some("4"),
                ])) as ArrayRef,
            ),
            (
                "price",
                Arc::new(StringArray::from(vec![
                    Some("1.50"),
                    Some("abc"),
                    Some("3"),
                    None,
                ])) as ArrayRef,
            ),
            (
                "qty",
                Arc::new(StringArray::from(vec![
                    None,
                    Some("5"),
                    Some("6"),
                    Some("7"),
                ])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(StringArray::from(vec![
                    Some("2024-01-01T00:00:00Z"),
                    None,
                    None,
                    None,
                ])) as ArrayRef,
            ),
        ])
        .unwrap();
        let c = convert_batch(
            &batch,
            &[0, 2, 3, 4],
            &s,
            OpKind::Insert,
            10,
            FileFormat::Csv,
        )
        .unwrap();
        // Row 2 has a bad price, row 3 a bad id; row 4's NULL price is left to the
        // session's validation (NOT NULL without default).
        assert_eq!(c.ops.len(), 2);
        assert_eq!(c.failed.len(), 2);
        assert_eq!(c.failed[0].0, 11);
        assert!(
            c.failed[0]
                .1
                .starts_with("line 13: column 'price': cannot read 'abc' as decimal(10,2)"),
            "{}",
            c.failed[0].1
        );
        assert!(c.failed[1].1.contains("column 'id'"), "{}", c.failed[1].1);
        let (row, op) = &c.ops[0];
        assert_eq!(*row, 10);
        assert_eq!(op.kind, OpKind::Insert);
        assert_eq!(op.values[0], Some(Value::Int64(1)));
        assert_eq!(op.values[1], None, "name is not in the file");
        assert_eq!(op.values[2], Some(Value::Decimal(150)));
        assert_eq!(op.values[3], None, "empty qty takes the column default");
        assert_eq!(op.values[4], Some(Value::Timestamp(1_704_067_200_000_000)));
        assert!(op.validate(&s).is_ok());
        let (row, op) = &c.ops[1];
        assert_eq!(*row, 13);
        assert_eq!(op.values[2], Some(Value::Null));
        assert!(op.validate(&s).is_err());
    }

    #[test]
    fn typed_batches_are_cast() {
        let s = build_schema("id:int64,v:double?", "id").unwrap();
        let batch = RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
            (
                "v",
                Arc::new(Int32Array::from(vec![Some(3), None])) as ArrayRef,
            ),
        ])
        .unwrap();
        let c = convert_batch(&batch, &[0, 1], &s, OpKind::Upsert, 0, FileFormat::Parquet).unwrap();
        assert!(c.failed.is_empty());
        assert_eq!(
            c.ops[0].1.values,
            vec![Some(Value::Int64(1)), Some(Value::Double(3.0))]
        );
        assert_eq!(
            c.ops[1].1.values,
            vec![Some(Value::Int64(2)), Some(Value::Null)]
        );
        let s = build_schema("id:int64,d:date", "id").unwrap();
        let batch = RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
            (
                "d",
                Arc::new(arrow::array::ListArray::new_null(
                    Arc::new(Field::new("item", ArrowType::Int32, true)),
                    1,
                )) as ArrayRef,
            ),
        ])
        .unwrap();
        let e = convert_batch(&batch, &[0, 1], &s, OpKind::Insert, 0, FileFormat::Parquet)
            .err()
            .unwrap();
        assert!(e.contains("column 'd'"), "{e}");
        assert_eq!(locate(FileFormat::Parquet, 0), "row 1");
    }

    #[test]
    fn op_indexes_map_back_to_file_rows() {
        // Rows 1 and 2 and 5 failed before reaching the session.
        let skipped = [1, 2, 5];
        let rows: Vec<u64> = (0..5).map(|k| row_of_op(k, &skipped)).collect();
        assert_eq!(rows, vec![0, 3, 4, 6, 7]);
        assert_eq!(row_of_op(3, &[]), 3);
    }

    #[test]
    fn parquet_files_load_into_batches() {
        use arrow::array::{Float32Array, Int64Array, TimestampMillisecondArray};
        let dir = std::env::temp_dir().join(format!("cairn-insert-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let batch = RecordBatch::try_from_iter(vec![
            (
                "extra",
                Arc::new(Int64Array::from(vec![9, 9, 9])) as ArrayRef,
            ),
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            (
                "price",
                Arc::new(Float32Array::from(vec![Some(1.25), None, Some(2.0)])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(vec![
                    Some(1000),
                    None,
                    Some(2),
                ])) as ArrayRef,
            ),
        ])
        .unwrap();
        let file = File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let s = schema();
        let e = open_source(&path, FileFormat::Parquet, &s, 2, b',', false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("extra"), "{e}");
        let src = open_source(&path, FileFormat::Parquet, &s, 2, b',', true).unwrap();
        assert_eq!(src.total_rows, Some(3));
        assert_eq!(src.targets, vec![0, 2, 4]);
        let mut row = 0;
        let mut ops = Vec::new();
        for b in src.batches {
            let b = b.unwrap();
            assert_eq!(b.num_columns(), 3, "the ignored column is not read");
            let c = convert_batch(
                &b,
                &src.targets,
                &s,
                OpKind::Upsert,
                row,
                FileFormat::Parquet,
            )
            .unwrap();
            assert!(c.failed.is_empty());
            row += b.num_rows() as u64;
            ops.extend(c.ops);
        }
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0].1.values[2], Some(Value::Decimal(125)));
        assert_eq!(ops[0].1.values[4], Some(Value::Timestamp(1_000_000)));
        assert_eq!(ops[2].0, 2);
        assert_eq!(ops[2].1.values[4], Some(Value::Timestamp(2_000)));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn csv_files_load_into_batches() {
        let dir = std::env::temp_dir().join(format!("cairn-insert-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        std::fs::write(&path, "id, price ,extra\n1,2.5,x\n2,\"3\",y\n3,,z\n").unwrap();
        let s = schema();
        assert!(open_source(&path, FileFormat::Csv, &s, 2, b',', false).is_err());
        let src = open_source(&path, FileFormat::Csv, &s, 2, b',', true).unwrap();
        assert_eq!(src.targets, vec![0, 2]);
        assert_eq!(src.ignored, vec!["extra".to_string()]);
        let batches: Vec<RecordBatch> = src.batches.map(|b| b.unwrap()).collect();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].num_columns(), 2);
        let c = convert_batch(
            &batches[1],
            &src.targets,
            &s,
            OpKind::Insert,
            2,
            FileFormat::Csv,
        )
        .unwrap();
        assert_eq!(c.ops[0].1.values[2], Some(Value::Null));
        std::fs::remove_dir_all(&dir).ok();
    }
}
