//! `ALTER TABLE` operations as schema changes ([`AlterOp`]s), range partitions to add
//! and drop, and subspaces to add and drop.

use cairn_common::{AUTO_INCREMENTING_ID, AlterOp, DataType, PartitionSchema, Schema};

use super::{column_spec, common, encode_bounds, reserved_name, subspace_spec};
use crate::parser::{AlterColumn, ParseError};

/// The `ADD SUBSPACE` and `DROP SUBSPACE` operations of an `ALTER TABLE` on a table with
/// `schema` whose subspaces are named `existing`: the subspaces to add, and the names
/// of those to drop (`DROP SUBSPACE IF EXISTS` of a missing one is left out; without
/// `IF EXISTS` → 42704). Adding one with the name of another → 42710.
pub fn subspace_changes(
    ops: &[AlterColumn],
    schema: &Schema,
    existing: &[String],
) -> Result<(Vec<cairn_hyperspace::SubspaceSpec>, Vec<String>), ParseError> {
    let mut names = existing.to_vec();
    let (mut add, mut drop) = (vec![], vec![]);
    for op in ops {
        match op {
            AlterColumn::AddSubspace { subspace } => {
                let spec = subspace_spec(subspace, schema)?;
                if names.contains(&spec.name) {
                    return Err(ParseError::invalid_with(
                        "42710",
                        format!(
                            "the table already has subspace \"{}\": drop it first or choose \
                             other attributes",
                            spec.name
                        ),
                    ));
                }
                names.push(spec.name.clone());
                add.push(spec);
            }
            AlterColumn::DropSubspace { name, if_exists } => {
                if !names.contains(name) {
                    if *if_exists {
                        continue;
                    }
                    return Err(ParseError::invalid_with(
                        "42704",
                        format!(
                            "subspace \"{name}\" does not exist{}",
                            if names.is_empty() {
                                String::new()
                            } else {
                                format!(" (the table has {})", names.join(", "))
                            }
                        ),
                    ));
                }
                names.retain(|n| n != name);
                drop.push(name.clone());
            }
            _ => {}
        }
    }
    Ok((add, drop))
}

/// Turns `ALTER TABLE` operations into schema changes.
///
/// `ADD` becomes [`AlterOp::AddColumn`] with the column's type, nullability and default;
/// a NOT NULL column needs a DEFAULT (rows written before have to read as something).
/// `IF [NOT] EXISTS` is not applied here (see [`alter_ops_for_schema`]). Range
/// partition operations are left out: [`range_partition_changes`] turns those into
/// bounds.
pub fn alter_ops(ops: &[AlterColumn]) -> Result<Vec<AlterOp>, ParseError> {
    ops.iter()
        .filter(|op| {
            !matches!(
                op,
                AlterColumn::AddRangePartition { .. }
                    | AlterColumn::DropRangePartition { .. }
                    | AlterColumn::AddSubspace { .. }
                    | AlterColumn::DropSubspace { .. }
            )
        })
        .map(|op| match op {
            AlterColumn::Add { column, .. } if column.name == AUTO_INCREMENTING_ID => {
                Err(reserved_name())
            }
            AlterColumn::Rename { to, .. } if to == AUTO_INCREMENTING_ID => Err(reserved_name()),
            AlterColumn::Drop { name, .. } | AlterColumn::Rename { from: name, .. }
                if name == AUTO_INCREMENTING_ID =>
            {
                Err(ParseError::invalid_with(
                    "42703",
                    format!("column \"{name}\" is the hidden key of a table without a primary key; it cannot be dropped or renamed"),
                ))
            }
            AlterColumn::Add { column, .. } => {
                let spec = column_spec(column, false)?;
                if !spec.nullable && spec.default.is_none() {
                    return Err(ParseError::invalid_definition(format!(
                        "a NOT NULL column added to a table with rows needs a DEFAULT: add DEFAULT <value> to column '{}' or drop NOT NULL",
                        spec.name
                    )));
                }
                Ok(AlterOp::AddColumn(spec))
            }
            AlterColumn::Drop { name, .. } => Ok(AlterOp::DropColumn(name.clone())),
            AlterColumn::Rename { from, to } => Ok(AlterOp::RenameColumn {
                from: from.clone(),
                to: to.clone(),
            }),
            AlterColumn::AddRangePartition { .. }
            | AlterColumn::DropRangePartition { .. }
            | AlterColumn::AddSubspace { .. }
            | AlterColumn::DropSubspace { .. } => unreachable!("filtered out above"),
        })
        .collect()
}

/// The `ADD RANGE PARTITION` and `DROP RANGE PARTITION` operations of an `ALTER TABLE`,
/// as `(add, drop)` lists of `[lower, upper)` encoded range keys for a table with
/// this schema and partitioning. A table without range columns → 42P16.
#[allow(clippy::type_complexity)]
pub fn range_partition_changes(
    ops: &[AlterColumn],
    schema: &Schema,
    partition: &PartitionSchema,
) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>), ParseError> {
    let (mut add, mut drop) = (vec![], vec![]);
    for op in ops {
        let (bounds, into) = match op {
            AlterColumn::AddRangePartition { bounds } => (bounds, &mut add),
            AlterColumn::DropRangePartition { bounds } => (bounds, &mut drop),
            _ => continue,
        };
        if partition.range_columns.is_empty() {
            return Err(ParseError::invalid_definition(
                "the table is not range partitioned: only a table created with PARTITION BY RANGE (...) has range partitions to add or drop",
            ));
        }
        let types: Vec<DataType> = partition
            .range_columns
            .iter()
            .map(|c| {
                let i = schema.index_of(c).map_err(common)?;
                Ok(schema.column(i).data_type.clone())
            })
            .collect::<Result<_, ParseError>>()?;
        let (lower, upper) = bounds;
        into.push(encode_bounds(
            partition,
            &partition.range_columns,
            &types,
            lower,
            upper,
        )?);
    }
    Ok((add, drop))
}

