//! The keyed fast path: prepared statements that name rows by their whole primary key.
//!
//! Key-value work through SQL is a handful of statement shapes executed millions of
//! times: `SELECT … FROM t WHERE k = $1`, `UPDATE t SET c = $1 WHERE k = $2`,
//! `DELETE FROM t WHERE k = $1` and `INSERT INTO t VALUES ($1, …)`. Planning each
//! execution with DataFusion (analyzer, optimizer, physical planner, a stream of
//! operators) costs far more than the read or write itself. Kudu's client answers
//! such requests with one RPC to the tablet that owns the key; this module does the
//! same for SQL.
//!
//! At prepare time [`PointPlan::recognize`] looks at the statement's logical plan. It
//! accepts a plan only when it can be run as one keyed operation with the same result
//! the general path would give:
//!
//! - **SELECT**: plain columns of one Cairn table, filtered by a conjunction of
//!   `key_column = value` that names every primary-key column exactly once and nothing
//!   else. It becomes one `Get` of the key at the tablet's leader (`Client::get`):
//!   no scanner, no predicates, no Arrow IPC.
//! - **UPDATE**: the same filter, and SET values that are parameters or constants (no
//!   expression reads the row). It becomes one unconditional update of the key: the
//!   tablet leader applies it under the row lock if the row exists, and reports it
//!   missing otherwise (0 rows, as PostgreSQL). Nothing was read, so nothing can be
//!   lost: the no-lost-update rule of `crate::write` concerns writes computed from a
//!   read. A SET of the form `c = c + v` (also `-`, `*`, `/`, `%`, `&`, `|` on
//!   integers, the first four on DOUBLE, `c || v` and `v || c` on text) reads the row
//!   too, but on the leader: it becomes an atomic operation
//!   ([`cairn_common::atomic`]) computed under the row lock, one request with no
//!   read before it, and chained into the table's subspaces like any write.
//! - **DELETE**: the same filter; one delete of the key.
//! - **INSERT … VALUES** whose values are parameters or constants: one row operation
//!   per row (insert, upsert, or insert-if-absent for `ON CONFLICT DO NOTHING`).
//! - **Range SELECT**: `SELECT columns FROM t [WHERE k1 >= $1 [AND k1 < $2]] [ORDER BY
//!   the key ascending] LIMIT $n`, where `k1` is the first primary-key column (any of
//!   `>`, `>=`, `<`, `<=`, at most one bound of each side). Every tablet the range can
//!   touch is read in key order up to the limit (one scan each, the first picking the
//!   snapshot the others read at) and the first rows in key order are returned: the
//!   answer of the general path's key-ordered scan (`crate::scan`), without planning
//!   it. YCSB's workload E and a key-value store's scans are this statement.
//!
//! A value is a parameter (`$n`) or a constant, converted to its column's type when
//! the statement executes. When a value does not convert without loss (a key
//! parameter bound to NULL, `WHERE int_key = 1.5`), [`PointPlan::run`] answers `None`
//! and the statement takes the general path, which gives the usual answer or error.
//! Writes go through the same client session checks (NOT NULL, VARCHAR length) and
//! row-error rules (`crate::write::write_keyed`) as the general path.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatchOptions};
use arrow::datatypes::{DataType as ArrowType, Field, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, Operation, ReadMode, Table};
use cairn_common::{AtomicOp, ColumnPredicate, DataType, PredicateOp, Value};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Limit, LogicalPlan, Operator, WriteOp};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use crate::error::{Result, SqlError};
use crate::options::InsertMode;
use crate::scan::KEY_ORDERED_LIMIT_MAX;
use crate::session::QueryResult;
use crate::types::scalar_to_value;

/// Where a value of a keyed statement comes from.
#[derive(Clone, Debug, PartialEq)]
enum Source {
    /// The `n`th parameter (0-based).
    Param(usize),
    /// A constant of the statement.
    Const(ScalarValue),
}

