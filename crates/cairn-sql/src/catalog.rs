//! The DataFusion catalog of a Cairn cluster: catalog `cairn`, schema `public`.
//!
//! Table names come from the master. DataFusion asks for them synchronously
//! (`table_names`, `table_exist`), so [`CairnSchema`] keeps a cache that the session
//! refreshes before every statement (at most once a second, and always after DDL).
//! Tables are opened lazily in `table()`: one `GetTable` call, kept for a short while
//! so that a statement that names a table several times opens it once. Statistics
//! (rows, and each column's bounds, NULLs and bytes) come from the tablet servers'
//! tablet reports, cached per table.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_client::Client;
use cairn_common::ColumnStatistics;
use cairn_proto::ListTabletsRequest;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{DataFusionError, Result};
use parking_lot::Mutex;

use crate::error::{SqlError, df_err};
use crate::provider::CairnTable;
use crate::store_table::StoreTable;

/// How long a table list or an opened table is reused.
const TABLE_CACHE_TTL: Duration = Duration::from_secs(1);
/// How long statistics are reused.
const STATS_TTL: Duration = Duration::from_secs(10);

/// What a tablet's leader reports for planning.
#[derive(Debug, Default)]
pub struct TabletStatistics {
    /// Estimated rows.
    pub rows: u64,
    /// Per column (by name), from its stored data; may be empty.
    pub columns: Vec<ColumnStatistics>,
}

/// Statistics per tablet id.
pub type TableStatistics = Arc<HashMap<String, Arc<TabletStatistics>>>;

/// Statistics per table id, and when they were fetched.
type StatsCache = HashMap<String, (Instant, TableStatistics)>;

/// Schema `public` of catalog `cairn`: the cluster's tables.
#[derive(Debug)]
pub struct CairnSchema {
    client: Client,
    names: Mutex<(Option<Instant>, Vec<String>)>,
    opened: Mutex<HashMap<String, (Instant, Arc<CairnTable>)>>,
    stats: Mutex<StatsCache>,
    /// `pg_catalog`, where unqualified `pg_…` names resolve first (as PostgreSQL's
    /// search path puts it first).
    system: std::sync::OnceLock<Arc<dyn SchemaProvider>>,
}

impl CairnSchema {
    /// The schema of the cluster `client` talks to.
    pub fn new(client: Client) -> Self {
        CairnSchema {
            client,
            names: Mutex::new((None, vec![])),
            opened: Mutex::new(HashMap::new()),
            stats: Mutex::new(HashMap::new()),
            system: std::sync::OnceLock::new(),
        }
    }

    /// Sets the `pg_catalog` schema that unqualified `pg_…` names resolve to first.
    pub fn set_system_catalog(&self, system: Arc<dyn SchemaProvider>) {
        // Set once, by the engine that made this schema.
        let _ = self.system.set(system);
    }

    /// Fetches the table list from the master if it is older than a second (or
    /// always, with `force`).
    pub async fn refresh(&self, force: bool) -> Result<(), SqlError> {
        if !force
            && let Some(at) = self.names.lock().0
            && at.elapsed() < TABLE_CACHE_TTL
        {
            return Ok(());
        }
        let tables = self.client.list_tables().await?;
        let mut names: Vec<String> = tables.into_iter().map(|t| t.name).collect();
        // Read-only stores are tables too (a table of the same name hides one).
        // A master without stores support answers UNIMPLEMENTED: no stores then.
        if let Ok(stores) = self.client.list_stores().await {
            names.extend(stores.into_iter().map(|s| s.name));
        }
        names.sort();
        names.dedup();
        *self.names.lock() = (Some(Instant::now()), names);
        Ok(())
    }

    /// Forgets cached tables (after DDL).
    pub fn invalidate(&self) {
        self.names.lock().0 = None;
        self.opened.lock().clear();
    }

    /// Statistics per tablet of table `table_id`, from the tablet servers.
    async fn tablet_statistics(&self, table_id: &str) -> TableStatistics {
        if let Some((at, stats)) = self.stats.lock().get(table_id)
            && at.elapsed() < STATS_TTL
        {
            return stats.clone();
        }
        let mut stats = HashMap::new();
        let servers = self.client.list_tablet_servers().await.unwrap_or_default();
        for s in servers.iter().filter(|s| s.live) {
            let Ok(mut stub) = self.client.tablet_server(&s.addr).await else {
                continue;
            };
            let mut req = tonic::Request::new(ListTabletsRequest {});
            req.set_timeout(Duration::from_secs(2));
            let Ok(resp) = stub.list_tablets(req).await else {
                continue;
            };
            for t in resp.into_inner().tablets {
                if t.table_id == table_id && t.role == cairn_proto::RaftRole::Leader as i32 {
                    // Statistics are an optimisation: unreadable ones are left out.
                    let columns = serde_json::from_slice(&t.column_stats_json).unwrap_or_default();
                    let one = TabletStatistics {
                        rows: t.num_rows_estimate,
                        columns,
                    };
                    stats.insert(t.tablet_id, Arc::new(one));
                }
            }
        }
        let stats = Arc::new(stats);
        self.stats
            .lock()
            .insert(table_id.to_string(), (Instant::now(), stats.clone()));
        stats
    }
}

#[async_trait::async_trait]
impl SchemaProvider for CairnSchema {
    fn table_names(&self) -> Vec<String> {
        self.names.lock().1.clone()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if name.starts_with("pg_")
            && let Some(system) = self.system.get()
            && let Some(t) = system.table(name).await?
        {
            return Ok(Some(t));
        }
        if let Some((at, t)) = self.opened.lock().get(name)
            && at.elapsed() < TABLE_CACHE_TTL
        {
            return Ok(Some(t.clone()));
        }
        let table = match self.client.open_table(name).await {
            Ok(t) => t,
            Err(cairn_client::ClientError::TableNotFound(_)) => {
                return match self.client.open_store(name).await {
                    Ok(reader) => Ok(Some(Arc::new(StoreTable::new(reader).map_err(df_err)?))),
                    Err(_) => Ok(None),
                };
            }
            Err(e) => return Err(df_err(e)),
        };
        let stats = self.tablet_statistics(&table.id).await;
        let provider = Arc::new(CairnTable::new(self.client.clone(), table, stats));
        self.opened
            .lock()
            .insert(name.to_string(), (Instant::now(), provider.clone()));
        Ok(Some(provider))
    }

    fn register_table(
        &self,
        name: String,
        _table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        Err(df_err(SqlError::unsupported(format!(
            "cannot register '{name}' as a Cairn table: create it with CREATE TABLE"
        ))))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Err(df_err(SqlError::unsupported(format!(
            "cannot deregister '{name}': drop it with DROP TABLE"
        ))))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.names.lock().1.iter().any(|n| n == name)
    }
}
