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

use arrow::array::Array;
use arrow::datatypes::{Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_common::types::RowsToColumns;
use cairn_common::{ColumnId, HybridTime, Schema, Value};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::cache::BLOCK_ROWS;
use crate::delta::{DeltaEntry, write_delta_file};
use crate::diskrowset::parquet_column_name;
use crate::error::{Result, TabletError};
use crate::history::FlushedRow;
use crate::keyindex::write_key_index;
use crate::metadata::{BaseFileMeta, FileMeta, RowSetMeta, sync_dir};
use crate::ops::RowChange;

/// Rows per batch that flushes and compactions hand to [`RowSetWriter`]: large
/// enough that per-batch costs vanish, small enough that a batch's cells stay in
/// cache while they are encoded.
pub const CHUNK_ROWS: usize = 4096;

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

/// Data page size at which a page of a wide column ends before [`BLOCK_ROWS`] rows.
/// The block cache holds whole pages, so for a key-value read of wide rows the page
/// is the unit of caching: a hot row of 100-byte strings in a 1024-row page keeps
/// 100 KiB per column in the cache, and its misses decode as much.
pub const PAGE_BYTES: usize = 8 << 10;

/// Rows Parquet writes between checks of a page's size, so the granularity at which
/// [`PAGE_BYTES`] takes effect.
const PAGE_CHECK_ROWS: usize = 128;

/// Parquet writer settings of a base file whose first rows are `sample` (`None`:
/// not known). Every column is dictionary-encoded unless the sample shows its
/// dictionary would overflow [`DICTIONARY_PAGE_BYTES`] within a row group (see
/// [`dictionary_pays`]).
pub fn writer_properties(
    codec: Codec,
    rows_per_row_group: usize,
    sample: Option<&RecordBatch>,
) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(codec.to_parquet())
        .set_max_row_group_row_count(Some(rows_per_row_group))
        .set_data_page_row_count_limit(BLOCK_ROWS)
        .set_data_page_size_limit(PAGE_BYTES)
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
        .set_write_batch_size(PAGE_CHECK_ROWS)
        .set_statistics_enabled(EnabledStatistics::Page);
    if let Some(sample) = sample {
        for (field, column) in sample.schema().fields().iter().zip(sample.columns()) {
            if dictionary_pays(column.as_ref(), rows_per_row_group) {
                continue;
            }
            let path = ColumnPath::from(field.name().as_str());
            b = b.set_column_dictionary_enabled(path.clone(), false);
            if let Some(encoding) = plain_alternative(field.data_type()) {
                b = b.set_column_encoding(path, encoding);
            }
        }
    }
    b.build()
}

/// The encoding that beats PLAIN for a column of Arrow type `t` that is not
/// dictionary-encoded: integers (stored as Parquet INT32 or INT64) are delta-encoded
/// and bit-packed, which shrinks sorted keys to a few bits a value and random ones
/// to their range's width; floats are split into byte streams, which the
/// compression codec then packs. `None`: plain.
fn plain_alternative(t: &arrow::datatypes::DataType) -> Option<Encoding> {
    use arrow::datatypes::DataType as A;
    match t {
        A::Int8 | A::Int16 | A::Int32 | A::Int64 | A::Date32 | A::Timestamp(..) => {
            Some(Encoding::DELTA_BINARY_PACKED)
        }
        // Parquet stores decimals of up to 18 digits as INT32 or INT64.
        A::Decimal128(precision, _) if *precision <= 18 => Some(Encoding::DELTA_BINARY_PACKED),
        A::Float32 | A::Float64 => Some(Encoding::BYTE_STREAM_SPLIT),
        _ => None,
    }
}

/// Fewest sample rows [`dictionary_pays`] judges from; below it, dictionaries stay on.
const DICTIONARY_SAMPLE_MIN_ROWS: usize = 512;

