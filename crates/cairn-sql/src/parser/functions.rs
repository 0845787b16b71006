//! PostgreSQL functions spelled the way DataFusion can run them.
//!
//! Catalog queries of drivers and ORMs use set-returning functions DataFusion does not
//! have. They are rewritten in the syntax tree before planning:
//!
//! - `pg_catalog.f(…)` → `f(…)`: PostgreSQL's functions live in `pg_catalog`, which is
//!   always on the search path; DataFusion knows them by their bare names.
//! - `generate_subscripts(a, d)` → `unnest(generate_series(1, array_length(a, d)))`:
//!   the subscripts of dimension `d`, one row each. DataFusion zips several `unnest`s
//!   of one SELECT list as PostgreSQL zips its set-returning functions, so SQLAlchemy's
//!   `unnest(indkey) AS attnum, generate_subscripts(indkey, 1) AS ord` pairs each key
//!   column with its position.
//! - `pg_get_serial_sequence(…)` → `NULL`: no Cairn column draws from a sequence.
//!   Written as a constant, a subquery that looks the sequence up is no longer
//!   correlated through it, which DataFusion could not plan (SQLAlchemy's column
//!   reflection does this).
//! - A scalar subquery over `pg_sequence` alone → `NULL`: Cairn has no sequences, so
//!   it finds no row. (SQLAlchemy looks up identity columns' sequences in a subquery
//!   under a CASE, which DataFusion cannot plan.)
//! - A scalar subquery over catalog tables (`pg_…`) whose one column is not an
//!   aggregate is aggregated with `max(…)`: DataFusion runs a correlated scalar
//!   subquery only when it is aggregated, and such lookups (`(SELECT pg_get_expr(…)
//!   FROM pg_attrdef WHERE adrelid = … AND adnum = …)`) find at most one row, where
//!   `max` is the row itself. User tables are left alone, so a subquery of theirs
//!   that finds two rows is still an error. Conditions of such a subquery that only
//!   test the outer row (`WHERE pg_attribute.atthasdef AND …`) move out in front of
//!   it (`CASE WHEN pg_attribute.atthasdef THEN (SELECT …) END`, the same value):
//!   DataFusion cannot decorrelate them when the outer row comes from an outer join.
//! - pgJDBC's `getPrimaryKeys` pairs key columns with their positions through
//!   `information_schema._pg_expandarray(indkey)`, a set-returning function of
//!   composite rows `(x, n)`: a derived table selects `(_pg_expandarray(E)).n AS seq`,
//!   `_pg_expandarray(E) AS keys` and `att AS a`, and the outer query keeps the rows
//!   where `a = (keys).x`. That is the rows where `att` is in `E`, at position
//!   `array_position(E, att)`: the derived table computes exactly that (`seq` becomes
//!   the position, `keys` the array, `array_has(E, att)` joins its WHERE), and the
//!   outer condition becomes TRUE.
//! - `'name'::regproc` → `'name'` without its schema ([`regproc_names`], applied to
//!   catalog queries before `datafusion-pg-catalog` turns `regproc` into an integer):
//!   the catalog's `regproc` columns (`pg_type.typinput`) hold function names, and
//!   pgJDBC's type cache compares `typinput = 'pg_catalog.array_in'::regproc`.
//! - `ARRAY(SELECT … FROM unnest(x.reloptions) …)` → `CAST(NULL AS TEXT[])` (also in
//!   [`regproc_names`]'s pass): psql's `\d+` collects a TOAST table's storage options
//!   so. Cairn has no TOAST tables and no relation has options, so the array is
//!   always empty, and DataFusion has no array subqueries.

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    self, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
    Ident, ObjectName, ObjectNamePart, Value, visit_expressions_mut,
};

/// Rewrites the PostgreSQL functions of a statement (see the module doc).
pub(crate) fn rewrite_functions(statement: &mut DFStatement) {
    if let DFStatement::Statement(s) = statement {
        let _ = ast::VisitMut::visit(s.as_mut(), &mut ExpandArrays);
        let _ = visit_expressions_mut(s.as_mut(), |expr| {
            rewrite(expr);
            ControlFlow::<()>::Continue(())
        });
    }
}

/// The name of a function call, lower case, without a `pg_catalog.` qualifier.
fn function_name(f: &Function) -> Option<String> {
    let parts = &f.name.0;
    let last = match parts.as_slice() {
        [one] => one,
        [schema, one] if schema.as_ident()?.value.eq_ignore_ascii_case("pg_catalog") => one,
        _ => return None,
    };
    Some(last.as_ident()?.value.to_lowercase())
}

