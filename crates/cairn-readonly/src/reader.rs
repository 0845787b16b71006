//! Serving a node's folder: open (with verification) and look keys up.
//!
//! Opening reads `.metadata`, checks that the file list is exactly the chunks the
//! layout gives this node, that every file has its recorded size (and, with
//! [`Verify::Checksums`], its MD5), and that every index is sorted with offsets inside
//! its data file. The files are then memory-mapped: lookups go through the page
//! cache, as the paper's §4.1 argues, with no cache of our own.
//!
//! A lookup hashes the key, finds its chunk from the layout, searches the index
//! ([`format::search_index`]) and compares full keys in the data file's group.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use cairn_common::Value;
use md5::{Digest, Md5};
use memmap2::Mmap;

use crate::error::{ReadOnlyError, Result};
use crate::format::{self, FORMAT_VERSION, INDEX_ENTRY_BYTES, METADATA_FILE, NodeMetadata};
use crate::layout::{ChunkId, KeyHash};

/// How much of a folder [`StoreVersion::open`] verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// File list and sizes: reads only `.metadata`, so opening costs the same at any
    /// size (what a swap does, for files verified when they were installed).
    Sizes,
    /// File list, sizes, index order and offsets: reads the indexes.
    Structure,
    /// All of the above and every file's MD5 against `.metadata`: reads everything.
    Checksums,
}

/// A file's bytes, memory-mapped (empty files cannot be mapped).
#[derive(Debug)]
enum Mapped {
    Empty,
    Map(Mmap),
}

impl Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mapped::Empty => &[],
            Mapped::Map(m) => m,
        }
    }
}

fn map(path: &Path) -> Result<Mapped> {
    let f = File::open(path).map_err(|e| ReadOnlyError::io(format!("cannot open {path:?}"), e))?;
    let len = f
        .metadata()
        .map_err(|e| ReadOnlyError::io(format!("cannot stat {path:?}"), e))?
        .len();
    if len == 0 {
        return Ok(Mapped::Empty);
    }
    // SAFETY: store files are immutable once built: a version folder is written by
    // the builder or the fetcher, verified, and never modified while it is served.
    let m = unsafe { Mmap::map(&f) }
        .map_err(|e| ReadOnlyError::io(format!("cannot memory-map {path:?}"), e))?;
    Ok(Mapped::Map(m))
}

/// A tuple copied out of a store: the encoded key and the encoded value.
pub type OwnedTuple = (Vec<u8>, Vec<u8>);

/// Where a partition scan continues: a chunk and an index entry in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanCursor {
    /// The chunk.
    pub chunk: u32,
    /// The index entry in it.
    pub entry: u64,
}

/// One chunk's index and data, mapped.
#[derive(Debug)]
pub struct Chunk {
    id: ChunkId,
    data_path: PathBuf,
    index: Mapped,
    data: Mapped,
}

impl Chunk {
    /// The value of `key` (whose hash prefix is `prefix`) in this chunk.
    pub fn get(&self, prefix: u64, key: &[u8]) -> Result<Option<&[u8]>> {
        let Some(offset) = format::search_index(&self.index, prefix) else {
            return Ok(None);
        };
        let group = format::read_group(&self.data, offset)
            .map_err(|d| ReadOnlyError::corrupt(&self.data_path, d))?;
        Ok(group.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v))
    }

    /// Which chunk this is.
    pub fn id(&self) -> ChunkId {
        self.id
    }

    /// Number of index entries.
    pub fn entries(&self) -> usize {
        self.index.len() / INDEX_ENTRY_BYTES
    }
}

/// Counts the tuples of one chunk (its index and data files) by reading its groups.
pub fn count_tuples(index_path: &Path, data_path: &Path) -> Result<u64> {
    let index = map(index_path)?;
    let data = map(data_path)?;
    let mut n = 0u64;
    for entry in index.chunks_exact(INDEX_ENTRY_BYTES) {
        let offset = u32::from_be_bytes([entry[8], entry[9], entry[10], entry[11]]);
        n += format::read_group(&data, offset)
            .map_err(|d| ReadOnlyError::corrupt(data_path, d))?
            .len() as u64;
    }
    Ok(n)
}