impl Source {
    /// The value for a column of type `t`, or `None` when it does not convert
    /// without loss (then the general path decides). NULL converts to
    /// [`Value::Null`] only where `null_ok`.
    fn value(&self, params: &[ScalarValue], t: &DataType, null_ok: bool) -> Option<Value> {
        let s = match self {
            Source::Param(i) => params.get(*i)?,
            Source::Const(s) => s,
        };
        if s.is_null() {
            return null_ok.then_some(Value::Null);
        }
        scalar_to_value(s, t)
    }
}

/// A statement the keyed fast path runs (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct PointPlan {
    table: Table,
    op: PointOp,
}

/// What a [`PointPlan`] does.
#[derive(Clone, Debug)]
enum PointOp {
    /// Reads `columns` of the row with key `key` (in key-column order) and returns
    /// the columns at `pick` (of the table's types `types`) under `schema` (the
    /// statement's output names).
    Select {
        columns: Vec<String>,
        pick: Vec<usize>,
        types: Vec<DataType>,
        key: Vec<Source>,
        schema: SchemaRef,
    },
    /// Sets `cells` of the row with key `key`, and changes `atomic` cells by atomic
    /// operations (`SET c = c + $1`), which the tablet leader computes under the row
    /// lock.
    Update {
        key: Vec<Source>,
        cells: Vec<(String, Source)>,
        atomic: Vec<(String, AtomicOp, Source)>,
    },
    /// Deletes the row with key `key`.
    Delete { key: Vec<Source> },
    /// Inserts `rows` (every column of the table, in table order).
    Insert {
        rows: Vec<Vec<Source>>,
        mode: InsertMode,
    },
    /// Reads the first rows in key order of a range of the first key column.
    Range(Box<RangeSpec>),
}

/// A range read ([`PointOp::Range`]): the first `limit` rows in key order whose first
/// key column lies between `lower` and `upper` (bound, inclusive). It reads `columns`
/// (the statement's, then any key column it lacks, at `key_at`) and returns those at
/// `pick` under `schema`.
#[derive(Clone, Debug)]
struct RangeSpec {
    columns: Vec<String>,
    pick: Vec<usize>,
    key_at: Vec<usize>,
    lower: Option<(Source, bool)>,
    upper: Option<(Source, bool)>,
    limit: Source,
    schema: SchemaRef,
}

