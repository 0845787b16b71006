//! `CairnWriteExec`: INSERT, UPSERT, UPDATE and DELETE as keyed row operations.
//!
//! Its input produces rows; each row becomes one [`Operation`]. What a statement
//! guarantees:
//!
//! - **All or nothing.** A statement's changes to one tablet are written as one
//!   all-or-nothing request (one Raft record, one timestamp): if any row fails (a
//!   duplicate key) none of that tablet's rows is written. A statement whose rows go to
//!   several tablets writes them in a transaction of its own
//!   ([`cairn_client::Transaction`]), committed once every row is written and rolled
//!   back on an error, so it is all or nothing across tablets too. Only a statement
//!   changing more than `cairn.max_atomic_rows` rows of one tablet is written in
//!   several requests outside a transaction, and is not atomic.
//! - **Transactions.** Inside `BEGIN` … `COMMIT` ([`crate::txn`]) the rows are the
//!   transaction's provisional writes, its scans see them, and under REPEATABLE READ a
//!   row changed since the transaction's snapshot fails the statement with 40001
//!   instead of being re-read.
//! - **No lost updates.** UPDATE and DELETE read the matching rows at the statement's
//!   snapshot and write each change on the condition that the row has not changed
//!   since ([`cairn_client::Condition::unchanged_since`], checked by the tablet leader
//!   under the row lock). Rows that did change are read again at a new snapshot, their
//!   WHERE clause and SET expressions evaluated again on the new values, and written
//!   again — as PostgreSQL's READ COMMITTED re-checks a row an UPDATE finds updated. So
//!   `SET c = c + 1` from many clients counts every increment, and a DELETE racing an
//!   UPDATE decides on the row's latest values. After [`MAX_REEVALUATIONS`] rounds of
//!   conflicts the statement fails with SQLSTATE 40001 (retry it).
//! - **Exactly once.** Every request carries the client's request id, so a retry after
//!   a lost answer does not apply a change twice.
//!
//! The node returns one row with the number of rows written (`count`), as DataFusion
//! expects of DML.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, UInt64Array};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, FlushMode, Operation, RowErrorInfo, Table, Transaction};
use cairn_common::Value;
use cairn_proto::RowErrorKind;
use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::TaskContext;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, execute_stream,
};
use futures::StreamExt;

use crate::error::{SqlError, df_err};
use crate::options::{InsertMode, StatementContext};
use crate::provider::CairnTable;
use crate::txn::SessionTxn;

/// How many times an UPDATE or DELETE re-reads rows that changed under it before it
/// gives up with SQLSTATE 40001.
pub const MAX_REEVALUATIONS: usize = 100;

/// What each input row turns into.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteKind {
    /// The input has the table's columns; each row is inserted.
    Insert(InsertMode),
    /// The input has the key columns, then the new values of `columns`.
    Update {
        /// Names of the updated columns, in input order after the key columns.
        columns: Vec<String>,
    },
    /// The input has the key columns; each row is deleted.
    Delete,
}

/// Plans the rows of an UPDATE or DELETE again for some keys, at a fresh snapshot:
/// the same WHERE clause and SET expressions, restricted to those keys.
#[derive(Clone)]
pub struct Requery {
    /// The table.
    pub(crate) provider: CairnTable,
    /// The statement's session state (a fresh statement context is set per round).
    pub(crate) state: SessionState,
    /// The statement's WHERE clause, as conjuncts.
    pub(crate) filters: Vec<Expr>,
    /// The SET expressions (UPDATE), after the key columns.
    pub(crate) extra: Vec<Expr>,
}

impl fmt::Debug for Requery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Requery({})", self.provider.table().name)
    }
}

