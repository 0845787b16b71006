//! Which SQL filters the tablet servers evaluate, and how.
//!
//! A tablet server evaluates [`ColumnPredicate`]s: a comparison, range, IN list or
//! NULL test on one column with a value of the column's own type. A DataFusion filter
//! is pushed down *exactly* when it is a conjunction of such tests with literals that
//! convert without loss ([`crate::types::scalar_to_value`]); DataFusion then drops its
//! own Filter. Floating-point comparisons are pushed down *inexactly* (DataFusion
//! checks them again) because NaN ordering differs. Everything else stays in
//! DataFusion.

use cairn_common::{ColumnPredicate, DataType, Schema, Value};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};

use crate::types::scalar_to_value;

/// How a filter translates: the predicates and whether they are exact.
#[derive(Clone, Debug, PartialEq)]
pub struct Translated {
    /// Predicates whose conjunction the filter implies (equals, when `exact`).
    pub predicates: Vec<ColumnPredicate>,
    /// Whether the predicates select exactly the rows the filter selects.
    pub exact: bool,
}

/// Translates one filter expression, or returns `None` if no part of it can be
/// evaluated by the tablets.
pub fn translate(expr: &Expr, schema: &Schema) -> Option<Translated> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            let l = translate(left, schema);
            let r = translate(right, schema);
            match (l, r) {
                (Some(mut l), Some(r)) => {
                    l.predicates.extend(r.predicates);
                    l.exact &= r.exact;
                    Some(l)
                }
                // One side alone still narrows the scan, but the filter must stay.
                (Some(mut one), None) | (None, Some(mut one)) => {
                    one.exact = false;
                    Some(one)
                }
                (None, None) => None,
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (col, lit, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(s, _)) => (c, s, *op),
                (Expr::Literal(s, _), Expr::Column(c)) => (c, s, op.swap()?),
                _ => return None,
            };
            let (name, t) = column(schema, &col.name)?;
            let v = scalar_to_value(lit, t)?;
            let p = match op {
                Operator::Eq => ColumnPredicate::eq(name, v),
                Operator::Lt => ColumnPredicate::lt(name, v),
                Operator::LtEq => ColumnPredicate::le(name, v),
                Operator::Gt => ColumnPredicate::gt(name, v),
                Operator::GtEq => ColumnPredicate::ge(name, v),
                _ => return None,
            };
            Some(Translated {
                predicates: vec![p],
                exact: !is_float(t),
            })
        }
        Expr::Between(b) if !b.negated => {
            let Expr::Column(c) = b.expr.as_ref() else {
                return None;
            };
            let (Expr::Literal(lo, _), Expr::Literal(hi, _)) = (b.low.as_ref(), b.high.as_ref())
            else {
                return None;
            };
            let (name, t) = column(schema, &c.name)?;
            Some(Translated {
                predicates: vec![
                    ColumnPredicate::ge(name, scalar_to_value(lo, t)?),
                    ColumnPredicate::le(name, scalar_to_value(hi, t)?),
                ],
                exact: !is_float(t),
            })
        }
        Expr::InList(l) if !l.negated => {
            let Expr::Column(c) = l.expr.as_ref() else {
                return None;
            };
            let (name, t) = column(schema, &c.name)?;
            let mut values = Vec::with_capacity(l.list.len());
            for e in &l.list {
                let Expr::Literal(s, _) = e else {
                    return None;
                };
                values.push(scalar_to_value(s, t)?);
            }
            if values.is_empty() {
                return None;
            }
            Some(Translated {
                predicates: vec![ColumnPredicate::in_list(name, values)],
                exact: !is_float(t),
            })
        }
        Expr::IsNull(e) | Expr::IsNotNull(e) => {
            let Expr::Column(c) = e.as_ref() else {
                return None;
            };
            let (name, _) = column(schema, &c.name)?;
            let p = if matches!(expr, Expr::IsNull(_)) {
                ColumnPredicate::is_null(name)
            } else {
                ColumnPredicate::is_not_null(name)
            };
            Some(Translated {
                predicates: vec![p],
                exact: true,
            })
        }
        // A boolean column used as a filter: `WHERE flag`.
        Expr::Column(c) => {
            let (name, t) = column(schema, &c.name)?;
            (*t == DataType::Bool).then(|| Translated {
                predicates: vec![ColumnPredicate::eq(name, Value::Bool(true))],
                exact: true,
            })
        }
        _ => None,
    }
}

