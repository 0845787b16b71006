//! Parameters of the extended query protocol: from the bytes a client binds to the
//! values DataFusion plans with.
//!
//! Each parameter arrives as text or binary (per the Bind message's format codes) and
//! is decoded with the type the client declared in Parse; where the client declared
//! none (OID 0 or `unknown`), with the type the engine inferred for the placeholder,
//! and failing that as text. The value is then cast to the inferred type, so a client
//! that sends `int2` for a `BIGINT` column, or text for a `DATE`, gets what it meant.
//!
//! Binary decoding covers the types drivers send in binary: `bool`, `int2/4/8`, `oid`,
//! `float4/8`, `numeric`, `text`/`varchar`/`bpchar`/`name`/`json(b)`, `bytea`, `date`,
//! `time`, `timestamp`, `timestamptz` and `uuid`.

use arrow::datatypes::{DataType as ArrowType, TimeUnit};
use bytes::Bytes;
use datafusion::common::ScalarValue;
use pgwire::api::Type;
use pgwire::api::portal::Format;

use cairn_sql::error::SqlError;

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (PostgreSQL's).
const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// The time zone of Cairn's `TIMESTAMP` columns.
const UTC: &str = "+00:00";

/// Whether parameter `idx` is sent in binary, per the Bind message's format codes.
pub(crate) fn is_binary(format: &Format, idx: usize) -> bool {
    match format {
        Format::UnifiedText => false,
        Format::UnifiedBinary => true,
        Format::Individual(codes) => codes.get(idx).copied() == Some(1),
    }
}

/// Decodes bound parameters. `declared` are the client's Parse types (`None` where it
/// left the type open), `inferred` the engine's types for `$1`, `$2`, ...
pub(crate) fn decode_params(
    values: &[Option<Bytes>],
    format: &Format,
    declared: &[Option<Type>],
    inferred: &[Option<ArrowType>],
) -> Result<Vec<ScalarValue>, SqlError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let declared = declared
                .get(i)
                .and_then(|t| t.as_ref())
                .filter(|t| **t != Type::UNKNOWN);
            // `Null`: the engine could not tell (`SELECT $1`).
            let inferred = inferred
                .get(i)
                .and_then(|t| t.as_ref())
                .filter(|t| **t != ArrowType::Null);
            decode_param(v.as_deref(), is_binary(format, i), declared, inferred).map_err(|e| {
                SqlError::other(e.code, format!("parameter ${}: {}", i + 1, e.message))
            })
        })
        .collect()
}

/// Why a parameter could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParamError {
    /// SQLSTATE.
    pub(crate) code: &'static str,
    /// What was wrong.
    pub(crate) message: String,
}

fn bad_value(message: impl Into<String>) -> ParamError {
    ParamError {
        code: "22P02",
        message: message.into(),
    }
}

fn bad_binary(message: impl Into<String>) -> ParamError {
    ParamError {
        code: "22P03",
        message: message.into(),
    }
}

/// Decodes one parameter.
pub(crate) fn decode_param(
    raw: Option<&[u8]>,
    binary: bool,
    declared: Option<&Type>,
    inferred: Option<&ArrowType>,
) -> Result<ScalarValue, ParamError> {
    // What the value should become: the engine's type, else the declared one's.
    let target = inferred
        .cloned()
        .or_else(|| declared.and_then(arrow_type_of));
    let Some(raw) = raw else {
        return ScalarValue::try_from(target.as_ref().unwrap_or(&ArrowType::Utf8))
            .map_err(|e| bad_value(e.to_string()));
    };
    let value = if binary {
        let wire = match declared {
            Some(t) => t.clone(),
            None => match inferred.map(arrow_pg::datatypes::into_pg_type) {
                Some(Ok(t)) => t,
                _ => Type::TEXT,
            },
        };
        decode_binary(&wire, raw)?
    } else {
        let text =
            std::str::from_utf8(raw).map_err(|_| bad_value("text parameter is not valid UTF-8"))?;
        decode_text(declared, target.as_ref(), text)?
    };
    match target {
        Some(t) if value.data_type() != t => cast(value, &t),
        _ => Ok(value),
    }
}

