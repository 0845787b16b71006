//! Which SQL filters the tablet servers evaluate, and how.
//!
//! A tablet server evaluates [`ColumnPredicate`]s: a comparison, range, IN list or
//! NULL test on one column with a value of the column's own type. A DataFusion filter
//! is pushed down *exactly* when it is a conjunction of such tests with literals that
//! convert without loss ([`crate::types::scalar_to_value`]); DataFusion then drops its
//! own Filter. Floating-point comparisons are pushed down *inexactly* (DataFusion
//! checks them again) because NaN ordering differs. Everything else stays in
//! DataFusion.

use std::sync::Arc;

use cairn_common::{ColumnPredicate, DataType, PredicateOp, Schema, Value};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions as phys;

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
        // `a = x OR a = y OR a IN (…)` (DataFusion writes short IN lists this way):
        // one IN list on `a`.
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let (l, r) = (translate(left, schema)?, translate(right, schema)?);
            let values = |t: &Translated| -> Option<(String, Vec<Value>)> {
                match t.predicates.as_slice() {
                    [p] if t.exact => match &p.op {
                        PredicateOp::Equality(v) => Some((p.column.clone(), vec![v.clone()])),
                        PredicateOp::InList(vs) => Some((p.column.clone(), vs.clone())),
                        _ => None,
                    },
                    _ => None,
                }
            };
            let ((lc, mut lv), (rc, rv)) = (values(&l)?, values(&r)?);
            if lc != rc {
                return None;
            }
            lv.extend(rv);
            Some(Translated {
                predicates: vec![ColumnPredicate::in_list(lc, lv)],
                exact: true,
            })
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

/// IN lists longer than this are not sent to the tablets (the bounds still are).
pub const MAX_HINT_IN_LIST: usize = 4096;

/// Predicates implied by a *physical* filter expression over a scan whose output
/// columns are `columns` (by position): the tests of a conjunction that are a column
/// compared with a literal or a column IN a list of literals. Other parts (OR, CASE,
/// casts, hash-table lookups) are left out, so the result may select more rows than
/// the expression but never fewer. This is how a DataFusion dynamic filter (a hash
/// join's build-side bounds and key set, a TopK's threshold) narrows a tablet scan.
/// Floating-point columns are left out (NaN and -0.0 order differently).
pub fn implied_by_physical(
    expr: &Arc<dyn PhysicalExpr>,
    columns: &[String],
    schema: &Schema,
) -> Vec<ColumnPredicate> {
    let mut out = vec![];
    physical_conjuncts(expr, columns, schema, &mut out);
    out
}

fn physical_conjuncts(
    expr: &Arc<dyn PhysicalExpr>,
    columns: &[String],
    schema: &Schema,
    out: &mut Vec<ColumnPredicate>,
) {
    if let Some(b) = expr.downcast_ref::<phys::BinaryExpr>() {
        if *b.op() == Operator::And {
            physical_conjuncts(b.left(), columns, schema, out);
            physical_conjuncts(b.right(), columns, schema, out);
            return;
        }
        let (c, lit, op) = match (
            b.left().downcast_ref::<phys::Column>(),
            b.right().downcast_ref::<phys::Literal>(),
            b.left().downcast_ref::<phys::Literal>(),
            b.right().downcast_ref::<phys::Column>(),
        ) {
            (Some(c), Some(l), _, _) => (c, l, *b.op()),
            (_, _, Some(l), Some(c)) => match b.op().swap() {
                Some(op) => (c, l, op),
                None => return,
            },
            _ => return,
        };
        let Some((name, t)) = physical_column(c, columns, schema) else {
            return;
        };
        let Some(v) = scalar_to_value(lit.value(), t) else {
            return;
        };
        out.extend(match op {
            Operator::Eq => Some(ColumnPredicate::eq(name, v)),
            Operator::Lt => Some(ColumnPredicate::lt(name, v)),
            Operator::LtEq => Some(ColumnPredicate::le(name, v)),
            Operator::Gt => Some(ColumnPredicate::gt(name, v)),
            Operator::GtEq => Some(ColumnPredicate::ge(name, v)),
            _ => None,
        });
    } else if let Some(l) = expr.downcast_ref::<phys::InListExpr>() {
        if l.negated() || l.list().is_empty() || l.list().len() > MAX_HINT_IN_LIST {
            return;
        }
        let Some(c) = l.expr().downcast_ref::<phys::Column>() else {
            return;
        };
        let Some((name, t)) = physical_column(c, columns, schema) else {
            return;
        };
        let mut values = Vec::with_capacity(l.list().len());
        for e in l.list() {
            match e
                .downcast_ref::<phys::Literal>()
                .and_then(|lit| scalar_to_value(lit.value(), t))
            {
                Some(v) => values.push(v),
                None => return,
            }
        }
        out.push(ColumnPredicate::in_list(name, values));
    }
}