impl PointPlan {
    /// The fast-path form of `plan` (a statement's logical plan before optimization),
    /// if it has one. `mode` says what an INSERT does with an existing key.
    pub(crate) fn recognize(plan: &LogicalPlan, mode: InsertMode) -> Option<PointPlan> {
        match plan {
            LogicalPlan::Limit(l) => recognize_range(l),
            LogicalPlan::Projection(p) => {
                let (table, key) = keyed_filter(&p.input)?;
                let (columns, pick) = plain_columns(&p.expr, &table)?;
                let types = pick
                    .iter()
                    .map(|&j| {
                        let i = table.schema.index_of(&columns[j]).ok()?;
                        Some(table.schema.column(i).data_type.clone())
                    })
                    .collect::<Option<Vec<_>>>()?;
                let schema = Arc::new(plan.schema().as_arrow().clone());
                Some(PointPlan {
                    table,
                    op: PointOp::Select {
                        columns,
                        pick,
                        types,
                        key,
                        schema,
                    },
                })
            }
            LogicalPlan::Dml(d) => match &d.op {
                WriteOp::Delete => {
                    let (table, key) = keyed_filter(&d.input)?;
                    Some(PointPlan {
                        table,
                        op: PointOp::Delete { key },
                    })
                }
                WriteOp::Update => {
                    let LogicalPlan::Projection(p) = d.input.as_ref() else {
                        return None;
                    };
                    let (table, key) = keyed_filter(&p.input)?;
                    let mut cells = vec![];
                    let mut atomic = vec![];
                    for (e, field) in p.expr.iter().zip(p.schema.fields()) {
                        let name = field.name();
                        let i = table.schema.index_of(name).ok()?;
                        match strip_alias(e) {
                            // Unchanged column.
                            Expr::Column(c) if &c.name == name => {}
                            other => {
                                if table.schema.key_indexes().contains(&i) {
                                    // Changing a key moves the row: the general path.
                                    return None;
                                }
                                let dt = &table.schema.column(i).data_type;
                                let t = dt.to_arrow();
                                match atomic_source(other, name, dt, &t) {
                                    Some((op, s)) => atomic.push((name.clone(), op, s)),
                                    None => cells.push((name.clone(), source(other, &t)?)),
                                }
                            }
                        }
                    }
                    Some(PointPlan {
                        table,
                        op: PointOp::Update { key, cells, atomic },
                    })
                }
                WriteOp::Insert(_) => {
                    let table = crate::authz::cairn_table(&d.target)?;
                    let LogicalPlan::Projection(p) = d.input.as_ref() else {
                        return None;
                    };
                    let LogicalPlan::Values(values) = p.input.as_ref() else {
                        return None;
                    };
                    if p.expr.len() != table.schema.num_columns() {
                        return None;
                    }
                    let mut rows = Vec::with_capacity(values.values.len());
                    for row in &values.values {
                        let mut out = Vec::with_capacity(p.expr.len());
                        for (e, field) in p.expr.iter().zip(p.schema.fields()) {
                            // Output column i of the projection is table column i.
                            if table.schema.column(out.len()).name != *field.name() {
                                return None;
                            }
                            let t = table.schema.column(out.len()).data_type.to_arrow();
                            let s = match strip_casts(strip_alias(e), &t) {
                                Expr::Column(c) => {
                                    let j = values.schema.index_of_column(c).ok()?;
                                    source(row.get(j)?, &t)?
                                }
                                other => source(other, &t)?,
                            };
                            out.push(s);
                        }
                        rows.push(out);
                    }
                    Some(PointPlan {
                        table,
                        op: PointOp::Insert { rows, mode },
                    })
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Runs the statement with `params` through `client`, reading at `snapshot` if the
    /// statement fixed one. `None`: a value does not convert to its column's type
    /// without loss, and the general path must run the statement instead.
    pub(crate) async fn run(
        &self,
        client: &Client,
        params: &[ScalarValue],
        snapshot: Option<u64>,
    ) -> Option<Result<QueryResult>> {
        let schema = &self.table.schema;
        // A key value that does not fit its column (too long for its VARCHAR) names
        // no row: the general path answers that.
        let key_values = |key: &[Source]| -> Option<Vec<Value>> {
            key.iter()
                .zip(schema.key_indexes())
                .map(|(s, &i)| {
                    let c = schema.column(i);
                    let v = s.value(params, &c.data_type, false)?;
                    v.check_type(&c.name, &c.data_type).ok().map(|_| v)
                })
                .collect()
        };
        match &self.op {
            PointOp::Select {
                columns,
                pick,
                types,
                key,
                schema: out,
            } => {
                let key = key_values(key)?;
                let read = Read {
                    columns,
                    pick,
                    types,
                    out,
                };
                Some(self.select(client, read, key, snapshot).await)
            }
            PointOp::Update { key, cells, atomic } => {
                let key = key_values(key)?;
                let mut values = Vec::with_capacity(cells.len());
                for (name, s) in cells {
                    let c = schema.column(schema.index_of(name).ok()?);
                    let v = s.value(params, &c.data_type, true)?;
                    // A value the column refuses (NULL for NOT NULL, too long) is an
                    // error only if the row exists: the general path finds out.
                    schema.validate_cell(c, &v).ok()?;
                    values.push((name.as_str(), v));
                }
                let mut mutations = Vec::with_capacity(atomic.len());
                for (name, op, s) in atomic {
                    let c = schema.column(schema.index_of(name).ok()?);
                    if let Source::Param(i) = s
                        && !operand_keeps_arithmetic(params.get(*i)?, &c.data_type)
                    {
                        return None;
                    }
                    // A NULL operand makes the cell NULL (`c + NULL`): the general path.
                    let v = s.value(params, &c.data_type, false)?;
                    schema.validate_cell(c, &v).ok()?;
                    mutations.push(cairn_common::CellMutation::new(name.as_str(), *op, v));
                }
                let written = self
                    .write(client, snapshot, "UPDATE", || {
                        let mut op = Operation::update(schema, &key, &values)?;
                        op.condition.mutations = mutations;
                        Ok(op)
                    })
                    .await;
                Some(written.map_err(atomic_sqlstate))
            }
            PointOp::Delete { key } => {
                let key = key_values(key)?;
                Some(
                    self.write(client, snapshot, "DELETE", || {
                        Operation::delete(schema, &key)
                    })
                    .await,
                )
            }
            PointOp::Insert { rows, mode } => {
                let mut ops = Vec::with_capacity(rows.len());
                for row in rows {
                    let values = row
                        .iter()
                        .zip(schema.columns())
                        .map(|(s, c)| s.value(params, &c.data_type, true))
                        .collect::<Option<Vec<_>>>()?;
                    ops.push(match mode {
                        InsertMode::Insert => Operation::insert(values),
                        InsertMode::Upsert => Operation::upsert(values),
                        InsertMode::Ignore => Operation::insert_ignore(values),
                    });
                }
                let written = crate::write::write_keyed(client, &self.table, ops, true).await;
                Some(written.map(|rows| QueryResult::Count {
                    tag: "INSERT",
                    rows,
                }))
            }
            PointOp::Range(spec) => {
                let RangeSpec {
                    columns,
                    pick,
                    key_at,
                    lower,
                    upper,
                    limit,
                    schema: out,
                } = spec.as_ref();
                let limit = match limit.value(params, &DataType::Int64, false)? {
                    Value::Int64(n) if n >= 0 && n as u64 <= KEY_ORDERED_LIMIT_MAX as u64 => {
                        n as usize
                    }
                    // A negative limit is an error, a large one a plain scan: the
                    // general path.
                    _ => return None,
                };
                let k = schema.column(schema.key_indexes()[0]);
                // A bound that does not convert to the key's type without loss (or
                // NULL, which matches nothing) leaves the statement to the general
                // path.
                let bound = |b: &Option<(Source, bool)>| match b {
                    None => Some(None),
                    Some((s, inclusive)) => {
                        Some(Some((s.value(params, &k.data_type, false)?, *inclusive)))
                    }
                };
                let (lower, upper) = (bound(lower)?, bound(upper)?);
                let predicates = if lower.is_none() && upper.is_none() {
                    vec![]
                } else {
                    vec![ColumnPredicate {
                        column: k.name.clone(),
                        op: PredicateOp::Range { lower, upper },
                    }]
                };
                let range = RangeRead {
                    columns,
                    pick,
                    key_at,
                    predicates,
                    limit,
                    out,
                };
                Some(self.range(client, range, snapshot).await)
            }
        }
    }

    /// Reads the first rows in key order of a range (see [`PointOp::Range`]): each
    /// tablet the predicates can touch is scanned in key order up to the limit, the
    /// first one at the statement's snapshot (or the latest this client may read) and
    /// the others at the snapshot it picked.
    async fn range(
        &self,
        client: &Client,
        r: RangeRead<'_>,
        snapshot: Option<u64>,
    ) -> Result<QueryResult> {
        let schema = &self.table.schema;
        let mut mode = read_mode(snapshot);
        let mut batches = vec![];
        if r.limit > 0 {
            let locs = client.table_locations(&self.table, false).await?;
            let parts: Vec<_> = locs.iter().map(|t| t.partition.clone()).collect();
            let touched = self
                .table
                .partition_schema
                .prune(schema, &parts, &r.predicates)?;
            for i in touched {
                let mut scan = client
                    .scan(&self.table)
                    .only_tablet(locs[i].tablet_id.clone())
                    .ordered(true)
                    .projection(r.columns.iter().cloned())
                    .limit(r.limit as u64)
                    .read_mode(mode);
                for p in &r.predicates {
                    scan = scan.predicate(p.clone());
                }
                let read = scan.execute().await?;
                if read.snapshot_timestamp != 0 {
                    mode = ReadMode::Snapshot(read.snapshot_timestamp);
                }
                batches.extend(read.batches.into_iter().filter(|b| b.num_rows() > 0));
            }
        }
        let batch = match crate::scan::first_rows_by_key(&batches, r.key_at, r.limit)? {
            None => RecordBatch::new_empty(r.out.clone()),
            Some(rows) => {
                let mut arrays = Vec::with_capacity(r.pick.len());
                for (&j, field) in r.pick.iter().zip(r.out.fields()) {
                    arrays.push(as_field_type(rows.column(j).clone(), field)?);
                }
                let opts = RecordBatchOptions::new().with_row_count(Some(rows.num_rows()));
                RecordBatch::try_new_with_options(r.out.clone(), arrays, &opts)?
            }
        };
        Ok(one_batch(r.out, batch))
    }

    /// Reads one row by key: one `Get` at the tablet's leader (`Client::get`).
    async fn select(
        &self,
        client: &Client,
        read: Read<'_>,
        key: Vec<Value>,
        snapshot: Option<u64>,
    ) -> Result<QueryResult> {
        let Read {
            columns,
            pick,
            types,
            out,
        } = read;
        let mode = read_mode(snapshot);
        let row = client.get(&self.table, &key, columns, mode).await?;
        let batch = match row {
            None => RecordBatch::new_empty(out.clone()),
            Some(mut values) => {
                let mut arrays = Vec::with_capacity(pick.len());
                for (i, ((&j, t), field)) in pick.iter().zip(types).zip(out.fields()).enumerate() {
                    // Each value moves into its array, unless a later output column
                    // repeats it.
                    let v = match values.get_mut(j) {
                        Some(v) if pick[i + 1..].contains(&j) => v.clone(),
                        Some(v) => std::mem::replace(v, Value::Null),
                        None => return Err(SqlError::other("XX000", "a read row lacks a column")),
                    };
                    arrays.push(as_field_type(
                        cairn_common::types::array_of_one(t, v)?,
                        field,
                    )?);
                }
                RecordBatch::try_new(out.clone(), arrays)?
            }
        };
        Ok(one_batch(out, batch))
    }

    /// Writes one keyed UPDATE or DELETE operation (built by `op`).
    async fn write(
        &self,
        client: &Client,
        snapshot: Option<u64>,
        tag: &'static str,
        op: impl FnOnce() -> cairn_client::Result<Operation>,
    ) -> Result<QueryResult> {
        if snapshot.is_some() {
            return Err(SqlError::other(
                "0A000",
                "UPDATE and DELETE change the latest rows and cannot read a past snapshot: \
                 unset cairn.read_timestamp (or drop AS OF) for this statement",
            ));
        }
        let rows = crate::write::write_keyed(client, &self.table, vec![op()?], false).await?;
        Ok(QueryResult::Count { tag, rows })
    }
}

/// A [`RangeSpec`] with its values bound, ready to read.
struct RangeRead<'a> {
    columns: &'a [String],
    pick: &'a [usize],
    key_at: &'a [usize],
    predicates: Vec<ColumnPredicate>,
    limit: usize,
    out: &'a SchemaRef,
}

/// The columns to read and the position of each output column among them, when every
/// expression of a projection is a plain column of `table`.
fn plain_columns(exprs: &[Expr], table: &Table) -> Option<(Vec<String>, Vec<usize>)> {
    let mut columns: Vec<String> = Vec::with_capacity(exprs.len());
    let mut pick = Vec::with_capacity(exprs.len());
    for e in exprs {
        let Expr::Column(c) = strip_alias(e) else {
            return None;
        };
        table.schema.index_of(&c.name).ok()?;
        pick.push(position_or_push(&mut columns, &c.name));
    }
    Some((columns, pick))
}

/// The position of `name` in `columns`, appended first if missing.
fn position_or_push(columns: &mut Vec<String>, name: &str) -> usize {
    match columns.iter().position(|c| c == name) {
        Some(j) => j,
        None => {
            columns.push(name.to_string());
            columns.len() - 1
        }
    }
}

/// What a keyed read returns: `columns` are read, and the output columns are those at
/// `pick` (of types `types`) under the schema `out`.
struct Read<'a> {
    columns: &'a [String],
    pick: &'a [usize],
    types: &'a [DataType],
    out: &'a SchemaRef,
}

/// How a statement reads: at the snapshot it fixed, else the latest this client may
/// read.
fn read_mode(snapshot: Option<u64>) -> ReadMode {
    match snapshot {
        Some(ts) => ReadMode::Snapshot(ts),
        None => ReadMode::ReadYourWrites,
    }
}

/// `a` as the type of the output column `field` (a no-op when it has it already).
fn as_field_type(a: ArrayRef, field: &Field) -> Result<ArrayRef> {
    if a.data_type() == field.data_type() {
        Ok(a)
    } else {
        Ok(arrow::compute::cast(&a, field.data_type())?)
    }
}

/// A statement's result of the single `batch` under `schema`.
fn one_batch(schema: &SchemaRef, batch: RecordBatch) -> QueryResult {
    let stream = futures::stream::once(async move { Ok(batch) });
    QueryResult::Rows {
        schema: schema.clone(),
        stream: Box::pin(RecordBatchStreamAdapter::new(schema.clone(), stream)),
    }
}

/// The range form of `Limit → [Sort by key] → Projection → [Sort by key → [Projection]]
/// → [Filter on the first key column] → TableScan`, if the statement has one (see
/// [`PointOp::Range`]).
fn recognize_range(l: &Limit) -> Option<PointPlan> {
    if let Some(skip) = &l.skip
        && !matches!(skip.as_ref(), Expr::Literal(ScalarValue::Int64(Some(0)), _))
    {
        return None;
    }
    let limit = source(l.fetch.as_deref()?, &ArrowType::Int64)?;
    // An ORDER BY of a prefix of the key, ascending, is the order the range reads in.
    let mut sorts = vec![];
    let mut plan = l.input.as_ref();
    if let LogicalPlan::Sort(s) = plan {
        sorts.push(s);
        plan = s.input.as_ref();
    }
    let LogicalPlan::Projection(p) = plan else {
        return None;
    };
    plan = p.input.as_ref();
    if let LogicalPlan::Sort(s) = plan {
        sorts.push(s);
        plan = s.input.as_ref();
        // Sorting by a column the statement does not return adds it below the sort.
        if let LogicalPlan::Projection(inner) = plan
            && inner
                .expr
                .iter()
                .all(|e| matches!(strip_alias(e), Expr::Column(_)))
        {
            plan = inner.input.as_ref();
        }
    }
    let (table, lower, upper) = ranged_filter(plan)?;
    let key_names: Vec<&str> = table
        .schema
        .key_indexes()
        .iter()
        .map(|&k| table.schema.column(k).name.as_str())
        .collect();
    for s in sorts {
        if s.fetch.is_some() || s.expr.len() > key_names.len() {
            return None;
        }
        for (e, name) in s.expr.iter().zip(&key_names) {
            match &e.expr {
                Expr::Column(c) if e.asc && c.name == *name => {}
                _ => return None,
            }
        }
    }
    let (mut columns, pick) = plain_columns(&p.expr, &table)?;
    let key_at = key_names
        .into_iter()
        .map(|name| position_or_push(&mut columns, name))
        .collect();
    Some(PointPlan {
        op: PointOp::Range(Box::new(RangeSpec {
            columns,
            pick,
            key_at,
            lower,
            upper,
            limit,
            schema: Arc::new(l.input.schema().as_arrow().clone()),
        })),
        table,
    })
}

/// A bound of a range: its source and whether it is inclusive.
type Bound = Option<(Source, bool)>;

/// The table and bounds of `[Filter(k1 >= v AND k1 < w …)] → TableScan(cairn table)`
/// over the table's first key column, at most one bound on each side.
fn ranged_filter(plan: &LogicalPlan) -> Option<(Table, Bound, Bound)> {
    let (predicate, scan) = match plan {
        LogicalPlan::Filter(f) => match f.input.as_ref() {
            LogicalPlan::TableScan(scan) => (Some(&f.predicate), scan),
            _ => return None,
        },
        LogicalPlan::TableScan(scan) => (None, scan),
        _ => return None,
    };
    if scan.fetch.is_some() || !scan.filters.is_empty() {
        return None;
    }
    let table = crate::authz::cairn_table(&scan.source)?;
    let k = table.schema.column(table.schema.key_indexes()[0]);
    let t = k.data_type.to_arrow();
    let (mut lower, mut upper): (Bound, Bound) = (None, None);
    let mut conjuncts: Vec<&Expr> = predicate.into_iter().collect();
    while let Some(e) = conjuncts.pop() {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
            return None;
        };
        if *op == Operator::And {
            conjuncts.push(left);
            conjuncts.push(right);
            continue;
        }
        // `v < k` is `k > v`.
        let (c, op, v) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), v) => (c, *op, v),
            (v, Expr::Column(c)) => (c, op.swap()?, v),
            _ => return None,
        };
        if c.name != k.name {
            return None;
        }
        let (side, inclusive) = match op {
            Operator::Gt => (&mut lower, false),
            Operator::GtEq => (&mut lower, true),
            Operator::Lt => (&mut upper, false),
            Operator::LtEq => (&mut upper, true),
            _ => return None,
        };
        if side.is_some() {
            return None;
        }
        *side = Some((source(v, &t)?, inclusive));
    }
    Some((table, lower, upper))
}

