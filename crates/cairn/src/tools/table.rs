//! `cairn table create | list | describe | alter | drop | scan`.

use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::util::pretty::pretty_format_batches;
use cairn_client::{Client, ClientError, CreateTableSpec, ReadMode, Table, TabletLocationInfo};
use cairn_common::key::decode_values;
use cairn_common::{AlterOp, ColumnPredicate, DataType, PartitionSchema, Schema, Value};
use clap::Args;

use super::fmt::{format_value, text_table};
use super::parse::{
    DEFAULT_HASH_BUCKETS, Filter, build_alter_ops, build_partitioning, build_schema, parse_names,
    parse_where, type_name,
};
use super::{MasterArgs, ToolResult};

/// `cairn table create`
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    cairn table create orders --columns \"id:int64,customer:string,total:decimal(10,2),note:string?,ts:timestamp\" --key id\n  \
    cairn table create metrics --columns \"host:string,ts:timestamp,v:double?\" --key host,ts --hash host:8 --range ts --split 2024-01-01 --split 2025-01-01")]
pub struct CreateArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// Name of the new table.
    pub name: String,
    /// The columns, comma-separated, each NAME:TYPE with a trailing '?' for a nullable
    /// column and an optional '=DEFAULT'. Types: bool, int8, int16, int32, int64, float,
    /// double, decimal(P,S), string, varchar(N), binary, date, timestamp.
    /// Example: "id:int64,name:string?,price:decimal(10,2),qty:int32=0,ts:timestamp".
    #[arg(long, value_name = "SPECS")]
    pub columns: String,
    /// The primary-key columns, comma-separated, in key order (NOT NULL columns).
    #[arg(long, value_name = "COL[,COL...]")]
    pub key: String,
    /// One level of hash partitioning: primary-key columns joined with '+', then ':' and
    /// the number of buckets (optionally ':SEED'), e.g. "id:4" or "host+metric:8".
    /// Repeat for several levels. Without --hash and --range, the whole primary key is
    /// hashed into 4 buckets.
    #[arg(long, value_name = "COLS:BUCKETS")]
    pub hash: Vec<String>,
    /// Range-partition the table on these primary-key columns (comma-separated); see
    /// --split. Without --split there is one unbounded range.
    #[arg(long, value_name = "COL[,COL...]")]
    pub range: Option<String>,
    /// A range split point: N splits make N+1 ranges (below the first split, between
    /// splits, from the last split up). The value is read for the range column's type
    /// (e.g. 1000, 2024-01-01, 'abc'); with several range columns give one value per
    /// column, comma-separated. Repeatable; needs --range.
    #[arg(long, value_name = "VALUE", requires = "range")]
    pub split: Vec<String>,
    /// Replicas per tablet (an odd number: 1, 3, 5). Default: 3, or 1 when the cluster
    /// has fewer than 3 live tablet servers.
    #[arg(long, value_name = "N")]
    pub replicas: Option<u32>,
    /// Succeed without changes if a table of that name exists already.
    #[arg(long)]
    pub if_not_exists: bool,
    /// A subspace for hyperspace search (`cairn table search`): columns joined with
    /// '+', optionally ':' and the number of regions (default 16), e.g. "city+age:16".
    /// Repeatable.
    #[arg(long, value_name = "COLS[:REGIONS]")]
    pub subspace: Vec<String>,
    /// Keep hash bucket i on the same servers as bucket i of this table, so joins on
    /// the hash columns stay local; 'none' opts out. By default a table hashed on one
    /// level (no ranges) joins the tables hashed alike (same column types, buckets and
    /// replicas).
    #[arg(long, value_name = "TABLE|none")]
    pub colocate_with: Option<String>,
}

