//! How a subspace is stored: a hidden *region table* whose tablets hold its regions.
//!
//! A subspace holds a full copy of each object (HyperDex §3.2) in the region its values
//! select. Cairn stores a subspace as a table of its own, hidden from users, so that
//! regions live in ordinary Raft-replicated tablets that the master places,
//! re-replicates and deletes like any other:
//!
//! - its columns are [`REGION_COLUMN`] (the region, `INT`), [`CELL_COLUMN`] (the row's
//!   [`Cell`](crate::Cell): its coordinate on the subspace's first axis, `BIGINT`), every column of
//!   the base table with the same name, type and default, then [`VERSION_COLUMN`]
//!   (the object's version, `BIGINT`) and [`REMOVED_COLUMN`] (`BOOLEAN`, a tombstone).
//!   Columns other than the key are nullable whatever the base table says: the base
//!   table enforces NOT NULL, and a region must accept a row without a column the
//!   base table is dropping ([`region_columns_to_drop`]);
//! - its primary key is the region, the cell, then the base table's key. Within a
//!   region, rows are sorted by the subspace's first attribute, so a search that fixes
//!   or bounds it reads only the matching cells: a region is as cheap to search whether
//!   it holds ten rows or ten thousand, which matters when the grid was cut without a
//!   sample of the data and its regions are uneven;
//! - it is range-partitioned on the region column into a few tablets, each holding a
//!   contiguous run of regions ([`region_partitioning`]). A region is a key range of its
//!   tablet, so a search reads a region with one key-range scan, however many regions
//!   share the tablet. Many small regions make searches narrow (HyperDex cuts each
//!   subspace finely and places many regions on every server, §3.1); few tablets keep
//!   the Raft groups a subspace costs small.
//!
//! A [`LinkAction::Remove`](crate::LinkAction::Remove) does not delete the row: it marks
//! it removed and keeps its version, so a late retransmission of an older change is
//! recognised as a duplicate instead of bringing the object back ([`crate::admit`]).
//! Searches skip removed rows.

use cairn_common::{AlterOp, ColumnSpec, DataType, PartitionSchema, Schema, Value};

use crate::chain::Version;
use crate::error::{HyperspaceError, Result};
use crate::grid::{MAX_REGIONS, Place, RegionId, Subspace};

/// The cell column of a region table (its second key column, see [`Cell`](crate::Cell)).
pub const CELL_COLUMN: &str = "__cell";

/// The region column of a region table (its first key column).
pub const REGION_COLUMN: &str = "__region";
/// The version column of a region table: the version of the change that wrote the row.
pub const VERSION_COLUMN: &str = "__version";
/// The tombstone column of a region table: the object has left this region.
pub const REMOVED_COLUMN: &str = "__removed";

/// A subspace asked for when a table is created: its name, attributes and region count.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SubspaceSpec {
    /// The subspace's name (unique within the table).
    pub name: String,
    /// Its attributes (column names), in order.
    pub columns: Vec<String>,
    /// About how many regions it gets.
    pub regions: u32,
    /// How many tablets hold them (0: [`default_region_tablets`]: as many as the table
    /// has).
    #[serde(default)]
    pub tablets: u32,
    /// Rows of the subspace's attribute values (in its column order) sampled from the
    /// table it is added to: its region boundaries are their quantiles. Empty for a new
    /// table (default boundaries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample: Vec<Vec<Value>>,
}

impl SubspaceSpec {
    /// A subspace over `columns` named after them ([`default_subspace_name`]) with
    /// [`DEFAULT_REGIONS`] regions.
    pub fn new(columns: &[&str]) -> SubspaceSpec {
        let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        SubspaceSpec {
            name: default_subspace_name(&columns),
            columns,
            regions: DEFAULT_REGIONS,
            tablets: 0,
            sample: vec![],
        }
    }

    /// Sets the tablet count (0: the default for the region count).
    pub fn tablets(mut self, n: u32) -> SubspaceSpec {
        self.tablets = n;
        self
    }

