//! The reduce side: sorted tuples become chunk files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use md5::{Digest, Md5};

use super::sort::{Entry, TupleBuf};
use super::{StoreBuilder, poisoned};
use crate::error::{ReadOnlyError, Result};
use crate::format::{self, FileEntry, MAX_CHUNK_DATA_BYTES};
use crate::layout::{ChunkId, NodeId};

/// What one shard wrote: per chunk its node, index and data file entries and rows.
pub(super) struct ShardOutput {
    pub(super) chunks: Vec<(ChunkId, NodeId, FileEntry, FileEntry, u64)>,
    pub(super) collisions: u64,
}

/// A file being written and hashed.
struct HashingFile {
    path: PathBuf,
    name: String,
    w: BufWriter<File>,
    md5: Md5,
    bytes: u64,
}

impl HashingFile {
    fn create(dir: &Path, name: String) -> Result<HashingFile> {
        let path = dir.join(&name);
        let f = File::create(&path)
            .map_err(|e| ReadOnlyError::io(format!("cannot create {path:?}"), e))?;
        Ok(HashingFile {
            path,
            name,
            w: BufWriter::with_capacity(1 << 20, f),
            md5: Md5::new(),
            bytes: 0,
        })
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.w
            .write_all(b)
            .map_err(|e| ReadOnlyError::io(format!("cannot write {:?}", self.path), e))?;
        self.md5.update(b);
        self.bytes += b.len() as u64;
        Ok(())
    }

    fn finish(self) -> Result<FileEntry> {
        let path = self.path;
        let err = |e| ReadOnlyError::io(format!("cannot write {path:?}"), e);
        let f = self.w.into_inner().map_err(|e| err(e.into_error()))?;
        f.sync_all().map_err(err)?;
        Ok(FileEntry {
            name: self.name,
            bytes: self.bytes,
            md5: format::to_hex(&self.md5.finalize()),
        })
    }
}

/// The chunk currently being written by a shard.
struct OpenChunk {
    id: ChunkId,
    node: NodeId,
    index: HashingFile,
    data: HashingFile,
    rows: u64,
}

/// Turns one shard's sorted tuples into chunk files: groups tuples with equal hash
/// prefixes, writes empty files for chunks without tuples, refuses duplicate keys.
pub(super) struct ShardWriter<'a> {
    builder: &'a StoreBuilder,
    /// The shard's chunks by global number, ascending; `next` is the first not opened.
    chunks: Vec<(u32, ChunkId, NodeId)>,
    next: usize,
    node_dirs: &'a BTreeMap<NodeId, PathBuf>,
    open: Option<OpenChunk>,
    /// The group being collected: its chunk, prefix, and tuples in `arena`.
    group_chunk: u32,
    group_prefix: u64,
    group: TupleBuf,
    /// The group's encoded tuples and its index entry, reused from group to group.
    scratch: Vec<u8>,
    entry: Vec<u8>,
    out: ShardOutput,
}

impl<'a> ShardWriter<'a> {
    pub(super) fn new(
        builder: &'a StoreBuilder,
        chunks: Vec<(u32, ChunkId, NodeId)>,
        node_dirs: &'a BTreeMap<NodeId, PathBuf>,
    ) -> Self {
        ShardWriter {
            builder,
            chunks,
            next: 0,
            node_dirs,
            open: None,
            group_chunk: 0,
            group_prefix: 0,
            group: TupleBuf::default(),
            scratch: Vec::new(),
            entry: Vec::with_capacity(format::INDEX_ENTRY_BYTES),
            out: ShardOutput {
                chunks: Vec::new(),
                collisions: 0,
            },
        }
    }

    /// Takes the next tuple. REQUIRES: tuples arrive sorted by (chunk, prefix, key).
    pub(super) fn push(&mut self, chunk: u32, prefix: u64, key: &[u8], value: &[u8]) -> Result<()> {
        if let Some(last) = self.group.entries.last() {
            if (chunk, prefix) != (self.group_chunk, self.group_prefix) {
                self.flush_group()?;
            } else if self.group.key(last) == key {
                return Err(ReadOnlyError::DuplicateKey {
                    key: self.builder.schema.display_key(key),
                });
            }
        }
        self.group_chunk = chunk;
        self.group_prefix = prefix;
        self.group
            .push(&self.builder.pool, chunk, prefix, key, value)?;
        Ok(())
    }

    /// Opens chunk `number`, closing the open one and writing every chunk before it.
    fn open_chunk(&mut self, number: u32) -> Result<()> {
        if self
            .open
            .as_ref()
            .is_some_and(|_| self.chunks[self.next - 1].0 == number)
        {
            return Ok(());
        }
        self.close_open()?;
        while self.next < self.chunks.len() {
            let (n, id, node) = self.chunks[self.next];
            self.next += 1;
            let dir = &self.node_dirs[&node];
            let (index, data) = format::chunk_files(&id);
            self.open = Some(OpenChunk {
                id,
                node,
                index: HashingFile::create(dir, index)?,
                data: HashingFile::create(dir, data)?,
                rows: 0,
            });
            if n == number {
                return Ok(());
            }
            self.close_open()?;
        }
        Err(ReadOnlyError::InvalidInput(format!(
            "tuple for chunk {number} reached the wrong shard"
        )))
    }

    fn close_open(&mut self) -> Result<()> {
        if let Some(c) = self.open.take() {
            let index = c.index.finish()?;
            let data = c.data.finish()?;
            self.out.chunks.push((c.id, c.node, index, data, c.rows));
        }
        Ok(())
    }

    fn flush_group(&mut self) -> Result<()> {
        if self.group.entries.is_empty() {
            return Ok(());
        }
        self.open_chunk(self.group_chunk)?;
        let tuple = |e: &Entry| (self.group.key(e), self.group.value(e));
        self.scratch.clear();
        let count = self.group.entries.len();
        if let [one] = self.group.entries.as_slice() {
            // Almost every group: no collision, so no vector to collect into.
            format::put_group(&mut self.scratch, &[tuple(one)]);
        } else {
            let tuples: Vec<format::Tuple<'_>> = self.group.entries.iter().map(tuple).collect();
            format::put_group(&mut self.scratch, &tuples);
        }
        let c = self.open.as_mut().ok_or_else(poisoned)?;
        if c.data.bytes > MAX_CHUNK_DATA_BYTES {
            return Err(ReadOnlyError::ChunkTooLarge { chunk: c.id.stem() });
        }
        self.entry.clear();
        format::put_index_entry(&mut self.entry, self.group_prefix, c.data.bytes as u32);
        c.index.write(&self.entry)?;
        c.data.write(&self.scratch)?;
        c.rows += count as u64;
        if count > 1 && c.id.replica == 0 {
            self.out.collisions += 1;
        }
        self.builder
            .progress
            .tuples_written
            .fetch_add(count as u64, Ordering::Relaxed);
        self.group.clear();
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<ShardOutput> {
        self.flush_group()?;
        self.close_open()?;
        // Chunks no tuple reached still get their (empty) files.
        while self.next < self.chunks.len() {
            let (n, ..) = self.chunks[self.next];
            self.open_chunk(n)?;
            self.close_open()?;
        }
        Ok(self.out)
    }
}
