//! A live PostgreSQL front end under hostile input: malformed protocol messages on raw
//! sockets, then random SQL from a small grammar (sqlsmith-style: expressions,
//! functions, casts, joins, subqueries, aggregates, writes) for a fixed time
//! (`CAIRN_FUZZ_SECS`, default 3 s each). Every statement must be answered (rows or an
//! error) within its timeout, no connection may be lost to a server panic, and the
//! server must answer well-formed requests correctly afterwards.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::NoTls;

use crate::{q, serve_pg, sql_cluster};

/// A frontend message: type byte, length, body.
fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// A well-formed session: startup, a simple query, an extended-protocol round, and
/// Terminate.
fn transcript() -> Vec<u8> {
    transcript_with_limit(0)
}

/// [`transcript`] whose Execute asks for at most `max_rows` rows (0: all).
fn transcript_with_limit(max_rows: i32) -> Vec<u8> {
    let mut startup = vec![];
    startup.extend_from_slice(&196608u32.to_be_bytes());
    for s in ["user", "cairn", "database", "cairn", ""] {
        startup.extend_from_slice(s.as_bytes());
        startup.push(0);
    }
    let mut v = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&startup);
    v.extend(msg(b'Q', b"SELECT count(*) FROM h\0"));
    v.extend(msg(
        b'P',
        b"s1\0SELECT v FROM h WHERE id = $1\0\x00\x01\x00\x00\x00\x14",
    ));
    v.extend(msg(
        b'B',
        b"p1\0s1\0\x00\x01\x00\x01\x00\x01\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00",
    ));
    v.extend(msg(b'D', b"Pp1\0"));
    let mut execute = b"p1\0".to_vec();
    execute.extend_from_slice(&max_rows.to_be_bytes());
    v.extend(msg(b'E', &execute));
    v.extend(msg(b'S', b""));
    v.extend(msg(b'X', b""));
    v
}

fn mutate(rng: &mut StdRng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.random_range(1..=6) {
        if v.is_empty() {
            v.push(rng.random());
            continue;
        }
        let i = rng.random_range(0..v.len());
        match rng.random_range(0..6) {
            0 => v[i] ^= 1 << rng.random_range(0..8),
            1 => v[i] = rng.random(),
            2 => v.truncate(i),
            3 if i + 4 <= v.len() => {
                let big = [0x7fu8, 0xff, 0xff, 0xff];
                v[i..i + 4].copy_from_slice(&big);
            }
            4 => {
                let n = rng.random_range(1..32);
                let junk: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                v.splice(i..i, junk);
            }
            _ => {
                v.remove(i);
            }
        }
    }
    v
}

/// Random SQL over tables `h` (id BIGINT key, v TEXT, n DOUBLE) and `g` (k TEXT key,
/// c BIGINT).
struct SqlGen<'a> {
    rng: &'a mut StdRng,
    depth: u32,
}