    /// Sets the region count.
    pub fn regions(mut self, n: u32) -> SubspaceSpec {
        self.regions = n;
        self
    }

    /// Sets the name.
    pub fn named(mut self, name: impl Into<String>) -> SubspaceSpec {
        self.name = name.into();
        self
    }
}

/// A subspace of a table as the catalog records it: its layout and the hidden table
/// holding its regions.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SubspaceEntry {
    /// The attributes and the region grid.
    pub layout: Subspace,
    /// The region table's id.
    pub table_id: String,
    /// The region table's name ([`region_table_name`]).
    pub table_name: String,
    /// How many tablets the region table has (0 in catalogs written before regions
    /// shared tablets: one per region). Use [`SubspaceEntry::tablet_count`].
    #[serde(default)]
    pub tablets: u32,
    /// Added to a table with rows and not yet filled (`ALTER TABLE … ADD SUBSPACE`):
    /// point leaders chain changes into it, searches do not use it yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub building: bool,
    /// For a subspace being built: a timestamp after which every tablet of the table
    /// chains each change into it (0 until all of them do). Its backfill reads the
    /// table at or after this timestamp.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chained_after: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

impl SubspaceEntry {
    /// How many tablets hold the regions.
    pub fn tablet_count(&self) -> u32 {
        if self.tablets == 0 {
            self.layout.region_count()
        } else {
            self.tablets
        }
    }
}

/// The tablets a subspace of `regions` regions of a table of `table_tablets` tablets
/// gets when none are asked for: as many as the table has (a region table holds a
/// copy of every row, so it needs the table's spread), at most one per region.
pub fn default_region_tablets(regions: u32, table_tablets: u32) -> u32 {
    table_tablets.clamp(1, regions.max(1))
}

/// The name of the region table of subspace `subspace` of the table with id `base_id`.
/// It starts with `__subspace/`, which no SQL identifier produces unquoted.
pub fn region_table_name(base_id: &str, subspace: &str) -> String {
    format!("__subspace/{base_id}/{subspace}")
}

/// Whether `name` is a region table's name.
pub fn is_region_table_name(name: &str) -> bool {
    name.starts_with("__subspace/")
}

/// The schema of a region table for base schema `base`.
pub fn region_table_schema(base: &Schema) -> Result<Schema> {
    let mut cols = Vec::with_capacity(base.num_columns() + 4);
    cols.push(ColumnSpec::new(REGION_COLUMN, DataType::Int32));
    cols.push(ColumnSpec::new(CELL_COLUMN, DataType::Int64));
    for (i, c) in base.columns().iter().enumerate() {
        if RESERVED.contains(&c.name.as_str()) {
            return Err(HyperspaceError::InvalidSubspace(format!(
                "column '{}' has a name subspaces reserve: rename it to give the table subspaces",
                c.name
            )));
        }
        cols.push(region_column(c, base.is_key_column(i)));
    }
    cols.push(ColumnSpec::new(VERSION_COLUMN, DataType::Int64));
    cols.push(ColumnSpec::new(REMOVED_COLUMN, DataType::Bool));
    let mut key: Vec<&str> = vec![REGION_COLUMN, CELL_COLUMN];
    key.extend(
        base.key_indexes()
            .iter()
            .map(|&i| base.column(i).name.as_str()),
    );
    Ok(Schema::new(cols, &key)?)
}

/// A region table's copy of base column `c` (`key`: a key column of the base table):
/// the same name, type and default; nullable unless it is part of the key.
fn region_column(c: &cairn_common::ColumnSchema, key: bool) -> ColumnSpec {
    let mut spec = ColumnSpec::new(c.name.clone(), c.data_type.clone());
    spec.nullable = c.nullable || !key;
    spec.default = c.default.clone();
    spec
}

