//! `COPY table FROM …`: bulk loading from files on the server and from the client.
//!
//! The input — a CSV or Parquet file, or the bytes a client streams with `COPY … FROM
//! STDIN` in PostgreSQL's text or CSV format — is read on a blocking thread into Arrow
//! batches shaped like the table (columns matched by position or name, cast to the
//! column types, omitted columns filled with their defaults or NULL) and handed to the
//! client's bulk loader ([`cairn_client::BulkLoader`]): rows are routed to their tablets
//! and sent in chunks of about 16 MiB, which every replica writes straight into
//! DiskRowSets — no MemRowSet, no row-by-row apply, no later flush. The semantics are
//! INSERT's: a row whose key exists fails the statement (the rows of chunks already
//! sent stay loaded: COPY is not atomic). When the load is done, every replica flushes
//! its MemRowSet too, in case the load re-inserted rows that had been deleted (those go
//! the row path). On a table with subspaces each tablet's leader chains the rows it
//! loaded into the subspaces before it answers, as it does a write's.
//!
//! Inside a transaction block ([`InTransaction`]) the rows are instead written as
//! INSERT writes them: provisional writes of the block's transaction, which its
//! statements see, COMMIT makes visible and ROLLBACK undoes, as in PostgreSQL.
//!
//! A `COPY … FROM STDIN` is a [`CopyIn`]: the front end feeds it the client's data as
//! it arrives ([`CopyIn::write`], with backpressure) and ends it with
//! [`CopyIn::finish`] or [`CopyIn::abort`]. [`text`] reads PostgreSQL's text format.

mod text;

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, StringArray, new_null_array};
use arrow::compute::CastOptions;
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use cairn_client::{Client, Table};
use cairn_proto::RowErrorKind;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;

use crate::error::{Result, SqlError};
use crate::options::InsertMode;
use crate::parser::{CopyFormat, CopyOptions};
use crate::txn::SessionTxn;
use crate::write::{WriteKind, WriteTarget};

/// Rows per batch handed to the loader.
const BATCH_ROWS: usize = 8192;

/// Where the rows of a COPY come from.
pub enum CopyInput {
    /// A file on the server running the statement.
    File(String),
    /// Bytes the client streams (`COPY … FROM STDIN`).
    Stream(StreamReader),
}

impl CopyInput {
    /// How messages name the input.
    fn describe(&self) -> String {
        match self {
            CopyInput::File(p) => format!("'{p}'"),
            CopyInput::Stream(_) => "STDIN".into(),
        }
    }
}

/// The transaction block a COPY runs in: its rows are that transaction's writes.
#[derive(Clone)]
pub struct InTransaction {
    /// The block's transaction.
    pub txn: Arc<SessionTxn>,
    /// Rows per write request (`cairn.write_batch_rows`).
    pub batch_rows: usize,
    /// `cairn.max_atomic_rows`.
    pub max_atomic_rows: usize,
}

