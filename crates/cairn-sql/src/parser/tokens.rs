//! The token pass before parsing: Cairn's short forms that sqlparser cannot take are
//! rewritten into ones it can, and the token tests the statement parsers share.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, Whitespace};

use super::{CairnDialect, ParseError};

/// Tokenizes `sql` and rewrites the two forms the parser cannot take directly:
/// `FROM t AS OF x` becomes `FROM t FOR SYSTEM_TIME AS OF x`, and
/// `EXPLAIN … UPSERT INTO` becomes `EXPLAIN … INSERT OR REPLACE INTO`.
pub(super) fn tokenize(sql: &str) -> Result<Vec<TokenWithSpan>, ParseError> {
    let tokens = Tokenizer::new(&CairnDialect, sql).tokenize_with_location()?;
    let tokens = rewrite_short_as_of(tokens);
    Ok(rewrite_explain_upsert(tokens))
}

fn is_significant(t: &TokenWithSpan) -> bool {
    !matches!(t.token, Token::Whitespace(_))
}

pub(super) fn is_keyword(t: &Token, kw: Keyword) -> bool {
    matches!(t, Token::Word(w) if w.keyword == kw && w.quote_style.is_none())
}

/// Whether `t` is the unquoted word `word` (keyword or not), case-insensitively.
pub(super) fn is_word(t: &Token, word: &str) -> bool {
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
