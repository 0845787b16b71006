//! The worker every tablet server and master hosts, and the coordinator's list of
//! workers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use cairn_client::Client;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::ScalarUDF;
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{
    ChannelResolver, DistributedExt, DistributedGetterExt, GetWorkerInfoRequest, Worker,
    WorkerQueryContext, WorkerSessionBuilder, get_distributed_channel_resolver,
};
use parking_lot::RwLock;
use url::Url;

use super::CairnCodec;
use super::channels::{WorkerChannels, internal_only};
use crate::SqlEngine;

/// Builds the session each query fragment runs in on a worker: DataFusion's
/// defaults, Cairn's functions (`pg_catalog`'s too, so any expression the
/// coordinator planned decodes), [`CairnCodec`] on this process's cluster client,
/// a memory pool of its own (the engine's per-query limit; sorts and grouped
/// aggregates spill past it), and the worker's channels to the other workers
/// ([`WorkerChannels`], with the cluster's TLS).
///
/// The channels are set explicitly: left to the library, they would be kept per
/// runtime, and each fragment here has a runtime of its own (for its pool), so
/// every fragment that reads a shuffle would dial its producers again and leave
/// the connections idle behind it.
#[derive(Clone)]
struct FragmentSession {
    client: Client,
    functions: Vec<Arc<ScalarUDF>>,
    memory_bytes: usize,
    channels: WorkerChannels,
}

#[async_trait::async_trait]
impl WorkerSessionBuilder for FragmentSession {
    async fn build_session_state(
        &self,
        ctx: WorkerQueryContext,
    ) -> Result<SessionState, DataFusionError> {
        TASKS_RUN.fetch_add(1, Ordering::Relaxed);
        let mut builder = ctx
            .builder
            .with_scalar_functions(self.functions.clone())
            .with_distributed_user_codec(CairnCodec::new(self.client.clone()))
            .with_distributed_channel_resolver(self.channels.clone());
        if self.memory_bytes > 0 {
            let runtime = RuntimeEnvBuilder::new()
                .with_memory_pool(Arc::new(FairSpillPool::new(self.memory_bytes)))
                .build_arc()?;
            builder = builder.with_runtime_env(runtime);
        }
        Ok(builder.build())
    }
}

/// The query fragments (tasks) this process's worker has run.
static TASKS_RUN: AtomicU64 = AtomicU64::new(0);

/// How many query fragments (tasks of distributed queries) this process's worker
/// has run since it started.
pub fn tasks_run_by_worker() -> u64 {
    TASKS_RUN.load(Ordering::Relaxed)
}

/// A worker that runs query fragments with `engine`'s client, functions and
/// per-query memory limit; serve it on the server's RPC port with
/// [`worker_routes`].
pub fn worker(engine: &SqlEngine) -> Worker {
    Worker::from_session_builder(FragmentSession {
        client: engine.client().clone(),
        functions: engine.scalar_functions(),
        memory_bytes: engine.limits().query_memory_bytes,
        channels: WorkerChannels::new(engine.client().tls()),
    })
}

/// The gRPC routes of a worker for `engine` (see [`worker`]), to add to a server. On
/// a cluster with TLS (the engine's client has it) only callers holding a cluster
/// certificate get through.
pub fn worker_routes(engine: &SqlEngine) -> tonic::service::Routes {
    let tls_required = engine.client().tls().is_some();
    tonic::service::Routes::new(tonic::service::interceptor::InterceptedService::new(
        worker(engine).into_worker_server(),
        move |req| internal_only(tls_required, req),
    ))
}

/// The workers a coordinator may send fragments to: the worker of every live
/// tablet server, as the master lists them, and of every master whose worker
/// answers, refreshed every [`ClusterWorkers::REFRESH`] (a fixed list in tests).
/// Masters hold no tablets, so their workers run only the stages above the scans
/// (aggregations, joins, merges, the relays of a bounded fan-out).
#[derive(Debug, Default)]
pub struct ClusterWorkers {
    urls: RwLock<Vec<Url>>,
    /// Workers that did not answer after a query failed, left out until the time
    /// given ([`ClusterWorkers::find_unreachable`]).
    unreachable: RwLock<HashMap<Url, Instant>>,
    /// Distributed queries that failed before returning rows and ran again
    /// ([`super::or_run_here`]).
    reruns: AtomicU64,
    /// Of those, the runs again in the front end rather than on the workers.
    local_reruns: AtomicU64,
}

impl ClusterWorkers {
    /// How often the list is refreshed from the master.
    pub const REFRESH: Duration = Duration::from_secs(2);

