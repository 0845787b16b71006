//! Delta stores: changes to rows of a DiskRowSet, keyed by (row ordinal, timestamp)
//! (Kudu paper §4.4).
//!
//! REDO deltas hold changes made after the base data was written; UNDO deltas hold the
//! inverse of changes made before it, for reads of the past. New REDOs go to the
//! rowset's [`DeltaMemStore`], a concurrent ordered map; flushing it writes an immutable
//! [`DeltaFile`]. Delta files are small relative to base data and are loaded into memory
//! when opened, sorted by (ordinal, timestamp).
//!
//! Delta file layout (version 2): `"CDLT"`, version `u32`, entry count `u64`, then an
//! LZ4 block (uncompressed length `u32` first) holding per entry the ordinal's distance
//! from the previous entry's ordinal and the timestamp's signed distance from the
//! previous entry's timestamp (both LEB128 varints, the latter zigzag-coded) followed by
//! the encoded [`RowChange`]; then a CRC32C of all preceding bytes. Consecutive rows
//! written by one batch share a timestamp and have adjacent ordinals, so the insert
//! UNDOs a flush writes for every row shrink to a fraction of a byte each. Version 1
//! (fixed-width ordinal `u32` and timestamp `u64`, uncompressed) is still read.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use cairn_common::codec::{self, Reader};
use cairn_common::{ColumnId, HybridTime};
use crossbeam_skiplist::SkipMap;

use crate::error::{Result, TabletError};
use crate::ops::RowChange;

const MAGIC: &[u8; 4] = b"CDLT";
const VERSION: u32 = 2;
/// The uncompressed fixed-width layout of older files, still readable.
const VERSION_FIXED: u32 = 1;

/// One delta: a change to the row at `ordinal` at time `ts`.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaEntry {
    /// Row ordinal within the rowset.
    pub ordinal: u32,
    /// When the change happened.
    pub ts: HybridTime,
    /// The change.
    pub change: RowChange,
}

/// The in-memory REDO store of one DiskRowSet.
#[derive(Debug, Default)]
pub struct DeltaMemStore {
    map: SkipMap<(u32, u64, u64), RowChange>,
    seq: AtomicU64,
    bytes: AtomicUsize,
    /// Per changed row, what the write path asks of every row it touches —
    /// [`RowSummary`] — kept as changes arrive so the answer does not walk a hot
    /// row's thousands of updates.
    summaries: parking_lot::Mutex<std::collections::HashMap<u32, RowSummary>>,
}

/// A row's changes in one [`DeltaMemStore`], summarized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSummary {
    /// The newest change's timestamp.
    pub newest: HybridTime,
    /// The newest delete or re-insert — (timestamp, arrival number, whether the row
    /// is live after it) — ordered as the store orders changes.
    pub liveness: Option<(HybridTime, u64, bool)>,
}