/// The changes a region table with schema `region` makes before its base table goes
/// from schema `old_base` to `new_base` (`ALTER TABLE … ADD COLUMN`): it gains each
/// column of `new_base` it lacks, as [`region_table_schema`] makes it. A region gains a
/// column before its base table does, so a chained row never names a column its region
/// lacks; rows chained meanwhile leave it at its default, which is what the base table
/// reads for them too. Columns are matched by name (a column a region gains sits after
/// [`REMOVED_COLUMN`]; rows are written to regions and read from them by name).
///
/// A column left over from an earlier change that did not finish (one neither schema
/// has) is dropped first, and one whose type differs from `new_base`'s is dropped and
/// added again. Errors: a new column's name is one region tables reserve.
pub fn region_columns_to_add(
    region: &Schema,
    old_base: &Schema,
    new_base: &Schema,
) -> Result<Vec<AlterOp>> {
    let mut ops: Vec<AlterOp> = region
        .columns()
        .iter()
        .filter(|c| {
            !RESERVED.contains(&c.name.as_str())
                && old_base.index_of(&c.name).is_err()
                && new_base.index_of(&c.name).is_err()
        })
        .map(|c| AlterOp::DropColumn(c.name.clone()))
        .collect();
    for (i, c) in new_base.columns().iter().enumerate() {
        if RESERVED.contains(&c.name.as_str()) {
            return Err(HyperspaceError::InvalidSubspace(format!(
                "column '{}' has a name subspaces reserve: choose another name",
                c.name
            )));
        }
        if let Ok(r) = region.index_of(&c.name) {
            if region.column(r).data_type == c.data_type {
                continue;
            }
            ops.push(AlterOp::DropColumn(c.name.clone()));
        }
        ops.push(AlterOp::AddColumn(region_column(
            c,
            new_base.is_key_column(i),
        )));
    }
    Ok(ops)
}

/// Why a table's subspaces cannot follow a column change ([`refuse_column_change`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnChangeRefusal {
    /// A subspace is being built: its backfill writes rows of the schema it started
    /// with.
    Building {
        /// The subspace.
        subspace: String,
    },
    /// Renaming a column: a region row would be written under one name and read under
    /// the other while the table and its regions change.
    Rename {
        /// The column.
        column: String,
    },
    /// Dropping an attribute of a subspace.
    DropAttribute {
        /// The column.
        column: String,
        /// The subspace it is an attribute of.
        subspace: String,
    },
}

impl std::fmt::Display for ColumnChangeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ColumnChangeRefusal::Building { subspace } => write!(
                f,
                "subspace '{subspace}' is being built: change the columns once \
                 ALTER TABLE … ADD SUBSPACE has finished"
            ),
            ColumnChangeRefusal::Rename { column } => write!(
                f,
                "cannot rename column '{column}' of a table with subspaces, whose copies of \
                 its rows name their columns: drop the subspaces (ALTER TABLE … DROP \
                 SUBSPACE), rename the column, then add them again"
            ),
            ColumnChangeRefusal::DropAttribute { column, subspace } => write!(
                f,
                "cannot drop column '{column}': it is an attribute of subspace \
                 '{subspace}'; drop the subspace first (ALTER TABLE … DROP SUBSPACE \
                 {subspace})"
            ),
        }
    }
}

/// The first column change of `steps` that a table with `subspaces` cannot make, if
/// any ([`ColumnChangeRefusal`]). Adding columns, and dropping columns no subspace
/// uses, are always possible ([`region_columns_to_add`], [`region_columns_to_drop`]).
pub fn refuse_column_change(
    subspaces: &[SubspaceEntry],
    steps: &[AlterOp],
) -> Option<ColumnChangeRefusal> {
    if steps.is_empty() {
        return None;
    }
    if let Some(s) = subspaces.iter().find(|s| s.building) {
        return Some(ColumnChangeRefusal::Building {
            subspace: s.layout.name.clone(),
        });
    }
    steps.iter().find_map(|step| match step {
        AlterOp::AddColumn(_) => None,
        AlterOp::RenameColumn { from, .. } if !subspaces.is_empty() => {
            Some(ColumnChangeRefusal::Rename {
                column: from.clone(),
            })
        }
        AlterOp::RenameColumn { .. } => None,
        AlterOp::DropColumn(c) => subspaces
            .iter()
            .find(|s| s.layout.columns().contains(&c.as_str()))
            .map(|s| ColumnChangeRefusal::DropAttribute {
                column: c.clone(),
                subspace: s.layout.name.clone(),
            }),
    })
}

