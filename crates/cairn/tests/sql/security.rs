//! The PostgreSQL front end with TLS and passwords, through `psql` as a user runs it:
//! `sslmode=verify-full` against the cluster CA succeeds, a wrong password fails, a
//! plaintext connection is refused, and a client trusting another CA refuses the
//! server. `psql` missing skips the test, except under CI (`CI=true`).

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{make_certs, tls_of};
use crate::sql_cluster;

fn psql(conninfo: &str, password: &str) -> Output {
    Command::new("psql")
        .arg(conninfo)
        .args(["-X", "-A", "-t", "-c", "SELECT 40 + 2"])
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
    let listener = cairn_sql::pg::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let opts = cairn_sql::pg::PgOptions {
        auth: cairn_sql::pg::PgAuth::Md5,
        password: Some("s3cret".into()),
        tls: Some(tls_of(certs.path(), "node")),
        ..Default::default()
    };
    tokio::spawn(cairn_sql::pg::serve(
        engine,
        listener,
        opts,
        std::future::pending(),
    ));
    let conninfo = |host: &str, mode: &str, ca: &Path| {
        format!(
            "host={host} port={port} user=cairn dbname=cairn sslmode={mode} sslrootcert={}",
            ca.join("ca.pem").display()
        )
    };
    let text = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let ca = certs.path();
    // Run psql off the runtime's worker threads: the server runs on them.
    let run = |conninfo: String, password: &'static str| {
        tokio::task::spawn_blocking(move || psql(&conninfo, password))
    };
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
}
