//! Cairn's SQL statement splitter: turns a string of `;`-separated statements into
//! [`CairnStatement`]s.
//!
//! DataFusion's parser knows neither Cairn's DDL (`PARTITION BY HASH (a) PARTITIONS 4`,
//! range partitions, `WITH (replicas = 3)`), nor `UPSERT INTO`, nor `COPY … FROM` and
//! `COPY … TO STDOUT` (parsed in [`copy`]). So
//! this module drives DataFusion's [`DFParser`] statement by statement: it peeks at the
//! first tokens of each statement and parses the Cairn forms itself (with sqlparser's
//! building blocks, through the public `DFParser::parser` field), and hands everything
//! else to [`DFParser::parse_statement`]. Statements for DataFusion come back with the
//! Cairn-only decorations removed:
//!
//! - the insert mode of `UPSERT INTO`, `INSERT OR REPLACE`, `INSERT OR IGNORE` and
//!   `INSERT … ON CONFLICT DO NOTHING` becomes [`InsertMode`], and the INSERT is left
//!   plain so that DataFusion plans it;
//! - `FROM t FOR SYSTEM_TIME AS OF <expr>` (also `FROM t TIMESTAMP AS OF <expr>` and the
//!   short form `FROM t AS OF <expr>`) is stripped from every table and returned as the
//!   statement's read time (`as_of`).
//!
//! The dialect is PostgreSQL's ([`CairnDialect`] wraps `PostgreSqlDialect`), so
//! identifiers follow PostgreSQL's rules: unquoted names are folded to lower case (as
//! DataFusion does), quoted names are kept as written.
//!
//! One file per kind of statement: `create_table.rs`, `alter_table.rs` (also DROP
//! TABLE), [`copy`], `query.rs` (what goes to DataFusion), and `subspace.rs` for the
//! `SUBSPACE` clause both table statements share; `tokens.rs` rewrites the token
//! stream before any of them runs.
//!
//! Errors are [`ParseError`]s, each with the SQLSTATE a PostgreSQL client expects.

use std::any::TypeId;

use datafusion::error::DataFusionError;
use datafusion::sql::parser::{DFParser, DFParserBuilder, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{self, Expr, Ident, ObjectName, ObjectNamePart};
use datafusion::sql::sqlparser::dialect::{Dialect, PostgreSqlDialect, Precedence};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{IsOptional, Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenizerError};

mod alter_table;
mod copy;
mod create_table;
pub mod functions;
pub mod names;
mod query;
mod subspace;
mod tokens;

pub use alter_table::AlterColumn;
pub use copy::{CopyFormat, CopyFrom, CopyInput, CopyOptions, CopyTo};
pub use create_table::{ColumnDef, CreateTable, HashSpec, RangeBounds, RangeSpec};
pub use subspace::SubspaceClause;

use alter_table::{parse_alter_table, parse_drop_table};
use create_table::parse_create_table;
use query::finish_query;
use tokens::{is_keyword, is_word, tokenize};

/// SQLSTATE of a syntax error.
pub const SQLSTATE_SYNTAX_ERROR: &str = "42601";
/// SQLSTATE of a feature Cairn does not support.
pub const SQLSTATE_FEATURE_NOT_SUPPORTED: &str = "0A000";
/// SQLSTATE of an invalid value (an option, a bucket count, a literal out of range).
pub const SQLSTATE_INVALID_PARAMETER_VALUE: &str = "22023";
/// SQLSTATE of an invalid table definition (no primary key, bad key or partition
/// columns).
pub const SQLSTATE_INVALID_TABLE_DEFINITION: &str = "42P16";
/// SQLSTATE of a literal whose type does not fit its column.
pub const SQLSTATE_DATATYPE_MISMATCH: &str = "42804";

/// What can go wrong while parsing Cairn SQL. Messages say what was wrong and how to
/// fix it; [`ParseError::sqlstate`] gives the PostgreSQL error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The text does not follow the grammar (SQLSTATE 42601).
    #[error("{0}")]
    Syntax(String),
    /// Valid SQL that Cairn does not support (SQLSTATE 0A000).
    #[error("{0}")]
    Unsupported(String),
    /// Well-formed SQL with an invalid value or definition.
    #[error("{message}")]
    Invalid {
        /// What was wrong and how to fix it.
        message: String,
        /// The SQLSTATE: 22023 (invalid value), 42P16 (invalid table definition, e.g.
        /// no primary key) or 42804 (a literal of the wrong type).
        code: &'static str,
    },
}