impl DeltaMemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    /// Records a change (the caller holds the row lock).
    pub fn add(&self, ordinal: u32, ts: HybridTime, change: RowChange) {
        self.bytes
            .fetch_add(change.size_bytes() + 32, Ordering::Relaxed);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let live = match change {
            RowChange::Update(_) => None,
            RowChange::Delete => Some(false),
            RowChange::Reinsert(_) => Some(true),
        };
        {
            let mut summaries = self.summaries.lock();
            let s = summaries.entry(ordinal).or_insert(RowSummary {
                newest: ts,
                liveness: None,
            });
            s.newest = s.newest.max(ts);
            if let Some(live) = live
                && s.liveness.is_none_or(|(t, q, _)| (ts, seq) > (t, q))
            {
                s.liveness = Some((ts, seq, live));
            }
        }
        self.map.insert((ordinal, ts.0, seq), change);
    }

    /// The summary of the changes to `ordinal` (`None`: it has none here).
    pub fn row_summary(&self, ordinal: u32) -> Option<RowSummary> {
        self.summaries.lock().get(&ordinal).copied()
    }
    /// Calls `f` with the changes of `ordinal`, newest first, until it returns false.
    pub fn visit_newest_first(
        &self,
        ordinal: u32,
        mut f: impl FnMut(HybridTime, &RowChange) -> bool,
    ) {
        for e in self
            .map
            .range((ordinal, 0, 0)..(ordinal.saturating_add(1), 0, 0))
            .rev()
        {
            if !f(HybridTime(e.key().1), e.value()) {
                return;
            }
        }
    }

    /// Changes to ordinals in `[lo, hi)`, ordered by (ordinal, timestamp, arrival).
    pub fn range(&self, lo: u32, hi: u32) -> Vec<DeltaEntry> {
        self.map
            .range((lo, 0, 0)..(hi, 0, 0))
            .map(|e| DeltaEntry {
                ordinal: e.key().0,
                ts: HybridTime(e.key().1),
                change: e.value().clone(),
            })
            .collect()
    }
    /// Every change, ordered.
    pub fn entries(&self) -> Vec<DeltaEntry> {
        self.range(0, u32::MAX)
    }
    /// Number of changes.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether there are no changes.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Approximate memory used.
    pub fn mem_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// An immutable, checksummed file of deltas, held in memory once opened.
#[derive(Debug)]
pub struct DeltaFile {
    /// File name within the rowset directory.
    pub name: String,
    entries: Vec<DeltaEntry>,
    /// Columns any update in the file touches.
    pub updated_columns: BTreeSet<ColumnId>,
    /// Smallest timestamp in the file.
    pub min_ts: HybridTime,
    /// Largest timestamp in the file.
    pub max_ts: HybridTime,
    /// Number of updates among the deltas.
    pub updates: usize,
    /// Number of deletes among the deltas.
    pub deletes: usize,
    /// Number of re-inserts among the deltas.
    pub reinserts: usize,
    /// Size on disk.
    pub size_bytes: u64,
}

/// Writes entries (already ordered by ordinal, then timestamp) to `path`. Returns the
/// file's CRC32C and size.
pub fn write_delta_file(path: &Path, entries: &[DeltaEntry]) -> Result<(u32, u64)> {
    let mut body = Vec::with_capacity(entries.len() * 4);
    let (mut prev_ord, mut prev_ts) = (0u32, 0u64);
    for e in entries {
        if e.ordinal < prev_ord {
            return Err(TabletError::InvalidRequest(format!(
                "delta entries out of order: ordinal {} after {prev_ord}",
                e.ordinal
            )));
        }
        codec::put_varint(&mut body, u64::from(e.ordinal - prev_ord));
        let dts = e.ts.0.wrapping_sub(prev_ts) as i64;
        codec::put_varint(&mut body, ((dts << 1) ^ (dts >> 63)) as u64);
        e.change.encode(&mut body);
        (prev_ord, prev_ts) = (e.ordinal, e.ts.0);
    }
    if body.len() > u32::MAX as usize {
        return Err(TabletError::InvalidRequest(
            "a delta file's deltas exceed 4 GiB; flush deltas more often".into(),
        ));
    }
    let packed = lz4_flex::block::compress_prepend_size(&body);
    let mut buf = Vec::with_capacity(20 + packed.len());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    buf.extend_from_slice(&packed);
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    let mut f = File::create(path).map_err(|e| TabletError::io(path, e))?;
    f.write_all(&buf).map_err(|e| TabletError::io(path, e))?;
    f.sync_all().map_err(|e| TabletError::io(path, e))?;
    // The new name must be durable before any metadata names the file.
    if let Some(dir) = path.parent() {
        crate::metadata::sync_dir(dir)?;
    }
    Ok((crc32c::crc32c(&buf), buf.len() as u64))
}

