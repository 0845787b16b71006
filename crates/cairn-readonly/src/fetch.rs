//! Fetching a node's folder of a built version to the server that will serve it.
//!
//! Voldemort's servers *pull* their files from where the batch job left them (the
//! Voldemort read-only paper, §4.2.2), throttled so the copy does not hurt live
//! lookups, and only then swap. [`fetch_node`] is that pull for one node folder:
//!
//! - it reads the source's `.metadata` first, checks it is the store and node the
//!   server expects, and learns every file's size and MD5 from it;
//! - it copies each file to `<name>.part` in the destination, at most
//!   `throttle_bytes_per_sec` (a token bucket over the whole fetch), then checks the
//!   file's size and MD5 and renames it to its name — so a file without `.part` in the
//!   destination is complete and verified;
//! - it is *resumable*: called again after a crash or a kill, it skips the complete
//!   files and continues a `.part` file from its length;
//! - `.metadata` is written last, so a folder with one is a finished fetch (which
//!   [`crate::VersionedStore::install`] verifies once more before it can be served).
//!
//! Sources are [`FetchSource`]s: a folder on a file system every server can read
//! ([`DirSource`]), an object store (S3 or a web server, [`crate::remote`]), or
//! another tablet server (a rebalance).

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};

use crate::error::{ReadOnlyError, Result};
use crate::format::{FileEntry, METADATA_FILE, NodeMetadata, to_hex};
use crate::layout::NodeId;
use crate::remote::Location;

/// Suffix of a file being fetched.
const PART_SUFFIX: &str = ".part";
/// Bytes copied between throttle checks and progress updates.
const COPY_BLOCK: usize = 1 << 20;

/// Where a push fetches from: a [`Location`] whose plain paths are absolute (the
/// tablet servers resolve them, not the shell that started the push). Makes no
/// request.
pub fn source_location(url: &str) -> Result<Location> {
    let location = Location::parse(url)?;
    if let Location::Local(p) = &location
        && !p.is_absolute()
    {
        return Err(ReadOnlyError::InvalidInput(format!(
            "{url}: give an absolute path, since the tablet servers resolve it, not this shell"
        )));
    }
    Ok(location)
}

/// How far a fetch has got; shared with whoever reports it.
#[derive(Debug, Default)]
pub struct FetchProgress {
    /// Bytes of the folder's files now in the destination (complete or `.part`).
    pub bytes_done: AtomicU64,
    /// Bytes of all the folder's files (known once `.metadata` is read).
    pub bytes_total: AtomicU64,
    /// Files complete.
    pub files_done: AtomicU64,
    /// Files in the folder.
    pub files_total: AtomicU64,
    /// Set to stop the fetch at the next block.
    pub cancel: AtomicBool,
    /// The first error, once it failed.
    pub error: Mutex<Option<String>>,
    /// Whether it finished with every file verified.
    pub finished: AtomicBool,
}

impl FetchProgress {
    /// Records the outcome of a fetch that ran with this progress.
    pub fn finish(&self, outcome: &Result<NodeMetadata>) {
        match outcome {
            Ok(_) => self.finished.store(true, Ordering::Release),
            Err(e) => {
                if let Ok(mut slot) = self.error.lock() {
                    *slot = Some(e.to_string());
                }
            }
        }
    }

    /// The error the fetch failed with, if it did.
    pub fn failed(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }
}

/// What the destination must be: the store name and ring node in `.metadata`.
#[derive(Clone, Debug)]
pub struct FetchTarget<'a> {
    /// The store's name.
    pub store: &'a str,
    /// The node this server is on the store's ring.
    pub node: NodeId,
}

/// Limits the rate of a copy to `rate` bytes per second.
struct Throttle {
    rate: u64,
    started: Instant,
    copied: u64,
}

impl Throttle {
    fn new(rate: u64) -> Self {
        Throttle {
            rate,
            started: Instant::now(),
            copied: 0,
        }
    }

