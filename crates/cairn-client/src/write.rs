//! Row operations and their wire form.
//!
//! An [`Operation`] holds one optional value per schema column: `Some` cells are
//! "given" (a `Some(Value::Null)` sets NULL), `None` cells are left alone (an insert
//! gets the column's default). A write request to one tablet carries its operations as
//! [`RowBatch`]es, one per distinct set of given columns, each an Arrow IPC stream
//! holding exactly those columns plus one `OpKind` byte per row.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema as ArrowSchema};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use cairn_common::key;
use cairn_common::types::array_from_values;
use cairn_common::{AtomicOp, CellMutation, ColumnPredicate, Schema, Value};
use cairn_proto::{OpKind, RowBatch, RowCondition, RowError, RowErrorKind};

use crate::error::{ClientError, Result};
use crate::session::RowErrorInfo;

/// One row operation: a kind, one optional cell per schema column, and an optional
/// condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// What to do with the row.
    pub kind: OpKind,
    /// One slot per schema column, in schema order; `None` = not given.
    pub values: Vec<Option<Value>>,
    /// What must hold for the operation to be applied (checked by the tablet leader
    /// under the row lock); the default is nothing.
    pub condition: Condition,
}

/// A condition on the row an [`Operation`] writes. If it does not hold when the leader
/// applies the operation, the row fails with `CONFLICT` or `CONDITION_FAILED` and
/// nothing changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Condition {
    /// The row must exist and must not have changed after this HybridTime (typically
    /// the snapshot it was read at): a compare-and-set on the row's version.
    pub unchanged_since: Option<u64>,
    /// The row must exist and satisfy every predicate: a compare-and-set on values
    /// (HyperDex's conditional put).
    pub predicates: Vec<ColumnPredicate>,
    /// Cells the tablet leader computes from the row as it is, under its row lock
    /// ([`Operation::atomic`]).
    pub mutations: Vec<CellMutation>,
}

impl Condition {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.unchanged_since.is_none() && self.predicates.is_empty() && self.mutations.is_empty()
    }
}

impl Operation {
    /// An operation of `kind` with these cells and no condition.
    pub fn new(kind: OpKind, values: Vec<Option<Value>>) -> Operation {
        Operation {
            kind,
            values,
            condition: Condition::default(),
        }
    }

    /// The same operation, applied only if the row has not changed after the
    /// HybridTime `ts` (else `CONFLICT`).
    pub fn unchanged_since(mut self, ts: u64) -> Operation {
        self.condition.unchanged_since = Some(ts);
        self
    }

    /// The same operation, applied only if the row exists and satisfies `predicates`
    /// (else `CONDITION_FAILED`).
    pub fn if_matches(mut self, predicates: Vec<ColumnPredicate>) -> Operation {
        self.condition.predicates = predicates;
        self
    }

    /// Inserts a full row (one value per column, schema order). Fails on the server
    /// with `ALREADY_PRESENT` if the key exists.
    pub fn insert(row: Vec<Value>) -> Operation {
        Self::full(OpKind::Insert, row)
    }

    /// Inserts a full row, silently skipping it if the key exists.
    pub fn insert_ignore(row: Vec<Value>) -> Operation {
        Self::full(OpKind::InsertIgnore, row)
    }

    /// Inserts a full row or replaces the existing row with the same key.
    pub fn upsert(row: Vec<Value>) -> Operation {
        Self::full(OpKind::Upsert, row)
    }

    /// Updates the named cells of the row with primary key `key` (values in key-column
    /// order). Fails on the server with `NOT_FOUND` if the row does not exist.
    pub fn update(schema: &Schema, key: &[Value], cells: &[(&str, Value)]) -> Result<Operation> {
        Self::keyed(OpKind::Update, schema, key, cells)
    }

