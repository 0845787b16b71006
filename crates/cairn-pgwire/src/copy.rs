//! The COPY sub-protocol: `COPY … FROM STDIN` and `COPY … TO STDOUT`.
//!
//! - **From the client**: the statement answers `CopyInResponse` and leaves a
//!   [`CopyIn`] load on the connection ([`Conn::copy_in`]); pgwire hands every
//!   `CopyData` message to [`ConnHandler::on_copy_data`], which passes the bytes on
//!   (waiting while the load is behind, so a fast client cannot fill the memory);
//!   `CopyDone` finishes the load and answers `COPY n`; `CopyFail` stops it with
//!   SQLSTATE 57014, as PostgreSQL does.
//! - **To the client**: the query's rows are encoded as for a text-format result
//!   (the same text PostgreSQL sends for each type) and each row becomes one
//!   `CopyData` line in COPY's text format (backslash escapes) or CSV (quotes where
//!   needed).

use std::fmt::Debug;

use arrow::datatypes::Schema;
use async_trait::async_trait;
use bytes::{Buf, Bytes, BytesMut};
use datafusion::execution::SendableRecordBatchStream;
use futures::{Sink, SinkExt, StreamExt, stream};
use pgwire::api::ClientInfo;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::Format;
use pgwire::api::results::{CopyResponse, Tag};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::data::DataRow;

use super::encode::{Stop, query_response};
use super::handlers::ConnHandler;
use cairn_sql::copy::CopyIn;
use cairn_sql::error::SqlError;
use cairn_sql::parser::{CopyFormat, CopyOptions};

/// COPY's overall format code for text and CSV (1 would be binary).
const TEXT: i8 = 0;

/// The `CopyInResponse` of a load that waits for the client's data.
pub(crate) fn copy_in_response(c: &CopyIn) -> CopyResponse {
    CopyResponse::new(TEXT, c.columns(), stream::empty())
}

/// The `CopyOutResponse` and data of a `COPY … TO STDOUT`.
pub(crate) fn copy_out_response(
    schema: &Schema,
    batches: SendableRecordBatchStream,
    options: CopyOptions,
    stop: Stop,
) -> PgWireResult<CopyResponse> {
    let mut rows = query_response(schema, batches, &Format::UnifiedText, stop)?;
    let columns = schema.fields().len();
    let mut header = options.header.then(|| {
        let mut line = BytesMut::new();
        for (i, f) in schema.fields().iter().enumerate() {
            if i > 0 {
                line.extend_from_slice(&[options.delimiter]);
            }
            write_field(&mut line, Some(f.name().as_bytes()), &options);
        }
        line.extend_from_slice(b"\n");
        line
    });
    let data_rows = std::mem::replace(rows.data_rows(), Box::pin(stream::empty()));
    let lines = data_rows.map(move |row| {
        let row = row?;
        // The header goes out with the first row: pgwire counts one row per message.
        let mut line = header.take().unwrap_or_default();
        encode_row(&mut line, &row, &options)?;
        Ok(CopyData::new(line.freeze()))
    });
    Ok(CopyResponse::new(TEXT, columns, lines))
}

/// Appends a data row (text-format fields) as one COPY line.
fn encode_row(out: &mut BytesMut, row: &DataRow, options: &CopyOptions) -> PgWireResult<()> {
    let mut data = row.data.clone().freeze();
    for i in 0..row.field_count {
        if i > 0 {
            out.extend_from_slice(&[options.delimiter]);
        }
        if data.remaining() < 4 {
            return Err(malformed());
        }
        let len = data.get_i32();
        if len < 0 {
            write_field(out, None, options);
            continue;
        }
        let len = len as usize;
        if data.remaining() < len {
            return Err(malformed());
        }
        let value: Bytes = data.split_to(len);
        write_field(out, Some(&value), options);
    }
    out.extend_from_slice(b"\n");
    Ok(())
}

fn malformed() -> PgWireError {
    PgWireError::ApiError("COPY TO: a malformed encoded row".into())
}