/// Casts a decoded value to the type the statement expects.
fn cast(value: ScalarValue, to: &ArrowType) -> Result<ScalarValue, ParamError> {
    if let (ScalarValue::Utf8(Some(s)), ArrowType::Timestamp(..)) = (&value, to) {
        let fixed = normalize_offset(s);
        return ScalarValue::Utf8(Some(fixed.clone()))
            .cast_to(to)
            .map_err(|_| bad_value(format!("invalid input for type timestamp: \"{s}\"")));
    }
    if let (ScalarValue::Utf8(Some(s)), ArrowType::Date32 | ArrowType::Date64) = (&value, to) {
        // pgJDBC sends dates with a zone (`2024-01-03 +01`): the date is the first word.
        let date = s.split_whitespace().next().unwrap_or_default();
        return ScalarValue::Utf8(Some(date.to_string()))
            .cast_to(to)
            .map_err(|_| bad_value(format!("invalid input for type date: \"{s}\"")));
    }
    let shown = value.to_string();
    value
        .cast_to(to)
        .map_err(|_| bad_value(format!("invalid input for type {to}: \"{shown}\"")))
}

/// Text timestamps as drivers write them (`2024-01-02 03:04:05.123+01`) in a form
/// Arrow parses: a bare-hour offset gets its minutes (`+01:00`).
fn normalize_offset(s: &str) -> String {
    let t = s.trim();
    let bytes = t.as_bytes();
    let n = bytes.len();
    if n > 3
        && (bytes[n - 3] == b'+' || bytes[n - 3] == b'-')
        && bytes[n - 2].is_ascii_digit()
        && bytes[n - 1].is_ascii_digit()
        && t[..n - 3].contains(':')
    {
        return format!("{t}:00");
    }
    t.to_string()
}

/// The Arrow type a value declared with PostgreSQL type `t` decodes to, if fixed.
pub(crate) fn arrow_type_of(t: &Type) -> Option<ArrowType> {
    Some(match *t {
        Type::BOOL => ArrowType::Boolean,
        Type::INT2 => ArrowType::Int16,
        Type::INT4 => ArrowType::Int32,
        Type::INT8 | Type::OID => ArrowType::Int64,
        Type::FLOAT4 => ArrowType::Float32,
        Type::FLOAT8 => ArrowType::Float64,
        Type::TEXT
        | Type::VARCHAR
        | Type::BPCHAR
        | Type::NAME
        | Type::JSON
        | Type::JSONB
        | Type::UUID => ArrowType::Utf8,
        Type::BYTEA => ArrowType::Binary,
        Type::DATE => ArrowType::Date32,
        Type::TIME => ArrowType::Time64(TimeUnit::Microsecond),
        Type::TIMESTAMP => ArrowType::Timestamp(TimeUnit::Microsecond, None),
        Type::TIMESTAMPTZ => ArrowType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        _ => return None,
    })
}

/// Decodes a text parameter: booleans, `bytea` and numerics by PostgreSQL's rules,
/// everything else through a cast from text.
fn decode_text(
    declared: Option<&Type>,
    target: Option<&ArrowType>,
    text: &str,
) -> Result<ScalarValue, ParamError> {
    match (declared, target) {
        (_, Some(ArrowType::Boolean)) | (Some(&Type::BOOL), _) => parse_bool(text)
            .map(|b| ScalarValue::Boolean(Some(b)))
            .ok_or_else(|| bad_value(format!("invalid input for type boolean: \"{text}\""))),
        (_, Some(ArrowType::Binary | ArrowType::LargeBinary | ArrowType::BinaryView))
        | (Some(&Type::BYTEA), _) => Ok(ScalarValue::Binary(Some(parse_bytea(text)?))),
        (Some(&Type::NUMERIC), None) => parse_decimal(text)
            .map(|(v, scale)| ScalarValue::Decimal128(Some(v), 38, scale))
            .or_else(|| {
                text.trim()
                    .parse::<f64>()
                    .ok()
                    .map(|f| ScalarValue::Float64(Some(f)))
            })
            .ok_or_else(|| bad_value(format!("invalid input for type numeric: \"{text}\""))),
        _ => Ok(ScalarValue::Utf8(Some(text.to_string()))),
    }
}

/// PostgreSQL's boolean input: `t`, `true`, `yes`, `on`, `1` and their opposites (any
/// case, unambiguous prefixes of `true`/`false`/`yes`/`no`).
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    let t = text.trim().to_ascii_lowercase();
    if t.is_empty() {
        return None;
    }
    match t.as_str() {
        "1" | "on" => return Some(true),
        "0" | "off" | "of" => return Some(false),
        _ => {}
    }
    if "true".starts_with(&t) || "yes".starts_with(&t) {
        Some(true)
    } else if "false".starts_with(&t) || "no".starts_with(&t) {
        Some(false)
    } else {
        None
    }
}