    /// Accounts `n` more bytes, sleeping as long as the copy is ahead of the rate.
    fn account(&mut self, n: u64) {
        self.copied += n;
        if self.rate == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.copied as f64 / self.rate as f64);
        let elapsed = self.started.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> ReadOnlyError {
    move |e| ReadOnlyError::io(context, e)
}

/// MD5 of a file, lower-case hex.
fn file_md5(path: &Path) -> Result<String> {
    let mut f = fs::File::open(path).map_err(io(format!("cannot open {path:?}")))?;
    let mut h = Md5::new();
    let mut buf = vec![0u8; COPY_BLOCK];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io(format!("cannot read {path:?}")))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(to_hex(&h.finalize()))
}

/// Where a fetch reads a node folder's files from: a folder every server can read
/// ([`DirSource`]), or another tablet server (a rebalance moves chunk files between
/// servers).
pub trait FetchSource {
    /// Reads file `name` of the folder from byte `offset` on.
    fn open(&self, name: &str, offset: u64) -> Result<Box<dyn Read + '_>>;
    /// Names file `name` of the folder in messages.
    fn describe(&self, name: &str) -> String;
}

/// A node folder on a file system this server can read.
pub struct DirSource(pub PathBuf);

impl FetchSource for DirSource {
    fn open(&self, name: &str, offset: u64) -> Result<Box<dyn Read + '_>> {
        let path = self.0.join(name);
        let mut f = fs::File::open(&path).map_err(io(format!("cannot open {path:?}")))?;
        f.seek(SeekFrom::Start(offset))
            .map_err(io(format!("cannot seek in {path:?}")))?;
        Ok(Box::new(f))
    }

    fn describe(&self, name: &str) -> String {
        format!("{:?}", self.0.join(name))
    }
}

/// Reads a node folder's `.metadata` from `source` and checks its node checksum.
pub fn read_metadata(source: &dyn FetchSource) -> Result<(NodeMetadata, Vec<u8>)> {
    let mut bytes = Vec::new();
    source
        .open(METADATA_FILE, 0)?
        .read_to_end(&mut bytes)
        .map_err(io(format!(
            "cannot read {}",
            source.describe(METADATA_FILE)
        )))?;
    let what = std::path::PathBuf::from(source.describe(METADATA_FILE));
    let meta: NodeMetadata = serde_json::from_slice(&bytes)
        .map_err(|e| ReadOnlyError::corrupt(&what, format!("not valid metadata: {e}")))?;
    if NodeMetadata::checksum_of(&meta.files)? != meta.checksum {
        return Err(ReadOnlyError::corrupt(
            &what,
            "the node checksum does not match the files' checksums",
        ));
    }
    Ok((meta, bytes))
}

/// Reads and checks a node folder's `.metadata` from `source`: it must be node
/// `target.node` of store `target.store`.
pub fn read_source_metadata(
    source: &dyn FetchSource,
    target: &FetchTarget<'_>,
) -> Result<(NodeMetadata, Vec<u8>)> {
    let what = source.describe(METADATA_FILE);
    let (meta, bytes) = read_metadata(source).map_err(|e| match e {
        ReadOnlyError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            ReadOnlyError::InvalidInput(format!(
                "{what} does not exist (is this the build's node-{} folder?)",
                target.node
            ))
        }
        e => e,
    })?;
    if meta.store != target.store || meta.node != target.node {
        return Err(ReadOnlyError::InvalidInput(format!(
            "{what} is node {} of store '{}', but this server is node {} of store '{}': \
             push the build made for this store",
            meta.node, meta.store, target.node, target.store
        )));
    }
    Ok((meta, bytes))
}

/// Copies node folder `source` into `dest` (see the module docs). Returns its metadata
/// once every file is in place and verified.
pub fn fetch_node(
    source: &dyn FetchSource,
    dest: &Path,
    target: &FetchTarget<'_>,
    throttle_bytes_per_sec: u64,
    progress: &FetchProgress,
) -> Result<NodeMetadata> {
    let (meta, meta_bytes) = read_source_metadata(source, target)?;
    fs::create_dir_all(dest).map_err(io(format!("cannot create {dest:?}")))?;
    progress
        .bytes_total
        .store(meta.files.iter().map(|f| f.bytes).sum(), Ordering::Relaxed);
    progress
        .files_total
        .store(meta.files.len() as u64, Ordering::Relaxed);
    let mut copier = Copier::new(throttle_bytes_per_sec, progress);
    for f in &meta.files {
        copier.copy(source, &f.name, f, dest)?;
    }
    finish_folder(dest, &meta_bytes)?;
    Ok(meta)
}

