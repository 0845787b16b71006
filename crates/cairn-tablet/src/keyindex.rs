//! A DiskRowSet's key index: its sorted encoded primary keys and a bloom filter.
//!
//! Row *ordinals* (positions in the rowset's base data) are positions in this sorted
//! list, so key → ordinal is a binary search over a memory-mapped file, and the bloom
//! filter answers most "is this key here?" questions of the write path without touching
//! the keys at all (Kudu paper §4.3, "bloom filters").
//!
//! Keys are prefix-compressed in blocks of [`RESTART_INTERVAL`] keys, as in LevelDB's
//! and Kudu's index blocks: a block's first key (its *restart point*) is stored whole,
//! every later key as the length of the prefix it shares with the key before it plus
//! the bytes that differ. A lookup binary-searches the restart points and then decodes
//! at most one block. Sorted composite keys share most of their bytes with their
//! neighbours, so this stores a TPC-H lineitem key in about a third of its size.
//!
//! File layout (little-endian, version 2): `"CKIX"`, version `u32`, key count `n: u64`,
//! bloom hash count `k: u32`, bloom word count `w: u64`, `w` bloom words `u64`, the
//! restart interval `r: u32`, `ceil(n / r) + 1` block offsets `u32` (relative to the
//! first block), the blocks, the largest key (length `u32`, bytes), then a CRC32C of
//! everything before it. In a block, the restart key is `varint len, bytes`; each later
//! key is `varint shared, varint rest_len, rest bytes` (LEB128 varints). The checksum is
//! verified and every block decoded once when the file is opened, so lookups cannot run
//! off the end of a damaged file. Version 1 files (`n + 1` key offsets `u32` and the
//! uncompressed keys in place of the restart interval, offsets, blocks and largest key)
//! are still read.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use cairn_common::codec;
use memmap2::Mmap;

use crate::error::{Result, TabletError};

const MAGIC: &[u8; 4] = b"CKIX";
const VERSION: u32 = 2;
/// The uncompressed layout of older files, still readable.
const VERSION_FLAT: u32 = 1;
const BLOOM_BITS_PER_KEY: u64 = 10;
const BLOOM_HASHES: u32 = 7;

