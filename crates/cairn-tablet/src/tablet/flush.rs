//! Flushes: the MemRowSet into new DiskRowSets, DeltaMemStores into REDO files, and
//! checkpoints (flush everything, then list a consistent set of files for a copy).
//!
//! A flush follows cut → write → install. The cut (write gate held exclusively) freezes
//! the store at the last applied log index and takes the timestamp of the last applied
//! record as its snapshot ([`Tablet::cut_snapshot`]); the write turns the frozen store's
//! versions up to that snapshot into files; the install (gate held again) carries the
//! changes the frozen rows received after the cut — exactly the changes newer than the
//! snapshot, all of them at log indexes past the cut — into the new rowsets' in-memory
//! delta stores, swaps the components and records the new durable marks. A new
//! rowset declares itself durable up to the cut, and nothing it holds only in memory is
//! at or below the cut, so a restart re-applies exactly what is missing.
//!
//! The write of a large MemRowSet is split into key ranges of about equal size (cut at
//! keys of the store's insert sample) written by threads of their own, each into its
//! own rowsets: the ranges are disjoint, so their rowsets are too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cairn_common::{HybridTime, Schema, Value};
use parking_lot::RwLockWriteGuard;

use super::Tablet;

use crate::delta::{DeltaMemStore, write_delta_file};
use crate::diskrowset::DiskRowSet;
use crate::error::{Result, TabletError};
use crate::history::{Row, apply_change, flush_row};
use crate::memrowset::{MemRowSet, MrsRow};
use crate::metadata::{FileMeta, RowSetMeta};
use crate::ops::RowChange;
use crate::rowsets::Components;
use crate::writer::{CHUNK_ROWS, RowsChunk};

/// How many key ranges a flush of `rows` rows writes in parallel: at most `threads`,
/// each of at least `min_rows` rows (smaller parts would only make small rowsets).
fn flush_parts(rows: usize, threads: usize, min_rows: usize) -> usize {
    (rows / min_rows.max(1)).clamp(1, threads.max(1))
}

/// The cells of a row a flush writes: a MemRowSet row as inserted, or a version
/// rebuilt from its history.
enum FlushedCells {
    Shared(Arc<MrsRow>),
    Owned(Row),
}

impl AsRef<[Value]> for FlushedCells {
    fn as_ref(&self) -> &[Value] {
        match self {
            FlushedCells::Shared(r) => &r.row,
            FlushedCells::Owned(r) => r,
        }
    }
}

impl From<Row> for FlushedCells {
    fn from(r: Row) -> Self {
        FlushedCells::Owned(r)
    }
}

/// A key range `[lo, hi)` of a flush (`None`: unbounded).
type KeyRange<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// A MemRowSet row as its skip list holds it.
type MrsEntry<'a> = crossbeam_skiplist::map::Entry<'a, Vec<u8>, Arc<MrsRow>>;

