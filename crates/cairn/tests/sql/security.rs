//! The PostgreSQL front end with TLS, SCRAM-SHA-256 and privileges, through `psql` as
//! a user runs it: `sslmode=verify-full` against the cluster CA succeeds, a wrong
//! password fails, a plaintext connection is refused, a client trusting another CA
//! refuses the server, and a user without SELECT gets SQLSTATE 42501 until granted it.
//! `psql` missing skips the test, except under CI (`CI=true`). Distributed queries on
//! a TLS cluster, whose workers admit only the cluster's servers.

use std::path::Path;
use std::process::{Command, Output};

use cairn_sql::SqlEngine;
use cairn_sql::distributed::ClusterWorkers;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};

use crate::common::{InProc, make_certs, tls_of};
use crate::{serve_pg, sql_cluster, strings};

fn psql(conninfo: &str, password: &str, sql: &str) -> Output {
    Command::new("psql")
        .arg(conninfo)
        .args(["-X", "-A", "-t", "-v", "VERBOSITY=verbose", "-c", sql])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql runs")
}

fn psql_available() -> bool {
    let ok = Command::new("psql")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || std::env::var("CI").is_err(),
        "psql is not installed (CI must install it: see .ci/run)"
    );
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn psql_tls_verify_full_and_passwords() {
    if !psql_available() {
        eprintln!("skipping: psql is not installed");
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path(), &["node"]);
    let other = tempfile::tempdir().unwrap();
    make_certs(other.path(), &["x"]);
    let (_cl, engine) = sql_cluster(1).await;
    let admin = engine.session();
    for sql in [
        "ALTER USER cairn PASSWORD 's3cret'",
        "CREATE USER ann WITH PASSWORD 'änn-pw'",
        "CREATE TABLE secrets (id BIGINT PRIMARY KEY, v TEXT)",
        "INSERT INTO secrets VALUES (1, 'x')",
    ] {
        admin.execute(sql).await.unwrap();
    }
    let opts = cairn_pgwire::PgOptions {
        auth: cairn_pgwire::PgAuth::ScramSha256,
        tls: Some(tls_of(certs.path(), "node")),
        ..Default::default()
    };
    let port = serve_pg(engine, opts).await;
    let conninfo_as = |user: &str, host: &str, mode: &str, ca: &Path| {
        format!(
            "host={host} port={port} user={user} dbname=cairn sslmode={mode} sslrootcert={}",
            ca.join("ca.pem").display()
        )
    };
    let conninfo = |host: &str, mode: &str, ca: &Path| conninfo_as("cairn", host, mode, ca);
    let text = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let ca = certs.path();
    // Run psql off the runtime's worker threads: the server runs on them.
    let run_sql = |conninfo: String, password: &'static str, sql: &'static str| {
        tokio::task::spawn_blocking(move || psql(&conninfo, password, sql))
    };
    let run =
        |conninfo: String, password: &'static str| run_sql(conninfo, password, "SELECT 40 + 2");
    for (host, mode) in [
        ("localhost", "verify-full"),
        ("127.0.0.1", "verify-full"),
        ("localhost", "require"),
    ] {
        let o = run(conninfo(host, mode, ca), "s3cret").await.unwrap();
        assert!(o.status.success(), "{host} {mode}: {}", text(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "42");
    }
    let o = run(conninfo("localhost", "verify-full", ca), "wrong")
        .await
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("password authentication failed"),
        "{}",
        text(&o)
    );
    let o = run(conninfo("localhost", "disable", ca), "s3cret")
        .await
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("requires TLS"), "{}", text(&o));
    let o = run(conninfo("localhost", "verify-full", other.path()), "s3cret")
        .await
        .unwrap();
    assert!(
        !o.status.success(),
        "a client trusting another CA accepted the server"
    );
    assert!(
        text(&o).contains("certificate verify failed"),
        "{}",
        text(&o)
    );
    // SCRAM as another user; a wrong password for them fails too.
    let ann = conninfo_as("ann", "localhost", "verify-full", ca);
    let o = run(ann.clone(), "änn-pw").await.unwrap();
    assert!(o.status.success(), "ann: {}", text(&o));
    let o = run(ann.clone(), "s3cret").await.unwrap();
    assert!(
        text(&o).contains("password authentication failed"),
        "{}",
        text(&o)
    );
    let o = run(conninfo_as("nobody", "localhost", "verify-full", ca), "x")
        .await
        .unwrap();
    assert!(
        text(&o).contains("password authentication failed"),
        "{}",
        text(&o)
    );
    // Privileges: nothing until granted, then exactly what was granted.
    let select = "SELECT v FROM secrets";
    let o = run_sql(ann.clone(), "änn-pw", select).await.unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("42501"), "{}", text(&o));
    assert!(
        text(&o).contains("permission denied for table secrets"),
        "{}",
        text(&o)
    );
    let o = run_sql(
        conninfo("localhost", "verify-full", ca),
        "s3cret",
        "GRANT SELECT ON secrets TO ann",
    )
    .await
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = run_sql(ann.clone(), "änn-pw", select).await.unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "x");
    let o = run_sql(ann.clone(), "änn-pw", "INSERT INTO secrets VALUES (2, 'y')")
        .await
        .unwrap();
    assert!(text(&o).contains("42501"), "{}", text(&o));
    let o = run_sql(ann.clone(), "änn-pw", "CREATE USER eve PASSWORD 'e'")
        .await
        .unwrap();
    assert!(text(&o).contains("42501"), "{}", text(&o));
}

