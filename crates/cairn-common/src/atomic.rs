//! Atomic operations on one cell (HyperDex §2.1, "Data Model and API"): numeric
//! add, subtract, multiply, divide, modulo, bitwise and/or/xor, min and max, and string
//! append and prepend.
//!
//! A write names the cells to change this way ([`CellMutation`]) instead of giving their
//! new values. The row's leader evaluates them under the row lock against the row as it
//! is ([`AtomicOp::apply`]) and replicates the result as a plain update, so concurrent
//! increments of one counter never lose each other and followers never evaluate
//! anything.
//!
//! Arithmetic follows SQL: a NULL cell stays NULL (as `c + 1` is NULL in PostgreSQL), an
//! integer result outside the column's type is an error rather than a wrap, and so is
//! a division or modulo by zero. Integer division truncates toward zero, and the
//! modulo takes the sign of the dividend, as in PostgreSQL.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::schema::Schema;
use crate::types::{DataType, Value};

/// Part of the message of a result outside its column's type (SQLSTATE 22003).
pub const OUT_OF_RANGE: &str = "is out of range for";

/// Part of the message of a division or modulo by zero (SQLSTATE 22012).
pub const DIVISION_BY_ZERO: &str = "division by zero";

/// What an atomic operation does to a cell, with its operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AtomicOp {
    /// `cell + operand` (numbers).
    Add,
    /// `cell - operand` (numbers).
    Sub,
    /// `cell * operand` (numbers).
    Mul,
    /// `cell / operand` (numbers; integers truncate toward zero).
    Div,
    /// `cell % operand` (integers; the sign of the cell).
    Mod,
    /// `cell & operand` (integers).
    And,
    /// `cell | operand` (integers).
    Or,
    /// `cell ^ operand` (integers).
    Xor,
    /// The smaller of the cell and the operand (any ordered type).
    Min,
    /// The larger of the cell and the operand (any ordered type).
    Max,
    /// The cell followed by the operand (strings and binary).
    Append,
    /// The operand followed by the cell (strings and binary).
    Prepend,
}

/// One cell a write changes with an atomic operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellMutation {
    /// The column (not a key column).
    pub column: String,
    /// The operation.
    pub op: AtomicOp,
    /// Its operand, of the column's type.
    pub operand: Value,
}

impl CellMutation {
    /// A mutation of `column` by `op` with `operand`.
    pub fn new(column: impl Into<String>, op: AtomicOp, operand: Value) -> CellMutation {
        CellMutation {
            column: column.into(),
            op,
            operand,
        }
    }

    /// Checks the mutation as part of a write of `schema`'s rows: the write must be an
    /// update (`update`) that does not also give the column a value (`given`, one
    /// slot per column), the column must exist outside the primary key and have a
    /// type the operation applies to, and the operand must fit it. Returns the
    /// column's position; `Err` says what was wrong.
    pub fn check(
        &self,
        schema: &Schema,
        update: bool,
        given: &[Option<Value>],
    ) -> Result<usize, String> {
        let i = schema.index_of(&self.column).map_err(|e| e.to_string())?;
        let c = schema.column(i);
        let what = format!("atomic {} of column '{}'", self.op.name(), c.name);
        if !update {
            return Err(format!(
                "{what} changes an existing row: send it with an UPDATE"
            ));
        }
        if schema.is_key_column(i) {
            return Err(format!("{what}: the column is part of the primary key"));
        }
        if given.get(i).is_some_and(|v| v.is_some()) {
            return Err(format!(
                "{what}: the column is also given a value; give one"
            ));
        }
        self.op.check_type(&c.data_type)?;
        if self.operand.is_null() {
            return Err(format!("{what} needs an operand, not NULL"));
        }
        schema
            .validate_cell(c, &self.operand)
            .map_err(|e| format!("{what}: {e}"))?;
        Ok(i)
    }
}

