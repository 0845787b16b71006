//! Order-preserving encoding of primary keys (and of range-partition keys).
//!
//! Composite keys become byte strings whose `memcmp` order equals the order of the
//! column values compared one after another (DESIGN.md, "Data model"):
//!
//! | type | encoding |
//! |---|---|
//! | BOOL | one byte 0 / 1 |
//! | INT8..INT64, DATE, TIMESTAMP, DECIMAL | big-endian two's complement with the sign bit flipped |
//! | FLOAT, DOUBLE | IEEE bits; negative: all bits inverted, else sign bit set; big-endian (IEEE total order) |
//! | STRING, VARCHAR, BINARY | bytes with `0x00` escaped as `0x00 0x01`, then a `0x00 0x00` terminator — except in the last key column, where the raw bytes are written |
//!
//! NULL cannot appear in a key.

use crate::error::{CommonError, Result};
use crate::schema::{MAX_KEY_BYTES, Schema};
use crate::types::{DataType, Value};

/// Appends the encoding of one key value to `out`. `is_last` selects the unescaped form
/// for variable-length types.
pub fn encode_value(v: &Value, is_last: bool, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::Null => {
            return Err(CommonError::InvalidValue {
                column: "<key>".into(),
                detail: "NULL is not allowed in a primary key".into(),
            });
        }
        Value::Bool(b) => out.push(*b as u8),
        Value::Int8(x) => out.push((*x as u8) ^ 0x80),
        Value::Int16(x) => out.extend_from_slice(&((*x as u16) ^ 0x8000).to_be_bytes()),
        Value::Int32(x) | Value::Date(x) => {
            out.extend_from_slice(&((*x as u32) ^ 0x8000_0000).to_be_bytes())
        }
        Value::Int64(x) | Value::Timestamp(x) => {
            out.extend_from_slice(&((*x as u64) ^ 0x8000_0000_0000_0000).to_be_bytes())
        }
        Value::Decimal(x) => out.extend_from_slice(&((*x as u128) ^ (1u128 << 127)).to_be_bytes()),
        Value::Float(f) => {
            let b = f.to_bits();
            let e = if b & 0x8000_0000 != 0 {
                !b
            } else {
                b | 0x8000_0000
            };
            out.extend_from_slice(&e.to_be_bytes());
        }
        Value::Double(f) => {
            let b = f.to_bits();
            let e = if b & (1 << 63) != 0 {
                !b
            } else {
                b | (1 << 63)
            };
            out.extend_from_slice(&e.to_be_bytes());
        }
        Value::String(s) => encode_bytes(s.as_bytes(), is_last, out),
        Value::Binary(b) => encode_bytes(b, is_last, out),
    }
    Ok(())
}

