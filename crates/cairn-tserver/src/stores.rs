//! Read-only stores hosted on this tablet server.
//!
//! A tablet server is one node of each read-only store's ring (the Voldemort
//! read-only paper, §4.2). For every store it holds a [`VersionedStore`] under
//! `<data>/stores/<store id>/`: complete versions, the `latest` link, and at most one
//! fetch in progress. The master drives pushes; this module does what it is told:
//!
//! - [`StoreHost::fetch`] starts (or resumes, or just reports) pulling a version's
//!   node folder on a background thread — throttled, every file verified — into
//!   `version-N.fetch/`. Calling it again for the same version is harmless (a failed
//!   fetch is reported, not restarted, until it is aborted), which is
//!   what makes a push survive a restarted server or a new leader master.
//! - [`StoreHost::swap`] installs a finished fetch (checking every checksum once more)
//!   and makes it live; swapping to the live version does nothing. A rollback is a
//!   swap to an older retained version, so every change of the live version carries
//!   the master's term and a stale one is refused.
//! - [`StoreHost::get`] answers lookups from the live version; one call is answered
//!   entirely by one version.
//!
//! Every store's name and retention are kept in `store.json` beside its versions, so a
//! restarted server opens its stores again before the master says anything.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cairn_readonly::fetch::{fetch_node, is_fetched, source_location};
use cairn_readonly::{
    FetchProgress, FetchSource, FetchTarget, ReadOnlyError, RebalancePlan, SwapOrder, SwapReport,
    VersionedStore,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TserverError};

/// The file naming a store folder's store.
const STORE_FILE: &str = "store.json";

/// What `store.json` records.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoreInfo {
    name: String,
    retained: u32,
}

