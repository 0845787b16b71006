//! Exactly-once requests: answers that arrive too late make the client retry with the
//! same request id, and the retry must get the first attempt's answer — not
//! ALREADY_PRESENT from the first attempt's own insert, not a second application of an
//! UPSERT over a later write, not "table exists" for the table it created itself.
//!
//! The late answers are failpoints (global to the process), so these tests run one at
//! a time in this binary of their own.

mod common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
use cairn_client::{Client, ClientOptions, FlushMode, Operation};
use cairn_common::Value;
use common::*;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn impatient(c: Client) -> Client {
    c.with_options(
        ClientOptions::default()
            .rpc_timeout(Duration::from_millis(400))
            .operation_timeout(Duration::from_secs(20)),
    )
}

async fn value_of(c: &Client, t: &cairn_client::Table, id: i64) -> Option<i64> {
    let r = c
        .scan(t)
        .predicate(cairn_common::ColumnPredicate::eq("id", Value::Int64(id)))
        .projection(["n"])
        .execute()
        .await
        .unwrap();
    r.batches
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
        })
        .next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retried_writes_get_their_first_answer() {
    let _serial = SERIAL.lock().await;
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = impatient(cl.client().await);
    c.create_table(table_spec("t", 1, 3)).await.unwrap();
    let t = c.open_table("t").await.unwrap();

    // An INSERT whose answer is late: the retry must not report ALREADY_PRESENT.
    fail::cfg("tserver::write::reply", "1*delay(1500)").unwrap();
    let mut s = c.new_session(&t);
    s.set_flush_mode(FlushMode::AutoFlushSync);
    s.apply(row(1))
        .await
        .expect("the retried insert gets the first answer");
    fail::remove("tserver::write::reply");
    assert_eq!(all_ids(&c, &t).await, vec![1]);

    // An UPSERT whose answer is late while another client writes the row: the retry
    // must not apply the first value again over the later one.
    let other = cl.client().await;
    fail::cfg("tserver::write::reply", "1*delay(1500)").unwrap();
    let first = {
        let c = c.clone();
        let t = t.clone();
        tokio::spawn(async move {
            let mut s = c.new_session(&t);
            s.set_flush_mode(FlushMode::AutoFlushSync);
            s.apply(Operation::upsert(vec![
                Value::Int64(2),
                Value::String("first".into()),
                Value::Int64(1),
            ]))
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut s2 = other.new_session(&t);
    s2.set_flush_mode(FlushMode::AutoFlushSync);
    s2.apply(Operation::upsert(vec![
        Value::Int64(2),
        Value::String("second".into()),
        Value::Int64(2),
    ]))
    .await
    .unwrap();
    first.await.unwrap().unwrap();
    fail::remove("tserver::write::reply");
    assert_eq!(
        value_of(&c, &t, 2).await,
        Some(2),
        "the later UPSERT stays: the first one was applied once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retried_bulk_inserts_and_ddl_get_their_first_answer() {
    let _serial = SERIAL.lock().await;
    let cl = InProc::start(1, Duration::from_secs(300)).await;
    let c = impatient(cl.client().await);

    // CREATE TABLE whose answer is late: the retry returns the table it created.
    fail::cfg("master::create_table::reply", "1*delay(1500)").unwrap();
    let id = c.create_table(table_spec("b", 2, 1)).await;
    fail::remove("master::create_table::reply");
    let id = id.expect("the retried CREATE TABLE returns the table it created");
    let t = c.open_table("b").await.unwrap();
    assert_eq!(t.id, id);

    // A bulk chunk whose answer is late: the retry must not report every row as
    // already present.
    fail::cfg("tserver::bulk::reply", "1*delay(1500)").unwrap();
    let batch = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(vec![
            Field::new("id", ArrowType::Int64, false),
            Field::new("v", ArrowType::Utf8, true),
            Field::new("n", ArrowType::Int64, true),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(0..100)) as ArrayRef,
            Arc::new(StringArray::from_iter_values(
                (0..100).map(|i| format!("r{i}")),
            )),
            Arc::new(Int64Array::from_iter_values(0..100)),
        ],
    )
    .unwrap();
    let mut loader = c.bulk_loader(&t).await.unwrap();
    loader.add(batch).await.unwrap();
    let summary = loader.finish().await.unwrap();
    fail::remove("tserver::bulk::reply");
    assert!(
        summary.row_errors.is_empty(),
        "{:?}",
        &summary.row_errors[..3.min(summary.row_errors.len())]
    );
    assert_eq!(summary.rows_written, 100);
    assert_eq!(all_ids(&c, &t).await.len(), 100);
}