fn encode_bytes(b: &[u8], is_last: bool, out: &mut Vec<u8>) {
    if is_last {
        out.extend_from_slice(b);
        return;
    }
    for &byte in b {
        out.push(byte);
        if byte == 0 {
            out.push(1);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Encodes values (one per key column, in key order) into a key.
pub fn encode_values(values: &[&Value]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(16);
    for (i, v) in values.iter().enumerate() {
        encode_value(v, i + 1 == values.len(), &mut out)?;
    }
    Ok(out)
}

/// Encodes the primary key of a full row (one value per schema column).
pub fn encode_row_key(schema: &Schema, row: &[Value]) -> Result<Vec<u8>> {
    encode_row_key_of(schema, |k| row.get(k))
}

/// Encodes the primary key of a row whose cells `cell(position)` lends by schema
/// position, so callers holding `Option<Value>` cells or cells named by column id need
/// not build (and clone) a full row first. A key cell that is `None` or NULL is an
/// error.
pub fn encode_row_key_of<'a>(
    schema: &Schema,
    cell: impl Fn(usize) -> Option<&'a Value>,
) -> Result<Vec<u8>> {
    let keys = schema.key_indexes();
    let mut out = Vec::with_capacity(16);
    for (i, &k) in keys.iter().enumerate() {
        let v = cell(k).ok_or_else(|| CommonError::InvalidValue {
            column: schema.column(k).name.clone(),
            detail: "key column missing from the row".into(),
        })?;
        encode_value(v, i + 1 == keys.len(), &mut out).map_err(|_| CommonError::InvalidValue {
            column: schema.column(k).name.clone(),
            detail: "NULL is not allowed in a primary key column".into(),
        })?;
    }
    if out.len() > MAX_KEY_BYTES {
        return Err(CommonError::InvalidValue {
            column: "<primary key>".into(),
            detail: format!(
                "encoded key of {} bytes exceeds the {MAX_KEY_BYTES} byte limit",
                out.len()
            ),
        });
    }
    Ok(out)
}

/// Decodes a key made of columns of `types` (in key order) back into values.
pub fn decode_values(types: &[&DataType], mut key: &[u8]) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(types.len());
    for (i, t) in types.iter().enumerate() {
        let last = i + 1 == types.len();
        let (v, rest) = decode_one(t, key, last)?;
        out.push(v);
        key = rest;
    }
    if !key.is_empty() {
        return Err(bad("trailing bytes after the last key column"));
    }
    Ok(out)
}

/// Decodes the primary key of `schema` into values in key order.
pub fn decode_row_key(schema: &Schema, key: &[u8]) -> Result<Vec<Value>> {
    let types: Vec<&DataType> = schema
        .key_indexes()
        .iter()
        .map(|&k| &schema.column(k).data_type)
        .collect();
    decode_values(&types, key)
}

fn bad(detail: &str) -> CommonError {
    CommonError::Decode {
        what: "primary key",
        detail: detail.to_string(),
    }
}

fn take<const N: usize>(b: &[u8]) -> Result<([u8; N], &[u8])> {
    if b.len() < N {
        return Err(bad("key is too short"));
    }
    let (h, t) = b.split_at(N);
    let mut a = [0u8; N];
    a.copy_from_slice(h);
    Ok((a, t))
}

fn decode_one<'a>(t: &DataType, b: &'a [u8], last: bool) -> Result<(Value, &'a [u8])> {
    Ok(match t {
        DataType::Bool => {
            let ([x], r) = take::<1>(b)?;
            (Value::Bool(x != 0), r)
        }
        DataType::Int8 => {
            let ([x], r) = take::<1>(b)?;
            (Value::Int8((x ^ 0x80) as i8), r)
        }
        DataType::Int16 => {
            let (x, r) = take::<2>(b)?;
            (Value::Int16((u16::from_be_bytes(x) ^ 0x8000) as i16), r)
        }
        DataType::Int32 | DataType::Date => {
            let (x, r) = take::<4>(b)?;
            let v = (u32::from_be_bytes(x) ^ 0x8000_0000) as i32;
            (
                if *t == DataType::Date {
                    Value::Date(v)
                } else {
                    Value::Int32(v)
                },
                r,
            )
        }
        DataType::Int64 | DataType::Timestamp => {
            let (x, r) = take::<8>(b)?;
            let v = (u64::from_be_bytes(x) ^ (1 << 63)) as i64;
            (
                if *t == DataType::Timestamp {
                    Value::Timestamp(v)
                } else {
                    Value::Int64(v)
                },
                r,
            )
        }
        DataType::Decimal { .. } => {
            let (x, r) = take::<16>(b)?;
            (
                Value::Decimal((u128::from_be_bytes(x) ^ (1 << 127)) as i128),
                r,
            )
        }
        DataType::Float => {
            let (x, r) = take::<4>(b)?;
            let e = u32::from_be_bytes(x);
            let bits = if e & 0x8000_0000 != 0 {
                e & !0x8000_0000
            } else {
                !e
            };
            (Value::Float(f32::from_bits(bits)), r)
        }
        DataType::Double => {
            let (x, r) = take::<8>(b)?;
            let e = u64::from_be_bytes(x);
            let bits = if e & (1 << 63) != 0 {
                e & !(1 << 63)
            } else {
                !e
            };
            (Value::Double(f64::from_bits(bits)), r)
        }
        DataType::String | DataType::Varchar(_) | DataType::Binary => {
            let (bytes, rest) = if last {
                (b.to_vec(), &b[b.len()..])
            } else {
                unescape(b)?
            };
            let v = if *t == DataType::Binary {
                Value::Binary(bytes)
            } else {
                Value::String(
                    String::from_utf8(bytes).map_err(|_| bad("string key column is not UTF-8"))?,
                )
            };
            (v, rest)
        }
    })
}

