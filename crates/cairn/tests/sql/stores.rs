//! A read-only store as a SQL table: key lookups and IN lists pushed down, full
//! scans, listed by the catalog views, writes refused with SQLSTATE 25006, and read
//! only by users granted SELECT on it.

use super::common::create_and_push_store;
use super::{err, q, sql_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_is_a_read_only_table() {
    let (cl, engine) = sql_cluster(2).await;
    cl.wait_live(2).await;
    let c = cl.client().await;
    // 1,000 rows built with the catalog's ring and pushed.
    let dir = tempfile::tempdir().unwrap();
    create_and_push_store(&c, "recs", 2, 1_000, dir.path()).await;

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

    // Reading a store needs SELECT on it, granted and revoked as on a table.
    q(&s, "CREATE USER ann PASSWORD 'a'").await;
    let ann = engine.session();
    ann.set_user("ann");
    for sql in [
        "SELECT v FROM recs WHERE id = 42",
        "SELECT count(*) FROM recs",
        "SELECT 1 WHERE EXISTS (SELECT 1 FROM recs WHERE id = 1)",
    ] {
        let e = err(&ann, sql).await;
        assert_eq!(e.sqlstate(), "42501", "{sql}: {e}");
        assert!(
            e.to_string().contains("permission denied for table recs"),
            "{e}"
        );
    }
    q(&s, "GRANT SELECT ON recs TO ann").await;
    assert_eq!(
        q(&ann, "SELECT v FROM recs WHERE id = 42").await,
        vec![vec!["v-42".to_string()]]
    );
    q(&s, "REVOKE SELECT ON recs FROM ann").await;
    let e = err(&ann, "SELECT v FROM recs WHERE id = 42").await;
    assert_eq!(e.sqlstate(), "42501", "{e}");
}
