//! Creates a table, writes to it and reads it back through a running cluster.
//!
//! ```text
//! cairn local --tservers 3 --replicas 3 &
//! cargo run -p cairn-client --example quickstart -- 127.0.0.1:7051
//! ```

use cairn_client::{Client, CreateTableSpec, FlushMode, Operation, ReadMode};
use cairn_common::{
    ColumnPredicate, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters: Vec<String> = std::env::args().skip(1).collect();
    let masters = if masters.is_empty() {
        vec!["127.0.0.1:7051".to_string()]
    } else {
        masters
    };
    let client = Client::connect(&masters).await?;

    let schema = Schema::new(
        vec![
            ColumnSpec::new("host", DataType::String),
            ColumnSpec::new("ts", DataType::Int64),
            ColumnSpec::new("value", DataType::Double).nullable(),
        ],
        &["host", "ts"],
    )?;
    let partition = PartitionSchema {
        hash_levels: vec![HashLevel {
            columns: vec!["host".into()],
            num_buckets: 4,
            seed: 0,
        }],
        range_columns: vec!["ts".into()],
    };
    let split = partition.encode_range_key(&[Value::Int64(500)])?;
    let spec = CreateTableSpec::new("quickstart", schema)
        .partition(partition)
        .range_bounds(vec![(vec![], split.clone()), (split, vec![])])
        .replicas(3)
        .if_not_exists(true);
    let id = client.create_table(spec).await?;
    let table = client.open_table("quickstart").await?;
    println!("table {} ({id})", table.name);
    for t in client.table_locations(&table, true).await?.iter() {
        println!("  tablet {} leader {:?}", t.tablet_id, t.leader_addr());
    }

    let mut session = client.new_session(&table);
    session.set_flush_mode(FlushMode::AutoFlushBackground);
    session.set_batch_rows(100);
    for h in 0..10 {
        for ts in 0..100 {
            let row = vec![
                Value::String(format!("host{h}")),
                Value::Int64(ts * 10),
                Value::Double(ts as f64),
            ];
            session.apply(Operation::upsert(row)).await?;
        }
    }
    // One duplicate insert to show row errors.
    session
        .apply(Operation::insert(vec![
            Value::String("host0".into()),
            Value::Int64(0),
            Value::Null,
        ]))
        .await?;
    let errors = session.flush().await?;
    println!("wrote 1001 operations; row errors: {errors:?}");

    let all = client
        .scan(&table)
        .read_mode(ReadMode::ReadYourWrites)
        .execute()
        .await?;
    println!(
        "{} rows at snapshot {}",
        all.num_rows(),
        all.snapshot_timestamp
    );
    let n = client
        .scan(&table)
        .predicate(ColumnPredicate::eq("host", Value::String("host3".into())))
        .predicate(ColumnPredicate::ge("ts", Value::Int64(500)))
        .count()
        .await?;
    println!("host3 with ts >= 500: {n} rows");
    let first = client
        .scan(&table)
        .ordered(true)
        .limit(3)
        .projection(["host", "ts"])
        .execute()
        .await?;
    println!(
        "{}",
        arrow::util::pretty::pretty_format_batches(&first.batches)?
    );
    Ok(())
}
