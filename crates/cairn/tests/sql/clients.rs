//! Real clients against the SQL front ends: `psql`, Python `psycopg` 3, the pgJDBC
//! driver, and the Python ADBC Flight SQL driver. The scripts live in
//! `tests/clients/`. A client that is not installed skips its part, except under CI
//! (`CI=true`), where `.ci/run` installs them all and a missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{common::reserve_port, sql_cluster};

fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The Python with psycopg and the ADBC driver: $CAIRN_PYTHON or the CI venv.
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = PathBuf::from(std::env::var_os("HOME")?).join(".cache/cairn-venv/bin/python");
    venv.exists().then_some(venv)
}

fn available(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a client; returns false if it is not installed (and not required).
fn run_client(what: &str, program: &Path, args: &[&str]) -> bool {
    if !available(program) {
        assert!(
            std::env::var("CI").is_err(),
            "{what}: {} is not installed (CI must install it: see .ci/run)",
            program.display()
        );
        eprintln!("skipping {what}: {} is not installed", program.display());
        return false;
    }
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed:\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// Serves PostgreSQL clients on a fresh port; returns it.
async fn serve_pg(engine: &cairn_sql::SqlEngine) -> u16 {
    let port = reserve_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(cairn_pgwire::serve(
        engine.clone(),
        listener,
        cairn_pgwire::PgOptions::default(),
        std::future::pending(),
    ));
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn psql_psycopg_jdbc_and_adbc() {
    let (_cl, engine) = sql_cluster(1).await;
    let pg_port = serve_pg(&engine).await;
    let flight_port = reserve_port();
    let flight = tokio::net::TcpListener::bind(("127.0.0.1", flight_port))
        .await
        .unwrap();
    tokio::spawn(cairn_flightsql::serve(
        engine.clone(),
        flight,
        cairn_flightsql::FlightOptions::default(),
        std::future::pending(),
    ));
    let port = pg_port.to_string();
    let dir = scripts();
    let smoke = dir.join("smoke.sql");
    let results = [
        (
            "psql",
            run_client(
                "psql",
                Path::new("psql"),
                &[
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-X",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "cairn",
                    "-f",
                    smoke.to_str().unwrap(),
                    "cairn",
                ],
            ),
        ),
        (
            "jdbc",
            run_client(
                "pgJDBC",
                Path::new("java"),
                &[
                    "-cp",
                    "/usr/share/java/postgresql.jar",
                    dir.join("JdbcSmoke.java").to_str().unwrap(),
                    &port,
                ],
            ),
        ),
    ];
    let py = python();
    let mut ran = results.iter().filter(|(_, r)| *r).count();
    match &py {
        Some(py) => {
            ran += run_client(
                "psycopg",
                py,
                &[dir.join("psycopg_smoke.py").to_str().unwrap(), &port],
            ) as usize;
            ran += run_client(
                "SQLAlchemy and pandas",
                py,
                &[dir.join("sqlalchemy_smoke.py").to_str().unwrap(), &port],
            ) as usize;
            ran += run_client(
                "ADBC Flight SQL",
                py,
                &[
                    dir.join("adbc_smoke.py").to_str().unwrap(),
                    &flight_port.to_string(),
                ],
            ) as usize;
        }
        None => assert!(
            std::env::var("CI").is_err(),
            "no Python venv with psycopg, SQLAlchemy, pandas and adbc-driver-flightsql (see .ci/run)"
        ),
    }
    eprintln!("{ran} clients ran");
}

/// psql's describe commands (`\\d`, `\\d+`, `\\di`, `\\df`, `\\dt`, `\\l`, `\\dn`) work
/// and find Cairn's primary keys (in `pg_index`, `pg_constraint` and the key's index
/// relation in `pg_class`), so does `information_schema`; a table without a key keeps
/// duplicates; CREATE INDEX says it made no index; a savepoint around a failed read
/// rolls back as in PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn psql_describe_shows_primary_keys() {
    if !available(Path::new("psql")) {
        assert!(
            std::env::var("CI").is_err(),
            "psql is not installed (CI must install it: see .ci/run)"
        );
        eprintln!("skipping: psql is not installed");
        return;
    }
    let (_cl, engine) = sql_cluster(1).await;
    let pg_port = serve_pg(&engine).await;
    let port = pg_port.to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "cairn", "-X", "-v"])
            .arg("ON_ERROR_STOP=1")
            .args([
                "-c",
                "CREATE TABLE described (region TEXT, id BIGINT, v DOUBLE PRECISION, \
                 PRIMARY KEY (id, region))",
                "-c",
                "\\d described",
                "-c",
                "\\di",
                "-c",
                "\\df",
                "-c",
                "SELECT conname, conkey, pg_get_constraintdef(oid) FROM pg_constraint \
                 WHERE conrelid = 'described'::regclass",
                "-c",
                "\\d+ described",
                "-c",
                "\\dt",
                "-c",
                "\\l",
                "-c",
                "\\dn",
                "-c",
                "SELECT string_agg(kcu.column_name, ',' ORDER BY kcu.ordinal_position) AS pk \
                 FROM information_schema.table_constraints tc \
                 JOIN information_schema.key_column_usage kcu \
                 ON tc.constraint_name = kcu.constraint_name \
                 WHERE tc.table_name = 'described' AND tc.constraint_type = 'PRIMARY KEY'",
                "-c",
                "CREATE TABLE keyless (a TEXT, b INT)",
                "-c",
                "CREATE INDEX keyless_a ON keyless (a)",
                "-c",
                "INSERT INTO keyless VALUES ('x', 1), ('x', 1)",
                "-c",
                "\\d keyless",
                "-c",
                "SELECT count(*), max(b) AS most FROM keyless",
                "-c",
                "BEGIN",
                "-c",
                "SAVEPOINT a",
                "-c",
                "ROLLBACK TO SAVEPOINT a",
                "-c",
                "COMMIT",
                "cairn",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "psql failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "\"described_pkey\" PRIMARY KEY, btree (id, region)",
        "described_pkey | index",
        "List of functions",
        "described_pkey | {2,1}  | PRIMARY KEY (id, region)",
        // \d+ (storage and description columns), \dt, \l, \dn.
        "| Storage  |",
        "| described | table |",
        "List of databases",
        "List of schemas",
        // The key through information_schema, in key order.
        " id,region\n",
        // A table without a key: duplicates kept, the hidden key not shown.
        "INSERT 0 2",
        "Table \"public.keyless\"",
        // Unaliased function calls are named as PostgreSQL names them.
        " count | most \n-------+------\n     2 |    1\n",
        "ROLLBACK",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in:\n{stdout}");
    }
    assert!(
        !stdout.contains("auto_incrementing_id"),
        "the hidden key is shown:\n{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NOTICE:  Cairn has no secondary indexes"),
        "CREATE INDEX says it made no index:\n{stderr}"
    );
}
