//! A tablet with a write-ahead log of its own, for tests, tools and `cairn tablet-demo`.
//!
//! On a tablet server the Raft log feeds each tablet; [`LocalTablet`] plays that part
//! with a plain [`cairn_wal::Log`]: a write is validated and checked, its record appended
//! (and fsynced, by policy) and then applied through the same [`Tablet::apply`] as a
//! replica's. Records are appended and applied one at a time under one lock, as a Raft
//! state machine applies them in log order. Opening applies the log again from the
//! tablet's durable index; maintenance also discards the log segments below it.
//!
//! **Group commit.** With [`FsyncPolicy::Always`] a write is not acknowledged, nor
//! visible to readers, before its record is on disk, but it does not fsync under the
//! log lock: it appends and applies its record there (so the next write's checks see
//! it), keeps its timestamp in flight in MVCC, and leaves the lock. The first writer
//! to find no fsync running then fsyncs the log once for every record appended so
//! far — its own and those of writers queued behind it — and finishes their
//! timestamps in log order; the others wait for that fsync. Concurrent writers thus
//! share fsyncs, as a Raft leader's appends of queued entries do.

use std::collections::VecDeque;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use cairn_common::{HybridClock, HybridTime, Schema};
use cairn_wal::{FsyncPolicy, Log, LogOptions};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::{Result, TabletError};
use crate::maintenance::MaintenanceManager;
use crate::ops::{RowError, RowOp, TxnId};
use crate::scan::{ScanSpec, Scanner};
use crate::tablet::{AlterOp, Tablet, TabletOptions, TxnDecision, WriteResult};

/// How long a local write waits for its checks and for keys an open transaction owns
/// (other single writes run one at a time).
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// A tablet and its own log.
pub struct LocalTablet {
    tablet: Arc<Tablet>,
    log: Mutex<Log>,
    /// When records must be durable: [`FsyncPolicy::Always`] group-commits them.
    fsync: FsyncPolicy,
    commit: GroupCommit,
}

/// Writes appended and applied but not yet known durable, and who is syncing.
#[derive(Default)]
struct GroupCommit {
    state: Mutex<CommitState>,
    synced: Condvar,
}

#[derive(Default)]
struct CommitState {
    /// Every record up to this log index is durable.
    durable: u64,
    /// (log index, timestamp to finish in MVCC once durable), in log order.
    waiting: VecDeque<(u64, Option<HybridTime>)>,
    /// A writer is fsyncing the log.
    syncing: bool,
    /// Group fsyncs done since the tablet opened.
    syncs: u64,
}

impl std::fmt::Debug for LocalTablet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalTablet({})", self.tablet.dir().display())
    }
}

impl Deref for LocalTablet {
    type Target = Tablet;
    fn deref(&self) -> &Tablet {
        &self.tablet
    }
}

impl LocalTablet {
    /// Creates a new, empty tablet with its log in `dir` (which must not hold one).
    pub fn create(dir: &Path, schema: Schema, opts: TabletOptions) -> Result<Arc<LocalTablet>> {
        Tablet::create(dir, schema, opts.clone(), Arc::new(HybridClock::new()))?;
        Self::open(dir, opts)
    }

    /// Opens the tablet in `dir` and applies its log from the durable index on.
    pub fn open(dir: &Path, opts: TabletOptions) -> Result<Arc<LocalTablet>> {
        // The log never fsyncs on its own: under FsyncPolicy::Always, `commit` does,
        // once for every write queued behind it.
        let log = Log::open(
            &dir.join("wal"),
            LogOptions {
                segment_size: opts.wal_segment_bytes,
                fsync: FsyncPolicy::Never,
            },
        )?;
        let fsync = opts.fsync;
        let tablet = Tablet::open(dir, opts, Arc::new(HybridClock::new()))?;
        let t = Arc::new(LocalTablet {
            tablet,
            log: Mutex::new(log),
            fsync,
            commit: GroupCommit::default(),
        });
        t.replay()?;
        Ok(t)
    }

    /// The tablet.
    pub fn tablet(&self) -> &Arc<Tablet> {
        &self.tablet
    }

