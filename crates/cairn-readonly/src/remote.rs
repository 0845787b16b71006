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
use object_store::aws::AmazonS3Builder;
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use url::Url;

use crate::error::{ReadOnlyError, Result};
use crate::fetch::FetchSource;

/// Files at least this large are uploaded in parts (S3 accepts parts of 5 MiB and up).
const MULTIPART_FROM: u64 = 16 << 20;
/// The size of each part of a multipart upload.
const PART_BYTES: usize = 8 << 20;

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
/// folder. Files of 16 MiB and more are uploaded in parts. `on_bytes` is called with
/// the bytes sent so far, for a progress bar.
pub fn upload_dir(from: &Path, to: &RemoteDir, on_bytes: &dyn Fn(u64)) -> Result<u64> {
    let rt = runtime()?;
    let mut files = Vec::new();
    list_files(from, from, &mut files)?;
    // `.metadata` after every other file of its folder: sort by (folder, is metadata).
    files.sort_by_key(|rel| {
        let is_meta = rel
            .file_name()
            .is_some_and(|n| n == crate::format::METADATA_FILE);
        (rel.parent().map(Path::to_path_buf), is_meta, rel.clone())
    });
    let mut sent = 0u64;
    for rel in files {
        let name = rel
            .iter()
            .map(|c| c.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let local = from.join(&rel);
        let target = to.object(&name);
        let size = std::fs::metadata(&local)
            .map_err(|e| ReadOnlyError::io(format!("cannot stat {local:?}"), e))?
            .len();
        let mut file = std::fs::File::open(&local)
            .map_err(|e| ReadOnlyError::io(format!("cannot open {local:?}"), e))?;
        let read = |file: &mut std::fs::File, buf: &mut Vec<u8>, want: usize| {
            buf.clear();
            file.by_ref()
                .take(want as u64)
                .read_to_end(buf)
                .map_err(|e| ReadOnlyError::io(format!("cannot read {local:?}"), e))
        };
        let mut buf = Vec::with_capacity(PART_BYTES.min(size as usize));
        if size < MULTIPART_FROM {
            read(&mut file, &mut buf, size as usize)?;
            rt.block_on(to.store.put(&target, PutPayload::from(buf)))
                .map_err(|e| to.error(&name, e))?;
            sent += size;
            on_bytes(sent);
            continue;
        }
        // The upload's parts are sent by tasks spawned on this runtime.
        let _entered = rt.enter();
        let upload = rt
            .block_on(to.store.put_multipart(&target))
            .map_err(|e| to.error(&name, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        loop {
            let n = read(&mut file, &mut buf, PART_BYTES)?;
            if n == 0 {
                break;
            }
            rt.block_on(writer.wait_for_capacity(4))
                .map_err(|e| to.error(&name, e))?;
            writer.write(&buf);
            sent += n as u64;
            on_bytes(sent);
        }
        rt.block_on(writer.finish())
            .map_err(|e| to.error(&name, e))?;
    }
    Ok(sent)
}

/// Appends the paths (relative to `root`) of every file under `dir`.
fn list_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| ReadOnlyError::io(format!("cannot list {dir:?}"), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ReadOnlyError::io(format!("cannot list {dir:?}"), e))?;
        let path = entry.path();
        if path.is_dir() {
            list_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_path_buf());
        }
    }
    Ok(())
}