/// How DataFusion should treat a filter given its translation.
pub fn pushdown_kind(t: &Option<Translated>) -> TableProviderFilterPushDown {
    match t {
        Some(t) if t.exact => TableProviderFilterPushDown::Exact,
        Some(_) => TableProviderFilterPushDown::Inexact,
        None => TableProviderFilterPushDown::Unsupported,
    }
}

fn column<'a>(schema: &'a Schema, name: &'a str) -> Option<(&'a str, &'a DataType)> {
    let i = schema.index_of(name).ok()?;
    Some((name, &schema.column(i).data_type))
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float | DataType::Double)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::ColumnSpec;
    use datafusion::prelude::{col, lit};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("s", DataType::String).nullable(),
                ColumnSpec::new("d", DataType::Double).nullable(),
                ColumnSpec::new("b", DataType::Bool).nullable(),
            ],
            &["k"],
        )
        .unwrap()
    }

    #[test]
    fn exact_forms() {
        let s = schema();
        let t = translate(&col("k").gt_eq(lit(5i64)).and(col("k").lt(lit(9i64))), &s).unwrap();
        assert!(t.exact);
        assert_eq!(
            t.predicates,
            vec![
                ColumnPredicate::ge("k", Value::Int64(5)),
                ColumnPredicate::lt("k", Value::Int64(9))
            ]
        );
        // Reversed comparison.
        let t = translate(&lit(5i64).lt(col("k")), &s).unwrap();
        assert_eq!(
            t.predicates,
            vec![ColumnPredicate::gt("k", Value::Int64(5))]
        );
        let t = translate(&col("s").in_list(vec![lit("a"), lit("b")], false), &s).unwrap();
        assert!(t.exact);
        let t = translate(&col("s").is_null(), &s).unwrap();
        assert_eq!(t.predicates, vec![ColumnPredicate::is_null("s")]);
        let t = translate(&col("k").between(lit(1i64), lit(3i64)), &s).unwrap();
        assert_eq!(t.predicates.len(), 2);
        assert!(translate(&col("b"), &s).unwrap().exact);
    }

    #[test]
    fn inexact_and_unsupported_forms() {
        let s = schema();
        // Floats are checked again by DataFusion.
        assert!(!translate(&col("d").gt(lit(1.5f64)), &s).unwrap().exact);
        // Half of a conjunction narrows the scan but keeps the filter.
        let t = translate(&col("k").eq(lit(1i64)).and(col("s").like(lit("a%"))), &s).unwrap();
        assert!(!t.exact);
        assert_eq!(t.predicates.len(), 1);
        // OR, NOT IN, expressions on columns, lossy literals: not pushed down.
        assert!(translate(&col("k").eq(lit(1i64)).or(col("k").eq(lit(2i64))), &s).is_none());
        assert!(translate(&col("k").in_list(vec![lit(1i64)], true), &s).is_none());
        assert!(translate(&(col("k") + lit(1i64)).eq(lit(2i64)), &s).is_none());
        assert!(translate(&col("k").eq(lit(1.5f64)), &s).is_none());
        assert!(translate(&col("nope").eq(lit(1i64)), &s).is_none());
        assert!(translate(&col("k").eq(lit(ScalarValueNull::null())), &s).is_none());
    }

    struct ScalarValueNull;
    impl ScalarValueNull {
        fn null() -> datafusion::common::ScalarValue {
            datafusion::common::ScalarValue::Int64(None)
        }
    }
}
