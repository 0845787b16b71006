//! `information_schema`: DataFusion's views plus the constraint views PostgreSQL
//! tools read to find primary keys.
//!
//! DataFusion's own `information_schema` (tables, columns, views, settings, routines)
//! knows nothing of keys. Tools and drivers written for PostgreSQL find a table's
//! primary key by joining `information_schema.table_constraints` (one row per
//! constraint, `constraint_type = 'PRIMARY KEY'`) with `key_column_usage` (one row per
//! key column, with its position in the key), or read `constraint_column_usage`.
//! [`InformationSchema`] is registered as schema `information_schema` of catalog
//! `cairn` in place of DataFusion's: it answers those views from the cluster's
//! tables when they are read, and every other name from DataFusion's provider.
//! `referential_constraints` is empty: Cairn has no foreign keys. Tables keyed by a
//! hidden auto-incrementing column (created without a primary key) have no
//! constraint here, as in `pg_constraint`.

use std::sync::{Arc, Weak};

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, SchemaRef};
use async_trait::async_trait;
use cairn_client::Client;
use datafusion::catalog::information_schema::InformationSchemaProvider;
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::session::{CATALOG, SCHEMA};
use crate::system::{scan_batch, visible_primary_key};

/// The constraint views this module adds.
const VIEWS: [&str; 4] = [
    "table_constraints",
    "key_column_usage",
    "constraint_column_usage",
    "referential_constraints",
];

/// Schema `information_schema`: DataFusion's views and Cairn's constraint views.
pub struct InformationSchema {
    /// The engine's catalogs (weak: they hold this schema).
    catalogs: Weak<dyn CatalogProviderList>,
    client: Client,
}

impl std::fmt::Debug for InformationSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformationSchema").finish_non_exhaustive()
    }
}

impl InformationSchema {
    /// The schema over `catalogs`, reading keys through `client`.
    pub fn new(catalogs: &Arc<dyn CatalogProviderList>, client: Client) -> Self {
        InformationSchema {
            catalogs: Arc::downgrade(catalogs),
            client,
        }
    }

    fn datafusion(&self) -> Option<InformationSchemaProvider> {
        self.catalogs.upgrade().map(InformationSchemaProvider::new)
    }
}

#[async_trait]
impl SchemaProvider for InformationSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self
            .datafusion()
            .map(|d| d.table_names())
            .unwrap_or_default();
        names.extend(VIEWS.iter().map(|v| v.to_string()));
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let lower = name.to_ascii_lowercase();
        if let Some(view) = VIEWS.iter().find(|v| **v == lower) {
            return Ok(Some(Arc::new(ConstraintView {
                view,
                client: self.client.clone(),
                schema: view_schema(view),
            })));
        }
        match self.datafusion() {
            Some(d) => d.table(name).await,
            None => Ok(None),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        VIEWS.contains(&name.to_ascii_lowercase().as_str())
            || self.datafusion().is_some_and(|d| d.table_exist(name))
    }
}

/// The columns of a constraint view, as PostgreSQL names them.
fn view_schema(view: &str) -> SchemaRef {
    let text = |n: &str| Field::new(n, ArrowType::Utf8, true);
    let mut fields = vec![
        text("constraint_catalog"),
        text("constraint_schema"),
        text("constraint_name"),
    ];
    match view {
        "table_constraints" => {
            fields.extend([
                text("table_catalog"),
                text("table_schema"),
                text("table_name"),
                text("constraint_type"),
                text("is_deferrable"),
                text("initially_deferred"),
                text("enforced"),
                text("nulls_distinct"),
            ]);
        }
        "key_column_usage" => {
            fields.extend([
                text("table_catalog"),
                text("table_schema"),
                text("table_name"),
                text("column_name"),
                Field::new("ordinal_position", ArrowType::Int32, true),
                Field::new("position_in_unique_constraint", ArrowType::Int32, true),
            ]);
        }
        "constraint_column_usage" => {
            fields = vec![
                text("table_catalog"),
                text("table_schema"),
                text("table_name"),
                text("column_name"),
                text("constraint_catalog"),
                text("constraint_schema"),
                text("constraint_name"),
            ];
        }
        _ => {
            fields.extend([
                text("unique_constraint_catalog"),
                text("unique_constraint_schema"),
                text("unique_constraint_name"),
                text("match_option"),
                text("update_rule"),
                text("delete_rule"),
            ]);
        }
    }
    Arc::new(ArrowSchema::new(fields))
}

