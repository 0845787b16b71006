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

/// The most rows one IPC record batch of a request may declare.
const MAX_IPC_BATCH_ROWS: i64 = 1 << 24;

/// Checks an IPC stream's framing before arrow reads it: every message's metadata and
/// body must lie within the bytes, and record batches must declare at most
/// [`MAX_IPC_BATCH_ROWS`] rows per array. Arrow allocates what the metadata declares
/// before it looks at the body, so a forged length would otherwise abort the process
/// with a failed allocation (found by the RPC fuzz test).
fn check_ipc_framing(mut b: &[u8]) -> std::result::Result<(), String> {
    let i32_at = |b: &[u8], at: usize| -> std::result::Result<i32, String> {
        b.get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .map(i32::from_le_bytes)
            .ok_or_else(|| "the stream ends inside a message header".to_string())
    };
    while !b.is_empty() {
        let (mut len, mut off) = (i32_at(b, 0)?, 4usize);
        if len == -1 {
            len = i32_at(b, 4)?;
            off = 8;
        }
        if len == 0 {
            return Ok(());
        }
        let len = usize::try_from(len).map_err(|_| "a negative metadata length".to_string())?;
        let meta = b
            .get(off..off + len)
            .ok_or("a message's metadata runs past the end of the stream")?;
        let msg = arrow::ipc::root_as_message(meta)
            .map_err(|e| format!("unreadable message metadata: {e}"))?;
        let body =
            usize::try_from(msg.bodyLength()).map_err(|_| "a negative body length".to_string())?;
        let end = (off + len)
            .checked_add(body)
            .filter(|e| *e <= b.len())
            .ok_or("a message's body runs past the end of the stream")?;
        let batch = msg
            .header_as_record_batch()
            .or_else(|| msg.header_as_dictionary_batch().and_then(|d| d.data()));
        if let Some(rb) = batch {
            let too_long = |n: i64| !(0..=MAX_IPC_BATCH_ROWS).contains(&n);
            if too_long(rb.length())
                || rb
                    .nodes()
                    .is_some_and(|ns| ns.iter().any(|n| too_long(n.length())))
            {
                return Err(format!(
                    "a record batch declares more than {MAX_IPC_BATCH_ROWS} rows (or a negative count)"
                ));
            }
            if let Some(bufs) = rb.buffers()
                && bufs.iter().any(|x| {
                    x.offset() < 0
                        || x.length() < 0
                        || (x.offset() as u64).saturating_add(x.length() as u64) > body as u64
                })
            {
                return Err("a buffer lies outside its message body".into());
            }
        }
        b = &b[end..];
    }
    Ok(())
}

/// Decodes an Arrow IPC stream into its batches.
///
/// The bytes come from clients. Their framing is checked first
/// ([`check_ipc_framing`]); arrow's reader also panics on some malformed streams
/// (buffer offsets that overflow, found by the `write_batch` fuzz target), so a panic
/// while decoding is caught and answered as malformed input too.
pub fn decode_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(vec![]);
    }
    let malformed = |e: &dyn std::fmt::Display| {
        TserverError::InvalidArgument(format!("malformed Arrow IPC data: {e}"))
    };
    check_ipc_framing(bytes).map_err(|e| malformed(&e))?;
    let decode = || -> Result<Vec<RecordBatch>> {
        let reader =
            StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(|e| malformed(&e))?;
        reader.map(|b| b.map_err(|e| malformed(&e))).collect()
    };
    match std::panic::catch_unwind(decode) {
        Ok(r) => r,
        Err(_) => Err(malformed(&"the stream's buffers are inconsistent")),
    }
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

/// Bytes a value takes in a row (for the row-size limit): its length for strings and
/// binaries, 8 (16 for decimals) for the rest.
fn value_bytes(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Binary(b) => b.len(),
        Value::Decimal(_) => 16,
        _ => 8,
    }
}

/// The error of a row larger than `--max-row-bytes`.
pub fn row_too_large(row: usize, bytes: usize, max: usize) -> TserverError {
    TserverError::InvalidArgument(format!(
        "row {row} of the request has {bytes} bytes, more than --max-row-bytes ({max}): \
         store large values elsewhere and keep a reference in the row"
    ))
}

/// Checks every row of `batch` against `max` bytes (strings and binaries by length,
/// other cells 8 bytes).
pub fn check_row_sizes(batch: &RecordBatch, max: usize) -> Result<()> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::DataType as A;
    let fixed = 8 * batch.num_columns();
    let mut sizes = vec![fixed; batch.num_rows()];
    for c in batch.columns() {
        let lens: Box<dyn Fn(usize) -> usize> = match c.data_type() {
            A::Utf8 => {
                let a = c.as_string::<i32>();
                Box::new(move |r| a.value_length(r) as usize)
            }
            A::LargeUtf8 => {
                let a = c.as_string::<i64>();
                Box::new(move |r| a.value_length(r) as usize)
            }
            A::Binary => {
                let a = c.as_binary::<i32>();
                Box::new(move |r| a.value_length(r) as usize)
            }
            A::LargeBinary => {
                let a = c.as_binary::<i64>();
                Box::new(move |r| a.value_length(r) as usize)
            }
            _ => continue,
        };
        for (r, s) in sizes.iter_mut().enumerate() {
            if !c.is_null(r) {
                *s += lens(r);
            }
        }
    }
    match sizes.iter().enumerate().find(|(_, s)| **s > max) {
        Some((r, s)) => Err(row_too_large(r, *s, max)),
        None => Ok(()),
    }
}

/// Turns the write batches of a request into row ops against `schema`. A column the
/// table does not have, a cell of the wrong type, or a row of more than
/// `max_row_bytes` fails the whole request (nothing is written).
pub fn row_ops(
    schema: &Schema,
    batches: &[pb::RowBatch],
    max_row_bytes: usize,
) -> Result<Vec<RowOp>> {
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
                let mut bytes = 0;
                for (i, a) in &cols {
                    let c = schema.column(*i);
                    let v = Value::from_array(a.as_ref(), r, &c.data_type).map_err(|e| {
                        TserverError::InvalidArgument(format!("column '{}': {e}", c.name))
                    })?;
                    bytes += value_bytes(&v);
                    values[*i] = Some(v);
                }
                if bytes > max_row_bytes {
                    return Err(row_too_large(ops.len(), bytes, max_row_bytes));
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
            if !c.mutations_json.is_empty() {
                op.condition.mutations =
                    serde_json::from_slice(&c.mutations_json).map_err(|e| {
                        TserverError::InvalidArgument(format!("malformed atomic operations: {e}"))
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
