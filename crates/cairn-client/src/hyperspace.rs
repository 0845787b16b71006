//! Hyperspace search (HyperDex §2.3, §3): reading a table through its subspaces.
//!
//! A table created with subspaces ([`CreateTableSpec::subspace`](crate::CreateTableSpec))
//! keeps a full copy of every row in each subspace, in the region its attribute values
//! select; the point leader of each row (its key tablet's leader) keeps the copies up to
//! date by chaining every change through them before it answers the writer. A search
//! plans its predicates onto the subspace that needs the fewest regions
//! ([`cairn_hyperspace::plan_search`]) and scans only those region tablets, at one
//! snapshot, with the predicates pushed down. What a search returns:
//!
//! - every row whose write was acknowledged before the search began (its chain, and
//!   every older chain of the row, had been applied: no region then holds an older live
//!   copy, and the newest is in the region its values select);
//! - each row once: while a change is moving a row between regions, the search may meet
//!   it in both, and keeps the newer version;
//! - rows written concurrently with the search at either their old or their new value.
//!
//! Searches whose predicates constrain no subspace attribute scan the table itself.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use cairn_common::types::RowsToColumns;
use cairn_common::{ColumnPredicate, Schema, Value};
use cairn_hyperspace::{
    REGION_COLUMN, REMOVED_COLUMN, RegionId, SubspaceEntry, VERSION_COLUMN, plan_search,
    region_partitioning, region_table_schema, sorted_groups,
};

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::scan::ReadMode;
use crate::table::Table;

/// How a search was answered (for `EXPLAIN` and the CLI).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchPlanInfo {
    /// The subspace asked.
    pub subspace: String,
    /// Its attributes.
    pub columns: Vec<String>,
    /// How many of its regions were asked.
    pub regions: usize,
    /// How many regions it has.
    pub total_regions: u32,
}

impl std::fmt::Display for SearchPlanInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "subspace=({}) regions={}/{}",
            self.columns.join(","),
            self.regions,
            self.total_regions
        )
    }
}

/// The rows a search found, in the table's schema, and how it found them.
#[derive(Clone, Debug)]
pub struct SearchResult {
    /// The rows (every column of the table), in no particular order.
    pub batch: RecordBatch,
    /// The subspace used; `None`: the table itself was scanned.
    pub plan: Option<SearchPlanInfo>,
}

/// The handle of the region table of subspace `entry` of a table with schema `base`
/// and `replicas` replicas, built from what the entry already says (no master call).
pub fn region_table(base: &Schema, replicas: u32, entry: &SubspaceEntry) -> Result<Table> {
    let schema = region_table_schema(base).map_err(hs_error)?;
    let (partition_schema, _) =
        region_partitioning(entry.layout.region_count()).map_err(hs_error)?;
    Ok(Table {
        id: entry.table_id.clone(),
        name: entry.table_name.clone(),
        schema: Arc::new(schema),
        partition_schema,
        replicas,
        subspaces: vec![],
    })
}

fn hs_error(e: cairn_hyperspace::HyperspaceError) -> ClientError {
    ClientError::InvalidArgument(e.to_string())
}

/// Rows found in a subspace, one per key: the newest version seen.
struct Found {
    schema: Arc<Schema>,
    rows: HashMap<Vec<u8>, (i64, Vec<Value>)>,
}

impl Found {
    fn new(schema: Arc<Schema>) -> Found {
        Found {
            schema,
            rows: HashMap::new(),
        }
    }

    /// Adds the rows of a region-table batch projected to the base columns then the
    /// version.
    fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let n = self.schema.num_columns();
        for r in 0..batch.num_rows() {
            let mut row = Vec::with_capacity(n);
            for (i, c) in self.schema.columns().iter().enumerate() {
                row.push(Value::from_array(
                    batch.column(i).as_ref(),
                    r,
                    &c.data_type,
                )?);
            }
            let version = match Value::from_array(
                batch.column(n).as_ref(),
                r,
                &cairn_common::DataType::Int64,
            )? {
                Value::Int64(v) => v,
                other => {
                    return Err(ClientError::Decode {
                        what: "region row version",
                        detail: format!("expected a BIGINT, got {other:?}"),
                    });
                }
            };
            let key = cairn_common::key::encode_row_key(&self.schema, &row)?;
            match self.rows.get(&key) {
                Some((v, _)) if *v >= version => {}
                _ => {
                    self.rows.insert(key, (version, row));
                }
            }
        }
        Ok(())
    }

    /// How many rows found have a value (not NULL) in column `ci`.
    fn with_value(&self, ci: usize) -> usize {
        self.rows.values().filter(|(_, r)| !r[ci].is_null()).count()
    }

    fn into_rows(self) -> Vec<Vec<Value>> {
        self.rows.into_values().map(|(_, r)| r).collect()
    }
}

/// Builds a batch of `schema`'s columns from rows.
fn to_batch(schema: &Schema, rows: &[Vec<Value>]) -> Result<RecordBatch> {
    let types: Vec<_> = schema
        .columns()
        .iter()
        .map(|c| c.data_type.clone())
        .collect();
    let mut b = RowsToColumns::new(&types, rows.len());
    for r in rows {
        b.append_row(r)?;
    }
    Ok(RecordBatch::try_new(schema.to_arrow(), b.finish()?)?)
}

