//! PostgreSQL's system catalog (`pg_catalog`), completed with Cairn's primary keys.
//!
//! `datafusion-pg-catalog` serves `pg_class`, `pg_attribute`, `pg_namespace` and the
//! rest from the session's tables, but ships `pg_index` and `pg_constraint` as fixed
//! copies of an empty PostgreSQL database: a client asking for a table's primary key
//! finds none. [`SystemCatalog`] wraps that schema and answers three tables itself:
//!
//! - `pg_class`: the library's rows, plus one index relation (`relkind 'i'`, named
//!   `<table>_pkey`, access method btree) per Cairn table, and `relhasindex` true on
//!   Cairn tables (psql only looks for indexes when it is);
//! - `pg_index`: one row per primary key (`indisprimary`, `indisunique`, `indkey`
//!   the key columns' numbers, as an array);
//! - `pg_constraint`: one `contype 'p'` row per primary key, with `conkey` as an
//!   array of column numbers (so `unnest(conkey)` works as in PostgreSQL).
//!
//! Object ids: a table keeps the oid the library gives it in `pg_class`; its key
//! index is that oid plus [`INDEX_OID_OFFSET`] and its constraint that oid plus
//! [`CONSTRAINT_OID_OFFSET`], so every catalog query of a session agrees on them.
//! `pg_get_indexdef` and `pg_get_constraintdef` read the definitions of the keys seen
//! by the last catalog scan (psql and drivers always scan the tables first).
//!
//! Unqualified `pg_…` names (`FROM pg_type`, as psycopg writes) resolve here too, as
//! PostgreSQL searches `pg_catalog` before the user's schema.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Int16Array, Int16Builder, Int32Array, ListBuilder, RecordBatch,
    StringArray, UInt32Array,
};
use arrow::compute::{cast, concat_batches, take};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, SchemaRef};
use async_trait::async_trait;
use cairn_client::Client;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_plan::{ExecutionPlan, collect};
use parking_lot::RwLock;

/// What an index's oid adds to its table's.
pub const INDEX_OID_OFFSET: i32 = 1_000_000_000;
/// What a primary-key constraint's oid adds to its table's.
pub const CONSTRAINT_OID_OFFSET: i32 = 1_500_000_000;

/// One Cairn table's primary key, as the catalog shows it.
#[derive(Debug, Clone)]
struct Key {
    /// The table's oid (from the library's `pg_class`).
    table_oid: i32,
    /// The table's name.
    table: String,
    /// Key columns: (1-based column number, name), in key order.
    columns: Vec<(i16, String)>,
}

impl Key {
    fn index_name(&self) -> String {
        format!("{}_pkey", self.table)
    }
    fn column_list(&self) -> String {
        let names: Vec<&str> = self.columns.iter().map(|(_, n)| n.as_str()).collect();
        names.join(", ")
    }
}

/// Definitions by oid for `pg_get_indexdef` / `pg_get_constraintdef`, refreshed by
/// every scan of the key tables.
#[derive(Debug, Default)]
struct Definitions {
    index: HashMap<i64, String>,
    constraint: HashMap<i64, String>,
}

/// The `pg_catalog` schema: the library's, with keys (see the module doc).
pub struct SystemCatalog {
    inner: Arc<dyn SchemaProvider>,
    client: Client,
    defs: Arc<RwLock<Definitions>>,
}

impl fmt::Debug for SystemCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemCatalog").finish_non_exhaustive()
    }
}

impl SystemCatalog {
    /// Wraps the library's `pg_catalog` schema.
    pub fn new(inner: Arc<dyn SchemaProvider>, client: Client) -> Self {
        SystemCatalog {
            inner,
            client,
            defs: Arc::default(),
        }
    }

