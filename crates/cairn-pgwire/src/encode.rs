//! Rows for the wire: column descriptions from an Arrow schema and `DataRow`s from a
//! record batch stream (arrow-pg's encoder, text or binary per column), stopped with
//! SQLSTATE 57014 when the client cancels the statement.

use std::sync::Arc;

use arrow::compute::cast;
use arrow::datatypes::{DataType as ArrowType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{Stream, StreamExt, stream};
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use tokio::sync::watch;

use cairn_sql::error::SqlError;

/// The format of result column `idx` (text where the client gave no code for it).
pub(crate) fn column_format(format: &Format, idx: usize) -> FieldFormat {
    match format {
        Format::UnifiedText => FieldFormat::Text,
        Format::UnifiedBinary => FieldFormat::Binary,
        Format::Individual(codes) => codes
            .get(idx)
            .map(|c| FieldFormat::from(*c))
            .unwrap_or(FieldFormat::Text),
    }
}

/// The Arrow type a column is sent as, where arrow-pg needs another one than the
/// engine's: `Int8` has no PostgreSQL type and goes as `int2`; a column of unknown
/// type (`SELECT NULL`, `SELECT $1`) goes as `text`, like in PostgreSQL.
fn wire_type(t: &ArrowType) -> Option<ArrowType> {
    match t {
        ArrowType::Null => Some(ArrowType::Utf8),
        ArrowType::Int8 => Some(ArrowType::Int16),
        ArrowType::Float16 => Some(ArrowType::Float32),
        ArrowType::Dictionary(_, v) => Some(wire_type(v).unwrap_or_else(|| (**v).clone())),
        _ => None,
    }
}

/// The schema rows are encoded with: the engine's, with [`wire_type`] applied.
pub(crate) fn wire_schema(schema: &Schema) -> SchemaRef {
    if !schema
        .fields()
        .iter()
        .any(|f| wire_type(f.data_type()).is_some())
    {
        return Arc::new(schema.clone());
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match wire_type(f.data_type()) {
            Some(t) => f.as_ref().clone().with_data_type(t),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Casts a batch to its wire schema (a no-op for most batches).
fn to_wire(batch: RecordBatch, wire: &SchemaRef) -> Result<RecordBatch, SqlError> {
    if batch.schema().fields() == wire.fields() {
        return Ok(batch);
    }
    let columns = batch
        .columns()
        .iter()
        .zip(wire.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                cast(c, f.data_type())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(wire.clone(), columns)?)
}

/// PostgreSQL's `typlen` for fixed-size types (-1: variable).
fn type_size(t: &Type) -> i16 {
    match *t {
        Type::BOOL | Type::CHAR => 1,
        Type::INT2 => 2,
        Type::INT4 | Type::FLOAT4 | Type::DATE | Type::OID => 4,
        Type::INT8 | Type::FLOAT8 | Type::TIMESTAMP | Type::TIMESTAMPTZ | Type::TIME => 8,
        Type::UUID | Type::INTERVAL => 16,
        _ => -1,
    }
}

/// Column descriptions for a (wire) schema, each in the format the client asked for.
pub(crate) fn fields(schema: &Schema, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let t = arrow_pg::datatypes::field_into_pg_type(f)?;
            let typmod = match f.data_type() {
                // numeric(p, s) is sent as ((p << 16) | s) + 4 (VARHDRSZ).
                ArrowType::Decimal128(p, s) if *s >= 0 => {
                    ((i32::from(*p) << 16) | i32::from(*s)) + 4
                }
                _ => -1,
            };
            let size = type_size(&t);
            Ok(
                FieldInfo::new(f.name().clone(), None, None, t, column_format(format, i))
                    .with_type_size(size)
                    .with_type_modifier(typmod),
            )
        })
        .collect()
}

/// The wire error for a SQL error: severity ERROR and the error's SQLSTATE.
pub(crate) fn pg_error(e: &SqlError) -> PgWireError {
    PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new(
        "ERROR".into(),
        e.sqlstate().into(),
        e.to_string(),
    )))
}

