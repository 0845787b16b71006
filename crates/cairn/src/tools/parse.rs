//! The little languages of the tools' flags, parsed without touching the network:
//!
//! - column specs `name:type[?][=default]` (`--columns`, `--add-column`);
//! - column types `int64`, `decimal(10,2)`, `varchar(32)`, …;
//! - values for a column type (`--split`, `--where`, defaults);
//! - `--hash cols:buckets[:seed]`, `--range cols` with `--split` values;
//! - `--where "col OP value"` filters.
//!
//! Errors are plain strings that quote the offending input.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::compute::{CastOptions, cast_with_options};
use cairn_common::{
    AlterOp, ColumnPredicate, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value,
};

/// Range partitions as `[lower, upper)` encoded range keys (empty = unbounded).
pub type RangeBounds = Vec<(Vec<u8>, Vec<u8>)>;

/// Buckets per primary key when neither `--hash` nor `--range` is given.
pub const DEFAULT_HASH_BUCKETS: u32 = 4;

/// Splits a comma-separated list, ignoring commas inside parentheses and quotes
/// (`a:decimal(10,2),b:string='x,y'` is two items). Items are trimmed; empty items are
/// dropped.
pub fn split_list(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                cur.push(c);
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    cur.push(c);
                }
                '(' => {
                    depth += 1;
                    cur.push(c);
                }
                ')' => {
                    depth = depth.saturating_sub(1);
                    cur.push(c);
                }
                ',' if depth == 0 => {
                    out.push(std::mem::take(&mut cur));
                }
                _ => cur.push(c),
            },
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Removes one pair of matching surrounding quotes (`'x'` or `"x"`); inside single
/// quotes, `''` stands for one `'`.
pub fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['\'', '"'] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            let inner = &s[1..s.len() - 1];
            let doubled: String = [q, q].iter().collect();
            return inner.replace(&doubled, &q.to_string());
        }
    }
    s.to_string()
}

/// The names of the column types, for error messages.
pub const TYPE_NAMES: &str = "bool, int8, int16, int32, int64, float, double, decimal(P,S), \
                              string, varchar(N), binary, date, timestamp";

/// Parses a column type: `bool`, `int8`, `int16`, `int32`, `int64`, `float`, `double`,
/// `decimal(p,s)` (or `decimal(p)`: scale 0), `string`, `varchar(n)`, `binary`, `date`,
/// `timestamp` (case-insensitive; a few SQL aliases such as `bigint` and `text` too).
pub fn parse_type(s: &str) -> Result<DataType, String> {
    let t: String = s
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    let (base, args) = match t.find('(') {
        Some(i) => {
            if !t.ends_with(')') {
                return Err(format!("type '{s}' is missing its closing parenthesis"));
            }
            (&t[..i], Some(&t[i + 1..t.len() - 1]))
        }
        None => (t.as_str(), None),
    };
    let no_args = |dt: DataType| -> Result<DataType, String> {
        match args {
            None => Ok(dt),
            Some(_) => Err(format!("type '{s}' takes no parameters")),
        }
    };
    let dt = match base {
        "bool" | "boolean" => no_args(DataType::Bool)?,
        "int8" | "tinyint" => no_args(DataType::Int8)?,
        "int16" | "smallint" => no_args(DataType::Int16)?,
        "int32" | "int" | "integer" => no_args(DataType::Int32)?,
        "int64" | "bigint" => no_args(DataType::Int64)?,
        "float" | "float32" | "real" => no_args(DataType::Float)?,
        "double" | "float64" => no_args(DataType::Double)?,
        "string" | "text" | "utf8" => no_args(DataType::String)?,
        "binary" | "bytes" | "blob" => no_args(DataType::Binary)?,
        "date" => no_args(DataType::Date)?,
        "timestamp" => no_args(DataType::Timestamp)?,
        "varchar" => {
            let a =
                args.ok_or_else(|| format!("type '{s}' needs a maximum length, e.g. varchar(32)"))?;
            let n: u32 = a
                .parse()
                .map_err(|_| format!("varchar length '{a}' in '{s}' is not a number"))?;
            if n == 0 {
                return Err(format!("varchar length in '{s}' must be at least 1"));
            }
            DataType::Varchar(n)
        }
        "decimal" | "numeric" => {
            let a = args.ok_or_else(|| {
                format!("type '{s}' needs a precision and scale, e.g. decimal(10,2)")
            })?;
            let mut parts = a.split(',');
            let p = parts.next().unwrap_or("");
            let sc = parts.next().unwrap_or("0");
            if parts.next().is_some() {
                return Err(format!(
                    "type '{s}' has too many parameters; use decimal(precision,scale)"
                ));
            }
            let precision: u8 = p
                .parse()
                .map_err(|_| format!("decimal precision '{p}' in '{s}' is not a number"))?;
            let scale: i8 = sc
                .parse()
                .map_err(|_| format!("decimal scale '{sc}' in '{s}' is not a number"))?;
            DataType::Decimal { precision, scale }
        }
        "" => return Err("a column type is missing".into()),
        _ => {
            return Err(format!(
                "unknown column type '{s}'; use one of {TYPE_NAMES}"
            ));
        }
    };
    dt.validate().map_err(|e| e.to_string())?;
    Ok(dt)
}