    /// Changes cells of the existing row with primary key `key` by atomic operations
    /// (HyperDex's atomic operations: add, sub, mul, div, mod, and, or, xor, min, max,
    /// append, prepend; see [`cairn_common::atomic`]). The row's leader computes each
    /// new value from the row as it is, under its row lock, so concurrent operations
    /// on one row never lose each other; on a table with subspaces the result is
    /// chained like any write. Fails on the server with `NOT_FOUND` if the row does
    /// not exist, and with `INVALID` if a result cannot be computed (overflow,
    /// division by zero). Combine with [`Operation::if_matches`] for a conditional
    /// atomic operation.
    ///
    /// ```
    /// # use cairn_client::Operation;
    /// # use cairn_common::{AtomicOp, ColumnSpec, DataType, Schema, Value};
    /// # let schema = Schema::new(vec![ColumnSpec::new("id", DataType::Int64),
    /// #     ColumnSpec::new("hits", DataType::Int64)], &["id"]).unwrap();
    /// let op = Operation::atomic(&schema, &[Value::Int64(7)],
    ///     &[("hits", AtomicOp::Add, Value::Int64(1))]).unwrap();
    /// ```
    pub fn atomic(
        schema: &Schema,
        key: &[Value],
        cells: &[(&str, AtomicOp, Value)],
    ) -> Result<Operation> {
        let mut op = Self::keyed(OpKind::Update, schema, key, &[])?;
        op.condition.mutations = cells
            .iter()
            .map(|(c, o, v)| CellMutation::new(*c, *o, v.clone()))
            .collect();
        Ok(op)
    }

    /// Deletes the row with primary key `key` (values in key-column order).
    pub fn delete(schema: &Schema, key: &[Value]) -> Result<Operation> {
        Self::keyed(OpKind::Delete, schema, key, &[])
    }

    /// An operation of any kind from a primary key (values in key-column order) and
    /// named cells. Columns neither in the key nor named are not given.
    pub fn keyed(
        kind: OpKind,
        schema: &Schema,
        key: &[Value],
        cells: &[(&str, Value)],
    ) -> Result<Operation> {
        let keys = schema.key_indexes();
        if key.len() != keys.len() {
            return Err(ClientError::InvalidArgument(format!(
                "the primary key has {} column(s) but {} key value(s) were given",
                keys.len(),
                key.len()
            )));
        }
        let mut values = vec![None; schema.num_columns()];
        for (&i, v) in keys.iter().zip(key) {
            values[i] = Some(v.clone());
        }
        for (name, v) in cells {
            let i = schema.index_of(name)?;
            if schema.is_key_column(i) {
                return Err(ClientError::InvalidArgument(format!(
                    "column '{name}' is part of the primary key: pass it in the key, not as a cell"
                )));
            }
            if values[i].is_some() {
                return Err(ClientError::InvalidArgument(format!(
                    "column '{name}' is given twice"
                )));
            }
            values[i] = Some(v.clone());
        }
        Ok(Operation::new(kind, values))
    }

    /// An operation of any kind from named cells only (key columns included).
    pub fn named(kind: OpKind, schema: &Schema, cells: &[(&str, Value)]) -> Result<Operation> {
        let mut values = vec![None; schema.num_columns()];
        for (name, v) in cells {
            let i = schema.index_of(name)?;
            if values[i].is_some() {
                return Err(ClientError::InvalidArgument(format!(
                    "column '{name}' is given twice"
                )));
            }
            values[i] = Some(v.clone());
        }
        Ok(Operation::new(kind, values))
    }

    fn full(kind: OpKind, row: Vec<Value>) -> Operation {
        Operation::new(kind, row.into_iter().map(Some).collect())
    }