/// The error a canceled statement ends with.
pub(crate) fn canceled() -> PgWireError {
    PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new(
        "ERROR".into(),
        "57014".into(),
        "canceling statement due to user request".into(),
    )))
}

/// The error a statement that ran past `statement_timeout` ends with.
pub(crate) fn timed_out() -> PgWireError {
    PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new(
        "ERROR".into(),
        "57014".into(),
        "canceling statement due to statement timeout".into(),
    )))
}

/// What can stop a statement while its rows stream: a cancel request for the
/// connection (the watch changes) or its `statement_timeout` deadline.
#[derive(Clone, Default)]
pub(crate) struct Stop {
    /// Changes when the client sends a cancel request.
    pub(crate) cancel: Option<watch::Receiver<u64>>,
    /// When `statement_timeout` runs out.
    pub(crate) deadline: Option<tokio::time::Instant>,
}

/// Ends a record batch stream with [`canceled`] as soon as the cancel watch changes,
/// or with [`timed_out`] at the deadline.
fn guard(
    batches: SendableRecordBatchStream,
    stop: Stop,
) -> impl Stream<Item = PgWireResult<RecordBatch>> + Send {
    stream::unfold(Some((batches, stop)), |state| async move {
        let (mut batches, mut stop) = state?;
        let deadline = stop.deadline;
        let sleep = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        let item = loop {
            let connection_gone = tokio::select! {
                biased;
                changed = cancel_changed(&mut stop.cancel) => {
                    if changed {
                        return Some((Err(canceled()), None));
                    }
                    true
                }
                _ = &mut sleep => return Some((Err(timed_out()), None)),
                item = batches.next() => break item,
            };
            if connection_gone {
                // Nobody can cancel any more.
                stop.cancel = None;
            }
        };
        match item? {
            Ok(b) => Some((Ok(b), Some((batches, stop)))),
            Err(e) => Some((Err(pg_error(&SqlError::from(e))), None)),
        }
    })
}