/// Checks the chunk list of a folder assembled by a rebalance: every partition it
/// holds comes whole (chunks `0..chunks` of one replica, in order), once, and it
/// holds every partition the layout gives its node.
fn check_held(meta: &NodeMetadata, ids: &[ChunkId]) -> std::result::Result<(), String> {
    let chunks = meta.layout.chunks as usize;
    let mut held = std::collections::BTreeSet::new();
    for group in ids.chunks(chunks) {
        let first = group[0];
        let whole = group.len() == chunks
            && group.iter().enumerate().all(|(c, id)| {
                id.partition == first.partition
                    && id.replica == first.replica
                    && id.chunk == c as u32
            });
        if !whole || first.partition >= meta.layout.partitions() {
            return Err(format!(
                "partition {} is not held whole (chunks 0..{chunks} of one replica)",
                first.partition
            ));
        }
        if !held.insert(first.partition) {
            return Err(format!("partition {} is held twice", first.partition));
        }
    }
    if let Some(p) = meta
        .layout
        .chunks_of_node(meta.node)
        .iter()
        .find(|id| !held.contains(&id.partition))
    {
        return Err(format!(
            "node {} must hold partition {} on its ring, and does not",
            meta.node, p.partition
        ));
    }
    Ok(())
}

/// One node's folder of a store version, open for lookups.
#[derive(Debug)]
pub struct StoreVersion {
    dir: PathBuf,
    meta: NodeMetadata,
    /// Primary partition → the replica this node holds and its chunks by chunk id.
    partitions: HashMap<u32, (u32, Vec<Chunk>)>,
}

impl StoreVersion {
    /// Opens and verifies a node folder (module docs).
    pub fn open(dir: &Path, verify: Verify) -> Result<StoreVersion> {
        let meta_path = dir.join(METADATA_FILE);
        let bytes = std::fs::read(&meta_path)
            .map_err(|e| ReadOnlyError::io(format!("cannot read {meta_path:?}"), e))?;
        let meta: NodeMetadata = serde_json::from_slice(&bytes)
            .map_err(|e| ReadOnlyError::corrupt(&meta_path, format!("not valid metadata: {e}")))?;
        if meta.format_version != FORMAT_VERSION {
            return Err(ReadOnlyError::corrupt(
                &meta_path,
                format!(
                    "format version {} is not the {FORMAT_VERSION} this server reads \
                     (rebuild the store with this version of cairn)",
                    meta.format_version
                ),
            ));
        }
        meta.layout
            .validate()
            .map_err(|e| ReadOnlyError::corrupt(&meta_path, e.to_string()))?;
        let ids = meta.chunk_ids();
        if meta.held.is_some() {
            check_held(&meta, &ids).map_err(|d| ReadOnlyError::corrupt(&meta_path, d))?;
        }
        let expected: Vec<String> = ids
            .iter()
            .flat_map(|id| {
                let (i, d) = format::chunk_files(id);
                [i, d]
            })
            .collect();
        let listed: Vec<&str> = meta.files.iter().map(|f| f.name.as_str()).collect();
        if listed != expected {
            return Err(ReadOnlyError::corrupt(
                &meta_path,
                "the file list does not match the chunks the layout gives this node",
            ));
        }
        if NodeMetadata::checksum_of(&meta.files)? != meta.checksum {
            return Err(ReadOnlyError::corrupt(
                &meta_path,
                "the node checksum does not match the files' checksums",
            ));
        }
        let mut partitions: HashMap<u32, (u32, Vec<Chunk>)> = HashMap::new();
        for (id, pair) in ids.iter().zip(meta.files.chunks(2)) {
            let mut mapped = Vec::with_capacity(2);
            for f in pair {
                let path = dir.join(&f.name);
                let m = map(&path)?;
                if m.len() as u64 != f.bytes {
                    return Err(ReadOnlyError::corrupt(
                        &path,
                        format!("{} bytes, .metadata says {}", m.len(), f.bytes),
                    ));
                }
                if verify == Verify::Checksums && format::to_hex(&Md5::digest(&*m)) != f.md5 {
                    return Err(ReadOnlyError::corrupt(
                        &path,
                        "MD5 does not match .metadata",
                    ));
                }
                mapped.push(m);
            }
            let data = mapped.pop().unwrap_or(Mapped::Empty);
            let index = mapped.pop().unwrap_or(Mapped::Empty);
            let chunk = Chunk {
                id: *id,
                data_path: dir.join(&pair[1].name),
                index,
                data,
            };
            if verify != Verify::Sizes {
                check_index(&chunk, &dir.join(&pair[0].name))?;
            }
            let slot = partitions
                .entry(id.partition)
                .or_insert_with(|| (id.replica, Vec::new()));
            slot.1.push(chunk);
        }
        Ok(StoreVersion {
            dir: dir.to_path_buf(),
            meta,
            partitions,
        })
    }

