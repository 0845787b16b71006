//! Row operations (what clients ask for), row changes (what storage records), and the
//! log records that carry them.
//!
//! A [`RowOp`] is one of Kudu's write operations on one row. Applying it yields a
//! [`RowChange`] in the store that owns the row: an update of some columns, a delete, or
//! a re-insert of a row that had been deleted. Changes name columns by stable id, so
//! they survive `ALTER TABLE`.
//!
//! A row op may carry a [`RowCondition`]: the row must not have changed since a given
//! timestamp, or must satisfy predicates. The leader checks conditions under the row
//! locks it holds until the write is applied, so no other writer of the row can slip in
//! between check and change; ops whose condition fails are left out of the record.
//!
//! A write may carry a [`RequestId`] (client id + sequence number): the record then also
//! holds what the leader knows of the client's batch (positions, early errors), so that
//! applying it yields the complete answer, which the tablet remembers
//! ([`crate::results::ResultTracker`]) and gives again to a retry of the same request.

use cairn_common::codec::{self, Reader};
use cairn_common::{CellMutation, ColumnId, ColumnPredicate, HybridTime, Schema, Value};

use crate::error::{Result, TabletError};

/// The write operations of the data model (DESIGN.md, "Data model").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Insert a new row; fails with `AlreadyPresent` if the key exists.
    Insert,
    /// Insert a new row; silently does nothing if the key exists.
    InsertIgnore,
    /// Insert, or update the given columns if the key exists.
    Upsert,
    /// Update the given columns; fails with `NotFound` if the key is absent.
    Update,
    /// Update the given columns; does nothing if the key is absent.
    UpdateIgnore,
    /// Delete the row; fails with `NotFound` if the key is absent.
    Delete,
    /// Delete the row; does nothing if the key is absent.
    DeleteIgnore,
}

impl OpKind {
    fn tag(self) -> u8 {
        self as u8
    }
    fn from_tag(t: u8) -> Option<OpKind> {
        use OpKind::*;
        [
            Insert,
            InsertIgnore,
            Upsert,
            Update,
            UpdateIgnore,
            Delete,
            DeleteIgnore,
        ]
        .get(t as usize)
        .copied()
    }
    /// Whether the op writes a whole row (insert-like).
    pub fn is_insert_like(self) -> bool {
        matches!(self, OpKind::Insert | OpKind::InsertIgnore | OpKind::Upsert)
    }
}

/// Conditions an op must meet when it is applied; an op whose condition fails changes
/// nothing and gets a row error. The default is no condition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowCondition {
    /// The row must be live and must not have changed after this timestamp (its reader
    /// saw it at this snapshot); otherwise [`RowError::Conflict`]. UPDATE and DELETE
    /// statements write with it, so a change made after they read a row is never
    /// overwritten blindly.
    pub unchanged_since: Option<HybridTime>,
    /// The row must be live and satisfy every predicate; otherwise
    /// [`RowError::ConditionFailed`] (HyperDex's conditional put).
    pub predicates: Vec<ColumnPredicate>,
    /// Cells an `UPDATE` op changes with atomic operations
    /// ([`cairn_common::atomic`]): the leader computes their new values from the row
    /// under its lock and writes them as given cells; a row that is absent fails with
    /// [`RowError::NotFound`], a result that cannot be computed with
    /// [`RowError::Invalid`].
    pub mutations: Vec<CellMutation>,
}

impl RowCondition {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.unchanged_since.is_none() && self.predicates.is_empty() && self.mutations.is_empty()
    }
}

/// One write operation on one row. `values` has one slot per schema column (schema
/// order); `None` means "not given". Key columns are always required.
#[derive(Clone, Debug, PartialEq)]
pub struct RowOp {
    /// What to do.
    pub kind: OpKind,
    /// The cells given, by schema position.
    pub values: Vec<Option<Value>>,
    /// What must hold when the op is applied.
    pub condition: RowCondition,
}

