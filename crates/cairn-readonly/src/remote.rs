//! Build inputs, build outputs and fetch sources named by URL.
//!
//! Voldemort's batch jobs leave their output in a distributed file system and the
//! servers pull it from there (the Voldemort read-only paper, §4.2.2). Cairn's builds
//! and pushes take a [`Location`], which is one of:
//!
//! - **A plain path or `file:///…`:** a folder on a file system. Every server that
//!   fetches must be able to read it: an NFS mount, a shared disk, or the local disk
//!   on one machine.
//! - **`s3://bucket/prefix`:** Amazon S3 or any S3-compatible store.
//! - **`http://…` or `https://…`:** a web server. It is read-only here. There is
//!   nothing to list, because a fetch reads the node folder's `.metadata` first and
//!   learns every file's name, size and MD5 from it. The server must answer `Range`
//!   requests so that an interrupted fetch can resume.
//!
//! All three go through the `object_store` crate. S3 settings come from the standard
//! `AWS_*` environment variables of the process that does the reading or writing:
//! the CLI for `store build`, and every tablet server for `store push`. These are
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, and `AWS_ENDPOINT`
//! for a store that is not AWS. Plain `http://` endpoints are allowed when the
//! endpoint URL says so.
//!
//! [`RemoteSource`] is the [`FetchSource`] over an object store. It is synchronous
//! like the rest of this crate: it drives the store's futures on a small runtime of
//! its own. So it must be used from a plain thread (a fetch thread), never from
//! inside an async task.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use futures::stream::FuturesUnordered;
use object_store::aws::AmazonS3Builder;
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};
use url::Url;

use crate::error::{ReadOnlyError, Result};
use crate::fetch::FetchSource;

/// Files at least this large are uploaded in parts (S3 accepts parts of 5 MiB and up).
const MULTIPART_FROM: u64 = 16 << 20;
/// The size of each part of a multipart upload.
const PART_BYTES: usize = 8 << 20;
/// Parts of one multipart upload sent at once.
const PARTS_IN_FLIGHT: usize = 4;

/// Where a build's input or output is, or where a push fetches from.
#[derive(Clone, Debug)]
pub enum Location {
    /// A folder or file on a file system this process can read.
    Local(PathBuf),
    /// A prefix in an object store (S3 or a web server).
    Remote(RemoteDir),
}

/// A prefix in an object store: a "folder" of objects.
#[derive(Clone, Debug)]
pub struct RemoteDir {
    /// The store, which may be shared with other `RemoteDir`s.
    pub store: Arc<dyn ObjectStore>,
    /// `scheme://authority/` of the store: the key DataFusion registers it under.
    pub base: Url,
    /// The prefix inside the store.
    pub prefix: ObjectPath,
    /// The URL as the user gave it, with no trailing `/`, for use in messages.
    pub url: String,
}