/// A fetch running or finished on this server.
struct FetchJob {
    version: u64,
    progress: Arc<FetchProgress>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FetchJob {
    fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Cancels the fetch and waits for its thread.
    fn stop(&mut self) {
        self.progress.cancel.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One store on this server.
pub struct HostedStore {
    /// The store's id.
    pub id: String,
    info: StoreInfo,
    /// Its versions on disk and the live one.
    pub versions: VersionedStore,
    fetch: Mutex<Option<FetchJob>>,
}

impl HostedStore {
    /// The store's name (for messages).
    pub fn name(&self) -> &str {
        &self.info.name
    }
}

/// What a status request answers (see `StoreStatusResponse`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStatus {
    /// The live version.
    pub live: Option<u64>,
    /// Complete versions on disk.
    pub versions: Vec<u64>,
    /// The fetch in progress or last run, if any.
    pub fetch_version: Option<u64>,
    /// Its bytes copied.
    pub bytes_done: u64,
    /// Its bytes in all.
    pub bytes_total: u64,
    /// Whether the fetched version is complete and verified (or already installed).
    pub fetched: bool,
    /// Why the fetch failed, if it did.
    pub fetch_error: Option<String>,
}

/// What a fetch request asks for.
#[derive(Clone, Debug)]
pub struct FetchRequest {
    /// The store's id.
    pub store_id: String,
    /// Its name (checked against the build's `.metadata`).
    pub store_name: String,
    /// The version to fetch.
    pub version: u64,
    /// This server's node folder of the build.
    pub source: String,
    /// This server's node on the ring.
    pub node: u32,
    /// Versions to keep.
    pub retained: u32,
    /// Bytes per second (0: unlimited).
    pub throttle_bytes_per_sec: u64,
    /// For a rebalance: what to assemble (and `source` is empty).
    pub rebalance: Option<RebalancePlan>,
}

/// Opens another server's installed version of a store as a fetch source:
/// `(store id, address, version)`. A rebalance copies chunk files through it.
pub type PeerConnect =
    Arc<dyn Fn(&str, &str, u64) -> cairn_readonly::Result<Box<dyn FetchSource>> + Send + Sync>;

/// The read-only stores of this server. See the module docs.
pub struct StoreHost {
    root: PathBuf,
    stores: Mutex<HashMap<String, Arc<HostedStore>>>,
    peers: Mutex<Option<PeerConnect>>,
}

impl StoreHost {
    /// Opens every store under `<data_dir>/stores`.
    pub fn open(data_dir: &Path) -> Result<StoreHost> {
        let root = data_dir.join("stores");
        std::fs::create_dir_all(&root).map_err(|e| TserverError::io(&root, e))?;
        let mut stores = HashMap::new();
        for entry in std::fs::read_dir(&root).map_err(|e| TserverError::io(&root, e))? {
            let entry = entry.map_err(|e| TserverError::io(&root, e))?;
            let dir = entry.path();
            let info_path = dir.join(STORE_FILE);
            let Ok(bytes) = std::fs::read(&info_path) else {
                continue; // not a store folder (or one whose creation never finished)
            };
            let info: StoreInfo = serde_json::from_slice(&bytes).map_err(|e| {
                TserverError::Internal(format!("{} is not valid: {e}", info_path.display()))
            })?;
            let id = entry.file_name().to_string_lossy().to_string();
            let versions = VersionedStore::open(&dir, info.retained as usize)?;
            tracing::info!(store = %info.name, live = ?versions.live().map(|(v, _)| v),
                "opened read-only store");
            stores.insert(
                id.clone(),
                Arc::new(HostedStore {
                    id,
                    info,
                    versions,
                    fetch: Mutex::new(None),
                }),
            );
        }
        Ok(StoreHost {
            root,
            stores: Mutex::new(stores),
            peers: Mutex::new(None),
        })
    }

    /// Sets how this server reaches other servers' files for a rebalance.
    pub fn set_peers(&self, connect: PeerConnect) {
        *self.peers.lock() = Some(connect);
    }

    /// The store `id`, if this server hosts it.
    pub fn store(&self, id: &str) -> Result<Arc<HostedStore>> {
        self.stores
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| TserverError::StoreNotFound(id.to_string()))
    }

    /// Ids of the stores hosted here.
    pub fn ids(&self) -> Vec<String> {
        self.stores.lock().keys().cloned().collect()
    }

    /// The store `id`, created (folder and `store.json`) if new.
    fn store_or_create(&self, id: &str, name: &str, retained: u32) -> Result<Arc<HostedStore>> {
        if id.is_empty() || id.contains(['/', '\\', '.']) {
            return Err(TserverError::InvalidArgument(format!(
                "'{id}' is not a store id"
            )));
        }
        let mut stores = self.stores.lock();
        if let Some(s) = stores.get(id) {
            return Ok(s.clone());
        }
        let dir = self.root.join(id);
        let info = StoreInfo {
            name: name.to_string(),
            retained: retained.max(1),
        };
        std::fs::create_dir_all(&dir).map_err(|e| TserverError::io(&dir, e))?;
        let bytes = serde_json::to_vec(&info).map_err(|e| TserverError::Internal(e.to_string()))?;
        cairn_tablet::metadata::write_atomic(&dir, STORE_FILE, &bytes)?;
        let versions = VersionedStore::open(&dir, info.retained as usize)?;
        let s = Arc::new(HostedStore {
            id: id.to_string(),
            info,
            versions,
            fetch: Mutex::new(None),
        });
        stores.insert(id.to_string(), s.clone());
        Ok(s)
    }

    /// Starts, resumes or reports the fetch of `req.version`. See the module docs.
    pub fn fetch(&self, req: FetchRequest) -> Result<StoreStatus> {
        let store = self.store_or_create(&req.store_id, &req.store_name, req.retained)?;
        if req.version == 0 {
            return Err(TserverError::InvalidArgument(
                "versions are numbered from 1".into(),
            ));
        }
        let source = match &req.rebalance {
            Some(_) => None,
            None => Some(source_location(&req.source)?),
        };
        let peers = match &req.rebalance {
            Some(_) => Some(self.peers.lock().clone().ok_or_else(|| {
                TserverError::Internal("this server cannot reach its peers' files".into())
            })?),
            None => None,
        };
        {
            let mut job = store.fetch.lock();
            let installed = store.versions.versions()?.contains(&req.version);
            let done = installed || is_fetched(&store.versions.fetch_dir(req.version));
            // A job for this version is kept whether it runs, finished or failed: a
            // failure is reported to the master's polls until the master aborts the
            // fetch (which fails the push), instead of being retried behind its back.
            let same = job.as_ref().is_some_and(|j| j.version == req.version);
            if done && !same {
                // Finished before (this server restarted since): report it as such.
                if let Some(mut old) = job.take() {
                    old.stop();
                }
                let progress = Arc::new(FetchProgress::default());
                progress.finished.store(true, Ordering::Release);
                *job = Some(FetchJob {
                    version: req.version,
                    progress,
                    thread: None,
                });
            } else if !done && !same {
                if let Some(mut old) = job.take() {
                    old.stop();
                }
                let progress = Arc::new(FetchProgress::default());
                let dest = store.versions.fetch_dir(req.version);
                let (p, name, node, rate) = (
                    progress.clone(),
                    req.store_name.clone(),
                    req.node,
                    req.throttle_bytes_per_sec,
                );
                let version = req.version;
                let plan = req.rebalance.clone();
                let id = req.store_id.clone();
                let live = store.versions.live().map(|(_, v)| v);
                let thread = std::thread::Builder::new()
                    .name(format!("fetch-{}", req.store_name))
                    .spawn(move || {
                        let out = match (plan, peers, source) {
                            (Some(plan), Some(peers), _) => {
                                let connect = |addr: &str, v: u64| peers(&id, addr, v);
                                cairn_readonly::rebalance::assemble(
                                    &plan,
                                    node,
                                    live.as_deref(),
                                    &dest,
                                    &connect,
                                    rate,
                                    &p,
                                )
                            }
                            (_, _, Some(source)) => source.source().and_then(|s| {
                                let target = FetchTarget { store: &name, node };
                                fetch_node(&*s, &dest, &target, rate, &p)
                            }),
                            _ => Err(cairn_readonly::ReadOnlyError::InvalidInput(
                                "a fetch needs a source or a rebalance plan".into(),
                            )),
                        };
                        match &out {
                            Ok(m) => tracing::info!(store = %name, version, rows = m.rows,
                                "fetched read-only store version"),
                            Err(e) => tracing::warn!(store = %name, version, error = %e,
                                "fetching read-only store version failed"),
                        }
                        p.finish(&out);
                    })
                    .map_err(|e| TserverError::Internal(format!("cannot start a fetch: {e}")))?;
                *job = Some(FetchJob {
                    version: req.version,
                    progress,
                    thread: Some(thread),
                });
            }
        }
        self.status(&req.store_id)
    }

    /// Cancels the fetch of `version` of store `id` and deletes what it copied.
    pub fn abort_fetch(&self, id: &str, version: u64) -> Result<()> {
        let Ok(store) = self.store(id) else {
            return Ok(());
        };
        let mut job = store.fetch.lock();
        if job.as_ref().is_some_and(|j| j.version == version)
            && let Some(mut j) = job.take()
        {
            j.stop();
        }
        let dir = store.versions.fetch_dir(version);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(TserverError::io(dir, e)),
        }
    }