    /// Applies every logged record after the durable index, in order.
    fn replay(&self) -> Result<()> {
        let log = self.log.lock();
        let start = self.tablet.durable_index() + 1;
        let Some(last) = log.last_index() else {
            return Ok(());
        };
        let mut from = start;
        let mut replayed = 0usize;
        while from <= last {
            let to = (from + 4096).min(last + 1);
            for (index, payload) in log.read_range(from, to)? {
                self.tablet.apply(index, &payload)?;
                replayed += 1;
            }
            from = to;
        }
        tracing::info!(dir = %self.tablet.dir().display(), replayed, from = start, "replayed the write-ahead log");
        Ok(())
    }

    /// Appends `record` and applies it; returns its log index and row errors.
    /// REQUIRES: the log lock (passed in).
    fn log_and_apply(&self, log: &mut Log, record: &[u8]) -> Result<(u64, Vec<(usize, RowError)>)> {
        let index = self.append(log, record)?;
        Ok((index, self.tablet.apply(index, record)?))
    }

    /// Releases the log lock and returns once the record at `index` is durable (at
    /// once without fsync), having finished the write at `ts` in MVCC — so a write is
    /// visible no earlier than it is durable. `index` `None`: the record was not
    /// logged or not applied; `ts` is finished at once.
    /// REQUIRES: the log lock (passed in), held since the record was appended.
    fn commit(
        &self,
        log: MutexGuard<'_, Log>,
        index: Option<u64>,
        ts: Option<HybridTime>,
    ) -> Result<()> {
        let Some(index) = index.filter(|_| self.fsync == FsyncPolicy::Always) else {
            // Finished under the log lock, before any later write can finish: a writer
            // that reads after its write returns sees it.
            if let Some(ts) = ts {
                self.tablet.finish_write(ts);
            }
            drop(log);
            return Ok(());
        };
        // Queued under the log lock, so the queue is in log order.
        self.commit.state.lock().waiting.push_back((index, ts));
        drop(log);
        self.wait_durable(index)
    }

    /// Waits until the log is durable up to `index`, fsyncing it if no one else is.
    fn wait_durable(&self, index: u64) -> Result<()> {
        let mut st = self.commit.state.lock();
        loop {
            if st.durable >= index {
                return Ok(());
            }
            if st.syncing {
                self.commit.synced.wait(&mut st);
                continue;
            }
            if let Some(why) = self.tablet.failure() {
                // An earlier fsync failed: nothing queued can be acknowledged.
                self.release_waiting(&mut st);
                return Err(TabletError::Failed(why));
            }
            st.syncing = true;
            drop(st);
            // Everything appended so far: this write's record and those of writers
            // queued behind it. (A statement of its own, so that the log lock is not
            // held while fsyncing.)
            let point = self.log.lock().sync_point();
            let synced = point
                .map_err(TabletError::from)
                .and_then(|point| match point {
                    None => Ok(index),
                    Some((last, file)) => {
                        fail::fail_point!("local::group_sync", |_| Err(TabletError::Failed(
                            "injected fsync failure".into()
                        )));
                        cairn_wal::sync_segment(&file)
                            .map_err(|e| TabletError::io(self.tablet.dir().join("wal"), e))?;
                        Ok(last)
                    }
                });
            st = self.commit.state.lock();
            st.syncing = false;
            match synced {
                Ok(upto) => {
                    self.finish_queued(&mut st, upto);
                    st.durable = st.durable.max(upto);
                    st.syncs += 1;
                }
                Err(e) => {
                    // Nothing queued can be acknowledged: the tablet fails, and its
                    // writes' timestamps are released so no reader waits on them.
                    self.tablet.fail(format!("syncing the log failed: {e}"));
                    self.release_waiting(&mut st);
                    return Err(e);
                }
            }
            self.commit.synced.notify_all();
        }
    }

    /// Finishes the timestamps of every queued write, which will not be
    /// acknowledged (the tablet has failed), so that no reader waits on them, and
    /// wakes their writers. REQUIRES: the commit state lock (passed in).
    fn release_waiting(&self, st: &mut CommitState) {
        self.finish_queued(st, u64::MAX);
        self.commit.synced.notify_all();
    }

    /// Dequeues the writes up to log index `upto` and finishes their timestamps, in
    /// log order. REQUIRES: the commit state lock (passed in).
    fn finish_queued(&self, st: &mut CommitState, upto: u64) {
        while let Some((_, ts)) = st.waiting.pop_front_if(|(i, _)| *i <= upto) {
            if let Some(ts) = ts {
                self.tablet.finish_write(ts);
            }
        }
    }