impl Client {
    /// Scans `regions` of the subspace `entry` of `table` for rows matching `preds`,
    /// adding them to `found`.
    async fn scan_regions(
        &self,
        table: &Table,
        entry: &SubspaceEntry,
        regions: &[RegionId],
        preds: &[ColumnPredicate],
        found: &mut Found,
    ) -> Result<()> {
        if regions.is_empty() {
            return Ok(());
        }
        let region = region_table(&table.schema, table.replicas, entry)?;
        let mut projection: Vec<String> = table
            .schema
            .columns()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        projection.push(VERSION_COLUMN.to_string());
        let mut scan = self
            .scan(&region)
            .projection(projection)
            .read_mode(ReadMode::ReadYourWrites)
            .predicate(ColumnPredicate::in_list(
                REGION_COLUMN,
                regions.iter().map(|&r| Value::Int32(r as i32)).collect(),
            ))
            .predicate(ColumnPredicate::eq(REMOVED_COLUMN, Value::Bool(false)));
        for p in preds {
            scan = scan.predicate(p.clone());
        }
        for b in &scan.execute().await?.batches {
            found.add(b)?;
        }
        Ok(())
    }

    /// HyperDex's `search`: the rows of `table` matching every predicate of `preds`,
    /// read from the subspace that needs the fewest regions (the table itself when no
    /// subspace attribute is constrained). See the module docs for what it returns.
    pub async fn search(&self, table: &Table, preds: &[ColumnPredicate]) -> Result<SearchResult> {
        for p in preds {
            p.validate(&table.schema)?;
        }
        let layouts: Vec<_> = table.subspaces.iter().map(|s| s.layout.clone()).collect();
        let Some(plan) = plan_search(&layouts, preds).map_err(hs_error)? else {
            let mut scan = self.scan(table).read_mode(ReadMode::ReadYourWrites);
            for p in preds {
                scan = scan.predicate(p.clone());
            }
            let result = scan.execute().await?;
            return Ok(SearchResult {
                batch: result.concat()?,
                plan: None,
            });
        };
        let entry = &table.subspaces[plan.subspace];
        let mut found = Found::new(table.schema.clone());
        self.scan_regions(table, entry, &plan.regions, preds, &mut found)
            .await?;
        let info = SearchPlanInfo {
            subspace: entry.layout.name.clone(),
            columns: entry
                .layout
                .columns()
                .iter()
                .map(|c| c.to_string())
                .collect(),
            regions: plan.regions.len(),
            total_regions: plan.total_regions,
        };
        Ok(SearchResult {
            batch: to_batch(&table.schema, &found.into_rows())?,
            plan: Some(info),
        })
    }

    /// HyperDex's `count`: how many rows of `table` match `preds` (a search that keeps
    /// only the count).
    pub async fn count(&self, table: &Table, preds: &[ColumnPredicate]) -> Result<u64> {
        Ok(self.search(table, preds).await?.batch.num_rows() as u64)
    }

    /// HyperDex's `sorted_search`: the first `limit` rows matching `preds` ordered by
    /// `column` (ascending or descending; NULLs last). When a subspace has `column` as an
    /// ordered attribute, its regions are read one interval of `column` at a time, in
    /// order, and the search stops once it holds `limit` rows: the intervals not yet
    /// read hold only values further along. Otherwise it searches and sorts.
    pub async fn sorted_search(
        &self,
        table: &Table,
        preds: &[ColumnPredicate],
        column: &str,
        limit: usize,
        ascending: bool,
    ) -> Result<SearchResult> {
        let ci = table.schema.index_of(column)?;
        let mut chosen = None;
        for (i, entry) in table.subspaces.iter().enumerate() {
            if let Some(groups) =
                sorted_groups(&entry.layout, preds, column, ascending).map_err(hs_error)?
            {
                let regions: usize = groups.iter().map(Vec::len).sum();
                if chosen.as_ref().is_none_or(|(_, _, n)| regions < *n) {
                    chosen = Some((i, groups, regions));
                }
            }
        }
        let (mut rows, plan) = match chosen {
            None => {
                let r = self.search(table, preds).await?;
                let mut rows = Vec::with_capacity(r.batch.num_rows());
                for i in 0..r.batch.num_rows() {
                    let mut row = Vec::with_capacity(table.schema.num_columns());
                    for (c, col) in table.schema.columns().iter().enumerate() {
                        row.push(Value::from_array(
                            r.batch.column(c).as_ref(),
                            i,
                            &col.data_type,
                        )?);
                    }
                    rows.push(row);
                }
                (rows, r.plan)
            }
            Some((i, groups, _)) => {
                let entry = &table.subspaces[i];
                let mut found = Found::new(table.schema.clone());
                let mut asked = 0;
                for g in &groups {
                    self.scan_regions(table, entry, g, preds, &mut found)
                        .await?;
                    asked += g.len();
                    // NULLs sort last, so only rows with a value count towards the
                    // limit (interval 0 holds the NULLs).
                    if found.with_value(ci) >= limit {
                        break;
                    }
                }
                let info = SearchPlanInfo {
                    subspace: entry.layout.name.clone(),
                    columns: entry
                        .layout
                        .columns()
                        .iter()
                        .map(|c| c.to_string())
                        .collect(),
                    regions: asked,
                    total_regions: entry.layout.region_count(),
                };
                (found.into_rows(), Some(info))
            }
        };
        rows.sort_by(|a, b| {
            let (x, y) = (&a[ci], &b[ci]);
            match (x.is_null(), y.is_null()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ => {
                    let o = x.partial_cmp_same(y).unwrap_or(std::cmp::Ordering::Equal);
                    if ascending { o } else { o.reverse() }
                }
            }
        });
        rows.truncate(limit);
        Ok(SearchResult {
            batch: to_batch(&table.schema, &rows)?,
            plan,
        })
    }
}
