//! `CairnScanExec`: the physical scan of a Cairn table.
//!
//! One DataFusion partition per tablet that survived partition pruning; each streams
//! its tablet through `cairn-client`'s scanner with the pushed-down projection,
//! predicates and limit. All scans of one statement read at one snapshot: the first
//! tablet opened picks it (the latest safe time its leader can serve, at or after
//! everything this client wrote) and every other tablet is read at the same
//! HybridTime, unless the statement fixed one (`AS OF`, `cairn.read_timestamp`).
//!
//! A scan with a small limit (at most [`KEY_ORDERED_LIMIT_MAX`] rows) over several
//! tablets is one partition instead: every tablet is read in primary-key order up to
//! the limit and the first rows in key order are returned, so `WHERE k >= x LIMIT n`
//! is a range scan (YCSB's workload E, a key-value store's scan) even on a
//! hash-partitioned table. Without ORDER BY any order would be allowed; key order is
//! what users of a key-value store expect.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::compute::{SortColumn, concat_batches, lexsort_to_indices, take_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, ReadMode, Table, TabletLocationInfo};
use cairn_common::{ColumnPredicate, ColumnStatistics, PredicateOp, Value};
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::{Column, DynamicFilterPhysicalExpr};
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

use crate::catalog::TabletStatistics;
use crate::error::{SqlError, df_err};
use crate::options::StatementContext;
use crate::partitioning::HashIdentity;
use crate::pushdown::implied_by_physical;
use crate::types::value_to_scalar;

/// Largest limit for which a scan over several tablets returns the first rows in
/// primary-key order (see the module docs). Larger limits read the tablets as
/// separate partitions, in no particular order.
pub const KEY_ORDERED_LIMIT_MAX: usize = 10_000;

