//! The connections between a coordinator and the workers, and between workers, and
//! who may open them.
//!
//! A coordinator sends every task of a query to a worker, and a task that reads a
//! shuffle streams from the workers of the stage below. [`WorkerChannels`] keeps one
//! HTTP/2 channel per worker for all of that, made on first use and shared by every
//! query of the engine (or every fragment of the worker) that holds it. On a cluster
//! with TLS it dials with the node's own certificate, as every other RPC between
//! Cairn's servers does.
//!
//! A worker runs whatever plan it is sent, reading any table with the server's own
//! rights, so only the cluster's servers may call it: on a TLS cluster the worker
//! service admits callers holding a certificate the cluster CA signed
//! ([`internal_only`]), not users with a token, whose privileges the coordinator
//! checks before it plans.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cairn_proto::TlsConfig;
use datafusion::arrow::array::RecordBatch;
use datafusion::common::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest,
    GetWorkerInfoResponse, SetPlanRequest, WorkerChannel, WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use parking_lot::Mutex;
use tonic::codegen::http::HeaderMap;

use super::worker::worker_addr;
use url::Url;

/// How long dialling a worker may take before the query gives up on it (and runs
/// again, see [`super::or_run_here`]).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One channel per worker, dialled with the cluster's TLS when it has it (see the
/// module docs). Clones share the channels.
#[derive(Clone)]
pub(crate) struct WorkerChannels {
    tls: Option<Arc<TlsConfig>>,
    channels: Arc<Mutex<HashMap<Url, BoxCloneSyncChannel>>>,
}

impl WorkerChannels {
    /// Channels dialled with `tls` (mutual TLS with this node's certificate), or in
    /// plain gRPC without it.
    pub(crate) fn new(tls: Option<Arc<TlsConfig>>) -> WorkerChannels {
        WorkerChannels {
            tls,
            channels: Arc::default(),
        }
    }

    /// The channel to the worker at `url`, dialled now if there is none yet.
    async fn channel(&self, url: &Url) -> Result<BoxCloneSyncChannel, DataFusionError> {
        if let Some(c) = self.channels.lock().get(url) {
            return Ok(c.clone());
        }
        let Some(addr) = worker_addr(url) else {
            return Err(DataFusionError::Configuration(format!(
                "a worker's URL needs a host and a port: {url}"
            )));
        };
        let endpoint = cairn_proto::tls::endpoint(&addr, self.tls.as_deref())
            .map_err(|e| {
                DataFusionError::Configuration(format!("cannot dial the worker at {addr}: {e}"))
            })?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = endpoint.connect().await.map_err(|e| {
            DataFusionError::Execution(format!("cannot connect to the worker at {addr}: {e}"))
        })?;
        // Two queries may have dialled at once: both use the channel kept first.
        Ok(self
            .channels
            .lock()
            .entry(url.clone())
            .or_insert_with(|| BoxCloneSyncChannel::new(channel))
            .clone())
    }
}

#[async_trait]
impl ChannelResolver for WorkerChannels {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> Result<Box<dyn WorkerChannel>, DataFusionError> {
        let inner = create_worker_client(self.channel(url).await?);
        let peer = worker_addr(url).unwrap_or_else(|| url.to_string());
        Ok(Box::new(Noted { inner, peer }))
    }
}

/// The workers this process has called since it started: those it read a
/// query's rows from (`data`: a task streaming another task's output, the
/// exchanges `cairn.n_max` bounds), and those it sent query fragments to
/// (`control`: the coordinator's channel to each task it runs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkerPeers {
    /// Workers read from, as `host:port`.
    pub data: BTreeSet<String>,
    /// Workers sent fragments, as `host:port`.
    pub control: BTreeSet<String>,
}

/// What [`worker_peers`] returns, noted by every [`Noted`] channel of the process.
static PEERS: Mutex<WorkerPeers> = Mutex::new(WorkerPeers {
    data: BTreeSet::new(),
    control: BTreeSet::new(),
});

/// The workers this process has called (see [`WorkerPeers`]).
pub fn worker_peers() -> WorkerPeers {
    PEERS.lock().clone()
}

/// A worker channel that notes its peer in [`worker_peers`] on every call.
struct Noted {
    inner: Box<dyn WorkerChannel>,
    peer: String,
}

#[async_trait]
impl WorkerChannel for Noted {
    async fn coordinator_channel(
        &mut self,
        headers: HeaderMap,
        set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg, DataFusionError>>, DataFusionError>
    {
        PEERS.lock().control.insert(self.peer.clone());
        self.inner
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
    }

    async fn execute_task(
        &mut self,
        headers: HeaderMap,
        request: ExecuteTaskRequest,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch, DataFusionError>>>, DataFusionError>
    {
        PEERS.lock().data.insert(self.peer.clone());
        self.inner
            .execute_task(headers, request, metrics, task_ctx)
            .await
    }

    async fn get_worker_info(
        &mut self,
        request: GetWorkerInfoRequest,
    ) -> Result<GetWorkerInfoResponse, DataFusionError> {
        self.inner.get_worker_info(request).await
    }
}

/// Admits a call to the worker service from an internal caller by
/// [`cairn_proto::auth::internal_by_transport`] (a cluster certificate, or no TLS at
/// all, as for every other RPC); refuses everyone else, token holders included, with
/// UNAUTHENTICATED.
pub(crate) fn internal_only(
    tls_required: bool,
    req: tonic::Request<()>,
) -> Result<tonic::Request<()>, tonic::Status> {
    if cairn_proto::auth::internal_by_transport(&req, tls_required) {
        return Ok(req);
    }
    Err(tonic::Status::unauthenticated(
        "only the cluster's servers may run query fragments: present a certificate \
         signed by the cluster CA",
    ))
}
