//! Bulk insert: whole Arrow batches of new rows written straight into DiskRowSets.
//!
//! The row write path inserts each row into the MemRowSet, which a flush later turns
//! back into columns. A loader (COPY, `cairn table load`) already has columns, so the
//! bulk path keeps them: the leader checks a batch column by column
//! ([`shape_batch`]: types, NULLs, VARCHAR / DECIMAL limits, key sizes; rows that fail
//! get a row error and are left out) and logs it as one
//! [`crate::ops::LogRecord::BulkInsert`] holding the batch as Arrow IPC with columns
//! named by column id ([`encode_ipc`]), so it stays readable after `ALTER TABLE`.
//!
//! Every replica applies the record the same way (`Tablet::apply_bulk`): it brings the
//! batch to the current schema ([`to_current`]), computes and sorts the row keys
//! ([`row_keys`]), and sorts out keys that exist — a live row is an `AlreadyPresent`
//! error, a deleted one is re-inserted through the row path — before it writes the rest
//! as new DiskRowSets whose base data is the sorted batch and whose UNDO deltas say
//! "inserted at the load's timestamp", as a MemRowSet flush would have written them.
//! Replaying the record after a restart skips the rows a store already holds, by the
//! same rules as for row writes (a rowset's durable index, the MemRowSet's flushed
//! index), so a load is applied exactly once.

use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, Decimal128Array, RecordBatch, StringArray, new_null_array,
};
use arrow::datatypes::{Field, Schema as ArrowSchema};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use cairn_common::key::encode_value;
use cairn_common::schema::{MAX_CELL_BYTES, MAX_KEY_BYTES};
use cairn_common::types::array_of_repeated;
use cairn_common::{CommonError, DataType, Schema, Value};

use crate::diskrowset::parquet_column_name;
use crate::error::{Result, TabletError};
use crate::ops::RowError;
use crate::writer::base_arrow_schema;

/// A caller's batch checked and shaped for the log: the rows that passed (all schema
/// columns, named by id), their positions in the caller's batch, and the row errors of
/// the others.
#[derive(Debug)]
pub struct ShapedBatch {
    /// The accepted rows in record form.
    pub batch: RecordBatch,
    /// `positions[i]` = position in the caller's batch of record row `i`.
    pub positions: Vec<usize>,
    /// Rows that failed the checks, by position in the caller's batch.
    pub row_errors: Vec<(usize, RowError)>,
}

fn invalid(column: &str, detail: String) -> RowError {
    RowError::Invalid(
        CommonError::InvalidValue {
            column: column.to_string(),
            detail,
        }
        .to_string(),
    )
}