/// The columns a region table with schema `region` drops once its base table has
/// schema `new_base` (`ALTER TABLE … DROP COLUMN`): each of its columns, other than
/// the region table's own, that `new_base` lacks. A region drops a column only after
/// its base table did, so no chained row names a column its region lacks; rows chained
/// meanwhile leave the column empty, which is why region columns are nullable.
pub fn region_columns_to_drop(region: &Schema, new_base: &Schema) -> Vec<AlterOp> {
    region
        .columns()
        .iter()
        .filter(|c| !RESERVED.contains(&c.name.as_str()) && new_base.index_of(&c.name).is_err())
        .map(|c| AlterOp::DropColumn(c.name.clone()))
        .collect()
}

/// The column names region tables reserve for themselves.
const RESERVED: [&str; 4] = [REGION_COLUMN, CELL_COLUMN, VERSION_COLUMN, REMOVED_COLUMN];

/// A range partition's `[lower, upper)` encoded range keys (empty: unbounded).
pub type RangeBounds = (Vec<u8>, Vec<u8>);

/// The partitioning of a region table with `regions` regions in `tablets` tablets: range
/// partitions on [`REGION_COLUMN`], tablet `t` holding regions
/// `[t * regions / tablets, (t + 1) * regions / tablets)` (the first unbounded below, the
/// last above, so that every key has a tablet). Returns the partition schema and the
/// range bounds, as `CreateTable` takes them. More tablets than regions are refused.
pub fn region_partitioning(
    regions: u32,
    tablets: u32,
) -> Result<(PartitionSchema, Vec<RangeBounds>)> {
    let regions = regions.max(1);
    if tablets == 0 || tablets > regions {
        return Err(HyperspaceError::InvalidSubspace(format!(
            "a subspace of {regions} regions can have 1 to {regions} tablets, not {tablets}"
        )));
    }
    let ps = PartitionSchema {
        hash_levels: vec![],
        range_columns: vec![REGION_COLUMN.to_string()],
    };
    let key = |r: u64| -> Result<Vec<u8>> {
        let r = i32::try_from(r)
            .map_err(|_| HyperspaceError::InvalidSubspace(format!("region {r} is out of range")))?;
        Ok(ps.encode_range_key(&[Value::Int32(r)])?)
    };
    let first = |t: u32| u64::from(t) * u64::from(regions) / u64::from(tablets);
    let mut bounds = Vec::with_capacity(tablets as usize);
    for t in 0..tablets {
        let lower = if t == 0 { vec![] } else { key(first(t))? };
        let upper = if t + 1 == tablets {
            vec![]
        } else {
            key(first(t + 1))?
        };
        bounds.push((lower, upper));
    }
    Ok((ps, bounds))
}

/// The region-table row for a base row (schema order) stored at `place` (its region
/// and cell, [`Subspace::place_of_row`](crate::Subspace::place_of_row)) at `version`;
/// `removed` marks a tombstone.
pub fn region_row(base_row: &[Value], place: Place, version: Version, removed: bool) -> Vec<Value> {
    let mut row = Vec::with_capacity(base_row.len() + 4);
    row.push(Value::Int32(place.0 as i32));
    row.push(Value::Int64(place.1));
    row.extend_from_slice(base_row);
    row.push(Value::Int64(version as i64));
    row.push(Value::Bool(removed));
    row
}

/// A region-table row taken apart ([`split_region_row`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionRow<'r> {
    /// Where the row is stored: its region and cell.
    pub place: Place,
    /// The object's row in the base table's schema.
    pub values: &'r [Value],
    /// The object's version.
    pub version: Version,
    /// Whether the row is a tombstone.
    pub removed: bool,
}