impl Requery {
    /// The plan producing the rows among `keys` (key values in key-column order) that
    /// still match, and the statement context whose snapshot it reads at.
    async fn plan(
        &self,
        keys: &[Vec<Value>],
        txn: Option<Arc<SessionTxn>>,
    ) -> Result<(Arc<dyn ExecutionPlan>, Arc<StatementContext>)> {
        let schema = &self.provider.table().schema;
        let key_cols: Vec<Expr> = schema
            .key_indexes()
            .iter()
            .map(|&i| {
                datafusion::logical_expr::col(datafusion::common::Column::new_unqualified(
                    schema.column(i).name.clone(),
                ))
            })
            .collect();
        let lit = |v: &Value, i: usize| {
            Expr::Literal(
                crate::types::value_to_scalar(v, &schema.column(schema.key_indexes()[i]).data_type),
                None,
            )
        };
        let key_filter = if key_cols.len() == 1 {
            key_cols[0]
                .clone()
                .in_list(keys.iter().map(|k| lit(&k[0], 0)).collect(), false)
        } else {
            keys.iter()
                .map(|k| {
                    key_cols
                        .iter()
                        .enumerate()
                        .map(|(i, c)| c.clone().eq(lit(&k[i], i)))
                        .reduce(Expr::and)
                        .unwrap_or(Expr::Literal(
                            datafusion::common::ScalarValue::Boolean(Some(false)),
                            None,
                        ))
                })
                .reduce(Expr::or)
                .unwrap_or(Expr::Literal(
                    datafusion::common::ScalarValue::Boolean(Some(false)),
                    None,
                ))
        };
        let ctx = StatementContext::new_in(None, InsertMode::Insert, txn);
        let mut state = self.state.clone();
        state.config_mut().set_extension(ctx.clone());
        let mut filters = self.filters.clone();
        filters.push(key_filter);
        let plan = self
            .provider
            .matching_rows(&state, filters, self.extra.clone())
            .await?;
        Ok((plan, ctx))
    }
}

/// Writes its input's rows into a Cairn table and returns the count.
#[derive(Debug)]
pub struct CairnWriteExec {
    pub(crate) client: Client,
    pub(crate) table: Table,
    pub(crate) kind: WriteKind,
    pub(crate) input: Arc<dyn ExecutionPlan>,
    pub(crate) batch_rows: usize,
    pub(crate) max_atomic_rows: usize,
    requery: Option<Requery>,
    props: Arc<PlanProperties>,
}

/// The schema of a DML result: one `count` column.
pub fn count_schema() -> SchemaRef {
    Arc::new(ArrowSchema::new(vec![Field::new(
        "count",
        ArrowType::UInt64,
        false,
    )]))
}

/// The row count a DML plan answered with (its first `count`), 0 if none.
pub(crate) fn count_of(batches: &[RecordBatch]) -> u64 {
    batches
        .first()
        .and_then(|b| b.column(0).as_any().downcast_ref::<UInt64Array>())
        .filter(|a| !a.is_empty())
        .map_or(0, |a| a.value(0))
}

impl CairnWriteExec {
    /// A write of `input`'s rows as `kind` into `table`. `requery` (UPDATE and DELETE)
    /// re-reads rows that changed after the statement read them.
    pub fn new(
        client: Client,
        table: Table,
        kind: WriteKind,
        input: Arc<dyn ExecutionPlan>,
        batch_rows: usize,
        max_atomic_rows: usize,
        requery: Option<Requery>,
    ) -> Self {
        CairnWriteExec {
            client,
            table,
            kind,
            input,
            batch_rows: batch_rows.max(1),
            max_atomic_rows: max_atomic_rows.max(1),
            requery,
            props: write_properties(count_schema(), 1),
        }
    }
}

impl DisplayAs for CairnWriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let what = match &self.kind {
            WriteKind::Insert(mode) => mode.name().to_string(),
            WriteKind::Update { columns } => format!("update [{}]", columns.join(", ")),
            WriteKind::Delete => "delete".to_string(),
        };
        write!(f, "CairnWriteExec: table={}, op={what}", self.table.name)
    }
}

