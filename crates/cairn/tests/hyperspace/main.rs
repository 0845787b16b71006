//! Hyperspace search on an in-process cluster: tables with subspaces, writes, atomic
//! operations and bulk loads chained by their point leaders while several clients write
//! the same rows and a tablet server stops, and searches, counts and sorted searches
//! checked against the table itself; (`changes`) subspaces added and columns added or
//! dropped while rows change, through faults too; and (`model`) a randomized history
//! checked against an oracle while servers stop mid-chain.

mod changes;
#[path = "../common/mod.rs"]
mod common;
mod model;

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_client::{Client, ClientError, Operation, ReadMode, SubspaceSpec, Table};
use cairn_common::{
    ColumnPredicate, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value,
};
use common::*;

fn people_schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("id", DataType::Int64),
            ColumnSpec::new("city", DataType::String).nullable(),
            ColumnSpec::new("age", DataType::Int32).nullable(),
            ColumnSpec::new("score", DataType::Double).nullable(),
        ],
        &["id"],
    )
    .unwrap()
}

fn people_spec(name: &str) -> cairn_client::CreateTableSpec {
    cairn_client::CreateTableSpec::new(name, people_schema())
        .partition(PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["id".into()],
                num_buckets: 2,
                seed: 0,
            }],
            range_columns: vec![],
        })
        .replicas(3)
        .subspace(SubspaceSpec::new(&["city", "age"]).regions(8))
        .subspace(SubspaceSpec::new(&["age"]).regions(4))
}

const CITIES: [&str; 5] = ["oslo", "lima", "pune", "kyiv", "nome"];

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn person(id: i64, r: &mut Rng) -> Vec<Value> {
    let city = match r.below(6) {
        5 => Value::Null,
        i => Value::String(CITIES[i as usize].into()),
    };
    // Ages spread over the default grid's intervals (powers of two up to 2^53).
    let age = match r.below(8) {
        7 => Value::Null,
        i => Value::Int32([0, 3, 17, 40, 99, 5_000, 300_000][i as usize]),
    };
    vec![
        Value::Int64(id),
        city,
        age,
        Value::Double(r.below(1000) as f64),
    ]
}

/// Every live row of `t` by id.
async fn base_rows(c: &Client, t: &Table) -> BTreeMap<i64, Vec<Value>> {
    let r = c
        .scan(t)
        .read_mode(ReadMode::ReadYourWrites)
        .execute()
        .await
        .unwrap();
    rows_of(&t.schema, &r.batches)
}

fn rows_of(schema: &Schema, batches: &[arrow::array::RecordBatch]) -> BTreeMap<i64, Vec<Value>> {
    let mut out = BTreeMap::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let row: Vec<Value> = schema
                .columns()
                .iter()
                .enumerate()
                .map(|(c, col)| Value::from_array(b.column(c).as_ref(), i, &col.data_type).unwrap())
                .collect();
            let Value::Int64(id) = row[0] else {
                panic!("id")
            };
            assert!(out.insert(id, row).is_none(), "id {id} twice");
        }
    }
    out
}

/// Every subspace holds exactly the table's live rows, once each, in the region their
/// values select (what `cairn cluster ksck --subspaces` checks).
async fn check_subspaces(c: &Client, t: &Table) {
    let (rows, problems) = c.check_subspaces(t, 20).await.unwrap();
    assert!(problems.is_empty(), "{rows} rows: {problems:#?}");
}

fn ids(schema: &Schema, b: &arrow::array::RecordBatch) -> Vec<i64> {
    rows_of(schema, std::slice::from_ref(b))
        .into_keys()
        .collect()
}

