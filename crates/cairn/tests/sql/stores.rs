//! A read-only store as a SQL table: key lookups and IN lists pushed down, full
//! scans, listed by the catalog views, writes refused with SQLSTATE 25006.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};
use cairn_client::CreateStoreSpec;
use cairn_readonly::{BuildOptions, StoreBuilder, StoreSchema};

use super::{err, q, sql_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_is_a_read_only_table() {
    let (cl, engine) = sql_cluster(2).await;
    cl.wait_live(2).await;
    let c = cl.client().await;
    let arrow = Arc::new(ArrowSchema::new(vec![
        Field::new("id", ArrowType::Int64, false),
        Field::new("v", ArrowType::Utf8, false),
    ]));
    let schema = StoreSchema::from_arrow(&arrow, &["id".into()], None).unwrap();
    let mut spec = CreateStoreSpec::new("recs", schema.clone());
    spec.replication = 2;
    c.create_store(spec).await.unwrap();
    let entry = c.get_store("recs").await.unwrap();

    // Build 1,000 rows with the catalog's ring and push them.
    let dir = tempfile::tempdir().unwrap();
    let opts = BuildOptions {
        threads: 2,
        memory_bytes: 1 << 20,
        spill_dir: dir.path().to_path_buf(),
    };
    let b = StoreBuilder::new("recs", schema, entry.layout.clone(), &opts).unwrap();
    let batch = RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(Int64Array::from_iter_values(0..1_000)),
            Arc::new(StringArray::from_iter_values(
                (0..1_000).map(|i| format!("v-{i}")),
            )),
        ],
    )
    .unwrap();
    b.add_batch(&batch).unwrap();
    let out = dir.path().join("build");
    b.finish(&out).unwrap();
    let v = c
        .push_store("recs", &out.to_string_lossy(), 0, 0)
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while c.get_store("recs").await.unwrap().current_version != Some(v) {
        assert!(Instant::now() < until, "the push did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let s = engine.session();
    assert_eq!(
        q(&s, "SELECT v FROM recs WHERE id = 42").await,
        vec![vec!["v-42".to_string()]]
    );
    assert_eq!(
        q(
            &s,
            "SELECT id, v FROM recs WHERE id IN (7, 3, 5000) ORDER BY id"
        )
        .await,
        vec![
            vec!["3".to_string(), "v-3".into()],
            vec!["7".into(), "v-7".into()]
        ]
    );
    assert!(q(&s, "SELECT * FROM recs WHERE id = 5000").await.is_empty());
    // The key lookup is done by the store: no filter is left above the scan.
    let plan = q(&s, "EXPLAIN SELECT v FROM recs WHERE id = 42").await;
    let text = format!("{plan:?}");
    assert!(!text.contains("FilterExec"), "{text}");
    // Anything else reads every partition; DataFusion filters and aggregates.
    assert_eq!(
        q(&s, "SELECT count(*) FROM recs").await,
        vec![vec!["1000".to_string()]]
    );
    assert_eq!(
        q(
            &s,
            "SELECT count(*) FROM recs WHERE v LIKE 'v-9%' AND id > 100"
        )
        .await,
        vec![vec!["100".to_string()]]
    );
    // A join of a store with itself, and with a key from a subquery.
    assert_eq!(
        q(
            &s,
            "SELECT a.v FROM recs a JOIN recs b ON a.id = b.id WHERE a.id = 12"
        )
        .await,
        vec![vec!["v-12".to_string()]]
    );

    // Catalog views list the store like a table, with its columns, so psql's \d and
    // tools that browse a database see it.
    assert_eq!(
        q(
            &s,
            "SELECT table_name FROM information_schema.tables WHERE table_name = 'recs'"
        )
        .await,
        vec![vec!["recs".to_string()]]
    );
    assert_eq!(
        q(
            &s,
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'recs' \
             ORDER BY ordinal_position"
        )
        .await,
        vec![vec!["id".to_string()], vec!["v".to_string()]]
    );
    assert_eq!(
        q(
            &s,
            "SELECT relname FROM pg_catalog.pg_class WHERE relname = 'recs'"
        )
        .await,
        vec![vec!["recs".to_string()]]
    );

    // Writes say how a store changes.
    let e = err(&s, "INSERT INTO recs VALUES (1, 'x')").await;
    assert_eq!(e.sqlstate(), "25006", "{e}");
    assert!(e.to_string().contains("cairn store push"), "{e}");
    for sql in [
        "UPDATE recs SET v = 'x' WHERE id = 1",
        "DELETE FROM recs WHERE id = 1",
    ] {
        let e = err(&s, sql).await;
        assert!(e.to_string().contains("read-only store"), "{sql}: {e}");
    }
}
