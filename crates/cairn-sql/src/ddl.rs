//! Turning parsed DDL ([`crate::parser`]) into Cairn's own types (`cairn-common`).
//!
//! - [`column_type`] maps SQL types onto [`cairn_common::DataType`];
//! - [`literal_value`] turns a literal (a `DEFAULT`, a range bound) into a
//!   [`cairn_common::Value`] of the column's type, exactly (decimals are scaled with
//!   integer arithmetic, dates and timestamps parsed as in Arrow);
//! - [`table_def`] builds the schema, partition schema and encoded range bounds of a
//!   `CREATE TABLE`, validated the way the master will validate them;
//! - [`alter_ops`] turns `ALTER TABLE` operations into [`AlterOp`]s.
//!
//! Only `cairn-common` types appear here, so the caller builds the client's
//! `CreateTableSpec` from a [`TableDef`] field by field.

use arrow::array::timezone::Tz;
use arrow::compute::kernels::cast_utils::{Parser as _, string_to_datetime};
use arrow::datatypes::Date32Type;
use cairn_common::schema::MAX_KEY_BYTES;
use cairn_common::types::MAX_DECIMAL_PRECISION;
use cairn_common::{
    AUTO_INCREMENTING_ID, AlterOp, ColumnSpec, CommonError, DataType, HashLevel, PartitionSchema,
    Schema, Value,
};
use datafusion::sql::sqlparser::ast::{
    self, CharacterLength, DataType as SqlType, ExactNumberInfo, Expr, UnaryOperator,
};

use crate::parser::{AlterColumn, ColumnDef, CreateTable, ParseError};

/// The SQL types Cairn columns can have, for error messages.
const SUPPORTED_TYPES: &str = "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, REAL, DOUBLE PRECISION, \
     DECIMAL(p,s), TEXT, VARCHAR(n), BYTEA, DATE and TIMESTAMP";

/// Precision and scale of a `DECIMAL` / `NUMERIC` declared without a precision.
///
/// PostgreSQL's unconstrained NUMERIC has no fixed precision; Cairn stores decimals as
/// 128-bit integers, so it uses the largest precision (38) with 10 digits after the
/// point: 28 digits before it.
pub const DEFAULT_DECIMAL: (u8, i8) = (MAX_DECIMAL_PRECISION, 10);

/// Maps a SQL column type onto Cairn's.
///
/// | SQL | Cairn |
/// |---|---|
/// | BOOLEAN, BOOL | Bool |
/// | TINYINT | Int8 |
/// | SMALLINT, INT2 | Int16 |
/// | INT, INTEGER, INT4 | Int32 |
/// | BIGINT, INT8 | Int64 |
/// | REAL, FLOAT4, FLOAT(p ≤ 24) | Float |
/// | DOUBLE, DOUBLE PRECISION, FLOAT8, FLOAT, FLOAT(25..=53) | Double |
/// | DECIMAL / NUMERIC / DEC (p, s) | Decimal(p, s); (p) is (p, 0); no precision is [`DEFAULT_DECIMAL`] |
/// | TEXT, STRING, VARCHAR, CHARACTER VARYING (no length or MAX) | String |
/// | VARCHAR(n), CHAR(n), CHARACTER VARYING(n), STRING(n) | Varchar(n) (CHAR is not blank-padded) |
/// | CHAR, CHARACTER (no length) | Varchar(1), as in PostgreSQL |
/// | BYTEA, BLOB, BINARY, VARBINARY, BYTES | Binary (no length limit) |
/// | DATE | Date |
/// | TIMESTAMP[(p ≤ 6)] [WITH[OUT] TIME ZONE], TIMESTAMPTZ, DATETIME | Timestamp (µs, UTC) |
///
/// Anything else (unsigned integers, TIME, INTERVAL, JSON, UUID, arrays, …) is an
/// unsupported-feature error (0A000) naming the supported types.
pub fn column_type(t: &SqlType) -> Result<DataType, ParseError> {
    use SqlType as S;
    Ok(match t {
        S::Bool | S::Boolean => DataType::Bool,
        S::TinyInt(_) => DataType::Int8,
        S::SmallInt(_) | S::Int2(_) | S::Int16 => DataType::Int16,
        S::Int(_) | S::Integer(_) | S::Int4(_) | S::Int32 => DataType::Int32,
        S::BigInt(_) | S::Int8(_) | S::Int64 => DataType::Int64,
        S::Real | S::Float4 | S::Float32 => DataType::Float,
        S::Double(ExactNumberInfo::None) | S::DoublePrecision | S::Float8 | S::Float64 => {
            DataType::Double
        }
        S::Float(info) => match info {
            ExactNumberInfo::None => DataType::Double,
            ExactNumberInfo::Precision(p) if (1..=24).contains(p) => DataType::Float,
            ExactNumberInfo::Precision(p) if (25..=53).contains(p) => DataType::Double,
            _ => {
                return Err(ParseError::invalid(format!(
                    "{t} is invalid: FLOAT(p) takes a precision of 1 to 53 bits"
                )));
            }
        },
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => {
            let (precision, scale) = match info {
                ExactNumberInfo::None => DEFAULT_DECIMAL,
                ExactNumberInfo::Precision(p) => (decimal_precision(t, *p)?, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => {
                    let p = decimal_precision(t, *p)?;
                    if *s < 0 || *s > p as i64 {
                        return Err(ParseError::invalid(format!(
                            "{t} is invalid: the scale must be between 0 and the precision ({p})"
                        )));
                    }
                    (p, *s as i8)
                }
            };
            DataType::Decimal { precision, scale }
        }
        S::Text | S::TinyText | S::MediumText | S::LongText | S::String(None) => DataType::String,
        S::String(Some(n)) => DataType::Varchar(char_length(t, *n)?),
        S::Varchar(len) | S::CharacterVarying(len) | S::CharVarying(len) | S::Nvarchar(len) => {
            match len {
                None | Some(CharacterLength::Max) => DataType::String,
                Some(CharacterLength::IntegerLength { length, .. }) => {
                    DataType::Varchar(char_length(t, *length)?)
                }
            }
        }
        S::Char(len) | S::Character(len) => match len {
            None => DataType::Varchar(1),
            Some(CharacterLength::Max) => DataType::String,
            Some(CharacterLength::IntegerLength { length, .. }) => {
                DataType::Varchar(char_length(t, *length)?)
            }
        },
        S::Bytea
        | S::Blob(_)
        | S::TinyBlob
        | S::MediumBlob
        | S::LongBlob
        | S::Binary(_)
        | S::Varbinary(_)
        | S::Bytes(_) => DataType::Binary,
        S::Date => DataType::Date,
        S::Timestamp(precision, _) | S::Datetime(precision) | S::TimestampNtz(precision) => {
            if precision.is_some_and(|p| p > 6) {
                return Err(ParseError::invalid(format!(
                    "{t} is invalid: Cairn timestamps have microsecond precision, so use a precision of at most 6"
                )));
            }
            DataType::Timestamp
        }
        S::TinyIntUnsigned(_)
        | S::UTinyInt
        | S::SmallIntUnsigned(_)
        | S::Int2Unsigned(_)
        | S::USmallInt
        | S::MediumIntUnsigned(_)
        | S::IntUnsigned(_)
        | S::Int4Unsigned(_)
        | S::IntegerUnsigned(_)
        | S::BigIntUnsigned(_)
        | S::Int8Unsigned(_)
        | S::UBigInt
        | S::UInt8
        | S::UInt16
        | S::UInt32
        | S::UInt64
        | S::UInt128
        | S::UInt256
        | S::Unsigned
        | S::UnsignedInteger => {
            return Err(ParseError::unsupported(format!(
                "type {t} is not supported: Cairn has no unsigned integers; use the next wider signed type (e.g. BIGINT for INT UNSIGNED). Supported types: {SUPPORTED_TYPES}"
            )));
        }
        other => {
            return Err(ParseError::unsupported(format!(
                "type {other} is not supported; Cairn columns can be {SUPPORTED_TYPES}"
            )));
        }
    })
}

fn decimal_precision(t: &SqlType, p: u64) -> Result<u8, ParseError> {
    if p == 0 || p > MAX_DECIMAL_PRECISION as u64 {
        return Err(ParseError::invalid(format!(
            "{t} is invalid: the precision of DECIMAL must be between 1 and {MAX_DECIMAL_PRECISION}"
        )));
    }
    Ok(p as u8)
}

fn char_length(t: &SqlType, n: u64) -> Result<u32, ParseError> {
    match u32::try_from(n) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ParseError::invalid(format!(
            "{t} is invalid: the length must be between 1 and {}; use TEXT for strings of any length",
            u32::MAX
        ))),
    }
}

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