/// One table's primary key: the table name and its key columns in key order.
struct PrimaryKey {
    table: String,
    columns: Vec<String>,
}

impl PrimaryKey {
    fn constraint(&self) -> String {
        format!("{}_pkey", self.table)
    }
}

/// A constraint view, computed from the cluster's tables when scanned.
#[derive(Debug)]
struct ConstraintView {
    view: &'static str,
    client: Client,
    schema: SchemaRef,
}

impl ConstraintView {
    /// Every table's visible primary key, by table name.
    async fn keys(&self) -> Result<Vec<PrimaryKey>> {
        let summaries = self
            .client
            .list_tables()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let mut keys = vec![];
        for summary in summaries {
            if let Some(key) = visible_primary_key(&self.client, &summary.name).await? {
                keys.push(PrimaryKey {
                    table: summary.name,
                    columns: key.into_iter().map(|(_, column)| column).collect(),
                });
            }
        }
        Ok(keys)
    }

    /// The view's rows.
    fn rows(&self, keys: &[PrimaryKey]) -> Result<RecordBatch> {
        let per_column: Vec<(&PrimaryKey, usize)> = keys
            .iter()
            .flat_map(|k| (0..k.columns.len()).map(move |i| (k, i)))
            .collect();
        let text = |v: Vec<Option<String>>| -> ArrayRef { Arc::new(StringArray::from(v)) };
        let same = |s: &str, n: usize| text(vec![Some(s.to_string()); n]);
        let columns: Vec<ArrayRef> = match self.view {
            "table_constraints" => {
                let n = keys.len();
                let names = |f: &dyn Fn(&PrimaryKey) -> String| {
                    text(keys.iter().map(|k| Some(f(k))).collect())
                };
                vec![
                    same(CATALOG, n),
                    same(SCHEMA, n),
                    names(&PrimaryKey::constraint),
                    same(CATALOG, n),
                    same(SCHEMA, n),
                    names(&|k| k.table.clone()),
                    same("PRIMARY KEY", n),
                    same("NO", n),
                    same("NO", n),
                    same("YES", n),
                    text(vec![None; n]),
                ]
            }
            "key_column_usage" | "constraint_column_usage" => {
                let n = per_column.len();
                let constraint = text(
                    per_column
                        .iter()
                        .map(|(k, _)| Some(k.constraint()))
                        .collect(),
                );
                let table = text(
                    per_column
                        .iter()
                        .map(|(k, _)| Some(k.table.clone()))
                        .collect(),
                );
                let column = text(
                    per_column
                        .iter()
                        .map(|(k, i)| Some(k.columns[*i].clone()))
                        .collect(),
                );
                if self.view == "key_column_usage" {
                    vec![
                        same(CATALOG, n),
                        same(SCHEMA, n),
                        constraint,
                        same(CATALOG, n),
                        same(SCHEMA, n),
                        table,
                        column,
                        Arc::new(Int32Array::from_iter_values(
                            per_column.iter().map(|(_, i)| *i as i32 + 1),
                        )),
                        Arc::new(Int32Array::from(vec![None; n])),
                    ]
                } else {
                    vec![
                        same(CATALOG, n),
                        same(SCHEMA, n),
                        table,
                        column,
                        same(CATALOG, n),
                        same(SCHEMA, n),
                        constraint,
                    ]
                }
            }
            // No foreign keys.
            _ => self
                .schema
                .fields()
                .iter()
                .map(|f| arrow::array::new_empty_array(f.data_type()))
                .collect(),
        };
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

#[async_trait]
impl TableProvider for ConstraintView {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let keys = if self.view == "referential_constraints" {
            vec![]
        } else {
            self.keys().await?
        };
        let batch = self.rows(&keys)?;
        scan_batch(&self.schema, batch, state, projection, filters, limit).await
    }
}
