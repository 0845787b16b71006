//! Housekeeping: dropping UNDO history older than the retention window, and persisting
//! the predicate skip caches.

use super::Tablet;
use crate::error::{Result, TabletError};
use crate::metadata::{FileMeta, write_atomic};

impl Tablet {
    /// Drops UNDO files whose every delta is older than the ancient history mark.
    pub fn gc_history(&self) -> Result<usize> {
        let _m = self.maint_lock()?;
        let ahm = self.ancient_history_mark();
        let mut dropped = 0;
        for rs in self.components().disk.iter() {
            let d = rs.deltas();
            let old: Vec<String> = d
                .undo_files
                .iter()
                .filter(|f| f.max_ts < ahm)
                .map(|f| f.name.clone())
                .collect();
            if old.is_empty() {
                continue;
            }
            let _g = self.gate.write();
            let mut d = rs.deltas();
            d.undo_files.retain(|f| !old.contains(&f.name));
            rs.set_deltas(d);
            let mut meta = rs.meta();
            meta.undo_files.retain(|f| !old.contains(&f.name));
            self.persist_rowsets(&[(rs.clone(), meta)], None)?;
            for n in &old {
                let _ = std::fs::remove_file(rs.dir().join(n));
            }
            dropped += old.len();
        }
        Ok(dropped)
    }

    /// Persists dirty predicate skip caches.
    pub fn persist_skip_caches(&self) -> Result<usize> {
        let _m = self.maint_lock()?;
        let mut n = 0;
        for rs in self.components().disk.iter() {
            if let Some(bytes) = rs.skip_cache.serialize_if_dirty() {
                let bytes = bytes.map_err(|e| TabletError::InvalidRequest(e.to_string()))?;
                let mut meta = rs.meta();
                let name = format!("skipcache-{}.json", meta.next_file_seq);
                write_atomic(rs.dir(), &name, &bytes)?;
                let old = meta.skip_cache.replace(FileMeta {
                    name,
                    crc: crc32c::crc32c(&bytes),
                    size: bytes.len() as u64,
                });
                meta.next_file_seq += 1;
                let _g = self.gate.write();
                self.persist_rowsets(&[(rs.clone(), meta)], None)?;
                if let Some(o) = old {
                    let _ = std::fs::remove_file(rs.dir().join(o.name));
                }
                n += 1;
            }
        }
        Ok(n)
    }
}
