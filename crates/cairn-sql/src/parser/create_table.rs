//! `CREATE TABLE` in Cairn's grammar: columns and primary key, `PARTITION BY HASH (…)
//! PARTITIONS n` and `RANGE (…) (PARTITION …)` levels, `WITH (replicas = n,
//! colocate_with = 'table')`,
//! `SUBSPACE (…)` clauses and `AS SELECT …`. What the parsed statement means — types,
//! defaults, encoded range bounds — is decided by `ddl`.

use std::ops::ControlFlow;

use cairn_common::Colocation;

use datafusion::sql::sqlparser::ast::{
    self, ColumnOption, DataType, Expr, Query, SqlOption, TableConstraint, TableFactor, VisitMut,
    VisitorMut,
};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{IsOptional, Parser};
use datafusion::sql::sqlparser::tokenizer::Token;

use super::query::AsOfStripper;
use super::{
    ParseError, SubspaceClause, bound_precedence, found, ident_name, is_keyword, is_word,
    parse_column_list, parse_table_name, subspace,
};

/// A parsed `CREATE TABLE`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTable {
    /// Table name (normalized).
    pub name: String,
    /// `IF NOT EXISTS` was given.
    pub if_not_exists: bool,
    /// Declared columns, in order. Empty for `CREATE TABLE t PRIMARY KEY (…) AS SELECT`,
    /// whose columns come from the query.
    pub columns: Vec<ColumnDef>,
    /// Primary-key column names in key order (empty if none was declared).
    pub primary_key: Vec<String>,
    /// Hash levels: columns and bucket count. An empty column list (`HASH PARTITIONS 4`)
    /// means all primary-key columns.
    pub hash: Vec<HashSpec>,
    /// Range partitioning, if declared.
    pub range: Option<RangeSpec>,
    /// `WITH (replicas = n)`.
    pub replicas: Option<u32>,
    /// `WITH (colocate_with = 'table' | 'none' | 'default')`.
    pub colocation: Colocation,
    /// The query of `CREATE TABLE … AS SELECT`.
    pub query: Option<Box<Query>>,
    /// `SUBSPACE (a, b) [REGIONS n] [TABLETS t]` clauses: hyperspace search subspaces,
    /// each its attributes, region count and tablet count (defaults when not given).
    pub subspaces: Vec<SubspaceClause>,
}

/// One hash level of `PARTITION BY HASH (cols) PARTITIONS n`: the columns (empty for
/// all primary-key columns) and the bucket count.
pub type HashSpec = (Vec<String>, u32);

/// A declared column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    /// Column name (normalized).
    pub name: String,
    /// The SQL type as written (see [`crate::ddl::column_type`]).
    pub data_type: DataType,
    /// Whether NULL is allowed: false for primary-key columns and `NOT NULL` columns.
    pub nullable: bool,
    /// The `DEFAULT` literal (see [`crate::ddl::literal_value`]).
    pub default: Option<Expr>,
}

/// One range partition: `(lower, upper)`, lower inclusive, upper exclusive, `None`
/// unbounded. Each bound holds one literal per range column (a tuple `(1, 'a')` for
/// multi-column ranges). `lower == upper` (both `Some`) stands for
/// `PARTITION VALUE = x`, the partition holding exactly `x` (the parser rejects an
/// empty `x <= VALUES < x`).
pub type RangeBounds = (Option<Vec<Expr>>, Option<Vec<Expr>>);

/// `RANGE (cols) (PARTITION …, …)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSpec {
    /// Range columns (normalized names), in order.
    pub columns: Vec<String>,
    /// The range partitions; empty means one unbounded range.
    pub bounds: Vec<RangeBounds>,
}

