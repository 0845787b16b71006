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
//! Errors are [`ParseError`]s, each with the SQLSTATE a PostgreSQL client expects.

use std::any::TypeId;
use std::ops::ControlFlow;

use datafusion::error::DataFusionError;
use datafusion::sql::parser::{CopyToSource, DFParser, DFParserBuilder, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    self, ColumnOption, DataType, Expr, Ident, ObjectName, ObjectNamePart, OnConflictAction,
    OnInsert, Query, SqlOption, SqliteOnConflict, TableConstraint, TableFactor, TableVersion,
    VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::{Dialect, PostgreSqlDialect, Precedence};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{IsOptional, Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{
    Token, TokenWithSpan, Tokenizer, TokenizerError, Whitespace,
};

mod copy;
pub(crate) mod functions;
mod subspace;

pub use copy::{CopyFormat, CopyFrom, CopyInput, CopyOptions, CopyTo};
pub use subspace::SubspaceClause;

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

/// One operation of `ALTER TABLE`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum AlterColumn {
    /// `ADD [COLUMN] [IF NOT EXISTS] c type [NULL|NOT NULL] [DEFAULT lit]`.
    Add {
        /// The new column.
        column: ColumnDef,
        /// `IF NOT EXISTS`: an existing column of that name is not an error.
        if_not_exists: bool,
    },
    /// `DROP [COLUMN] [IF EXISTS] c`.
    Drop {
        /// The column.
        name: String,
        /// `IF EXISTS`: a missing column is not an error.
        if_exists: bool,
    },
    /// `RENAME [COLUMN] a TO b`.
    Rename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
    },
    /// `ADD RANGE PARTITION lower <= VALUES < upper` (or `VALUE = x`).
    AddRangePartition {
        /// Lower (inclusive) and upper (exclusive) bound, as in [`RangeBounds`].
        bounds: RangeBounds,
    },
    /// `DROP RANGE PARTITION lower <= VALUES < upper` (or `VALUE = x`).
    DropRangePartition {
        /// Lower (inclusive) and upper (exclusive) bound, as in [`RangeBounds`].
        bounds: RangeBounds,
    },
    /// `ADD SUBSPACE (a, b) [REGIONS n] [TABLETS t]`: hyperspace search on `a, b`.
    AddSubspace {
        /// Attributes, regions and tablets.
        subspace: SubspaceClause,
    },
    /// `DROP SUBSPACE [IF EXISTS] name` (or `(a, b)`, its default name).
    DropSubspace {
        /// The subspace's name.
        name: String,
        /// `IF EXISTS`: a missing subspace is not an error.
        if_exists: bool,
    },
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
// Tokens
// ---------------------------------------------------------------------------------

/// Tokenizes `sql` and rewrites the two forms the parser cannot take directly:
/// `FROM t AS OF x` becomes `FROM t FOR SYSTEM_TIME AS OF x`, and
/// `EXPLAIN … UPSERT INTO` becomes `EXPLAIN … INSERT OR REPLACE INTO`.
fn tokenize(sql: &str) -> Result<Vec<TokenWithSpan>, ParseError> {
    let tokens = Tokenizer::new(&CairnDialect, sql).tokenize_with_location()?;
    let tokens = rewrite_short_as_of(tokens);
    Ok(rewrite_explain_upsert(tokens))
}

fn is_significant(t: &TokenWithSpan) -> bool {
    !matches!(t.token, Token::Whitespace(_))
}

fn is_keyword(t: &Token, kw: Keyword) -> bool {
    matches!(t, Token::Word(w) if w.keyword == kw && w.quote_style.is_none())
}

/// Whether `t` is the unquoted word `word` (keyword or not), case-insensitively.
fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn space(span: datafusion::sql::sqlparser::tokenizer::Span) -> TokenWithSpan {
    TokenWithSpan::new(Token::Whitespace(Whitespace::Space), span)
}

/// `FROM t AS OF x` → `FROM t FOR SYSTEM_TIME AS OF x`. Applied only where `AS OF`
/// follows a table name (the word before it follows `FROM`, `JOIN`, `,` or `.`) and
/// something that can start an expression follows `OF`, so that a column alias named
/// `of` keeps working.
fn rewrite_short_as_of(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig: Vec<usize> = (0..tokens.len())
        .filter(|&i| is_significant(&tokens[i]))
        .collect();
    let mut insert_before = Vec::new();
    for (k, &i) in sig.iter().enumerate() {
        if k < 2 || k + 2 >= sig.len() {
            continue;
        }
        let tok = |j: usize| &tokens[sig[j]].token;
        if !is_keyword(tok(k), Keyword::AS) || !is_keyword(tok(k + 1), Keyword::OF) {
            continue;
        }
        if !matches!(tok(k - 1), Token::Word(_)) {
            continue;
        }
        let before = tok(k - 2);
        let after_table = matches!(before, Token::Comma | Token::Period)
            || is_keyword(before, Keyword::FROM)
            || is_keyword(before, Keyword::JOIN);
        if !after_table {
            continue;
        }
        let next = tok(k + 2);
        let ends_alias = matches!(
            next,
            Token::Comma | Token::RParen | Token::SemiColon | Token::EOF
        ) || [
            Keyword::FROM,
            Keyword::WHERE,
            Keyword::GROUP,
            Keyword::HAVING,
            Keyword::ORDER,
            Keyword::LIMIT,
            Keyword::OFFSET,
            Keyword::FETCH,
            Keyword::UNION,
            Keyword::EXCEPT,
            Keyword::INTERSECT,
            Keyword::JOIN,
            Keyword::INNER,
            Keyword::LEFT,
            Keyword::RIGHT,
            Keyword::FULL,
            Keyword::CROSS,
            Keyword::NATURAL,
            Keyword::ON,
            Keyword::USING,
            Keyword::WINDOW,
            Keyword::INTO,
        ]
        .iter()
        .any(|kw| is_keyword(next, *kw));
        if !ends_alias {
            insert_before.push(i);
        }
    }
    if insert_before.is_empty() {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + 4 * insert_before.len());
    for (i, t) in tokens.into_iter().enumerate() {
        if insert_before.contains(&i) {
            let span = t.span;
            out.push(TokenWithSpan::new(Token::make_keyword("FOR"), span));
            out.push(space(span));
            out.push(TokenWithSpan::new(Token::make_keyword("SYSTEM_TIME"), span));
            out.push(space(span));
        }
        out.push(t);
    }
    out
}

/// `EXPLAIN [ANALYZE] [VERBOSE] [FORMAT f] [(options)] UPSERT INTO` → `… INSERT OR
/// REPLACE INTO`, because DataFusion parses the statement inside EXPLAIN itself.
fn rewrite_explain_upsert(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig: Vec<usize> = (0..tokens.len())
        .filter(|&i| is_significant(&tokens[i]))
        .collect();
    let mut upserts = Vec::new();
    let mut k = 0;
    let mut at_start = true;
    while k < sig.len() {
        let t = &tokens[sig[k]].token;
        if *t == Token::SemiColon {
            at_start = true;
            k += 1;
            continue;
        }
        if at_start && is_keyword(t, Keyword::EXPLAIN) {
            let mut j = k + 1;
            while let Some(&idx) = sig.get(j) {
                let t = &tokens[idx].token;
                if is_keyword(t, Keyword::ANALYZE) || is_keyword(t, Keyword::VERBOSE) {
                    j += 1;
                } else if is_keyword(t, Keyword::FORMAT) {
                    j += 2;
                } else if *t == Token::LParen {
                    let mut depth = 0usize;
                    while let Some(&idx) = sig.get(j) {
                        match tokens[idx].token {
                            Token::LParen => depth += 1,
                            Token::RParen => depth = depth.saturating_sub(1),
                            _ => {}
                        }
                        j += 1;
                        if depth == 0 {
                            break;
                        }
                    }
                } else {
                    break;
                }
            }
            if let Some(&idx) = sig.get(j)
                && is_word(&tokens[idx].token, "UPSERT")
            {
                upserts.push(idx);
            }
            k = j;
        }
        at_start = false;
        k += 1;
    }
    for &idx in upserts.iter().rev() {
        let span = tokens[idx].span;
        let replacement = [
            TokenWithSpan::new(Token::make_keyword("INSERT"), span),
            space(span),
            TokenWithSpan::new(Token::make_keyword("OR"), span),
            space(span),
            TokenWithSpan::new(Token::make_keyword("REPLACE"), span),
        ];
        tokens.splice(idx..=idx, replacement);
    }
    tokens
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

/// Extracts the insert mode and the AS OF time of a statement for DataFusion.
fn finish_query(
    mut statement: DFStatement,
    mode: InsertMode,
) -> Result<CairnStatement, ParseError> {
    if let DFStatement::Statement(s) = &statement
        && let ast::Statement::Insert(insert) = s.as_ref()
        && let Some(OnInsert::OnConflict(c)) = &insert.on
        && matches!(c.action, OnConflictAction::DoUpdate(_))
    {
        if insert.or.is_some() {
            return Err(ParseError::syntax(
                "INSERT OR … cannot be combined with ON CONFLICT DO UPDATE",
            ));
        }
        return Ok(CairnStatement::InsertOnConflictUpdate(Box::new(
            insert.clone(),
        )));
    }
    let insert_mode = match take_insert_mode(&mut statement)? {
        InsertMode::Insert => mode,
        m => m,
    };
    let as_of = strip_as_of(&mut statement)?;
    normalize_update_targets(&mut statement);
    functions::rewrite_functions(&mut statement);
    Ok(CairnStatement::Query {
        statement,
        insert_mode,
        as_of,
    })
}

/// Lower-cases the unquoted column names on the left of `UPDATE … SET col = …` (also
/// inside EXPLAIN). DataFusion normalizes every other identifier but looks these up as
/// written, so `SET FIELD0 = …` failed on a column created as `FIELD0` (stored
/// `field0`), as drivers such as go-ycsb write it.
fn normalize_update_targets(statement: &mut DFStatement) {
    let stmt = match statement {
        DFStatement::Explain(e) => return normalize_update_targets(&mut e.statement),
        DFStatement::Statement(s) => s.as_mut(),
        _ => return,
    };
    let ast::Statement::Update(update) = stmt else {
        return;
    };
    let lower = |name: &mut ast::ObjectName| {
        for part in &mut name.0 {
            if let ast::ObjectNamePart::Identifier(ident) = part
                && ident.quote_style.is_none()
            {
                ident.value = ident.value.to_lowercase();
            }
        }
    };
    for assignment in &mut update.assignments {
        match &mut assignment.target {
            ast::AssignmentTarget::ColumnName(name) => lower(name),
            ast::AssignmentTarget::Tuple(names) => names.iter_mut().for_each(lower),
        }
    }
}

/// Reads and clears the `OR REPLACE` / `OR IGNORE` / `ON CONFLICT` decorations of an
/// INSERT (also inside EXPLAIN), leaving a plain INSERT for DataFusion.
fn take_insert_mode(statement: &mut DFStatement) -> Result<InsertMode, ParseError> {
    match statement {
        DFStatement::Explain(e) => take_insert_mode(&mut e.statement),
        DFStatement::Statement(s) => match s.as_mut() {
            ast::Statement::Insert(insert) => {
                let by_or = match insert.or.take() {
                    None => None,
                    Some(SqliteOnConflict::Replace) => Some(InsertMode::Upsert),
                    Some(SqliteOnConflict::Ignore) => Some(InsertMode::InsertIgnore),
                    Some(other) => {
                        return Err(ParseError::unsupported(format!(
                            "INSERT {other} is not supported: use INSERT, INSERT OR REPLACE (or UPSERT INTO) or INSERT OR IGNORE"
                        )));
                    }
                };
                let by_on = match insert.on.take() {
                    None => None,
                    Some(OnInsert::OnConflict(c)) => match c.action {
                        OnConflictAction::DoNothing => Some(InsertMode::InsertIgnore),
                        OnConflictAction::DoUpdate(_) => {
                            return Err(ParseError::unsupported(
                                "EXPLAIN of INSERT ... ON CONFLICT DO UPDATE is not supported",
                            ));
                        }
                    },
                    Some(OnInsert::DuplicateKeyUpdate(_)) => {
                        return Err(ParseError::unsupported(
                            "ON DUPLICATE KEY UPDATE is not supported: use UPSERT INTO t ... to replace whole rows",
                        ));
                    }
                    Some(_) => {
                        return Err(ParseError::unsupported(
                            "this ON clause of INSERT is not supported: use ON CONFLICT DO NOTHING or UPSERT INTO",
                        ));
                    }
                };
                match (by_or, by_on) {
                    (Some(_), Some(_)) => Err(ParseError::syntax(
                        "combine neither OR REPLACE nor OR IGNORE with ON CONFLICT: write one of them",
                    )),
                    (Some(m), None) | (None, Some(m)) => Ok(m),
                    (None, None) => Ok(InsertMode::Insert),
                }
            }
            _ => Ok(InsertMode::Insert),
        },
        _ => Ok(InsertMode::Insert),
    }
}

/// Collects and removes the table versions (`FOR SYSTEM_TIME AS OF`) of every table.
struct AsOfStripper {
    as_of: Option<Expr>,
}

impl VisitorMut for AsOfStripper {
    type Break = ParseError;

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<ParseError> {
        let TableFactor::Table { version, name, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let expr = match version.take() {
            None => return ControlFlow::Continue(()),
            Some(TableVersion::ForSystemTimeAsOf(e)) | Some(TableVersion::TimestampAsOf(e)) => e,
            Some(other) => {
                return ControlFlow::Break(ParseError::unsupported(format!(
                    "table version '{other}' on {name} is not supported: use FOR SYSTEM_TIME AS OF <timestamp>"
                )));
            }
        };
        match &self.as_of {
            None => self.as_of = Some(expr),
            Some(prev) if *prev == expr => {}
            Some(prev) => {
                return ControlFlow::Break(ParseError::unsupported(format!(
                    "a statement reads at one time only, but it names AS OF {prev} and AS OF {expr}: use the same AS OF expression for every table"
                )));
            }
        }
        ControlFlow::Continue(())
    }
}

/// Removes `FOR SYSTEM_TIME AS OF` from every table of the statement and returns the
/// (single) expression.
fn strip_as_of(statement: &mut DFStatement) -> Result<Option<Expr>, ParseError> {
    let mut v = AsOfStripper { as_of: None };
    strip_as_of_in(statement, &mut v)?;
    Ok(v.as_of)
}

fn strip_as_of_in(statement: &mut DFStatement, v: &mut AsOfStripper) -> Result<(), ParseError> {
    let flow = match statement {
        DFStatement::Statement(s) => s.visit(v),
        DFStatement::Explain(e) => return strip_as_of_in(&mut e.statement, v),
        DFStatement::CopyTo(c) => match &mut c.source {
            CopyToSource::Query(q) => q.visit(v),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        _ => ControlFlow::Continue(()),
    };
    match flow {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
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

// ---------------------------------------------------------------------------------
// CREATE TABLE
// ---------------------------------------------------------------------------------

fn parse_create_table(p: &mut Parser<'_>) -> Result<CreateTable, ParseError> {
    p.expect_keyword_is(Keyword::CREATE)?;
    p.expect_keyword_is(Keyword::TABLE)?;
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = parse_table_name(p)?;

    let (sql_columns, constraints) = if p.peek_token_ref().token == Token::LParen {
        p.parse_columns()?
    } else {
        (vec![], vec![])
    };

    let mut trailing_pk: Option<Vec<String>> = None;
    let mut partitioned = false;
    let mut hash = Vec::new();
    let mut range = None;
    let mut replicas = None;
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
            replicas = parse_table_options(p)?;
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
fn column_def(c: &ast::ColumnDef) -> Result<(ColumnDef, bool), ParseError> {
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
fn parse_bound(p: &mut Parser<'_>) -> Result<Vec<Expr>, ParseError> {
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
fn parse_range_partition(p: &mut Parser<'_>) -> Result<RangeBounds, ParseError> {
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

fn display_bound(b: &[Expr]) -> String {
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

/// `WITH (replicas = n)`; returns the replica count if given.
fn parse_table_options(p: &mut Parser<'_>) -> Result<Option<u32>, ParseError> {
    const KNOWN: &str = "the known options are: replicas (the number of copies of each tablet, an odd number such as 1, 3 or 5)";
    let mut replicas = None;
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
            other => {
                return Err(ParseError::invalid(format!(
                    "unknown table option '{other}': {KNOWN}"
                )));
            }
        }
    }
    Ok(replicas)
}

// ---------------------------------------------------------------------------------
// DROP TABLE / ALTER TABLE
// ---------------------------------------------------------------------------------

fn parse_drop_table(p: &mut Parser<'_>) -> Result<CairnStatement, ParseError> {
    p.expect_keyword_is(Keyword::DROP)?;
    p.expect_keyword_is(Keyword::TABLE)?;
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let names = p
        .parse_comma_separated(|p| p.parse_object_name(false))?
        .iter()
        .map(table_name)
        .collect::<Result<Vec<_>, _>>()?;
    if p.parse_keyword(Keyword::CASCADE) {
        return Err(ParseError::unsupported(
            "DROP TABLE ... CASCADE is not supported: Cairn tables have no dependent objects, drop without CASCADE",
        ));
    }
    let _ = p.parse_keyword(Keyword::RESTRICT);
    Ok(CairnStatement::DropTable { names, if_exists })
}

fn parse_alter_table(p: &mut Parser<'_>) -> Result<CairnStatement, ParseError> {
    p.expect_keyword_is(Keyword::ALTER)?;
    p.expect_keyword_is(Keyword::TABLE)?;
    if p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]) {
        return Err(ParseError::unsupported(
            "ALTER TABLE IF EXISTS is not supported: check that the table exists and run ALTER TABLE without IF EXISTS",
        ));
    }
    let _ = p.parse_keyword(Keyword::ONLY);
    let name = parse_table_name(p)?;
    let mut ops = vec![alter_op(p)?];
    while p.consume_token(&Token::Comma) {
        ops.push(alter_op(p)?);
    }
    Ok(CairnStatement::AlterTable { name, ops })
}

fn alter_op(p: &mut Parser<'_>) -> Result<AlterColumn, ParseError> {
    const HELP: &str = "ALTER TABLE supports ADD [COLUMN] c type [NULL|NOT NULL] [DEFAULT lit], DROP [COLUMN] c, RENAME [COLUMN] a TO b, ADD RANGE PARTITION ..., DROP RANGE PARTITION ..., ADD SUBSPACE (a, ...) [REGIONS n] [TABLETS t] and DROP SUBSPACE name";
    if p.parse_keyword(Keyword::ADD) {
        if p.parse_keywords(&[Keyword::RANGE, Keyword::PARTITION]) {
            return Ok(AlterColumn::AddRangePartition {
                bounds: parse_range_partition(p)?,
            });
        }
        if is_word(&p.peek_token().token, "SUBSPACE") {
            p.next_token();
            return Ok(AlterColumn::AddSubspace {
                subspace: subspace::parse_subspace_clause(p)?,
            });
        }
        let _ = p.parse_keyword(Keyword::COLUMN);
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let t = p.peek_token().token;
        if is_keyword(&t, Keyword::PRIMARY)
            || is_keyword(&t, Keyword::CONSTRAINT)
            || is_keyword(&t, Keyword::UNIQUE)
        {
            return Err(ParseError::unsupported(format!(
                "adding constraints is not supported: {HELP}"
            )));
        }
        let c = p.parse_column_def()?;
        let (column, pk) = column_def(&c)?;
        if pk {
            return Err(ParseError::unsupported(format!(
                "the primary key of a table cannot change, so column '{}' cannot be added as PRIMARY KEY",
                column.name
            )));
        }
        return Ok(AlterColumn::Add {
            column,
            if_not_exists,
        });
    }
    if p.parse_keyword(Keyword::DROP) {
        if p.parse_keywords(&[Keyword::RANGE, Keyword::PARTITION]) {
            return Ok(AlterColumn::DropRangePartition {
                bounds: parse_range_partition(p)?,
            });
        }
        if is_word(&p.peek_token().token, "SUBSPACE") {
            p.next_token();
            let (name, if_exists) = subspace::parse_drop_subspace(p)?;
            return Ok(AlterColumn::DropSubspace { name, if_exists });
        }
        let t = p.peek_token().token;
        if is_keyword(&t, Keyword::CONSTRAINT) || is_keyword(&t, Keyword::PRIMARY) {
            return Err(ParseError::unsupported(format!(
                "dropping constraints is not supported: {HELP}"
            )));
        }
        let _ = p.parse_keyword(Keyword::COLUMN);
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = ident_name(&p.parse_identifier()?);
        if p.parse_keyword(Keyword::CASCADE) {
            return Err(ParseError::unsupported(
                "DROP COLUMN ... CASCADE is not supported: drop without CASCADE",
            ));
        }
        let _ = p.parse_keyword(Keyword::RESTRICT);
        return Ok(AlterColumn::Drop { name, if_exists });
    }
    if p.parse_keyword(Keyword::RENAME) {
        if p.parse_keyword(Keyword::TO) {
            return Err(ParseError::unsupported(format!(
                "renaming a table is not supported: {HELP}"
            )));
        }
        let _ = p.parse_keyword(Keyword::COLUMN);
        let from = ident_name(&p.parse_identifier()?);
        p.expect_keyword_is(Keyword::TO)?;
        let to = ident_name(&p.parse_identifier()?);
        return Ok(AlterColumn::Rename { from, to });
    }
    Err(ParseError::unsupported(format!(
        "unsupported ALTER TABLE operation: found {}; {HELP}",
        found(p)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn one(sql: &str) -> CairnStatement {
        let mut v = parse_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(v.len(), 1, "{sql}");
        v.remove(0)
    }

    fn create(sql: &str) -> CreateTable {
        match one(sql) {
            CairnStatement::CreateTable(c) => c,
            other => panic!("{sql}: {other:?}"),
        }
    }

    pub(super) fn err(sql: &str) -> ParseError {
        match parse_sql(sql) {
            Ok(v) => panic!("{sql} parsed: {v:?}"),
            Err(e) => e,
        }
    }

    fn query(sql: &str) -> (DFStatement, InsertMode, Option<Expr>) {
        match one(sql) {
            CairnStatement::Query {
                statement,
                insert_mode,
                as_of,
            } => (statement, insert_mode, as_of),
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn lit(e: &Expr) -> String {
        e.to_string()
    }

    fn bounds_str(b: &RangeBounds) -> (Option<Vec<String>>, Option<Vec<String>>) {
        (
            b.0.as_ref().map(|v| v.iter().map(lit).collect()),
            b.1.as_ref().map(|v| v.iter().map(lit).collect()),
        )
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

    #[test]
    fn drop_table() {
        assert_eq!(
            one("DROP TABLE a, B"),
            CairnStatement::DropTable {
                names: vec!["a".into(), "b".into()],
                if_exists: false
            }
        );
        assert_eq!(
            one("drop table if exists \"X\" restrict"),
            CairnStatement::DropTable {
                names: vec!["X".into()],
                if_exists: true
            }
        );
        assert_eq!(err("DROP TABLE a CASCADE").sqlstate(), "0A000");
        // Other DROPs go to DataFusion.
        assert!(matches!(one("DROP VIEW v"), CairnStatement::Query { .. }));
    }

    #[test]
    fn alter_table() {
        let s = one(
            "ALTER TABLE T ADD COLUMN IF NOT EXISTS x INT NOT NULL DEFAULT 0, ADD y TEXT, DROP COLUMN z, DROP IF EXISTS w, RENAME COLUMN a TO B, RENAME c TO d",
        );
        let CairnStatement::AlterTable { name, ops } = s else {
            panic!("{s:?}")
        };
        assert_eq!(name, "t");
        assert_eq!(ops.len(), 6);
        match &ops[0] {
            AlterColumn::Add {
                column,
                if_not_exists,
            } => {
                assert!(*if_not_exists);
                assert_eq!(column.name, "x");
                assert!(!column.nullable);
                assert_eq!(column.default.as_ref().map(lit).as_deref(), Some("0"));
            }
            other => panic!("{other:?}"),
        }
        match &ops[1] {
            AlterColumn::Add {
                column,
                if_not_exists,
            } => {
                assert!(!*if_not_exists);
                assert!(column.nullable);
                assert_eq!(column.data_type, DataType::Text);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ops[2],
            AlterColumn::Drop {
                name: "z".into(),
                if_exists: false
            }
        );
        assert_eq!(
            ops[3],
            AlterColumn::Drop {
                name: "w".into(),
                if_exists: true
            }
        );
        assert_eq!(
            ops[4],
            AlterColumn::Rename {
                from: "a".into(),
                to: "b".into()
            }
        );
        assert_eq!(
            ops[5],
            AlterColumn::Rename {
                from: "c".into(),
                to: "d".into()
            }
        );
    }

    #[test]
    fn alter_table_range_partitions() {
        let CairnStatement::AlterTable { ops, .. } = one(
            "ALTER TABLE t ADD RANGE PARTITION 10 <= VALUES < 20, DROP RANGE PARTITION VALUES < 10, ADD RANGE PARTITION VALUE = 7",
        ) else {
            panic!()
        };
        match &ops[0] {
            AlterColumn::AddRangePartition { bounds } => assert_eq!(
                bounds_str(bounds),
                (Some(vec!["10".into()]), Some(vec!["20".into()]))
            ),
            other => panic!("{other:?}"),
        }
        match &ops[1] {
            AlterColumn::DropRangePartition { bounds } => {
                assert_eq!(bounds_str(bounds), (None, Some(vec!["10".into()])))
            }
            other => panic!("{other:?}"),
        }
        match &ops[2] {
            AlterColumn::AddRangePartition { bounds } => assert_eq!(
                bounds_str(bounds),
                (Some(vec!["7".into()]), Some(vec!["7".into()]))
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn alter_table_errors() {
        assert_eq!(err("ALTER TABLE t RENAME TO u").sqlstate(), "0A000");
        assert_eq!(
            err("ALTER TABLE t ALTER COLUMN a SET DEFAULT 1").sqlstate(),
            "0A000"
        );
        assert_eq!(
            err("ALTER TABLE t ADD COLUMN k INT PRIMARY KEY").sqlstate(),
            "0A000"
        );
        assert_eq!(err("ALTER TABLE IF EXISTS t DROP a").sqlstate(), "0A000");
        let e = err("ALTER TABLE t ADD COLUMN");
        assert_eq!(e.sqlstate(), "42601");
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
    fn upsert_and_insert_modes() {
        let (s, m, _) = query("UPSERT INTO t (a, b) VALUES (1, 2)");
        assert_eq!(m, InsertMode::Upsert);
        assert_eq!(s.to_string(), "INSERT INTO t (a, b) VALUES (1, 2)");
        let (s, m, _) = query("upsert into t select * from u");
        assert_eq!(m, InsertMode::Upsert);
        assert_eq!(s.to_string(), "INSERT INTO t SELECT * FROM u");
        let (s, m, _) = query("INSERT OR REPLACE INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Upsert);
        assert_eq!(s.to_string(), "INSERT INTO t VALUES (1)");
        let (s, m, _) = query("INSERT OR IGNORE INTO t VALUES (1)");
        assert_eq!(m, InsertMode::InsertIgnore);
        assert_eq!(s.to_string(), "INSERT INTO t VALUES (1)");
        let (s, m, _) = query("INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        assert_eq!(s.to_string(), "INSERT INTO t VALUES (1)");
        let (_, m, _) = query("INSERT INTO t VALUES (1) ON CONFLICT (a) DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        let (_, m, _) = query("INSERT INTO t VALUES (1) ON CONFLICT ON CONSTRAINT pk DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        let (_, m, _) = query("INSERT INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Insert);
        let (_, m, _) = query("SELECT 1");
        assert_eq!(m, InsertMode::Insert);
        let parsed =
            parse_sql("INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2").unwrap();
        assert!(
            matches!(
                parsed.as_slice(),
                [CairnStatement::InsertOnConflictUpdate(_)]
            ),
            "{parsed:?}"
        );
        let e = err("EXPLAIN INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2");
        assert_eq!(e.sqlstate(), "0A000");
        assert_eq!(
            err("UPSERT INTO t VALUES (1) ON CONFLICT DO NOTHING").sqlstate(),
            "0A000"
        );
        assert_eq!(
            err("UPSERT OR IGNORE INTO t VALUES (1)").sqlstate(),
            "42601"
        );
        assert_eq!(err("INSERT OR ABORT INTO t VALUES (1)").sqlstate(), "0A000");
        assert_eq!(
            err("INSERT OR IGNORE INTO t VALUES (1) ON CONFLICT DO NOTHING").sqlstate(),
            "42601"
        );
    }

    #[test]
    fn explain_keeps_insert_mode() {
        let (s, m, _) = query("EXPLAIN INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING");
        assert_eq!(m, InsertMode::InsertIgnore);
        assert!(matches!(s, DFStatement::Explain(_)));
        let (s, m, _) = query("EXPLAIN UPSERT INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Upsert);
        let DFStatement::Explain(e) = &s else {
            panic!("{s:?}")
        };
        assert_eq!(e.statement.to_string(), "INSERT INTO t VALUES (1)");
        let (_, m, _) = query("EXPLAIN ANALYZE VERBOSE UPSERT INTO t VALUES (1)");
        assert_eq!(m, InsertMode::Upsert);
    }

    #[test]
    fn strips_as_of() {
        let (s, _, as_of) =
            query("SELECT * FROM t FOR SYSTEM_TIME AS OF '2024-01-01 00:00:00' WHERE a = 1");
        assert_eq!(
            as_of.as_ref().map(lit).as_deref(),
            Some("'2024-01-01 00:00:00'")
        );
        assert_eq!(s.to_string(), "SELECT * FROM t WHERE a = 1");
        let (s, _, as_of) = query(
            "SELECT * FROM t FOR SYSTEM_TIME AS OF TIMESTAMP '2024-01-01' AS x JOIN u FOR SYSTEM_TIME AS OF TIMESTAMP '2024-01-01' ON x.a = u.a",
        );
        assert_eq!(
            as_of.as_ref().map(lit).as_deref(),
            Some("TIMESTAMP '2024-01-01'")
        );
        assert_eq!(s.to_string(), "SELECT * FROM t AS x JOIN u ON x.a = u.a");
        // Inside subqueries, CTEs, INSERT ... SELECT and EXPLAIN.
        let (s, _, as_of) = query(
            "WITH c AS (SELECT a FROM t FOR SYSTEM_TIME AS OF 5) SELECT * FROM c WHERE a IN (SELECT a FROM u FOR SYSTEM_TIME AS OF 5)",
        );
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("5"));
        assert!(!s.to_string().contains("SYSTEM_TIME"), "{s}");
        let (s, m, as_of) =
            query("UPSERT INTO t2 SELECT * FROM t FOR SYSTEM_TIME AS OF now() - INTERVAL '1 hour'");
        assert_eq!(m, InsertMode::Upsert);
        assert!(as_of.is_some());
        assert_eq!(s.to_string(), "INSERT INTO t2 SELECT * FROM t");
        let (s, _, as_of) = query("EXPLAIN SELECT * FROM t FOR SYSTEM_TIME AS OF 7");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("7"));
        assert!(!s.to_string().contains("SYSTEM_TIME"), "{s}");
        // Databricks' TIMESTAMP AS OF means the same.
        let (_, _, as_of) = query("SELECT * FROM t TIMESTAMP AS OF '2024-01-01'");
        assert!(as_of.is_some());
        // No AS OF.
        let (_, _, as_of) = query("SELECT * FROM t");
        assert!(as_of.is_none());
        // Two different times.
        let e = err("SELECT * FROM t FOR SYSTEM_TIME AS OF 1, u FOR SYSTEM_TIME AS OF 2");
        assert_eq!(e.sqlstate(), "0A000");
        assert_eq!(err("SELECT * FROM t VERSION AS OF 3").sqlstate(), "0A000");
    }

    #[test]
    fn short_as_of_form() {
        let (s, _, as_of) = query("SELECT * FROM t AS OF '2024-01-01' WHERE a = 1");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("'2024-01-01'"));
        assert_eq!(s.to_string(), "SELECT * FROM t WHERE a = 1");
        let (_, _, as_of) = query("SELECT * FROM s.t AS OF 5, u AS OF 5");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("5"));
        let (_, _, as_of) = query("SELECT * FROM a JOIN t AS OF 5 ON a.x = t.x");
        assert_eq!(as_of.as_ref().map(lit).as_deref(), Some("5"));
        // A column or table alias called "of" is left alone.
        let (s, _, as_of) = query("SELECT a, b AS of FROM t");
        assert!(as_of.is_none());
        assert_eq!(s.to_string(), "SELECT a, b AS of FROM t");
        let (_, _, as_of) = query("SELECT * FROM t AS of WHERE of.a = 1");
        assert!(as_of.is_none());
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