/// Appends one field: the NULL marker, or the value escaped for the format.
fn write_field(out: &mut BytesMut, value: Option<&[u8]>, o: &CopyOptions) {
    let Some(v) = value else {
        out.extend_from_slice(o.null.as_bytes());
        return;
    };
    match o.format {
        CopyFormat::Csv => {
            let quote = v.is_empty() && o.null.is_empty()
                || v == o.null.as_bytes()
                || v.iter()
                    .any(|&b| b == o.delimiter || matches!(b, b'"' | b'\n' | b'\r'));
            if !quote {
                out.extend_from_slice(v);
                return;
            }
            out.extend_from_slice(b"\"");
            for &b in v {
                if b == b'"' {
                    out.extend_from_slice(b"\"\"");
                } else {
                    out.extend_from_slice(&[b]);
                }
            }
            out.extend_from_slice(b"\"");
        }
        CopyFormat::Text | CopyFormat::Parquet => {
            for &b in v {
                match b {
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    8 => out.extend_from_slice(b"\\b"),
                    12 => out.extend_from_slice(b"\\f"),
                    11 => out.extend_from_slice(b"\\v"),
                    b if b == o.delimiter => out.extend_from_slice(&[b'\\', b]),
                    b => out.extend_from_slice(&[b]),
                }
            }
        }
    }
}

#[async_trait]
impl CopyHandler for ConnHandler {
    async fn on_copy_data<C>(&self, _client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Messages of one connection arrive one at a time: the load is taken out of
        // the connection while its data is handed over, and put back.
        let taken = self.conn.copy_in.lock().take();
        if let Some(mut load) = taken {
            load.write(data.data).await;
            *self.conn.copy_in.lock() = Some(load);
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(load) = self.conn.copy_in.lock().take() else {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "ERROR".into(),
                "08P01".into(),
                "CopyDone without a COPY FROM STDIN in progress".into(),
            ))));
        };
        let rows = match load.finish().await {
            Ok(rows) => rows,
            Err(e) => {
                // As any failed statement: in a block, the transaction is aborted.
                self.conn.session.after_error(&e).await;
                return Err(self.conn.failed(false, e));
            }
        };
        let tag = Tag::new("COPY").with_rows(usize::try_from(rows).unwrap_or(usize::MAX));
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(load) = self.conn.copy_in.lock().take() {
            load.abort();
        }
        // Rows may have been written in the block's transaction: the block fails.
        self.conn.failed(
            false,
            SqlError::other("57014", format!("COPY from stdin failed: {}", fail.message)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(v: Option<&str>, o: &CopyOptions) -> String {
        let mut out = BytesMut::new();
        write_field(&mut out, v.map(str::as_bytes), o);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn text_fields_are_escaped() {
        let o = CopyOptions::defaults(CopyFormat::Text);
        assert_eq!(field(None, &o), "\\N");
        assert_eq!(field(Some(""), &o), "");
        assert_eq!(field(Some("a\tb\nc\\d"), &o), "a\\tb\\nc\\\\d");
        let o = CopyOptions {
            delimiter: b'|',
            ..o
        };
        assert_eq!(field(Some("x|y"), &o), "x\\|y");
    }

    #[test]
    fn csv_fields_are_quoted_where_needed() {
        let o = CopyOptions::defaults(CopyFormat::Csv);
        assert_eq!(field(None, &o), "");
        assert_eq!(field(Some(""), &o), "\"\"");
        assert_eq!(field(Some("plain"), &o), "plain");
        assert_eq!(field(Some("a,b"), &o), "\"a,b\"");
        assert_eq!(field(Some("say \"hi\"\n"), &o), "\"say \"\"hi\"\"\n\"");
        let o = CopyOptions {
            null: "NA".into(),
            ..o
        };
        assert_eq!(field(Some("NA"), &o), "\"NA\"");
        assert_eq!(field(Some(""), &o), "");
    }

    #[test]
    fn rows_become_lines() {
        let mut data = BytesMut::new();
        data.extend_from_slice(&1i32.to_be_bytes());
        data.extend_from_slice(b"1");
        data.extend_from_slice(&(-1i32).to_be_bytes());
        data.extend_from_slice(&3i32.to_be_bytes());
        data.extend_from_slice(b"a\tb");
        let row = DataRow::new(data, 3);
        let mut out = BytesMut::new();
        encode_row(&mut out, &row, &CopyOptions::defaults(CopyFormat::Text)).unwrap();
        assert_eq!(&out[..], b"1\t\\N\ta\\tb\n");
        let bad = DataRow::new(BytesMut::from(&[0u8, 0, 0, 9, b'x'][..]), 1);
        assert!(
            encode_row(
                &mut BytesMut::new(),
                &bad,
                &CopyOptions::defaults(CopyFormat::Text)
            )
            .is_err()
        );
    }
}
