//! `cairn store create | list | describe | drop`: read-only stores in the cluster's
//! catalog. The master lays a new store's ring out over the live tablet servers;
//! `describe` shows which server holds which partitions.

use cairn_client::{CreateStoreSpec, StoreEntry};
use cairn_readonly::{StoreColumn, StoreSchema};
use clap::Args;

use super::fmt::text_table;
use super::parse::{parse_columns, type_name};
use super::{MasterArgs, ToolResult};

/// `cairn store create`
#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The store's name.
    pub name: String,
    /// Key columns in key order, NAME:TYPE comma-separated (e.g. `user_id:int64`).
    #[arg(long)]
    pub key: String,
    /// Value columns, NAME:TYPE with `?` for nullable (e.g. `score:double?,tags:string`).
    #[arg(long)]
    pub value: String,
    /// Ring partitions (default: 4 per live tablet server; at least one per server).
    #[arg(long, default_value_t = 0)]
    pub partitions: u32,
    /// Copies of every key, on distinct tablet servers.
    #[arg(long, default_value_t = 1)]
    pub replication: u32,
    /// Chunk files per partition and replica (more chunks: more parallel builds).
    #[arg(long, default_value_t = 1)]
    pub chunks: u32,
    /// Versions kept on the servers for rollback.
    #[arg(long, default_value_t = 2)]
    pub retain: u32,
    /// Succeed if a store of that name exists already.
    #[arg(long)]
    pub if_not_exists: bool,
}

/// `cairn store list`
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
}

/// `cairn store describe`
#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The store.
    pub name: String,
}

/// `cairn store drop`
#[derive(Args, Debug)]
pub struct DropArgs {
    #[command(flatten)]
    pub conn: MasterArgs,
    /// The store.
    pub name: String,
    /// Succeed if there is no such store.
    #[arg(long)]
    pub if_exists: bool,
}

/// The store columns `spec` lists (`key`: no column may be nullable).
fn store_columns(spec: &str, key: bool, flag: &str) -> ToolResult<Vec<StoreColumn>> {
    let cols = parse_columns(spec).map_err(|e| format!("{flag}: {e}"))?;
    cols.into_iter()
        .map(|c| {
            if key && c.nullable {
                return Err(format!("{flag}: key column '{}' cannot be nullable", c.name).into());
            }
            if c.default.is_some() {
                return Err(format!(
                    "{flag}: column '{}' has a default; store columns take none (every row \
                     of a build has every column)",
                    c.name
                )
                .into());
            }
            Ok(StoreColumn {
                name: c.name,
                data_type: c.data_type,
                nullable: c.nullable,
            })
        })
        .collect()
}

/// Runs `cairn store create`.
pub async fn create(a: CreateArgs) -> ToolResult<()> {
    let key = store_columns(&a.key, true, "--key")?;
    let value = store_columns(&a.value, false, "--value")?;
    if let Some(c) = value.iter().find(|v| key.iter().any(|k| k.name == v.name)) {
        return Err(format!("column '{}' is both a key and a value column", c.name).into());
    }
    let client = a.conn.connect().await?;
    let mut spec = CreateStoreSpec::new(a.name.clone(), StoreSchema { key, value });
    spec.partitions = a.partitions;
    spec.replication = a.replication;
    spec.chunks = a.chunks;
    spec.retained = a.retain;
    spec.if_not_exists = a.if_not_exists;
    let id = client.create_store(spec).await?;
    let s = client.get_store(&a.name).await?;
    println!(
        "created store '{}' (id {id}): {} partitions over {} tablet servers, replication {}",
        s.name,
        s.layout.partition_nodes.len(),
        s.nodes.len(),
        s.layout.replication
    );
    Ok(())
}

/// Runs `cairn store list`.
pub async fn list(a: ListArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let stores = client.list_stores().await?;
    if stores.is_empty() {
        println!("no stores (create one with `cairn store create`)");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = stores
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.layout.partition_nodes.len().to_string(),
                s.layout.replication.to_string(),
                s.nodes.len().to_string(),
                s.current_version
                    .map_or_else(|| "none".into(), |v| v.to_string()),
                s.id.clone(),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &[
                "name",
                "partitions",
                "replication",
                "servers",
                "version",
                "id"
            ],
            &rows
        )
    );
    println!("{} store(s)", stores.len());
    Ok(())
}