/// Runs `f` on each item on a thread of its own; returns the results in order.
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    if let [one] = items {
        return Ok(vec![f(one)?]);
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = items.iter().map(|i| scope.spawn(|| f(i))).collect();
        handles
            .into_iter()
            // A panic in a thread is a bug: it goes on in this one.
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

impl Tablet {
    /// Flushes the MemRowSet into new DiskRowSets. Returns false if it was empty.
    pub fn flush_mrs(&self) -> Result<bool> {
        let _m = self.maint_lock()?;
        self.flush_mrs_locked(false).map(|(flushed, _)| flushed)
    }

    /// Flushes the MemRowSet. With `hold_gate`, appliers stay blocked from the cut
    /// until the caller drops the returned guard (used by ALTER).
    /// REQUIRES: the maintenance lock.
    pub(crate) fn flush_mrs_locked(
        &self,
        hold_gate: bool,
    ) -> Result<(bool, Option<RwLockWriteGuard<'_, ()>>)> {
        let gate = self.cut_gate()?;
        let comps = self.components();
        if comps.mrs.is_empty() {
            return Ok((false, hold_gate.then_some(gate)));
        }
        let cut = self.applied_index();
        let snap = self.cut_snapshot();
        let frozen = comps.mrs.clone();
        let new_mrs = Arc::new(MemRowSet::new(self.alloc_rowset_id()));
        let mut frozen_list = comps.frozen.clone();
        frozen_list.push(frozen.clone());
        *self.comps.write() = Arc::new(Components::new(new_mrs, frozen_list, comps.disk.clone()));
        drop(comps);
        let gate = if hold_gate {
            Some(gate)
        } else {
            drop(gate);
            None
        };

        let schema = self.schema();
        let ahm = self.ancient_history_mark();
        let parts = flush_parts(
            frozen.len(),
            self.opts.flush_threads,
            self.opts.flush_part_min_rows,
        );
        let splits = frozen.split_keys(parts);
        let ranges: Vec<KeyRange<'_>> = (0..=splits.len())
            .map(|i| {
                let lo = i.checked_sub(1).map(|j| splits[j].as_slice());
                (lo, splits.get(i).map(Vec::as_slice))
            })
            .collect();
        // Key ranges go to threads of their own, each writing its own rowsets.
        let metas = in_parallel(&ranges, |&(lo, hi)| {
            self.write_mrs_part(&schema, frozen.entries_between(lo, hi), (cut, snap), ahm)
        })?;
        let outputs = self.open_rowsets(metas.into_iter().flatten().collect())?;

        let gate = match gate {
            Some(g) => g,
            None => self.gate.write(),
        };
        let comps = self.components();
        // The rows changed after the snapshot, found range by range in parallel.
        let changed = in_parallel(&ranges, |&(lo, hi)| {
            Ok(frozen
                .entries_between(lo, hi)
                .filter(|e| e.value().last_change() > snap)
                .map(|e| (e.key().clone(), e.value().clone()))
                .collect::<Vec<_>>())
        })?;
        for (key, row) in changed.into_iter().flatten() {
            self.carry_over(
                &schema,
                &comps,
                &outputs,
                &key,
                row.mutations_after(snap),
                cut + 1,
            );
        }
        let mut disk = comps.disk.clone();
        disk.extend(outputs.iter().cloned());
        let frozen_left: Vec<_> = comps
            .frozen
            .iter()
            .filter(|m| !Arc::ptr_eq(m, &frozen))
            .cloned()
            .collect();
        *self.comps.write() = Arc::new(Components::new(comps.mrs.clone(), frozen_left, disk));
        self.persist_with(|m| {
            m.mrs_flushed_index = cut;
            m.mrs_flushed_ts = snap.0;
        })?;
        fail::fail_point!("tablet::after_flush_mrs");
        tracing::debug!(
            rows = frozen.len(),
            rowsets = outputs.len(),
            cut,
            "flushed the MemRowSet"
        );
        // Freeing millions of rows takes a while (a third of a flush's time); nothing
        // waits for it. (Scans still reading the store keep it alive anyway.)
        drop(comps);
        std::thread::spawn(move || drop(frozen));
        Ok((true, hold_gate.then_some(gate)))
    }

    /// Writes `rows` (a key range of a frozen MemRowSet, in key order) as they were at
    /// snapshot `snap` into new DiskRowSets durable up to `cut`, dropping history older
    /// than `ahm`; returns their records.
    fn write_mrs_part<'a>(
        &self,
        schema: &Schema,
        rows: impl Iterator<Item = MrsEntry<'a>>,
        (cut, snap): (u64, HybridTime),
        ahm: HybridTime,
    ) -> Result<Vec<RowSetMeta>> {
        let mut w = self.rowset_writer(schema, (cut, snap));
        let mut chunk: RowsChunk<FlushedCells> = RowsChunk::new();
        for e in rows {
            let (key, row) = (e.key(), e.value());
            if row.unchanged_at(snap) {
                // The common case: the row as inserted is its only version, so its
                // cells go into the batch by reference, with at most an insert UNDO.
                let undo = (row.insert_ts >= ahm).then_some((row.insert_ts, RowChange::Delete));
                chunk.push(key.clone(), FlushedCells::Shared(row.clone()), undo, None);
            } else if let Some(f) = flush_row(schema, row.history(schema, key.clone(), snap), ahm) {
                chunk.push_flushed(f);
            }
            if chunk.len() >= CHUNK_ROWS {
                chunk.write_to(&mut w)?;
            }
        }
        chunk.write_to(&mut w)?;
        w.finish()
    }

    /// Re-applies changes made after a cut to rows that now live in `outputs` (or, if a
    /// row was dropped as dead history, to the MemRowSet).
    /// REQUIRES: the write gate held exclusively.
    pub(crate) fn carry_over(
        &self,
        schema: &Schema,
        comps: &Components,
        outputs: &[Arc<DiskRowSet>],
        key: &[u8],
        changes: Vec<(HybridTime, RowChange)>,
        log_index: u64,
    ) {
        if changes.is_empty() {
            return;
        }
        for rs in outputs {
            if let Some(o) = rs.keys.find(key) {
                let dms = rs.dms();
                for (ts, c) in changes {
                    dms.add(o as u32, ts, c);
                }
                return;
            }
        }
        // The row had been dropped (deleted beyond history); the first change re-inserts it.
        let mut state: Option<Row> = None;
        let mut inserted: Option<Arc<MrsRow>> = None;
        for (ts, c) in changes {
            match &inserted {
                None => {
                    apply_change(schema, &mut state, &c);
                    if let Some(row) = state.take() {
                        comps.mrs.insert(key.to_vec(), row, ts, log_index);
                        inserted = comps.mrs.get(key);
                    }
                }
                Some(r) => comps.mrs.mutate(r, ts, c, log_index),
            }
        }
    }

    /// Flushes every non-empty DeltaMemStore into a REDO delta file.
    pub fn flush_deltas(&self) -> Result<usize> {
        let _m = self.maint_lock()?;
        let rowsets: Vec<_> = self.components().disk.clone();
        let mut n = 0;
        for rs in rowsets {
            if self.flush_dms_locked(&rs)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Flushes one rowset's DeltaMemStore. REQUIRES: the maintenance lock.
    pub(crate) fn flush_dms_locked(&self, rs: &Arc<DiskRowSet>) -> Result<bool> {
        let (frozen, cut, snap) = {
            let _g = self.cut_gate()?;
            let mut d = rs.deltas();
            if d.dms.is_empty() {
                return Ok(false);
            }
            let cut = self.applied_index();
            let frozen = d.dms.clone();
            d.frozen_dms = Some(frozen.clone());
            d.dms = Arc::new(DeltaMemStore::new());
            rs.set_deltas(d);
            (frozen, cut, self.cut_snapshot())
        };
        let mut meta = rs.meta();
        let (file, record) = write_redo_file(rs, &mut meta, &frozen.entries())?;
        let _g = self.gate.write();
        let mut d = rs.deltas();
        d.redo_files.push(file);
        d.frozen_dms = None;
        rs.set_deltas(d);
        meta.redo_files.push(record);
        // A DeltaMemStore only takes records after the rowset's mark, so the cut is
        // past it; `max` keeps the mark from moving back all the same.
        if cut > meta.durable_index {
            meta.durable_index = cut;
            meta.durable_ts = snap.0;
        }
        self.persist_rowsets(&[(rs.clone(), meta)], None)?;
        Ok(true)
    }

    /// Writes the metadata with these rowsets' records replaced (and the MemRowSet's
    /// flushed index and timestamp, if given); only once that is written do the
    /// rowsets take the new records (and durable indexes) as theirs.
    /// REQUIRES: the maintenance lock and the write gate held exclusively.
    pub(crate) fn persist_rowsets(
        &self,
        updates: &[(Arc<DiskRowSet>, RowSetMeta)],
        mrs_flushed: Option<(u64, HybridTime)>,
    ) -> Result<()> {
        self.persist_with(|m| {
            if let Some((i, ts)) = mrs_flushed {
                m.mrs_flushed_index = i;
                m.mrs_flushed_ts = ts.0;
            }
            for (rs, new) in updates {
                if let Some(e) = m.rowsets.iter_mut().find(|e| e.id == rs.id) {
                    *e = new.clone();
                }
            }
        })?;
        for (rs, new) in updates {
            rs.set_meta(new.clone());
            rs.set_durable_index(new.durable_index);
        }
        Ok(())
    }

    /// Flushes every in-memory store, so that [`Tablet::durable_index`] reaches the
    /// applied index (before a tablet copy or a log purge).
    pub fn flush_all(&self) -> Result<()> {
        self.flush_mrs()?;
        self.flush_deltas()?;
        // Stores with nothing in memory hold everything up to the current cut: advance
        // their marks too, or an idle store would pin the log forever.
        let _m = self.maint_lock()?;
        let _g = self.cut_gate()?;
        let cut = self.applied_index();
        let snap = self.cut_snapshot();
        let comps = self.components();
        let mrs_flushed = (comps.mrs.is_empty()
            && comps.frozen.is_empty()
            && self.mrs_flushed_index.load(Ordering::Acquire) < cut)
            .then_some((cut, snap));
        let mut updates = Vec::new();
        for rs in &comps.disk {
            let d = rs.deltas();
            if d.dms.is_empty() && d.frozen_dms.is_none() && rs.durable_index() < cut {
                let mut meta = rs.meta();
                meta.durable_index = cut;
                meta.durable_ts = snap.0;
                updates.push((rs.clone(), meta));
            }
        }
        if mrs_flushed.is_some() || !updates.is_empty() {
            self.persist_rowsets(&updates, mrs_flushed)?;
        }
        Ok(())
    }

    /// Lists the files that make up the tablet (metadata last), relative to its
    /// directory, with hard links under `into` so that maintenance cannot delete them
    /// while they are copied. The caller removes `into` afterwards.
    /// Also returns the log index the files cover ([`Tablet::durable_index`]).
    pub fn checkpoint_files(&self, into: &Path) -> Result<(Vec<PathBuf>, u64)> {
        let _m = self.maint_lock()?;
        let _g = self.gate.write();
        self.persist()?;
        let durable = self.durable_index();
        let mut out = Vec::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).map_err(|e| TabletError::io(&d, e))? {
                let e = e.map_err(|e| TabletError::io(&d, e))?;
                let p = e.path();
                let rel = p.strip_prefix(&self.dir).unwrap_or(&p).to_path_buf();
                if rel.starts_with("wal") || rel.to_string_lossy().ends_with(".tmp") {
                    continue;
                }
                let ft = e.file_type().map_err(|e| TabletError::io(&p, e))?;
                if ft.is_dir() {
                    stack.push(p);
                } else {
                    let dst = into.join(&rel);
                    if let Some(parent) = dst.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| TabletError::io(parent, e))?;
                    }
                    std::fs::hard_link(&p, &dst).map_err(|e| TabletError::io(&dst, e))?;
                    out.push(rel);
                }
            }
        }
        let meta = PathBuf::from(crate::metadata::METADATA_FILE);
        out.retain(|p| p != &meta);
        out.sort();
        out.push(meta);
        Ok((out, durable))
    }
}