impl RowOp {
    /// An op of `kind` with these cells and no condition.
    pub fn new(kind: OpKind, values: Vec<Option<Value>>) -> Self {
        RowOp {
            kind,
            values,
            condition: RowCondition::default(),
        }
    }
    /// An op with every column given (insert / upsert of a full row).
    pub fn full(kind: OpKind, row: Vec<Value>) -> Self {
        Self::new(kind, row.into_iter().map(Some).collect())
    }
    /// The same op, applied only if the row has not changed after `ts`.
    pub fn unchanged_since(mut self, ts: HybridTime) -> Self {
        self.condition.unchanged_since = Some(ts);
        self
    }
    /// The same op, applied only if the row satisfies `predicates`.
    pub fn if_matches(mut self, predicates: Vec<ColumnPredicate>) -> Self {
        self.condition.predicates = predicates;
        self
    }
    /// The same op (an `UPDATE`), also changing cells with atomic operations.
    pub fn with_mutations(mut self, mutations: Vec<CellMutation>) -> Self {
        self.condition.mutations = mutations;
        self
    }
    /// `INSERT` of a full row.
    pub fn insert(row: Vec<Value>) -> Self {
        Self::full(OpKind::Insert, row)
    }
    /// `UPSERT` of a full row.
    pub fn upsert(row: Vec<Value>) -> Self {
        Self::full(OpKind::Upsert, row)
    }
    /// An op naming only the key columns (delete) and optionally some other cells
    /// (update), by column name.
    pub fn keyed(
        schema: &Schema,
        kind: OpKind,
        key: &[Value],
        cells: &[(&str, Value)],
    ) -> Result<Self> {
        let mut values = vec![None; schema.num_columns()];
        if key.len() != schema.key_indexes().len() {
            return Err(TabletError::InvalidRequest(format!(
                "the primary key has {} columns but {} key values were given",
                schema.key_indexes().len(),
                key.len()
            )));
        }
        for (&k, v) in schema.key_indexes().iter().zip(key) {
            values[k] = Some(v.clone());
        }
        for (name, v) in cells {
            values[schema.index_of(name)?] = Some(v.clone());
        }
        Ok(RowOp::new(kind, values))
    }
    /// `UPDATE` of some cells of the row with key `key`.
    pub fn update(schema: &Schema, key: &[Value], cells: &[(&str, Value)]) -> Result<Self> {
        Self::keyed(schema, OpKind::Update, key, cells)
    }
    /// `DELETE` of the row with key `key`.
    pub fn delete(schema: &Schema, key: &[Value]) -> Result<Self> {
        Self::keyed(schema, OpKind::Delete, key, &[])
    }
}

/// Why one row of a write batch failed. Other rows of the batch are unaffected (unless
/// the batch is all-or-nothing).
#[derive(Clone, Debug, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum RowError {
    /// INSERT of a key that exists.
    #[error("key already present")]
    AlreadyPresent,
    /// UPDATE / DELETE of a key that does not exist.
    #[error("key not found")]
    NotFound,
    /// The row does not fit the schema.
    #[error("{0}")]
    Invalid(String),
    /// The row changed after the snapshot the op's condition names (read again and
    /// retry).
    #[error("the row was changed by another writer after it was read")]
    Conflict,
    /// The row is absent or does not satisfy the op's predicates.
    #[error("the row does not meet the write's condition")]
    ConditionFailed,
    /// The op was valid, but another op of its all-or-nothing batch failed, so none
    /// was applied.
    #[error("not applied: another row of the same all-or-nothing batch failed")]
    Aborted,
}

impl RowError {
    /// Appends the error's encoding (log records, cached answers).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (tag, msg) = match self {
            RowError::AlreadyPresent => (1u8, ""),
            RowError::NotFound => (2, ""),
            RowError::Invalid(m) => (3, m.as_str()),
            RowError::Conflict => (4, ""),
            RowError::ConditionFailed => (5, ""),
            RowError::Aborted => (6, ""),
        };
        out.push(tag);
        codec::put_bytes(out, msg.as_bytes());
    }
    /// Reads an error written by [`RowError::encode`].
    pub fn decode(r: &mut Reader<'_>) -> cairn_common::Result<RowError> {
        let tag = r.u8()?;
        let msg = r.string()?;
        Ok(match tag {
            1 => RowError::AlreadyPresent,
            2 => RowError::NotFound,
            4 => RowError::Conflict,
            5 => RowError::ConditionFailed,
            6 => RowError::Aborted,
            _ => RowError::Invalid(msg),
        })
    }
}

/// Encodes row errors by position (the answer of an apply).
pub fn encode_row_errors(errors: &[(usize, RowError)]) -> Vec<u8> {
    let mut out = Vec::new();
    codec::put_u32(&mut out, errors.len() as u32);
    for (i, e) in errors {
        codec::put_u32(&mut out, *i as u32);
        e.encode(&mut out);
    }
    out
}

/// Decodes what [`encode_row_errors`] wrote.
pub fn decode_row_errors(b: &[u8]) -> cairn_common::Result<Vec<(usize, RowError)>> {
    let mut r = Reader::new(b, "row errors");
    let n = r.u32()? as usize;
    if n > r.remaining() {
        return Err(cairn_common::CommonError::Decode {
            what: "row errors",
            detail: "count exceeds the data".into(),
        });
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let i = r.u32()? as usize;
        out.push((i, RowError::decode(&mut r)?));
    }
    Ok(out)
}

/// One client request, for exactly-once writes (Kudu's `RequestIdPB`): retries of a
/// request carry the same id and get the first attempt's answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RequestId {
    /// The client, unique per client instance.
    pub client_id: String,
    /// The request's number within the client.
    pub seq_no: u64,
    /// Every request of this client numbered below this has its answer: the server may
    /// forget them.
    pub first_incomplete_seq_no: u64,
}

