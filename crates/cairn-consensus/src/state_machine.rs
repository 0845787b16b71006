//! The state machine side: what a replicated thing must offer ([`StateMachine`]) and
//! its adapter to openraft ([`StateMachineStore`]).
//!
//! Applied state is made durable by the state machine on its own schedule, not per
//! entry. After a restart the adapter reports `last_applied` = the entry at
//! [`StateMachine::durable_index`], so openraft re-applies everything after it; the
//! state machine must therefore tolerate re-application of entries its files may
//! partly hold (the tablet skips rows whose store is durable past the entry).
//!
//! Snapshots are checkpoints. *Building* one flushes the state machine and records the
//! log id its files now cover; openraft may then purge the log before it. *Sending* one
//! ([`RaftStateMachine::get_current_snapshot`]) hard-links a consistent set of the state
//! machine's files and streams them as one archive; *installing* one unpacks the archive
//! and asks the state machine to restore from it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError};
use parking_lot::Mutex;

use crate::log_store::{LogStore, read_json, write_file_atomic};
use crate::{LogId, Node, NodeId, Response, StorageError, StoredMembership, TypeConfig};

/// Errors a state machine reports (they stop the group: apply must not fail on bad
/// input, which the proposer rejects before proposing).
pub type SmError = Box<dyn std::error::Error + Send + Sync>;

/// What a replicated state machine implements. Methods are synchronous and may block
/// (they run on blocking-capable threads).
pub trait StateMachine: Send + Sync + 'static {
    /// Applies the committed entry at `index`; the bytes returned go to the proposer.
    fn apply(&self, index: u64, data: &[u8]) -> Result<Vec<u8>, SmError>;
    /// The index up to which applied state survives a restart without the log.
    fn durable_index(&self) -> u64;
    /// Makes everything applied durable (returns once [`Self::durable_index`] covers
    /// all entries applied before the call).
    fn flush(&self) -> Result<(), SmError>;
    /// Places a consistent set of the state machine's files under `into` (hard links
    /// or copies) and returns their paths relative to `into` and the log index they
    /// cover.
    fn checkpoint(&self, into: &Path) -> Result<(Vec<PathBuf>, u64), SmError>;
    /// Replaces the whole state with the checkpoint in directory `from`.
    fn restore(&self, from: &Path) -> Result<(), SmError>;
}

/// Tablet copies installed by this process (all groups): a metric, and how tests see
/// that a replica caught up by copy rather than by log.
static SNAPSHOTS_INSTALLED: AtomicU64 = AtomicU64::new(0);
/// Tablet copies sent by this process (all groups).
static SNAPSHOTS_SENT: AtomicU64 = AtomicU64::new(0);

/// How many snapshots (tablet copies) this process has installed.
pub fn snapshots_installed() -> u64 {
    SNAPSHOTS_INSTALLED.load(Ordering::Relaxed)
}

/// How many snapshots (tablet copies) this process has produced for sending.
pub fn snapshots_sent() -> u64 {
    SNAPSHOTS_SENT.load(Ordering::Relaxed)
}

const SNAPSHOT_META_FILE: &str = "raft-snapshot-meta";
const MEMBERSHIP_FILE: &str = "raft-membership";
const ARCHIVE_MAGIC: &[u8; 8] = b"CAIRNSS1";

fn sm_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(openraft::AnyError::error(e)).into()
}
fn snap_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_snapshot(None, openraft::AnyError::error(e)).into()
}

/// The most log-entry bytes [`StateMachineStore`] applies on the calling task (more go
/// to a blocking thread).
const INLINE_APPLY_BYTES: usize = 64 * 1024;

/// Runs blocking state-machine work without stalling the async runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

struct Shared {
    dir: PathBuf,
    sm: Arc<dyn StateMachine>,
    log: LogStore,
    /// Recent memberships (oldest first), to answer "the membership as of index i".
    memberships: Mutex<Vec<StoredMembership>>,
    last_applied: Mutex<Option<LogId>>,
    seq: AtomicU64,
}

