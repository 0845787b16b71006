//! Subspaces in the catalog: the region tables of a new table's subspaces, and
//! `ALTER TABLE … ADD/DROP SUBSPACE` on a table that has rows.
//!
//! Adding a subspace to a table with rows happens in steps, so that writes never stop:
//!
//! 1. `AlterTable(add_subspaces)`: the subspace enters the catalog *being built*, with
//!    its region table (its cuts from the sample of the table's values the client
//!    sent), and the table goes to `Altering`. Searches do not use it yet.
//! 2. The reconciler, once the region table runs, tells every tablet's leader the new
//!    set of subspaces; each replicates it (`SetSubspaces`) and from then on chains
//!    every change into it. When all have, [`CatalogOp::SubspacesPushed`] records the
//!    newest of their timestamps in the subspace (`chained_after`) and the table runs
//!    again.
//! 3. The client backfills the subspace from the table read at or after that
//!    timestamp: every older change is in what it reads, every newer one is chained.
//! 4. `AlterTable(subspace_live)`: searches may use it.
//!
//! Dropping one takes it out of the catalog at once (searches stop using it); its
//! region table is deleted once every tablet has stopped chaining into it.
//!
//! A column change of a table with subspaces changes its region tables too
//! ([`MasterService::alter_region_columns`]): they gain a new column before the table
//! does and drop a dropped one after it did, so a chained row never names a column its
//! region lacks.

use cairn_hyperspace::{SubspaceEntry, SubspaceSpec};

use super::{MasterService, check_tablet_limits, new_id, refuse_region_table};
use crate::catalog::{CatalogOp, TableEntry, TableState, TabletEntry};
use crate::error::{MasterError, Result};
use crate::placement::{Layout, place_tablets};

impl MasterService {
    /// The catalog entry of subspace `s`'s region table, for a table `base_id` with
    /// schema `schema`, owner `owner` and `replicas` replicas, with its tablets placed
    /// on `live` servers.
    pub(super) fn region_table_entry(
        &self,
        base_id: &str,
        schema: &cairn_common::Schema,
        owner: &str,
        replicas: u32,
        s: &SubspaceEntry,
        live: &[(u64, String, usize)],
    ) -> Result<(TableEntry, Vec<TabletEntry>)> {
        let region_schema = cairn_hyperspace::region_table_schema(schema)
            .map_err(|e| MasterError::InvalidArgument(e.to_string()))?;
        let (rps, bounds) =
            cairn_hyperspace::region_partitioning(s.layout.region_count(), s.tablet_count())
                .map_err(|e| MasterError::InvalidArgument(e.to_string()))?;
        check_tablet_limits(&self.state.opts, &rps, bounds.len())?;
        let parts = rps.create_partitions(&bounds)?;
        let tablets = place_tablets(&s.table_id, parts, replicas, live, Layout::Spread);
        let entry = TableEntry {
            id: s.table_id.clone(),
            name: s.table_name.clone(),
            schema: cairn_common::SchemaMeta::from_schema(&region_schema),
            partition_schema: rps,
            replicas,
            state: TableState::Creating,
            tablets: tablets.iter().map(|t| t.id.clone()).collect(),
            version: 0,
            pending_steps: vec![],
            owner: owner.to_string(),
            next_auto_id: crate::catalog::first_auto_id(),
            subspaces: vec![],
            subspace_of: Some(base_id.to_string()),
            subspaces_version: 0,
            dropped_regions: vec![],
            colocation: None,
        };
        Ok((entry, tablets))
    }