/// Whether dictionary-encoding a column whose first values are `sample` pays, in row
/// groups of `group_rows` rows.
///
/// Parquet starts every column chunk with a dictionary and falls back to plain
/// encoding once the dictionary outgrows its page limit, but keeps the dictionary
/// page: every later read of the chunk, a point lookup included, decompresses and
/// decodes that page for nothing. So the distinct values are counted in the first
/// and the whole sample, their growth `D(n) ∝ n^α` (α = 0: a few values repeating;
/// α = 1: every value new, or a sorted column) is extrapolated to a row group, and the
/// dictionary is kept only if it would then still fit in [`DICTIONARY_PAGE_BYTES`].
pub fn dictionary_pays(sample: &dyn Array, group_rows: usize) -> bool {
    let n = sample.len();
    if n < DICTIONARY_SAMPLE_MIN_ROWS {
        return true;
    }
    let Some((half, all, bytes)) = distinct_values(sample) else {
        return true;
    };
    if all == 0 {
        return true;
    }
    let growth = if group_rows <= n {
        1.0
    } else {
        let alpha = (all as f64 / half.max(1) as f64).log2().clamp(0.0, 1.0);
        (group_rows as f64 / n as f64).powf(alpha)
    };
    bytes as f64 * growth <= DICTIONARY_PAGE_BYTES as f64
}