impl DeltaFile {
    /// Opens and verifies a delta file.
    pub fn open(path: &Path, name: &str, expected_crc: u32) -> Result<DeltaFile> {
        let bytes = std::fs::read(path).map_err(|e| TabletError::io(path, e))?;
        let corrupt = |d: String| TabletError::corruption(path, d);
        if bytes.len() < 20 || &bytes[0..4] != MAGIC {
            return Err(corrupt("not a delta file (bad magic)".into()));
        }
        if crc32c::crc32c(&bytes) != expected_crc {
            return Err(corrupt(
                "delta file checksum does not match the tablet metadata".into(),
            ));
        }
        let body = bytes.len() - 4;
        let mut r = Reader::new(&bytes[4..body], "delta file");
        let map_err = |e: cairn_common::CommonError| corrupt(e.to_string());
        let version = r.u32().map_err(map_err)?;
        if version != VERSION && version != VERSION_FIXED {
            return Err(corrupt(format!("unsupported delta file version {version}")));
        }
        let n = r.u64().map_err(map_err)? as usize;
        // The checksum matched, so the LZ4 block is the one that was written.
        let unpacked;
        if version == VERSION {
            let packed = r.take(r.remaining()).map_err(map_err)?;
            unpacked = lz4_flex::block::decompress_size_prepended(packed)
                .map_err(|e| corrupt(format!("delta block does not decompress: {e}")))?;
            r = Reader::new(&unpacked, "delta file");
        }
        let mut entries = Vec::with_capacity(n.min(r.remaining()));
        let mut updated_columns = BTreeSet::new();
        let (mut min_ts, mut max_ts) = (HybridTime::MAX, HybridTime::MIN);
        let (mut updates, mut deletes, mut reinserts) = (0, 0, 0);
        let (mut prev_ord, mut prev_ts) = (0u32, 0u64);
        for _ in 0..n {
            let (ordinal, ts) = if version == VERSION {
                let d = r.varint().map_err(map_err)?;
                let ordinal = u32::try_from(u64::from(prev_ord) + d)
                    .map_err(|_| corrupt("delta ordinal past u32".into()))?;
                let z = r.varint().map_err(map_err)?;
                let dts = ((z >> 1) as i64) ^ -((z & 1) as i64);
                (ordinal, prev_ts.wrapping_add(dts as u64))
            } else {
                (r.u32().map_err(map_err)?, r.u64().map_err(map_err)?)
            };
            (prev_ord, prev_ts) = (ordinal, ts);
            let ts = HybridTime(ts);
            let change = RowChange::decode(&mut r).map_err(map_err)?;
            match &change {
                RowChange::Update(cells) => {
                    updates += 1;
                    updated_columns.extend(cells.iter().map(|(id, _)| *id));
                }
                RowChange::Delete => deletes += 1,
                RowChange::Reinsert(_) => reinserts += 1,
            }
            min_ts = min_ts.min(ts);
            max_ts = max_ts.max(ts);
            entries.push(DeltaEntry {
                ordinal,
                ts,
                change,
            });
        }
        if !r.is_empty() {
            return Err(corrupt("trailing bytes after the last delta".into()));
        }
        Ok(DeltaFile {
            name: name.to_string(),
            entries,
            updated_columns,
            min_ts,
            max_ts,
            updates,
            deletes,
            reinserts,
            size_bytes: bytes.len() as u64,
        })
    }

    /// Deltas for ordinals in `[lo, hi)`.
    pub fn range(&self, lo: u32, hi: u32) -> &[DeltaEntry] {
        let a = self.entries.partition_point(|e| e.ordinal < lo);
        let b = self.entries.partition_point(|e| e.ordinal < hi);
        &self.entries[a..b]
    }
    /// All deltas.
    pub fn entries(&self) -> &[DeltaEntry] {
        &self.entries
    }
    /// Number of deltas.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::Value;

