//! Keyed reads: one row by its primary key, from the tablet that owns it, in one call.
//!
//! A scan is the general read: it plans tablets, opens a server-side scanner, pushes
//! predicates down as JSON and streams Arrow batches. Reading one row by its key
//! needs none of that, and key-value work is mostly that read. [`Client::get`]
//! encodes the key, finds the tablet from the cached locations and asks its leader
//! with one `Get` call (in process on `cairn local`, else one RPC), which answers the
//! row's values. The leader reads at a fresh snapshot after the client's last
//! timestamp and waits only for writes in flight on that key, so the read is
//! linearizable and sees the client's own writes.

use cairn_common::{Value, codec};
use cairn_proto::{GetRequest, GetResponse};

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::retry::{Deadline, attempt, attempt_in_process, request};
use crate::scan::ReadMode;
use crate::session::{LeaderAnswer, LeaderCall, LeaderServer, call_leader};
use crate::table::{Table, locate_tablet};

impl LeaderAnswer for GetResponse {
    fn timestamp(&self) -> u64 {
        self.snapshot_timestamp
    }
}

impl Client {
    /// Reads the row of `table` whose primary key is `key` (one value per key column,
    /// in key order), returning the values of `projection` (column names; empty: every
    /// column, in table order), or `None` when no such row exists at the snapshot.
    ///
    /// [`ReadMode::Latest`] and [`ReadMode::ReadYourWrites`] read the latest row at the
    /// tablet's leader (linearizable, and after this client's writes);
    /// [`ReadMode::Snapshot`] reads the row as of that timestamp.
    pub async fn get(
        &self,
        table: &Table,
        key: &[Value],
        projection: &[String],
        mode: ReadMode,
    ) -> Result<Option<Vec<Value>>> {
        let schema = &table.schema;
        let keys = schema.key_indexes();
        if key.len() != keys.len() {
            return Err(ClientError::InvalidArgument(format!(
                "table '{}' has {} primary-key columns but {} key values were given",
                table.name,
                keys.len(),
                key.len()
            )));
        }
        let mut row: Vec<Option<Value>> = vec![None; schema.num_columns()];
        let mut encoded = Vec::new();
        for (&i, v) in keys.iter().zip(key) {
            let c = schema.column(i);
            v.check_type(&c.name, &c.data_type)?;
            codec::put_value(&mut encoded, v);
            row[i] = Some(v.clone());
        }
        let width = if projection.is_empty() {
            schema.num_columns()
        } else {
            for c in projection {
                schema.index_of(c)?;
            }
            projection.len()
        };
        let pkey = table.partition_key(&row)?;
        let snapshot = match mode {
            ReadMode::Snapshot(ts) => ts,
            ReadMode::Latest | ReadMode::ReadYourWrites => 0,
        };
        let encoded = bytes::Bytes::from(encoded);
        let what = format!("reading a row of table '{}' by key", table.name);
        let deadline = Deadline::after(self.options().operation_timeout);
        let mut stale = None;
        loop {
            let (fetched, locs) = self.locations(table, stale).await?;
            let Some(tablet) = locate_tablet(&locs, &pkey) else {
                if stale.is_some() {
                    // No tablet covers the key (outside every range partition).
                    return Ok(None);
                }
                stale = Some(fetched);
                continue;
            };
            let tablet_id = tablet.tablet_id.clone();
            let call = |server: LeaderServer, t| {
                let req = GetRequest {
                    tablet_id: tablet_id.clone(),
                    key: encoded.clone(),
                    projection: projection.to_vec(),
                    snapshot_timestamp: snapshot,
                    propagated_timestamp: self.last_timestamp(),
                };
                async move {
                    match server {
                        LeaderServer::InProcess(s) => attempt_in_process(t, s.get(req)).await,
                        LeaderServer::Remote(mut s) => attempt(t, s.get(request(req, t))).await,
                    }
                }
            };
            match call_leader::<_, _, GetResponse>(self, table, &tablet_id, &what, deadline, call)
                .await
            {
                LeaderCall::Done(r) => return decode_row(&r, width),
                LeaderCall::Failed(e) => return Err(e),
                // The tablet left the table (a dropped range partition): route again.
                LeaderCall::Gone(at) if stale.is_none() => stale = Some(at),
                LeaderCall::Gone(_) => {
                    return Err(ClientError::NotFound(format!(
                        "{what}: the tablet owning the key is no longer part of the table"
                    )));
                }
            }
        }
    }
}

/// The `width` values of a `Get` answer, or `None` if the row was not found.
fn decode_row(r: &GetResponse, width: usize) -> Result<Option<Vec<Value>>> {
    if !r.found {
        return Ok(None);
    }
    let mut reader = codec::Reader::new(&r.row, "row of a Get answer");
    let mut out = Vec::with_capacity(width);
    for _ in 0..width {
        out.push(reader.value().map_err(|e| ClientError::Decode {
            what: "row of a Get answer",
            detail: e.to_string(),
        })?);
    }
    Ok(Some(out))
}