    /// `ALTER TABLE name ADD/DROP SUBSPACE …` and the end of a backfill (see the module
    /// docs). Each change is answered under its own key derived from `request`, so a
    /// retry repeats only what did not happen.
    pub(super) async fn alter_subspaces(
        &self,
        name: &str,
        add: Vec<SubspaceSpec>,
        drop: Vec<String>,
        live: &str,
        request: Option<String>,
    ) -> Result<()> {
        let st = &self.state;
        st.check_leader()?;
        let _ddl = st.ddl.lock().await;
        let part = |n: String| request.as_ref().map(|r| format!("{r}/subspace/{n}"));
        let t = self.visible_table(name)?;
        refuse_region_table(&t, "altered")?;
        if !live.is_empty() {
            let key = part(format!("live/{live}"));
            if st.answered(key.as_ref()).is_none() {
                let s = t
                    .subspaces
                    .iter()
                    .find(|s| s.layout.name == live)
                    .ok_or_else(|| no_subspace(&t, live))?;
                if s.building && s.chained_after == 0 {
                    return Err(MasterError::Unavailable(format!(
                        "subspace '{live}' of table '{}' is not chained into by every tablet \
                         yet; retry shortly",
                        t.name
                    )));
                }
                st.propose_for(
                    key.as_ref(),
                    &t.id,
                    CatalogOp::SubspaceLive {
                        id: t.id.clone(),
                        name: live.to_string(),
                    },
                )
                .await?
                .map_err(MasterError::InvalidArgument)?;
            }
        }
        if add.is_empty() && drop.is_empty() {
            return Ok(());
        }
        let mut subspaces = t.subspaces.clone();
        for d in drop {
            let key = part(format!("drop/{d}"));
            if st.answered(key.as_ref()).is_some() {
                continue;
            }
            let pos = subspaces
                .iter()
                .position(|s| s.layout.name == d)
                .ok_or_else(|| no_subspace(&t, &d))?;
            let gone = subspaces.remove(pos);
            st.propose_for(
                key.as_ref(),
                &t.id,
                CatalogOp::AlterSubspaces {
                    id: t.id.clone(),
                    subspaces: subspaces.clone(),
                    add_region: None,
                    drop_region: Some(gone.table_id),
                },
            )
            .await?
            .map_err(MasterError::InvalidArgument)?;
            tracing::info!(table = %t.name, subspace = %d, "dropping a subspace");
        }
        if add.is_empty() {
            return Ok(());
        }
        if t.state != TableState::Running && t.state != TableState::Altering {
            return Err(MasterError::Unavailable(format!(
                "table '{}' is {}; retry when it is RUNNING",
                t.name,
                t.state.name()
            )));
        }
        let schema = t.schema.to_schema()?;
        let servers = st.live_servers();
        if servers.len() < t.replicas as usize {
            return Err(MasterError::Unavailable(format!(
                "a subspace's regions need {} replicas but only {} tablet servers are live",
                t.replicas,
                servers.len()
            )));
        }
        for spec in add {
            let key = part(format!("add/{}", spec.name));
            if st.answered(key.as_ref()).is_some() {
                continue;
            }
            let entry = SubspaceEntry::for_existing_table(
                &t.id,
                &schema,
                t.tablets.len() as u32,
                &subspaces,
                &spec,
                &new_id(),
            )
            .map_err(|e| MasterError::InvalidArgument(e.to_string()))?;
            let region =
                self.region_table_entry(&t.id, &schema, &t.owner, t.replicas, &entry, &servers)?;
            subspaces.push(entry);
            st.propose_for(
                key.as_ref(),
                &t.id,
                CatalogOp::AlterSubspaces {
                    id: t.id.clone(),
                    subspaces: subspaces.clone(),
                    add_region: Some(region),
                    drop_region: None,
                },
            )
            .await?
            .map_err(MasterError::InvalidArgument)?;
            tracing::info!(table = %t.name, subspace = %spec.name, "adding a subspace");
        }
        Ok(())
    }
}

/// The error for a subspace `name` that table `t` does not have.
fn no_subspace(t: &TableEntry, name: &str) -> MasterError {
    let have: Vec<&str> = t.subspaces.iter().map(|s| s.layout.name.as_str()).collect();
    MasterError::InvalidArgument(format!(
        "table '{}' has no subspace '{name}'{}",
        t.name,
        if have.is_empty() {
            String::new()
        } else {
            format!(" (it has {})", have.join(", "))
        }
    ))
}

/// Which half of a column change [`MasterService::alter_region_columns`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RegionColumns {
    /// Before the table changes: the regions gain its new columns.
    Add,
    /// After the table changed: the regions drop the columns it dropped.
    Drop,
}

impl MasterService {
    /// Drops from the region tables of table `name` the columns the table no longer has:
    /// the second half of a column change whose first answer was lost (its caller
    /// retries it).
    pub(super) async fn finish_region_columns(&self, name: &str) -> Result<()> {
        let st = &self.state;
        st.check_leader()?;
        let _ddl = st.ddl.lock().await;
        let t = self.visible_table(name)?;
        if t.subspaces.is_empty() {
            return Ok(());
        }
        self.wait_running(&t).await?;
        let schema = t.schema.to_schema()?;
        self.alter_region_columns(&t, &schema, RegionColumns::Drop)
            .await
    }

    /// Brings the region tables of table `t`'s subspaces in line with the table's schema
    /// `new_base`: gaining its new columns (`Add`, before the table changes) or dropping
    /// the ones it lacks (`Drop`, after). Each step is worked out from the region
    /// table's schema as it is, so a retry, or a change cut short by a master failover,
    /// does only what is left. Returns once every changed region table runs again.
    ///
    /// REQUIRES: the DDL lock is held.
    pub(super) async fn alter_region_columns(
        &self,
        t: &TableEntry,
        new_base: &cairn_common::Schema,
        half: RegionColumns,
    ) -> Result<()> {
        let st = &self.state;
        let old_base = t.schema.to_schema()?;
        for s in &t.subspaces {
            let Some(region) = st.catalog.read(|c| c.tables.get(&s.table_id).cloned()) else {
                continue;
            };
            if region.state != TableState::Running {
                self.wait_running(&region).await?;
            }
            let mut schema = region.schema.to_schema()?;
            let steps = match half {
                RegionColumns::Add => {
                    cairn_hyperspace::region_columns_to_add(&schema, &old_base, new_base)
                        .map_err(|e| MasterError::InvalidArgument(e.to_string()))?
                }
                RegionColumns::Drop => cairn_hyperspace::region_columns_to_drop(&schema, new_base),
            };
            if steps.is_empty() {
                continue;
            }
            for step in &steps {
                schema = schema.altered(step)?;
            }
            st.propose_for(
                None,
                &region.id,
                CatalogOp::AlterTable {
                    id: region.id.clone(),
                    schema: cairn_common::SchemaMeta::from_schema(&schema),
                    steps,
                },
            )
            .await?
            .map_err(MasterError::InvalidArgument)?;
            tracing::info!(table = %t.name, subspace = %s.layout.name, ?half,
                "changing the columns of a subspace's regions");
            self.wait_running(&region).await?;
        }
        Ok(())
    }
}
