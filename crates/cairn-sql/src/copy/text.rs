//! PostgreSQL's COPY text format, read into batches of text columns.
//!
//! One row per line (`\n`, `\r\n` or `\r` ends it); fields are split by the delimiter
//! (a tab by default); a field that is exactly the NULL marker (`\N` by default) is
//! NULL; backslash escapes stand for the delimiter, backslash and control characters
//! (`\b \f \n \r \t \v`), and bytes in octal (`\101`) or hex (`\x41`). A line that is
//! just `\.` ends the data, as in PostgreSQL. The values are text; the caller casts
//! them to the table's column types.

use std::io::BufRead;
use std::sync::Arc;

use arrow::array::{ArrayRef, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use crate::error::{Result, SqlError};
use crate::parser::CopyOptions;

/// Reads rows of the text format from `r`.
pub(crate) struct TextReader<R> {
    r: R,
    delimiter: u8,
    null: Vec<u8>,
    columns: usize,
    /// Whether a header line is still to be skipped.
    skip_header: bool,
    /// The last line number read (1-based), for messages.
    line: u64,
    /// Whether `\.` or the end of the input was seen.
    done: bool,
    buf: Vec<u8>,
}

impl<R: BufRead> TextReader<R> {
    /// A reader of rows with `columns` fields each.
    pub(crate) fn new(r: R, options: &CopyOptions, columns: usize) -> Self {
        TextReader {
            r,
            delimiter: options.delimiter,
            null: options.null.as_bytes().to_vec(),
            columns,
            skip_header: options.header,
            line: 0,
            done: false,
            buf: Vec::new(),
        }
    }

    /// Reads the next line into `buf`; returns where it ends (without its line end),
    /// or `None` at the end of the data.
    fn next_line(&mut self) -> Result<Option<usize>> {
        if self.done {
            return Ok(None);
        }
        self.buf.clear();
        let n = self
            .r
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| SqlError::other("08P01", format!("reading COPY data: {e}")))?;
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        self.line += 1;
        let mut end = self.buf.len();
        if self.buf[..end].ends_with(b"\n") {
            end -= 1;
        }
        if self.buf[..end].ends_with(b"\r") {
            end -= 1;
        }
        if &self.buf[..end] == b"\\." {
            self.done = true;
            return Ok(None);
        }
        Ok(Some(end))
    }

    /// Up to `max_rows` rows as a batch of nullable text columns (named `c0`, `c1`,
    /// …), or `None` when the data has ended.
    pub(crate) fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        if self.skip_header {
            self.skip_header = false;
            let _ = self.next_line()?;
        }
        let mut builders: Vec<StringBuilder> =
            (0..self.columns).map(|_| StringBuilder::new()).collect();
        let mut rows = 0;
        let (delimiter, columns) = (self.delimiter, self.columns);
        let null = std::mem::take(&mut self.null);
        let result = (|| {
            while rows < max_rows {
                let Some(end) = self.next_line()? else {
                    break;
                };
                let line = &self.buf[..end];
                let line_no = self.line;
                let fields = split(line, delimiter);
                if fields.len() != columns {
                    return Err(SqlError::other(
                        "22P04",
                        format!(
                            "line {line_no} of the COPY data has {} fields, the table's COPY \
                             takes {columns} ({}); check the delimiter (a tab unless DELIMITER \
                             says otherwise) or use FORMAT csv",
                            fields.len(),
                            if fields.len() > columns {
                                "extra data after the last expected column"
                            } else {
                                "missing data for a column"
                            }
                        ),
                    ));
                }
                for (b, f) in builders.iter_mut().zip(fields) {
                    if f == null.as_slice() {
                        b.append_null();
                    } else {
                        let v = unescape(f);
                        let s = std::str::from_utf8(&v).map_err(|_| {
                            SqlError::other(
                                "22021",
                                format!(
                                    "line {line_no} of the COPY data is not valid UTF-8: send \
                                     UTF-8 text (client_encoding UTF8)"
                                ),
                            )
                        })?;
                        b.append_value(s);
                    }
                }
                rows += 1;
            }
            Ok(())
        })();
        self.null = null;
        result?;
        if rows == 0 {
            return Ok(None);
        }
        let fields: Vec<Field> = (0..self.columns)
            .map(|i| Field::new(format!("c{i}"), DataType::Utf8, true))
            .collect();
        let arrays: Vec<ArrayRef> = builders
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        Ok(Some(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            arrays,
        )?))
    }
}

