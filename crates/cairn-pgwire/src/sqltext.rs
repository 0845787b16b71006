//! A small PostgreSQL lexer: splits a query string into statements and reads the first
//! words of one, so that the front end can answer session statements (`SET`, `SHOW`,
//! `BEGIN`, ...) itself and hand everything else to the SQL engine one statement at a
//! time.
//!
//! It knows just enough of the lexical grammar not to be fooled by a `;` or a keyword
//! inside a string (`'…'`, `E'…'`, `$tag$…$tag$`), a quoted identifier (`"…"`) or a
//! comment (`-- …`, nested `/* … */`). It never fails: unterminated strings or
//! comments simply run to the end of the text, and the engine's parser reports them.

/// One token of a statement, as far as the front end needs to tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An unquoted word (keyword or identifier), folded to lower case.
    Word(String),
    /// A quoted identifier, as written between the quotes.
    Quoted(String),
    /// A string literal's value (quotes and escapes removed).
    Str(String),
    /// A number, as written.
    Number(String),
    /// Any other character (operators, punctuation).
    Punct(char),
}

impl Tok {
    /// The token's text: a word in lower case, a quoted identifier or a string's
    /// value without quotes, a number or punctuation as written.
    pub(crate) fn text(&self) -> String {
        match self {
            Tok::Word(s) | Tok::Quoted(s) | Tok::Str(s) | Tok::Number(s) => s.clone(),
            Tok::Punct(c) => c.to_string(),
        }
    }

    /// Whether this is the unquoted word `w` (given in lower case).
    pub(crate) fn is_word(&self, w: &str) -> bool {
        matches!(self, Tok::Word(s) if s == w)
    }
}

/// What the scanner found at a position.
enum Lexeme {
    /// Whitespace or a comment.
    Blank,
    /// A statement separator.
    Semicolon,
    /// Anything else.
    Token(Tok),
}

/// Splits `sql` into statements at top-level semicolons. Statements are trimmed;
/// empty ones (only whitespace and comments) are dropped.
pub(crate) fn split_statements(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut has_token = false;
    let mut pos = 0;
    while pos < sql.len() {
        let (lexeme, next) = scan(sql, pos);
        match lexeme {
            Lexeme::Semicolon => {
                if has_token {
                    out.push(sql[start..pos].trim());
                }
                start = next;
                has_token = false;
            }
            Lexeme::Token(_) => has_token = true,
            Lexeme::Blank => {}
        }
        pos = next;
    }
    if has_token {
        out.push(sql[start..].trim());
    }
    out
}

/// The tokens of one statement (comments and whitespace skipped), at most `limit`.
pub(crate) fn tokens(sql: &str, limit: usize) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < sql.len() && out.len() < limit {
        let (lexeme, next) = scan(sql, pos);
        match lexeme {
            Lexeme::Token(t) => out.push(t),
            Lexeme::Semicolon => out.push(Tok::Punct(';')),
            Lexeme::Blank => {}
        }
        pos = next;
    }
    out
}

/// The raw text of every token of `sql` after the first `skip` tokens, as written
/// (used to keep a `SET` value's original spelling).
pub(crate) fn rest_after(sql: &str, skip: usize) -> &str {
    let mut pos = 0;
    let mut seen = 0;
    while pos < sql.len() {
        let (lexeme, next) = scan(sql, pos);
        if let Lexeme::Token(_) | Lexeme::Semicolon = lexeme {
            if seen == skip {
                return sql[pos..].trim();
            }
            seen += 1;
        }
        pos = next;
    }
    ""
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || !c.is_ascii() && !c.is_whitespace()
}

fn is_ident_part(c: char) -> bool {
    is_ident_start(c) || c.is_ascii_digit() || c == '$'
}