/// The Cairn column behind a physical column of the scan's output, unless it is a
/// floating-point column.
fn physical_column<'a>(
    c: &phys::Column,
    columns: &'a [String],
    schema: &'a Schema,
) -> Option<(&'a str, &'a DataType)> {
    let name = columns.get(c.index())?;
    if name != c.name() {
        return None;
    }
    let (name, t) = column(schema, name)?;
    (!is_float(t)).then_some((name, t))
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
    fn equalities_on_one_column_or_ed_are_an_in_list() {
        let s = schema();
        let e = col("k")
            .eq(lit(1i64))
            .or(col("k").eq(lit(2i64)))
            .or(col("k").in_list(vec![lit(3i64), lit(4i64)], false));
        let t = translate(&e, &s).unwrap();
        assert!(t.exact);
        assert_eq!(
            t.predicates,
            vec![ColumnPredicate::in_list(
                "k",
                (1..=4).map(Value::Int64).collect()
            )]
        );
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
        // OR across columns or of ranges, NOT IN, expressions on columns, lossy
        // literals: not pushed down.
        assert!(translate(&col("k").eq(lit(1i64)).or(col("s").eq(lit("x"))), &s).is_none());
        assert!(translate(&col("k").lt(lit(1i64)).or(col("k").eq(lit(2i64))), &s).is_none());
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

    #[test]
    fn physical_filters_imply_conjuncts_and_drop_the_rest() {
        use datafusion::common::ScalarValue;
        let schema = schema();
        // Scan output: s, k, d (by position).
        let columns: Vec<String> = ["s", "k", "d"].iter().map(|c| c.to_string()).collect();
        let k = Arc::new(phys::Column::new("k", 1)) as Arc<dyn PhysicalExpr>;
        let d = Arc::new(phys::Column::new("d", 2)) as Arc<dyn PhysicalExpr>;
        let lit = |v: i64| phys::lit(ScalarValue::Int64(Some(v)));
        let bin = |l: Arc<dyn PhysicalExpr>, op, r: Arc<dyn PhysicalExpr>| {
            Arc::new(phys::BinaryExpr::new(l, op, r)) as Arc<dyn PhysicalExpr>
        };
        let out = arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("s", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, false),
            arrow::datatypes::Field::new("d", arrow::datatypes::DataType::Float64, true),
        ]);
        let in_list = phys::in_list(k.clone(), vec![lit(3), lit(7)], &false, &out).unwrap();
        let bounds = bin(
            bin(k.clone(), Operator::GtEq, lit(3)),
            Operator::And,
            bin(lit(7), Operator::GtEq, k.clone()),
        );
        let e = bin(bounds, Operator::And, in_list);
        assert_eq!(
            implied_by_physical(&e, &columns, &schema),
            vec![
                ColumnPredicate::ge("k", Value::Int64(3)),
                ColumnPredicate::le("k", Value::Int64(7)),
                ColumnPredicate::in_list("k", vec![Value::Int64(3), Value::Int64(7)]),
            ]
        );
        // OR, floats and a column at another position imply nothing.
        let or = bin(
            bin(k.clone(), Operator::Eq, lit(1)),
            Operator::Or,
            bin(k.clone(), Operator::Eq, lit(2)),
        );
        assert!(implied_by_physical(&or, &columns, &schema).is_empty());
        let float = bin(d, Operator::Gt, phys::lit(ScalarValue::Float64(Some(1.0))));
        assert!(implied_by_physical(&float, &columns, &schema).is_empty());
        let moved = bin(Arc::new(phys::Column::new("k", 0)), Operator::Eq, lit(1));
        assert!(implied_by_physical(&moved, &columns, &schema).is_empty());
    }
}