/// A call of `name(args…)`.
fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// The plain positional arguments of a call, if that is all it has.
fn plain_args(f: &Function) -> Option<Vec<Expr>> {
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Aggregate functions a catalog subquery's column may already use.
const AGGREGATES: &[&str] = &[
    "max",
    "min",
    "count",
    "sum",
    "avg",
    "array_agg",
    "bool_and",
    "bool_or",
    "string_agg",
    "first_value",
    "last_value",
];

/// The bare, lower-case name of a table factor that names a table.
fn table_name(t: &ast::TableFactor) -> Option<String> {
    let ast::TableFactor::Table { name, .. } = t else {
        return None;
    };
    Some(name.0.last()?.as_ident()?.value.to_lowercase())
}

/// Whether a table factor names a catalog table (`pg_…`, maybe `pg_catalog.`-qualified).
fn is_catalog_table(t: &ast::TableFactor) -> bool {
    table_name(t).is_some_and(|n| n.starts_with("pg_"))
}

/// Whether a query reads `pg_sequence` and nothing else.
fn only_sequences(query: &ast::Query) -> bool {
    let ast::SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    matches!(select.from.as_slice(), [only] if only.joins.is_empty()
        && table_name(&only.relation).as_deref() == Some("pg_sequence"))
}

/// Wraps the column of a scalar subquery over catalog tables in `max(…)` (see the
/// module doc).
fn aggregate_catalog_lookup(query: &mut ast::Query) {
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let grouped = !matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    if grouped || select.projection.len() != 1 {
        return;
    }
    let catalog = !select.from.is_empty()
        && select.from.iter().all(|f| {
            is_catalog_table(&f.relation) && f.joins.iter().all(|j| is_catalog_table(&j.relation))
        });
    if !catalog {
        return;
    }
    let column = match &mut select.projection[0] {
        ast::SelectItem::UnnamedExpr(e) => e,
        ast::SelectItem::ExprWithAlias { expr, .. } => expr,
        _ => return,
    };
    if let Expr::Function(f) = column
        && function_name(&*f).is_some_and(|n| AGGREGATES.contains(&n.as_str()))
    {
        return;
    }
    let inner = std::mem::replace(column, Expr::value(Value::Null));
    *column = call("max", vec![inner]);
}

/// The names a query's FROM clause gives its tables: full names, bare names and
/// aliases, lower case.
fn from_names(select: &ast::Select) -> Vec<String> {
    let mut names = Vec::new();
    let factors = select
        .from
        .iter()
        .flat_map(|f| std::iter::once(&f.relation).chain(f.joins.iter().map(|j| &j.relation)));
    for factor in factors {
        if let ast::TableFactor::Table { name, alias, .. } = factor {
            names.push(name.to_string().to_lowercase());
            if let Some(bare) = table_name(factor) {
                names.push(bare);
            }
            if let Some(a) = alias {
                names.push(a.name.value.to_lowercase());
            }
        }
    }
    names
}

/// Whether a condition reads only columns of tables outside `inner` (all its column
/// references qualified, none by an inner table).
fn outer_only(condition: &Expr, inner: &[String]) -> bool {
    let mut outer = false;
    let mut other = false;
    let _ = ast::visit_expressions(condition, |e| {
        match e {
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let qualifier: Vec<String> = parts[..parts.len() - 1]
                    .iter()
                    .map(|p| p.value.to_lowercase())
                    .collect();
                let full = qualifier.join(".");
                let last = qualifier.last().cloned().unwrap_or_default();
                if inner.contains(&full) || inner.contains(&last) {
                    other = true;
                } else {
                    outer = true;
                }
            }
            Expr::Identifier(_) | Expr::Subquery(_) | Expr::Exists { .. } => other = true,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    outer && !other
}

/// Splits `e` into its AND-ed conditions.
fn conjuncts(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            conjuncts(*left, out);
            conjuncts(*right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: ast::BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner, out)
        }
        other => out.push(other),
    }
}

/// The conditions joined with AND.
fn and_all(conditions: Vec<Expr>) -> Option<Expr> {
    conditions.into_iter().reduce(|l, r| Expr::BinaryOp {
        left: Box::new(l),
        op: ast::BinaryOperator::And,
        right: Box::new(r),
    })
}

/// Takes the outer-only conditions out of a catalog subquery's WHERE (see the module
/// doc), returning them AND-ed.
fn take_outer_conditions(query: &mut ast::Query) -> Option<Expr> {
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let catalog = !select.from.is_empty()
        && select.from.iter().all(|f| {
            is_catalog_table(&f.relation) && f.joins.iter().all(|j| is_catalog_table(&j.relation))
        });
    if !catalog {
        return None;
    }
    let inner = from_names(select);
    let mut all = Vec::new();
    conjuncts(select.selection.take()?, &mut all);
    let (outer, rest): (Vec<Expr>, Vec<Expr>) =
        all.into_iter().partition(|c| outer_only(c, &inner));
    select.selection = and_all(rest);
    and_all(outer)
}

fn rewrite(expr: &mut Expr) {
    if let Expr::Subquery(query) = expr {
        if only_sequences(query) {
            *expr = Expr::value(Value::Null);
            return;
        }
        aggregate_catalog_lookup(query);
        if let Some(condition) = take_outer_conditions(query) {
            let subquery = std::mem::replace(expr, Expr::value(Value::Null));
            *expr = Expr::Case {
                case_token: ast::helpers::attached_token::AttachedToken::empty(),
                end_token: ast::helpers::attached_token::AttachedToken::empty(),
                operand: None,
                conditions: vec![ast::CaseWhen {
                    condition,
                    result: subquery,
                }],
                else_result: None,
            };
        }
        return;
    }
    let Expr::Function(f) = expr else {
        return;
    };
    if f.name.0.len() == 2
        && let Some(name) = function_name(f)
    {
        f.name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]);
    }
    if function_name(f).as_deref() == Some("pg_get_serial_sequence") {
        *expr = Expr::value(Value::Null);
        return;
    }
    if function_name(f).as_deref() != Some("generate_subscripts") {
        return;
    }
    let Some(args) = plain_args(f) else {
        return;
    };
    // Other arities are left for the planner to reject.
    let Ok([array, dimension]) = <[Expr; 2]>::try_from(args) else {
        return;
    };
    let one = Expr::value(Value::Number("1".into(), false));
    let length = call("array_length", vec![array, dimension]);
    *expr = call("unnest", vec![call("generate_series", vec![one, length])]);
}

