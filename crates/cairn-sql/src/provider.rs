//! `CairnTable`: a Cairn table as a DataFusion `TableProvider`.
//!
//! Reads become a [`CairnScanExec`] with exact pushdown of what the tablets evaluate
//! (see [`crate::pushdown`]), projection and limit pushdown and partition pruning;
//! the primary key is declared as a constraint and per-tablet row estimates as
//! statistics. Writes (INSERT, UPSERT, UPDATE, DELETE) become a [`CairnWriteExec`]:
//! UPDATE and DELETE first scan the matching rows' keys (with the same pushdown), then
//! send keyed mutations in batches.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use cairn_client::{Client, Table, TabletLocationInfo};
use cairn_common::ColumnPredicate;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Constraint, Constraints, Result};
use datafusion::datasource::{TableProvider, TableType, provider_as_source};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, TableProviderFilterPushDown, cast, col};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};

use crate::catalog::TableStatistics;
use crate::error::{SqlError, df_err};
use crate::options::{CairnOptions, InsertMode, StatementContext, parse_read_timestamp};
use crate::partitioning::HashIdentity;
use crate::pushdown::{pushdown_kind, translate};
use crate::scan::{CairnScanExec, ScanSpec};
use crate::search::{SearchSpec, SubspaceSearchExec};
use crate::types::value_to_scalar;
use crate::write::{CairnWriteExec, Requery, WriteKind};

/// A Cairn table for DataFusion.
///
/// SQL sees the table's columns except the hidden auto-incrementing key of a table
/// created without a primary key ([`cairn_common::AUTO_INCREMENTING_ID`]); UPDATE and
/// DELETE read that key through [`CairnTable::with_hidden_columns`] to address rows.
#[derive(Debug, Clone)]
pub struct CairnTable {
    client: Client,
    table: Table,
    /// The table columns this provider exposes, in order (provider column `i` is table
    /// column `visible[i]`).
    visible: Arc<Vec<usize>>,
    schema: SchemaRef,
    constraints: Constraints,
    defaults: HashMap<String, Expr>,
    /// Estimated rows per tablet id (from the tablet servers' reports).
    tablet_stats: TableStatistics,
}

impl CairnTable {
    /// A provider for an open table; `tablet_stats` are its tablets' statistics.
    pub fn new(client: Client, table: Table, tablet_stats: TableStatistics) -> Self {
        let visible = table.schema.visible_indexes();
        let defaults = table
            .schema
            .columns()
            .iter()
            .filter_map(|c| {
                c.default.as_ref().map(|v| {
                    (
                        c.name.clone(),
                        Expr::Literal(value_to_scalar(v, &c.data_type), None),
                    )
                })
            })
            .collect();
        let mut t = CairnTable {
            client,
            table,
            visible: Arc::new(vec![]),
            schema: Arc::new(arrow::datatypes::Schema::empty()),
            constraints: Constraints::default(),
            defaults,
            tablet_stats,
        };
        t.expose(visible);
        t
    }

    /// Exposes table columns `visible` (positions, in order).
    fn expose(&mut self, visible: Vec<usize>) {
        let schema = &self.table.schema;
        let key: Option<Vec<usize>> = schema
            .key_indexes()
            .iter()
            .map(|k| visible.iter().position(|v| v == k))
            .collect();
        self.constraints = match key {
            Some(key) => Constraints::new_unverified(vec![Constraint::PrimaryKey(key)]),
            None => Constraints::default(),
        };
        self.schema = schema.project_arrow(&visible);
        self.visible = Arc::new(visible);
    }

    /// The same table with every column exposed, the hidden key too.
    pub fn with_hidden_columns(&self) -> CairnTable {
        let mut t = self.clone();
        t.expose((0..self.table.schema.num_columns()).collect());
        t
    }

    /// Whether every column of the table is exposed (no hidden key, or
    /// [`CairnTable::with_hidden_columns`]).
    pub fn exposes_all_columns(&self) -> bool {
        self.visible.len() == self.table.schema.num_columns()
    }

    /// The Cairn table behind this provider.
    pub fn table(&self) -> &Table {
        &self.table
    }

    fn options(state: &dyn Session) -> CairnOptions {
        state
            .config_options()
            .extensions
            .get::<CairnOptions>()
            .cloned()
            .unwrap_or_default()
    }