/// Checks a batch whose columns are named like the table's (any subset, any order;
/// omitted columns take their default or NULL) and shapes it into record form.
/// Columns the table does not have, or that cannot be cast to the column's type, fail
/// the whole batch; rows that break a column's constraints get a row error each.
pub fn shape_batch(schema: &Schema, batch: &RecordBatch) -> Result<ShapedBatch> {
    let rows = batch.num_rows();
    for f in batch.schema().fields() {
        if schema.index_of(f.name()).is_err() {
            return Err(TabletError::InvalidRequest(format!(
                "the batch has a column '{}' that the table does not have",
                f.name()
            )));
        }
    }
    let mut columns = Vec::with_capacity(schema.num_columns());
    let mut errors: Vec<Option<RowError>> = vec![None; rows];
    let mut fail = |row: usize, e: RowError| {
        if errors[row].is_none() {
            errors[row] = Some(e);
        }
    };
    for (i, c) in schema.columns().iter().enumerate() {
        let want = c.data_type.to_arrow();
        let array: ArrayRef = match batch.schema().index_of(&c.name) {
            Ok(pos) => {
                let a = batch.column(pos);
                if a.data_type() == &want {
                    a.clone()
                } else {
                    arrow::compute::cast(a, &want).map_err(|e| {
                        TabletError::InvalidRequest(format!(
                            "column '{}' cannot be read as {}: {e}",
                            c.name, c.data_type
                        ))
                    })?
                }
            }
            Err(_) => match &c.default {
                Some(v) => array_of_repeated(&c.data_type, v, rows)?,
                None => new_null_array(&want, rows),
            },
        };
        let key = schema.is_key_column(i);
        if (key || !c.nullable) && array.null_count() > 0 {
            let detail = if key {
                "NULL is not allowed in a primary key column"
            } else {
                "NULL in a NOT NULL column"
            };
            for r in (0..rows).filter(|&r| array.is_null(r)) {
                fail(r, invalid(&c.name, detail.to_string()));
            }
        }
        match &c.data_type {
            DataType::String | DataType::Varchar(_) => {
                let limit = match c.data_type {
                    DataType::Varchar(n) => n as usize,
                    _ => usize::MAX,
                };
                if let Some(s) = array.as_any().downcast_ref::<StringArray>() {
                    for r in (0..rows).filter(|&r| s.is_valid(r)) {
                        let v = s.value(r);
                        if v.len() > MAX_CELL_BYTES {
                            fail(r, cell_too_big(&c.name, v.len()));
                        } else if v.len() > limit && v.chars().count() > limit {
                            fail(
                                r,
                                invalid(
                                    &c.name,
                                    format!(
                                        "string of {} characters exceeds VARCHAR({limit})",
                                        v.chars().count()
                                    ),
                                ),
                            );
                        }
                    }
                }
            }
            DataType::Binary => {
                if let Some(b) = array.as_any().downcast_ref::<BinaryArray>() {
                    for r in (0..rows).filter(|&r| b.is_valid(r)) {
                        if b.value(r).len() > MAX_CELL_BYTES {
                            fail(r, cell_too_big(&c.name, b.value(r).len()));
                        }
                    }
                }
            }
            DataType::Decimal { precision, .. } => {
                let limit = 10u128.pow(*precision as u32);
                if let Some(d) = array.as_any().downcast_ref::<Decimal128Array>() {
                    for r in (0..rows).filter(|&r| d.is_valid(r)) {
                        if d.value(r).unsigned_abs() >= limit {
                            fail(
                                r,
                                invalid(
                                    &c.name,
                                    format!(
                                        "{} (unscaled) has more than {precision} digits",
                                        d.value(r)
                                    ),
                                ),
                            );
                        }
                    }
                }
            }
            _ => {}
        }
        columns.push(array);
    }
    let ids: Vec<_> = schema.columns().iter().map(|c| c.id).collect();
    let nullable = Arc::new(ArrowSchema::new(
        base_arrow_schema(schema, &ids)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<Field>>(),
    ));
    let all = RecordBatch::try_new_with_options(
        nullable,
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )?;
    for (r, k) in row_keys(schema, &all)?.into_iter().enumerate() {
        if let Err(e) = k {
            fail(r, e);
        }
    }
    let row_errors: Vec<(usize, RowError)> = errors
        .iter()
        .enumerate()
        .filter_map(|(r, e)| e.clone().map(|e| (r, e)))
        .collect();
    let positions: Vec<usize> = (0..rows).filter(|&r| errors[r].is_none()).collect();
    let kept = if row_errors.is_empty() {
        all
    } else {
        let mask = arrow::array::BooleanArray::from(
            errors.iter().map(|e| e.is_none()).collect::<Vec<bool>>(),
        );
        arrow::compute::filter_record_batch(&all, &mask)?
    };
    // The accepted rows satisfy the NOT NULL constraints: give them the strict schema.
    let batch = RecordBatch::try_new_with_options(
        base_arrow_schema(schema, &ids),
        kept.columns().to_vec(),
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(kept.num_rows())),
    )?;
    Ok(ShapedBatch {
        batch,
        positions,
        row_errors,
    })
}

fn cell_too_big(column: &str, len: usize) -> RowError {
    invalid(
        column,
        format!("cell of {len} bytes exceeds the {MAX_CELL_BYTES} byte limit"),
    )
}

