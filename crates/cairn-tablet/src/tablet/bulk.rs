//! The tablet's side of bulk inserts (the batch checks and encodings are in
//! [`crate::bulk`]): the leader's checked batch and its record, and applying it.

use std::sync::Arc;

use arrow::array::RecordBatch;
use cairn_common::{HybridTime, Value};

use super::{Location, Tablet};
use crate::error::{Result, TabletError};
use crate::locks::PendingRange;
use crate::ops::{LogRecord, OpKind, RequestId, RequestRecord, RowError, RowOp};
use crate::rowsets::Components;
use crate::writer::BatchDeltas;

/// A leader's checked bulk insert, not yet replicated ([`Tablet::prepare_bulk`]).
#[derive(Debug)]
pub struct PreparedBulk {
    /// The accepted rows in record form, as Arrow IPC.
    ipc: Vec<u8>,
    /// The accepted rows in record form.
    batch: RecordBatch,
    /// `positions[i]` = position in the caller's batch of record row `i`.
    positions: Vec<usize>,
    /// Smallest and largest encoded key of the accepted rows.
    key_range: Option<(Vec<u8>, Vec<u8>)>,
    /// Rows that failed the checks, by position in the caller's batch.
    pub row_errors: Vec<(usize, RowError)>,
}

impl PreparedBulk {
    /// Whether no row passed the checks (nothing to replicate).
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
    /// Number of rows to replicate.
    pub fn len(&self) -> usize {
        self.positions.len()
    }
    /// Maps the position of a row in the replicated record back to its position in
    /// the caller's batch.
    pub fn batch_position(&self, record_pos: usize) -> usize {
        self.positions
            .get(record_pos)
            .copied()
            .unwrap_or(usize::MAX)
    }
    /// The accepted rows in record form (columns named by id).
    pub fn record_batch(&self) -> &RecordBatch {
        &self.batch
    }
    /// What the record must know of the client's request `id`.
    pub fn request_record(&self, id: RequestId) -> RequestRecord {
        let positions = self.positions.iter().map(|p| *p as u32).collect();
        RequestRecord::new(id, positions, &self.row_errors)
    }
}

impl Tablet {
    /// Checks a bulk insert on a leader (columns named like the table's): rows that do
    /// not fit the schema get their error now and are left out of the record.
    pub fn prepare_bulk(&self, batch: &RecordBatch) -> Result<PreparedBulk> {
        self.check_healthy()?;
        let schema = self.schema();
        let shaped = crate::bulk::shape_batch(&schema, batch)?;
        let mut key_range: Option<(Vec<u8>, Vec<u8>)> = None;
        for k in crate::bulk::row_keys(&schema, &shaped.batch)?
            .into_iter()
            .flatten()
        {
            key_range = Some(match key_range {
                None => (k.clone(), k),
                Some((lo, hi)) => (lo.min(k.clone()), hi.max(k)),
            });
        }
        Ok(PreparedBulk {
            ipc: if shaped.positions.is_empty() {
                Vec::new()
            } else {
                crate::bulk::encode_ipc(&shaped.batch)?
            },
            batch: shaped.batch,
            positions: shaped.positions,
            key_range,
            row_errors: shaped.row_errors,
        })
    }

    /// Registers the load's key range as pending until the returned guard is dropped
    /// (once the record is applied on this leader): writes that check the state of
    /// their rows wait for it, since a bulk insert takes no row locks.
    pub fn register_bulk(&self, p: &PreparedBulk) -> Option<PendingRange> {
        let (lo, hi) = p.key_range.clone()?;
        Some(self.pending_bulk.register(lo, hi))
    }

    /// Takes the bulk insert's timestamp (in flight until [`Tablet::finish_write`])
    /// and encodes the record to replicate. Unlike row writes a bulk insert takes no
    /// row locks: whether a key exists is decided when the record is applied, in log
    /// order, on every replica alike.
    /// REQUIRES: the caller's proposal-order lock, so log order is timestamp order.
    pub fn start_bulk(
        &self,
        p: &PreparedBulk,
        request: Option<RequestRecord>,
    ) -> (HybridTime, Vec<u8>) {
        let ts = self.mvcc.start(&self.clock);
        (ts, LogRecord::encode_bulk(ts, &p.ipc, request.as_ref()))
    }