/// What a scan reads: shared by all its partitions.
#[derive(Debug)]
pub(crate) struct ScanSpec {
    pub client: Client,
    pub table: Table,
    /// Tablets to read, one partition each.
    pub tablets: Vec<TabletLocationInfo>,
    /// Number of tablets of the table (before pruning).
    pub total_tablets: usize,
    /// Statistics of each scanned tablet, where known.
    pub tablet_stats: Vec<Option<Arc<TabletStatistics>>>,
    /// Columns to read (names); empty reads no column, only row counts.
    pub columns: Vec<String>,
    /// Predicates evaluated by the tablet servers.
    pub predicates: Vec<ColumnPredicate>,
    /// Rows needed per tablet at most.
    pub limit: Option<usize>,
    /// Cairn's hash partitioning to declare: the hash columns' positions in the output
    /// and the hash's identity. Set only when partition i reads hash bucket i.
    pub hash: Option<(Vec<usize>, HashIdentity)>,
    /// The statement's snapshot.
    pub statement: Arc<StatementContext>,
    /// The output schema.
    pub schema: SchemaRef,
    /// Partitions to declare at least: the partitions past `tablets` are empty. A
    /// distributed task's share of a scan is padded so that every task's share has
    /// as many partitions ([`crate::distributed`]); 0 elsewhere.
    pub pad_to: usize,
    /// The tablet server whose replicas this scan reads first (a distributed task's
    /// share reads those of the server it runs on); `None`: the leaders'.
    pub read_from: Option<String>,
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
        let partitioning = match &spec.hash {
            _ if spec.key_ordered() => Partitioning::UnknownPartitioning(1),
            Some((columns, identity)) => Partitioning::Hash(
                columns
                    .iter()
                    .map(|&i| {
                        Arc::new(Column::new(spec.schema.field(i).name(), i))
                            as Arc<dyn PhysicalExpr>
                    })
                    .collect(),
                if spec.pad_to > 0 {
                    spec.pad_to
                } else {
                    identity.buckets as usize
                },
            ),
            None => Partitioning::UnknownPartitioning(spec.tablets.len().max(spec.pad_to).max(1)),
        };
        let props = PlanProperties::new(
            EquivalenceProperties::new(spec.schema.clone()),
            partitioning,
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

    /// What this scan reads.
    pub(crate) fn spec(&self) -> &ScanSpec {
        &self.spec
    }

    /// The same scan reading only `tablets` (a subset of this scan's, in its order)
    /// as `pad_to` partitions, from the replicas on `read_from` first: one
    /// distributed task's share.
    pub(crate) fn share(
        &self,
        tablets: &[usize],
        pad_to: usize,
        read_from: Option<String>,
    ) -> CairnScanExec {
        let s = &self.spec;
        let spec = ScanSpec {
            client: s.client.clone(),
            table: s.table.clone(),
            tablets: tablets.iter().map(|&i| s.tablets[i].clone()).collect(),
            total_tablets: s.total_tablets,
            tablet_stats: tablets
                .iter()
                .map(|&i| s.tablet_stats.get(i).cloned().flatten())
                .collect(),
            columns: s.columns.clone(),
            predicates: s.predicates.clone(),
            limit: s.limit,
            hash: s.hash.clone(),
            statement: s.statement.clone(),
            schema: s.schema.clone(),
            pad_to,
            read_from,
        };
        CairnScanExec::new(spec)
    }

    /// The same scan, reading the replicas on `server` first.
    pub(crate) fn read_at(&self, server: &str) -> CairnScanExec {
        let all: Vec<usize> = (0..self.spec.tablets.len()).collect();
        let partitions = self.props.partitioning.partition_count();
        self.share(&all, partitions, Some(server.to_string()))
    }

    /// Whether this scan returns its first rows in key order from one partition (it
    /// cannot be split among tasks then).
    pub(crate) fn key_ordered(&self) -> bool {
        self.spec.key_ordered()
    }

    /// Fixes the statement's snapshot now, unless one is fixed or chosen already: the
    /// first tablet's leader picks it as the first scan would (everything this client
    /// wrote or saw is in it). A distributed plan needs it before its fragments leave
    /// this process, since each worker reads at it.
    pub(crate) async fn fix_snapshot(&self) -> Result<bool> {
        let spec = &self.spec;
        let mut chosen = spec.statement.chosen_snapshot.lock().await;
        if chosen.is_some() {
            return Ok(true);
        }
        let Some(tablet) = spec.tablets.first() else {
            return Ok(false);
        };
        let key = &spec
            .table
            .schema
            .column(spec.table.schema.key_indexes()[0])
            .name;
        let mut cursor = spec
            .client
            .scan(&spec.table)
            .only_tablet(tablet.tablet_id.clone())
            .projection(vec![key.clone()])
            .limit(1)
            .read_mode(ReadMode::ReadYourWrites)
            .cursor()
            .await
            .map_err(df_err)?;
        cursor.next_batch().await.map_err(df_err)?;
        *chosen = cursor.snapshot_timestamp();
        Ok(chosen.is_some())
    }

    /// The identity of the Cairn hash partitioning this scan declares, if it does.
    pub fn hash_identity(&self) -> Option<&HashIdentity> {
        match (&self.spec.hash, &self.props.partitioning) {
            (Some((_, identity)), Partitioning::Hash(..)) => Some(identity),
            _ => None,
        }
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
        if s.key_ordered() {
            write!(f, ", key_ordered")?;
        } else if let Some((columns, identity)) = &s.hash {
            let names: Vec<&str> = columns
                .iter()
                .map(|&i| s.schema.field(i).name().as_str())
                .collect();
            write!(
                f,
                ", cairn_hash=[{}] into {}",
                names.join(", "),
                identity.buckets
            )?;
        }
        if let Some(ts) = s.statement.fixed_snapshot {
            write!(f, ", snapshot={ts}")?;
        }
        if let Some(at) = &s.read_from {
            // A distributed task's share: the server it runs on and reads from.
            write!(f, ", at={at}")?;
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
            // No tablet survived pruning (the single partition is empty), or a
            // distributed task's padding.
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::empty(),
            )));
        };
        let spec = self.spec.clone();
        let dynamic = self.dynamic_filters.clone();
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        if spec.key_ordered() {
            let stream = futures::stream::once(first_rows_in_key_order(spec, dynamic))
                .inspect_ok(move |b| output_rows.add(b.num_rows()));
            return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)));
        }
        let columns = spec.columns.clone();
        let stream = futures::stream::once(async move {
            open_tablet(spec, tablet, dynamic, columns, false).await
        })
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
        let tablets: Option<Vec<&TabletStatistics>> = match args.partition() {
            Some(p) if !s.key_ordered() => s
                .tablet_stats
                .get(p)
                .and_then(|t| t.as_deref())
                .map(|t| vec![t]),
            _ => s.tablet_stats.iter().map(|t| t.as_deref()).collect(),
        };
        let mut stats = Statistics::new_unknown(&s.schema);
        let Some(tablets) = tablets else {
            return Ok(Arc::new(stats));
        };
        // Each column's statistics over the tablets read.
        let merged = |name: &str| -> Option<ColumnStatistics> {
            let mut out: Option<ColumnStatistics> = None;
            for t in &tablets {
                let c = t.columns.iter().find(|c| c.column == name)?;
                match &mut out {
                    None => out = Some(c.clone()),
                    Some(m) => m.merge(c),
                }
            }
            out
        };
        let rows: u64 = tablets.iter().map(|t| t.rows).sum();
        // The tablets apply the pushed predicates, so no FilterExec above estimates
        // their selectivity: do it here.
        let selectivity = conjunction_selectivity(&s.predicates, merged, rows);
        let mut scaled = (rows as f64 * selectivity).ceil() as u64;
        if let Some(l) = s.limit {
            scaled = scaled.min(l as u64);
        }
        stats.num_rows = Precision::Inexact(scaled as usize);
        let fraction = if rows == 0 {
            1.0
        } else {
            scaled as f64 / rows as f64
        };
        let mut total_bytes = Some(0usize);
        for (i, field) in s.schema.fields().iter().enumerate() {
            let (Some(m), Ok(ci)) = (merged(field.name()), s.table.schema.index_of(field.name()))
            else {
                total_bytes = None;
                continue;
            };
            let col = s.table.schema.column(ci);
            let cs = &mut stats.column_statistics[i];
            cs.null_count = Precision::Inexact((m.null_count as f64 * fraction) as usize);
            if let (Some(lo), Some(hi)) = (&m.min, &m.max) {
                cs.min_value = Precision::Inexact(value_to_scalar(lo, &col.data_type));
                cs.max_value = Precision::Inexact(value_to_scalar(hi, &col.data_type));
            }
            total_bytes = total_bytes.map(|b| b + (m.bytes as f64 * fraction) as usize);
        }
        if let Some(b) = total_bytes
            && !s.schema.fields().is_empty()
        {
            stats.total_byte_size = Precision::Inexact(b);
        }
        Ok(Arc::new(stats))
    }
}