/// Reads a `--subspace` value: `a+b[:REGIONS]`.
pub(crate) fn parse_subspace(s: &str) -> Result<cairn_client::SubspaceSpec, String> {
    let (cols, regions) = match s.split_once(':') {
        Some((c, r)) => (
            c,
            Some(
                r.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| {
                        format!(
                            "--subspace {s}: the region count after ':' must be a positive number"
                        )
                    })?,
            ),
        ),
        None => (s, None),
    };
    let columns: Vec<&str> = cols.split('+').map(str::trim).collect();
    if columns.iter().any(|c| c.is_empty()) {
        return Err(format!(
            "--subspace {s}: name the columns joined with '+', e.g. city+age:16"
        ));
    }
    let spec = cairn_client::SubspaceSpec::new(&columns);
    Ok(match regions {
        Some(n) => spec.regions(n),
        None => spec,
    })
}

/// `cairn table list`
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
}

/// `cairn table describe`
#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The table.
    pub name: String,
    /// Leave out the list of tablets.
    #[arg(long)]
    pub no_tablets: bool,
}

/// `cairn table alter`
#[derive(Args, Debug)]
#[command(
    after_help = "Changes are applied in this order: drops, renames, additions.\n\
    Example:\n  cairn table alter orders --add-column \"discount:decimal(10,2)?\" --rename-column note:comment --drop-column legacy"
)]
pub struct AlterArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The table.
    pub name: String,
    /// Add a column, NAME:TYPE[?][=DEFAULT] as in `table create --columns`; a NOT NULL
    /// column needs a default for the existing rows. Repeatable, or comma-separated.
    #[arg(long, value_name = "SPEC")]
    pub add_column: Vec<String>,
    /// Drop a (non-key) column and its data. Repeatable, or comma-separated.
    #[arg(long, value_name = "NAME")]
    pub drop_column: Vec<String>,
    /// Rename a column, OLD:NEW. Repeatable, or comma-separated.
    #[arg(long, value_name = "OLD:NEW")]
    pub rename_column: Vec<String>,
}

/// `cairn table drop`
#[derive(Args, Debug)]
pub struct DropArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The table.
    pub name: String,
    /// Succeed if the table does not exist.
    #[arg(long)]
    pub if_exists: bool,
}

/// `cairn table scan`
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    cairn table scan orders --columns id,total --where \"total >= 100\" --where \"customer = 'acme'\" --limit 20\n  \
    cairn table scan orders --where \"note is null\" --count")]
pub struct ScanArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The table.
    pub name: String,
    /// Columns to return, comma-separated, in this order (default: all).
    #[arg(long, value_name = "COL[,COL...]")]
    pub columns: Option<String>,
    /// A filter "COLUMN OP VALUE", OP one of = != < <= > >=, or "COLUMN IS [NOT] NULL";
    /// the value is read for the column's type (quote strings with spaces: "name =
    /// 'a b'"). Repeatable: rows must match all filters. All but != are evaluated by
    /// the tablet servers.
    #[arg(long = "where", value_name = "FILTER")]
    pub r#where: Vec<String>,
    /// Return at most N rows.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Print only the number of matching rows.
    #[arg(long)]
    pub count: bool,
    /// Return each tablet's rows in primary-key order.
    #[arg(long)]
    pub ordered: bool,
    /// Read the table as of this HybridTime (as printed by earlier scans) instead of
    /// the latest data.
    #[arg(long, value_name = "TIMESTAMP")]
    pub snapshot: Option<u64>,
    /// Also print the snapshot timestamp the scan read at.
    #[arg(long)]
    pub show_snapshot: bool,
}

/// Fails fast when fewer tablet servers are live than a new table needs replicas (the
/// master would keep answering "unavailable" until the timeout).
pub(crate) async fn check_enough_servers(client: &Client, replicas: u32) -> ToolResult<()> {
    if replicas == 0 {
        // The master's default applies; it checks itself.
        return Ok(());
    }
    if let Ok(servers) = client.list_tablet_servers().await {
        let live = servers.iter().filter(|s| s.live).count();
        if (live as u32) < replicas {
            return Err(format!(
                "a table with {replicas} replica(s) per tablet needs {replicas} live tablet \
                 servers, but {live} {} live: start more tablet servers, or pass a smaller \
                 --replicas",
                if live == 1 { "is" } else { "are" }
            )
            .into());
        }
    }
    Ok(())
}