/// Loads `input` in the format of `options` into `table` (`columns`: the input's
/// columns in order; empty: all of the table's); returns the number of rows written.
/// With `in_txn` the rows are written in that transaction (see the module docs).
pub async fn copy_from(
    client: Client,
    table: Table,
    columns: Vec<String>,
    input: CopyInput,
    options: CopyOptions,
    in_txn: Option<InTransaction>,
) -> Result<u64> {
    if let CopyInput::File(path) = &input
        && !Path::new(path).is_file()
    {
        return Err(SqlError::other(
            "58P01",
            format!(
                "could not open file '{path}' for COPY: no such file (the path is read on the \
                 server that runs the statement; a client's file is loaded with psql's \\copy \
                 or COPY ... FROM STDIN)"
            ),
        ));
    }
    let schema = table.schema.clone();
    let hidden = schema.auto_id_index();
    let columns: Vec<usize> = if columns.is_empty() {
        schema.visible_indexes()
    } else {
        columns
            .iter()
            .map(|c| match schema.index_of(c) {
                Ok(i) if Some(i) == hidden => {
                    Err(cairn_common::CommonError::UnknownColumn(c.clone()))
                }
                r => r,
            })
            .collect::<cairn_common::Result<_>>()?
    };
    let table_arrow = schema.to_arrow();
    let what = input.describe();
    let what_read = what.clone();
    let (tx, rx) = mpsc::channel::<Result<RecordBatch>>(4);
    let shape = Shaper {
        table: table.clone(),
        table_arrow: table_arrow.clone(),
        columns: columns.clone(),
    };
    let reader = tokio::task::spawn_blocking(move || -> Result<()> {
        let send = |b: Result<RecordBatch>| -> bool { tx.blocking_send(b).is_ok() };
        let what = what_read;
        if options.format == CopyFormat::Parquet {
            let CopyInput::File(path) = input else {
                return Err(SqlError::unsupported("Parquet is read from files only"));
            };
            let file = File::open(&path)
                .map_err(|e| SqlError::other("58030", format!("could not read {what}: {e}")))?;
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| SqlError::other("22P04", format!("bad Parquet file {what}: {e}")))?
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| SqlError::other("22P04", e.to_string()))?;
            for b in reader {
                let b = b.map_err(SqlError::from);
                let failed = b.is_err();
                if !send(b.and_then(|b| shape.shape_by_name(&b))) || failed {
                    break;
                }
            }
            return Ok(());
        }
        let source: Box<dyn Read + Send> =
            match input {
                CopyInput::File(path) => Box::new(File::open(&path).map_err(|e| {
                    SqlError::other("58030", format!("could not read '{path}': {e}"))
                })?),
                CopyInput::Stream(s) => Box::new(s),
            };
        if options.format == CopyFormat::Text {
            let mut reader = text::TextReader::new(
                std::io::BufReader::with_capacity(1 << 16, source),
                &options,
                columns.len(),
            );
            while let Some(b) = reader.next_batch(BATCH_ROWS).transpose() {
                let failed = b.is_err();
                if !send(b.and_then(|b| shape.shape(&b))) || failed {
                    break;
                }
            }
        } else {
            // Every field is read as text and then cast like the text format's, so
            // that both accept the same values (PostgreSQL's booleans, bytea hex, …).
            let fields: Vec<Field> = columns
                .iter()
                .map(|&i| Field::new(table_arrow.field(i).name(), ArrowType::Utf8, true))
                .collect();
            let file_schema = Arc::new(ArrowSchema::new(fields));
            let mut builder = arrow::csv::ReaderBuilder::new(file_schema)
                .with_header(options.header)
                .with_delimiter(options.delimiter)
                .with_batch_size(BATCH_ROWS);
            if !options.null.is_empty() {
                let null = regex::Regex::new(&format!("^{}$", regex::escape(&options.null)))
                    .map_err(|e| SqlError::other("22023", e.to_string()))?;
                builder = builder.with_null_regex(null);
            }
            for b in builder.build(source)? {
                let b =
                    b.map_err(|e| SqlError::other("22P04", format!("bad CSV data in {what}: {e}")));
                let failed = b.is_err();
                if !send(b.and_then(|b| shape.shape(&b))) || failed {
                    break;
                }
            }
        }
        Ok(())
    });
    // Inside a transaction the rows are its provisional writes. Otherwise they are
    // bulk loaded (on a table with subspaces the point leaders chain them into the
    // subspaces as they would a write).
    if let Some(t) = in_txn {
        let written =
            load_by_rows(&client, &table, rx, t.txn, t.batch_rows, t.max_atomic_rows).await;
        reader
            .await
            .map_err(|e| SqlError::other("XX000", format!("COPY reader failed: {e}")))??;
        return written;
    }
    let mut rx = rx;
    let loaded = async {
        let mut loader = client.bulk_loader(&table).await?;
        while let Some(b) = rx.recv().await {
            let mut b = b?;
            if let Some(h) = hidden {
                // The hidden key of a table without a primary key: fresh values.
                let ids = client.next_auto_ids(&table, b.num_rows()).await?;
                let mut columns = b.columns().to_vec();
                columns[h] = Arc::new(arrow::array::Int64Array::from(ids));
                b = RecordBatch::try_new(b.schema(), columns)?;
            }
            loader.add(b).await?;
        }
        Ok::<_, SqlError>(loader.finish().await?)
    }
    .await;
    // Stop the reader if the load failed first.
    drop(rx);
    let read = reader
        .await
        .map_err(|e| SqlError::other("XX000", format!("COPY reader failed: {e}")))?;
    // A reading error is the cause of whatever the loader saw.
    read?;
    let summary = loaded?;
    if let Some(first) = summary.row_errors.first() {
        let what_went_wrong = match first.kind {
            RowErrorKind::AlreadyPresent => "duplicate key value violates the primary key",
            _ => first.message.as_str(),
        };
        return Err(SqlError::Row {
            kind: first.kind,
            message: format!(
                "{what_went_wrong} (row {} of {what}); {} other rows of this COPY were loaded \
                 (COPY is not atomic across rows)",
                first.row + 1,
                summary.rows_written
            ),
            written: summary.rows_written,
        });
    }
    let written = summary.rows_written;
    // Rows that re-inserted deleted keys went the row path into the MemRowSets: flush
    // them too, so that everything the load wrote is scanned in columnar form. A
    // replica that cannot flush now flushes later; the load itself succeeded.
    match client.flush_table(&table).await {
        Ok(failed) => {
            for f in failed {
                tracing::warn!(table = %table.name, "COPY: flushing after the load: {f}");
            }
        }
        Err(e) => tracing::warn!(table = %table.name, "COPY: flushing after the load: {e}"),
    }
    Ok(written)
}