impl ExecutionPlan for CairnWriteExec {
    fn name(&self) -> &str {
        "CairnWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children.pop().unwrap_or_else(|| self.input.clone());
        Ok(Arc::new(CairnWriteExec::new(
            self.client.clone(),
            self.table.clone(),
            self.kind.clone(),
            input,
            self.batch_rows,
            self.max_atomic_rows,
            self.requery.clone(),
        )))
    }

    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let statement = context.session_config().get_extension::<StatementContext>();
        let input = execute_stream(self.input.clone(), context.clone())?;
        let w = StatementWrite {
            client: self.client.clone(),
            table: self.table.clone(),
            kind: self.kind.clone(),
            batch_rows: self.batch_rows,
            max_atomic_rows: self.max_atomic_rows,
            requery: self.requery.clone(),
            context,
        };
        let fut = async move {
            let n = w.run(input, statement).await.map_err(df_err)?;
            let col: ArrayRef = Arc::new(UInt64Array::from(vec![n]));
            Ok(RecordBatch::try_new(count_schema(), vec![col])?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            futures::stream::once(fut),
        )))
    }
}

/// Where a write without a scan of its own goes (CREATE TABLE AS, COPY in a
/// transaction block, one share of a distributed insert), and in what sizes.
#[derive(Clone, Debug)]
pub struct WriteTarget {
    /// The client that writes.
    pub client: Client,
    /// The table written to.
    pub table: Table,
    /// Insert (in which mode) or update.
    pub kind: WriteKind,
    /// Rows per write request (`cairn.write_batch_rows`).
    pub batch_rows: usize,
    /// The most rows a tablet takes in one atomic request (`cairn.max_atomic_rows`).
    pub max_atomic_rows: usize,
}

impl WriteTarget {
    /// The statement's write, with no requery.
    fn statement(self, context: Arc<TaskContext>) -> StatementWrite {
        StatementWrite {
            client: self.client,
            table: self.table,
            kind: self.kind,
            batch_rows: self.batch_rows.max(1),
            max_atomic_rows: self.max_atomic_rows.max(1),
            requery: None,
            context,
        }
    }

    /// Writes every row of `input`. With `txn` the rows are that transaction's
    /// provisional writes; without, each tablet's share is all or nothing. Returns
    /// the rows written.
    pub async fn write_rows(
        self,
        input: SendableRecordBatchStream,
        context: Arc<TaskContext>,
        txn: Option<Arc<SessionTxn>>,
    ) -> Result<u64, SqlError> {
        let statement = txn.map(|t| StatementContext::new_in(None, InsertMode::Insert, Some(t)));
        self.statement(context).run(input, statement).await
    }

    /// Writes every row of `input` for transaction `txn`, begun by another handle:
    /// one share of a statement whose rows several processes write (a distributed
    /// `INSERT … SELECT`, [`crate::distributed`]). The rows are provisional writes of
    /// `txn`, which the statement's coordinator commits or rolls back as a whole; a
    /// rejected row fails the share. As in a local statement, a share of more than
    /// `max_atomic_rows` rows is written in several requests outside the transaction
    /// instead, and is not atomic. Returns the rows written; `txn` knows the tablets
    /// written to in it.
    pub(crate) async fn write_share(
        self,
        input: SendableRecordBatchStream,
        context: Arc<TaskContext>,
        txn: &Transaction,
    ) -> Result<u64, SqlError> {
        let mut txns = Txns {
            explicit: None,
            implicit: None,
            share: Some(txn),
        };
        self.statement(context).rounds(input, None, &mut txns).await
    }
}