    /// Applies a bulk insert logged at `index`: rows whose store already holds `index`
    /// are skipped; an existing live key is `AlreadyPresent` (so is a key repeated
    /// within the batch); a deleted one is re-inserted through the row path; the rest
    /// become new DiskRowSets. Returns the row errors by record position (by batch
    /// position for a request record).
    pub(crate) fn apply_bulk(
        &self,
        index: u64,
        ts: HybridTime,
        ipc: &[u8],
        request: Option<&RequestRecord>,
    ) -> Result<Vec<(usize, RowError)>> {
        if let Some(first) = self.answered_elsewhere(request, index) {
            return Ok(first.errors);
        }
        let bad = |e: TabletError| {
            TabletError::corruption(&self.dir, format!("bulk insert at log index {index}: {e}"))
        };
        let schema = self.schema();
        let batch = crate::bulk::decode_ipc(ipc)
            .and_then(|b| crate::bulk::to_current(&schema, &b))
            .map_err(bad)?;
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(batch.num_rows());
        for k in crate::bulk::row_keys(&schema, &batch)? {
            keys.push(k.map_err(|e| bad(TabletError::InvalidRequest(e.to_string())))?);
        }
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        order.sort_by(|a, b| keys[*a as usize].cmp(&keys[*b as usize]));
        let mut errors = Vec::new();
        let mut fresh: Vec<u32> = Vec::with_capacity(order.len());
        {
            let _gate = self.gate.read();
            // On a table with subspaces every row of the batch waits for its chain
            // (rows that turn out to exist already chain no change).
            self.unchained
                .record(ts.0, keys.iter().map(|k| k.as_slice()));
            let comps = self.components();
            let mut prev: Option<&[u8]> = None;
            for &i in &order {
                let key = keys[i as usize].as_slice();
                if prev == Some(key) {
                    errors.push((i as usize, RowError::AlreadyPresent));
                    continue;
                }
                prev = Some(key);
                let loc = self.locate(&comps, key);
                if self.holds(&loc, index) {
                    continue;
                }
                let live = match &loc {
                    Location::Absent => {
                        fresh.push(i);
                        continue;
                    }
                    Location::Disk(rs, o) => rs.is_live(*o),
                    Location::Mem(_, r) => r.is_live(),
                };
                if live {
                    errors.push((i as usize, RowError::AlreadyPresent));
                    continue;
                }
                self.reinsert_row(&schema, &comps, &batch, i as usize, key, ts, index)
                    .map(|e| errors.extend(e))?;
            }
        }
        if !fresh.is_empty() {
            self.write_fresh_rowsets(&schema, &batch, &mut keys, &fresh, ts, index)?;
        }
        errors.sort_by_key(|(i, _)| *i);
        Ok(self.answer(request, index, ts, errors))
    }

    /// Re-inserts row `i` of `batch` over a deleted key through the row path.
    /// REQUIRES: the write gate held shared.
    #[allow(clippy::too_many_arguments)]
    fn reinsert_row(
        &self,
        schema: &cairn_common::Schema,
        comps: &Components,
        batch: &RecordBatch,
        i: usize,
        key: &[u8],
        ts: HybridTime,
        index: u64,
    ) -> Result<Option<(usize, RowError)>> {
        let values = schema
            .columns()
            .iter()
            .enumerate()
            .map(|(c, col)| {
                Value::from_array(batch.column(c).as_ref(), i, &col.data_type).map(Some)
            })
            .collect::<cairn_common::Result<Vec<_>>>()?;
        let op = RowOp::new(OpKind::Insert, values);
        Ok(self
            .apply_op(schema, comps, op, key.to_vec(), ts, index)
            .err()
            .map(|e| (i, e)))
    }

    /// Writes the rows `fresh` (indexes into `batch`, in key order) as new DiskRowSets
    /// holding everything up to `index`, and installs them.
    fn write_fresh_rowsets(
        &self,
        schema: &cairn_common::Schema,
        batch: &RecordBatch,
        keys: &mut [Vec<u8>],
        fresh: &[u32],
        ts: HybridTime,
        index: u64,
    ) -> Result<()> {
        let take = arrow::array::UInt32Array::from_iter_values(fresh.iter().copied());
        let sorted = arrow::compute::take_record_batch(batch, &take)?;
        let fresh_keys: Vec<Vec<u8>> = fresh
            .iter()
            .map(|&i| std::mem::take(&mut keys[i as usize]))
            .collect();
        let undo = if ts >= self.ancient_history_mark() {
            BatchDeltas::InsertedAt(ts)
        } else {
            BatchDeltas::None
        };
        let mut w = self.rowset_writer(schema, (index, ts));
        w.append_batch(fresh_keys, &sorted, undo)?;
        let outputs = self.open_rowsets(w.finish()?)?;
        let _m = self.maint_lock()?;
        let _gate = self.gate.write();
        let comps = self.components();
        let mut disk = comps.disk.clone();
        disk.extend(outputs.iter().cloned());
        *self.comps.write() = Arc::new(Components::new(
            comps.mrs.clone(),
            comps.frozen.clone(),
            disk,
        ));
        self.persist()?;
        tracing::debug!(
            rows = fresh.len(),
            rowsets = outputs.len(),
            index,
            "bulk insert wrote new rowsets"
        );
        Ok(())
    }
}