/// Writes the batches `rx` receives (shaped like the whole table) as INSERT rows of
/// the transaction `txn`, `batch_rows` per request; the rows of a table without a
/// primary key get fresh hidden keys on the way (`crate::write`).
async fn load_by_rows(
    client: &Client,
    table: &Table,
    mut rx: mpsc::Receiver<Result<RecordBatch>>,
    txn: Arc<SessionTxn>,
    batch_rows: usize,
    max_atomic_rows: usize,
) -> Result<u64> {
    let visible = table.schema.visible_indexes();
    let out = Arc::new(table.schema.to_arrow().project(&visible)?);
    let batches = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(move |b| {
        b.and_then(|b| Ok(b.project(&visible)?))
            .map_err(|e| DataFusionError::External(Box::new(e)))
    });
    let target = WriteTarget {
        client: client.clone(),
        table: table.clone(),
        kind: WriteKind::Insert(InsertMode::Insert),
        batch_rows,
        max_atomic_rows,
    };
    target
        .write_rows(
            Box::pin(RecordBatchStreamAdapter::new(out, batches)),
            Arc::new(TaskContext::default()),
            Some(txn),
        )
        .await
}

/// A `COPY … FROM STDIN` under way: the load runs as a task that reads what
/// [`CopyIn::write`] hands it.
pub struct CopyIn {
    /// Chunks of client data for the reader; `None` once finished.
    data: Option<mpsc::Sender<Bytes>>,
    /// Finds the end-of-data line (`\.`) that psql sends.
    end: EndOfData,
    /// The load ([`copy_from`] over a [`StreamReader`]).
    load: JoinHandle<Result<u64>>,
    /// How many columns each row has.
    columns: usize,
    /// The input format.
    format: CopyFormat,
}

impl std::fmt::Debug for CopyIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyIn")
            .field("columns", &self.columns)
            .field("format", &self.format)
            .finish()
    }
}

impl CopyIn {
    /// Starts loading into `table` from data still to come (in the transaction
    /// `in_txn`, if any).
    pub fn start(
        client: Client,
        table: Table,
        columns: Vec<String>,
        options: CopyOptions,
        in_txn: Option<InTransaction>,
    ) -> Self {
        let n = if columns.is_empty() {
            table.schema.visible_indexes().len()
        } else {
            columns.len()
        };
        let format = options.format;
        // A few chunks in flight: enough to keep the reader busy, little memory.
        let (tx, rx) = mpsc::channel(16);
        let reader = StreamReader {
            rx,
            chunk: Bytes::new(),
        };
        let load = tokio::spawn(copy_from(
            client,
            table,
            columns,
            CopyInput::Stream(reader),
            options,
            in_txn,
        ));
        CopyIn {
            data: Some(tx),
            end: EndOfData::new(format == CopyFormat::Csv),
            load,
            columns: n,
            format,
        }
    }

    /// The number of columns of each input row.
    pub fn columns(&self) -> usize {
        self.columns
    }

    /// The input format.
    pub fn format(&self) -> CopyFormat {
        self.format
    }

    /// Hands the next chunk of client data to the load; waits while the load is
    /// behind. After the load failed, data is dropped: the error comes from
    /// [`CopyIn::finish`].
    pub async fn write(&mut self, data: Bytes) {
        let data = self.end.scan(data);
        self.send(data).await;
    }

    async fn send(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        if let Some(tx) = &self.data
            && tx.send(data).await.is_err()
        {
            self.data = None;
        }
    }

