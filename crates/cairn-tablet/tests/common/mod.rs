//! Helpers shared by the tablet integration tests.
#![allow(dead_code)]

use std::time::Duration;

use arrow::record_batch::RecordBatch;
use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_tablet::{Codec, TabletOptions};

/// A schema with a composite key and columns of several types.
pub fn test_schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("a", DataType::String),
            ColumnSpec::new("b", DataType::Int32),
            ColumnSpec::new("v", DataType::Int64).nullable(),
            ColumnSpec::new("s", DataType::String)
                .nullable()
                .with_default(Value::String("dflt".into())),
            ColumnSpec::new("d", DataType::Double).with_default(Value::Double(0.5)),
        ],
        &["a", "b"],
    )
    .unwrap()
}

/// Options that make every mechanism kick in on small data.
pub fn small_options() -> TabletOptions {
    TabletOptions {
        fsync: cairn_wal::FsyncPolicy::Never,
        wal_segment_bytes: 64 << 10,
        target_rowset_bytes: 2 << 10,
        rows_per_row_group: 16,
        codec: Codec::Lz4,
        mrs_flush_bytes: 64 << 10,
        dms_flush_bytes: 16 << 10,
        compaction_budget_bytes: 64 << 20,
        block_cache: std::sync::Arc::new(cairn_tablet::cache::BlockCache::new(1 << 20)),
        maintenance_interval: Duration::from_millis(5),
        // Flushes of more than a few rows write two key ranges in parallel.
        flush_threads: 2,
        flush_part_min_rows: 8,
        ..TabletOptions::default()
    }
}

/// Every row of the batches as values, using the Cairn types of `schema`'s columns
/// (looked up by the batch's field names).
pub fn rows_of(schema: &Schema, batches: &[RecordBatch]) -> Vec<Vec<Value>> {
    let mut out = vec![];
    for b in batches {
        let types: Vec<DataType> = b
            .schema()
            .fields()
            .iter()
            .map(|f| {
                schema
                    .column(schema.index_of(f.name()).unwrap())
                    .data_type
                    .clone()
            })
            .collect();
        for r in 0..b.num_rows() {
            out.push(
                (0..b.num_columns())
                    .map(|c| Value::from_array(b.column(c).as_ref(), r, &types[c]).unwrap())
                    .collect(),
            );
        }
    }
    out
}

/// Every row of the tablet (latest), in key order.
pub fn ordered_rows(t: &cairn_tablet::LocalTablet) -> Vec<Vec<Value>> {
    let schema = t.schema();
    let batches = t
        .scan(cairn_tablet::ScanSpec {
            ordered: true,
            ..Default::default()
        })
        .unwrap()
        .collect_all()
        .unwrap();
    rows_of(&schema, &batches)
}