/// Brings a record-form batch (columns named by id, written under any schema version)
/// to the current schema: columns added since take their default, dropped ones go.
pub fn to_current(schema: &Schema, batch: &RecordBatch) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let ids: Vec<_> = schema.columns().iter().map(|c| c.id).collect();
    let columns = schema
        .columns()
        .iter()
        .map(
            |c| match batch.schema().index_of(&parquet_column_name(c.id)) {
                Ok(pos) => Ok(batch.column(pos).clone()),
                Err(_) => Ok(match &c.default {
                    Some(v) => array_of_repeated(&c.data_type, v, rows)?,
                    None => new_null_array(&c.data_type.to_arrow(), rows),
                }),
            },
        )
        .collect::<Result<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new_with_options(
        base_arrow_schema(schema, &ids),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

/// The encoded primary key of every row of a batch holding all schema columns in
/// schema order (a row whose key is NULL or too long gets its row error).
pub fn row_keys(
    schema: &Schema,
    batch: &RecordBatch,
) -> Result<Vec<std::result::Result<Vec<u8>, RowError>>> {
    let key_cols: Vec<(usize, &DataType, &str)> = schema
        .key_indexes()
        .iter()
        .map(|&k| {
            let c = schema.column(k);
            (k, &c.data_type, c.name.as_str())
        })
        .collect();
    let mut out = Vec::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        let mut key = Vec::with_capacity(16);
        let mut err = None;
        for (n, (k, t, name)) in key_cols.iter().enumerate() {
            let v = Value::from_array(batch.column(*k).as_ref(), r, t)?;
            if encode_value(&v, n + 1 == key_cols.len(), &mut key).is_err() {
                err = Some(invalid(
                    name,
                    "NULL is not allowed in a primary key column".into(),
                ));
                break;
            }
        }
        if err.is_none() && key.len() > MAX_KEY_BYTES {
            err = Some(invalid(
                "<primary key>",
                format!(
                    "encoded key of {} bytes exceeds the {MAX_KEY_BYTES} byte limit",
                    key.len()
                ),
            ));
        }
        out.push(match err {
            Some(e) => Err(e),
            None => Ok(key),
        });
    }
    Ok(out)
}

/// Encodes a batch as an Arrow IPC stream.
pub fn encode_ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut w = StreamWriter::try_new(Vec::new(), &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    Ok(w.into_inner()?)
}

/// Decodes an Arrow IPC stream written by [`encode_ipc`] into one batch.
pub fn decode_ipc(bytes: &[u8]) -> Result<RecordBatch> {
    let bad =
        |e: arrow::error::ArrowError| TabletError::InvalidRequest(format!("bad bulk batch: {e}"));
    let reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(bad)?;
    let schema = reader.schema();
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(bad)?;
    Ok(arrow::compute::concat_batches(&schema, &batches)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use cairn_common::ColumnSpec;

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::Varchar(3)).nullable(),
                ColumnSpec::new("n", DataType::Int64).with_default(Value::Int64(7)),
            ],
            &["k"],
        )
        .unwrap()
    }

    #[test]
    fn shaping_checks_rows_and_fills_defaults() {
        let s = schema();
        let input = RecordBatch::try_from_iter(vec![
            (
                "v",
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("long"),
                    None,
                    Some("b"),
                ])) as ArrayRef,
            ),
            (
                "k",
                Arc::new(Int64Array::from(vec![Some(1), Some(2), Some(3), None])) as ArrayRef,
            ),
        ])
        .unwrap();
        let shaped = shape_batch(&s, &input).unwrap();
        assert_eq!(shaped.positions, vec![0, 2]);
        assert_eq!(shaped.row_errors.len(), 2);
        assert!(
            matches!(&shaped.row_errors[0], (1, RowError::Invalid(m)) if m.contains("VARCHAR(3)"))
        );
        assert!(
            matches!(&shaped.row_errors[1], (3, RowError::Invalid(m)) if m.contains("primary key"))
        );
        let b = &shaped.batch;
        assert_eq!(b.schema().field(0).name(), "c0");
        let n = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(n.values().to_vec(), vec![7, 7]);
        // The record survives the log and a later ADD COLUMN.
        let back = decode_ipc(&encode_ipc(b).unwrap()).unwrap();
        assert_eq!(&back, b);
        let added = s
            .add_column(ColumnSpec::new("z", DataType::Int64).nullable())
            .unwrap();
        let cur = to_current(&added, &back).unwrap();
        assert_eq!(cur.num_columns(), 4);
        assert_eq!(cur.column(3).null_count(), 2);
        let keys = row_keys(&added, &cur).unwrap();
        assert!(keys[0].as_ref().unwrap() < keys[1].as_ref().unwrap());
        // A column the table does not have fails the batch.
        let bad = RecordBatch::try_from_iter(vec![(
            "nope",
            Arc::new(Int64Array::from(vec![1])) as ArrayRef,
        )])
        .unwrap();
        assert!(shape_batch(&s, &bad).is_err());
    }
}
