//! Literals (a `DEFAULT`, a range bound) as [`Value`]s of a column's type, exactly.

use arrow::array::timezone::Tz;
use arrow::compute::kernels::cast_utils::{Parser as _, string_to_datetime};
use arrow::datatypes::Date32Type;
use cairn_common::{DataType, Value};
use datafusion::sql::sqlparser::ast::{self, Expr, UnaryOperator};

use super::types::column_type;
use crate::parser::ParseError;

/// Turns a literal into a value of type `t` (a `DEFAULT` value or a range bound).
///
/// Accepted: numbers (also negative, `-5`), strings, `TRUE`/`FALSE`, `NULL`, hex
/// strings `X'0102'` for BYTEA, typed strings (`DATE '2024-01-01'`,
/// `TIMESTAMP '2024-01-01 10:00:00'`) and casts of literals (`'5'::int`,
/// `CAST('2024-01-01' AS DATE)`). As in PostgreSQL, a quoted string fits any type it
/// spells a value of (`'42'` for an INT, `'t'` for a BOOLEAN, `'\x0102'` for BYTEA).
///
/// Decimals are scaled to the column's scale exactly: a value with more digits after the
/// point than the scale allows is an error, not rounded. Timestamps without an offset
/// are UTC. Integers out of the column type's range, VARCHAR(n) strings longer than
/// `n` characters and DECIMALs beyond the precision are errors (22023); a literal of
/// another type is a datatype-mismatch error (42804).
pub fn literal_value(e: &Expr, t: &DataType) -> Result<Value, ParseError> {
    literal(e, t, false)
}

fn not_literal(e: &Expr) -> ParseError {
    ParseError::unsupported(format!(
        "'{e}' is not a literal: DEFAULT values and partition bounds must be constants such as 42, 'text', DATE '2024-01-01' or TIMESTAMP '2024-01-01 10:00:00'"
    ))
}

fn mismatch(what: &str, t: &DataType) -> ParseError {
    ParseError::type_mismatch(format!("{what} does not fit a column of type {t}"))
}

fn literal(e: &Expr, t: &DataType, negate: bool) -> Result<Value, ParseError> {
    match e {
        Expr::Nested(inner) => literal(inner, t, negate),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => literal(expr, t, !negate),
        Expr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        } => literal(expr, t, negate),
        Expr::Value(v) => value_literal(&v.value, t, negate, e),
        Expr::TypedString(ts) => {
            let typed = column_type(&ts.data_type)?;
            if !compatible(&typed, t) {
                return Err(mismatch(&format!("{} literal {e}", typed), t));
            }
            if negate {
                return Err(not_literal(e));
            }
            match string_of(&ts.value.value) {
                Some(s) => string_value(s, t),
                None => Err(not_literal(e)),
            }
        }
        Expr::Cast {
            expr, data_type, ..
        } => {
            let typed = column_type(data_type)?;
            if !compatible(&typed, t) {
                return Err(mismatch(&format!("{e}"), t));
            }
            if negate {
                // -CAST('1' AS INT): negate the converted value.
                return negate_value(literal(expr, t, false)?, e, t);
            }
            literal(expr, t, false)
        }
        _ => Err(not_literal(e)),
    }
}

/// Whether a literal of type `typed` may initialize a column of type `t` (same family;
/// any number for a number; a date for a timestamp).
fn compatible(typed: &DataType, t: &DataType) -> bool {
    use DataType::*;
    let family = |d: &DataType| match d {
        Bool => 0,
        Int8 | Int16 | Int32 | Int64 | Float | Double | Decimal { .. } => 1,
        String | Varchar(_) => 2,
        Binary => 3,
        Date => 4,
        Timestamp => 5,
    };
    family(typed) == family(t) || (*typed == Date && *t == Timestamp)
}