impl ParseError {
    /// A syntax error (42601).
    pub fn syntax(message: impl Into<String>) -> Self {
        ParseError::Syntax(message.into())
    }
    /// An unsupported feature (0A000).
    pub fn unsupported(message: impl Into<String>) -> Self {
        ParseError::Unsupported(message.into())
    }
    /// An invalid value (22023).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::invalid_with(SQLSTATE_INVALID_PARAMETER_VALUE, message)
    }
    /// An invalid table definition (42P16).
    pub fn invalid_definition(message: impl Into<String>) -> Self {
        Self::invalid_with(SQLSTATE_INVALID_TABLE_DEFINITION, message)
    }
    /// A literal or type that does not fit (42804).
    pub fn type_mismatch(message: impl Into<String>) -> Self {
        Self::invalid_with(SQLSTATE_DATATYPE_MISMATCH, message)
    }
    /// An invalid value or definition with an explicit SQLSTATE.
    pub fn invalid_with(code: &'static str, message: impl Into<String>) -> Self {
        ParseError::Invalid {
            message: message.into(),
            code,
        }
    }

    /// The PostgreSQL SQLSTATE of this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ParseError::Syntax(_) => SQLSTATE_SYNTAX_ERROR,
            ParseError::Unsupported(_) => SQLSTATE_FEATURE_NOT_SUPPORTED,
            ParseError::Invalid { code, .. } => code,
        }
    }

    /// The message, without the SQLSTATE.
    pub fn message(&self) -> &str {
        match self {
            ParseError::Syntax(m) | ParseError::Unsupported(m) => m,
            ParseError::Invalid { message, .. } => message,
        }
    }
}

impl From<ParserError> for ParseError {
    fn from(e: ParserError) -> Self {
        match e {
            ParserError::TokenizerError(m) | ParserError::ParserError(m) => ParseError::Syntax(m),
            ParserError::RecursionLimitExceeded => ParseError::Syntax(
                "the statement is nested too deeply: simplify the expression or split the query"
                    .into(),
            ),
        }
    }
}

impl From<TokenizerError> for ParseError {
    fn from(e: TokenizerError) -> Self {
        ParseError::Syntax(e.to_string())
    }
}

impl From<DataFusionError> for ParseError {
    fn from(e: DataFusionError) -> Self {
        match e.find_root() {
            DataFusionError::SQL(pe, extra) => {
                let mut p = ParseError::from((**pe).clone());
                if let (ParseError::Syntax(m), Some(extra)) = (&mut p, extra) {
                    m.push_str(extra);
                }
                p
            }
            DataFusionError::NotImplemented(m) => ParseError::Unsupported(m.clone()),
            other => ParseError::Syntax(other.to_string()),
        }
    }
}

/// The SQL dialect Cairn parses: PostgreSQL, plus table versioning
/// (`FOR SYSTEM_TIME AS OF`).
///
/// It reports itself as `PostgreSqlDialect` ([`Dialect::dialect`]) so every
/// PostgreSQL-specific branch of sqlparser applies, and delegates all the methods
/// `PostgreSqlDialect` overrides.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CairnDialect;

const PG: PostgreSqlDialect = PostgreSqlDialect {};