    /// Ends the input and waits for the load; returns the number of rows loaded.
    pub async fn finish(mut self) -> Result<u64> {
        let rest = self.end.finish();
        self.send(rest).await;
        self.data = None;
        (&mut self.load)
            .await
            .map_err(|e| SqlError::other("XX000", format!("COPY failed: {e}")))?
    }

    /// Stops the load (the client sent CopyFail or went away). Rows of chunks already
    /// sent to the tablets stay loaded.
    pub fn abort(self) {
        drop(self);
    }
}

impl Drop for CopyIn {
    /// A load nobody finishes (a front end without COPY data, a dropped connection)
    /// stops rather than committing what it has read so far.
    fn drop(&mut self) {
        self.load.abort();
    }
}

/// Cuts a stream of COPY data at the end-of-data line: `\.` alone on a line, which
/// psql sends after the rows (and which ends the data in PostgreSQL, in text and in
/// CSV outside quoted values). Chunks may split the marker anywhere: bytes that may
/// begin it are held back until the next chunk tells.
struct EndOfData {
    /// CSV: quotes matter (a `\.` line inside a quoted value is data).
    csv: bool,
    in_quotes: bool,
    at_line_start: bool,
    /// The marker was seen: everything after it is dropped.
    ended: bool,
    /// Bytes held back at a line start that may be the marker.
    held: Vec<u8>,
}

impl EndOfData {
    fn new(csv: bool) -> Self {
        EndOfData {
            csv,
            in_quotes: false,
            at_line_start: true,
            ended: false,
            held: Vec::new(),
        }
    }

    /// The part of `chunk` (after what was held back) that is data for sure.
    fn scan(&mut self, chunk: Bytes) -> Bytes {
        if self.ended {
            return Bytes::new();
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(&chunk);
        let mut i = 0;
        while i < buf.len() {
            if self.at_line_start && !self.in_quotes && buf[i] == b'\\' {
                let rest = &buf[i..];
                match marker(rest) {
                    Marker::Yes => {
                        self.ended = true;
                        buf.truncate(i);
                        return Bytes::from(buf);
                    }
                    Marker::Maybe => {
                        self.held = rest.to_vec();
                        buf.truncate(i);
                        return Bytes::from(buf);
                    }
                    Marker::No => {}
                }
            }
            match buf[i] {
                b'\n' if !self.in_quotes => self.at_line_start = true,
                b'"' if self.csv => {
                    self.in_quotes = !self.in_quotes;
                    self.at_line_start = false;
                }
                _ => self.at_line_start = false,
            }
            i += 1;
        }
        Bytes::from(buf)
    }

    /// What is left at the end of the input: held bytes that turned out to be data.
    fn finish(&mut self) -> Bytes {
        let held = std::mem::take(&mut self.held);
        if self.ended || held == b"\\." || held == b"\\.\r" {
            return Bytes::new();
        }
        Bytes::from(held)
    }
}

enum Marker {
    Yes,
    Maybe,
    No,
}

/// Whether `s` (starting at a line start with a backslash) is the end-of-data line.
fn marker(s: &[u8]) -> Marker {
    match s {
        [b'\\'] | [b'\\', b'.'] | [b'\\', b'.', b'\r'] => Marker::Maybe,
        [b'\\', b'.', b'\n', ..] | [b'\\', b'.', b'\r', b'\n', ..] => Marker::Yes,
        _ => Marker::No,
    }
}

/// The client's COPY data as a [`Read`]er, for the blocking reader thread.
pub struct StreamReader {
    rx: mpsc::Receiver<Bytes>,
    chunk: Bytes,
}

impl Read for StreamReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(c) => self.chunk = c,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        let _ = self.chunk.split_to(n);
        Ok(n)
    }
}

/// Turns file batches into table-shaped batches.
struct Shaper {
    table: Table,
    table_arrow: SchemaRef,
    columns: Vec<usize>,
}

impl Shaper {
    /// A batch whose columns are `self.columns` in order.
    fn shape(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let mut by_index: Vec<Option<ArrayRef>> = vec![None; self.table_arrow.fields().len()];
        for (pos, &i) in self.columns.iter().enumerate() {
            by_index[i] = Some(b.column(pos).clone());
        }
        self.finish(by_index, b.num_rows())
    }

    /// A batch whose columns are found by name.
    fn shape_by_name(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let mut by_index: Vec<Option<ArrayRef>> = vec![None; self.table_arrow.fields().len()];
        for &i in &self.columns {
            let name = self.table_arrow.field(i).name();
            let Some(pos) = b.schema().index_of(name).ok() else {
                return Err(SqlError::other(
                    "42703",
                    format!(
                        "the Parquet file has no column '{name}' of table '{}'",
                        self.table.name
                    ),
                ));
            };
            by_index[i] = Some(b.column(pos).clone());
        }
        self.finish(by_index, b.num_rows())
    }

