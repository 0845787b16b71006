//! Table schemas with stable column ids, and schema evolution.
//!
//! Every column gets an id when it is created and keeps it for life; storage files refer
//! to columns by id, so renaming or dropping a column, or adding one with a default,
//! changes only the schema, never the data (DESIGN.md, "Data model").

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{Field, FieldRef, Schema as ArrowSchema, SchemaRef};

use crate::error::{CommonError, Result};
use crate::types::{DataType, Value};

/// Largest encoded primary key, in bytes.
pub const MAX_KEY_BYTES: usize = 16 * 1024;
/// Largest single cell, in bytes.
pub const MAX_CELL_BYTES: usize = 64 * 1024;
/// Arrow field metadata key holding a column's stable id.
pub const COLUMN_ID_METADATA_KEY: &str = "cairn.column_id";

/// The name of the hidden key column of a table created without a primary key (Kudu
/// 1.17+'s name for the same thing). Its values come from the master (see
/// `cairn_client::auto_id`); SQL neither shows it nor lets a user name a column so.
pub const AUTO_INCREMENTING_ID: &str = "auto_incrementing_id";

/// A column's stable identifier.
pub type ColumnId = u32;

/// A column as the user declares it (before it has an id).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ColumnSpec {
    /// Column name (unique in the table, case-sensitive).
    pub name: String,
    /// Column type.
    pub data_type: DataType,
    /// Whether NULL is allowed. Key columns are never nullable.
    pub nullable: bool,
    /// Value used for rows that were written before the column existed, and for inserts
    /// that omit the column.
    pub default: Option<Value>,
}

impl ColumnSpec {
    /// A non-null column without a default.
    pub fn new(name: impl Into<String>, data_type: DataType) -> Self {
        ColumnSpec {
            name: name.into(),
            data_type,
            nullable: false,
            default: None,
        }
    }
    /// Makes the column nullable.
    pub fn nullable(mut self) -> Self {
        self.nullable = true;
        self
    }
    /// Gives the column a default value.
    pub fn with_default(mut self, v: Value) -> Self {
        self.default = Some(v);
        self
    }
}

/// A column of a schema: a [`ColumnSpec`] plus its stable id.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ColumnSchema {
    /// Stable id; never reused within a table.
    pub id: ColumnId,
    /// Column name.
    pub name: String,
    /// Column type.
    pub data_type: DataType,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// Default for absent cells (see [`ColumnSpec::default`]).
    pub default: Option<Value>,
}

impl ColumnSchema {
    /// The value a row that lacks this column reads as: its default, else NULL.
    pub fn read_default(&self) -> Value {
        self.default.clone().unwrap_or(Value::Null)
    }
}

/// A table schema: ordered columns and the primary key (an ordered list of non-null
/// columns).
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    columns: Vec<ColumnSchema>,
    key_indexes: Vec<usize>,
    next_column_id: ColumnId,
    version: u32,
    by_name: HashMap<String, usize>,
    /// The columns' Arrow fields, made once: every scan builds the Arrow schema of
    /// its projection, and cloning a shared field costs less than making one.
    fields: ArrowFields,
}

/// The Arrow fields of a [`Schema`]'s columns, in column order. Derived from the
/// columns, so it takes no part in comparing or printing schemas.
#[derive(Clone, Default)]
struct ArrowFields(Vec<FieldRef>);

impl PartialEq for ArrowFields {
    fn eq(&self, _: &ArrowFields) -> bool {
        true
    }
}

impl std::fmt::Debug for ArrowFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
    }
}

impl Schema {
    /// Builds a schema from column specs and the names of the primary-key columns, in key
    /// order. Ids are assigned 0, 1, 2… in column order.
    pub fn new(columns: Vec<ColumnSpec>, key: &[&str]) -> Result<Schema> {
        let cols: Vec<ColumnSchema> = columns
            .into_iter()
            .enumerate()
            .map(|(i, c)| ColumnSchema {
                id: i as ColumnId,
                name: c.name,
                data_type: c.data_type,
                nullable: c.nullable,
                default: c.default,
            })
            .collect();
        let next = cols.len() as ColumnId;
        let mut by_name = HashMap::new();
        for (i, c) in cols.iter().enumerate() {
            if by_name.insert(c.name.clone(), i).is_some() {
                return Err(CommonError::InvalidSchema(format!(
                    "column '{}' is declared twice",
                    c.name
                )));
            }
        }
        let mut key_indexes = Vec::with_capacity(key.len());
        for k in key {
            let i = *by_name.get(*k).ok_or_else(|| {
                CommonError::InvalidSchema(format!(
                    "primary key column '{k}' is not a column of the table"
                ))
            })?;
            if key_indexes.contains(&i) {
                return Err(CommonError::InvalidSchema(format!(
                    "column '{k}' appears twice in the primary key"
                )));
            }
            key_indexes.push(i);
        }
        Self::from_parts(cols, key_indexes, next, 0)
    }

