//! Conversions between DataFusion's values and Cairn's.
//!
//! Pushdown needs the *exact* Cairn [`Value`] of a SQL literal for a column's type:
//! a conversion that would round or change the meaning returns `None`, and the filter
//! then stays in DataFusion.

use cairn_common::{DataType, Value};
use datafusion::common::ScalarValue;

/// The Cairn value of `s` for a column of type `t`, if it converts exactly.
pub fn scalar_to_value(s: &ScalarValue, t: &DataType) -> Option<Value> {
    if s.is_null() {
        return None;
    }
    let int = |s: &ScalarValue| -> Option<i128> {
        Some(match s {
            ScalarValue::Int8(Some(v)) => *v as i128,
            ScalarValue::Int16(Some(v)) => *v as i128,
            ScalarValue::Int32(Some(v)) => *v as i128,
            ScalarValue::Int64(Some(v)) => *v as i128,
            ScalarValue::UInt8(Some(v)) => *v as i128,
            ScalarValue::UInt16(Some(v)) => *v as i128,
            ScalarValue::UInt32(Some(v)) => *v as i128,
            ScalarValue::UInt64(Some(v)) => *v as i128,
            _ => return None,
        })
    };
    Some(match t {
        DataType::Bool => match s {
            ScalarValue::Boolean(Some(b)) => Value::Bool(*b),
            _ => return None,
        },
        DataType::Int8 => Value::Int8(i8::try_from(int(s)?).ok()?),
        DataType::Int16 => Value::Int16(i16::try_from(int(s)?).ok()?),
        DataType::Int32 => Value::Int32(i32::try_from(int(s)?).ok()?),
        DataType::Int64 => Value::Int64(i64::try_from(int(s)?).ok()?),
        DataType::Float => match s {
            ScalarValue::Float32(Some(v)) => Value::Float(*v),
            _ => return None,
        },
        DataType::Double => match s {
            ScalarValue::Float64(Some(v)) => Value::Double(*v),
            ScalarValue::Float32(Some(v)) => Value::Double(*v as f64),
            _ => return None,
        },
        DataType::Decimal { precision, scale } => {
            let (v, from_scale) = match s {
                ScalarValue::Decimal128(Some(v), _, sc) => (*v, *sc),
                other => (int(other)?, 0),
            };
            let v = rescale(v, from_scale, *scale)?;
            if v.unsigned_abs() >= 10u128.pow(*precision as u32) {
                return None;
            }
            Value::Decimal(v)
        }
        DataType::String | DataType::Varchar(_) => match s {
            ScalarValue::Utf8(Some(v))
            | ScalarValue::LargeUtf8(Some(v))
            | ScalarValue::Utf8View(Some(v)) => Value::String(v.clone()),
            _ => return None,
        },
        DataType::Binary => match s {
            ScalarValue::Binary(Some(v))
            | ScalarValue::LargeBinary(Some(v))
            | ScalarValue::BinaryView(Some(v)) => Value::Binary(v.clone()),
            _ => return None,
        },
        DataType::Date => match s {
            ScalarValue::Date32(Some(v)) => Value::Date(*v),
            _ => return None,
        },
        DataType::Timestamp => match s {
            ScalarValue::TimestampMicrosecond(Some(v), _) => Value::Timestamp(*v),
            ScalarValue::TimestampMillisecond(Some(v), _) => Value::Timestamp(v.checked_mul(1000)?),
            ScalarValue::TimestampSecond(Some(v), _) => Value::Timestamp(v.checked_mul(1_000_000)?),
            ScalarValue::TimestampNanosecond(Some(v), _) if v % 1000 == 0 => {
                Value::Timestamp(v / 1000)
            }
            _ => return None,
        },
    })
}

/// `v` at scale `from` rescaled to scale `to`, if that is exact.
fn rescale(v: i128, from: i8, to: i8) -> Option<i128> {
    if from == to {
        return Some(v);
    }
    if to > from {
        v.checked_mul(10i128.checked_pow((to - from) as u32)?)
    } else {
        let d = 10i128.checked_pow((from - to) as u32)?;
        (v % d == 0).then_some(v / d)
    }
}