impl SqlGen<'_> {
    fn pick<'s>(&mut self, xs: &[&'s str]) -> &'s str {
        xs[self.rng.random_range(0..xs.len())]
    }

    fn literal(&mut self) -> String {
        match self.rng.random_range(0..9) {
            0 => self.rng.random_range(-5i64..100).to_string(),
            1 => i64::MAX.to_string(),
            2 => format!("{:.3}", self.rng.random::<f64>() * 1e6 - 5e5),
            3 => "NULL".into(),
            4 => format!(
                "'{}'",
                self.pick(&["", "a", "x''y", "ü", "2024-01-01", "1e400", "NaN"])
            ),
            5 => self.pick(&["TRUE", "FALSE"]).into(),
            6 => "DATE '2024-02-29'".into(),
            7 => "TIMESTAMP '2024-01-01 00:00:00'".into(),
            _ => "-0.0".into(),
        }
    }

    fn expr(&mut self) -> String {
        self.depth += 1;
        let e = if self.depth > 4 {
            self.leaf()
        } else {
            match self.rng.random_range(0..12) {
                0 | 1 => self.leaf(),
                2 => format!(
                    "({} {} {})",
                    self.expr(),
                    self.pick(&[
                        "+", "-", "*", "/", "%", "||", "=", "<>", "<", ">=", "AND", "OR"
                    ]),
                    self.expr()
                ),
                3 => format!("NOT ({})", self.expr()),
                4 => format!(
                    "CAST({} AS {})",
                    self.expr(),
                    self.pick(&[
                        "BIGINT",
                        "INT",
                        "TEXT",
                        "DOUBLE PRECISION",
                        "BOOLEAN",
                        "DATE",
                        "TIMESTAMP",
                        "NUMERIC(10,2)",
                        "SMALLINT"
                    ])
                ),
                5 => format!(
                    "{}({})",
                    self.pick(&[
                        "abs", "lower", "upper", "length", "coalesce", "round", "sqrt", "ln",
                        "trim", "md5", "to_hex", "reverse"
                    ]),
                    self.expr()
                ),
                6 => format!(
                    "CASE WHEN {} THEN {} ELSE {} END",
                    self.expr(),
                    self.expr(),
                    self.expr()
                ),
                7 => format!("({} IS {}NULL)", self.expr(), self.pick(&["", "NOT "])),
                8 => format!(
                    "({} BETWEEN {} AND {})",
                    self.expr(),
                    self.expr(),
                    self.expr()
                ),
                9 => format!("({} IN ({}, {}))", self.expr(), self.expr(), self.expr()),
                10 => format!("(SELECT max(id) FROM h WHERE n > {})", self.expr()),
                _ => format!("substr({}, {}, {})", self.expr(), self.expr(), self.expr()),
            }
        };
        self.depth -= 1;
        e
    }

    fn leaf(&mut self) -> String {
        match self.rng.random_range(0..3) {
            0 => self.literal(),
            _ => self
                .pick(&["id", "v", "n", "h.id", "h.v", "g.k", "g.c"])
                .into(),
        }
    }

    fn statement(&mut self) -> String {
        match self.rng.random_range(0..10) {
            0 => format!(
                "INSERT INTO h VALUES ({}, {}, {})",
                self.rng.random_range(0..50),
                self.literal(),
                self.literal()
            ),
            1 => format!("UPDATE h SET n = {} WHERE {}", self.expr(), self.expr()),
            2 => format!("DELETE FROM h WHERE id > 1000 AND {}", self.expr()),
            3 => format!(
                "SELECT {}, count(*) FROM h GROUP BY 1 HAVING count(*) > {} ORDER BY 1 LIMIT {}",
                self.expr(),
                self.literal(),
                self.rng.random_range(0..20)
            ),
            4 => format!(
                "SELECT {} FROM h {} JOIN g ON {} WHERE {} LIMIT 50",
                self.expr(),
                self.pick(&["", "LEFT", "RIGHT", "FULL", "CROSS"])
                    .replace("CROSS", "INNER"),
                self.expr(),
                self.expr()
            ),
            5 => format!(
                "SELECT * FROM h WHERE id IN (SELECT c FROM g WHERE {}) ORDER BY id",
                self.expr()
            ),
            6 => format!("SELECT {} UNION ALL SELECT {}", self.expr(), self.expr()),
            7 => format!(
                "WITH x AS (SELECT {} AS a FROM h) SELECT a FROM x OFFSET {}",
                self.expr(),
                self.rng.random_range(0..5)
            ),
            8 => format!(
                "SELECT {} FROM h AS OF now() WHERE {}",
                self.expr(),
                self.expr()
            ),
            _ => format!(
                "SELECT {}, {} FROM h ORDER BY {} DESC NULLS FIRST LIMIT 10",
                self.expr(),
                self.expr(),
                self.expr()
            ),
        }
    }
}

/// The backend messages in `bytes` after the startup: (type byte, body) pairs.
fn backend_messages(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = vec![];
    let mut rest = bytes;
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if len < 4 || rest.len() < 1 + len {
            break;
        }
        out.push((rest[0], rest[5..1 + len].to_vec()));
        rest = &rest[1 + len..];
    }
    out
}