    /// A list kept up to date from the master through `client`, in the background
    /// (until the list is dropped). The master knows which tablet servers are live
    /// (they heartbeat); a master's worker is listed only while it answers a probe,
    /// so a master that is down (or runs a version without a worker) takes no
    /// tasks. Call in a tokio runtime.
    pub fn watch(client: Client) -> Arc<ClusterWorkers> {
        let list = Arc::new(ClusterWorkers::default());
        let weak: Weak<ClusterWorkers> = Arc::downgrade(&list);
        let channels = WorkerChannels::new(client.tls());
        tokio::spawn(async move {
            loop {
                match client.list_tablet_servers().await {
                    Ok(servers) => {
                        let mut urls: Vec<Url> = servers
                            .iter()
                            .filter(|s| s.live)
                            .filter_map(|s| worker_url(&s.addr))
                            .collect();
                        urls.extend(answering_masters(&client, &channels).await);
                        urls.sort_unstable_by_key(worker_addr);
                        urls.dedup();
                        let Some(list) = weak.upgrade() else { break };
                        *list.urls.write() = urls;
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot list the workers"),
                }
                if weak.strong_count() == 0 {
                    break;
                }
                tokio::time::sleep(Self::REFRESH).await;
            }
        });
        list
    }

    /// How long a worker that did not answer is left out of the list: long enough
    /// for the master to notice a dead server, short enough that a restarted one
    /// soon takes tasks again.
    pub const UNREACHABLE_FOR: Duration = Duration::from_secs(10);

    /// How long a worker may take to answer before it counts as unreachable.
    const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

    /// A fixed list: the workers of the tablet servers at `addrs` (`host:port`).
    pub fn fixed(addrs: &[String]) -> Arc<ClusterWorkers> {
        Arc::new(ClusterWorkers {
            urls: RwLock::new(addrs.iter().filter_map(|a| worker_url(a)).collect()),
            ..ClusterWorkers::default()
        })
    }

    /// The workers' URLs, in address order, without those found unreachable in the
    /// last [`ClusterWorkers::UNREACHABLE_FOR`].
    pub fn urls(&self) -> Vec<Url> {
        let now = Instant::now();
        let unreachable = self.unreachable.read();
        self.urls
            .read()
            .iter()
            .filter(|u| unreachable.get(*u).is_none_or(|until| *until <= now))
            .cloned()
            .collect()
    }

    /// Asks every worker of [`ClusterWorkers::urls`] for its version over the
    /// session's channels (`config`'s) and leaves out, for
    /// [`ClusterWorkers::UNREACHABLE_FOR`], those that do not answer within a
    /// second; returns them.
    pub(crate) async fn find_unreachable(&self, task_ctx: &TaskContext) -> Vec<Url> {
        let channels = get_distributed_channel_resolver(task_ctx);
        let probes = self.urls().into_iter().map(|url| {
            let channels = Arc::clone(&channels);
            async move {
                let answered = answers(channels.as_ref(), &url).await;
                (url, answered)
            }
        });
        let unreachable: Vec<Url> = futures::future::join_all(probes)
            .await
            .into_iter()
            .filter(|(_, answered)| !answered)
            .map(|(url, _)| url)
            .collect();
        let until = Instant::now() + Self::UNREACHABLE_FOR;
        let mut left_out = self.unreachable.write();
        left_out.retain(|_, t| *t > Instant::now());
        for url in &unreachable {
            left_out.insert(url.clone(), until);
        }
        unreachable
    }

    /// How many distributed queries failed before returning rows and ran again,
    /// on the workers left or in the front end.
    pub fn reruns(&self) -> u64 {
        self.reruns.load(Ordering::Relaxed)
    }

    /// How many of [`ClusterWorkers::reruns`] ran in the front end.
    pub fn local_reruns(&self) -> u64 {
        self.local_reruns.load(Ordering::Relaxed)
    }

    /// Counts one more [`ClusterWorkers::reruns`], in the front end if `local`.
    pub(crate) fn note_rerun(&self, local: bool) {
        self.reruns.fetch_add(1, Ordering::Relaxed);
        if local {
            self.local_reruns.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The workers of the masters `client` knows whose worker answers a probe through
/// `channels` (none if the masters cannot be listed).
async fn answering_masters(client: &Client, channels: &WorkerChannels) -> Vec<Url> {
    let masters = client.list_masters().await.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "cannot list the masters' workers");
        vec![]
    });
    futures::future::join_all(
        masters
            .iter()
            .filter_map(|m| worker_url(&m.addr))
            .map(|url| async { answers(channels, &url).await.then_some(url) }),
    )
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// Whether the worker at `url` answers a request for its version through
/// `channels` within [`ClusterWorkers::PROBE_TIMEOUT`].
async fn answers<C: ChannelResolver + ?Sized>(channels: &C, url: &Url) -> bool {
    let answer = tokio::time::timeout(ClusterWorkers::PROBE_TIMEOUT, async {
        let mut worker = channels.get_worker_client_for_url(url).await?;
        worker.get_worker_info(GetWorkerInfoRequest {}).await
    })
    .await;
    matches!(answer, Ok(Ok(_)))
}

/// The URL of the worker on the server (tablet server or master) at `addr`.
fn worker_url(addr: &str) -> Option<Url> {
    Url::parse(&format!("http://{addr}")).ok()
}

/// The addresses of the workers the session configured by `config` may send
/// tasks to, as its worker resolver lists them; `None` if it has none.
pub(crate) fn worker_addrs(config: &SessionConfig) -> Option<Vec<String>> {
    let urls = config
        .get_distributed_worker_resolver()
        .ok()?
        .get_urls()
        .ok()?;
    Some(urls.iter().filter_map(worker_addr).collect())
}

/// The address (`host:port`) of the server whose worker is at `url`: how tablet
/// locations name tablet servers.
pub(crate) fn worker_addr(url: &Url) -> Option<String> {
    Some(format!(
        "{}:{}",
        url.host_str()?,
        url.port_or_known_default()?
    ))
}

/// [`ClusterWorkers`] as the distributed planner asks for them.
#[derive(Clone)]
pub(crate) struct Resolver(pub Arc<ClusterWorkers>);

impl datafusion_distributed::WorkerResolver for Resolver {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.urls())
    }
}