pub(super) fn parse_create_table(p: &mut Parser<'_>) -> Result<CreateTable, ParseError> {
    p.expect_keyword_is(Keyword::CREATE)?;
    p.expect_keyword_is(Keyword::TABLE)?;
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = parse_table_name(p)?;

    // PostgreSQL's `CREATE TABLE t (a, b) AS SELECT …` names the query's columns
    // without types; each takes its type from the query.
    let names_only = if p.peek_token_ref().token == Token::LParen {
        p.maybe_parse(|p| p.parse_parenthesized_column_list(IsOptional::Mandatory, false))?
    } else {
        None
    };
    let (sql_columns, constraints) = match &names_only {
        Some(names) => (
            names
                .iter()
                .map(|n| ast::ColumnDef {
                    name: n.clone(),
                    data_type: DataType::Unspecified,
                    options: vec![],
                })
                .collect(),
            vec![],
        ),
        None if p.peek_token_ref().token == Token::LParen => p.parse_columns()?,
        None => (vec![], vec![]),
    };

    let mut trailing_pk: Option<Vec<String>> = None;
    let mut partitioned = false;
    let mut hash = Vec::new();
    let mut range = None;
    let mut replicas = None;
    let mut colocation = Colocation::Default;
    let mut with_seen = false;
    let mut query = None;
    let mut subspaces = Vec::new();
    loop {
        let t = p.peek_token().token;
        if t == Token::EOF || t == Token::SemiColon {
            break;
        }
        if p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
            if trailing_pk.is_some() {
                return Err(ParseError::syntax(
                    "PRIMARY KEY appears twice: give it once",
                ));
            }
            trailing_pk = Some(parse_column_list(p)?);
        } else if p.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
            if partitioned {
                return Err(ParseError::syntax(
                    "PARTITION BY appears twice: list all levels in one clause, e.g. PARTITION BY HASH (a) PARTITIONS 4, RANGE (b) (...)",
                ));
            }
            partitioned = true;
            (hash, range) = parse_partition_by(p)?;
        } else if is_keyword(&t, Keyword::WITH) {
            if with_seen {
                return Err(ParseError::syntax("WITH (...) appears twice: give it once"));
            }
            with_seen = true;
            (replicas, colocation) = parse_table_options(p)?;
        } else if is_word(&t, "SUBSPACE") {
            p.next_token();
            let (columns, regions, tablets) = subspace::parse_subspace_clause(p)?;
            subspaces.push((columns, regions, tablets));
        } else if p.parse_keyword(Keyword::AS) || is_keyword(&t, Keyword::SELECT) {
            let mut q = p.parse_query()?;
            check_ctas_query(&mut q)?;
            query = Some(q);
            let t = p.peek_token().token;
            if t != Token::EOF && t != Token::SemiColon {
                return Err(ParseError::syntax(format!(
                    "unexpected {} after the query of CREATE TABLE ... AS: put PRIMARY KEY, PARTITION BY and WITH before AS",
                    found(p)
                )));
            }
            break;
        } else {
            return Err(ParseError::syntax(format!(
                "unexpected {} in CREATE TABLE {name}: expected PRIMARY KEY (...), PARTITION BY ..., SUBSPACE (...), WITH (...) or AS SELECT ...",
                found(p)
            )));
        }
    }

    if sql_columns.is_empty() && query.is_none() {
        return Err(ParseError::syntax(format!(
            "CREATE TABLE {name} needs a column list, e.g. CREATE TABLE {name} (id BIGINT PRIMARY KEY, v TEXT), or AS SELECT ..."
        )));
    }

    // Primary key: inline column option, table constraint or trailing clause — once.
    let mut pk_sources: Vec<Vec<String>> = Vec::new();
    for c in &constraints {
        match c {
            TableConstraint::PrimaryKey(pk) => {
                let mut cols = Vec::with_capacity(pk.columns.len());
                for ic in &pk.columns {
                    match &ic.column.expr {
                        Expr::Identifier(id) => cols.push(ident_name(id)),
                        other => {
                            return Err(ParseError::syntax(format!(
                                "PRIMARY KEY lists column names, not '{other}'"
                            )));
                        }
                    }
                }
                pk_sources.push(cols);
            }
            other => {
                return Err(ParseError::unsupported(format!(
                    "table constraint '{other}' is not supported: Cairn tables have only a PRIMARY KEY"
                )));
            }
        }
    }
    let mut columns = Vec::with_capacity(sql_columns.len());
    let mut inline_pk = Vec::new();
    for c in &sql_columns {
        let (col, is_pk) = column_def(c)?;
        if is_pk {
            inline_pk.push(col.name.clone());
        }
        columns.push(col);
    }
    if inline_pk.len() > 1 {
        return Err(ParseError::invalid_definition(format!(
            "several columns ({}) are marked PRIMARY KEY: declare a composite key as PRIMARY KEY ({})",
            inline_pk.join(", "),
            inline_pk.join(", ")
        )));
    }
    if !inline_pk.is_empty() {
        pk_sources.push(inline_pk);
    }
    if let Some(pk) = trailing_pk {
        pk_sources.push(pk);
    }
    if pk_sources.len() > 1 {
        return Err(ParseError::invalid_definition(
            "the primary key is declared more than once: declare it in one place",
        ));
    }
    if names_only.is_some() && query.is_none() {
        return Err(ParseError::syntax(format!(
            "CREATE TABLE {name} lists column names without types: give each a type, e.g. (id BIGINT, name TEXT), or take the types from a query with AS SELECT ..."
        )));
    }
    let primary_key = pk_sources.pop().unwrap_or_default();
    for c in &mut columns {
        if primary_key.contains(&c.name) {
            if c.nullable && explicitly_nullable(&sql_columns, &c.name) {
                return Err(ParseError::invalid_definition(format!(
                    "primary key column '{}' cannot be NULL: remove NULL",
                    c.name
                )));
            }
            c.nullable = false;
        }
    }

    Ok(CreateTable {
        name,
        if_not_exists,
        columns,
        primary_key,
        hash,
        range,
        replicas,
        colocation,
        query,
        subspaces,
    })
}

