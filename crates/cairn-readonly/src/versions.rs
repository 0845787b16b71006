//! A store's versions on one server: install, swap, roll back, retain.
//!
//! The layout follows the Voldemort read-only paper (§4.2):
//!
//! ```text
//! <store dir>/
//!   version-7/          a complete, verified node folder
//!   version-8/
//!   version-9.fetch/    a version being fetched (not servable)
//!   latest -> version-8 the live version
//!   epoch               the highest epoch that ordered a swap (see below)
//! ```
//!
//! - [`VersionedStore::install`] turns a fetched folder into `version-N` after checking
//!   every file's checksum: corruption is caught here, before anything is served.
//! - [`VersionedStore::swap`] opens `version-N` (mapping its files, checking sizes
//!   only — the bytes were verified at install and are never modified), replaces the
//!   `latest` symlink atomically (a new link renamed over the old one) and then the
//!   in-memory pointer. Its cost depends on the number of files, not their size.
//!   Lookups in flight keep the version they started with; the old files are unmapped
//!   when the last of them finishes.
//! - [`VersionedStore::rollback`] is a swap to an earlier version still on disk.
//! - [`VersionedStore::swap_ordered`] is a swap that can be refused: a [`SwapOrder`]
//!   names the epoch of whoever ordered it (the leader master's Raft term) and,
//!   optionally, the version it expects to be live. An order from an epoch older than
//!   one already obeyed is refused, so a swap that a deposed leader sent, held up in
//!   the network or in this server, cannot undo what its successor did after it. The
//!   highest epoch obeyed is kept in the `epoch` file, so a restart does not forget
//!   it.
//! - After a swap, versions beyond the `retained` newest are deleted (never the live
//!   one), on a background thread so the swap does not wait for the file system.
//!
//! On open, `latest` decides the live version; a half-made link from a crash during a
//! swap is removed, so the store comes back either on the old version or the new one.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::{ReadOnlyError, Result};
use crate::format::NodeMetadata;
use crate::reader::{StoreVersion, Verify};

/// The live-version link.
const LATEST: &str = "latest";
/// A link being made, renamed over `latest` to swap.
const LATEST_NEW: &str = "latest.new";
/// The highest epoch that ordered a swap.
const EPOCH: &str = "epoch";
/// The epoch file being written, renamed over `epoch`.
const EPOCH_NEW: &str = "epoch.new";
/// Suffix of a folder whose fetch has not completed.
const FETCH_SUFFIX: &str = ".fetch";

/// The folder name of version `v`.
pub fn version_dir_name(v: u64) -> String {
    format!("version-{v}")
}

fn parse_version(name: &str) -> Option<u64> {
    name.strip_prefix("version-")?.parse().ok()
}

/// What a swap or rollback did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapReport {
    /// The version live before (if any).
    pub previous: Option<u64>,
    /// The version live now.
    pub current: u64,
    /// How long the swap took (open, link, pointer), excluding pruning.
    pub elapsed: Duration,
}

/// Who orders a swap and on what condition (module docs): lets a server refuse an
/// order that arrives after a newer one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapOrder {
    /// The orderer's epoch: the leader master's Raft term. An order from an epoch
    /// below the highest one obeyed is refused; 0 orders without an epoch (local
    /// tools) and is never refused for it.
    pub epoch: u64,
    /// Swap only if this version is live now (0: none is); `None` swaps whatever is
    /// live.
    pub if_live: Option<u64>,
}

/// One store's folder on a server. See the module docs.
#[derive(Debug)]
pub struct VersionedStore {
    dir: PathBuf,
    retained: usize,
    live: RwLock<Option<(u64, Arc<StoreVersion>)>>,
    /// Serializes install / swap / rollback / prune, and holds the highest epoch that
    /// ordered a swap (the `epoch` file's content).
    admin: Mutex<u64>,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> ReadOnlyError {
    move |e| ReadOnlyError::io(context, e)
}

/// fsyncs a folder, so renames and links in it survive a crash.
fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io(format!("cannot sync folder {dir:?}")))
}

