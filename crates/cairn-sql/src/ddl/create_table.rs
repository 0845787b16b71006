//! `CREATE TABLE` as a [`TableDef`]: schema, partitioning, encoded range bounds and
//! subspaces, validated the way the master will validate them.

use cairn_common::{
    AUTO_INCREMENTING_ID, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema,
};
use datafusion::sql::sqlparser::ast::DataType as SqlType;

use super::{column_spec, common, encode_bounds, reserved_name, subspace_spec};
use crate::parser::{CreateTable, ParseError};

/// A `CREATE TABLE` in Cairn's terms: everything the client's `CreateTableSpec` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    /// Table name.
    pub name: String,
    /// Columns (in the order declared) and primary key.
    pub schema: Schema,
    /// Hash levels and range columns.
    pub partition: PartitionSchema,
    /// Range partitions as `[lower, upper)` encoded range keys (empty = unbounded); an
    /// empty list means one unbounded range.
    pub range_bounds: Vec<(Vec<u8>, Vec<u8>)>,
    /// `WITH (replicas = n)`, if given.
    pub replicas: Option<u32>,
    /// `WITH (colocate_with = …)`: the colocation group asked for.
    pub colocation: cairn_common::Colocation,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
    /// `SUBSPACE (…)` clauses: hyperspace search subspaces.
    pub subspaces: Vec<cairn_hyperspace::SubspaceSpec>,
}

