//! The table DDL a session runs through the master: `CREATE TABLE [AS]`, `DROP TABLE`
//! and `ALTER TABLE` (columns, range partitions and subspaces).

use arrow::datatypes::DataType as ArrowType;
use cairn_client::CreateTableSpec;
use cairn_common::{DataType, Schema};
use std::sync::Arc;

use datafusion::common::TableReference;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::execute_stream;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast;

use super::{QueryResult, SqlSession};
use crate::ddl;
use crate::error::{Result, SqlError};
use crate::options::InsertMode;
use crate::parser::{self, AlterColumn, ParseError};
use crate::provider::CairnTable;
use crate::write::{WriteKind, WriteTarget};

impl SqlSession {
    /// `CREATE TABLE`, and `CREATE TABLE … AS SELECT` with its rows.
    pub(super) async fn create_table(&self, ct: parser::CreateTable) -> Result<QueryResult> {
        let client = self.engine.client();
        let opts = self.options();
        let buckets = if opts.default_hash_buckets > 0 {
            opts.default_hash_buckets
        } else {
            let live = client
                .list_tablet_servers()
                .await?
                .iter()
                .filter(|s| s.live)
                .count() as u32;
            (2 * live).max(2)
        };
        let owner = self.user();
        let spec_of = |def: ddl::TableDef| {
            let replicas = def.replicas.unwrap_or(opts.default_replicas);
            let spec = CreateTableSpec::new(def.name, def.schema);
            let spec = match &owner {
                Some(o) => spec.owner(o.clone()),
                None => spec,
            };
            let mut spec = spec
                .partition(def.partition)
                .range_bounds(def.range_bounds)
                .replicas(replicas)
                .colocation(def.colocation)
                .if_not_exists(def.if_not_exists);
            for s in def.subspaces {
                spec = spec.subspace(s);
            }
            spec
        };
        let Some(query) = ct.query.clone() else {
            let def = ddl::table_def(&ct, None, buckets)?;
            client.create_table(spec_of(def)).await?;
            self.engine.inner.schema.invalidate();
            // The owner's grant on the new table.
            self.engine.users().invalidate();
            return Ok(QueryResult::Done {
                tag: "CREATE TABLE".into(),
            });
        };
        // CREATE TABLE ... AS SELECT: plan the query, create the table with its
        // column types, then write its rows.
        let state = self.statement_state(self.fixed_snapshot(None).await?, InsertMode::Insert);
        self.engine.inner.schema.refresh(false).await?;
        // Repeated names are made unique for DataFusion, as in any query; the table
        // takes the client's names (which a column list may have to replace).
        let mut statement = DFStatement::Statement(Box::new(ast::Statement::Query(query)));
        parser::names::name_repeated_items(&mut statement);
        let plan = state.statement_to_plan(statement).await?;
        crate::authz::check_plan(&self.principal().await?, &plan, InsertMode::Insert)?;
        let mut columns = vec![];
        for f in parser::names::client_schema(plan.schema().inner()).fields() {
            columns.push((f.name().clone(), ctas_type(f.data_type())?, f.is_nullable()));
        }
        let def = ddl::table_def(&ct, Some(&columns), buckets)?;
        let name = def.name.clone();
        client.create_table(spec_of(def)).await?;
        self.engine.inner.schema.invalidate();
        // The owner's grant on the new table.
        self.engine.users().invalidate();
        let table = client.open_table(&name).await?;
        let rows = if self.transaction().is_some() {
            // In a transaction block the query sees the block's rows, but the new
            // table and its rows take effect now, as DDL does (the warning says so).
            let physical = state.create_physical_plan(&plan).await?;
            let stream = execute_stream(physical, state.task_ctx())?;
            let target = WriteTarget {
                client: client.clone(),
                table,
                kind: WriteKind::Insert(InsertMode::Insert),
                batch_rows: opts.write_batch_rows,
                max_atomic_rows: opts.max_atomic_rows,
            };
            target.write_rows(stream, state.task_ctx(), None).await?
        } else {
            // The rows are an INSERT into the new table, planned as any INSERT …
            // SELECT: on a cluster, written from the workers that produce them.
            let target = CairnTable::new(client.clone(), table, Default::default());
            let insert = LogicalPlan::Dml(DmlStatement::new(
                TableReference::bare(name),
                provider_as_source(Arc::new(target)),
                WriteOp::Insert(InsertOp::Append),
                Arc::new(plan),
            ));
            let physical = state.create_physical_plan(&insert).await?;
            let workers = self.engine.workers();
            crate::distributed::run_write(physical, &state, &insert, workers).await?
        };
        Ok(QueryResult::Count {
            tag: "SELECT",
            rows,
        })
    }

