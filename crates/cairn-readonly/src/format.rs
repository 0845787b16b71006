//! The chunk file format (read-only V2 of the Voldemort read-only paper, §4.1) and the
//! per-node `.metadata` file.
//!
//! A node's folder holds, for every chunk it stores ([`ChunkId`]), two files:
//!
//! - `p_r_c.index`: fixed 12-byte entries sorted by their first 8 bytes, so the
//!   *i*-th entry is at byte 12·*i* and no pointers are needed:
//!
//!   | bytes | content |
//!   |---|---|
//!   | 0..8 | the first 8 bytes of the MD5 of the encoded key (big-endian order = sort order) |
//!   | 8..12 | `u32` big-endian: offset of the key's group in the data file |
//!
//!   Keys whose 8-byte prefixes are equal share one entry.
//! - `p_r_c.data`: groups, one per index entry, at the entry's offset:
//!   `u32` count of tuples, then per tuple `u32` key length, `u32` value length, the
//!   encoded key, the encoded value (all integers big-endian). The full key is stored
//!   so a lookup compares it and collisions of the 8-byte prefix are resolved. Within a
//!   group, tuples are sorted by key bytes.
//!
//! Keys are encoded with Cairn's order-preserving key encoding
//! ([`cairn_common::key`]), so a key means the same bytes to a store and to a table.
//! A value is the store's value columns one after another in Cairn's value codec
//! ([`cairn_common::codec::put_value`]: a tag byte, then the payload little-endian,
//! strings and bytes with a `u32` length; tag 0 is NULL).
//!
//! `.metadata` is JSON ([`NodeMetadata`]): the format version, the store's schema and
//! layout, the node, its row count, and every file's size and MD5. The node checksum
//! is the MD5 of the concatenated 16-byte MD5s of its files in file order — the
//! paper's §4.3 checksum, recomputed on fetch and at open.

use serde::{Deserialize, Serialize};

use crate::error::{ReadOnlyError, Result};
use crate::layout::{ChunkId, NodeId, StoreLayout};
use crate::schema::StoreSchema;

/// The version of the file format this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The name of the per-node metadata file.
pub const METADATA_FILE: &str = ".metadata";
/// Bytes per index entry: an 8-byte hash prefix and a 4-byte offset.
pub const INDEX_ENTRY_BYTES: usize = 12;
/// The largest data file a chunk may have: its offsets are `u32`.
pub const MAX_CHUNK_DATA_BYTES: u64 = u32::MAX as u64;

/// One file of a node's folder as listed in `.metadata`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The file name (no directory).
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its MD5, lower-case hex.
    pub md5: String,
}

/// The contents of a node folder's `.metadata`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetadata {
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The store's name.
    pub store: String,
    /// The node this folder is for.
    pub node: NodeId,
    /// The store's columns.
    pub schema: StoreSchema,
    /// The ring and replication the files were built for.
    pub layout: StoreLayout,
    /// Tuples in this folder (replicas counted on the node that holds them).
    pub rows: u64,
    /// Every chunk file, in [`StoreLayout::chunks_of_node`] order, index before data.
    pub files: Vec<FileEntry>,
    /// MD5 over the files' MD5s in order, lower-case hex.
    pub checksum: String,
    /// The chunks in this folder, in file order, when they are not
    /// [`StoreLayout::chunks_of_node`] of `node`: a folder assembled by a rebalance
    /// holds the partitions the node had on the previous ring as well as the ones the
    /// new ring gives it, so that clients on either ring are answered (see
    /// [`crate::rebalance`]). Absent in built folders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Vec<ChunkId>>,
}

impl NodeMetadata {
    /// The node checksum for these file entries (module docs).
    pub fn checksum_of(files: &[FileEntry]) -> Result<String> {
        use md5::{Digest, Md5};
        let mut h = Md5::new();
        for f in files {
            h.update(from_hex(&f.md5).ok_or_else(|| {
                ReadOnlyError::InvalidInput(format!("file {} has a malformed MD5", f.name))
            })?);
        }
        Ok(to_hex(&h.finalize()))
    }

    /// The chunks in this folder, in file order: [`NodeMetadata::held`] when set,
    /// else the layout's chunks of this node.
    pub fn chunk_ids(&self) -> Vec<ChunkId> {
        self.held
            .clone()
            .unwrap_or_else(|| self.layout.chunks_of_node(self.node))
    }

