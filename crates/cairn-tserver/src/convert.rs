//! Conversions at the RPC boundary: Arrow IPC write batches into row ops, scan batches
//! into IPC, row errors into their wire form.

use arrow::array::RecordBatch;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use cairn_common::{HybridTime, Schema, Value};
use cairn_proto as pb;
use cairn_tablet::{OpKind, RowError, RowOp};

use crate::error::{Result, TserverError};

/// The tablet's op kind for a wire op kind byte.
pub fn op_kind(b: u8) -> Result<OpKind> {
    let k = pb::OpKind::try_from(b as i32)
        .map_err(|_| TserverError::InvalidArgument(format!("unknown operation kind {b}")))?;
    Ok(match k {
        pb::OpKind::Insert => OpKind::Insert,
        pb::OpKind::InsertIgnore => OpKind::InsertIgnore,
        pb::OpKind::Upsert => OpKind::Upsert,
        pb::OpKind::Update => OpKind::Update,
        pb::OpKind::UpdateIgnore => OpKind::UpdateIgnore,
        pb::OpKind::Delete => OpKind::Delete,
        pb::OpKind::DeleteIgnore => OpKind::DeleteIgnore,
    })
}

/// Decodes an Arrow IPC stream into its batches.
pub fn decode_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(vec![]);
    }
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| TserverError::InvalidArgument(format!("malformed Arrow IPC data: {e}")))?;
    reader
        .map(|b| {
            b.map_err(|e| TserverError::InvalidArgument(format!("malformed Arrow IPC data: {e}")))
        })
        .collect()
}

/// Encodes batches as one Arrow IPC stream.
pub fn encode_ipc(
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut out, schema)
            .map_err(|e| TserverError::Internal(e.to_string()))?;
        for b in batches {
            w.write(b)
                .map_err(|e| TserverError::Internal(e.to_string()))?;
        }
        w.finish()
            .map_err(|e| TserverError::Internal(e.to_string()))?;
    }
    Ok(out)
}

/// Turns the write batches of a request into row ops against `schema`. A column the
/// table does not have, or a cell of the wrong type, fails the whole request (nothing
/// is written).
pub fn row_ops(schema: &Schema, batches: &[pb::RowBatch]) -> Result<Vec<RowOp>> {
    let mut ops = Vec::new();
    for rb in batches {
        let decoded = decode_ipc(&rb.arrow_ipc)?;
        let rows: usize = decoded.iter().map(|b| b.num_rows()).sum();
        if rows != rb.op_kinds.len() {
            return Err(TserverError::InvalidArgument(format!(
                "a row batch has {rows} rows but {} operation kinds",
                rb.op_kinds.len()
            )));
        }
        let first = ops.len();
        let mut k = 0;
        for batch in decoded {
            let mut cols = Vec::with_capacity(batch.num_columns());
            for (f, a) in batch.schema().fields().iter().zip(batch.columns()) {
                let i = schema.index_of(f.name()).map_err(|_| {
                    TserverError::InvalidArgument(format!(
                        "the table has no column '{}'; check the schema with `cairn table describe`",
                        f.name()
                    ))
                })?;
                cols.push((i, a.clone()));
            }
            for r in 0..batch.num_rows() {
                let mut values: Vec<Option<Value>> = vec![None; schema.num_columns()];
                for (i, a) in &cols {
                    let c = schema.column(*i);
                    let v = Value::from_array(a.as_ref(), r, &c.data_type).map_err(|e| {
                        TserverError::InvalidArgument(format!("column '{}': {e}", c.name))
                    })?;
                    values[*i] = Some(v);
                }
                ops.push(RowOp::new(op_kind(rb.op_kinds[k])?, values));
                k += 1;
            }
        }
        for c in &rb.conditions {
            let op = ops.get_mut(first + c.row as usize).ok_or_else(|| {
                TserverError::InvalidArgument(format!(
                    "a row condition names row {} of a batch of {} rows",
                    c.row, k
                ))
            })?;
            if c.unchanged_since != 0 {
                op.condition.unchanged_since = Some(HybridTime(c.unchanged_since));
            }
            if !c.predicates_json.is_empty() {
                op.condition.predicates =
                    serde_json::from_slice(&c.predicates_json).map_err(|e| {
                        TserverError::InvalidArgument(format!(
                            "malformed condition predicates: {e}"
                        ))
                    })?;
            }
        }
    }
    Ok(ops)
}

/// The tablet's request id for a wire request id (an empty client id is no id).
pub fn request_id(r: Option<&pb::RequestId>) -> Result<Option<cairn_tablet::RequestId>> {
    let Some(r) = r else { return Ok(None) };
    if r.client_id.is_empty() {
        return Ok(None);
    }
    if r.client_id.len() > 128 {
        return Err(TserverError::InvalidArgument(
            "a request's client id is at most 128 bytes".into(),
        ));
    }
    Ok(Some(cairn_tablet::RequestId {
        client_id: r.client_id.clone(),
        seq_no: r.seq_no,
        first_incomplete_seq_no: r.first_incomplete_seq_no,
    }))
}

/// The wire form of a row error.
pub fn row_error(row: usize, e: &RowError) -> pb::RowError {
    let kind = match e {
        RowError::AlreadyPresent => pb::RowErrorKind::AlreadyPresent,
        RowError::NotFound => pb::RowErrorKind::NotFound,
        RowError::Invalid(_) => pb::RowErrorKind::Invalid,
        RowError::Conflict => pb::RowErrorKind::Conflict,
        RowError::ConditionFailed => pb::RowErrorKind::ConditionFailed,
        RowError::Aborted => pb::RowErrorKind::Aborted,
    };
    pb::RowError {
        row: row as u32,
        kind: kind as i32,
        message: e.to_string(),
    }
}