impl AtomicOp {
    /// The operation's name, as messages show it.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "add",
            AtomicOp::Sub => "sub",
            AtomicOp::Mul => "mul",
            AtomicOp::Div => "div",
            AtomicOp::Mod => "mod",
            AtomicOp::And => "and",
            AtomicOp::Or => "or",
            AtomicOp::Xor => "xor",
            AtomicOp::Min => "min",
            AtomicOp::Max => "max",
            AtomicOp::Append => "append",
            AtomicOp::Prepend => "prepend",
        }
    }

    /// Whether the operation applies to cells of type `t`. `Err` says why not.
    pub fn check_type(self, t: &DataType) -> Result<(), String> {
        use DataType::*;
        let integer = matches!(t, Int8 | Int16 | Int32 | Int64);
        let number = integer || matches!(t, Float | Double | Decimal { .. });
        let ok = match self {
            AtomicOp::Add | AtomicOp::Sub => number,
            // A DECIMAL product or quotient needs rescaling the column's type lacks.
            AtomicOp::Mul | AtomicOp::Div => number && !matches!(t, Decimal { .. }),
            AtomicOp::Mod | AtomicOp::And | AtomicOp::Or | AtomicOp::Xor => integer,
            AtomicOp::Min | AtomicOp::Max => !matches!(t, Bool),
            AtomicOp::Append | AtomicOp::Prepend => matches!(t, String | Varchar(_) | Binary),
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "atomic {} does not apply to a {t:?} column",
                self.name()
            ))
        }
    }

    /// The cell's new value: `op(current, operand)`. `current` and `operand` must be of
    /// one type (a NULL `current` gives NULL; a NULL operand is refused). `Err` says
    /// what was wrong: an operand of another type, an integer overflow, a division by
    /// zero, an operation the type does not have.
    pub fn apply(self, current: &Value, operand: &Value) -> Result<Value, String> {
        use Value::*;
        if operand.is_null() {
            return Err(format!("atomic {} needs an operand, not NULL", self.name()));
        }
        if current.is_null() {
            return Ok(Null);
        }
        let mismatch = || {
            format!(
                "atomic {} of {operand:?} on a cell holding {current:?}: the operand must have the column's type",
                self.name()
            )
        };
        match self {
            AtomicOp::Min | AtomicOp::Max => {
                let order = current.partial_cmp_same(operand).ok_or_else(mismatch)?;
                let current_wins = match self {
                    AtomicOp::Min => order != Ordering::Greater,
                    _ => order != Ordering::Less,
                };
                return Ok(if current_wins {
                    current.clone()
                } else {
                    operand.clone()
                });
            }
            AtomicOp::Append | AtomicOp::Prepend => {
                let first_current = self == AtomicOp::Append;
                return match (current, operand) {
                    (String(a), String(b)) => Ok(String(if first_current {
                        format!("{a}{b}")
                    } else {
                        format!("{b}{a}")
                    })),
                    (Binary(a), Binary(b)) => {
                        let (x, y) = if first_current { (a, b) } else { (b, a) };
                        Ok(Binary([x.as_slice(), y.as_slice()].concat()))
                    }
                    _ => Err(mismatch()),
                };
            }
            _ => {}
        }
        macro_rules! int {
            ($variant:ident, $a:expr, $b:expr) => {
                self.integer($a as i128, $b as i128)?
                    .try_into()
                    .map($variant)
                    .map_err(|_| self.out_of_range(stringify!($variant)))
            };
        }
        match (current, operand) {
            (Int8(a), Int8(b)) => int!(Int8, *a, *b),
            (Int16(a), Int16(b)) => int!(Int16, *a, *b),
            (Int32(a), Int32(b)) => int!(Int32, *a, *b),
            (Int64(a), Int64(b)) => int!(Int64, *a, *b),
            (Decimal(a), Decimal(b)) => match self {
                // Both are unscaled at the column's scale: sums keep it; products and
                // quotients would need rescaling, which the cell's type does not give.
                AtomicOp::Add | AtomicOp::Sub => a
                    .checked_add(if self == AtomicOp::Add { *b } else { -*b })
                    .map(Decimal)
                    .ok_or_else(|| self.out_of_range("DECIMAL")),
                _ => Err(format!(
                    "atomic {} does not apply to a DECIMAL column (add and sub do)",
                    self.name()
                )),
            },
            (Float(a), Float(b)) => self
                .float(f64::from(*a), f64::from(*b))
                .map(|v| Float(v as f32)),
            (Double(a), Double(b)) => self.float(*a, *b).map(Double),
            _ => Err(mismatch()),
        }
    }

    /// An integer operation, computed wide (`i128` holds any `i64` result but a
    /// product's, which is checked).
    fn integer(self, a: i128, b: i128) -> Result<i128, String> {
        Ok(match self {
            AtomicOp::Add => a + b,
            AtomicOp::Sub => a - b,
            AtomicOp::Mul => a
                .checked_mul(b)
                .ok_or_else(|| self.out_of_range("integer"))?,
            AtomicOp::Div | AtomicOp::Mod if b == 0 => {
                return Err(format!("atomic {}: {DIVISION_BY_ZERO}", self.name()));
            }
            AtomicOp::Div => a / b,
            AtomicOp::Mod => a % b,
            AtomicOp::And => a & b,
            AtomicOp::Or => a | b,
            AtomicOp::Xor => a ^ b,
            _ => return Err(format!("atomic {} does not apply to integers", self.name())),
        })
    }

    /// A floating-point operation (IEEE: division by zero is an error, as in SQL).
    fn float(self, a: f64, b: f64) -> Result<f64, String> {
        Ok(match self {
            AtomicOp::Add => a + b,
            AtomicOp::Sub => a - b,
            AtomicOp::Mul => a * b,
            AtomicOp::Div if b == 0.0 => {
                return Err(format!("atomic {}: {DIVISION_BY_ZERO}", self.name()));
            }
            AtomicOp::Div => a / b,
            _ => {
                return Err(format!(
                    "atomic {} does not apply to floating-point numbers",
                    self.name()
                ));
            }
        })
    }

    fn out_of_range(self, what: &str) -> String {
        format!(
            "atomic {}: the result is out of range for {what}",
            self.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn arithmetic_follows_sql() {
        use AtomicOp::*;
        use Value::*;
        assert_eq!(Add.apply(&Int32(5), &Int32(3)), Ok(Int32(8)));
        assert_eq!(Sub.apply(&Int64(5), &Int64(7)), Ok(Int64(-2)));
        assert_eq!(Mul.apply(&Int16(-4), &Int16(6)), Ok(Int16(-24)));
        assert_eq!(Div.apply(&Int32(-7), &Int32(2)), Ok(Int32(-3)));
        assert_eq!(Mod.apply(&Int32(-7), &Int32(2)), Ok(Int32(-1)));
        assert_eq!(And.apply(&Int8(6), &Int8(3)), Ok(Int8(2)));
        assert_eq!(Or.apply(&Int8(6), &Int8(3)), Ok(Int8(7)));
        assert_eq!(Xor.apply(&Int8(6), &Int8(3)), Ok(Int8(5)));
        assert_eq!(Max.apply(&Double(1.5), &Double(2.0)), Ok(Double(2.0)));
        assert_eq!(
            Min.apply(&String("b".into()), &String("a".into())),
            Ok(String("a".into()))
        );
        assert_eq!(Add.apply(&Decimal(150), &Decimal(25)), Ok(Decimal(175)));
        assert_eq!(
            Append.apply(&String("ab".into()), &String("c".into())),
            Ok(String("abc".into()))
        );
        assert_eq!(
            Prepend.apply(&Binary(vec![2]), &Binary(vec![1])),
            Ok(Binary(vec![1, 2]))
        );
        // NULL stays NULL, as `c + 1` does in SQL.
        assert_eq!(Add.apply(&Null, &Int32(1)), Ok(Null));
    }

    #[test]
    fn what_cannot_be_computed_is_an_error() {
        use AtomicOp::*;
        use Value::*;
        let err = |r: Result<Value, std::string::String>, want: &str| {
            let e = r.expect_err(want);
            assert!(e.contains(want), "{e}");
        };
        err(Add.apply(&Int32(i32::MAX), &Int32(1)), "out of range");
        err(Mul.apply(&Int64(i64::MAX), &Int64(2)), "out of range");
        err(Sub.apply(&Int8(i8::MIN), &Int8(1)), "out of range");
        err(Div.apply(&Int64(1), &Int64(0)), "division by zero");
        err(Mod.apply(&Int64(1), &Int64(0)), "division by zero");
        err(Div.apply(&Double(1.0), &Double(0.0)), "division by zero");
        err(Div.apply(&Int64(i64::MIN), &Int64(-1)), "out of range");
        err(Add.apply(&Int32(1), &Int64(1)), "the column's type");
        err(Add.apply(&Int32(1), &Null), "not NULL");
        err(Mod.apply(&Double(1.0), &Double(2.0)), "floating-point");
        err(Mul.apply(&Decimal(1), &Decimal(2)), "DECIMAL");
        err(
            Append.apply(&String("a".into()), &Binary(vec![])),
            "the column's type",
        );
        assert!(Append.check_type(&DataType::Int32).is_err());
        assert!(Xor.check_type(&DataType::Double).is_err());
        assert!(Max.check_type(&DataType::Date).is_ok());
        assert!(
            Add.check_type(&DataType::Decimal {
                precision: 10,
                scale: 2
            })
            .is_ok()
        );
    }

    proptest! {
        /// Integer results match exact arithmetic whenever they fit the type, and are
        /// refused exactly when they do not.
        #[test]
        fn integer_results_are_exact_or_refused(a in any::<i32>(), b in any::<i32>(), op in 0..8usize) {
            let op = [AtomicOp::Add, AtomicOp::Sub, AtomicOp::Mul, AtomicOp::Div,
                AtomicOp::Mod, AtomicOp::And, AtomicOp::Or, AtomicOp::Xor][op];
            let (x, y) = (i64::from(a), i64::from(b));
            let exact = match op {
                AtomicOp::Add => Some(x + y),
                AtomicOp::Sub => Some(x - y),
                AtomicOp::Mul => Some(x * y),
                AtomicOp::Div => (y != 0).then(|| x / y),
                AtomicOp::Mod => (y != 0).then(|| x % y),
                AtomicOp::And => Some(x & y),
                AtomicOp::Or => Some(x | y),
                _ => Some(x ^ y),
            };
            let got = op.apply(&Value::Int32(a), &Value::Int32(b));
            match exact.and_then(|v| i32::try_from(v).ok()) {
                Some(v) => prop_assert_eq!(got, Ok(Value::Int32(v))),
                None => prop_assert!(got.is_err()),
            }
        }
    }
}
