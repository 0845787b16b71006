//! Bulk loading: Arrow batches of new rows written as whole DiskRowSets.
//!
//! A [`BulkLoader`] takes batches whose columns are named like the table's (omitted
//! columns take their defaults), routes each row to its tablet by the partition key of
//! its key columns, and buffers rows per tablet until a tablet holds about
//! [`BulkLoader::set_chunk_bytes`] (16 MiB by default, less for a table with
//! subspaces: [`default_chunk_bytes`]) of them. That chunk goes to the
//! tablet's leader as one `BulkInsert`, in the background and a bounded number at a
//! time. The leader replicates it as one log record and every replica writes it
//! straight into new DiskRowSets (`cairn_tablet::bulk`), skipping the MemRowSet, the
//! row-by-row apply and the later flush that the `Write` path costs. Rows whose key
//! exists come back as row errors ([`BulkLoadSummary::row_errors`]), like INSERT.
//!
//! Retries: every attempt of a chunk carries the same request id, so a retry after a
//! timed-out attempt that did get applied returns that attempt's answer instead of
//! reporting every row as already present. An attempt may still take what is left of
//! the operation timeout, because writing a chunk takes a while.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::datatypes::DataType as ArrowType;
use cairn_common::Value;
use cairn_proto::{BulkInsertRequest, RowErrorKind};
use tokio::task::JoinSet;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::retry::{Deadline, attempt, attempt_in_process, request};
use crate::session::{LeaderCall, LeaderServer, call_leader};
use crate::table::{Table, TabletLocationInfo, locate_tablet};

/// Default size of the row chunk sent to a tablet in one `BulkInsert`.
pub const DEFAULT_CHUNK_BYTES: usize = 16 << 20;
/// The chunk size a loader into `table` starts with: [`DEFAULT_CHUNK_BYTES`] shared
/// by the table and its subspaces. A chunk's point leader writes a copy of every row
/// into each subspace before it answers, so the work of one `BulkInsert` grows with
/// them; keeping it near a plain table's chunk keeps it well inside the timeout, also
/// on a replicated cluster.
pub fn default_chunk_bytes(table: &Table) -> usize {
    (DEFAULT_CHUNK_BYTES / (1 + table.subspaces.len())).max(64 << 10)
}

/// Default bound on chunks in flight at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4;

/// A row that a bulk load did not write.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkRowError {
    /// The row's position in the load: rows are numbered from 0 across every batch
    /// given to [`BulkLoader::add`], in order.
    pub row: u64,
    /// Why it was rejected.
    pub kind: RowErrorKind,
    /// The server's message.
    pub message: String,
}

/// What a finished bulk load did.
#[derive(Debug, Default)]
pub struct BulkLoadSummary {
    /// Rows written.
    pub rows_written: u64,
    /// Rows rejected (key exists, value does not fit the column), by load position.
    pub row_errors: Vec<BulkRowError>,
}

/// Rows waiting for one tablet.
#[derive(Default)]
struct Buffer {
    batches: Vec<RecordBatch>,
    /// Load position of each buffered row, in order.
    rows: Vec<u64>,
    bytes: usize,
}

/// What sending one chunk did.
struct ChunkOutcome {
    written: u64,
    errors: Vec<BulkRowError>,
    failure: Option<ClientError>,
}

/// Loads Arrow batches of new rows into a table through the bulk-insert path (see the
/// module docs). Call [`BulkLoader::finish`] at the end: it sends what is buffered and
/// waits for every chunk.
pub struct BulkLoader {
    client: Client,
    table: Table,
    locations: Arc<Vec<TabletLocationInfo>>,
    buffers: HashMap<String, Buffer>,
    in_flight: JoinSet<ChunkOutcome>,
    chunk_bytes: usize,
    max_in_flight: usize,
    timeout: Duration,
    next_row: u64,
    summary: BulkLoadSummary,
    failure: Option<ClientError>,
}

impl Client {
    /// A bulk loader for `table`.
    pub async fn bulk_loader(&self, table: &Table) -> Result<BulkLoader> {
        let (_, locations) = self.locations(table, None).await?;
        Ok(BulkLoader {
            client: self.clone(),
            table: table.clone(),
            locations,
            buffers: HashMap::new(),
            in_flight: JoinSet::new(),
            chunk_bytes: default_chunk_bytes(table),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            timeout: self
                .options()
                .operation_timeout
                .max(Duration::from_secs(120)),
            next_row: 0,
            summary: BulkLoadSummary::default(),
            failure: None,
        })
    }
}

impl BulkLoader {
    /// Sets the size at which a tablet's buffered rows are sent (at least 64 KiB).
    pub fn set_chunk_bytes(&mut self, n: usize) {
        self.chunk_bytes = n.max(64 << 10);
    }

    /// Sets how many chunks may be in flight at once (at least 1).
    pub fn set_max_in_flight(&mut self, n: usize) {
        self.max_in_flight = n.max(1);
    }

