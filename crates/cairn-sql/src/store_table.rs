//! A read-only store as a SQL table: `SELECT … FROM store WHERE key = …`.
//!
//! The columns are the store's key columns, then its value columns. Filters that
//! pin every key column to values (`=` or `IN`, joined by `AND`) are pushed down
//! exactly: the keys are looked up with one batched `get_all` through the ring, as
//! the native client does (the Voldemort read-only paper, §3.1.2). Any other query
//! reads every partition (`StoreScan`, one version throughout) and DataFusion
//! filters. INSERT is refused with a message saying how stores change: a new
//! version is built and pushed.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema as ArrowSchema, SchemaRef};
use cairn_client::{StoreEntry, StoreReader};
use cairn_common::schema::ColumnSpec;
use cairn_common::{PredicateOp, Schema, Value};
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use crate::error::{SqlError, df_err};
use crate::pushdown::translate;

/// The most keys a pushed-down lookup asks for; a larger product of `IN` lists reads
/// the whole store instead.
const MAX_LOOKUP_KEYS: usize = 100_000;

/// A read-only store as a table (module docs).
pub struct StoreTable {
    reader: StoreReader,
    entry: Arc<StoreEntry>,
    /// Key columns then value columns, as Cairn columns (for filter translation).
    columns: Schema,
    schema: SchemaRef,
}

impl StoreTable {
    /// The store's catalog entry (its id and name, for privilege checks).
    pub fn entry(&self) -> &StoreEntry {
        &self.entry
    }
}

impl std::fmt::Debug for StoreTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreTable({})", self.entry.name)
    }
}

/// Distinct values (few: the literals of `=` and `IN` filters).
type ValueSet = Vec<Value>;

