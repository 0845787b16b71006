//! [`SqlEngine`]: what all sessions on one cluster share. The cluster client, the
//! catalog of Cairn tables, and a template DataFusion state with Cairn's settings,
//! optimizer rules and the PostgreSQL catalog (`pg_catalog`, for psql and drivers),
//! from which each [`SqlSession`] starts.

use std::sync::Arc;

use cairn_client::Client;
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::{CATALOG, SCHEMA, SqlSession};
use crate::catalog::CairnSchema;
use crate::error::Result;
use crate::options::CairnOptions;

/// What an engine's sessions share.
pub(super) struct EngineInner {
    pub(super) client: Client,
    pub(super) schema: Arc<CairnSchema>,
    pub(super) users: Arc<crate::authz::UserDirectory>,
    pub(super) template: SessionState,
    pub(super) limits: EngineLimits,
    /// The workers queries are distributed to, if any.
    pub(super) workers: Option<Arc<crate::distributed::ClusterWorkers>>,
}

/// Resource limits of SQL sessions.
#[derive(Clone, Debug)]
pub struct EngineLimits {
    /// Bytes of memory one session's statement may hold in sorts, joins, aggregates
    /// and buffers (`--query-memory-limit-mb`; 0: no limit). Operators that can spill
    /// (sorts, grouped aggregates, sort-merge joins) spill to temporary files past
    /// it; the others fail with SQLSTATE 53200 naming the limit. A session runs one
    /// statement at a time, so this is a per-query limit.
    pub query_memory_bytes: usize,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            query_memory_bytes: 1 << 30,
        }
    }
}

/// Shared SQL machinery for one cluster; cheap to clone.
#[derive(Clone)]
pub struct SqlEngine {
    pub(super) inner: Arc<EngineInner>,
}

impl std::fmt::Debug for SqlEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEngine").finish_non_exhaustive()
    }
}

/// What `pg_catalog` reports about roles.
#[derive(Clone, Debug)]
struct PgContext;

impl datafusion_pg_catalog::pg_catalog::context::PgCatalogContextProvider for PgContext {}