/// Writes `entries` as the next REDO delta file of `rs`, named from `meta`'s file
/// sequence (which it advances), and opens it. Returns the open file and the record
/// `meta` must list once the file is installed.
pub(crate) fn write_redo_file(
    rs: &DiskRowSet,
    meta: &mut RowSetMeta,
    entries: &[crate::delta::DeltaEntry],
) -> Result<(Arc<crate::delta::DeltaFile>, FileMeta)> {
    let name = format!("redo-{}.delta", meta.next_file_seq);
    let path = rs.dir().join(&name);
    let (crc, size) = write_delta_file(&path, entries)?;
    let file = Arc::new(crate::delta::DeltaFile::open(&path, &name, crc)?);
    meta.next_file_seq += 1;
    Ok((file, FileMeta { name, crc, size }))
}

#[cfg(test)]
mod tests {
    use super::flush_parts;

    #[test]
    fn flush_parts_are_big_enough_and_bounded_by_threads() {
        assert_eq!(flush_parts(0, 4, 100), 1);
        assert_eq!(flush_parts(199, 4, 100), 1);
        assert_eq!(flush_parts(200, 4, 100), 2);
        assert_eq!(flush_parts(10_000, 4, 100), 4);
        assert_eq!(flush_parts(10_000, 0, 0), 1);
    }
}