    /// Store `id`'s versions and fetch.
    pub fn status(&self, id: &str) -> Result<StoreStatus> {
        let store = self.store(id)?;
        let versions = store.versions.versions()?;
        let mut status = StoreStatus {
            live: store.versions.live().map(|(v, _)| v),
            versions,
            ..Default::default()
        };
        if let Some(j) = store.fetch.lock().as_ref() {
            status.fetch_version = Some(j.version);
            status.bytes_done = j.progress.bytes_done.load(Ordering::Relaxed);
            status.bytes_total = j.progress.bytes_total.load(Ordering::Relaxed);
            status.fetched =
                status.versions.contains(&j.version) || j.progress.finished.load(Ordering::Acquire);
            status.fetch_error = if j.running() {
                None
            } else {
                j.progress.failed()
            };
        }
        Ok(status)
    }

    /// Makes `version` live, installing its finished fetch first if needed, unless
    /// `order` is stale (`VersionedStore::swap_ordered`). Blocking (checksums every
    /// file of a new version): call off the async runtime.
    pub fn swap(&self, id: &str, version: u64, order: SwapOrder) -> Result<SwapReport> {
        let store = self.store(id)?;
        if let Some((live, _)) = store.versions.live()
            && live == version
        {
            return Ok(SwapReport {
                previous: Some(live),
                current: live,
                elapsed: std::time::Duration::ZERO,
            });
        }
        if !store.versions.versions()?.contains(&version) {
            let fetched = store.versions.fetch_dir(version);
            if store
                .fetch
                .lock()
                .as_ref()
                .is_some_and(|j| j.version == version && j.running())
                || !is_fetched(&fetched)
            {
                return Err(TserverError::ReadOnly(ReadOnlyError::InvalidInput(
                    format!(
                        "version {version} of store '{}' is not fetched on this server",
                        store.info.name
                    ),
                )));
            }
            let meta = store.versions.install(version)?;
            if meta.store != store.info.name {
                return Err(TserverError::InvalidArgument(format!(
                    "version {version} holds store '{}', not '{}'",
                    meta.store, store.info.name
                )));
            }
        }
        let report = store
            .versions
            .swap_ordered(version, order)
            .inspect_err(|e| {
                if matches!(e, ReadOnlyError::StaleSwap(_)) {
                    tracing::warn!(store = %store.info.name, error = %e,
                        "refused a stale swap order");
                }
            })?;
        tracing::info!(store = %store.info.name, version, previous = ?report.previous,
            micros = report.elapsed.as_micros() as u64, "swapped read-only store version");
        Ok(report)
    }

