//! Who runs a statement, and whether they may: the SQL front ends' half of Cairn's
//! authorization.
//!
//! The PostgreSQL and Flight SQL front ends check a user's password themselves (against
//! the verifier in the master's catalog) and then run that user's statements through
//! the engine's own client, which holds the server's cluster certificate. So the
//! tablet servers cannot tell users apart here: every statement is authorized while
//! it is planned, by [`check_plan`], with the same [`Principal::check`] that the master
//! and the tablet servers use for native clients.
//!
//! [`UserDirectory`] keeps the catalog's users, their privileges and the tables'
//! owners, fetched from the master at most once a second (and at once after a user
//! statement of this engine), so a GRANT or REVOKE made elsewhere applies within a
//! second.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_client::Client;
use cairn_proto::auth::{Action, Principal, Privileges, UserEntry};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{LogicalPlan, TableSource, WriteOp};
use parking_lot::Mutex;

use crate::error::{Result, SqlError};
use crate::options::InsertMode;
use crate::provider::CairnTable;
use crate::store_table::StoreTable;

/// How long the user list is reused.
const USERS_TTL: Duration = Duration::from_secs(1);

/// The catalog's users and the tables' owners at one moment.
#[derive(Debug, Default)]
pub struct Directory {
    /// Users by name.
    pub users: HashMap<String, UserEntry>,
    /// Owner per table id.
    pub owners: HashMap<String, String>,
}

/// The users, fetched from the master and cached.
#[derive(Debug)]
pub struct UserDirectory {
    client: Client,
    cached: Mutex<Option<(Instant, Arc<Directory>)>>,
}

impl UserDirectory {
    /// A directory of the cluster `client` talks to.
    pub fn new(client: Client) -> Self {
        UserDirectory {
            client,
            cached: Mutex::new(None),
        }
    }

    /// The directory, fetched again if older than a second.
    pub async fn get(&self) -> Result<Arc<Directory>> {
        if let Some((at, d)) = self.cached.lock().as_ref()
            && at.elapsed() < USERS_TTL
        {
            return Ok(d.clone());
        }
        let (users, owners) = self.client.list_users().await?;
        let d = Arc::new(Directory {
            users: users.into_iter().map(|u| (u.name.clone(), u)).collect(),
            owners: owners.into_iter().collect(),
        });
        *self.cached.lock() = Some((Instant::now(), d.clone()));
        Ok(d)
    }

    /// Forgets the cached copy (after a user statement).
    pub fn invalidate(&self) {
        *self.cached.lock() = None;
    }

    /// The principal of user `name` now.
    pub async fn principal(&self, name: &str) -> Result<Principal> {
        let d = self.get().await?;
        let u = d.users.get(name).ok_or_else(|| {
            SqlError::other(
                "28000",
                format!(
                    "role \"{name}\" does not exist (it was dropped): reconnect as another user"
                ),
            )
        })?;
        Ok(Principal::User(u.claims(u64::MAX)))
    }

    /// The owner of table `id` (empty if unknown).
    pub async fn owner(&self, id: &str) -> Result<String> {
        Ok(self
            .get()
            .await?
            .owners
            .get(id)
            .cloned()
            .unwrap_or_default())
    }
}

/// The Cairn table behind a plan's table source, if it is one.
pub(crate) fn cairn_table(source: &Arc<dyn TableSource>) -> Option<cairn_client::Table> {
    let provider = source_as_provider(source).ok()?;
    provider
        .downcast_ref::<CairnTable>()
        .map(|t| t.table().clone())
}

/// The read-only store behind a plan's table source, if it is one: `(id, name)`.
fn store_of(source: &Arc<dyn TableSource>) -> Option<(String, String)> {
    let provider = source_as_provider(source).ok()?;
    let s = provider.downcast_ref::<StoreTable>()?;
    Some((s.entry().id.clone(), s.entry().name.clone()))
}

/// Checks that `who` may run `plan`: SELECT on every table (or store) read, and
/// INSERT, UPDATE or DELETE on the table written (`mode` tells what an INSERT does: an
/// upsert also updates). As in PostgreSQL, an UPDATE or DELETE with a WHERE clause also needs
/// SELECT on its table; one without does not. `COPY … TO 'file'` needs a superuser.
pub fn check_plan(who: &Principal, plan: &LogicalPlan, mode: InsertMode) -> Result<()> {
    if who.is_superuser() {
        return Ok(());
    }
    if matches!(plan, LogicalPlan::Copy(_)) {
        // `COPY … TO 'file'` writes the server's files: superusers only, as
        // PostgreSQL's pg_write_server_files.
        who.check(Action::Superuser("COPY to a file on the server"))?;
    }
    // (id, name, privileges) of every table and store the plan uses.
    let mut needs: Vec<(String, String, Privileges)> = vec![];
    let mut target: Option<(String, bool)> = None;
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Dml(d) => {
                if let Some(t) = cairn_table(&d.target) {
                    let need = match d.op {
                        WriteOp::Insert(_) if mode == InsertMode::Upsert => {
                            Privileges::INSERT.union(Privileges::UPDATE)
                        }
                        WriteOp::Insert(_) => Privileges::INSERT,
                        WriteOp::Update => Privileges::UPDATE,
                        WriteOp::Delete => Privileges::DELETE,
                        // Refused later as unsupported.
                        _ => Privileges::ALL,
                    };
                    if matches!(d.op, WriteOp::Update | WriteOp::Delete) {
                        let filtered = d
                            .input
                            .as_ref()
                            .exists(|n| Ok(matches!(n, LogicalPlan::Filter(_))))
                            .unwrap_or(true);
                        target = Some((t.id.clone(), filtered));
                    }
                    needs.push((t.id, t.name, need));
                }
            }
            LogicalPlan::TableScan(s) => {
                if let Some(t) = cairn_table(&s.source) {
                    needs.push((t.id, t.name, Privileges::SELECT));
                } else if let Some((id, name)) = store_of(&s.source) {
                    needs.push((id, name, Privileges::SELECT));
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    for (id, name, need) in needs {
        // The scan an UPDATE or DELETE makes of its own table reads rows only for a
        // WHERE clause.
        if need == Privileges::SELECT
            && let Some((target_id, false)) = &target
            && *target_id == id
        {
            continue;
        }
        who.check(Action::Table {
            id: &id,
            name: &name,
            need,
        })?;
    }
    Ok(())
}
