//! Column predicates and their conjunctions.
//!
//! The predicate language a tablet can evaluate itself (Kudu's `ColumnPredicate`):
//! equality, ranges with inclusive/exclusive bounds, IN-lists, IS NULL, IS NOT NULL and
//! the predicate that matches nothing. A scan's filter is a conjunction (`&[ColumnPredicate]`).
//!
//! Besides evaluation (on an Arrow array, vectorised, or on one [`Value`]), predicates
//! support the two tests storage needs: [`ColumnPredicate::could_match_range`] for min/max
//! skipping, and [`ColumnPredicate::implies`] / [`conjunction_implies`] for the
//! predicate-based data skipping of HRDBMS §III (a block known to match nothing for `P`
//! matches nothing for any `Q` that implies `P`).

use std::cmp::Ordering;
use std::fmt;

use arrow::array::{Array, BooleanArray, Datum, Scalar};
use arrow::compute::kernels::{boolean, cmp};

use crate::error::{CommonError, Result};
use crate::schema::Schema;
use crate::types::{DataType, Value, array_from_values};

/// What a predicate tests.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum PredicateOp {
    /// `col = v`.
    Equality(Value),
    /// `lower <(=) col <(=) upper`; a missing bound is unbounded.
    Range {
        /// Lower bound and whether it is inclusive.
        lower: Option<(Value, bool)>,
        /// Upper bound and whether it is inclusive.
        upper: Option<(Value, bool)>,
    },
    /// `col IN (v1, v2, …)`.
    InList(Vec<Value>),
    /// `col IS NULL`.
    IsNull,
    /// `col IS NOT NULL`.
    IsNotNull,
    /// Matches no row (the result of contradictory predicates).
    None,
}

/// A predicate on one column, named by column name.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ColumnPredicate {
    /// The column's name.
    pub column: String,
    /// The test.
    pub op: PredicateOp,
}

impl fmt::Display for ColumnPredicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.column;
        match &self.op {
            PredicateOp::Equality(v) => write!(f, "{c} = {v}"),
            PredicateOp::Range { lower, upper } => {
                let mut parts = vec![];
                if let Some((v, inc)) = lower {
                    parts.push(format!("{c} {} {v}", if *inc { ">=" } else { ">" }));
                }
                if let Some((v, inc)) = upper {
                    parts.push(format!("{c} {} {v}", if *inc { "<=" } else { "<" }));
                }
                write!(f, "{}", parts.join(" AND "))
            }
            PredicateOp::InList(vs) => {
                write!(
                    f,
                    "{c} IN ({})",
                    vs.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            PredicateOp::IsNull => write!(f, "{c} IS NULL"),
            PredicateOp::IsNotNull => write!(f, "{c} IS NOT NULL"),
            PredicateOp::None => write!(f, "FALSE"),
        }
    }
}

/// IN lists up to this long are evaluated with one comparison pass per value; longer
/// ones by binary search in the sorted list.
const IN_LIST_SCAN_MAX: usize = 16;

fn cmpv(a: &Value, b: &Value) -> Ordering {
    a.partial_cmp_same(b).unwrap_or(Ordering::Equal)
}

