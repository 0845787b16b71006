//! Turning parsed DDL ([`crate::parser`]) into Cairn's own types (`cairn-common`).
//!
//! - [`column_type`] maps SQL types onto [`cairn_common::DataType`];
//! - [`literal_value`] turns a literal (a `DEFAULT`, a range bound) into a
//!   [`cairn_common::Value`] of the column's type, exactly (decimals are scaled with
//!   integer arithmetic, dates and timestamps parsed as in Arrow);
//! - [`table_def`] builds the schema, partition schema and encoded range bounds of a
//!   `CREATE TABLE`, validated the way the master will validate them;
//! - [`alter_ops`] turns `ALTER TABLE` operations into [`AlterOp`]s.
//!
//! One file per job: `types.rs`, `literal.rs`, `create_table.rs` and `alter_table.rs`;
//! this file holds what the two table statements share (column specs, range bounds,
//! subspaces, error mapping).
//!
//! Only `cairn-common` types appear here, so the caller builds the client's
//! `CreateTableSpec` from a [`TableDef`] field by field.

use cairn_common::schema::MAX_KEY_BYTES;
use cairn_common::{
    AUTO_INCREMENTING_ID, ColumnSpec, CommonError, DataType, PartitionSchema, Schema,
};
use datafusion::sql::sqlparser::ast::Expr;

use crate::parser::{ColumnDef, ParseError};

mod alter_table;
mod create_table;
mod literal;
mod types;

pub use alter_table::{alter_ops, alter_ops_for_schema, range_partition_changes, subspace_changes};
pub use create_table::{TableDef, table_def};
pub use literal::{literal_value, parse_decimal};
pub use types::{DEFAULT_DECIMAL, column_type};

fn common(e: CommonError) -> ParseError {
    match e {
        CommonError::InvalidValue { .. }
        | CommonError::NullValue { .. }
        | CommonError::ValueTooLong { .. } => ParseError::invalid(e.to_string()),
        other => ParseError::invalid_definition(other.to_string()),
    }
}

/// The error for a user column named [`AUTO_INCREMENTING_ID`] (42939).
fn reserved_name() -> ParseError {
    ParseError::invalid_with(
        "42939",
        format!(
            "column name \"{AUTO_INCREMENTING_ID}\" is reserved for the hidden key of tables without a primary key: choose another name"
        ),
    )
}

fn column_spec(c: &ColumnDef, is_key: bool) -> Result<ColumnSpec, ParseError> {
    let data_type = column_type(&c.data_type)
        .map_err(|e| with_context(e, &format!("column '{}': ", c.name)))?;
    let nullable = c.nullable && !is_key;
    let default = match &c.default {
        None => None,
        Some(e) => {
            let v = literal_value(e, &data_type)
                .map_err(|err| with_context(err, &format!("DEFAULT of column '{}': ", c.name)))?;
            if v.is_null() && !nullable {
                return Err(ParseError::invalid_definition(format!(
                    "column '{}' is NOT NULL, so its DEFAULT cannot be NULL",
                    c.name
                )));
            }
            Some(v)
        }
    };
    Ok(ColumnSpec {
        name: c.name.clone(),
        data_type,
        nullable,
        default,
    })
}

fn with_context(e: ParseError, prefix: &str) -> ParseError {
    match e {
        ParseError::Syntax(m) => ParseError::Syntax(format!("{prefix}{m}")),
        ParseError::Unsupported(m) => ParseError::Unsupported(format!("{prefix}{m}")),
        ParseError::Invalid { message, code } => ParseError::Invalid {
            message: format!("{prefix}{message}"),
            code,
        },
    }
}