/// An Execute row limit is the client's to choose: a huge or negative one must be
/// served like "no limit" (PostgreSQL treats both so), not size an allocation. The
/// protocol fuzzer below once sent 0x7E000000 and the server aborted on an 84 GB
/// allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_or_negative_execute_row_limits_are_no_limit() {
    let (_cl, engine) = sql_cluster(1).await;
    let admin = engine.session();
    q(&admin, "CREATE TABLE h (id BIGINT PRIMARY KEY, v TEXT)").await;
    q(&admin, "INSERT INTO h VALUES (1, 'one')").await;
    let port = serve_pg(engine, cairn_pgwire::PgOptions::default()).await;
    for limit in [i32::MAX, 0x7E00_0000, 1 << 20, -1, i32::MIN] {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.write_all(&transcript_with_limit(limit)).await.unwrap();
        let mut got = vec![];
        tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut got))
            .await
            .unwrap_or_else(|_| panic!("limit {limit}: no end of session within 20 s"))
            .unwrap();
        let kinds: Vec<u8> = backend_messages(&got).iter().map(|m| m.0).collect();
        // After the extended round's Describe (T): one DataRow, then CommandComplete,
        // not PortalSuspended ('s') and not an error.
        let t = kinds
            .iter()
            .rposition(|&k| k == b'T')
            .expect("a RowDescription");
        assert_eq!(
            &kinds[t + 1..],
            b"DCZ",
            "limit {limit}: {:?}",
            String::from_utf8_lossy(&kinds)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_messages_and_random_sql_leave_the_server_serving() {
    let (_cl, engine) = sql_cluster(1).await;
    let admin = engine.session();
    q(
        &admin,
        "CREATE TABLE h (id BIGINT PRIMARY KEY, v TEXT, n DOUBLE)",
    )
    .await;
    q(&admin, "CREATE TABLE g (k TEXT PRIMARY KEY, c BIGINT)").await;
    q(
        &admin,
        "INSERT INTO h VALUES (1, 'one', 1.5), (2, 'two', NULL), (3, NULL, -2)",
    )
    .await;
    q(&admin, "INSERT INTO g VALUES ('a', 1), ('b', 3)").await;
    let port = serve_pg(engine, cairn_pgwire::PgOptions::default()).await;
    let seed: u64 = rand::random();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // Malformed protocol messages, each on its own connection.
    let good = transcript();
    let deadline = Instant::now() + crate::common::fuzz_budget();
    let mut sessions = 0;
    while Instant::now() < deadline {
        let bytes = if sessions == 0 {
            good.clone()
        } else {
            mutate(&mut rng, &good)
        };
        sessions += 1;
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let _ = s.write_all(&bytes).await;
        let mut buf = vec![0u8; 64 << 10];
        // Read what comes back until the server closes, or stop waiting: a message
        // whose length says more is coming may keep the server listening.
        let _ = tokio::time::timeout(Duration::from_millis(300), async {
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
    }
    eprintln!("{sessions} malformed sessions");

    // Random SQL through a real client.
    let connect = || async {
        let (c, conn) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={port} user=cairn dbname=cairn"),
            NoTls,
        )
        .await
        .expect("the server still accepts connections");
        tokio::spawn(conn);
        c.simple_query("SET statement_timeout = '5s'")
            .await
            .unwrap();
        c
    };
    let client = connect().await;
    let deadline = Instant::now() + crate::common::fuzz_budget();
    let (mut ok, mut failed) = (0, 0);
    while Instant::now() < deadline {
        let sql = SqlGen {
            rng: &mut rng,
            depth: 0,
        }
        .statement();
        match tokio::time::timeout(Duration::from_secs(20), client.simple_query(&sql)).await {
            Err(_) => panic!("no answer within 20 s to: {sql}"),
            Ok(Ok(_)) => ok += 1,
            Ok(Err(e)) => {
                failed += 1;
                assert!(e.code().is_some(), "the connection broke on: {sql}: {e:?}");
            }
        }
        assert!(
            !client.is_closed(),
            "the server dropped the connection on: {sql}"
        );
        if std::env::var("CAIRN_FUZZ_TRACE").is_ok() {
            let n = client
                .query("SELECT count(*) FROM h WHERE id <= 3", &[])
                .await
                .unwrap();
            eprintln!("{} rows <= 3 after: {sql}", n[0].get::<_, i64>(0));
        }
    }
    eprintln!("random SQL: {ok} answered with rows or a count, {failed} with an error");
    drop(client);

    // Well-formed requests still get right answers.
    let client = connect().await;
    let rows = client.query("SELECT count(*) FROM g", &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 2);
    let rows = client
        .query("SELECT v FROM h WHERE id = $1", &[&1i64])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
}