/// The type name as the flags spell it (`decimal(10,2)`, `int64?` style without `?`).
pub fn type_name(t: &DataType) -> String {
    t.to_string().to_ascii_lowercase()
}

/// Parses one column spec: `name:type`, then `?` for a nullable column, then
/// optionally `=value` for a default (`qty:int32=0`, `note:string?='n/a'`).
pub fn parse_column_spec(s: &str) -> Result<ColumnSpec, String> {
    let s = s.trim();
    let (name, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("column spec '{s}' needs a type: write NAME:TYPE, e.g. id:int64"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("column spec '{s}' has an empty name"));
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || ",:=?()'\"".contains(c))
    {
        return Err(format!(
            "column name '{name}' in '{s}' contains a space or one of , : = ? ( ) ' \""
        ));
    }
    let (ty, default) = match rest.split_once('=') {
        Some((t, d)) => (t.trim(), Some(d)),
        None => (rest.trim(), None),
    };
    let (ty, nullable) = match ty.strip_suffix('?') {
        Some(t) => (t.trim(), true),
        None => (ty, false),
    };
    let data_type = parse_type(ty).map_err(|e| format!("column '{name}': {e}"))?;
    let mut spec = ColumnSpec::new(name, data_type.clone());
    if nullable {
        spec = spec.nullable();
    }
    if let Some(d) = default {
        let v =
            parse_value(d, &data_type).map_err(|e| format!("default of column '{name}': {e}"))?;
        v.check_type(name, &data_type).map_err(|e| e.to_string())?;
        spec = spec.with_default(v);
    }
    Ok(spec)
}

/// Parses `--columns`: comma-separated column specs.
pub fn parse_columns(s: &str) -> Result<Vec<ColumnSpec>, String> {
    let items = split_list(s);
    if items.is_empty() {
        return Err("no columns given: --columns \"id:int64,name:string?\"".into());
    }
    let cols = items
        .iter()
        .map(|i| parse_column_spec(i))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, c) in cols.iter().enumerate() {
        if cols[..i].iter().any(|o| o.name == c.name) {
            return Err(format!("column '{}' is declared twice", c.name));
        }
    }
    Ok(cols)
}

/// Parses a comma-separated list of column names (`--key`, `--range`, `--columns` of
/// a scan, `--drop-column`).
pub fn parse_names(s: &str, what: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = s
        .split(',')
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Err(format!("{what}: no column names given"));
    }
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(format!("{what}: column '{n}' is named twice"));
        }
    }
    Ok(names)
}

