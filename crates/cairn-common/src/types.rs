//! Column types, cell values and their mapping onto Arrow.
//!
//! Every [`DataType`] maps 1:1 onto an Arrow type ([`DataType::to_arrow`]); a column's
//! cells travel as Arrow arrays and are converted to and from single [`Value`]s only at
//! the edges (a row written by a client, a key lookup, a delta).

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, BooleanBuilder, Date32Array,
    Decimal128Array, Float32Array, Float64Array, Int8Array, Int16Array, Int32Array, Int64Array,
    StringArray, StringBuilder, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType as ArrowType, TimeUnit};

use crate::error::{CommonError, Result};

/// The largest precision a DECIMAL column may have.
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// A column type of Cairn's data model (DESIGN.md, "Data model").
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DataType {
    /// true / false.
    Bool,
    /// 8-bit signed integer.
    Int8,
    /// 16-bit signed integer.
    Int16,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// 32-bit IEEE float.
    Float,
    /// 64-bit IEEE float.
    Double,
    /// Fixed-point decimal with `precision` (≤ 38) digits, `scale` after the point;
    /// stored as an unscaled `i128`.
    Decimal {
        /// Total number of digits.
        precision: u8,
        /// Digits after the decimal point.
        scale: i8,
    },
    /// UTF-8 string of any length (up to the cell size limit).
    String,
    /// UTF-8 string of at most `n` characters.
    Varchar(u32),
    /// Arbitrary bytes.
    Binary,
    /// Days since 1970-01-01.
    Date,
    /// Microseconds since 1970-01-01 00:00:00 UTC.
    Timestamp,
}

impl DataType {
    /// The Arrow type this column type maps onto.
    pub fn to_arrow(&self) -> ArrowType {
        match self {
            DataType::Bool => ArrowType::Boolean,
            DataType::Int8 => ArrowType::Int8,
            DataType::Int16 => ArrowType::Int16,
            DataType::Int32 => ArrowType::Int32,
            DataType::Int64 => ArrowType::Int64,
            DataType::Float => ArrowType::Float32,
            DataType::Double => ArrowType::Float64,
            DataType::Decimal { precision, scale } => ArrowType::Decimal128(*precision, *scale),
            DataType::String | DataType::Varchar(_) => ArrowType::Utf8,
            DataType::Binary => ArrowType::Binary,
            DataType::Date => ArrowType::Date32,
            DataType::Timestamp => {
                ArrowType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
            }
        }
    }

    /// The Cairn type for an Arrow type, where one exists.
    pub fn from_arrow(t: &ArrowType) -> Result<DataType> {
        Ok(match t {
            ArrowType::Boolean => DataType::Bool,
            ArrowType::Int8 => DataType::Int8,
            ArrowType::Int16 => DataType::Int16,
            ArrowType::Int32 => DataType::Int32,
            ArrowType::Int64 => DataType::Int64,
            ArrowType::Float32 => DataType::Float,
            ArrowType::Float64 => DataType::Double,
            ArrowType::Decimal128(p, s) => DataType::Decimal {
                precision: *p,
                scale: *s,
            },
            ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View => DataType::String,
            ArrowType::Binary | ArrowType::LargeBinary | ArrowType::BinaryView => DataType::Binary,
            ArrowType::Date32 => DataType::Date,
            ArrowType::Timestamp(TimeUnit::Microsecond, _) => DataType::Timestamp,
            other => {
                return Err(CommonError::InvalidSchema(format!(
                    "Arrow type {other} has no Cairn column type; cast it to one of BOOL, \
                     INT8..INT64, FLOAT, DOUBLE, DECIMAL, STRING, BINARY, DATE, TIMESTAMP"
                )));
            }
        })
    }

    /// Whether values of this type have a fixed encoded width in keys.
    pub fn is_variable_length(&self) -> bool {
        matches!(
            self,
            DataType::String | DataType::Varchar(_) | DataType::Binary
        )
    }