impl Shared {
    fn membership_at(&self, index: u64) -> StoredMembership {
        self.memberships
            .lock()
            .iter()
            .rev()
            .find(|m| m.log_id().is_none_or(|l| l.index <= index))
            .cloned()
            .unwrap_or_default()
    }

    fn record_membership(&self, m: StoredMembership) -> Result<(), StorageError> {
        let mut ms = self.memberships.lock();
        ms.push(m);
        let keep = ms.len().saturating_sub(8);
        ms.drain(..keep);
        let b = serde_json::to_vec(&*ms).map_err(sm_err)?;
        write_file_atomic(&self.dir, MEMBERSHIP_FILE, &b).map_err(sm_err)
    }

    /// The snapshot meta for the state machine's files covering `index`.
    fn meta_at(&self, index: u64) -> Result<SnapshotMeta<NodeId, Node>, StorageError> {
        let last_log_id = if index == 0 {
            None
        } else {
            Some(
                self.log
                    .log_id_at(index)
                    .map_err(snap_err)?
                    .ok_or_else(|| snap_err(format!("log entry {index} is not in the log")))?,
            )
        };
        Ok(SnapshotMeta {
            last_log_id,
            last_membership: self.membership_at(index),
            snapshot_id: format!(
                "{}-{}-{}",
                last_log_id.map_or(0, |l| l.leader_id.term),
                index,
                self.seq.fetch_add(1, Ordering::Relaxed)
            ),
        })
    }
}

/// openraft's state machine over a [`StateMachine`].
#[derive(Clone)]
pub struct StateMachineStore {
    shared: Arc<Shared>,
}

impl StateMachineStore {
    /// Opens the adapter for the group in `dir`, whose log is `log`.
    pub fn open(dir: &Path, sm: Arc<dyn StateMachine>, log: LogStore) -> crate::Result<Self> {
        let memberships: Vec<StoredMembership> =
            read_json(&dir.join(MEMBERSHIP_FILE))?.unwrap_or_default();
        let durable = sm.durable_index();
        let mut last_applied = if durable == 0 {
            None
        } else {
            log.log_id_at(durable)?
        };
        if last_applied.is_none() && durable > 0 {
            // The durable entry is gone from the log (purged past it): the last snapshot
            // meta names it.
            let meta: Option<SnapshotMeta<NodeId, Node>> =
                read_json(&dir.join(SNAPSHOT_META_FILE))?;
            last_applied = meta
                .and_then(|m| m.last_log_id)
                .filter(|l| l.index <= durable);
        }
        Ok(StateMachineStore {
            shared: Arc::new(Shared {
                dir: dir.to_path_buf(),
                sm,
                log,
                memberships: Mutex::new(memberships),
                last_applied: Mutex::new(last_applied),
                seq: AtomicU64::new(0),
            }),
        })
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId> {
        *self.shared.last_applied.lock()
    }
}

/// Builds snapshots (see the module docs).
pub struct SnapshotBuilder {
    shared: Arc<Shared>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let shared = self.shared.clone();
        blocking(|| shared.sm.flush()).map_err(snap_err)?;
        let index = shared.sm.durable_index();
        let meta = shared.meta_at(index)?;
        let b = serde_json::to_vec(&meta).map_err(snap_err)?;
        write_file_atomic(&shared.dir, SNAPSHOT_META_FILE, &b).map_err(snap_err)?;
        // The data is produced when the snapshot is sent; an empty placeholder here.
        let path = shared.dir.join("snapshot-built.tmp");
        let f = tokio::fs::File::create(&path).await.map_err(snap_err)?;
        let _ = tokio::fs::remove_file(&path).await;
        tracing::debug!(index, "built a snapshot (checkpoint)");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(f),
        })
    }
}