/// Scans one lexeme starting at byte `pos` (a char boundary); returns it and the
/// position after it.
fn scan(sql: &str, pos: usize) -> (Lexeme, usize) {
    let rest = &sql[pos..];
    let mut chars = rest.char_indices();
    let Some((_, c)) = chars.next() else {
        return (Lexeme::Blank, sql.len());
    };
    let clen = c.len_utf8();
    if c.is_whitespace() {
        return (Lexeme::Blank, pos + clen);
    }
    if c == ';' {
        return (Lexeme::Semicolon, pos + 1);
    }
    if rest.starts_with("--") {
        let end = rest.find('\n').map(|i| pos + i + 1).unwrap_or(sql.len());
        return (Lexeme::Blank, end);
    }
    if rest.starts_with("/*") {
        let mut depth = 0usize;
        let bytes = rest.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i..].starts_with(b"/*") {
                depth += 1;
                i += 2;
            } else if bytes[i..].starts_with(b"*/") {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return (Lexeme::Blank, pos + i);
                }
            } else {
                i += 1;
            }
        }
        return (Lexeme::Blank, sql.len());
    }
    if c == '\'' {
        let (value, end) = scan_quoted(sql, pos, '\'', false);
        return (Lexeme::Token(Tok::Str(value)), end);
    }
    if (c == 'e' || c == 'E') && rest[clen..].starts_with('\'') {
        let (value, end) = scan_quoted(sql, pos + clen, '\'', true);
        return (Lexeme::Token(Tok::Str(value)), end);
    }
    if c == '"' {
        let (value, end) = scan_quoted(sql, pos, '"', false);
        return (Lexeme::Token(Tok::Quoted(value)), end);
    }
    if c == '$' {
        // `$tag$ … $tag$` (the tag may be empty); `$1` is a parameter.
        let tag_len = rest[1..]
            .char_indices()
            .find(|&(i, ch)| {
                !(if i == 0 {
                    is_ident_start(ch)
                } else {
                    is_ident_part(ch) && ch != '$'
                })
            })
            .map(|(i, _)| i)
            .unwrap_or(rest.len() - 1);
        if rest[1 + tag_len..].starts_with('$') {
            let delim = &rest[..tag_len + 2];
            let body_start = pos + delim.len();
            let (value, end) = match sql[body_start..].find(delim) {
                Some(i) => (
                    sql[body_start..body_start + i].to_string(),
                    body_start + i + delim.len(),
                ),
                None => (sql[body_start..].to_string(), sql.len()),
            };
            return (Lexeme::Token(Tok::Str(value)), end);
        }
        let end = rest[1..]
            .char_indices()
            .find(|&(_, ch)| !ch.is_ascii_digit())
            .map(|(i, _)| pos + 1 + i)
            .unwrap_or(sql.len());
        return (Lexeme::Token(Tok::Punct('$')), end);
    }
    if is_ident_start(c) {
        let end = rest
            .char_indices()
            .find(|&(_, ch)| !is_ident_part(ch))
            .map(|(i, _)| pos + i)
            .unwrap_or(sql.len());
        let word = &sql[pos..end];
        return (Lexeme::Token(Tok::Word(word.to_lowercase())), end);
    }
    if c.is_ascii_digit() || c == '.' && rest[1..].starts_with(|d: char| d.is_ascii_digit()) {
        let end = rest
            .char_indices()
            .find(|&(_, ch)| !(ch.is_ascii_alphanumeric() || ch == '.' || ch == '_'))
            .map(|(i, _)| pos + i)
            .unwrap_or(sql.len());
        let n = &sql[pos..end];
        return (Lexeme::Token(Tok::Number(n.to_string())), end);
    }
    (Lexeme::Token(Tok::Punct(c)), pos + clen)
}

/// Scans a quoted string or identifier whose opening quote is at `pos`. A doubled quote
/// stands for one; with `backslash`, `\` escapes the next character (`E'…'`).
fn scan_quoted(sql: &str, pos: usize, quote: char, backslash: bool) -> (String, usize) {
    let mut value = String::new();
    let mut iter = sql[pos + 1..].char_indices().peekable();
    while let Some((i, ch)) = iter.next() {
        if backslash && ch == '\\' {
            if let Some((_, esc)) = iter.next() {
                value.push(match esc {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    other => other,
                });
            }
            continue;
        }
        if ch == quote {
            if let Some(&(_, next)) = iter.peek()
                && next == quote
            {
                value.push(quote);
                iter.next();
                continue;
            }
            return (value, pos + 1 + i + 1);
        }
        value.push(ch);
    }
    (value, sql.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_top_level_semicolons_only() {
        let sql = "select ';' ; select \"a;b\" from t -- c;d\n; /* x; /* y; */ z; */ select $$;$$;\
                   select $f$ ; $$ ; $f$; select E'\\';' ;; ";
        assert_eq!(
            split_statements(sql),
            vec![
                "select ';'",
                "select \"a;b\" from t -- c;d",
                "/* x; /* y; */ z; */ select $$;$$",
                "select $f$ ; $$ ; $f$",
                "select E'\\';'",
            ]
        );
    }

    #[test]
    fn empty_and_comment_only_statements_are_dropped() {
        assert!(split_statements("").is_empty());
        assert!(split_statements(" ; ;\n").is_empty());
        assert!(split_statements("-- nothing\n/* at all */").is_empty());
        assert_eq!(split_statements("select 1"), vec!["select 1"]);
    }

    #[test]
    fn parameters_are_not_dollar_quotes() {
        assert_eq!(
            split_statements("select $1, $2; select 3"),
            vec!["select $1, $2", "select 3"]
        );
    }

    #[test]
    fn unterminated_text_runs_to_the_end() {
        assert_eq!(
            split_statements("select 'abc; def"),
            vec!["select 'abc; def"]
        );
        assert_eq!(
            split_statements("select /* abc; def"),
            vec!["select /* abc; def"]
        );
    }

    #[test]
    fn tokens_fold_words_and_unquote_strings() {
        assert_eq!(
            tokens("SET Application_Name TO 'It''s'", 10),
            vec![
                Tok::Word("set".into()),
                Tok::Word("application_name".into()),
                Tok::Word("to".into()),
                Tok::Str("It's".into()),
            ]
        );
        assert_eq!(
            tokens("set \"X\".y = 1.5", 10),
            vec![
                Tok::Word("set".into()),
                Tok::Quoted("X".into()),
                Tok::Punct('.'),
                Tok::Word("y".into()),
                Tok::Punct('='),
                Tok::Number("1.5".into()),
            ]
        );
        assert_eq!(tokens("a b c", 2).len(), 2);
    }

    #[test]
    fn rest_after_keeps_the_original_text() {
        assert_eq!(rest_after("SET search_path TO a, \"B\"", 3), "a, \"B\"");
        assert_eq!(rest_after("SET x", 5), "");
    }
}