fn negate_value(v: Value, e: &Expr, t: &DataType) -> Result<Value, ParseError> {
    let overflow = || ParseError::invalid(format!("-({e}) is out of range for {t}"));
    Ok(match v {
        Value::Int8(x) => Value::Int8(x.checked_neg().ok_or_else(overflow)?),
        Value::Int16(x) => Value::Int16(x.checked_neg().ok_or_else(overflow)?),
        Value::Int32(x) => Value::Int32(x.checked_neg().ok_or_else(overflow)?),
        Value::Int64(x) => Value::Int64(x.checked_neg().ok_or_else(overflow)?),
        Value::Float(x) => Value::Float(-x),
        Value::Double(x) => Value::Double(-x),
        Value::Decimal(x) => Value::Decimal(x.checked_neg().ok_or_else(overflow)?),
        _ => return Err(not_literal(e)),
    })
}

fn string_of(v: &ast::Value) -> Option<&str> {
    use ast::Value as V;
    match v {
        V::SingleQuotedString(s)
        | V::EscapedStringLiteral(s)
        | V::UnicodeStringLiteral(s)
        | V::NationalStringLiteral(s)
        | V::TripleSingleQuotedString(s)
        | V::TripleDoubleQuotedString(s)
        | V::SingleQuotedRawStringLiteral(s)
        | V::DoubleQuotedRawStringLiteral(s) => Some(s),
        V::DollarQuotedString(d) => Some(&d.value),
        _ => None,
    }
}

fn value_literal(
    v: &ast::Value,
    t: &DataType,
    negate: bool,
    e: &Expr,
) -> Result<Value, ParseError> {
    use ast::Value as V;
    if negate && !matches!(v, V::Number(..)) {
        return Err(ParseError::type_mismatch(format!(
            "'{e}' cannot be negated: only numbers can"
        )));
    }
    match v {
        V::Null => Ok(Value::Null),
        V::Boolean(b) => match t {
            DataType::Bool => Ok(Value::Bool(*b)),
            _ => Err(mismatch(&format!("boolean {b}"), t)),
        },
        V::Number(n, _) => {
            let text = if negate { format!("-{n}") } else { n.clone() };
            number_value(&text, t)
        }
        V::HexStringLiteral(h) => match t {
            DataType::Binary => Ok(Value::Binary(decode_hex(h).ok_or_else(|| {
                ParseError::invalid(format!("X'{h}' is not a hex string: use X'0a1b…'"))
            })?)),
            _ => Err(mismatch(&format!("hex string X'{h}'"), t)),
        },
        V::SingleQuotedByteStringLiteral(b) | V::DoubleQuotedByteStringLiteral(b) => match t {
            DataType::Binary => Ok(Value::Binary(b.as_bytes().to_vec())),
            _ => Err(mismatch(&format!("byte string {e}"), t)),
        },
        other => match string_of(other) {
            Some(s) => string_value(s, t),
            None => Err(not_literal(e)),
        },
    }
}

/// A number written in SQL (`42`, `-1.5`, `1e3`) as a value of type `t`.
fn number_value(text: &str, t: &DataType) -> Result<Value, ParseError> {
    let range = |what: &str| ParseError::invalid(format!("{text} is out of range for {what}"));
    let not_int = || {
        ParseError::type_mismatch(format!(
            "{text} is not an integer, so it does not fit a column of type {t}"
        ))
    };
    let int = || -> Result<i64, ParseError> {
        if !text
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'-' || b == b'+')
        {
            return Err(not_int());
        }
        text.parse::<i64>().map_err(|_| range("BIGINT"))
    };
    Ok(match t {
        DataType::Int8 => Value::Int8(i8::try_from(int()?).map_err(|_| range("TINYINT"))?),
        DataType::Int16 => Value::Int16(i16::try_from(int()?).map_err(|_| range("SMALLINT"))?),
        DataType::Int32 => Value::Int32(i32::try_from(int()?).map_err(|_| range("INT"))?),
        DataType::Int64 => Value::Int64(int()?),
        DataType::Float => {
            let f = text
                .parse::<f32>()
                .map_err(|_| ParseError::type_mismatch(format!("{text} is not a number")))?;
            if !f.is_finite() {
                return Err(range("REAL"));
            }
            Value::Float(f)
        }
        DataType::Double => {
            let f = text
                .parse::<f64>()
                .map_err(|_| ParseError::type_mismatch(format!("{text} is not a number")))?;
            if !f.is_finite() {
                return Err(range("DOUBLE PRECISION"));
            }
            Value::Double(f)
        }
        DataType::Decimal { precision, scale } => {
            Value::Decimal(parse_decimal(text, *precision, *scale)?)
        }
        other => return Err(mismatch(&format!("number {text}"), other)),
    })
}