fn unescape(b: &[u8]) -> Result<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == 0 {
            match b.get(i + 1) {
                Some(0) => return Ok((out, &b[i + 2..])),
                Some(1) => {
                    out.push(0);
                    i += 2;
                }
                _ => return Err(bad("invalid escape in a string key column")),
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Err(bad("unterminated string key column"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn value_for(t: u8) -> BoxedStrategy<Value> {
        match t % 10 {
            0 => any::<bool>().prop_map(Value::Bool).boxed(),
            1 => any::<i8>().prop_map(Value::Int8).boxed(),
            2 => any::<i16>().prop_map(Value::Int16).boxed(),
            3 => any::<i32>().prop_map(Value::Int32).boxed(),
            4 => any::<i64>().prop_map(Value::Int64).boxed(),
            5 => any::<f32>().prop_map(Value::Float).boxed(),
            6 => any::<f64>().prop_map(Value::Double).boxed(),
            7 => (-(10i128.pow(37))..10i128.pow(37))
                .prop_map(Value::Decimal)
                .boxed(),
            8 => prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..6)
                .prop_map(Value::Binary)
                .boxed(),
            _ => "[a\\x00b]{0,5}".prop_map(Value::String).boxed(),
        }
    }

    fn type_of(t: u8) -> DataType {
        match t % 10 {
            0 => DataType::Bool,
            1 => DataType::Int8,
            2 => DataType::Int16,
            3 => DataType::Int32,
            4 => DataType::Int64,
            5 => DataType::Float,
            6 => DataType::Double,
            7 => DataType::Decimal {
                precision: 38,
                scale: 0,
            },
            8 => DataType::Binary,
            _ => DataType::String,
        }
    }

    fn key_pair() -> impl Strategy<Value = (Vec<u8>, Vec<Value>, Vec<Value>)> {
        prop::collection::vec(any::<u8>(), 1..4).prop_flat_map(|types| {
            let a: Vec<_> = types.iter().map(|&t| value_for(t)).collect();
            let b: Vec<_> = types.iter().map(|&t| value_for(t)).collect();
            (Just(types), a, b)
        })
    }

    fn cmp_values(a: &[Value], b: &[Value]) -> Ordering {
        for (x, y) in a.iter().zip(b) {
            let o = x.partial_cmp_same(y).unwrap();
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn memcmp_order_equals_value_order((types, a, b) in key_pair()) {
            let ra: Vec<&Value> = a.iter().collect();
            let rb: Vec<&Value> = b.iter().collect();
            let ea = encode_values(&ra).unwrap();
            let eb = encode_values(&rb).unwrap();
            prop_assert_eq!(ea.cmp(&eb), cmp_values(&a, &b));
            let ts: Vec<DataType> = types.iter().map(|&t| type_of(t)).collect();
            let tr: Vec<&DataType> = ts.iter().collect();
            let da = decode_values(&tr, &ea).unwrap();
            prop_assert_eq!(cmp_values(&da, &a), Ordering::Equal);
        }
    }

    #[test]
    fn null_is_rejected() {
        assert!(encode_values(&[&Value::Null]).is_err());
    }

    #[test]
    fn garbage_does_not_panic() {
        let t = [&DataType::String, &DataType::Int32];
        assert!(decode_values(&t, &[1, 2, 0]).is_err());
        assert!(decode_values(&t, &[1, 0, 0, 1]).is_err());
    }
}