    /// The statement's context, or a fresh one for plans made outside a Cairn session.
    /// A [`SubspaceSearchExec`] for a scan of `indexes` (table columns) under
    /// `predicates`, when the table has a subspace whose regions the predicates narrow
    /// (hyperspace search); `None`: scan the table's own tablets. Statements of a
    /// transaction scan the tablets, which know the transaction's writes.
    fn subspace_search(
        &self,
        state: &dyn Session,
        indexes: &[usize],
        predicates: &[ColumnPredicate],
        limit: Option<usize>,
        schema: &SchemaRef,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if self.table.subspaces.is_empty() || !Self::options(state).subspace_search {
            return Ok(None);
        }
        let statement = Self::statement(state)?;
        if statement.txn.is_some() {
            return Ok(None);
        }
        let searchable = self.table.searchable_subspaces();
        let layouts: Vec<_> = searchable.iter().map(|s| s.layout.clone()).collect();
        let plan = cairn_hyperspace::plan_search(&layouts, predicates)
            .map_err(|e| datafusion::error::DataFusionError::Plan(e.to_string()))?;
        let Some(plan) = plan.filter(|p| (p.regions.len() as u32) < p.total_regions) else {
            return Ok(None);
        };
        let entry = searchable[plan.subspace];
        let desc = format!(
            "subspace=({}) regions={}/{}",
            entry.layout.columns().join(","),
            plan.regions.len(),
            plan.total_regions
        );
        Ok(Some(Arc::new(SubspaceSearchExec::new(SearchSpec {
            client: self.client.clone(),
            table: self.table.clone(),
            columns: indexes.to_vec(),
            predicates: predicates.to_vec(),
            limit,
            plan: desc,
            statement,
            schema: schema.clone(),
            sorted: None,
        }))))
    }

    fn statement(state: &dyn Session) -> Result<Arc<StatementContext>> {
        if let Some(ctx) = state.config().get_extension::<StatementContext>() {
            return Ok(ctx);
        }
        let opts = Self::options(state);
        let fixed = if opts.read_timestamp.is_empty() {
            None
        } else {
            Some(parse_read_timestamp(&opts.read_timestamp).map_err(df_err)?)
        };
        Ok(StatementContext::new(fixed, InsertMode::Insert))
    }

    /// The plan producing the key columns (then `extra` expressions) of the rows
    /// matching `filters`.
    pub(crate) async fn matching_rows(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
        extra: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let source = provider_as_source(Arc::new(self.with_hidden_columns()));
        let mut b = LogicalPlanBuilder::scan(self.table.name.clone(), source, None)?;
        let filters: Vec<Expr> = filters.into_iter().map(unqualify).collect::<Result<_>>()?;
        if let Some(pred) = filters.into_iter().reduce(Expr::and) {
            b = b.filter(pred)?;
        }
        let mut exprs: Vec<Expr> = self
            .table
            .schema
            .key_indexes()
            .iter()
            .map(|&i| {
                col(datafusion::common::Column::new_unqualified(
                    self.table.schema.column(i).name.clone(),
                ))
            })
            .collect();
        exprs.extend(extra);
        let plan = b.project(exprs)?.build()?;
        // Planned in this process: UPDATE and DELETE read their rows here (the
        // session's planner would distribute this plan, and the physical optimizer
        // then rework the distributed plan inside the write).
        DefaultPhysicalPlanner::default()
            .create_physical_plan(&state.optimize(&plan)?, state)
            .await
    }

    fn write_exec(
        &self,
        state: &dyn Session,
        kind: WriteKind,
        input: Arc<dyn ExecutionPlan>,
        requery: Option<Requery>,
    ) -> Arc<dyn ExecutionPlan> {
        let opts = Self::options(state);
        Arc::new(CairnWriteExec::new(
            self.client.clone(),
            self.table.clone(),
            kind,
            input,
            opts.write_batch_rows,
            opts.max_atomic_rows,
            requery,
        ))
    }

    /// How an UPDATE or DELETE reads changed rows again (see [`Requery`]).
    fn requery(&self, state: &dyn Session, filters: &[Expr], extra: &[Expr]) -> Result<Requery> {
        let state = state
            .as_any()
            .downcast_ref::<SessionState>()
            .cloned()
            .ok_or_else(|| {
                df_err(SqlError::other(
                    "XX000",
                    "UPDATE and DELETE need a DataFusion session state",
                ))
            })?;
        Ok(Requery {
            provider: self.clone(),
            state,
            filters: filters.to_vec(),
            extra: extra.to_vec(),
        })
    }
}

/// Removes table qualifiers from column references.
fn unqualify(e: Expr) -> Result<Expr> {
    e.transform_up(|e| {
        Ok(match e {
            Expr::Column(c) if c.relation.is_some() => Transformed::yes(Expr::Column(
                datafusion::common::Column::new_unqualified(c.name),
            )),
            other => Transformed::no(other),
        })
    })
    .map(|t| t.data)
}