/// What a logged write knows of the client request it answers.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// The request.
    pub id: RequestId,
    /// Position in the client's batch of each op (row) of the record; empty means the
    /// same positions.
    pub positions: Vec<u32>,
    /// Rows of the client's batch that failed before replication.
    pub early_errors: Vec<(u32, RowError)>,
}

impl RequestRecord {
    /// A record of `id` for a batch whose rows map to the record one to one.
    pub fn plain(id: RequestId) -> Self {
        RequestRecord {
            id,
            positions: vec![],
            early_errors: vec![],
        }
    }
    /// A record of `id` whose row `i` is row `positions[i]` of the client's batch
    /// (empty: the same positions), and whose batch rows in `early_errors` failed
    /// before replication.
    pub fn new(id: RequestId, positions: Vec<u32>, early_errors: &[(usize, RowError)]) -> Self {
        RequestRecord {
            id,
            positions,
            early_errors: early_errors
                .iter()
                .map(|(i, e)| (*i as u32, e.clone()))
                .collect(),
        }
    }
    /// The client's position of record row `pos`.
    pub fn position(&self, pos: usize) -> usize {
        self.positions.get(pos).map_or(pos, |p| *p as usize)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        codec::put_bytes(out, self.id.client_id.as_bytes());
        codec::put_u64(out, self.id.seq_no);
        codec::put_u64(out, self.id.first_incomplete_seq_no);
        codec::put_u32(out, self.positions.len() as u32);
        for p in &self.positions {
            codec::put_u32(out, *p);
        }
        codec::put_u32(out, self.early_errors.len() as u32);
        for (p, e) in &self.early_errors {
            codec::put_u32(out, *p);
            e.encode(out);
        }
    }
    fn decode(r: &mut Reader<'_>) -> cairn_common::Result<RequestRecord> {
        let client_id = r.string()?;
        let seq_no = r.u64()?;
        let first_incomplete_seq_no = r.u64()?;
        let n = r.u32()? as usize;
        if n > r.remaining() {
            return Err(bad_record("position count exceeds the data"));
        }
        let mut positions = Vec::with_capacity(n);
        for _ in 0..n {
            positions.push(r.u32()?);
        }
        let n = r.u32()? as usize;
        if n > r.remaining() {
            return Err(bad_record("error count exceeds the data"));
        }
        let mut early_errors = Vec::with_capacity(n);
        for _ in 0..n {
            let p = r.u32()?;
            early_errors.push((p, RowError::decode(r)?));
        }
        Ok(RequestRecord {
            id: RequestId {
                client_id,
                seq_no,
                first_incomplete_seq_no,
            },
            positions,
            early_errors,
        })
    }
}

fn bad_record(d: &str) -> cairn_common::CommonError {
    cairn_common::CommonError::Decode {
        what: "log record",
        detail: d.to_string(),
    }
}

/// A row op as logged: cells named by column id.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedOp {
    /// What to do.
    pub kind: OpKind,
    /// The cells given.
    pub cells: Vec<(ColumnId, Value)>,
}

/// A change recorded against an existing row (in a MemRowSet mutation chain or a delta
/// store). Columns are named by stable id.
#[derive(Clone, Debug, PartialEq)]
pub enum RowChange {
    /// Set these columns.
    Update(Vec<(ColumnId, Value)>),
    /// The row is deleted.
    Delete,
    /// The row is inserted again after a delete, with these full contents.
    Reinsert(Vec<(ColumnId, Value)>),
}

impl RowChange {
    /// Appends the change's encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (tag, cells): (u8, &[(ColumnId, Value)]) = match self {
            RowChange::Update(c) => (0, c),
            RowChange::Delete => (1, &[]),
            RowChange::Reinsert(c) => (2, c),
        };
        out.push(tag);
        codec::put_u32(out, cells.len() as u32);
        for (id, v) in cells {
            codec::put_u32(out, *id);
            codec::put_value(out, v);
        }
    }
    /// Reads a change written by [`RowChange::encode`].
    pub fn decode(r: &mut Reader<'_>) -> cairn_common::Result<RowChange> {
        let tag = r.u8()?;
        let n = r.u32()? as usize;
        if n > r.remaining() {
            return Err(cairn_common::CommonError::Decode {
                what: "row change",
                detail: "cell count exceeds the data".into(),
            });
        }
        let mut cells = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.u32()?;
            cells.push((id, r.value()?));
        }
        Ok(match tag {
            0 => RowChange::Update(cells),
            1 => RowChange::Delete,
            2 => RowChange::Reinsert(cells),
            t => {
                return Err(cairn_common::CommonError::Decode {
                    what: "row change",
                    detail: format!("unknown change tag {t}"),
                });
            }
        })
    }
    /// Approximate memory footprint.
    pub fn size_bytes(&self) -> usize {
        match self {
            RowChange::Delete => 8,
            RowChange::Update(c) | RowChange::Reinsert(c) => {
                16 + c.iter().map(|(_, v)| 8 + v.size_bytes()).sum::<usize>()
            }
        }
    }
}