/// Commits the transaction of a statement's rows (`what`, for the message); a
/// commit the tablets refused (the transaction was aborted under it) can be run
/// again (40001).
pub(crate) async fn commit_statement(txn: Transaction, what: &str) -> Result<(), SqlError> {
    match txn.commit().await {
        Ok(_) => Ok(()),
        Err(cairn_client::ClientError::TxnNotOpen(m)) => Err(SqlError::other(
            "40001",
            format!("could not commit the rows of {what}: {m}; run it again"),
        )),
        Err(e) => Err(e.into()),
    }
}

/// The properties of a write node answering with `schema` in `partitions`
/// partitions, all at the end.
pub(crate) fn write_properties(schema: SchemaRef, partitions: usize) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(partitions),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// One statement's write.
struct StatementWrite {
    client: Client,
    table: Table,
    kind: WriteKind,
    batch_rows: usize,
    max_atomic_rows: usize,
    requery: Option<Requery>,
    context: Arc<TaskContext>,
}

/// The rows a round of writes did not write, and why.
#[derive(Default)]
struct Round {
    /// Rows written.
    written: u64,
    /// Keys to read again (their row changed, or their tablet's request was aborted
    /// because another of its rows changed).
    retry: Vec<Vec<Value>>,
    /// A row that fails the statement.
    fatal: Option<RowErrorInfo>,
}

/// The transactions a statement's writes may belong to.
struct Txns<'a> {
    /// The session's transaction (`BEGIN` … `COMMIT`), if the statement runs in one.
    explicit: Option<&'a SessionTxn>,
    /// The statement's own transaction, once its writes turned out to span several
    /// tablets.
    implicit: Option<Transaction>,
    /// The distributed statement this write is a share of ([`write_share`]).
    share: Option<&'a Transaction>,
}

impl StatementWrite {
    /// Writes every row of `input`, then re-evaluates rows that changed under the
    /// statement until none is left; returns the number of rows written. Outside a
    /// transaction block, a statement whose rows go to several tablets writes them
    /// in a transaction of its own, committed here (or rolled back on an error).
    async fn run(
        &self,
        input: SendableRecordBatchStream,
        statement: Option<Arc<StatementContext>>,
    ) -> Result<u64, SqlError> {
        let explicit = statement.as_ref().and_then(|s| s.txn.clone());
        let mut txns = Txns {
            explicit: explicit.as_deref(),
            implicit: None,
            share: None,
        };
        let result = self.rounds(input, statement, &mut txns).await;
        match (txns.implicit, result) {
            (Some(t), Ok(n)) => commit_statement(t, "the statement").await.map(|()| n),
            (Some(t), Err(mut e)) => {
                // Nothing of the statement stays.
                if let SqlError::Row { written, .. } = &mut e {
                    *written = 0;
                }
                if let Err(r) = t.rollback().await {
                    tracing::warn!(table = %self.table.name, error = %r,
                        "rolling back a failed statement's transaction");
                }
                Err(e)
            }
            (None, r) => r,
        }
    }