/// The table and key sources of `Filter(key = v AND …) → TableScan(cairn table)`, if
/// the filter names every key column exactly once, with equalities only.
fn keyed_filter(plan: &LogicalPlan) -> Option<(Table, Vec<Source>)> {
    let LogicalPlan::Filter(f) = plan else {
        return None;
    };
    let LogicalPlan::TableScan(scan) = f.input.as_ref() else {
        return None;
    };
    if scan.fetch.is_some() || !scan.filters.is_empty() {
        return None;
    }
    let table = crate::authz::cairn_table(&scan.source)?;
    let keys = table.schema.key_indexes();
    let mut found: Vec<Option<Source>> = vec![None; keys.len()];
    let mut conjuncts = vec![&f.predicate];
    while let Some(e) = conjuncts.pop() {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
            return None;
        };
        match op {
            Operator::And => {
                conjuncts.push(left);
                conjuncts.push(right);
            }
            Operator::Eq => {
                let (c, v) = match (left.as_ref(), right.as_ref()) {
                    (Expr::Column(c), v) | (v, Expr::Column(c)) => (c, v),
                    _ => return None,
                };
                let i = table.schema.index_of(&c.name).ok()?;
                let k = keys.iter().position(|&k| k == i)?;
                if found[k].is_some() {
                    return None;
                }
                let t = table.schema.column(i).data_type.to_arrow();
                found[k] = Some(source(v, &t)?);
            }
            _ => return None,
        }
    }
    let key = found.into_iter().collect::<Option<Vec<_>>>()?;
    Some((table, key))
}

