//! Hyperspace search through SQL: `CREATE TABLE … SUBSPACE (…)`, writes of every kind
//! (INSERT, UPSERT, UPDATE that moves rows between regions, DELETE, COPY FROM STDIN)
//! chained into the subspaces, and queries whose WHERE clause is planned onto a
//! subspace (`EXPLAIN` shows `subspace=(…) regions=k/N`) giving the same answers as a
//! scan of the table.

use bytes::Bytes;
use futures::{SinkExt, pin_mut};

use crate::{err, q, serve_pg, sql_cluster};

/// Runs `SELECT … WHERE filter` through hyperspace search and with it turned off
/// (`cairn.subspace_search`), and checks both give the same rows; `searched` says
/// whether the plan must use a subspace.
async fn same_as_scan(s: &cairn_sql::SqlSession, filter: &str, searched: bool) {
    let sql = format!("SELECT id, city, age FROM people WHERE {filter} ORDER BY id");
    let found = q(s, &sql).await;
    let plan = format!("{:?}", q(s, &format!("EXPLAIN {sql}")).await);
    assert_eq!(
        plan.contains("SubspaceSearchExec"),
        searched,
        "WHERE {filter}: {plan}"
    );
    q(s, "SET cairn.subspace_search = false").await;
    let scanned = q(s, &sql).await;
    let plan = format!("{:?}", q(s, &format!("EXPLAIN {sql}")).await);
    q(s, "SET cairn.subspace_search = true").await;
    assert!(!plan.contains("SubspaceSearchExec"), "{plan}");
    assert_eq!(found, scanned, "WHERE {filter}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn where_clauses_on_subspace_attributes_read_only_their_regions() {
    let (_cl, engine) = sql_cluster(3).await;
    let s = engine.session();
    q(
        &s,
        "CREATE TABLE people (id BIGINT PRIMARY KEY, city TEXT, age INT, score DOUBLE PRECISION) \
         SUBSPACE (city, age) REGIONS 8 SUBSPACE (age) TABLETS 3 WITH (replicas = 3)",
    )
    .await;
    let values: Vec<String> = (0..60)
        .map(|i| {
            let city = ["'oslo'", "'lima'", "'pune'", "NULL"][i % 4];
            format!("({i}, {city}, {}, {})", (i * 7) % 90, i)
        })
        .collect();
    q(
        &s,
        &format!("INSERT INTO people VALUES {}", values.join(", ")),
    )
    .await;
    // Moves between regions, in place changes, deletes, upserts.
    q(&s, "UPDATE people SET age = age + 1000 WHERE id < 10").await;
    q(
        &s,
        "UPDATE people SET city = 'nome' WHERE id BETWEEN 20 AND 25",
    )
    .await;
    q(&s, "DELETE FROM people WHERE id % 9 = 0").await;
    q(
        &s,
        "INSERT INTO people VALUES (100, 'oslo', 33, 1), (101, 'kyiv', 33, 2) \
         ON CONFLICT (id) DO UPDATE SET age = EXCLUDED.age",
    )
    .await;
    q(&s, "INSERT INTO people VALUES (100, 'oslo', 34, 1) ON CONFLICT (id) DO UPDATE SET age = EXCLUDED.age").await;

    // COPY bulk loads; the point leaders chain what it loaded.
    let port = serve_pg(engine.clone(), cairn_pgwire::PgOptions::default()).await;
    let client = crate::pg_connect(port).await;
    let sink = client
        .copy_in::<_, Bytes>("COPY people (id, city, age, score) FROM STDIN")
        .await
        .unwrap();
    pin_mut!(sink);
    let mut text = String::new();
    for i in 200..230 {
        text.push_str(&format!("{i}\tlima\t{}\t{i}\n", i % 50));
    }
    sink.send(Bytes::from(text)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 30);

    same_as_scan(&s, "city = 'oslo'", true).await;
    same_as_scan(&s, "age = 33", true).await;
    same_as_scan(&s, "city = 'lima' AND age = 14", true).await;
    same_as_scan(&s, "age BETWEEN 10 AND 40", true).await;
    same_as_scan(&s, "age >= 1000", true).await;
    same_as_scan(&s, "city IN ('nome', 'kyiv')", true).await;
    same_as_scan(&s, "age IS NULL", true).await;
    // Nothing a subspace can narrow: the table's tablets are scanned.
    same_as_scan(&s, "score < 10", false).await;
    same_as_scan(&s, "age = 5 OR city = 'oslo'", false).await;
    // count(*) through a subspace.
    let n = q(&s, "SELECT count(*) FROM people WHERE city = 'lima'").await;
    q(&s, "SET cairn.subspace_search = false").await;
    let m = q(&s, "SELECT count(*) FROM people WHERE city = 'lima'").await;
    q(&s, "SET cairn.subspace_search = true").await;
    assert_eq!(n, m);
    assert_eq!(
        n,
        vec![vec![
            ((0..60)
                .filter(|i| i % 4 == 1 && !(20..=25).contains(i) && i % 9 != 0)
                .count()
                + 30)
                .to_string()
        ]]
    );
    let plan = q(
        &s,
        "EXPLAIN SELECT * FROM people WHERE city = 'pune' AND age = 21",
    )
    .await;
    let text = format!("{plan:?}");
    // Both subspaces need one region; the one whose region is the smaller share of it
    // wins the tie.
    assert!(text.contains("subspace=(age) regions=1/4096"), "{text}");

    // Bad subspace definitions are refused with PostgreSQL's codes.
    let e = err(
        &s,
        "CREATE TABLE bad (id BIGINT PRIMARY KEY, a INT) SUBSPACE (b)",
    )
    .await;
    assert_eq!(e.sqlstate(), "42703", "{e}");
    let e = err(
        &s,
        "CREATE TABLE bad (id BIGINT PRIMARY KEY, a INT) SUBSPACE (a) SUBSPACE (a)",
    )
    .await;
    assert_eq!(e.sqlstate(), "42P16", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn alter_table_adds_and_drops_a_subspace_over_existing_rows() {
    let (_cl, engine) = sql_cluster(3).await;
    let s = engine.session();
    q(
        &s,
        "CREATE TABLE people (id BIGINT PRIMARY KEY, city TEXT, age INT, score DOUBLE PRECISION) \
         WITH (replicas = 3)",
    )
    .await;
    let values: Vec<String> = (0..80)
        .map(|i| {
            let city = ["'oslo'", "'lima'", "'pune'", "NULL"][i % 4];
            format!("({i}, {city}, {}, {})", (i * 7) % 90, i)
        })
        .collect();
    q(
        &s,
        &format!("INSERT INTO people VALUES {}", values.join(", ")),
    )
    .await;
    let sql = "SELECT id, city, age FROM people WHERE city = 'lima' AND age < 50";
    let plan = format!("{:?}", q(&s, &format!("EXPLAIN {sql}")).await);
    assert!(!plan.contains("SubspaceSearchExec"), "{plan}");

    q(&s, "ALTER TABLE people ADD SUBSPACE (city, age) REGIONS 16").await;
    let plan = format!("{:?}", q(&s, &format!("EXPLAIN {sql}")).await);
    assert!(plan.contains("subspace=(city,age)"), "{plan}");
    same_as_scan(&s, "city = 'lima' AND age < 50", true).await;
    // Later writes are chained into it like any other.
    q(&s, "UPDATE people SET city = 'lima' WHERE id < 8").await;
    q(&s, "DELETE FROM people WHERE id % 5 = 0").await;
    same_as_scan(&s, "city = 'lima'", true).await;

    // Mistakes get PostgreSQL's codes.
    let e = err(&s, "ALTER TABLE people ADD SUBSPACE (city, age)").await;
    assert_eq!(e.sqlstate(), "42710", "{e}");
    let e = err(&s, "ALTER TABLE people ADD SUBSPACE (height)").await;
    assert_eq!(e.sqlstate(), "42703", "{e}");
    let e = err(&s, "ALTER TABLE people DROP SUBSPACE nope").await;
    assert_eq!(e.sqlstate(), "42704", "{e}");
    q(&s, "ALTER TABLE people DROP SUBSPACE IF EXISTS nope").await;

    // count(*) reads only keys; ORDER BY an ordered attribute LIMIT k reads regions in
    // its order until it has k rows (NULLs last). Both answer as a scan would.
    for (sql, shows) in [
        (
            "SELECT count(*) FROM people WHERE city = 'lima'",
            Some(", count"),
        ),
        (
            "SELECT id, age FROM people WHERE city = 'oslo' ORDER BY age LIMIT 3",
            Some("sorted_search=age ASC limit=3"),
        ),
        (
            "SELECT id, age FROM people WHERE city IN ('oslo', 'pune') ORDER BY age DESC NULLS LAST LIMIT 4",
            Some("sorted_search=age DESC limit=4"),
        ),
        // DESC puts NULLs first in PostgreSQL: the search is not sorted then.
        (
            "SELECT id, age FROM people WHERE city = 'pune' ORDER BY age DESC LIMIT 2",
            None,
        ),
    ] {
        let plan = format!("{:?}", q(&s, &format!("EXPLAIN {sql}")).await);
        assert!(plan.contains("SubspaceSearchExec"), "{sql}: {plan}");
        match shows {
            Some(text) => assert!(plan.contains(text), "{sql}: {plan}"),
            None => assert!(!plan.contains("sorted_search="), "{sql}: {plan}"),
        }
        let found = q(&s, sql).await;
        q(&s, "SET cairn.subspace_search = false").await;
        let scanned = q(&s, sql).await;
        q(&s, "SET cairn.subspace_search = true").await;
        assert_eq!(found, scanned, "{sql}");
    }

    // Columns change under the subspace: searches return the new column, with its
    // default for rows written before it, and rows keep being chained.
    q(
        &s,
        "ALTER TABLE people ADD COLUMN note TEXT NOT NULL DEFAULT 'none'",
    )
    .await;
    q(
        &s,
        "UPDATE people SET note = 'moved', city = 'lima' WHERE id < 4",
    )
    .await;
    q(&s, "ALTER TABLE people DROP COLUMN score").await;
    q(&s, "INSERT INTO people VALUES (500, 'lima', 30, 'new')").await;
    same_as_scan(&s, "city = 'lima'", true).await;
    let sql = "SELECT id, note FROM people WHERE city = 'lima' AND age < 50 ORDER BY id";
    let found = q(&s, sql).await;
    let shown = format!("{found:?}");
    assert!(
        shown.contains("moved") && shown.contains("none") && shown.contains("new"),
        "{shown}"
    );
    q(&s, "SET cairn.subspace_search = false").await;
    assert_eq!(q(&s, sql).await, found);
    q(&s, "SET cairn.subspace_search = true").await;
    // What a subspace cannot follow is refused with PostgreSQL's codes.
    let e = err(&s, "ALTER TABLE people DROP COLUMN city").await;
    assert_eq!(e.sqlstate(), "2BP01", "{e}");
    assert!(e.to_string().contains("DROP SUBSPACE"), "{e}");
    let e = err(&s, "ALTER TABLE people RENAME COLUMN note TO remark").await;
    assert_eq!(e.sqlstate(), "0A000", "{e}");

    // A subspace may index a column added by the same statement (subspaces are
    // added after the columns change).
    q(
        &s,
        "ALTER TABLE people ADD COLUMN tier INT NOT NULL DEFAULT 1, ADD SUBSPACE (tier) REGIONS 4",
    )
    .await;
    // Every row had the default when the subspace sampled its values, so its regions
    // cannot narrow `tier = …`; its rows must still agree with the table's. (The
    // DROP SUBSPACE (tier) below fails with 42704 if the subspace was not added.)
    q(&s, "UPDATE people SET tier = 2 WHERE id < 10").await;
    let sql = "SELECT id, tier FROM people WHERE tier = 2 ORDER BY id";
    let found = q(&s, sql).await;
    q(&s, "SET cairn.subspace_search = false").await;
    assert_eq!(q(&s, sql).await, found);
    q(&s, "SET cairn.subspace_search = true").await;
    assert_eq!(
        found.len(),
        8,
        "ids 0-9 but 0 and 5, which were deleted: {found:?}"
    );
    // One statement may drop subspaces and then change the columns they held back
    // (subspaces are dropped before the columns change).
    q(
        &s,
        "ALTER TABLE people DROP SUBSPACE (tier), DROP COLUMN tier, \
         DROP SUBSPACE (city, age), RENAME COLUMN note TO remark",
    )
    .await;
    same_as_scan(&s, "city = 'lima'", false).await;
    let rows = q(&s, "SELECT remark FROM people WHERE id < 4 ORDER BY id").await;
    assert_eq!(
        rows,
        vec![vec!["moved".to_string()]; 3],
        "rows 1-3 (0 was deleted)"
    );
    let e = err(&s, "SELECT tier FROM people").await;
    assert_eq!(e.sqlstate(), "42703", "{e}");
    // A subspace on a column the same statement drops is refused before anything
    // changes.
    let e = err(
        &s,
        "ALTER TABLE people ADD SUBSPACE (remark), DROP COLUMN remark",
    )
    .await;
    assert_eq!(e.sqlstate(), "42703", "{e}");
    q(&s, "SELECT remark FROM people WHERE id = 1").await;
}