    /// Appends `record` at the log's next index and returns the index; a failed append
    /// fails the tablet. REQUIRES: the log lock (passed in).
    fn append(&self, log: &mut Log, record: &[u8]) -> Result<u64> {
        let index = log.next_index().unwrap_or(1);
        if let Err(e) = log.append(index, record) {
            self.tablet
                .fail(format!("appending to the log failed: {e}"));
            return Err(e.into());
        }
        Ok(index)
    }

    /// Appends the record of this process's own write `p` and applies it from `p`'s
    /// ops, which move out of it (its positions and row errors stay).
    /// REQUIRES: the log lock (passed in); `p` validated against the current schema.
    fn log_own_write(
        &self,
        log: &mut Log,
        record: &[u8],
        ts: HybridTime,
        p: &mut crate::tablet::PreparedWrite,
        atomic: bool,
    ) -> Result<(u64, Vec<(usize, RowError)>)> {
        let index = self.append(log, record)?;
        let schema = p.schema.clone();
        let rows = p.take_rows();
        // Applying finishes `ts`; `commit` finishes it for good once it is durable.
        self.tablet.hold_write(ts);
        match self
            .tablet
            .apply_own_write(index, ts, &schema, rows, atomic)
        {
            Ok(errors) => Ok((index, errors)),
            Err(e) => {
                self.tablet.finish_write(ts);
                Err(e)
            }
        }
    }

    /// Applies a batch of row ops, each atomic on its own row. Rows that fail
    /// validation, their condition or their op's precondition get an error; the others
    /// are durable in the log when this returns.
    pub fn write(&self, ops: Vec<RowOp>) -> Result<WriteResult> {
        self.write_batch(ops, false)
    }

    /// Applies a batch of row ops all or nothing: if any row would fail, no row is
    /// written and every row reports an error ([`RowError::Aborted`] for the valid
    /// ones).
    pub fn write_atomic(&self, ops: Vec<RowOp>) -> Result<WriteResult> {
        self.write_batch(ops, true)
    }

    fn write_batch(&self, ops: Vec<RowOp>, atomic: bool) -> Result<WriteResult> {
        let p = self.tablet.prepare_write(ops)?;
        self.log_checked(p, atomic)
    }

    /// Locks, checks, logs and applies a prepared batch (a transaction's or not).
    fn log_checked(
        &self,
        mut p: crate::tablet::PreparedWrite,
        atomic: bool,
    ) -> Result<WriteResult> {
        let deadline = Instant::now() + CHECK_TIMEOUT;
        // Keys an open transaction owns are waited for before the log lock: their
        // owner's commit needs it.
        let _locks = self.tablet.lock_rows(&p, deadline)?;
        let mut log = self.log.lock();
        self.tablet.check_write(&mut p, atomic, deadline)?;
        if p.is_empty() {
            return Ok(WriteResult {
                ts: self.tablet.safe_time(),
                row_errors: p.row_errors,
            });
        }
        let (ts, rec) = self.tablet.start_write(&p, atomic, None);
        let res = if p.txn().is_none() && Arc::ptr_eq(&p.schema, &self.tablet.schema()) {
            // The ops need not be decoded from the record just encoded from them.
            self.log_own_write(&mut log, &rec, ts, &mut p, atomic)
        } else {
            self.log_and_apply(&mut log, &rec)
        };
        self.commit(log, res.as_ref().ok().map(|r| r.0), Some(ts))?;
        let mut row_errors = p.row_errors.clone();
        row_errors.extend(res?.1.into_iter().map(|(i, e)| (p.batch_position(i), e)));
        row_errors.sort_by_key(|(i, _)| *i);
        Ok(WriteResult { ts, row_errors })
    }

    /// Writes `ops` provisionally for transaction `txn` ([`crate::txn`]): the rows'
    /// checks see the transaction's earlier writes, the keys become the
    /// transaction's until it finishes, and nobody else sees the rows before the
    /// commit. With `atomic`, all or none of the batch.
    pub fn txn_write(&self, txn: TxnId, ops: Vec<RowOp>, atomic: bool) -> Result<WriteResult> {
        let p = self.tablet.prepare_txn_write(txn, ops)?;
        self.log_checked(p, atomic)
    }