/// Whether the cancel watch changed (`false`: its connection is gone); never
/// resolves without a watch.
async fn cancel_changed(cancel: &mut Option<watch::Receiver<u64>>) -> bool {
    match cancel {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// A `QueryResponse` streaming `batches` (whose schema is `schema`) in `format`.
pub(crate) fn query_response(
    schema: &Schema,
    batches: SendableRecordBatchStream,
    format: &Format,
    stop: Stop,
) -> PgWireResult<QueryResponse> {
    let wire = wire_schema(schema);
    let fields = Arc::new(fields(&wire, format)?);
    let encode_fields = fields.clone();
    let rows = guard(batches, stop).flat_map(move |batch| {
        let rows: Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send> =
            match batch.and_then(|b| to_wire(b, &wire).map_err(|e| pg_error(&e))) {
                Ok(b) => {
                    if b.num_columns() == encode_fields.len() {
                        arrow_pg::datatypes::encode_recordbatch(encode_fields.clone(), b)
                    } else {
                        Box::new(std::iter::once(Err(pg_error(&SqlError::other(
                            "XX000",
                            "a batch does not match the result's columns",
                        )))))
                    }
                }
                Err(e) => Box::new(std::iter::once(Err(e))),
            };
        stream::iter(rows)
    });
    Ok(QueryResponse::new(fields, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int8Array, StringArray};
    use datafusion::physical_plan::memory::MemoryStream;

    #[test]
    fn fields_map_types_formats_and_typmods() {
        let schema = Schema::new(vec![
            Field::new("i", ArrowType::Int64, false),
            Field::new("d", ArrowType::Decimal128(10, 2), true),
            Field::new("s", ArrowType::Utf8, true),
        ]);
        let f = fields(&schema, &Format::Individual(vec![1, 0])).unwrap();
        assert_eq!(f[0].datatype(), &Type::INT8);
        assert_eq!(f[0].format(), FieldFormat::Binary);
        assert_eq!(f[0].type_size(), 8);
        assert_eq!(f[1].datatype(), &Type::NUMERIC);
        assert_eq!(f[1].type_modifier(), (10 << 16 | 2) + 4);
        assert_eq!(f[1].format(), FieldFormat::Text);
        // No format code for the third column: text.
        assert_eq!(f[2].format(), FieldFormat::Text);
        assert_eq!(f[2].datatype(), &Type::TEXT);
    }

    #[tokio::test]
    async fn rows_are_encoded_and_int8_goes_as_int2() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", ArrowType::Int8, true),
            Field::new("b", ArrowType::Utf8, true),
            Field::new("c", ArrowType::Decimal128(5, 1), true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int8Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("x"), Some("y")])),
                Arc::new(
                    Decimal128Array::from(vec![Some(125), None])
                        .with_precision_and_scale(5, 1)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let stream = Box::pin(MemoryStream::try_new(vec![batch], schema.clone(), None).unwrap());
        let mut resp =
            query_response(&schema, stream, &Format::UnifiedBinary, Stop::default()).unwrap();
        assert_eq!(resp.row_schema()[0].datatype(), &Type::INT2);
        let rows: Vec<_> = resp.data_rows().collect().await;
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.is_ok()));
    }

    #[tokio::test]
    async fn columns_of_unknown_type_go_as_text() {
        // Described as `SELECT $1` (Null), executed with an int2 value.
        let described = Schema::new(vec![Field::new("x", ArrowType::Null, true)]);
        let actual = Arc::new(Schema::new(vec![Field::new("x", ArrowType::Int16, true)]));
        let batch = RecordBatch::try_new(
            actual.clone(),
            vec![Arc::new(arrow::array::Int16Array::from(vec![5]))],
        )
        .unwrap();
        let stream = Box::pin(MemoryStream::try_new(vec![batch], actual, None).unwrap());
        let mut resp =
            query_response(&described, stream, &Format::UnifiedBinary, Stop::default()).unwrap();
        assert_eq!(resp.row_schema()[0].datatype(), &Type::TEXT);
        let rows: Vec<_> = resp.data_rows().collect().await;
        assert_eq!(rows.len(), 1);
        assert!(rows[0].is_ok());
    }

    #[tokio::test]
    async fn a_cancel_ends_the_stream_with_57014() {
        let schema = Arc::new(Schema::new(vec![Field::new("b", ArrowType::Utf8, true)]));
        // A stream that never produces a batch.
        let pending = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
            schema.clone(),
            stream::pending(),
        );
        let (tx, rx) = watch::channel(0u64);
        let stop = Stop {
            cancel: Some(rx),
            deadline: None,
        };
        let mut resp =
            query_response(&schema, Box::pin(pending), &Format::UnifiedText, stop).unwrap();
        tx.send_modify(|v| *v += 1);
        let first = resp.data_rows().next().await.unwrap();
        match first {
            Err(PgWireError::UserError(info)) => assert_eq!(info.code, "57014"),
            other => panic!("expected a cancel, got {other:?}"),
        }
        assert!(resp.data_rows().next().await.is_none());
    }

    #[tokio::test]
    async fn a_deadline_ends_the_stream_with_57014() {
        let schema = Arc::new(Schema::new(vec![Field::new("b", ArrowType::Utf8, true)]));
        let pending = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
            schema.clone(),
            stream::pending(),
        );
        let stop = Stop {
            cancel: None,
            deadline: Some(tokio::time::Instant::now() + std::time::Duration::from_millis(20)),
        };
        let mut resp =
            query_response(&schema, Box::pin(pending), &Format::UnifiedText, stop).unwrap();
        match resp.data_rows().next().await.unwrap() {
            Err(PgWireError::UserError(info)) => {
                assert_eq!(info.code, "57014");
                assert!(
                    info.message.contains("statement timeout"),
                    "{}",
                    info.message
                );
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}