    /// The folder's metadata.
    pub fn metadata(&self) -> &NodeMetadata {
        &self.meta
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this node holds a replica of the partition of `key` (an encoded key).
    pub fn holds(&self, key: &[u8]) -> bool {
        let hash = KeyHash::of(key);
        self.partitions
            .contains_key(&self.meta.layout.partition_of(&hash))
    }

    /// The chunk `chunk` of primary partition `partition`, if this node holds it.
    pub fn chunk(&self, partition: u32, chunk: u32) -> Option<&Chunk> {
        self.partitions.get(&partition)?.1.get(chunk as usize)
    }

    /// The encoded value of an encoded key, or `None` if the store does not have it.
    /// A key whose partition this node does not hold is an error (a routing bug).
    pub fn get(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        let hash = KeyHash::of(key);
        let layout = &self.meta.layout;
        let partition = layout.partition_of(&hash);
        let (_, chunks) = self.partitions.get(&partition).ok_or_else(|| {
            ReadOnlyError::InvalidInput(format!(
                "node {} holds no replica of partition {partition}: ask a node of its \
                 preference list",
                self.meta.node
            ))
        })?;
        let chunk = chunks
            .get(layout.chunk_of(&hash) as usize)
            .ok_or_else(|| ReadOnlyError::corrupt(&self.dir, "a chunk is missing"))?;
        chunk.get(hash.prefix(), key)
    }

    /// Reads the tuples of primary partition `partition` in file order, starting at
    /// `from` (chunk, index entry), until about `max_bytes` of keys and values are
    /// gathered: `(tuples, where to continue)`, `None` once the partition is done.
    /// A partition this node holds no replica of is an error.
    pub fn scan(
        &self,
        partition: u32,
        from: ScanCursor,
        max_bytes: usize,
    ) -> Result<(Vec<OwnedTuple>, Option<ScanCursor>)> {
        let (_, chunks) = self.partitions.get(&partition).ok_or_else(|| {
            ReadOnlyError::InvalidInput(format!(
                "node {} holds no replica of partition {partition}",
                self.meta.node
            ))
        })?;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let (mut c, mut e) = (from.chunk as usize, from.entry as usize);
        while let Some(chunk) = chunks.get(c) {
            while e < chunk.entries() {
                if bytes >= max_bytes.max(1) {
                    return Ok((
                        out,
                        Some(ScanCursor {
                            chunk: c as u32,
                            entry: e as u64,
                        }),
                    ));
                }
                let off = &chunk.index[e * INDEX_ENTRY_BYTES + 8..(e + 1) * INDEX_ENTRY_BYTES];
                let offset = u32::from_be_bytes([off[0], off[1], off[2], off[3]]);
                let group = format::read_group(&chunk.data, offset)
                    .map_err(|d| ReadOnlyError::corrupt(&chunk.data_path, d))?;
                for (k, v) in group {
                    bytes += k.len() + v.len();
                    out.push((k.to_vec(), v.to_vec()));
                }
                e += 1;
            }
            c += 1;
            e = 0;
        }
        Ok((out, None))
    }

    /// The value columns of the row with key `key` (one value per key column).
    pub fn get_row(&self, key: &[Value]) -> Result<Option<Vec<Value>>> {
        let k = self.meta.schema.encode_key(key)?;
        self.get(&k)?
            .map(|v| self.meta.schema.decode_value(v))
            .transpose()
    }
}

/// Checks an index is whole entries, strictly ascending, with offsets inside the data.
fn check_index(chunk: &Chunk, path: &Path) -> Result<()> {
    if !chunk.index.len().is_multiple_of(INDEX_ENTRY_BYTES) {
        return Err(ReadOnlyError::corrupt(
            path,
            format!(
                "{} bytes is not a whole number of entries",
                chunk.index.len()
            ),
        ));
    }
    let mut last: Option<u64> = None;
    for e in chunk.index.chunks_exact(INDEX_ENTRY_BYTES) {
        let mut p = [0u8; 8];
        p.copy_from_slice(&e[..8]);
        let prefix = u64::from_be_bytes(p);
        let offset = u32::from_be_bytes([e[8], e[9], e[10], e[11]]) as usize;
        if last.is_some_and(|l| l >= prefix) {
            return Err(ReadOnlyError::corrupt(
                path,
                "entries are not in ascending order",
            ));
        }
        if offset + 4 > chunk.data.len() {
            return Err(ReadOnlyError::corrupt(
                path,
                format!("offset {offset} is past the end of the data file"),
            ));
        }
        last = Some(prefix);
    }
    Ok(())
}
