//! `CairnScanExec`: the physical scan of a Cairn table.
//!
//! One DataFusion partition per tablet that survived partition pruning; each streams
//! its tablet through `cairn-client`'s scanner with the pushed-down projection,
//! predicates and limit. All scans of one statement read at one snapshot: the first
//! tablet opened picks it (the latest safe time its leader can serve, at or after
//! everything this client wrote) and every other tablet is read at the same
//! HybridTime, unless the statement fixed one (`AS OF`, `cairn.read_timestamp`).

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, ReadMode, Table, TabletLocationInfo};
use cairn_common::ColumnPredicate;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};

use crate::error::{SqlError, df_err};
use crate::options::StatementContext;
use crate::pushdown::implied_by_physical;

/// What a scan reads: shared by all its partitions.
#[derive(Debug)]
pub(crate) struct ScanSpec {
    pub client: Client,
    pub table: Table,
    /// Tablets to read, one partition each.
    pub tablets: Vec<TabletLocationInfo>,
    /// Number of tablets of the table (before pruning).
    pub total_tablets: usize,
    /// Estimated rows per scanned tablet, where known.
    pub tablet_rows: Vec<Option<u64>>,
    /// Columns to read (names); empty reads no column, only row counts.
    pub columns: Vec<String>,
    /// Predicates evaluated by the tablet servers.
    pub predicates: Vec<ColumnPredicate>,
    /// Rows needed per tablet at most.
    pub limit: Option<usize>,
    /// The statement's snapshot.
    pub statement: Arc<StatementContext>,
    /// The output schema.
    pub schema: SchemaRef,
}

/// Scans some tablets of a Cairn table.
#[derive(Debug, Clone)]
pub struct CairnScanExec {
    spec: Arc<ScanSpec>,
    props: Arc<PlanProperties>,
    /// Dynamic filters accepted from above (a hash join's build side, a TopK): read
    /// when a tablet's scan opens, and what they imply is sent with the scan.
    dynamic_filters: Vec<Arc<dyn PhysicalExpr>>,
    /// `output_rows` per partition (EXPLAIN ANALYZE).
    metrics: ExecutionPlanMetricsSet,
}

impl CairnScanExec {
    pub(crate) fn new(spec: ScanSpec) -> Self {
        let partitions = spec.tablets.len().max(1);
        let props = PlanProperties::new(
            EquivalenceProperties::new(spec.schema.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        CairnScanExec {
            spec: Arc::new(spec),
            props: Arc::new(props),
            dynamic_filters: vec![],
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// Ids of the tablets this scan reads.
    pub fn tablet_ids(&self) -> Vec<&str> {
        self.spec
            .tablets
            .iter()
            .map(|t| t.tablet_id.as_str())
            .collect()
    }

    /// The predicates the tablet servers evaluate.
    pub fn predicates(&self) -> &[ColumnPredicate] {
        &self.spec.predicates
    }
}

impl DisplayAs for CairnScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let s = &self.spec;
        write!(
            f,
            "CairnScanExec: table={}, tablets={} of {}",
            s.table.name,
            s.tablets.len(),
            s.total_tablets
        )?;
        if matches!(t, DisplayFormatType::Verbose) {
            write!(f, " {:?}", self.tablet_ids())?;
        }
        write!(f, ", projection=[{}]", s.columns.join(", "))?;
        if !s.predicates.is_empty() {
            let preds: Vec<String> = s.predicates.iter().map(describe_predicate).collect();
            write!(f, ", predicates=[{}]", preds.join(" AND "))?;
        }
        if let Some(l) = s.limit {
            write!(f, ", limit={l}")?;
        }
        if let Some(ts) = s.statement.fixed_snapshot {
            write!(f, ", snapshot={ts}")?;
        }
        for d in &self.dynamic_filters {
            write!(f, ", dynamic_filter={d}")?;
        }
        Ok(())
    }
}

/// A predicate as EXPLAIN shows it.
pub fn describe_predicate(p: &ColumnPredicate) -> String {
    use cairn_common::PredicateOp;
    let c = &p.column;
    match &p.op {
        PredicateOp::Equality(v) => format!("{c} = {v}"),
        PredicateOp::Range { lower, upper } => {
            let mut parts = vec![];
            if let Some((l, inclusive)) = lower {
                parts.push(format!("{c} {} {l}", if *inclusive { ">=" } else { ">" }));
            }
            if let Some((u, inclusive)) = upper {
                parts.push(format!("{c} {} {u}", if *inclusive { "<=" } else { "<" }));
            }
            parts.join(" AND ")
        }
        PredicateOp::InList(vs) => {
            let vs: Vec<String> = vs.iter().map(|v| v.to_string()).collect();
            format!("{c} IN ({})", vs.join(", "))
        }
        PredicateOp::IsNull => format!("{c} IS NULL"),
        PredicateOp::IsNotNull => format!("{c} IS NOT NULL"),
        PredicateOp::None => "false".to_string(),
    }
}

impl ExecutionPlan for CairnScanExec {
    fn name(&self) -> &str {
        "CairnScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // The dynamic filters are this node's expressions: a hash join computes its
        // filter only when a node below it holds the filter.
        for d in &self.dynamic_filters {
            if f(d)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    /// Takes the dynamic filters (after the plan is final, phase `Post`). They are
    /// hints: what they imply narrows the tablet scans, but they are reported as
    /// pushed down only because their producer (hash join, TopK) stays correct
    /// without them; static filters arrive through `TableProvider::scan` instead.
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let mut taken = vec![];
        let verdicts: Vec<PushedDown> = child_pushdown_result
            .parent_filters
            .iter()
            .map(|r| {
                let dynamic = r
                    .filter
                    .downcast_ref::<DynamicFilterPhysicalExpr>()
                    .is_some();
                if phase == FilterPushdownPhase::Post && dynamic && !self.spec.columns.is_empty() {
                    taken.push(r.filter.clone());
                    PushedDown::Yes
                } else {
                    PushedDown::No
                }
            })
            .collect();
        let mut result = FilterPushdownPropagation::with_parent_pushdown_result(verdicts);
        if !taken.is_empty() {
            let mut node = self.clone();
            node.dynamic_filters.extend(taken);
            result = result.with_updated_node(Arc::new(node) as Arc<dyn ExecutionPlan>);
        }
        Ok(result)
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
        let schema = self.spec.schema.clone();
        let Some(tablet) = self.spec.tablets.get(partition).cloned() else {
            // No tablet survived pruning: the single partition is empty.
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::empty(),
            )));
        };
        let spec = self.spec.clone();
        let dynamic = self.dynamic_filters.clone();
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let stream = futures::stream::once(async move { open_tablet(spec, tablet, dynamic).await })
            .try_flatten()
            .inspect_ok(move |b| output_rows.add(b.num_rows()));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let s = &self.spec;
        let rows: Option<u64> = match args.partition() {
            Some(p) => s.tablet_rows.get(p).copied().flatten(),
            None => s.tablet_rows.iter().copied().sum(),
        };
        let mut stats = Statistics::new_unknown(&s.schema);
        if let Some(mut r) = rows {
            if let Some(l) = s.limit {
                r = r.min(l as u64);
            }
            stats.num_rows = Precision::Inexact(r as usize);
        }
        Ok(Arc::new(stats))
    }
}

