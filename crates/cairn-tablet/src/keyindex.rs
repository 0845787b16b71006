//! A DiskRowSet's key index: its sorted encoded primary keys and a bloom filter.
//!
//! Row *ordinals* (positions in the rowset's base data) are positions in this sorted
//! list, so key → ordinal is a binary search (`O(log n)` `memcmp`s over a memory-mapped
//! file), and the bloom filter answers most "is this key here?" questions of the write
//! path without touching the keys at all (Kudu paper §4.3, "bloom filters").
//!
//! File layout (little-endian): `"CKIX"`, version `u32`, row count `n: u64`, bloom hash
//! count `k: u32`, bloom word count `w: u64`, `w` bloom words `u64`, `n + 1` key offsets
//! `u32`, the key bytes, then a CRC32C of everything before it. The checksum is verified
//! when the file is opened.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{Result, TabletError};

const MAGIC: &[u8; 4] = b"CKIX";
const VERSION: u32 = 1;
const BLOOM_BITS_PER_KEY: u64 = 10;
const BLOOM_HASHES: u32 = 7;

fn bloom_positions(key: &[u8], bits: u64, k: u32) -> impl Iterator<Item = u64> {
    let h = xxhash_rust::xxh64::xxh64(key, 0xB100);
    let h1 = h & 0xFFFF_FFFF;
    let h2 = (h >> 32) | 1;
    (0..k as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
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
    let total_key_bytes: usize = keys.iter().map(|k| k.len()).sum();
    if total_key_bytes > u32::MAX as usize {
        return Err(TabletError::InvalidRequest(
            "rowset keys exceed 4 GiB".into(),
        ));
    }
    let mut buf = Vec::with_capacity(32 + bloom.len() * 8 + keys.len() * 4 + total_key_bytes);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&n.to_le_bytes());
    buf.extend_from_slice(&BLOOM_HASHES.to_le_bytes());
    buf.extend_from_slice(&words.to_le_bytes());
    for w in &bloom {
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
    let mut f = File::create(path).map_err(|e| TabletError::io(path, e))?;
    f.write_all(&buf).map_err(|e| TabletError::io(path, e))?;
    f.sync_all().map_err(|e| TabletError::io(path, e))?;
    Ok(crc32c::crc32c(&buf))
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
    offsets_off: usize,
    keys_off: usize,
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
        let stored = u32::from_le_bytes(map[body..].try_into().map_err(|_| corrupt("short"))?);
        if crc32c::crc32c(&map[..body]) != stored {
            return Err(corrupt("key index checksum mismatch"));
        }
        let rd64 = |o: usize| u64::from_le_bytes(map[o..o + 8].try_into().unwrap_or([0; 8]));
        let version = u32::from_le_bytes(map[4..8].try_into().map_err(|_| corrupt("short"))?);
        if version != VERSION {
            return Err(corrupt(&format!("unsupported key index version {version}")));
        }
        let n = rd64(8) as usize;
        let k = u32::from_le_bytes(map[16..20].try_into().map_err(|_| corrupt("short"))?);
        let words = rd64(20) as usize;
        let bloom_off = 28;
        let offsets_off = bloom_off + words * 8;
        let keys_off = offsets_off + (n + 1) * 4;
        if keys_off > body {
            return Err(corrupt("key index header does not match its size"));
        }
        let idx = KeyIndex {
            path: path.to_path_buf(),
            map,
            n,
            k,
            bloom_off,
            bloom_bits: (words * 64) as u64,
            offsets_off,
            keys_off,
        };
        if idx.keys_off + idx.offset(n) > body {
            return Err(corrupt("key index offsets run past the end of the file"));
        }
        Ok(idx)
    }

    fn offset(&self, i: usize) -> usize {
        let o = self.offsets_off + i * 4;
        u32::from_le_bytes([
            self.map[o],
            self.map[o + 1],
            self.map[o + 2],
            self.map[o + 3],
        ]) as usize
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.n
    }
    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The key at ordinal `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let (a, b) = (self.offset(i), self.offset(i + 1));
        &self.map[self.keys_off + a..self.keys_off + b]
    }

    /// Smallest key.
    pub fn min_key(&self) -> &[u8] {
        self.key(0)
    }
    /// Largest key.
    pub fn max_key(&self) -> &[u8] {
        self.key(self.n - 1)
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
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The ordinal of `key`, if present.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        if self.n == 0 || !self.may_contain(key) {
            return None;
        }
        let i = self.lower_bound(key);
        (i < self.n && self.key(i) == key).then_some(i)
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
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
            assert_eq!(idx.key(i), k.as_slice());
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
}
