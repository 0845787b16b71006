//! Attribute → coordinate mapping (HyperDex §2.2).
//!
//! Every attribute of a subspace is one axis of a hyperspace, and every value a position
//! on that axis: a [`Coordinate`], a `u64`. Two kinds of axis exist:
//!
//! - **Hashed** ([`AxisKind::Hashed`]) for strings and binary values. The coordinate is a
//!   hash of the bytes, so values spread evenly over the axis whatever their
//!   distribution, but only equality (and `IN`) can be located: a range of strings covers
//!   the whole axis.
//! - **Ordered** ([`AxisKind::Ordered`]) for booleans, integers, floats, decimals, dates
//!   and timestamps. The mapping preserves order (`a ≤ b ⇒ c(a) ≤ c(b)`), so a range
//!   predicate covers a contiguous stretch of the axis (HyperDex §2.3: "objects' relative
//!   orders for the attribute must be preserved when mapped onto the hyperspace axis").
//!   The value is converted to an `f64` (exactly for everything up to 2^53; rounding to
//!   nearest, which is monotone, beyond) and the float's bits are flipped into the
//!   IEEE-754 total order. Equal values get equal coordinates; distinct values far apart
//!   stay apart, and the bits grow with the value's logarithm, which keeps default grids
//!   (before any data was sampled) from crowding every small number into one interval.
//!
//! NULL sits at coordinate [`NULL_COORDINATE`] (0) on every axis; no non-null value maps
//! there. A region grid therefore always keeps NULLs in its first interval, and `IS NULL`
//! is a point query.

use cairn_common::{DataType, Value};

use crate::error::{HyperspaceError, Result};

/// A position on one axis of a hyperspace.
pub type Coordinate = u64;

/// The coordinate of NULL on every axis. Non-null values map to `1..=u64::MAX`.
pub const NULL_COORDINATE: Coordinate = 0;

/// How an axis maps values onto coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AxisKind {
    /// A hash of the value: even spread, equality pruning only.
    Hashed,
    /// An order-preserving map: equality and range pruning.
    Ordered,
}

impl AxisKind {
    /// The kind of axis a column of type `t` gets.
    pub fn for_type(t: &DataType) -> AxisKind {
        match t {
            DataType::String | DataType::Varchar(_) | DataType::Binary => AxisKind::Hashed,
            DataType::Bool
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float
            | DataType::Double
            | DataType::Decimal { .. }
            | DataType::Date
            | DataType::Timestamp => AxisKind::Ordered,
        }
    }
}

/// One axis of a subspace: an attribute (column) and how its values become coordinates.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Axis {
    /// The column's name.
    pub column: String,
    /// The column's type.
    pub data_type: DataType,
    /// Hashed or ordered, decided by the type.
    pub kind: AxisKind,
}

impl Axis {
    /// The axis for column `column` of type `data_type`.
    pub fn new(column: impl Into<String>, data_type: DataType) -> Axis {
        let kind = AxisKind::for_type(&data_type);
        Axis {
            column: column.into(),
            data_type,
            kind,
        }
    }

    /// The coordinate of `v` on this axis. Fails when `v` is not of the axis's type.
    pub fn coordinate(&self, v: &Value) -> Result<Coordinate> {
        if !v.fits_type(&self.data_type) {
            return Err(HyperspaceError::WrongType {
                column: self.column.clone(),
                expected: self.data_type.to_string(),
                got: v.type_name(),
                hint: "cast the value to the column's type",
            });
        }
        Ok(match v {
            Value::Null => NULL_COORDINATE,
            Value::String(s) => hashed(s.as_bytes()),
            Value::Binary(b) => hashed(b),
            Value::Bool(b) => ordered(if *b { 1.0 } else { 0.0 }),
            Value::Int8(x) => ordered(f64::from(*x)),
            Value::Int16(x) => ordered(f64::from(*x)),
            Value::Int32(x) => ordered(f64::from(*x)),
            Value::Date(x) => ordered(f64::from(*x)),
            Value::Int64(x) | Value::Timestamp(x) => ordered(*x as f64),
            Value::Float(x) => ordered(f64::from(*x)),
            Value::Double(x) => ordered(*x),
            Value::Decimal(unscaled) => {
                let scale = match self.data_type {
                    DataType::Decimal { scale, .. } => scale,
                    _ => 0,
                };
                // Dividing by a positive constant rounds monotonically, so the order of
                // the unscaled integers is kept; the division only puts the value at
                // its real magnitude for default grids.
                ordered(*unscaled as f64 / 10f64.powi(i32::from(scale)))
            }
        })
    }
}

