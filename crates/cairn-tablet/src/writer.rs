//! Writing new DiskRowSets from batches of rows (MemRowSet flush, rowset compaction and
//! bulk insert).
//!
//! Rows arrive in key order as Arrow batches in base-file form, with their encoded keys
//! and their UNDO and REDO deltas ([`BatchDeltas`]). The writer streams the batches into
//! a Parquet base file, collects keys and deltas by row ordinal, and *rolls* to a new
//! rowset once the base file reaches the target size (32 MiB by default), so no rowset
//! grows unboundedly. Each finished rowset gets its key index and delta files, all
//! fsynced, and a [`RowSetMeta`] listing them with their checksums.
//!
//! Callers build the batches column-wise: a flush gathers the MemRowSet's rows by
//! reference ([`RowsChunk`]), a compaction interleaves the input rowsets' decoded
//! columns. Only rows whose history must be rebuilt go through per-row `Value`s.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_common::types::RowsToColumns;
use cairn_common::{ColumnId, HybridTime, Schema, Value};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::cache::BLOCK_ROWS;
use crate::delta::{DeltaEntry, write_delta_file};
use crate::diskrowset::parquet_column_name;
use crate::error::{Result, TabletError};
use crate::history::FlushedRow;
use crate::keyindex::write_key_index;
use crate::metadata::{BaseFileMeta, FileMeta, RowSetMeta, sync_dir};
use crate::ops::RowChange;

/// Compression codec for base data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// No compression.
    None,
    /// LZ4 (raw block format): fast, the default (as in Kudu).
    Lz4,
    /// Zstandard level 3: smaller, slower.
    Zstd,
    /// Snappy.
    Snappy,
}

impl Codec {
    /// The Parquet compression setting.
    pub fn to_parquet(self) -> Compression {
        match self {
            Codec::None => Compression::UNCOMPRESSED,
            Codec::Lz4 => Compression::LZ4_RAW,
            Codec::Zstd => Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()),
            Codec::Snappy => Compression::SNAPPY,
        }
    }
}

/// Largest dictionary page of a column chunk; a column with more distinct values
/// falls back to plain encoding. A point read that misses the block cache decodes
/// the dictionary of each dictionary-encoded column it reads, so Parquet's default
/// of 1 MiB made a cold lookup of a wide row decompress megabytes; low-cardinality
/// columns, where dictionaries pay off in size and scan speed, fit in this easily.
pub const DICTIONARY_PAGE_BYTES: usize = 64 << 10;

/// Parquet writer settings shared by every base file.
pub fn writer_properties(codec: Codec, rows_per_row_group: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(codec.to_parquet())
        .set_max_row_group_row_count(Some(rows_per_row_group))
        .set_data_page_row_count_limit(BLOCK_ROWS)
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
        .set_write_batch_size(1024)
        .set_statistics_enabled(EnabledStatistics::Page)
        .build()
}

/// The Arrow schema of a base file holding `ids` (Parquet columns are named by id).
pub fn base_arrow_schema(schema: &Schema, ids: &[ColumnId]) -> SchemaRef {
    Arc::new(ArrowSchema::new(
        ids.iter()
            .filter_map(|id| schema.index_of_id(*id).map(|i| schema.column(i)))
            .map(|c| {
                Field::new(
                    parquet_column_name(c.id),
                    c.data_type.to_arrow(),
                    c.nullable,
                )
            })
            .collect::<Vec<_>>(),
    ))
}

/// Writes a whole-file-checksummed Parquet file from batches; returns its metadata.
pub fn write_parquet_file(
    path: &Path,
    name: &str,
    arrow_schema: SchemaRef,
    ids: Vec<ColumnId>,
    props: WriterProperties,
    batches: impl IntoIterator<Item = Result<RecordBatch>>,
) -> Result<BaseFileMeta> {
    let f = File::create(path).map_err(|e| TabletError::io(path, e))?;
    let mut w = ArrowWriter::try_new(f, arrow_schema, Some(props))
        .map_err(|e| TabletError::parquet(path, e))?;
    for b in batches {
        w.write(&b?).map_err(|e| TabletError::parquet(path, e))?;
    }
    let f = w.into_inner().map_err(|e| TabletError::parquet(path, e))?;
    f.sync_all().map_err(|e| TabletError::io(path, e))?;
    file_meta(path, name).map(|m| BaseFileMeta {
        name: m.name,
        crc: m.crc,
        size: m.size,
        column_ids: ids,
    })
}