impl ColumnPredicate {
    fn new(column: impl Into<String>, op: PredicateOp) -> Self {
        ColumnPredicate {
            column: column.into(),
            op,
        }
    }
    /// `col = v`.
    pub fn eq(column: impl Into<String>, v: Value) -> Self {
        Self::new(column, PredicateOp::Equality(v))
    }
    /// `col < v`.
    pub fn lt(column: impl Into<String>, v: Value) -> Self {
        Self::new(
            column,
            PredicateOp::Range {
                lower: None,
                upper: Some((v, false)),
            },
        )
    }
    /// `col <= v`.
    pub fn le(column: impl Into<String>, v: Value) -> Self {
        Self::new(
            column,
            PredicateOp::Range {
                lower: None,
                upper: Some((v, true)),
            },
        )
    }
    /// `col > v`.
    pub fn gt(column: impl Into<String>, v: Value) -> Self {
        Self::new(
            column,
            PredicateOp::Range {
                lower: Some((v, false)),
                upper: None,
            },
        )
    }
    /// `col >= v`.
    pub fn ge(column: impl Into<String>, v: Value) -> Self {
        Self::new(
            column,
            PredicateOp::Range {
                lower: Some((v, true)),
                upper: None,
            },
        )
    }
    /// `lo <= col < hi`.
    pub fn range(column: impl Into<String>, lo: Value, hi: Value) -> Self {
        Self::new(
            column,
            PredicateOp::Range {
                lower: Some((lo, true)),
                upper: Some((hi, false)),
            },
        )
    }
    /// `col IN (…)`.
    pub fn in_list(column: impl Into<String>, vs: Vec<Value>) -> Self {
        Self::new(column, PredicateOp::InList(vs))
    }
    /// `col IS NULL`.
    pub fn is_null(column: impl Into<String>) -> Self {
        Self::new(column, PredicateOp::IsNull)
    }
    /// `col IS NOT NULL`.
    pub fn is_not_null(column: impl Into<String>) -> Self {
        Self::new(column, PredicateOp::IsNotNull)
    }

    /// Checks the column exists and the constants have its type. Returns the column's
    /// position in the schema.
    pub fn validate(&self, schema: &Schema) -> Result<usize> {
        let i = schema.index_of(&self.column)?;
        let t = &schema.column(i).data_type;
        let check = |v: &Value| -> Result<()> {
            if v.is_null() {
                return Err(CommonError::InvalidPredicate(format!(
                    "comparison of '{}' with NULL never matches; use IS NULL",
                    self.column
                )));
            }
            if !v.fits_type(t) {
                return Err(CommonError::InvalidPredicate(format!(
                    "column '{}' is {t} but the predicate compares it with a {} value",
                    self.column,
                    v.type_name()
                )));
            }
            Ok(())
        };
        match &self.op {
            PredicateOp::Equality(v) => check(v)?,
            PredicateOp::Range { lower, upper } => {
                if let Some((v, _)) = lower {
                    check(v)?;
                }
                if let Some((v, _)) = upper {
                    check(v)?;
                }
            }
            PredicateOp::InList(vs) => vs.iter().try_for_each(check)?,
            _ => {}
        }
        Ok(i)
    }

    /// Whether a single value satisfies the predicate (NULL satisfies only IS NULL).
    pub fn matches_value(&self, v: &Value) -> bool {
        if v.is_null() {
            return matches!(self.op, PredicateOp::IsNull);
        }
        match &self.op {
            PredicateOp::Equality(c) => cmpv(v, c) == Ordering::Equal,
            PredicateOp::Range { lower, upper } => {
                let lo_ok = match lower {
                    None => true,
                    Some((b, inc)) => match cmpv(v, b) {
                        Ordering::Greater => true,
                        Ordering::Equal => *inc,
                        Ordering::Less => false,
                    },
                };
                let hi_ok = match upper {
                    None => true,
                    Some((b, inc)) => match cmpv(v, b) {
                        Ordering::Less => true,
                        Ordering::Equal => *inc,
                        Ordering::Greater => false,
                    },
                };
                lo_ok && hi_ok
            }
            PredicateOp::InList(vs) => vs.iter().any(|c| cmpv(v, c) == Ordering::Equal),
            PredicateOp::IsNull => false,
            PredicateOp::IsNotNull => true,
            PredicateOp::None => false,
        }
    }