    /// `pg_get_indexdef` and `pg_get_constraintdef`, answering for Cairn's keys (and
    /// with NULL for any other oid, as PostgreSQL does for unknown ones).
    pub fn functions(&self) -> Vec<ScalarUDF> {
        vec![
            ScalarUDF::new_from_impl(DefinitionFn::new("pg_get_indexdef", self.defs.clone())),
            ScalarUDF::new_from_impl(DefinitionFn::new("pg_get_constraintdef", self.defs.clone())),
            to_regtype(),
            visible("pg_collation_is_visible"),
            no_function_text("pg_get_function_result"),
            no_function_text("pg_get_function_arguments"),
            no_function_text("pg_get_function_identity_arguments"),
            no_column_comment(),
            pg_size_pretty(),
            visible("pg_function_is_visible"),
            visible("pg_type_is_visible"),
            ScalarUDF::new_from_impl(JsonBuildObject::default()),
        ]
    }

    /// Collects all rows of one of the library's tables.
    async fn rows(&self, state: &dyn Session, name: &str) -> Result<(SchemaRef, RecordBatch)> {
        let Some(table) = self.inner.table(name).await? else {
            return exec_err!("pg_catalog.{name} is missing");
        };
        let plan: Arc<dyn ExecutionPlan> = table.scan(state, None, &[], None).await?;
        let schema = plan.schema();
        let batches = collect(plan, state.task_ctx()).await?;
        let batch = concat_batches(&schema, &batches)?;
        Ok((schema, batch))
    }

    /// `pg_class`'s rows and the primary keys of Cairn's tables, with their oids.
    async fn keys(&self, state: &dyn Session) -> Result<(SchemaRef, RecordBatch, Vec<Key>)> {
        let (schema, class) = self.rows(state, "pg_class").await?;
        let (_, namespaces) = self.rows(state, "pg_namespace").await?;
        let public = oid_of(&namespaces, "nspname", crate::session::SCHEMA)?;
        let oids = int32_column(&class, "oid")?;
        let names = string_column(&class, "relname")?;
        let spaces = int32_column(&class, "relnamespace")?;
        let mut keys = Vec::new();
        for row in 0..class.num_rows() {
            if Some(spaces.value(row)) != public {
                continue;
            }
            let name = names.value(row);
            let Some(key) = visible_primary_key(&self.client, name).await? else {
                continue;
            };
            let key_columns = key
                .into_iter()
                .map(|(i, column)| (i16::try_from(i + 1).unwrap_or(i16::MAX), column))
                .collect();
            keys.push(Key {
                table_oid: oids.value(row),
                table: name.to_string(),
                columns: key_columns,
            });
        }
        let mut defs = self.defs.write();
        defs.index.clear();
        defs.constraint.clear();
        for k in &keys {
            let index = i64::from(k.table_oid) + i64::from(INDEX_OID_OFFSET);
            let constraint = i64::from(k.table_oid) + i64::from(CONSTRAINT_OID_OFFSET);
            defs.index.insert(
                index,
                format!(
                    "CREATE UNIQUE INDEX {} ON {}.{} USING btree ({})",
                    k.index_name(),
                    crate::session::SCHEMA,
                    k.table,
                    k.column_list()
                ),
            );
            defs.constraint
                .insert(constraint, format!("PRIMARY KEY ({})", k.column_list()));
        }
        drop(defs);
        Ok((schema, class, keys))
    }

