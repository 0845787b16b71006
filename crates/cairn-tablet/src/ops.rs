//! Row operations (what clients ask for), row changes (what storage records), and the
//! log records that carry them.
//!
//! A [`RowOp`] is one of Kudu's write operations on one row. Applying it yields a
//! [`RowChange`] in the store that owns the row: an update of some columns, a delete, or
//! a re-insert of a row that had been deleted. Changes name columns by stable id, so
//! they survive `ALTER TABLE`.

use cairn_common::codec::{self, Reader};
use cairn_common::{ColumnId, HybridTime, Schema, Value};

use crate::error::{Result, TabletError};

/// The write operations of the data model (DESIGN.md, "Data model").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Insert a new row; fails with `AlreadyPresent` if the key exists.
    Insert,
    /// Insert a new row; silently does nothing if the key exists.
    InsertIgnore,
    /// Insert, or update the given columns if the key exists.
    Upsert,
    /// Update the given columns; fails with `NotFound` if the key is absent.
    Update,
    /// Update the given columns; does nothing if the key is absent.
    UpdateIgnore,
    /// Delete the row; fails with `NotFound` if the key is absent.
    Delete,
    /// Delete the row; does nothing if the key is absent.
    DeleteIgnore,
}

impl OpKind {
    fn tag(self) -> u8 {
        self as u8
    }
    fn from_tag(t: u8) -> Option<OpKind> {
        use OpKind::*;
        [
            Insert,
            InsertIgnore,
            Upsert,
            Update,
            UpdateIgnore,
            Delete,
            DeleteIgnore,
        ]
        .get(t as usize)
        .copied()
    }
    /// Whether the op writes a whole row (insert-like).
    pub fn is_insert_like(self) -> bool {
        matches!(self, OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert)
    }
}

/// One write operation on one row. `values` has one slot per schema column (schema
/// order); `None` means "not given". Key columns are always required.
#[derive(Clone, Debug, PartialEq)]
pub struct RowOp {
    /// What to do.
    pub kind: OpKind,
    /// The cells given, by schema position.
    pub values: Vec<Option<Value>>,
}

impl RowOp {
    /// An op with every column given (insert / upsert of a full row).
    pub fn full(kind: OpKind, row: Vec<Value>) -> Self {
        RowOp {
            kind,
            values: row.into_iter().map(Some).collect(),
        }
    }
    /// `INSERT` of a full row.
    pub fn insert(row: Vec<Value>) -> Self {
        Self::full(OpKind::Insert, row)
    }
    /// `UPSERT` of a full row.
    pub fn upsert(row: Vec<Value>) -> Self {
        Self::full(OpKind::Upsert, row)
    }
    /// An op naming only the key columns (delete) and optionally some other cells
    /// (update), by column name.
    pub fn keyed(
        schema: &Schema,
        kind: OpKind,
        key: &[Value],
        cells: &[(&str, Value)],
    ) -> Result<Self> {
        let mut values = vec![None; schema.num_columns()];
        if key.len() != schema.key_indexes().len() {
            return Err(TabletError::InvalidRequest(format!(
                "the primary key has {} columns but {} key values were given",
                schema.key_indexes().len(),
                key.len()
            )));
        }
        for (&k, v) in schema.key_indexes().iter().zip(key) {
            values[k] = Some(v.clone());
        }
        for (name, v) in cells {
            values[schema.index_of(name)?] = Some(v.clone());
        }
        Ok(RowOp { kind, values })
    }
    /// `UPDATE` of some cells of the row with key `key`.
    pub fn update(schema: &Schema, key: &[Value], cells: &[(&str, Value)]) -> Result<Self> {
        Self::keyed(schema, OpKind::Update, key, cells)
    }
    /// `DELETE` of the row with key `key`.
    pub fn delete(schema: &Schema, key: &[Value]) -> Result<Self> {
        Self::keyed(schema, OpKind::Delete, key, &[])
    }
}