    /// Evaluates the predicate over an Arrow array of Cairn type `t`; NULL results are
    /// false.
    pub fn evaluate(&self, array: &dyn Array, t: &DataType) -> Result<BooleanArray> {
        let scalar = |v: &Value| -> Result<Scalar<arrow::array::ArrayRef>> {
            Ok(Scalar::new(array_from_values(t, std::iter::once(v))?))
        };
        let arr: &dyn Datum = &array;
        let result = match &self.op {
            PredicateOp::Equality(v) => cmp::eq(arr, &scalar(v)?)?,
            PredicateOp::Range { lower, upper } => {
                let lo = match lower {
                    None => None,
                    Some((v, true)) => Some(cmp::gt_eq(arr, &scalar(v)?)?),
                    Some((v, false)) => Some(cmp::gt(arr, &scalar(v)?)?),
                };
                let hi = match upper {
                    None => None,
                    Some((v, true)) => Some(cmp::lt_eq(arr, &scalar(v)?)?),
                    Some((v, false)) => Some(cmp::lt(arr, &scalar(v)?)?),
                };
                match (lo, hi) {
                    (Some(a), Some(b)) => boolean::and(&a, &b)?,
                    (Some(a), None) | (None, Some(a)) => a,
                    (None, None) => arrow::compute::is_not_null(array)?,
                }
            }
            // Long lists (a join's key set): binary search in the sorted list per row
            // instead of one comparison pass per value.
            PredicateOp::InList(vs) if vs.len() > IN_LIST_SCAN_MAX => {
                let list = arrow::compute::sort(array_from_values(t, vs.iter())?.as_ref(), None)?;
                let cmp = arrow::array::make_comparator(array, list.as_ref(), Default::default())?;
                let n = list.len();
                (0..array.len())
                    .map(|i| {
                        if array.is_null(i) {
                            return Some(false);
                        }
                        let (mut lo, mut hi) = (0, n);
                        while lo < hi {
                            let mid = (lo + hi) / 2;
                            match cmp(i, mid) {
                                Ordering::Less => hi = mid,
                                Ordering::Greater => lo = mid + 1,
                                Ordering::Equal => return Some(true),
                            }
                        }
                        Some(false)
                    })
                    .collect()
            }
            PredicateOp::InList(vs) => {
                let mut acc = BooleanArray::from(vec![false; array.len()]);
                for v in vs {
                    acc = boolean::or(&acc, &cmp::eq(arr, &scalar(v)?)?)?;
                }
                acc
            }
            PredicateOp::IsNull => arrow::compute::is_null(array)?,
            PredicateOp::IsNotNull => arrow::compute::is_not_null(array)?,
            PredicateOp::None => BooleanArray::from(vec![false; array.len()]),
        };
        Ok(if result.null_count() > 0 {
            arrow::compute::prep_null_mask_filter(&result)
        } else {
            result
        })
    }

    /// Whether some non-null value in `[min, max]` could satisfy the predicate (min/max
    /// statistics skipping). `has_nulls` says whether the block holds NULLs.
    pub fn could_match_range(&self, min: &Value, max: &Value, has_nulls: bool) -> bool {
        match &self.op {
            PredicateOp::IsNull => has_nulls,
            PredicateOp::IsNotNull => !min.is_null(),
            PredicateOp::None => false,
            _ if min.is_null() || max.is_null() => true,
            PredicateOp::Equality(v) => {
                cmpv(v, min) != Ordering::Less && cmpv(v, max) != Ordering::Greater
            }
            PredicateOp::InList(vs) => vs
                .iter()
                .any(|v| cmpv(v, min) != Ordering::Less && cmpv(v, max) != Ordering::Greater),
            PredicateOp::Range { lower, upper } => {
                let lo_ok = match lower {
                    None => true,
                    Some((b, inc)) => match cmpv(max, b) {
                        Ordering::Greater => true,
                        Ordering::Equal => *inc,
                        Ordering::Less => false,
                    },
                };
                let hi_ok = match upper {
                    None => true,
                    Some((b, inc)) => match cmpv(min, b) {
                        Ordering::Less => true,
                        Ordering::Equal => *inc,
                        Ordering::Greater => false,
                    },
                };
                lo_ok && hi_ok
            }
        }
    }