fn encode_bound(
    partition: &PartitionSchema,
    columns: &[String],
    types: &[DataType],
    bound: &[Expr],
) -> Result<Vec<u8>, ParseError> {
    if bound.len() != columns.len() {
        return Err(ParseError::invalid_definition(format!(
            "range bound ({}) has {} value(s) but the table is range partitioned on {} column(s) ({}): give one value per range column, e.g. ({})",
            bound
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            bound.len(),
            columns.len(),
            columns.join(", "),
            columns.iter().map(|_| "…").collect::<Vec<_>>().join(", ")
        )));
    }
    let mut values = Vec::with_capacity(bound.len());
    for ((e, t), c) in bound.iter().zip(types).zip(columns) {
        let v = literal_value(e, t)
            .map_err(|err| with_context(err, &format!("range bound of column '{c}': ")))?;
        if v.is_null() {
            return Err(ParseError::invalid_definition(format!(
                "range bound of column '{c}' is NULL: key columns have no NULLs, so use a value"
            )));
        }
        v.check_type(c, t).map_err(common)?;
        values.push(v);
    }
    let key = partition.encode_range_key(&values).map_err(common)?;
    if key.len() > MAX_KEY_BYTES {
        return Err(ParseError::invalid_definition(format!(
            "a range bound of {} bytes exceeds the {MAX_KEY_BYTES} byte key limit",
            key.len()
        )));
    }
    Ok(key)
}

fn encode_bounds(
    partition: &PartitionSchema,
    columns: &[String],
    types: &[DataType],
    lower: &Option<Vec<Expr>>,
    upper: &Option<Vec<Expr>>,
) -> Result<(Vec<u8>, Vec<u8>), ParseError> {
    let lo = match lower {
        Some(b) => encode_bound(partition, columns, types, b)?,
        None => vec![],
    };
    let hi = match upper {
        // PARTITION VALUE = x: the smallest key above key(x).
        Some(b) if lower.as_ref() == Some(b) => {
            let mut k = lo.clone();
            k.push(0);
            k
        }
        Some(b) => {
            let k = encode_bound(partition, columns, types, b)?;
            if k.is_empty() {
                return Err(ParseError::invalid_definition(
                    "a range partition with upper bound '' holds no values: raise the upper bound",
                ));
            }
            k
        }
        None => vec![],
    };
    if !hi.is_empty() && lo >= hi {
        let show = |b: &Option<Vec<Expr>>| {
            b.as_ref()
                .map(|v| {
                    v.iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        return Err(ParseError::invalid_definition(format!(
            "range partition ({}) <= VALUES < ({}) is empty: the lower bound must be below the upper bound",
            show(lower),
            show(upper)
        )));
    }
    Ok((lo, hi))
}

/// The subspace a `SUBSPACE (a, b) [REGIONS n] [TABLETS t]` clause declares on a table
/// with `schema`; a column it does not have → 42703.
fn subspace_spec(
    clause: &crate::parser::SubspaceClause,
    schema: &Schema,
) -> Result<cairn_hyperspace::SubspaceSpec, ParseError> {
    let (columns, regions, tablets) = clause;
    for c in columns {
        if schema.index_of(c).is_err() {
            return Err(ParseError::invalid_with(
                "42703",
                format!(
                    "column \"{c}\" named in SUBSPACE ({}) does not exist",
                    columns.join(", ")
                ),
            ));
        }
    }
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut spec = cairn_hyperspace::SubspaceSpec::new(&refs);
    if let Some(n) = regions {
        spec = spec.regions(*n);
    }
    if let Some(n) = tablets {
        spec = spec.tablets(*n);
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{AlterColumn, CairnStatement, CreateTable, parse_sql};
    use datafusion::sql::sqlparser::ast::DataType as SqlType;

    pub(super) fn sql_type(s: &str) -> SqlType {
        let sql = format!("CREATE TABLE t (c {s} PRIMARY KEY)");
        match parse_sql(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .remove(0)
        {
            CairnStatement::CreateTable(c) => c.columns[0].data_type.clone(),
            other => panic!("{other:?}"),
        }
    }

    pub(super) fn create(sql: &str) -> CreateTable {
        match parse_sql(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .remove(0)
        {
            CairnStatement::CreateTable(c) => c,
            other => panic!("{other:?}"),
        }
    }

    pub(super) fn def(sql: &str) -> Result<TableDef, ParseError> {
        table_def(&create(sql), None, 4)
    }

    pub(super) fn expr(s: &str) -> Expr {
        let sql = format!("CREATE TABLE t (c INT PRIMARY KEY DEFAULT {s})");
        create(&sql).columns[0].default.clone().expect("default")
    }

    pub(super) fn alter(sql: &str) -> Vec<AlterColumn> {
        match parse_sql(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .remove(0)
        {
            CairnStatement::AlterTable { ops, .. } => ops,
            other => panic!("{other:?}"),
        }
    }
}
