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

use datafusion::physical_plan::execution_plan::replace_children_if_necessary;

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
    /// Set by [`SortedSubspaceSearch`] under an `ORDER BY c LIMIT k`: only the first
    /// `k` rows by `c` are needed, read with `sorted_search`.
    pub sorted: Option<SortedBy>,
}

/// The order and count of the rows a sorted search needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SortedBy {
    /// The table column sorted on.
    pub column: String,
    /// Ascending (NULLs last) or descending (NULLs last too).
    pub ascending: bool,
    /// How many rows.
    pub limit: usize,
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
        if let Some(o) = &s.sorted {
            let dir = if o.ascending { "ASC" } else { "DESC" };
            write!(f, ", sorted_search={} {dir} limit={}", o.column, o.limit)?;
        }
        if s.columns.is_empty() {
            write!(f, ", count")?;
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

/// Runs the search at the statement's snapshot and shapes its rows: a count when no
/// column is wanted (`count(*)`), a sorted search under `ORDER BY … LIMIT`.
async fn search(spec: &SearchSpec) -> Result<RecordBatch> {
    // The statement's snapshot: fixed, chosen already, or chosen now by this search.
    let mut chosen = spec.statement.chosen_snapshot.lock().await;
    let mode = match *chosen {
        Some(ts) => ReadMode::Snapshot(ts),
        None => ReadMode::ReadYourWrites,
    };
    let c = &spec.client;
    let (t, preds) = (&spec.table, &spec.predicates);
    if spec.columns.is_empty() {
        let (n, _, snapshot) = c.count_at(t, preds, mode).await.map_err(df_err)?;
        if chosen.is_none() && snapshot != 0 {
            *chosen = Some(snapshot);
        }
        let n = spec.limit.map_or(n as usize, |l| l.min(n as usize));
        let opts = RecordBatchOptions::new().with_row_count(Some(n));
        return Ok(RecordBatch::try_new_with_options(
            spec.schema.clone(),
            vec![],
            &opts,
        )?);
    }
    let found = match &spec.sorted {
        Some(o) => c
            .sorted_search_at(t, preds, &o.column, o.limit, o.ascending, mode)
            .await
            .map_err(df_err)?,
        None => c.search_at(t, preds, mode).await.map_err(df_err)?,
    };
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

/// The physical optimizer rule that answers `ORDER BY c [ASC|DESC] LIMIT k` over a
/// subspace search with HyperDex's `sorted_search`: the search then reads the regions
/// one interval of `c` at a time and stops once it holds `k` rows, instead of reading
/// every region the predicates allow. The sort stays above it (it orders the `k`
/// rows). It applies when NULLs sort last (`ASC`, or `DESC NULLS LAST`) or `c` cannot
/// be NULL, as `sorted_search` puts NULLs last.
#[derive(Debug, Default)]
pub struct SortedSubspaceSearch;

impl datafusion::physical_optimizer::PhysicalOptimizerRule for SortedSubspaceSearch {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &datafusion::common::config::ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        use datafusion::common::tree_node::{TransformedResult, TreeNode};
        plan.transform_down(sorted_search).data()
    }

    fn name(&self) -> &str {
        "cairn_sorted_subspace_search"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// [`SortedSubspaceSearch`] on one node.
fn sorted_search(
    node: Arc<dyn ExecutionPlan>,
) -> Result<datafusion::common::tree_node::Transformed<Arc<dyn ExecutionPlan>>> {
    use datafusion::common::tree_node::Transformed;
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_plan::sorts::sort::SortExec;
    let Some(sort) = node.downcast_ref::<SortExec>() else {
        return Ok(Transformed::no(node));
    };
    let (Some(k), [by]) = (sort.fetch(), sort.expr().as_ref()) else {
        return Ok(Transformed::no(node));
    };
    let Some(col) = by.expr.downcast_ref::<Column>() else {
        return Ok(Transformed::no(node));
    };
    let ascending = !by.options.descending;
    let Some(input) = with_sorted(
        sort.input(),
        col.index(),
        ascending,
        by.options.nulls_first,
        k,
    )?
    else {
        return Ok(Transformed::no(node));
    };
    Ok(Transformed::yes(replace_children_if_necessary(
        node.clone(),
        vec![input],
    )?))
}

/// `plan` with the subspace search producing its output column `index` (through plain
/// column projections and cooperative-scheduling wrappers) made a sorted search for the first `k` rows;
/// `None` when there is no such search or NULLs would sort first.
fn with_sorted(
    plan: &Arc<dyn ExecutionPlan>,
    index: usize,
    ascending: bool,
    nulls_first: bool,
    k: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_plan::coop::CooperativeExec;
    use datafusion::physical_plan::projection::ProjectionExec;
    if let Some(search) = plan.downcast_ref::<SubspaceSearchExec>() {
        let s = &search.spec;
        let Some(&ci) = s.columns.get(index) else {
            return Ok(None);
        };
        let column = s.table.schema.column(ci);
        if (nulls_first && column.nullable) || s.sorted.is_some() {
            return Ok(None);
        }
        let spec = SearchSpec {
            client: s.client.clone(),
            table: s.table.clone(),
            columns: s.columns.clone(),
            predicates: s.predicates.clone(),
            limit: s.limit,
            plan: s.plan.clone(),
            statement: s.statement.clone(),
            schema: s.schema.clone(),
            sorted: Some(SortedBy {
                column: column.name.clone(),
                ascending,
                limit: k,
            }),
        };
        return Ok(Some(Arc::new(SubspaceSearchExec::new(spec))));
    }
    let (child, index) = if let Some(c) = plan.downcast_ref::<CooperativeExec>() {
        (c.input(), index)
    } else if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let Some(e) = p.expr().get(index) else {
            return Ok(None);
        };
        let Some(c) = e.expr.downcast_ref::<Column>() else {
            return Ok(None);
        };
        (p.input(), c.index())
    } else {
        return Ok(None);
    };
    match with_sorted(child, index, ascending, nulls_first, k)? {
        Some(c) => Ok(Some(replace_children_if_necessary(plan.clone(), vec![c])?)),
        None => Ok(None),
    }
}
