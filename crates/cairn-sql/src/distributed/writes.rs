//! Writes from the workers: a distributed `INSERT … SELECT` (and `CREATE TABLE AS`)
//! writes each row in the task that produced it, not through the coordinator.
//!
//! HRDBMS ("HRDBMS: Combining the Best of Modern and Traditional Relational
//! Databases", §3) runs every operator where its input is; an insert is one more
//! operator. Without this, every row of an `INSERT INTO t SELECT … FROM s` would
//! travel from the workers that read `s` to the front end and out again to `t`'s
//! tablet servers. With it, the plan DataFusion makes for an insert,
//!
//! ```text
//! CairnWriteExec: table=t          (one task, the front end)
//!   <the rows, in n partitions>
//! ```
//!
//! becomes, before the distributed planner cuts it into stages ([`WritesFromWorkers`]),
//!
//! ```text
//! CairnCommitExec: table=t         (the front end)
//!   CoalescePartitionsExec         (a stage boundary: a gather)
//!     CairnWriteShareExec: table=t (in every task of the stage producing the rows)
//!       <the rows>
//! ```
//!
//! The statement stays all or nothing. It is one transaction
//! ([`cairn_client::Transaction`]) begun by the coordinator when it plans the
//! statement; every share writes its rows as that transaction's provisional writes
//! through a handle joined by id ([`cairn_client::Client::join_transaction`]), which
//! keeps the tablets it wrote to alive while it writes, and answers with its row
//! count and those tablets. The coordinator's [`CairnCommitExec`] joins them as
//! they come (its keep-alives then hold them), checks that every share answered,
//! and commits (two-phase across tablets); if any share fails, or a worker is lost,
//! it aborts the transaction on every tablet of the table, so no provisional row is
//! left owned and a share still writing is refused. A rejected row fails its share
//! with the error a local insert gives (its SQLSTATE travels with it). As in a
//! local statement, a share of more than `cairn.max_atomic_rows` rows is written
//! outside the transaction, in several requests, and is not atomic. What happens
//! after a failure is [`super::run_write`]'s: an error after the commit took
//! effect answers with the committed count, and an insert that lost a worker before
//! its commit runs again on the workers left ([`may_run_again`]).
//!
//! Only inserts are written from the workers, and only outside `BEGIN … COMMIT`:
//! UPDATE and DELETE re-read rows that changed under them, which the front end does.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef, StringArray, UInt64Array};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use cairn_client::{Client, Table, Transaction};
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::TaskContext;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use futures::StreamExt;
use parking_lot::Mutex;

use crate::error::{SqlError, df_err};
use crate::options::InsertMode;
use crate::write::{
    CairnWriteExec, WriteKind, WriteTarget, commit_statement, count_schema, write_properties,
};

/// Rows this process wrote as shares of distributed inserts, since it started.
static SHARE_ROWS: AtomicU64 = AtomicU64::new(0);

/// How many rows this process's worker wrote for distributed inserts since the
/// process started (`cairn_worker_rows_written_total` on `/metrics`).
pub fn rows_written_by_worker() -> u64 {
    SHARE_ROWS.load(Ordering::Relaxed)
}

/// DataFusion's physical planner, with an insert into a Cairn table planned to be
/// written from the workers (see the module docs). The distributed planner runs it
/// first, then cuts the plan into stages.
#[derive(Debug)]
pub(crate) struct WritesFromWorkers;

#[async_trait]
impl QueryPlanner for WritesFromWorkers {
    async fn create_physical_plan(
        &self,
        logical: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::default()
            .create_physical_plan(logical, session)
            .await?;
        Ok(from_workers(&plan).unwrap_or(plan))
    }
}

/// `plan` as an insert written from the workers, if it is an insert into a Cairn
/// table; `None` otherwise. The statement's transaction begins now: its id travels
/// with the shares.
fn from_workers(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let w = plan.downcast_ref::<CairnWriteExec>()?;
    let WriteKind::Insert(mode) = w.kind else {
        return None;
    };
    let txn = w.client.begin_transaction();
    let share: Arc<dyn ExecutionPlan> = Arc::new(CairnWriteShareExec::new(
        w.client.clone(),
        w.table.clone(),
        mode,
        txn.id(),
        Arc::clone(&w.input),
        w.batch_rows,
        w.max_atomic_rows,
    ));
    let gathered: Arc<dyn ExecutionPlan> = if share.output_partitioning().partition_count() > 1 {
        Arc::new(CoalescePartitionsExec::new(share))
    } else {
        share
    };
    Some(Arc::new(CairnCommitExec::new(
        w.client.clone(),
        w.table.clone(),
        txn,
        gathered,
    )))
}