/// The lines `cairn store describe` prints.
fn describe_lines(s: &StoreEntry) -> Vec<String> {
    let cols = |cs: &[StoreColumn]| {
        cs.iter()
            .map(|c| {
                format!(
                    "{}:{}{}",
                    c.name,
                    type_name(&c.data_type),
                    if c.nullable { "?" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = vec![
        format!("store {} (id {}, owner {})", s.name, s.id, s.owner),
        format!("key:   {}", cols(&s.schema.key)),
        format!("value: {}", cols(&s.schema.value)),
        format!(
            "ring: {} partitions, replication {}, {} chunk(s) per partition; {} versions kept; \
             serving version {}",
            s.layout.partition_nodes.len(),
            s.layout.replication,
            s.layout.chunks,
            s.retained,
            s.current_version
                .map_or_else(|| "none (nothing pushed yet)".into(), |v| v.to_string())
        ),
    ];
    for (n, node) in s.nodes.iter().enumerate() {
        let parts: Vec<String> = s
            .layout
            .partition_nodes
            .iter()
            .enumerate()
            .filter(|&(_, &p)| p as usize == n)
            .map(|(i, _)| i.to_string())
            .collect();
        out.push(format!(
            "node {n}: {} ({:016x}) holds partitions {}",
            node.addr,
            node.node_id,
            parts.join(",")
        ));
    }
    out
}

/// Runs `cairn store describe`.
pub async fn describe(a: DescribeArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    let (s, push) = client.get_store_and_push(&a.name).await?;
    for l in describe_lines(&s) {
        println!("{l}");
    }
    if let Some(p) = &s.push {
        println!("push of version {} under way ({:?})", p.version, p.phase);
    }
    if let Some(r) = push {
        println!(
            "last push: version {} {}{}",
            r.version,
            r.state,
            r.error.map(|e| format!(": {e}")).unwrap_or_default()
        );
        for (i, n) in r.nodes.iter().enumerate() {
            println!(
                "  node {i}: {}/{} bytes fetched{}{}{}",
                n.bytes_done,
                n.bytes_total,
                if n.fetched { ", verified" } else { "" },
                if n.swapped { ", swapped" } else { "" },
                n.error
                    .as_ref()
                    .map(|e| format!(", error: {e}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// Runs `cairn store drop`.
pub async fn drop(a: DropArgs) -> ToolResult<()> {
    let client = a.conn.connect().await?;
    client.drop_store(&a.name, a.if_exists).await?;
    println!("dropped store '{}'", a.name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::DataType;

    #[test]
    fn column_flags_parse_and_refuse_what_a_store_cannot_hold() {
        let k = store_columns("user_id:int64", true, "--key").unwrap();
        assert_eq!(k[0].data_type, DataType::Int64);
        let v = store_columns("score:double?,tags:string", false, "--value").unwrap();
        assert!(v[0].nullable && !v[1].nullable);
        let e = store_columns("user_id:int64?", true, "--key").unwrap_err();
        assert!(e.to_string().contains("cannot be nullable"), "{e}");
        let e = store_columns("n:int64=3", false, "--value").unwrap_err();
        assert!(e.to_string().contains("take none"), "{e}");
    }

    #[test]
    fn describe_shows_which_server_holds_which_partitions() {
        let s = StoreEntry {
            id: "abc".into(),
            name: "recs".into(),
            schema: StoreSchema {
                key: store_columns("user_id:int64", true, "k").unwrap(),
                value: store_columns("score:double?", false, "v").unwrap(),
            },
            layout: cairn_readonly::StoreLayout::round_robin(2, 4, 1, 1).unwrap(),
            nodes: vec![
                cairn_client::StoreNode {
                    node_id: 1,
                    addr: "a:7050".into(),
                },
                cairn_client::StoreNode {
                    node_id: 2,
                    addr: "b:7050".into(),
                },
            ],
            retained: 2,
            current_version: None,
            owner: "cairn".into(),
            push: None,
            newest_version: 0,
        };
        let text = describe_lines(&s).join("\n");
        assert!(text.contains("key:   user_id:int64"), "{text}");
        assert!(text.contains("value: score:double?"), "{text}");
        assert!(text.contains("node 0: a:7050"), "{text}");
        assert!(text.contains("holds partitions 0,2"), "{text}");
        assert!(text.contains("holds partitions 1,3"), "{text}");
    }
}