/// Checksum and size of a written file.
pub fn file_meta(path: &Path, name: &str) -> Result<FileMeta> {
    let bytes = std::fs::read(path).map_err(|e| TabletError::io(path, e))?;
    Ok(FileMeta {
        name: name.to_string(),
        crc: crc32c::crc32c(&bytes),
        size: bytes.len() as u64,
    })
}

/// Settings for writing rowsets.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Roll to a new rowset once the base file reaches this size.
    pub target_rowset_bytes: u64,
    /// Rows per Parquet row group.
    pub rows_per_row_group: usize,
    /// Compression.
    pub codec: Codec,
}

/// The deltas of the rows of a batch given to [`RowSetWriter::append_batch`].
#[derive(Debug, Default)]
pub enum BatchDeltas {
    /// The rows have no deltas.
    #[default]
    None,
    /// Every row was inserted at this timestamp (a bulk insert): each gets an UNDO
    /// saying it did not exist before.
    InsertedAt(HybridTime),
    /// Each entry's `ordinal` is the row's position in the batch; each list is sorted
    /// by (position, timestamp).
    Rows {
        /// UNDO deltas.
        undos: Vec<DeltaEntry>,
        /// REDO deltas.
        redos: Vec<DeltaEntry>,
    },
}

/// Rows gathered for one batch: their keys, their deltas (by position in the chunk),
/// and where each row's cells are (`R`: for a flush, a row of values; for a
/// compaction, a place in the inputs' decoded columns).
pub struct RowsChunk<R> {
    keys: Vec<Vec<u8>>,
    rows: Vec<R>,
    undos: Vec<DeltaEntry>,
    redos: Vec<DeltaEntry>,
}

impl<R> RowsChunk<R> {
    /// An empty chunk.
    pub fn new() -> Self {
        RowsChunk {
            keys: Vec::with_capacity(BLOCK_ROWS),
            rows: Vec::with_capacity(BLOCK_ROWS),
            undos: vec![],
            redos: vec![],
        }
    }

    /// Adds a row with its deltas (each ascending by timestamp).
    pub fn push(
        &mut self,
        key: Vec<u8>,
        row: R,
        undos: impl IntoIterator<Item = (HybridTime, RowChange)>,
        redos: impl IntoIterator<Item = (HybridTime, RowChange)>,
    ) {
        let ordinal = self.rows.len() as u32;
        let entry = |(ts, change)| DeltaEntry {
            ordinal,
            ts,
            change,
        };
        self.undos.extend(undos.into_iter().map(entry));
        self.redos.extend(redos.into_iter().map(entry));
        self.keys.push(key);
        self.rows.push(row);
    }

    /// Adds a row in the form [`crate::history::flush_row`] gives it.
    pub fn push_flushed(&mut self, row: FlushedRow)
    where
        R: From<crate::history::Row>,
    {
        self.push(row.key, R::from(row.base), row.undos, row.redos);
    }

    /// Number of rows gathered.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is gathered.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows gathered so far.
    pub fn rows(&self) -> &[R] {
        &self.rows
    }

    /// Appends `batch`, the gathered rows' cells, to `w` with their keys and deltas,
    /// leaving the chunk empty.
    pub fn append_to(&mut self, w: &mut RowSetWriter<'_>, batch: &RecordBatch) -> Result<()> {
        self.rows.clear();
        let deltas = BatchDeltas::Rows {
            undos: std::mem::take(&mut self.undos),
            redos: std::mem::take(&mut self.redos),
        };
        w.append_batch(std::mem::take(&mut self.keys), batch, deltas)
    }
}