type BatchStream = futures::stream::BoxStream<'static, Result<RecordBatch>>;

/// Opens the scan of one tablet and returns its batches. The dynamic filters are
/// read now: the stream is opened on first poll, which for a hash join's probe side
/// is after its build side is complete.
async fn open_tablet(
    spec: Arc<ScanSpec>,
    tablet: TabletLocationInfo,
    dynamic: Vec<Arc<dyn PhysicalExpr>>,
) -> Result<BatchStream> {
    let mut builder = spec
        .client
        .scan(&spec.table)
        .only_tablet(tablet.tablet_id.clone());
    // A scan of no columns (count(*)) still needs rows: read the first key column
    // and drop it.
    let count_only = spec.columns.is_empty();
    let columns = if count_only {
        vec![
            spec.table
                .schema
                .column(spec.table.schema.key_indexes()[0])
                .name
                .clone(),
        ]
    } else {
        spec.columns.clone()
    };
    builder = builder.projection(columns);
    for p in &spec.predicates {
        builder = builder.predicate(p.clone());
    }
    for d in &dynamic {
        let current = match d.downcast_ref::<DynamicFilterPhysicalExpr>() {
            Some(d) => d.current()?,
            None => d.clone(),
        };
        for p in implied_by_physical(&current, &spec.columns, &spec.table.schema) {
            builder = builder.predicate(p);
        }
    }
    if let Some(l) = spec.limit {
        builder = builder.limit(l as u64);
    }
    let schema = spec.schema.clone();
    let fix = move |b: RecordBatch| -> Result<RecordBatch> {
        if count_only {
            let opts = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
            Ok(RecordBatch::try_new_with_options(
                schema.clone(),
                vec![],
                &opts,
            )?)
        } else {
            // Same columns; take the statement's field names and nullability.
            Ok(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?)
        }
    };

    // The statement's snapshot: fixed, chosen already, or chosen now by this tablet.
    let mut chosen = spec.statement.chosen_snapshot.lock().await;
    if let Some(ts) = *chosen {
        drop(chosen);
        let s = builder
            .read_mode(ReadMode::Snapshot(ts))
            .stream()
            .await
            .map_err(df_err)?;
        return Ok(s.map(move |r| r.map_err(df_err).and_then(&fix)).boxed());
    }
    let mut cursor = builder
        .read_mode(ReadMode::ReadYourWrites)
        .cursor()
        .await
        .map_err(df_err)?;
    let first = cursor.next_batch().await.map_err(df_err)?;
    *chosen = cursor.snapshot_timestamp();
    drop(chosen);
    let rest = cursor.into_stream();
    let head = futures::stream::iter(first.map(Ok));
    Ok(head
        .chain(rest)
        .map(move |r: Result<RecordBatch, cairn_client::ClientError>| {
            r.map_err(|e| df_err(SqlError::from(e))).and_then(&fix)
        })
        .boxed())
}