/// A `CREATE TABLE` in Cairn's terms: everything the client's `CreateTableSpec` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    /// Table name.
    pub name: String,
    /// Columns (in the order declared) and primary key.
    pub schema: Schema,
    /// Hash levels and range columns.
    pub partition: PartitionSchema,
    /// Range partitions as `[lower, upper)` encoded range keys (empty = unbounded); an
    /// empty list means one unbounded range.
    pub range_bounds: Vec<(Vec<u8>, Vec<u8>)>,
    /// `WITH (replicas = n)`, if given.
    pub replicas: Option<u32>,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
    /// `SUBSPACE (…)` clauses: hyperspace search subspaces.
    pub subspaces: Vec<cairn_hyperspace::SubspaceSpec>,
}

fn common(e: CommonError) -> ParseError {
    match e {
        CommonError::InvalidValue { .. }
        | CommonError::NullValue { .. }
        | CommonError::ValueTooLong { .. } => ParseError::invalid(e.to_string()),
        other => ParseError::invalid_definition(other.to_string()),
    }
}

/// Builds and validates the table definition of a parsed `CREATE TABLE`.
///
/// - Columns keep the declared order (key columns may be anywhere); primary-key
///   columns are NOT NULL.
/// - `CREATE TABLE … AS SELECT` without a column list takes its columns from
///   `columns_from_query` (name, type, nullable, in query order) and its key from the
///   `PRIMARY KEY (…)` clause. With a column list, the list must have as many columns
///   as the query and wins.
/// - Without `PARTITION BY`: one hash level over all primary-key columns with
///   `default_buckets` buckets, or no partitioning if `default_buckets < 2`.
/// - `HASH PARTITIONS n` without columns hashes all primary-key columns.
/// - Range bounds are encoded with [`PartitionSchema::encode_range_key`]; `VALUE = x`
///   becomes `[key(x), key(x) ‖ 0x00)`, the range holding exactly `x`.
///
/// - Without a primary key, the table is keyed by a hidden BIGINT column
///   [`AUTO_INCREMENTING_ID`] placed first, whose values the client reserves from the
///   master (Kudu 1.17+'s auto-incrementing column): `pandas.DataFrame.to_sql` and
///   other tools that create tables without keys work, and duplicate rows are kept.
///
/// Errors: a column named [`AUTO_INCREMENTING_ID`] → 42939; bad key, partition or range
/// definitions → 42P16; bad literals → 22023 / 42804.
pub fn table_def(
    ct: &CreateTable,
    columns_from_query: Option<&[(String, DataType, bool)]>,
    default_buckets: u32,
) -> Result<TableDef, ParseError> {
    // A table without a primary key is keyed by a hidden auto-incrementing column.
    let hidden_key = ct.primary_key.is_empty();
    let primary_key: Vec<String> = if hidden_key {
        vec![AUTO_INCREMENTING_ID.to_string()]
    } else {
        ct.primary_key.clone()
    };
    let is_key = |name: &str| primary_key.iter().any(|k| k == name);

    let specs: Vec<ColumnSpec> = if !ct.columns.is_empty() {
        if let Some(q) = columns_from_query
            && q.len() != ct.columns.len()
        {
            return Err(ParseError::invalid_definition(format!(
                "CREATE TABLE {} declares {} columns but its query returns {}: declare one column per query column, or leave out the column list",
                ct.name,
                ct.columns.len(),
                q.len()
            )));
        }
        ct.columns
            .iter()
            .map(|c| column_spec(c, is_key(&c.name)))
            .collect::<Result<_, _>>()?
    } else {
        let Some(q) = columns_from_query else {
            return Err(ParseError::invalid_definition(format!(
                "CREATE TABLE {} has no columns: list them, or create it AS SELECT ...",
                ct.name
            )));
        };
        q.iter()
            .map(|(name, t, nullable)| ColumnSpec {
                name: name.clone(),
                data_type: t.clone(),
                nullable: *nullable && !is_key(name),
                default: None,
            })
            .collect()
    };
    if specs.iter().any(|c| c.name == AUTO_INCREMENTING_ID) {
        return Err(reserved_name());
    }
    let mut specs = specs;
    if hidden_key {
        specs.insert(
            0,
            ColumnSpec {
                name: AUTO_INCREMENTING_ID.to_string(),
                data_type: DataType::Int64,
                nullable: false,
                default: None,
            },
        );
    }
    for k in &primary_key {
        if !specs.iter().any(|c| &c.name == k) {
            let names: Vec<&str> = specs.iter().map(|c| c.name.as_str()).collect();
            return Err(ParseError::invalid_definition(format!(
                "primary key column '{k}' is not a column of {}; its columns are {}",
                ct.name,
                names.join(", ")
            )));
        }
    }
    let key_refs: Vec<&str> = primary_key.iter().map(String::as_str).collect();
    let schema = Schema::new(specs, &key_refs).map_err(common)?;

    let mut partition = PartitionSchema::default();
    if ct.hash.is_empty() && ct.range.is_none() {
        if default_buckets >= 2 {
            partition.hash_levels.push(HashLevel {
                columns: primary_key.clone(),
                num_buckets: default_buckets,
                seed: 0,
            });
        }
    } else {
        for (cols, n) in &ct.hash {
            if *n < 2 {
                return Err(ParseError::invalid(
                    "PARTITIONS must be followed by a number of buckets ≥ 2, e.g. PARTITION BY HASH (id) PARTITIONS 4",
                ));
            }
            partition.hash_levels.push(HashLevel {
                columns: if cols.is_empty() {
                    primary_key.clone()
                } else {
                    cols.clone()
                },
                num_buckets: *n,
                seed: 0,
            });
        }
        if let Some(r) = &ct.range {
            partition.range_columns = r.columns.clone();
        }
    }
    partition.validate(&schema).map_err(common)?;

    let mut range_bounds = Vec::new();
    if let Some(r) = &ct.range {
        let types: Vec<DataType> = r
            .columns
            .iter()
            .map(|c| {
                let i = schema.index_of(c).map_err(common)?;
                Ok(schema.column(i).data_type.clone())
            })
            .collect::<Result<_, ParseError>>()?;
        for (lower, upper) in &r.bounds {
            range_bounds.push(encode_bounds(&partition, &r.columns, &types, lower, upper)?);
        }
        partition.create_partitions(&range_bounds).map_err(common)?;
    }

    let mut subspaces: Vec<cairn_hyperspace::SubspaceSpec> = Vec::with_capacity(ct.subspaces.len());
    for clause in &ct.subspaces {
        let spec = subspace_spec(clause, &schema)?;
        if subspaces.iter().any(|s| s.columns == spec.columns) {
            return Err(ParseError::invalid_definition(format!(
                "SUBSPACE ({}) is declared twice",
                clause.0.join(", ")
            )));
        }
        subspaces.push(spec);
    }

    Ok(TableDef {
        name: ct.name.clone(),
        schema,
        partition,
        range_bounds,
        replicas: ct.replicas,
        if_not_exists: ct.if_not_exists,
        subspaces,
    })
}