fn bloom_positions(key: &[u8], bits: u64, k: u32) -> impl Iterator<Item = u64> {
    let h = xxhash_rust::xxh64::xxh64(key, 0xB100);
    let h1 = h & 0xFFFF_FFFF;
    let h2 = (h >> 32) | 1;
    (0..k as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
}

/// Keys per prefix-compressed block. Sixteen keeps a lookup's linear part to a few
/// hundred bytes while the restart keys cost a sixteenth of a full key per key.
pub const RESTART_INTERVAL: usize = 16;

fn put_varint(out: &mut Vec<u8>, x: usize) {
    codec::put_varint(out, x as u64);
}

/// Reads a varint at `*pos` in `b`, advancing `pos`; `None` if it runs off the end or
/// exceeds `u32` (no key or block is that long), so sums of them cannot overflow.
fn get_varint(b: &[u8], pos: &mut usize) -> Option<usize> {
    codec::get_varint(b, pos)
        .and_then(|x| u32::try_from(x).ok())
        .map(|x| x as usize)
}

/// Writes a key index for `keys` (sorted, unique). Returns the file's CRC32C.
pub fn write_key_index(path: &Path, keys: &[Vec<u8>]) -> Result<u32> {
    let n = keys.len() as u64;
    let words = (n * BLOOM_BITS_PER_KEY).div_ceil(64).max(1);
    let bits = words * 64;
    let mut bloom = vec![0u64; words as usize];
    for k in keys {
        for p in bloom_positions(k, bits, BLOOM_HASHES) {
            bloom[(p / 64) as usize] |= 1 << (p % 64);
        }
    }
    let mut blocks = Vec::with_capacity(keys.len() * 4);
    let mut offsets = Vec::with_capacity(keys.len() / RESTART_INTERVAL + 2);
    for chunk in keys.chunks(RESTART_INTERVAL) {
        offsets.push(blocks.len());
        let mut prev: &[u8] = &[];
        for (j, k) in chunk.iter().enumerate() {
            let shared = if j == 0 {
                0
            } else {
                prev.iter().zip(k).take_while(|(a, b)| a == b).count()
            };
            if j > 0 {
                put_varint(&mut blocks, shared);
            }
            put_varint(&mut blocks, k.len() - shared);
            blocks.extend_from_slice(&k[shared..]);
            prev = k;
        }
    }
    offsets.push(blocks.len());
    if blocks.len() > u32::MAX as usize {
        return Err(TabletError::InvalidRequest(
            "rowset keys exceed 4 GiB".into(),
        ));
    }
    let last = keys.last().map(|k| k.as_slice()).unwrap_or(&[]);
    let mut buf =
        Vec::with_capacity(48 + bloom.len() * 8 + offsets.len() * 4 + blocks.len() + last.len());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&n.to_le_bytes());
    buf.extend_from_slice(&BLOOM_HASHES.to_le_bytes());
    buf.extend_from_slice(&words.to_le_bytes());
    for w in &bloom {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    buf.extend_from_slice(&(RESTART_INTERVAL as u32).to_le_bytes());
    for o in &offsets {
        buf.extend_from_slice(&(*o as u32).to_le_bytes());
    }
    buf.extend_from_slice(&blocks);
    buf.extend_from_slice(&(last.len() as u32).to_le_bytes());
    buf.extend_from_slice(last);
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    let mut f = File::create(path).map_err(|e| TabletError::io(path, e))?;
    f.write_all(&buf).map_err(|e| TabletError::io(path, e))?;
    f.sync_all().map_err(|e| TabletError::io(path, e))?;
    Ok(crc32c::crc32c(&buf))
}

/// Where the keys sit in an open key index file.
#[derive(Debug)]
enum Layout {
    /// Version 1: `n + 1` offsets `u32` at `offsets_off`, then the keys at `keys_off`.
    Flat { offsets_off: usize, keys_off: usize },
    /// Version 2: prefix-compressed blocks of `interval` keys.
    Blocked {
        interval: usize,
        /// `blocks + 1` block offsets `u32`, relative to `data_off`.
        offsets_off: usize,
        blocks: usize,
        data_off: usize,
        /// The largest key's bytes.
        last: (usize, usize),
    },
}

/// An open, verified key index.
#[derive(Debug)]
pub struct KeyIndex {
    path: PathBuf,
    map: Mmap,
    n: usize,
    k: u32,
    bloom_off: usize,
    bloom_bits: u64,
    layout: Layout,
}

impl KeyIndex {
    /// Opens and verifies a key index; `expected_crc` is the whole-file checksum recorded
    /// in the tablet metadata.
    pub fn open(path: &Path, expected_crc: u32) -> Result<KeyIndex> {
        let f = File::open(path).map_err(|e| TabletError::io(path, e))?;
        // SAFETY: the file is immutable once written; Cairn never modifies it in place.
        let map = unsafe { Mmap::map(&f) }.map_err(|e| TabletError::io(path, e))?;
        let corrupt = |d: &str| TabletError::corruption(path, d);
        if map.len() < 32 || &map[0..4] != MAGIC {
            return Err(corrupt("not a key index file (bad magic)"));
        }
        if crc32c::crc32c(&map) != expected_crc {
            return Err(corrupt(
                "key index checksum does not match the tablet metadata",
            ));
        }
        let body = map.len() - 4;
        let rd32 = |o: usize| -> Result<usize> {
            map.get(o..o + 4)
                .filter(|_| o + 4 <= body)
                .and_then(|b| b.try_into().ok())
                .map(|b| u32::from_le_bytes(b) as usize)
                .ok_or_else(|| corrupt("key index is shorter than its header says"))
        };
        let rd64 = |o: usize| -> Result<usize> {
            map.get(o..o + 8)
                .filter(|_| o + 8 <= body)
                .and_then(|b| b.try_into().ok())
                .and_then(|b| usize::try_from(u64::from_le_bytes(b)).ok())
                .ok_or_else(|| corrupt("key index is shorter than its header says"))
        };
        let stored = map[body..]
            .try_into()
            .map(u32::from_le_bytes)
            .map_err(|_| corrupt("short"))?;
        if stored != crc32c::crc32c(&map[..body]) {
            return Err(corrupt("key index checksum mismatch"));
        }
        let version = rd32(4)? as u32;
        let n = rd64(8)?;
        let k = rd32(16)? as u32;
        let words = rd64(20)?;
        let bloom_off = 28;
        let after_bloom = words
            .checked_mul(8)
            .and_then(|b| b.checked_add(bloom_off))
            .filter(|&o| o <= body)
            .ok_or_else(|| corrupt("key index bloom filter runs past the end of the file"))?;
        let layout = match version {
            VERSION_FLAT => {
                let keys_off = n
                    .checked_add(1)
                    .and_then(|c| c.checked_mul(4))
                    .and_then(|b| b.checked_add(after_bloom))
                    .filter(|&o| o <= body)
                    .ok_or_else(|| corrupt("key index header does not match its size"))?;
                let mut prev = 0;
                for i in 0..=n {
                    let o = rd32(after_bloom + i * 4)?;
                    if o < prev || keys_off + o > body {
                        return Err(corrupt("key index offsets run past the end of the file"));
                    }
                    prev = o;
                }
                Layout::Flat {
                    offsets_off: after_bloom,
                    keys_off,
                }
            }
            VERSION => {
                let interval = rd32(after_bloom)?;
                if interval == 0 {
                    return Err(corrupt("key index restart interval is zero"));
                }
                let blocks = n.div_ceil(interval);
                let offsets_off = after_bloom + 4;
                let data_off = (blocks + 1)
                    .checked_mul(4)
                    .and_then(|b| b.checked_add(offsets_off))
                    .filter(|&o| o <= body)
                    .ok_or_else(|| corrupt("key index header does not match its size"))?;
                let data_len = rd32(offsets_off + blocks * 4)?;
                let last_len_off = data_off + data_len;
                let last_len = rd32(last_len_off)?;
                if last_len_off + 4 + last_len != body {
                    return Err(corrupt("key index blocks do not match its size"));
                }
                Layout::Blocked {
                    interval,
                    offsets_off,
                    blocks,
                    data_off,
                    last: (last_len_off + 4, last_len_off + 4 + last_len),
                }
            }
            v => return Err(corrupt(&format!("unsupported key index version {v}"))),
        };
        let idx = KeyIndex {
            path: path.to_path_buf(),
            map,
            n,
            k,
            bloom_off,
            bloom_bits: (words * 64) as u64,
            layout,
        };
        idx.verify_blocks()
            .map_err(|d| TabletError::corruption(path, d))?;
        Ok(idx)
    }

    /// Decodes every block once, so that later lookups may index without checks.
    fn verify_blocks(&self) -> std::result::Result<(), &'static str> {
        let Layout::Blocked {
            interval,
            blocks,
            data_off,
            last,
            ..
        } = self.layout
        else {
            return Ok(());
        };
        let mut key = Vec::new();
        let mut prev_end = 0;
        for b in 0..blocks {
            let (start, end) = (self.block_offset(b), self.block_offset(b + 1));
            if start != prev_end || end < start || data_off + end > last.0 - 4 {
                return Err("key index block offsets are out of order");
            }
            prev_end = end;
            let data = &self.map[data_off + start..data_off + end];
            let keys = interval.min(self.n - b * interval);
            let mut pos = 0;
            for j in 0..keys {
                let shared = if j == 0 {
                    0
                } else {
                    get_varint(data, &mut pos).ok_or("key index block is truncated")?
                };
                let rest = get_varint(data, &mut pos).ok_or("key index block is truncated")?;
                if shared > key.len() || pos + rest > data.len() {
                    return Err("key index block is truncated");
                }
                key.truncate(shared);
                key.extend_from_slice(&data[pos..pos + rest]);
                pos += rest;
            }
            if pos != data.len() {
                return Err("key index block has trailing bytes");
            }
        }
        if self.n > 0 && key != self.map[last.0..last.1] {
            return Err("key index's largest key does not match its last block");
        }
        Ok(())
    }

    fn u32_at(&self, o: usize) -> usize {
        u32::from_le_bytes([
            self.map[o],
            self.map[o + 1],
            self.map[o + 2],
            self.map[o + 3],
        ]) as usize
    }

    /// REQUIRES: a blocked layout and `b <= blocks`.
    fn block_offset(&self, b: usize) -> usize {
        match self.layout {
            Layout::Blocked { offsets_off, .. } => self.u32_at(offsets_off + b * 4),
            Layout::Flat { .. } => 0,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.n
    }
    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The key at ordinal `i`. REQUIRES: `i < len()`.
    pub fn key(&self, i: usize) -> Vec<u8> {
        let mut c = self.cursor();
        c.seek(i).to_vec()
    }

    /// A cursor that decodes keys by ordinal, cheaply when they are asked for in
    /// ascending order (as scans and compactions do).
    pub fn cursor(&self) -> KeyCursor<'_> {
        KeyCursor {
            idx: self,
            next: usize::MAX,
            pos: 0,
            key: Vec::new(),
        }
    }

    /// Smallest key. REQUIRES: `!is_empty()`.
    pub fn min_key(&self) -> &[u8] {
        match self.layout {
            Layout::Flat { .. } => self.flat_key(0),
            Layout::Blocked { .. } => self.restart_key(0),
        }
    }
    /// Largest key. REQUIRES: `!is_empty()`.
    pub fn max_key(&self) -> &[u8] {
        match self.layout {
            Layout::Flat { .. } => self.flat_key(self.n - 1),
            Layout::Blocked { last, .. } => &self.map[last.0..last.1],
        }
    }

    /// REQUIRES: a flat layout and `i < n`.
    fn flat_key(&self, i: usize) -> &[u8] {
        let Layout::Flat {
            offsets_off,
            keys_off,
        } = self.layout
        else {
            return &[];
        };
        let a = self.u32_at(offsets_off + i * 4);
        let b = self.u32_at(offsets_off + i * 4 + 4);
        &self.map[keys_off + a..keys_off + b]
    }

    /// The whole first key of block `b`. REQUIRES: a blocked layout and `b < blocks`.
    fn restart_key(&self, b: usize) -> &[u8] {
        let Layout::Blocked { data_off, .. } = self.layout else {
            return &[];
        };
        let mut pos = data_off + self.block_offset(b);
        let len = get_varint(&self.map, &mut pos).unwrap_or(0);
        &self.map[pos..pos + len]
    }

    /// Whether the bloom filter admits `key` (false positives possible, no false negatives).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        bloom_positions(key, self.bloom_bits, self.k).all(|p| {
            let o = self.bloom_off + (p / 64) as usize * 8;
            let w = u64::from_le_bytes(self.map[o..o + 8].try_into().unwrap_or([0; 8]));
            w & (1 << (p % 64)) != 0
        })
    }

    /// The first ordinal whose key is `>= key`.
    pub fn lower_bound(&self, key: &[u8]) -> usize {
        self.lower_bound_in(key, &mut self.cursor())
    }

    /// [`lower_bound`](Self::lower_bound), leaving `c` at the answer when it is `< len()`.
    fn lower_bound_in(&self, key: &[u8], c: &mut KeyCursor<'_>) -> usize {
        match self.layout {
            Layout::Flat { .. } => {
                let (mut lo, mut hi) = (0, self.n);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if self.flat_key(mid) < key {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
            Layout::Blocked {
                interval, blocks, ..
            } => {
                // Blocks whose restart key is <= key; the answer lies in the last of them.
                let (mut lo, mut hi) = (0, blocks);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if self.restart_key(mid) <= key {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                if lo == 0 {
                    return 0;
                }
                let first = (lo - 1) * interval;
                let end = (first + interval).min(self.n);
                (first..end).find(|&i| c.seek(i) >= key).unwrap_or(end)
            }
        }
    }

    /// The ordinal of `key`, if present.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        if self.n == 0 || !self.may_contain(key) {
            return None;
        }
        let mut c = self.cursor();
        let i = self.lower_bound_in(key, &mut c);
        (i < self.n && c.seek(i) == key).then_some(i)
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Decodes a [`KeyIndex`]'s keys by ordinal, reusing its place in the current block
/// when the next ordinal asked for is at or after the last one.
#[derive(Debug)]
pub struct KeyCursor<'a> {
    idx: &'a KeyIndex,
    /// The ordinal the cursor would decode next (`usize::MAX` before the first seek).
    next: usize,
    /// Byte position of that key's encoding in the mapped file.
    pos: usize,
    /// The key at ordinal `next - 1`.
    key: Vec<u8>,
}

impl KeyCursor<'_> {
    /// The key at ordinal `i`. REQUIRES: `i < len()` of the index.
    pub fn seek(&mut self, i: usize) -> &[u8] {
        let idx = self.idx;
        let Layout::Blocked {
            interval, data_off, ..
        } = idx.layout
        else {
            return idx.flat_key(i);
        };
        let block = i / interval;
        if self.next == usize::MAX || i + 1 < self.next || block != (self.next - 1) / interval {
            self.next = block * interval;
            self.pos = data_off + idx.block_offset(block);
        } else if i + 1 == self.next {
            return &self.key;
        }
        // The block was verified when the index was opened.
        let map = &idx.map[..];
        while self.next <= i {
            let shared = if self.next.is_multiple_of(interval) {
                0
            } else {
                get_varint(map, &mut self.pos).unwrap_or(0)
            };
            let rest = get_varint(map, &mut self.pos).unwrap_or(0);
            self.key.truncate(shared);
            self.key.extend_from_slice(&map[self.pos..self.pos + rest]);
            self.pos += rest;
            self.next += 1;
        }
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys");
        let keys: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| (i * 2).to_be_bytes().to_vec())
            .collect();
        let crc = write_key_index(&p, &keys).unwrap();
        let idx = KeyIndex::open(&p, crc).unwrap();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(idx.find(k), Some(i));
            assert_eq!(&idx.key(i), k);
        }
        let absent = (0..1000u32)
            .filter(|i| idx.find(&(i * 2 + 1).to_be_bytes()).is_some())
            .count();
        assert_eq!(absent, 0);
        assert_eq!(idx.lower_bound(&3u32.to_be_bytes()), 2);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[100] ^= 0xFF;
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(
            KeyIndex::open(&p, crc),
            Err(TabletError::Corruption { .. })
        ));
    }

    /// Writes `keys` in the version 1 layout, as older Cairn versions did.
    fn write_flat(path: &Path, keys: &[Vec<u8>]) -> u32 {
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&VERSION_FLAT.to_le_bytes());
        buf.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        buf.extend_from_slice(&BLOOM_HASHES.to_le_bytes());
        let words = (keys.len() as u64 * BLOOM_BITS_PER_KEY).div_ceil(64).max(1);
        buf.extend_from_slice(&words.to_le_bytes());
        let mut bloom = vec![0u64; words as usize];
        for k in keys {
            for p in bloom_positions(k, words * 64, BLOOM_HASHES) {
                bloom[(p / 64) as usize] |= 1 << (p % 64);
            }
        }
        for w in bloom {
            buf.extend_from_slice(&w.to_le_bytes());
        }
        let mut off = 0u32;
        buf.extend_from_slice(&off.to_le_bytes());
        for k in keys {
            off += k.len() as u32;
            buf.extend_from_slice(&off.to_le_bytes());
        }
        for k in keys {
            buf.extend_from_slice(k);
        }
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        std::fs::write(path, &buf).unwrap();
        crc32c::crc32c(&buf)
    }

    /// Checks every lookup of `idx` against the sorted `keys` it was written from.
    fn check_against_model(idx: &KeyIndex, keys: &[Vec<u8>], probes: &[Vec<u8>], seeks: &[usize]) {
        assert_eq!(idx.len(), keys.len());
        if let (Some(first), Some(last)) = (keys.first(), keys.last()) {
            assert_eq!(idx.min_key(), first.as_slice());
            assert_eq!(idx.max_key(), last.as_slice());
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(idx.find(k), Some(i));
        }
        for p in probes {
            let want = keys.partition_point(|k| k < p);
            assert_eq!(idx.lower_bound(p), want, "lower_bound({p:?})");
            let found = keys.binary_search(p).ok();
            assert_eq!(idx.find(p), found, "find({p:?})");
        }
        let mut c = idx.cursor();
        for &i in seeks.iter().filter(|&&i| i < keys.len()) {
            assert_eq!(c.seek(i), keys[i].as_slice(), "seek({i})");
        }
        let mut c = idx.cursor();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(c.seek(i), k.as_slice());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Prefix-compressed blocks answer every lookup the way a sorted list does,
        /// for keys that are prefixes of each other, share long runs or share nothing;
        /// files in the old flat layout answer the same.
        #[test]
        fn blocked_index_matches_a_sorted_list(
            raw in proptest::collection::btree_set(
                proptest::collection::vec(proptest::prelude::prop_oneof![Just(0u8), Just(1u8), Just(255u8), proptest::prelude::any::<u8>()], 0..12),
                0..200,
            ),
            probes in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..6), 0..40),
            seeks in proptest::collection::vec(0usize..200, 0..60),
        ) {
            let keys: Vec<Vec<u8>> = raw.into_iter().collect();
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("keys");
            let crc = write_key_index(&p, &keys).unwrap();
            check_against_model(&KeyIndex::open(&p, crc).unwrap(), &keys, &probes, &seeks);
            let flat = dir.path().join("flat");
            let crc = write_flat(&flat, &keys);
            check_against_model(&KeyIndex::open(&flat, crc).unwrap(), &keys, &probes, &seeks);
        }
    }

    use proptest::prelude::Just;

    /// Sorted composite keys (an 8-byte order key and a 4-byte line number) take well
    /// under half their flat size.
    #[test]
    fn sorted_composite_keys_compress() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<Vec<u8>> = (0..100_000u64)
            .map(|i| {
                let mut k = (i / 4 * 32).to_be_bytes().to_vec();
                k.extend_from_slice(&((i % 4) as u32).to_be_bytes());
                k
            })
            .collect();
        let p = dir.path().join("keys");
        let crc = write_key_index(&p, &keys).unwrap();
        let flat = dir.path().join("flat");
        write_flat(&flat, &keys);
        let (blocked, flat) = (
            std::fs::metadata(&p).unwrap().len(),
            std::fs::metadata(&flat).unwrap().len(),
        );
        assert!(
            blocked * 2 < flat,
            "{blocked} bytes blocked against {flat} flat"
        );
        check_against_model(
            &KeyIndex::open(&p, crc).unwrap(),
            &keys,
            &[],
            &[99_999, 3, 17],
        );
    }

    /// A damaged file whose checksums were recomputed (so only the structure checks
    /// stand between it and the lookups) is refused or answers without panicking.
    #[test]
    fn damaged_structure_never_panics() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys");
        let keys: Vec<Vec<u8>> = (0..40u32).map(|i| (i * 3).to_be_bytes().to_vec()).collect();
        write_key_index(&p, &keys).unwrap();
        let good = std::fs::read(&p).unwrap();
        let body = good.len() - 4;
        let mut refused = 0;
        for at in 4..body {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut b = good[..body].to_vec();
                b[at] ^= flip;
                let crc = crc32c::crc32c(&b);
                b.extend_from_slice(&crc.to_le_bytes());
                std::fs::write(&p, &b).unwrap();
                match KeyIndex::open(&p, crc32c::crc32c(&b)) {
                    Ok(idx) => {
                        for k in &keys {
                            let _ = idx.find(k);
                        }
                        let mut c = idx.cursor();
                        for i in 0..idx.len().min(keys.len()) {
                            let _ = c.seek(i);
                        }
                        let _ = (idx.min_key(), idx.max_key());
                    }
                    Err(_) => refused += 1,
                }
            }
        }
        assert!(refused > 0);
    }
}