/// Builds the table schema from `--columns` and `--key`. Key columns are made NOT NULL
/// (a `?` on a key column is an error).
pub fn build_schema(columns: &str, key: &str) -> Result<Schema, String> {
    let cols = parse_columns(columns)?;
    let key = parse_names(key, "--key")?;
    for k in &key {
        match cols.iter().find(|c| &c.name == k) {
            None => {
                return Err(format!(
                    "primary key column '{k}' is not among --columns ({})",
                    cols.iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Some(c) if c.nullable => {
                return Err(format!(
                    "primary key column '{k}' is declared nullable ('?'); key columns are NOT NULL"
                ));
            }
            Some(_) => {}
        }
    }
    let key_refs: Vec<&str> = key.iter().map(String::as_str).collect();
    Schema::new(cols, &key_refs).map_err(|e| e.to_string())
}

/// Parses a value of column type `t` from text. Quotes around the text are removed.
/// Integers, floats, decimals (`12.34`, rounded to the scale), booleans
/// (`true`/`false`/`1`/`0`/`yes`/`no`), dates (`2024-05-01`, or days since 1970),
/// timestamps (`2024-05-01 12:00:00[.ffffff][+hh:mm]`, `2024-05-01T12:00:00Z`, or
/// microseconds since 1970, UTC), strings (as is) and binary (`0x…` hex, else the
/// UTF-8 bytes).
pub fn parse_value(raw: &str, t: &DataType) -> Result<Value, String> {
    let s = unquote(raw);
    match t {
        DataType::String | DataType::Varchar(_) => return Ok(Value::String(s)),
        DataType::Binary => {
            if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                return parse_hex(hex)
                    .map(Value::Binary)
                    .ok_or_else(|| format!("'{s}' is not valid hex (0x followed by byte pairs)"));
            }
            return Ok(Value::Binary(s.into_bytes()));
        }
        DataType::Date => {
            if let Ok(d) = s.parse::<i32>() {
                return Ok(Value::Date(d));
            }
        }
        DataType::Timestamp => {
            if let Ok(us) = s.parse::<i64>() {
                return Ok(Value::Timestamp(us));
            }
        }
        _ => {}
    }
    if s.is_empty() {
        return Err(format!("an empty value is not a {}", type_name(t)));
    }
    let input: ArrayRef = Arc::new(StringArray::from(vec![s.as_str()]));
    let opts = CastOptions {
        safe: false,
        ..Default::default()
    };
    let arr = cast_with_options(&input, &t.to_arrow(), &opts)
        .map_err(|e| format!("cannot read '{s}' as {}: {e}", type_name(t)))?;
    if arr.is_null(0) {
        return Err(format!("cannot read '{s}' as {}", type_name(t)));
    }
    Value::from_array(arr.as_ref(), 0, t).map_err(|e| e.to_string())
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Parses one `--hash` flag: `col[+col…]:buckets[:seed]`.
pub fn parse_hash(s: &str) -> Result<HashLevel, String> {
    let parts: Vec<&str> = s.split(':').map(str::trim).collect();
    if parts.len() < 2 || parts.len() > 3 {
        return Err(format!(
            "--hash '{s}' must be COLUMNS:BUCKETS (columns joined with '+', e.g. \"a+b:8\"), \
             optionally followed by :SEED"
        ));
    }
    let columns: Vec<String> = parts[0].split('+').map(|c| c.trim().to_string()).collect();
    if columns.iter().any(String::is_empty) {
        return Err(format!("--hash '{s}' has an empty column name"));
    }
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].contains(c) {
            return Err(format!("--hash '{s}' names column '{c}' twice"));
        }
    }
    let num_buckets: u32 = parts[1]
        .parse()
        .map_err(|_| format!("--hash '{s}': bucket count '{}' is not a number", parts[1]))?;
    if num_buckets < 2 {
        return Err(format!("--hash '{s}': use at least 2 buckets"));
    }
    let seed: u32 = match parts.get(2) {
        Some(x) => x
            .parse()
            .map_err(|_| format!("--hash '{s}': seed '{x}' is not a number"))?,
        None => 0,
    };
    Ok(HashLevel {
        columns,
        num_buckets,
        seed,
    })
}

/// Parses one `--split` value into one value per range column. With several range
/// columns, the values are comma-separated in range-column order (quote strings that
/// contain commas).
pub fn parse_split(
    raw: &str,
    range_columns: &[String],
    schema: &Schema,
) -> Result<Vec<Value>, String> {
    let items = if range_columns.len() == 1 {
        vec![raw.trim().to_string()]
    } else {
        split_list(raw)
    };
    if items.len() != range_columns.len() {
        return Err(format!(
            "--split '{raw}' has {} value(s) but there are {} range column(s) ({}); give one \
             value per range column, comma-separated",
            items.len(),
            range_columns.len(),
            range_columns.join(", ")
        ));
    }
    items
        .iter()
        .zip(range_columns)
        .map(|(item, col)| {
            let i = schema.index_of(col).map_err(|e| e.to_string())?;
            let t = &schema.column(i).data_type;
            let v = parse_value(item, t)
                .map_err(|e| format!("--split '{raw}', column '{col}': {e}"))?;
            v.check_type(col, t).map_err(|e| e.to_string())?;
            Ok(v)
        })
        .collect()
}

/// The partitioning of a new table from `--hash`, `--range` and `--split` flags:
/// returns the partition schema and the range bounds (N splits give N+1 ranges; no
/// split gives one unbounded range). Without `--hash` and `--range`, the whole primary
/// key is hashed into [`DEFAULT_HASH_BUCKETS`] buckets.
pub fn build_partitioning(
    schema: &Schema,
    hash: &[String],
    range: Option<&str>,
    splits: &[String],
) -> Result<(PartitionSchema, RangeBounds), String> {
    let mut hash_levels = hash
        .iter()
        .map(|h| parse_hash(h))
        .collect::<Result<Vec<_>, _>>()?;
    let range_columns = match range {
        Some(r) => parse_names(r, "--range")?,
        None => vec![],
    };
    if !splits.is_empty() && range_columns.is_empty() {
        return Err("--split needs --range: name the range-partition columns".into());
    }
    if hash_levels.is_empty() && range.is_none() {
        hash_levels.push(HashLevel {
            columns: schema
                .key_indexes()
                .iter()
                .map(|&i| schema.column(i).name.clone())
                .collect(),
            num_buckets: DEFAULT_HASH_BUCKETS,
            seed: 0,
        });
    }
    let ps = PartitionSchema {
        hash_levels,
        range_columns,
    };
    ps.validate(schema).map_err(|e| e.to_string())?;
    let mut keys = Vec::with_capacity(splits.len());
    for raw in splits {
        let values = parse_split(raw, &ps.range_columns, schema)?;
        let key = ps.encode_range_key(&values).map_err(|e| e.to_string())?;
        keys.push((key, raw.as_str()));
    }
    keys.sort();
    for w in keys.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(format!(
                "--split '{}' and '{}' are the same split point",
                w[0].1, w[1].1
            ));
        }
    }
    let mut bounds = Vec::new();
    if !keys.is_empty() {
        let mut lower = Vec::new();
        for (k, _) in keys {
            bounds.push((lower, k.clone()));
            lower = k;
        }
        bounds.push((lower, Vec::new()));
    }
    Ok((ps, bounds))
}