/// Why one row of a write batch failed. Other rows of the batch are unaffected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RowError {
    /// INSERT of a key that exists.
    #[error("key already present")]
    AlreadyPresent,
    /// UPDATE / DELETE of a key that does not exist.
    #[error("key not found")]
    NotFound,
    /// The row does not fit the schema.
    #[error("{0}")]
    Invalid(String),
}

/// A change recorded against an existing row (in a MemRowSet mutation chain or a delta
/// store). Columns are named by stable id.
#[derive(Clone, Debug, PartialEq)]
pub enum RowChange {
    /// Set these columns.
    Update(Vec<(ColumnId, Value)>),
    /// The row is deleted.
    Delete,
    /// The row is inserted again after a delete, with these full contents.
    Reinsert(Vec<(ColumnId, Value)>),
}

impl RowChange {
    /// Appends the change's encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (tag, cells): (u8, &[(ColumnId, Value)]) = match self {
            RowChange::Update(c) => (0, c),
            RowChange::Delete => (1, &[]),
            RowChange::Reinsert(c) => (2, c),
        };
        out.push(tag);
        codec::put_u32(out, cells.len() as u32);
        for (id, v) in cells {
            codec::put_u32(out, *id);
            codec::put_value(out, v);
        }
    }
    /// Reads a change written by [`RowChange::encode`].
    pub fn decode(r: &mut Reader<'_>) -> cairn_common::Result<RowChange> {
        let tag = r.u8()?;
        let n = r.u32()? as usize;
        if n > r.remaining() {
            return Err(cairn_common::CommonError::Decode {
                what: "row change",
                detail: "cell count exceeds the data".into(),
            });
        }
        let mut cells = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.u32()?;
            cells.push((id, r.value()?));
        }
        Ok(match tag {
            0 => RowChange::Update(cells),
            1 => RowChange::Delete,
            2 => RowChange::Reinsert(cells),
            t => {
                return Err(cairn_common::CommonError::Decode {
                    what: "row change",
                    detail: format!("unknown change tag {t}"),
                });
            }
        })
    }
    /// Approximate memory footprint.
    pub fn size_bytes(&self) -> usize {
        match self {
            RowChange::Delete => 8,
            RowChange::Update(c) | RowChange::Reinsert(c) => {
                16 + c.iter().map(|(_, v)| 8 + v.size_bytes()).sum::<usize>()
            }
        }
    }
}

/// A record in the tablet's write-ahead log.
#[derive(Clone, Debug, PartialEq)]
pub enum LogRecord {
    /// A write batch: every op was validated before it was logged; replay re-applies
    /// them at the same timestamp.
    Write {
        /// The batch's timestamp.
        ts: HybridTime,
        /// The ops, with cells named by column id.
        ops: Vec<(OpKind, Vec<(ColumnId, Value)>)>,
    },
    /// A schema change: the schema after it.
    AlterSchema {
        /// The new schema.
        schema: crate::metadata::SchemaMeta,
    },
    /// A bulk insert (see [`crate::bulk`]): new rows as one Arrow IPC stream whose
    /// columns are named by column id.
    BulkInsert {
        /// The load's timestamp.
        ts: HybridTime,
        /// The rows.
        ipc: Vec<u8>,
    },
}