/// The source of a value expression for a column of arrow type `t`: a parameter or
/// a constant, under casts to `t` only (another cast could change the value in a way
/// the lossless conversion to the column's type would not repeat).
fn source(e: &Expr, t: &ArrowType) -> Option<Source> {
    match strip_casts(e, t) {
        Expr::Placeholder(p) => {
            let n: usize = p.id.strip_prefix('$')?.parse().ok()?;
            Some(Source::Param(n.checked_sub(1)?))
        }
        Expr::Literal(s, _) => Some(Source::Const(s.clone())),
        _ => None,
    }
}

/// The atomic operation that computes `SET name = e` on the tablet leader, when `e` is
/// `name <op> v` (or `v <op> name` for `+`, `*`, `&`, `|`, and `v || name`) with `v` a
/// parameter or a constant, and the operation gives exactly what PostgreSQL's
/// arithmetic in the column's type `dt` (of arrow type `t`) gives: integer columns with
/// integer operands, DOUBLE columns, and text. Anything else is computed by the
/// general path.
fn atomic_source(e: &Expr, name: &str, dt: &DataType, t: &ArrowType) -> Option<(AtomicOp, Source)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = strip_casts(e, t) else {
        return None;
    };
    let integer = matches!(
        dt,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    );
    let text = matches!(dt, DataType::String | DataType::Varchar(_));
    let op = match op {
        Operator::Plus if integer || *dt == DataType::Double => AtomicOp::Add,
        Operator::Minus if integer || *dt == DataType::Double => AtomicOp::Sub,
        Operator::Multiply if integer || *dt == DataType::Double => AtomicOp::Mul,
        Operator::Divide if integer || *dt == DataType::Double => AtomicOp::Div,
        Operator::Modulo if integer => AtomicOp::Mod,
        Operator::BitwiseAnd if integer => AtomicOp::And,
        Operator::BitwiseOr if integer => AtomicOp::Or,
        Operator::StringConcat if text => AtomicOp::Append,
        _ => return None,
    };
    // The column, perhaps widened for the arithmetic (`CAST(c AS BIGINT) + 1`).
    let is_column = |e: &Expr| {
        let mut e = e;
        loop {
            match e {
                Expr::Cast(c) => e = &c.expr,
                Expr::TryCast(c) => e = &c.expr,
                Expr::Column(c) => return c.name == name,
                _ => return false,
            }
        }
    };
    let (op, operand) = if is_column(left) {
        (op, right)
    } else if is_column(right) {
        match op {
            AtomicOp::Append => (AtomicOp::Prepend, left),
            AtomicOp::Add | AtomicOp::Mul | AtomicOp::And | AtomicOp::Or => (op, left),
            _ => return None,
        }
    } else {
        return None;
    };
    let operand = source(operand, t)?;
    if let Source::Const(s) = &operand
        && !operand_keeps_arithmetic(s, dt)
    {
        return None;
    }
    Some((op, operand))
}