/// A record in the tablet's write-ahead log (the Raft log of a replicated tablet).
#[derive(Clone, Debug, PartialEq)]
pub enum LogRecord {
    /// A write batch: every op was validated before it was logged; applying it again
    /// (replay) runs the same ops at the same timestamp.
    Write {
        /// The batch's timestamp.
        ts: HybridTime,
        /// The ops.
        ops: Vec<LoggedOp>,
        /// All or nothing: if any op fails when applied, none is.
        atomic: bool,
        /// The client request it answers, if the client gave an id.
        request: Option<RequestRecord>,
    },
    /// A schema change: the schema after it.
    AlterSchema {
        /// The new schema.
        schema: crate::metadata::SchemaMeta,
    },
    /// A bulk insert (see [`crate::bulk`]): new rows as one Arrow IPC stream whose
    /// columns are named by column id.
    BulkInsert {
        /// The load's timestamp.
        ts: HybridTime,
        /// The rows.
        ipc: Vec<u8>,
        /// The client request it answers, if the client gave an id.
        request: Option<RequestRecord>,
    },
    /// Provisional writes of transaction `txn` ([`crate::txn`]): the leader checked
    /// them against the committed rows and the transaction's earlier writes; applying
    /// the record makes the transaction own their keys, and nobody else sees them
    /// until a [`LogRecord::TxnFinish`] commits them.
    TxnWrite {
        /// The transaction.
        txn: TxnId,
        /// The record's timestamp (log order is timestamp order); not the commit time.
        ts: HybridTime,
        /// The ops, in the order the transaction wrote them.
        ops: Vec<LoggedOp>,
        /// The client request it answers, if the client gave an id.
        request: Option<RequestRecord>,
    },
    /// The participant's "prepare" (Kudu's BEGIN_COMMIT): from here until the
    /// transaction finishes, snapshots at or after `ts` wait, so its commit — at a
    /// timestamp at or after `ts` — is never half seen.
    TxnBeginCommit {
        /// The transaction.
        txn: TxnId,
        /// The prepare timestamp, held in flight until the transaction finishes.
        ts: HybridTime,
        /// Where the transaction's status record lives (`None`: a record written
        /// before status records existed).
        role: Option<TxnRole>,
    },
    /// The end of transaction `txn` on this tablet: with `commit_ts`, its provisional
    /// writes become rows at that timestamp; without, they are discarded.
    TxnFinish {
        /// The transaction.
        txn: TxnId,
        /// The commit timestamp, or `None` for an abort.
        commit_ts: Option<HybridTime>,
        /// A commit's provisional writes, grouped by key in key order (each key's in
        /// the order written), so the record stands alone: once it is applied the
        /// durable index may pass the transaction's earlier records, and a restart
        /// that applies it again must not need them.
        ops: Vec<LoggedOp>,
    },
    /// The table's subspaces changed (`ALTER TABLE … ADD/DROP SUBSPACE`): every change
    /// after this record is chained into these, and tracked until it is
    /// ([`crate::unchained`]). The tablet keeps the layouts as the tablet server
    /// encodes them.
    SetSubspaces {
        /// Taken in log order: every write before the record is older, every write
        /// after it newer.
        ts: HybridTime,
        /// The catalog's version of the layouts; an older one than the tablet has
        /// changes nothing.
        version: u64,
        /// The layouts (JSON of the tablet server's subspace entries).
        layouts: Vec<u8>,
    },
    /// The leader chained these changes into the table's subspaces: they leave the
    /// tablet's list of unchained changes ([`crate::unchained`]).
    ChainsDone {
        /// The changes: timestamp and encoded key.
        done: Vec<crate::unchained::Unchained>,
    },
}

/// Where a two-phase commit's status record lives, as a participant learns it at
/// prepare time (see [`crate::txn`]: "The status record").
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TxnRole {
    /// This tablet holds the status record: its commit or abort record *is* the
    /// transaction's decision, and it may abort the transaction alone while no
    /// decision exists.
    Home,
    /// Another tablet holds the status record: the home tablet of table `table_id`
    /// with id `tablet_id`, asked for the decision if the coordinator goes silent.
    Participant {
        /// The home tablet's table.
        table_id: String,
        /// The home tablet.
        tablet_id: String,
    },
}

/// A multi-row transaction's id, chosen at random by its coordinator.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct TxnId(pub u64);

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "txn-{:016x}", self.0)
    }
}

/// The first byte of a group-commit batch: several row-write records logged as one
/// entry (see [`encode_batch`]). No [`LogRecord`] tag has this value.
pub const TAG_BATCH: u8 = 0xB0;