impl LogRecord {
    /// Builds a write record from ops validated against `schema`.
    pub fn write(ts: HybridTime, schema: &Schema, ops: &[&RowOp]) -> LogRecord {
        let ops = ops
            .iter()
            .map(|op| {
                let cells = op
                    .values
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.as_ref().map(|v| (schema.column(i).id, v.clone())))
                    .collect();
                (op.kind, cells)
            })
            .collect();
        LogRecord::Write { ts, ops }
    }

    /// Serialises the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            LogRecord::Write { ts, ops } => {
                out.push(1);
                codec::put_u64(&mut out, ts.0);
                codec::put_u32(&mut out, ops.len() as u32);
                for (kind, cells) in ops {
                    out.push(kind.tag());
                    codec::put_u32(&mut out, cells.len() as u32);
                    for (id, v) in cells {
                        codec::put_u32(&mut out, *id);
                        codec::put_value(&mut out, v);
                    }
                }
            }
            LogRecord::AlterSchema { schema } => {
                out.push(2);
                codec::put_bytes(&mut out, &serde_json::to_vec(schema).unwrap_or_default());
            }
            LogRecord::BulkInsert { ts, ipc } => return Self::encode_bulk(*ts, ipc),
        }
        out
    }

    /// Serialises a [`LogRecord::BulkInsert`] without copying its rows first.
    pub fn encode_bulk(ts: HybridTime, ipc: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ipc.len() + 16);
        out.push(3);
        codec::put_u64(&mut out, ts.0);
        codec::put_bytes(&mut out, ipc);
        out
    }

    /// Parses a record written by [`LogRecord::encode`].
    pub fn decode(b: &[u8]) -> cairn_common::Result<LogRecord> {
        let mut r = Reader::new(b, "log record");
        let bad = |d: &str| cairn_common::CommonError::Decode {
            what: "log record",
            detail: d.to_string(),
        };
        match r.u8()? {
            1 => {
                let ts = HybridTime(r.u64()?);
                let n = r.u32()? as usize;
                if n > r.remaining() {
                    return Err(bad("op count exceeds the data"));
                }
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    let kind = OpKind::from_tag(r.u8()?).ok_or_else(|| bad("unknown op kind"))?;
                    let m = r.u32()? as usize;
                    if m > r.remaining() {
                        return Err(bad("cell count exceeds the data"));
                    }
                    let mut cells = Vec::with_capacity(m);
                    for _ in 0..m {
                        let id = r.u32()?;
                        cells.push((id, r.value()?));
                    }
                    ops.push((kind, cells));
                }
                Ok(LogRecord::Write { ts, ops })
            }
            2 => {
                let bytes = r.bytes()?;
                let schema =
                    serde_json::from_slice(bytes).map_err(|e| bad(&format!("bad schema: {e}")))?;
                Ok(LogRecord::AlterSchema { schema })
            }
            3 => {
                let ts = HybridTime(r.u64()?);
                let ipc = r.bytes()?.to_vec();
                Ok(LogRecord::BulkInsert { ts, ipc })
            }
            t => Err(bad(&format!("unknown record type {t}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_records_round_trip() {
        let rec = LogRecord::Write {
            ts: HybridTime(42),
            ops: vec![
                (
                    OpKind::Insert,
                    vec![(0, Value::Int64(1)), (1, Value::String("a".into()))],
                ),
                (OpKind::Delete, vec![(0, Value::Int64(2))]),
            ],
        };
        assert_eq!(LogRecord::decode(&rec.encode()).unwrap(), rec);
        let schema = cairn_common::Schema::new(
            vec![cairn_common::ColumnSpec::new(
                "k",
                cairn_common::DataType::Int64,
            )],
            &["k"],
        )
        .unwrap();
        let alter = LogRecord::AlterSchema {
            schema: crate::metadata::SchemaMeta::from_schema(&schema),
        };
        assert_eq!(LogRecord::decode(&alter.encode()).unwrap(), alter);
        let bulk = LogRecord::BulkInsert {
            ts: HybridTime(9),
            ipc: vec![1, 2, 3],
        };
        assert_eq!(LogRecord::decode(&bulk.encode()).unwrap(), bulk);
        assert!(LogRecord::decode(&[1, 2, 3]).is_err());
        let mut buf = Vec::new();
        RowChange::Reinsert(vec![(3, Value::Null)]).encode(&mut buf);
        assert_eq!(
            RowChange::decode(&mut Reader::new(&buf, "t")).unwrap(),
            RowChange::Reinsert(vec![(3, Value::Null)])
        );
    }
}
