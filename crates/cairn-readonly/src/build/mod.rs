//! The offline builder: input rows in, one folder of chunk files per node out.
//!
//! This is the paper's MapReduce job (the Voldemort read-only paper, §4.2.1) on one
//! machine:
//!
//! - *map* ([`StoreBuilder::add_batch`], callable from many threads at once): encode
//!   each row's key and value, hash the key, and emit one tuple per replica in its
//!   preference list, tagged with the global number of its chunk
//!   (`(partition · R + replica) · C + chunk`, the paper's reducer id);
//! - *shuffle*: every chunk belongs to one of `threads` shards. A shard's [`Sorter`]
//!   buffers its tuples and, past its share of the memory budget, hands them to the
//!   thread that filled it, which sorts them by (chunk, hash prefix, key) and spills a
//!   run to a temporary file outside the shard's lock, so other threads keep adding;
//! - *reduce* ([`StoreBuilder::finish`], one thread per shard): merge the shard's
//!   runs and write each chunk's index and data files in order, hashing them as they
//!   are written, then one `.metadata` per node.
//!
//! The output depends only on the input rows, not on batch boundaries, thread timing
//! or spills: tuples are totally ordered, and a key given twice is an error.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::cast;
use cairn_common::{Value, codec, key};

use crate::error::{ReadOnlyError, Result};
use crate::format::{FORMAT_VERSION, FileEntry, METADATA_FILE, NodeMetadata};
use crate::layout::{ChunkId, KeyHash, NodeId, PreferenceList, StoreLayout};
use crate::schema::{StoreColumn, StoreSchema};
use sort::{ArenaPool, Sorter, TupleBuf};
use write::{ShardOutput, ShardWriter};

/// How a build uses the machine.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Threads for the reduce phase, and shards of the shuffle.
    pub threads: usize,
    /// Bytes of tuples buffered in memory before runs spill to disk (all shards).
    /// While a full shard's run is being sorted and written, the shard fills again,
    /// so a build may briefly hold up to about twice this. The default is
    /// [`default_memory_bytes`]: an eighth of the machine's memory.
    pub memory_bytes: usize,
    /// Where spilled runs go (a temporary folder inside it, removed afterwards).
    pub spill_dir: PathBuf,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            memory_bytes: default_memory_bytes(),
            spill_dir: std::env::temp_dir(),
        }
    }
}

/// The default build memory budget: an eighth of the machine's memory (from
/// `/proc/meminfo`), kept between 256 MiB and 8 GiB, or 1 GiB where the
/// machine's memory cannot be read. An eighth leaves room for the input the
/// caller holds, the second buffer a spilling shard fills (see
/// [`BuildOptions::memory_bytes`]) and the page cache the output is written
/// through; a store of a few million rows then builds without spilling.
pub fn default_memory_bytes() -> usize {
    const MIN: usize = 256 << 20;
    const MAX: usize = 8 << 30;
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total_bytes(&text))
        .map_or(1 << 30, |total| (total / 8).clamp(MIN, MAX))
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<usize> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: usize = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => kib.checked_mul(1024),
        Some(_) => None,
    }
}

/// Counters a caller may poll (from another thread) to show progress.
#[derive(Debug, Default)]
pub struct BuildProgress {
    /// Input rows accepted.
    pub rows: AtomicU64,
    /// Tuples (rows × replicas) written to chunk files.
    pub tuples_written: AtomicU64,
    /// Bytes spilled to temporary runs.
    pub spilled_bytes: AtomicU64,
}

/// What a finished build produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildSummary {
    /// Input rows.
    pub rows: u64,
    /// Tuples written (rows × replication factor).
    pub tuples: u64,
    /// Bytes of index and data files, all nodes.
    pub bytes: u64,
    /// Index entries shared by more than one key (8-byte hash prefix collisions),
    /// counted once however many replicas hold them.
    pub collisions: u64,
    /// Bytes spilled to temporary runs.
    pub spilled_bytes: u64,
    /// The node folders written, by node.
    pub node_dirs: BTreeMap<NodeId, PathBuf>,
}

/// The folder of node `node` under a build's output folder.
pub fn node_dir(out: &Path, node: NodeId) -> PathBuf {
    out.join(format!("node-{node}"))
}

mod sort;
mod write;

