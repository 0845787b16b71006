//! Distributed SQL on real processes: a master serving PostgreSQL clients and
//! `cairn tserver`s each hosting a worker. Queries run as tasks on the servers'
//! workers; the tests kill a server mid-way, count which workers exchange rows
//! with which, and which write the rows of an `INSERT … SELECT`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cairn_client::Client;
use common::*;

/// Distributed SQL on real processes: a master serving PostgreSQL clients and three
/// `cairn tserver`s, each hosting a worker, as the master does. A query runs as
/// tasks on all three servers and the master (the stages above the scans, since
/// it holds no tablets), each where EXPLAIN says (the master's
/// `cairn_worker_tasks_total` counts its tasks); right after a server is killed
/// (SIGKILL) the query still answers (its task fails and
/// the query runs again at the same snapshot), and once the master has noticed, it
/// runs distributed over the two servers left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distributed_queries_on_tserver_processes_survive_a_kill() {
    // Every process and the folder are bound, so they live as long as the test.
    let Cluster {
        dir: _dir,
        _master,
        master_addr,
        mut tservers,
        addrs,
        master_web,
        db,
        ..
    } = Cluster::start(3).await;
    db.batch_execute(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, g INT NOT NULL, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 6 WITH (replicas = 3)",
    )
    .await
    .unwrap();
    db.batch_execute("INSERT INTO t SELECT i, i % 7, i FROM generate_series(1, 20000) AS s(i)")
        .await
        .unwrap();
    let expected: Vec<(i32, i64, i64)> = (0..7)
        .map(|g| {
            let ks: Vec<i64> = (1..=20000).filter(|k| k % 7 == g as i64).collect();
            (g, ks.len() as i64, ks.iter().sum())
        })
        .collect();
    let sql = "SELECT g, count(*), sum(v) FROM t GROUP BY g ORDER BY g";
    let answer = || async {
        db.query(sql, &[])
            .await
            .unwrap()
            .iter()
            // sum(BIGINT) is a BIGINT in Cairn (DataFusion), not PostgreSQL's numeric.
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect::<Vec<(i32, i64, i64)>>()
    };
    let explain = || explain(&db, sql);
    // The front end learns of the workers from the master within seconds.
    wait_for(
        Duration::from_secs(30),
        "tasks on all three servers",
        || async {
            let plan = explain().await;
            addrs.iter().all(|a| plan.contains(&format!("at={a}")))
        },
    )
    .await;
    // EXPLAIN names the server of every task, the stages above the scans too, and
    // queries run their tasks there. Those stages go round the workers in turn,
    // starting at a place fixed by the plan, so once the front end has probed the
    // master's worker, some stage of one of these queries has a task on it (never
    // a scan: the master holds no tablets), and running the query makes the
    // master's worker run as many fragments as EXPLAIN lists for it.
    let tasks_on_master = || {
        let metrics = http_get(&master_web, "/metrics");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("cairn_worker_tasks_total "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no cairn_worker_tasks_total in\n{metrics}"))
    };
    let listed_for = |plan: &str, addr: &str| -> u64 {
        plan.lines()
            .filter_map(|l| l.split_once("── Servers:"))
            .flat_map(|(_, servers)| servers.split_whitespace())
            .filter(|s| s.split_once('=').is_some_and(|(_, a)| a == addr))
            .count() as u64
    };
    let candidates = [
        sql,
        "SELECT n, count(*) FROM (SELECT g, count(*) AS n FROM t GROUP BY g) s GROUP BY n",
        "SELECT a.g, count(*) FROM t a JOIN t b ON a.v = b.k GROUP BY a.g",
    ];
    let mut on_master = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while on_master.is_none() {
        for q in candidates {
            let plan = self::explain(&db, q).await;
            for header in plan.lines().filter(|l| l.contains("─ Stage ")) {
                assert!(header.contains("── Servers: t0="), "{plan}");
            }
            assert!(!plan.contains(&format!("at={master_addr}")), "{plan}");
            if listed_for(&plan, &master_addr) > 0 {
                on_master = Some((q, plan));
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "EXPLAIN lists no task on the master ({master_addr}) after 30 s:\n{}",
            explain().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (q, plan) = on_master.unwrap();
    // EXPLAIN ANALYZE names the same servers, the ones the tasks ran on.
    let servers = |plan: &str| -> Vec<String> {
        plan.lines()
            .filter_map(|l| l.split_once("── Servers:"))
            .map(|(head, servers)| {
                let stage = head.split("─ Stage ").nth(1).unwrap_or("?");
                let stage = stage.split_whitespace().next().unwrap_or("?");
                let at: Vec<&str> = servers
                    .split(" plan_")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .collect();
                format!("{stage}: {}", at.join(" "))
            })
            .collect()
    };
    let analyzed: String = db
        .query(&format!("EXPLAIN ANALYZE {q}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(1))
        .collect::<Vec<String>>()
        .join("\n");
    assert!(analyzed.contains("output_rows="), "{analyzed}");
    assert!(!servers(&plan).is_empty(), "{plan}");
    assert_eq!(servers(&analyzed), servers(&plan), "{analyzed}\n{plan}");
    let before = tasks_on_master();
    db.query(q, &[]).await.unwrap();
    assert_eq!(
        tasks_on_master() - before,
        listed_for(&plan, &master_addr),
        "{plan}"
    );
    // Fragments share their worker's channels to the other workers: queries after
    // the first open no new connections (each fragment used to dial the tasks it
    // reads from again, leaving idle connections behind).
    let plan = explain().await;
    assert!(plan.contains("NetworkShuffleExec"), "{plan}");
    let sockets = |ps: &[Proc]| ps.iter().map(open_sockets).sum::<usize>();
    for _ in 0..3 {
        answer().await;
    }
    let before = sockets(&tservers);
    for _ in 0..20 {
        assert_eq!(answer().await, expected);
    }
    let after = sockets(&tservers);
    assert!(
        after <= before + 12,
        "the tablet servers went from {before} to {after} open sockets over 20 queries"
    );
    tservers[1].kill9();
    assert_eq!(answer().await, expected, "right after a server was killed");
    wait_for(
        Duration::from_secs(30),
        "tasks on the two servers left",
        || async {
            let plan = explain().await;
            plan.contains("DistributedExec") && !plan.contains(&addrs[1])
        },
    )
    .await;
    assert_eq!(answer().await, expected, "over the two servers left");
}

/// HRDBMS's N_max on real processes: five tablet servers and a master serving
/// PostgreSQL clients, six workers. With `SET cairn.n_max = 4` a shuffle, a shuffled join, a
/// merge, a colocated join, a gather and an INSERT … SELECT answer as without the bound, and the
/// exchanges every process reports on its `/metrics` (the workers it read rows
/// from) form a graph in which no process has more than four neighbours; without
/// the bound the same queries give some process five.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distributed_queries_keep_to_n_max_neighbours() {
    let Cluster {
        dir,
        _master,
        master_addr,
        tservers: _tservers,
        addrs,
        webs,
        master_web: m_web,
        db,
    } = Cluster::start(5).await;
    db.batch_execute(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, g INT NOT NULL, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 10 WITH (replicas = 3); \
         CREATE TABLE u (k BIGINT PRIMARY KEY, w BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 10 WITH (replicas = 3); \
         INSERT INTO t SELECT i, i % 7, i * 3 FROM generate_series(1, 5000) AS s(i); \
         INSERT INTO u SELECT i, i * 6 FROM generate_series(1, 5000, 2) AS s(i)",
    )
    .await
    .unwrap();
    let queries = [
        "SELECT g, count(*), sum(v) FROM t GROUP BY g ORDER BY g",
        "SELECT t.g, count(*) FROM t JOIN u ON t.v * 2 = u.w GROUP BY t.g ORDER BY t.g",
        "SELECT k, v FROM t ORDER BY v DESC LIMIT 5",
        "SELECT count(*), sum(u.w) FROM t JOIN u ON t.k = u.k",
        "SELECT k FROM t WHERE v % 1000 = 3 ORDER BY k",
    ];
    let run = |bound: usize| {
        let db = &db;
        async move {
            db.batch_execute(&format!("SET cairn.n_max = {bound}"))
                .await
                .unwrap();
            let mut answers = vec![];
            for q in queries {
                let rows = db.query(q, &[]).await.unwrap();
                answers.push(format!(
                    "{:?}",
                    rows.iter().map(row_text).collect::<Vec<_>>()
                ));
            }
            answers
        }
    };
    // The front end learns of all five workers from the master within seconds.
    wait_for(
        Duration::from_secs(30),
        "tasks on all five servers",
        || async {
            let plan = explain(&db, queries[0]).await;
            addrs.iter().all(|a| plan.contains(&format!("at={a}")))
        },
    )
    .await;
    let plan = {
        db.batch_execute("SET cairn.n_max = 4").await.unwrap();
        explain(&db, queries[1]).await
    };
    assert!(plan.contains("NetworkShuffleExec"), "{plan}");
    // EXPLAIN draws every stage, those below the relays too, each with the servers
    // of its tasks.
    for q in queries {
        let plan = explain(&db, q).await;
        assert!(plan.contains("CairnScanExec"), "{plan}");
        let headers: Vec<&str> = plan.lines().filter(|l| l.contains("─ Stage ")).collect();
        assert!(!headers.is_empty(), "{plan}");
        for header in headers {
            assert!(header.contains("── Servers: t0="), "{plan}");
        }
    }
    let bounded = run(4).await;
    // An INSERT … SELECT under the bound: its shares answer through the relays.
    db.batch_execute(
        "CREATE TABLE w (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 10 WITH (replicas = 3)",
    )
    .await
    .unwrap();
    let insert = "INSERT INTO w SELECT k, v FROM t";
    let plan = explain(&db, insert).await;
    assert!(plan.contains("CairnCommitExec"), "{plan}");
    assert_eq!(db.execute(insert, &[]).await.unwrap(), 5000);
    let processes: Vec<(String, String)> = std::iter::once((master_addr.clone(), m_web.clone()))
        .chain(addrs.iter().cloned().zip(webs.iter().cloned()))
        .collect();
    let graph = exchanges(&processes);
    for (node, peers) in &graph {
        assert!(
            peers.len() <= 4,
            "with cairn.n_max = 4, {node} exchanged rows with {peers:?}\n{plan}"
        );
    }
    assert!(
        graph.len() >= 5,
        "too few processes exchanged rows: {graph:?}"
    );
    // They ran distributed, not again in the front end after a failure.
    let log = std::fs::read_to_string(dir.path().join("m.log")).unwrap();
    assert!(!log.contains("running it here"), "{log}");
    // The same queries without the bound: the same answers, all-to-all exchanges.
    let unbounded = run(0).await;
    assert_eq!(bounded, unbounded);
    assert!(bounded[0].contains("714"), "{}", bounded[0]);
    let graph = exchanges(&processes);
    assert!(
        graph.values().any(|peers| peers.len() > 4),
        "without the bound no process has more than four neighbours: {graph:?}"
    );
}

/// `INSERT … SELECT` and `CREATE TABLE AS` on real processes write each row from
/// the tablet server whose worker produced it: the rows the workers report writing
/// on their `/metrics` add up to the statement's, and come from several servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insert_select_and_create_table_as_write_from_the_workers() {
    let Cluster {
        dir: _dir,
        _master,
        tservers: _tservers,
        addrs,
        webs,
        db,
        ..
    } = Cluster::start(3).await;
    db.batch_execute(
        "CREATE TABLE src (k BIGINT PRIMARY KEY, g INT NOT NULL, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 6 WITH (replicas = 3); \
         CREATE TABLE dst (k BIGINT PRIMARY KEY, g INT NOT NULL, v BIGINT NOT NULL) \
         PARTITION BY HASH (k) PARTITIONS 6 WITH (replicas = 3); \
         INSERT INTO src SELECT i, i % 7, i FROM generate_series(1, 9000) AS s(i)",
    )
    .await
    .unwrap();
    let insert = "INSERT INTO dst SELECT k, g, v * 2 FROM src";
    wait_for(
        Duration::from_secs(30),
        "shares on all three servers",
        || async {
            let plan = explain(&db, insert).await;
            plan.contains("CairnWriteShareExec")
                && addrs.iter().all(|a| plan.contains(&format!("at={a}")))
        },
    )
    .await;
    let written = || {
        webs.iter()
            .map(|w| {
                http_get(w, "/metrics")
                    .lines()
                    .find_map(|l| l.strip_prefix("cairn_worker_rows_written_total "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .expect("cairn_worker_rows_written_total on /metrics")
            })
            .collect::<Vec<u64>>()
    };
    let before = written();
    assert_eq!(db.execute(insert, &[]).await.unwrap(), 9000);
    let after = written();
    let by_server: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(by_server.iter().sum::<u64>(), 9000, "{by_server:?}");
    assert!(
        by_server.iter().filter(|n| **n > 0).count() >= 2,
        "one server wrote every row: {by_server:?}"
    );
    let row = db
        .query_one("SELECT count(*), sum(v) FROM dst", &[])
        .await
        .unwrap();
    let sum: i64 = (1..=9000i64).sum();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (9000, 2 * sum)
    );

    let before = written();
    assert_eq!(
        db.execute("CREATE TABLE c AS SELECT k, v FROM src WHERE g < 3", &[])
            .await
            .unwrap(),
        3857
    );
    let after = written();
    let by_server: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(by_server.iter().sum::<u64>(), 3857, "{by_server:?}");
    let row = db.query_one("SELECT count(*) FROM c", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 3857);
}

/// A master serving PostgreSQL clients and `cairn tserver` processes, each with a
/// web page, all live; connected to.
struct Cluster {
    /// The processes' folders and logs (`m.log` is the master's).
    dir: tempfile::TempDir,
    _master: Proc,
    /// The master's RPC address (its worker's).
    master_addr: String,
    tservers: Vec<Proc>,
    /// The tablet servers' RPC addresses (their workers').
    addrs: Vec<String>,
    /// The tablet servers' web addresses, in the same order.
    webs: Vec<String>,
    master_web: String,
    /// A PostgreSQL connection to the master.
    db: tokio_postgres::Client,
}

impl Cluster {
    /// A cluster of `n` tablet servers, once the master sees them all live.
    async fn start(n: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let (m, pg, master_web) = (reserve_addr(), reserve_addr(), reserve_addr());
        let master = master_proc_with(
            &dir.path().join("m"),
            &m,
            &[],
            dir.path().join("m.log"),
            &["--pg-addr", &pg, "--web-addr", &master_web],
        );
        let addrs: Vec<String> = (0..n).map(|_| reserve_addr()).collect();
        let webs: Vec<String> = (0..n).map(|_| reserve_addr()).collect();
        let tservers = (0..n)
            .map(|i| {
                tserver_proc_with(
                    &dir.path().join(format!("t{i}")),
                    &addrs[i],
                    std::slice::from_ref(&m),
                    dir.path().join(format!("t{i}.log")),
                    &["--web-addr", &webs[i]],
                )
            })
            .collect();
        let client = Client::connect(std::slice::from_ref(&m)).await.unwrap();
        // The front end lists the master's worker once it answers, within seconds.
        wait_live_servers(&client, n, Duration::from_secs(30)).await;
        let db = pg_connect(&pg).await;
        Cluster {
            dir,
            _master: master,
            master_addr: m,
            tservers,
            addrs,
            webs,
            master_web,
            db,
        }
    }
}

/// A row of text, integer and numeric columns as text.
fn row_text(row: &tokio_postgres::Row) -> String {
    (0..row.len())
        .map(|i| {
            row.try_get::<_, i64>(i)
                .map(|v| v.to_string())
                .or_else(|_| row.try_get::<_, i32>(i).map(|v| v.to_string()))
                .unwrap_or_else(|_| "?".into())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// EXPLAIN of `sql`: its physical plan's text.
async fn explain(db: &tokio_postgres::Client, sql: &str) -> String {
    db.query(&format!("EXPLAIN {sql}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(1))
        .collect::<Vec<String>>()
        .join("\n")
}

/// Who exchanged a distributed query's rows with whom: for each of `processes`
/// (a name and its web address; a tablet server is named by its RPC address, as
/// workers are), the workers it read rows from, as its `/metrics` lists them,
/// and those that read from it. Calls to a process's own worker do not count.
fn exchanges(processes: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, web) in processes {
        let metrics = http_get(web, "/metrics");
        for line in metrics.lines() {
            let Some(rest) = line.strip_prefix("cairn_worker_peer{kind=\"data\",peer=\"") else {
                continue;
            };
            let peer = rest.split('"').next().unwrap().to_string();
            if peer != *name {
                graph.entry(name.clone()).or_default().insert(peer.clone());
                graph.entry(peer).or_default().insert(name.clone());
            }
        }
    }
    graph
}

/// The body of `GET path` on the plain HTTP server at `addr`.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
}

/// A PostgreSQL connection to the front end at `pg`, retried for 30 s while it
/// starts.
async fn pg_connect(pg: &str) -> tokio_postgres::Client {
    let t0 = Instant::now();
    loop {
        match tokio_postgres::connect(
            &format!(
                "host=127.0.0.1 port={} user=cairn dbname=cairn",
                port_of(pg)
            ),
            tokio_postgres::NoTls,
        )
        .await
        {
            Ok((db, conn)) => {
                tokio::spawn(conn);
                return db;
            }
            Err(e) if t0.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no PostgreSQL front end on {pg}: {e}"),
        }
    }
}

/// The sockets process `p` holds open (its descriptors that are sockets).
fn open_sockets(p: &Proc) -> usize {
    let pid = p.child.as_ref().expect("a running process").id();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}
