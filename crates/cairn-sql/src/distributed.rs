//! Distributed execution: a query's fragments run where its tablets live.
//!
//! HRDBMS ("HRDBMS: Combining the Best of Modern and Traditional Relational Databases",
//! §3) runs each query as a tree of operators spread over the cluster, with data
//! shuffled between nodes as streams. Cairn builds this on `datafusion-distributed`:
//! DataFusion plans the query as usual, then the distributed planner cuts the plan
//! into *stages* at its repartitions and merges. Each stage runs as one or more
//! *tasks*, one per worker; shuffles stream Arrow batches between workers over
//! Arrow Flight without touching disk, and the head stage runs on the coordinator,
//! the front end the client is connected to. A query whose fragment fails before
//! any row reached the client runs again at the same snapshot: on the workers
//! left if one no longer answers, else in the front end ([`or_run_here`]).
//!
//! The pieces:
//! - every tablet server and every master hosts a worker on its RPC port
//!   ([`worker_routes`]); the coordinator sends fragments to the live ones
//!   ([`ClusterWorkers`]; the masters', holding no tablets, run only the stages
//!   above the scans) over
//!   channels it keeps, with the cluster's mutual TLS when it has it, and only the
//!   cluster's servers may call a worker ([`channels`]);
//! - a [`CairnScanExec`] is split among tasks by tablet and each task is sent to a
//!   server holding replicas of its tablets, whose worker reads them in process
//!   ([`tasks`]); it travels as what it reads ([`CairnCodec`]);
//! - the stages above the scans go round the workers in an order fixed by the plan
//!   ([`tasks::route_tasks`]), so EXPLAIN names the server of every task ([`explain`]);
//! - the coordinator fixes the statement's snapshot before any fragment leaves it
//!   ([`prepare`]), so every worker reads the same consistent data;
//! - [`CairnQueryPlanner`] decides per statement whether to distribute at all.
//!
//! A statement is distributed when the session allows it (`cairn.distributed`), it
//! reads only Cairn tables (no system catalogs, no read-only stores), it is not part
//! of an open transaction (whose provisional rows only this session can read), and
//! it writes nothing, or inserts into a Cairn table: then the rows are written by
//! the tasks that produce them, in one transaction the coordinator commits
//! ([`writes`]). Everything else runs in the coordinator as before. A plan that
//! would send a node no codec knows (a subspace search) runs there too.

mod channels;
mod codec;
mod drawing;
mod fanout;
pub mod tasks;
mod worker;
mod writes;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::{QueryPlanner, SessionState};
use datafusion::logical_expr::{LogicalPlan, WriteOp};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream, execute_stream};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion_distributed::{
    DistributedExec, DistributedExt, DistributedLeafExec, SessionStateBuilderExt,
};
use futures::{StreamExt, TryStreamExt};

pub use channels::{WorkerPeers, worker_peers};
pub use codec::CairnCodec;
pub use drawing::{execute, explain};
pub use worker::{ClusterWorkers, tasks_run_by_worker, worker, worker_routes};
pub use writes::{CairnCommitExec, CairnWriteShareExec, rows_written_by_worker};

use crate::options::{CairnOptions, StatementContext};
use crate::provider::CairnTable;
use crate::scan::CairnScanExec;

/// `template` made able to distribute: the distributed planner (behind
/// [`CairnQueryPlanner`]), Cairn's codec and task handlers, `workers`, and one set
/// of channels to them that every session of the engine shares, dialled with
/// `client`'s TLS.
pub(crate) fn enable(
    template: SessionState,
    client: &cairn_client::Client,
    workers: Arc<ClusterWorkers>,
) -> SessionState {
    let state = with_distributed_planner(template, client, workers.clone());
    let distributed = Arc::clone(state.query_planner());
    SessionStateBuilder::new_from_existing(state)
        .with_query_planner(Arc::new(CairnQueryPlanner {
            distributed,
            workers,
        }))
        .build()
}

/// `template` with the library's distributed planner and Cairn's answers to its
/// questions ([`tasks`]), its workers, channels and codec.
fn with_distributed_planner(
    template: SessionState,
    client: &cairn_client::Client,
    workers: Arc<ClusterWorkers>,
) -> SessionState {
    SessionStateBuilder::new_from_existing(template)
        // Under the distributed planner: DataFusion's, with inserts written from
        // the workers.
        .with_query_planner(Arc::new(writes::WritesFromWorkers))
        .with_distributed_worker_resolver(worker::Resolver(workers))
        .with_distributed_channel_resolver(channels::WorkerChannels::new(client.tls()))
        .with_distributed_user_codec(CairnCodec::new(client.clone()))
        .with_distributed_desired_task_count_handler(tasks::desired_task_count)
        .with_distributed_scale_up_leaf_node_handler(tasks::scale_up_leaf)
        .with_distributed_route_tasks_handler(tasks::route_tasks)
        .with_distributed_planner()
        .build()
}