/// Parses a decimal number (`-12.345`, `1e-2`, `.5`) into its unscaled value at
/// `scale`, with integer arithmetic only. More digits after the point than `scale`
/// (other than trailing zeros) or more than `precision` digits in all are errors.
pub fn parse_decimal(text: &str, precision: u8, scale: i8) -> Result<i128, ParseError> {
    let bad = || {
        ParseError::type_mismatch(format!(
            "'{text}' is not a decimal number, so it does not fit DECIMAL({precision},{scale})"
        ))
    };
    let s = text.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().map_err(|_| bad())?),
        None => (s, 0),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    // value = digits × 10^(exponent − len(frac)); unscaled = value × 10^scale.
    let mut digits: String = format!("{int_part}{frac_part}");
    let shift = scale as i64 + exponent as i64 - frac_part.len() as i64;
    let too_precise = || {
        ParseError::invalid(format!(
            "{text} has more digits after the point than DECIMAL({precision},{scale}) keeps ({scale}); round it first"
        ))
    };
    if shift < 0 {
        let drop = (-shift) as usize;
        if drop >= digits.len() {
            if digits.bytes().any(|b| b != b'0') {
                return Err(too_precise());
            }
            digits = "0".into();
        } else {
            let (keep, dropped) = digits.split_at(digits.len() - drop);
            if dropped.bytes().any(|b| b != b'0') {
                return Err(too_precise());
            }
            digits = keep.to_string();
        }
    }
    let significant = digits.trim_start_matches('0');
    let zeros = if shift > 0 { shift as usize } else { 0 };
    let out_of_range = || {
        ParseError::invalid(format!(
            "{text} does not fit DECIMAL({precision},{scale}): at most {} digits before the point",
            precision as i64 - scale as i64
        ))
    };
    let total_digits = if significant.is_empty() {
        0
    } else {
        significant.len() + zeros
    };
    if total_digits > precision as usize {
        return Err(out_of_range());
    }
    let mut unscaled: i128 = 0;
    for b in significant.bytes() {
        unscaled = unscaled * 10 + (b - b'0') as i128;
    }
    if !significant.is_empty() {
        for _ in 0..zeros {
            unscaled *= 10;
        }
    }
    Ok(if negative { -unscaled } else { unscaled })
}

