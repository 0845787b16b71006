//! Statement parameters: `?` placeholders and parameter batches.
//!
//! Flight SQL clients (ADBC, JDBC) write parameters as `?`; Cairn's SQL, like
//! PostgreSQL, numbers them (`$1`, `$2`, ...). [`number_placeholders`] rewrites the
//! first form into the second, leaving string literals, quoted identifiers, comments
//! and dollar-quoted strings alone. Parameter values arrive as Arrow record batches,
//! one column per parameter and one row per execution; [`batch_rows`] turns such a
//! batch into rows of scalars of the types the statement expects.

use std::borrow::Cow;

use arrow::array::ArrayRef;
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use tonic::Status;

use super::status::status_with_state;

/// Rewrites `?` placeholders outside literals, identifiers and comments into `$1`,
/// `$2`, ... in order. SQL without `?` placeholders (including SQL that already uses
/// `$n`) comes back unchanged.
pub fn number_placeholders(sql: &str) -> Cow<'_, str> {
    let b = sql.as_bytes();
    let mut out = String::new();
    // Start of the text not yet copied to `out`.
    let mut copied = 0;
    let mut n = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\'' => {
                // E'...' strings use backslash escapes.
                let escapes =
                    i > 0 && matches!(b[i - 1], b'e' | b'E') && (i < 2 || !is_ident_byte(b[i - 2]));
                i = skip_quoted(b, i, b'\'', escapes);
            }
            b'"' => i = skip_quoted(b, i, b'"', false),
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p + 1);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => i = skip_block_comment(b, i),
            b'$' => i = skip_dollar_quoted(b, i),
            b'?' => {
                n += 1;
                out.push_str(&sql[copied..i]);
                out.push('$');
                out.push_str(&n.to_string());
                i += 1;
                copied = i;
            }
            _ => i += 1,
        }
    }
    if n == 0 {
        return Cow::Borrowed(sql);
    }
    out.push_str(&sql[copied..]);
    Cow::Owned(out)
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// The position after the quoted text starting at `start` (a doubled quote is part
/// of the text).
fn skip_quoted(b: &[u8], start: usize, quote: u8, backslash_escapes: bool) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        if backslash_escapes && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// The position after the (possibly nested) block comment starting at `start`.
fn skip_block_comment(b: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// At a `$`: the position after a dollar-quoted string (`$$...$$`, `$tag$...$tag$`),
/// or just after the `$` when it does not open one (`$1`).
fn skip_dollar_quoted(b: &[u8], start: usize) -> usize {
    let tag_end = b[start + 1..]
        .iter()
        .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
        .map(|p| start + 1 + p);
    let Some(tag_end) = tag_end else {
        return b.len();
    };
    let tag = &b[start..=tag_end];
    let opens = b[tag_end] == b'$'
        && !b[start + 1..tag_end]
            .first()
            .is_some_and(u8::is_ascii_digit);
    if !opens {
        return start + 1;
    }
    let body = tag_end + 1;
    b[body..]
        .windows(tag.len())
        .position(|w| w == tag)
        .map_or(b.len(), |p| body + p + tag.len())
}

/// Casts that fail on values that do not fit instead of turning them into NULL.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: arrow::util::display::FormatOptions::new(),
};

/// The rows of a parameter batch as scalars, one per parameter. Columns are taken in
/// order (their names do not matter) and cast to the parameter types the statement
/// expects (`None`: keep the client's type).
pub fn batch_rows(
    batch: &RecordBatch,
    types: &[Option<DataType>],
) -> Result<Vec<Vec<ScalarValue>>, Status> {
    if batch.num_columns() != types.len() {
        return Err(status_with_state(
            "08P01",
            &format!(
                "the statement has {} parameters but {} were bound",
                types.len(),
                batch.num_columns()
            ),
        ));
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(types.len());
    for (i, (col, want)) in batch.columns().iter().zip(types).enumerate() {
        let col = match want {
            Some(t) if col.data_type() != t => cast_with_options(col, t, &STRICT).map_err(|e| {
                status_with_state(
                    "22P02",
                    &format!(
                        "parameter ${} is {} but the statement expects {t}: {e}",
                        i + 1,
                        col.data_type()
                    ),
                )
            })?,
            _ => col.clone(),
        };
        columns.push(col);
    }
    let mut rows = Vec::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        let mut row = Vec::with_capacity(columns.len());
        for (i, col) in columns.iter().enumerate() {
            let v = ScalarValue::try_from_array(col, r)
                .map_err(|e| status_with_state("22023", &format!("parameter ${}: {e}", i + 1)))?;
            row.push(v);
        }
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn numbers_question_marks() {
        assert_eq!(
            number_placeholders("SELECT * FROM t WHERE a = ? AND b > ?"),
            "SELECT * FROM t WHERE a = $1 AND b > $2"
        );
        assert_eq!(
            number_placeholders("INSERT INTO t VALUES (?,?)"),
            "INSERT INTO t VALUES ($1,$2)"
        );
    }

    #[test]
    fn leaves_literals_identifiers_and_comments_alone() {
        let sql = "SELECT '?', 'it''s ?', \"a?\" -- why?\n FROM t /* ? /* ? */ */ WHERE x = ?";
        assert_eq!(
            number_placeholders(sql),
            "SELECT '?', 'it''s ?', \"a?\" -- why?\n FROM t /* ? /* ? */ */ WHERE x = $1"
        );
        assert_eq!(
            number_placeholders(r"SELECT E'\'?', $$ ? $$, $x$ ? $x$, ?"),
            r"SELECT E'\'?', $$ ? $$, $x$ ? $x$, $1"
        );
    }

    #[test]
    fn unchanged_without_question_marks() {
        let sql = "SELECT $1, $2 FROM t";
        assert!(matches!(number_placeholders(sql), Cow::Borrowed(s) if s == sql));
        assert_eq!(number_placeholders("SELECT 'x"), "SELECT 'x");
        assert_eq!(number_placeholders("SELECT $"), "SELECT $");
        assert_eq!(number_placeholders("SELECT $$ ?"), "SELECT $$ ?");
    }

    #[test]
    fn rows_are_cast_to_parameter_types() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("0", DataType::Int64, true),
                Field::new("1", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![Some(5), None])),
                Arc::new(StringArray::from(vec!["a", "7"])),
            ],
        )
        .unwrap();
        let rows = batch_rows(&batch, &[Some(DataType::Int32), None]).unwrap();
        assert_eq!(
            rows,
            vec![
                vec![
                    ScalarValue::Int32(Some(5)),
                    ScalarValue::Utf8(Some("a".into()))
                ],
                vec![
                    ScalarValue::Int32(None),
                    ScalarValue::Utf8(Some("7".into()))
                ],
            ]
        );
        let e = batch_rows(&batch, &[Some(DataType::Int32)]).unwrap_err();
        assert!(e.message().starts_with("08P01: "), "{e}");
        let e = batch_rows(&batch, &[None, Some(DataType::Int32)]).unwrap_err();
        assert!(e.message().starts_with("22P02: "), "{e}");
    }
}