/// [`alter_ops`] for a table whose current schema is `schema`: leaves out
/// `ADD COLUMN IF NOT EXISTS` of a column that exists and `DROP COLUMN IF EXISTS` of
/// one that does not (each judged against the schema as the earlier operations
/// leave it).
pub fn alter_ops_for_schema(
    ops: &[AlterColumn],
    schema: &Schema,
) -> Result<Vec<AlterOp>, ParseError> {
    let mut names: Vec<String> = schema.columns().iter().map(|c| c.name.clone()).collect();
    let mut kept = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            AlterColumn::Add {
                column,
                if_not_exists,
            } => {
                if names.contains(&column.name) {
                    if *if_not_exists {
                        continue;
                    }
                } else {
                    names.push(column.name.clone());
                }
            }
            AlterColumn::Drop { name, if_exists } => {
                if !names.contains(name) {
                    if *if_exists {
                        continue;
                    }
                } else {
                    names.retain(|n| n != name);
                }
            }
            AlterColumn::Rename { from, to } => {
                for n in names.iter_mut() {
                    if n == from {
                        *n = to.clone();
                    }
                }
            }
            _ => {}
        }
        kept.push(op.clone());
    }
    alter_ops(&kept)
}

#[cfg(test)]
mod tests {
    use super::super::tests::alter;
    use super::*;
    use cairn_common::{ColumnSpec, Value};

    #[test]
    fn alter_ops_mapping() {
        let ops = alter(
            "ALTER TABLE t ADD COLUMN n INT NOT NULL DEFAULT 7, ADD s VARCHAR(4), DROP COLUMN x, RENAME COLUMN a TO b",
        );
        let got = alter_ops(&ops).expect("ops");
        assert_eq!(
            got,
            vec![
                AlterOp::AddColumn(ColumnSpec {
                    name: "n".into(),
                    data_type: DataType::Int32,
                    nullable: false,
                    default: Some(Value::Int32(7)),
                }),
                AlterOp::AddColumn(ColumnSpec {
                    name: "s".into(),
                    data_type: DataType::Varchar(4),
                    nullable: true,
                    default: None,
                }),
                AlterOp::DropColumn("x".into()),
                AlterOp::RenameColumn {
                    from: "a".into(),
                    to: "b".into()
                },
            ]
        );
        let e = alter_ops(&alter("ALTER TABLE t ADD n INT NOT NULL")).expect_err("default");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(
            e.message()
                .contains("a NOT NULL column added to a table with rows needs a DEFAULT")
        );
        let e = alter_ops(&alter("ALTER TABLE t ADD n INT DEFAULT 'x'")).expect_err("type");
        assert_eq!(e.sqlstate(), "42804");
        let e = alter_ops(&alter("ALTER TABLE t ADD n JSON")).expect_err("type");
        assert_eq!(e.sqlstate(), "0A000");
        // Range partition operations are not column changes; they become bounds.
        let ops = alter(
            "ALTER TABLE t ADD RANGE PARTITION 10 <= VALUES < 20, DROP RANGE PARTITION VALUE = 3",
        );
        assert!(alter_ops(&ops).expect("no column ops").is_empty());
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String).nullable(),
            ],
            &["k"],
        )
        .expect("schema");
        let ranged = PartitionSchema {
            hash_levels: vec![],
            range_columns: vec!["k".into()],
        };
        let key = |v: i64| ranged.encode_range_key(&[Value::Int64(v)]).expect("key");
        let (add, drop) = range_partition_changes(&ops, &schema, &ranged).expect("bounds");
        assert_eq!(add, vec![(key(10), key(20))]);
        let mut just_above_3 = key(3);
        just_above_3.push(0);
        assert_eq!(drop, vec![(key(3), just_above_3)]);
        let e = range_partition_changes(
            &alter("ALTER TABLE t ADD RANGE PARTITION 'x' <= VALUES < 20"),
            &schema,
            &ranged,
        )
        .expect_err("type");
        assert_eq!(e.sqlstate(), "42804", "{}", e.message());
        let e = range_partition_changes(&ops, &schema, &PartitionSchema::default())
            .expect_err("not ranged");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("not range partitioned"));
    }

    #[test]
    fn alter_ops_if_exists() {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String).nullable(),
            ],
            &["k"],
        )
        .expect("schema");
        let ops = alter(
            "ALTER TABLE t ADD IF NOT EXISTS v TEXT, ADD IF NOT EXISTS w TEXT, DROP IF EXISTS zz, DROP IF EXISTS v, ADD IF NOT EXISTS v INT",
        );
        let got = alter_ops_for_schema(&ops, &schema).expect("ops");
        assert_eq!(
            got,
            vec![
                AlterOp::AddColumn(ColumnSpec::new("w", DataType::String).nullable()),
                AlterOp::DropColumn("v".into()),
                AlterOp::AddColumn(ColumnSpec::new("v", DataType::Int32).nullable()),
            ]
        );
        // Without IF [NOT] EXISTS the operations stay (and the master reports them).
        let ops = alter("ALTER TABLE t ADD v TEXT, DROP zz");
        assert_eq!(alter_ops_for_schema(&ops, &schema).expect("ops").len(), 2);
    }
}
