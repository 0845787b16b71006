//! The Raft log of one group on a [`cairn_wal::Log`].
//!
//! Entries are openraft entries encoded with postcard (a normal entry's payload is
//! stored as raw bytes). The vote and the purge mark live beside the log in small files
//! written atomically (temp file, fsync, rename, fsync of the directory).

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
        let wal = Log::open(
            &dir.join("wal"),
            LogOptions {
                segment_size: 64 << 20,
                fsync,
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
        let res = {
            let mut wal = self.inner.wal.lock();
            // The log syncs the batch itself under FsyncPolicy::Always.
            wal.append_batch(encoded.iter().map(|(i, b)| (*i, b.as_slice())))
        };
        match res {
            Ok(()) => {
                if let Some(l) = last {
                    self.inner.marks.lock().last_log_id = Some(l);
                }
                callback.log_io_completed(Ok(()));
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