    /// Checks the operation against `schema` before it is buffered: width, key columns
    /// present and non-null, cell types and nullability, no missing NOT NULL column
    /// without a default on inserts, only key columns on deletes.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        if self.values.len() != schema.num_columns() {
            return Err(ClientError::InvalidArgument(format!(
                "the operation has {} cells but the table has {} columns (give one slot per \
                 column, in schema order)",
                self.values.len(),
                schema.num_columns()
            )));
        }
        let is_delete = matches!(self.kind, OpKind::Delete | OpKind::DeleteIgnore);
        let is_insert = matches!(
            self.kind,
            OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert
        );
        for (i, (c, v)) in schema.columns().iter().zip(&self.values).enumerate() {
            let is_key = schema.is_key_column(i);
            match v {
                None if is_key => {
                    return Err(ClientError::InvalidArgument(format!(
                        "primary key column '{}' is missing: every operation needs the full key",
                        c.name
                    )));
                }
                None if is_insert && !c.nullable && c.default.is_none() => {
                    return Err(ClientError::InvalidArgument(format!(
                        "column '{}' is NOT NULL and has no default: an {:?} must give it",
                        c.name, self.kind
                    )));
                }
                None => {}
                Some(_) if is_delete && !is_key => {
                    return Err(ClientError::InvalidArgument(format!(
                        "a delete takes only the primary key, but column '{}' is given",
                        c.name
                    )));
                }
                Some(v) => schema.validate_cell(c, v)?,
            }
        }
        for p in &self.condition.predicates {
            p.validate(schema)?;
        }
        for m in &self.condition.mutations {
            m.check(schema, self.kind == OpKind::Update, &self.values)
                .map_err(ClientError::InvalidArgument)?;
        }
        Ok(())
    }

    /// The operation's encoded primary key (all key columns must be given).
    pub(crate) fn encoded_key(&self, schema: &Schema) -> Result<Vec<u8>> {
        let vals: Vec<&Value> = schema
            .key_indexes()
            .iter()
            .map(|&i| {
                self.values
                    .get(i)
                    .and_then(|v| v.as_ref())
                    .unwrap_or(&Value::Null)
            })
            .collect();
        Ok(key::encode_values(&vals)?)
    }
}

/// The wire form of one tablet's write: its row batches, and for each row position
/// across the batches (the index a `RowError` names) the index of its operation in the
/// input.
#[derive(Debug, Clone, Default)]
pub struct EncodedWrite {
    /// Row batches in the order the server applies them.
    pub batches: Vec<RowBatch>,
    /// `row_map[row]` = index of the operation at wire position `row`.
    pub row_map: Vec<usize>,
}

