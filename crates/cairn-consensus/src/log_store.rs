//! The Raft log of one group on a [`cairn_wal::Log`].
//!
//! Entries are openraft entries encoded with postcard (a normal entry's payload is
//! stored as raw bytes). The vote and the purge mark live beside the log in small files
//! written atomically (temp file, fsync, rename, fsync of the directory).
//!
//! ## Group commit
//!
//! With [`FsyncPolicy::Always`], `append` writes the entries and returns at once;
//! a [`Flusher`] fsyncs them on a blocking thread and only then tells openraft they are
//! durable (the `LogFlushed` callback), so an entry counts towards a commit only once
//! it is on disk. Appends that arrive while an fsync runs wait for the next one and
//! share it. Fsyncing inside `append` instead would hold one of the async runtime's
//! few worker threads for every fsync of every group, and the server's RPCs, Raft
//! heartbeats and other groups' writes would wait behind the disk.

use std::fmt::Debug;
use std::io::Write;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_wal::{FsyncPolicy, Log, LogOptions};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogReader, StorageIOError, Vote};
use parking_lot::Mutex;

use crate::error::{ConsensusError, Result};
use crate::{Entry, LogId, NodeId, StorageError, TypeConfig};

const VOTE_FILE: &str = "raft-vote";
const PURGED_FILE: &str = "raft-purged";

/// Writes `bytes` to `dir/name` atomically and durably.
pub(crate) fn write_file_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let dst = dir.join(name);
    let mut f = std::fs::File::create(&tmp).map_err(|e| ConsensusError::io(&tmp, e))?;
    f.write_all(bytes)
        .map_err(|e| ConsensusError::io(&tmp, e))?;
    f.sync_all().map_err(|e| ConsensusError::io(&tmp, e))?;
    std::fs::rename(&tmp, &dst).map_err(|e| ConsensusError::io(&dst, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ConsensusError::io(dir, e))
}

/// Reads a JSON file written by [`write_file_atomic`]; `None` if it does not exist.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| ConsensusError::Corruption {
                path: path.to_path_buf(),
                detail: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConsensusError::io(path, e)),
    }
}

fn encode_entry(e: &Entry) -> Result<Vec<u8>> {
    postcard::to_stdvec(e).map_err(|e| ConsensusError::Decode(e.to_string()))
}

fn decode_entry(b: &[u8]) -> std::result::Result<Entry, postcard::Error> {
    postcard::from_bytes(b)
}

fn sto_read(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_logs(openraft::AnyError::error(e)).into()
}
fn sto_write(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(openraft::AnyError::error(e)).into()
}

struct Marks {
    last_log_id: Option<LogId>,
    last_purged: Option<LogId>,
}

struct Inner {
    dir: PathBuf,
    wal: Mutex<Log>,
    marks: Mutex<Marks>,
    /// `Some` under [`FsyncPolicy::Always`]: the log itself is opened without fsync
    /// and appends are made durable by group commit.
    flusher: Option<Arc<Flusher>>,
}

/// Group commit of one log: appended entries wait here for the fsync that makes them
/// durable. At most one fsync runs at a time, on a blocking thread, and each covers
/// every append queued before it started.
#[derive(Default)]
struct Flusher {
    state: Mutex<FlushState>,
}

#[derive(Default)]
struct FlushState {
    /// Callbacks of the appends written since the last fsync started, in log order.
    waiting: Vec<LogFlushed<TypeConfig>>,
    /// The active segment as of the newest of those appends: fsyncing it covers them
    /// all (older segments were fsynced when the log rolled past them).
    segment: Option<std::fs::File>,
    /// Whether a blocking thread is fsyncing (it takes `waiting` until it is empty).
    running: bool,
    /// Why an fsync failed. The log's durable state is then unknown, so every later
    /// append fails too, as the log's own syncs poison it.
    failed: Option<String>,
    /// Fsyncs run so far.
    syncs: u64,
}