/// The error for a user column named [`AUTO_INCREMENTING_ID`] (42939).
fn reserved_name() -> ParseError {
    ParseError::invalid_with(
        "42939",
        format!(
            "column name \"{AUTO_INCREMENTING_ID}\" is reserved for the hidden key of tables without a primary key: choose another name"
        ),
    )
}

fn column_spec(c: &ColumnDef, is_key: bool) -> Result<ColumnSpec, ParseError> {
    let data_type = column_type(&c.data_type)
        .map_err(|e| with_context(e, &format!("column '{}': ", c.name)))?;
    let nullable = c.nullable && !is_key;
    let default = match &c.default {
        None => None,
        Some(e) => {
            let v = literal_value(e, &data_type)
                .map_err(|err| with_context(err, &format!("DEFAULT of column '{}': ", c.name)))?;
            if v.is_null() && !nullable {
                return Err(ParseError::invalid_definition(format!(
                    "column '{}' is NOT NULL, so its DEFAULT cannot be NULL",
                    c.name
                )));
            }
            Some(v)
        }
    };
    Ok(ColumnSpec {
        name: c.name.clone(),
        data_type,
        nullable,
        default,
    })
}

fn with_context(e: ParseError, prefix: &str) -> ParseError {
    match e {
        ParseError::Syntax(m) => ParseError::Syntax(format!("{prefix}{m}")),
        ParseError::Unsupported(m) => ParseError::Unsupported(format!("{prefix}{m}")),
        ParseError::Invalid { message, code } => ParseError::Invalid {
            message: format!("{prefix}{message}"),
            code,
        },
    }
}

