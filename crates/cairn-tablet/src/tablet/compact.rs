//! Compactions (Kudu §4.6–4.7): merging rowsets, merging and folding REDO files, and
//! rewriting a rowset whose rows were mostly deleted. The rewriting itself is in
//! [`crate::compaction`]; this file holds the tablet's cut and install steps.
//!
//! A rowset compaction cuts like a flush: the inputs' DeltaMemStores are frozen at the
//! last applied log index, the snapshot is the last applied record's timestamp, the
//! merge writes every version up to it, and the install carries every REDO of the
//! inputs newer than the snapshot into the outputs — by timestamp, wherever it sits.

use std::sync::Arc;

use super::Tablet;
use super::flush::write_redo_file;
use crate::delta::{DeltaEntry, DeltaMemStore};
use crate::diskrowset::DiskRowSet;
use crate::error::Result;
use crate::rowsets::Components;

impl Tablet {
    /// Minor delta compaction: merges a rowset's REDO files into one.
    pub fn minor_delta_compaction(&self, rs: &Arc<DiskRowSet>) -> Result<bool> {
        let _m = self.maint_lock()?;
        let d = rs.deltas();
        if d.redo_files.len() < 2 {
            return Ok(false);
        }
        let inputs = d.redo_files.clone();
        let mut entries: Vec<DeltaEntry> = inputs
            .iter()
            .flat_map(|f| f.entries().iter().cloned())
            .collect();
        entries.sort_by_key(|e| (e.ordinal, e.ts));
        let mut meta = rs.meta();
        let (file, record) = write_redo_file(rs, &mut meta, &entries)?;
        let _g = self.gate.write();
        let mut d = rs.deltas();
        d.redo_files
            .retain(|f| !inputs.iter().any(|i| Arc::ptr_eq(i, f)));
        d.redo_files.insert(0, file);
        rs.set_deltas(d);
        let old: Vec<String> = inputs.iter().map(|f| f.name.clone()).collect();
        meta.redo_files.retain(|f| !old.contains(&f.name));
        meta.redo_files.insert(0, record);
        self.persist_rowsets(&[(rs.clone(), meta)], None)?;
        for n in old {
            let _ = std::fs::remove_file(rs.dir().join(n));
        }
        Ok(true)
    }

    /// Major delta compaction: folds REDO updates of rows that were only updated into a
    /// new base file holding just the changed columns, writing their inverses as UNDOs.
    /// Rows with deletes or re-inserts keep their REDOs.
    pub fn major_delta_compaction(&self, rs: &Arc<DiskRowSet>) -> Result<bool> {
        let _m = self.maint_lock()?;
        crate::compaction::major_delta_compaction(self, rs)
    }

    /// Compacts the given rowsets (all of them if `None`) into new ones. A single
    /// rowset is rewritten if it has REDOs (dropping rows deleted before the history
    /// retention window).
    pub fn compact_rowsets(&self, ids: Option<&[u64]>) -> Result<bool> {
        let _m = self.maint_lock()?;
        let comps = self.components();
        let inputs: Vec<Arc<DiskRowSet>> = self
            .caught_up(&comps)
            .filter(|r| ids.is_none_or(|ids| ids.contains(&r.id)))
            .collect();
        if inputs.is_empty()
            || (inputs.len() < 2 && inputs.iter().all(|r| r.deltas().redo_count() == 0))
        {
            return Ok(false);
        }
        self.compact_locked(inputs)
    }

    /// Compacts the rowsets the budgeted policy picks. Returns false if none are worth it.
    pub fn compact_by_policy(&self) -> Result<bool> {
        let _m = self.maint_lock()?;
        let comps = self.components();
        let candidates: Vec<Arc<DiskRowSet>> = self.caught_up(&comps).collect();
        let picked = crate::policy::pick_compaction(&candidates, self.opts.compaction_budget_bytes);
        if picked.len() < 2 {
            return Ok(false);
        }
        self.compact_locked(picked)
    }