impl Flusher {
    /// Queues the callback of an append that has been written up to the end of
    /// `segment`, and starts an fsync if none is running.
    /// REQUIRES: called within a Tokio runtime, after the append's write, with the
    /// log lock no longer held.
    fn enqueue(self: &Arc<Self>, segment: std::fs::File, callback: LogFlushed<TypeConfig>) {
        let mut st = self.state.lock();
        if let Some(why) = &st.failed {
            let why = why.clone();
            drop(st);
            callback.log_io_completed(Err(std::io::Error::other(why)));
            return;
        }
        st.waiting.push(callback);
        st.segment = Some(segment);
        if st.running {
            return;
        }
        st.running = true;
        drop(st);
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.run());
    }

    /// Fsyncs and completes queued appends until none are left.
    fn run(&self) {
        loop {
            let (waiting, segment, failed) = {
                let mut st = self.state.lock();
                if st.waiting.is_empty() {
                    st.running = false;
                    return;
                }
                let segment = st.segment.take();
                if segment.is_some() && st.failed.is_none() {
                    st.syncs += 1;
                }
                (std::mem::take(&mut st.waiting), segment, st.failed.clone())
            };
            let result = match (failed, segment) {
                (Some(why), _) => Err(why),
                (None, Some(f)) => cairn_wal::sync_segment(&f).map_err(|e| e.to_string()),
                (None, None) => Ok(()),
            };
            if let Err(why) = &result {
                let mut st = self.state.lock();
                if st.failed.is_none() {
                    tracing::error!("fsync of a Raft log failed, failing its appends: {why}");
                    st.failed = Some(format!("fsync of the Raft log failed: {why}"));
                }
            }
            for callback in waiting {
                callback.log_io_completed(result.clone().map_err(std::io::Error::other));
            }
        }
    }

    /// The error of an earlier failed fsync, if any.
    fn failure(&self) -> Option<String> {
        self.state.lock().failed.clone()
    }
}

/// One log entry as [`LogStore::dump`] returns it.
#[derive(Clone, Debug)]
pub struct DumpedEntry {
    /// The entry's log index.
    pub index: u64,
    /// The term of the leader that proposed it.
    pub term: u64,
    /// That leader's node id.
    pub leader: NodeId,
    /// What the entry carries.
    pub payload: DumpedPayload,
}

/// The payload of a [`DumpedEntry`].
#[derive(Clone, Debug)]
pub enum DumpedPayload {
    /// A new leader's empty entry.
    Blank,
    /// A state-machine record (opaque bytes the state machine decodes).
    Normal(bytes::Bytes),
    /// A membership change, as text.
    Membership(String),
}

/// One group's Raft log (cheap to clone: clones share the log).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogStore({})", self.inner.dir.display())
    }
}