/// The DataFusion scalar of a Cairn value of type `t` (NULL of that type for
/// [`Value::Null`]).
pub fn value_to_scalar(v: &Value, t: &DataType) -> ScalarValue {
    match (v, t) {
        (Value::Null, t) => ScalarValue::try_from(&t.to_arrow()).unwrap_or(ScalarValue::Null),
        (Value::Bool(b), _) => ScalarValue::Boolean(Some(*b)),
        (Value::Int8(x), _) => ScalarValue::Int8(Some(*x)),
        (Value::Int16(x), _) => ScalarValue::Int16(Some(*x)),
        (Value::Int32(x), _) => ScalarValue::Int32(Some(*x)),
        (Value::Int64(x), _) => ScalarValue::Int64(Some(*x)),
        (Value::Float(x), _) => ScalarValue::Float32(Some(*x)),
        (Value::Double(x), _) => ScalarValue::Float64(Some(*x)),
        (Value::Decimal(x), DataType::Decimal { precision, scale }) => {
            ScalarValue::Decimal128(Some(*x), *precision, *scale)
        }
        (Value::Decimal(x), _) => ScalarValue::Decimal128(Some(*x), 38, 0),
        (Value::String(s), _) => ScalarValue::Utf8(Some(s.clone())),
        (Value::Binary(b), _) => ScalarValue::Binary(Some(b.clone())),
        (Value::Date(d), _) => ScalarValue::Date32(Some(*d)),
        (Value::Timestamp(ts), _) => {
            ScalarValue::TimestampMicrosecond(Some(*ts), Some("+00:00".into()))
        }
    }
}

/// The SQL name of a Cairn type, as DESCRIBE and error messages show it.
pub fn sql_type_name(t: &DataType) -> String {
    match t {
        DataType::Bool => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::Float => "REAL".into(),
        DataType::Double => "DOUBLE".into(),
        DataType::Decimal { precision, scale } => format!("DECIMAL({precision},{scale})"),
        DataType::String => "VARCHAR".into(),
        DataType::Varchar(n) => format!("VARCHAR({n})"),
        DataType::Binary => "BYTEA".into(),
        DataType::Date => "DATE".into(),
        DataType::Timestamp => "TIMESTAMP".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_conversions_only() {
        let dec = DataType::Decimal {
            precision: 10,
            scale: 2,
        };
        assert_eq!(
            scalar_to_value(&ScalarValue::Decimal128(Some(5), 3, 1), &dec),
            Some(Value::Decimal(50))
        );
        assert_eq!(
            scalar_to_value(&ScalarValue::Decimal128(Some(5), 3, 3), &dec),
            None
        );
        assert_eq!(
            scalar_to_value(&ScalarValue::Int64(Some(7)), &dec),
            Some(Value::Decimal(700))
        );
        assert_eq!(
            scalar_to_value(&ScalarValue::Int64(Some(300)), &DataType::Int8),
            None
        );
        assert_eq!(
            scalar_to_value(&ScalarValue::Int64(Some(-3)), &DataType::Int32),
            Some(Value::Int32(-3))
        );
        assert_eq!(
            scalar_to_value(&ScalarValue::Int64(None), &DataType::Int64),
            None
        );
        assert_eq!(
            scalar_to_value(&ScalarValue::Float64(Some(1.0)), &DataType::Float),
            None
        );
        assert_eq!(
            scalar_to_value(
                &ScalarValue::TimestampNanosecond(Some(5_000), None),
                &DataType::Timestamp
            ),
            Some(Value::Timestamp(5))
        );
        assert_eq!(
            scalar_to_value(
                &ScalarValue::TimestampNanosecond(Some(5_001), None),
                &DataType::Timestamp
            ),
            None
        );
        assert_eq!(
            scalar_to_value(
                &ScalarValue::Utf8View(Some("a".into())),
                &DataType::Varchar(3)
            ),
            Some(Value::String("a".into()))
        );
    }

    #[test]
    fn values_round_trip_through_scalars() {
        let cases = [
            (Value::Int32(4), DataType::Int32),
            (
                Value::Decimal(1234),
                DataType::Decimal {
                    precision: 9,
                    scale: 2,
                },
            ),
            (Value::String("x".into()), DataType::String),
            (Value::Date(19000), DataType::Date),
            (Value::Timestamp(1_000_001), DataType::Timestamp),
            (Value::Bool(true), DataType::Bool),
        ];
        for (v, t) in cases {
            assert_eq!(scalar_to_value(&value_to_scalar(&v, &t), &t), Some(v));
        }
        assert!(value_to_scalar(&Value::Null, &DataType::Int64).is_null());
    }
}