/// Parses one `--rename-column old:new` flag.
pub fn parse_rename(s: &str) -> Result<(String, String), String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("--rename-column '{s}' must be OLD:NEW"))?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() || b.is_empty() {
        return Err(format!(
            "--rename-column '{s}' must be OLD:NEW with both names given"
        ));
    }
    Ok((a.to_string(), b.to_string()))
}

/// The schema changes of `table alter`, in the order they are applied: drops, then
/// renames, then additions (so a column can be dropped and re-added, or renamed and
/// its old name reused, in one command). Each flag may hold a comma-separated list.
pub fn build_alter_ops(
    add: &[String],
    drop: &[String],
    rename: &[String],
) -> Result<Vec<AlterOp>, String> {
    let mut ops = Vec::new();
    for d in drop {
        for name in parse_names(d, "--drop-column")? {
            ops.push(AlterOp::DropColumn(name));
        }
    }
    for r in rename {
        for item in split_list(r) {
            let (from, to) = parse_rename(&item)?;
            ops.push(AlterOp::RenameColumn { from, to });
        }
    }
    for a in add {
        for item in split_list(a) {
            let spec = parse_column_spec(&item)?;
            if !spec.nullable && spec.default.is_none() {
                return Err(format!(
                    "new column '{}' is NOT NULL, so existing rows need a default: write \
                     '{}:{}=VALUE', or make it nullable with '{}:{}?'",
                    spec.name,
                    spec.name,
                    type_name(&spec.data_type),
                    spec.name,
                    type_name(&spec.data_type)
                ));
            }
            ops.push(AlterOp::AddColumn(spec));
        }
    }
    if ops.is_empty() {
        return Err(
            "nothing to change: give --add-column, --drop-column or --rename-column".into(),
        );
    }
    Ok(ops)
}

/// A comparison operator of `--where`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `=` (also `==`)
    Eq,
    /// `!=` (also `<>`)
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `IS NULL`
    IsNull,
    /// `IS NOT NULL`
    IsNotNull,
}

/// A parsed `--where` filter, before its value is read for the column's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhereClause {
    /// The column.
    pub column: String,
    /// The comparison.
    pub op: CmpOp,
    /// The value text (quotes removed); empty for IS [NOT] NULL.
    pub value: String,
}

/// What a `--where` filter becomes: a predicate the tablet servers evaluate, or a
/// `!=` filter applied to the rows the scan returns (servers have no "not equal").
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// Pushed down to the servers.
    Pushed(ColumnPredicate),
    /// `column != value` (NULLs excluded), applied by the tool. The servers are still
    /// asked for `column IS NOT NULL`.
    NotEqual {
        /// The column.
        column: String,
        /// The value rows must differ from.
        value: Value,
    },
}