/// Whether an operand `s` of an atomic operation on a column of type `dt` gives the
/// arithmetic PostgreSQL would: an operand of another kind changes it (`c / 2.0` on
/// an integer column is a division of numerics, rounded back).
fn operand_keeps_arithmetic(s: &ScalarValue, dt: &DataType) -> bool {
    let kind = s.data_type();
    match dt {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => kind.is_integer(),
        DataType::String | DataType::Varchar(_) => matches!(
            kind,
            ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View
        ),
        _ => kind.is_integer() || kind.is_floating(),
    }
}

/// A keyed UPDATE's error with PostgreSQL's SQLSTATE for an atomic operation that could
/// not be computed (22003 out of range, 22012 division by zero).
fn atomic_sqlstate(e: SqlError) -> SqlError {
    use cairn_common::atomic::{DIVISION_BY_ZERO, OUT_OF_RANGE};
    match e {
        SqlError::Row {
            kind: cairn_proto::RowErrorKind::Invalid,
            message,
            ..
        } if message.contains(DIVISION_BY_ZERO) => SqlError::other("22012", message),
        SqlError::Row {
            kind: cairn_proto::RowErrorKind::Invalid,
            message,
            ..
        } if message.contains(OUT_OF_RANGE) => SqlError::other("22003", message),
        e => e,
    }
}

/// `e` without a top-level alias.
fn strip_alias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => strip_alias(&a.expr),
        other => other,
    }
}

/// `e` without casts to `t`: the value converts to its column's type (of arrow type
/// `t`) without loss when it is used, or the statement takes the general path.
fn strip_casts<'a>(e: &'a Expr, t: &ArrowType) -> &'a Expr {
    match e {
        Expr::Cast(c) if c.field.data_type() == t => strip_casts(&c.expr, t),
        Expr::TryCast(c) if c.field.data_type() == t => strip_casts(&c.expr, t),
        other => other,
    }
}