/// Checks a replication factor given on the command line.
pub(crate) fn check_replicas(n: u32) -> ToolResult<()> {
    if n == 0 || n.is_multiple_of(2) {
        return Err(format!(
            "--replicas {n}: use an odd number of replicas (1, 3, 5, 7) so that a majority exists"
        )
        .into());
    }
    Ok(())
}

/// `cairn table create`
pub async fn create(a: CreateArgs) -> ToolResult<()> {
    let schema = build_schema(&a.columns, &a.key)?;
    let (partition, bounds) = build_partitioning(&schema, &a.hash, a.range.as_deref(), &a.split)?;
    if let Some(n) = a.replicas {
        check_replicas(n)?;
    }
    let num_tablets = partition.create_partitions(&bounds)?.len();
    let client = a.conn.connect().await?;
    if a.if_not_exists {
        match client.open_table(&a.name).await {
            Ok(t) => {
                println!(
                    "table '{}' exists already (id {}); nothing to do",
                    t.name, t.id
                );
                return Ok(());
            }
            Err(ClientError::TableNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Without --replicas the master's default applies (`cairn local --replicas`).
    let replicas = a.replicas.unwrap_or(0);
    check_enough_servers(&client, replicas).await?;
    let mut spec = CreateTableSpec::new(&a.name, schema)
        .partition(partition.clone())
        .range_bounds(bounds)
        .replicas(replicas)
        .colocation(match a.colocate_with.as_deref() {
            None => cairn_client::Colocation::Default,
            Some(n) if n.eq_ignore_ascii_case("none") => cairn_client::Colocation::None,
            Some(n) => cairn_client::Colocation::With(n.to_string()),
        })
        .if_not_exists(a.if_not_exists);
    for s in &a.subspace {
        spec = spec.subspace(parse_subspace(s)?);
    }
    let id = client.create_table(spec).await.map_err(|e| match e {
        ClientError::AlreadyExists(_) => format!(
            "table '{}' exists already (drop it first, or pass --if-not-exists)",
            a.name
        )
        .into(),
        e => super::ToolError::from(e),
    })?;
    let replicas = match client.open_table(&a.name).await {
        Ok(t) => t.replicas,
        Err(_) => replicas,
    };
    println!(
        "created table '{}' (id {id}): {num_tablets} tablet(s) [{}], {replicas} replica(s) each",
        a.name,
        describe_partitioning(&partition)
    );
    if a.hash.is_empty() && a.range.is_none() {
        println!(
            "(no --hash or --range given: the primary key is hashed into {DEFAULT_HASH_BUCKETS} buckets)"
        );
    }
    Ok(())
}

/// `cairn table list`
pub async fn list(a: ListArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let mut tables = client.list_tables().await?;
    if tables.is_empty() {
        println!("no tables (create one with `cairn table create`)");
        return Ok(());
    }
    tables.sort_by(|x, y| x.name.cmp(&y.name));
    let rows: Vec<Vec<String>> = tables
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.state.clone(),
                t.num_tablets.to_string(),
                t.replicas.to_string(),
                t.table_id.clone(),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(&["name", "state", "tablets", "replicas", "id"], &rows)
    );
    println!("{} table(s)", tables.len());
    Ok(())
}

/// "HASH (a, b) PARTITIONS 4, RANGE (ts)" / "no partitioning".
pub(crate) fn describe_partitioning(ps: &PartitionSchema) -> String {
    let mut parts: Vec<String> = ps
        .hash_levels
        .iter()
        .map(|l| {
            let seed = if l.seed != 0 {
                format!(" SEED {}", l.seed)
            } else {
                String::new()
            };
            format!(
                "HASH ({}) PARTITIONS {}{seed}",
                l.columns.join(", "),
                l.num_buckets
            )
        })
        .collect();
    if !ps.range_columns.is_empty() {
        parts.push(format!("RANGE ({})", ps.range_columns.join(", ")));
    }
    if parts.is_empty() {
        "one tablet, no partitioning".into()
    } else {
        parts.join(", ")
    }
}

/// A range bound in values when it decodes, else in hex.
fn format_range_key(key: &[u8], types: &[&DataType], unbounded: &str) -> String {
    if key.is_empty() {
        return unbounded.into();
    }
    match decode_values(types, key) {
        Ok(vals) if vals.len() == types.len() => {
            let s: Vec<String> = vals
                .iter()
                .zip(types)
                .map(|(v, t)| format_value(v, t))
                .collect();
            if s.len() == 1 {
                s[0].clone()
            } else {
                format!("({})", s.join(", "))
            }
        }
        _ => format!(
            "0x{}",
            key.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

/// A tablet's partition: "bucket 1, 3; range [100, 200)".
pub(crate) fn describe_partition(table: &Table, t: &TabletLocationInfo) -> String {
    let ps = &table.partition_schema;
    let mut out = Vec::new();
    if !t.partition.hash_buckets.is_empty() {
        let b: Vec<String> = t
            .partition
            .hash_buckets
            .iter()
            .map(|b| b.to_string())
            .collect();
        out.push(format!("hash {}", b.join("/")));
    }
    if !ps.range_columns.is_empty() {
        let types: Vec<&DataType> = ps
            .range_columns
            .iter()
            .filter_map(|c| table.schema.index_of(c).ok())
            .map(|i| &table.schema.column(i).data_type)
            .collect();
        out.push(format!(
            "range [{}, {})",
            format_range_key(&t.partition.range_lower, &types, "-inf"),
            format_range_key(&t.partition.range_upper, &types, "+inf")
        ));
    }
    if out.is_empty() {
        "whole table".into()
    } else {
        out.join(", ")
    }
}

/// "ts1:7050 [LEADER], ts2:7050, ts3:7050 [DOWN]".
pub(crate) fn describe_replicas(t: &TabletLocationInfo) -> String {
    let mut rs: Vec<_> = t.replicas.iter().collect();
    rs.sort_by_key(|r| (!r.leader, r.node_id));
    rs.iter()
        .map(|r| {
            let mut tags = Vec::new();
            if r.leader {
                tags.push("LEADER");
            }
            if !r.voter {
                tags.push("LEARNER");
            }
            if !r.live {
                tags.push("DOWN");
            }
            if tags.is_empty() {
                r.addr.clone()
            } else {
                format!("{} [{}]", r.addr, tags.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_columns(schema: &Schema) {
    let rows: Vec<Vec<String>> = schema
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let key_pos = schema.key_indexes().iter().position(|&k| k == i);
            vec![
                c.name.clone(),
                type_name(&c.data_type),
                if c.nullable { "NULL" } else { "NOT NULL" }.into(),
                key_pos
                    .map(|p| format!("key {}", p + 1))
                    .unwrap_or_default(),
                c.default
                    .as_ref()
                    .map(|d| format_value(d, &c.data_type))
                    .unwrap_or_default(),
                c.id.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &["column", "type", "null", "primary key", "default", "id"],
            &rows
        )
    );
}

/// `cairn table describe`
pub async fn describe(a: DescribeArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let table = client.open_table(&a.name).await?;
    let summary = client
        .list_tables()
        .await
        .ok()
        .and_then(|ts| ts.into_iter().find(|t| t.table_id == table.id));
    println!("table '{}'", table.name);
    println!("  id:            {}", table.id);
    if let Some(s) = &summary {
        println!("  state:         {}", s.state);
    }
    println!("  schema:        version {}", table.schema.version());
    let key: Vec<&str> = table
        .schema
        .key_indexes()
        .iter()
        .map(|&i| table.schema.column(i).name.as_str())
        .collect();
    println!("  primary key:   ({})", key.join(", "));
    println!(
        "  partitioning:  {}",
        describe_partitioning(&table.partition_schema)
    );
    println!("  replicas:      {}", table.replicas);
    println!(
        "  colocation:    {}",
        table.colocation.as_deref().unwrap_or("none")
    );
    for s in &table.subspaces {
        // The live copies its regions hold (a count over its region table).
        let region = cairn_client::hyperspace::region_table(&table.schema, table.replicas, s)?;
        let rows = client
            .scan(&region)
            .projection(vec![cairn_hyperspace::VERSION_COLUMN.to_string()])
            .predicate(cairn_common::ColumnPredicate::eq(
                cairn_hyperspace::REMOVED_COLUMN,
                cairn_common::Value::Bool(false),
            ))
            .execute()
            .await?
            .num_rows();
        println!(
            "  subspace:      {} ({}): {} regions in {} tablets, {rows} rows{}",
            s.layout.name,
            s.layout.columns().join(", "),
            s.layout.region_count(),
            s.tablet_count(),
            if s.building {
                " (being built: ALTER TABLE … ADD SUBSPACE did not finish; run it again)"
            } else {
                ""
            }
        );
    }
    println!();
    print_columns(&table.schema);
    if a.no_tablets {
        return Ok(());
    }
    let locs = client.table_locations(&table, true).await?;
    println!();
    let rows: Vec<Vec<String>> = locs
        .iter()
        .map(|t| {
            vec![
                t.tablet_id.clone(),
                describe_partition(&table, t),
                describe_replicas(t),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(&["tablet", "partition", "replicas"], &rows)
    );
    let leaderless = locs.iter().filter(|t| t.leader_addr().is_none()).count();
    println!(
        "{} tablet(s){}",
        locs.len(),
        if leaderless > 0 {
            format!(", {leaderless} without a known leader (see `cairn cluster ksck`)")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// `cairn table alter`
pub async fn alter(a: AlterArgs) -> ToolResult<()> {
    let ops = build_alter_ops(&a.add_column, &a.drop_column, &a.rename_column)?;
    let client = a.conn.connect().await?;
    let table = client.open_table(&a.name).await?;
    // Check the whole change locally first: clear errors, nothing half-applied.
    let mut schema = (*table.schema).clone();
    for op in &ops {
        schema = schema
            .altered(op)
            .map_err(|e| format!("cannot alter table '{}': {e}", a.name))?;
    }
    client.alter_table(&a.name, ops.clone()).await?;
    let described: Vec<String> = ops
        .iter()
        .map(|op| match op {
            AlterOp::AddColumn(c) => format!(
                "added {} {}{}",
                c.name,
                type_name(&c.data_type),
                if c.nullable { " NULL" } else { " NOT NULL" }
            ),
            AlterOp::DropColumn(c) => format!("dropped {c}"),
            AlterOp::RenameColumn { from, to } => format!("renamed {from} to {to}"),
        })
        .collect();
    println!("altered table '{}': {}", a.name, described.join("; "));
    Ok(())
}

/// `cairn table drop`
pub async fn drop(a: DropArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    if a.if_exists {
        match client.open_table(&a.name).await {
            Err(ClientError::TableNotFound(_)) => {
                println!("table '{}' does not exist; nothing to do", a.name);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
    }
    client.drop_table(&a.name, a.if_exists).await?;
    println!("dropped table '{}'", a.name);
    Ok(())
}

/// Keeps the rows of `batch` whose column `column` is not NULL and differs from
/// `value`.
fn filter_not_equal(
    batch: &RecordBatch,
    column: &str,
    value: &Value,
    t: &DataType,
) -> ToolResult<RecordBatch> {
    let i = batch
        .schema()
        .index_of(column)
        .map_err(|_| format!("internal: column '{column}' missing from the scan result"))?;
    let array = batch.column(i);
    let eq = ColumnPredicate::eq(column, value.clone()).evaluate(array.as_ref(), t)?;
    let keep: BooleanArray = (0..batch.num_rows())
        .map(|r| Some(array.is_valid(r) && !(eq.is_valid(r) && eq.value(r))))
        .collect();
    Ok(filter_record_batch(batch, &keep)?)
}

/// `cairn table scan`
pub async fn scan(a: ScanArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let table = client.open_table(&a.name).await?;
    let schema = &table.schema;
    let projection: Vec<String> = match &a.columns {
        Some(c) => {
            let names = parse_names(c, "--columns")?;
            for n in &names {
                if schema.index_of(n).is_err() {
                    return Err(format!(
                        "--columns: unknown column '{n}'; the table has {}",
                        column_names(schema)
                    )
                    .into());
                }
            }
            names
        }
        None => schema.columns().iter().map(|c| c.name.clone()).collect(),
    };
    let mut pushed = Vec::new();
    let mut not_equal = Vec::new();
    for w in &a.r#where {
        match parse_where(w)?.to_filter(schema)? {
            Filter::Pushed(p) => pushed.push(p),
            Filter::NotEqual { column, value } => {
                pushed.push(ColumnPredicate::is_not_null(column.clone()));
                let t = schema.column(schema.index_of(&column)?).data_type.clone();
                not_equal.push((column, value, t));
            }
        }
    }
    let mut builder = client.scan(&table).ordered(a.ordered);
    if let Some(ts) = a.snapshot {
        builder = builder.read_mode(ReadMode::Snapshot(ts));
    }
    for p in pushed {
        builder = builder.predicate(p);
    }

    if not_equal.is_empty() {
        if let Some(l) = a.limit {
            builder = builder.limit(l);
        }
        if a.count {
            println!("{}", builder.count().await?);
            return Ok(());
        }
        let result = builder.projection(projection).execute().await?;
        print_batches(&result.batches, &result.schema)?;
        if a.show_snapshot {
            println!("snapshot timestamp: {}", result.snapshot_timestamp);
        }
        return Ok(());
    }

    // "!=" filters run here: fetch their columns too, filter, then project; stop once
    // the limit is reached.
    let mut fetch = projection.clone();
    for (c, _, _) in &not_equal {
        if !fetch.contains(c) {
            fetch.push(c.clone());
        }
    }
    // An ordered cursor resumes exactly if a server fails mid-scan.
    let mut cursor = builder.ordered(true).projection(fetch).cursor().await?;
    let mut out: Vec<RecordBatch> = Vec::new();
    let mut rows = 0u64;
    let limit = a.limit.unwrap_or(u64::MAX);
    let out_schema = cursor.schema().project(
        &projection
            .iter()
            .map(|c| cursor.schema().index_of(c))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    let out_schema = Arc::new(out_schema);
    while rows < limit {
        let Some(mut b) = cursor.next_batch().await? else {
            break;
        };
        for (c, v, t) in &not_equal {
            b = filter_not_equal(&b, c, v, t)?;
        }
        let idx: Vec<usize> = projection
            .iter()
            .map(|c| b.schema().index_of(c))
            .collect::<Result<Vec<_>, _>>()?;
        let mut b = b.project(&idx)?;
        let left = limit - rows;
        if (b.num_rows() as u64) > left {
            b = b.slice(0, left as usize);
        }
        rows += b.num_rows() as u64;
        if b.num_rows() > 0 && !a.count {
            out.push(b);
        }
    }
    let snapshot = cursor.snapshot_timestamp();
    cursor.close().await;
    if a.count {
        println!("{rows}");
        return Ok(());
    }
    print_batches(&out, &out_schema)?;
    if a.show_snapshot {
        println!("snapshot timestamp: {}", snapshot.unwrap_or(0));
    }
    Ok(())
}

fn column_names(schema: &Schema) -> String {
    schema
        .columns()
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_batches(batches: &[RecordBatch], schema: &arrow::datatypes::SchemaRef) -> ToolResult<()> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if batches.is_empty() {
        println!(
            "{}",
            pretty_format_batches(&[RecordBatch::new_empty(schema.clone())])?
        );
    } else {
        println!("{}", pretty_format_batches(batches)?);
    }
    println!("({rows} row{})", if rows == 1 { "" } else { "s" });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
    use cairn_client::ReplicaInfo;
    use cairn_common::{HashLevel, Partition};

    #[test]
    fn subspace_flags_parse() {
        let s = parse_subspace("city+age:8").unwrap();
        assert_eq!(
            (s.columns.clone(), s.regions),
            (vec!["city".to_string(), "age".to_string()], 8)
        );
        assert_eq!(s.name, "city_age");
        assert_eq!(
            parse_subspace("age").unwrap().regions,
            cairn_hyperspace::DEFAULT_REGIONS
        );
        assert!(parse_subspace("a+:4").is_err());
        assert!(parse_subspace("a:0").is_err());
        assert!(parse_subspace("a:x").is_err());
    }

    #[test]
    fn not_equal_filters_drop_equal_and_null_rows() {
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("k", ArrowType::Int64, false),
            Field::new("s", ArrowType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    None,
                    Some("b"),
                    Some("a"),
                ])),
            ],
        )
        .unwrap();
        let f = filter_not_equal(&b, "s", &Value::String("a".into()), &DataType::String).unwrap();
        assert_eq!(f.num_rows(), 1);
        let k = f.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(k.value(0), 3);
        let f = filter_not_equal(&b, "k", &Value::Int64(2), &DataType::Int64).unwrap();
        assert_eq!(f.num_rows(), 3);
    }

    #[test]
    fn partitions_and_replicas_describe_themselves() {
        let schema = build_schema("host:string,ts:int64", "host,ts").unwrap();
        let ps = PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["host".into()],
                num_buckets: 4,
                seed: 3,
            }],
            range_columns: vec!["ts".into()],
        };
        assert_eq!(
            describe_partitioning(&ps),
            "HASH (host) PARTITIONS 4 SEED 3, RANGE (ts)"
        );
        assert_eq!(
            describe_partitioning(&PartitionSchema::default()),
            "one tablet, no partitioning"
        );
        let table = Table {
            id: "t1".into(),
            name: "t".into(),
            schema: Arc::new(schema),
            partition_schema: ps.clone(),
            replicas: 3,
            subspaces: vec![],
            colocation: None,
        };
        let loc = TabletLocationInfo {
            tablet_id: "tab".into(),
            partition: Partition {
                hash_buckets: vec![2],
                range_lower: ps.encode_range_key(&[Value::Int64(100)]).unwrap(),
                range_upper: vec![],
            },
            replicas: vec![
                ReplicaInfo {
                    node_id: 2,
                    addr: "b:1".into(),
                    leader: false,
                    voter: true,
                    live: false,
                },
                ReplicaInfo {
                    node_id: 1,
                    addr: "a:1".into(),
                    leader: true,
                    voter: true,
                    live: true,
                },
            ],
        };
        assert_eq!(
            describe_partition(&table, &loc),
            "hash 2, range [100, +inf)"
        );
        assert_eq!(describe_replicas(&loc), "a:1 [LEADER], b:1 [DOWN]");
    }

    #[test]
    fn replica_counts_must_be_odd() {
        assert!(check_replicas(1).is_ok());
        assert!(check_replicas(3).is_ok());
        assert!(check_replicas(0).is_err());
        assert!(check_replicas(2).is_err());
    }
}