/// Plans each statement either distributed or in this process (see the module
/// docs for which).
#[derive(Debug)]
pub struct CairnQueryPlanner {
    /// The distributed planner (which plans with DataFusion's first).
    distributed: Arc<dyn QueryPlanner + Send + Sync>,
    workers: Arc<ClusterWorkers>,
}

#[async_trait]
impl QueryPlanner for CairnQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let local = DefaultPhysicalPlanner::default();
        if !self.wants_distribution(logical, session) {
            return local.create_physical_plan(logical, session).await;
        }
        let plan = self
            .distributed
            .create_physical_plan(logical, session)
            .await?;
        let sendable = is_distributed(&plan) && only_sendable_nodes(&plan);
        if !sendable && (is_distributed(&plan) || writes::is_from_workers(&plan)) {
            // Parts cannot be sent, or an insert no worker would write: the front
            // end runs (and writes) it all, as without workers.
            return local.create_physical_plan(logical, session).await;
        }
        fanout::bound(plan, session.config())
    }
}

impl CairnQueryPlanner {
    /// Whether `logical` may be distributed (see the module docs).
    fn wants_distribution(&self, logical: &LogicalPlan, session: &dyn Session) -> bool {
        let allowed = session
            .config_options()
            .extensions
            .get::<CairnOptions>()
            .is_none_or(|o| o.distributed);
        let in_txn = session
            .config()
            .get_extension::<StatementContext>()
            .is_some_and(|s| s.txn.is_some());
        if !allowed || in_txn || self.workers.urls().len() < 2 {
            return false;
        }
        let inner = match logical {
            LogicalPlan::Analyze(a) => a.input.as_ref(),
            LogicalPlan::Dml(d)
                if matches!(d.op, WriteOp::Insert(_))
                    && source_as_provider(&d.target)
                        .is_ok_and(|p| p.downcast_ref::<CairnTable>().is_some()) =>
            {
                d.input.as_ref()
            }
            LogicalPlan::Dml(_)
            | LogicalPlan::Ddl(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Explain(_) => return false,
            other => other,
        };
        let mut tables = 0;
        let mut only_cairn = true;
        let _ = inner.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                tables += 1;
                only_cairn &= source_as_provider(&scan.source)
                    .is_ok_and(|p| p.downcast_ref::<CairnTable>().is_some());
            }
            Ok(TreeNodeRecursion::Continue)
        });
        tables > 0 && only_cairn
    }
}

/// Whether `plan` runs distributed.
pub fn is_distributed(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.exists(|n| Ok(n.is::<DistributedExec>()))
        .unwrap_or(false)
}

/// Whether every leaf of `plan` can be sent to a worker: Cairn scans and the
/// leaves DataFusion encodes itself.
fn only_sendable_nodes(plan: &Arc<dyn ExecutionPlan>) -> bool {
    !plan
        .exists(|n| {
            Ok(n.children().is_empty()
                && !(n.is::<CairnScanExec>()
                    || n.is::<DistributedLeafExec>()
                    || n.is::<EmptyExec>()
                    || n.is::<PlaceholderRowExec>()
                    || n.is::<DistributedExec>()
                    || n.name() == "DataSourceExec"))
        })
        .unwrap_or(true)
}

/// Readies a physical plan to run: a distributed plan gets its statement's
/// snapshot fixed now, by its first scan of some tablet, since the workers read at
/// it. Plans that are not distributed are left alone (their first scan picks it).
pub async fn prepare(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    if !is_distributed(plan) {
        return Ok(());
    }
    for scan in scans(plan) {
        if let Some(scan) = scan.downcast_ref::<CairnScanExec>()
            && scan.fix_snapshot().await?
        {
            break;
        }
    }
    Ok(())
}

/// How many times a distributed query whose workers failed runs again on the
/// workers left before it runs in the front end.
const RETRIES_ON_WORKERS: usize = 2;

/// The rows of a distributed query, `stream`; should it fail before its first batch,
/// the query runs again at the same snapshot (the statement context in `state`
/// holds it). When some worker no longer answers ([`ClusterWorkers::find_unreachable`],
/// which leaves it out of later plans for a while) it runs distributed again on
/// the workers left, up to [`RETRIES_ON_WORKERS`] times while two or more are left;
/// otherwise (every worker answers, so the failure was not a lost worker) it runs
/// in this process, its scans going to whichever replicas answer. Once rows have
/// been returned an error ends the query: no partial result is ever completed
/// from another run. Reruns are counted in `workers`.
pub fn or_run_here(
    stream: SendableRecordBatchStream,
    state: SessionState,
    plan: LogicalPlan,
    workers: Option<Arc<ClusterWorkers>>,
) -> SendableRecordBatchStream {
    or_run_again(stream, state, plan, workers, 0)
}