    /// Reassembles a schema from its stored parts (used when loading tablet metadata).
    pub fn from_parts(
        columns: Vec<ColumnSchema>,
        key_indexes: Vec<usize>,
        next_column_id: ColumnId,
        version: u32,
    ) -> Result<Schema> {
        let by_name = columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        let fields = ArrowFields(columns.iter().map(|c| Arc::new(column_field(c))).collect());
        let s = Schema {
            columns,
            key_indexes,
            next_column_id,
            version,
            by_name,
            fields,
        };
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> Result<()> {
        if self.key_indexes.is_empty() {
            return Err(CommonError::InvalidSchema(
                "a table needs a primary key: name at least one column in PRIMARY KEY (...)".into(),
            ));
        }
        let mut ids = HashSet::new();
        for c in &self.columns {
            c.data_type.validate()?;
            if c.name.is_empty() {
                return Err(CommonError::InvalidSchema("a column name is empty".into()));
            }
            if !ids.insert(c.id) || c.id >= self.next_column_id {
                return Err(CommonError::InvalidSchema(format!(
                    "column id {} of '{}' is invalid",
                    c.id, c.name
                )));
            }
            if let Some(d) = &c.default {
                if d.is_null() && !c.nullable {
                    return Err(CommonError::InvalidSchema(format!(
                        "column '{}' is NOT NULL but its default is NULL",
                        c.name
                    )));
                }
                d.check_type(&c.name, &c.data_type)?;
            }
        }
        for &k in &self.key_indexes {
            let c = self
                .columns
                .get(k)
                .ok_or_else(|| CommonError::InvalidSchema("key index out of range".into()))?;
            if c.nullable {
                return Err(CommonError::InvalidSchema(format!(
                    "primary key column '{}' must be NOT NULL",
                    c.name
                )));
            }
        }
        Ok(())
    }

    /// The columns in order.
    pub fn columns(&self) -> &[ColumnSchema] {
        &self.columns
    }
    /// Number of columns.
    pub fn num_columns(&self) -> usize {
        self.columns.len()
    }
    /// Column `i`.
    pub fn column(&self, i: usize) -> &ColumnSchema {
        &self.columns[i]
    }
    /// Positions of the primary-key columns, in key order.
    pub fn key_indexes(&self) -> &[usize] {
        &self.key_indexes
    }
    /// Whether column `i` is part of the primary key.
    pub fn is_key_column(&self, i: usize) -> bool {
        self.key_indexes.contains(&i)
    }
    /// The position of the hidden auto-incrementing key column, when the table has
    /// one: its only key column, BIGINT, named [`AUTO_INCREMENTING_ID`].
    pub fn auto_id_index(&self) -> Option<usize> {
        match self.key_indexes.as_slice() {
            [k] if self.columns[*k].name == AUTO_INCREMENTING_ID
                && self.columns[*k].data_type == DataType::Int64 =>
            {
                Some(*k)
            }
            _ => None,
        }
    }
    /// The positions of the columns users see: all but the hidden key column.
    pub fn visible_indexes(&self) -> Vec<usize> {
        let hidden = self.auto_id_index();
        (0..self.columns.len())
            .filter(|&i| Some(i) != hidden)
            .collect()
    }
    /// The next id a new column will get.
    pub fn next_column_id(&self) -> ColumnId {
        self.next_column_id
    }
    /// Incremented by every schema change.
    pub fn version(&self) -> u32 {
        self.version
    }
    /// Position of a column by name.
    pub fn index_of(&self, name: &str) -> Result<usize> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| CommonError::UnknownColumn(name.to_string()))
    }
    /// Position of a column by id.
    pub fn index_of_id(&self, id: ColumnId) -> Option<usize> {
        self.columns.iter().position(|c| c.id == id)
    }

    /// The Arrow schema of full rows; each field carries its column id in metadata.
    pub fn to_arrow(&self) -> SchemaRef {
        Arc::new(ArrowSchema::new(self.fields.0.clone()))
    }

    /// The Arrow schema of a projection (column positions).
    pub fn project_arrow(&self, projection: &[usize]) -> SchemaRef {
        Arc::new(ArrowSchema::new(
            projection
                .iter()
                .map(|&i| self.fields.0[i].clone())
                .collect::<Vec<_>>(),
        ))
    }

    /// Checks a full row (one value per column, in column order) fits the schema: types,
    /// nullability, VARCHAR/DECIMAL limits, cell and key sizes.
    pub fn validate_row(&self, row: &[Value]) -> Result<()> {
        if row.len() != self.columns.len() {
            return Err(CommonError::InvalidValue {
                column: "<row>".into(),
                detail: format!(
                    "row has {} cells but the table has {} columns",
                    row.len(),
                    self.columns.len()
                ),
            });
        }
        for (c, v) in self.columns.iter().zip(row) {
            self.validate_cell(c, v)?;
        }
        Ok(())
    }

    /// Checks one cell for column `c`.
    pub fn validate_cell(&self, c: &ColumnSchema, v: &Value) -> Result<()> {
        if v.is_null() && !c.nullable {
            return Err(CommonError::NullValue {
                column: c.name.clone(),
            });
        }
        v.check_type(&c.name, &c.data_type)?;
        if v.size_bytes() > MAX_CELL_BYTES {
            return Err(CommonError::InvalidValue {
                column: c.name.clone(),
                detail: format!(
                    "cell of {} bytes exceeds the {} byte limit",
                    v.size_bytes(),
                    MAX_CELL_BYTES
                ),
            });
        }
        Ok(())
    }

    /// A new schema with one more column. A NOT NULL column needs a default so that
    /// existing rows have a value.
    pub fn add_column(&self, spec: ColumnSpec) -> Result<Schema> {
        if self.by_name.contains_key(&spec.name) {
            return Err(CommonError::InvalidSchema(format!(
                "column '{}' already exists",
                spec.name
            )));
        }
        if !spec.nullable && spec.default.is_none() {
            return Err(CommonError::InvalidSchema(format!(
                "new NOT NULL column '{}' needs a DEFAULT for existing rows",
                spec.name
            )));
        }
        let mut cols = self.columns.clone();
        cols.push(ColumnSchema {
            id: self.next_column_id,
            name: spec.name,
            data_type: spec.data_type,
            nullable: spec.nullable,
            default: spec.default,
        });
        Self::from_parts(
            cols,
            self.key_indexes.clone(),
            self.next_column_id + 1,
            self.version + 1,
        )
    }

    /// A new schema without column `name` (which must not be a key column).
    pub fn drop_column(&self, name: &str) -> Result<Schema> {
        let i = self.index_of(name)?;
        if self.is_key_column(i) {
            return Err(CommonError::InvalidSchema(format!(
                "cannot drop primary key column '{name}'"
            )));
        }
        let mut cols = self.columns.clone();
        cols.remove(i);
        let keys = self
            .key_indexes
            .iter()
            .map(|&k| if k > i { k - 1 } else { k })
            .collect();
        Self::from_parts(cols, keys, self.next_column_id, self.version + 1)
    }

    /// A new schema with column `old` called `new`.
    pub fn rename_column(&self, old: &str, new: &str) -> Result<Schema> {
        let i = self.index_of(old)?;
        if self.by_name.contains_key(new) {
            return Err(CommonError::InvalidSchema(format!(
                "column '{new}' already exists"
            )));
        }
        let mut cols = self.columns.clone();
        cols[i].name = new.to_string();
        Self::from_parts(
            cols,
            self.key_indexes.clone(),
            self.next_column_id,
            self.version + 1,
        )
    }
}