/// Copies files into a folder being fetched: resumable, throttled, each verified.
pub(crate) struct Copier<'a> {
    throttle: Throttle,
    buf: Vec<u8>,
    progress: &'a FetchProgress,
}

impl<'a> Copier<'a> {
    /// A copier at `throttle_bytes_per_sec` (0: unlimited) reporting to `progress`.
    pub(crate) fn new(throttle_bytes_per_sec: u64, progress: &'a FetchProgress) -> Self {
        Copier {
            throttle: Throttle::new(throttle_bytes_per_sec),
            buf: vec![0u8; COPY_BLOCK],
            progress,
        }
    }

    /// The progress this copier reports to.
    pub(crate) fn progress(&self) -> &'a FetchProgress {
        self.progress
    }

    /// Copies `source`'s file `name` to `dest/<f.name>` unless it is already there:
    /// through `<f.name>.part`, continued from its length, checked against `f`'s
    /// size and MD5, then renamed.
    pub(crate) fn copy(
        &mut self,
        source: &dyn FetchSource,
        name: &str,
        f: &FileEntry,
        dest: &Path,
    ) -> Result<()> {
        let progress = self.progress;
        let done = dest.join(&f.name);
        if done.exists() {
            progress.bytes_done.fetch_add(f.bytes, Ordering::Relaxed);
            progress.files_done.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let part = dest.join(format!("{}{PART_SUFFIX}", f.name));
        let mut out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&part)
            .map_err(io(format!("cannot open {part:?}")))?;
        let mut have = out
            .metadata()
            .map_err(io(format!("cannot stat {part:?}")))?
            .len();
        if have > f.bytes {
            // Longer than the file can be: start this file again.
            out.set_len(0)
                .map_err(io(format!("cannot truncate {part:?}")))?;
            have = 0;
        }
        progress.bytes_done.fetch_add(have, Ordering::Relaxed);
        let what = source.describe(name);
        // Opened only if bytes are missing: a range from the end is an error to some
        // object stores.
        let mut input = None;
        while have < f.bytes {
            if progress.cancel.load(Ordering::Relaxed) {
                return Err(ReadOnlyError::InvalidInput(
                    "the fetch was cancelled".into(),
                ));
            }
            let want = (f.bytes - have).min(self.buf.len() as u64) as usize;
            let reader = match &mut input {
                Some(r) => r,
                None => input.insert(source.open(name, have)?),
            };
            let n = reader
                .read(&mut self.buf[..want])
                .map_err(io(format!("cannot read {what}")))?;
            if n == 0 {
                return Err(ReadOnlyError::corrupt(
                    Path::new(&what),
                    format!("ends at {have} bytes, .metadata says {}", f.bytes),
                ));
            }
            out.write_all(&self.buf[..n])
                .map_err(io(format!("cannot write {part:?}")))?;
            have += n as u64;
            progress.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
            self.throttle.account(n as u64);
        }
        drop(input);
        out.sync_all()
            .map_err(io(format!("cannot sync {part:?}")))?;
        drop(out);
        if file_md5(&part)? != f.md5 {
            // Start this file from scratch next time.
            let _ = fs::remove_file(&part);
            progress.bytes_done.fetch_sub(f.bytes, Ordering::Relaxed);
            return Err(ReadOnlyError::corrupt(
                Path::new(&what),
                "the copy's MD5 does not match .metadata",
            ));
        }
        fs::rename(&part, &done).map_err(io(format!("cannot rename {part:?}")))?;
        progress.files_done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Writes `.metadata` into a fetched folder last, by rename, and syncs the folder:
/// a folder that has one is complete.
pub(crate) fn finish_folder(dest: &Path, meta_bytes: &[u8]) -> Result<()> {
    let tmp = dest.join(format!("{METADATA_FILE}{PART_SUFFIX}"));
    crate::build::write_durably(&tmp, meta_bytes)?;
    fs::rename(&tmp, dest.join(METADATA_FILE)).map_err(io(format!("cannot rename {tmp:?}")))?;
    fs::File::open(dest)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("cannot sync folder {dest:?}")))
}

/// Whether `dest` holds a finished fetch (every file and `.metadata`).
pub fn is_fetched(dest: &Path) -> bool {
    dest.join(METADATA_FILE).exists()
}