    /// Whether every row satisfying `self` also satisfies `other` (both on the same
    /// column). Conservative: `false` when unsure.
    pub fn implies(&self, other: &ColumnPredicate) -> bool {
        if self.column != other.column {
            return false;
        }
        use PredicateOp as P;
        match (&self.op, &other.op) {
            (P::None, _) => true,
            (_, P::None) => false,
            (P::IsNull, P::IsNull) => true,
            (P::IsNull, _) | (_, P::IsNull) => false,
            (_, P::IsNotNull) => true,
            (P::IsNotNull, _) => false,
            (P::Equality(v), _) => other.matches_value(v),
            (P::InList(vs), _) => vs.iter().all(|v| other.matches_value(v)),
            (P::Range { .. }, P::Equality(_) | P::InList(_)) => false,
            (
                P::Range {
                    lower: l1,
                    upper: u1,
                },
                P::Range {
                    lower: l2,
                    upper: u2,
                },
            ) => {
                let lower_ok = match (l1, l2) {
                    (_, None) => true,
                    (None, Some(_)) => false,
                    (Some((a, ai)), Some((b, bi))) => match cmpv(a, b) {
                        Ordering::Greater => true,
                        Ordering::Equal => *bi || !*ai,
                        Ordering::Less => false,
                    },
                };
                let upper_ok = match (u1, u2) {
                    (_, None) => true,
                    (None, Some(_)) => false,
                    (Some((a, ai)), Some((b, bi))) => match cmpv(a, b) {
                        Ordering::Less => true,
                        Ordering::Equal => *bi || !*ai,
                        Ordering::Greater => false,
                    },
                };
                lower_ok && upper_ok
            }
        }
    }

    /// The predicate satisfied exactly by rows satisfying both (same column).
    pub fn intersect(&self, other: &ColumnPredicate) -> ColumnPredicate {
        debug_assert_eq!(self.column, other.column);
        use PredicateOp as P;
        let op = match (&self.op, &other.op) {
            (P::None, _) | (_, P::None) => P::None,
            _ if self.implies(other) => self.op.clone(),
            _ if other.implies(self) => other.op.clone(),
            (P::IsNull, _) | (_, P::IsNull) => P::None,
            (P::Equality(v), _) | (_, P::Equality(v)) => {
                if self.matches_value(v) && other.matches_value(v) {
                    P::Equality(v.clone())
                } else {
                    P::None
                }
            }
            (P::InList(vs), _) | (_, P::InList(vs)) => {
                let kept: Vec<Value> = vs
                    .iter()
                    .filter(|v| self.matches_value(v) && other.matches_value(v))
                    .cloned()
                    .collect();
                if kept.is_empty() {
                    P::None
                } else {
                    P::InList(kept)
                }
            }
            (
                P::Range {
                    lower: l1,
                    upper: u1,
                },
                P::Range {
                    lower: l2,
                    upper: u2,
                },
            ) => {
                let lower = match (l1, l2) {
                    (None, x) | (x, None) => x.clone(),
                    (Some(a), Some(b)) => Some(match cmpv(&a.0, &b.0) {
                        Ordering::Greater => a.clone(),
                        Ordering::Less => b.clone(),
                        Ordering::Equal => (a.0.clone(), a.1 && b.1),
                    }),
                };
                let upper = match (u1, u2) {
                    (None, x) | (x, None) => x.clone(),
                    (Some(a), Some(b)) => Some(match cmpv(&a.0, &b.0) {
                        Ordering::Less => a.clone(),
                        Ordering::Greater => b.clone(),
                        Ordering::Equal => (a.0.clone(), a.1 && b.1),
                    }),
                };
                let empty = match (&lower, &upper) {
                    (Some((l, li)), Some((u, ui))) => match cmpv(l, u) {
                        Ordering::Greater => true,
                        Ordering::Equal => !(*li && *ui),
                        Ordering::Less => false,
                    },
                    _ => false,
                };
                if empty {
                    P::None
                } else {
                    P::Range { lower, upper }
                }
            }
            // IsNotNull with anything not covered above: the other side already excludes NULL.
            (P::IsNotNull, x) | (x, P::IsNotNull) => x.clone(),
        };
        ColumnPredicate {
            column: self.column.clone(),
            op,
        }
    }
}

/// Merges predicates on the same column so each column appears at most once, in order
/// of first appearance. A contradiction yields a [`PredicateOp::None`] predicate.
pub fn simplify_conjunction(preds: &[ColumnPredicate]) -> Vec<ColumnPredicate> {
    let mut out: Vec<ColumnPredicate> = Vec::new();
    for p in preds {
        match out.iter_mut().find(|q| q.column == p.column) {
            Some(q) => *q = q.intersect(p),
            None => out.push(p.clone()),
        }
    }
    out
}