    /// `pg_class` with an index relation per key and `relhasindex` set on keyed
    /// tables.
    async fn pg_class(&self, state: &dyn Session) -> Result<RecordBatch> {
        let (schema, class, keys) = self.keys(state).await?;
        let oids = int32_column(&class, "oid")?;
        let keyed: HashMap<i32, &Key> = keys.iter().map(|k| (k.table_oid, k)).collect();
        // The tables' own rows, with relhasindex set where they have a key.
        let has_index: BooleanArray = (0..class.num_rows())
            .map(|row| {
                let had = bool_column(&class, "relhasindex")
                    .map(|c| c.value(row))
                    .unwrap_or(false);
                Some(had || keyed.contains_key(&oids.value(row)))
            })
            .collect();
        let tables = replace(&class, &[("relhasindex", Arc::new(has_index))])?;
        // One index row per key: a copy of its table's row with the index's fields.
        let rows: UInt32Array = (0..class.num_rows())
            .filter(|&row| keyed.contains_key(&oids.value(row)))
            .map(|row| u32::try_from(row).ok())
            .collect();
        let columns = class
            .columns()
            .iter()
            .map(|c| take(c, &rows, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let copies = RecordBatch::try_new(schema.clone(), columns)?;
        let index_keys: Vec<&Key> = (0..copies.num_rows())
            .filter_map(|row| {
                keyed
                    .get(&int32_column(&copies, "oid").ok()?.value(row))
                    .copied()
            })
            .collect();
        let n = index_keys.len();
        let int32 = |f: &dyn Fn(&Key) -> i32| -> ArrayRef {
            Arc::new(Int32Array::from_iter_values(
                index_keys.iter().map(|k| f(k)),
            ))
        };
        let indexes = replace(
            &copies,
            &[
                ("oid", int32(&|k| k.table_oid + INDEX_OID_OFFSET)),
                (
                    "relname",
                    Arc::new(StringArray::from_iter_values(
                        index_keys.iter().map(|k| k.index_name()),
                    )),
                ),
                ("relkind", Arc::new(StringArray::from(vec!["i"; n]))),
                ("relam", int32(&|_| BTREE_AM_OID)),
                ("reltype", int32(&|_| 0)),
                ("relhasindex", Arc::new(BooleanArray::from(vec![false; n]))),
                (
                    "relnatts",
                    Arc::new(Int16Array::from_iter_values(
                        index_keys
                            .iter()
                            .map(|k| i16::try_from(k.columns.len()).unwrap_or(i16::MAX)),
                    )),
                ),
            ],
        )?;
        let batch = concat_batches(&schema, &[tables, indexes])?;
        // reloptions: no storage options on any relation.
        let mut columns = batch.columns().to_vec();
        if schema.index_of("reloptions").is_err() {
            columns.push(arrow::array::new_null_array(
                &reloptions_type(),
                batch.num_rows(),
            ));
        }
        Ok(RecordBatch::try_new(with_reloptions(&schema), columns)?)
    }

    /// `pg_index`: one row per primary key.
    async fn pg_index(&self, state: &dyn Session) -> Result<RecordBatch> {
        let (_, _, keys) = self.keys(state).await?;
        let schema = pg_index_schema();
        let n = keys.len();
        let t = || Arc::new(BooleanArray::from(vec![true; n])) as ArrayRef;
        let f = || Arc::new(BooleanArray::from(vec![false; n])) as ArrayRef;
        let nkeys = || -> ArrayRef {
            Arc::new(Int16Array::from_iter_values(
                keys.iter()
                    .map(|k| i16::try_from(k.columns.len()).unwrap_or(i16::MAX)),
            ))
        };
        // int2vector / oidvector columns, as arrays with one element per key column.
        let vector = |each: &dyn Fn(i16) -> i16| -> ArrayRef {
            let mut list = ListBuilder::new(Int16Builder::new());
            for k in &keys {
                for (number, _) in &k.columns {
                    list.values().append_value(each(*number));
                }
                list.append(true);
            }
            Arc::new(list.finish())
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from_iter_values(
                keys.iter().map(|k| k.table_oid + INDEX_OID_OFFSET),
            )),
            Arc::new(Int32Array::from_iter_values(
                keys.iter().map(|k| k.table_oid),
            )),
            nkeys(),
            nkeys(),
            t(), // indisunique
            f(), // indnullsnotdistinct
            t(), // indisprimary
            f(), // indisexclusion
            t(), // indimmediate
            f(), // indisclustered
            t(), // indisvalid
            f(), // indcheckxmin
            t(), // indisready
            t(), // indislive
            f(), // indisreplident
            vector(&|n| n),
            vector(&|_| 0),
            vector(&|_| 0),
            vector(&|_| 0),
            Arc::new(StringArray::from(vec![None::<&str>; n])),
            Arc::new(StringArray::from(vec![None::<&str>; n])),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// `pg_constraint`: one `p` row per primary key.
    async fn pg_constraint(&self, state: &dyn Session) -> Result<RecordBatch> {
        let (_, namespaces) = self.rows(state, "pg_namespace").await?;
        let public = oid_of(&namespaces, "nspname", crate::session::SCHEMA)?.unwrap_or(0);
        let (_, _, keys) = self.keys(state).await?;
        let schema = pg_constraint_schema();
        let n = keys.len();
        let text = |v: &str| Arc::new(StringArray::from(vec![v; n])) as ArrayRef;
        let none = || Arc::new(StringArray::from(vec![None::<&str>; n])) as ArrayRef;
        let int32 = |f: &dyn Fn(&Key) -> i32| -> ArrayRef {
            Arc::new(Int32Array::from_iter_values(keys.iter().map(f)))
        };
        let boolean = |v: bool| Arc::new(BooleanArray::from(vec![v; n])) as ArrayRef;
        let mut conkey = ListBuilder::new(Int16Builder::new());
        for k in &keys {
            for (number, _) in &k.columns {
                conkey.values().append_value(*number);
            }
            conkey.append(true);
        }
        let columns: Vec<ArrayRef> = vec![
            int32(&|k| k.table_oid + CONSTRAINT_OID_OFFSET),
            Arc::new(StringArray::from_iter_values(
                keys.iter().map(|k| k.index_name()),
            )),
            int32(&|_| public),
            text("p"),
            boolean(false), // condeferrable
            boolean(false), // condeferred
            boolean(true),  // convalidated
            int32(&|k| k.table_oid),
            int32(&|_| 0), // contypid
            int32(&|k| k.table_oid + INDEX_OID_OFFSET),
            int32(&|_| 0), // conparentid
            int32(&|_| 0), // confrelid
            text(" "),
            text(" "),
            text(" "),
            boolean(true), // conislocal
            Arc::new(Int16Array::from(vec![0; n])),
            boolean(true), // connoinherit
            Arc::new(conkey.finish()),
            none(),
            none(),
            none(),
            none(),
            none(),
            none(),
            none(),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// PostgreSQL's oid of the btree access method (`pg_am`).
const BTREE_AM_OID: i32 = 403;

#[async_trait]
impl SchemaProvider for SystemCatalog {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let which = match name.to_ascii_lowercase().as_str() {
            "pg_class" => KeyTable::Class,
            "pg_index" => KeyTable::Index,
            "pg_constraint" => KeyTable::Constraint,
            _ => return self.inner.table(name).await,
        };
        let schema = match which {
            KeyTable::Class => match self.inner.table("pg_class").await? {
                Some(t) => with_reloptions(&t.schema()),
                None => return Ok(None),
            },
            KeyTable::Index => pg_index_schema(),
            KeyTable::Constraint => pg_constraint_schema(),
        };
        Ok(Some(Arc::new(KeyTableProvider {
            catalog: SystemCatalog {
                inner: self.inner.clone(),
                client: self.client.clone(),
                defs: self.defs.clone(),
            },
            which,
            schema,
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// Which of the key-bearing tables a [`KeyTableProvider`] serves.
#[derive(Debug, Clone, Copy)]
enum KeyTable {
    Class,
    Index,
    Constraint,
}

/// `pg_class`, `pg_index` or `pg_constraint`, computed when scanned.
#[derive(Debug)]
struct KeyTableProvider {
    catalog: SystemCatalog,
    which: KeyTable,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for KeyTableProvider {
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
        let batch = match self.which {
            KeyTable::Class => self.catalog.pg_class(state).await?,
            KeyTable::Index => self.catalog.pg_index(state).await?,
            KeyTable::Constraint => self.catalog.pg_constraint(state).await?,
        };
        scan_batch(&self.schema, batch, state, projection, filters, limit).await
    }
}

/// The primary key SQL sees of table `name`: (column position, name) in key order.
/// `None` when the table was dropped meanwhile, or is keyed by a hidden
/// auto-incrementing column only (no key SQL can see).
pub(crate) async fn visible_primary_key(
    client: &Client,
    name: &str,
) -> Result<Option<Vec<(usize, String)>>> {
    let table = match client.open_table(name).await {
        Ok(t) => t,
        Err(cairn_client::ClientError::TableNotFound(_)) => return Ok(None),
        Err(e) => return Err(DataFusionError::External(Box::new(e))),
    };
    let schema = &table.schema;
    if schema.auto_id_index().is_some() {
        return Ok(None);
    }
    Ok(Some(
        schema
            .key_indexes()
            .iter()
            .map(|&i| (i, schema.column(i).name.clone()))
            .collect(),
    ))
}

/// Scans `batch` (computed when a catalog view is read) as a table with `schema`.
pub(crate) async fn scan_batch(
    schema: &SchemaRef,
    batch: RecordBatch,
    state: &dyn Session,
    projection: Option<&Vec<usize>>,
    filters: &[Expr],
    limit: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    MemTable::try_new(schema.clone(), vec![vec![batch]])?
        .scan(state, projection, filters, limit)
        .await
}

/// PostgreSQL's `pg_class.reloptions` (`text[]`), which the library leaves out.
fn reloptions_type() -> ArrowType {
    ArrowType::List(Arc::new(Field::new_list_field(ArrowType::Utf8, true)))
}

/// `pg_class`'s schema with `reloptions` added (if the library has not).
fn with_reloptions(schema: &SchemaRef) -> SchemaRef {
    if schema.index_of("reloptions").is_ok() {
        return schema.clone();
    }
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("reloptions", reloptions_type(), true));
    Arc::new(ArrowSchema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// `pg_index`'s columns, as the library declares them.
fn pg_index_schema() -> SchemaRef {
    let mut fields = vec![oid_field("indexrelid"), oid_field("indrelid")];
    fields.push(Field::new("indnatts", ArrowType::Int16, false));
    fields.push(Field::new("indnkeyatts", ArrowType::Int16, false));
    for flag in [
        "indisunique",
        "indnullsnotdistinct",
        "indisprimary",
        "indisexclusion",
        "indimmediate",
        "indisclustered",
        "indisvalid",
        "indcheckxmin",
        "indisready",
        "indislive",
        "indisreplident",
    ] {
        fields.push(Field::new(flag, ArrowType::Boolean, false));
    }
    for vector in ["indkey", "indcollation", "indclass", "indoption"] {
        fields.push(Field::new(vector, int2_list(), false));
    }
    fields.push(Field::new("indexprs", ArrowType::Utf8, true));
    fields.push(Field::new("indpred", ArrowType::Utf8, true));
    Arc::new(ArrowSchema::new(fields))
}

/// `pg_constraint`'s columns; `conkey` is an array of column numbers, as in
/// PostgreSQL.
fn pg_constraint_schema() -> SchemaRef {
    let text = |name: &str| Field::new(name, ArrowType::Utf8, false);
    let fields = vec![
        oid_field("oid"),
        text("conname"),
        oid_field("connamespace"),
        text("contype"),
        Field::new("condeferrable", ArrowType::Boolean, false),
        Field::new("condeferred", ArrowType::Boolean, false),
        Field::new("convalidated", ArrowType::Boolean, false),
        oid_field("conrelid"),
        oid_field("contypid"),
        oid_field("conindid"),
        oid_field("conparentid"),
        oid_field("confrelid"),
        text("confupdtype"),
        text("confdeltype"),
        text("confmatchtype"),
        Field::new("conislocal", ArrowType::Boolean, false),
        Field::new("coninhcount", ArrowType::Int16, false),
        Field::new("connoinherit", ArrowType::Boolean, false),
        Field::new("conkey", int2_list(), true),
        Field::new("confkey", ArrowType::Utf8, true),
        Field::new("conpfeqop", ArrowType::Utf8, true),
        Field::new("conppeqop", ArrowType::Utf8, true),
        Field::new("conffeqop", ArrowType::Utf8, true),
        Field::new("confdelsetcols", ArrowType::Utf8, true),
        Field::new("conexclop", ArrowType::Utf8, true),
        Field::new("conbin", ArrowType::Utf8, true),
    ];
    Arc::new(ArrowSchema::new(fields))
}

/// An array of int2 (PostgreSQL's `int2[]`, also standing for `int2vector` and
/// `oidvector`, which clients unnest like arrays).
fn int2_list() -> ArrowType {
    ArrowType::List(Arc::new(Field::new_list_field(ArrowType::Int16, true)))
}

/// An oid column, marked as the library marks them (string literals compared with it
/// resolve as PostgreSQL's do).
fn oid_field(name: &str) -> Field {
    datafusion_pg_catalog::pg_catalog::oid_field::oid_field(
        name,
        datafusion_pg_catalog::pg_catalog::oid_field::kind::OID,
        false,
    )
}

/// `batch` with some columns replaced (cast to the column's type).
fn replace(batch: &RecordBatch, with: &[(&str, ArrayRef)]) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut columns = batch.columns().to_vec();
    for (name, array) in with {
        let i = schema.index_of(name)?;
        columns[i] = cast(array, schema.field(i).data_type())?;
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    let i = batch.schema().index_of(name)?;
    Ok(batch.column(i))
}

fn int32_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a Int32Array> {
    match column(batch, name)?.as_any().downcast_ref::<Int32Array>() {
        Some(a) => Ok(a),
        None => exec_err!("pg_catalog column {name} is not int4"),
    }
}

fn string_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    match column(batch, name)?.as_any().downcast_ref::<StringArray>() {
        Some(a) => Ok(a),
        None => exec_err!("pg_catalog column {name} is not text"),
    }
}

fn bool_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a BooleanArray> {
    match column(batch, name)?.as_any().downcast_ref::<BooleanArray>() {
        Some(a) => Ok(a),
        None => exec_err!("pg_catalog column {name} is not bool"),
    }
}

/// The oid of the row whose `name_column` is `name`.
fn oid_of(batch: &RecordBatch, name_column: &str, name: &str) -> Result<Option<i32>> {
    let names = string_column(batch, name_column)?;
    let oids = int32_column(batch, "oid")?;
    Ok((0..batch.num_rows())
        .find(|&r| names.value(r) == name)
        .map(|r| oids.value(r)))
}

/// The oid of a built-in type by any of its PostgreSQL names, `None` for others.
fn builtin_type_oid(name: &str) -> Option<i32> {
    let name = name
        .trim()
        .trim_start_matches("pg_catalog.")
        .to_ascii_lowercase();
    Some(match name.as_str() {
        "bool" | "boolean" => 16,
        "bytea" => 17,
        "char" => 18,
        "name" => 19,
        "int8" | "bigint" => 20,
        "int2" | "smallint" => 21,
        "int4" | "integer" | "int" => 23,
        "text" => 25,
        "oid" => 26,
        "json" => 114,
        "float4" | "real" => 700,
        "float8" | "double precision" => 701,
        "bpchar" | "character" => 1042,
        "varchar" | "character varying" => 1043,
        "date" => 1082,
        "time" | "time without time zone" => 1083,
        "timestamp" | "timestamp without time zone" => 1114,
        "timestamptz" | "timestamp with time zone" => 1184,
        "interval" => 1186,
        "numeric" | "decimal" => 1700,
        "uuid" => 2950,
        "jsonb" => 3802,
        _ => return None,
    })
}

/// `to_regtype(name)`: a type's oid, NULL when there is no such type (psycopg and
/// SQLAlchemy look up optional types such as `hstore` this way at connect time).
fn to_regtype() -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        "to_regtype",
        vec![ArrowType::Utf8],
        ArrowType::Int32,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let Some(arg) = args.first() else {
                return exec_err!("to_regtype needs a type name");
            };
            let names = arg.to_array(1)?;
            let names = cast(&names, &ArrowType::Utf8)?;
            let Some(names) = names.as_any().downcast_ref::<StringArray>() else {
                return exec_err!("to_regtype takes text");
            };
            let oids: Int32Array = names.iter().map(|n| n.and_then(builtin_type_oid)).collect();
            Ok(match arg {
                ColumnarValue::Scalar(_) => {
                    ColumnarValue::Scalar(ScalarValue::try_from_array(&oids, 0)?)
                }
                ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(oids)),
            })
        }),
    )
}

/// `pg_…_is_visible(oid)`: true (Cairn has one schema, always on the search path).
fn visible(name: &str) -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        name,
        vec![ArrowType::Int32],
        ArrowType::Boolean,
        Volatility::Stable,
        Arc::new(|_: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))),
    )
}

/// `pg_get_function_…(oid)`: NULL. Cairn has no user-defined functions, and psql's
/// `\df` lists only those (it leaves out `pg_catalog`).
fn no_function_text(name: &str) -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        name,
        vec![ArrowType::Int32],
        ArrowType::Utf8,
        Volatility::Stable,
        Arc::new(|_: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    )
}

/// `col_description(table oid, column number)`: a column's comment, always NULL
/// (Cairn has no `COMMENT ON`), as psql's `\d+` shows it.
fn no_column_comment() -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        "col_description",
        vec![ArrowType::Int32, ArrowType::Int32],
        ArrowType::Utf8,
        Volatility::Stable,
        Arc::new(|_: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    )
}