/// Groups operations into row batches by their set of given columns.
///
/// Operations keep their relative order per primary key: an operation joins the latest
/// batch with its column set unless a later batch already holds an operation on the same
/// key, in which case it opens a new batch (so `delete k; insert k; delete k` stays in
/// that order). Batches are in order of creation, and the server applies them in that
/// order.
pub fn encode_write<'a>(
    schema: &Schema,
    ops: impl IntoIterator<Item = &'a Operation>,
) -> Result<EncodedWrite> {
    struct Group<'o> {
        given: Vec<usize>,
        ops: Vec<(usize, &'o Operation)>,
    }
    let mut groups: Vec<Group<'a>> = Vec::new();
    // Column set -> index of the latest group with it.
    let mut latest: HashMap<Vec<usize>, usize> = HashMap::new();
    // Encoded key -> index of the last group holding an op on it.
    let mut last_for_key: HashMap<Vec<u8>, usize> = HashMap::new();
    for (n, op) in ops.into_iter().enumerate() {
        let given: Vec<usize> = op
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_some())
            .map(|(i, _)| i)
            .collect();
        let k = op.encoded_key(schema)?;
        let target = match (latest.get(&given), last_for_key.get(&k)) {
            (Some(&g), Some(&kg)) if kg > g => None,
            (Some(&g), _) => Some(g),
            (None, _) => None,
        };
        let g = match target {
            Some(g) => g,
            None => {
                groups.push(Group {
                    given: given.clone(),
                    ops: vec![],
                });
                latest.insert(given, groups.len() - 1);
                groups.len() - 1
            }
        };
        groups[g].ops.push((n, op));
        last_for_key.insert(k, g);
    }
    let mut out = EncodedWrite::default();
    for g in groups {
        let fields: Vec<Field> = g
            .given
            .iter()
            .map(|&i| {
                let c = schema.column(i);
                Field::new(&c.name, c.data_type.to_arrow(), true)
            })
            .collect();
        let arrow_schema = Arc::new(ArrowSchema::new(fields));
        let columns = g
            .given
            .iter()
            .map(|&i| {
                array_from_values(
                    &schema.column(i).data_type,
                    g.ops
                        .iter()
                        .map(|(_, op)| op.values[i].as_ref().unwrap_or(&Value::Null)),
                )
            })
            .collect::<cairn_common::Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            arrow_schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(g.ops.len())),
        )?;
        let ipc = encode_ipc(&batch)?;
        let mut conditions = Vec::new();
        for (row, (_, op)) in g.ops.iter().enumerate() {
            let c = &op.condition;
            if c.is_empty() {
                continue;
            }
            conditions.push(RowCondition {
                row: row as u32,
                unchanged_since: c.unchanged_since.unwrap_or(0),
                predicates_json: if c.predicates.is_empty() {
                    Default::default()
                } else {
                    serde_json::to_vec(&c.predicates)
                        .map_err(|e| ClientError::Internal(format!("encoding a condition: {e}")))?
                        .into()
                },
                mutations_json: if c.mutations.is_empty() {
                    Default::default()
                } else {
                    serde_json::to_vec(&c.mutations)
                        .map_err(|e| {
                            ClientError::Internal(format!("encoding atomic operations: {e}"))
                        })?
                        .into()
                },
            });
        }
        out.batches.push(RowBatch {
            op_kinds: g
                .ops
                .iter()
                .map(|(_, op)| op.kind as i32 as u8)
                .collect::<Vec<u8>>()
                .into(),
            arrow_ipc: ipc.into(),
            conditions,
        });
        out.row_map.extend(g.ops.iter().map(|(n, _)| *n));
    }
    Ok(out)
}

/// Encodes one batch as an Arrow IPC stream.
pub(crate) fn encode_ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut w = StreamWriter::try_new(Vec::new(), &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    Ok(w.into_inner()?)
}

/// Decodes an Arrow IPC stream (empty bytes: no batches). Zero-row batches are dropped.
pub fn decode_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(vec![]);
    }
    let reader =
        StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| ClientError::Decode {
            what: "Arrow IPC stream",
            detail: e.to_string(),
        })?;
    let mut out = Vec::new();
    for b in reader {
        let b = b.map_err(|e| ClientError::Decode {
            what: "Arrow IPC batch",
            detail: e.to_string(),
        })?;
        if b.num_rows() > 0 {
            out.push(b);
        }
    }
    Ok(out)
}