/// Parses `--where "col OP value"` with OP one of `= != <> < <= > >=`, or `col IS
/// NULL` / `col IS NOT NULL`. Quote values that have leading or trailing spaces.
pub fn parse_where(s: &str) -> Result<WhereClause, String> {
    let t = s.trim();
    let end = t
        .find(|c: char| c.is_whitespace() || "=!<>".contains(c))
        .unwrap_or(t.len());
    let column = t[..end].to_string();
    if column.is_empty() {
        return Err(format!(
            "--where '{s}' must start with a column name: \"COLUMN OP VALUE\", OP one of = != < <= > >="
        ));
    }
    let rest = t[end..].trim_start();
    let words: Vec<String> = rest
        .split_whitespace()
        .map(|w| w.to_ascii_uppercase())
        .collect();
    if words.first().map(String::as_str) == Some("IS") {
        let op = match words
            .iter()
            .skip(1)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["NULL"] => CmpOp::IsNull,
            ["NOT", "NULL"] => CmpOp::IsNotNull,
            _ => return Err(format!("--where '{s}': after IS write NULL or NOT NULL")),
        };
        return Ok(WhereClause {
            column,
            op,
            value: String::new(),
        });
    }
    const OPS: [(&str, CmpOp); 8] = [
        ("<=", CmpOp::Le),
        (">=", CmpOp::Ge),
        ("!=", CmpOp::Ne),
        ("<>", CmpOp::Ne),
        ("==", CmpOp::Eq),
        ("=", CmpOp::Eq),
        ("<", CmpOp::Lt),
        (">", CmpOp::Gt),
    ];
    let (op, value) = OPS
        .iter()
        .find_map(|(tok, op)| rest.strip_prefix(tok).map(|v| (*op, v)))
        .ok_or_else(|| {
            format!("--where '{s}': expected an operator (= != < <= > >=, or IS [NOT] NULL) after '{column}'")
        })?;
    let value = value.trim();
    if value.is_empty() {
        return Err(format!(
            "--where '{s}': the value after the operator is missing"
        ));
    }
    Ok(WhereClause {
        column,
        op,
        value: value.to_string(),
    })
}

