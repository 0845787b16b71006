//! Flight SQL metadata: server information, catalogs, schemas, tables and table
//! types.
//!
//! Cairn has one catalog ([`CATALOG`]) with one schema ([`SCHEMA`]) holding every
//! table of the cluster; each table has the type `TABLE`. Table schemas are the Arrow
//! schemas of the tables' columns, each field carrying the Flight SQL column metadata
//! (`ARROW:FLIGHT:SQL:TYPE_NAME`, ...).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{CommandGetTables, SqlInfo, SqlSupportedTransaction};
use cairn_client::{Client, ClientError, Table};
use tonic::Status;

use super::status::sql_error_status;
use cairn_sql::error::SqlError;
use cairn_sql::session::{CATALOG, SCHEMA};
use cairn_sql::types::sql_type_name;

/// The only table type.
pub const TABLE_TYPE: &str = "TABLE";

/// What `GetSqlInfo` answers: server name `Cairn`, this crate's version, the Arrow
/// version, and the SQL features clients ask about most.
pub fn sql_info() -> Result<SqlInfoData, arrow_flight::error::FlightError> {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "Cairn");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    b.append(SqlInfo::FlightSqlServerArrowVersion, "59.3.2");
    b.append(SqlInfo::FlightSqlServerReadOnly, false);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::Transaction as i32,
    );
    b.append(SqlInfo::FlightSqlServerCancel, false);
    b.append(SqlInfo::FlightSqlServerBulkIngestion, false);
    b.append(SqlInfo::SqlDdlCatalog, false);
    b.append(SqlInfo::SqlDdlSchema, false);
    b.append(SqlInfo::SqlDdlTable, true);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    b.append(SqlInfo::SqlQuotedIdentifierCase, 3_i32); // case sensitive
    b.append(SqlInfo::SqlTransactionsSupported, true);
    b.build()
}

/// Whether `s` matches the SQL `LIKE` pattern `pattern` (`%`: any text, `_`: one
/// character, `\`: the next character literally).
pub fn like(pattern: &str, s: &str) -> bool {
    #[derive(PartialEq)]
    enum Tok {
        Any,
        One,
        Lit(char),
    }
    let mut toks = vec![];
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        toks.push(match c {
            '%' => Tok::Any,
            '_' => Tok::One,
            '\\' => Tok::Lit(chars.next().unwrap_or('\\')),
            c => Tok::Lit(c),
        });
    }
    let s: Vec<char> = s.chars().collect();
    // Greedy matching that backtracks to the last `%` only: O(len(p) * len(s)).
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match toks.get(p) {
            Some(Tok::Any) => {
                star = Some((p, i));
                p += 1;
            }
            Some(Tok::One) => {
                p += 1;
                i += 1;
            }
            Some(Tok::Lit(c)) if *c == s[i] => {
                p += 1;
                i += 1;
            }
            _ => match star {
                Some((sp, si)) => {
                    p = sp + 1;
                    i = si + 1;
                    star = Some((sp, si + 1));
                }
                None => return false,
            },
        }
    }
    toks[p..].iter().all(|t| *t == Tok::Any)
}

/// Whether a request for tables can match Cairn's tables at all.
pub fn wants_tables(query: &CommandGetTables) -> bool {
    query.catalog.as_deref().is_none_or(|c| c == CATALOG)
        && query
            .db_schema_filter_pattern
            .as_deref()
            .is_none_or(|p| like(p, SCHEMA))
        && (query.table_types.is_empty() || query.table_types.iter().any(|t| t == TABLE_TYPE))
}