impl LogStore {
    /// Opens (or creates) the log in `dir`.
    pub fn open(dir: &Path, fsync: FsyncPolicy) -> Result<LogStore> {
        std::fs::create_dir_all(dir).map_err(|e| ConsensusError::io(dir, e))?;
        // Under Always, appends are fsynced by group commit (see the module docs), so
        // the log itself syncs only when it rolls, truncates or resets.
        let wal = Log::open(
            &dir.join("wal"),
            LogOptions {
                segment_size: 64 << 20,
                fsync: FsyncPolicy::Never,
            },
        )?;
        let last_purged: Option<LogId> = read_json(&dir.join(PURGED_FILE))?;
        let last_log_id = match wal.last_index() {
            Some(i) => {
                let b = wal.read(i)?.ok_or_else(|| ConsensusError::Corruption {
                    path: dir.join("wal"),
                    detail: format!("last entry {i} is missing"),
                })?;
                Some(
                    decode_entry(&b)
                        .map_err(|e| ConsensusError::Corruption {
                            path: dir.join("wal"),
                            detail: format!("entry {i}: {e}"),
                        })?
                        .log_id,
                )
            }
            None => None,
        };
        Ok(LogStore {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                wal: Mutex::new(wal),
                marks: Mutex::new(Marks {
                    last_log_id,
                    last_purged,
                }),
                flusher: (fsync == FsyncPolicy::Always).then(Default::default),
            }),
        })
    }

    /// The log id of entry `index`, if it is in the log or is the purge mark.
    pub fn log_id_at(&self, index: u64) -> Result<Option<LogId>> {
        if let Some(p) = self.inner.marks.lock().last_purged
            && p.index == index
        {
            return Ok(Some(p));
        }
        let b = self.inner.wal.lock().read(index)?;
        match b {
            Some(b) => Ok(Some(
                decode_entry(&b)
                    .map_err(|e| ConsensusError::Corruption {
                        path: self.inner.dir.join("wal"),
                        detail: format!("entry {index}: {e}"),
                    })?
                    .log_id,
            )),
            None => Ok(None),
        }
    }

    /// The last entry's log id.
    pub fn last_log_id(&self) -> Option<LogId> {
        let m = self.inner.marks.lock();
        m.last_log_id.or(m.last_purged)
    }

    /// Group-commit fsyncs this log has run since it was opened (0 without fsync):
    /// fewer than its appends when concurrent writes share them.
    pub fn group_syncs(&self) -> u64 {
        self.inner
            .flusher
            .as_ref()
            .map_or(0, |f| f.state.lock().syncs)
    }

    /// Bytes the log occupies.
    pub fn size_bytes(&self) -> u64 {
        self.inner.wal.lock().size_bytes()
    }

    /// Every entry in the log, in index order, as an operator's dump shows it
    /// (`cairn wal dump`). Opening the log recovers a torn tail like a restart would.
    pub fn dump(&self) -> Result<Vec<DumpedEntry>> {
        let raw = self.inner.wal.lock().read_range(0, u64::MAX)?;
        raw.into_iter()
            .map(|(i, b)| {
                let e = decode_entry(&b).map_err(|e| ConsensusError::Corruption {
                    path: self.inner.dir.join("wal"),
                    detail: format!("entry {i}: {e}"),
                })?;
                let payload = match e.payload {
                    openraft::EntryPayload::Blank => DumpedPayload::Blank,
                    openraft::EntryPayload::Normal(r) => DumpedPayload::Normal(r.0),
                    openraft::EntryPayload::Membership(m) => {
                        DumpedPayload::Membership(format!("{m:?}"))
                    }
                };
                Ok(DumpedEntry {
                    index: e.log_id.index,
                    term: e.log_id.leader_id.term,
                    leader: e.log_id.leader_id.node_id,
                    payload,
                })
            })
            .collect()
    }

    fn read_entries(&self, start: u64, end: u64) -> std::result::Result<Vec<Entry>, StorageError> {
        let raw = self
            .inner
            .wal
            .lock()
            .read_range(start, end)
            .map_err(sto_read)?;
        raw.into_iter()
            .map(|(i, b)| decode_entry(&b).map_err(|e| sto_read(format!("entry {i}: {e}"))))
            .collect()
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> std::result::Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => e.saturating_add(1),
            Bound::Excluded(e) => *e,
            Bound::Unbounded => u64::MAX,
        };
        self.read_entries(start, end)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> std::result::Result<LogState<TypeConfig>, StorageError> {
        let m = self.inner.marks.lock();
        Ok(LogState {
            last_purged_log_id: m.last_purged,
            last_log_id: m.last_log_id.or(m.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> std::result::Result<(), StorageError> {
        let b = serde_json::to_vec(vote).map_err(|e| {
            StorageError::from(StorageIOError::write_vote(openraft::AnyError::error(e)))
        })?;
        // Writes reach the disk in the order openraft issues them: entries appended
        // before this vote (whose group commit may still be pending) first.
        self.inner.wal.lock().sync().map_err(|e| {
            StorageError::from(StorageIOError::write_vote(openraft::AnyError::error(e)))
        })?;
        write_file_atomic(&self.inner.dir, VOTE_FILE, &b).map_err(|e| {
            StorageError::from(StorageIOError::write_vote(openraft::AnyError::error(e)))
        })
    }

    async fn read_vote(&mut self) -> std::result::Result<Option<Vote<NodeId>>, StorageError> {
        read_json(&self.inner.dir.join(VOTE_FILE))
            .map_err(|e| StorageIOError::read_vote(openraft::AnyError::error(e)).into())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> std::result::Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut encoded = Vec::new();
        let mut last = None;
        for e in entries {
            encoded.push((e.log_id.index, encode_entry(&e).map_err(sto_write)?));
            last = Some(e.log_id);
        }
        if let Some(why) = self.inner.flusher.as_ref().and_then(|f| f.failure()) {
            callback.log_io_completed(Err(std::io::Error::other(why.clone())));
            return Err(sto_write(why));
        }
        let res = {
            let mut wal = self.inner.wal.lock();
            wal.append_batch(encoded.iter().map(|(i, b)| (*i, b.as_slice())))
                .and_then(|()| match &self.inner.flusher {
                    Some(_) => wal.sync_point(),
                    None => Ok(None),
                })
        };
        match res {
            Ok(segment) => {
                if let Some(l) = last {
                    self.inner.marks.lock().last_log_id = Some(l);
                }
                match (&self.inner.flusher, segment) {
                    (Some(flusher), Some((_, segment))) => flusher.enqueue(segment, callback),
                    _ => callback.log_io_completed(Ok(())),
                }
                Ok(())
            }
            Err(e) => {
                let msg = e.to_string();
                callback.log_io_completed(Err(std::io::Error::other(msg.clone())));
                Err(sto_write(msg))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> std::result::Result<(), StorageError> {
        let mut wal = self.inner.wal.lock();
        wal.truncate_suffix(log_id.index).map_err(sto_write)?;
        let last = match wal.last_index() {
            Some(i) => {
                let b = wal
                    .read(i)
                    .map_err(sto_read)?
                    .ok_or_else(|| sto_read(format!("entry {i} missing after truncate")))?;
                Some(decode_entry(&b).map_err(sto_read)?.log_id)
            }
            None => None,
        };
        self.inner.marks.lock().last_log_id = last;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> std::result::Result<(), StorageError> {
        let b = serde_json::to_vec(&log_id).map_err(sto_write)?;
        write_file_atomic(&self.inner.dir, PURGED_FILE, &b).map_err(sto_write)?;
        let mut wal = self.inner.wal.lock();
        let mut marks = self.inner.marks.lock();
        marks.last_purged = Some(log_id);
        if wal.last_index().is_none_or(|l| l <= log_id.index) {
            wal.reset(log_id.index + 1).map_err(sto_write)?;
            marks.last_log_id = None;
        } else {
            wal.gc(log_id.index + 1).map_err(sto_write)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    /// Appends entries `from..to` concurrently (each append waits for its own
    /// durability), returning each append's result.
    async fn append_concurrently(log: &LogStore, from: u64, to: u64) -> Vec<bool> {
        let appends = (from..to).map(|i| {
            let mut log = log.clone();
            async move { log.blocking_append([entry(i)]).await.is_ok() }
        });
        // join_all polls in order, so the appends are written in index order; each
        // then waits for an fsync.
        futures::future::join_all(appends).await
    }

    // One test: failpoints are global to the process.
    #[tokio::test(flavor = "current_thread")]
    async fn appends_share_fsyncs_and_a_failed_fsync_fails_them() {
        let d = tempfile::tempdir().unwrap();
        let log = LogStore::open(d.path(), FsyncPolicy::Always).unwrap();
        let ok = append_concurrently(&log, 1, 65).await;
        assert!(ok.iter().all(|&o| o), "every append is acknowledged");
        let syncs = log.group_syncs();
        assert!(
            (1..64).contains(&syncs),
            "64 concurrent appends should share fsyncs, ran {syncs}"
        );
        let reopened = LogStore::open(d.path(), FsyncPolicy::Always).unwrap();
        assert_eq!(reopened.last_log_id().map(|l| l.index), Some(64));

        // An fsync that fails fails the appends it covers and every later one.
        let d = tempfile::tempdir().unwrap();
        let mut log = LogStore::open(d.path(), FsyncPolicy::Always).unwrap();
        log.blocking_append([entry(1)]).await.unwrap();
        // The failpoint of the log's disk (the fault harness's slow and failing
        // disks) covers group-commit fsyncs as it covers the log's own.
        fail::cfg("wal::fsync", "return(EIO)").unwrap();
        let failed = append_concurrently(&log, 2, 6).await;
        fail::remove("wal::fsync");
        assert!(
            failed.iter().all(|&o| !o),
            "no append covered by a failed fsync is acknowledged"
        );
        assert!(
            log.blocking_append([entry(6)]).await.is_err(),
            "a log whose fsync failed takes no more appends"
        );

        // A slow disk makes an append wait for its fsync.
        let d = tempfile::tempdir().unwrap();
        let mut log = LogStore::open(d.path(), FsyncPolicy::Always).unwrap();
        fail::cfg("wal::fsync", "sleep(300)").unwrap();
        let started = std::time::Instant::now();
        let slow = log.blocking_append([entry(1)]).await;
        fail::remove("wal::fsync");
        slow.unwrap();
        assert!(
            started.elapsed() >= std::time::Duration::from_millis(300),
            "an append is acknowledged only after its (slow) fsync"
        );

        // Without fsync, appends complete at once and nothing is synced.
        let d = tempfile::tempdir().unwrap();
        let log = LogStore::open(d.path(), FsyncPolicy::Never).unwrap();
        assert!(append_concurrently(&log, 1, 9).await.iter().all(|&o| o));
        assert_eq!(log.group_syncs(), 0);
    }
}