/// Selectivity assumed for a predicate the statistics say nothing about (DataFusion's
/// default for filters it cannot analyse).
const DEFAULT_SELECTIVITY: f64 = 0.2;

/// The fraction of `rows` estimated to pass all of `predicates`. Those on one column
/// are intersected first: `d >= x AND d < y` is one range, not two independent
/// halves (taken apart, TPC-H q14's month of `l_shipdate` was estimated at a quarter
/// of `lineitem`, twenty times too many). Columns are then taken as independent.
fn conjunction_selectivity(
    predicates: &[ColumnPredicate],
    stats: impl Fn(&str) -> Option<ColumnStatistics>,
    rows: u64,
) -> f64 {
    let mut by_column: Vec<ColumnPredicate> = Vec::with_capacity(predicates.len());
    for p in predicates {
        match by_column.iter_mut().find(|q| q.column == p.column) {
            Some(q) => *q = q.intersect(p),
            None => by_column.push(p.clone()),
        }
    }
    by_column
        .iter()
        .map(|p| predicate_selectivity(p, stats(&p.column).as_ref(), rows))
        .product()
}

/// The fraction of a column's `rows` estimated to pass `p`: from the column's bounds
/// for ranges and equality on numeric and date/time columns, from its NULL count for
/// `IS [NOT] NULL`, else [`DEFAULT_SELECTIVITY`].
fn predicate_selectivity(p: &ColumnPredicate, stats: Option<&ColumnStatistics>, rows: u64) -> f64 {
    let bounds = stats.and_then(|c| Some((numeric(c.min.as_ref()?)?, numeric(c.max.as_ref()?)?)));
    let nulls = stats.map(|c| c.null_count);
    let f = match (&p.op, bounds, nulls) {
        (PredicateOp::None, ..) => 0.0,
        (PredicateOp::IsNull, _, Some(n)) if rows > 0 => n as f64 / rows as f64,
        (PredicateOp::IsNotNull, _, Some(n)) if rows > 0 => 1.0 - n as f64 / rows as f64,
        (PredicateOp::Equality(_), Some((lo, hi)), _) => 1.0 / (hi - lo + 1.0).max(1.0),
        (PredicateOp::InList(vs), Some((lo, hi)), _) => vs.len() as f64 / (hi - lo + 1.0).max(1.0),
        (PredicateOp::Range { lower, upper }, Some((lo, hi)), _) if hi > lo => {
            let a = lower.as_ref().and_then(|(v, _)| numeric(v)).unwrap_or(lo);
            let b = upper.as_ref().and_then(|(v, _)| numeric(v)).unwrap_or(hi);
            (b.min(hi) - a.max(lo)) / (hi - lo)
        }
        _ => DEFAULT_SELECTIVITY,
    };
    f.clamp(0.0, 1.0)
}