/// Checks the query of `CREATE TABLE … AS`:
/// - `AS OF` is refused: the statement has no read time to carry it, and DataFusion
///   would ignore it, reading the latest data instead;
/// - table hints (`FROM t WITH (…)`) are refused: a `WITH (replicas = 3)` written
///   after the query lands there and would be lost.
fn check_ctas_query(q: &mut Query) -> Result<(), ParseError> {
    struct Hints;
    impl VisitorMut for Hints {
        type Break = ParseError;
        fn pre_visit_table_factor(&mut self, f: &mut TableFactor) -> ControlFlow<ParseError> {
            match f {
                TableFactor::Table {
                    name, with_hints, ..
                } if !with_hints.is_empty() => ControlFlow::Break(ParseError::syntax(format!(
                    "unexpected WITH (...) after table {name} in CREATE TABLE ... AS SELECT: put WITH (replicas = n) before AS"
                ))),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    if let ControlFlow::Break(e) = q.visit(&mut Hints) {
        return Err(e);
    }
    let mut v = AsOfStripper { as_of: None };
    if let ControlFlow::Break(e) = q.visit(&mut v) {
        return Err(e);
    }
    match v.as_of {
        None => Ok(()),
        Some(e) => Err(ParseError::unsupported(format!(
            "FOR SYSTEM_TIME AS OF {e} is not supported in CREATE TABLE ... AS SELECT: SET cairn.read_timestamp before the statement instead"
        ))),
    }
}

fn explicitly_nullable(cols: &[ast::ColumnDef], name: &str) -> bool {
    cols.iter()
        .filter(|c| ident_name(&c.name) == name)
        .any(|c| c.options.iter().any(|o| o.option == ColumnOption::Null))
}

/// Converts a sqlparser column definition; the flag says whether it is marked
/// `PRIMARY KEY`.
pub(super) fn column_def(c: &ast::ColumnDef) -> Result<(ColumnDef, bool), ParseError> {
    let name = ident_name(&c.name);
    let mut not_null = false;
    let mut null = false;
    let mut default = None;
    let mut pk = false;
    for o in &c.options {
        match &o.option {
            ColumnOption::NotNull => not_null = true,
            ColumnOption::Null => null = true,
            ColumnOption::Default(e) => {
                if default.is_some() {
                    return Err(ParseError::syntax(format!(
                        "column '{name}' has two DEFAULTs: give one"
                    )));
                }
                default = Some(e.clone());
            }
            ColumnOption::PrimaryKey(_) => pk = true,
            other => {
                return Err(ParseError::unsupported(format!(
                    "column option '{other}' of column '{name}' is not supported: Cairn columns take NULL, NOT NULL, DEFAULT <literal> and PRIMARY KEY"
                )));
            }
        }
    }
    if not_null && null {
        return Err(ParseError::syntax(format!(
            "column '{name}' is declared both NULL and NOT NULL: keep one"
        )));
    }
    if pk && null {
        return Err(ParseError::invalid_definition(format!(
            "primary key column '{name}' cannot be NULL: remove NULL"
        )));
    }
    Ok((
        ColumnDef {
            name,
            data_type: c.data_type.clone(),
            nullable: !(not_null || pk),
            default,
        },
        pk,
    ))
}

/// `HASH [(cols)] PARTITIONS n [, HASH …] [, RANGE (cols) [(PARTITION …, …)]]`, after
/// `PARTITION BY`.
fn parse_partition_by(
    p: &mut Parser<'_>,
) -> Result<(Vec<HashSpec>, Option<RangeSpec>), ParseError> {
    let mut hash = Vec::new();
    let mut range = None;
    loop {
        if range.is_some() {
            return Err(ParseError::syntax(
                "RANGE must be the last level of PARTITION BY: write PARTITION BY HASH (a) PARTITIONS 4, RANGE (b) (...)",
            ));
        }
        if p.parse_keyword(Keyword::HASH) {
            let cols = if p.peek_token_ref().token == Token::LParen {
                parse_column_list(p)?
            } else {
                vec![]
            };
            if !is_word(&p.peek_token_ref().token, "PARTITIONS") {
                return Err(ParseError::syntax(format!(
                    "expected PARTITIONS after HASH ({}), found {}: write e.g. PARTITION BY HASH (id) PARTITIONS 4",
                    cols.join(", "),
                    found(p)
                )));
            }
            p.next_token();
            hash.push((cols, parse_bucket_count(p)?));
        } else if p.parse_keyword(Keyword::RANGE) {
            let columns = parse_column_list(p)?;
            let mut bounds = Vec::new();
            if p.consume_token(&Token::LParen) {
                loop {
                    if !p.parse_keyword(Keyword::PARTITION) {
                        return Err(ParseError::syntax(format!(
                            "expected PARTITION in the range partition list, found {}: write e.g. RANGE (c) (PARTITION VALUES < 10, PARTITION 10 <= VALUES)",
                            found(p)
                        )));
                    }
                    bounds.push(parse_range_partition(p)?);
                    if !p.consume_token(&Token::Comma) {
                        break;
                    }
                }
                p.expect_token(&Token::RParen)?;
            }
            range = Some(RangeSpec { columns, bounds });
        } else {
            return Err(ParseError::syntax(format!(
                "expected HASH or RANGE after PARTITION BY, found {}: write e.g. PARTITION BY HASH (id) PARTITIONS 4",
                found(p)
            )));
        }
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    Ok((hash, range))
}

fn parse_bucket_count(p: &mut Parser<'_>) -> Result<u32, ParseError> {
    const HELP: &str = "PARTITIONS must be followed by a number of buckets ≥ 2, e.g. PARTITION BY HASH (id) PARTITIONS 4";
    let t = p.next_token();
    let Token::Number(n, _) = &t.token else {
        return Err(ParseError::syntax(format!(
            "{HELP} (found '{}'{})",
            t.token, t.span.start
        )));
    };
    match n.parse::<u32>() {
        Ok(b) if b >= 2 => Ok(b),
        _ => Err(ParseError::invalid(format!("{HELP} (found {n})"))),
    }
}

/// One bound of a range partition: a literal, or a parenthesized tuple of literals.
pub(super) fn parse_bound(p: &mut Parser<'_>) -> Result<Vec<Expr>, ParseError> {
    if p.consume_token(&Token::LParen) {
        let values = p.parse_comma_separated(|p| p.parse_subexpr(bound_precedence()))?;
        p.expect_token(&Token::RParen)?;
        Ok(values)
    } else {
        Ok(vec![p.parse_subexpr(bound_precedence())?])
    }
}

/// The bounds after `PARTITION`: `VALUES < u`, `l <= VALUES < u`, `l <= VALUES` or
/// `VALUE = x`.
pub(super) fn parse_range_partition(p: &mut Parser<'_>) -> Result<RangeBounds, ParseError> {
    const HELP: &str = "write PARTITION VALUES < 10, PARTITION 10 <= VALUES < 20, PARTITION 20 <= VALUES or PARTITION VALUE = 5";
    if is_word(&p.peek_token_ref().token, "VALUE") {
        p.next_token();
        p.expect_token(&Token::Eq)?;
        let v = parse_bound(p)?;
        return Ok((Some(v.clone()), Some(v)));
    }
    let lower = if is_keyword(&p.peek_token_ref().token, Keyword::VALUES) {
        None
    } else {
        let b = parse_bound(p)?;
        let t = p.next_token();
        match t.token {
            Token::LtEq => {}
            Token::Lt => {
                return Err(ParseError::unsupported(format!(
                    "exclusive lower bounds (x < VALUES) are not supported: write the lower bound inclusively, x <= VALUES; {HELP}"
                )));
            }
            other => {
                return Err(ParseError::syntax(format!(
                    "expected <= after the lower bound of a range partition, found '{other}'{}: {HELP}",
                    t.span.start
                )));
            }
        }
        Some(b)
    };
    if !p.parse_keyword(Keyword::VALUES) {
        return Err(ParseError::syntax(format!(
            "expected VALUES in a range partition, found {}: {HELP}",
            found(p)
        )));
    }
    let upper = match p.peek_token_ref().token {
        Token::Lt => {
            p.next_token();
            Some(parse_bound(p)?)
        }
        Token::LtEq => {
            return Err(ParseError::unsupported(format!(
                "inclusive upper bounds (VALUES <= x) are not supported: write the upper bound exclusively, VALUES < x; {HELP}"
            )));
        }
        _ => None,
    };
    match (&lower, &upper) {
        (None, None) => Err(ParseError::syntax(format!(
            "a range partition needs at least one bound: {HELP}"
        ))),
        (Some(l), Some(u)) if l == u => Err(ParseError::invalid_definition(format!(
            "range partition {} <= VALUES < {} is empty: the upper bound must be above the lower one (for a single value write PARTITION VALUE = x)",
            display_bound(l),
            display_bound(u)
        ))),
        _ => Ok((lower, upper)),
    }
}

pub(super) fn display_bound(b: &[Expr]) -> String {
    match b {
        [one] => one.to_string(),
        many => format!(
            "({})",
            many.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `WITH (replicas = n, colocate_with = …)`: the replica count if given, and the
/// colocation group asked for.
fn parse_table_options(p: &mut Parser<'_>) -> Result<(Option<u32>, Colocation), ParseError> {
    const KNOWN: &str = "the known options are: replicas (the number of copies of each tablet, an odd number such as 1, 3 or 5) and colocate_with (a table whose hash buckets this one's share servers with, or 'none')";
    let mut replicas = None;
    let mut colocation = None;
    for o in p.parse_options(Keyword::WITH)? {
        let SqlOption::KeyValue { key, value } = &o else {
            return Err(ParseError::syntax(format!(
                "table option '{o}' must be written name = value; {KNOWN}"
            )));
        };
        match ident_name(key).as_str() {
            "replicas" => {
                if replicas.is_some() {
                    return Err(ParseError::syntax("option replicas is given twice"));
                }
                let n = match value {
                    Expr::Value(v) => match &v.value {
                        ast::Value::Number(n, _) => n.parse::<u32>().ok(),
                        _ => None,
                    },
                    _ => None,
                };
                match n {
                    Some(n) if n % 2 == 1 => replicas = Some(n),
                    _ => {
                        return Err(ParseError::invalid(format!(
                            "replicas = {value} is invalid: use an odd number of replicas such as 1, 3 or 5"
                        )));
                    }
                }
            }
            "colocate_with" => {
                if colocation.is_some() {
                    return Err(ParseError::syntax("option colocate_with is given twice"));
                }
                let name = match value {
                    Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => Some(s.clone()),
                        _ => None,
                    },
                    Expr::Identifier(i) => Some(ident_name(i)),
                    _ => None,
                };
                colocation = Some(match name.as_deref().map(str::trim) {
                    Some(n) if n.eq_ignore_ascii_case("none") => Colocation::None,
                    Some(n) if n.eq_ignore_ascii_case("default") => Colocation::Default,
                    Some(n) if !n.is_empty() => Colocation::With(n.to_string()),
                    _ => {
                        return Err(ParseError::invalid(format!(
                            "colocate_with = {value} is invalid: name a table, as in colocate_with = 'orders', or write 'none' or 'default'"
                        )));
                    }
                });
            }
            other => {
                return Err(ParseError::invalid(format!(
                    "unknown table option '{other}': {KNOWN}"
                )));
            }
        }
    }
    Ok((replicas, colocation.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::super::CairnStatement;
    use super::super::tests::{bounds_str, err, lit, one};
    use super::*;

    fn create(sql: &str) -> CreateTable {
        match one(sql) {
            CairnStatement::CreateTable(c) => c,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn create_table_basic() {
        let c = create(
            "CREATE TABLE Users (Id BIGINT PRIMARY KEY, name TEXT NOT NULL, \"Age\" INT DEFAULT 7, note VARCHAR(10) NULL)",
        );
        assert_eq!(c.name, "users");
        assert!(!c.if_not_exists);
        assert_eq!(c.primary_key, vec!["id"]);
        let names: Vec<_> = c.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["id", "name", "Age", "note"]);
        let nullable: Vec<_> = c.columns.iter().map(|c| c.nullable).collect();
        assert_eq!(nullable, [false, false, true, true]);
        assert_eq!(c.columns[2].default.as_ref().map(lit).as_deref(), Some("7"));
        assert_eq!(c.columns[0].data_type, DataType::BigInt(None));
        assert!(c.hash.is_empty() && c.range.is_none() && c.replicas.is_none());
        assert!(c.query.is_none());
    }

    #[test]
    fn create_table_composite_key_and_if_not_exists() {
        let c = create(
            "create table if not exists public.t (a int, b text, v double, primary key (b, a))",
        );
        assert_eq!(c.name, "t");
        assert!(c.if_not_exists);
        assert_eq!(c.primary_key, vec!["b", "a"]);
        assert!(!c.columns[0].nullable && !c.columns[1].nullable && c.columns[2].nullable);
        let c = create("CREATE TABLE cairn.public.t (a INT) PRIMARY KEY (a)");
        assert_eq!(c.name, "t");
        assert_eq!(c.primary_key, vec!["a"]);
    }

    #[test]
    fn colocate_with_names_a_table_or_none() {
        let base = "CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY HASH (a) PARTITIONS 4";
        assert_eq!(create(base).colocation, Colocation::Default);
        let with = |o: &str| create(&format!("{base} WITH ({o})")).colocation;
        assert_eq!(
            with("colocate_with = 'Orders'"),
            Colocation::With("Orders".into())
        );
        assert_eq!(
            with("colocate_with = orders"),
            Colocation::With("orders".into())
        );
        assert_eq!(
            with("replicas = 1, colocate_with = 'NONE'"),
            Colocation::None
        );
        assert_eq!(with("colocate_with = 'default'"), Colocation::Default);
        for bad in ["colocate_with = 3", "colocate_with = ''"] {
            let e = err(&format!("{base} WITH ({bad})"));
            assert!(e.message().contains("name a table"), "{bad}: {e}");
        }
        let e = err(&format!(
            "{base} WITH (colocate_with = 'a', colocate_with = 'b')"
        ));
        assert!(e.message().contains("twice"), "{e}");
        let e = err(&format!("{base} WITH (colocate = 'a')"));
        assert!(e.message().contains("colocate_with"), "{e}");
    }

    #[test]
    fn create_table_without_primary_key_parses() {
        // The missing key is reported by ddl::table_def (42P16).
        let c = create("CREATE TABLE t (a INT)");
        assert!(c.primary_key.is_empty());
    }

    #[test]
    fn create_table_partitioning() {
        let c = create(
            "CREATE TABLE t (a INT, b TEXT, c BIGINT, PRIMARY KEY (a, b, c)) \
             PARTITION BY HASH (a) PARTITIONS 4, HASH (b) PARTITIONS 3, \
             RANGE (c) (PARTITION VALUES < 10, PARTITION 10 <= VALUES < 20, PARTITION 20 <= VALUES) \
             WITH (replicas = 3)",
        );
        assert_eq!(
            c.hash,
            vec![(vec!["a".to_string()], 4), (vec!["b".to_string()], 3)]
        );
        let r = c.range.expect("range");
        assert_eq!(r.columns, vec!["c"]);
        let b: Vec<_> = r.bounds.iter().map(bounds_str).collect();
        assert_eq!(
            b,
            vec![
                (None, Some(vec!["10".to_string()])),
                (Some(vec!["10".to_string()]), Some(vec!["20".to_string()])),
                (Some(vec!["20".to_string()]), None),
            ]
        );
        assert_eq!(c.replicas, Some(3));
    }

    #[test]
    fn create_table_clauses_in_any_order() {
        let c = create(
            "CREATE TABLE t (a INT PRIMARY KEY) WITH (REPLICAS = 1) PARTITION BY HASH PARTITIONS 8",
        );
        assert_eq!(c.replicas, Some(1));
        assert_eq!(c.hash, vec![(vec![], 8)]);
    }

    #[test]
    fn create_table_range_only_and_tuples() {
        let c = create(
            "CREATE TABLE t (a INT, b TEXT, PRIMARY KEY (a, b)) PARTITION BY RANGE (a, b) \
             (PARTITION (1, 'x') <= VALUES < (2, 'y'), PARTITION VALUE = (5, 'z'), PARTITION -3 <= VALUES < 0)",
        );
        assert!(c.hash.is_empty());
        let r = c.range.expect("range");
        assert_eq!(r.columns, vec!["a", "b"]);
        assert_eq!(
            bounds_str(&r.bounds[0]),
            (
                Some(vec!["1".into(), "'x'".into()]),
                Some(vec!["2".into(), "'y'".into()])
            )
        );
        assert_eq!(
            bounds_str(&r.bounds[1]),
            (
                Some(vec!["5".into(), "'z'".into()]),
                Some(vec!["5".into(), "'z'".into()])
            )
        );
        assert_eq!(
            bounds_str(&r.bounds[2]),
            (Some(vec!["-3".into()]), Some(vec!["0".into()]))
        );
        // RANGE without a partition list: one unbounded range.
        let c = create("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a)");
        assert!(c.range.expect("range").bounds.is_empty());
        // Typed bounds.
        let c = create(
            "CREATE TABLE t (d DATE PRIMARY KEY) PARTITION BY RANGE (d) (PARTITION DATE '2024-01-01' <= VALUES < DATE '2025-01-01')",
        );
        let r = c.range.expect("range");
        assert_eq!(
            bounds_str(&r.bounds[0]).0,
            Some(vec!["DATE '2024-01-01'".to_string()])
        );
    }

    #[test]
    fn create_table_as_select() {
        let c = create(
            "CREATE TABLE t2 PRIMARY KEY (id) PARTITION BY HASH (id) PARTITIONS 2 AS SELECT id, v FROM t1",
        );
        assert!(c.columns.is_empty());
        assert_eq!(c.primary_key, vec!["id"]);
        assert_eq!(c.hash, vec![(vec!["id".to_string()], 2)]);
        let q = c.query.expect("query");
        assert_eq!(q.to_string(), "SELECT id, v FROM t1");
        let c = create("CREATE TABLE t2 (id INT PRIMARY KEY, v TEXT) AS SELECT 1, 'a'");
        assert_eq!(c.columns.len(), 2);
        assert!(c.query.is_some());
        // PostgreSQL's names without types take the query's types.
        let c = create("CREATE TABLE t2 (a, \"B\") PRIMARY KEY (a) AS SELECT id, id FROM t1");
        let names: Vec<_> = c.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["a", "B"]);
        assert!(
            c.columns
                .iter()
                .all(|c| c.data_type == DataType::Unspecified)
        );
        assert!(!c.columns[0].nullable, "a key column");
        let e = err("CREATE TABLE t2 (a, b)");
        assert!(e.message().contains("without types"), "{e}");
        let c = create("create table t3 primary key (column1) as values (1), (2)");
        assert_eq!(c.primary_key, vec!["column1"]);
        let e =
            err("CREATE TABLE t2 PRIMARY KEY (id) AS SELECT id FROM t1 FOR SYSTEM_TIME AS OF 5");
        assert_eq!(e.sqlstate(), "0A000");
        assert!(e.message().contains("cairn.read_timestamp"), "{e}");
        let e = err("CREATE TABLE t2 PRIMARY KEY (id) AS SELECT id FROM t1 WITH (replicas = 3)");
        assert_eq!(e.sqlstate(), "42601");
        assert!(e.message().contains("before AS"), "{e}");
    }

    #[test]
    fn create_table_errors() {
        let e = err("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY HASH (a) PARTITIONS 1");
        assert_eq!(e.sqlstate(), "22023");
        assert!(
            e.message()
                .contains("PARTITIONS must be followed by a number of buckets ≥ 2"),
            "{e}"
        );
        let e = err("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY HASH (a) PARTITIONS x");
        assert_eq!(e.sqlstate(), "42601");
        assert!(
            e.message().contains("PARTITION BY HASH (id) PARTITIONS 4"),
            "{e}"
        );
        let e = err("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY HASH (a)");
        assert_eq!(e.sqlstate(), "42601");
        assert!(e.message().contains("PARTITIONS"), "{e}");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY) WITH (replication = 3)");
        assert_eq!(e.sqlstate(), "22023");
        assert!(
            e.message().contains("unknown table option 'replication'"),
            "{e}"
        );
        assert!(e.message().contains("replicas"), "{e}");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY) WITH (replicas = 2)");
        assert_eq!(e.sqlstate(), "22023");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY, b INT PRIMARY KEY)");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("PRIMARY KEY (a, b)"), "{e}");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY, PRIMARY KEY (a))");
        assert_eq!(e.sqlstate(), "42P16");
        let e = err("CREATE TABLE t (a INT NULL PRIMARY KEY)");
        assert_eq!(e.sqlstate(), "42P16");
        let e = err("CREATE TABLE t (a INT NULL, PRIMARY KEY (a))");
        assert_eq!(e.sqlstate(), "42P16");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY, b INT UNIQUE)");
        assert_eq!(e.sqlstate(), "0A000");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY, b INT, UNIQUE (b))");
        assert_eq!(e.sqlstate(), "0A000");
        let e =
            err("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a) (PARTITION 5 < VALUES)");
        assert_eq!(e.sqlstate(), "0A000");
        let e = err(
            "CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a) (PARTITION VALUES <= 5)",
        );
        assert_eq!(e.sqlstate(), "0A000");
        let e = err(
            "CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a) (PARTITION 5 <= VALUES < 5)",
        );
        assert_eq!(e.sqlstate(), "42P16");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a) (PARTITION VALUES)");
        assert_eq!(e.sqlstate(), "42601");
        let e =
            err("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a), HASH (a) PARTITIONS 2");
        assert!(e.message().contains("RANGE must be the last"), "{e}");
        let e = err(
            "CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY HASH (a) PARTITIONS 2 PARTITION BY RANGE (a)",
        );
        assert!(e.message().contains("twice"), "{e}");
        let e = err("CREATE TABLE t (a INT PRIMARY KEY) STORED AS KUDU");
        assert_eq!(e.sqlstate(), "42601");
        assert!(e.message().contains("expected PRIMARY KEY"), "{e}");
        let e = err("CREATE TABLE t");
        assert!(e.message().contains("needs a column list"), "{e}");
        let e = err("CREATE TABLE other.t (a INT PRIMARY KEY)");
        assert_eq!(e.sqlstate(), "0A000");
        let e = err("CREATE TABLE t (a INT NOT NULL NULL PRIMARY KEY)");
        assert_eq!(e.sqlstate(), "42601");
    }
}