fn decode_hex(h: &str) -> Option<Vec<u8>> {
    if !h.len().is_multiple_of(2) {
        return None;
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A quoted string as a value of type `t`.
fn string_value(s: &str, t: &DataType) -> Result<Value, ParseError> {
    let trimmed = s.trim();
    Ok(match t {
        DataType::String => Value::String(s.to_string()),
        DataType::Varchar(n) => {
            let len = s.chars().count();
            if len > *n as usize {
                return Err(ParseError::invalid(format!(
                    "'{s}' has {len} characters, too long for VARCHAR({n})"
                )));
            }
            Value::String(s.to_string())
        }
        DataType::Binary => match s.strip_prefix("\\x") {
            Some(hex) => Value::Binary(decode_hex(hex).ok_or_else(|| {
                ParseError::invalid(format!("'{s}' is not a hex byte string: write '\\x0a1b…'"))
            })?),
            None => Value::Binary(s.as_bytes().to_vec()),
        },
        DataType::Bool => match trimmed.to_ascii_lowercase().as_str() {
            "t" | "true" | "y" | "yes" | "on" | "1" => Value::Bool(true),
            "f" | "false" | "n" | "no" | "off" | "0" => Value::Bool(false),
            _ => {
                return Err(ParseError::type_mismatch(format!(
                    "'{s}' is not a boolean: write TRUE or FALSE"
                )));
            }
        },
        DataType::Date => Value::Date(Date32Type::parse(trimmed).ok_or_else(|| {
            ParseError::type_mismatch(format!("'{s}' is not a date: write DATE 'YYYY-MM-DD'"))
        })?),
        DataType::Timestamp => {
            let bad = || {
                ParseError::type_mismatch(format!(
                    "'{s}' is not a timestamp: write TIMESTAMP 'YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]' (UTC unless an offset is given)"
                ))
            };
            let utc: Tz = "+00:00".parse().map_err(|_| bad())?;
            Value::Timestamp(
                string_to_datetime(&utc, trimmed)
                    .map_err(|_| bad())?
                    .timestamp_micros(),
            )
        }
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float
        | DataType::Double
        | DataType::Decimal { .. } => {
            if trimmed.is_empty() {
                return Err(mismatch("''", t));
            }
            number_value(trimmed, t)?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::expr;
    use super::*;

    #[test]
    fn literals() {
        use DataType as T;
        let cases: &[(&str, DataType, Value)] = &[
            ("42", T::Int32, Value::Int32(42)),
            ("-42", T::Int8, Value::Int8(-42)),
            ("-128", T::Int8, Value::Int8(-128)),
            ("+7", T::Int16, Value::Int16(7)),
            ("9223372036854775807", T::Int64, Value::Int64(i64::MAX)),
            ("-9223372036854775808", T::Int64, Value::Int64(i64::MIN)),
            ("'42'", T::Int64, Value::Int64(42)),
            ("1.5", T::Double, Value::Double(1.5)),
            ("-2.5e3", T::Float, Value::Float(-2500.0)),
            ("3", T::Double, Value::Double(3.0)),
            ("TRUE", T::Bool, Value::Bool(true)),
            ("false", T::Bool, Value::Bool(false)),
            ("'t'", T::Bool, Value::Bool(true)),
            ("NULL", T::Int32, Value::Null),
            ("'héllo'", T::String, Value::String("héllo".into())),
            ("'abc'", T::Varchar(3), Value::String("abc".into())),
            ("E'a\\tb'", T::String, Value::String("a\tb".into())),
            ("$$x$$", T::String, Value::String("x".into())),
            ("X'0aFF'", T::Binary, Value::Binary(vec![0x0a, 0xff])),
            ("'\\x0102'", T::Binary, Value::Binary(vec![1, 2])),
            ("'ab'", T::Binary, Value::Binary(b"ab".to_vec())),
            ("DATE '1970-01-02'", T::Date, Value::Date(1)),
            ("'1969-12-31'", T::Date, Value::Date(-1)),
            ("DATE '2024-01-01'", T::Date, Value::Date(19723)),
            (
                "TIMESTAMP '1970-01-01 00:00:01'",
                T::Timestamp,
                Value::Timestamp(1_000_000),
            ),
            (
                "TIMESTAMP '1970-01-01T00:00:00.000001Z'",
                T::Timestamp,
                Value::Timestamp(1),
            ),
            (
                "'1970-01-01 01:00:00+01:00'",
                T::Timestamp,
                Value::Timestamp(0),
            ),
            (
                "DATE '1970-01-02'",
                T::Timestamp,
                Value::Timestamp(86_400_000_000),
            ),
            (
                "TIMESTAMP '2024-01-01 10:00:00'",
                T::Timestamp,
                Value::Timestamp(1_704_103_200_000_000),
            ),
            ("'5'::int", T::Int32, Value::Int32(5)),
            ("CAST('2024-01-01' AS DATE)", T::Date, Value::Date(19723)),
            ("-CAST('5' AS INT)", T::Int32, Value::Int32(-5)),
            ("(7)", T::Int64, Value::Int64(7)),
            (
                "12.34",
                T::Decimal {
                    precision: 5,
                    scale: 2,
                },
                Value::Decimal(1234),
            ),
        ];
        for (sql, t, want) in cases {
            let got = literal_value(&expr(sql), t).unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert_eq!(&got, want, "{sql} as {t}");
        }
    }

    #[test]
    fn literal_errors() {
        use DataType as T;
        let cases: &[(&str, DataType, &str)] = &[
            ("128", T::Int8, "22023"),
            ("99999999999999999999", T::Int64, "22023"),
            ("1.5", T::Int32, "42804"),
            ("'x'", T::Int32, "42804"),
            ("1", T::String, "42804"),
            ("TRUE", T::Int32, "42804"),
            ("1", T::Bool, "42804"),
            ("'maybe'", T::Bool, "42804"),
            ("'abcd'", T::Varchar(3), "22023"),
            ("'2024-13-01'", T::Date, "42804"),
            ("'yesterday'", T::Timestamp, "42804"),
            ("DATE '2024-01-01'", T::Int32, "42804"),
            ("TIMESTAMP '2024-01-01'", T::Date, "42804"),
            ("-'x'", T::String, "42804"),
            ("now()", T::Timestamp, "0A000"),
            ("1 + 1", T::Int32, "0A000"),
            ("X'0'", T::Binary, "22023"),
            ("1e400", T::Double, "22023"),
        ];
        for (sql, t, code) in cases {
            let e = literal_value(&expr(sql), t).expect_err(sql);
            assert_eq!(e.sqlstate(), *code, "{sql} as {t}: {e}");
        }
    }

    #[test]
    fn decimal_scaling_is_exact() {
        let d = |s: &str, p, sc| parse_decimal(s, p, sc);
        assert_eq!(d("1.23", 10, 2), Ok(123));
        assert_eq!(d("1.2", 10, 2), Ok(120));
        assert_eq!(d("-1.2", 10, 2), Ok(-120));
        assert_eq!(d("1", 10, 2), Ok(100));
        assert_eq!(d(".5", 10, 2), Ok(50));
        assert_eq!(d("5.", 10, 2), Ok(500));
        assert_eq!(d("1.2300", 10, 2), Ok(123));
        assert_eq!(d("0.000", 3, 0), Ok(0));
        assert_eq!(d("1e2", 10, 2), Ok(10000));
        assert_eq!(d("12.5E-1", 10, 2), Ok(125));
        assert_eq!(d("0.1", 1, 1), Ok(1));
        assert_eq!(d("000123.45", 5, 2), Ok(12345));
        // 0.1 + 0.2 style values stay exact.
        assert_eq!(d("0.30000000000000004", 20, 17), Ok(30_000_000_000_000_004));
        // 38 digits.
        let big = "9".repeat(38);
        assert_eq!(d(&big, 38, 0), Ok(10i128.pow(38) - 1));
        assert_eq!(d(&format!("-0.{big}"), 38, 38), Ok(-(10i128.pow(38) - 1)));
        // Too many digits after the point: an error, not rounding.
        assert_eq!(d("1.005", 10, 2).expect_err("scale").sqlstate(), "22023");
        assert_eq!(d("0.001", 10, 2).expect_err("scale").sqlstate(), "22023");
        // Too many digits before it.
        assert_eq!(d("1000", 5, 2).expect_err("precision").sqlstate(), "22023");
        assert_eq!(d("1e40", 38, 0).expect_err("precision").sqlstate(), "22023");
        assert_eq!(
            d(&format!("{big}9"), 38, 0)
                .expect_err("precision")
                .sqlstate(),
            "22023"
        );
        // Not numbers.
        for bad in ["", "-", ".", "1.2.3", "abc", "1e", "1ex", "--1"] {
            assert_eq!(d(bad, 10, 2).expect_err(bad).sqlstate(), "42804", "{bad}");
        }
        // Through literal_value, negative and string forms.
        let t = DataType::Decimal {
            precision: 6,
            scale: 3,
        };
        assert_eq!(literal_value(&expr("-1.25"), &t), Ok(Value::Decimal(-1250)));
        assert_eq!(literal_value(&expr("'2.5'"), &t), Ok(Value::Decimal(2500)));
    }
}