impl SqlEngine {
    /// An engine on a connected client.
    pub fn new(client: Client) -> Result<Self> {
        let schema = Arc::new(CairnSchema::new(client.clone()));
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema(SCHEMA, schema.clone())?;
        let catalogs = MemoryCatalogProviderList::new();
        catalogs.register_catalog(CATALOG.to_string(), Arc::new(catalog));
        let mut config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG, SCHEMA)
            .with_create_default_catalog_and_schema(false)
            // Schema `information_schema` is registered below (Cairn's, which adds
            // the constraint views); DataFusion's flag would shadow it.
            .with_information_schema(false)
            .with_option_extension(CairnOptions::default());
        let opts = config.options_mut();
        opts.sql_parser.map_string_types_to_utf8view = false;
        opts.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(crate::partitioning::SeparateCairnHash))
            .with_physical_optimizer_rule(Arc::new(crate::search::SortedSubspaceSearch))
            .with_catalog_list(Arc::new(catalogs))
            .build();
        let ctx = SessionContext::new_with_state(state);
        let catalog_list = ctx.state().catalog_list().clone();
        if let Some(catalog) = ctx.catalog(CATALOG) {
            catalog.register_schema(
                datafusion::catalog::information_schema::INFORMATION_SCHEMA,
                Arc::new(crate::information_schema::InformationSchema::new(
                    &catalog_list,
                    client.clone(),
                )),
            )?;
        }
        datafusion_pg_catalog::setup_pg_catalog(&ctx, CATALOG, PgContext).map_err(|e| *e)?;
        // The library's pg_catalog, completed with Cairn's primary keys.
        if let Some(catalog) = ctx.catalog(CATALOG)
            && let Some(library) = catalog.schema("pg_catalog")
        {
            let system = Arc::new(crate::system::SystemCatalog::new(library, client.clone()));
            for f in system.functions() {
                ctx.register_udf(f);
            }
            catalog.register_schema("pg_catalog", system.clone())?;
            schema.set_system_catalog(system);
        }
        Ok(SqlEngine {
            inner: Arc::new(EngineInner {
                users: Arc::new(crate::authz::UserDirectory::new(client.clone())),
                client,
                schema,
                template: ctx.state(),
                limits: EngineLimits::default(),
                workers: None,
            }),
        })
    }

    /// The same engine with other session limits (sessions made from now on use
    /// them).
    pub fn with_limits(self, limits: EngineLimits) -> Self {
        let inner = EngineInner {
            client: self.inner.client.clone(),
            schema: self.inner.schema.clone(),
            users: self.inner.users.clone(),
            template: self.inner.template.clone(),
            limits,
            workers: self.inner.workers.clone(),
        };
        SqlEngine {
            inner: Arc::new(inner),
        }
    }

    /// The same engine distributing queries to `workers` (see [`crate::distributed`]);
    /// sessions made from now on can.
    pub fn with_workers(self, workers: Arc<crate::distributed::ClusterWorkers>) -> Self {
        let template = crate::distributed::enable(
            self.inner.template.clone(),
            &self.inner.client,
            workers.clone(),
        );
        let inner = EngineInner {
            client: self.inner.client.clone(),
            schema: self.inner.schema.clone(),
            users: self.inner.users.clone(),
            template,
            limits: self.inner.limits.clone(),
            workers: Some(workers),
        };
        SqlEngine {
            inner: Arc::new(inner),
        }
    }

    /// Connects to the masters and builds an engine.
    pub async fn connect(masters: &[String]) -> Result<Self> {
        Self::new(Client::connect(masters).await?)
    }

    /// The workers this engine distributes queries to, if any.
    pub fn workers(&self) -> Option<&Arc<crate::distributed::ClusterWorkers>> {
        self.inner.workers.as_ref()
    }

    /// The sessions' resource limits.
    pub fn limits(&self) -> &EngineLimits {
        &self.inner.limits
    }

    /// The scalar functions sessions know: DataFusion's and Cairn's.
    pub(crate) fn scalar_functions(&self) -> Vec<Arc<datafusion::logical_expr::ScalarUDF>> {
        self.inner
            .template
            .scalar_functions()
            .values()
            .cloned()
            .collect()
    }

    /// The cluster client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The users, their privileges and the tables' owners (cached).
    pub fn users(&self) -> &crate::authz::UserDirectory {
        &self.inner.users
    }

    /// A new session (one per connection).
    pub fn session(&self) -> SqlSession {
        let mut builder = SessionStateBuilder::new_from_existing(self.inner.template.clone());
        let limit = self.inner.limits.query_memory_bytes;
        if limit > 0 {
            // Each session gets its own pool; everything else of the runtime (object
            // stores, the temporary-file manager) is shared.
            let shared = self.inner.template.runtime_env();
            let pool: Arc<dyn datafusion::execution::memory_pool::MemoryPool> = Arc::new(
                datafusion::execution::memory_pool::FairSpillPool::new(limit),
            );
            let runtime =
                datafusion::execution::runtime_env::RuntimeEnvBuilder::from_runtime_env(shared)
                    .with_memory_pool(pool)
                    .build_arc();
            match runtime {
                Ok(r) => builder = builder.with_runtime_env(r),
                // Cannot happen for a runtime that was built once already; the session
                // then shares the engine's unbounded pool.
                Err(e) => tracing::warn!(error = %e, "no per-session memory pool"),
            }
        }
        let state = builder.build();
        SqlSession {
            engine: self.clone(),
            ctx: SessionContext::new_with_state(state),
            user: parking_lot::RwLock::new(None),
            txn: parking_lot::Mutex::new(None),
            notices: parking_lot::Mutex::new(Vec::new()),
        }
    }
}