fn column_field(c: &ColumnSchema) -> Field {
    Field::new(&c.name, c.data_type.to_arrow(), c.nullable).with_metadata(
        [(COLUMN_ID_METADATA_KEY.to_string(), c.id.to_string())]
            .into_iter()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::String).nullable(),
            ],
            &["k"],
        )
        .unwrap()
    }

    #[test]
    fn rejects_bad_schemas() {
        assert!(Schema::new(vec![ColumnSpec::new("k", DataType::Int64)], &[]).is_err());
        assert!(
            Schema::new(
                vec![ColumnSpec::new("k", DataType::Int64).nullable()],
                &["k"]
            )
            .is_err()
        );
        assert!(Schema::new(vec![ColumnSpec::new("k", DataType::Int64)], &["x"]).is_err());
        assert!(
            Schema::new(
                vec![
                    ColumnSpec::new("k", DataType::Int64),
                    ColumnSpec::new("k", DataType::Int8)
                ],
                &["k"]
            )
            .is_err()
        );
    }

    #[test]
    fn alter_keeps_ids_stable() {
        let s = sample();
        let s2 = s
            .add_column(ColumnSpec::new("n", DataType::Int32).with_default(Value::Int32(7)))
            .unwrap();
        assert_eq!(s2.column(2).id, 2);
        assert!(s.add_column(ColumnSpec::new("m", DataType::Int32)).is_err());
        let s3 = s2.drop_column("v").unwrap();
        assert_eq!(s3.column(1).id, 2);
        assert!(s3.drop_column("k").is_err());
        let s4 = s3.rename_column("n", "m").unwrap();
        assert_eq!(s4.column(1).id, 2);
        assert_eq!(s4.index_of("m").unwrap(), 1);
        let s5 = s4
            .add_column(ColumnSpec::new("v", DataType::String).nullable())
            .unwrap();
        assert_eq!(s5.column(2).id, 3, "ids are never reused");
    }

    #[test]
    fn arrow_schemas_follow_the_columns_through_alters() {
        let s = sample()
            .rename_column("v", "w")
            .unwrap()
            .add_column(ColumnSpec::new("x", DataType::Int32).nullable())
            .unwrap();
        let full = s.to_arrow();
        let names: Vec<_> = full.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["k", "w", "x"]);
        let p = s.project_arrow(&[2, 0]);
        assert_eq!(p.field(0).name(), "x");
        assert_eq!(p.field(0).data_type(), &arrow::datatypes::DataType::Int32);
        assert!(p.field(0).is_nullable());
        assert_eq!(p.field(0).metadata()[COLUMN_ID_METADATA_KEY], "2");
        assert_eq!(p.field(1).name(), "k");
        assert!(!p.field(1).is_nullable());
        let d = s.drop_column("w").unwrap();
        let names: Vec<_> = d
            .to_arrow()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["k", "x"]);
        assert_eq!(
            d.project_arrow(&[1]).field(0).metadata()[COLUMN_ID_METADATA_KEY],
            "2"
        );
    }

    #[test]
    fn validates_rows() {
        let s = sample();
        assert!(s.validate_row(&[Value::Int64(1), Value::Null]).is_ok());
        assert!(s.validate_row(&[Value::Null, Value::Null]).is_err());
        assert!(s.validate_row(&[Value::Int32(1), Value::Null]).is_err());
        assert!(s.validate_row(&[Value::Int64(1)]).is_err());
        let big = Value::String("x".repeat(MAX_CELL_BYTES + 1));
        assert!(s.validate_row(&[Value::Int64(1), big]).is_err());
    }
}

