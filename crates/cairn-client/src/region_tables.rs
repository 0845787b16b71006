//! Handles of region tables: the hidden tables that hold a subspace's regions
//! (HyperDex §2.2, [`cairn_hyperspace::region`]).
//!
//! A search reads, and every link of a point leader's chain writes, a region table
//! through an ordinary [`Table`] handle. The handle is made from what the base table's
//! [`SubspaceEntry`] already says, with no master call ([`region_table`]); a client
//! keeps the handles it made ([`Client::region_table_of`]), because building one (the
//! region schema and partitioning) cost more than the rest of a small search's
//! planning, and chains asked for one per link.

use std::collections::HashMap;
use std::sync::Arc;

use cairn_common::Schema;
use cairn_hyperspace::{SubspaceEntry, region_partitioning, region_table_schema};

use crate::client::Client;
use crate::error::Result;
use crate::hyperspace::hs_error;
use crate::table::Table;

/// The handle of the region table of subspace `entry` of a table with schema `base`
/// and `replicas` replicas, built from what the entry already says (no master call).
pub fn region_table(base: &Schema, replicas: u32, entry: &SubspaceEntry) -> Result<Table> {
    let schema = region_table_schema(base).map_err(hs_error)?;
    let (partition_schema, _) =
        region_partitioning(entry.layout.region_count(), entry.tablet_count()).map_err(hs_error)?;
    Ok(Table {
        id: entry.table_id.clone(),
        name: entry.table_name.clone(),
        schema: Arc::new(schema),
        partition_schema,
        replicas,
        subspaces: vec![],
        colocation: None,
    })
}

/// The region-table handles a client built, by region-table id. A handle is reused
/// while the base table's schema is the same `Arc` (a column change makes a new one),
/// and the entry names the same region table, replica count and region grid.
#[derive(Default)]
pub(crate) struct RegionTables {
    built: parking_lot::Mutex<HashMap<String, Built>>,
}

/// One handle, with what it was built from that the handle itself does not hold.
struct Built {
    base: Arc<Schema>,
    /// The entry's region and tablet counts.
    grid: (u32, u32),
    table: Arc<Table>,
}

/// Beyond this many region tables the memo starts over (tables come and go).
const MAX_BUILT: usize = 4096;

impl RegionTables {
    /// The handle of the region table of `entry` for a table of schema `base`: the one
    /// built before from the same inputs, or a new one.
    fn get(&self, base: &Arc<Schema>, replicas: u32, entry: &SubspaceEntry) -> Result<Arc<Table>> {
        let grid = (entry.layout.region_count(), entry.tablet_count());
        if let Some(b) = self.built.lock().get(&entry.table_id)
            && Arc::ptr_eq(&b.base, base)
            && b.grid == grid
            && b.table.replicas == replicas
            && b.table.name == entry.table_name
        {
            return Ok(b.table.clone());
        }
        let table = Arc::new(region_table(base, replicas, entry)?);
        let mut built = self.built.lock();
        if built.len() >= MAX_BUILT {
            built.clear();
        }
        let b = Built {
            base: base.clone(),
            grid,
            table: table.clone(),
        };
        built.insert(entry.table_id.clone(), b);
        Ok(table)
    }
}

impl Client {
    /// [`region_table`], built once per client for a given schema `Arc`, replica count
    /// and region grid, and shared after that.
    pub fn region_table_of(
        &self,
        base: &Arc<Schema>,
        replicas: u32,
        entry: &SubspaceEntry,
    ) -> Result<Arc<Table>> {
        self.region_tables().get(base, replicas, entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::{ColumnSpec, DataType};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("s", DataType::String),
                ColumnSpec::new("a", DataType::Int64).nullable(),
            ],
            &["k", "s"],
        )
        .unwrap()
    }

    #[test]
    fn a_region_table_handle_is_built_once_per_schema_and_grid() {
        let base = Arc::new(schema());
        let entry = |tablets: u32| {
            let spec = cairn_hyperspace::SubspaceSpec::new(&["a"])
                .regions(16)
                .tablets(tablets);
            SubspaceEntry::for_new_table("t1", &base, 2, &[spec], &["r1".to_string()])
                .unwrap()
                .remove(0)
        };
        let memo = RegionTables::default();
        let first = memo.get(&base, 1, &entry(2)).unwrap();
        assert!(Arc::ptr_eq(&first, &memo.get(&base, 1, &entry(2)).unwrap()));
        assert_eq!(first.id, "r1");
        let same = |t: &Table, b: &Schema, e: &SubspaceEntry| {
            let fresh = region_table(b, t.replicas, e).unwrap();
            t.id == fresh.id
                && t.name == fresh.name
                && t.schema == fresh.schema
                && t.partition_schema == fresh.partition_schema
        };
        assert!(same(&first, &base, &entry(2)));
        // A schema change (a new Arc, even if equal), another grid or replica count
        // builds the handle again.
        let altered = Arc::new(schema());
        let again = memo.get(&altered, 1, &entry(2)).unwrap();
        assert!(!Arc::ptr_eq(&first, &again));
        let regridded = memo.get(&altered, 1, &entry(4)).unwrap();
        assert!(!Arc::ptr_eq(&again, &regridded));
        assert!(same(&regridded, &altered, &entry(4)));
        let replicated = memo.get(&altered, 3, &entry(4)).unwrap();
        assert_eq!(replicated.replicas, 3);
    }
}