/// Searches `preds` and checks the answer against the table's rows.
async fn check_search(
    c: &Client,
    t: &Table,
    base: &BTreeMap<i64, Vec<Value>>,
    preds: Vec<ColumnPredicate>,
    want_subspace: bool,
) {
    let r = c.search(t, &preds).await.unwrap();
    let got = ids(&t.schema, &r.batch);
    let want: Vec<i64> = base
        .iter()
        .filter(|(_, row)| {
            preds
                .iter()
                .all(|p| p.matches_value(&row[t.schema.index_of(&p.column).unwrap()]))
        })
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(got, want, "search {preds:?} ({:?})", r.plan);
    assert_eq!(r.plan.is_some(), want_subspace, "{preds:?}: {:?}", r.plan);
    if let Some(p) = &r.plan {
        assert!(p.regions as u32 <= p.total_regions);
    }
    assert_eq!(c.count(t, &preds).await.unwrap(), want.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subspaces_follow_concurrent_writes_and_a_server_stop() {
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(people_spec("people")).await.unwrap();
    let t = c.open_table("people").await.unwrap();
    assert_eq!(t.subspaces.len(), 2);
    assert_eq!(t.subspaces[0].layout.name, "city_age");
    // The region tables are hidden from listings.
    let names: Vec<String> = c
        .list_tables()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["people".to_string()]);

    // Four writers over the same 40 rows: inserts, moves, partial updates, deletes.
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4u64 {
        let c = cl.client().await;
        let t = t.clone();
        writers.spawn(async move {
            let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ ((w + 1) * 0x1234_5678));
            for _ in 0..120 {
                let id = r.below(40) as i64;
                let op = match r.below(10) {
                    0..=5 => Operation::upsert(person(id, &mut r)),
                    6 | 7 => Operation::update(
                        &t.schema,
                        &[Value::Int64(id)],
                        &[("age", Value::Int32(r.below(70) as i32))],
                    )
                    .unwrap(),
                    _ => Operation::delete(&t.schema, &[Value::Int64(id)]).unwrap(),
                };
                let mut s = c.new_session(&t);
                match s.apply(op).await {
                    Ok(()) | Err(ClientError::Row(_)) => {}
                    Err(e) => panic!("write failed: {e}"),
                }
            }
        });
    }
    // A tablet server stops while they write: point leaders and region leaders move.
    tokio::time::sleep(Duration::from_millis(400)).await;
    cl.stop_tserver(2).await;
    while let Some(r) = writers.join_next().await {
        r.unwrap();
    }
    check_subspaces(&c, &t).await;

    let base = base_rows(&c, &t).await;
    assert!(!base.is_empty());
    let city = |s: &str| Value::String(s.into());
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::eq("city", city("oslo"))],
        true,
    )
    .await;
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::eq("age", Value::Int32(17))],
        true,
    )
    .await;
    check_search(
        &c,
        &t,
        &base,
        vec![
            ColumnPredicate::eq("city", city("lima")),
            ColumnPredicate::eq("age", Value::Int32(40)),
        ],
        true,
    )
    .await;
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::range(
            "age",
            Value::Int32(10),
            Value::Int32(100),
        )],
        true,
    )
    .await;
    check_search(&c, &t, &base, vec![ColumnPredicate::is_null("age")], true).await;
    check_search(
        &c,
        &t,
        &base,
        vec![
            ColumnPredicate::in_list("city", vec![city("pune"), city("nome")]),
            ColumnPredicate::gt("score", Value::Double(500.0)),
        ],
        true,
    )
    .await;
    // Nothing on a subspace attribute: the table itself is scanned.
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::lt("score", Value::Double(100.0))],
        false,
    )
    .await;

    // One attribute of a two-attribute subspace: a row of its grid, not all of it.
    let r = c
        .search(&t, &[ColumnPredicate::eq("city", city("kyiv"))])
        .await
        .unwrap();
    let p = r.plan.unwrap();
    assert_eq!(p.subspace, "city_age");
    assert!((p.regions as u32) < p.total_regions, "{p}");

    // Sorted search: the youngest five with an age, in order.
    let r = c.sorted_search(&t, &[], "age", 5, true).await.unwrap();
    let mut want: Vec<(i32, i64)> = base
        .iter()
        .filter_map(|(id, row)| match row[2] {
            Value::Int32(a) => Some((a, *id)),
            _ => None,
        })
        .collect();
    want.sort();
    let got: Vec<i32> = rows_of(&t.schema, std::slice::from_ref(&r.batch))
        .values()
        .map(|row| match row[2] {
            Value::Int32(a) => a,
            _ => panic!("a NULL age among the youngest"),
        })
        .collect();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    let want_ages: Vec<i32> = want.iter().take(5).map(|(a, _)| *a).collect();
    assert_eq!(got_sorted, want_ages);

    // A transaction's rows reach the subspaces when it commits, on every tablet.
    let txn = c.begin_transaction();
    let mut s = txn.session(&t);
    s.set_flush_mode(cairn_client::FlushMode::Manual);
    for id in 1000..1010 {
        s.apply(Operation::upsert(person(id, &mut Rng(id as u64 + 1))))
            .await
            .unwrap();
    }
    s.apply(Operation::delete(&t.schema, &[Value::Int64(0)]).unwrap())
        .await
        .unwrap();
    assert!(s.flush().await.unwrap().len() <= 1);
    drop(s);
    let before = c
        .count(&t, &[ColumnPredicate::ge("id", Value::Int64(1000))])
        .await
        .unwrap();
    assert_eq!(before, 0, "uncommitted rows are not searchable");
    txn.commit().await.unwrap();
    check_subspaces(&c, &t).await;

    // The command line: search, count and describe.
    let base = base_rows(&c, &t).await;
    let oslo = base
        .values()
        .filter(|r| {
            r[1] == Value::String("oslo".into()) && matches!(r[2], Value::Int32(a) if a >= 17)
        })
        .count();
    let (ok, out) = cairn(&[
        "table",
        "search",
        "people",
        "--masters",
        &cl.master_addr,
        "--where",
        "city = 'oslo' AND age >= 17",
        "--count",
    ]);
    assert!(ok, "{out}");
    assert!(out.starts_with(&format!("{oslo}\n")), "{out}");
    assert!(out.contains("searched subspace 'city_age'"), "{out}");
    let (ok, out) = cairn(&[
        "table",
        "describe",
        "people",
        "--masters",
        &cl.master_addr,
        "--no-tablets",
    ]);
    assert!(ok, "{out}");
    assert!(
        out.contains("subspace:      city_age (city, age): 6 regions"),
        "{out}"
    );
    // Each subspace holds one live copy of every row.
    assert!(out.contains(&format!(" {} rows\n", base.len())), "{out}");

    // Dropping the table drops its region tables.
    let region_name = t.subspaces[0].table_name.clone();
    c.drop_table("people", false).await.unwrap();
    wait_for(Duration::from_secs(20), "region tables dropped", || {
        let c = c.clone();
        let n = region_name.clone();
        async move { c.open_table(&n).await.is_err() }
    })
    .await;
}