impl Location {
    /// Parses `url`, which is a plain path (absolute or relative), `file:///…`,
    /// `s3://bucket/prefix` or `http(s)://host/prefix`. Other schemes are refused
    /// with a message that lists the supported ones. No request is made here.
    pub fn parse(url: &str) -> Result<Location> {
        let url = url.trim_end_matches('/');
        if let Some(rest) = url.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(ReadOnlyError::InvalidInput(format!(
                    "{url}: a file URL needs an absolute path (file:///data/build)"
                )));
            }
            return Ok(Location::Local(PathBuf::from(rest)));
        }
        let Some((scheme, _)) = url.split_once("://") else {
            return Ok(Location::Local(PathBuf::from(url)));
        };
        let parsed = Url::parse(url)
            .map_err(|e| ReadOnlyError::InvalidInput(format!("{url} is not a valid URL: {e}")))?;
        let invalid =
            |e: object_store::Error| ReadOnlyError::InvalidInput(format!("cannot use {url}: {e}"));
        let store: Arc<dyn ObjectStore> = match scheme {
            "s3" | "s3a" => {
                let endpoint = ["AWS_ENDPOINT", "AWS_ENDPOINT_URL"]
                    .iter()
                    .find_map(|k| std::env::var(k).ok())
                    .unwrap_or_default();
                Arc::new(
                    AmazonS3Builder::from_env()
                        .with_url(url)
                        .with_allow_http(endpoint.starts_with("http://"))
                        .build()
                        .map_err(invalid)?,
                )
            }
            "http" | "https" => Arc::new(
                HttpBuilder::new()
                    .with_url(origin(&parsed))
                    .with_client_options(
                        object_store::ClientOptions::new().with_allow_http(scheme == "http"),
                    )
                    .build()
                    .map_err(invalid)?,
            ),
            _ => {
                return Err(ReadOnlyError::InvalidInput(format!(
                    "{url}: '{scheme}://' is not supported; give a path or a file:///, s3:// \
                     or http(s):// URL"
                )));
            }
        };
        let prefix = ObjectPath::from_url_path(parsed.path()).map_err(|e| {
            ReadOnlyError::InvalidInput(format!("{url}: not a usable object path: {e}"))
        })?;
        let base = Url::parse(&origin(&parsed))
            .map_err(|e| ReadOnlyError::InvalidInput(format!("{url}: {e}")))?;
        Ok(Location::Remote(RemoteDir {
            store,
            base,
            prefix,
            url: url.to_string(),
        }))
    }

    /// The location of `name` inside this one.
    pub fn child(&self, name: &str) -> Location {
        match self {
            Location::Local(p) => Location::Local(p.join(name)),
            Location::Remote(r) => Location::Remote(r.child(name)),
        }
    }

    /// A [`FetchSource`] that reads this folder.
    ///
    /// REQUIRES: for a remote location, the caller is a plain thread, not an async
    /// task (see the module docs).
    pub fn source(&self) -> Result<Box<dyn FetchSource + Send>> {
        Ok(match self {
            Location::Local(p) => Box::new(crate::fetch::DirSource(p.clone())),
            Location::Remote(r) => Box::new(RemoteSource::new(r.clone())?),
        })
    }
}

/// `scheme://host[:port]/` of `url`.
fn origin(url: &Url) -> String {
    let mut s = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        s.push_str(&format!(":{port}"));
    }
    s.push('/');
    s
}

impl RemoteDir {
    /// The prefix `name` inside this one.
    pub fn child(&self, name: &str) -> RemoteDir {
        RemoteDir {
            store: self.store.clone(),
            base: self.base.clone(),
            prefix: self.object(name),
            url: format!("{}/{name}", self.url),
        }
    }

    /// The object `name` (a relative path with `/` between parts) inside this prefix.
    pub fn object(&self, name: &str) -> ObjectPath {
        name.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.prefix.clone(), |path, part| path.join(part))
    }

    /// The URL of object `name`, for use in messages.
    pub fn describe(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// The error for a failed request on object `name`.
    fn error(&self, name: &str, e: object_store::Error) -> ReadOnlyError {
        match e {
            // An I/O "not found", as a missing local file gives.
            object_store::Error::NotFound { source, .. } => ReadOnlyError::io(
                format!("cannot read {}", self.describe(name)),
                std::io::Error::new(std::io::ErrorKind::NotFound, source),
            ),
            e => ReadOnlyError::Remote {
                url: self.describe(name),
                source: Box::new(e),
            },
        }
    }
}

/// A runtime that drives object-store requests from synchronous code.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReadOnlyError::io("cannot start a runtime for remote requests", e))
}

/// A node folder in an object store, read by a fetch.
pub struct RemoteSource {
    dir: RemoteDir,
    rt: tokio::runtime::Runtime,
}

impl RemoteSource {
    /// A source over `dir`, with its own runtime.
    pub fn new(dir: RemoteDir) -> Result<Self> {
        Ok(RemoteSource {
            dir,
            rt: runtime()?,
        })
    }
}

impl FetchSource for RemoteSource {
    fn open(&self, name: &str, offset: u64) -> Result<Box<dyn Read + '_>> {
        let options = GetOptions {
            range: (offset > 0).then_some(GetRange::Offset(offset)),
            ..GetOptions::default()
        };
        let got = self
            .rt
            .block_on(self.dir.store.get_opts(&self.dir.object(name), options))
            .map_err(|e| self.dir.error(name, e))?;
        Ok(Box::new(StreamReader {
            rt: &self.rt,
            stream: got.into_stream(),
            chunk: Bytes::new(),
        }))
    }

    fn describe(&self, name: &str) -> String {
        self.dir.describe(name)
    }
}