/// `bytea` text input: hex (`\x0a0b`) or the escape format (`a\000b`, `\\`).
pub(crate) fn parse_bytea(text: &str) -> Result<Vec<u8>, ParamError> {
    if let Some(hex) = text
        .strip_prefix("\\x")
        .or_else(|| text.strip_prefix("\\X"))
    {
        let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return Err(bad_value("invalid hexadecimal data: odd number of digits"));
        }
        return digits
            .chunks(2)
            .map(|pair| {
                let s = std::str::from_utf8(pair).unwrap_or("zz");
                u8::from_str_radix(s, 16)
                    .map_err(|_| bad_value(format!("invalid hexadecimal digit in \"{s}\"")))
            })
            .collect();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if let Some(oct) = bytes.get(i + 1..i + 4)
            && oct.iter().all(|b| (b'0'..=b'7').contains(b))
        {
            let v = oct
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(
                u8::try_from(v).map_err(|_| bad_value("invalid input syntax for type bytea"))?,
            );
            i += 4;
        } else {
            return Err(bad_value("invalid input syntax for type bytea"));
        }
    }
    Ok(out)
}

/// A decimal literal (`-12.340`) as a mantissa and a scale; `None` when it is not one
/// or has more than 38 digits.
pub(crate) fn parse_decimal(text: &str) -> Option<(i128, i8)> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || int.len() + frac.len() > 38
    {
        return None;
    }
    let mut v: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        v = v * 10 + i128::from(b - b'0');
    }
    let scale = i8::try_from(frac.len()).ok()?;
    Some((if neg { -v } else { v }, scale))
}

fn fixed<const N: usize>(raw: &[u8], what: &str) -> Result<[u8; N], ParamError> {
    raw.try_into().map_err(|_| {
        bad_binary(format!(
            "binary {what} must be {N} bytes, got {}",
            raw.len()
        ))
    })
}

/// Decodes a binary parameter of PostgreSQL type `t`.
pub(crate) fn decode_binary(t: &Type, raw: &[u8]) -> Result<ScalarValue, ParamError> {
    Ok(match *t {
        Type::BOOL => ScalarValue::Boolean(Some(fixed::<1>(raw, "boolean")?[0] != 0)),
        Type::INT2 => ScalarValue::Int16(Some(i16::from_be_bytes(fixed(raw, "int2")?))),
        Type::INT4 => ScalarValue::Int32(Some(i32::from_be_bytes(fixed(raw, "int4")?))),
        Type::INT8 => ScalarValue::Int64(Some(i64::from_be_bytes(fixed(raw, "int8")?))),
        Type::OID => ScalarValue::Int64(Some(i64::from(u32::from_be_bytes(fixed(raw, "oid")?)))),
        Type::FLOAT4 => ScalarValue::Float32(Some(f32::from_be_bytes(fixed(raw, "float4")?))),
        Type::FLOAT8 => ScalarValue::Float64(Some(f64::from_be_bytes(fixed(raw, "float8")?))),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON | Type::UNKNOWN => {
            ScalarValue::Utf8(Some(utf8(raw)?))
        }
        Type::JSONB => match raw.split_first() {
            Some((1, rest)) => ScalarValue::Utf8(Some(utf8(rest)?)),
            _ => return Err(bad_binary("unsupported jsonb version")),
        },
        Type::BYTEA => ScalarValue::Binary(Some(raw.to_vec())),
        Type::DATE => {
            let days = i32::from_be_bytes(fixed(raw, "date")?);
            let days = days
                .checked_add(PG_EPOCH_DAYS)
                .ok_or_else(|| bad_value("date out of range"))?;
            ScalarValue::Date32(Some(days))
        }
        Type::TIME => ScalarValue::Time64Microsecond(Some(i64::from_be_bytes(fixed(raw, "time")?))),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(raw, "timestamp")?);
            let micros = micros
                .checked_add(PG_EPOCH_MICROS)
                .ok_or_else(|| bad_value("timestamp out of range (infinity is not supported)"))?;
            let tz = (*t == Type::TIMESTAMPTZ).then(|| UTC.into());
            ScalarValue::TimestampMicrosecond(Some(micros), tz)
        }
        Type::NUMERIC => {
            let (v, scale) = decode_numeric(raw)?;
            ScalarValue::Decimal128(Some(v), 38, scale)
        }
        Type::UUID => {
            let b: [u8; 16] = fixed(raw, "uuid")?;
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            ScalarValue::Utf8(Some(format!(
                "{}-{}-{}-{}-{}",
                &hex[0..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..32]
            )))
        }
        ref other => {
            return Err(ParamError {
                code: "0A000",
                message: format!(
                    "binary parameters of type {} are not supported: send it as text",
                    other.name()
                ),
            });
        }
    })
}