impl VersionedStore {
    /// Opens (creating if needed) a store folder keeping `retained` versions (at
    /// least 1), and the version `latest` points at, if any.
    pub fn open(dir: &Path, retained: usize) -> Result<VersionedStore> {
        fs::create_dir_all(dir).map_err(io(format!("cannot create {dir:?}")))?;
        let _ = fs::remove_file(dir.join(LATEST_NEW));
        let live = match fs::read_link(dir.join(LATEST)) {
            Ok(target) => {
                let name = target.to_string_lossy().to_string();
                let v = parse_version(&name).ok_or_else(|| {
                    ReadOnlyError::corrupt(dir.join(LATEST), format!("points at {name}"))
                })?;
                let version = StoreVersion::open(&dir.join(&name), Verify::Structure)?;
                Some((v, Arc::new(version)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ReadOnlyError::io(format!("cannot read {dir:?}/latest"), e)),
        };
        let _ = fs::remove_file(dir.join(EPOCH_NEW));
        let epoch = match fs::read_to_string(dir.join(EPOCH)) {
            Ok(text) => text.trim().parse::<u64>().map_err(|_| {
                ReadOnlyError::corrupt(dir.join(EPOCH), format!("holds {text:?}, not a number"))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(ReadOnlyError::io(format!("cannot read {dir:?}/epoch"), e)),
        };
        Ok(VersionedStore {
            dir: dir.to_path_buf(),
            retained: retained.max(1),
            live: RwLock::new(live),
            admin: Mutex::new(epoch),
        })
    }

    /// The live version and its number.
    pub fn live(&self) -> Option<(u64, Arc<StoreVersion>)> {
        self.live.read().ok().and_then(|l| l.clone())
    }

    /// Complete versions on disk, ascending.
    pub fn versions(&self) -> Result<Vec<u64>> {
        let mut out: Vec<u64> = fs::read_dir(&self.dir)
            .map_err(io(format!("cannot list {:?}", self.dir)))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| parse_version(&e.file_name().to_string_lossy()))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The folder of installed version `v`.
    pub fn version_path(&self, v: u64) -> PathBuf {
        self.dir.join(version_dir_name(v))
    }

    /// Where version `v` is fetched to before [`install`](Self::install).
    pub fn fetch_dir(&self, v: u64) -> PathBuf {
        self.dir
            .join(format!("{}{FETCH_SUFFIX}", version_dir_name(v)))
    }

    /// The number a new version gets by default: one more than any on disk.
    pub fn next_version(&self) -> Result<u64> {
        Ok(self.versions()?.last().map_or(1, |v| v + 1))
    }

    fn admin(&self) -> Result<std::sync::MutexGuard<'_, u64>> {
        self.admin
            .lock()
            .map_err(|_| ReadOnlyError::InvalidInput("an earlier store operation panicked".into()))
    }

    /// Verifies the fetched folder of version `v` (every checksum) and makes it
    /// version `v`. Returns its metadata so the caller can check it is the store
    /// and node it expects. The version is not live until [`swap`](Self::swap).
    pub fn install(&self, v: u64) -> Result<NodeMetadata> {
        let _g = self.admin()?;
        let from = self.fetch_dir(v);
        let to = self.dir.join(version_dir_name(v));
        if to.exists() {
            return Err(ReadOnlyError::InvalidInput(format!(
                "version {v} already exists: push with a higher version number"
            )));
        }
        let meta = StoreVersion::open(&from, Verify::Checksums)?
            .metadata()
            .clone();
        fs::rename(&from, &to).map_err(io(format!("cannot rename {from:?} to {to:?}")))?;
        sync_dir(&self.dir)?;
        Ok(meta)
    }

    /// Makes version `v` live. See the module docs.
    pub fn swap(&self, v: u64) -> Result<SwapReport> {
        self.swap_ordered(v, SwapOrder::default())
    }

    /// Makes version `v` live if `order` may still be obeyed (module docs): its epoch
    /// is not below the highest one obeyed, and `if_live`, if given, is live. A
    /// refused order is [`ReadOnlyError::StaleSwap`] and changes nothing.
    pub fn swap_ordered(&self, v: u64, order: SwapOrder) -> Result<SwapReport> {
        let mut epoch = self.admin()?;
        if order.epoch > 0 && order.epoch < *epoch {
            return Err(ReadOnlyError::StaleSwap(format!(
                "the order to swap to version {v} comes from epoch {}, but epoch {} has \
                 ordered swaps since",
                order.epoch, *epoch
            )));
        }
        let live = self.live().map_or(0, |(l, _)| l);
        if let Some(expected) = order.if_live
            && expected != live
        {
            return Err(ReadOnlyError::StaleSwap(format!(
                "the order to swap to version {v} expected version {expected} live, but \
                 version {live} is"
            )));
        }
        if order.epoch > *epoch {
            self.write_epoch(order.epoch)?;
            *epoch = order.epoch;
        }
        let report = self.swap_locked(v)?;
        self.prune_in_background(v);
        Ok(report)
    }

    /// Records `epoch` durably (a new file renamed over `epoch`).
    /// REQUIRES: the admin lock.
    fn write_epoch(&self, epoch: u64) -> Result<()> {
        let new = self.dir.join(EPOCH_NEW);
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&new)?;
            std::io::Write::write_all(&mut f, epoch.to_string().as_bytes())?;
            f.sync_all()
        };
        write().map_err(io(format!("cannot write {new:?}")))?;
        fs::rename(&new, self.dir.join(EPOCH))
            .map_err(io(format!("cannot replace {:?}/epoch", self.dir)))?;
        sync_dir(&self.dir)
    }

    /// REQUIRES: the admin lock.
    fn swap_locked(&self, v: u64) -> Result<SwapReport> {
        let started = Instant::now();
        let name = version_dir_name(v);
        let version = Arc::new(StoreVersion::open(&self.dir.join(&name), Verify::Sizes)?);
        let new_link = self.dir.join(LATEST_NEW);
        let _ = fs::remove_file(&new_link);
        std::os::unix::fs::symlink(&name, &new_link)
            .map_err(io(format!("cannot create {new_link:?}")))?;
        fs::rename(&new_link, self.dir.join(LATEST))
            .map_err(io(format!("cannot replace {:?}/latest", self.dir)))?;
        sync_dir(&self.dir)?;
        let mut live = self
            .live
            .write()
            .map_err(|_| ReadOnlyError::InvalidInput("the live-version lock is poisoned".into()))?;
        let previous = live.as_ref().map(|(p, _)| *p);
        *live = Some((v, version));
        drop(live);
        Ok(SwapReport {
            previous,
            current: v,
            elapsed: started.elapsed(),
        })
    }

    /// Makes an earlier version live again: `to`, or the newest one older than the
    /// live version.
    pub fn rollback(&self, to: Option<u64>) -> Result<SwapReport> {
        let _g = self.admin()?;
        let current = self.live().map(|(v, _)| v);
        let versions = self.versions()?;
        let target = match to {
            Some(t) if versions.contains(&t) => t,
            Some(t) => {
                return Err(ReadOnlyError::InvalidInput(format!(
                    "version {t} is not on this server (retained: {versions:?})"
                )));
            }
            None => *versions
                .iter()
                .rev()
                .find(|&&x| current.is_none_or(|c| x < c))
                .ok_or_else(|| {
                    ReadOnlyError::InvalidInput(format!(
                        "no version older than {current:?} is retained to roll back to"
                    ))
                })?,
        };
        self.swap_locked(target)
    }

    /// Deletes versions beyond the `retained` newest (never `live`) and leftover
    /// fetch folders of versions not newer than `live`. Returns what was deleted.
    /// REQUIRES: the admin lock, or no concurrent install.
    fn prune(dir: &Path, retained: usize, live: u64) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut versions = Vec::new();
        let mut stale_fetches = Vec::new();
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(stem) = name.strip_suffix(FETCH_SUFFIX) {
                if parse_version(stem).is_some_and(|v| v <= live) {
                    stale_fetches.push(e.path());
                }
            } else if let Some(v) = parse_version(&name) {
                versions.push(v);
            }
        }
        versions.sort_unstable();
        let keep_from = versions.len().saturating_sub(retained);
        let mut removed = Vec::new();
        for &v in &versions[..keep_from] {
            if v != live {
                let p = dir.join(version_dir_name(v));
                if fs::remove_dir_all(&p).is_ok() {
                    removed.push(p);
                }
            }
        }
        for p in stale_fetches {
            if fs::remove_dir_all(&p).is_ok() {
                removed.push(p);
            }
        }
        removed
    }

    fn prune_in_background(&self, live: u64) {
        let (dir, retained) = (self.dir.clone(), self.retained);
        std::thread::spawn(move || {
            let removed = Self::prune(&dir, retained, live);
            if !removed.is_empty() {
                tracing::info!(
                    ?removed,
                    "deleted read-only store versions beyond retention"
                );
            }
        });
    }

    /// Runs pruning now (tests and tools that want it finished).
    pub fn prune_now(&self) -> Result<Vec<PathBuf>> {
        let _g = self.admin()?;
        Ok(match self.live() {
            Some((v, _)) => Self::prune(&self.dir, self.retained, v),
            None => Vec::new(),
        })
    }
}