/// A byte count as PostgreSQL's `pg_size_pretty` writes it: bytes below 10 kB, then
/// the largest unit (kB, MB, GB, TB) that keeps the number below 20,480 halves,
/// rounded half away from zero.
fn size_pretty(bytes: i64) -> String {
    if bytes.abs() < 10 * 1024 {
        return format!("{bytes} bytes");
    }
    // The size in halves of the unit, as PostgreSQL counts it.
    let mut half = bytes / 512;
    let units = ["kB", "MB", "GB", "TB", "PB"];
    let mut unit = 0;
    while half.abs() >= 20 * 1024 - 1 && unit + 1 < units.len() {
        half /= 1024;
        unit += 1;
    }
    let rounded = (half + if half < 0 { -1 } else { 1 }) / 2;
    format!("{rounded} {}", units[unit])
}

/// `pg_size_pretty(bigint)`, as psql's `\dt+` calls it.
fn pg_size_pretty() -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        "pg_size_pretty",
        vec![ArrowType::Int64],
        ArrowType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let Some(arg) = args.first() else {
                return exec_err!("pg_size_pretty needs a size");
            };
            let sizes = cast(&arg.to_array(1)?, &ArrowType::Int64)?;
            let Some(sizes) = sizes.as_any().downcast_ref::<arrow::array::Int64Array>() else {
                return exec_err!("pg_size_pretty takes bigint");
            };
            let out: StringArray = sizes.iter().map(|s| s.map(size_pretty)).collect();
            Ok(match arg {
                ColumnarValue::Scalar(_) => {
                    ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
                }
                ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(out)),
            })
        }),
    )
}