/// A blocking [`Read`] over the chunks of an object-store response body.
struct StreamReader<'a> {
    rt: &'a tokio::runtime::Runtime,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
}

impl Read for StreamReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rt.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(b)) => self.chunk = b,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// Uploads every file under local folder `from` to `to`, keeping relative paths. In
/// each folder, `.metadata` goes last, so a fetch that finds it finds a complete
/// folder. Files of 16 MiB and more are uploaded in parts; a multipart upload that
/// fails is aborted, so the store keeps none of its parts. `on_bytes` is called with
/// the bytes sent so far and the total, for a progress bar. Returns the bytes sent.
pub fn upload_dir(from: &Path, to: &RemoteDir, on_bytes: &dyn Fn(u64, u64)) -> Result<u64> {
    let rt = runtime()?;
    let mut files = Vec::new();
    list_files(from, from, &mut files)?;
    let total = files.iter().map(|(_, size)| size).sum();
    // `.metadata` after every other file of its folder: sort by (folder, is metadata).
    files.sort_by_key(|(rel, _)| {
        let is_meta = rel
            .file_name()
            .is_some_and(|n| n == crate::format::METADATA_FILE);
        (rel.parent().map(Path::to_path_buf), is_meta, rel.clone())
    });
    let mut sent = 0u64;
    for (rel, size) in files {
        let name = rel
            .iter()
            .map(|c| c.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let local = from.join(&rel);
        let target = to.object(&name);
        let mut file = std::fs::File::open(&local)
            .map_err(|e| ReadOnlyError::io(format!("cannot open {local:?}"), e))?;
        let mut read = |want: usize| -> Result<Vec<u8>> {
            let mut buf = Vec::with_capacity(want.min(size as usize));
            file.by_ref()
                .take(want as u64)
                .read_to_end(&mut buf)
                .map_err(|e| ReadOnlyError::io(format!("cannot read {local:?}"), e))?;
            Ok(buf)
        };
        if size < MULTIPART_FROM {
            let buf = read(size as usize)?;
            sent += buf.len() as u64;
            rt.block_on(to.store.put(&target, PutPayload::from(buf)))
                .map_err(|e| to.error(&name, e))?;
            on_bytes(sent, total);
            continue;
        }
        let mut upload = rt
            .block_on(to.store.put_multipart(&target))
            .map_err(|e| to.error(&name, e))?;
        let parts = (|| -> Result<u64> {
            let mut in_flight: FuturesUnordered<object_store::UploadPart> = FuturesUnordered::new();
            let mut done = 0u64;
            loop {
                let buf = read(PART_BYTES)?;
                if buf.is_empty() {
                    break;
                }
                while in_flight.len() >= PARTS_IN_FLIGHT {
                    if let Some(r) = rt.block_on(in_flight.next()) {
                        r.map_err(|e| to.error(&name, e))?;
                    }
                }
                done += buf.len() as u64;
                in_flight.push(upload.put_part(PutPayload::from(buf)));
                on_bytes(sent + done, total);
            }
            while let Some(r) = rt.block_on(in_flight.next()) {
                r.map_err(|e| to.error(&name, e))?;
            }
            Ok(done)
        })();
        let finished = parts.and_then(|done| {
            rt.block_on(upload.complete())
                .map_err(|e| to.error(&name, e))?;
            Ok(done)
        });
        match finished {
            Ok(done) => sent += done,
            Err(e) => {
                if let Err(abort) = rt.block_on(upload.abort()) {
                    tracing::warn!(
                        "could not abort the failed upload of {}: {abort}",
                        to.describe(&name)
                    );
                }
                return Err(e);
            }
        }
    }
    Ok(sent)
}

/// Appends the paths (relative to `root`) and sizes of every file under `dir`.
fn list_files(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| ReadOnlyError::io(format!("cannot list {dir:?}"), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ReadOnlyError::io(format!("cannot list {dir:?}"), e))?;
        let path = entry.path();
        if path.is_dir() {
            list_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            let size = entry
                .metadata()
                .map_err(|e| ReadOnlyError::io(format!("cannot stat {path:?}"), e))?
                .len();
            out.push((rel.to_path_buf(), size));
        }
    }
    Ok(())
}
