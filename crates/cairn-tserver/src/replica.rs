//! One tablet replica: the tablet as a Raft state machine, and the leader's write path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn_common::{HybridClock, HybridTime, Partition, PartitionSchema, SchemaMeta};
use cairn_consensus::{RaftGroup, SmError, StateMachine};
use cairn_tablet::{MaintenanceManager, ReadMode, RowError, RowOp, Tablet, TabletOptions};
use parking_lot::{Mutex, RwLock};

use crate::convert::{decode_apply_errors, encode_apply_errors};
use crate::error::{Result, TserverError};

/// What a replica records about itself (`replica.json`, written last at creation).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ReplicaMeta {
    /// The tablet.
    pub tablet_id: String,
    /// Its table.
    pub table_id: String,
    /// The table's name when the replica was created.
    pub table_name: String,
    /// The table's partition schema.
    pub partition_schema: PartitionSchema,
    /// The slice of the table this tablet holds.
    pub partition: Partition,
    /// The schema the tablet was created with.
    pub initial_schema: SchemaMeta,
}

/// The tablet as a replicated state machine. Holds the tablet behind a lock because a
/// tablet copy replaces it wholesale.
pub struct TabletSm {
    dir: PathBuf,
    opts: TabletOptions,
    clock: Arc<HybridClock>,
    tablet: RwLock<Arc<Tablet>>,
    maint: Mutex<Option<MaintenanceManager>>,
}

impl TabletSm {
    /// Opens (or creates, with `schema`) the tablet in `dir` in replicated mode.
    pub fn open(
        dir: &Path,
        schema: Option<cairn_common::Schema>,
        opts: TabletOptions,
        clock: Arc<HybridClock>,
    ) -> Result<Arc<TabletSm>> {
        let mut opts = opts;
        opts.external_log = true;
        let tablet = match schema {
            Some(s) if !dir.join(cairn_tablet::metadata::METADATA_FILE).exists() => {
                Tablet::create(dir, s, opts.clone())?;
                Tablet::open_with_clock(dir, opts.clone(), clock.clone())?
            }
            _ => Tablet::open_with_clock(dir, opts.clone(), clock.clone())?,
        };
        let maint = MaintenanceManager::start(tablet.clone());
        Ok(Arc::new(TabletSm {
            dir: dir.to_path_buf(),
            opts,
            clock,
            tablet: RwLock::new(tablet),
            maint: Mutex::new(Some(maint)),
        }))
    }

    /// The current tablet.
    pub fn tablet(&self) -> Arc<Tablet> {
        self.tablet.read().clone()
    }

    /// Stops maintenance and the tablet.
    pub fn shutdown(&self) {
        if let Some(m) = self.maint.lock().take() {
            m.stop();
        }
        let _ = self.tablet().shutdown();
    }
}

impl StateMachine for TabletSm {
    fn apply(&self, index: u64, data: &[u8]) -> Result<Vec<u8>, SmError> {
        let errs = self.tablet().apply_replicated(index, data)?;
        Ok(encode_apply_errors(&errs))
    }

    fn durable_index(&self) -> u64 {
        self.tablet().durable_index()
    }

    fn flush(&self) -> Result<(), SmError> {
        // A tablet copy may replace the tablet meanwhile: retry on the new one.
        loop {
            let t = self.tablet();
            match t.flush_all() {
                Err(cairn_tablet::TabletError::ShutDown) if !Arc::ptr_eq(&t, &self.tablet()) => {}
                r => return Ok(r?),
            }
        }
    }

    fn checkpoint(&self, into: &Path) -> Result<(Vec<PathBuf>, u64), SmError> {
        loop {
            let t = self.tablet();
            match t.checkpoint_files(into) {
                Err(cairn_tablet::TabletError::ShutDown) if !Arc::ptr_eq(&t, &self.tablet()) => {}
                r => return Ok(r?),
            }
        }
    }

    fn restore(&self, from: &Path) -> Result<(), SmError> {
        if let Some(m) = self.maint.lock().take() {
            m.stop();
        }
        let old = self.tablet();
        old.shutdown()?;
        let aside = self.dir.with_extension("replaced");
        let _ = std::fs::remove_dir_all(&aside);
        std::fs::rename(&self.dir, &aside)?;
        std::fs::rename(from, &self.dir)?;
        let t = Tablet::open_with_clock(&self.dir, self.opts.clone(), self.clock.clone())?;
        *self.tablet.write() = t.clone();
        *self.maint.lock() = Some(MaintenanceManager::start(t));
        let _ = std::fs::remove_dir_all(&aside);
        Ok(())
    }
}

/// The validation errors of a leader's batch plus the errors its apply returned
/// (record positions mapped to batch positions by `position`), in batch order.
fn merge_apply_errors(
    mut errors: Vec<(usize, RowError)>,
    resp: &[u8],
    position: impl Fn(usize) -> usize,
) -> Vec<(usize, RowError)> {
    for (pos, e) in decode_apply_errors(resp) {
        errors.push((position(pos), e));
    }
    errors.sort_by_key(|(i, _)| *i);
    errors
}

/// A tablet replica on this server.
pub struct TabletReplica {
    /// Identity and partition.
    pub meta: ReplicaMeta,
    /// The state machine.
    pub sm: Arc<TabletSm>,
    /// The Raft group member.
    pub group: Arc<RaftGroup>,
    /// Serialises "take a timestamp, submit to Raft" so log order is timestamp order.
    propose: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TabletReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TabletReplica({})", self.meta.tablet_id)
    }
}