/// Builds and validates the table definition of a parsed `CREATE TABLE`.
///
/// - Columns keep the declared order (key columns may be anywhere); primary-key
///   columns are NOT NULL.
/// - `CREATE TABLE … AS SELECT` without a column list takes its columns from
///   `columns_from_query` (name, type, nullable, in query order) and its key from the
///   `PRIMARY KEY (…)` clause. With a column list, the list must have as many columns
///   as the query and wins.
/// - Without `PARTITION BY`: one hash level over all primary-key columns with
///   `default_buckets` buckets, or no partitioning if `default_buckets < 2`.
/// - `HASH PARTITIONS n` without columns hashes all primary-key columns.
/// - Range bounds are encoded with [`PartitionSchema::encode_range_key`]; `VALUE = x`
///   becomes `[key(x), key(x) ‖ 0x00)`, the range holding exactly `x`.
///
/// - Without a primary key, the table is keyed by a hidden BIGINT column
///   [`AUTO_INCREMENTING_ID`] placed first, whose values the client reserves from the
///   master (Kudu 1.17+'s auto-incrementing column): `pandas.DataFrame.to_sql` and
///   other tools that create tables without keys work, and duplicate rows are kept.
///
/// Errors: a column named [`AUTO_INCREMENTING_ID`] → 42939; a name given to two columns →
/// 42701; bad key, partition or range
/// definitions → 42P16; bad literals → 22023 / 42804.
pub fn table_def(
    ct: &CreateTable,
    columns_from_query: Option<&[(String, DataType, bool)]>,
    default_buckets: u32,
) -> Result<TableDef, ParseError> {
    // A table without a primary key is keyed by a hidden auto-incrementing column.
    let hidden_key = ct.primary_key.is_empty();
    let primary_key: Vec<String> = if hidden_key {
        vec![AUTO_INCREMENTING_ID.to_string()]
    } else {
        ct.primary_key.clone()
    };
    let is_key = |name: &str| primary_key.iter().any(|k| k == name);

    let specs: Vec<ColumnSpec> = if !ct.columns.is_empty() {
        if let Some(q) = columns_from_query
            && q.len() != ct.columns.len()
        {
            return Err(ParseError::invalid_definition(format!(
                "CREATE TABLE {} declares {} columns but its query returns {}: declare one column per query column, or leave out the column list",
                ct.name,
                ct.columns.len(),
                q.len()
            )));
        }
        ct.columns
            .iter()
            .enumerate()
            .map(|(i, c)| match (&c.data_type, columns_from_query) {
                // A name without a type (`CREATE TABLE t (a, b) AS SELECT …`).
                (SqlType::Unspecified, Some(q)) => Ok(ColumnSpec {
                    name: c.name.clone(),
                    data_type: q[i].1.clone(),
                    nullable: q[i].2 && c.nullable && !is_key(&c.name),
                    default: None,
                }),
                _ => column_spec(c, is_key(&c.name)),
            })
            .collect::<Result<_, _>>()?
    } else {
        let Some(q) = columns_from_query else {
            return Err(ParseError::invalid_definition(format!(
                "CREATE TABLE {} has no columns: list them, or create it AS SELECT ...",
                ct.name
            )));
        };
        q.iter()
            .map(|(name, t, nullable)| ColumnSpec {
                name: name.clone(),
                data_type: t.clone(),
                nullable: *nullable && !is_key(name),
                default: None,
            })
            .collect()
    };
    if specs.iter().any(|c| c.name == AUTO_INCREMENTING_ID) {
        return Err(reserved_name());
    }
    let mut specs = specs;
    if hidden_key {
        specs.insert(
            0,
            ColumnSpec {
                name: AUTO_INCREMENTING_ID.to_string(),
                data_type: DataType::Int64,
                nullable: false,
                default: None,
            },
        );
    }
    for (i, c) in specs.iter().enumerate() {
        if specs[..i].iter().any(|d| d.name == c.name) {
            let hint = if ct.columns.is_empty() && columns_from_query.is_some() {
                ": name the query's columns apart with AS, or list the table's columns before AS"
            } else {
                ""
            };
            return Err(ParseError::invalid_with(
                "42701",
                format!("column \"{}\" specified more than once{hint}", c.name),
            ));
        }
    }
    for k in &primary_key {
        if !specs.iter().any(|c| &c.name == k) {
            let names: Vec<&str> = specs.iter().map(|c| c.name.as_str()).collect();
            return Err(ParseError::invalid_definition(format!(
                "primary key column '{k}' is not a column of {}; its columns are {}",
                ct.name,
                names.join(", ")
            )));
        }
    }
    let key_refs: Vec<&str> = primary_key.iter().map(String::as_str).collect();
    let schema = Schema::new(specs, &key_refs).map_err(common)?;

    let mut partition = PartitionSchema::default();
    if ct.hash.is_empty() && ct.range.is_none() {
        if default_buckets >= 2 {
            partition.hash_levels.push(HashLevel {
                columns: primary_key.clone(),
                num_buckets: default_buckets,
                seed: 0,
            });
        }
    } else {
        for (cols, n) in &ct.hash {
            if *n < 2 {
                return Err(ParseError::invalid(
                    "PARTITIONS must be followed by a number of buckets ≥ 2, e.g. PARTITION BY HASH (id) PARTITIONS 4",
                ));
            }
            partition.hash_levels.push(HashLevel {
                columns: if cols.is_empty() {
                    primary_key.clone()
                } else {
                    cols.clone()
                },
                num_buckets: *n,
                seed: 0,
            });
        }
        if let Some(r) = &ct.range {
            partition.range_columns = r.columns.clone();
        }
    }
    partition.validate(&schema).map_err(common)?;

    let mut range_bounds = Vec::new();
    if let Some(r) = &ct.range {
        let types: Vec<DataType> = r
            .columns
            .iter()
            .map(|c| {
                let i = schema.index_of(c).map_err(common)?;
                Ok(schema.column(i).data_type.clone())
            })
            .collect::<Result<_, ParseError>>()?;
        for (lower, upper) in &r.bounds {
            range_bounds.push(encode_bounds(&partition, &r.columns, &types, lower, upper)?);
        }
        partition.create_partitions(&range_bounds).map_err(common)?;
    }

    let mut subspaces: Vec<cairn_hyperspace::SubspaceSpec> = Vec::with_capacity(ct.subspaces.len());
    for clause in &ct.subspaces {
        let spec = subspace_spec(clause, &schema)?;
        if subspaces.iter().any(|s| s.columns == spec.columns) {
            return Err(ParseError::invalid_definition(format!(
                "SUBSPACE ({}) is declared twice",
                clause.0.join(", ")
            )));
        }
        subspaces.push(spec);
    }

    Ok(TableDef {
        name: ct.name.clone(),
        schema,
        partition,
        range_bounds,
        replicas: ct.replicas,
        colocation: ct.colocation.clone(),
        if_not_exists: ct.if_not_exists,
        subspaces,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{create, def};
    use super::*;
    use cairn_common::Value;
    use cairn_common::key;

    #[test]
    fn table_def_basic() {
        let d = def(
            "CREATE TABLE t (v TEXT, id BIGINT PRIMARY KEY, n INT NOT NULL DEFAULT 3, x DOUBLE DEFAULT NULL) WITH (replicas = 5)",
        )
        .expect("def");
        assert_eq!(d.name, "t");
        let s = &d.schema;
        let names: Vec<_> = s.columns().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["v", "id", "n", "x"], "declared order is kept");
        assert_eq!(s.key_indexes(), &[1]);
        assert!(!s.column(1).nullable);
        assert!(s.column(0).nullable);
        assert!(!s.column(2).nullable);
        assert_eq!(s.column(2).default, Some(Value::Int32(3)));
        assert_eq!(s.column(3).default, Some(Value::Null));
        assert_eq!(s.column(1).data_type, DataType::Int64);
        assert_eq!(
            d.partition.hash_levels,
            vec![HashLevel {
                columns: vec!["id".into()],
                num_buckets: 4,
                seed: 0
            }]
        );
        assert!(d.partition.range_columns.is_empty());
        assert!(d.range_bounds.is_empty());
        assert_eq!(d.replicas, Some(5));
        assert!(!d.if_not_exists);
    }

    #[test]
    fn table_def_default_buckets() {
        let ct = create("CREATE TABLE t (a INT, b TEXT, PRIMARY KEY (b, a))");
        let d = table_def(&ct, None, 1).expect("def");
        assert!(d.partition.hash_levels.is_empty());
        let d = table_def(&ct, None, 6).expect("def");
        assert_eq!(d.partition.hash_levels[0].columns, vec!["b", "a"]);
        assert_eq!(d.partition.hash_levels[0].num_buckets, 6);
        assert_eq!(d.schema.key_indexes(), &[1, 0]);
        // Explicit range partitioning only: no default hash level.
        let d =
            def("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY RANGE (a) (PARTITION VALUES < 0)")
                .expect("def");
        assert!(d.partition.hash_levels.is_empty());
        // HASH PARTITIONS n without columns hashes the whole key.
        let d =
            def("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b)) PARTITION BY HASH PARTITIONS 3")
                .expect("def");
        assert_eq!(d.partition.hash_levels[0].columns, vec!["a", "b"]);
    }

    #[test]
    fn table_def_errors() {
        // No primary key: a hidden auto-incrementing key, first, hashed by default.
        let d = def("CREATE TABLE t (a INT, b TEXT)").expect("no pk");
        assert_eq!(d.schema.auto_id_index(), Some(0));
        assert_eq!(d.schema.column(0).name, AUTO_INCREMENTING_ID);
        assert_eq!(d.schema.visible_indexes(), vec![1, 2]);
        assert_eq!(
            d.partition.hash_levels[0].columns,
            vec![AUTO_INCREMENTING_ID.to_string()]
        );
        let d = def("CREATE TABLE t (a INT, b TEXT) PARTITION BY HASH PARTITIONS 3").expect("def");
        assert_eq!(
            d.partition.hash_levels[0].columns,
            vec![AUTO_INCREMENTING_ID.to_string()]
        );
        let e = def("CREATE TABLE t (a INT) PARTITION BY HASH (a) PARTITIONS 3")
            .expect_err("hash on a non-key column");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def("CREATE TABLE t (auto_incrementing_id BIGINT PRIMARY KEY)")
            .expect_err("reserved name");
        assert_eq!(e.sqlstate(), "42939");
        assert!(e.message().contains("reserved"), "{e}");
        let e = def("CREATE TABLE t (a INT) PRIMARY KEY (b)").expect_err("unknown pk");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("'b'"), "{e}");
        let e = def(
            "CREATE TABLE t (a INT, b INT, PRIMARY KEY (a)) PARTITION BY HASH (b) PARTITIONS 2",
        )
        .expect_err("hash on non-key");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("primary key"), "{e}");
        let e = def("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a)) PARTITION BY RANGE (b)")
            .expect_err("range on non-key");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b)) PARTITION BY HASH (a) PARTITIONS 2, HASH (a) PARTITIONS 3")
            .expect_err("same column twice");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def("CREATE TABLE t (a UUID PRIMARY KEY)").expect_err("type");
        assert_eq!(e.sqlstate(), "0A000");
        assert!(e.message().starts_with("column 'a': "), "{e}");
        let e = def("CREATE TABLE t (a INT PRIMARY KEY, b INT DEFAULT 'x')").expect_err("default");
        assert_eq!(e.sqlstate(), "42804");
        assert!(e.message().contains("DEFAULT of column 'b'"), "{e}");
        let e = def("CREATE TABLE t (a INT PRIMARY KEY, b INT NOT NULL DEFAULT NULL)")
            .expect_err("null default");
        assert_eq!(e.sqlstate(), "42P16");
        // PostgreSQL's duplicate_column.
        let e = def("CREATE TABLE t (a INT PRIMARY KEY, b INT, A INT)").expect_err("dup column");
        assert_eq!(e.sqlstate(), "42701");
        let mut ct = create("CREATE TABLE t (a INT PRIMARY KEY)");
        ct.hash = vec![(vec!["a".into()], 1)];
        let e = table_def(&ct, None, 4).expect_err("1 bucket");
        assert!(
            e.message()
                .contains("PARTITIONS must be followed by a number of buckets ≥ 2")
        );
    }

    #[test]
    fn range_bounds_round_trip() {
        let d = def(
            "CREATE TABLE t (k BIGINT, s TEXT, PRIMARY KEY (s, k)) \
             PARTITION BY HASH (s) PARTITIONS 2, RANGE (k) \
             (PARTITION VALUES < -10, PARTITION -10 <= VALUES < 20, PARTITION VALUE = 25, PARTITION 30 <= VALUES)",
        )
        .expect("def");
        assert_eq!(d.partition.range_columns, vec!["k"]);
        let t = DataType::Int64;
        let dec = |b: &[u8]| key::decode_values(&[&t], b).expect("decode");
        let enc = |v: i64| {
            d.partition
                .encode_range_key(&[Value::Int64(v)])
                .expect("enc")
        };
        assert_eq!(d.range_bounds.len(), 4);
        assert_eq!(d.range_bounds[0].0, Vec::<u8>::new());
        assert_eq!(dec(&d.range_bounds[0].1), vec![Value::Int64(-10)]);
        assert_eq!(dec(&d.range_bounds[1].0), vec![Value::Int64(-10)]);
        assert_eq!(dec(&d.range_bounds[1].1), vec![Value::Int64(20)]);
        // VALUE = 25 holds exactly 25.
        let (lo, hi) = &d.range_bounds[2];
        assert_eq!(dec(lo), vec![Value::Int64(25)]);
        assert!(enc(25) >= *lo && enc(25) < *hi);
        assert!(enc(24) < *lo);
        assert!(enc(26) >= *hi);
        assert_eq!(dec(&d.range_bounds[3].0), vec![Value::Int64(30)]);
        assert!(d.range_bounds[3].1.is_empty());
        // The partitions the master would create: 2 buckets × 4 ranges.
        assert_eq!(
            d.partition
                .create_partitions(&d.range_bounds)
                .expect("partitions")
                .len(),
            8
        );
    }

    #[test]
    fn multi_column_range_bounds_round_trip() {
        let d = def(
            "CREATE TABLE t (a INT, b TEXT, d DATE, PRIMARY KEY (a, b, d)) PARTITION BY RANGE (b, d) \
             (PARTITION ('a', DATE '2024-01-01') <= VALUES < ('m', '2024-06-01'), PARTITION VALUE = ('z', '2025-01-01'))",
        )
        .expect("def");
        let types = [DataType::String, DataType::Date];
        let tr: Vec<&DataType> = types.iter().collect();
        let (lo, hi) = &d.range_bounds[0];
        assert_eq!(
            key::decode_values(&tr, lo).expect("lo"),
            vec![Value::String("a".into()), Value::Date(19723)]
        );
        assert_eq!(
            key::decode_values(&tr, hi).expect("hi"),
            vec![Value::String("m".into()), Value::Date(19875)]
        );
        let (lo, hi) = &d.range_bounds[1];
        let exact = d
            .partition
            .encode_range_key(&[Value::String("z".into()), Value::Date(20089)])
            .expect("enc");
        assert_eq!(*lo, exact);
        assert!(exact < *hi);
        let next = d
            .partition
            .encode_range_key(&[Value::String("z".into()), Value::Date(20090)])
            .expect("enc");
        assert!(next >= *hi);
    }

    #[test]
    fn range_bound_errors() {
        let base = "CREATE TABLE t (a INT, b TEXT, PRIMARY KEY (a, b)) PARTITION BY RANGE (a) ";
        let e = def(&format!("{base}(PARTITION (1, 'x') <= VALUES)")).expect_err("arity");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("one value per range column"), "{e}");
        let e = def(&format!("{base}(PARTITION 'x' <= VALUES)")).expect_err("type");
        assert_eq!(e.sqlstate(), "42804");
        let e = def(&format!("{base}(PARTITION 10 <= VALUES < 5)")).expect_err("empty");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def(&format!(
            "{base}(PARTITION VALUES < 10, PARTITION 5 <= VALUES < 20)"
        ))
        .expect_err("overlap");
        assert_eq!(e.sqlstate(), "42P16");
        assert!(e.message().contains("overlap"), "{e}");
        let e = def(&format!("{base}(PARTITION NULL <= VALUES)")).expect_err("null");
        assert_eq!(e.sqlstate(), "42P16");
        let e = def(&format!("{base}(PARTITION 3000000000 <= VALUES)")).expect_err("range");
        assert_eq!(e.sqlstate(), "22023");
        let e = def(
            "CREATE TABLE t (b TEXT PRIMARY KEY) PARTITION BY RANGE (b) (PARTITION VALUES < '')",
        )
        .expect_err("empty upper");
        assert_eq!(e.sqlstate(), "42P16");
    }

    #[test]
    fn ctas_columns() {
        let ct = create("CREATE TABLE t2 PRIMARY KEY (id) AS SELECT id, v FROM t1");
        let cols = vec![
            ("id".to_string(), DataType::Int64, true),
            ("v".to_string(), DataType::String, true),
        ];
        let d = table_def(&ct, Some(&cols), 3).expect("def");
        assert_eq!(d.schema.num_columns(), 2);
        assert!(!d.schema.column(0).nullable, "key columns become NOT NULL");
        assert!(d.schema.column(1).nullable);
        assert_eq!(d.schema.column(1).data_type, DataType::String);
        assert_eq!(d.partition.hash_levels[0].num_buckets, 3);
        // No PRIMARY KEY clause: the hidden key, then the query's columns.
        let ct = create("CREATE TABLE t2 AS SELECT id, v FROM t1");
        let d = table_def(&ct, Some(&cols), 3).expect("def");
        assert_eq!(d.schema.auto_id_index(), Some(0));
        assert_eq!(d.schema.visible_indexes(), vec![1, 2]);
        assert!(d.schema.column(1).nullable, "no longer a key column");
        // Names without types take the query's types.
        let ct = create("CREATE TABLE t2 (a, b) PRIMARY KEY (a) AS SELECT id, v FROM t1");
        let d = table_def(&ct, Some(&cols), 3).expect("def");
        let c = |i: usize| d.schema.column(i);
        assert_eq!(
            (c(0).name.as_str(), &c(0).data_type),
            ("a", &DataType::Int64)
        );
        assert_eq!(
            (c(1).name.as_str(), &c(1).data_type),
            ("b", &DataType::String)
        );
        assert!(!c(0).nullable && c(1).nullable);
        // A name given to two columns: PostgreSQL's 42701, from a query or a list.
        let twice = vec![("n".to_string(), DataType::Int64, true); 2];
        let ct = create("CREATE TABLE t2 AS SELECT n, n FROM t1");
        let e = table_def(&ct, Some(&twice), 3).expect_err("twice");
        assert_eq!(e.sqlstate(), "42701");
        assert!(
            e.message()
                .contains("column \"n\" specified more than once"),
            "{e}"
        );
        let ct = create("CREATE TABLE t2 (a INT PRIMARY KEY, a INT)");
        let e = table_def(&ct, None, 3).expect_err("twice");
        assert_eq!(e.sqlstate(), "42701");
        // Key not among the query's columns.
        let ct = create("CREATE TABLE t2 PRIMARY KEY (nope) AS SELECT id FROM t1");
        assert_eq!(
            table_def(&ct, Some(&cols), 3).expect_err("pk").sqlstate(),
            "42P16"
        );
        // Declared columns win but must match the query's count.
        let ct =
            create("CREATE TABLE t2 (id INT PRIMARY KEY, v VARCHAR(5)) AS SELECT id, v FROM t1");
        let d = table_def(&ct, Some(&cols), 3).expect("def");
        assert_eq!(d.schema.column(1).data_type, DataType::Varchar(5));
        let ct = create("CREATE TABLE t2 (id INT PRIMARY KEY) AS SELECT id, v FROM t1");
        assert_eq!(
            table_def(&ct, Some(&cols), 3)
                .expect_err("count")
                .sqlstate(),
            "42P16"
        );
        // Columns neither declared nor given.
        let ct = create("CREATE TABLE t2 PRIMARY KEY (id) AS SELECT id FROM t1");
        assert_eq!(
            table_def(&ct, None, 3).expect_err("cols").sqlstate(),
            "42P16"
        );
    }
}