impl<R: AsRef<[Value]>> RowsChunk<R> {
    /// Builds the gathered rows' columns and appends them to `w`, leaving the chunk
    /// empty.
    pub fn write_to(&mut self, w: &mut RowSetWriter<'_>) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let types: Vec<_> = w
            .schema
            .columns()
            .iter()
            .map(|c| c.data_type.clone())
            .collect();
        let mut b = RowsToColumns::new(&types, self.rows.len());
        for r in &self.rows {
            b.append_row(r.as_ref())?;
        }
        let batch = RecordBatch::try_new(w.arrow_schema.clone(), b.finish()?)?;
        self.append_to(w, &batch)
    }
}

impl<R> Default for RowsChunk<R> {
    fn default() -> Self {
        Self::new()
    }
}

struct Open {
    id: u64,
    dir: PathBuf,
    writer: ArrowWriter<File>,
    keys: Vec<Vec<u8>>,
    undos: Vec<DeltaEntry>,
    redos: Vec<DeltaEntry>,
}

/// Streams flushed rows into one or more new DiskRowSets.
pub struct RowSetWriter<'a> {
    rowsets_dir: PathBuf,
    schema: &'a Schema,
    ids: Vec<ColumnId>,
    arrow_schema: SchemaRef,
    config: WriterConfig,
    alloc_id: Box<dyn FnMut() -> u64 + Send + 'a>,
    durable_index: u64,
    durable_ts: u64,
    open: Option<Open>,
    done: Vec<RowSetMeta>,
}

impl<'a> RowSetWriter<'a> {
    /// A writer creating rowset directories under `rowsets_dir`, with ids from
    /// `alloc_id`, recording in each rowset that it holds every record up to log index
    /// `durable.0`, whose timestamp is `durable.1`.
    pub fn new(
        rowsets_dir: &Path,
        schema: &'a Schema,
        config: WriterConfig,
        durable: (u64, cairn_common::HybridTime),
        alloc_id: Box<dyn FnMut() -> u64 + Send + 'a>,
    ) -> Self {
        let ids: Vec<ColumnId> = schema.columns().iter().map(|c| c.id).collect();
        let arrow_schema = base_arrow_schema(schema, &ids);
        RowSetWriter {
            rowsets_dir: rowsets_dir.to_path_buf(),
            schema,
            ids,
            arrow_schema,
            config,
            alloc_id,
            durable_index: durable.0,
            durable_ts: durable.1.0,
            open: None,
            done: vec![],
        }
    }

    /// The Arrow schema of the batches [`RowSetWriter::append_batch`] takes.
    pub fn arrow_schema(&self) -> SchemaRef {
        self.arrow_schema.clone()
    }

    fn start(&mut self) -> Result<()> {
        let id = (self.alloc_id)();
        let dir = self.rowsets_dir.join(format!("rs-{id:08}"));
        std::fs::create_dir_all(&dir).map_err(|e| TabletError::io(&dir, e))?;
        let path = dir.join("base-0.parquet");
        let f = File::create(&path).map_err(|e| TabletError::io(&path, e))?;
        let props = writer_properties(self.config.codec, self.config.rows_per_row_group);
        let writer = ArrowWriter::try_new(f, self.arrow_schema.clone(), Some(props))
            .map_err(|e| TabletError::parquet(&path, e))?;
        self.open = Some(Open {
            id,
            dir,
            writer,
            keys: vec![],
            undos: vec![],
            redos: vec![],
        });
        Ok(())
    }