/// Whether `plan` is an insert planned to be written from the workers.
pub(crate) fn is_from_workers(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<CairnCommitExec>()
}

/// The commit of the insert written from the workers in `plan`, if it has one.
fn commit_of(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let mut found = None;
    let _ = plan.apply(|n| {
        if n.is::<CairnCommitExec>() {
            found = Some(Arc::clone(n));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The rows the insert written from the workers in `plan` committed, if it did.
/// An error the distributed run reports after the commit (a worker lost once its
/// share had answered) does not undo it.
pub(crate) fn committed_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<u64> {
    let commit = commit_of(plan)?;
    match *commit.downcast_ref::<CairnCommitExec>()?.state.lock() {
        CommitState::Committed(n) => Some(n),
        _ => None,
    }
}

/// Whether the insert written from the workers in `plan` ran and failed before
/// its commit was sent, so that it may run again as a new statement: nothing of it
/// took effect, unless a share wrote more than `cairn.max_atomic_rows` rows (then
/// outside the transaction, [`write_share`]). A table keyed by its primary key
/// refuses such rows a second time (23505); one keyed by a hidden auto-incremented
/// column would take them twice, so its inserts never run again.
pub(crate) fn may_run_again(plan: &Arc<dyn ExecutionPlan>) -> bool {
    commit_of(plan)
        .as_ref()
        .and_then(|c| c.downcast_ref::<CairnCommitExec>())
        .is_some_and(|c| {
            matches!(*c.state.lock(), CommitState::Running)
                && c.table.schema.auto_id_index().is_none()
        })
}

/// What a share answers: its row count (`tablet` null), then one row per tablet it
/// wrote to (`count` 0), or one row with the error that failed it (`sqlstate`).
fn share_schema() -> SchemaRef {
    Arc::new(ArrowSchema::new(vec![
        Field::new("count", ArrowType::UInt64, false),
        Field::new("tablet", ArrowType::Utf8, true),
        Field::new("sqlstate", ArrowType::Utf8, true),
        Field::new("error", ArrowType::Utf8, true),
    ]))
}

/// One task's share of a distributed insert: writes the rows of each of its input
/// partitions for the statement's transaction (joined by id) and answers with
/// [`share_schema`]'s rows. Runs on whichever worker produces the rows.
#[derive(Debug)]
pub struct CairnWriteShareExec {
    client: Client,
    table: Table,
    mode: InsertMode,
    txn: u64,
    input: Arc<dyn ExecutionPlan>,
    batch_rows: usize,
    max_atomic_rows: usize,
    props: Arc<PlanProperties>,
}

/// The parts of a [`CairnWriteShareExec`] that travel to a worker (its input travels
/// as a plan of its own).
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct ShareWire {
    /// [`Table::to_bytes`].
    pub(crate) table: Vec<u8>,
    pub(crate) mode: InsertMode,
    pub(crate) txn: u64,
    pub(crate) batch_rows: usize,
    pub(crate) max_atomic_rows: usize,
}

impl CairnWriteShareExec {
    /// A share writing `input`'s rows into `table` as `mode` for transaction `txn`.
    pub fn new(
        client: Client,
        table: Table,
        mode: InsertMode,
        txn: u64,
        input: Arc<dyn ExecutionPlan>,
        batch_rows: usize,
        max_atomic_rows: usize,
    ) -> Self {
        let props = write_properties(
            share_schema(),
            input.output_partitioning().partition_count(),
        );
        CairnWriteShareExec {
            client,
            table,
            mode,
            txn,
            input,
            batch_rows,
            max_atomic_rows,
            props,
        }
    }

    /// What travels to a worker.
    pub(crate) fn wire(&self) -> ShareWire {
        ShareWire {
            table: self.table.to_bytes(),
            mode: self.mode,
            txn: self.txn,
            batch_rows: self.batch_rows,
            max_atomic_rows: self.max_atomic_rows,
        }
    }

    /// The share `wire` describes, writing through `client`.
    pub(crate) fn from_wire(
        client: Client,
        wire: ShareWire,
        input: Arc<dyn ExecutionPlan>,
    ) -> Result<Self, String> {
        let table = Table::from_bytes(&wire.table).map_err(|e| e.to_string())?;
        Ok(CairnWriteShareExec::new(
            client,
            table,
            wire.mode,
            wire.txn,
            input,
            wire.batch_rows,
            wire.max_atomic_rows,
        ))
    }
}

impl DisplayAs for CairnWriteShareExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CairnWriteShareExec: table={}, op={}, txn={:016x}",
            self.table.name,
            self.mode.name(),
            self.txn
        )
    }
}

impl ExecutionPlan for CairnWriteShareExec {
    fn name(&self) -> &str {
        "CairnWriteShareExec"
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
        let input = children.pop().unwrap_or_else(|| Arc::clone(&self.input));
        Ok(Arc::new(CairnWriteShareExec::new(
            self.client.clone(),
            self.table.clone(),
            self.mode,
            self.txn,
            input,
            self.batch_rows,
            self.max_atomic_rows,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let (client, table, mode) = (self.client.clone(), self.table.clone(), self.mode);
        let (txn, batch_rows, max_atomic_rows) = (self.txn, self.batch_rows, self.max_atomic_rows);
        let fut = async move {
            let handle = client.join_transaction(txn);
            let target = WriteTarget {
                client,
                table,
                kind: WriteKind::Insert(mode),
                batch_rows,
                max_atomic_rows,
            };
            let written = target.write_share(input, context, &handle).await;
            let mut count = vec![];
            let mut tablets = vec![];
            let mut codes = vec![];
            let mut errors = vec![];
            match written {
                Ok(n) => {
                    SHARE_ROWS.fetch_add(n, Ordering::Relaxed);
                    count.push(n);
                    tablets.push(None);
                    for (t, _) in handle.tablets() {
                        count.push(0);
                        tablets.push(Some(t));
                    }
                    codes.resize(count.len(), None);
                    errors.resize(count.len(), None);
                }
                Err(e) => {
                    count.push(0);
                    tablets.push(None);
                    codes.push(Some(e.sqlstate().to_string()));
                    errors.push(Some(e.to_string()));
                }
            }
            let columns: Vec<ArrayRef> = vec![
                Arc::new(UInt64Array::from(count)),
                Arc::new(StringArray::from(tablets)),
                Arc::new(StringArray::from(codes)),
                Arc::new(StringArray::from(errors)),
            ];
            Ok(RecordBatch::try_new(share_schema(), columns)?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            share_schema(),
            futures::stream::once(fut),
        )))
    }
}

/// Where a distributed insert is, from its plan to its commit.
#[derive(Debug)]
enum CommitState {
    /// Planned, not run: holds the statement's transaction, begun at plan time.
    Planned(Transaction),
    /// Running, or failed before its commit was sent: nothing of it took effect
    /// (but see [`may_run_again`]).
    Running,
    /// The commit was sent: from then on the statement may have taken effect, and
    /// must not be run again.
    Committing,
    /// Committed, with the rows written.
    Committed(u64),
}

/// The head of a distributed insert, on the coordinator: gathers the shares'
/// answers, joins every tablet they wrote to the statement's transaction and
/// commits it, answering with the row count; or, if a share failed (or its worker
/// was lost), aborts the transaction on every tablet of the table and fails with
/// the share's error.
#[derive(Debug)]
pub struct CairnCommitExec {
    client: Client,
    table: Table,
    /// Where the statement is; shared by every copy of the node.
    state: Arc<Mutex<CommitState>>,
    input: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
}

impl CairnCommitExec {
    /// The head committing `txn` once `input` (the gathered shares) has answered.
    pub fn new(
        client: Client,
        table: Table,
        txn: Transaction,
        input: Arc<dyn ExecutionPlan>,
    ) -> Self {
        CairnCommitExec {
            client,
            table,
            state: Arc::new(Mutex::new(CommitState::Planned(txn))),
            input,
            props: write_properties(count_schema(), 1),
        }
    }
}

impl DisplayAs for CairnCommitExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CairnCommitExec: table={}", self.table.name)
    }
}

impl ExecutionPlan for CairnCommitExec {
    fn name(&self) -> &str {
        "CairnCommitExec"
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
        let input = children.pop().unwrap_or_else(|| Arc::clone(&self.input));
        Ok(Arc::new(CairnCommitExec {
            client: self.client.clone(),
            table: self.table.clone(),
            state: Arc::clone(&self.state),
            input,
            props: Arc::clone(&self.props),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(df_err(SqlError::other(
                "XX000",
                format!("CairnCommitExec has one partition, asked for {partition}"),
            )));
        }
        let txn = {
            let mut state = self.state.lock();
            match std::mem::replace(&mut *state, CommitState::Running) {
                CommitState::Planned(txn) => txn,
                other => {
                    *state = other;
                    return Err(df_err(SqlError::other(
                        "XX000",
                        "a distributed insert's plan ran twice; plan the statement again",
                    )));
                }
            }
        };
        // One answer per share partition, however the stages gather them.
        let shares = match self.input.downcast_ref::<CoalescePartitionsExec>() {
            Some(c) => c.input().output_partitioning().partition_count(),
            None => self.input.output_partitioning().partition_count(),
        };
        let input = self.input.execute(0, context);
        let (client, table) = (self.client.clone(), self.table.clone());
        let state = Arc::clone(&self.state);
        let fut = async move {
            let answers = match input {
                Ok(stream) => gather(stream, shares, &txn, &table).await,
                Err(e) => Err(SqlError::from(e)),
            };
            let n = match answers {
                Ok(written) => {
                    *state.lock() = CommitState::Committing;
                    let what = format!("the INSERT into '{}'", table.name);
                    commit_statement(txn, &what).await.map_err(df_err)?;
                    *state.lock() = CommitState::Committed(written);
                    written
                }
                Err(e) => {
                    abort_everywhere(&client, txn, &table).await;
                    return Err(df_err(e));
                }
            };
            let col: ArrayRef = Arc::new(UInt64Array::from(vec![n]));
            Ok(RecordBatch::try_new(count_schema(), vec![col])?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            futures::stream::once(fut),
        )))
    }
}

/// Reads the answers of the `shares` shares (see [`share_schema`]) and returns the
/// rows they wrote, or the first error a share answered with; fewer answers than
/// shares (a stream that ended early) is an error too. Each tablet a share wrote to joins `txn` as
/// soon as the share answers, so the coordinator's keep-alives hold it from then on
/// (the share's own stop when it ends), however long other shares take.
async fn gather(
    mut stream: SendableRecordBatchStream,
    shares: usize,
    txn: &Transaction,
    table: &Table,
) -> Result<u64, SqlError> {
    let mut written = 0;
    let mut answers = 0;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let column = |i: usize| batch.column(i).as_any();
        let (Some(count), Some(tablet), Some(code), Some(error)) = (
            column(0).downcast_ref::<UInt64Array>(),
            column(1).downcast_ref::<StringArray>(),
            column(2).downcast_ref::<StringArray>(),
            column(3).downcast_ref::<StringArray>(),
        ) else {
            return Err(SqlError::other(
                "XX000",
                "a share of a distributed insert answered with unexpected columns",
            ));
        };
        for row in 0..batch.num_rows() {
            if !error.is_null(row) {
                // The statement has failed: stop reading (the other shares are
                // cancelled, or refused once the transaction is aborted).
                return Err(SqlError::other(
                    sqlstate_of(code.value(row)),
                    error.value(row),
                ));
            } else if tablet.is_null(row) {
                answers += 1;
                written += count.value(row);
            } else {
                txn.join(tablet.value(row), table);
            }
        }
    }
    if answers != shares {
        return Err(SqlError::other(
            "XX000",
            format!(
                "{answers} of the {shares} shares of the INSERT into '{}' answered; \
                 nothing was written, run it again",
                table.name
            ),
        ));
    }
    Ok(written)
}

/// Aborts a failed distributed insert's transaction on every tablet of `table`:
/// shares that failed or whose worker was lost never said where they wrote, and a
/// share still writing is refused by a tablet that aborted the transaction.
async fn abort_everywhere(client: &Client, txn: Transaction, table: &Table) {
    match client.table_locations(table, false).await {
        Ok(tablets) => {
            for t in tablets.iter() {
                txn.join(&t.tablet_id, table);
            }
        }
        Err(e) => tracing::warn!(table = %table.name, error = %e,
            "listing the tablets of a failed distributed insert; those it wrote to are \
             aborted once their transaction is abandoned"),
    }
    if let Err(e) = txn.rollback().await {
        tracing::warn!(table = %table.name, error = %e,
            "rolling back a failed distributed insert");
    }
}

/// The `&'static` SQLSTATE for a code that crossed the network as text: PostgreSQL's
/// codes are five digits and capital letters; anything else is XX000. Each distinct
/// code is interned once.
fn sqlstate_of(code: &str) -> &'static str {
    static CODES: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    if code.len() != 5
        || !code
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
    {
        return "XX000";
    }
    let mut codes = CODES.lock();
    codes
        .get_or_insert_with(HashMap::new)
        .entry(code.to_string())
        .or_insert_with(|| Box::leak(code.to_string().into_boxed_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_cross_as_text() {
        assert_eq!(sqlstate_of("23505"), "23505");
        assert!(std::ptr::eq(sqlstate_of("40001"), sqlstate_of("40001")));
        assert_eq!(sqlstate_of("bad"), "XX000");
        assert_eq!(sqlstate_of("2350x"), "XX000");
    }
}
