//! A store's columns and how keys and values become bytes.
//!
//! Keys use Cairn's order-preserving key encoding ([`cairn_common::key`]) and values
//! Cairn's value codec ([`cairn_common::codec`]); see [`crate::format`] for the layout.

use arrow::datatypes::Schema as ArrowSchema;
use cairn_common::{DataType, Value, codec, key};
use serde::{Deserialize, Serialize};

use crate::error::{ReadOnlyError, Result};
use crate::format;

/// One column of a store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreColumn {
    /// The column name.
    pub name: String,
    /// Its type.
    pub data_type: DataType,
    /// Whether it may hold NULL (never for key columns).
    pub nullable: bool,
}

/// The columns of a store: the key columns (in key order) and the value columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreSchema {
    /// Key columns, in key order.
    pub key: Vec<StoreColumn>,
    /// Value columns, in value order.
    pub value: Vec<StoreColumn>,
}

impl StoreSchema {
    /// The store schema for input of `schema`: `key` names the key columns in key
    /// order; the value columns are `value` if given, else every other column in
    /// input order.
    pub fn from_arrow(
        schema: &ArrowSchema,
        key: &[String],
        value: Option<&[String]>,
    ) -> Result<StoreSchema> {
        if key.is_empty() {
            return Err(ReadOnlyError::InvalidInput(
                "a store needs at least one key column".into(),
            ));
        }
        let column = |name: &String, is_key: bool| -> Result<StoreColumn> {
            let f = schema.field_with_name(name).map_err(|_| {
                ReadOnlyError::InvalidInput(format!(
                    "the input has no column '{name}'; its columns are: {}",
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            Ok(StoreColumn {
                name: name.clone(),
                data_type: DataType::from_arrow(f.data_type())?,
                nullable: !is_key && f.is_nullable(),
            })
        };
        let key_cols = key
            .iter()
            .map(|k| column(k, true))
            .collect::<Result<Vec<_>>>()?;
        let value_names: Vec<String> = match value {
            Some(v) => v.to_vec(),
            None => schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .filter(|n| !key.contains(n))
                .collect(),
        };
        if let Some(dup) = value_names.iter().find(|v| key.contains(v)) {
            return Err(ReadOnlyError::InvalidInput(format!(
                "column '{dup}' is both a key and a value column"
            )));
        }
        let value_cols = value_names
            .iter()
            .map(|v| column(v, false))
            .collect::<Result<Vec<_>>>()?;
        Ok(StoreSchema {
            key: key_cols,
            value: value_cols,
        })
    }

    /// Encodes a key given as one value per key column.
    pub fn encode_key(&self, values: &[Value]) -> Result<Vec<u8>> {
        if values.len() != self.key.len() {
            return Err(ReadOnlyError::InvalidInput(format!(
                "the key has {} columns ({}), got {} values",
                self.key.len(),
                self.key
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                values.len()
            )));
        }
        let mut out = Vec::with_capacity(16);
        for (i, (v, c)) in values.iter().zip(&self.key).enumerate() {
            v.check_type(&c.name, &c.data_type)?;
            key::encode_value(v, i + 1 == values.len(), &mut out).map_err(|_| {
                ReadOnlyError::InvalidInput(format!("key column '{}' cannot be NULL", c.name))
            })?;
        }
        Ok(out)
    }

    /// Decodes an encoded key into values (for messages and scans).
    pub fn decode_key(&self, key_bytes: &[u8]) -> Result<Vec<Value>> {
        let types: Vec<&DataType> = self.key.iter().map(|c| &c.data_type).collect();
        Ok(key::decode_values(&types, key_bytes)?)
    }

    /// Decodes an encoded value into one value per value column.
    pub fn decode_value(&self, bytes: &[u8]) -> Result<Vec<Value>> {
        let mut r = codec::Reader::new(bytes, "read-only store value");
        let mut out = Vec::with_capacity(self.value.len());
        for _ in &self.value {
            out.push(r.value()?);
        }
        if !r.is_empty() {
            return Err(cairn_common::CommonError::Decode {
                what: "read-only store value",
                detail: "trailing bytes after the last value column".into(),
            }
            .into());
        }
        Ok(out)
    }

    /// A key for messages: `(v1, v2)` or `v1`.
    pub(crate) fn display_key(&self, key_bytes: &[u8]) -> String {
        match self.decode_key(key_bytes) {
            Ok(v) if v.len() == 1 => v[0].to_string(),
            Ok(v) => format!(
                "({})",
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(_) => format!("0x{}", format::to_hex(key_bytes)),
        }
    }
}