    fn finish(&self, by_index: Vec<Option<ArrayRef>>, rows: usize) -> Result<RecordBatch> {
        let schema = &self.table.schema;
        let mut out = Vec::with_capacity(by_index.len());
        for (i, a) in by_index.into_iter().enumerate() {
            let c = schema.column(i);
            let want = c.data_type.to_arrow();
            let a = match a {
                Some(a) if a.data_type() == &want => a,
                Some(a) => cast(&a, &want).map_err(|e| {
                    SqlError::other(
                        "22P02",
                        format!("column '{}' cannot be read as {}: {e}", c.name, want),
                    )
                })?,
                None => match &c.default {
                    Some(v) => cairn_common::types::array_of_repeated(&c.data_type, v, rows)?,
                    None => new_null_array(&want, rows),
                },
            };
            out.push(a);
        }
        let nullable_schema = Arc::new(ArrowSchema::new(
            self.table_arrow
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        Ok(RecordBatch::try_new(nullable_schema, out)?)
    }
}

/// Casts an input column to its table type. A value that does not convert is an
/// error, never a silent NULL; text for a binary column is PostgreSQL's `\\x…` hex.
fn cast(a: &ArrayRef, want: &ArrowType) -> std::result::Result<ArrayRef, String> {
    if matches!(want, ArrowType::Binary | ArrowType::LargeBinary)
        && let Some(s) = a.as_any().downcast_ref::<StringArray>()
    {
        let bytes = s
            .iter()
            .map(|v| v.map(decode_bytea).transpose())
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let b: ArrayRef = Arc::new(BinaryArray::from_iter(bytes));
        return arrow::compute::cast(&b, want).map_err(|e| e.to_string());
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow::compute::cast_with_options(a, want, &options).map_err(|e| e.to_string())
}

/// PostgreSQL's bytea text: `\x` and hex digits, or the bytes as written.
fn decode_bytea(s: &str) -> std::result::Result<Vec<u8>, String> {
    let Some(hex) = s.strip_prefix("\\x") else {
        return Ok(s.as_bytes().to_vec());
    };
    if hex.len() % 2 != 0 {
        return Err(format!(
            "invalid hexadecimal data: odd number of digits in '{s}'"
        ));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16)
                .map_err(|_| format!("invalid hexadecimal digit in '{s}'"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(csv: bool, chunks: &[&str]) -> String {
        let mut e = EndOfData::new(csv);
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&e.scan(Bytes::copy_from_slice(c.as_bytes())));
        }
        out.extend_from_slice(&e.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_end_of_data_line_ends_the_data() {
        assert_eq!(cut(false, &["1\ta\n\\.\n2\tb\n"]), "1\ta\n");
        // Split anywhere, also before the final newline or at the very end.
        assert_eq!(cut(false, &["1\n\\", ".", "\r\n", "more"]), "1\n");
        assert_eq!(cut(true, &["1,a\n\\."]), "1,a\n");
        // Not the marker: escaped data, a longer line, a quoted CSV value.
        assert_eq!(cut(false, &["\\.x\n", "\\N\n"]), "\\.x\n\\N\n");
        assert_eq!(cut(false, &["a\\.\n"]), "a\\.\n");
        assert_eq!(cut(true, &["1,\"x\n\\.\n\"\n"]), "1,\"x\n\\.\n\"\n");
        assert_eq!(cut(false, &["1\n\\"]), "1\n\\");
    }

    #[test]
    fn casts_fail_loudly_and_read_bytea_hex() {
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("12"), None, Some("x")]));
        let e = cast(&a, &ArrowType::Int64).unwrap_err();
        assert!(e.contains("x"), "{e}");
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("\\x00ff"), Some("ab"), None]));
        let b = cast(&a, &ArrowType::Binary).unwrap();
        let b = b.as_any().downcast_ref::<BinaryArray>().unwrap();
        assert_eq!(b.value(0), &[0u8, 255]);
        assert_eq!(b.value(1), b"ab");
        assert!(b.is_null(2));
        let a: ArrayRef = Arc::new(StringArray::from(vec!["\\x0"]));
        assert!(cast(&a, &ArrowType::Binary).is_err());
    }
}
