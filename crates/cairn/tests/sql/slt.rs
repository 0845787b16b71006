//! Runs every sqllogictest file under `tests/slt/` against one in-process cluster,
//! each file in its own SQL session.

use std::path::PathBuf;

use arrow::datatypes::DataType as ArrowType;
use cairn_sql::{QueryResult, SqlError, SqlSession};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

use crate::{sql_cluster, strings};

/// A SQL session as a sqllogictest database.
struct CairnSlt(SqlSession);

#[async_trait::async_trait]
impl AsyncDB for CairnSlt {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let mut results = self.0.execute(sql).await?;
        let Some(last) = results.pop() else {
            return Ok(DBOutput::StatementComplete(0));
        };
        let last = last.without_copy()?;
        match last {
            QueryResult::Rows { ref schema, .. } => {
                let types = schema
                    .fields()
                    .iter()
                    .map(|f| match f.data_type() {
                        t if t.is_integer() => DefaultColumnType::Integer,
                        ArrowType::Float32 | ArrowType::Float64 | ArrowType::Decimal128(..) => {
                            DefaultColumnType::FloatingPoint
                        }
                        _ => DefaultColumnType::Text,
                    })
                    .collect();
                let batches = last_rows(last).await?;
                let rows = strings(&batches)
                    .into_iter()
                    .map(|r| {
                        r.into_iter()
                            .map(|c| {
                                if c.is_empty() {
                                    "(empty)".to_string()
                                } else {
                                    c
                                }
                            })
                            .collect()
                    })
                    .collect();
                Ok(DBOutput::Rows { types, rows })
            }
            QueryResult::Count { rows, .. } => Ok(DBOutput::StatementComplete(rows)),
            QueryResult::Done { .. } => Ok(DBOutput::StatementComplete(0)),
            QueryResult::CopyIn(_) | QueryResult::CopyOut { .. } => {
                Ok(DBOutput::StatementComplete(0))
            }
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "cairn"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }

    fn error_sql_state(e: &SqlError) -> Option<String> {
        Some(e.sqlstate().to_string())
    }
}

async fn last_rows(r: QueryResult) -> Result<Vec<arrow::record_batch::RecordBatch>, SqlError> {
    r.collect().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqllogictest_files() {
    let (_cl, engine) = sql_cluster(1).await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "slt files missing in {}", dir.display());
    let mut failures = vec![];
    for f in &files {
        let engine = engine.clone();
        let mut runner = sqllogictest::Runner::new(move || {
            let s = engine.session();
            async move { Ok(CairnSlt(s)) }
        });
        if let Err(e) = runner.run_file_async(f).await {
            failures.push(format!("{}:\n{e}", f.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "sqllogictest failures:\n{}",
        failures.join("\n\n")
    );
}
