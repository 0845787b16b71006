//! The gRPC `ReadOnlyStore` service: a tablet server's side of read-only stores
//! ([`crate::stores`]). Fetching, swapping, rolling back and dropping are for the
//! master (administrative); lookups and scans need SELECT on the store, granted as
//! on a table (`GRANT SELECT ON store_name TO user`).
//!
//! Everything that touches store files — lookups page-faulting on mapped files, an
//! install checksumming a new version — runs on the blocking pool, never on the
//! async runtime's threads.

use std::sync::Arc;

use cairn_proto as pb;
use cairn_proto::auth::{Action, AuthGate, Principal, Privileges};
use tonic::{Request, Response, Status};

use crate::error::TserverError;
use cairn_consensus::network::{ChannelPool, MAX_MESSAGE_BYTES};

use crate::stores::{FetchRequest, PeerConnect, StoreHost, StoreStatus};

/// How long one `StoreReadFile` call to another server may take.
const PEER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Bytes asked for per `StoreReadFile` call.
const PEER_READ_BYTES: u64 = 1 << 20;

/// Another server's installed store version, read through `StoreReadFile`: the
/// source a rebalance copies chunk files from. Used from the fetch thread, so every
/// call blocks on the runtime `handle`.
struct PeerSource {
    handle: tokio::runtime::Handle,
    pool: ChannelPool,
    addr: String,
    store_id: String,
    version: u64,
}

/// A file of a [`PeerSource`], read a page at a time.
struct PeerFile<'a> {
    source: &'a PeerSource,
    name: String,
    offset: u64,
    page: Vec<u8>,
    at: usize,
    eof: bool,
}

impl PeerSource {
    fn read_page(&self, name: &str, offset: u64) -> std::io::Result<Vec<u8>> {
        // Channels are made (lazily connected) inside the runtime's context.
        let _runtime = self.handle.enter();
        let channel = self
            .pool
            .get(&self.addr)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", self.addr)))?;
        let mut client = pb::read_only_store_client::ReadOnlyStoreClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let req = pb::StoreReadFileRequest {
            store_id: self.store_id.clone(),
            version: self.version,
            name: name.to_string(),
            offset,
            max_bytes: PEER_READ_BYTES,
        };
        let r = self.handle.block_on(async {
            tokio::time::timeout(PEER_READ_TIMEOUT, client.store_read_file(req)).await
        });
        match r {
            Err(_) => Err(std::io::Error::other(format!(
                "{} did not answer within {PEER_READ_TIMEOUT:?}",
                self.addr
            ))),
            Ok(Err(s)) => Err(std::io::Error::other(format!(
                "{}: {}",
                self.addr,
                s.message()
            ))),
            Ok(Ok(r)) => Ok(r.into_inner().data.to_vec()),
        }
    }
}

