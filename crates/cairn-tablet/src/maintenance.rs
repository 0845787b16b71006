//! The maintenance manager: a background thread that keeps a tablet healthy (Kudu §4.8).
//!
//! Every interval it scores the possible maintenance ops and runs the best one:
//!
//! 1. **Memory**: when the MemRowSet or a DeltaMemStore exceeds its size threshold, the
//!    flush freeing the most memory wins.
//! 2. **Log retention**: in-memory stores older than `max_memstore_age` are flushed so
//!    the write-ahead log can be garbage-collected.
//! 3. **Read performance and space**: the best of rowset compaction (by the budgeted
//!    knapsack policy's benefit), major delta compaction (share of rows with REDO
//!    *updates* — deletes cannot be folded into base data), minor delta compaction
//!    (number of REDO files), and rewriting a rowset alone to drop rows deleted before
//!    the history retention window (share of such rows).
//! 4. **Housekeeping**: history GC and persisting skip caches run every round, then the
//!    owner's hook (a [`crate::local::LocalTablet`] discards its log there).
//!
//! An op that turns out to have nothing to do does not count as work: the thread then
//! sleeps its interval instead of picking the same op again at once.

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
    /// Rewrite one rowset to drop rows deleted before the history retention window.
    ReclaimDeleted(Arc<DiskRowSet>),
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
        let file_updates: usize = d.redo_files.iter().map(|f| f.updates).sum();
        let ratio = file_updates as f64 / rs.num_rows().max(1) as f64;
        if ratio >= 0.1 {
            consider(ratio * 2.0, MaintenanceOp::MajorDeltaCompaction(rs.clone()));
        }
        let dead = t.reclaimable_rows(rs) as f64 / rs.num_rows().max(1) as f64;
        if dead >= o.reclaim_deleted_ratio {
            consider(dead * 2.0, MaintenanceOp::ReclaimDeleted(rs.clone()));
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

/// Runs one op. Returns whether it did any work.
pub fn run_op(t: &Tablet, op: &MaintenanceOp) -> Result<bool> {
    match op {
        MaintenanceOp::FlushMrs => t.flush_mrs(),
        MaintenanceOp::FlushDeltas(_) => t.flush_deltas().map(|n| n > 0),
        MaintenanceOp::MinorDeltaCompaction(rs) => t.minor_delta_compaction(rs),
        MaintenanceOp::MajorDeltaCompaction(rs) => t.major_delta_compaction(rs),
        MaintenanceOp::CompactRowsets => t.compact_by_policy(),
        MaintenanceOp::ReclaimDeleted(rs) => t.compact_rowsets(Some(&[rs.id])),
    }
}

/// Runs the highest-scoring op and the housekeeping ops once. Returns the op run, if
/// it did any work.
pub fn run_once(t: &Tablet) -> Result<Option<MaintenanceOp>> {
    let op = pick_op(t);
    let mut worked = None;
    if let Some(op) = op
        && run_op(t, &op)?
    {
        worked = Some(op);
    }
    t.gc_history()?;
    t.persist_skip_caches()?;
    Ok(worked)
}

/// What the maintenance thread runs after each round (the tablet owner's housekeeping).
pub type RoundHook = Box<dyn Fn() -> Result<()> + Send>;

/// A running maintenance thread; stops (and joins) when dropped.
pub struct MaintenanceManager {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl MaintenanceManager {
    /// Starts the maintenance thread for `tablet`.
    pub fn start(tablet: Arc<Tablet>) -> MaintenanceManager {
        Self::start_with(tablet, Box::new(|| Ok(())))
    }

    /// Starts the maintenance thread for `tablet`, running `after_round` after each
    /// round.
    pub fn start_with(tablet: Arc<Tablet>, after_round: RoundHook) -> MaintenanceManager {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("cairn-maintenance".into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) && !tablet.is_shut_down() {
                    let round = run_once(&tablet);
                    if let Err(e) = after_round() {
                        tracing::error!(error = %e, "maintenance housekeeping failed");
                    }
                    match round {
                        Ok(Some(_)) => continue,
                        Ok(None) => {}
                        Err(crate::TabletError::ShutDown) => break,
                        Err(e) => tracing::error!(error = %e, "maintenance op failed"),
                    }
                    if tablet.failure().is_some() {
                        break;
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