impl Dialect for CairnDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<PostgreSqlDialect>()
    }
    fn supports_table_versioning(&self) -> bool {
        true
    }
    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        PG.identifier_quote_style(identifier)
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        PG.is_delimited_identifier_start(ch)
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        PG.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        PG.is_identifier_part(ch)
    }
    fn supports_unicode_string_literal(&self) -> bool {
        PG.supports_unicode_string_literal()
    }
    fn is_reserved_for_identifier(&self, kw: Keyword) -> bool {
        PG.is_reserved_for_identifier(kw)
    }
    fn is_custom_operator_part(&self, ch: char) -> bool {
        PG.is_custom_operator_part(ch)
    }
    fn get_next_precedence(&self, parser: &Parser) -> Option<Result<u8, ParserError>> {
        PG.get_next_precedence(parser)
    }
    fn supports_filter_during_aggregation(&self) -> bool {
        PG.supports_filter_during_aggregation()
    }
    fn supports_group_by_expr(&self) -> bool {
        PG.supports_group_by_expr()
    }
    fn prec_value(&self, prec: Precedence) -> u8 {
        PG.prec_value(prec)
    }
    fn allow_extract_custom(&self) -> bool {
        PG.allow_extract_custom()
    }
    fn allow_extract_single_quotes(&self) -> bool {
        PG.allow_extract_single_quotes()
    }
    fn supports_create_index_with_clause(&self) -> bool {
        PG.supports_create_index_with_clause()
    }
    fn supports_explain_with_utility_options(&self) -> bool {
        PG.supports_explain_with_utility_options()
    }
    fn supports_listen_notify(&self) -> bool {
        PG.supports_listen_notify()
    }
    fn supports_factorial_operator(&self) -> bool {
        PG.supports_factorial_operator()
    }
    fn supports_bitwise_shift_operators(&self) -> bool {
        PG.supports_bitwise_shift_operators()
    }
    fn supports_comment_on(&self) -> bool {
        PG.supports_comment_on()
    }
    fn supports_load_extension(&self) -> bool {
        PG.supports_load_extension()
    }
    fn supports_named_fn_args_with_colon_operator(&self) -> bool {
        PG.supports_named_fn_args_with_colon_operator()
    }
    fn supports_named_fn_args_with_expr_name(&self) -> bool {
        PG.supports_named_fn_args_with_expr_name()
    }
    fn supports_empty_projections(&self) -> bool {
        PG.supports_empty_projections()
    }
    fn supports_nested_comments(&self) -> bool {
        PG.supports_nested_comments()
    }
    fn supports_string_escape_constant(&self) -> bool {
        PG.supports_string_escape_constant()
    }
    fn supports_numeric_literal_underscores(&self) -> bool {
        PG.supports_numeric_literal_underscores()
    }
    fn supports_array_typedef_with_brackets(&self) -> bool {
        PG.supports_array_typedef_with_brackets()
    }
    fn supports_geometric_types(&self) -> bool {
        PG.supports_geometric_types()
    }
    fn supports_set_names(&self) -> bool {
        PG.supports_set_names()
    }
    fn supports_alter_column_type_using(&self) -> bool {
        PG.supports_alter_column_type_using()
    }
    fn supports_notnull_operator(&self) -> bool {
        PG.supports_notnull_operator()
    }
    fn supports_interval_options(&self) -> bool {
        PG.supports_interval_options()
    }
    fn supports_insert_table_alias(&self) -> bool {
        PG.supports_insert_table_alias()
    }
    fn supports_create_table_like_parenthesized(&self) -> bool {
        PG.supports_create_table_like_parenthesized()
    }
    fn supports_select_wildcard_with_alias(&self) -> bool {
        PG.supports_select_wildcard_with_alias()
    }
    fn supports_comma_separated_trim(&self) -> bool {
        PG.supports_comma_separated_trim()
    }
    fn supports_xml_expressions(&self) -> bool {
        PG.supports_xml_expressions()
    }
    fn supports_comment_optimizer_hint(&self) -> bool {
        PG.supports_comment_optimizer_hint()
    }
}

/// One parsed statement.
// Statements are parsed once and moved a few times; boxing the large variants would
// only make matching on them clumsier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum CairnStatement {
    /// `CREATE TABLE` (Cairn's own grammar), optionally `AS SELECT`.
    CreateTable(CreateTable),
    /// `DROP TABLE [IF EXISTS] a, b`.
    DropTable {
        /// The tables to drop (normalized names).
        names: Vec<String>,
        /// Whether a missing table is not an error.
        if_exists: bool,
    },
    /// `ALTER TABLE t <op>, <op>, …`.
    AlterTable {
        /// The table (normalized name).
        name: String,
        /// The changes, in order.
        ops: Vec<AlterColumn>,
    },
    /// `COPY t [(cols)] FROM 'path' | STDIN [WITH (…)]`.
    Copy(CopyFrom),
    /// `COPY t [(cols)] TO STDOUT` or `COPY (query) TO STDOUT`.
    CopyTo(CopyTo),
    /// `CREATE`/`ALTER`/`DROP USER`, `GRANT`, `REVOKE`.
    Dcl(crate::dcl::DclStatement),
    /// `INSERT … ON CONFLICT (key) DO UPDATE SET …` (run by `upsert.rs`).
    InsertOnConflictUpdate(Box<ast::Insert>),
    /// Anything else, for DataFusion to plan (SELECT, INSERT, UPDATE, DELETE, EXPLAIN,
    /// SHOW, SET, DESCRIBE, …), with Cairn-specific decorations removed.
    Query {
        /// The statement DataFusion plans.
        statement: DFStatement,
        /// How an INSERT (also inside EXPLAIN) treats rows whose key exists already;
        /// [`InsertMode::Insert`] for statements that are not INSERTs.
        insert_mode: InsertMode,
        /// The read time of `FOR SYSTEM_TIME AS OF <expr>`, stripped from the tables.
        as_of: Option<Expr>,
    },
}