    #[test]
    fn round_trip_and_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("redo-1");
        let entries = vec![
            DeltaEntry {
                ordinal: 1,
                ts: HybridTime(5),
                change: RowChange::Update(vec![(1, Value::Int32(3))]),
            },
            DeltaEntry {
                ordinal: 1,
                ts: HybridTime(6),
                change: RowChange::Delete,
            },
            DeltaEntry {
                ordinal: 7,
                ts: HybridTime(9),
                change: RowChange::Reinsert(vec![(0, Value::Int32(1))]),
            },
        ];
        let (crc, _) = write_delta_file(&p, &entries).unwrap();
        let f = DeltaFile::open(&p, "redo-1", crc).unwrap();
        assert_eq!(f.entries(), entries.as_slice());
        assert_eq!(f.range(2, 8).len(), 1);
        assert_eq!(
            f.updated_columns.iter().copied().collect::<Vec<_>>(),
            vec![1]
        );
        let mut b = std::fs::read(&p).unwrap();
        b[20] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert!(DeltaFile::open(&p, "redo-1", crc).is_err());
        let dms = DeltaMemStore::new();
        dms.add(3, HybridTime(2), RowChange::Delete);
        dms.add(1, HybridTime(4), RowChange::Delete);
        dms.add(1, HybridTime(4), RowChange::Reinsert(vec![]));
        let r = dms.range(0, 2);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].change, RowChange::Reinsert(vec![]));
    }

    /// The insert UNDOs of a flush — one delete per row, adjacent ordinals, a shared
    /// timestamp per batch — take a small fraction of their fixed-width size, and
    /// timestamps that go backwards between ordinals round-trip.
    #[test]
    fn insert_undos_compress_and_timestamps_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("undo-1");
        let entries: Vec<DeltaEntry> = (0..100_000u32)
            .map(|i| DeltaEntry {
                ordinal: i,
                ts: HybridTime((1 << 40) | (u64::from(i / 1000) * 7)),
                change: RowChange::Delete,
            })
            .collect();
        let (crc, size) = write_delta_file(&p, &entries).unwrap();
        assert!(size < 100_000 / 8, "{size} bytes for 100000 insert UNDOs");
        let f = DeltaFile::open(&p, "undo-1", crc).unwrap();
        assert_eq!(f.entries(), entries.as_slice());
        assert_eq!(f.deletes, 100_000);

        let jumpy = vec![
            DeltaEntry {
                ordinal: 0,
                ts: HybridTime(u64::MAX - 1),
                change: RowChange::Delete,
            },
            DeltaEntry {
                ordinal: 0,
                ts: HybridTime(u64::MAX),
                change: RowChange::Update(vec![(2, Value::String("x".into()))]),
            },
            DeltaEntry {
                ordinal: u32::MAX,
                ts: HybridTime(3),
                change: RowChange::Delete,
            },
        ];
        let (crc, _) = write_delta_file(&p, &jumpy).unwrap();
        assert_eq!(
            DeltaFile::open(&p, "undo-1", crc).unwrap().entries(),
            jumpy.as_slice()
        );
        let unordered = [jumpy[2].clone(), jumpy[0].clone()];
        assert!(write_delta_file(&p, &unordered).is_err());
    }

    /// Files written in the fixed-width version 1 layout still open.
    #[test]
    fn version_one_files_still_open() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("redo-old");
        let entries = vec![
            DeltaEntry {
                ordinal: 4,
                ts: HybridTime(10),
                change: RowChange::Update(vec![(1, Value::Int64(-5))]),
            },
            DeltaEntry {
                ordinal: 9,
                ts: HybridTime(8),
                change: RowChange::Delete,
            },
        ];
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&VERSION_FIXED.to_le_bytes());
        buf.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for e in &entries {
            buf.extend_from_slice(&e.ordinal.to_le_bytes());
            buf.extend_from_slice(&e.ts.0.to_le_bytes());
            e.change.encode(&mut buf);
        }
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        std::fs::write(&p, &buf).unwrap();
        let f = DeltaFile::open(&p, "redo-old", crc32c::crc32c(&buf)).unwrap();
        assert_eq!(f.entries(), entries.as_slice());
        assert_eq!((f.min_ts, f.max_ts), (HybridTime(8), HybridTime(10)));
    }
}