    /// Forgets store `id` and deletes its files. Blocking.
    pub fn drop_store(&self, id: &str) -> Result<()> {
        let Some(store) = self.stores.lock().remove(id) else {
            return Ok(());
        };
        if let Some(mut j) = store.fetch.lock().take() {
            j.stop();
        }
        let dir = self.root.join(&store.id);
        drop(store);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(TserverError::io(dir, e)),
        }
    }

    /// Looks `keys` (encoded by the store's schema) up in store `id`'s live version:
    /// `(version, values)`. Blocking (page faults on the mapped files): call off the
    /// async runtime.
    pub fn get(&self, id: &str, keys: &[Vec<u8>]) -> Result<(u64, Vec<Option<Vec<u8>>>)> {
        let store = self.store(id)?;
        let Some((version, files)) = store.versions.live() else {
            return Err(TserverError::Unavailable(format!(
                "store '{}' has no live version on this server yet",
                store.info.name
            )));
        };
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if !files.holds(k) {
                return Err(TserverError::InvalidArgument(format!(
                    "a key of store '{}' does not belong to this server's partitions; \
                     refresh the store's ring",
                    store.info.name
                )));
            }
            out.push(files.get(k)?.map(<[u8]>::to_vec));
        }
        Ok((version, out))
    }
}

/// Bytes a `read_file` call returns at most.
const MAX_READ_BYTES: u64 = 8 << 20;

impl StoreHost {
    /// Up to `max_bytes` of file `name` of installed version `version` of store `id`,
    /// from `offset`: `(bytes, the file's size)`. Blocking.
    pub fn read_file(
        &self,
        id: &str,
        version: u64,
        name: &str,
        offset: u64,
        max_bytes: u64,
    ) -> Result<(Vec<u8>, u64)> {
        use std::io::{Read, Seek, SeekFrom};
        let store = self.store(id)?;
        if name.is_empty() || name.contains(['/', '\\']) || name == ".." || name == "." {
            return Err(TserverError::InvalidArgument(format!(
                "'{name}' is not a file of a store version"
            )));
        }
        if !store.versions.versions()?.contains(&version) {
            return Err(TserverError::InvalidArgument(format!(
                "store '{}' has no version {version} on this server",
                store.info.name
            )));
        }
        let path = store.versions.version_path(version).join(name);
        let mut f = std::fs::File::open(&path).map_err(|e| TserverError::io(&path, e))?;
        let len = f.metadata().map_err(|e| TserverError::io(&path, e))?.len();
        let want = match max_bytes {
            0 => 1 << 20,
            n => n.min(MAX_READ_BYTES),
        }
        .min(len.saturating_sub(offset));
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| TserverError::io(&path, e))?;
        let mut buf = vec![0u8; want as usize];
        f.read_exact(&mut buf)
            .map_err(|e| TserverError::io(&path, e))?;
        Ok((buf, len))
    }
}

/// A page of a partition scan: the version, the tuples, where to continue.
pub type ScanPage = (
    u64,
    Vec<(Vec<u8>, Vec<u8>)>,
    Option<cairn_readonly::ScanCursor>,
);

impl StoreHost {
    /// A page of primary partition `partition` of store `id`'s live version, which
    /// must be `version` unless that is 0. Blocking.
    pub fn scan(
        &self,
        id: &str,
        partition: u32,
        from: cairn_readonly::ScanCursor,
        version: u64,
        max_bytes: usize,
    ) -> Result<ScanPage> {
        let store = self.store(id)?;
        let Some((live, files)) = store.versions.live() else {
            return Err(TserverError::Unavailable(format!(
                "store '{}' has no live version on this server yet",
                store.info.name
            )));
        };
        if version != 0 && version != live {
            return Err(TserverError::ReadOnly(ReadOnlyError::InvalidInput(
                format!(
                    "store '{}' changed from version {version} to {live} during the scan; run \
                 it again",
                    store.info.name
                ),
            )));
        }
        let (tuples, next) = files.scan(partition, from, max_bytes)?;
        Ok((live, tuples, next))
    }
}

impl Drop for StoreHost {
    fn drop(&mut self) {
        for s in self.stores.lock().values() {
            if let Some(j) = s.fetch.lock().as_mut() {
                j.progress.cancel.store(true, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
