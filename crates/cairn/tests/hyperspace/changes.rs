//! Changes to a table with subspaces while rows change: a subspace added over
//! existing rows (its backfill and the chains meet), and columns added and dropped
//! (the regions follow the table), also while a tablet server is down and while the
//! master restarts.

use super::*;

/// Writers changing rows of a table all through a schema or subspace change.
struct Writers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: tokio::task::JoinSet<u64>,
}

impl Writers {
    /// Three writers, each with its own client and generator (seeded from `seed`),
    /// applying `op_of(table, rng)` until stopped and at least 50 times. A row error
    /// (a missing row) is fine; any other failure fails the test.
    async fn start(
        cl: &InProc,
        t: &Table,
        seed: u64,
        op_of: fn(&Table, &mut Rng) -> Operation,
    ) -> Writers {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..3u64 {
            let (c, t, stop) = (cl.client().await, t.clone(), stop.clone());
            tasks.spawn(async move {
                let mut r = Rng(seed + w);
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 50 {
                    let op = op_of(&t, &mut r);
                    match c.new_session(&t).apply(op).await {
                        Ok(()) | Err(ClientError::Row(_)) => {}
                        Err(e) => panic!("write failed: {e}"),
                    }
                    n += 1;
                }
                n
            });
        }
        Writers { stop, tasks }
    }

    /// Stops the writers and checks that each wrote its share.
    async fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        while let Some(n) = self.tasks.join_next().await {
            assert!(n.unwrap() >= 50);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subspace_added_while_rows_change_holds_every_row() {
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    let spec = cairn_client::CreateTableSpec::new("grow", people_schema())
        .partition(PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["id".into()],
                num_buckets: 2,
                seed: 0,
            }],
            range_columns: vec![],
        })
        .replicas(3);
    c.create_table(spec).await.unwrap();
    let t = c.open_table("grow").await.unwrap();
    assert!(t.subspaces.is_empty());
    let mut r = Rng(5);
    let mut s = c.new_session(&t);
    for id in 0..300 {
        s.apply(Operation::upsert(person(id, &mut r)))
            .await
            .unwrap();
    }

    // Writers change rows all through the ALTER: before the tablets chain into the new
    // subspace, while they start to, during the backfill and after.
    let writers = Writers::start(&cl, &t, 0x5151, |t, r| {
        let id = r.below(360) as i64;
        match r.below(8) {
            0 => Operation::delete(&t.schema, &[Value::Int64(id)]).unwrap(),
            1 => Operation::update(
                &t.schema,
                &[Value::Int64(id)],
                &[("age", Value::Int32(r.below(120) as i32))],
            )
            .unwrap(),
            _ => Operation::upsert(person(id, r)),
        }
    })
    .await;
    let steps = std::sync::Mutex::new(Vec::new());
    let added = c
        .add_subspace(
            "grow",
            SubspaceSpec::new(&["city", "age"]).regions(16),
            &|s: &str| steps.lock().unwrap().push(s.to_string()),
        )
        .await
        .unwrap();
    assert!(added.rows > 0, "{added:?}");
    assert!(
        steps.lock().unwrap().iter().any(|s| s.contains("copying")),
        "progress is reported: {:?}",
        steps.lock().unwrap()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    writers.stop().await;
    let t = c.open_table("grow").await.unwrap();
    let entry = &t.subspaces[0];
    assert!(!entry.building && entry.chained_after > 0, "{entry:?}");
    // The age axis was cut at the sample's quantiles, not at the defaults.
    assert_ne!(
        entry.layout.dimensions[1].cuts.to_vec(),
        cairn_hyperspace::grid::default_cuts(
            entry.layout.dimensions[1].axis.kind,
            entry.layout.dimensions[1].intervals()
        )
    );
    // Writes whose leader had not yet seen the subspace are chained by the tablets'
    // bookkeeping within seconds.
    wait_for(
        Duration::from_secs(30),
        "the new subspace to hold every row",
        || async { matches!(c.check_subspaces(&t, 5).await, Ok((_, p)) if p.is_empty()) },
    )
    .await;
    let base = base_rows(&c, &t).await;
    let city = |s: &str| Value::String(s.into());
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::eq("city", city("kyiv"))],
        true,
    )
    .await;
    check_search(
        &c,
        &t,
        &base,
        vec![
            ColumnPredicate::eq("city", city("oslo")),
            ColumnPredicate::range("age", Value::Int32(10), Value::Int32(60)),
        ],
        true,
    )
    .await;

    // Dropped, the subspace is no longer searched and writes go on.
    c.drop_subspace("grow", &entry.layout.name).await.unwrap();
    let t = c.open_table("grow").await.unwrap();
    assert!(t.subspaces.is_empty());
    let mut s = c.new_session(&t);
    s.apply(Operation::upsert(person(1000, &mut r)))
        .await
        .unwrap();
    let base = base_rows(&c, &t).await;
    check_search(
        &c,
        &t,
        &base,
        vec![ColumnPredicate::eq("city", city("kyiv"))],
        false,
    )
    .await;
    let err = c.drop_subspace("grow", "city_age").await.unwrap_err();
    assert!(err.to_string().contains("no subspace"), "{err}");
}