fn encode_bound(
    partition: &PartitionSchema,
    columns: &[String],
    types: &[DataType],
    bound: &[Expr],
) -> Result<Vec<u8>, ParseError> {
    if bound.len() != columns.len() {
        return Err(ParseError::invalid_definition(format!(
            "range bound ({}) has {} value(s) but the table is range partitioned on {} column(s) ({}): give one value per range column, e.g. ({})",
            bound
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            bound.len(),
            columns.len(),
            columns.join(", "),
            columns.iter().map(|_| "…").collect::<Vec<_>>().join(", ")
        )));
    }
    let mut values = Vec::with_capacity(bound.len());
    for ((e, t), c) in bound.iter().zip(types).zip(columns) {
        let v = literal_value(e, t)
            .map_err(|err| with_context(err, &format!("range bound of column '{c}': ")))?;
        if v.is_null() {
            return Err(ParseError::invalid_definition(format!(
                "range bound of column '{c}' is NULL: key columns have no NULLs, so use a value"
            )));
        }
        v.check_type(c, t).map_err(common)?;
        values.push(v);
    }
    let key = partition.encode_range_key(&values).map_err(common)?;
    if key.len() > MAX_KEY_BYTES {
        return Err(ParseError::invalid_definition(format!(
            "a range bound of {} bytes exceeds the {MAX_KEY_BYTES} byte key limit",
            key.len()
        )));
    }
    Ok(key)
}