    /// Serializes to the bytes written to `.metadata` (pretty JSON, one trailing
    /// newline; the same metadata always gives the same bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// The file names of a chunk: `(index, data)`.
pub fn chunk_files(id: &ChunkId) -> (String, String) {
    let stem = id.stem();
    (format!("{stem}.index"), format!("{stem}.data"))
}

/// Lower-case hex of bytes.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// One stored tuple: the encoded key and the encoded value.
pub type Tuple<'a> = (&'a [u8], &'a [u8]);

/// Appends one group to a data file buffer: the tuples (sorted by key) that share an
/// index entry.
pub fn put_group(out: &mut Vec<u8>, tuples: &[Tuple<'_>]) {
    out.extend_from_slice(&(tuples.len() as u32).to_be_bytes());
    for (k, v) in tuples {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
}

/// Appends one index entry.
pub fn put_index_entry(out: &mut Vec<u8>, prefix: u64, offset: u32) {
    out.extend_from_slice(&prefix.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
}

/// The `i`-th index entry's `(prefix, offset)`. REQUIRES: `i` < entries in `index`.
fn entry(index: &[u8], i: usize) -> (u64, u32) {
    let e = &index[i * INDEX_ENTRY_BYTES..(i + 1) * INDEX_ENTRY_BYTES];
    let mut p = [0u8; 8];
    p.copy_from_slice(&e[..8]);
    let mut o = [0u8; 4];
    o.copy_from_slice(&e[8..]);
    (u64::from_be_bytes(p), u32::from_be_bytes(o))
}

/// Finds the data offset for a hash prefix in an index file's bytes.
///
/// Interpolation search (the paper's §4.2.2: MD5 prefixes are uniform, so the guess
/// lands within a few entries), narrowing like a binary search so it never takes more
/// steps than one. REQUIRES: `index.len()` is a multiple of [`INDEX_ENTRY_BYTES`] and
/// the entries are sorted (checked when the chunk is opened).
pub fn search_index(index: &[u8], prefix: u64) -> Option<u32> {
    let n = index.len() / INDEX_ENTRY_BYTES;
    if n == 0 {
        return None;
    }
    let (mut lo, mut hi) = (0usize, n - 1);
    let (mut lo_key, mut hi_key) = (entry(index, lo).0, entry(index, hi).0);
    let mut interpolate = true;
    while lo <= hi {
        if prefix < lo_key || prefix > hi_key {
            return None;
        }
        let mid = if interpolate && hi_key > lo_key {
            let span = (hi - lo) as u128;
            lo + ((prefix - lo_key) as u128 * span / (hi_key - lo_key) as u128) as usize
        } else {
            lo + (hi - lo) / 2
        };
        // Alternate with bisection so a skewed index cannot make this linear.
        interpolate = !interpolate;
        let (k, off) = entry(index, mid);
        match k.cmp(&prefix) {
            std::cmp::Ordering::Equal => return Some(off),
            std::cmp::Ordering::Less => {
                lo = mid + 1;
                if lo >= n {
                    return None;
                }
                lo_key = entry(index, lo).0;
            }
            std::cmp::Ordering::Greater => {
                if mid == 0 {
                    return None;
                }
                hi = mid - 1;
                hi_key = entry(index, hi).0;
            }
        }
    }
    None
}

/// Reads big-endian `u32` at `at` in `buf`, if in bounds.
fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The tuples of the group at `offset` in a data file, in order. Errors (as text for
/// the caller to wrap with the file) when the group runs past the file.
pub fn read_group(data: &[u8], offset: u32) -> Result<Vec<Tuple<'_>>, String> {
    let mut at = offset as usize;
    let count = be_u32(data, at).ok_or_else(|| format!("group at {offset} is past the end"))?;
    at += 4;
    // Each tuple takes at least 8 bytes: a count beyond that is corruption.
    if count as usize > data.len().saturating_sub(at) / 8 {
        return Err(format!("group at {offset} claims {count} tuples"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let k = be_u32(data, at).ok_or("truncated tuple header")? as usize;
        let v = be_u32(data, at + 4).ok_or("truncated tuple header")? as usize;
        at += 8;
        let end_k = at.checked_add(k).ok_or("key length overflows")?;
        let end_v = end_k.checked_add(v).ok_or("value length overflows")?;
        let key = data
            .get(at..end_k)
            .ok_or_else(|| format!("key of group at {offset} runs past the end"))?;
        let value = data
            .get(end_k..end_v)
            .ok_or_else(|| format!("value of group at {offset} runs past the end"))?;
        out.push((key, value));
        at = end_v;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hex_round_trip() {
        let b: Vec<u8> = (0..16).map(|i| i * 17).collect();
        assert_eq!(from_hex(&to_hex(&b)).unwrap().to_vec(), b);
        assert!(from_hex("zz").is_none());
    }

    #[test]
    fn truncated_groups_are_errors_not_panics() {
        let mut d = Vec::new();
        put_group(&mut d, &[(b"key", b"value")]);
        for cut in 0..d.len() {
            assert!(read_group(&d[..cut], 0).is_err(), "cut at {cut}");
        }
        assert_eq!(
            read_group(&d, 0).unwrap(),
            vec![(&b"key"[..], &b"value"[..])]
        );
        assert!(read_group(&[255, 255, 255, 255], 0).is_err());
        assert!(read_group(&d, 1 << 30).is_err());
    }

    proptest! {
        #[test]
        fn search_finds_exactly_the_present_prefixes(
            mut keys in proptest::collection::btree_set(any::<u64>(), 0..300)
                .prop_map(|s| s.into_iter().collect::<Vec<_>>()),
            skew in any::<bool>(),
            probes in proptest::collection::vec(any::<u64>(), 0..50),
        ) {
            if skew {
                // Clustered prefixes, the worst case for interpolation.
                keys = keys.iter().map(|k| k >> 40).collect::<std::collections::BTreeSet<_>>()
                    .into_iter().collect();
            }
            let mut index = Vec::new();
            for (i, &k) in keys.iter().enumerate() {
                put_index_entry(&mut index, k, i as u32);
            }
            for (i, &k) in keys.iter().enumerate() {
                prop_assert_eq!(search_index(&index, k), Some(i as u32));
            }
            for p in probes {
                let expect = keys.binary_search(&p).ok().map(|i| i as u32);
                prop_assert_eq!(search_index(&index, p), expect);
            }
        }
    }
}