/// The region-table row's parts. `None` when the row does not have a region table's
/// shape.
pub fn split_region_row(row: &[Value]) -> Option<RegionRow<'_>> {
    let [
        Value::Int32(r),
        Value::Int64(cell),
        values @ ..,
        Value::Int64(v),
        Value::Bool(removed),
    ] = row
    else {
        return None;
    };
    Some(RegionRow {
        place: (*r as RegionId, *cell),
        values,
        version: *v as Version,
        removed: *removed,
    })
}

impl SubspaceEntry {
    /// The entries of a table being created with `subspaces`, over base table `base_id`
    /// with schema `base` and `table_tablets` tablets. `table_ids` gives each region
    /// table's id, in order. The layouts use default cuts (the table is empty).
    pub fn for_new_table(
        base_id: &str,
        base: &Schema,
        table_tablets: u32,
        subspaces: &[SubspaceSpec],
        table_ids: &[String],
    ) -> Result<Vec<SubspaceEntry>> {
        Self::build(base_id, base, table_tablets, &[], subspaces, table_ids)
    }

    /// The entry of subspace `spec` added to the table `base_id` (schema `base`,
    /// `table_tablets` tablets) that has subspaces `existing`, held in region table
    /// `table_id`. Its layout's cuts come from the spec's sample; it starts
    /// [`SubspaceEntry::building`].
    pub fn for_existing_table(
        base_id: &str,
        base: &Schema,
        table_tablets: u32,
        existing: &[SubspaceEntry],
        spec: &SubspaceSpec,
        table_id: &str,
    ) -> Result<SubspaceEntry> {
        let mut built = Self::build(
            base_id,
            base,
            table_tablets,
            existing,
            std::slice::from_ref(spec),
            &[table_id.to_string()],
        )?;
        let mut entry = built.pop().ok_or_else(|| {
            HyperspaceError::InvalidSubspace("no subspace was built from the spec".into())
        })?;
        entry.building = true;
        Ok(entry)
    }

    /// Entries for `subspaces` next to `existing` ones (names and attribute lists must
    /// differ from theirs and from each other's).
    fn build(
        base_id: &str,
        base: &Schema,
        table_tablets: u32,
        existing: &[SubspaceEntry],
        subspaces: &[SubspaceSpec],
        table_ids: &[String],
    ) -> Result<Vec<SubspaceEntry>> {
        let mut out: Vec<SubspaceEntry> = existing.to_vec();
        for (spec, id) in subspaces.iter().zip(table_ids) {
            let (name, columns, regions) = (&spec.name, &spec.columns, &spec.regions);
            if *regions == 0 || *regions > MAX_REGIONS {
                return Err(HyperspaceError::InvalidSubspace(format!(
                    "subspace '{name}' asks for {regions} regions: give 1 to {MAX_REGIONS}"
                )));
            }
            if name.is_empty() || name.len() > 64 || name.contains('/') {
                return Err(HyperspaceError::InvalidSubspace(format!(
                    "subspace name '{name}' must have 1 to 64 characters and no '/'"
                )));
            }
            if out.iter().any(|e| &e.layout.name == name) {
                return Err(HyperspaceError::InvalidSubspace(format!(
                    "two subspaces are named '{name}'"
                )));
            }
            if let Some(prev) = out.iter().find(|e| e.layout.columns() == **columns) {
                return Err(HyperspaceError::InvalidSubspace(format!(
                    "subspaces '{}' and '{name}' have the same attributes",
                    prev.layout.name
                )));
            }
            let axes = Subspace::axes_of(base, columns)?;
            let layout = Subspace::from_sample(name.clone(), axes, *regions, &spec.sample)?;
            let tablets = if spec.tablets == 0 {
                default_region_tablets(layout.region_count(), table_tablets)
            } else {
                spec.tablets
            };
            // Refuses more tablets than the grid has regions.
            region_partitioning(layout.region_count(), tablets)?;
            out.push(SubspaceEntry {
                layout,
                table_id: id.clone(),
                table_name: region_table_name(base_id, name),
                tablets,
                building: false,
                chained_after: 0,
            });
        }
        Ok(out.split_off(existing.len()))
    }
}

