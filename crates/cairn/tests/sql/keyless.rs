//! Tables created without a primary key: keyed by a hidden auto-incrementing column
//! whose values the master hands out in blocks.
//!
//! - Concurrent multi-row INSERTs from several sessions, each with its own client (as
//!   several SQL servers would be), on a replicated table: every row is kept,
//!   duplicates included, and no hidden key value is given twice, also after the
//!   master restarts between blocks.
//! - SQL never shows the hidden column; UPDATE, DELETE, INSERT … SELECT and CREATE
//!   TABLE AS work on such tables; ON CONFLICT and the reserved name are refused with
//!   PostgreSQL's SQLSTATEs.

use std::collections::HashSet;

use cairn_common::AUTO_INCREMENTING_ID;

use crate::{count, err, q};

/// The hidden key values of every row of `table`.
async fn hidden_ids(c: &cairn_client::Client, table: &str) -> Vec<i64> {
    let t = c.open_table(table).await.unwrap();
    assert_eq!(
        t.schema.auto_id_index(),
        Some(0),
        "{table} has a hidden key"
    );
    let r = c
        .scan(&t)
        .projection([AUTO_INCREMENTING_ID])
        .execute()
        .await
        .unwrap();
    crate::common::first_column_ids(&r.batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keyless_tables_keep_every_row_with_unique_hidden_keys() {
    let mut cl = crate::common::InProc::start(3, std::time::Duration::from_secs(300)).await;
    let engine = cairn_sql::SqlEngine::new(cl.in_process_client().await).unwrap();
    let s = engine.session();
    q(
        &s,
        "CREATE TABLE events (host TEXT, n INT NOT NULL) WITH (replicas = 3)",
    )
    .await;
    assert_eq!(
        q(&s, "SELECT column_name FROM information_schema.columns WHERE table_name = 'events' ORDER BY ordinal_position").await,
        vec![vec!["host".to_string()], vec!["n".to_string()]],
        "the hidden key is not a column SQL sees"
    );

    // Writers with clients of their own, so each reserves its own blocks.
    const WRITERS: usize = 4;
    const STATEMENTS: usize = 10;
    const ROWS: usize = 25;
    let mut tasks = vec![];
    for w in 0..WRITERS {
        let engine = cairn_sql::SqlEngine::new(cl.in_process_client().await).unwrap();
        tasks.push(tokio::spawn(async move {
            let s = engine.session();
            for i in 0..STATEMENTS {
                // The same row many times: nothing makes rows unique but the hidden key.
                let values: Vec<String> = (0..ROWS).map(|_| format!("('w{w}', {i})")).collect();
                let sql = format!("INSERT INTO events VALUES {}", values.join(", "));
                assert_eq!(count(&s, &sql).await, ROWS as u64);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = (WRITERS * STATEMENTS * ROWS) as u64;
    assert_eq!(
        q(&s, "SELECT count(*) FROM events").await,
        vec![vec![total.to_string()]]
    );

    // The master restarts; the blocks it handed out before stay handed out.
    cl.restart_all().await;
    let engine = cairn_sql::SqlEngine::new(cl.in_process_client().await).unwrap();
    let s = engine.session();
    assert_eq!(
        count(&s, "INSERT INTO events VALUES ('after', 0), ('after', 0)").await,
        2
    );
    let ids = hidden_ids(&cl.client().await, "events").await;
    assert_eq!(ids.len() as u64, total + 2);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "a hidden key value was given twice"
    );

    // SELECT * shows the declared columns only.
    assert_eq!(
        q(&s, "SELECT * FROM events WHERE host = 'after'").await,
        vec![vec!["after".to_string(), "0".to_string()]; 2]
    );
    let e = err(&s, "SELECT auto_incrementing_id FROM events").await;
    assert_eq!(e.sqlstate(), "42703", "{e}");

    // UPDATE and DELETE address rows through the hidden key.
    assert_eq!(
        count(&s, "UPDATE events SET n = n + 100 WHERE host = 'w0'").await,
        (STATEMENTS * ROWS) as u64
    );
    assert_eq!(
        q(&s, "SELECT min(n), max(n) FROM events WHERE host = 'w0'").await,
        vec![vec!["100".to_string(), (100 + STATEMENTS - 1).to_string()]]
    );
    assert_eq!(
        count(&s, "DELETE FROM events WHERE host <> 'after'").await,
        total
    );
    assert_eq!(
        count(&s, "INSERT INTO events SELECT * FROM events").await,
        2
    );
    assert_eq!(
        q(&s, "SELECT count(*) FROM events").await,
        vec![vec!["4".to_string()]]
    );

    // CREATE TABLE AS without a key, and a keyless table's errors.
    assert_eq!(
        count(&s, "CREATE TABLE copied AS SELECT host, n FROM events").await,
        4
    );
    assert_eq!(hidden_ids(&cl.client().await, "copied").await.len(), 4);
    let e = err(
        &s,
        "INSERT INTO events VALUES ('x', 1) ON CONFLICT (host) DO UPDATE SET n = 2",
    )
    .await;
    assert_eq!(e.sqlstate(), "42P10", "{e}");
    let e = err(&s, "CREATE TABLE bad (auto_incrementing_id BIGINT, v INT)").await;
    assert_eq!(e.sqlstate(), "42939", "{e}");
    let e = err(&s, "ALTER TABLE events DROP COLUMN auto_incrementing_id").await;
    assert_eq!(e.sqlstate(), "42703", "{e}");
    // No key in pg_constraint or information_schema for a keyless table.
    assert_eq!(
        q(
            &s,
            "SELECT count(*) FROM information_schema.table_constraints WHERE table_name = 'events'"
        )
        .await,
        vec![vec!["0".to_string()]]
    );
}