/// Maps a response's row errors back to operations. `ops[i]` is `(index in session
/// order, operation)` in the order they were encoded, and `row_map` comes from
/// [`encode_write`] over those operations. Errors naming a row outside the request are
/// logged and dropped.
pub(crate) fn map_row_errors(
    errors: &[RowError],
    row_map: &[usize],
    ops: &[(usize, Operation)],
) -> Vec<RowErrorInfo> {
    let mut out = Vec::with_capacity(errors.len());
    for e in errors {
        let Some((op_index, op)) = row_map.get(e.row as usize).and_then(|&i| ops.get(i)) else {
            tracing::warn!(
                row = e.row,
                rows = row_map.len(),
                message = %e.message,
                "server reported a row error for a row outside the request; ignoring it"
            );
            continue;
        };
        out.push(RowErrorInfo {
            op_index: *op_index,
            kind: RowErrorKind::try_from(e.kind).unwrap_or(RowErrorKind::Invalid),
            message: e.message.clone(),
            op: op.clone(),
        });
    }
    out.sort_by_key(|e| e.op_index);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::{ColumnSpec, DataType};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("name", DataType::String).nullable(),
                ColumnSpec::new("score", DataType::Double).nullable(),
                ColumnSpec::new("n", DataType::Int32).with_default(Value::Int32(0)),
            ],
            &["k"],
        )
        .unwrap()
    }

    fn full(k: i64) -> Vec<Value> {
        vec![
            Value::Int64(k),
            Value::String(format!("row{k}")),
            Value::Double(k as f64 / 2.0),
            Value::Int32(k as i32),
        ]
    }

    /// Decodes an encoded write back into (kind, values-by-column) per wire row.
    fn decode(s: &Schema, w: &EncodedWrite) -> Vec<(OpKind, Vec<Option<Value>>)> {
        let mut rows = vec![];
        for rb in &w.batches {
            let batches = decode_ipc(&rb.arrow_ipc).unwrap();
            assert_eq!(batches.len(), 1);
            let b = &batches[0];
            assert_eq!(b.num_rows(), rb.op_kinds.len());
            for f in b.schema().fields() {
                assert!(f.is_nullable(), "all write fields are nullable");
            }
            for r in 0..b.num_rows() {
                let mut vals = vec![None; s.num_columns()];
                for (ci, f) in b.schema().fields().iter().enumerate() {
                    let i = s.index_of(f.name()).unwrap();
                    let t = &s.column(i).data_type;
                    assert_eq!(f.data_type(), &t.to_arrow());
                    vals[i] = Some(Value::from_array(b.column(ci).as_ref(), r, t).unwrap());
                }
                let kind = OpKind::try_from(rb.op_kinds[r] as i32).unwrap();
                rows.push((kind, vals));
            }
        }
        rows
    }

    #[test]
    fn groups_by_given_columns_and_round_trips_through_ipc() {
        let s = schema();
        let ops = vec![
            Operation::insert(full(1)),
            Operation::update(&s, &[Value::Int64(2)], &[("score", Value::Double(9.5))]).unwrap(),
            Operation::upsert(full(3)),
            Operation::delete(&s, &[Value::Int64(4)]).unwrap(),
            Operation::update(&s, &[Value::Int64(5)], &[("score", Value::Null)]).unwrap(),
            Operation::named(
                OpKind::Insert,
                &s,
                &[
                    ("k", Value::Int64(6)),
                    ("name", Value::String("six".into())),
                ],
            )
            .unwrap(),
            Operation::delete(&s, &[Value::Int64(7)]).unwrap(),
            Operation::insert(full(8)),
        ];
        for op in &ops {
            op.validate(&s).unwrap();
        }
        let w = encode_write(&s, &ops).unwrap();
        // Column sets: {all}, {k,score}, {k}, {k,name}.
        assert_eq!(w.batches.len(), 4);
        assert_eq!(w.row_map, vec![0, 2, 7, 1, 4, 3, 6, 5]);
        let rows = decode(&s, &w);
        assert_eq!(rows.len(), ops.len());
        for (pos, (kind, vals)) in rows.iter().enumerate() {
            let op = &ops[w.row_map[pos]];
            assert_eq!(*kind, op.kind, "row {pos}");
            assert_eq!(vals, &op.values, "row {pos}");
        }
        // The op kind bytes are the enum values.
        assert_eq!(
            w.batches[0].op_kinds.as_ref(),
            &[
                OpKind::Insert as u8,
                OpKind::Upsert as u8,
                OpKind::Insert as u8
            ]
        );
        assert_eq!(w.batches[2].op_kinds.as_ref(), &[5u8, 5u8]);
    }

    #[test]
    fn operations_on_one_key_keep_their_order() {
        let s = schema();
        let k = [Value::Int64(1)];
        let ops = vec![
            Operation::delete(&s, &k).unwrap(),
            Operation::insert(full(1)),
            Operation::delete(&s, &k).unwrap(),
            Operation::delete(&s, &[Value::Int64(2)]).unwrap(),
            Operation::insert(full(3)),
        ];
        let w = encode_write(&s, &ops).unwrap();
        // delete k | insert k, insert 3 | delete k, delete 2 — key 1 stays
        // delete, insert, delete; unrelated keys join existing batches.
        assert_eq!(w.batches.len(), 3);
        assert_eq!(w.row_map, vec![0, 1, 4, 2, 3]);
        let rows = decode(&s, &w);
        let kinds_for_1: Vec<OpKind> = rows
            .iter()
            .filter(|(_, v)| v[0] == Some(Value::Int64(1)))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(
            kinds_for_1,
            vec![OpKind::Delete, OpKind::Insert, OpKind::Delete]
        );
    }

    #[test]
    fn row_errors_map_back_to_operations() {
        let s = schema();
        let ops: Vec<(usize, Operation)> = vec![
            (10, Operation::insert(full(1))),
            (11, Operation::delete(&s, &[Value::Int64(2)]).unwrap()),
            (12, Operation::insert(full(3))),
            (14, Operation::delete(&s, &[Value::Int64(4)]).unwrap()),
        ];
        let w = encode_write(&s, ops.iter().map(|(_, o)| o)).unwrap();
        // Wire order: insert 1, insert 3 | delete 2, delete 4.
        assert_eq!(w.row_map, vec![0, 2, 1, 3]);
        let errs = vec![
            RowError {
                row: 3,
                kind: RowErrorKind::NotFound as i32,
                message: "key 4 not found".into(),
            },
            RowError {
                row: 1,
                kind: RowErrorKind::AlreadyPresent as i32,
                message: "key 3 exists".into(),
            },
            RowError {
                row: 99,
                kind: 0,
                message: "bogus".into(),
            },
        ];
        let mapped = map_row_errors(&errs, &w.row_map, &ops);
        assert_eq!(mapped.len(), 2);
        assert_eq!(mapped[0].op_index, 12);
        assert_eq!(mapped[0].kind, RowErrorKind::AlreadyPresent);
        assert_eq!(mapped[0].op, ops[2].1);
        assert_eq!(mapped[1].op_index, 14);
        assert_eq!(mapped[1].kind, RowErrorKind::NotFound);
        assert_eq!(mapped[1].message, "key 4 not found");
    }

    #[test]
    fn validation_catches_bad_operations() {
        let s = schema();
        assert!(Operation::insert(full(1)).validate(&s).is_ok());
        assert!(
            Operation::insert(full(1)[..3].to_vec())
                .validate(&s)
                .is_err()
        );
        let mut no_key = Operation::insert(full(1));
        no_key.values[0] = None;
        assert!(no_key.validate(&s).is_err());
        let mut null_key = Operation::insert(full(1));
        null_key.values[0] = Some(Value::Null);
        assert!(null_key.validate(&s).is_err());
        let mut wrong_type = Operation::insert(full(1));
        wrong_type.values[2] = Some(Value::Int32(1));
        assert!(wrong_type.validate(&s).is_err());
        // "n" has a default, so an insert may omit it; name/score are nullable.
        let partial = Operation::named(OpKind::Insert, &s, &[("k", Value::Int64(1))]).unwrap();
        assert!(partial.validate(&s).is_ok());
        let mut del = Operation::delete(&s, &[Value::Int64(1)]).unwrap();
        assert!(del.validate(&s).is_ok());
        del.values[1] = Some(Value::String("x".into()));
        assert!(del.validate(&s).is_err());
        assert!(Operation::update(&s, &[Value::Int64(1)], &[("k", Value::Int64(2))]).is_err());
        assert!(Operation::update(&s, &[], &[]).is_err());
        assert!(Operation::update(&s, &[Value::Int64(1)], &[("nope", Value::Int64(2))]).is_err());
        let set_not_null_to_null =
            Operation::update(&s, &[Value::Int64(1)], &[("n", Value::Null)]).unwrap();
        assert!(set_not_null_to_null.validate(&s).is_err());
    }
}
