//! `COPY`: the statement forms Cairn parses itself.
//!
//! - `COPY t [(cols)] FROM 'path' [options]`: a CSV or Parquet file on the server
//!   (superusers only, as PostgreSQL's `pg_read_server_files`).
//! - `COPY t [(cols)] FROM STDIN [options]`: rows the client streams in PostgreSQL's
//!   text or CSV format (psql's `\copy … from`, psycopg's `cursor.copy()`).
//! - `COPY t [(cols)] TO STDOUT [options]` and `COPY (query) TO STDOUT [options]`: rows
//!   streamed back to the client in text or CSV format (psql's `\copy … to`).
//!
//! `COPY … TO 'file'` stays DataFusion's. Options come in PostgreSQL's two spellings:
//! `WITH (FORMAT csv, HEADER true, DELIMITER ',', NULL '')` and the older
//! `WITH CSV HEADER DELIMITER AS ','` that psql and many scripts still send.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::{ParseError, parse_column_list, parse_table_name};

/// The data formats of COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyFormat {
    /// PostgreSQL's text format: one line per row, fields split by a delimiter (tab),
    /// `\N` for NULL, backslash escapes (`\t`, `\n`, `\\`, …).
    Text,
    /// Comma-separated values (RFC 4180 quoting; an empty unquoted field is NULL).
    Csv,
    /// Apache Parquet (files only).
    Parquet,
}

impl CopyFormat {
    /// The format's name in SQL.
    pub fn name(self) -> &'static str {
        match self {
            CopyFormat::Text => "text",
            CopyFormat::Csv => "csv",
            CopyFormat::Parquet => "parquet",
        }
    }
}

/// How the rows of a COPY are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    /// The format.
    pub format: CopyFormat,
    /// The first line holds column names (`HEADER`; default false).
    pub header: bool,
    /// The field delimiter (`DELIMITER`; default tab for text, `,` for CSV).
    pub delimiter: u8,
    /// The text that stands for NULL (`NULL`; default `\N` for text, empty for CSV).
    pub null: String,
}

impl CopyOptions {
    /// PostgreSQL's defaults for `format`.
    pub fn defaults(format: CopyFormat) -> Self {
        CopyOptions {
            format,
            header: false,
            delimiter: if format == CopyFormat::Text {
                b'\t'
            } else {
                b','
            },
            null: if format == CopyFormat::Text {
                "\\N".into()
            } else {
                String::new()
            },
        }
    }
}

/// Where `COPY … FROM` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyInput {
    /// A file on the server running the SQL front end.
    File(String),
    /// The client's connection (`FROM STDIN`).
    Stdin,
}

/// A parsed `COPY t FROM …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFrom {
    /// Target table (normalized name).
    pub table: String,
    /// Target columns in input order; empty means all columns in table order.
    pub columns: Vec<String>,
    /// Where the rows come from.
    pub input: CopyInput,
    /// Their format.
    pub options: CopyOptions,
}

/// A parsed `COPY … TO STDOUT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyTo {
    /// The query whose rows are sent (`SELECT cols FROM t` for the table form).
    pub query: String,
    /// Their format.
    pub options: CopyOptions,
}

/// What the COPY at the parser's position is, judged from its tokens: `Some(true)` for
/// `COPY … FROM`, `Some(false)` for `COPY … TO STDOUT`, `None` for DataFusion's
/// `COPY … TO 'file'`.
pub(super) fn cairn_copy(p: &Parser<'_>) -> Option<bool> {
    let mut depth = 0usize;
    let mut n = 1;
    loop {
        match &p.peek_nth_token_ref(n).token {
            Token::EOF | Token::SemiColon => return None,
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Word(w) if depth == 0 && w.quote_style.is_none() => {
                if w.keyword == Keyword::FROM {
                    return Some(true);
                }
                if w.keyword == Keyword::TO || w.keyword == Keyword::INTO {
                    let next = &p.peek_nth_token_ref(n + 1).token;
                    let stdout =
                        matches!(next, Token::Word(w) if w.value.eq_ignore_ascii_case("stdout"));
                    return stdout.then_some(false);
                }
            }
            _ => {}
        }
        n += 1;
    }
}