/// [`or_run_here`] after `retries` runs again on the workers.
fn or_run_again(
    stream: SendableRecordBatchStream,
    state: SessionState,
    plan: LogicalPlan,
    workers: Option<Arc<ClusterWorkers>>,
    retries: usize,
) -> SendableRecordBatchStream {
    let schema = stream.schema();
    type Rows = futures::stream::BoxStream<'static, Result<RecordBatch>>;
    let rows = futures::stream::once(async move {
        let mut stream = stream;
        let rows: Rows = match stream.next().await {
            Some(Ok(first)) => futures::stream::iter([Ok(first)]).chain(stream).boxed(),
            None => futures::stream::empty().boxed(),
            Some(Err(e)) => {
                let lost = match &workers {
                    Some(w) if retries < RETRIES_ON_WORKERS => {
                        w.find_unreachable(&state.task_ctx()).await
                    }
                    _ => vec![],
                };
                let left = workers.as_ref().map_or(0, |w| w.urls().len());
                if !lost.is_empty() && left >= 2 {
                    let lost: Vec<String> = lost.iter().map(|u| u.to_string()).collect();
                    tracing::warn!(
                        error = %e, unreachable = ?lost,
                        "a distributed query failed; running it again on the workers left"
                    );
                    if let Some(w) = &workers {
                        w.note_rerun(false);
                    }
                    let physical = state.create_physical_plan(&plan).await?;
                    prepare(&physical).await?;
                    let again = execute(Arc::clone(&physical), &state)?;
                    if is_distributed(&physical) {
                        or_run_again(again, state, plan, workers, retries + 1).boxed()
                    } else {
                        again.boxed()
                    }
                } else {
                    tracing::warn!(error = %e, "a distributed query failed; running it here");
                    if let Some(w) = &workers {
                        w.note_rerun(true);
                    }
                    let mut state = state;
                    if let Some(o) = state
                        .config_mut()
                        .options_mut()
                        .extensions
                        .get_mut::<CairnOptions>()
                    {
                        o.distributed = false;
                    }
                    let physical = state.create_physical_plan(&plan).await?;
                    execute_stream(physical, state.task_ctx())?.boxed()
                }
            }
        };
        Ok::<Rows, datafusion::error::DataFusionError>(rows)
    })
    .try_flatten();
    Box::pin(RecordBatchStreamAdapter::new(schema, rows))
}

/// Runs `physical`, the plan of the DML statement `plan` (distributed or not),
/// and returns the rows it changed. An insert written from the workers whose run
/// reports an error after its commit took effect answers with the rows committed;
/// one that failed before its commit, with some worker no longer answering, is
/// planned again (a new transaction, on the workers left or in this process) at
/// the same snapshot, once, if it may ([`writes::may_run_again`]). Any other error
/// (a duplicate key, with every worker answering) is the statement's.
pub async fn run_write(
    physical: Arc<dyn ExecutionPlan>,
    state: &SessionState,
    plan: &LogicalPlan,
    workers: Option<&Arc<ClusterWorkers>>,
) -> Result<u64> {
    let error = match run_once(&physical, state).await {
        Ok(n) => return Ok(n),
        Err(e) => e,
    };
    let Some(workers) = workers.filter(|_| writes::may_run_again(&physical)) else {
        return Err(error);
    };
    let lost = workers.find_unreachable(&state.task_ctx()).await;
    if lost.is_empty() {
        return Err(error);
    }
    let lost: Vec<String> = lost.iter().map(|u| u.to_string()).collect();
    tracing::warn!(%error, unreachable = ?lost,
        "a distributed insert failed before its commit; running it again on the workers left");
    workers.note_rerun(workers.urls().len() < 2);
    let again = state.create_physical_plan(plan).await?;
    run_once(&again, state).await
}

/// One run of [`run_write`].
async fn run_once(physical: &Arc<dyn ExecutionPlan>, state: &SessionState) -> Result<u64> {
    prepare(physical).await?;
    match datafusion::physical_plan::collect(Arc::clone(physical), state.task_ctx()).await {
        Ok(batches) => Ok(crate::write::count_of(&batches)),
        Err(e) => match writes::committed_rows(physical) {
            Some(n) => {
                tracing::warn!(error = %e, rows = n,
                    "a distributed insert committed; the error after its commit is ignored");
                Ok(n)
            }
            None => Err(e),
        },
    }
}

/// The Cairn scans of `plan`, the split ones as planned.
fn scans(plan: &Arc<dyn ExecutionPlan>) -> Vec<Arc<dyn ExecutionPlan>> {
    let mut out = vec![];
    let _ = plan.apply(|n| {
        if let Some(leaf) = n.downcast_ref::<DistributedLeafExec>() {
            out.push(Arc::clone(leaf.original()));
        } else if n.is::<CairnScanExec>() {
            out.push(Arc::clone(n));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}