/// Column changes on a table with subspaces finish through faults: a column is added
/// while a tablet server is down (it comes back in the middle of the change), and one
/// is dropped while the master restarts. The client's retries of the same request
/// finish what is left; the regions end with the table's columns and rows, and rows
/// changed all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn columns_change_on_a_table_with_subspaces_through_faults() {
    use cairn_common::AlterOp;
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(people_spec("faulted")).await.unwrap();
    let t = c.open_table("faulted").await.unwrap();
    let mut r = Rng(29);
    let mut s = c.new_session(&t);
    for id in 0..200 {
        s.apply(Operation::upsert(person(id, &mut r)))
            .await
            .unwrap();
    }

    // Writers that ride out the faults: a write that fails is left to the end check,
    // which compares the subspaces with the table, whatever it holds.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..2u64 {
        let (c, t, stop) = (cl.client().await, t.clone(), stop.clone());
        writers.spawn(async move {
            let mut r = Rng(0x5151 + w);
            let mut ok = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = Value::Int64(r.below(260) as i64);
                let age = Value::Int32(r.below(120) as i32);
                let op = if r.below(6) == 0 {
                    Operation::delete(&t.schema, &[id]).unwrap()
                } else {
                    let city = Value::String(CITIES[r.below(5) as usize].into());
                    Operation::named(
                        cairn_proto::OpKind::Upsert,
                        &t.schema,
                        &[("id", id), ("city", city), ("age", age)],
                    )
                    .unwrap()
                };
                if c.new_session(&t).apply(op).await.is_ok() {
                    ok += 1;
                }
            }
            ok
        });
    }

    // ADD COLUMN with a tablet server down; it comes back while the change runs.
    cl.stop_tserver(2).await;
    let add = {
        let c = c.clone();
        tokio::spawn(async move {
            c.alter_table(
                "faulted",
                vec![
                    AlterOp::AddColumn(ColumnSpec::new("tag", DataType::String).nullable()),
                    AlterOp::AddColumn(
                        ColumnSpec::new("level", DataType::Int64).with_default(Value::Int64(7)),
                    ),
                ],
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    cl.start_tserver(2).await;
    add.await.unwrap().expect("the column is added");
    cl.wait_live(3).await;

    // DROP COLUMN, with the master restarting while it runs.
    let drop = {
        let c = c.clone();
        tokio::spawn(async move {
            c.alter_table("faulted", vec![AlterOp::DropColumn("score".into())])
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    cl.restart_master().await;
    drop.await.unwrap().expect("the column is dropped");
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(ok) = writers.join_next().await {
        assert!(ok.unwrap() > 0, "a writer got writes through");
    }

    columns_followed(&c, "faulted", "lima", (20, 70)).await;
}

/// After `ADD COLUMN tag, level` and `DROP COLUMN score` on table `name` of
/// [`people_spec`]: checks that the table and every region table have the new columns
/// and not the dropped one, waits for the subspaces to hold the table's rows, and
/// checks two searches (`city` = `city`, `age` in `ages`) against the table, whole
/// rows included. Returns the table and its rows.
async fn columns_followed(
    c: &Client,
    name: &str,
    city: &str,
    ages: (i32, i32),
) -> (Table, BTreeMap<i64, Vec<Value>>) {
    let t = c.open_table(name).await.unwrap();
    let names: Vec<&str> = t.schema.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id", "city", "age", "tag", "level"]);
    // The regions followed: they hold the new columns and not the dropped one.
    for entry in &t.subspaces {
        let region = c.open_table(&entry.table_name).await.unwrap();
        let has = |n: &str| region.schema.index_of(n).is_ok();
        assert!(
            has("tag") && has("level") && !has("score"),
            "{:?}",
            region.schema
        );
    }
    wait_for(
        Duration::from_secs(60),
        "every subspace to hold the table's rows",
        || async { matches!(c.check_subspaces(&t, 5).await, Ok((_, p)) if p.is_empty()) },
    )
    .await;
    check_subspaces(c, &t).await;
    let base = base_rows(c, &t).await;
    for preds in [
        vec![ColumnPredicate::eq("city", Value::String(city.into()))],
        vec![ColumnPredicate::range(
            "age",
            Value::Int32(ages.0),
            Value::Int32(ages.1),
        )],
    ] {
        check_search(c, &t, &base, preds.clone(), true).await;
        // Whole rows, new columns included, come back from the subspace.
        let found = rows_of(&t.schema, &[c.search(&t, &preds).await.unwrap().batch]);
        for (id, row) in &found {
            assert_eq!(row, &base[id], "row {id} found by {preds:?}");
        }
    }
    (t, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn columns_change_on_a_table_with_subspaces_while_rows_change() {
    use cairn_common::AlterOp;
    use cairn_proto::OpKind;
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(people_spec("cols")).await.unwrap();
    let t = c.open_table("cols").await.unwrap();
    let mut r = Rng(11);
    let mut s = c.new_session(&t);
    for id in 0..200 {
        s.apply(Operation::upsert(person(id, &mut r)))
            .await
            .unwrap();
    }

    // Writers holding the table as first opened change rows all through both column
    // changes. They never name `score`, which the second change drops.
    let writers = Writers::start(&cl, &t, 0x7171, |t, r| {
        let id = r.below(260) as i64;
        let age = Value::Int32(r.below(120) as i32);
        match r.below(8) {
            0 => Operation::delete(&t.schema, &[Value::Int64(id)]).unwrap(),
            1 => Operation::update(&t.schema, &[Value::Int64(id)], &[("age", age)]).unwrap(),
            _ => {
                let city = Value::String(CITIES[r.below(5) as usize].into());
                Operation::named(
                    cairn_proto::OpKind::Upsert,
                    &t.schema,
                    &[("id", Value::Int64(id)), ("city", city), ("age", age)],
                )
                .unwrap()
            }
        }
    })
    .await;

    // ADD COLUMN: rows chained before and after it hold the new columns.
    c.alter_table(
        "cols",
        vec![
            AlterOp::AddColumn(ColumnSpec::new("tag", DataType::String).nullable()),
            AlterOp::AddColumn(
                ColumnSpec::new("level", DataType::Int64).with_default(Value::Int64(7)),
            ),
        ],
    )
    .await
    .unwrap();
    let t2 = c.open_table("cols").await.unwrap();
    let mut s = c.new_session(&t2);
    for id in 1000..1040i64 {
        let city = Value::String(CITIES[(id % 5) as usize].into());
        s.apply(
            Operation::named(
                OpKind::Upsert,
                &t2.schema,
                &[
                    ("id", Value::Int64(id)),
                    ("city", city),
                    ("age", Value::Int32((id % 90) as i32)),
                    ("tag", Value::String(format!("t{id}"))),
                    ("level", Value::Int64(id)),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    }

    // DROP COLUMN, while the writers go on.
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.alter_table("cols", vec![AlterOp::DropColumn("score".into())])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    writers.stop().await;

    let (_, base) = columns_followed(&c, "cols", "kyiv", (10, 60)).await;
    assert_eq!(base[&1007][3], Value::String("t1007".into()));
    // Rows written before the ADD read the default, from the table and its subspaces.
    assert!(base.values().any(|row| row[4] == Value::Int64(7)));

    // What subspaces cannot follow is refused, and says what to do.
    let rename = AlterOp::RenameColumn {
        from: "tag".into(),
        to: "label".into(),
    };
    let err = c.alter_table("cols", vec![rename]).await.unwrap_err();
    assert!(err.to_string().contains("DROP SUBSPACE"), "{err}");
    let err = c
        .alter_table("cols", vec![AlterOp::DropColumn("city".into())])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("attribute of subspace"), "{err}");
    let reserved = ColumnSpec::new(cairn_hyperspace::VERSION_COLUMN, DataType::Int64).nullable();
    let err = c
        .alter_table("cols", vec![AlterOp::AddColumn(reserved)])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("reserve"), "{err}");
    assert_eq!(c.open_table("cols").await.unwrap().schema.num_columns(), 5);
}