/// The hashed coordinate of some bytes (never [`NULL_COORDINATE`]).
fn hashed(bytes: &[u8]) -> Coordinate {
    xxhash_rust::xxh64::xxh64(bytes, 0x6879_7065_7264_6578).max(1)
}

/// The order-preserving coordinate of a float: its bits in IEEE-754 total order (the
/// order `f64::total_cmp` and Cairn's key encoding use), moved off
/// [`NULL_COORDINATE`]. Only a negative NaN with every payload bit set would map to 0,
/// and it shares 1 with its neighbour instead.
pub fn ordered(x: f64) -> Coordinate {
    let bits = x.to_bits();
    let total = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    total.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn axis(t: DataType) -> Axis {
        Axis::new("a", t)
    }

    fn monotone(t: DataType, a: Value, b: Value) {
        let ax = axis(t);
        let (ca, cb) = (ax.coordinate(&a).unwrap(), ax.coordinate(&b).unwrap());
        match a.partial_cmp_same(&b).unwrap() {
            Ordering::Less => assert!(ca <= cb, "{a:?} < {b:?} but {ca} > {cb}"),
            Ordering::Equal => assert_eq!(ca, cb),
            Ordering::Greater => assert!(ca >= cb, "{a:?} > {b:?} but {ca} < {cb}"),
        }
        assert_ne!(ca, NULL_COORDINATE);
        assert_ne!(cb, NULL_COORDINATE);
    }

    proptest! {
        #[test]
        fn int64_order_is_kept(a: i64, b: i64) {
            monotone(DataType::Int64, Value::Int64(a), Value::Int64(b));
        }

        #[test]
        fn int32_order_is_strict(a: i32, b: i32) {
            let ax = axis(DataType::Int32);
            let (ca, cb) = (
                ax.coordinate(&Value::Int32(a)).unwrap(),
                ax.coordinate(&Value::Int32(b)).unwrap(),
            );
            prop_assert_eq!(a.cmp(&b), ca.cmp(&cb));
        }

        #[test]
        fn double_order_is_total_order(a: f64, b: f64) {
            monotone(DataType::Double, Value::Double(a), Value::Double(b));
        }

        #[test]
        fn float_order_is_kept(a: f32, b: f32) {
            monotone(DataType::Float, Value::Float(a), Value::Float(b));
        }

        #[test]
        fn decimal_order_is_kept(a: i128, b: i128, scale in -4i8..20) {
            let t = DataType::Decimal { precision: 38, scale };
            monotone(t, Value::Decimal(a), Value::Decimal(b));
        }

        #[test]
        fn timestamp_and_date_order_is_kept(a: i64, b: i64, c: i32, d: i32) {
            monotone(DataType::Timestamp, Value::Timestamp(a), Value::Timestamp(b));
            monotone(DataType::Date, Value::Date(c), Value::Date(d));
        }

        #[test]
        fn strings_hash_equal_values_equally(a in ".{0,12}", b in ".{0,12}") {
            let ax = axis(DataType::String);
            let (ca, cb) = (
                ax.coordinate(&Value::String(a.clone())).unwrap(),
                ax.coordinate(&Value::String(b.clone())).unwrap(),
            );
            if a == b {
                prop_assert_eq!(ca, cb);
            }
            prop_assert_ne!(ca, NULL_COORDINATE);
        }
    }

    #[test]
    fn kinds_follow_types() {
        assert_eq!(AxisKind::for_type(&DataType::Varchar(8)), AxisKind::Hashed);
        assert_eq!(AxisKind::for_type(&DataType::Binary), AxisKind::Hashed);
        assert_eq!(AxisKind::for_type(&DataType::Date), AxisKind::Ordered);
        assert_eq!(AxisKind::for_type(&DataType::Bool), AxisKind::Ordered);
    }

    #[test]
    fn null_is_zero_and_wrong_types_are_refused() {
        let ax = axis(DataType::Int32);
        assert_eq!(ax.coordinate(&Value::Null).unwrap(), NULL_COORDINATE);
        let e = ax.coordinate(&Value::String("x".into())).unwrap_err();
        assert!(e.to_string().contains("attribute 'a'"), "{e}");
        assert_eq!(ordered(f64::from_bits(u64::MAX)), 1);
    }

    #[test]
    fn booleans_order_false_before_true() {
        let ax = axis(DataType::Bool);
        assert!(
            ax.coordinate(&Value::Bool(false)).unwrap()
                < ax.coordinate(&Value::Bool(true)).unwrap()
        );
    }
}