impl TabletReplica {
    /// Wraps an opened state machine and group.
    pub fn new(meta: ReplicaMeta, sm: Arc<TabletSm>, group: Arc<RaftGroup>) -> Self {
        TabletReplica {
            meta,
            sm,
            group,
            propose: tokio::sync::Mutex::new(()),
        }
    }

    /// The tablet.
    pub fn tablet(&self) -> Arc<Tablet> {
        self.sm.tablet()
    }

    /// The leader's write path. Returns the write's timestamp and the per-row errors
    /// (by position in `ops`).
    pub async fn write(
        self: &Arc<Self>,
        ops: Vec<RowOp>,
    ) -> Result<(HybridTime, Vec<(usize, RowError)>)> {
        self.group.check_leader_ready()?;
        let me = self.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let tablet = me.tablet();
            let prepared = tablet.prepare_write(ops)?;
            let errors = prepared.row_errors.clone();
            if prepared.is_empty() {
                return Ok((tablet.safe_time(), errors));
            }
            // Row locks are held until the batch is applied on this leader.
            let _locks = tablet.lock_rows(&prepared);
            let (ts, resp) =
                me.propose_blocking(&handle, &tablet, || tablet.start_write(&prepared))?;
            Ok((
                ts,
                merge_apply_errors(errors, &resp, |p| prepared.batch_position(p)),
            ))
        })
        .await
        .map_err(|e| TserverError::Internal(format!("write task failed: {e}")))?
    }

    /// The leader's bulk-insert path: checks the rows, replicates them as one record
    /// and waits until this leader has written them into DiskRowSets. Returns the
    /// timestamp and the per-row errors (by position in `rows`).
    pub async fn bulk_insert(
        self: &Arc<Self>,
        rows: arrow::array::RecordBatch,
    ) -> Result<(HybridTime, Vec<(usize, RowError)>)> {
        self.group.check_leader_ready()?;
        let me = self.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let tablet = me.tablet();
            let prepared = tablet.prepare_bulk(&rows)?;
            drop(rows);
            let errors = prepared.row_errors.clone();
            if prepared.is_empty() {
                return Ok((tablet.safe_time(), errors));
            }
            let (ts, resp) =
                me.propose_blocking(&handle, &tablet, || tablet.start_bulk(&prepared))?;
            Ok((
                ts,
                merge_apply_errors(errors, &resp, |p| prepared.batch_position(p)),
            ))
        })
        .await
        .map_err(|e| TserverError::Internal(format!("bulk insert task failed: {e}")))?
    }

    /// Takes a timestamp and its record from `start` and submits the record to Raft
    /// under the proposal order lock (so log order is timestamp order), then waits
    /// until this replica has applied it. Returns the timestamp and what applying
    /// returned. Runs on a blocking thread.
    fn propose_blocking(
        &self,
        handle: &tokio::runtime::Handle,
        tablet: &Tablet,
        start: impl FnOnce() -> (HybridTime, Vec<u8>),
    ) -> Result<(HybridTime, Vec<u8>)> {
        let (ts, rx) = {
            let _order = self.propose.blocking_lock();
            let (ts, rec) = start();
            match handle.block_on(self.group.submit(rec)) {
                Ok(rx) => (ts, rx),
                Err(e) => {
                    tablet.finish_write(ts);
                    return Err(e.into());
                }
            }
        };
        let res = handle.block_on(self.group.wait_response(rx));
        tablet.finish_write(ts);
        Ok((ts, res?))
    }

    /// Resolves the read mode of a scan on this replica. `READ_LATEST` needs the
    /// leader; a snapshot read on a follower first learns from the leader which log
    /// index makes the timestamp safe, and waits to apply it (`safe_index` asks the
    /// leader).
    pub async fn read_mode<F, Fut>(&self, snapshot: Option<u64>, safe_index: F) -> Result<ReadMode>
    where
        F: FnOnce(String, u64) -> Fut,
        Fut: std::future::Future<Output = Result<u64>>,
    {
        let tablet = self.tablet();
        match snapshot {
            None => {
                self.group.check_leader_ready()?;
                Ok(ReadMode::Latest)
            }
            Some(ts) => {
                let ts = if ts == 0 { tablet.clock().now().0 } else { ts };
                if self.group.check_leader_ready().is_ok() {
                    let t = tablet.clone();
                    tokio::task::spawn_blocking(move || {
                        t.snapshot_for(ReadMode::Snapshot(HybridTime(ts)))
                    })
                    .await
                    .map_err(|e| TserverError::Internal(e.to_string()))??;
                    return Ok(ReadMode::Snapshot(HybridTime(ts)));
                }
                let st = self.group.status();
                let leader_addr = st.leader.and_then(|l| st.voters.get(&l).cloned()).ok_or(
                    cairn_consensus::ConsensusError::NotLeader {
                        leader: None,
                        leader_addr: None,
                    },
                )?;
                let index = safe_index(leader_addr, ts).await?;
                self.group
                    .wait_applied(index, Duration::from_secs(10))
                    .await?;
                tablet.clock().update(HybridTime(ts));
                Ok(ReadMode::Snapshot(HybridTime(ts)))
            }
        }
    }
}
