//! `SubspaceSearchExec`: a scan answered through a subspace (hyperspace search,
//! HyperDex §2.3).
//!
//! When a table has subspaces and the predicates pushed into its scan constrain the
//! attributes of one of them enough to leave out some of its regions, the provider plans
//! this node instead of a [`crate::scan::CairnScanExec`]: [`cairn_client::Client::search_at`]
//! reads only the regions the predicates intersect (in the subspace that needs the
//! fewest), keeps the newest copy of each row, and this node projects the statement's
//! columns. `EXPLAIN` shows `subspace=(a,b) regions=k/N`. The search reads at the
//! statement's snapshot: the one fixed by `AS OF` or chosen by an earlier scan, or it
//! chooses it for the scans that follow.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, ReadMode, Table};
use cairn_common::ColumnPredicate;
use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

use crate::error::df_err;
use crate::options::StatementContext;

/// What a subspace search reads.
#[derive(Debug)]
pub(crate) struct SearchSpec {
    pub client: Client,
    pub table: Table,
    /// Table columns to return, by position.
    pub columns: Vec<usize>,
    /// The pushed-down predicates (the search and the regions' scans apply them all).
    pub predicates: Vec<ColumnPredicate>,
    /// Rows needed at most.
    pub limit: Option<usize>,
    /// `subspace=(…) regions=k/N`, as planned.
    pub plan: String,
    /// The statement's snapshot.
    pub statement: Arc<StatementContext>,
    /// The output schema.
    pub schema: SchemaRef,
}

/// Reads the rows matching a scan's predicates through a subspace (one partition).
#[derive(Debug, Clone)]
pub struct SubspaceSearchExec {
    spec: Arc<SearchSpec>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl SubspaceSearchExec {
    pub(crate) fn new(spec: SearchSpec) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(spec.schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SubspaceSearchExec {
            spec: Arc::new(spec),
            props: Arc::new(props),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for SubspaceSearchExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.spec;
        let names: Vec<&str> = s
            .columns
            .iter()
            .map(|&i| s.table.schema.column(i).name.as_str())
            .collect();
        write!(
            f,
            "SubspaceSearchExec: table={}, {}, projection=[{}]",
            s.table.name,
            s.plan,
            names.join(", ")
        )?;
        if !s.predicates.is_empty() {
            let preds: Vec<String> = s.predicates.iter().map(|p| p.to_string()).collect();
            write!(f, ", predicates=[{}]", preds.join(" AND "))?;
        }
        if let Some(l) = s.limit {
            write!(f, ", limit={l}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SubspaceSearchExec {
    fn name(&self) -> &str {
        "SubspaceSearchExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    /// The predicates are Cairn's, evaluated by the servers: no physical expressions.
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let spec = self.spec.clone();
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let schema = spec.schema.clone();
        let stream = futures::stream::once(async move {
            let batch = search(&spec).await?;
            output_rows.add(batch.num_rows());
            Ok(batch)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Runs the search at the statement's snapshot and shapes its rows.
async fn search(spec: &SearchSpec) -> Result<RecordBatch> {
    // The statement's snapshot: fixed, chosen already, or chosen now by this search.
    let mut chosen = spec.statement.chosen_snapshot.lock().await;
    let mode = match *chosen {
        Some(ts) => ReadMode::Snapshot(ts),
        None => ReadMode::ReadYourWrites,
    };
    let found = spec
        .client
        .search_at(&spec.table, &spec.predicates, mode)
        .await
        .map_err(df_err)?;
    if chosen.is_none() && found.snapshot_timestamp != 0 {
        *chosen = Some(found.snapshot_timestamp);
    }
    drop(chosen);
    let mut batch = found.batch;
    if let Some(l) = spec.limit {
        batch = batch.slice(0, l.min(batch.num_rows()));
    }
    let columns = spec
        .columns
        .iter()
        .map(|&i| batch.column(i).clone())
        .collect();
    let opts = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        spec.schema.clone(),
        columns,
        &opts,
    )?)
}
