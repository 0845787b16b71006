//! `COPY table FROM 'file'`: bulk loading CSV and Parquet files.
//!
//! The file is read on a blocking thread into Arrow batches shaped like the table
//! (columns matched by name, cast to the column types, omitted columns filled with
//! their defaults or NULL) and handed to the client's bulk loader
//! ([`cairn_client::BulkLoader`]): rows are routed to their tablets and sent in chunks
//! of about 16 MiB, which every replica writes straight into DiskRowSets — no
//! MemRowSet, no row-by-row apply, no later flush. The semantics are INSERT's: a row
//! whose key exists fails the statement (the rows of other chunks stay loaded). When
//! the load is done, every replica flushes its MemRowSet too, in case the load
//! re-inserted rows that had been deleted (those go the row path).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, new_null_array};
use arrow::datatypes::{Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, Table};
use cairn_proto::RowErrorKind;

use crate::error::{Result, SqlError};

/// The file formats COPY reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFormat {
    /// Comma (or other delimiter) separated values.
    Csv,
    /// Apache Parquet.
    Parquet,
}

/// What to load and how.
#[derive(Clone, Debug)]
pub struct CopySource {
    /// The file on the coordinator's filesystem.
    pub path: String,
    /// Its format.
    pub format: CopyFormat,
    /// Columns the file holds, in file order (empty: all table columns).
    pub columns: Vec<String>,
    /// CSV: whether the first line is a header.
    pub header: bool,
    /// CSV: the field delimiter.
    pub delimiter: u8,
}

/// Loads `src` into `table`; returns the number of rows written.
pub async fn copy_from(client: Client, table: Table, src: CopySource) -> Result<u64> {
    if !Path::new(&src.path).is_file() {
        return Err(SqlError::other(
            "58P01",
            format!(
                "could not open file '{}' for COPY: no such file (the path is read on the \
                 server that runs the statement)",
                src.path
            ),
        ));
    }
    let schema = table.schema.clone();
    let columns: Vec<usize> = if src.columns.is_empty() {
        (0..schema.num_columns()).collect()
    } else {
        src.columns
            .iter()
            .map(|c| schema.index_of(c))
            .collect::<cairn_common::Result<_>>()?
    };
    let table_arrow = schema.to_arrow();
    let src_path = src.path.clone();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(4);
    let shape = Shaper {
        table: table.clone(),
        table_arrow: table_arrow.clone(),
        columns: columns.clone(),
    };
    let reader = tokio::task::spawn_blocking(move || -> Result<()> {
        let send = |b: Result<RecordBatch>| -> bool { tx.blocking_send(b).is_ok() };
        let open = || {
            File::open(&src.path).map_err(|e| {
                SqlError::other("58030", format!("could not read '{}': {e}", src.path))
            })
        };
        match src.format {
            CopyFormat::Csv => {
                let fields: Vec<Field> = columns
                    .iter()
                    .map(|&i| table_arrow.field(i).as_ref().clone().with_nullable(true))
                    .collect();
                let file_schema = Arc::new(ArrowSchema::new(fields));
                let reader = arrow::csv::ReaderBuilder::new(file_schema)
                    .with_header(src.header)
                    .with_delimiter(src.delimiter)
                    .with_batch_size(8192)
                    .build(open()?)?;
                for b in reader {
                    let b = b.map_err(|e| {
                        SqlError::other("22P04", format!("bad CSV in '{}': {e}", src.path))
                    });
                    if !send(b.and_then(|b| shape.shape(&b))) {
                        break;
                    }
                }
            }
            CopyFormat::Parquet => {
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(open()?)
                        .map_err(|e| {
                            SqlError::other(
                                "22P04",
                                format!("bad Parquet file '{}': {e}", src.path),
                            )
                        })?
                        .with_batch_size(8192)
                        .build()
                        .map_err(|e| SqlError::other("22P04", e.to_string()))?;
                for b in reader {
                    let b = b.map_err(SqlError::from);
                    if !send(b.and_then(|b| shape.shape_by_name(&b))) {
                        break;
                    }
                }
            }
        }
        Ok(())
    });
    let loaded = async {
        let mut loader = client.bulk_loader(&table).await?;
        while let Some(b) = rx.recv().await {
            loader.add(b?).await?;
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
        let what = match first.kind {
            RowErrorKind::AlreadyPresent => "duplicate key value violates the primary key",
            _ => first.message.as_str(),
        };
        return Err(SqlError::Row {
            kind: first.kind,
            message: format!(
                "{what} (row {} of '{}'); {} other rows of this COPY were loaded \
                 (statements are not atomic across rows)",
                first.row + 1,
                src_path,
                summary.rows_written
            ),
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
                Some(a) => arrow::compute::cast(&a, &want).map_err(|e| {
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
