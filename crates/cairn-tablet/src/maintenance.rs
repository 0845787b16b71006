//! The maintenance manager: a background thread that keeps a tablet healthy (Kudu §4.8).
//!
//! Every interval it scores the possible maintenance ops and runs the best one:
//!
//! 1. **Memory**: when the MemRowSet or a DeltaMemStore exceeds its size threshold, the
//!    flush freeing the most memory wins.
//! 2. **Log retention**: in-memory stores older than `max_memstore_age` are flushed so
//!    the write-ahead log can be garbage-collected.
//! 3. **Read performance**: the best of rowset compaction (by the budgeted knapsack
//!    policy's benefit), major delta compaction (share of rows with REDOs), and minor
//!    delta compaction (number of REDO files).
//! 4. **Housekeeping**: history GC, log GC and persisting skip caches run every round.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::diskrowset::DiskRowSet;
use crate::error::Result;
use crate::tablet::Tablet;

/// One maintenance op the manager may run.
#[derive(Debug, Clone)]
pub enum MaintenanceOp {
    /// Flush the MemRowSet.
    FlushMrs,
    /// Flush one rowset's DeltaMemStore.
    FlushDeltas(Arc<DiskRowSet>),
    /// Merge one rowset's REDO files.
    MinorDeltaCompaction(Arc<DiskRowSet>),
    /// Fold one rowset's REDO updates into its base data.
    MajorDeltaCompaction(Arc<DiskRowSet>),
    /// Compact rowsets chosen by the policy.
    CompactRowsets,
}

/// Picks the op to run next, if any.
pub fn pick_op(t: &Tablet) -> Option<MaintenanceOp> {
    let o = t.options();
    let comps = t.components();
    // 1. Memory pressure.
    let mut best: Option<(usize, MaintenanceOp)> = None;
    if comps.mrs.mem_bytes() >= o.mrs_flush_bytes {
        best = Some((comps.mrs.mem_bytes(), MaintenanceOp::FlushMrs));
    }
    for rs in &comps.disk {
        let b = rs.dms().mem_bytes();
        if b >= o.dms_flush_bytes && best.as_ref().is_none_or(|(x, _)| b > *x) {
            best = Some((b, MaintenanceOp::FlushDeltas(rs.clone())));
        }
    }
    if let Some((_, op)) = best {
        return Some(op);
    }
    // 2. Log retention: old in-memory data.
    if !comps.mrs.is_empty() && comps.mrs.age() >= o.max_memstore_age {
        return Some(MaintenanceOp::FlushMrs);
    }
    // 3. Read performance.
    let mut perf: Option<(f64, MaintenanceOp)> = None;
    let mut consider = |score: f64, op: MaintenanceOp| {
        if score > 0.0 && perf.as_ref().is_none_or(|(s, _)| score > *s) {
            perf = Some((score, op));
        }
    };
    if crate::policy::pick_compaction(&comps.disk, o.compaction_budget_bytes).len() >= 2 {
        consider(1.0, MaintenanceOp::CompactRowsets);
    }
    for rs in &comps.disk {
        let d = rs.deltas();
        let file_redos: usize = d.redo_files.iter().map(|f| f.len()).sum();
        let ratio = file_redos as f64 / rs.num_rows().max(1) as f64;
        if ratio >= 0.1 {
            consider(ratio * 2.0, MaintenanceOp::MajorDeltaCompaction(rs.clone()));
        }
        if d.redo_files.len() >= 4 {
            consider(
                d.redo_files.len() as f64 / 8.0,
                MaintenanceOp::MinorDeltaCompaction(rs.clone()),
            );
        }
    }
    perf.map(|(_, op)| op)
}

/// Runs one op.
pub fn run_op(t: &Tablet, op: &MaintenanceOp) -> Result<bool> {
    match op {
        MaintenanceOp::FlushMrs => t.flush_mrs(),
        MaintenanceOp::FlushDeltas(_) => t.flush_deltas().map(|n| n > 0),
        MaintenanceOp::MinorDeltaCompaction(rs) => t.minor_delta_compaction(rs),
        MaintenanceOp::MajorDeltaCompaction(rs) => t.major_delta_compaction(rs),
        MaintenanceOp::CompactRowsets => t.compact_by_policy(),
    }
}

/// Runs the highest-scoring op and the housekeeping ops once. Returns the op run.
pub fn run_once(t: &Tablet) -> Result<Option<MaintenanceOp>> {
    let op = pick_op(t);
    if let Some(op) = &op {
        run_op(t, op)?;
    }
    t.gc_history()?;
    t.gc_wal()?;
    t.persist_skip_caches()?;
    Ok(op)
}

/// A running maintenance thread; stops (and joins) when dropped.
pub struct MaintenanceManager {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl MaintenanceManager {
    /// Starts the maintenance thread for `tablet`.
    pub fn start(tablet: Arc<Tablet>) -> MaintenanceManager {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("cairn-maintenance".into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) && !tablet.is_shut_down() {
                    match run_once(&tablet) {
                        Ok(Some(_)) => continue,
                        Ok(None) => {}
                        Err(e) => tracing::error!(error = %e, "maintenance op failed"),
                    }
                    std::thread::sleep(tablet.options().maintenance_interval);
                }
            })
            .ok();
        MaintenanceManager { stop, handle }
    }

    /// Stops the thread and waits for the op in progress to finish.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for MaintenanceManager {
    fn drop(&mut self) {
        self.halt();
    }
}