/// The Arrow schema of a table as `GetTables` reports it: one field per column with
/// the Flight SQL column metadata.
pub fn table_schema(table: &Table) -> Schema {
    let fields: Vec<Field> = table
        .schema
        .columns()
        .iter()
        .map(|c| {
            let meta: HashMap<String, String> = [
                ("ARROW:FLIGHT:SQL:TYPE_NAME", sql_type_name(&c.data_type)),
                ("ARROW:FLIGHT:SQL:CATALOG_NAME", CATALOG.to_string()),
                ("ARROW:FLIGHT:SQL:SCHEMA_NAME", SCHEMA.to_string()),
                ("ARROW:FLIGHT:SQL:TABLE_NAME", table.name.clone()),
                ("ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT", "0".to_string()),
                ("ARROW:FLIGHT:SQL:IS_CASE_SENSITIVE", "1".to_string()),
                ("ARROW:FLIGHT:SQL:IS_READ_ONLY", "0".to_string()),
                ("ARROW:FLIGHT:SQL:IS_SEARCHABLE", "1".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            Field::new(&c.name, c.data_type.to_arrow(), c.nullable).with_metadata(meta)
        })
        .collect();
    Schema::new(fields)
}

/// The `GetTables` answer: the cluster's tables that match the request, with their
/// schemas when it asks for them (one `GetTable` call per matching table).
pub async fn tables(client: &Client, query: CommandGetTables) -> Result<RecordBatch, Status> {
    let wanted = wants_tables(&query);
    let name_pattern = query.table_name_filter_pattern.clone();
    let include_schema = query.include_schema;
    let mut builder = query.into_builder();
    if wanted {
        let mut list = client
            .list_tables()
            .await
            .map_err(|e| sql_error_status(&SqlError::from(e)))?;
        list.retain(|t| name_pattern.as_deref().is_none_or(|p| like(p, &t.name)));
        list.sort_by(|a, b| a.name.cmp(&b.name));
        let empty = Schema::empty();
        for t in list {
            let schema = if include_schema {
                match client.open_table(&t.name).await {
                    Ok(table) => Arc::new(table_schema(&table)),
                    // Dropped since it was listed.
                    Err(ClientError::TableNotFound(_)) => continue,
                    Err(e) => return Err(sql_error_status(&SqlError::from(e))),
                }
            } else {
                Arc::new(empty.clone())
            };
            builder
                .append(CATALOG, SCHEMA, &t.name, TABLE_TYPE, &schema)
                .map_err(|e| Status::internal(format!("XX000: {e}")))?;
        }
    }
    builder
        .build()
        .map_err(|e| Status::internal(format!("XX000: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns() {
        assert!(like("%", ""));
        assert!(like("%", "orders"));
        assert!(like("ord%", "orders"));
        assert!(like("%ers", "orders"));
        assert!(like("o_ders", "orders"));
        assert!(!like("o_ders", "oders"));
        assert!(like("orders", "orders"));
        assert!(!like("orders", "orders2"));
        assert!(like(r"a\_b", "a_b"));
        assert!(!like(r"a\_b", "axb"));
        assert!(like("%é%", "café"));
        assert!(like("%a%b", "xaxxbxb"));
        assert!(!like("%a%b", "xaxxbxc"));
        assert!(!like(&"%a".repeat(30), &"a".repeat(29)));
        assert!(like("a\\", "a\\"));
    }

    #[test]
    fn schema_and_table_filters() {
        assert!(wants_tables(&CommandGetTables::default()));
        let other = CommandGetTables {
            catalog: Some("x".into()),
            ..Default::default()
        };
        assert!(!wants_tables(&other));
        let pattern = CommandGetTables {
            catalog: Some(CATALOG.into()),
            db_schema_filter_pattern: Some("pub%".into()),
            ..Default::default()
        };
        assert!(wants_tables(&pattern));
        let views = CommandGetTables {
            table_types: vec!["VIEW".into()],
            ..Default::default()
        };
        assert!(!wants_tables(&views));
        let tables = CommandGetTables {
            table_types: vec!["VIEW".into(), TABLE_TYPE.into()],
            ..Default::default()
        };
        assert!(wants_tables(&tables));
    }

    #[test]
    fn sql_info_names_the_server() {
        let info = sql_info().unwrap();
        let batch = info
            .record_batch([SqlInfo::FlightSqlServerName as u32])
            .unwrap();
        assert_eq!(batch.num_rows(), 1);
    }
}
