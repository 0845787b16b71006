//! Writing new DiskRowSets from flushed rows (MemRowSet flush and rowset compaction).
//!
//! Rows arrive in key order as [`FlushedRow`]s (base row + UNDO + REDO deltas). The
//! writer streams them into a Parquet base file in batches, collects keys and deltas by
//! row ordinal, and *rolls* to a new rowset once the base file reaches the target size
//! (32 MiB by default, DESIGN.md), so no rowset grows unboundedly. Each finished rowset
//! gets its key index and delta files, all fsynced, and a [`RowSetMeta`] listing them
//! with their checksums.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_common::types::array_from_values;
use cairn_common::{ColumnId, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::cache::BLOCK_ROWS;
use crate::delta::{DeltaEntry, write_delta_file};
use crate::diskrowset::parquet_column_name;
use crate::error::{Result, TabletError};
use crate::history::{FlushedRow, Row};
use crate::keyindex::write_key_index;
use crate::metadata::{BaseFileMeta, FileMeta, RowSetMeta, sync_dir};

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

struct Open {
    id: u64,
    dir: PathBuf,
    writer: ArrowWriter<File>,
    keys: Vec<Vec<u8>>,
    undos: Vec<DeltaEntry>,
    redos: Vec<DeltaEntry>,
    pending: Vec<Row>,
}

/// Streams flushed rows into one or more new DiskRowSets.
pub struct RowSetWriter<'a> {
    rowsets_dir: PathBuf,
    schema: &'a Schema,
    ids: Vec<ColumnId>,
    arrow_schema: SchemaRef,
    config: WriterConfig,
    alloc_id: Box<dyn FnMut() -> u64 + 'a>,
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
        alloc_id: Box<dyn FnMut() -> u64 + 'a>,
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
            pending: vec![],
        });
        Ok(())
    }

    fn write_pending(&mut self) -> Result<()> {
        let Some(o) = &mut self.open else {
            return Ok(());
        };
        if o.pending.is_empty() {
            return Ok(());
        }
        let cols = self
            .schema
            .columns()
            .iter()
            .enumerate()
            .map(|(i, c)| array_from_values(&c.data_type, o.pending.iter().map(|r| &r[i])))
            .collect::<cairn_common::Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(self.arrow_schema.clone(), cols)?;
        o.writer
            .write(&batch)
            .map_err(|e| TabletError::parquet(&o.dir, e))?;
        o.pending.clear();
        Ok(())
    }

    /// Appends a row (rows must come in ascending key order).
    pub fn append(&mut self, row: FlushedRow) -> Result<()> {
        if self.open.is_none() {
            self.start()?;
        }
        let Some(o) = &mut self.open else {
            return Ok(());
        };
        let ordinal = o.keys.len() as u32;
        o.keys.push(row.key);
        o.undos
            .extend(row.undos.into_iter().map(|(ts, change)| DeltaEntry {
                ordinal,
                ts,
                change,
            }));
        o.redos
            .extend(row.redos.into_iter().map(|(ts, change)| DeltaEntry {
                ordinal,
                ts,
                change,
            }));
        o.pending.push(row.base);
        if o.pending.len() >= BLOCK_ROWS.min(self.config.rows_per_row_group.max(1)) {
            self.write_pending()?;
            if let Some(o) = &self.open {
                let size = o.writer.bytes_written() + o.writer.in_progress_size();
                if size as u64 >= self.config.target_rowset_bytes {
                    self.finish_open()?;
                }
            }
        }
        Ok(())
    }

    /// Appends a batch of rows already in base-file form (all columns, named by id,
    /// sorted by key, after every row appended so far); `keys` are their encoded keys.
    /// With `inserted_at`, each row gets an UNDO saying it did not exist before that
    /// timestamp (a bulk insert).
    pub fn append_batch(
        &mut self,
        keys: Vec<Vec<u8>>,
        batch: &RecordBatch,
        inserted_at: Option<cairn_common::HybridTime>,
    ) -> Result<()> {
        if keys.len() != batch.num_rows() {
            return Err(TabletError::InvalidRequest(format!(
                "{} keys for {} rows",
                keys.len(),
                batch.num_rows()
            )));
        }
        self.write_pending()?;
        let chunk = BLOCK_ROWS.min(self.config.rows_per_row_group.max(1));
        let mut keys = keys.into_iter();
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
            for key in keys.by_ref().take(len) {
                let ordinal = o.keys.len() as u32;
                o.keys.push(key);
                if let Some(ts) = inserted_at {
                    o.undos.push(DeltaEntry {
                        ordinal,
                        ts,
                        change: crate::ops::RowChange::Delete,
                    });
                }
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
        self.write_pending()?;
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