/// A value as a number on its type's scale, for numeric and date/time values.
fn numeric(v: &Value) -> Option<f64> {
    Some(match v {
        Value::Int8(x) => *x as f64,
        Value::Int16(x) => *x as f64,
        Value::Int32(x) => *x as f64,
        Value::Int64(x) => *x as f64,
        Value::Float(x) => *x as f64,
        Value::Double(x) => *x,
        Value::Decimal(x) => *x as f64,
        Value::Date(x) => *x as f64,
        Value::Timestamp(x) => *x as f64,
        _ => return None,
    })
}

impl ScanSpec {
    /// Whether this scan returns its first `limit` rows in primary-key order from a
    /// single partition (see the module docs).
    fn key_ordered(&self) -> bool {
        self.tablets.len() > 1 && self.limit.is_some_and(|l| l <= KEY_ORDERED_LIMIT_MAX)
    }
}

type BatchStream = futures::stream::BoxStream<'static, Result<RecordBatch>>;

/// Reads every tablet in primary-key order up to the limit and returns the first
/// `limit` rows of all of them in key order, as one batch of the scan's schema.
async fn first_rows_in_key_order(
    spec: Arc<ScanSpec>,
    dynamic: Vec<Arc<dyn PhysicalExpr>>,
) -> Result<RecordBatch> {
    let limit = spec.limit.unwrap_or(KEY_ORDERED_LIMIT_MAX);
    // Read the key columns too (after the projected ones) to merge by them.
    let schema = &spec.table.schema;
    let mut columns = spec.columns.clone();
    let mut key_positions = vec![];
    for &k in schema.key_indexes() {
        let name = &schema.column(k).name;
        let at = match columns.iter().position(|c| c == name) {
            Some(at) => at,
            None => {
                columns.push(name.clone());
                columns.len() - 1
            }
        };
        key_positions.push(at);
    }
    let scans = spec.tablets.iter().map(|t| {
        let (spec, dynamic, columns) = (spec.clone(), dynamic.clone(), columns.clone());
        async move {
            open_tablet(spec, t.clone(), dynamic, columns, true)
                .await?
                .try_collect::<Vec<_>>()
                .await
        }
    });
    // One after another: the first tablet picks the statement's snapshot.
    let mut batches = vec![];
    for scan in scans {
        batches.extend(scan.await?);
    }
    let Some(taken) = first_rows_by_key(&batches, &key_positions, limit)? else {
        return Ok(RecordBatch::new_empty(spec.schema.clone()));
    };
    let opts = RecordBatchOptions::new().with_row_count(Some(taken.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        spec.schema.clone(),
        taken.columns()[..spec.columns.len()].to_vec(),
        &opts,
    )?)
}

/// The first `limit` rows in key order of `batches` (of one schema, each tablet's
/// rows already in key order), whose key columns are at `key_positions`; `None` when
/// there are no batches.
pub(crate) fn first_rows_by_key(
    batches: &[RecordBatch],
    key_positions: &[usize],
    limit: usize,
) -> std::result::Result<Option<RecordBatch>, arrow::error::ArrowError> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let all = concat_batches(&first.schema(), batches)?;
    let sort: Vec<SortColumn> = key_positions
        .iter()
        .map(|&i| SortColumn {
            values: all.column(i).clone(),
            options: None,
        })
        .collect();
    let first_rows = lexsort_to_indices(&sort, Some(limit))?;
    Ok(Some(take_record_batch(&all, &first_rows)?))
}