    /// The rounds of [`StatementWrite::run`].
    async fn rounds(
        &self,
        input: SendableRecordBatchStream,
        statement: Option<Arc<StatementContext>>,
        txns: &mut Txns<'_>,
    ) -> Result<u64, SqlError> {
        let conditional = !matches!(self.kind, WriteKind::Insert(_));
        if conditional
            && statement
                .as_ref()
                .is_some_and(|s| s.fixed_snapshot.is_some())
        {
            return Err(SqlError::other(
                "0A000",
                "UPDATE and DELETE change the latest rows and cannot read a past snapshot: \
                 unset cairn.read_timestamp (or drop AS OF) for this statement",
            ));
        }
        let mut round = self.write_round(input, statement.as_deref(), txns).await?;
        let mut written = round.written;
        let mut rounds = 0;
        while round.fatal.is_none() && !round.retry.is_empty() {
            let Some(requery) = &self.requery else { break };
            if let Some(t) = txns.explicit.filter(|t| t.isolation().fixed_snapshot()) {
                // The first committer wins: a row changed since the transaction's
                // snapshot cannot be changed by it.
                return Err(SqlError::other(
                    "40001",
                    format!(
                        "could not serialize access due to concurrent update: {} row(s) of \
                         '{}' changed after this {} transaction read them; roll back and \
                         retry the transaction",
                        round.retry.len(),
                        self.table.name,
                        t.isolation().name().to_uppercase()
                    ),
                ));
            }
            rounds += 1;
            if rounds > MAX_REEVALUATIONS {
                return Err(SqlError::other(
                    "40001",
                    format!(
                        "could not serialize access due to concurrent update: {} row(s) of \
                         '{}' kept changing under this statement; {written} row(s) were \
                         written. Retry the statement",
                        round.retry.len(),
                        self.table.name
                    ),
                ));
            }
            let keys = std::mem::take(&mut round.retry);
            let mut next = Round::default();
            let explicit = statement.as_ref().and_then(|s| s.txn.clone());
            for chunk in keys.chunks(1000) {
                let (plan, ctx) = requery
                    .plan(chunk, explicit.clone())
                    .await
                    .map_err(SqlError::from)?;
                let stream = execute_stream(plan, self.context.clone())?;
                let r = self.write_round(stream, Some(&ctx), txns).await?;
                next.written += r.written;
                next.retry.extend(r.retry);
                if next.fatal.is_none() {
                    next.fatal = r.fatal;
                }
            }
            written += next.written;
            round = next;
        }
        match round.fatal {
            None => Ok(written),
            Some(first) => Err(row_failure(
                &self.table,
                matches!(self.kind, WriteKind::Insert(_)),
                first,
                written,
                txns.explicit.is_some() || txns.implicit.is_some(),
            )),
        }
    }

    /// Writes the rows of `input` once: each tablet's share all or nothing, UPDATE and
    /// DELETE on the condition that their row is unchanged since `statement`'s snapshot.
    /// Rows go to the session's transaction if there is one; otherwise, if the rows
    /// of one request go to several tablets, to the statement's own transaction
    /// (made now if needed). A statement too large for one request per tablet
    /// (`max_atomic_rows`) is written in several requests outside any transaction.
    async fn write_round(
        &self,
        mut input: SendableRecordBatchStream,
        statement: Option<&StatementContext>,
        txns: &mut Txns<'_>,
    ) -> Result<Round, SqlError> {
        let schema = self.table.schema.clone();
        let mut session = match (txns.explicit, &txns.implicit) {
            (Some(t), _) => t.transaction().session(&self.table),
            (None, Some(t)) => t.session(&self.table),
            (None, None) => self.client.new_session(&self.table),
        };
        session.set_flush_mode(FlushMode::Manual);
        session.set_atomic(true);
        session.set_batch_rows(self.batch_rows);
        let keys: Vec<usize> = schema.key_indexes().to_vec();
        let conditional = !matches!(self.kind, WriteKind::Insert(_));
        let mut since: Option<u64> = None;
        let mut sent: u64 = 0;
        let mut split = false;
        let mut row_errors: Vec<RowErrorInfo> = vec![];
        while let Some(batch) = input.next().await {
            let batch = batch?;
            if conditional && since.is_none() && batch.num_rows() > 0 {
                // The scan has opened: its snapshot is the statement's.
                since = match statement {
                    Some(s) => *s.chosen_snapshot.lock().await,
                    None => None,
                };
                if since.is_none() {
                    return Err(SqlError::other(
                        "XX000",
                        "an UPDATE or DELETE read rows without a snapshot to write against",
                    ));
                }
            }
            let hidden_ids = match (&self.kind, schema.auto_id_index()) {
                (WriteKind::Insert(_), Some(_)) if batch.num_rows() > 0 => Some(
                    self.client
                        .next_auto_ids(&self.table, batch.num_rows())
                        .await?,
                ),
                _ => None,
            };
            for mut op in self.operations(&batch, hidden_ids.as_deref())? {
                if let Some(ts) = since {
                    op = op.unchanged_since(ts);
                }
                session.apply(op).await?;
                sent += 1;
            }
            if session.pending() >= self.max_atomic_rows {
                split = true;
                row_errors.extend(session.flush().await?);
            }
        }
        if !split && !session.in_transaction() {
            match txns.share {
                // A share's rows are the distributed statement's, even on one tablet.
                Some(t) => t.attach(&mut session),
                None if session.buffered_tablets() > 1 => txns
                    .implicit
                    .get_or_insert_with(|| self.client.begin_transaction())
                    .attach(&mut session),
                None => {}
            }
        }
        row_errors.extend(session.flush().await?);
        Ok(classify(row_errors, sent, conditional, &keys))
    }