    /// Prepares `txn` to commit, its status record where `role` says; returns the
    /// prepare timestamp.
    pub fn txn_begin_commit(&self, txn: TxnId, role: Option<crate::TxnRole>) -> Result<HybridTime> {
        let mut log = self.log.lock();
        let (ts, rec) = self.tablet.start_begin_commit(txn, role)?;
        let res = self.log_and_apply(&mut log, &rec);
        self.commit(log, res.as_ref().ok().map(|r| r.0), Some(ts))?;
        res.map(|_| ts)
    }

    /// Commits or aborts `txn`; returns the commit timestamp of a commit.
    pub fn txn_finish(&self, txn: TxnId, decision: TxnDecision) -> Result<Option<HybridTime>> {
        let mut log = self.log.lock();
        let Some((ts, rec)) = self.tablet.start_finish(txn, decision)? else {
            return Ok(match self.tablet.txns().outcome(txn) {
                Some(crate::txn::TxnOutcome::Committed(t)) => Some(t),
                _ => None,
            });
        };
        let res = self.log_and_apply(&mut log, &rec);
        self.commit(log, res.as_ref().ok().map(|r| r.0), ts)?;
        res.map(|_| ts)
    }

    /// Inserts a batch of new rows (columns named like the table's) straight into
    /// DiskRowSets (see [`crate::bulk`]). Rows whose key exists get `AlreadyPresent`;
    /// rows that do not fit the schema get their error; the others are durable when
    /// this returns.
    pub fn bulk_insert(&self, batch: &RecordBatch) -> Result<WriteResult> {
        let prepared = self.tablet.prepare_bulk(batch)?;
        let mut row_errors = prepared.row_errors.clone();
        if prepared.is_empty() {
            return Ok(WriteResult {
                ts: self.tablet.safe_time(),
                row_errors,
            });
        }
        let mut log = self.log.lock();
        let (ts, rec) = self.tablet.start_bulk(&prepared, None);
        let res = self.log_and_apply(&mut log, &rec);
        self.commit(log, res.as_ref().ok().map(|r| r.0), Some(ts))?;
        row_errors.extend(
            res?.1
                .into_iter()
                .map(|(i, e)| (prepared.batch_position(i), e)),
        );
        row_errors.sort_by_key(|(i, _)| *i);
        Ok(WriteResult { ts, row_errors })
    }

    /// Changes the schema (see [`Tablet::prepare_alter`]); durable when this returns.
    pub fn alter_schema(&self, op: AlterOp) -> Result<()> {
        let rec = self.tablet.prepare_alter(&op)?;
        let mut log = self.log.lock();
        self.log_and_apply(&mut log, &rec)?;
        log.sync()?;
        Ok(())
    }

    /// Deletes log segments every store has made durable. Returns segments deleted.
    pub fn gc_log(&self) -> Result<usize> {
        let keep_from = self.tablet.durable_index() + 1;
        Ok(self.log.lock().gc(keep_from)?)
    }

    /// Fsyncs the group commit has done since the tablet opened (each covers every
    /// write queued behind it; none under [`FsyncPolicy::Never`]).
    pub fn group_syncs(&self) -> u64 {
        self.commit.state.lock().syncs
    }

    /// Bytes and segments of the log.
    pub fn log_size(&self) -> (u64, usize) {
        let log = self.log.lock();
        (log.size_bytes(), log.segment_count())
    }

    /// Starts the maintenance thread, which also discards the log behind the durable
    /// index.
    pub fn start_maintenance(self: &Arc<Self>) -> MaintenanceManager {
        let me = self.clone();
        MaintenanceManager::start_with(
            self.tablet.clone(),
            Box::new(move || me.gc_log().map(|_| ())),
        )
    }

    /// Scans with the given spec.
    pub fn scan(&self, spec: ScanSpec) -> Result<Scanner> {
        self.tablet.scan(spec)
    }

    /// Stops the tablet and syncs the log.
    pub fn shutdown(&self) -> Result<()> {
        self.tablet.shutdown();
        self.log.lock().sync().map_err(TabletError::from)
    }
}
