//! The `SUBSPACE` clauses of hyperspace search (HyperDex §2.3):
//!
//! - `CREATE TABLE … SUBSPACE (a, b) [REGIONS n] [TABLETS t]`: a subspace declared with
//!   the table;
//! - `ALTER TABLE t ADD SUBSPACE (a, b) [REGIONS n] [TABLETS t]`: one added to a table
//!   that may hold rows (built while writes go on);
//! - `ALTER TABLE t DROP SUBSPACE [IF EXISTS] name` or `DROP SUBSPACE (a, b)`: one
//!   dropped, named as `\d` shows it or by its attributes.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::{ParseError, ident_name, is_word, parse_column_list};

/// A subspace as declared: its attributes, and the regions and tablets asked for.
pub type SubspaceClause = (Vec<String>, Option<u32>, Option<u32>);

/// Parses `(a, b) [REGIONS n] [TABLETS t]`, after the word `SUBSPACE`.
pub(super) fn parse_subspace_clause(p: &mut Parser<'_>) -> Result<SubspaceClause, ParseError> {
    let columns = parse_column_list(p)?;
    let mut count = |word: &str, what: &str| -> Result<Option<u32>, ParseError> {
        if !is_word(&p.peek_token().token, word) {
            return Ok(None);
        }
        p.next_token();
        let n = p.parse_literal_uint()?;
        match u32::try_from(n) {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(ParseError::invalid(format!(
                "SUBSPACE (...) {word} {n} is invalid: give a positive number of {what}"
            ))),
        }
    };
    let regions = count("REGIONS", "regions")?;
    let tablets = count("TABLETS", "tablets")?;
    Ok((columns, regions, tablets))
}

/// Parses what follows `DROP SUBSPACE`: `[IF EXISTS] name` or `[IF EXISTS] (a, b)`.
/// Returns the subspace's name (by attributes: its default name) and `IF EXISTS`.
pub(super) fn parse_drop_subspace(p: &mut Parser<'_>) -> Result<(String, bool), ParseError> {
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = if p.peek_token().token == Token::LParen {
        cairn_hyperspace::region::default_subspace_name(&parse_column_list(p)?)
    } else {
        ident_name(&p.parse_identifier()?)
    };
    Ok((name, if_exists))
}
