//! Chains nobody finished are resumed by the point leader (HyperDex §4.1): a change
//! whose chain failed after its writer gave up, a transaction's commit whose chain
//! failed, a bulk load whose chains failed, and changes whose point leader stopped
//! before chaining them all reach their subspaces without a client retry or an
//! operator's repair.
//!
//! Chains are made to fail with the `chain::propagate` failpoint, and held back with
//! `chain::before_read`. Failpoints are global to the process: this file holds the
//! tests that set them, and they take [`ONE_AT_A_TIME`] so that they run one at a time.

mod common;

use std::time::Duration;

use cairn_client::{Client, ClientOptions, Operation, SubspaceSpec, Table};
use cairn_common::{
    AlterOp, ColumnPredicate, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value,
};
use common::*;

/// Held by each test of this file: failpoints are global to the process.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn spec(name: &str) -> cairn_client::CreateTableSpec {
    let schema = Schema::new(
        vec![
            ColumnSpec::new("id", DataType::Int64),
            ColumnSpec::new("colour", DataType::String).nullable(),
        ],
        &["id"],
    )
    .unwrap();
    cairn_client::CreateTableSpec::new(name, schema)
        .partition(PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["id".into()],
                num_buckets: 2,
                seed: 0,
            }],
            range_columns: vec![],
        })
        .replicas(3)
        .subspace(SubspaceSpec::new(&["colour"]).regions(8).tablets(2))
}

fn painted(id: i64, colour: &str) -> Operation {
    Operation::upsert(vec![Value::Int64(id), Value::String(colour.into())])
}

/// A client that gives up on a write after two seconds.
fn impatient(c: &Client) -> Client {
    c.clone().with_options(
        ClientOptions::default()
            .rpc_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_secs(2)),
    )
}

/// The ids a search for `colour` finds, in order.
async fn found(c: &Client, t: &Table, colour: &str) -> Vec<i64> {
    let r = c
        .search(
            t,
            &[ColumnPredicate::eq("colour", Value::String(colour.into()))],
        )
        .await
        .unwrap();
    assert!(r.plan.is_some(), "searched the subspace");
    let mut ids = first_column_ids(std::slice::from_ref(&r.batch));
    ids.sort_unstable();
    ids
}