impl std::io::Read for PeerFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.page.len() {
            if self.eof {
                return Ok(0);
            }
            self.page = self.source.read_page(&self.name, self.offset)?;
            self.at = 0;
            self.offset += self.page.len() as u64;
            self.eof = (self.page.len() as u64) < PEER_READ_BYTES;
        }
        let n = buf.len().min(self.page.len() - self.at);
        buf[..n].copy_from_slice(&self.page[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl cairn_readonly::FetchSource for PeerSource {
    fn open(&self, name: &str, offset: u64) -> cairn_readonly::Result<Box<dyn std::io::Read + '_>> {
        Ok(Box::new(PeerFile {
            source: self,
            name: name.to_string(),
            offset,
            page: Vec::new(),
            at: 0,
            eof: false,
        }))
    }

    fn describe(&self, name: &str) -> String {
        format!("{name} of version {} on {}", self.version, self.addr)
    }
}

/// How a server reaches its peers' store files: through `pool`, blocking on the
/// current runtime. REQUIRES: called inside the tokio runtime.
pub fn peer_connect(pool: ChannelPool) -> PeerConnect {
    let handle = tokio::runtime::Handle::current();
    Arc::new(move |store_id: &str, addr: &str, version: u64| {
        Ok(Box::new(PeerSource {
            handle: handle.clone(),
            pool: pool.clone(),
            addr: addr.to_string(),
            store_id: store_id.to_string(),
            version,
        }) as Box<dyn cairn_readonly::FetchSource>)
    })
}

/// The `ReadOnlyStore` service over a server's [`StoreHost`].
#[derive(Clone)]
pub struct StoreService {
    host: Arc<StoreHost>,
    gate: Arc<AuthGate>,
}

impl StoreService {
    /// A service over `host`; `gate` decides who is calling.
    pub fn new(host: Arc<StoreHost>, gate: Arc<AuthGate>) -> Self {
        StoreService { host, gate }
    }

    fn admin<T>(&self, req: &Request<T>, what: &str) -> Result<(), Status> {
        self.gate.check(req, Action::Admin(what)).map(|_| ())
    }

    /// Checks that the caller of `req` may read store `id`: SELECT on it, as on a
    /// table (a token carries its user's grants by object id).
    fn reader<T>(&self, req: &Request<T>, id: &str) -> Result<(), Status> {
        let who = self.gate.principal(req)?;
        if let Principal::User(_) = who {
            let store = self.host.store(id)?;
            who.check(Action::Table {
                id,
                name: store.name(),
                need: Privileges::SELECT,
            })?;
        }
        Ok(())
    }

    /// Runs `f` over the host on the blocking pool.
    async fn blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&StoreHost) -> crate::Result<R> + Send + 'static,
    ) -> Result<R, Status> {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || f(&host))
            .await
            .map_err(|e| Status::internal(format!("a store task failed: {e}")))?
            .map_err(Status::from)
    }
}

fn status_response(s: StoreStatus) -> pb::StoreStatusResponse {
    pb::StoreStatusResponse {
        live_version: s.live.unwrap_or(0),
        versions: s.versions,
        fetch_version: s.fetch_version.unwrap_or(0),
        bytes_done: s.bytes_done,
        bytes_total: s.bytes_total,
        fetched: s.fetched,
        fetch_error: s.fetch_error.unwrap_or_default(),
    }
}

fn swap_response(r: cairn_readonly::SwapReport) -> pb::StoreSwapResponse {
    pb::StoreSwapResponse {
        previous: r.previous.unwrap_or(0),
        current: r.current,
        micros: r.elapsed.as_micros() as u64,
    }
}

#[tonic::async_trait]
impl pb::read_only_store_server::ReadOnlyStore for StoreService {
    async fn store_fetch(
        &self,
        request: Request<pb::StoreFetchRequest>,
    ) -> Result<Response<pb::StoreStatusResponse>, Status> {
        self.admin(&request, "StoreFetch")?;
        let r = request.into_inner();
        if r.abort {
            let (id, v) = (r.store_id.clone(), r.version);
            self.blocking(move |h| h.abort_fetch(&id, v)).await?;
            let id = r.store_id;
            let status = self
                .blocking(move |h| match h.status(&id) {
                    Err(TserverError::StoreNotFound(_)) => Ok(StoreStatus::default()),
                    other => other,
                })
                .await?;
            return Ok(Response::new(status_response(status)));
        }
        let req = FetchRequest {
            store_id: r.store_id,
            store_name: r.store_name,
            version: r.version,
            source: r.source,
            node: r.node,
            retained: r.retained,
            throttle_bytes_per_sec: r.throttle_bytes_per_sec,
            rebalance: if r.rebalance_json.is_empty() {
                None
            } else {
                Some(serde_json::from_str(&r.rebalance_json).map_err(|e| {
                    Status::invalid_argument(format!("the rebalance plan is not valid: {e}"))
                })?)
            },
        };
        let status = self.blocking(move |h| h.fetch(req)).await?;
        Ok(Response::new(status_response(status)))
    }