/// `json_build_object(key, value, ...)`: a JSON object as text.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl Default for JsonBuildObject {
    fn default() -> Self {
        JsonBuildObject {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

/// A SQL value as JSON.
fn json_value(v: &ScalarValue) -> serde_json::Value {
    use serde_json::Value as J;
    if v.is_null() {
        return J::Null;
    }
    match v {
        ScalarValue::Boolean(Some(b)) => J::Bool(*b),
        ScalarValue::Int8(Some(_))
        | ScalarValue::Int16(Some(_))
        | ScalarValue::Int32(Some(_))
        | ScalarValue::Int64(Some(_))
        | ScalarValue::UInt8(Some(_))
        | ScalarValue::UInt16(Some(_))
        | ScalarValue::UInt32(Some(_))
        | ScalarValue::UInt64(Some(_))
        | ScalarValue::Float32(Some(_))
        | ScalarValue::Float64(Some(_)) => {
            serde_json::from_str(&v.to_string()).unwrap_or_else(|_| J::String(v.to_string()))
        }
        _ => match v.cast_to(&ArrowType::Utf8) {
            Ok(ScalarValue::Utf8(Some(s))) => J::String(s),
            _ => J::String(v.to_string()),
        },
    }
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[ArrowType]) -> Result<ArrowType> {
        Ok(ArrowType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return exec_err!("json_build_object takes pairs of keys and values");
        }
        let n = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(n);
        for row in 0..n {
            let mut object = serde_json::Map::new();
            for pair in arrays.chunks(2) {
                let key = ScalarValue::try_from_array(&pair[0], row)?;
                if key.is_null() {
                    return exec_err!("json_build_object: a key is NULL");
                }
                let key = match key.cast_to(&ArrowType::Utf8)? {
                    ScalarValue::Utf8(Some(k)) => k,
                    other => other.to_string(),
                };
                let value = ScalarValue::try_from_array(&pair[1], row)?;
                object.insert(key, json_value(&value));
            }
            out.push(serde_json::Value::Object(object).to_string());
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

/// `pg_get_indexdef(oid [, column, pretty])` or `pg_get_constraintdef(oid [,
/// pretty])`: the definition of a Cairn key, NULL for other oids.
#[derive(Debug)]
struct DefinitionFn {
    name: &'static str,
    signature: Signature,
    defs: Arc<RwLock<Definitions>>,
}

impl PartialEq for DefinitionFn {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for DefinitionFn {}
impl std::hash::Hash for DefinitionFn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl DefinitionFn {
    fn new(name: &'static str, defs: Arc<RwLock<Definitions>>) -> Self {
        DefinitionFn {
            name,
            signature: Signature::variadic_any(Volatility::Stable),
            defs,
        }
    }

    fn lookup(&self, oid: i64) -> Option<String> {
        let defs = self.defs.read();
        let map = if self.name == "pg_get_indexdef" {
            &defs.index
        } else {
            &defs.constraint
        };
        map.get(&oid).cloned()
    }
}

impl ScalarUDFImpl for DefinitionFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[ArrowType]) -> Result<ArrowType> {
        Ok(ArrowType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(first) = args.args.first() else {
            return exec_err!("{} needs an oid", self.name);
        };
        match first {
            ColumnarValue::Scalar(s) => {
                let oid = s.cast_to(&ArrowType::Int64)?;
                let def = match oid {
                    ScalarValue::Int64(Some(oid)) => self.lookup(oid),
                    _ => None,
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(def)))
            }
            ColumnarValue::Array(a) => {
                let oids = cast(a, &ArrowType::Int64)?;
                let oids = oids
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .ok_or_else(|| DataFusionError::Internal("cast to int8".into()))?;
                let defs: StringArray = oids
                    .iter()
                    .map(|oid| oid.and_then(|o| self.lookup(o)))
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(defs)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_table_schemas_match_the_library() {
        // The same column names, in the same order, as the copies the library ships.
        let index: Vec<String> = pg_index_schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(index.len(), 21);
        assert_eq!(index[0], "indexrelid");
        assert_eq!(index[15], "indkey");
        let constraint = pg_constraint_schema();
        assert_eq!(constraint.fields().len(), 26);
        assert_eq!(constraint.field(18).name(), "conkey");
    }

    #[test]
    fn json_objects_keep_value_types() {
        let v = |s: ScalarValue| json_value(&s).to_string();
        assert_eq!(v(ScalarValue::Int64(Some(3))), "3");
        assert_eq!(v(ScalarValue::Boolean(Some(true))), "true");
        assert_eq!(v(ScalarValue::Utf8(Some("a\"b".into()))), "\"a\\\"b\"");
        assert_eq!(v(ScalarValue::Int32(None)), "null");
    }

    #[test]
    fn sizes_print_as_postgres_prints_them() {
        assert_eq!(size_pretty(0), "0 bytes");
        assert_eq!(size_pretty(8192), "8192 bytes");
        assert_eq!(size_pretty(10 * 1024), "10 kB");
        assert_eq!(size_pretty(1_000_000), "977 kB");
        assert_eq!(size_pretty(50 * 1024 * 1024), "50 MB");
    }

    #[test]
    fn builtin_types_resolve_by_every_name() {
        assert_eq!(builtin_type_oid("integer"), Some(23));
        assert_eq!(builtin_type_oid("pg_catalog.INT4"), Some(23));
        assert_eq!(builtin_type_oid("double precision"), Some(701));
        assert_eq!(builtin_type_oid("hstore"), None);
    }

    #[test]
    fn definitions_answer_known_oids_only() {
        let defs: Arc<RwLock<Definitions>> = Arc::default();
        defs.write().index.insert(7, "CREATE UNIQUE INDEX".into());
        defs.write()
            .constraint
            .insert(9, "PRIMARY KEY (a, b)".into());
        let index = DefinitionFn::new("pg_get_indexdef", defs.clone());
        let constraint = DefinitionFn::new("pg_get_constraintdef", defs);
        assert_eq!(index.lookup(7).as_deref(), Some("CREATE UNIQUE INDEX"));
        assert_eq!(index.lookup(9), None);
        assert_eq!(constraint.lookup(9).as_deref(), Some("PRIMARY KEY (a, b)"));
    }
}