/// Rewrites `_pg_expandarray` pairs in every query (see the module doc).
struct ExpandArrays;

impl ast::VisitorMut for ExpandArrays {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        expand_array_pairs(query);
        ControlFlow::Continue(())
    }
}

/// The `_pg_expandarray` rewrite of one query whose FROM is one derived table (see the
/// module doc); leaves any other query alone.
fn expand_array_pairs(query: &mut ast::Query) -> Option<()> {
    let ast::SetExpr::Select(outer) = query.body.as_mut() else {
        return None;
    };
    let [only] = outer.from.as_mut_slice() else {
        return None;
    };
    let ast::TableFactor::Derived {
        subquery,
        alias: Some(alias),
        ..
    } = &mut only.relation
    else {
        return None;
    };
    let derived = alias.name.value.to_lowercase();
    let ast::SetExpr::Select(inner) = subquery.body.as_mut() else {
        return None;
    };
    // `_pg_expandarray(E) AS keys`, and `(_pg_expandarray(E)).n AS seq`.
    let named = |item: &ast::SelectItem| match item {
        ast::SelectItem::ExprWithAlias { expr, alias } => {
            Some((expr.clone(), alias.value.to_lowercase()))
        }
        _ => None,
    };
    let (keys_at, array, keys) = inner.projection.iter().enumerate().find_map(|(i, item)| {
        let (expr, alias) = named(item)?;
        let Expr::Function(f) = &expr else {
            return None;
        };
        let last = f.name.0.last()?.as_ident()?.value.to_lowercase();
        match (last.as_str(), plain_args(f)?.as_slice()) {
            ("_pg_expandarray", [array]) => Some((i, array.clone(), alias)),
            _ => None,
        }
    })?;
    let call_text = inner.projection[keys_at].to_string();
    let call_text = call_text
        .rsplit_once(" AS ")
        .map_or(call_text.as_str(), |(c, _)| c)
        .to_lowercase();
    let seq_at = inner.projection.iter().position(|item| {
        named(item).is_some_and(|(e, _)| e.to_string().to_lowercase() == format!("({call_text}).n"))
    })?;
    // The outer `derived.a = (derived.keys).x`.
    let wanted = format!("({derived}.{keys}).x");
    let mut conditions = vec![];
    conjuncts(outer.selection.take()?, &mut conditions);
    let mut member = None;
    for c in conditions.iter_mut() {
        let Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } = c
        else {
            continue;
        };
        let other = if right.to_string().to_lowercase() == wanted {
            left
        } else if left.to_string().to_lowercase() == wanted {
            right
        } else {
            continue;
        };
        let Expr::CompoundIdentifier(parts) = other.as_ref() else {
            continue;
        };
        let [table, column] = parts.as_slice() else {
            continue;
        };
        if table.value.to_lowercase() != derived {
            continue;
        }
        let column = column.value.to_lowercase();
        member = inner
            .projection
            .iter()
            .find_map(|item| named(item).filter(|(_, a)| *a == column).map(|(e, _)| e));
        if member.is_some() {
            *c = Expr::Value(Value::Boolean(true).into());
            break;
        }
    }
    outer.selection = and_all(conditions);
    let member = member?;
    let with_alias = |expr: Expr, alias: &str| ast::SelectItem::ExprWithAlias {
        expr,
        alias: Ident::new(alias),
    };
    let seq_alias = named(&inner.projection[seq_at])?.1;
    inner.projection[seq_at] = with_alias(
        call("array_position", vec![array.clone(), member.clone()]),
        &seq_alias,
    );
    inner.projection[keys_at] = with_alias(array.clone(), &keys);
    let has = call("array_has", vec![array, member]);
    inner.selection = Some(match inner.selection.take() {
        Some(w) => Expr::BinaryOp {
            left: Box::new(Expr::Nested(Box::new(w))),
            op: ast::BinaryOperator::And,
            right: Box::new(has),
        },
        None => has,
    });
    Some(())
}