    /// Checks the type itself is well formed (decimal precision and scale).
    pub fn validate(&self) -> Result<()> {
        if let DataType::Decimal { precision, scale } = self
            && (*precision == 0
                || *precision > MAX_DECIMAL_PRECISION
                || *scale < 0
                || *scale as u8 > *precision)
        {
            return Err(CommonError::InvalidSchema(format!(
                "DECIMAL({precision},{scale}) is invalid: precision must be 1..=38 and scale 0..=precision"
            )));
        }
        Ok(())
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataType::Bool => write!(f, "BOOL"),
            DataType::Int8 => write!(f, "INT8"),
            DataType::Int16 => write!(f, "INT16"),
            DataType::Int32 => write!(f, "INT32"),
            DataType::Int64 => write!(f, "INT64"),
            DataType::Float => write!(f, "FLOAT"),
            DataType::Double => write!(f, "DOUBLE"),
            DataType::Decimal { precision, scale } => write!(f, "DECIMAL({precision},{scale})"),
            DataType::String => write!(f, "STRING"),
            DataType::Varchar(n) => write!(f, "VARCHAR({n})"),
            DataType::Binary => write!(f, "BINARY"),
            DataType::Date => write!(f, "DATE"),
            DataType::Timestamp => write!(f, "TIMESTAMP"),
        }
    }
}

/// One cell. The variant must agree with the column's [`DataType`] (`Null` fits any
/// nullable column); [`Value::check_type`] verifies that.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// BOOL.
    Bool(bool),
    /// INT8.
    Int8(i8),
    /// INT16.
    Int16(i16),
    /// INT32.
    Int32(i32),
    /// INT64.
    Int64(i64),
    /// FLOAT.
    Float(f32),
    /// DOUBLE.
    Double(f64),
    /// DECIMAL, as the unscaled integer (the scale is the column's).
    Decimal(i128),
    /// STRING or VARCHAR.
    String(String),
    /// BINARY.
    Binary(Vec<u8>),
    /// DATE, days since the epoch.
    Date(i32),
    /// TIMESTAMP, microseconds since the epoch (UTC).
    Timestamp(i64),
}

impl Value {
    /// Whether this is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Orders two values of the same type (floats by IEEE total order, matching the key
    /// encoding). NULL sorts first. `None` when the variants differ.
    pub fn partial_cmp_same(&self, other: &Value) -> Option<Ordering> {
        use Value::*;
        Some(match (self, other) {
            (Null, Null) => Ordering::Equal,
            (Null, _) => Ordering::Less,
            (_, Null) => Ordering::Greater,
            (Bool(a), Bool(b)) => a.cmp(b),
            (Int8(a), Int8(b)) => a.cmp(b),
            (Int16(a), Int16(b)) => a.cmp(b),
            (Int32(a), Int32(b)) => a.cmp(b),
            (Int64(a), Int64(b)) => a.cmp(b),
            (Float(a), Float(b)) => a.total_cmp(b),
            (Double(a), Double(b)) => a.total_cmp(b),
            (Decimal(a), Decimal(b)) => a.cmp(b),
            (String(a), String(b)) => a.cmp(b),
            (Binary(a), Binary(b)) => a.cmp(b),
            (Date(a), Date(b)) => a.cmp(b),
            (Timestamp(a), Timestamp(b)) => a.cmp(b),
            _ => return None,
        })
    }

    /// Size of the cell's payload in bytes (for cell size limits and memory accounting).
    pub fn size_bytes(&self) -> usize {
        match self {
            Value::Null => 0,
            Value::Bool(_) | Value::Int8(_) => 1,
            Value::Int16(_) => 2,
            Value::Int32(_) | Value::Float(_) | Value::Date(_) => 4,
            Value::Int64(_) | Value::Double(_) | Value::Timestamp(_) => 8,
            Value::Decimal(_) => 16,
            Value::String(s) => s.len(),
            Value::Binary(b) => b.len(),
        }
    }