/// Frames row-write records ([`LogRecord::Write`], [`LogRecord::TxnWrite`]) as one log
/// entry, in order: [`TAG_BATCH`], a count, and each record length-prefixed. A tablet
/// applies such an entry with [`crate::Tablet::apply_batch`].
pub fn encode_batch(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + records.iter().map(|r| r.len() + 4).sum::<usize>());
    out.push(TAG_BATCH);
    codec::put_u32(&mut out, records.len() as u32);
    for r in records {
        codec::put_bytes(&mut out, r);
    }
    out
}

/// The records of an entry written by [`encode_batch`], or `None` for an entry that
/// is a single record.
pub fn decode_batch(b: &[u8]) -> cairn_common::Result<Option<Vec<&[u8]>>> {
    if b.first() != Some(&TAG_BATCH) {
        return Ok(None);
    }
    let mut r = Reader::new(&b[1..], "batch of log records");
    let n = r.u32()? as usize;
    if n > r.remaining() / 4 {
        return Err(bad_record(&format!(
            "a batch of {n} records is longer than its entry"
        )));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.bytes()?);
    }
    if !r.is_empty() {
        return Err(bad_record("bytes after the last record of a batch"));
    }
    Ok(Some(out))
}

// Record tags. 1 and 3 are the forms before conditions and request ids; they are still
// read.
const TAG_WRITE_V1: u8 = 1;
const TAG_ALTER: u8 = 2;
const TAG_BULK_V1: u8 = 3;
const TAG_WRITE: u8 = 4;
const TAG_BULK: u8 = 5;
const TAG_TXN_WRITE: u8 = 6;
const TAG_TXN_BEGIN_COMMIT: u8 = 7;
const TAG_TXN_FINISH: u8 = 8;
const TAG_TXN_BEGIN_COMMIT_ROLE: u8 = 9;
const TAG_CHAINS_DONE: u8 = 10;
const TAG_SET_SUBSPACES: u8 = 11;

/// Appends a list of logged ops.
fn put_ops(out: &mut Vec<u8>, ops: &[LoggedOp]) {
    codec::put_u32(out, ops.len() as u32);
    for op in ops {
        out.push(op.kind.tag());
        codec::put_u32(out, op.cells.len() as u32);
        for (id, v) in &op.cells {
            codec::put_u32(out, *id);
            codec::put_value(out, v);
        }
    }
}

/// Writes the part of a [`LogRecord::Write`] (`txn` `None`) or
/// [`LogRecord::TxnWrite`] before its ops.
fn put_write_header(
    out: &mut Vec<u8>,
    ts: HybridTime,
    txn: Option<TxnId>,
    atomic: bool,
    request: Option<&RequestRecord>,
) {
    match txn {
        None => {
            out.push(TAG_WRITE);
            codec::put_u64(out, ts.0);
            out.push(atomic as u8 | (request.is_some() as u8) << 1);
        }
        Some(txn) => {
            out.push(TAG_TXN_WRITE);
            codec::put_u64(out, txn.0);
            codec::put_u64(out, ts.0);
            out.push(request.is_some() as u8);
        }
    }
    if let Some(r) = request {
        r.encode(out);
    }
}

/// Encodes the [`LogRecord::Write`] (`txn` `None`; a transaction's write is never
/// `atomic` in the record) or [`LogRecord::TxnWrite`] of `ops` validated against
/// `schema`: the bytes that building the record from [`logged_op`]s and encoding it
/// give, written straight from the ops without copying a cell.
pub fn encode_write_record<'a>(
    ts: HybridTime,
    txn: Option<TxnId>,
    atomic: bool,
    request: Option<&RequestRecord>,
    schema: &Schema,
    ops: impl ExactSizeIterator<Item = &'a RowOp>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + ops.len() * 16 * schema.num_columns());
    put_write_header(&mut out, ts, txn, atomic, request);
    codec::put_u32(&mut out, ops.len() as u32);
    for op in ops {
        out.push(op.kind.tag());
        let cells = op.values.iter().filter(|v| v.is_some()).count();
        codec::put_u32(&mut out, cells as u32);
        for (i, v) in op.values.iter().enumerate() {
            if let Some(v) = v {
                codec::put_u32(&mut out, schema.column(i).id);
                codec::put_value(&mut out, v);
            }
        }
    }
    out
}

/// Reads a list written by [`put_ops`].
fn read_ops(r: &mut Reader<'_>) -> cairn_common::Result<Vec<LoggedOp>> {
    let n = r.u32()? as usize;
    if n > r.remaining() {
        return Err(bad_record("op count exceeds the data"));
    }
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = OpKind::from_tag(r.u8()?).ok_or_else(|| bad_record("unknown op kind"))?;
        let m = r.u32()? as usize;
        if m > r.remaining() {
            return Err(bad_record("cell count exceeds the data"));
        }
        let mut cells = Vec::with_capacity(m);
        for _ in 0..m {
            let id = r.u32()?;
            cells.push((id, r.value()?));
        }
        ops.push(LoggedOp { kind, cells });
    }
    Ok(ops)
}