    /// The operations of one input batch. An INSERT into a table with a hidden
    /// auto-incrementing key gets the table's other columns, and `hidden_ids` (one
    /// per row) fill the key.
    fn operations(
        &self,
        batch: &RecordBatch,
        hidden_ids: Option<&[i64]>,
    ) -> Result<Vec<Operation>, SqlError> {
        let schema = &self.table.schema;
        let keys: Vec<usize> = schema.key_indexes().to_vec();
        let hidden = hidden_ids.and(schema.auto_id_index());
        let types: Vec<cairn_common::DataType> = match &self.kind {
            WriteKind::Insert(_) => schema
                .columns()
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != hidden)
                .map(|(_, c)| c.data_type.clone())
                .collect(),
            WriteKind::Delete => keys
                .iter()
                .map(|&i| schema.column(i).data_type.clone())
                .collect(),
            WriteKind::Update { columns } => keys
                .iter()
                .map(|&i| schema.column(i).data_type.clone())
                .chain(columns.iter().map(|c| {
                    schema
                        .index_of(c)
                        .map(|i| schema.column(i).data_type.clone())
                        .unwrap_or(cairn_common::DataType::String)
                }))
                .collect(),
        };
        if batch.num_columns() != types.len() {
            return Err(SqlError::other(
                "XX000",
                format!(
                    "write to '{}' got {} columns, expected {}",
                    self.table.name,
                    batch.num_columns(),
                    types.len()
                ),
            ));
        }
        // Cast every column to the arrow type of its Cairn column.
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(&types)
            .map(|(a, t)| {
                let want = t.to_arrow();
                if a.data_type() == &want {
                    Ok(a.clone())
                } else {
                    arrow::compute::cast(a, &want)
                }
            })
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let mut values = Vec::with_capacity(columns.len());
            for (a, t) in columns.iter().zip(&types) {
                values.push(Value::from_array(a.as_ref(), row, t)?);
            }
            if let (Some(h), Some(ids)) = (hidden, hidden_ids) {
                values.insert(h, Value::Int64(ids[row]));
            }
            out.push(match &self.kind {
                WriteKind::Insert(InsertMode::Insert) => Operation::insert(values),
                WriteKind::Insert(InsertMode::Upsert) => Operation::upsert(values),
                WriteKind::Insert(InsertMode::Ignore) => Operation::insert_ignore(values),
                WriteKind::Delete => Operation::delete(schema, &values)?,
                WriteKind::Update { columns } => {
                    let (key, rest) = values.split_at(keys.len());
                    let cells: Vec<(&str, Value)> = columns
                        .iter()
                        .map(String::as_str)
                        .zip(rest.iter().cloned())
                        .collect();
                    Operation::update(schema, key, &cells)?
                }
            });
        }
        Ok(out)
    }
}

