//! `CairnWriteExec`: INSERT, UPSERT, UPDATE, DELETE and COPY as keyed row operations.
//!
//! Its input produces rows; each row becomes one [`Operation`] sent through a
//! [`WriteSession`] that batches rows per tablet and writes in the background. The
//! node returns one row with the number of rows written (`count`), as DataFusion
//! expects of DML. Like Kudu, a statement is not atomic across rows: when a row is
//! rejected the statement fails with that row's error, and the rows written before it
//! stay written (the error says how many).

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, UInt64Array};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema, SchemaRef};
use arrow::record_batch::RecordBatch;
use cairn_client::{Client, FlushMode, Operation, RowErrorInfo, Table};
use cairn_common::Value;
use cairn_proto::RowErrorKind;
use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, execute_stream,
};
use futures::StreamExt;

use crate::error::{SqlError, df_err};
use crate::options::InsertMode;

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

/// Writes its input's rows into a Cairn table and returns the count.
#[derive(Debug)]
pub struct CairnWriteExec {
    client: Client,
    table: Table,
    kind: WriteKind,
    input: Arc<dyn ExecutionPlan>,
    batch_rows: usize,
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

impl CairnWriteExec {
    /// A write of `input`'s rows as `kind` into `table`.
    pub fn new(
        client: Client,
        table: Table,
        kind: WriteKind,
        input: Arc<dyn ExecutionPlan>,
        batch_rows: usize,
    ) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        CairnWriteExec {
            client,
            table,
            kind,
            input,
            batch_rows: batch_rows.max(1),
            props: Arc::new(props),
        }
    }
}

impl DisplayAs for CairnWriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let what = match &self.kind {
            WriteKind::Insert(InsertMode::Insert) => "insert".to_string(),
            WriteKind::Insert(InsertMode::Upsert) => "upsert".to_string(),
            WriteKind::Insert(InsertMode::Ignore) => "insert ignore".to_string(),
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
        )))
    }

    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = execute_stream(self.input.clone(), context)?;
        let client = self.client.clone();
        let table = self.table.clone();
        let kind = self.kind.clone();
        let batch_rows = self.batch_rows;
        let fut = async move {
            let n = write_rows(client, table, kind, input, batch_rows)
                .await
                .map_err(df_err)?;
            let col: ArrayRef = Arc::new(UInt64Array::from(vec![n]));
            Ok(RecordBatch::try_new(count_schema(), vec![col])?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            futures::stream::once(fut),
        )))
    }
}

/// Writes every row of `input`; returns the number of rows written.
pub async fn write_rows(
    client: Client,
    table: Table,
    kind: WriteKind,
    mut input: SendableRecordBatchStream,
    batch_rows: usize,
) -> Result<u64, SqlError> {
    let schema = table.schema.clone();
    let mut session = client.new_session(&table);
    session.set_flush_mode(FlushMode::AutoFlushBackground);
    session.set_batch_rows(batch_rows);
    let keys: Vec<usize> = schema.key_indexes().to_vec();
    let mut applied: u64 = 0;
    let mut row_errors: Vec<RowErrorInfo> = vec![];
    while let Some(batch) = input.next().await {
        let batch = batch?;
        let types: Vec<cairn_common::DataType> = match &kind {
            WriteKind::Insert(_) => schema
                .columns()
                .iter()
                .map(|c| c.data_type.clone())
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
                    table.name,
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
        for row in 0..batch.num_rows() {
            let mut values = Vec::with_capacity(columns.len());
            for (a, t) in columns.iter().zip(&types) {
                values.push(Value::from_array(a.as_ref(), row, t)?);
            }
            let op = match &kind {
                WriteKind::Insert(InsertMode::Insert) => Operation::insert(values),
                WriteKind::Insert(InsertMode::Upsert) => Operation::upsert(values),
                WriteKind::Insert(InsertMode::Ignore) => Operation::insert_ignore(values),
                WriteKind::Delete => Operation::delete(&schema, &values)?,
                WriteKind::Update { columns } => {
                    let (key, rest) = values.split_at(keys.len());
                    let cells: Vec<(&str, Value)> = columns
                        .iter()
                        .map(String::as_str)
                        .zip(rest.iter().cloned())
                        .collect();
                    Operation::update(&schema, key, &cells)?
                }
            };
            session.apply(op).await?;
            applied += 1;
        }
        if session.pending() >= batch_rows * 8 {
            row_errors.extend(session.flush().await?);
        }
    }
    row_errors.extend(session.flush().await?);
    // A row that vanished between the scan and its UPDATE/DELETE is not an error.
    let (benign, fatal): (Vec<_>, Vec<_>) = row_errors
        .into_iter()
        .partition(|e| e.kind == RowErrorKind::NotFound && !matches!(kind, WriteKind::Insert(_)));
    let written = applied - (benign.len() + fatal.len()) as u64;
    if let Some(first) = fatal.into_iter().min_by_key(|e| e.op_index) {
        let what = match first.kind {
            RowErrorKind::AlreadyPresent => {
                "duplicate key value violates the primary key (use UPSERT INTO or \
                 INSERT ... ON CONFLICT DO NOTHING to replace or skip existing rows)"
                    .to_string()
            }
            _ => first.message.clone(),
        };
        let key: Vec<String> = keys
            .iter()
            .filter_map(|&i| match &kind {
                WriteKind::Insert(_) => first.op.values.get(i).cloned().flatten(),
                _ => None,
            })
            .map(|v| v.to_string())
            .collect();
        let key = if key.is_empty() {
            String::new()
        } else {
            format!(" (key {})", key.join(", "))
        };
        return Err(SqlError::Row {
            kind: first.kind,
            message: format!(
                "{what}{key}; {written} other rows of this statement were written \
                 (statements are not atomic across rows)"
            ),
        });
    }
    Ok(written)
}