fn encode_bounds(
    partition: &PartitionSchema,
    columns: &[String],
    types: &[DataType],
    lower: &Option<Vec<Expr>>,
    upper: &Option<Vec<Expr>>,
) -> Result<(Vec<u8>, Vec<u8>), ParseError> {
    let lo = match lower {
        Some(b) => encode_bound(partition, columns, types, b)?,
        None => vec![],
    };
    let hi = match upper {
        // PARTITION VALUE = x: the smallest key above key(x).
        Some(b) if lower.as_ref() == Some(b) => {
            let mut k = lo.clone();
            k.push(0);
            k
        }
        Some(b) => {
            let k = encode_bound(partition, columns, types, b)?;
            if k.is_empty() {
                return Err(ParseError::invalid_definition(
                    "a range partition with upper bound '' holds no values: raise the upper bound",
                ));
            }
            k
        }
        None => vec![],
    };
    if !hi.is_empty() && lo >= hi {
        let show = |b: &Option<Vec<Expr>>| {
            b.as_ref()
                .map(|v| {
                    v.iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        return Err(ParseError::invalid_definition(format!(
            "range partition ({}) <= VALUES < ({}) is empty: the lower bound must be below the upper bound",
            show(lower),
            show(upper)
        )));
    }
    Ok((lo, hi))
}

/// The subspace a `SUBSPACE (a, b) [REGIONS n] [TABLETS t]` clause declares on a table
/// with `schema`; a column it does not have → 42703.
fn subspace_spec(
    clause: &crate::parser::SubspaceClause,
    schema: &Schema,
) -> Result<cairn_hyperspace::SubspaceSpec, ParseError> {
    let (columns, regions, tablets) = clause;
    for c in columns {
        if schema.index_of(c).is_err() {
            return Err(ParseError::invalid_with(
                "42703",
                format!(
                    "column \"{c}\" named in SUBSPACE ({}) does not exist",
                    columns.join(", ")
                ),
            ));
        }
    }
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut spec = cairn_hyperspace::SubspaceSpec::new(&refs);
    if let Some(n) = regions {
        spec = spec.regions(*n);
    }
    if let Some(n) = tablets {
        spec = spec.tablets(*n);
    }
    Ok(spec)
}

/// The `ADD SUBSPACE` and `DROP SUBSPACE` operations of an `ALTER TABLE` on a table with
/// `schema` whose subspaces are named `existing`: the subspaces to add, and the names
/// of those to drop (`DROP SUBSPACE IF EXISTS` of a missing one is left out; without
/// `IF EXISTS` → 42704). Adding one with the name of another → 42710.
pub fn subspace_changes(
    ops: &[AlterColumn],
    schema: &Schema,
    existing: &[String],
) -> Result<(Vec<cairn_hyperspace::SubspaceSpec>, Vec<String>), ParseError> {
    let mut names = existing.to_vec();
    let (mut add, mut drop) = (vec![], vec![]);
    for op in ops {
        match op {
            AlterColumn::AddSubspace { subspace } => {
                let spec = subspace_spec(subspace, schema)?;
                if names.contains(&spec.name) {
                    return Err(ParseError::invalid_with(
                        "42710",
                        format!(
                            "the table already has subspace \"{}\": drop it first or choose \
                             other attributes",
                            spec.name
                        ),
                    ));
                }
                names.push(spec.name.clone());
                add.push(spec);
            }
            AlterColumn::DropSubspace { name, if_exists } => {
                if !names.contains(name) {
                    if *if_exists {
                        continue;
                    }
                    return Err(ParseError::invalid_with(
                        "42704",
                        format!(
                            "subspace \"{name}\" does not exist{}",
                            if names.is_empty() {
                                String::new()
                            } else {
                                format!(" (the table has {})", names.join(", "))
                            }
                        ),
                    ));
                }
                names.retain(|n| n != name);
                drop.push(name.clone());
            }
            _ => {}
        }
    }
    Ok((add, drop))
}

/// Turns `ALTER TABLE` operations into schema changes.
///
/// `ADD` becomes [`AlterOp::AddColumn`] with the column's type, nullability and default;
/// a NOT NULL column needs a DEFAULT (rows written before have to read as something).
/// `IF [NOT] EXISTS` is not applied here (see [`alter_ops_for_schema`]). Range
/// partition operations are left out: [`range_partition_changes`] turns those into
/// bounds.
pub fn alter_ops(ops: &[AlterColumn]) -> Result<Vec<AlterOp>, ParseError> {
    ops.iter()
        .filter(|op| {
            !matches!(
                op,
                AlterColumn::AddRangePartition { .. }
                    | AlterColumn::DropRangePartition { .. }
                    | AlterColumn::AddSubspace { .. }
                    | AlterColumn::DropSubspace { .. }
            )
        })
        .map(|op| match op {
            AlterColumn::Add { column, .. } if column.name == AUTO_INCREMENTING_ID => {
                Err(reserved_name())
            }
            AlterColumn::Rename { to, .. } if to == AUTO_INCREMENTING_ID => Err(reserved_name()),
            AlterColumn::Drop { name, .. } | AlterColumn::Rename { from: name, .. }
                if name == AUTO_INCREMENTING_ID =>
            {
                Err(ParseError::invalid_with(
                    "42703",
                    format!("column \"{name}\" is the hidden key of a table without a primary key; it cannot be dropped or renamed"),
                ))
            }
            AlterColumn::Add { column, .. } => {
                let spec = column_spec(column, false)?;
                if !spec.nullable && spec.default.is_none() {
                    return Err(ParseError::invalid_definition(format!(
                        "a NOT NULL column added to a table with rows needs a DEFAULT: add DEFAULT <value> to column '{}' or drop NOT NULL",
                        spec.name
                    )));
                }
                Ok(AlterOp::AddColumn(spec))
            }
            AlterColumn::Drop { name, .. } => Ok(AlterOp::DropColumn(name.clone())),
            AlterColumn::Rename { from, to } => Ok(AlterOp::RenameColumn {
                from: from.clone(),
                to: to.clone(),
            }),
            AlterColumn::AddRangePartition { .. }
            | AlterColumn::DropRangePartition { .. }
            | AlterColumn::AddSubspace { .. }
            | AlterColumn::DropSubspace { .. } => unreachable!("filtered out above"),
        })
        .collect()
}

/// The `ADD RANGE PARTITION` and `DROP RANGE PARTITION` operations of an `ALTER TABLE`,
/// as `(add, drop)` lists of `[lower, upper)` encoded range keys for a table with
/// this schema and partitioning. A table without range columns → 42P16.
#[allow(clippy::type_complexity)]
pub fn range_partition_changes(
    ops: &[AlterColumn],
    schema: &Schema,
    partition: &PartitionSchema,
) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>), ParseError> {
    let (mut add, mut drop) = (vec![], vec![]);
    for op in ops {
        let (bounds, into) = match op {
            AlterColumn::AddRangePartition { bounds } => (bounds, &mut add),
            AlterColumn::DropRangePartition { bounds } => (bounds, &mut drop),
            _ => continue,
        };
        if partition.range_columns.is_empty() {
            return Err(ParseError::invalid_definition(
                "the table is not range partitioned: only a table created with PARTITION BY RANGE (...) has range partitions to add or drop",
            ));
        }
        let types: Vec<DataType> = partition
            .range_columns
            .iter()
            .map(|c| {
                let i = schema.index_of(c).map_err(common)?;
                Ok(schema.column(i).data_type.clone())
            })
            .collect::<Result<_, ParseError>>()?;
        let (lower, upper) = bounds;
        into.push(encode_bounds(
            partition,
            &partition.range_columns,
            &types,
            lower,
            upper,
        )?);
    }
    Ok((add, drop))
}

/// [`alter_ops`] for a table whose current schema is `schema`: leaves out
/// `ADD COLUMN IF NOT EXISTS` of a column that exists and `DROP COLUMN IF EXISTS` of
/// one that does not (each judged against the schema as the earlier operations
/// leave it).
pub fn alter_ops_for_schema(
    ops: &[AlterColumn],
    schema: &Schema,
) -> Result<Vec<AlterOp>, ParseError> {
    let mut names: Vec<String> = schema.columns().iter().map(|c| c.name.clone()).collect();
    let mut kept = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            AlterColumn::Add {
                column,
                if_not_exists,
            } => {
                if names.contains(&column.name) {
                    if *if_not_exists {
                        continue;
                    }
                } else {
                    names.push(column.name.clone());
                }
            }
            AlterColumn::Drop { name, if_exists } => {
                if !names.contains(name) {
                    if *if_exists {
                        continue;
                    }
                } else {
                    names.retain(|n| n != name);
                }
            }
            AlterColumn::Rename { from, to } => {
                for n in names.iter_mut() {
                    if n == from {
                        *n = to.clone();
                    }
                }
            }
            _ => {}
        }
        kept.push(op.clone());
    }
    alter_ops(&kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{CairnStatement, parse_sql};
    use cairn_common::key;

    fn sql_type(s: &str) -> SqlType {
        let sql = format!("CREATE TABLE t (c {s} PRIMARY KEY)");
        match parse_sql(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .remove(0)
        {
            CairnStatement::CreateTable(c) => c.columns[0].data_type.clone(),
            other => panic!("{other:?}"),
        }
    }

    fn create(sql: &str) -> CreateTable {
        match parse_sql(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .remove(0)
        {
            CairnStatement::CreateTable(c) => c,
            other => panic!("{other:?}"),
        }
    }

    fn def(sql: &str) -> Result<TableDef, ParseError> {
        table_def(&create(sql), None, 4)
    }

    fn expr(s: &str) -> Expr {
        let sql = format!("CREATE TABLE t (c INT PRIMARY KEY DEFAULT {s})");
        create(&sql).columns[0].default.clone().expect("default")
    }

    fn alter(sql: &str) -> Vec<AlterColumn> {
        match parse_sql(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .remove(0)
        {
            CairnStatement::AlterTable { ops, .. } => ops,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn type_mapping_table() {
        use DataType::*;
        let cases: &[(&str, DataType)] = &[
            ("BOOLEAN", Bool),
            ("BOOL", Bool),
            ("TINYINT", Int8),
            ("SMALLINT", Int16),
            ("INT2", Int16),
            ("INT", Int32),
            ("INTEGER", Int32),
            ("INT4", Int32),
            ("BIGINT", Int64),
            ("INT8", Int64),
            ("REAL", Float),
            ("FLOAT4", Float),
            ("FLOAT(24)", Float),
            ("FLOAT(1)", Float),
            ("FLOAT(25)", Double),
            ("FLOAT", Double),
            ("DOUBLE", Double),
            ("DOUBLE PRECISION", Double),
            ("FLOAT8", Double),
            (
                "DECIMAL(10,2)",
                Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            (
                "NUMERIC(5)",
                Decimal {
                    precision: 5,
                    scale: 0,
                },
            ),
            (
                "NUMERIC",
                Decimal {
                    precision: 38,
                    scale: 10,
                },
            ),
            (
                "DEC(38,38)",
                Decimal {
                    precision: 38,
                    scale: 38,
                },
            ),
            ("TEXT", String),
            ("STRING", String),
            ("VARCHAR", String),
            ("CHARACTER VARYING", String),
            ("VARCHAR(20)", Varchar(20)),
            ("CHARACTER VARYING(7)", Varchar(7)),
            ("CHAR(3)", Varchar(3)),
            ("CHARACTER(4)", Varchar(4)),
            ("CHAR", Varchar(1)),
            ("BYTEA", Binary),
            ("BLOB", Binary),
            ("BINARY", Binary),
            ("VARBINARY(16)", Binary),
            ("DATE", Date),
            ("TIMESTAMP", Timestamp),
            ("TIMESTAMP(6)", Timestamp),
            ("TIMESTAMPTZ", Timestamp),
            ("TIMESTAMP WITH TIME ZONE", Timestamp),
            ("TIMESTAMP WITHOUT TIME ZONE", Timestamp),
            ("DATETIME", Timestamp),
        ];
        for (sql, want) in cases {
            let got = column_type(&sql_type(sql)).unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert_eq!(&got, want, "{sql}");
        }
    }

    #[test]
    fn unsupported_types() {
        for sql in ["UUID", "JSON", "INTERVAL", "TIME", "INT[]", "mytype"] {
            let e = column_type(&sql_type(sql)).expect_err(sql);
            assert_eq!(e.sqlstate(), "0A000", "{sql}");
            assert!(e.message().contains("VARCHAR(n)"), "{sql}: {e}");
        }
        for sql in [
            "DECIMAL(39,0)",
            "DECIMAL(5,6)",
            "DECIMAL(0)",
            "FLOAT(54)",
            "TIMESTAMP(9)",
            "VARCHAR(0)",
        ] {
            let e = column_type(&sql_type(sql)).expect_err(sql);
            assert_eq!(e.sqlstate(), "22023", "{sql}");
        }
    }

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

    #[test]
    fn table_def_basic() {
        let d = def(
            "CREATE TABLE t (v TEXT, id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 3, x DOUBLE DEFAULT NULL) WITH (replicas = 5)",
        )
        .expect("def");
        assert_eq!(d.name, "t");
        let s = &d.schema;
        let names: Vec<_> = s.columns().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["v", "id", "n", "x"], "declared order is kept");
        assert_eq!(s.key_indexes(), &[1]);
        assert!(!s.column(1).nullable);
        assert!(s.column(0).nullable);
        assert!(!s.column(2).nullable);
        assert_eq!(s.column(2).default, Some(Value::Int32(3)));
        assert_eq!(s.column(3).default, Some(Value::Null));
        assert_eq!(s.column(1).data_type, DataType::Int64);
        assert_eq!(
            d.partition.hash_levels,
            vec![HashLevel {
                columns: vec!["id".into()],
                num_buckets: 4,
                seed: 0
            }]
        );
        assert!(d.partition.range_columns.is_empty());
        assert!(d.range_bounds.is_empty());
        assert_eq!(d.replicas, Some(5));
        assert!(!d.if_not_exists);
    }

    #[test]
    fn table_def_default_buckets() {
        let ct = create("CREATE TABLE t (a INT, b TEXT, PRIMARY KEY (b, a))");
        let d = table_def(&ct, None, 1).expect("def");
        assert!(d.partition.hash_levels.is_empty());
        let d = table_def(&ct, None, 6).expect("def");
        assert_eq!(d.partition.hash_levels[0].columns, vec!["b", "a"]);
        assert_eq!(d.partition.hash_levels[0].num_buckets, 6);
        assert_eq!(d.schema.key_indexes(), &[1, 0]);
        // Explicit range partitioning only: no default hash level.
        let d =
            def("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a) (PARTITION VALUES < 0)")
                .expect("def");
        assert!(d.partition.hash_levels.is_empty());
        // HASH PARTITIONS n without columns hashes the whole key.
        let d =
            def("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b)) PARTITION BY HASH PARTITIONS 3")
                .expect("def");
        assert_eq!(d.partition.hash_levels[0].columns, vec!["a", "b"]);
    }

    #[test]
    fn table_def_errors() {
        // No primary key: a hidden auto-incrementing key, first, hashed by default.
        let d = def("CREATE TABLE t (a INT, b TEXT)").expect("no pk");
        assert_eq!(d.schema.auto_id_index(), Some(0));
        assert_eq!(d.schema.column(0).name, AUTO_INCREMENTING_ID);
        assert_eq!(d.schema.visible_indexes(), vec![1, 2]);
        assert_eq!(
            d.partition.hash_levels[0].columns,
            vec![AUTO_INCREMENTING_ID.to_string()]
        );
        let d = def("CREATE TABLE t (a INT, b TEXT) PARTITION BY HASH PARTITIONS 3").expect("def");
        assert_eq!(
            d.partition.hash_levels[0].columns,
            vec![AUTO_INCREMENTING_ID.to_string()]
        );
        let e = def("CREATE TABLE t (a INT) PARTITION BY HASH (a) PARTITIONS 3")
            .expect_err("hash on a non-key column");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def("CREATE TABLE t (auto_incrementing_id BIGINT PRIMARY KEY)")
            .expect_err("reserved name");
        assert_eq!(e.sqlstate(), "42939");
        assert!(e.message().contains("reserved"), "{e}");
        let e = def("CREATE TABLE t (a INT) PRIMARY KEY (b)").expect_err("unknown pk");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("'b'"), "{e}");
        let e = def(
            "CREATE TABLE t (a INT, b INT, PRIMARY KEY (a)) PARTITION BY HASH (b) PARTITIONS 2",
        )
        .expect_err("hash on non-key");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("primary key"), "{e}");
        let e = def("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a)) PARTITION BY RANGE (b)")
            .expect_err("range on non-key");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b)) PARTITION BY HASH (a) PARTITIONS 2, HASH (a) PARTITIONS 3")
            .expect_err("same column twice");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def("CREATE TABLE t (a UUID PRIMARY KEY)").expect_err("type");
        assert_eq!(e.sqlstate(), "0A000");
        assert!(e.message().starts_with("column 'a': "), "{e}");
        let e = def("CREATE TABLE t (a INT PRIMARY KEY, b INT DEFAULT 'x')").expect_err("default");
        assert_eq!(e.sqlstate(), "42804");
        assert!(e.message().contains("DEFAULT of column 'b'"), "{e}");
        let e = def("CREATE TABLE t (a INT PRIMARY KEY, b INT NOT NULL DEFAULT NULL)")
            .expect_err("null default");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def("CREATE TABLE t (a INT PRIMARY KEY, b INT, A INT)").expect_err("dup column");
        assert_eq!(e.sqlstate(), "42P16");
        let mut ct = create("CREATE TABLE t (a INT PRIMARY KEY)");
        ct.hash = vec![(vec!["a".into()], 1)];
        let e = table_def(&ct, None, 4).expect_err("1 bucket");
        assert!(
            e.message()
                .contains("PARTITIONS must be followed by a number of buckets ≥ 2")
        );
    }

    #[test]
    fn range_bounds_round_trip() {
        let d = def(
            "CREATE TABLE t (k BIGINT, s TEXT, PRIMARY KEY (s, k)) \
             PARTITION BY HASH (s) PARTITIONS 2, RANGE (k) \
             (PARTITION VALUES < -10, PARTITION -10 <= VALUES < 20, PARTITION VALUE = 25, PARTITION 30 <= VALUES)",
        )
        .expect("def");
        assert_eq!(d.partition.range_columns, vec!["k"]);
        let t = DataType::Int64;
        let dec = |b: &[u8]| key::decode_values(&[&t], b).expect("decode");
        let enc = |v: i64| {
            d.partition
                .encode_range_key(&[Value::Int64(v)])
                .expect("enc")
        };
        assert_eq!(d.range_bounds.len(), 4);
        assert_eq!(d.range_bounds[0].0, Vec::<u8>::new());
        assert_eq!(dec(&d.range_bounds[0].1), vec![Value::Int64(-10)]);
        assert_eq!(dec(&d.range_bounds[1].0), vec![Value::Int64(-10)]);
        assert_eq!(dec(&d.range_bounds[1].1), vec![Value::Int64(20)]);
        // VALUE = 25 holds exactly 25.
        let (lo, hi) = &d.range_bounds[2];
        assert_eq!(dec(lo), vec![Value::Int64(25)]);
        assert!(enc(25) >= *lo && enc(25) < *hi);
        assert!(enc(24) < *lo);
        assert!(enc(26) >= *hi);
        assert_eq!(dec(&d.range_bounds[3].0), vec![Value::Int64(30)]);
        assert!(d.range_bounds[3].1.is_empty());
        // The partitions the master would create: 2 buckets × 4 ranges.
        assert_eq!(
            d.partition
                .create_partitions(&d.range_bounds)
                .expect("partitions")
                .len(),
            8
        );
    }

    #[test]
    fn multi_column_range_bounds_round_trip() {
        let d = def(
            "CREATE TABLE t (a INT, b TEXT, d DATE, PRIMARY KEY (a, b, d)) PARTITION BY RANGE (b, d) \
             (PARTITION ('a', DATE '2024-01-01') <= VALUES < ('m', '2024-06-01'), PARTITION VALUE = ('z', '2025-01-01'))",
        )
        .expect("def");
        let types = [DataType::String, DataType::Date];
        let tr: Vec<&DataType> = types.iter().collect();
        let (lo, hi) = &d.range_bounds[0];
        assert_eq!(
            key::decode_values(&tr, lo).expect("lo"),
            vec![Value::String("a".into()), Value::Date(19723)]
        );
        assert_eq!(
            key::decode_values(&tr, hi).expect("hi"),
            vec![Value::String("m".into()), Value::Date(19875)]
        );
        let (lo, hi) = &d.range_bounds[1];
        let exact = d
            .partition
            .encode_range_key(&[Value::String("z".into()), Value::Date(20089)])
            .expect("enc");
        assert_eq!(*lo, exact);
        assert!(exact < *hi);
        let next = d
            .partition
            .encode_range_key(&[Value::String("z".into()), Value::Date(20090)])
            .expect("enc");
        assert!(next >= *hi);
    }

    #[test]
    fn range_bound_errors() {
        let base = "CREATE TABLE t (a INT, b TEXT, PRIMARY KEY (a, b)) PARTITION BY RANGE (a) ";
        let e = def(&format!("{base}(PARTITION (1, 'x') <= VALUES)")).expect_err("arity");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("one value per range column"), "{e}");
        let e = def(&format!("{base}(PARTITION 'x' <= VALUES)")).expect_err("type");
        assert_eq!(e.sqlstate(), "42804");
        let e = def(&format!("{base}(PARTITION 10 <= VALUES < 5)")).expect_err("empty");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def(&format!(
            "{base}(PARTITION VALUES < 10, PARTITION 5 <= VALUES < 20)"
        ))
        .expect_err("overlap");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("overlap"), "{e}");
        let e = def(&format!("{base}(PARTITION NULL <= VALUES)")).expect_err("null");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def(&format!("{base}(PARTITION 3000000000 <= VALUES)")).expect_err("range");
        assert_eq!(e.sqlstate(), "22023");
        let e = def(
            "CREATE TABLE t (b TEXT PRIMARY KEY) PARTITION BY RANGE (b) (PARTITION VALUES < '')",
        )
        .expect_err("empty upper");
        assert_eq!(e.sqlstate(), "42P16");
    }

    #[test]
    fn ctas_columns() {
        let ct = create("CREATE TABLE t2 PRIMARY KEY (id) AS SELECT id, v FROM t1");
        let cols = vec![
            ("id".to_string(), DataType::Int64, true),
            ("v".to_string(), DataType::String, true),
        ];
        let d = table_def(&ct, Some(&cols), 3).expect("def");
        assert_eq!(d.schema.num_columns(), 2);
        assert!(!d.schema.column(0).nullable, "key columns become NOT NULL");
        assert!(d.schema.column(1).nullable);
        assert_eq!(d.schema.column(1).data_type, DataType::String);
        assert_eq!(d.partition.hash_levels[0].num_buckets, 3);
        // No PRIMARY KEY clause: the hidden key, then the query's columns.
        let ct = create("CREATE TABLE t2 AS SELECT id, v FROM t1");
        let d = table_def(&ct, Some(&cols), 3).expect("def");
        assert_eq!(d.schema.auto_id_index(), Some(0));
        assert_eq!(d.schema.visible_indexes(), vec![1, 2]);
        assert!(d.schema.column(1).nullable, "no longer a key column");
        // Key not among the query's columns.
        let ct = create("CREATE TABLE t2 PRIMARY KEY (nope) AS SELECT id FROM t1");
        assert_eq!(
            table_def(&ct, Some(&cols), 3).expect_err("pk").sqlstate(),
            "42P16"
        );
        // Declared columns win but must match the query's count.
        let ct =
            create("CREATE TABLE t2 (id INT PRIMARY KEY, v VARCHAR(5)) AS SELECT id, v FROM t1");
        let d = table_def(&ct, Some(&cols), 3).expect("def");
        assert_eq!(d.schema.column(1).data_type, DataType::Varchar(5));
        let ct = create("CREATE TABLE t2 (id INT PRIMARY KEY) AS SELECT id, v FROM t1");
        assert_eq!(
            table_def(&ct, Some(&cols), 3)
                .expect_err("count")
                .sqlstate(),
            "42P16"
        );
        // Columns neither declared nor given.
        let ct = create("CREATE TABLE t2 PRIMARY KEY (id) AS SELECT id FROM t1");
        assert_eq!(
            table_def(&ct, None, 3).expect_err("cols").sqlstate(),
            "42P16"
        );
    }

    #[test]
    fn alter_ops_mapping() {
        let ops = alter(
            "ALTER TABLE t ADD COLUMN n INT NOT NULL DEFAULT 7, ADD s VARCHAR(4), DROP COLUMN x, RENAME COLUMN a TO b",
        );
        let got = alter_ops(&ops).expect("ops");
        assert_eq!(
            got,
            vec![
                AlterOp::AddColumn(ColumnSpec {
                    name: "n".into(),
                    data_type: DataType::Int32,
                    nullable: false,
                    default: Some(Value::Int32(7)),
                }),
                AlterOp::AddColumn(ColumnSpec {
                    name: "s".into(),
                    data_type: DataType::Varchar(4),
                    nullable: true,
                    default: None,
                }),
                AlterOp::DropColumn("x".into()),
                AlterOp::RenameColumn {
                    from: "a".into(),
                    to: "b".into()
                },
            ]
        );
        let e = alter_ops(&alter("ALTER TABLE t ADD n INT NOT NULL")).expect_err("default");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(
            e.message()
                .contains("a NOT NULL column added to a table with rows needs a DEFAULT")
        );
        let e = alter_ops(&alter("ALTER TABLE t ADD n INT DEFAULT 'x'")).expect_err("type");
        assert_eq!(e.sqlstate(), "42804");
        let e = alter_ops(&alter("ALTER TABLE t ADD n JSON")).expect_err("type");
        assert_eq!(e.sqlstate(), "0A000");
        // Range partition operations are not column changes; they become bounds.
        let ops = alter(
            "ALTER TABLE t ADD RANGE PARTITION 10 <= VALUES < 20, DROP RANGE PARTITION VALUE = 3",
        );
        assert!(alter_ops(&ops).expect("no column ops").is_empty());
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String).nullable(),
            ],
            &["k"],
        )
        .expect("schema");
        let ranged = PartitionSchema {
            hash_levels: vec![],
            range_columns: vec!["k".into()],
        };
        let key = |v: i64| ranged.encode_range_key(&[Value::Int64(v)]).expect("key");
        let (add, drop) = range_partition_changes(&ops, &schema, &ranged).expect("bounds");
        assert_eq!(add, vec![(key(10), key(20))]);
        let mut just_above_3 = key(3);
        just_above_3.push(0);
        assert_eq!(drop, vec![(key(3), just_above_3)]);
        let e = range_partition_changes(
            &alter("ALTER TABLE t ADD RANGE PARTITION 'x' <= VALUES < 20"),
            &schema,
            &ranged,
        )
        .expect_err("type");
        assert_eq!(e.sqlstate(), "42804", "{}", e.message());
        let e = range_partition_changes(&ops, &schema, &PartitionSchema::default())
            .expect_err("not ranged");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("not range partitioned"));
    }

    #[test]
    fn alter_ops_if_exists() {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String).nullable(),
            ],
            &["k"],
        )
        .expect("schema");
        let ops = alter(
            "ALTER TABLE t ADD IF NOT EXISTS v TEXT, ADD IF NOT EXISTS w TEXT, DROP IF EXISTS zz, DROP IF EXISTS v, ADD IF NOT EXISTS v INT",
        );
        let got = alter_ops_for_schema(&ops, &schema).expect("ops");
        assert_eq!(
            got,
            vec![
                AlterOp::AddColumn(ColumnSpec::new("w", DataType::String).nullable()),
                AlterOp::DropColumn("v".into()),
                AlterOp::AddColumn(ColumnSpec::new("v", DataType::Int32).nullable()),
            ]
        );
        // Without IF [NOT] EXISTS the operations stay (and the master reports them).
        let ops = alter("ALTER TABLE t ADD v TEXT, DROP zz");
        assert_eq!(alter_ops_for_schema(&ops, &schema).expect("ops").len(), 2);
    }
}