impl LogRecord {
    /// Builds a write record from ops validated against `schema`.
    pub fn write(ts: HybridTime, schema: &Schema, ops: &[&RowOp]) -> LogRecord {
        let ops = ops.iter().map(|op| logged_op(schema, op)).collect();
        LogRecord::Write {
            ts,
            ops,
            atomic: false,
            request: None,
        }
    }

    /// Serialises the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            LogRecord::Write {
                ts,
                ops,
                atomic,
                request,
            } => {
                put_write_header(&mut out, *ts, None, *atomic, request.as_ref());
                put_ops(&mut out, ops);
            }
            LogRecord::TxnWrite {
                txn,
                ts,
                ops,
                request,
            } => {
                put_write_header(&mut out, *ts, Some(*txn), false, request.as_ref());
                put_ops(&mut out, ops);
            }
            LogRecord::TxnBeginCommit { txn, ts, role } => {
                out.push(match role {
                    None => TAG_TXN_BEGIN_COMMIT,
                    Some(_) => TAG_TXN_BEGIN_COMMIT_ROLE,
                });
                codec::put_u64(&mut out, txn.0);
                codec::put_u64(&mut out, ts.0);
                match role {
                    None => {}
                    Some(TxnRole::Home) => out.push(0),
                    Some(TxnRole::Participant {
                        table_id,
                        tablet_id,
                    }) => {
                        out.push(1);
                        codec::put_bytes(&mut out, table_id.as_bytes());
                        codec::put_bytes(&mut out, tablet_id.as_bytes());
                    }
                }
            }
            LogRecord::TxnFinish {
                txn,
                commit_ts,
                ops,
            } => {
                out.push(TAG_TXN_FINISH);
                codec::put_u64(&mut out, txn.0);
                out.push(commit_ts.is_some() as u8);
                codec::put_u64(&mut out, commit_ts.map_or(0, |t| t.0));
                put_ops(&mut out, ops);
            }
            LogRecord::SetSubspaces {
                ts,
                version,
                layouts,
            } => {
                out.push(TAG_SET_SUBSPACES);
                codec::put_u64(&mut out, ts.0);
                codec::put_u64(&mut out, *version);
                codec::put_bytes(&mut out, layouts);
            }
            LogRecord::ChainsDone { done } => {
                out.push(TAG_CHAINS_DONE);
                codec::put_u32(&mut out, done.len() as u32);
                for (ts, key) in done {
                    codec::put_u64(&mut out, *ts);
                    codec::put_bytes(&mut out, key);
                }
            }
            LogRecord::AlterSchema { schema } => {
                out.push(TAG_ALTER);
                codec::put_bytes(&mut out, &serde_json::to_vec(schema).unwrap_or_default());
            }
            LogRecord::BulkInsert { ts, ipc, request } => {
                return Self::encode_bulk(*ts, ipc, request.as_ref());
            }
        }
        out
    }

    /// Serialises a [`LogRecord::BulkInsert`] without copying its rows first.
    pub fn encode_bulk(ts: HybridTime, ipc: &[u8], request: Option<&RequestRecord>) -> Vec<u8> {
        let mut out = Vec::with_capacity(ipc.len() + 64);
        out.push(TAG_BULK);
        codec::put_u64(&mut out, ts.0);
        out.push(request.is_some() as u8);
        if let Some(r) = request {
            r.encode(&mut out);
        }
        codec::put_bytes(&mut out, ipc);
        out
    }

    /// Parses a record written by [`LogRecord::encode`] (or by an earlier version).
    pub fn decode(b: &[u8]) -> cairn_common::Result<LogRecord> {
        let mut r = Reader::new(b, "log record");
        match r.u8()? {
            tag @ (TAG_WRITE_V1 | TAG_WRITE) => {
                let ts = HybridTime(r.u64()?);
                let (atomic, request) = if tag == TAG_WRITE {
                    let flags = r.u8()?;
                    let request = if flags & 2 != 0 {
                        Some(RequestRecord::decode(&mut r)?)
                    } else {
                        None
                    };
                    (flags & 1 != 0, request)
                } else {
                    (false, None)
                };
                let ops = read_ops(&mut r)?;
                Ok(LogRecord::Write {
                    ts,
                    ops,
                    atomic,
                    request,
                })
            }
            TAG_ALTER => {
                let bytes = r.bytes()?;
                let schema = serde_json::from_slice(bytes)
                    .map_err(|e| bad_record(&format!("bad schema: {e}")))?;
                Ok(LogRecord::AlterSchema { schema })
            }
            tag @ (TAG_BULK_V1 | TAG_BULK) => {
                let ts = HybridTime(r.u64()?);
                let request = if tag == TAG_BULK && r.u8()? == 1 {
                    Some(RequestRecord::decode(&mut r)?)
                } else {
                    None
                };
                let ipc = r.bytes()?.to_vec();
                Ok(LogRecord::BulkInsert { ts, ipc, request })
            }
            TAG_TXN_WRITE => {
                let txn = TxnId(r.u64()?);
                let ts = HybridTime(r.u64()?);
                let request = if r.u8()? == 1 {
                    Some(RequestRecord::decode(&mut r)?)
                } else {
                    None
                };
                let ops = read_ops(&mut r)?;
                Ok(LogRecord::TxnWrite {
                    txn,
                    ts,
                    ops,
                    request,
                })
            }
            tag @ (TAG_TXN_BEGIN_COMMIT | TAG_TXN_BEGIN_COMMIT_ROLE) => {
                let txn = TxnId(r.u64()?);
                let ts = HybridTime(r.u64()?);
                let role = if tag == TAG_TXN_BEGIN_COMMIT {
                    None
                } else {
                    Some(match r.u8()? {
                        0 => TxnRole::Home,
                        1 => TxnRole::Participant {
                            table_id: r.string()?,
                            tablet_id: r.string()?,
                        },
                        t => return Err(bad_record(&format!("unknown transaction role {t}"))),
                    })
                };
                Ok(LogRecord::TxnBeginCommit { txn, ts, role })
            }
            TAG_TXN_FINISH => {
                let txn = TxnId(r.u64()?);
                let commit = r.u8()? == 1;
                let ts = HybridTime(r.u64()?);
                let ops = read_ops(&mut r)?;
                Ok(LogRecord::TxnFinish {
                    txn,
                    commit_ts: commit.then_some(ts),
                    ops,
                })
            }
            TAG_SET_SUBSPACES => Ok(LogRecord::SetSubspaces {
                ts: HybridTime(r.u64()?),
                version: r.u64()?,
                layouts: r.bytes()?.to_vec(),
            }),
            TAG_CHAINS_DONE => {
                let n = r.u32()? as usize;
                let mut done = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    let ts = r.u64()?;
                    done.push((ts, r.bytes()?.to_vec()));
                }
                Ok(LogRecord::ChainsDone { done })
            }
            t => Err(bad_record(&format!("unknown record type {t}"))),
        }
    }
}

