//! The gRPC `ReadOnlyStore` service: a tablet server's side of read-only stores
//! ([`crate::stores`]). Fetching, swapping, rolling back and dropping are for the
//! master (administrative); lookups are for any authenticated caller.
//!
//! Everything that touches store files — lookups page-faulting on mapped files, an
//! install checksumming a new version — runs on the blocking pool, never on the
//! async runtime's threads.

use std::sync::Arc;

use cairn_proto as pb;
use cairn_proto::auth::{Action, AuthGate};
use tonic::{Request, Response, Status};

use crate::error::TserverError;
use crate::stores::{FetchRequest, StoreHost, StoreStatus};

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
        fail::fail_point!("store::swap", |_| Err(Status::unavailable(
            "failpoint store::swap"
        )));
        let report = self
            .blocking(move |h| h.swap(&r.store_id, r.version))
            .await?;
        Ok(Response::new(swap_response(report)))
    }

    async fn store_rollback(
        &self,
        request: Request<pb::StoreRollbackRequest>,
    ) -> Result<Response<pb::StoreSwapResponse>, Status> {
        self.admin(&request, "StoreRollback")?;
        let r = request.into_inner();
        let to = (r.to > 0).then_some(r.to);
        let report = self.blocking(move |h| h.rollback(&r.store_id, to)).await?;
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
        self.gate.principal(&request)?;
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

    async fn store_get(
        &self,
        request: Request<pb::StoreGetRequest>,
    ) -> Result<Response<pb::StoreGetResponse>, Status> {
        self.gate.principal(&request)?;
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