/// Writes files under `root` (relative paths) into one archive file.
fn pack(root: &Path, files: &[PathBuf], out: &Path) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    w.write_all(ARCHIVE_MAGIC)?;
    w.write_all(&(files.len() as u64).to_le_bytes())?;
    for rel in files {
        let name = rel.to_string_lossy();
        let mut f = std::fs::File::open(root.join(rel))?;
        let len = f.metadata()?.len();
        w.write_all(&(name.len() as u32).to_le_bytes())?;
        w.write_all(name.as_bytes())?;
        w.write_all(&len.to_le_bytes())?;
        let copied = std::io::copy(&mut (&mut f).take(len), &mut w)?;
        if copied != len {
            return Err(std::io::Error::other(format!(
                "{name} shrank while packing"
            )));
        }
    }
    w.flush()?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// Unpacks an archive written by [`pack`] into `root`.
fn unpack(archive: &Path, root: &Path) -> std::io::Result<()> {
    let bad = |d: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, d.to_string());
    let mut r = std::io::BufReader::new(std::fs::File::open(archive)?);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != ARCHIVE_MAGIC {
        return Err(bad("not a Cairn snapshot archive"));
    }
    let mut b8 = [0u8; 8];
    let mut b4 = [0u8; 4];
    r.read_exact(&mut b8)?;
    let n = u64::from_le_bytes(b8);
    for _ in 0..n {
        r.read_exact(&mut b4)?;
        let nlen = u32::from_le_bytes(b4) as usize;
        if nlen > 4096 {
            return Err(bad("file name too long"));
        }
        let mut name = vec![0u8; nlen];
        r.read_exact(&mut name)?;
        let name = String::from_utf8(name).map_err(|_| bad("file name is not UTF-8"))?;
        let rel = PathBuf::from(&name);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(bad("file name escapes the snapshot directory"));
        }
        r.read_exact(&mut b8)?;
        let len = u64::from_le_bytes(b8);
        let dst = root.join(&rel);
        if let Some(p) = dst.parent() {
            std::fs::create_dir_all(p)?;
        }
        let mut f = std::fs::File::create(&dst)?;
        let copied = std::io::copy(&mut (&mut r).take(len), &mut f)?;
        if copied != len {
            return Err(bad("archive truncated"));
        }
        f.sync_all()?;
    }
    Ok(())
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let la = *self.shared.last_applied.lock();
        let m = self.shared.membership_at(la.map_or(0, |l| l.index));
        Ok((la, m))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = crate::Entry> + Send,
        I::IntoIter: Send,
    {
        let shared = self.shared.clone();
        let entries: Vec<_> = entries.into_iter().collect();
        // A few small writes apply in microseconds, in memory: applying them here
        // spares the hand-off of this worker's runtime to another thread, which costs
        // more. Large batches and membership changes (a file write) go to a
        // blocking thread.
        let mut bytes = 0;
        let small = entries.iter().all(|e| match &e.payload {
            EntryPayload::Blank => true,
            EntryPayload::Normal(req) => {
                bytes += req.0.len();
                bytes <= INLINE_APPLY_BYTES
            }
            EntryPayload::Membership(_) => false,
        });
        let run = move || {
            let mut out = Vec::with_capacity(entries.len());
            for e in entries {
                let resp = match e.payload {
                    EntryPayload::Blank => Response::default(),
                    EntryPayload::Normal(req) => {
                        let r = shared.sm.apply(e.log_id.index, &req.0).map_err(|err| {
                            StorageError::from(StorageIOError::apply(
                                e.log_id,
                                openraft::AnyError::error(err),
                            ))
                        })?;
                        Response(r.into())
                    }
                    EntryPayload::Membership(m) => {
                        shared.record_membership(StoredMembership::new(Some(e.log_id), m))?;
                        Response::default()
                    }
                };
                *shared.last_applied.lock() = Some(e.log_id);
                out.push(resp);
            }
            Ok(out)
        };
        if small { run() } else { blocking(run) }
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let path = self.shared.dir.join("snapshot-incoming");
        let f = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .map_err(snap_err)?;
        Ok(Box::new(f))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        snapshot.sync_all().await.map_err(snap_err)?;
        drop(snapshot);
        let shared = self.shared.clone();
        let meta2 = meta.clone();
        blocking(move || -> Result<(), StorageError> {
            let archive = shared.dir.join("snapshot-incoming");
            let staging = shared.dir.join("snapshot-staging");
            let _ = std::fs::remove_dir_all(&staging);
            std::fs::create_dir_all(&staging).map_err(snap_err)?;
            unpack(&archive, &staging).map_err(snap_err)?;
            shared.sm.restore(&staging).map_err(snap_err)?;
            let _ = std::fs::remove_dir_all(&staging);
            let _ = std::fs::remove_file(&archive);
            *shared.memberships.lock() = Vec::new();
            shared.record_membership(meta2.last_membership.clone())?;
            let b = serde_json::to_vec(&meta2).map_err(snap_err)?;
            write_file_atomic(&shared.dir, SNAPSHOT_META_FILE, &b).map_err(snap_err)?;
            *shared.last_applied.lock() = meta2.last_log_id;
            SNAPSHOTS_INSTALLED.fetch_add(1, Ordering::Relaxed);
            tracing::info!(snapshot = %meta2.snapshot_id, "installed a tablet copy");
            Ok(())
        })
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let built: Option<SnapshotMeta<NodeId, Node>> =
            read_json(&self.shared.dir.join(SNAPSHOT_META_FILE)).map_err(snap_err)?;
        if built.is_none() {
            return Ok(None);
        }
        let shared = self.shared.clone();
        let (meta, path) = blocking(move || -> Result<_, StorageError> {
            let n = shared.seq.fetch_add(1, Ordering::Relaxed);
            let links = shared.dir.join(format!("snapshot-links-{n}"));
            let _ = std::fs::remove_dir_all(&links);
            std::fs::create_dir_all(&links).map_err(snap_err)?;
            let (files, index) = shared.sm.checkpoint(&links).map_err(snap_err)?;
            let meta = shared.meta_at(index)?;
            let path = shared.dir.join(format!("snapshot-out-{n}"));
            let r = pack(&links, &files, &path);
            let _ = std::fs::remove_dir_all(&links);
            r.map_err(snap_err)?;
            Ok((meta, path))
        })?;
        let f = tokio::fs::File::open(&path).await.map_err(snap_err)?;
        SNAPSHOTS_SENT.fetch_add(1, Ordering::Relaxed);
        // The open handle keeps the data readable; the name can go now.
        let _ = tokio::fs::remove_file(&path).await;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(f),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_round_trip_and_rejects_escapes() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::write(src.join("a/b/f1"), b"hello").unwrap();
        std::fs::write(src.join("top"), vec![7u8; 100_000]).unwrap();
        let files = vec![PathBuf::from("a/b/f1"), PathBuf::from("top")];
        let arc = d.path().join("arc");
        pack(&src, &files, &arc).unwrap();
        let dst = d.path().join("dst");
        std::fs::create_dir_all(&dst).unwrap();
        unpack(&arc, &dst).unwrap();
        assert_eq!(std::fs::read(dst.join("a/b/f1")).unwrap(), b"hello");
        assert_eq!(std::fs::read(dst.join("top")).unwrap().len(), 100_000);

        // Truncated archive.
        let bytes = std::fs::read(&arc).unwrap();
        std::fs::write(&arc, &bytes[..bytes.len() - 10]).unwrap();
        assert!(unpack(&arc, &d.path().join("dst2")).is_err());

        // A name with `..` is refused.
        let mut evil = Vec::new();
        evil.extend_from_slice(ARCHIVE_MAGIC);
        evil.extend_from_slice(&1u64.to_le_bytes());
        let name = b"../x";
        evil.extend_from_slice(&(name.len() as u32).to_le_bytes());
        evil.extend_from_slice(name);
        evil.extend_from_slice(&1u64.to_le_bytes());
        evil.push(1);
        std::fs::write(&arc, evil).unwrap();
        assert!(unpack(&arc, &d.path().join("dst3")).is_err());
    }
}