/// The raw (still escaped) fields of a line: split at every delimiter that is not
/// escaped by a backslash.
fn split(line: &[u8], delimiter: u8) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b if b == delimiter => {
                out.push(&line[start..i]);
                start = i + 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    out.push(&line[start.min(line.len())..]);
    out
}

/// A field with its backslash escapes resolved.
fn unescape(f: &[u8]) -> Vec<u8> {
    if !f.contains(&b'\\') {
        return f.to_vec();
    }
    let mut out = Vec::with_capacity(f.len());
    let mut i = 0;
    while i < f.len() {
        if f[i] != b'\\' || i + 1 == f.len() {
            out.push(f[i]);
            i += 1;
            continue;
        }
        let c = f[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = u32::from(c - b'0');
                for _ in 0..2 {
                    match f.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0xff) as u8);
            }
            b'x' if f.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                let mut v = 0u8;
                for _ in 0..2 {
                    match f.get(i).and_then(|d| (*d as char).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d as u8;
                            i += 1;
                        }
                        None => break,
                    }
                }
                out.push(v);
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, StringArray};

    use super::*;
    use crate::parser::CopyFormat;

    fn read(data: &str, options: &CopyOptions, columns: usize) -> Result<Vec<Vec<Option<String>>>> {
        let mut r = TextReader::new(data.as_bytes(), options, columns);
        let mut rows = Vec::new();
        while let Some(b) = r.next_batch(2)? {
            for i in 0..b.num_rows() {
                rows.push(
                    (0..columns)
                        .map(|c| {
                            let a = b.column(c).as_any().downcast_ref::<StringArray>().unwrap();
                            (!a.is_null(i)).then(|| a.value(i).to_string())
                        })
                        .collect(),
                );
            }
        }
        Ok(rows)
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn reads_fields_nulls_and_escapes() {
        let o = CopyOptions::defaults(CopyFormat::Text);
        let rows = read(
            "1\tann\t\\N\n2\ta\\tb\\nc\\\\d\t\\101\\x42\r\n3\t\t\\\\N\n\\.\n4\tignored\tx\n",
            &o,
            3,
        )
        .unwrap();
        assert_eq!(
            rows,
            vec![
                vec![s("1"), s("ann"), None],
                vec![s("2"), s("a\tb\nc\\d"), s("AB")],
                vec![s("3"), s(""), s("\\N")],
            ]
        );
        // No newline at the end; an escaped delimiter.
        let o = CopyOptions {
            delimiter: b'|',
            null: String::new(),
            header: true,
            ..CopyOptions::defaults(CopyFormat::Text)
        };
        let rows = read("a|b\nx\\|y|\n", &o, 2).unwrap();
        assert_eq!(rows, vec![vec![s("x|y"), None]]);
    }

    #[test]
    fn wrong_field_counts_and_bad_utf8_are_errors() {
        let o = CopyOptions::defaults(CopyFormat::Text);
        let e = read("1\t2\n1\t2\t3\n", &o, 2).unwrap_err();
        assert_eq!(e.sqlstate(), "22P04");
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = read("1\n", &o, 2).unwrap_err();
        assert!(e.to_string().contains("missing data"), "{e}");
        let e = read("1\t\\377\n", &o, 2).unwrap_err();
        assert_eq!(e.sqlstate(), "22021");
    }
}