fn utf8(raw: &[u8]) -> Result<String, ParamError> {
    String::from_utf8(raw.to_vec()).map_err(|_| bad_value("parameter is not valid UTF-8"))
}

/// Binary `numeric`: `ndigits`, `weight`, `sign`, `dscale` (each 16 bits), then
/// `ndigits` base-10000 digits; the value is Σ digit[i] · 10000^(weight − i). Returns
/// the mantissa at scale `dscale`.
pub(crate) fn decode_numeric(raw: &[u8]) -> Result<(i128, i8), ParamError> {
    let word = |i: usize| -> Result<u16, ParamError> {
        raw.get(2 * i..2 * i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| bad_binary("truncated binary numeric"))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(1)? as i16);
    let sign = word(2)?;
    let dscale = i64::from(word(3)?);
    match sign {
        0x0000 | 0x4000 => {}
        _ => return Err(bad_value("NaN and infinite numerics are not supported")),
    }
    if raw.len() != 8 + 2 * ndigits {
        return Err(bad_binary(
            "binary numeric length does not match its digit count",
        ));
    }
    let overflow = || ParamError {
        code: "22003",
        message: "numeric value does not fit 38 digits".into(),
    };
    let mut n: i128 = 0;
    for i in 0..ndigits {
        let d = word(4 + i)?;
        if d >= 10_000 {
            return Err(bad_binary("invalid binary numeric digit"));
        }
        n = n
            .checked_mul(10_000)
            .and_then(|n| n.checked_add(i128::from(d)))
            .ok_or_else(overflow)?;
    }
    // The value is n · 10^(4·(weight − ndigits + 1)); scale it to dscale places.
    let exp = 4 * (weight - ndigits as i64 + 1) + dscale;
    let v = if exp >= 0 {
        let factor = 10i128.checked_pow(u32::try_from(exp).map_err(|_| overflow())?);
        factor.and_then(|f| n.checked_mul(f)).ok_or_else(overflow)?
    } else {
        match 10i128.checked_pow(u32::try_from(-exp).map_err(|_| overflow())?) {
            Some(f) => n / f,
            None => 0,
        }
    };
    let scale = i8::try_from(dscale)
        .ok()
        .filter(|s| *s <= 38)
        .ok_or_else(overflow)?;
    Ok((if sign == 0x4000 { -v } else { v }, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str, declared: Option<&Type>, inferred: Option<&ArrowType>) -> ScalarValue {
        decode_param(Some(s.as_bytes()), false, declared, inferred).unwrap()
    }

    fn bin(b: &[u8], declared: Option<&Type>, inferred: Option<&ArrowType>) -> ScalarValue {
        decode_param(Some(b), true, declared, inferred).unwrap()
    }

    fn ts_utc() -> ArrowType {
        ArrowType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
    }

    #[test]
    fn text_values_are_cast_to_the_inferred_type() {
        assert_eq!(
            text("42", None, Some(&ArrowType::Int64)),
            ScalarValue::Int64(Some(42))
        );
        assert_eq!(
            text("42", Some(&Type::INT2), Some(&ArrowType::Int64)),
            ScalarValue::Int64(Some(42))
        );
        assert_eq!(
            text("1.5", Some(&Type::FLOAT8), Some(&ArrowType::Float64)),
            ScalarValue::Float64(Some(1.5))
        );
        assert_eq!(text("hi", None, None), ScalarValue::Utf8(Some("hi".into())));
        assert_eq!(
            text("7", Some(&Type::INT4), None),
            ScalarValue::Int32(Some(7))
        );
        assert_eq!(
            text(
                "12.34",
                Some(&Type::NUMERIC),
                Some(&ArrowType::Decimal128(10, 2))
            ),
            ScalarValue::Decimal128(Some(1234), 10, 2)
        );
        assert_eq!(
            text("-12.340", Some(&Type::NUMERIC), None),
            ScalarValue::Decimal128(Some(-12340), 38, 3)
        );
        assert_eq!(
            text("2024-02-29", None, Some(&ArrowType::Date32)),
            ScalarValue::Date32(Some(19782))
        );
        assert_eq!(
            text("t", None, Some(&ArrowType::Boolean)),
            ScalarValue::Boolean(Some(true))
        );
        assert_eq!(
            text("off", Some(&Type::BOOL), None),
            ScalarValue::Boolean(Some(false))
        );
        assert_eq!(
            text("\\x0aff", None, Some(&ArrowType::Binary)),
            ScalarValue::Binary(Some(vec![10, 255]))
        );
    }

    #[test]
    fn text_timestamps_with_and_without_offsets() {
        let micros = 1_704_164_645_123_456i64; // 2024-01-02 03:04:05.123456 UTC
        assert_eq!(
            text(
                "2024-01-02 03:04:05.123456",
                Some(&Type::TIMESTAMP),
                Some(&ts_utc())
            ),
            ScalarValue::TimestampMicrosecond(Some(micros), Some(UTC.into()))
        );
        assert_eq!(
            text("2024-01-02 04:04:05.123456+01", None, Some(&ts_utc())),
            ScalarValue::TimestampMicrosecond(Some(micros), Some(UTC.into()))
        );
        assert_eq!(
            text(
                "2024-01-02 03:04:05.123456+00:00",
                Some(&Type::TIMESTAMPTZ),
                Some(&ts_utc())
            ),
            ScalarValue::TimestampMicrosecond(Some(micros), Some(UTC.into()))
        );
        assert_eq!(
            text("2024-01-02T03:04:05.123456Z", None, Some(&ts_utc())),
            ScalarValue::TimestampMicrosecond(Some(micros), Some(UTC.into()))
        );
    }

    #[test]
    fn nulls_take_the_target_type() {
        assert_eq!(
            decode_param(None, false, None, Some(&ArrowType::Int64)).unwrap(),
            ScalarValue::Int64(None)
        );
        assert_eq!(
            decode_param(None, true, Some(&Type::DATE), None).unwrap(),
            ScalarValue::Date32(None)
        );
        assert_eq!(
            decode_param(None, false, None, None).unwrap(),
            ScalarValue::Utf8(None)
        );
    }

    #[test]
    fn declared_types_win_where_the_engine_infers_nothing() {
        let values = [
            Some(Bytes::from_static(b"5")),
            None,
            Some(Bytes::from_static(b"x")),
        ];
        let got = decode_params(
            &values,
            &Format::UnifiedText,
            &[Some(Type::INT4), None, None],
            &[Some(ArrowType::Null), None, Some(ArrowType::Utf8)],
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ScalarValue::Int32(Some(5)),
                ScalarValue::Utf8(None),
                ScalarValue::Utf8(Some("x".into()))
            ]
        );
        let e = decode_params(
            &values[..1],
            &Format::UnifiedText,
            &[],
            &[Some(ArrowType::Date32)],
        )
        .unwrap_err();
        assert_eq!(e.sqlstate(), "22P02");
        assert!(e.to_string().starts_with("parameter $1: "), "{e}");
    }

    #[test]
    fn bad_text_is_22p02() {
        let e = decode_param(Some(b"abc"), false, None, Some(&ArrowType::Int64)).unwrap_err();
        assert_eq!(e.code, "22P02");
        let e = decode_param(Some(b"maybe"), false, Some(&Type::BOOL), None).unwrap_err();
        assert_eq!(e.code, "22P02");
        let e = decode_param(Some(b"\\x0"), false, Some(&Type::BYTEA), None).unwrap_err();
        assert_eq!(e.code, "22P02");
    }

    #[test]
    fn binary_scalars() {
        assert_eq!(
            bin(
                &5i16.to_be_bytes(),
                Some(&Type::INT2),
                Some(&ArrowType::Int64)
            ),
            ScalarValue::Int64(Some(5))
        );
        assert_eq!(
            bin(&(-7i32).to_be_bytes(), Some(&Type::INT4), None),
            ScalarValue::Int32(Some(-7))
        );
        assert_eq!(
            bin(&9i64.to_be_bytes(), None, Some(&ArrowType::Int64)),
            ScalarValue::Int64(Some(9))
        );
        assert_eq!(
            bin(&2.5f64.to_be_bytes(), Some(&Type::FLOAT8), None),
            ScalarValue::Float64(Some(2.5))
        );
        assert_eq!(
            bin(&[1], Some(&Type::BOOL), None),
            ScalarValue::Boolean(Some(true))
        );
        assert_eq!(
            bin(b"abc", Some(&Type::VARCHAR), None),
            ScalarValue::Utf8(Some("abc".into()))
        );
        assert_eq!(
            bin(&[0, 1], Some(&Type::BYTEA), None),
            ScalarValue::Binary(Some(vec![0, 1]))
        );
        // 2000-01-02 is day 1 for PostgreSQL, 10958 for Arrow.
        assert_eq!(
            bin(&1i32.to_be_bytes(), Some(&Type::DATE), None),
            ScalarValue::Date32(Some(10_958))
        );
        assert_eq!(
            bin(
                &1_000_000i64.to_be_bytes(),
                Some(&Type::TIMESTAMPTZ),
                Some(&ts_utc())
            ),
            ScalarValue::TimestampMicrosecond(Some(PG_EPOCH_MICROS + 1_000_000), Some(UTC.into()))
        );
        assert_eq!(
            bin(
                &1_000_000i64.to_be_bytes(),
                Some(&Type::TIMESTAMP),
                Some(&ts_utc())
            ),
            ScalarValue::TimestampMicrosecond(Some(PG_EPOCH_MICROS + 1_000_000), Some(UTC.into()))
        );
        let e = decode_param(Some(&[0, 1, 2]), true, Some(&Type::INT4), None).unwrap_err();
        assert_eq!(e.code, "22P03");
        let uuid = [
            0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7,
        ];
        assert_eq!(
            bin(&uuid, Some(&Type::UUID), None),
            ScalarValue::Utf8(Some("12345678-9abc-def0-0001-020304050607".into()))
        );
    }

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut v = vec![];
        for w in [ndigits, weight as u16, sign, dscale].iter().chain(digits) {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    #[test]
    fn binary_numeric() {
        // 12345.678 = 1·10000 + 2345 + 6780/10000
        assert_eq!(
            decode_numeric(&numeric(3, 1, 0, 3, &[1, 2345, 6780])).unwrap(),
            (12_345_678, 3)
        );
        // -0.05
        assert_eq!(
            decode_numeric(&numeric(1, -1, 0x4000, 2, &[500])).unwrap(),
            (-5, 2)
        );
        // 0
        assert_eq!(decode_numeric(&numeric(0, 0, 0, 0, &[])).unwrap(), (0, 0));
        // 20000 (trailing zero digit groups omitted)
        assert_eq!(
            decode_numeric(&numeric(1, 1, 0, 0, &[2])).unwrap(),
            (20_000, 0)
        );
        assert!(decode_numeric(&numeric(1, 0, 0xC000, 0, &[1])).is_err());
        assert!(decode_numeric(&[0, 1]).is_err());
        assert_eq!(
            bin(
                &numeric(2, 0, 0, 2, &[12, 3400]),
                Some(&Type::NUMERIC),
                Some(&ArrowType::Decimal128(10, 2))
            ),
            ScalarValue::Decimal128(Some(1234), 10, 2)
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(parse_decimal("1.50"), Some((150, 2)));
        assert_eq!(parse_decimal("+7"), Some((7, 0)));
        assert_eq!(parse_decimal(".5"), Some((5, 1)));
        assert_eq!(parse_decimal("1e5"), None);
        assert_eq!(parse_decimal("-"), None);
        assert_eq!(parse_bool("YES"), Some(true));
        assert_eq!(parse_bool("f"), Some(false));
        assert_eq!(parse_bool("o"), None);
        assert_eq!(parse_bytea("a\\\\b\\001").unwrap(), b"a\\b\x01".to_vec());
        assert_eq!(
            normalize_offset("2024-01-02 03:04:05-07"),
            "2024-01-02 03:04:05-07:00"
        );
        assert_eq!(normalize_offset("2024-01-02"), "2024-01-02");
        assert!(is_binary(&Format::Individual(vec![0, 1]), 1));
        assert!(!is_binary(&Format::Individual(vec![0, 1]), 5));
    }
}