impl WhereClause {
    /// Reads the value for the column's type and builds the filter.
    pub fn to_filter(&self, schema: &Schema) -> Result<Filter, String> {
        let i = schema.index_of(&self.column).map_err(|_| {
            format!(
                "--where: unknown column '{}'; the table has {}",
                self.column,
                schema
                    .columns()
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        let t = &schema.column(i).data_type;
        let c = self.column.clone();
        let value = || -> Result<Value, String> {
            parse_value(&self.value, t).map_err(|e| {
                format!(
                    "--where on column '{}' ({}): {e}",
                    self.column,
                    type_name(t)
                )
            })
        };
        let p = match self.op {
            CmpOp::Eq => ColumnPredicate::eq(c, value()?),
            CmpOp::Lt => ColumnPredicate::lt(c, value()?),
            CmpOp::Le => ColumnPredicate::le(c, value()?),
            CmpOp::Gt => ColumnPredicate::gt(c, value()?),
            CmpOp::Ge => ColumnPredicate::ge(c, value()?),
            CmpOp::IsNull => ColumnPredicate::is_null(c),
            CmpOp::IsNotNull => ColumnPredicate::is_not_null(c),
            CmpOp::Ne => {
                return Ok(Filter::NotEqual {
                    column: c,
                    value: value()?,
                });
            }
        };
        p.validate(schema).map_err(|e| e.to_string())?;
        Ok(Filter::Pushed(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::PredicateOp;

    #[test]
    fn lists_split_outside_parentheses_and_quotes() {
        assert_eq!(
            split_list("id:int64, price:decimal(10,2) ,s:string='a,b',"),
            vec!["id:int64", "price:decimal(10,2)", "s:string='a,b'"]
        );
        assert!(split_list(" , ").is_empty());
        assert_eq!(unquote("'it''s'"), "it's");
        assert_eq!(unquote("\"x y\""), "x y");
        assert_eq!(unquote("'"), "'");
    }

    #[test]
    fn types_parse() {
        assert_eq!(parse_type("INT64").unwrap(), DataType::Int64);
        assert_eq!(parse_type("bigint").unwrap(), DataType::Int64);
        assert_eq!(
            parse_type("decimal( 10 , 2 )").unwrap(),
            DataType::Decimal {
                precision: 10,
                scale: 2
            }
        );
        assert_eq!(
            parse_type("decimal(5)").unwrap(),
            DataType::Decimal {
                precision: 5,
                scale: 0
            }
        );
        assert_eq!(parse_type("varchar(32)").unwrap(), DataType::Varchar(32));
        for bad in [
            "decimal",
            "decimal(50,2)",
            "decimal(4,5)",
            "varchar",
            "varchar(x)",
            "int64(3)",
            "uuid",
            "",
            "decimal(10,2",
            "decimal(1,2,3)",
        ] {
            assert!(parse_type(bad).is_err(), "{bad} should not parse");
        }
        assert!(
            parse_type("uuid")
                .unwrap_err()
                .contains("unknown column type")
        );
        for t in [
            "bool",
            "int8",
            "int16",
            "int32",
            "int64",
            "float",
            "double",
            "decimal(38,10)",
            "string",
            "varchar(7)",
            "binary",
            "date",
            "timestamp",
        ] {
            let dt = parse_type(t).unwrap();
            assert_eq!(
                parse_type(&type_name(&dt)).unwrap(),
                dt,
                "round trip of {t}"
            );
        }
    }

    #[test]
    fn column_specs_parse() {
        let cols = parse_columns("id:int64,name:string?,price:decimal(10,2),ts:timestamp").unwrap();
        assert_eq!(cols.len(), 4);
        assert_eq!(cols[0], ColumnSpec::new("id", DataType::Int64));
        assert_eq!(
            cols[1],
            ColumnSpec::new("name", DataType::String).nullable()
        );
        assert_eq!(
            cols[2].data_type,
            DataType::Decimal {
                precision: 10,
                scale: 2
            }
        );
        assert!(!cols[2].nullable);
        let c = parse_column_spec("qty:int32=7").unwrap();
        assert_eq!(
            c,
            ColumnSpec::new("qty", DataType::Int32).with_default(Value::Int32(7))
        );
        let c = parse_column_spec("note : string ? = 'a=b'").unwrap();
        assert!(c.nullable);
        assert_eq!(c.default, Some(Value::String("a=b".into())));
        let c = parse_column_spec("p:decimal(4,2)=1.5").unwrap();
        assert_eq!(c.default, Some(Value::Decimal(150)));
        assert!(
            parse_column_spec("p:decimal(4,2)=123.5").is_err(),
            "too many digits"
        );
        assert!(parse_column_spec("v:varchar(2)='abc'").is_err(), "too long");
        assert!(
            parse_column_spec("id")
                .unwrap_err()
                .contains("needs a type")
        );
        assert!(parse_column_spec(":int64").is_err());
        assert!(parse_column_spec("a b:int64").is_err());
        assert!(
            parse_column_spec("x:int32=abc")
                .unwrap_err()
                .contains("default of column 'x'")
        );
        assert!(
            parse_columns("a:int64,a:string")
                .unwrap_err()
                .contains("twice")
        );
        assert!(parse_columns("").is_err());
    }

    #[test]
    fn schemas_build() {
        let s = build_schema("id:int64,name:string?", "id").unwrap();
        assert_eq!(s.key_indexes(), &[0]);
        assert!(
            build_schema("id:int64", "nope")
                .unwrap_err()
                .contains("not among --columns")
        );
        assert!(
            build_schema("id:int64?", "id")
                .unwrap_err()
                .contains("nullable")
        );
        assert!(build_schema("id:int64", "id,id").is_err());
        let s = build_schema("a:string,b:int32,c:double?", "b, a").unwrap();
        assert_eq!(s.key_indexes(), &[1, 0]);
    }

    #[test]
    fn values_parse_for_their_type() {
        assert_eq!(
            parse_value("42", &DataType::Int64).unwrap(),
            Value::Int64(42)
        );
        assert_eq!(parse_value("-7", &DataType::Int8).unwrap(), Value::Int8(-7));
        assert!(parse_value("300", &DataType::Int8).is_err());
        assert!(parse_value("4x", &DataType::Int32).is_err());
        assert!(parse_value("", &DataType::Int32).is_err());
        assert_eq!(
            parse_value("true", &DataType::Bool).unwrap(),
            Value::Bool(true)
        );
        assert_eq!(
            parse_value("0", &DataType::Bool).unwrap(),
            Value::Bool(false)
        );
        assert_eq!(
            parse_value("2.5", &DataType::Double).unwrap(),
            Value::Double(2.5)
        );
        assert_eq!(
            parse_value("2.5", &DataType::Float).unwrap(),
            Value::Float(2.5)
        );
        let dec = DataType::Decimal {
            precision: 10,
            scale: 2,
        };
        assert_eq!(parse_value("12.34", &dec).unwrap(), Value::Decimal(1234));
        assert_eq!(parse_value("-0.5", &dec).unwrap(), Value::Decimal(-50));
        assert_eq!(parse_value("7", &dec).unwrap(), Value::Decimal(700));
        assert!(parse_value("abc", &dec).is_err());
        assert_eq!(
            parse_value("'it''s'", &DataType::String).unwrap(),
            Value::String("it's".into())
        );
        assert_eq!(
            parse_value("", &DataType::String).unwrap(),
            Value::String(String::new())
        );
        assert_eq!(
            parse_value("0x00ff", &DataType::Binary).unwrap(),
            Value::Binary(vec![0, 255])
        );
        assert_eq!(
            parse_value("ab", &DataType::Binary).unwrap(),
            Value::Binary(b"ab".to_vec())
        );
        assert!(parse_value("0xfff", &DataType::Binary).is_err());
        assert_eq!(
            parse_value("1970-01-11", &DataType::Date).unwrap(),
            Value::Date(10)
        );
        assert_eq!(parse_value("-3", &DataType::Date).unwrap(), Value::Date(-3));
        assert!(parse_value("2024-13-01", &DataType::Date).is_err());
        assert_eq!(
            parse_value("1970-01-01T00:00:01Z", &DataType::Timestamp).unwrap(),
            Value::Timestamp(1_000_000)
        );
        assert_eq!(
            parse_value("1970-01-01 00:00:00.000002", &DataType::Timestamp).unwrap(),
            Value::Timestamp(2)
        );
        assert_eq!(
            parse_value("1970-01-01T01:00:00+01:00", &DataType::Timestamp).unwrap(),
            Value::Timestamp(0)
        );
        assert_eq!(
            parse_value("1700000000000000", &DataType::Timestamp).unwrap(),
            Value::Timestamp(1_700_000_000_000_000)
        );
        assert!(parse_value("yesterday", &DataType::Timestamp).is_err());
    }

    #[test]
    fn hash_flags_parse() {
        assert_eq!(
            parse_hash("id:4").unwrap(),
            HashLevel {
                columns: vec!["id".into()],
                num_buckets: 4,
                seed: 0
            }
        );
        assert_eq!(
            parse_hash(" a + b : 8 : 17").unwrap(),
            HashLevel {
                columns: vec!["a".into(), "b".into()],
                num_buckets: 8,
                seed: 17
            }
        );
        for bad in [
            "id", "id:1", "id:x", ":4", "a+:4", "a+a:4", "a:4:x", "a:4:1:2",
        ] {
            assert!(parse_hash(bad).is_err(), "{bad} should not parse");
        }
    }

    fn sample_schema() -> Schema {
        build_schema(
            "host:string,ts:int64,region:string,v:double?",
            "host,ts,region",
        )
        .unwrap()
    }

    #[test]
    fn default_partitioning_hashes_the_key_into_4_buckets() {
        let s = sample_schema();
        let (ps, bounds) = build_partitioning(&s, &[], None, &[]).unwrap();
        assert_eq!(ps.hash_levels.len(), 1);
        assert_eq!(ps.hash_levels[0].columns, vec!["host", "ts", "region"]);
        assert_eq!(ps.hash_levels[0].num_buckets, DEFAULT_HASH_BUCKETS);
        assert!(ps.range_columns.is_empty());
        assert!(bounds.is_empty());
        assert_eq!(ps.create_partitions(&bounds).unwrap().len(), 4);
    }

    #[test]
    fn hash_and_range_flags_build_partitions() {
        let s = sample_schema();
        let (ps, bounds) = build_partitioning(
            &s,
            &["host:3".into(), "region:2".into()],
            Some("ts"),
            &["200".into(), "100".into()],
        )
        .unwrap();
        assert_eq!(ps.hash_levels.len(), 2);
        assert_eq!(ps.range_columns, vec!["ts"]);
        // Two splits: three ranges, in order, unbounded at both ends.
        let k = |v: i64| ps.encode_range_key(&[Value::Int64(v)]).unwrap();
        assert_eq!(
            bounds,
            vec![(vec![], k(100)), (k(100), k(200)), (k(200), vec![])]
        );
        assert_eq!(ps.create_partitions(&bounds).unwrap().len(), 3 * 2 * 3);

        // Range only: no default hashing.
        let (ps, bounds) = build_partitioning(&s, &[], Some("ts"), &[]).unwrap();
        assert!(ps.hash_levels.is_empty());
        assert!(bounds.is_empty());

        // Multi-column range splits take one value per column.
        let (ps, bounds) =
            build_partitioning(&s, &[], Some("host,ts"), &["'m,n',5".into()]).unwrap();
        let key = ps
            .encode_range_key(&[Value::String("m,n".into()), Value::Int64(5)])
            .unwrap();
        assert_eq!(bounds, vec![(vec![], key.clone()), (key, vec![])]);

        let err = |h: &[&str], r: Option<&str>, sp: &[&str]| {
            let h: Vec<String> = h.iter().map(|x| x.to_string()).collect();
            let sp: Vec<String> = sp.iter().map(|x| x.to_string()).collect();
            build_partitioning(&s, &h, r, &sp).unwrap_err()
        };
        assert!(err(&[], None, &["5"]).contains("--split needs --range"));
        assert!(err(&["v:4"], None, &[]).contains("primary key"));
        assert!(err(&["nope:4"], None, &[]).contains("unknown column"));
        assert!(err(&[], Some("ts"), &["5", "5"]).contains("same split point"));
        assert!(err(&[], Some("ts"), &["x"]).contains("column 'ts'"));
        assert!(err(&[], Some("host,ts"), &["a"]).contains("one value per range column"));
        assert!(err(&["host:2", "host:3"], None, &[]).contains("more than one hash level"));
    }

    #[test]
    fn where_clauses_parse() {
        let w = parse_where("price>=10.5").unwrap();
        assert_eq!(
            w,
            WhereClause {
                column: "price".into(),
                op: CmpOp::Ge,
                value: "10.5".into()
            }
        );
        assert_eq!(parse_where("a = 'x y'").unwrap().value, "'x y'");
        assert_eq!(parse_where("a == 1").unwrap().op, CmpOp::Eq);
        assert_eq!(parse_where("a != 1").unwrap().op, CmpOp::Ne);
        assert_eq!(parse_where("a <> 1").unwrap().op, CmpOp::Ne);
        assert_eq!(parse_where("a < 1").unwrap().op, CmpOp::Lt);
        assert_eq!(parse_where("a <= 1").unwrap().op, CmpOp::Le);
        assert_eq!(parse_where("a > 1").unwrap().op, CmpOp::Gt);
        assert_eq!(parse_where("a = <3").unwrap().value, "<3");
        assert_eq!(parse_where("a is null").unwrap().op, CmpOp::IsNull);
        assert_eq!(parse_where("a IS  NOT NULL").unwrap().op, CmpOp::IsNotNull);
        for bad in ["", "= 3", "a", "a 3", "a =", "a is", "a is maybe", "a ~ 3"] {
            assert!(parse_where(bad).is_err(), "'{bad}' should not parse");
        }
    }

    #[test]
    fn where_clauses_become_typed_predicates() {
        let s = build_schema(
            "id:int64,name:string?,price:decimal(10,2),ts:timestamp",
            "id",
        )
        .unwrap();
        let f = |w: &str| parse_where(w).unwrap().to_filter(&s);
        assert_eq!(
            f("id = 5").unwrap(),
            Filter::Pushed(ColumnPredicate::eq("id", Value::Int64(5)))
        );
        assert_eq!(
            f("price < 9.99").unwrap(),
            Filter::Pushed(ColumnPredicate::lt("price", Value::Decimal(999)))
        );
        assert_eq!(
            f("name >= 'bob'").unwrap(),
            Filter::Pushed(ColumnPredicate::ge("name", Value::String("bob".into())))
        );
        assert_eq!(
            f("ts > 1970-01-01T00:00:00Z").unwrap(),
            Filter::Pushed(ColumnPredicate::gt("ts", Value::Timestamp(0)))
        );
        assert_eq!(
            f("id <= 3").unwrap(),
            Filter::Pushed(ColumnPredicate::le("id", Value::Int64(3)))
        );
        match f("name is null").unwrap() {
            Filter::Pushed(p) => assert_eq!(p.op, PredicateOp::IsNull),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            f("id != 4").unwrap(),
            Filter::NotEqual {
                column: "id".into(),
                value: Value::Int64(4)
            }
        );
        assert!(f("nope = 1").unwrap_err().contains("unknown column 'nope'"));
        assert!(f("id = abc").unwrap_err().contains("int64"));
    }

    #[test]
    fn alter_flags_build_ops_in_a_safe_order() {
        let ops = build_alter_ops(
            &["c:int32?".into(), "d:decimal(5,2)=0,e:string?".into()],
            &["x,y".into()],
            &["a:b".into()],
        )
        .unwrap();
        assert_eq!(ops.len(), 6);
        assert_eq!(ops[0], AlterOp::DropColumn("x".into()));
        assert_eq!(ops[1], AlterOp::DropColumn("y".into()));
        assert_eq!(
            ops[2],
            AlterOp::RenameColumn {
                from: "a".into(),
                to: "b".into()
            }
        );
        assert!(matches!(&ops[3], AlterOp::AddColumn(c) if c.name == "c" && c.nullable));
        assert!(matches!(&ops[4], AlterOp::AddColumn(c) if c.default == Some(Value::Decimal(0))));
        assert!(
            build_alter_ops(&["c:int32".into()], &[], &[])
                .unwrap_err()
                .contains("default")
        );
        assert!(build_alter_ops(&[], &[], &["a".into()]).is_err());
        assert!(build_alter_ops(&[], &[], &[]).is_err());
    }
}