/// The stored form of a schema.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SchemaMeta {
    /// Columns.
    pub columns: Vec<ColumnSchema>,
    /// Primary-key column positions.
    pub key_indexes: Vec<usize>,
    /// Next column id.
    pub next_column_id: ColumnId,
    /// Schema version.
    pub version: u32,
}

impl SchemaMeta {
    /// Captures a schema.
    pub fn from_schema(s: &Schema) -> Self {
        SchemaMeta {
            columns: s.columns().to_vec(),
            key_indexes: s.key_indexes().to_vec(),
            next_column_id: s.next_column_id(),
            version: s.version(),
        }
    }
    /// Rebuilds the schema.
    pub fn to_schema(&self) -> Result<Schema> {
        Schema::from_parts(
            self.columns.clone(),
            self.key_indexes.clone(),
            self.next_column_id,
            self.version,
        )
    }
}

/// A schema change.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AlterOp {
    /// Add a column (NOT NULL needs a default).
    AddColumn(ColumnSpec),
    /// Drop a non-key column.
    DropColumn(String),
    /// Rename a column.
    RenameColumn {
        /// Current name.
        from: String,
        /// New name.
        to: String,
    },
}

impl Schema {
    /// The schema after `op`.
    pub fn altered(&self, op: &AlterOp) -> Result<Schema> {
        match op {
            AlterOp::AddColumn(spec) => self.add_column(spec.clone()),
            AlterOp::DropColumn(name) => self.drop_column(name),
            AlterOp::RenameColumn { from, to } => self.rename_column(from, to),
        }
    }
}