/// Waits until the subspace holds exactly the table's rows.
async fn wait_consistent(c: &Client, t: &Table, what: &str) {
    wait_for(Duration::from_secs(60), what, || async {
        matches!(c.check_subspaces(t, 5).await, Ok((_, p)) if p.is_empty())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unfinished_chains_are_resumed_by_the_point_leader() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(spec("paint")).await.unwrap();
    let t = c.open_table("paint").await.unwrap();
    let mut s = c.new_session(&t);
    for id in 0..20 {
        s.apply(painted(id, "red")).await.unwrap();
    }
    assert_eq!(found(&c, &t, "red").await, (0..20).collect::<Vec<_>>());

    // 1. Chains fail and the writer gives up: the rows changed, their regions did not.
    fail::cfg("chain::propagate", "return").unwrap();
    let quick = impatient(&c);
    let mut s = quick.new_session(&t);
    for id in 0..5 {
        assert!(
            s.apply(painted(id, "blue")).await.is_err(),
            "the chain fails"
        );
    }
    // A transaction commits; its chains fail too.
    let txn = quick.begin_transaction();
    let mut ts = txn.session(&t);
    for id in 5..8 {
        ts.apply(painted(id, "blue")).await.unwrap();
    }
    ts.flush().await.unwrap();
    let _ = txn.commit().await;
    let base = c
        .get(
            &t,
            &[Value::Int64(6)],
            &[],
            cairn_client::ReadMode::ReadYourWrites,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(base[1], Value::String("blue".into()), "the commit applied");
    assert!(
        found(&c, &t, "blue").await.is_empty(),
        "no chain got through"
    );
    let (_, problems) = c.check_subspaces(&t, 50).await.unwrap();
    assert!(!problems.is_empty(), "the subspace is behind its table");

    // Once chains can get through, the point leaders finish the changes by themselves.
    fail::remove("chain::propagate");
    wait_consistent(&c, &t, "the point leaders to resume the failed chains").await;
    assert_eq!(found(&c, &t, "blue").await, (0..8).collect::<Vec<_>>());
    assert_eq!(found(&c, &t, "red").await, (8..20).collect::<Vec<_>>());

    // 2. The point leaders stop with chains unfinished: the new leaders resume them
    // from the replicated list of unchained changes.
    fail::cfg("chain::propagate", "return").unwrap();
    let mut s = quick.new_session(&t);
    for id in 8..14 {
        assert!(
            s.apply(painted(id, "green")).await.is_err(),
            "the chain fails"
        );
    }
    // The leader of the table's first tablet stops (a majority stays up).
    let leader = current_leader(&c, &t, 0).await;
    let stopped = cl
        .ts_addrs
        .iter()
        .position(|a| *a == leader)
        .expect("the leader is one of the cluster's servers");
    cl.stop_tserver(stopped).await;
    fail::remove("chain::propagate");
    wait_consistent(&c, &t, "new point leaders to resume the chains").await;
    assert_eq!(found(&c, &t, "green").await, (8..14).collect::<Vec<_>>());
    cl.start_tserver(stopped).await;
    cl.wait_live(3).await;

    // 3. Every server restarts with chains unfinished: the list survives the restart.
    fail::cfg("chain::propagate", "return").unwrap();
    let mut s = quick.new_session(&t);
    for id in 14..17 {
        assert!(
            s.apply(painted(id, "black")).await.is_err(),
            "the chain fails"
        );
    }
    cl.restart_all().await;
    fail::remove("chain::propagate");
    let c = cl.client().await;
    let t = c.open_table("paint").await.unwrap();
    wait_consistent(&c, &t, "the chains after a restart").await;
    assert_eq!(found(&c, &t, "black").await, (14..17).collect::<Vec<_>>());

    // 4. A bulk load whose chains fail: the loader gives up, its rows are in the table,
    // and the point leaders chain them by themselves.
    fail::cfg("chain::propagate", "return").unwrap();
    let mut loader = c.bulk_loader(&t).await.unwrap();
    loader.set_timeout(Duration::from_secs(2));
    let batch = arrow::array::RecordBatch::try_new(
        t.schema.to_arrow(),
        vec![
            std::sync::Arc::new(arrow::array::Int64Array::from_iter_values(20..30)),
            std::sync::Arc::new(arrow::array::StringArray::from(vec!["white"; 10])),
        ],
    )
    .unwrap();
    loader.add(batch).await.unwrap();
    assert!(loader.finish().await.is_err(), "the chains fail");
    fail::remove("chain::propagate");
    wait_consistent(&c, &t, "the chains of a bulk load").await;
    assert_eq!(found(&c, &t, "white").await, (20..30).collect::<Vec<_>>());
}

/// Creates table `name` (`id` key, nullable `colour`, then `more`) with one replica
/// and a subspace on `colour`, and opens it.
async fn coloured(c: &Client, name: &str, more: Vec<ColumnSpec>) -> Table {
    let mut columns = vec![
        ColumnSpec::new("id", DataType::Int64),
        ColumnSpec::new("colour", DataType::String).nullable(),
    ];
    columns.extend(more);
    let schema = Schema::new(columns, &["id"]).unwrap();
    c.create_table(
        cairn_client::CreateTableSpec::new(name, schema)
            .replicas(1)
            .subspace(SubspaceSpec::new(&["colour"]).regions(4).tablets(1)),
    )
    .await
    .unwrap();
    c.open_table(name).await.unwrap()
}

/// A chain reads its write's rows in the table's schema of the moment and sends them
/// in that same schema. Here a write is decoded, applied, and its chain held back while
/// a column change drops one column and adds another, which moves every later column:
/// the rows the chain reads are in the new schema, and must be named by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chain_held_across_a_column_change_names_its_rows_by_the_new_schema() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    let t = coloured(
        &c,
        "shift",
        vec![
            ColumnSpec::new("a", DataType::Int64).nullable(),
            ColumnSpec::new("z", DataType::Int64).nullable(),
        ],
    )
    .await;
    let row = |id: i64, colour: &str, a: i64, z: i64| {
        Operation::upsert(vec![
            Value::Int64(id),
            Value::String(colour.into()),
            Value::Int64(a),
            Value::Int64(z),
        ])
    };
    let mut s = c.new_session(&t);
    s.apply(row(1, "red", 10, 30)).await.unwrap();

    // The write applies; its chain waits before reading the row back.
    fail::cfg("chain::before_read", "return").unwrap();
    let held = {
        let (c, t) = (c.clone(), t.clone());
        tokio::spawn(async move {
            let mut s = c.new_session(&t);
            s.apply(row(2, "blue", 20, 40)).await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Dropping `a` and adding `b` moves `z` one place left.
    let altered = c
        .alter_table(
            "shift",
            vec![
                AlterOp::DropColumn("a".into()),
                AlterOp::AddColumn(
                    ColumnSpec::new("b", DataType::Int64).with_default(Value::Int64(7)),
                ),
            ],
        )
        .await;
    fail::remove("chain::before_read");
    altered.unwrap();
    tokio::time::timeout(Duration::from_secs(60), held)
        .await
        .expect("the held write finishes")
        .unwrap()
        .expect("the held write's chain gets through");

    // The region copies are the table's rows, column by column.
    let t = c.open_table("shift").await.unwrap();
    let (_, problems) = c.check_subspaces(&t, 5).await.unwrap();
    assert!(problems.is_empty(), "region copies differ: {problems:?}");
    let r = c
        .search(
            &t,
            &[ColumnPredicate::eq("colour", Value::String("blue".into()))],
        )
        .await
        .unwrap();
    assert!(r.plan.is_some(), "searched the subspace");
    let batch = &r.batch;
    assert_eq!(batch.num_rows(), 1);
    let column = |name: &str| {
        let i = batch.schema().index_of(name).unwrap();
        batch
            .column(i)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap()
            .value(0)
    };
    assert_eq!(
        (column("z"), column("b")),
        (40, 7),
        "the row found by search"
    );
}

/// A change chained again by its point leader after its row changed once more puts no
/// copy of its (by then old) row anywhere. Here the newer change was chained before a
/// subspace was added, and the change it overtook is resumed after: the new subspace,
/// filled by its backfill, has no tombstone that would turn the old copy away, and it
/// would stay there, found by searches, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_resumed_after_its_row_changed_again_leaves_no_stale_copy() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    let t = coloured(
        &c,
        "overtaken",
        vec![ColumnSpec::new("shade", DataType::String).nullable()],
    )
    .await;
    let row = |colour: &str, shade: &str| {
        Operation::upsert(vec![
            Value::Int64(1),
            Value::String(colour.into()),
            Value::String(shade.into()),
        ])
    };
    c.new_session(&t).apply(row("red", "dark")).await.unwrap();

    // 1. A change whose chain fails: it waits on the tablet's list to be chained again.
    fail::cfg("chain::propagate", "return").unwrap();
    let failed = impatient(&c)
        .new_session(&t)
        .apply(row("blue", "pale"))
        .await;
    fail::remove("chain::propagate");
    assert!(failed.is_err(), "the chain fails");
    // 2. A newer change of the row is chained at once; the older one is held back
    // from being chained again until the end of step 3.
    c.new_session(&t).apply(row("green", "dark")).await.unwrap();
    fail::cfg("chain::before_read", "return").unwrap();
    // 3. A subspace is added: its backfill copies the row as it is now.
    let added = c
        .add_subspace(
            "overtaken",
            SubspaceSpec::new(&["shade"]).regions(4).tablets(1),
            &|_| {},
        )
        .await;
    fail::remove("chain::before_read");
    added.unwrap();

    // The older change is chained again now; wait for its round to finish.
    tokio::time::sleep(cairn_tserver::point_leader::RESUME_AFTER + Duration::from_secs(2)).await;
    let t = c.open_table("overtaken").await.unwrap();
    wait_consistent(&c, &t, "the subspaces to hold the table's rows").await;
    let shade = |s: &str| vec![ColumnPredicate::eq("shade", Value::String(s.into()))];
    let pale = c.search(&t, &shade("pale")).await.unwrap();
    assert!(pale.plan.is_some(), "searched the added subspace");
    assert_eq!(
        pale.batch.num_rows(),
        0,
        "the overtaken row is in no region"
    );
    assert_eq!(found(&c, &t, "green").await, vec![1]);
    assert_eq!(found(&c, &t, "blue").await, Vec::<i64>::new());
}