/// Builds a store's chunk files from Arrow batches. See the module docs.
pub struct StoreBuilder {
    name: String,
    schema: StoreSchema,
    layout: StoreLayout,
    preference: Vec<PreferenceList>,
    shards: Vec<Mutex<Sorter>>,
    shard_budget: usize,
    spill: tempfile::TempDir,
    /// Arenas freed by spills, reused by the next batches.
    pool: ArenaPool,
    /// Set when a call that had taken tuples out of a shard failed: those tuples are
    /// gone, so [`StoreBuilder::finish`] must not write an incomplete store.
    lost_tuples: AtomicBool,
    progress: Arc<BuildProgress>,
}

impl StoreBuilder {
    /// A builder for store `name` with these columns and layout.
    pub fn new(
        name: &str,
        schema: StoreSchema,
        layout: StoreLayout,
        options: &BuildOptions,
    ) -> Result<StoreBuilder> {
        layout.validate()?;
        let chunk_count =
            layout.partitions() as u64 * layout.replication as u64 * layout.chunks as u64;
        if chunk_count > u32::MAX as u64 {
            return Err(ReadOnlyError::InvalidLayout(format!(
                "{chunk_count} chunks (partitions × replication × chunks) is too many"
            )));
        }
        if schema.key.is_empty() {
            return Err(ReadOnlyError::InvalidInput(
                "a store needs at least one key column".into(),
            ));
        }
        let threads = options.threads.max(1);
        let spill = tempfile::Builder::new()
            .prefix("cairn-store-build-")
            .tempdir_in(&options.spill_dir)
            .map_err(|e| {
                ReadOnlyError::io(
                    format!("cannot create a spill folder in {:?}", options.spill_dir),
                    e,
                )
            })?;
        Ok(StoreBuilder {
            name: name.to_string(),
            preference: (0..layout.partitions())
                .map(|p| layout.preference_list(p))
                .collect(),
            schema,
            layout,
            shards: (0..threads)
                .map(|shard| {
                    Mutex::new(Sorter {
                        shard,
                        ..Sorter::default()
                    })
                })
                .collect(),
            shard_budget: (options.memory_bytes / threads).max(4096),
            spill,
            pool: ArenaPool::default(),
            lost_tuples: AtomicBool::new(false),
            progress: Arc::new(BuildProgress::default()),
        })
    }

    /// The counters of this build, to poll from another thread.
    pub fn progress(&self) -> Arc<BuildProgress> {
        self.progress.clone()
    }

    /// The store's columns.
    pub fn schema(&self) -> &StoreSchema {
        &self.schema
    }

    /// Adds tuples as the map phase would, with hash prefixes chosen by the caller:
    /// tests use it to force prefix collisions, which real MD5s never give.
    #[cfg(test)]
    pub(crate) fn add_tuples(&self, tuples: &[(ChunkId, u64, Vec<u8>, Vec<u8>)]) -> Result<()> {
        for (id, prefix, k, v) in tuples {
            let n = self.chunk_number(id.partition, id.replica, id.chunk);
            let mut s = self.shards[n as usize % self.shards.len()]
                .lock()
                .map_err(|_| poisoned())?;
            s.buf.push(&self.pool, n, *prefix, k, v)?;
        }
        Ok(())
    }

    /// The global number of a chunk (the paper's reducer id).
    fn chunk_number(&self, partition: u32, replica: u32, chunk: u32) -> u32 {
        (partition * self.layout.replication + replica) * self.layout.chunks + chunk
    }

    /// Columns of `batch` for `cols`, cast to their Cairn types' Arrow types.
    fn columns(&self, batch: &RecordBatch, cols: &[StoreColumn]) -> Result<Vec<ArrayRef>> {
        cols.iter()
            .map(|c| {
                let a = batch.column_by_name(&c.name).ok_or_else(|| {
                    ReadOnlyError::InvalidInput(format!(
                        "an input batch has no column '{}'",
                        c.name
                    ))
                })?;
                cast(a, &c.data_type.to_arrow()).map_err(|e| {
                    ReadOnlyError::InvalidInput(format!(
                        "column '{}' ({}) cannot be read as {}: {e}",
                        c.name,
                        a.data_type(),
                        c.data_type
                    ))
                })
            })
            .collect()
    }

