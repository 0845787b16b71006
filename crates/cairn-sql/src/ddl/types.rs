//! SQL column types onto Cairn's [`DataType`]s.

use cairn_common::DataType;
use cairn_common::types::MAX_DECIMAL_PRECISION;
use datafusion::sql::sqlparser::ast::{CharacterLength, DataType as SqlType, ExactNumberInfo};

use crate::parser::ParseError;

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

#[cfg(test)]
mod tests {
    use super::super::tests::sql_type;
    use super::*;

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
}