/// The default name of a subspace over `columns`: the names joined by `_`.
pub fn default_subspace_name(columns: &[String]) -> String {
    columns.join("_")
}

/// The default number of regions per subspace.
pub const DEFAULT_REGIONS: u32 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("id", DataType::Int64),
                ColumnSpec::new("a", DataType::Int32).nullable(),
                ColumnSpec::new("b", DataType::String),
            ],
            &["id"],
        )
        .unwrap()
    }

    #[test]
    fn region_tables_wrap_the_base_schema() {
        let s = region_table_schema(&base()).unwrap();
        let names: Vec<_> = s.columns().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "__region",
                "__cell",
                "id",
                "a",
                "b",
                "__version",
                "__removed"
            ]
        );
        let key: Vec<_> = s
            .key_indexes()
            .iter()
            .map(|&i| s.column(i).name.as_str())
            .collect();
        assert_eq!(key, vec!["__region", "__cell", "id"]);
        // Key columns are NOT NULL; the rest are nullable, even `b`, which the base
        // table makes NOT NULL.
        assert!(!s.column(2).nullable && s.column(3).nullable && s.column(4).nullable);
        let bad = Schema::new(
            vec![ColumnSpec::new("__version", DataType::Int64)],
            &["__version"],
        )
        .unwrap();
        assert!(region_table_schema(&bad).is_err());
    }

    #[test]
    fn regions_gain_columns_before_and_drop_them_after_their_base_table() {
        let region = region_table_schema(&base()).unwrap();
        assert!(
            region_columns_to_add(&region, &base(), &base())
                .unwrap()
                .is_empty()
        );
        assert!(region_columns_to_drop(&region, &base()).is_empty());
        // ADD COLUMN c NOT NULL DEFAULT 7: the region gains it, nullable, default kept.
        let c = ColumnSpec::new("c", DataType::Int64).with_default(Value::Int64(7));
        let grown = base().altered(&AlterOp::AddColumn(c.clone())).unwrap();
        let add = region_columns_to_add(&region, &base(), &grown).unwrap();
        let [AlterOp::AddColumn(spec)] = &add[..] else {
            panic!("{add:?}")
        };
        assert_eq!(
            (spec.name.as_str(), spec.nullable, &spec.default),
            ("c", true, &Some(Value::Int64(7)))
        );
        let region = region.altered(&add[0]).unwrap();
        assert!(region_columns_to_drop(&region, &grown).is_empty());
        // A region row written by name before its base table has `c` reads it as 7.
        assert_eq!(
            region.column(region.index_of("c").unwrap()).read_default(),
            Value::Int64(7)
        );
        // DROP COLUMN a: the region keeps it until its base table dropped it.
        let shrunk = grown.altered(&AlterOp::DropColumn("a".into())).unwrap();
        assert!(
            region_columns_to_add(&region, &grown, &shrunk)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            region_columns_to_drop(&region, &shrunk),
            vec![AlterOp::DropColumn("a".into())]
        );
        // A drop left unfinished is finished by the next change, and a column added
        // again with another type is replaced.
        let retyped = shrunk
            .altered(&AlterOp::DropColumn("c".into()))
            .unwrap()
            .altered(&AlterOp::AddColumn(
                ColumnSpec::new("c", DataType::String).nullable(),
            ))
            .unwrap();
        let ops = region_columns_to_add(&region, &shrunk, &retyped).unwrap();
        assert_eq!(
            ops.iter()
                .map(|o| match o {
                    AlterOp::DropColumn(c) => format!("-{c}"),
                    AlterOp::AddColumn(c) => format!("+{}", c.name),
                    o => format!("{o:?}"),
                })
                .collect::<Vec<_>>(),
            vec!["-a", "-c", "+c"]
        );
        // A column named like a region table's own is refused.
        let bad = base()
            .altered(&AlterOp::AddColumn(
                ColumnSpec::new(VERSION_COLUMN, DataType::Int64).nullable(),
            ))
            .unwrap();
        let err = region_columns_to_add(&region, &base(), &bad).unwrap_err();
        assert!(err.to_string().contains("reserve"), "{err}");
    }

    #[test]
    fn tablets_hold_contiguous_regions_and_every_key_has_one() {
        let schema = region_table_schema(&base()).unwrap();
        for (regions, tablets) in [(4, 4), (10, 3), (4096, 8), (7, 1)] {
            let (ps, bounds) = region_partitioning(regions, tablets).unwrap();
            let parts = ps.create_partitions(&bounds).unwrap();
            assert_eq!(parts.len(), tablets as usize);
            let mut last_holder = 0;
            for r in 0..regions {
                let row = region_row(
                    &[Value::Int64(1), Value::Null, Value::String("x".into())],
                    (r, -5),
                    7,
                    false,
                );
                let pk = ps.partition_key(&schema, &row).unwrap();
                let holders: Vec<usize> = (0..parts.len())
                    .filter(|&i| parts[i].contains(&pk))
                    .collect();
                assert_eq!(holders.len(), 1, "region {r} of {regions}/{tablets}");
                // Regions fill the tablets in order, evenly.
                assert!(holders[0] == last_holder || holders[0] == last_holder + 1);
                last_holder = holders[0];
                let split = split_region_row(&row).unwrap();
                assert_eq!(
                    (
                        split.place,
                        split.values.len(),
                        split.version,
                        split.removed
                    ),
                    ((r, -5), 3, 7, false)
                );
            }
            assert_eq!(last_holder + 1, tablets as usize);
        }
        let (_, one) = region_partitioning(1, 1).unwrap();
        assert_eq!(one, vec![(vec![], vec![])]);
        assert!(region_partitioning(4, 5).is_err());
        assert!(region_partitioning(4, 0).is_err());
    }

    #[test]
    fn entries_refuse_duplicates() {
        let ids = vec!["t1".to_string(), "t2".to_string()];
        let same_name = vec![
            SubspaceSpec::new(&["a"]).named("s").regions(4),
            SubspaceSpec::new(&["b"]).named("s").regions(4),
        ];
        assert!(SubspaceEntry::for_new_table("base", &base(), 6, &same_name, &ids).is_err());
        let same_cols = vec![
            SubspaceSpec::new(&["a"]).named("s1"),
            SubspaceSpec::new(&["a"]).named("s2"),
        ];
        assert!(SubspaceEntry::for_new_table("base", &base(), 6, &same_cols, &ids).is_err());
        let ok = vec![SubspaceSpec::new(&["a", "b"]).regions(4)];
        let bad_name = vec![SubspaceSpec::new(&["a"]).named("x/y")];
        assert!(SubspaceEntry::for_new_table("base", &base(), 6, &bad_name, &ids).is_err());
        let e = SubspaceEntry::for_new_table("base", &base(), 6, &ok, &ids).unwrap();
        assert_eq!(e[0].table_name, "__subspace/base/a_b");
        assert!(is_region_table_name(&e[0].table_name));
        assert_eq!(e[0].layout.region_count(), 4);
        assert_eq!((e[0].tablets, e[0].tablet_count()), (4, 4));
        let many = vec![SubspaceSpec::new(&["a"])];
        let e = SubspaceEntry::for_new_table("base", &base(), 6, &many, &ids).unwrap();
        assert_eq!(e[0].layout.region_count(), DEFAULT_REGIONS);
        assert_eq!(e[0].tablets, 6, "as many tablets as the table");
        let too_many_tablets = vec![SubspaceSpec::new(&["a"]).regions(4).tablets(5)];
        assert!(SubspaceEntry::for_new_table("base", &base(), 6, &too_many_tablets, &ids).is_err());
        let no_regions = vec![SubspaceSpec::new(&["a"]).regions(0)];
        assert!(SubspaceEntry::for_new_table("base", &base(), 6, &no_regions, &ids).is_err());
    }
}