    /// The rowsets a compaction may merge: those whose files hold no log record the
    /// tablet has not applied yet. After a restart the log is applied again from the
    /// lowest durable mark, so a rowset whose delta files reach further holds records
    /// the others do not hold yet; a merge would give the output one durable mark for
    /// rows that are at different points of the log, and replay would then apply some
    /// records twice. Such a rowset waits until replay has passed its mark.
    fn caught_up<'a>(&self, comps: &'a Components) -> impl Iterator<Item = Arc<DiskRowSet>> + 'a {
        let applied = self.applied_index();
        comps
            .disk
            .iter()
            .filter(move |r| r.durable_index() <= applied)
            .cloned()
    }

    /// Rows of `rs` whose latest REDO is a delete older than the history retention
    /// window: what rewriting it alone would drop.
    pub fn reclaimable_rows(&self, rs: &DiskRowSet) -> usize {
        let ahm = self.ancient_history_mark();
        rs.deltas()
            .redo_files
            .iter()
            .filter(|f| f.max_ts < ahm)
            .map(|f| f.deletes)
            .sum()
    }

    /// REQUIRES: the maintenance lock.
    fn compact_locked(&self, inputs: Vec<Arc<DiskRowSet>>) -> Result<bool> {
        let (cut, snap) = {
            let _g = self.cut_gate()?;
            for rs in &inputs {
                let mut d = rs.deltas();
                if !d.dms.is_empty() {
                    // Merge an already frozen DMS with the active one: both are inputs.
                    let merged = Arc::new(DeltaMemStore::new());
                    for src in d.frozen_dms.iter().chain(std::iter::once(&d.dms)) {
                        for e in src.entries() {
                            merged.add(e.ordinal, e.ts, e.change);
                        }
                    }
                    d.frozen_dms = Some(merged);
                    d.dms = Arc::new(DeltaMemStore::new());
                    rs.set_deltas(d);
                }
            }
            (self.applied_index(), self.cut_snapshot())
        };
        let schema = self.schema();
        let ahm = self.ancient_history_mark();
        let mut w = self.rowset_writer(&schema, (cut, snap));
        crate::compaction::merge_rowsets(&schema, &inputs, snap, ahm, &mut w)?;
        let outputs = self.open_rowsets(w.finish()?)?;

        let _g = self.gate.write();
        let comps = self.components();
        // The merge wrote every version up to the snapshot; every REDO newer than it —
        // applied after the cut, or before it by a record not yet counted as applied
        // (a bulk insert between its row changes and its new rowsets), in the active
        // DeltaMemStore, the frozen one or a REDO file — is carried into the outputs.
        for rs in &inputs {
            let (redo, _) = rs.deltas().collect(0, u32::MAX);
            let mut newer = redo.into_iter().filter(|e| e.ts > snap).peekable();
            while let Some(first) = newer.next() {
                let ordinal = first.ordinal;
                let mut changes = vec![(first.ts, first.change)];
                while let Some(e) = newer.next_if(|e| e.ordinal == ordinal) {
                    changes.push((e.ts, e.change));
                }
                let key = rs.keys.key(ordinal as usize);
                self.carry_over(&schema, &comps, &outputs, &key, changes, cut + 1);
            }
        }
        let mut disk: Vec<_> = comps
            .disk
            .iter()
            .filter(|r| !inputs.iter().any(|i| Arc::ptr_eq(i, r)))
            .cloned()
            .collect();
        disk.extend(outputs.iter().cloned());
        *self.comps.write() = Arc::new(Components::new(
            comps.mrs.clone(),
            comps.frozen.clone(),
            disk,
        ));
        self.persist()?;
        for rs in &inputs {
            rs.mark_obsolete();
        }
        tracing::debug!(
            inputs = inputs.len(),
            outputs = outputs.len(),
            "compacted rowsets"
        );
        Ok(true)
    }
}