/// Parses `COPY t [(cols)] FROM 'path' | STDIN [options]`.
pub(super) fn parse_copy_from(p: &mut Parser<'_>) -> Result<CopyFrom, ParseError> {
    p.expect_keyword_is(Keyword::COPY)?;
    let table = parse_table_name(p)?;
    let columns = if p.peek_token_ref().token == Token::LParen {
        parse_column_list(p)?
    } else {
        vec![]
    };
    p.expect_keyword_is(Keyword::FROM)?;
    let t = p.next_token();
    let input = match t.token {
        Token::SingleQuotedString(s) | Token::EscapedStringLiteral(s) => CopyInput::File(s),
        Token::Word(w) if w.value.eq_ignore_ascii_case("stdin") => CopyInput::Stdin,
        Token::Word(w) if w.keyword == Keyword::PROGRAM => {
            return Err(ParseError::unsupported(format!(
                "COPY ... FROM PROGRAM is not supported: give a file path on the server or \
                 stream the rows with COPY {table} FROM STDIN"
            )));
        }
        other => {
            return Err(ParseError::syntax(format!(
                "expected a quoted file path or STDIN after COPY {table} FROM, found '{other}'{}",
                t.span.start
            )));
        }
    };
    let given = parse_options(p)?;
    let format = match (&given.format, &input) {
        (Some(f), _) => *f,
        (None, CopyInput::Stdin) => CopyFormat::Text,
        (None, CopyInput::File(path)) => {
            let lower = path.to_lowercase();
            if lower.ends_with(".csv") {
                CopyFormat::Csv
            } else if lower.ends_with(".parquet") || lower.ends_with(".pq") {
                CopyFormat::Parquet
            } else {
                return Err(ParseError::invalid(format!(
                    "cannot tell the format of '{path}' from its extension: add WITH (FORMAT csv), \
                     WITH (FORMAT text) or WITH (FORMAT parquet)"
                )));
            }
        }
    };
    if format == CopyFormat::Parquet && input == CopyInput::Stdin {
        return Err(ParseError::unsupported(
            "COPY ... FROM STDIN reads FORMAT text or csv: load Parquet from a file on the \
             server with COPY t FROM '/path/file.parquet'",
        ));
    }
    Ok(CopyFrom {
        table,
        columns,
        input,
        options: given.resolve(format)?,
    })
}

