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
//!   read.
//! - **DELETE**: the same filter; one delete of the key.
//! - **INSERT … VALUES** whose values are parameters or constants: one row operation
//!   per row (insert, upsert, or insert-if-absent for `ON CONFLICT DO NOTHING`).
//!
//! A value is a parameter (`$n`) or a constant, converted to its column's type when
//! the statement executes. When a value does not convert without loss (a key
//! parameter bound to NULL, `WHERE int_key = 1.5`), [`PointPlan::run`] answers `None`
//! and the statement takes the general path, which gives the usual answer or error.
//! Writes go through the same client session checks (NOT NULL, VARCHAR length) and
//! row-error rules (`crate::write::write_keyed`) as the general path.

use std::sync::Arc;

use arrow::datatypes::{DataType as ArrowType, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, Operation, ReadMode, Table};
use cairn_common::{DataType, Value};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator, WriteOp};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use crate::error::{Result, SqlError};
use crate::options::InsertMode;
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
    /// the columns at `pick` under `schema` (the statement's output names).
    Select {
        columns: Vec<String>,
        pick: Vec<usize>,
        key: Vec<Source>,
        schema: SchemaRef,
    },
    /// Sets `cells` of the row with key `key`.
    Update {
        key: Vec<Source>,
        cells: Vec<(String, Source)>,
    },
    /// Deletes the row with key `key`.
    Delete { key: Vec<Source> },
    /// Inserts `rows` (every column of the table, in table order).
    Insert {
        rows: Vec<Vec<Source>>,
        mode: InsertMode,
    },
}

impl PointPlan {
    /// The fast-path form of `plan` (a statement's logical plan before optimization),
    /// if it has one. `mode` says what an INSERT does with an existing key.
    pub(crate) fn recognize(plan: &LogicalPlan, mode: InsertMode) -> Option<PointPlan> {
        match plan {
            LogicalPlan::Projection(p) => {
                let (table, key) = keyed_filter(&p.input)?;
                let mut columns: Vec<String> = Vec::with_capacity(p.expr.len());
                let mut pick = Vec::with_capacity(p.expr.len());
                for e in &p.expr {
                    let Expr::Column(c) = strip_alias(e) else {
                        return None;
                    };
                    table.schema.index_of(&c.name).ok()?;
                    pick.push(match columns.iter().position(|n| n == &c.name) {
                        Some(j) => j,
                        None => {
                            columns.push(c.name.clone());
                            columns.len() - 1
                        }
                    });
                }
                let schema = Arc::new(plan.schema().as_arrow().clone());
                Some(PointPlan {
                    table,
                    op: PointOp::Select {
                        columns,
                        pick,
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
                                let t = table.schema.column(i).data_type.to_arrow();
                                cells.push((name.clone(), source(other, &t)?));
                            }
                        }
                    }
                    Some(PointPlan {
                        table,
                        op: PointOp::Update { key, cells },
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
                key,
                schema: out,
            } => {
                let key = key_values(key)?;
                Some(self.select(client, columns, pick, key, out, snapshot).await)
            }
            PointOp::Update { key, cells } => {
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
                Some(
                    self.write(client, snapshot, "UPDATE", || {
                        Operation::update(schema, &key, &values)
                    })
                    .await,
                )
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
        }
    }

    /// Reads one row by key: one `Get` at the tablet's leader (`Client::get`).
    async fn select(
        &self,
        client: &Client,
        columns: &[String],
        pick: &[usize],
        key: Vec<Value>,
        out: &SchemaRef,
        snapshot: Option<u64>,
    ) -> Result<QueryResult> {
        let schema = &self.table.schema;
        let mode = match snapshot {
            Some(ts) => ReadMode::Snapshot(ts),
            None => ReadMode::ReadYourWrites,
        };
        let row = client.get(&self.table, &key, columns, mode).await?;
        let batch = match row {
            None => RecordBatch::new_empty(out.clone()),
            Some(values) => {
                let mut arrays = Vec::with_capacity(pick.len());
                for (&j, field) in pick.iter().zip(out.fields()) {
                    let c = schema.column(schema.index_of(&columns[j])?);
                    let a = cairn_common::types::array_from_values(&c.data_type, [&values[j]])?;
                    arrays.push(if a.data_type() == field.data_type() {
                        a
                    } else {
                        arrow::compute::cast(&a, field.data_type())?
                    });
                }
                RecordBatch::try_new(out.clone(), arrays)?
            }
        };
        let stream = futures::stream::once(async move { Ok(batch) });
        Ok(QueryResult::Rows {
            schema: out.clone(),
            stream: Box::pin(RecordBatchStreamAdapter::new(out.clone(), stream)),
        })
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