/// A fine grid in few tablets: 4,096 regions of (age, city) in 3 tablets. Regions are key
/// ranges of their tablet; a search on `city` alone selects one strided region per age
/// interval, more runs than one search scans, so nearby runs merge and the merged scans
/// filter on the region list.
/// `rows` of the people schema as one Arrow batch, as a bulk load takes them.
fn people_batch(rows: &[Vec<Value>]) -> arrow::array::RecordBatch {
    let schema = people_schema();
    let columns = schema
        .columns()
        .iter()
        .enumerate()
        .map(|(i, col)| {
            cairn_common::types::array_from_values(&col.data_type, rows.iter().map(|r| &r[i]))
                .unwrap()
        })
        .collect();
    arrow::array::RecordBatch::try_new(schema.to_arrow(), columns).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bulk_loads_are_chained_while_rows_change() {
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(people_spec("loaded")).await.unwrap();
    let t = c.open_table("loaded").await.unwrap();
    const ROWS: i64 = 3000;
    // A writer changes rows of the load while it runs: a row it writes first makes
    // the load's copy fail (the key exists); a row it writes after moves in the
    // subspaces; a row it deletes leaves them.
    let writer = {
        let (c, t) = (cl.client().await, t.clone());
        tokio::spawn(async move {
            let mut r = Rng(0xb01d);
            for _ in 0..200 {
                let id = r.below(ROWS as u64) as i64;
                let op = match r.below(4) {
                    0 => Operation::delete(&t.schema, &[Value::Int64(id)]).unwrap(),
                    _ => Operation::upsert(person(id, &mut r)),
                };
                let mut s = c.new_session(&t);
                match s.apply(op).await {
                    Ok(()) | Err(ClientError::Row(_)) => {}
                    Err(e) => panic!("write failed: {e}"),
                }
            }
        })
    };
    let mut loader = c.bulk_loader(&t).await.unwrap();
    // Small chunks: many bulk inserts, each chained on its own.
    loader.set_chunk_bytes(64 << 10);
    let mut r = Rng(0x10ad);
    for from in (0..ROWS).step_by(500) {
        let rows: Vec<Vec<Value>> = (from..from + 500).map(|id| person(id, &mut r)).collect();
        loader.add(people_batch(&rows)).await.unwrap();
    }
    let summary = loader.finish().await.unwrap();
    assert!(
        summary
            .row_errors
            .iter()
            .all(|e| e.kind == cairn_proto::RowErrorKind::AlreadyPresent),
        "{:?}",
        summary.row_errors.first()
    );
    assert_eq!(
        summary.rows_written + summary.row_errors.len() as u64,
        ROWS as u64
    );
    writer.await.unwrap();
    // Each chunk was answered once its chain was through: nothing to wait for.
    check_subspaces(&c, &t).await;
    let base = base_rows(&c, &t).await;
    assert!(base.len() > 2000, "{} rows", base.len());
    let city = |s: &str| Value::String(s.into());
    for preds in [
        vec![ColumnPredicate::eq("city", city("kyiv"))],
        vec![ColumnPredicate::eq("age", Value::Int32(40))],
        vec![
            ColumnPredicate::eq("city", city("oslo")),
            ColumnPredicate::range("age", Value::Int32(1), Value::Int32(100)),
        ],
        vec![ColumnPredicate::is_null("city")],
    ] {
        check_search(&c, &t, &base, preds, true).await;
    }
    // Loading a row that exists fails that row and changes nothing.
    let mut loader = c.bulk_loader(&t).await.unwrap();
    let (&id, row) = base.iter().next().unwrap();
    let mut changed = row.clone();
    changed[1] = city("nome");
    loader.add(people_batch(&[changed])).await.unwrap();
    let summary = loader.finish().await.unwrap();
    assert_eq!(summary.rows_written, 0, "row {id} exists");
    check_subspaces(&c, &t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn atomic_operations_lose_nothing_and_are_chained() {
    use cairn_common::AtomicOp;
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(people_spec("counters")).await.unwrap();
    let t = c.open_table("counters").await.unwrap();
    let mut s = c.new_session(&t);
    for id in 0..4 {
        s.apply(Operation::upsert(vec![
            Value::Int64(id),
            Value::String("o".into()),
            Value::Int32(0),
            Value::Double(1.0),
        ]))
        .await
        .unwrap();
    }
    // Writers add to the same counters at once; each add moves its object to
    // another region of both subspaces (`age` is an attribute of each).
    const WRITERS: i32 = 4;
    const ADDS: i32 = 25;
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (c, t) = (cl.client().await, t.clone());
        writers.spawn(async move {
            for i in 0..ADDS {
                let id = i64::from((w + i) % 4);
                let op = Operation::atomic(
                    &t.schema,
                    &[Value::Int64(id)],
                    &[
                        ("age", AtomicOp::Add, Value::Int32(1)),
                        ("city", AtomicOp::Append, Value::String("x".into())),
                        ("score", AtomicOp::Max, Value::Double(f64::from(i))),
                    ],
                )
                .unwrap();
                c.new_session(&t).apply(op).await.unwrap();
            }
        });
    }
    while let Some(r) = writers.join_next().await {
        r.unwrap();
    }
    check_subspaces(&c, &t).await;
    let base = base_rows(&c, &t).await;
    let total: i32 = base
        .values()
        .map(|r| match (&r[1], &r[2]) {
            (Value::String(city), Value::Int32(age)) => {
                assert_eq!(city.len() as i32, 1 + age, "one append per add: {r:?}");
                *age
            }
            _ => panic!("{r:?}"),
        })
        .sum();
    assert_eq!(total, WRITERS * ADDS, "no add was lost");
    assert!(
        base.values()
            .all(|r| r[3] == Value::Double(f64::from(ADDS - 1)))
    );
    for age in base.values().map(|r| r[2].clone()) {
        check_search(&c, &t, &base, vec![ColumnPredicate::eq("age", age)], true).await;
    }

    // What cannot be done fails the row, which stays as it was.
    let mut s = c.new_session(&t);
    let row_error = |e: ClientError| match e {
        ClientError::Row(r) => r.kind,
        e => panic!("{e}"),
    };
    let absent = Operation::atomic(
        &t.schema,
        &[Value::Int64(99)],
        &[("age", AtomicOp::Add, Value::Int32(1))],
    )
    .unwrap();
    assert_eq!(
        row_error(s.apply(absent).await.unwrap_err()),
        cairn_proto::RowErrorKind::NotFound
    );
    let overflow = Operation::atomic(
        &t.schema,
        &[Value::Int64(0)],
        &[("age", AtomicOp::Mul, Value::Int32(i32::MAX))],
    )
    .unwrap();
    let e = s.apply(overflow).await.unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    // A conditional atomic operation: applied only while the condition holds.
    let capped = |cap: i32| {
        Operation::atomic(
            &t.schema,
            &[Value::Int64(1)],
            &[("age", AtomicOp::Add, Value::Int32(1))],
        )
        .unwrap()
        .if_matches(vec![ColumnPredicate::lt("age", Value::Int32(cap))])
    };
    let age1 = base[&1][2].clone();
    let Value::Int32(a1) = age1 else { panic!() };
    s.apply(capped(a1 + 1)).await.unwrap();
    assert_eq!(
        row_error(s.apply(capped(a1 + 1)).await.unwrap_err()),
        cairn_proto::RowErrorKind::ConditionFailed
    );
    // Two adds to one row in one batch both count.
    s.set_flush_mode(cairn_client::FlushMode::Manual);
    for _ in 0..2 {
        s.apply(
            Operation::atomic(
                &t.schema,
                &[Value::Int64(2)],
                &[("age", AtomicOp::Sub, Value::Int32(3))],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    }
    assert!(s.flush().await.unwrap().is_empty());
    check_subspaces(&c, &t).await;
    let after = base_rows(&c, &t).await;
    assert_eq!(after[&0], base[&0], "the failed operations changed nothing");
    assert_eq!(after[&1][2], Value::Int32(a1 + 1));
    let Value::Int32(a2) = base[&2][2] else {
        panic!()
    };
    assert_eq!(after[&2][2], Value::Int32(a2 - 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_regions_share_few_tablets() {
    let cl = InProc::start(1, Duration::from_secs(300)).await;
    let c = cl.client().await;
    let spec = cairn_client::CreateTableSpec::new("fine", people_schema())
        .replicas(1)
        .subspace(SubspaceSpec::new(&["age", "city"]).regions(4096).tablets(3));
    c.create_table(spec).await.unwrap();
    let t = c.open_table("fine").await.unwrap();
    assert_eq!(t.subspaces[0].layout.region_count(), 4096);
    assert_eq!(t.subspaces[0].tablet_count(), 3);
    assert_eq!(
        c.table_locations(
            &cairn_client::hyperspace::region_table(&t.schema, 1, &t.subspaces[0]).unwrap(),
            false
        )
        .await
        .unwrap()
        .len(),
        3
    );
    let mut r = Rng(77);
    let mut s = c.new_session(&t);
    for id in 0..300 {
        s.apply(Operation::upsert(person(id, &mut r)))
            .await
            .unwrap();
    }
    // Some move: their copies leave one region for another.
    for id in (0..300).step_by(7) {
        s.apply(Operation::upsert(person(id, &mut r)))
            .await
            .unwrap();
    }
    s.apply(Operation::delete(&t.schema, &[Value::Int64(5)]).unwrap())
        .await
        .unwrap();
    check_subspaces(&c, &t).await;
    let base = base_rows(&c, &t).await;
    let city = |s: &str| Value::String(s.into());
    for preds in [
        vec![ColumnPredicate::eq("city", city("pune"))],
        vec![ColumnPredicate::eq("age", Value::Int32(99))],
        vec![ColumnPredicate::range(
            "age",
            Value::Int32(1),
            Value::Int32(50),
        )],
        vec![
            ColumnPredicate::in_list("city", vec![city("oslo"), city("nome")]),
            ColumnPredicate::ge("age", Value::Int32(17)),
        ],
        vec![ColumnPredicate::is_null("city")],
    ] {
        check_search(&c, &t, &base, preds, true).await;
    }
    let r = c
        .search(&t, &[ColumnPredicate::eq("city", city("lima"))])
        .await
        .unwrap();
    assert_eq!(r.plan.unwrap().regions, 64, "one region per age interval");

    // What chains that never finished leave behind, written into the region table
    // directly: a missing copy, a stale copy in a wrong region, a copy of a deleted
    // row, a copy with stale values in the right region, a copy in the right region but
    // another cell.
    let entry = &t.subspaces[0];
    let region = cairn_client::hyperspace::region_table(&t.schema, 1, entry).unwrap();
    let place_of = |row: &[Value]| entry.layout.place_of_row(&t.schema, row).unwrap();
    let stale = |id: i64| {
        let mut row = base[&id].clone();
        row[3] = Value::Double(-1.0);
        row
    };
    let mut rs = c.new_session(&region);
    let (r10, cell10) = place_of(&base[&10]);
    rs.apply(
        Operation::delete(
            &region.schema,
            &[
                Value::Int32(r10 as i32),
                Value::Int64(cell10),
                Value::Int64(10),
            ],
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let (r11, cell11) = place_of(&base[&11]);
    rs.apply(Operation::upsert(cairn_hyperspace::region_row(
        &stale(11),
        ((r11 + 1) % 4096, cell11),
        1,
        false,
    )))
    .await
    .unwrap();
    let mut gone = base[&12].clone();
    gone[0] = Value::Int64(5);
    rs.apply(Operation::upsert(cairn_hyperspace::region_row(
        &gone,
        place_of(&gone),
        1,
        false,
    )))
    .await
    .unwrap();
    rs.apply(Operation::upsert(cairn_hyperspace::region_row(
        &stale(13),
        place_of(&base[&13]),
        1,
        false,
    )))
    .await
    .unwrap();
    let (r14, cell14) = place_of(&base[&14]);
    rs.apply(Operation::upsert(cairn_hyperspace::region_row(
        &base[&14],
        (r14, cell14 + 1),
        1,
        false,
    )))
    .await
    .unwrap();
    let (_, problems) = c.check_subspaces(&t, 20).await.unwrap();
    assert!(problems.len() >= 5, "{problems:#?}");
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&format!("cell {}", cell14 + 1))),
        "{problems:#?}"
    );

    // The repair runs while a writer moves rows around; afterwards the subspace agrees.
    let writer = {
        let (c, t) = (cl.client().await, t.clone());
        tokio::spawn(async move {
            let mut r = Rng(99);
            let mut s = c.new_session(&t);
            for _ in 0..150 {
                let id = 100 + r.below(40) as i64;
                s.apply(Operation::upsert(person(id, &mut r)))
                    .await
                    .unwrap();
            }
        })
    };
    let mut calls = 0;
    let report = c
        .repair_subspaces(&t, Duration::from_secs(30), |_| calls += 1)
        .await
        .unwrap();
    writer.await.unwrap();
    assert!(report.copies_written >= 2, "{report:?}");
    assert!(report.copies_removed >= 2, "{report:?}");
    assert!(calls >= 1);
    check_subspaces(&c, &t).await;
    let base = base_rows(&c, &t).await;
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::lt("score", Value::Double(0.0))],
        false,
    )
    .await;
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::eq("city", city("oslo"))],
        true,
    )
    .await;
    // A second repair finds nothing to do.
    let again = c
        .repair_subspaces(&t, Duration::from_secs(30), |_| {})
        .await
        .unwrap();
    assert_eq!(
        (again.copies_written, again.copies_removed),
        (0, 0),
        "{again:?}"
    );
}