fn distinct(values: impl IntoIterator<Item = Value>) -> ValueSet {
    let mut out: ValueSet = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

impl StoreTable {
    /// The table over `reader`'s store.
    pub fn new(reader: StoreReader) -> Result<StoreTable, SqlError> {
        let entry = reader.entry();
        let specs: Vec<ColumnSpec> = entry
            .schema
            .key
            .iter()
            .chain(&entry.schema.value)
            .map(|c| {
                let mut s = ColumnSpec::new(c.name.clone(), c.data_type.clone());
                s.nullable = c.nullable;
                s
            })
            .collect();
        let key: Vec<&str> = entry.schema.key.iter().map(|c| c.name.as_str()).collect();
        let columns = Schema::new(specs, &key).map_err(SqlError::from)?;
        let fields: Vec<Field> = entry
            .schema
            .key
            .iter()
            .chain(&entry.schema.value)
            .map(|c| Field::new(&c.name, c.data_type.to_arrow(), c.nullable))
            .collect();
        Ok(StoreTable {
            reader,
            entry,
            columns,
            schema: Arc::new(ArrowSchema::new(fields)),
        })
    }

    /// Whether `f` is a conjunction of `=` / `IN` tests on key columns.
    fn is_key_filter(&self, f: &Expr) -> bool {
        translate(f, &self.columns).is_some_and(|t| {
            t.exact
                && t.predicates.iter().all(|p| {
                    self.entry.schema.key.iter().any(|k| k.name == p.column)
                        && matches!(p.op, PredicateOp::Equality(_) | PredicateOp::InList(_))
                })
        })
    }

    /// The candidate values of each key column the filters pin, in key order; `None`
    /// if some key column is not pinned.
    fn key_values<'e>(&self, filters: impl IntoIterator<Item = &'e Expr>) -> Option<Vec<ValueSet>> {
        let mut sets: HashMap<&str, ValueSet> = HashMap::new();
        for f in filters.into_iter().filter(|f| self.is_key_filter(f)) {
            for p in translate(f, &self.columns)?.predicates {
                let values: ValueSet = match p.op {
                    PredicateOp::Equality(v) => vec![v],
                    PredicateOp::InList(vs) => distinct(vs),
                    _ => return None,
                };
                let name = self
                    .entry
                    .schema
                    .key
                    .iter()
                    .find(|k| k.name == p.column)?
                    .name
                    .as_str();
                let slot = sets.entry(name).or_insert_with(|| values.clone());
                slot.retain(|v| values.contains(v));
            }
        }
        self.entry
            .schema
            .key
            .iter()
            .map(|k| sets.remove(k.name.as_str()))
            .collect()
    }

    /// The rows of `keys` that exist.
    async fn lookup(&self, keys: Vec<Vec<Value>>) -> Result<Vec<Vec<Value>>> {
        let rows = self.reader.get_all(&keys).await.map_err(df_err)?;
        Ok(keys
            .into_iter()
            .zip(rows)
            .filter_map(|(mut k, r)| {
                r.value.map(|v| {
                    k.extend(v);
                    k
                })
            })
            .collect())
    }

    /// Every row; those whose key is in `pinned` (per key column) when given.
    async fn scan_rows(&self, pinned: Option<&[ValueSet]>) -> Result<Vec<Vec<Value>>> {
        let (_, tuples) = self.reader.scan_all(0).await.map_err(df_err)?;
        let schema = &self.entry.schema;
        let mut rows = Vec::with_capacity(tuples.len());
        for (k, v) in tuples {
            let mut row = schema.decode_key(&k).map_err(|e| self.corrupt(e))?;
            if let Some(sets) = pinned
                && !row.iter().zip(sets).all(|(x, s)| s.contains(x))
            {
                continue;
            }
            row.extend(schema.decode_value(&v).map_err(|e| self.corrupt(e))?);
            rows.push(row);
        }
        Ok(rows)
    }

    /// A tuple that does not decode (SQLSTATE `XX001`, data corrupted).
    fn corrupt(&self, e: cairn_readonly::ReadOnlyError) -> datafusion::error::DataFusionError {
        df_err(SqlError::other(
            "XX001",
            format!(
                "store '{}' sent a tuple that does not decode: {e}",
                self.entry.name
            ),
        ))
    }

    /// `rows` as one batch of the table's schema.
    fn batch(&self, rows: &[Vec<Value>]) -> Result<RecordBatch> {
        let columns = self
            .entry
            .schema
            .key
            .iter()
            .chain(&self.entry.schema.value)
            .enumerate()
            .map(|(i, c)| {
                cairn_common::types::array_from_values(&c.data_type, rows.iter().map(|r| &r[i]))
                    .map_err(|e| df_err(SqlError::from(e)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

#[async_trait::async_trait]
impl TableProvider for StoreTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Pushed down only when the key filters pin every key column together.
        let pinned = self.key_values(filters.iter().copied()).is_some();
        Ok(filters
            .iter()
            .map(|f| {
                if pinned && self.is_key_filter(f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let pinned = self.key_values(filters);
        let rows = match &pinned {
            Some(sets) if sets.iter().map(Vec::len).product::<usize>() <= MAX_LOOKUP_KEYS => {
                // The cartesian product of the pinned values, in key order.
                let mut keys: Vec<Vec<Value>> = vec![vec![]];
                for set in sets {
                    keys = keys
                        .into_iter()
                        .flat_map(|k| {
                            set.iter().map(move |v| {
                                let mut k = k.clone();
                                k.push(v.clone());
                                k
                            })
                        })
                        .collect();
                }
                self.lookup(keys).await?
            }
            Some(sets) => self.scan_rows(Some(sets)).await?,
            None => self.scan_rows(None).await?,
        };
        let batch = self.batch(&rows)?;
        MemTable::try_new(self.schema.clone(), vec![vec![batch]])?
            .scan(state, projection, &[], limit)
            .await
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        _input: Arc<dyn ExecutionPlan>,
        _insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Err(df_err(read_only(&self.entry.name)))
    }
}

/// The error for a write to store `name`.
pub fn read_only(name: &str) -> SqlError {
    SqlError::other(
        "25006",
        format!(
            "'{name}' is a read-only store: build a new version (cairn store build \
             {name} --cluster) and push it (cairn store push), or roll back with cairn \
             store rollback"
        ),
    )
}
