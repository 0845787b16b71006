//! Disk failures under a tablet, injected with failpoints (one test per binary:
//! failpoints are global to the process).
//!
//! A failed metadata write must fail the tablet without advancing its durable index
//! (so the log owner keeps every record a restart needs), and the data must come back
//! whole when the tablet is reopened.

mod common;

use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_tablet::{LocalTablet, RowOp, TabletError};
use common::{ordered_rows, small_options};

#[test]
fn a_failed_metadata_write_fails_the_tablet_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("v", DataType::Int64),
        ],
        &["k"],
    )
    .unwrap();
    let t = LocalTablet::create(dir.path(), schema, small_options()).unwrap();
    t.write(
        (0..100)
            .map(|k| RowOp::insert(vec![Value::Int64(k), Value::Int64(k)]))
            .collect(),
    )
    .unwrap();
    t.flush_mrs().unwrap();
    t.write(
        (100..200)
            .map(|k| RowOp::insert(vec![Value::Int64(k), Value::Int64(k)]))
            .collect(),
    )
    .unwrap();
    let durable = t.durable_index();
    fail::cfg("tablet::persist", "return(No space left on device)").unwrap();
    let err = t.flush_mrs().unwrap_err();
    assert!(matches!(err, TabletError::Io { .. }), "{err}");
    fail::remove("tablet::persist");
    assert_eq!(
        t.durable_index(),
        durable,
        "the durable index did not advance"
    );
    assert!(matches!(t.flush_deltas(), Err(TabletError::Failed(_))));
    assert!(matches!(
        t.write(vec![RowOp::insert(vec![
            Value::Int64(999),
            Value::Int64(0)
        ])]),
        Err(TabletError::Failed(_))
    ));
    // Nothing of it may be discarded: the log still holds what the files do not.
    t.gc_log().unwrap();
    drop(t);
    let t = LocalTablet::open(dir.path(), small_options()).unwrap();
    let rows = ordered_rows(&t);
    assert_eq!(rows.len(), 200);
    assert!(t.failure().is_none());
}