    /// Adds a batch of input rows (the map phase). Safe to call from many threads.
    pub fn add_batch(&self, batch: &RecordBatch) -> Result<()> {
        let keys = self.columns(batch, &self.schema.key)?;
        let values = self.columns(batch, &self.schema.value)?;
        for (a, c) in keys.iter().zip(&self.schema.key) {
            if a.null_count() > 0 {
                return Err(ReadOnlyError::InvalidInput(format!(
                    "key column '{}' has a NULL: every row needs a key",
                    c.name
                )));
            }
        }
        for (a, c) in values.iter().zip(&self.schema.value) {
            if !c.nullable && a.null_count() > 0 {
                return Err(ReadOnlyError::InvalidInput(format!(
                    "value column '{}' has a NULL but the store declares it NOT NULL",
                    c.name
                )));
            }
        }
        let mut local: Vec<TupleBuf> = (0..self.shards.len())
            .map(|_| TupleBuf::default())
            .collect();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let last = keys.len() - 1;
        for row in 0..batch.num_rows() {
            k.clear();
            v.clear();
            for (i, (a, c)) in keys.iter().zip(&self.schema.key).enumerate() {
                let val = Value::from_array(a.as_ref(), row, &c.data_type)?;
                key::encode_value(&val, i == last, &mut k)?;
            }
            for (a, c) in values.iter().zip(&self.schema.value) {
                codec::put_value(&mut v, &Value::from_array(a.as_ref(), row, &c.data_type)?);
            }
            let hash = KeyHash::of(&k);
            let partition = self.layout.partition_of(&hash);
            let chunk = self.layout.chunk_of(&hash);
            for replica in 0..self.preference[partition as usize].len() as u32 {
                let n = self.chunk_number(partition, replica, chunk);
                let shards = local.len();
                local[n as usize % shards].push(&self.pool, n, hash.prefix(), &k, &v)?;
            }
        }
        for (shard, buf) in self.shards.iter().zip(local) {
            if buf.entries.is_empty() {
                continue;
            }
            let full = {
                let mut s = shard.lock().map_err(|_| poisoned())?;
                s.buf.append(buf);
                (s.buf.bytes() > self.shard_budget).then(|| s.take_run(self.spill.path()))
            };
            if let Some((run, path)) = full {
                self.spill_run(shard, run, path)?;
            }
        }
        self.progress
            .rows
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Sorts and writes `run` (taken from `shard` by [`Sorter::take_run`]) at `path`
    /// and records it in the shard. REQUIRES: `shard`'s lock is not held.
    fn spill_run(&self, shard: &Mutex<Sorter>, mut run: TupleBuf, path: PathBuf) -> Result<()> {
        let written = sort::write_run(&mut run, &path)
            .and_then(|n| {
                shard.lock().map_err(|_| poisoned())?.runs.push(path);
                Ok(n)
            })
            .inspect_err(|_| self.lost_tuples.store(true, Ordering::SeqCst))?;
        self.pool.give(run);
        self.progress
            .spilled_bytes
            .fetch_add(written, Ordering::Relaxed);
        Ok(())
    }

    /// Writes every node's folder under `out` (`node-<id>/`), one thread per shard,
    /// and returns what was built. A node folder that exists must be empty; on an error
    /// (a duplicate key, a full disk) the node folders are removed again.
    pub fn finish(self, out: &Path) -> Result<BuildSummary> {
        if self.lost_tuples.load(Ordering::SeqCst) {
            return Err(ReadOnlyError::InvalidInput(
                "an earlier batch failed while spilling to disk, so some rows are missing: \
                 start the build again"
                    .into(),
            ));
        }
        self.pool.drain();
        let mut node_dirs = BTreeMap::new();
        for node in self.layout.nodes() {
            let dir = node_dir(out, node);
            if dir.exists()
                && fs::read_dir(&dir)
                    .map_err(|e| ReadOnlyError::io(format!("cannot list {dir:?}"), e))?
                    .next()
                    .is_some()
            {
                return Err(ReadOnlyError::InvalidInput(format!(
                    "output folder {dir:?} is not empty: build into a new location or delete it"
                )));
            }
            fs::create_dir_all(&dir)
                .map_err(|e| ReadOnlyError::io(format!("cannot create {dir:?}"), e))?;
            node_dirs.insert(node, dir);
        }
        let result = self.write_nodes(&node_dirs);
        if result.is_err() {
            // The folders were empty or absent before: leave nothing half-written.
            for dir in node_dirs.values() {
                let _ = fs::remove_dir_all(dir);
            }
        }
        result
    }

    /// Writes every chunk and `.metadata` into the (empty) node folders.
    fn write_nodes(&self, node_dirs: &BTreeMap<NodeId, PathBuf>) -> Result<BuildSummary> {
        // Every chunk with its node, by global number.
        let mut all: Vec<(u32, ChunkId, NodeId)> = Vec::new();
        for partition in 0..self.layout.partitions() {
            for (replica, &(_, node)) in self.preference[partition as usize].iter().enumerate() {
                for chunk in 0..self.layout.chunks {
                    let replica = replica as u32;
                    all.push((
                        self.chunk_number(partition, replica, chunk),
                        ChunkId {
                            partition,
                            replica,
                            chunk,
                        },
                        node,
                    ));
                }
            }
        }
        all.sort_by_key(|c| c.0);
        let shards = self.shards.len();
        let results: Vec<Result<ShardOutput>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .shards
                .iter()
                .enumerate()
                .map(|(i, shard)| {
                    let chunks: Vec<_> = all
                        .iter()
                        .filter(|c| c.0 as usize % shards == i)
                        .copied()
                        .collect();
                    let this = &self;
                    s.spawn(move || this.reduce_shard(shard, chunks, node_dirs))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(ReadOnlyError::InvalidInput(
                            "a build thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        let mut files: BTreeMap<ChunkId, (NodeId, FileEntry, FileEntry, u64)> = BTreeMap::new();
        let mut summary = BuildSummary {
            rows: self.progress.rows.load(Ordering::Relaxed),
            tuples: 0,
            bytes: 0,
            collisions: 0,
            spilled_bytes: 0,
            node_dirs: node_dirs.clone(),
        };
        for r in results {
            let r = r?;
            summary.collisions += r.collisions;
            for (id, node, index, data, rows) in r.chunks {
                summary.tuples += rows;
                summary.bytes += index.bytes + data.bytes;
                files.insert(id, (node, index, data, rows));
            }
        }
        summary.spilled_bytes = self.progress.spilled_bytes.load(Ordering::Relaxed);
        for (&node, dir) in node_dirs {
            let mut entries = Vec::new();
            let mut rows = 0;
            for id in self.layout.chunks_of_node(node) {
                let (_, index, data, n) = files.get(&id).cloned().ok_or_else(|| {
                    ReadOnlyError::InvalidInput(format!("chunk {} was not written", id.stem()))
                })?;
                entries.push(index);
                entries.push(data);
                rows += n;
            }
            let meta = NodeMetadata {
                format_version: FORMAT_VERSION,
                store: self.name.clone(),
                node,
                schema: self.schema.clone(),
                layout: self.layout.clone(),
                rows,
                checksum: NodeMetadata::checksum_of(&entries)?,
                files: entries,
                held: None,
            };
            write_durably(&dir.join(METADATA_FILE), &meta.to_bytes())?;
        }
        Ok(summary)
    }

    /// The reduce phase of one shard: merge its runs and write its chunks.
    fn reduce_shard(
        &self,
        shard: &Mutex<Sorter>,
        chunks: Vec<(u32, ChunkId, NodeId)>,
        node_dirs: &BTreeMap<NodeId, PathBuf>,
    ) -> Result<ShardOutput> {
        let mut w = ShardWriter::new(self, chunks, node_dirs);
        let mut sorter = shard.lock().map_err(|_| poisoned())?;
        if sorter.runs.is_empty() {
            sorter.buf.sort();
            for e in &sorter.buf.entries {
                w.push(e.chunk, e.prefix, sorter.buf.key(e), sorter.buf.value(e))?;
            }
        } else {
            if !sorter.buf.entries.is_empty() {
                let (run, path) = sorter.take_run(self.spill.path());
                drop(sorter);
                self.spill_run(shard, run, path)?;
                sorter = shard.lock().map_err(|_| poisoned())?;
            }
            let paths = sorter.runs.clone();
            sort::merge_runs(&paths, |chunk, prefix, key, value| {
                w.push(chunk, prefix, key, value)
            })?;
        }
        w.finish()
    }
}

pub(crate) fn poisoned() -> ReadOnlyError {
    ReadOnlyError::InvalidInput("a build thread failed earlier; see the first error".into())
}

/// Writes a file and makes it durable (file and folder fsync).
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let err = |e| ReadOnlyError::io(format!("cannot write {path:?}"), e);
    let mut f = File::create(path).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_kib() {
        let text = "MemTotal:       24624328 kB\nMemFree:          123 kB\n";
        assert_eq!(mem_total_bytes(text), Some(24_624_328 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: 5 MB\n"), None);
    }

    #[test]
    fn the_default_budget_stays_in_its_bounds() {
        let bytes = default_memory_bytes();
        assert!((256 << 20..=8 << 30).contains(&bytes), "{bytes}");
    }
}