/// How an INSERT treats a row whose primary key exists already.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InsertMode {
    /// Plain `INSERT`: a duplicate key is an error.
    #[default]
    Insert,
    /// `UPSERT INTO` / `INSERT OR REPLACE`: the new row replaces the old one.
    Upsert,
    /// `INSERT … ON CONFLICT DO NOTHING` / `INSERT OR IGNORE`: the new row is dropped.
    InsertIgnore,
}

/// Parses a string of one or more `;`-separated statements. Empty statements (`;;`)
/// are skipped.
pub fn parse_sql(sql: &str) -> Result<Vec<CairnStatement>, ParseError> {
    let tokens = tokenize(sql)?;
    let mut df = DFParserBuilder::new(tokens)
        .with_dialect(&CairnDialect)
        .build()?;
    let mut out = Vec::new();
    let mut expecting_delimiter = false;
    loop {
        while df.parser.consume_token(&Token::SemiColon) {
            expecting_delimiter = false;
        }
        let next = df.parser.peek_token();
        if next.token == Token::EOF {
            break;
        }
        if expecting_delimiter {
            return Err(ParseError::syntax(format!(
                "unexpected {}{}: separate statements with ';'",
                next.token, next.span.start
            )));
        }
        out.push(parse_statement(&mut df)?);
        expecting_delimiter = true;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------
// Statements
// ---------------------------------------------------------------------------------

fn parse_statement(df: &mut DFParser<'_>) -> Result<CairnStatement, ParseError> {
    let first = df.parser.peek_token().token;
    let second = df.parser.peek_nth_token(1).token;
    if crate::dcl::starts_dcl(&first, &second) {
        return crate::dcl::parse_dcl(&mut df.parser).map(CairnStatement::Dcl);
    }
    if is_keyword(&first, Keyword::CREATE) && is_keyword(&second, Keyword::TABLE) {
        return parse_create_table(&mut df.parser).map(CairnStatement::CreateTable);
    }
    if is_keyword(&first, Keyword::DROP) && is_keyword(&second, Keyword::TABLE) {
        return parse_drop_table(&mut df.parser);
    }
    if is_keyword(&first, Keyword::ALTER) && is_keyword(&second, Keyword::TABLE) {
        return parse_alter_table(&mut df.parser);
    }
    if is_keyword(&first, Keyword::COPY) {
        match copy::cairn_copy(&df.parser) {
            Some(true) => return copy::parse_copy_from(&mut df.parser).map(CairnStatement::Copy),
            Some(false) => return copy::parse_copy_to(&mut df.parser).map(CairnStatement::CopyTo),
            None => {}
        }
    }
    if is_word(&first, "UPSERT") {
        let tok = df.parser.next_token();
        let stmt = df.parser.parse_insert(tok)?;
        if let ast::Statement::Insert(insert) = &stmt {
            if insert.or.is_some() {
                return Err(ParseError::syntax(
                    "UPSERT INTO takes no OR clause: write UPSERT INTO t ... or INSERT OR IGNORE INTO t ...",
                ));
            }
            if insert.on.is_some() {
                return Err(ParseError::unsupported(
                    "UPSERT INTO already replaces rows whose key exists: remove the ON CONFLICT clause",
                ));
            }
        }
        return finish_query(DFStatement::Statement(Box::new(stmt)), InsertMode::Upsert);
    }
    let stmt = df.parse_statement()?;
    finish_query(stmt, InsertMode::Insert)
}

// ---------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------

/// An identifier as DataFusion resolves it: unquoted names folded to lower case.
fn ident_name(id: &Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// A table name: `t`, `public.t` or `cairn.public.t` (Cairn has one schema).
pub(crate) fn table_name(name: &ObjectName) -> Result<String, ParseError> {
    let mut parts = Vec::with_capacity(name.0.len());
    for p in &name.0 {
        match p {
            ObjectNamePart::Identifier(id) => parts.push(ident_name(id)),
            other => {
                return Err(ParseError::syntax(format!(
                    "'{other}' is not a table name: use a plain name"
                )));
            }
        }
    }
    match parts.as_slice() {
        [t] => Ok(t.clone()),
        [s, t] if s == "public" => Ok(t.clone()),
        [c, s, t] if c == "cairn" && s == "public" => Ok(t.clone()),
        _ => Err(ParseError::unsupported(format!(
            "table name {name}: Cairn tables live in cairn.public; write just the table name"
        ))),
    }
}

fn parse_table_name(p: &mut Parser<'_>) -> Result<String, ParseError> {
    let name = p.parse_object_name(false)?;
    table_name(&name)
}

fn parse_column_list(p: &mut Parser<'_>) -> Result<Vec<String>, ParseError> {
    Ok(
        p.parse_parenthesized_column_list(IsOptional::Mandatory, false)?
            .iter()
            .map(ident_name)
            .collect(),
    )
}

fn found(p: &Parser<'_>) -> String {
    let t = p.peek_token();
    match t.token {
        Token::EOF => "the end of the statement".to_string(),
        tok => format!("'{tok}'{}", t.span.start),
    }
}

/// The precedence that stops an expression before a comparison operator, so that
/// `10 <= VALUES` parses `10` only.
fn bound_precedence() -> u8 {
    CairnDialect.prec_value(Precedence::Eq)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn one(sql: &str) -> CairnStatement {
        let mut v = parse_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(v.len(), 1, "{sql}");
        v.remove(0)
    }

    pub(super) fn err(sql: &str) -> ParseError {
        match parse_sql(sql) {
            Ok(v) => panic!("{sql} parsed: {v:?}"),
            Err(e) => e,
        }
    }

    pub(super) fn query(sql: &str) -> (DFStatement, InsertMode, Option<Expr>) {
        match one(sql) {
            CairnStatement::Query {
                statement,
                insert_mode,
                as_of,
            } => (statement, insert_mode, as_of),
            other => panic!("{sql}: {other:?}"),
        }
    }

    pub(super) fn lit(e: &Expr) -> String {
        e.to_string()
    }

    pub(super) fn bounds_str(b: &RangeBounds) -> (Option<Vec<String>>, Option<Vec<String>>) {
        (
            b.0.as_ref().map(|v| v.iter().map(lit).collect()),
            b.1.as_ref().map(|v| v.iter().map(lit).collect()),
        )
    }

    #[test]
    fn splits_statements() {
        let v = parse_sql(
            "CREATE TABLE t (a INT PRIMARY KEY, s TEXT DEFAULT 'x;y');; INSERT INTO t VALUES (1, 'a;b'); SELECT ';' FROM t ;",
        )
        .expect("parse");
        assert_eq!(v.len(), 3);
        assert!(matches!(v[0], CairnStatement::CreateTable(_)));
        let CairnStatement::CreateTable(c) = &v[0] else {
            unreachable!()
        };
        assert_eq!(
            c.columns[1].default.as_ref().map(lit).as_deref(),
            Some("'x;y'")
        );
        match &v[1] {
            CairnStatement::Query {
                statement,
                insert_mode,
                ..
            } => {
                assert_eq!(*insert_mode, InsertMode::Insert);
                assert_eq!(statement.to_string(), "INSERT INTO t VALUES (1, 'a;b')");
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_sql("").expect("empty").is_empty());
        assert!(parse_sql(" ; ;").expect("empty").is_empty());
        let e = err("SELECT 1 SELECT 2");
        assert_eq!(e.sqlstate(), "42601");
        let e = err("SELECT 'unterminated");
        assert_eq!(e.sqlstate(), "42601");
        assert_eq!(
            parse_sql("SHOW TABLES; SET x = 1; DESCRIBE t; EXPLAIN SELECT 1")
                .expect("ok")
                .len(),
            4
        );
    }

    #[test]
    fn other_statements_go_to_datafusion() {
        for sql in [
            "SELECT 1",
            "UPDATE t SET a = 1 WHERE b = 2",
            "DELETE FROM t WHERE a = 1",
            "SHOW TABLES",
            "SET cairn.read_timestamp = '2024-01-01'",
            "DESCRIBE t",
            "EXPLAIN ANALYZE SELECT * FROM t",
            "CREATE VIEW v AS SELECT 1",
            "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/tmp/x.csv'",
            "ALTER VIEW v AS SELECT 2",
        ] {
            assert!(matches!(one(sql), CairnStatement::Query { .. }), "{sql}");
        }
    }

    #[test]
    fn dialect_is_postgres() {
        assert_eq!(CairnDialect.dialect(), TypeId::of::<PostgreSqlDialect>());
        assert!(CairnDialect.supports_table_versioning());
        // PostgreSQL-only syntax still parses.
        let (s, _, _) = query("SELECT a::bigint, 'x' ~ 'y', $1 FROM t");
        assert!(s.to_string().contains("a::BIGINT"), "{s}");
    }

    #[test]
    fn error_codes() {
        assert_eq!(ParseError::syntax("x").sqlstate(), "42601");
        assert_eq!(ParseError::unsupported("x").sqlstate(), "0A000");
        assert_eq!(ParseError::invalid("x").sqlstate(), "22023");
        assert_eq!(ParseError::type_mismatch("x").sqlstate(), "42804");
    }
}