/// `sql` with every `'schema.name'::regproc` literal replaced by `'name'` (see the
/// module doc), or `None` when it has none (or does not parse).
pub fn regproc_names(sql: &str) -> Option<String> {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let lower = sql.to_ascii_lowercase();
    if !lower.contains("regproc") && !lower.contains("reloptions") {
        return None;
    }
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    let mut changed = false;
    let _ = visit_expressions_mut(&mut statements, |expr| {
        if is_reloptions_subquery(expr) {
            let Ok(empty) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql("CAST(NULL AS TEXT[])")
                .and_then(|mut p| p.parse_expr())
            else {
                return ControlFlow::<()>::Continue(());
            };
            *expr = empty;
            changed = true;
            return ControlFlow::<()>::Continue(());
        }
        if let Expr::Cast {
            expr: inner,
            data_type,
            ..
        } = expr
            && data_type.to_string().eq_ignore_ascii_case("regproc")
            && let Expr::Value(v) = inner.as_ref()
            && let Value::SingleQuotedString(name) = &v.value
        {
            let bare = name.rsplit('.').next().unwrap_or(name).to_string();
            *expr = Expr::value(Value::SingleQuotedString(bare));
            changed = true;
        }
        ControlFlow::<()>::Continue(())
    });
    changed.then(|| {
        statements
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// Whether `expr` is `ARRAY(SELECT … FROM unnest(….reloptions) …)`.
fn is_reloptions_subquery(expr: &Expr) -> bool {
    let Expr::Function(f) = expr else {
        return false;
    };
    if !f.name.to_string().eq_ignore_ascii_case("array") {
        return false;
    }
    let ast::FunctionArguments::Subquery(q) = &f.args else {
        return false;
    };
    let ast::SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    let [from] = select.from.as_slice() else {
        return false;
    };
    let text = from.relation.to_string().to_ascii_lowercase();
    text.contains("unnest(") && text.contains("reloptions")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;

    fn rewritten(sql: &str) -> String {
        let mut statements = DFParser::parse_sql(sql).unwrap();
        let mut s = statements.pop_front().unwrap();
        rewrite_functions(&mut s);
        s.to_string()
    }

    #[test]
    fn catalog_lookups_are_aggregated() {
        assert_eq!(
            rewritten(
                "SELECT (SELECT pg_get_expr(d.adbin, d.adrelid) AS e FROM pg_catalog.pg_attrdef d \
                 WHERE d.adrelid = a.attrelid) FROM pg_attribute a"
            ),
            "SELECT (SELECT max(pg_get_expr(d.adbin, d.adrelid)) AS e FROM pg_catalog.pg_attrdef \
             d WHERE d.adrelid = a.attrelid) FROM pg_attribute a"
        );
        assert_eq!(
            rewritten("SELECT CASE WHEN x THEN (SELECT s.seqstart FROM pg_sequence s) END FROM a"),
            "SELECT CASE WHEN x THEN NULL END FROM a"
        );
        assert_eq!(
            rewritten(
                "SELECT (SELECT max(d.x) FROM pg_attrdef d WHERE a.has AND d.r = a.r AND (a.n > 0)) FROM pg_attribute a"
            ),
            "SELECT CASE WHEN a.has AND (a.n > 0) THEN (SELECT max(d.x) FROM pg_attrdef d \
             WHERE d.r = a.r) END FROM pg_attribute a"
        );
        // Already aggregated, or over a user table: untouched.
        for sql in [
            "SELECT (SELECT count(*) FROM pg_type WHERE oid = a.x) FROM a",
            "SELECT (SELECT b.y FROM b WHERE b.x = a.x) FROM a",
            "SELECT (SELECT b.y FROM pg_type JOIN b ON true) FROM a",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }

    #[test]
    fn generate_subscripts_becomes_an_unnest() {
        assert_eq!(
            rewritten("SELECT unnest(k) AS a, pg_catalog.generate_subscripts(k, 1) AS o FROM t"),
            "SELECT unnest(k) AS a, unnest(generate_series(1, array_length(k, 1))) AS o FROM t"
        );
        assert_eq!(
            rewritten("SELECT pg_catalog.format_type(t, m), s.f(x) FROM t"),
            "SELECT format_type(t, m), s.f(x) FROM t"
        );
        assert_eq!(
            rewritten("SELECT pg_catalog.pg_get_serial_sequence('t', 'c')"),
            "SELECT NULL"
        );
        // Elsewhere, and other functions, untouched.
        assert_eq!(
            rewritten("SELECT generate_series(1, 3), f(generate_subscripts(k, 1)) FROM t"),
            "SELECT generate_series(1, 3), f(unnest(generate_series(1, array_length(k, 1)))) FROM t"
        );
        assert_eq!(
            rewritten("SELECT generate_subscripts(k) FROM t"),
            "SELECT generate_subscripts(k) FROM t"
        );
    }

    #[test]
    fn pg_expandarray_pairs_become_array_positions() {
        // pgJDBC's getPrimaryKeys, shortened.
        let sql = "SELECT result.COLUMN_NAME, result.KEY_SEQ FROM (SELECT a.attname AS \
                   COLUMN_NAME, (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, \
                   information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM \
                   FROM pg_attribute a JOIN pg_index i ON (a.attrelid = i.indrelid) WHERE \
                   i.indisprimary) result WHERE result.A_ATTNUM = (result.KEYS).x ORDER BY \
                   result.key_seq";
        assert_eq!(
            rewritten(sql),
            "SELECT result.COLUMN_NAME, result.KEY_SEQ FROM (SELECT a.attname AS COLUMN_NAME, \
             array_position(i.indkey, a.attnum) AS key_seq, i.indkey AS keys, a.attnum AS \
             A_ATTNUM FROM pg_attribute a JOIN pg_index i ON (a.attrelid = i.indrelid) WHERE \
             (i.indisprimary) AND array_has(i.indkey, a.attnum)) result WHERE true ORDER BY \
             result.key_seq"
        );
        // Without the outer pairing condition: untouched.
        let alone = "SELECT r.k FROM (SELECT _pg_expandarray(x) AS k FROM t) AS r";
        assert_eq!(rewritten(alone), alone);
    }

    #[test]
    fn regproc_literals_lose_their_schema() {
        assert_eq!(
            regproc_names("SELECT typinput = 'pg_catalog.array_in'::regproc FROM pg_type")
                .as_deref(),
            Some("SELECT typinput = 'array_in' FROM pg_type")
        );
        assert_eq!(regproc_names("SELECT 'x'::text"), None);
        assert_eq!(
            regproc_names(
                "SELECT array_to_string(c.reloptions || array(select 'toast.' || x from \
                 pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_class c"
            )
            .as_deref(),
            Some(
                "SELECT array_to_string(c.reloptions || CAST(NULL AS TEXT[]), ', ') FROM pg_class c"
            )
        );
    }
}