/// Distributed SQL on a cluster with mutual TLS: the coordinator and the workers dial
/// each other with their node certificates, and a query runs as tasks on all three
/// servers without falling back to the front end; a caller holding no cluster
/// certificate cannot reach a worker (a fragment reads with the server's rights).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distributed_queries_on_a_tls_cluster() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path(), &["node"]);
    let cl = InProc::start_tls_with_workers(3, tls_of(certs.path(), "node")).await;
    let engine = SqlEngine::new(cl.client().await)
        .unwrap()
        .with_workers(ClusterWorkers::fixed(&cl.ts_addrs));
    let s = engine.session();
    s.query(
        "CREATE TABLE tls_t (k BIGINT PRIMARY KEY, g INT NOT NULL, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 6",
    )
    .await
    .unwrap();
    s.query("INSERT INTO tls_t SELECT i, i % 5, i FROM generate_series(1, 3000) AS s(i)")
        .await
        .unwrap();
    let sql = "SELECT g, count(*), sum(v) FROM tls_t GROUP BY g ORDER BY g";
    let plan: String = strings(&s.query(&format!("EXPLAIN {sql}")).await.unwrap())
        .iter()
        .filter(|r| r[0] == "physical_plan")
        .map(|r| r[1].clone())
        .collect();
    assert!(plan.contains("DistributedExec"), "{plan}");
    for addr in &cl.ts_addrs {
        assert!(plan.contains(addr.as_str()), "{addr} runs no task:\n{plan}");
    }
    let expected: Vec<Vec<String>> = (0..5)
        .map(|g| {
            let ks: Vec<i64> = (1..=3000).filter(|k| k % 5 == g).collect();
            vec![
                g.to_string(),
                ks.len().to_string(),
                ks.iter().sum::<i64>().to_string(),
            ]
        })
        .collect();
    assert_eq!(strings(&s.query(sql).await.unwrap()), expected);
    assert_eq!(
        engine.workers().unwrap().reruns(),
        0,
        "the query failed on the workers and ran again"
    );

    // A worker admits the cluster's servers only.
    let worker_info = |tls: std::sync::Arc<cairn_proto::TlsConfig>| {
        let addr = cl.ts_addrs[0].clone();
        async move {
            let channel = cairn_proto::tls::endpoint(&addr, Some(&tls))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut worker = create_worker_client(BoxCloneSyncChannel::new(channel));
            worker
                .get_worker_info(datafusion_distributed::GetWorkerInfoRequest {})
                .await
        }
    };
    let ca_only = cairn_proto::TlsConfig::ca_only(&certs.path().join("ca.pem")).unwrap();
    let e = worker_info(ca_only)
        .await
        .err()
        .expect("a caller without a certificate");
    assert!(e.to_string().contains("signed by the cluster CA"), "{e}");
    worker_info(tls_of(certs.path(), "node"))
        .await
        .expect("a caller with a cluster certificate");
}