/// Cairn's hash partitioning of a scan, when DataFusion may be told of it (see
/// [`crate::partitioning`]): one hash level, one range, every bucket read and the hash
/// columns in the projection. Orders `tablets` by bucket so partition i is bucket i.
fn declared_hash(
    table: &Table,
    all: &[TabletLocationInfo],
    tablets: &mut [TabletLocationInfo],
    projection: &[usize],
) -> Option<(Vec<usize>, HashIdentity)> {
    let ps = &table.partition_schema;
    let [level] = ps.hash_levels.as_slice() else {
        return None;
    };
    let one_range = all
        .iter()
        .all(|t| t.partition.range_lower.is_empty() && t.partition.range_upper.is_empty());
    if !one_range || tablets.len() != all.len() || tablets.len() != level.num_buckets as usize {
        return None;
    }
    tablets.sort_by_key(|t| t.partition.hash_buckets.first().copied());
    let in_order = tablets
        .iter()
        .enumerate()
        .all(|(i, t)| t.partition.hash_buckets.first() == Some(&(i as u32)));
    if !in_order {
        return None;
    }
    let schema = &table.schema;
    let mut columns = vec![];
    let mut types = vec![];
    for name in &level.columns {
        let i = schema.index_of(name).ok()?;
        columns.push(projection.iter().position(|&p| p == i)?);
        types.push(schema.column(i).data_type.clone());
    }
    Some((
        columns,
        HashIdentity {
            types,
            buckets: level.num_buckets,
            seed: level.seed,
        },
    ))
}

#[async_trait::async_trait]
impl TableProvider for CairnTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = &self.table.schema;
        let exposed: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.visible.len()).collect(),
        };
        let out_schema = Arc::new(self.schema.project(&exposed)?);
        // Provider columns to table columns.
        let indexes: Vec<usize> = exposed.iter().map(|&i| self.visible[i]).collect();
        let columns: Vec<String> = indexes
            .iter()
            .map(|&i| schema.column(i).name.clone())
            .collect();
        let mut predicates: Vec<ColumnPredicate> = vec![];
        for f in filters {
            if let Some(t) = translate(f, schema) {
                predicates.extend(t.predicates);
            }
        }
        if let Some(search) =
            self.subspace_search(state, &indexes, &predicates, limit, &out_schema)?
        {
            return Ok(search);
        }
        let locations = self
            .client
            .table_locations(&self.table, false)
            .await
            .map_err(df_err)?;
        let parts: Vec<_> = locations.iter().map(|t| t.partition.clone()).collect();
        let keep = self
            .table
            .partition_schema
            .prune(schema, &parts, &predicates)
            .map_err(|e| df_err(SqlError::from(e)))?;
        let mut tablets: Vec<_> = keep.into_iter().map(|i| locations[i].clone()).collect();
        let hash = declared_hash(&self.table, &locations, &mut tablets, &indexes);
        let tablet_stats = tablets
            .iter()
            .map(|t| self.tablet_stats.get(&t.tablet_id).cloned())
            .collect();
        Ok(Arc::new(CairnScanExec::new(ScanSpec {
            client: self.client.clone(),
            table: self.table.clone(),
            tablets,
            total_tablets: locations.len(),
            tablet_stats,
            columns,
            predicates,
            limit,
            hash,
            statement: Self::statement(state)?,
            schema: out_schema,
            pad_to: 0,
            read_from: None,
        })))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| pushdown_kind(&translate(f, &self.table.schema)))
            .collect())
    }

    fn statistics(&self) -> Option<datafusion::common::Statistics> {
        let rows: u64 = self.tablet_stats.values().map(|t| t.rows).sum();
        let mut s = datafusion::common::Statistics::new_unknown(&self.schema);
        s.num_rows = datafusion::common::stats::Precision::Inexact(rows as usize);
        Some(s)
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mode = match insert_op {
            InsertOp::Append => Self::statement(state)?.insert_mode,
            InsertOp::Replace => InsertMode::Upsert,
            InsertOp::Overwrite => {
                return Err(df_err(SqlError::unsupported(
                    "INSERT OVERWRITE is not supported: DELETE the rows, then INSERT",
                )));
            }
        };
        Ok(self.write_exec(state, WriteKind::Insert(mode), input, None))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let requery = self.requery(state, &filters, &[])?;
        let input = self.matching_rows(state, filters, vec![]).await?;
        Ok(self.write_exec(state, WriteKind::Delete, input, Some(requery)))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = &self.table.schema;
        let mut columns = vec![];
        let mut exprs = vec![];
        for (name, e) in assignments {
            let i = schema
                .index_of(&name)
                .map_err(|e| df_err(SqlError::from(e)))?;
            if schema.is_key_column(i) {
                return Err(df_err(SqlError::unsupported(format!(
                    "cannot UPDATE primary key column '{name}': DELETE the row and INSERT \
                     it with the new key"
                ))));
            }
            let t = schema.column(i).data_type.to_arrow();
            exprs.push(cast(unqualify(e)?, t).alias(name.clone()));
            columns.push(name);
        }
        if columns.is_empty() {
            // Every assignment was `col = col`: nothing changes.
            let input = self
                .matching_rows(
                    state,
                    vec![Expr::Literal(
                        datafusion::common::ScalarValue::Boolean(Some(false)),
                        None,
                    )],
                    vec![],
                )
                .await?;
            return Ok(self.write_exec(state, WriteKind::Delete, input, None));
        }
        let requery = self.requery(state, &filters, &exprs)?;
        let input = self.matching_rows(state, filters, exprs).await?;
        Ok(self.write_exec(state, WriteKind::Update { columns }, input, Some(requery)))
    }
}
