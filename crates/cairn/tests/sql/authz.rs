//! Users and privileges in SQL: GRANT and REVOKE of each privilege, CREATE, table
//! ownership, superuser-only statements, and user management — through engine
//! sessions running as a user, then through real clients: `tokio-postgres` over
//! SCRAM-SHA-256 and the Flight SQL client after its handshake. A user without a
//! privilege gets SQLSTATE 42501 everywhere.

use arrow_flight::sql::client::FlightSqlServiceClient;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::{err, q, serve_pg, sql_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_ownership_and_user_management() {
    let (_cl, engine) = sql_cluster(1).await;
    let admin = engine.session();
    for sql in [
        "CREATE USER ann PASSWORD 'a'",
        "CREATE USER bob WITH PASSWORD 'b' CREATEDB",
        "CREATE USER carl PASSWORD 'c'",
        "CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT)",
        "CREATE TABLE t2 (id BIGINT PRIMARY KEY)",
        "INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, 'three')",
        "INSERT INTO t2 VALUES (1)",
    ] {
        q(&admin, sql).await;
    }
    let as_user = |name: &str| {
        let s = engine.session();
        s.set_user(name);
        s
    };
    let ann = as_user("ann");
    let denied = |e: cairn_sql::SqlError| {
        assert_eq!(e.sqlstate(), "42501", "{e}");
        e.to_string()
    };
    // Nothing without a grant.
    let m = denied(err(&ann, "SELECT * FROM t").await);
    assert!(m.contains("permission denied for table t"), "{m}");
    denied(err(&ann, "INSERT INTO t VALUES (9, 'x')").await);
    denied(err(&ann, "CREATE TABLE mine (id BIGINT PRIMARY KEY)").await);
    denied(err(&ann, "COPY t FROM '/etc/hosts' WITH (FORMAT csv)").await);
    // SELECT, on t only: a join or subquery touching t2 still fails.
    q(&admin, "GRANT SELECT ON t TO ann").await;
    assert_eq!(q(&ann, "SELECT count(*) FROM t").await, [["3"]]);
    // Writing a file on the server is for superusers, even with SELECT on what it
    // writes (as PostgreSQL's pg_write_server_files).
    let out = std::env::temp_dir().join(format!("cairn-authz-{}.csv", std::process::id()));
    let m = denied(err(&ann, &format!("COPY t TO '{}'", out.display())).await);
    assert!(m.contains("superuser"), "{m}");
    denied(err(&ann, &format!("COPY (SELECT 1) TO '{}'", out.display())).await);
    assert!(!out.exists(), "a denied COPY wrote {}", out.display());
    denied(err(&ann, "SELECT * FROM t WHERE id IN (SELECT id FROM t2)").await);
    denied(err(&ann, "SELECT * FROM t JOIN t2 ON t.id = t2.id").await);
    // INSERT; an upsert also needs UPDATE, a DELETE needs DELETE.
    q(&admin, "GRANT INSERT ON t TO ann").await;
    q(&ann, "INSERT INTO t VALUES (4, 'four')").await;
    denied(err(&ann, "UPSERT INTO t VALUES (4, 'FOUR')").await);
    denied(err(&ann, "DELETE FROM t WHERE id = 4").await);
    q(&admin, "GRANT UPDATE, DELETE ON t TO ann").await;
    q(&ann, "UPSERT INTO t VALUES (4, 'FOUR')").await;
    q(&ann, "UPDATE t SET v = 'Four' WHERE id = 4").await;
    q(&ann, "DELETE FROM t WHERE id = 4").await;
    // As in PostgreSQL, DELETE without WHERE needs no SELECT, with WHERE it does.
    let carl = as_user("carl");
    q(&admin, "GRANT DELETE ON t2 TO carl").await;
    denied(err(&carl, "DELETE FROM t2 WHERE id = 1").await);
    q(&carl, "DELETE FROM t2").await;
    assert!(q(&admin, "SELECT * FROM t2").await.is_empty());
    // REVOKE takes effect at once on this server.
    q(&admin, "REVOKE SELECT ON t FROM ann").await;
    denied(err(&ann, "SELECT * FROM t").await);
    q(&admin, "REVOKE ALL ON t FROM ann").await;
    denied(err(&ann, "INSERT INTO t VALUES (5, 'x')").await);
    // CREATE (CREATEDB or GRANT CREATE): the creator owns the table and holds ALL.
    let bob = as_user("bob");
    q(&bob, "CREATE TABLE bobs (id BIGINT PRIMARY KEY, n BIGINT)").await;
    q(&bob, "INSERT INTO bobs VALUES (1, 10)").await;
    assert_eq!(q(&bob, "SELECT n FROM bobs").await, [["10"]]);
    q(&bob, "ALTER TABLE bobs ADD COLUMN note TEXT").await;
    q(&admin, "GRANT CREATE ON SCHEMA public TO ann").await;
    q(&ann, "CREATE TABLE anns (id BIGINT PRIMARY KEY)").await;
    let m = denied(err(&ann, "DROP TABLE bobs").await);
    assert!(m.contains("must be owner of table bobs"), "{m}");
    denied(err(&ann, "ALTER TABLE bobs ADD COLUMN x BIGINT").await);
    denied(err(&ann, "SELECT * FROM bobs").await);
    // CREATE TABLE AS reads its source with the creator's privileges.
    denied(
        err(
            &ann,
            "CREATE TABLE copied (id BIGINT PRIMARY KEY) AS SELECT id FROM t",
        )
        .await,
    );
    // Users: superusers manage them; anyone may change their own password.
    q(&ann, "ALTER USER ann PASSWORD 'a2'").await;
    denied(err(&ann, "ALTER USER bob PASSWORD 'x'").await);
    denied(err(&ann, "ALTER USER ann SUPERUSER").await);
    denied(err(&ann, "CREATE USER eve PASSWORD 'e'").await);
    denied(err(&ann, "GRANT SELECT ON t TO ann").await);
    let e = err(&admin, "CREATE USER ann PASSWORD 'x'").await;
    assert_eq!(e.sqlstate(), "42710", "{e}");
    let e = err(&admin, "GRANT SELECT ON t TO nobody").await;
    assert_eq!(e.sqlstate(), "42704", "{e}");
    let e = err(&admin, "DROP USER bob").await;
    assert_eq!(e.sqlstate(), "2BP01", "a user owning a table: {e}");
    q(&bob, "DROP TABLE bobs").await;
    q(&admin, "DROP USER bob").await;
    let e = err(&bob, "SELECT 1").await;
    assert_eq!(e.sqlstate(), "28000", "a dropped user's session: {e}");
    q(&admin, "DROP USER IF EXISTS bob").await;
    // A superuser may do everything.
    q(&admin, "ALTER USER carl SUPERUSER").await;
    assert_eq!(q(&carl, "SELECT count(*) FROM t").await, [["3"]]);
}

async fn pg_connect(
    port: u16,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user={user} password={password} dbname=cairn"),
        NoTls,
    )
    .await?;
    tokio::spawn(conn);
    Ok(client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_and_flight_sql_clients_log_in_and_are_denied() {
    let (_cl, engine) = sql_cluster(1).await;
    let admin = engine.session();
    for sql in [
        "ALTER USER cairn PASSWORD 'root-pw'",
        "CREATE USER ann PASSWORD 'ann-pw'",
        "CREATE TABLE secrets (id BIGINT PRIMARY KEY, v TEXT)",
        "INSERT INTO secrets VALUES (1, 'x')",
    ] {
        q(&admin, sql).await;
    }
    // PostgreSQL with SCRAM-SHA-256.
    let opts = cairn_pgwire::PgOptions {
        auth: cairn_pgwire::PgAuth::ScramSha256,
        ..Default::default()
    };
    let port = serve_pg(engine.clone(), opts).await;
    let ann = pg_connect(port, "ann", "ann-pw")
        .await
        .expect("ann logs in");
    let e = ann.simple_query("SELECT v FROM secrets").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e:?}");
    let e = pg_connect(port, "ann", "wrong").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{e:?}");
    // COPY checks the same privileges: TO STDOUT needs SELECT, FROM STDIN INSERT.
    let e = ann
        .copy_out("COPY secrets TO STDOUT")
        .await
        .err()
        .expect("denied");
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e:?}");
    ann.simple_query("SELECT 1")
        .await
        .expect("the connection goes on");
    let e = ann
        .copy_in::<_, bytes::Bytes>("COPY secrets FROM STDIN")
        .await
        .err()
        .expect("denied");
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e:?}");
    // tokio-postgres pipelines a Sync behind the COPY and another behind the CopyFail it
    // sends when the COPY fails to start; PostgreSQL answers both with ReadyForQuery,
    // which leaves this client's connection out of step. Start a new one.
    let ann = pg_connect(port, "ann", "ann-pw")
        .await
        .expect("ann logs in");
    let root = pg_connect(port, "cairn", "root-pw").await.unwrap();
    root.simple_query("GRANT SELECT ON secrets TO ann")
        .await
        .unwrap();
    let rows = ann.query("SELECT v FROM secrets", &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, String>(0), "x");
    let out = ann.copy_out("COPY secrets TO STDOUT").await.unwrap();
    futures::pin_mut!(out);
    let mut text = Vec::new();
    while let Some(chunk) = futures::StreamExt::next(&mut out).await {
        text.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(text, b"1\tx\n");
    let e = ann
        .copy_in::<_, bytes::Bytes>("COPY secrets FROM STDIN")
        .await
        .err()
        .expect("denied");
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e:?}");
    // Failed logins are rate-limited: after five, even the right password waits.
    for _ in 0..5 {
        assert!(pg_connect(port, "carl", "guess").await.is_err());
    }
    q(&admin, "CREATE USER carl PASSWORD 'carl-pw'").await;
    let e = pg_connect(port, "carl", "carl-pw").await.unwrap_err();
    assert!(format!("{e:?}").contains("too many failed logins"), "{e:?}");

    // Flight SQL: the handshake's basic auth, then a bearer token.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = cairn_flightsql::FlightOptions {
        auth_required: true,
        ..Default::default()
    };
    tokio::spawn(cairn_flightsql::serve(
        engine,
        listener,
        opts,
        std::future::pending(),
    ));
    let client = || async move {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        FlightSqlServiceClient::new(channel)
    };
    let mut anon = client().await;
    let e = format!(
        "{:?}",
        anon.execute("SELECT 1".into(), None).await.unwrap_err()
    );
    assert!(e.contains("Unauthenticated"), "{e}");
    let mut bad = client().await;
    assert!(bad.handshake("ann", "wrong").await.is_err());
    let mut forged = client().await;
    forged.set_token("not-a-token".into());
    let e = format!(
        "{:?}",
        forged.execute("SELECT 1".into(), None).await.unwrap_err()
    );
    assert!(e.contains("Unauthenticated"), "{e}");
    let mut flight_ann = client().await;
    flight_ann.handshake("ann", "ann-pw").await.unwrap();
    flight_ann
        .execute("SELECT v FROM secrets".into(), None)
        .await
        .expect("granted");
    let e = format!(
        "{:?}",
        flight_ann
            .execute_update("INSERT INTO secrets VALUES (2, 'y')".into(), None)
            .await
            .unwrap_err()
    );
    assert!(e.contains("42501") && e.contains("PermissionDenied"), "{e}");
    root.simple_query("REVOKE SELECT ON secrets FROM ann")
        .await
        .unwrap();
    // The user list is cached for up to a second on this server.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let e = format!(
        "{:?}",
        flight_ann
            .execute("SELECT v FROM secrets".into(), None)
            .await
            .unwrap_err()
    );
    assert!(e.contains("42501"), "{e}");
}