/// The logged form of an op validated against `schema`.
pub fn logged_op(schema: &Schema, op: &RowOp) -> LoggedOp {
    let cells = op
        .values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.as_ref().map(|v| (schema.column(i).id, v.clone())))
        .collect();
    LoggedOp {
        kind: op.kind,
        cells,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write record encoded straight from its ops is byte for byte the record built
    /// from their logged forms, with and without a transaction, a request or cells.
    #[test]
    fn write_records_encode_from_ops_like_logged_ops() {
        use cairn_common::{ColumnSpec, DataType};
        let schema = cairn_common::Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("s", DataType::String),
                ColumnSpec::new("d", DataType::Double),
            ],
            &["k"],
        )
        .unwrap();
        let ops = [
            RowOp::new(
                OpKind::Insert,
                vec![
                    Some(Value::Int64(1)),
                    Some(Value::String("ü".into())),
                    Some(Value::Null),
                ],
            ),
            RowOp::new(
                OpKind::Update,
                vec![Some(Value::Int64(2)), None, Some(Value::Double(0.5))],
            ),
            RowOp::new(OpKind::Delete, vec![Some(Value::Int64(3)), None, None]),
        ];
        let request = RequestRecord::new(
            RequestId {
                client_id: "c".into(),
                seq_no: 3,
                first_incomplete_seq_no: 1,
            },
            vec![0, 2, 5],
            &[(1, RowError::Invalid("x".into()))],
        );
        let logged: Vec<LoggedOp> = ops.iter().map(|o| logged_op(&schema, o)).collect();
        for request in [None, Some(request)] {
            for atomic in [false, true] {
                let want = LogRecord::Write {
                    ts: HybridTime(9),
                    ops: logged.clone(),
                    atomic,
                    request: request.clone(),
                }
                .encode();
                let got = encode_write_record(
                    HybridTime(9),
                    None,
                    atomic,
                    request.as_ref(),
                    &schema,
                    ops.iter(),
                );
                assert_eq!(got, want);
            }
            let want = LogRecord::TxnWrite {
                txn: TxnId(4),
                ts: HybridTime(9),
                ops: logged.clone(),
                request: request.clone(),
            }
            .encode();
            let got = encode_write_record(
                HybridTime(9),
                Some(TxnId(4)),
                false,
                request.as_ref(),
                &schema,
                ops.iter(),
            );
            assert_eq!(got, want);
        }
    }

    #[test]
    fn log_records_round_trip() {
        let rec = LogRecord::Write {
            ts: HybridTime(42),
            ops: vec![
                LoggedOp {
                    kind: OpKind::Insert,
                    cells: vec![(0, Value::Int64(1)), (1, Value::String("a".into()))],
                },
                LoggedOp {
                    kind: OpKind::Delete,
                    cells: vec![(0, Value::Int64(2))],
                },
            ],
            atomic: true,
            request: Some(RequestRecord {
                id: RequestId {
                    client_id: "c1".into(),
                    seq_no: 7,
                    first_incomplete_seq_no: 5,
                },
                positions: vec![0, 2, 3],
                early_errors: vec![(1, RowError::Invalid("bad".into()))],
            }),
        };
        assert_eq!(LogRecord::decode(&rec.encode()).unwrap(), rec);
        let done = LogRecord::ChainsDone {
            done: vec![(7, b"k1".to_vec()), (9, vec![])],
        };
        assert_eq!(LogRecord::decode(&done.encode()).unwrap(), done);
        let set = LogRecord::SetSubspaces {
            ts: HybridTime(11),
            version: 3,
            layouts: b"[]".to_vec(),
        };
        assert_eq!(LogRecord::decode(&set.encode()).unwrap(), set);
        // The first record form (no flags, no conditions) is still read.
        let mut v1 = vec![1u8];
        codec::put_u64(&mut v1, 42);
        codec::put_u32(&mut v1, 1);
        v1.push(OpKind::Delete.tag());
        codec::put_u32(&mut v1, 1);
        codec::put_u32(&mut v1, 0);
        codec::put_value(&mut v1, &Value::Int64(2));
        assert_eq!(
            LogRecord::decode(&v1).unwrap(),
            LogRecord::Write {
                ts: HybridTime(42),
                ops: vec![LoggedOp {
                    kind: OpKind::Delete,
                    cells: vec![(0, Value::Int64(2))],
                }],
                atomic: false,
                request: None,
            }
        );
        let schema = cairn_common::Schema::new(
            vec![cairn_common::ColumnSpec::new(
                "k",
                cairn_common::DataType::Int64,
            )],
            &["k"],
        )
        .unwrap();
        let alter = LogRecord::AlterSchema {
            schema: crate::metadata::SchemaMeta::from_schema(&schema),
        };
        assert_eq!(LogRecord::decode(&alter.encode()).unwrap(), alter);
        let bulk = LogRecord::BulkInsert {
            ts: HybridTime(9),
            ipc: vec![1, 2, 3],
            request: None,
        };
        assert_eq!(LogRecord::decode(&bulk.encode()).unwrap(), bulk);
        let txn_records = [
            LogRecord::TxnWrite {
                txn: TxnId(77),
                ts: HybridTime(10),
                ops: vec![LoggedOp {
                    kind: OpKind::Upsert,
                    cells: vec![(0, Value::Int64(5))],
                }],
                request: None,
            },
            LogRecord::TxnBeginCommit {
                txn: TxnId(77),
                ts: HybridTime(11),
                role: None,
            },
            LogRecord::TxnBeginCommit {
                txn: TxnId(77),
                ts: HybridTime(11),
                role: Some(TxnRole::Home),
            },
            LogRecord::TxnBeginCommit {
                txn: TxnId(77),
                ts: HybridTime(11),
                role: Some(TxnRole::Participant {
                    table_id: "tbl".into(),
                    tablet_id: "tab-ü".into(),
                }),
            },
            LogRecord::TxnFinish {
                txn: TxnId(77),
                commit_ts: Some(HybridTime(12)),
                ops: vec![LoggedOp {
                    kind: OpKind::Delete,
                    cells: vec![(0, Value::Int64(5))],
                }],
            },
            LogRecord::TxnFinish {
                txn: TxnId(78),
                commit_ts: None,
                ops: vec![],
            },
        ];
        for rec in &txn_records {
            assert_eq!(&LogRecord::decode(&rec.encode()).unwrap(), rec);
        }
        let encoded: Vec<Vec<u8>> = txn_records.iter().map(LogRecord::encode).collect();
        let batch = encode_batch(&encoded);
        let back = decode_batch(&batch).unwrap().unwrap();
        assert_eq!(back, encoded.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(decode_batch(&encoded[0]).unwrap(), None);
        assert!(decode_batch(&batch[..batch.len() - 1]).is_err());
        assert!(decode_batch(&[TAG_BATCH, 255, 255, 255, 255]).is_err());
        let errs = vec![(3, RowError::Conflict), (9, RowError::Invalid("m".into()))];
        assert_eq!(decode_row_errors(&encode_row_errors(&errs)).unwrap(), errs);
        assert!(LogRecord::decode(&[1, 2, 3]).is_err());
        let mut buf = Vec::new();
        RowChange::Reinsert(vec![(3, Value::Null)]).encode(&mut buf);
        assert_eq!(
            RowChange::decode(&mut Reader::new(&buf, "t")).unwrap(),
            RowChange::Reinsert(vec![(3, Value::Null)])
        );
    }
}