/// Opens the scan of one tablet and returns its batches, reading `columns` (the
/// scan's own, or more for [`first_rows_in_key_order`], whose batches keep the
/// server's schema) in key order if `ordered`. The dynamic filters are read now: the
/// stream is opened on first poll, which for a hash join's probe side is after its
/// build side is complete.
async fn open_tablet(
    spec: Arc<ScanSpec>,
    tablet: TabletLocationInfo,
    dynamic: Vec<Arc<dyn PhysicalExpr>>,
    columns: Vec<String>,
    ordered: bool,
) -> Result<BatchStream> {
    // In a transaction the scan reads its provisional rows too.
    let builder = match &spec.statement.txn {
        Some(t) => t.transaction().scan(&spec.table),
        None => spec.client.scan(&spec.table),
    };
    let mut builder = builder
        .only_tablet(tablet.tablet_id.clone())
        .ordered(ordered);
    if let Some(at) = &spec.read_from {
        builder = builder.prefer_replica(at.clone());
    }
    // Batches of the scan's own columns take its schema; wider ones keep theirs.
    let own_columns = columns == spec.columns;
    // A scan of no columns (count(*)) still needs rows: read the first key column
    // and drop it.
    let count_only = columns.is_empty();
    let columns = if count_only {
        vec![
            spec.table
                .schema
                .column(spec.table.schema.key_indexes()[0])
                .name
                .clone(),
        ]
    } else {
        columns
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
        } else if own_columns {
            // Same columns; take the statement's field names and nullability.
            Ok(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?)
        } else {
            Ok(b)
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
    if let (Some(t), Some(ts)) = (&spec.statement.txn, *chosen) {
        t.note_snapshot(ts);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn int_stats(lo: i64, hi: i64, nulls: u64) -> ColumnStatistics {
        ColumnStatistics {
            column: "x".into(),
            min: Some(Value::Int64(lo)),
            max: Some(Value::Int64(hi)),
            null_count: nulls,
            bytes: 0,
        }
    }

    #[test]
    fn predicates_on_one_column_are_one_range() {
        let st = int_stats(0, 100, 0);
        let preds = [
            ColumnPredicate::ge("x", Value::Int64(50)),
            ColumnPredicate::lt("x", Value::Int64(75)),
            ColumnPredicate::ge("y", Value::Int64(0)),
        ];
        let stats = |c: &str| (c == "x").then(|| st.clone());
        // x in [50, 75): a quarter (not a half times three quarters); y unknown.
        let f = conjunction_selectivity(&preds, stats, 100);
        assert!((f - 0.25 * DEFAULT_SELECTIVITY).abs() < 1e-9, "{f}");
        let none = [
            ColumnPredicate::ge("x", Value::Int64(80)),
            ColumnPredicate::lt("x", Value::Int64(20)),
        ];
        assert_eq!(conjunction_selectivity(&none, stats, 100), 0.0);
    }

    #[test]
    fn selectivity_from_bounds_nulls_or_the_default() {
        let st = int_stats(0, 100, 25);
        let sel = |op: PredicateOp, st: Option<&ColumnStatistics>| {
            predicate_selectivity(
                &ColumnPredicate {
                    column: "x".into(),
                    op,
                },
                st,
                100,
            )
        };
        let range = |lo: i64, hi: i64| PredicateOp::Range {
            lower: Some((Value::Int64(lo), true)),
            upper: Some((Value::Int64(hi), false)),
        };
        assert!((sel(range(0, 25), Some(&st)) - 0.25).abs() < 1e-9);
        assert!((sel(range(-50, 500), Some(&st)) - 1.0).abs() < 1e-9);
        assert_eq!(sel(range(200, 300), Some(&st)), 0.0);
        assert!(
            (sel(PredicateOp::Equality(Value::Int64(3)), Some(&st)) - 1.0 / 101.0).abs() < 1e-9
        );
        assert!((sel(PredicateOp::IsNull, Some(&st)) - 0.25).abs() < 1e-9);
        assert!((sel(PredicateOp::IsNotNull, Some(&st)) - 0.75).abs() < 1e-9);
        assert_eq!(sel(PredicateOp::None, Some(&st)), 0.0);
        // Nothing known, or a type without a numeric scale: the default.
        assert_eq!(sel(range(0, 25), None), DEFAULT_SELECTIVITY);
        let text = ColumnStatistics {
            min: Some(Value::String("a".into())),
            max: Some(Value::String("z".into())),
            ..int_stats(0, 0, 0)
        };
        assert_eq!(
            sel(
                PredicateOp::Equality(Value::String("q".into())),
                Some(&text)
            ),
            DEFAULT_SELECTIVITY
        );
    }
}