/// Whether conjunction `q` implies conjunction `p`: every predicate of `p` is implied
/// by some predicate of `q`. (An empty `p` is implied by anything.)
pub fn conjunction_implies(q: &[ColumnPredicate], p: &[ColumnPredicate]) -> bool {
    p.iter().all(|pp| q.iter().any(|qq| qq.implies(pp)))
}

/// Whether a conjunction is known to match nothing.
pub fn conjunction_is_none(preds: &[ColumnPredicate]) -> bool {
    preds.iter().any(|p| p.op == PredicateOp::None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    fn i(v: i32) -> Value {
        Value::Int32(v)
    }

    #[test]
    fn evaluate_matches_value_semantics() {
        let arr = Int32Array::from(vec![Some(1), None, Some(5), Some(10)]);
        let preds = vec![
            ColumnPredicate::eq("a", i(5)),
            ColumnPredicate::range("a", i(2), i(10)),
            ColumnPredicate::le("a", i(5)),
            ColumnPredicate::in_list("a", vec![i(1), i(10)]),
            // Long enough for the sorted-list path, given unsorted.
            ColumnPredicate::in_list("a", (0..40).rev().map(|x| i(x * 5)).collect()),
            ColumnPredicate::in_list("a", (100..140).map(i).collect()),
            ColumnPredicate::is_null("a"),
            ColumnPredicate::is_not_null("a"),
        ];
        for p in preds {
            let r = p.evaluate(&arr, &DataType::Int32).unwrap();
            for row in 0..arr.len() {
                let v = Value::from_array(&arr, row, &DataType::Int32).unwrap();
                assert_eq!(r.value(row), p.matches_value(&v), "{p} on {v}");
            }
        }
    }

    #[test]
    fn implication() {
        let narrow = ColumnPredicate::range("a", i(3), i(5));
        let wide = ColumnPredicate::range("a", i(0), i(10));
        assert!(narrow.implies(&wide));
        assert!(!wide.implies(&narrow));
        assert!(ColumnPredicate::eq("a", i(4)).implies(&narrow));
        assert!(ColumnPredicate::in_list("a", vec![i(3), i(4)]).implies(&narrow));
        assert!(!ColumnPredicate::in_list("a", vec![i(3), i(5)]).implies(&narrow));
        assert!(narrow.implies(&ColumnPredicate::is_not_null("a")));
        assert!(!narrow.implies(&ColumnPredicate::range("b", i(0), i(10))));
        assert!(ColumnPredicate::lt("a", i(5)).implies(&ColumnPredicate::le("a", i(5))));
        assert!(!ColumnPredicate::le("a", i(5)).implies(&ColumnPredicate::lt("a", i(5))));
        let q = [narrow.clone(), ColumnPredicate::eq("b", i(1))];
        assert!(conjunction_implies(&q, std::slice::from_ref(&wide)));
        assert!(!conjunction_implies(std::slice::from_ref(&wide), &q));
    }

    #[test]
    fn intersection_and_min_max() {
        let p = simplify_conjunction(&[
            ColumnPredicate::ge("a", i(3)),
            ColumnPredicate::lt("a", i(3)),
        ]);
        assert!(conjunction_is_none(&p));
        let p = simplify_conjunction(&[
            ColumnPredicate::ge("a", i(3)),
            ColumnPredicate::lt("a", i(8)),
        ]);
        assert_eq!(p, vec![ColumnPredicate::range("a", i(3), i(8))]);
        let r = ColumnPredicate::range("a", i(3), i(8));
        assert!(r.could_match_range(&i(7), &i(100), false));
        assert!(!r.could_match_range(&i(8), &i(100), false));
        assert!(!ColumnPredicate::eq("a", i(1)).could_match_range(&i(2), &i(3), true));
        assert!(ColumnPredicate::is_null("a").could_match_range(&i(2), &i(3), true));
    }
}