/// Distinct non-null values of `a`: (in its first half, in all of it, their plain
/// encoded bytes). `None` for a type Parquet does not dictionary-encode.
fn distinct_values(a: &dyn Array) -> Option<(usize, usize, usize)> {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType as A;
    use std::collections::HashSet;
    let half = a.len() / 2;
    let mut at_half = 0;
    match a.data_type() {
        A::Utf8 | A::Binary => {
            let value = |i| match a.data_type() {
                A::Utf8 => a.as_string::<i32>().value(i).as_bytes(),
                _ => a.as_binary::<i32>().value(i),
            };
            let mut seen: HashSet<&[u8]> = HashSet::new();
            let mut bytes = 0;
            for i in 0..a.len() {
                if i == half {
                    at_half = seen.len();
                }
                if a.is_valid(i) {
                    let v = value(i);
                    if seen.insert(v) {
                        bytes += 4 + v.len();
                    }
                }
            }
            Some((at_half, seen.len(), bytes))
        }
        t => {
            let width = t.primitive_width()?;
            let data = a.to_data();
            let buf = data.buffers().first()?.as_slice();
            let mut seen: HashSet<&[u8]> = HashSet::new();
            for i in 0..a.len() {
                if i == half {
                    at_half = seen.len();
                }
                let at = (data.offset() + i) * width;
                if a.is_valid(i) {
                    seen.insert(buf.get(at..at + width)?);
                }
            }
            Some((at_half, seen.len(), seen.len() * width))
        }
    }
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
            keys: Vec::with_capacity(CHUNK_ROWS),
            rows: Vec::with_capacity(CHUNK_ROWS),
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

    /// Opens a new rowset whose first rows are `first`.
    fn start(&mut self, first: &RecordBatch) -> Result<()> {
        let id = (self.alloc_id)();
        let dir = self.rowsets_dir.join(format!("rs-{id:08}"));
        std::fs::create_dir_all(&dir).map_err(|e| TabletError::io(&dir, e))?;
        let path = dir.join("base-0.parquet");
        let f = File::create(&path).map_err(|e| TabletError::io(&path, e))?;
        let props = writer_properties(
            self.config.codec,
            self.config.rows_per_row_group,
            Some(first),
        );
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
        let chunk = CHUNK_ROWS.min(self.config.rows_per_row_group.max(1));
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
            let len = chunk.min(batch.num_rows() - off);
            let slice = RecordBatch::try_new(
                self.arrow_schema.clone(),
                batch.slice(off, len).columns().to_vec(),
            )?;
            if self.open.is_none() {
                self.start(&slice)?;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
        StringArray, TimestampMicrosecondArray,
    };
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use rand::{Rng, SeedableRng};

    const GROUP: usize = 65536;

    #[test]
    fn dictionaries_are_kept_for_repeating_values_and_dropped_for_growing_ones() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let n = 4096;
        let few = Int64Array::from_iter_values((0..n).map(|_| rng.random_range(0..50)));
        let dates = Int32Array::from_iter_values((0..n).map(|_| rng.random_range(0..2500)));
        let sorted = Int64Array::from_iter_values((0..n as i64).map(|i| 1000 + i / 4));
        let random = Int64Array::from_iter_values((0..n).map(|_| rng.random_range(0..1 << 40)));
        let modes = StringArray::from_iter_values((0..n).map(|i| ["AIR", "RAIL", "SHIP"][i % 3]));
        let comments =
            StringArray::from_iter_values((0..n).map(|i| format!("comment number {i:08}")));
        assert!(dictionary_pays(&few, GROUP));
        assert!(dictionary_pays(&dates, GROUP));
        assert!(dictionary_pays(&modes, GROUP));
        assert!(
            !dictionary_pays(&sorted, GROUP),
            "a sorted key grows linearly"
        );
        assert!(!dictionary_pays(&random, GROUP));
        assert!(!dictionary_pays(&comments, GROUP));
        // A group no larger than the sample: judged by the sample alone.
        assert!(dictionary_pays(&sorted, n));
        // Too few rows to judge, and types Parquet never dictionary-encodes.
        assert!(dictionary_pays(&random.slice(0, 100), GROUP));
        assert!(dictionary_pays(&BooleanArray::from(vec![true; n]), GROUP));
        let nulls = Int64Array::from(vec![None::<i64>; n]);
        assert!(dictionary_pays(&nulls, GROUP));
    }

    #[test]
    fn chosen_encodings_round_trip_every_type_with_nulls() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let n = 5000;
        let maybe = |rng: &mut rand::rngs::StdRng| rng.random_range(0..10) != 0;
        let cols: Vec<(&str, ArrayRef)> = vec![
            (
                "key",
                Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i * 3))),
            ),
            (
                "wide",
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|_| maybe(&mut rng).then(|| rng.random::<i64>())),
                )),
            ),
            (
                "small",
                Arc::new(Int32Array::from_iter(
                    (0..n).map(|_| maybe(&mut rng).then(|| rng.random_range(-3..3))),
                )),
            ),
            (
                "price",
                Arc::new(
                    Decimal128Array::from_iter(
                        (0..n).map(|_| maybe(&mut rng).then(|| rng.random_range(0..1i128 << 40))),
                    )
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
                ),
            ),
            (
                "day",
                Arc::new(Date32Array::from_iter_values(
                    (0..n).map(|_| rng.random_range(0..100_000)),
                )),
            ),
            (
                "at",
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        (0..n).map(|_| rng.random_range(0..i64::MAX / 2)),
                    )
                    .with_timezone("+00:00"),
                ),
            ),
            (
                "ratio",
                Arc::new(Float64Array::from_iter(
                    (0..n).map(|_| maybe(&mut rng).then(|| rng.random::<f64>())),
                )),
            ),
            (
                "note",
                Arc::new(StringArray::from_iter((0..n).map(|i| {
                    maybe(&mut rng).then(|| format!("note {i} {}", rng.random::<u32>()))
                }))),
            ),
        ];
        let batch = RecordBatch::try_from_iter(cols).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let props = writer_properties(Codec::Lz4, GROUP, Some(&batch));
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();

        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .with_batch_size(n)
            .build()
            .unwrap();
        let back: Vec<RecordBatch> = reader.collect::<std::result::Result<_, _>>().unwrap();
        let back = arrow::compute::concat_batches(&batch.schema(), &back).unwrap();
        assert_eq!(back, batch);

        let file = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let group = file.metadata().row_group(0);
        let encodings = |i: usize| group.column(i).encodings().collect::<Vec<_>>();
        for (i, name) in [(0, "key"), (1, "wide"), (3, "price"), (4, "day"), (5, "at")] {
            assert!(
                encodings(i).contains(&Encoding::DELTA_BINARY_PACKED),
                "{name}: {:?}",
                encodings(i)
            );
        }
        assert!(encodings(2).contains(&Encoding::RLE_DICTIONARY), "small");
        assert!(encodings(6).contains(&Encoding::BYTE_STREAM_SPLIT), "ratio");
        assert!(!encodings(7).contains(&Encoding::RLE_DICTIONARY), "note");
    }
}