    /// Appends a batch of rows already in base-file form (all columns, named by id,
    /// sorted by key, after every row appended so far); `keys` are their encoded keys
    /// and `deltas` their UNDO and REDO deltas.
    pub fn append_batch(
        &mut self,
        keys: Vec<Vec<u8>>,
        batch: &RecordBatch,
        deltas: BatchDeltas,
    ) -> Result<()> {
        if keys.len() != batch.num_rows() {
            return Err(TabletError::InvalidRequest(format!(
                "{} keys for {} rows",
                keys.len(),
                batch.num_rows()
            )));
        }
        let chunk = BLOCK_ROWS.min(self.config.rows_per_row_group.max(1));
        let mut keys = keys.into_iter();
        let (inserted_at, undos, redos) = match deltas {
            BatchDeltas::None => (None, vec![], vec![]),
            BatchDeltas::InsertedAt(ts) => (Some(ts), vec![], vec![]),
            BatchDeltas::Rows { undos, redos } => (None, undos, redos),
        };
        let mut undos = undos.into_iter().peekable();
        let mut redos = redos.into_iter().peekable();
        let mut off = 0;
        while off < batch.num_rows() {
            if self.open.is_none() {
                self.start()?;
            }
            let len = chunk.min(batch.num_rows() - off);
            let slice = RecordBatch::try_new(
                self.arrow_schema.clone(),
                batch.slice(off, len).columns().to_vec(),
            )?;
            let Some(o) = &mut self.open else {
                return Ok(());
            };
            o.writer
                .write(&slice)
                .map_err(|e| TabletError::parquet(&o.dir, e))?;
            let first = o.keys.len() as u32;
            o.keys.extend(keys.by_ref().take(len));
            if let Some(ts) = inserted_at {
                o.undos
                    .extend((first..first + len as u32).map(|ordinal| DeltaEntry {
                        ordinal,
                        ts,
                        change: RowChange::Delete,
                    }));
            }
            let end = (off + len) as u32;
            let rebase = |mut e: DeltaEntry| {
                e.ordinal = e.ordinal - off as u32 + first;
                e
            };
            while let Some(e) = undos.next_if(|e| e.ordinal < end) {
                o.undos.push(rebase(e));
            }
            while let Some(e) = redos.next_if(|e| e.ordinal < end) {
                o.redos.push(rebase(e));
            }
            off += len;
            let size = o.writer.bytes_written() + o.writer.in_progress_size();
            if size as u64 >= self.config.target_rowset_bytes {
                self.finish_open()?;
            }
        }
        Ok(())
    }

    fn finish_open(&mut self) -> Result<()> {
        let Some(o) = self.open.take() else {
            return Ok(());
        };
        let base_path = o.dir.join("base-0.parquet");
        let f = o
            .writer
            .into_inner()
            .map_err(|e| TabletError::parquet(&base_path, e))?;
        f.sync_all().map_err(|e| TabletError::io(&base_path, e))?;
        let base = file_meta(&base_path, "base-0.parquet")?;
        let keys_path = o.dir.join("keys");
        write_key_index(&keys_path, &o.keys)?;
        let keys = file_meta(&keys_path, "keys")?;
        let mut seq = 1;
        let mut delta = |entries: &[DeltaEntry], kind: &str| -> Result<Vec<FileMeta>> {
            if entries.is_empty() {
                return Ok(vec![]);
            }
            let name = format!("{kind}-{seq}.delta");
            seq += 1;
            let (crc, size) = write_delta_file(&o.dir.join(&name), entries)?;
            Ok(vec![FileMeta { name, crc, size }])
        };
        let undo_files = delta(&o.undos, "undo")?;
        let redo_files = delta(&o.redos, "redo")?;
        sync_dir(&o.dir)?;
        self.done.push(RowSetMeta {
            id: o.id,
            num_rows: o.keys.len() as u64,
            durable_index: self.durable_index,
            durable_ts: self.durable_ts,
            base_files: vec![BaseFileMeta {
                name: base.name,
                crc: base.crc,
                size: base.size,
                column_ids: self.ids.clone(),
            }],
            keys,
            redo_files,
            undo_files,
            skip_cache: None,
            next_file_seq: seq,
        });
        Ok(())
    }

    /// Finishes the last rowset; returns the metadata of every rowset written.
    pub fn finish(mut self) -> Result<Vec<RowSetMeta>> {
        self.finish_open()?;
        sync_dir(&self.rowsets_dir)?;
        Ok(self.done)
    }
}