/// Sorts the rows a write round could not write: rows whose condition failed (or
/// whose tablet's request was aborted for another row) are read again when the
/// write is `conditional` (UPDATE, DELETE); a row that vanished before its UPDATE or
/// DELETE is not an error; anything else fails the statement (the first such row in
/// statement order). `sent` rows were applied; `keys` are the key columns' positions.
fn classify(row_errors: Vec<RowErrorInfo>, sent: u64, conditional: bool, keys: &[usize]) -> Round {
    let mut round = Round::default();
    let mut failed = 0u64;
    for e in row_errors {
        failed += 1;
        match e.kind {
            // A row that vanished between the scan and its UPDATE/DELETE is not an
            // error (its condition names it first, as a conflict, normally).
            RowErrorKind::NotFound if conditional => {}
            RowErrorKind::Conflict | RowErrorKind::Aborted if conditional => {
                round.retry.push(
                    keys.iter()
                        .map(|&i| e.op.values[i].clone().unwrap_or(Value::Null))
                        .collect(),
                );
            }
            RowErrorKind::Aborted => {}
            _ => {
                if round.fatal.as_ref().is_none_or(|f| e.op_index < f.op_index) {
                    round.fatal = Some(e);
                }
            }
        }
    }
    round.written = sent - failed;
    round
}

/// Writes the row operations of one keyed statement (the fast path of
/// [`crate::point`]) as one all-or-nothing request per tablet, and returns the rows
/// written. `insert`: the operations insert (or upsert) rows; otherwise they update
/// or delete one row named by its key, without a condition, and a missing row is
/// simply not written, as in PostgreSQL.
pub(crate) async fn write_keyed(
    client: &Client,
    table: &Table,
    ops: Vec<Operation>,
    insert: bool,
) -> Result<u64, SqlError> {
    let mut session = client.new_session(table);
    session.set_flush_mode(FlushMode::Manual);
    session.set_atomic(true);
    let sent = ops.len() as u64;
    for op in ops {
        session.apply(op).await?;
    }
    let row_errors = session.flush().await?;
    let keys: Vec<usize> = table.schema.key_indexes().to_vec();
    let round = classify(row_errors, sent, !insert, &keys);
    if let Some(first) = round.fatal {
        return Err(row_failure(table, insert, first, round.written, false));
    }
    if !round.retry.is_empty() {
        // Unconditional writes of one row are not retried by the tablet's rules;
        // a conflict here means the statement lost a race it cannot redo alone.
        return Err(SqlError::other(
            "40001",
            format!(
                "could not serialize access due to concurrent update of '{}': retry the \
                 statement",
                table.name
            ),
        ));
    }
    Ok(round.written)
}

/// The statement's error for a rejected row. `insert`: the statement inserts rows
/// (the error then names the row's key).
/// `in_txn`: the statement's rows belong to a transaction, so none of them stays.
fn row_failure(
    table: &Table,
    insert: bool,
    first: RowErrorInfo,
    written: u64,
    in_txn: bool,
) -> SqlError {
    let what = match first.kind {
        RowErrorKind::AlreadyPresent => {
            "duplicate key value violates the primary key (use UPSERT INTO or \
                 INSERT ... ON CONFLICT DO NOTHING to replace or skip existing rows)"
                .to_string()
        }
        _ => first.message.clone(),
    };
    let schema = &table.schema;
    let key: Vec<String> = schema
        .key_indexes()
        .iter()
        .filter_map(|&i| {
            if insert {
                first.op.values.get(i).cloned().flatten()
            } else {
                None
            }
        })
        .map(|v| v.to_string())
        .collect();
    let key = if key.is_empty() {
        String::new()
    } else {
        format!(" (key {})", key.join(", "))
    };
    let message = if in_txn {
        format!("{what}{key}")
    } else if written == 0 {
        format!("{what}{key}; nothing of this statement was written")
    } else {
        format!(
            "{what}{key}; nothing of this statement was written to that row's tablet, \
             {written} row(s) were written to other tablets (a statement of more than \
             cairn.max_atomic_rows rows is written in several requests and is not atomic)"
        )
    };
    SqlError::Row {
        kind: first.kind,
        message,
        written,
    }
}