    /// Sets how long one chunk may take, retries included (default: the client's
    /// operation timeout, at least 2 minutes).
    pub fn set_timeout(&mut self, d: Duration) {
        self.timeout = d;
    }

    /// Rows given to the loader so far.
    pub fn rows_added(&self) -> u64 {
        self.next_row
    }

    /// Routes the rows of `batch` to their tablets, sending each tablet's buffer once
    /// it is full (waiting for room among the chunks in flight). Fails if the batch
    /// lacks a key column or a key column cannot be read as its type, or if an
    /// earlier chunk failed.
    pub async fn add(&mut self, batch: RecordBatch) -> Result<()> {
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        let first_row = self.next_row;
        self.next_row += batch.num_rows() as u64;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        for (tablet, rows) in self.route(&batch)? {
            let part = if rows.len() == batch.num_rows() {
                batch.clone()
            } else {
                let idx = UInt32Array::from(rows.clone());
                arrow::compute::take_record_batch(&batch, &idx)?
            };
            // A chunk is one batch: rows shaped differently go in the next chunk.
            if self
                .buffers
                .get(&tablet)
                .and_then(|b| b.batches.first())
                .is_some_and(|b| b.schema() != part.schema())
            {
                self.send(&tablet).await?;
            }
            let buf = self.buffers.entry(tablet.clone()).or_default();
            buf.bytes += part.get_array_memory_size();
            buf.rows
                .extend(rows.iter().map(|&r| first_row + u64::from(r)));
            buf.batches.push(part);
            if buf.bytes >= self.chunk_bytes {
                self.send(&tablet).await?;
            }
        }
        Ok(())
    }

    /// Sends everything buffered and waits for every chunk. Returns the rows written
    /// and the row errors; fails if some chunk could not be delivered (its rows may or
    /// may not be loaded).
    pub async fn finish(mut self) -> Result<BulkLoadSummary> {
        let tablets: Vec<String> = self.buffers.keys().cloned().collect();
        for t in tablets {
            self.send(&t).await?;
        }
        while let Some(r) = self.in_flight.join_next().await {
            self.record(r);
        }
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        let mut summary = std::mem::take(&mut self.summary);
        summary.row_errors.sort_by_key(|e| e.row);
        Ok(summary)
    }

    /// The tablet of every row of `batch`, as (tablet id, row indexes).
    fn route(&self, batch: &RecordBatch) -> Result<Vec<(String, Vec<u32>)>> {
        if let [only] = self.locations.as_slice()
            && only.partition.range_lower.is_empty()
            && only.partition.range_upper.is_empty()
        {
            return Ok(vec![(
                only.tablet_id.clone(),
                (0..batch.num_rows() as u32).collect(),
            )]);
        }
        let schema = &self.table.schema;
        let mut key_arrays = Vec::with_capacity(schema.key_indexes().len());
        for &k in schema.key_indexes() {
            let c = schema.column(k);
            let Ok(pos) = batch.schema().index_of(&c.name) else {
                return Err(ClientError::InvalidArgument(format!(
                    "the rows to load have no column '{}', a primary key column of table '{}'",
                    c.name, self.table.name
                )));
            };
            let want: ArrowType = c.data_type.to_arrow();
            let a = batch.column(pos);
            let a = if a.data_type() == &want {
                a.clone()
            } else {
                arrow::compute::cast(a, &want).map_err(|e| {
                    ClientError::InvalidArgument(format!(
                        "column '{}' cannot be read as {}: {e}",
                        c.name, c.data_type
                    ))
                })?
            };
            key_arrays.push((k, a));
        }
        let mut row = vec![Value::Null; schema.num_columns()];
        let mut by_tablet: HashMap<&str, Vec<u32>> = HashMap::new();
        for r in 0..batch.num_rows() {
            for (k, a) in &key_arrays {
                row[*k] = Value::from_array(a.as_ref(), r, &schema.column(*k).data_type)?;
            }
            // A row whose key cannot be routed (NULL key) goes to any tablet, which
            // rejects it with a row error.
            let tablet = match self.table.partition_schema.partition_key(schema, &row) {
                Ok(pkey) => locate_tablet(&self.locations, &pkey),
                Err(_) => self.locations.first(),
            };
            let Some(t) = tablet else {
                return Err(ClientError::InvalidArgument(format!(
                    "no tablet of table '{}' covers row {}: its range columns fall outside \
                     every range partition",
                    self.table.name,
                    self.next_row - batch.num_rows() as u64 + r as u64
                )));
            };
            by_tablet.entry(&t.tablet_id).or_default().push(r as u32);
        }
        Ok(by_tablet
            .into_iter()
            .map(|(t, rows)| (t.to_string(), rows))
            .collect())
    }