/// Parses `COPY t [(cols)] TO STDOUT [options]` or `COPY (query) TO STDOUT [options]`.
pub(super) fn parse_copy_to(p: &mut Parser<'_>) -> Result<CopyTo, ParseError> {
    p.expect_keyword_is(Keyword::COPY)?;
    let query = if p.consume_token(&Token::LParen) {
        let q = p.parse_query()?;
        p.expect_token(&Token::RParen)?;
        q.to_string()
    } else {
        let table = parse_table_name(p)?;
        let columns = if p.peek_token_ref().token == Token::LParen {
            parse_column_list(p)?
        } else {
            vec![]
        };
        let list = if columns.is_empty() {
            "*".to_string()
        } else {
            columns
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!("SELECT {list} FROM {}", quote_ident(&table))
    };
    if !p.parse_keyword(Keyword::TO) {
        p.expect_keyword_is(Keyword::INTO)?;
    }
    let _stdout = p.next_token();
    let given = parse_options(p)?;
    let format = given.format.unwrap_or(CopyFormat::Text);
    if format == CopyFormat::Parquet {
        return Err(ParseError::unsupported(
            "COPY ... TO STDOUT writes FORMAT text or csv: write Parquet to a file with \
             COPY ... TO '/path/file.parquet'",
        ));
    }
    Ok(CopyTo {
        query,
        options: given.resolve(format)?,
    })
}

/// A name as a double-quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The options a COPY statement gives (unset ones take the format's defaults).
#[derive(Default)]
struct GivenOptions {
    format: Option<CopyFormat>,
    header: Option<bool>,
    delimiter: Option<u8>,
    null: Option<String>,
}

const OPTIONS: &str = "COPY options are FORMAT text|csv|parquet, HEADER true|false, \
                       DELIMITER 'c' and NULL 'text'";

impl GivenOptions {
    /// Records option `key` = `value`.
    fn set(&mut self, key: &str, value: Option<String>) -> Result<(), ParseError> {
        let twice = || ParseError::syntax(format!("COPY option {key} is given twice"));
        match key {
            "format" => {
                if self.format.is_some() {
                    return Err(twice());
                }
                self.format = Some(match value.as_deref().map(str::to_lowercase).as_deref() {
                    Some("text") => CopyFormat::Text,
                    Some("csv") => CopyFormat::Csv,
                    Some("parquet") => CopyFormat::Parquet,
                    Some("binary") => {
                        return Err(ParseError::unsupported(
                            "COPY FORMAT binary is not supported: use FORMAT text or FORMAT csv",
                        ));
                    }
                    _ => {
                        return Err(ParseError::invalid(format!(
                            "COPY FORMAT {} is not supported: use FORMAT text, csv or parquet",
                            value.unwrap_or_default()
                        )));
                    }
                });
            }
            "header" => {
                if self.header.is_some() {
                    return Err(twice());
                }
                self.header = Some(match value.as_deref().map(str::to_lowercase).as_deref() {
                    None | Some("true" | "on" | "1" | "yes") => true,
                    Some("false" | "off" | "0" | "no") => false,
                    Some("match") => {
                        return Err(ParseError::unsupported(
                            "HEADER MATCH is not supported: use HEADER true",
                        ));
                    }
                    Some(other) => {
                        return Err(ParseError::invalid(format!(
                            "HEADER {other} is invalid: write HEADER true or HEADER false"
                        )));
                    }
                });
            }
            "delimiter" => {
                if self.delimiter.is_some() {
                    return Err(twice());
                }
                let v = value.unwrap_or_default();
                match v.as_bytes() {
                    [b] if v.is_ascii() && !matches!(b, b'\r' | b'\n' | b'\\') => {
                        self.delimiter = Some(*b)
                    }
                    _ => {
                        return Err(ParseError::invalid(format!(
                            "DELIMITER '{v}' is invalid: the delimiter is one ASCII character \
                             other than a newline or backslash, e.g. DELIMITER ','"
                        )));
                    }
                }
            }
            "null" => {
                if self.null.is_some() {
                    return Err(twice());
                }
                let v = value.unwrap_or_default();
                if v.contains(['\r', '\n']) {
                    return Err(ParseError::invalid(
                        "the NULL marker of COPY cannot contain a newline",
                    ));
                }
                self.null = Some(v);
            }
            "quote" | "escape" => {
                if value.as_deref() != Some("\"") {
                    return Err(ParseError::unsupported(format!(
                        "COPY {} other than '\"' is not supported",
                        key.to_uppercase()
                    )));
                }
            }
            "encoding" => {
                let v = value
                    .unwrap_or_default()
                    .to_lowercase()
                    .replace(['-', '_'], "");
                if v != "utf8" {
                    return Err(ParseError::unsupported(
                        "COPY reads and writes UTF8 only: convert the data or write ENCODING 'UTF8'",
                    ));
                }
            }
            "freeze" => {}
            other => {
                return Err(ParseError::invalid(format!(
                    "unknown COPY option '{other}': {OPTIONS}"
                )));
            }
        }
        Ok(())
    }

    /// The options in effect for `format`, checked against it.
    fn resolve(self, format: CopyFormat) -> Result<CopyOptions, ParseError> {
        if format == CopyFormat::Parquet
            && (self.header.is_some() || self.delimiter.is_some() || self.null.is_some())
        {
            return Err(ParseError::invalid(
                "HEADER, DELIMITER and NULL apply to text and CSV only: remove them for FORMAT parquet",
            ));
        }
        let mut o = CopyOptions::defaults(format);
        if let Some(h) = self.header {
            o.header = h;
        }
        if let Some(d) = self.delimiter {
            o.delimiter = d;
        }
        if let Some(n) = self.null {
            o.null = n;
        }
        if format == CopyFormat::Csv && o.delimiter == b'"' {
            return Err(ParseError::invalid(
                "the CSV delimiter cannot be the quote character '\"'",
            ));
        }
        if o.null.as_bytes().contains(&o.delimiter) {
            return Err(ParseError::invalid(
                "the NULL marker of COPY cannot contain the delimiter",
            ));
        }
        Ok(o)
    }
}

/// Parses the options after the source or target: `[WITH] (name [value], …)` or the
/// older keyword list (`[WITH] [BINARY] [DELIMITER [AS] 'c'] [NULL [AS] 'n'] [CSV
/// [HEADER] [QUOTE [AS] 'q'] [ESCAPE [AS] 'e']]`).
fn parse_options(p: &mut Parser<'_>) -> Result<GivenOptions, ParseError> {
    let mut given = GivenOptions::default();
    let with = p.parse_keyword(Keyword::WITH);
    if p.consume_token(&Token::LParen) {
        loop {
            let nt = p.next_token();
            let Token::Word(w) = &nt.token else {
                return Err(ParseError::syntax(format!(
                    "expected a COPY option name, found '{}'{}: {OPTIONS}",
                    nt.token, nt.span.start
                )));
            };
            let key = w.value.to_lowercase();
            let _ = p.consume_token(&Token::Eq);
            let value = match p.peek_token_ref().token {
                Token::Comma | Token::RParen => None,
                _ => Some(option_value(p, &key)?),
            };
            given.set(&key, value)?;
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
        p.expect_token(&Token::RParen)?;
        return Ok(given);
    }
    // The keyword list of PostgreSQL before 9.0.
    loop {
        let t = p.peek_token_ref().token.clone();
        let Token::Word(w) = t else {
            break;
        };
        let key = w.value.to_lowercase();
        p.next_token();
        match key.as_str() {
            "binary" => given.set("format", Some("binary".into()))?,
            "csv" => given.set("format", Some("csv".into()))?,
            "header" => given.set("header", None)?,
            "delimiter" | "null" | "quote" | "escape" | "encoding" => {
                let _ = p.parse_keyword(Keyword::AS);
                let v = option_value(p, &key)?;
                given.set(&key, Some(v))?;
            }
            "force" => {
                return Err(ParseError::unsupported(
                    "COPY FORCE QUOTE / FORCE NOT NULL is not supported",
                ));
            }
            other => {
                return Err(ParseError::syntax(format!(
                    "unexpected '{other}' in the options of COPY: {OPTIONS}"
                )));
            }
        }
    }
    let _ = with;
    Ok(given)
}

/// The value of option `key`: a word, a quoted string or a number.
fn option_value(p: &mut Parser<'_>, key: &str) -> Result<String, ParseError> {
    let vt = p.next_token();
    Ok(match vt.token {
        Token::Word(w) => w.value,
        Token::SingleQuotedString(s) | Token::EscapedStringLiteral(s) => s,
        Token::Number(n, _) => n,
        other => {
            return Err(ParseError::syntax(format!(
                "unexpected '{other}' as the value of COPY option {key}: {OPTIONS}"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::CairnStatement;
    use super::super::tests::{err, one};
    use super::*;

    fn from(sql: &str) -> CopyFrom {
        match one(sql) {
            CairnStatement::Copy(c) => c,
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn to(sql: &str) -> CopyTo {
        match one(sql) {
            CairnStatement::CopyTo(c) => c,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn copy_from_a_file() {
        assert_eq!(
            from("COPY lineitem FROM '/data/lineitem.parquet'"),
            CopyFrom {
                table: "lineitem".into(),
                columns: vec![],
                input: CopyInput::File("/data/lineitem.parquet".into()),
                options: CopyOptions::defaults(CopyFormat::Parquet),
            }
        );
        let c = from("COPY t (a, B) FROM '/x/y.txt' WITH (FORMAT csv, HEADER true, DELIMITER '|')");
        assert_eq!(c.columns, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(c.input, CopyInput::File("/x/y.txt".into()));
        assert_eq!(
            c.options,
            CopyOptions {
                format: CopyFormat::Csv,
                header: true,
                delimiter: b'|',
                null: String::new(),
            }
        );
        let c = from("COPY t FROM 'a.CSV' (HEADER)");
        assert!(c.options.header);
        assert_eq!(c.options.format, CopyFormat::Csv);
        assert_eq!(err("COPY t FROM 'a.txt'").sqlstate(), "22023");
        assert_eq!(err("COPY t FROM PROGRAM 'ls'").sqlstate(), "0A000");
        let e = err("COPY t FROM 'a.csv' WITH (QUOTE '''')");
        assert_eq!(e.sqlstate(), "0A000", "{e}");
        let e = err("COPY t FROM 'a.csv' WITH (COLOUR red)");
        assert!(e.message().contains("unknown COPY option 'colour'"), "{e}");
        for bad in [
            "COPY t FROM 'a.csv' WITH (DELIMITER '||')",
            "COPY t FROM 'a.parquet' WITH (HEADER true)",
            "COPY t FROM 'a' WITH (FORMAT json)",
            "COPY t FROM 'a.csv' WITH (NULL 'x,y')",
        ] {
            assert_eq!(err(bad).sqlstate(), "22023", "{bad}");
        }
        assert_eq!(
            err("COPY t FROM 'a' WITH (FORMAT csv, FORMAT csv)").sqlstate(),
            "42601"
        );
    }

    #[test]
    fn copy_from_stdin() {
        let c = from("COPY t FROM STDIN");
        assert_eq!(c.input, CopyInput::Stdin);
        assert_eq!(c.options, CopyOptions::defaults(CopyFormat::Text));
        assert_eq!(c.options.delimiter, b'\t');
        assert_eq!(c.options.null, "\\N");
        // What psql's \copy and psycopg send.
        let c = from("COPY t (a, b) FROM STDIN WITH (FORMAT csv, HEADER)");
        assert_eq!(c.options.format, CopyFormat::Csv);
        assert!(c.options.header);
        let c = from("copy t from stdin with csv header delimiter as ';' null as 'NA'");
        assert_eq!(
            c.options,
            CopyOptions {
                format: CopyFormat::Csv,
                header: true,
                delimiter: b';',
                null: "NA".into(),
            }
        );
        let c = from("COPY t FROM STDIN DELIMITER '|'");
        assert_eq!(c.options.format, CopyFormat::Text);
        assert_eq!(c.options.delimiter, b'|');
        assert_eq!(err("COPY t FROM STDIN BINARY").sqlstate(), "0A000");
        assert_eq!(err("COPY t FROM STDIN (FORMAT binary)").sqlstate(), "0A000");
        assert_eq!(
            err("COPY t FROM STDIN (FORMAT parquet)").sqlstate(),
            "0A000"
        );
        assert_eq!(
            err("COPY t FROM STDIN (ENCODING 'LATIN1')").sqlstate(),
            "0A000"
        );
        assert_eq!(
            err("COPY t FROM STDIN WITH CSV FORCE NOT NULL a").sqlstate(),
            "0A000"
        );
        assert!(
            from("COPY t FROM STDIN (ENCODING 'UTF8', FREEZE)")
                .options
                .format
                == CopyFormat::Text
        );
    }

    #[test]
    fn copy_to_stdout() {
        let c = to("COPY t TO STDOUT");
        assert_eq!(c.query, "SELECT * FROM \"t\"");
        assert_eq!(c.options, CopyOptions::defaults(CopyFormat::Text));
        let c = to("COPY T (a, \"B\") TO STDOUT WITH (FORMAT csv, HEADER)");
        assert_eq!(c.query, "SELECT \"a\", \"B\" FROM \"t\"");
        assert_eq!(c.options.format, CopyFormat::Csv);
        assert!(c.options.header);
        let c = to("COPY (SELECT a, count(*) FROM t GROUP BY a) TO STDOUT CSV");
        assert_eq!(c.query, "SELECT a, count(*) FROM t GROUP BY a");
        assert_eq!(c.options.format, CopyFormat::Csv);
        assert_eq!(err("COPY t TO STDOUT (FORMAT parquet)").sqlstate(), "0A000");
        // COPY ... TO a file is DataFusion's.
        assert!(matches!(
            one("COPY t TO '/tmp/out.csv'"),
            CairnStatement::Query { .. }
        ));
        assert!(matches!(
            one("COPY (SELECT a FROM t) TO '/tmp/out.csv'"),
            CairnStatement::Query { .. }
        ));
    }
}