    /// Whether the (non-null) variant is the one `t` stores.
    pub fn fits_type(&self, t: &DataType) -> bool {
        matches!(
            (self, t),
            (Value::Null, _)
                | (Value::Bool(_), DataType::Bool)
                | (Value::Int8(_), DataType::Int8)
                | (Value::Int16(_), DataType::Int16)
                | (Value::Int32(_), DataType::Int32)
                | (Value::Int64(_), DataType::Int64)
                | (Value::Float(_), DataType::Float)
                | (Value::Double(_), DataType::Double)
                | (Value::Decimal(_), DataType::Decimal { .. })
                | (Value::String(_), DataType::String | DataType::Varchar(_))
                | (Value::Binary(_), DataType::Binary)
                | (Value::Date(_), DataType::Date)
                | (Value::Timestamp(_), DataType::Timestamp)
        )
    }

    /// Checks the value fits a column of type `t`: variant, VARCHAR length, DECIMAL
    /// precision. `column` names the column in the error.
    pub fn check_type(&self, column: &str, t: &DataType) -> Result<()> {
        if !self.fits_type(t) {
            return Err(CommonError::InvalidValue {
                column: column.to_string(),
                detail: format!("expected a {t} value, got {}", self.type_name()),
            });
        }
        match (self, t) {
            (Value::String(s), DataType::Varchar(n)) if s.chars().count() > *n as usize => {
                Err(CommonError::ValueTooLong {
                    column: column.to_string(),
                    detail: format!(
                        "string of {} characters exceeds VARCHAR({n})",
                        s.chars().count()
                    ),
                })
            }
            (Value::Decimal(v), DataType::Decimal { precision, .. }) => {
                let limit = 10i128.pow(*precision as u32);
                if v.unsigned_abs() >= limit as u128 {
                    Err(CommonError::InvalidValue {
                        column: column.to_string(),
                        detail: format!("{v} (unscaled) has more than {precision} digits"),
                    })
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// A short name of the variant for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Bool(_) => "BOOL",
            Value::Int8(_) => "INT8",
            Value::Int16(_) => "INT16",
            Value::Int32(_) => "INT32",
            Value::Int64(_) => "INT64",
            Value::Float(_) => "FLOAT",
            Value::Double(_) => "DOUBLE",
            Value::Decimal(_) => "DECIMAL",
            Value::String(_) => "STRING",
            Value::Binary(_) => "BINARY",
            Value::Date(_) => "DATE",
            Value::Timestamp(_) => "TIMESTAMP",
        }
    }

    /// Reads cell `row` of an Arrow array of Cairn type `t`.
    pub fn from_array(array: &dyn Array, row: usize, t: &DataType) -> Result<Value> {
        if array.is_null(row) {
            return Ok(Value::Null);
        }
        macro_rules! get {
            ($arr:ty, $variant:ident) => {{
                let a = array.as_any().downcast_ref::<$arr>().ok_or_else(|| {
                    CommonError::Arrow(format!(
                        "array of type {} does not hold {t} values",
                        array.data_type()
                    ))
                })?;
                Value::$variant(a.value(row).into())
            }};
        }
        Ok(match t {
            DataType::Bool => get!(BooleanArray, Bool),
            DataType::Int8 => get!(Int8Array, Int8),
            DataType::Int16 => get!(Int16Array, Int16),
            DataType::Int32 => get!(Int32Array, Int32),
            DataType::Int64 => get!(Int64Array, Int64),
            DataType::Float => get!(Float32Array, Float),
            DataType::Double => get!(Float64Array, Double),
            DataType::Decimal { .. } => get!(Decimal128Array, Decimal),
            DataType::String | DataType::Varchar(_) => get!(StringArray, String),
            DataType::Binary => get!(BinaryArray, Binary),
            DataType::Date => get!(Date32Array, Date),
            DataType::Timestamp => get!(TimestampMicrosecondArray, Timestamp),
        })
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::Int8(v) => write!(f, "{v}"),
            Value::Int16(v) => write!(f, "{v}"),
            Value::Int32(v) => write!(f, "{v}"),
            Value::Int64(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Double(v) => write!(f, "{v}"),
            Value::Decimal(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Binary(v) => write!(
                f,
                "0x{}",
                v.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            Value::Date(v) => write!(f, "date {v}"),
            Value::Timestamp(v) => write!(f, "ts {v}"),
        }
    }
}

/// Builds an Arrow array of Cairn type `t` from values (which must fit `t`).
pub fn array_from_values<'a>(
    t: &DataType,
    values: impl IntoIterator<Item = &'a Value>,
) -> Result<ArrayRef> {
    let values = values.into_iter();
    macro_rules! prim {
        ($arr:ty, $variant:ident) => {{
            let v: $arr = values
                .map(|v| match v {
                    Value::$variant(x) => Ok(Some(*x)),
                    Value::Null => Ok(None),
                    other => Err(mismatch(t, other)),
                })
                .collect::<Result<_>>()?;
            Arc::new(v) as ArrayRef
        }};
    }
    Ok(match t {
        DataType::Bool => {
            let mut b = BooleanBuilder::with_capacity(values.size_hint().0);
            for v in values {
                match v {
                    Value::Bool(x) => b.append_value(*x),
                    Value::Null => b.append_null(),
                    other => return Err(mismatch(t, other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Int8 => prim!(Int8Array, Int8),
        DataType::Int16 => prim!(Int16Array, Int16),
        DataType::Int32 => prim!(Int32Array, Int32),
        DataType::Int64 => prim!(Int64Array, Int64),
        DataType::Float => prim!(Float32Array, Float),
        DataType::Double => prim!(Float64Array, Double),
        DataType::Date => prim!(Date32Array, Date),
        DataType::Timestamp => {
            let a: TimestampMicrosecondArray = values
                .map(|v| match v {
                    Value::Timestamp(x) => Ok(Some(*x)),
                    Value::Null => Ok(None),
                    other => Err(mismatch(t, other)),
                })
                .collect::<Result<_>>()?;
            Arc::new(a.with_timezone("+00:00"))
        }
        DataType::Decimal { precision, scale } => {
            let a: Decimal128Array = values
                .map(|v| match v {
                    Value::Decimal(x) => Ok(Some(*x)),
                    Value::Null => Ok(None),
                    other => Err(mismatch(t, other)),
                })
                .collect::<Result<_>>()?;
            Arc::new(a.with_precision_and_scale(*precision, *scale)?)
        }
        DataType::String | DataType::Varchar(_) => {
            // Sized exactly: a builder's default reserves 1,024 items, which a one-row
            // array (a point read's result) would allocate and throw away per column.
            let values: Vec<&Value> = values.collect();
            let mut b = StringBuilder::with_capacity(values.len(), bytes_len(&values));
            for v in values {
                match v {
                    Value::String(x) => b.append_value(x),
                    Value::Null => b.append_null(),
                    other => return Err(mismatch(t, other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Binary => {
            let values: Vec<&Value> = values.collect();
            let mut b = BinaryBuilder::with_capacity(values.len(), bytes_len(&values));
            for v in values {
                match v {
                    Value::Binary(x) => b.append_value(x),
                    Value::Null => b.append_null(),
                    other => return Err(mismatch(t, other)),
                }
            }
            Arc::new(b.finish())
        }
    })
}

/// One column being built by [`RowsToColumns`].
enum ColumnBuilder {
    Bool(BooleanBuilder),
    Int8(arrow::array::Int8Builder),
    Int16(arrow::array::Int16Builder),
    Int32(arrow::array::Int32Builder),
    Int64(arrow::array::Int64Builder),
    Float(arrow::array::Float32Builder),
    Double(arrow::array::Float64Builder),
    Date(arrow::array::Date32Builder),
    Timestamp(arrow::array::TimestampMicrosecondBuilder),
    Decimal(arrow::array::Decimal128Builder, u8, i8),
    String(StringBuilder),
    Binary(BinaryBuilder),
}

/// Builds the Arrow columns of rows of [`Value`]s in one pass over the rows (where
/// [`array_from_values`] makes one pass per column): each row's cells are read
/// together, which is what matters when the rows lie scattered in memory (a
/// MemRowSet flush).
pub struct RowsToColumns {
    types: Vec<DataType>,
    cols: Vec<ColumnBuilder>,
}

impl RowsToColumns {
    /// A builder of columns of `types`, with room for `rows` rows.
    pub fn new(types: &[DataType], rows: usize) -> Self {
        let cols = types
            .iter()
            .map(|t| match t {
                DataType::Bool => ColumnBuilder::Bool(BooleanBuilder::with_capacity(rows)),
                DataType::Int8 => {
                    ColumnBuilder::Int8(arrow::array::Int8Builder::with_capacity(rows))
                }
                DataType::Int16 => {
                    ColumnBuilder::Int16(arrow::array::Int16Builder::with_capacity(rows))
                }
                DataType::Int32 => {
                    ColumnBuilder::Int32(arrow::array::Int32Builder::with_capacity(rows))
                }
                DataType::Int64 => {
                    ColumnBuilder::Int64(arrow::array::Int64Builder::with_capacity(rows))
                }
                DataType::Float => {
                    ColumnBuilder::Float(arrow::array::Float32Builder::with_capacity(rows))
                }
                DataType::Double => {
                    ColumnBuilder::Double(arrow::array::Float64Builder::with_capacity(rows))
                }
                DataType::Date => {
                    ColumnBuilder::Date(arrow::array::Date32Builder::with_capacity(rows))
                }
                DataType::Timestamp => ColumnBuilder::Timestamp(
                    arrow::array::TimestampMicrosecondBuilder::with_capacity(rows),
                ),
                DataType::Decimal { precision, scale } => ColumnBuilder::Decimal(
                    arrow::array::Decimal128Builder::with_capacity(rows),
                    *precision,
                    *scale,
                ),
                DataType::String | DataType::Varchar(_) => {
                    ColumnBuilder::String(StringBuilder::with_capacity(rows, rows * 16))
                }
                DataType::Binary => {
                    ColumnBuilder::Binary(BinaryBuilder::with_capacity(rows, rows * 16))
                }
            })
            .collect();
        RowsToColumns {
            types: types.to_vec(),
            cols,
        }
    }

    /// Appends a row: one value per column, each of its column's type or NULL. After
    /// an error the row may be half appended: the builder must then be dropped.
    pub fn append_row(&mut self, row: &[Value]) -> Result<()> {
        if row.len() != self.cols.len() {
            return Err(CommonError::Arrow(format!(
                "a row of {} values for {} columns",
                row.len(),
                self.cols.len()
            )));
        }
        for ((b, v), t) in self.cols.iter_mut().zip(row).zip(&self.types) {
            match (b, v) {
                (ColumnBuilder::Bool(b), Value::Bool(x)) => b.append_value(*x),
                (ColumnBuilder::Int8(b), Value::Int8(x)) => b.append_value(*x),
                (ColumnBuilder::Int16(b), Value::Int16(x)) => b.append_value(*x),
                (ColumnBuilder::Int32(b), Value::Int32(x)) => b.append_value(*x),
                (ColumnBuilder::Int64(b), Value::Int64(x)) => b.append_value(*x),
                (ColumnBuilder::Float(b), Value::Float(x)) => b.append_value(*x),
                (ColumnBuilder::Double(b), Value::Double(x)) => b.append_value(*x),
                (ColumnBuilder::Date(b), Value::Date(x)) => b.append_value(*x),
                (ColumnBuilder::Timestamp(b), Value::Timestamp(x)) => b.append_value(*x),
                (ColumnBuilder::Decimal(b, _, _), Value::Decimal(x)) => b.append_value(*x),
                (ColumnBuilder::String(b), Value::String(x)) => b.append_value(x),
                (ColumnBuilder::Binary(b), Value::Binary(x)) => b.append_value(x),
                (ColumnBuilder::Bool(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Int8(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Int16(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Int32(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Int64(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Float(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Double(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Date(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Timestamp(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Decimal(b, _, _), Value::Null) => b.append_null(),
                (ColumnBuilder::String(b), Value::Null) => b.append_null(),
                (ColumnBuilder::Binary(b), Value::Null) => b.append_null(),
                (_, other) => return Err(mismatch(t, other)),
            }
        }
        Ok(())
    }

    /// The columns of the rows appended since the last call; the builder starts over.
    pub fn finish(&mut self) -> Result<Vec<ArrayRef>> {
        self.cols
            .iter_mut()
            .map(|b| -> Result<ArrayRef> {
                Ok(match b {
                    ColumnBuilder::Bool(b) => Arc::new(b.finish()),
                    ColumnBuilder::Int8(b) => Arc::new(b.finish()),
                    ColumnBuilder::Int16(b) => Arc::new(b.finish()),
                    ColumnBuilder::Int32(b) => Arc::new(b.finish()),
                    ColumnBuilder::Int64(b) => Arc::new(b.finish()),
                    ColumnBuilder::Float(b) => Arc::new(b.finish()),
                    ColumnBuilder::Double(b) => Arc::new(b.finish()),
                    ColumnBuilder::Date(b) => Arc::new(b.finish()),
                    ColumnBuilder::Timestamp(b) => Arc::new(b.finish().with_timezone("+00:00")),
                    ColumnBuilder::Decimal(b, p, s) => {
                        Arc::new(b.finish().with_precision_and_scale(*p, *s)?)
                    }
                    ColumnBuilder::String(b) => Arc::new(b.finish()),
                    ColumnBuilder::Binary(b) => Arc::new(b.finish()),
                })
            })
            .collect()
    }
}

/// The bytes of the STRING and BINARY values among `values`.
fn bytes_len(values: &[&Value]) -> usize {
    values
        .iter()
        .map(|v| match v {
            Value::String(s) => s.len(),
            Value::Binary(b) => b.len(),
            _ => 0,
        })
        .sum()
}

/// A one-row array of `value`, which it takes: a STRING's or BINARY's bytes become the
/// array's data without a copy (a point read's result, column by column).
pub fn array_of_one(t: &DataType, value: Value) -> Result<ArrayRef> {
    use arrow::buffer::{Buffer, OffsetBuffer};
    let offsets = |len: usize| -> Result<OffsetBuffer<i32>> {
        let end = i32::try_from(len)
            .map_err(|_| CommonError::Arrow(format!("a value of {len} bytes is too long")))?;
        Ok(OffsetBuffer::new(vec![0, end].into()))
    };
    Ok(match (t, value) {
        (DataType::String | DataType::Varchar(_), Value::String(s)) => {
            let s = s.into_bytes();
            let offsets = offsets(s.len())?;
            Arc::new(StringArray::try_new(offsets, Buffer::from_vec(s), None)?)
        }
        (DataType::Binary, Value::Binary(b)) => {
            let offsets = offsets(b.len())?;
            Arc::new(BinaryArray::try_new(offsets, Buffer::from_vec(b), None)?)
        }
        (t, v) => array_from_values(t, std::iter::once(&v))?,
    })
}

/// An array of `len` copies of `value` (for columns added by ALTER with a default).
pub fn array_of_repeated(t: &DataType, value: &Value, len: usize) -> Result<ArrayRef> {
    let one = array_from_values(t, std::iter::once(value))?;
    let indices = arrow::array::UInt32Array::from(vec![0u32; len]);
    Ok(arrow::compute::take(one.as_ref(), &indices, None)?)
}

fn mismatch(t: &DataType, v: &Value) -> CommonError {
    CommonError::Arrow(format!(
        "cannot put a {} value into a {t} array",
        v.type_name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Building row by row gives exactly the arrays built column by column, for
    /// every type, with NULLs, across two batches from one builder; a value of the
    /// wrong type is refused.
    #[test]
    fn rows_to_columns_matches_array_from_values() {
        let types = vec![
            DataType::Bool,
            DataType::Int8,
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::Float,
            DataType::Double,
            DataType::Date,
            DataType::Timestamp,
            DataType::Decimal {
                precision: 12,
                scale: 2,
            },
            DataType::String,
            DataType::Varchar(4),
            DataType::Binary,
        ];
        let row = |i: i64| -> Vec<Value> {
            if i % 3 == 0 {
                return vec![Value::Null; types.len()];
            }
            vec![
                Value::Bool(i % 2 == 0),
                Value::Int8(i as i8),
                Value::Int16(i as i16),
                Value::Int32(i as i32),
                Value::Int64(i),
                Value::Float(i as f32 / 2.0),
                Value::Double(i as f64 / 4.0),
                Value::Date(i as i32),
                Value::Timestamp(i * 1000),
                Value::Decimal(i as i128 * 100 + 5),
                Value::String(format!("s{i}")),
                Value::String("ab".into()),
                Value::Binary(vec![i as u8; (i % 4) as usize]),
            ]
        };
        let mut b = RowsToColumns::new(&types, 4);
        for range in [0..10, 10..13] {
            let rows: Vec<Vec<Value>> = range.map(row).collect();
            for r in &rows {
                b.append_row(r).unwrap();
            }
            let got = b.finish().unwrap();
            for (c, t) in types.iter().enumerate() {
                let want = array_from_values(t, rows.iter().map(|r| &r[c])).unwrap();
                assert_eq!(got[c].as_ref(), want.as_ref(), "column {c} ({t})");
            }
        }
        let mut bad = row(1);
        bad[4] = Value::String("x".into());
        assert!(b.append_row(&bad[..3]).is_err());
        assert!(b.append_row(&bad).is_err());
    }

    #[test]
    fn arrow_round_trip_for_every_type() {
        let cases = vec![
            (DataType::Bool, Value::Bool(true)),
            (DataType::Int8, Value::Int8(-3)),
            (DataType::Int16, Value::Int16(300)),
            (DataType::Int32, Value::Int32(-70000)),
            (DataType::Int64, Value::Int64(1 << 40)),
            (DataType::Float, Value::Float(1.5)),
            (DataType::Double, Value::Double(-2.25)),
            (
                DataType::Decimal {
                    precision: 12,
                    scale: 2,
                },
                Value::Decimal(123456),
            ),
            (DataType::String, Value::String("héllo".into())),
            (DataType::Varchar(8), Value::String("abc".into())),
            (DataType::Binary, Value::Binary(vec![0, 1, 255])),
            (DataType::Date, Value::Date(19000)),
            (DataType::Timestamp, Value::Timestamp(1_700_000_000_000_000)),
        ];
        for (t, v) in cases {
            let arr = array_from_values(&t, [&v, &Value::Null]).unwrap();
            assert_eq!(arr.data_type(), &t.to_arrow());
            assert_eq!(Value::from_array(arr.as_ref(), 0, &t).unwrap(), v);
            assert_eq!(Value::from_array(arr.as_ref(), 1, &t).unwrap(), Value::Null);
            assert_eq!(
                DataType::from_arrow(&t.to_arrow()).unwrap().to_arrow(),
                t.to_arrow()
            );
            // The one-row form that takes its value is the same array.
            let one = array_of_one(&t, v.clone()).unwrap();
            assert_eq!(one.as_ref(), array_from_values(&t, [&v]).unwrap().as_ref());
            let null = array_of_one(&t, Value::Null).unwrap();
            assert_eq!(
                null.as_ref(),
                array_from_values(&t, [&Value::Null]).unwrap().as_ref()
            );
        }
        // A value of another type is refused, as by `array_from_values`.
        assert!(array_of_one(&DataType::String, Value::Int32(1)).is_err());
        assert!(array_of_one(&DataType::Binary, Value::String("x".into())).is_err());
    }

    #[test]
    fn check_type_rejects_bad_values() {
        assert!(Value::Int32(1).check_type("a", &DataType::Int64).is_err());
        assert!(
            Value::String("abcdef".into())
                .check_type("a", &DataType::Varchar(3))
                .is_err()
        );
        let d = DataType::Decimal {
            precision: 3,
            scale: 1,
        };
        assert!(Value::Decimal(999).check_type("a", &d).is_ok());
        assert!(Value::Decimal(1000).check_type("a", &d).is_err());
    }
}