    /// Starts sending a tablet's buffer, after waiting for room in flight.
    async fn send(&mut self, tablet_id: &str) -> Result<()> {
        let Some(buf) = self.buffers.remove(tablet_id) else {
            return Ok(());
        };
        if buf.rows.is_empty() {
            return Ok(());
        }
        while self.in_flight.len() >= self.max_in_flight {
            if let Some(r) = self.in_flight.join_next().await {
                self.record(r);
            }
        }
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        let schema = buf.batches[0].schema();
        let rows = arrow::compute::concat_batches(&schema, &buf.batches)?;
        let client = self.client.clone();
        let table = self.table.clone();
        let tablet_id = tablet_id.to_string();
        let deadline = Deadline::after(self.timeout);
        self.in_flight.spawn(async move {
            send_chunk(&client, &table, tablet_id, rows, buf.rows, deadline).await
        });
        Ok(())
    }

    fn record(&mut self, r: std::result::Result<ChunkOutcome, tokio::task::JoinError>) {
        match r {
            Ok(o) => {
                self.summary.rows_written += o.written;
                self.summary.row_errors.extend(o.errors);
                if let Some(e) = o.failure {
                    self.failure.get_or_insert(e);
                }
            }
            Err(e) => {
                self.failure.get_or_insert(ClientError::Internal(format!(
                    "a bulk insert task ended abnormally: {e}"
                )));
            }
        }
    }
}

/// Sends one chunk to its tablet's leader; `positions` are the load positions of its
/// rows.
async fn send_chunk(
    client: &Client,
    table: &Table,
    tablet_id: String,
    rows: RecordBatch,
    positions: Vec<u64>,
    deadline: Deadline,
) -> ChunkOutcome {
    let what = format!(
        "bulk inserting {} row(s) into tablet {tablet_id} of table '{}'",
        rows.num_rows(),
        table.name
    );
    let n = rows.num_rows() as u64;
    let failed = |e: ClientError| ChunkOutcome {
        written: 0,
        errors: vec![],
        failure: Some(e),
    };
    let request_id = client.start_request();
    let call = |server: LeaderServer, _rpc_timeout: Duration| {
        // One attempt may take what is left of the deadline (see the module docs).
        let t = deadline.rpc_timeout(deadline.remaining());
        let mut req = BulkInsertRequest {
            tablet_id: tablet_id.clone(),
            arrow_ipc: Default::default(),
            propagated_timestamp: client.last_timestamp(),
            request_id: Some(request_id.id()),
        };
        let rows = rows.clone();
        async move {
            match server {
                LeaderServer::InProcess(s) => attempt_in_process(t, s.bulk_insert(req, rows)).await,
                LeaderServer::Remote(mut s) => {
                    req.arrow_ipc = crate::write::encode_ipc(&rows)
                        .map_err(|e| tonic::Status::internal(e.to_string()))?
                        .into();
                    attempt(t, s.bulk_insert(request(req, t))).await
                }
            }
        }
    };
    match call_leader(client, table, &tablet_id, &what, deadline, call).await {
        LeaderCall::Done(resp) => {
            let errors: Vec<BulkRowError> = resp
                .row_errors
                .iter()
                .filter_map(|e| {
                    positions.get(e.row as usize).map(|&row| BulkRowError {
                        row,
                        kind: RowErrorKind::try_from(e.kind).unwrap_or(RowErrorKind::Invalid),
                        message: e.message.clone(),
                    })
                })
                .collect();
            ChunkOutcome {
                written: n - errors.len() as u64,
                errors,
                failure: None,
            }
        }
        LeaderCall::Failed(e) => failed(e),
        LeaderCall::Gone(_) => failed(ClientError::InvalidArgument(format!(
            "tablet {tablet_id} of table '{}' went away during the load (was a range \
             partition dropped?); its {n} row(s) were not loaded",
            table.name
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::{ColumnSpec, DataType, PartitionSchema, Schema};
    use cairn_hyperspace::{SubspaceEntry, SubspaceSpec};

    #[test]
    fn a_table_with_subspaces_gets_smaller_chunks() {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("a", DataType::Int64),
                ColumnSpec::new("b", DataType::String),
            ],
            &["k"],
        )
        .unwrap();
        let subspaces = SubspaceEntry::for_new_table(
            "t1",
            &schema,
            2,
            &[SubspaceSpec::new(&["a"]), SubspaceSpec::new(&["b"])],
            &["r1".to_string(), "r2".to_string()],
        )
        .unwrap();
        let mut table = Table {
            id: "t1".into(),
            name: "t".into(),
            schema: Arc::new(schema),
            partition_schema: PartitionSchema::default(),
            replicas: 3,
            subspaces,
            colocation: None,
        };
        assert_eq!(default_chunk_bytes(&table), DEFAULT_CHUNK_BYTES / 3);
        table.subspaces.clear();
        assert_eq!(default_chunk_bytes(&table), DEFAULT_CHUNK_BYTES);
    }
}