    async fn store_status(
        &self,
        request: Request<pb::StoreStatusRequest>,
    ) -> Result<Response<pb::StoreStatusResponse>, Status> {
        self.admin(&request, "StoreStatus")?;
        let id = request.into_inner().store_id;
        let status = self.blocking(move |h| h.status(&id)).await?;
        Ok(Response::new(status_response(status)))
    }

    async fn store_swap(
        &self,
        request: Request<pb::StoreSwapRequest>,
    ) -> Result<Response<pb::StoreSwapResponse>, Status> {
        self.admin(&request, "StoreSwap")?;
        let r = request.into_inner();
        let report = self
            .blocking(move |h| {
                // On the blocking pool, so that a `sleep` action holds this swap
                // without stalling the runtime (tests kill the server meanwhile).
                fail::fail_point!("store::swap", |_| Err(TserverError::Unavailable(
                    "failpoint store::swap".into()
                )));
                let order = cairn_readonly::SwapOrder {
                    epoch: r.term,
                    if_live: r.if_live,
                };
                h.swap(&r.store_id, r.version, order)
            })
            .await?;
        Ok(Response::new(swap_response(report)))
    }

    async fn store_drop(
        &self,
        request: Request<pb::StoreDropRequest>,
    ) -> Result<Response<pb::StoreDropResponse>, Status> {
        self.admin(&request, "StoreDrop")?;
        let id = request.into_inner().store_id;
        self.blocking(move |h| h.drop_store(&id)).await?;
        Ok(Response::new(pb::StoreDropResponse {}))
    }

    async fn store_scan(
        &self,
        request: Request<pb::StoreScanRequest>,
    ) -> Result<Response<pb::StoreScanResponse>, Status> {
        self.reader(&request, &request.get_ref().store_id)?;
        let r = request.into_inner();
        let from = cairn_readonly::ScanCursor {
            chunk: r.chunk,
            entry: r.entry,
        };
        let max = if r.max_bytes == 0 {
            4 << 20
        } else {
            (r.max_bytes as usize).min(32 << 20)
        };
        let (version, tuples, next) = self
            .blocking(move |h| h.scan(&r.store_id, r.partition, from, r.version, max))
            .await?;
        let (keys, values) = tuples
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .unzip();
        Ok(Response::new(pb::StoreScanResponse {
            version,
            keys,
            values,
            more: next.is_some(),
            next_chunk: next.map_or(0, |n| n.chunk),
            next_entry: next.map_or(0, |n| n.entry),
        }))
    }

    async fn store_read_file(
        &self,
        request: Request<pb::StoreReadFileRequest>,
    ) -> Result<Response<pb::StoreReadFileResponse>, Status> {
        self.admin(&request, "StoreReadFile")?;
        let r = request.into_inner();
        let (data, file_bytes) = self
            .blocking(move |h| h.read_file(&r.store_id, r.version, &r.name, r.offset, r.max_bytes))
            .await?;
        Ok(Response::new(pb::StoreReadFileResponse {
            data: data.into(),
            file_bytes,
        }))
    }

    async fn store_get(
        &self,
        request: Request<pb::StoreGetRequest>,
    ) -> Result<Response<pb::StoreGetResponse>, Status> {
        self.reader(&request, &request.get_ref().store_id)?;
        let r = request.into_inner();
        let keys: Vec<Vec<u8>> = r.keys.into_iter().map(|k| k.to_vec()).collect();
        let (version, values) = self.blocking(move |h| h.get(&r.store_id, &keys)).await?;
        Ok(Response::new(pb::StoreGetResponse {
            version,
            values: values
                .into_iter()
                .map(|v| pb::StoreValue {
                    found: v.is_some(),
                    value: v.unwrap_or_default().into(),
                })
                .collect(),
        }))
    }
}