    /// `DROP TABLE [IF EXISTS] names`.
    pub(super) async fn drop_tables(
        &self,
        names: Vec<String>,
        if_exists: bool,
    ) -> Result<QueryResult> {
        self.check_write("DROP TABLE")?;
        for n in &names {
            match self.authorize_owner(n).await {
                Err(SqlError::Client(cairn_client::ClientError::TableNotFound(_))) if if_exists => {
                }
                r => r?,
            }
        }
        self.warn_if_in_block("DROP TABLE");
        for n in &names {
            self.engine.client().drop_table(n, if_exists).await?;
        }
        self.engine.inner.schema.invalidate();
        Ok(QueryResult::Done {
            tag: "DROP TABLE".into(),
        })
    }

    /// `ALTER TABLE name ops`: subspace drops first, so that one statement can drop a
    /// subspace and then a column it indexed (or rename a column once no subspace is
    /// left); then column changes (refused with PostgreSQL's codes when the remaining
    /// subspaces cannot follow them), range partitions, and subspace additions last, so
    /// that a new subspace may index a column the same statement adds.
    pub(super) async fn alter_table(
        &self,
        name: String,
        ops: Vec<AlterColumn>,
    ) -> Result<QueryResult> {
        self.check_write("ALTER TABLE")?;
        self.authorize_owner(&name).await?;
        self.warn_if_in_block("ALTER TABLE");
        let client = self.engine.client();
        let table = client.open_table(&name).await?;
        let steps = ddl::alter_ops_for_schema(&ops, &table.schema)?;
        let existing: Vec<String> = table
            .subspaces
            .iter()
            .map(|s| s.layout.name.clone())
            .collect();
        // New subspaces are judged against the columns as this statement leaves them;
        // a column step the master will refuse leaves that to the master's message.
        let altered_schema = steps
            .iter()
            .try_fold(Schema::clone(&table.schema), |schema, step| {
                schema.altered(step)
            })
            .unwrap_or_else(|_| Schema::clone(&table.schema));
        let (add_subspaces, drop_subspaces) =
            ddl::subspace_changes(&ops, &altered_schema, &existing)?;
        let remaining: Vec<_> = table
            .subspaces
            .iter()
            .filter(|s| !drop_subspaces.contains(&s.layout.name))
            .cloned()
            .collect();
        if let Some(r) = cairn_hyperspace::refuse_column_change(&remaining, &steps) {
            use cairn_hyperspace::ColumnChangeRefusal as R;
            let code = match r {
                R::Building { .. } => "55000",
                R::Rename { .. } => "0A000",
                R::DropAttribute { .. } => "2BP01",
            };
            return Err(ParseError::invalid_with(code, r.to_string()).into());
        }
        let (add, drop) =
            ddl::range_partition_changes(&ops, &table.schema, &table.partition_schema)?;
        let mut altered = Ok(());
        for s in drop_subspaces {
            if altered.is_ok() {
                altered = client.drop_subspace(&name, &s).await;
            }
        }
        if altered.is_ok() {
            altered = client.alter_table(&name, steps).await;
        }
        if altered.is_ok() {
            altered = client.alter_range_partitions(&name, add, drop).await;
        }
        for spec in add_subspaces {
            if altered.is_ok() {
                // Built over the table's rows while writes go on.
                altered = client
                    .add_subspace(
                        &name,
                        spec,
                        &|step| tracing::debug!(table = %name, step, "ALTER TABLE ADD SUBSPACE"),
                    )
                    .await
                    .map(|_| ());
            }
        }
        self.engine.inner.schema.invalidate();
        altered?;
        Ok(QueryResult::Done {
            tag: "ALTER TABLE".into(),
        })
    }
}

/// The Cairn column type for a query column of CREATE TABLE AS.
fn ctas_type(t: &ArrowType) -> Result<DataType> {
    Ok(match t {
        ArrowType::UInt8 => DataType::Int16,
        ArrowType::UInt16 => DataType::Int32,
        ArrowType::UInt32 | ArrowType::UInt64 => DataType::Int64,
        ArrowType::Float16 => DataType::Float,
        ArrowType::Timestamp(_, _) => DataType::Timestamp,
        ArrowType::Null => DataType::String,
        other => DataType::from_arrow(other)?,
    })
}
