//! Read-only stores on a real multi-process cluster: build from the catalog's ring,
//! push (with a tablet server killed mid-fetch and the leader master killed
//! mid-push), roll back, fail over lookups, a push that fails leaving the previous
//! version live, a tablet server and the leader master each killed mid-swap, and a
//! rebalance onto a tablet server added to the cluster. Readers run throughout and check that every answer is one
//! whole version's value and that no lookup fails while a replica is up. A second
//! test builds from and pushes through S3 (a moto server) and a web server.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_client::{Client, StoreReader};
use cairn_common::Value;
use common::*;

/// Rows in every version.
const ROWS: i64 = 3_000;
/// Seconds a push waits for an unreachable server (the masters' flag).
const GRACE_SECS: &str = "8";

/// The value tag of version `v`.
fn tag(v: u64) -> &'static str {
    match v {
        1 => "one",
        2 => "two",
        3 => "three",
        4 => "four",
        // Version 6 is the rebalance of version 5: the same data on a new ring.
        5 | 6 => "five",
        7 => "seven",
        _ => "unknown",
    }
}

/// Version `v`'s input: `{"id": i, "v": "<tag>-<i>"}` per line.
fn input_text(v: u64) -> String {
    let mut text = String::new();
    for i in 0..ROWS {
        text.push_str(&format!("{{\"id\": {i}, \"v\": \"{}-{i}\"}}\n", tag(v)));
    }
    text
}

/// Writes version `v`'s input and builds it with the ring from the catalog into `out`.
fn build_version(dir: &std::path::Path, masters: &str, v: u64) -> String {
    let input = dir.join(format!("v{v}.jsonl"));
    std::fs::write(&input, input_text(v)).unwrap();
    let out = dir.join(format!("build-v{v}"));
    let (ok, text) = cairn(&[
        "store",
        "build",
        "recs",
        "--cluster",
        "--masters",
        masters,
        "--format",
        "jsonl",
        "-i",
        &input.to_string_lossy(),
        "-o",
        &out.to_string_lossy(),
    ]);
    assert!(ok, "build of version {v} failed: {text}");
    out.to_string_lossy().to_string()
}

/// Looks every key up; each answer must be its version's value.
/// `cairn store create recs` (key `id:int64`, value `v:string`, 2 replicas) with
/// `extra` flags: whether it succeeded, and its output.
fn create_recs(masters: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["store", "create", "recs", "--masters", masters];
    args.extend([
        "--key",
        "id:int64",
        "--value",
        "v:string",
        "--replication",
        "2",
    ]);
    args.extend(extra);
    cairn(&args)
}

/// `cairn store push recs --from FROM [--version V]`: whether it succeeded, and its
/// output.
fn push(masters: &str, from: &str, version: Option<u64>) -> (bool, String) {
    let version = version.map(|v| v.to_string());
    let mut args = vec![
        "store",
        "push",
        "recs",
        "--from",
        from,
        "--masters",
        masters,
    ];
    if let Some(v) = &version {
        args.extend(["--version", v]);
    }
    cairn(&args)
}

async fn check_all(reader: &StoreReader, expect: Option<u64>) -> u64 {
    let keys: Vec<Vec<Value>> = (0..ROWS).map(|i| vec![Value::Int64(i)]).collect();
    let rows = reader.get_all(&keys).await.unwrap();
    let mut seen = 0;
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            r.value,
            Some(vec![Value::String(format!("{}-{i}", tag(r.version)))]),
            "key {i} at version {}",
            r.version
        );
        if let Some(v) = expect {
            assert_eq!(r.version, v, "key {i}");
        }
        seen = seen.max(r.version);
    }
    // A key never built is absent.
    assert_eq!(reader.get(&[Value::Int64(ROWS + 7)]).await.unwrap(), None);
    seen
}

/// Readers looking random batches up until `stop`; they count answers and record the
/// first bad one.
fn spawn_readers(
    reader: StoreReader,
    stop: Arc<AtomicBool>,
    answers: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<Result<(), String>>> {
    (0..2)
        .map(|t| {
            let (reader, stop, answers) = (reader.clone(), stop.clone(), answers.clone());
            tokio::spawn(async move {
                let mut x: u64 = 0x9e37_79b9 + t;
                while !stop.load(Ordering::Relaxed) {
                    let keys: Vec<Vec<Value>> = (0..50)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            vec![Value::Int64((x % ROWS as u64) as i64)]
                        })
                        .collect();
                    let rows = reader
                        .get_all(&keys)
                        .await
                        .map_err(|e| format!("a lookup failed while replicas were up: {e}"))?;
                    for (k, r) in keys.iter().zip(rows) {
                        let Value::Int64(i) = k[0] else {
                            unreachable!()
                        };
                        let want = Some(vec![Value::String(format!("{}-{i}", tag(r.version)))]);
                        if r.value != want {
                            return Err(format!(
                                "key {i} at version {} answered {:?}",
                                r.version, r.value
                            ));
                        }
                    }
                    answers.fetch_add(50, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(())
            })
        })
        .collect()
}

/// Waits until the store serves `version` (and no push is under way).
async fn wait_version(c: &Client, version: u64, within: Duration) {
    let until = Instant::now() + within;
    loop {
        if let Ok((e, r)) = c.get_store_and_push("recs").await {
            if e.push.is_none() && e.current_version == Some(version) {
                return;
            }
            if let Some(r) = r.filter(|r| r.version == version && r.state != "done")
                && (r.state == "failed" || r.state == "rolled back")
            {
                panic!("push of version {version} failed: {r:?}");
            }
        }
        assert!(
            Instant::now() < until,
            "version {version} was not live within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the server at `addr` alone answers every key it holds a replica of with
/// `version` (the other servers are left out of a copy of the ring).
async fn node_answers(reader: &StoreReader, addr: &str, version: u64) -> bool {
    let mut entry = (*reader.entry()).clone();
    let only: Vec<usize> = (0..entry.nodes.len())
        .filter(|&n| entry.nodes[n].addr == addr)
        .collect();
    assert_eq!(only.len(), 1, "{addr} in {entry:?}");
    for (n, node) in entry.nodes.iter_mut().enumerate() {
        if n != only[0] {
            node.addr = "127.0.0.1:1".into();
        }
    }
    let encoded: Vec<Vec<u8>> = (0..ROWS)
        .map(|i| entry.schema.encode_key(&[Value::Int64(i)]).unwrap())
        .filter(|k| {
            let p = entry.layout.partition_of(&cairn_readonly::KeyHash::of(k));
            entry
                .layout
                .preference_list(p)
                .iter()
                .any(|&(_, n)| n as usize == only[0])
        })
        .collect();
    assert!(!encoded.is_empty());
    matches!(reader.get_encoded(&entry, &encoded).await,
        Ok(rows) if rows.iter().all(|(v, _)| *v == version))
}

/// Waits until the master reports push `version` in `state`.
async fn wait_push_state(c: &Client, version: u64, state: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((_, Some(r))) = c.get_store_and_push("recs").await
            && r.version == version
            && r.state == state
        {
            return;
        }
        assert!(
            Instant::now() < until,
            "push {version} never reached {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The index in `master_addrs` of the leader master.
async fn leader_index(c: &Client, master_addrs: &[String]) -> usize {
    let leader = c
        .list_masters()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.role.eq_ignore_ascii_case("leader"))
        .expect("a leader master");
    master_addrs
        .iter()
        .position(|a| *a == leader.addr)
        .expect("the leader is one of the masters")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_swap_rollback_and_failover_on_real_processes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let master_addrs: Vec<String> = (0..3).map(|_| reserve_addr()).collect();
    let mut masters: Vec<Proc> = master_addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            master_proc_with(
                &d.join(format!("m{i}")),
                a,
                &master_addrs,
                d.join(format!("m{i}.log")),
                &["--store-push-grace-secs", GRACE_SECS],
            )
        })
        .collect();
    let webs: Vec<String> = (0..4).map(|_| reserve_addr()).collect();
    let start_tserver = |i: usize| {
        tserver_proc_with(
            &d.join(format!("t{i}")),
            &reserve_addr(),
            &master_addrs,
            d.join(format!("t{i}.log")),
            &["--web-addr", &webs[i]],
        )
    };
    let mut tservers: Vec<Proc> = (0..3).map(start_tserver).collect();
    let c = Client::connect(&master_addrs).await.unwrap();
    wait_live_servers(&c, 3, Duration::from_secs(60)).await;
    let m = master_addrs.join(",");

    // Create with the CLI; build version 1 from the catalog's ring; push it.
    let (ok, out) = create_recs(&m, &["--retain", "3"]);
    assert!(ok, "{out}");
    let (ok, out) = cairn(&["store", "get", "recs", "1", "--masters", &m]);
    assert!(!ok && out.contains("no version yet"), "{out}");
    let v1 = build_version(d, &m, 1);
    let (ok, out) = push(&m, &v1, None);
    assert!(ok && out.contains("now serves version 1"), "{out}");
    let (ok, out) = cairn(&["store", "get", "recs", "42", "--masters", &m]);
    assert!(ok && out.contains("one-42"), "{out}");
    let reader = c.open_store("recs").await.unwrap();
    assert_eq!(check_all(&reader, Some(1)).await, 1);

    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicU64::new(0));
    let readers = spawn_readers(reader.clone(), stop.clone(), answers.clone());

    // Version 2, fetched slowly: one tablet server is killed mid-fetch and restarted
    // (its fetch resumes), then the leader master is killed (the next one finishes
    // the push). Lookups keep answering version 1 until the swap.
    let v2 = build_version(d, &m, 2);
    let version = c.push_store("recs", &v2, 0, 10_000).await.unwrap();
    assert_eq!(version, 2);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    tservers[1].kill9();
    tokio::time::sleep(Duration::from_millis(500)).await;
    tservers[1].start();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let li = leader_index(&c, &master_addrs).await;
    let (e, _) = c.get_store_and_push("recs").await.unwrap();
    assert_eq!(
        (e.current_version, e.push.is_some()),
        (Some(1), true),
        "still fetching: {e:?}"
    );
    masters[li].kill9();
    wait_version(&c, 2, Duration::from_secs(90)).await;
    masters[li].start();
    assert_eq!(check_all(&reader, Some(2)).await, 2);

    // Roll back with the CLI, in milliseconds.
    let (ok, out) = cairn(&["store", "rollback", "recs", "--masters", &m]);
    assert!(ok && out.contains("now serves version 1 (was 2)"), "{out}");
    assert_eq!(check_all(&reader, Some(1)).await, 1);

    // A server down: lookups fail over to the next replica; a push cannot complete
    // and leaves version 1 live.
    tservers[2].kill9();
    assert_eq!(check_all(&reader, Some(1)).await, 1);
    let v3 = build_version(d, &m, 3);
    let (ok, out) = push(&m, &v3, None);
    assert!(!ok && out.contains("previous version stays live"), "{out}");
    assert_eq!(check_all(&reader, Some(1)).await, 1);
    let (e, _) = c.get_store_and_push("recs").await.unwrap();
    assert_eq!((e.current_version, e.push.is_none()), (Some(1), true));

    // Back up, the server serves version 1 too; the push then succeeds (numbered 3
    // again on purpose: the failed push installed nothing).
    tservers[2].start();
    wait_live_servers(&c, 3, Duration::from_secs(60)).await;
    let (ok, out) = push(&m, &v3, Some(3));
    assert!(ok && out.contains("now serves version 3"), "{out}");
    assert_eq!(check_all(&reader, Some(3)).await, 3);

    // A rollback with a server down leaves it out; the master swaps it when it is
    // back, so every key answers version 2 again.
    tservers[0].kill9();
    let (ok, out) = cairn(&["store", "rollback", "recs", "--masters", &m]);
    assert!(ok && out.contains("now serves version 2 (was 3)"), "{out}");
    assert_eq!(check_all(&reader, Some(2)).await, 2);
    tservers[0].start();
    let until = Instant::now() + Duration::from_secs(60);
    while !node_answers(&reader, &tservers[0].addr, 2).await {
        assert!(
            Instant::now() < until,
            "the restarted server was not swapped back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_live_servers(&c, 3, Duration::from_secs(60)).await;

    // A server killed mid-swap: it holds its swap (a failpoint) while the others
    // swap to version 4, and dies. The master waits for it through the grace, then
    // swaps the others back: version 2 stays the store's, and lookups (failing over
    // past the dead server) never fail and never mix versions within a batch.
    let v4 = build_version(d, &m, 4);
    put_failpoint(&webs[1], "store::swap", "1*sleep(20000)");
    assert_eq!(c.push_store("recs", &v4, 4, 0).await.unwrap(), 4);
    wait_push_state(&c, 4, "swapping").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    tservers[1].kill9();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (e, r) = c.get_store_and_push("recs").await.unwrap();
        let r = r.unwrap();
        if e.push.is_none() {
            assert_eq!(
                (r.state.as_str(), e.current_version),
                ("rolled back", Some(2))
            );
            break;
        }
        assert!(
            Instant::now() < until,
            "the push with a dead server never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(check_all(&reader, Some(2)).await, 2);
    tservers[1].start();
    wait_live_servers(&c, 3, Duration::from_secs(60)).await;
    assert_eq!(check_all(&reader, Some(2)).await, 2);
    // Version 4 was installed on some servers: its number cannot be pushed again.
    let (ok, out) = push(&m, &v4, Some(4));
    assert!(!ok && out.contains("was pushed before"), "{out}");

    // The leader master killed mid-swap: a server holds its swap while the leader
    // dies; the next leader finds the push recorded as swapping and completes it.
    let v5 = build_version(d, &m, 5);
    put_failpoint(&webs[2], "store::swap", "1*sleep(6000)");
    let held_until = Instant::now() + Duration::from_secs(6);
    assert_eq!(c.push_store("recs", &v5, 5, 0).await.unwrap(), 5);
    wait_push_state(&c, 5, "swapping").await;
    let li = leader_index(&c, &master_addrs).await;
    masters[li].kill9();
    wait_version(&c, 5, Duration::from_secs(90)).await;
    masters[li].start();
    assert_eq!(check_all(&reader, Some(5)).await, 5);

    // A fourth server joins; a rebalance gives it its share of the partitions,
    // copied from the others, while lookups keep being answered (by either ring).
    tservers.push(start_tserver(3));
    wait_live_servers(&c, 4, Duration::from_secs(60)).await;
    let (ok, out) = cairn(&["store", "rebalance", "recs", "--masters", &m]);
    assert!(
        ok && out.contains("rebalanced over 4 server(s) and serves version 6"),
        "{out}"
    );
    let (e, _) = c.get_store_and_push("recs").await.unwrap();
    assert_eq!((e.nodes.len(), e.current_version), (4, Some(6)));
    assert_eq!(check_all(&reader, Some(6)).await, 6);
    reader.refresh().await.unwrap();
    assert_eq!(reader.entry().nodes.len(), 4);
    assert_eq!(check_all(&reader, Some(6)).await, 6);
    assert!(node_answers(&reader, &tservers[3].addr, 6).await);
    // The dead leader's order to swap to version 5, held in server 2 all this time,
    // ends now: the server refuses it (a newer term has ordered swaps since) and
    // keeps serving version 6.
    tokio::time::sleep_until(held_until.into()).await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(check_all(&reader, Some(6)).await, 6);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (ok, out) = cairn(&["store", "rebalance", "recs", "--masters", &m]);
    assert!(!ok && out.contains("already on store"), "{out}");
    // The next build is made for the new ring and pushed to all four.
    let v7 = build_version(d, &m, 7);
    let (ok, out) = push(&m, &v7, None);
    assert!(ok && out.contains("now serves version 7"), "{out}");
    assert_eq!(check_all(&reader, Some(7)).await, 7);
    assert!(node_answers(&reader, &tservers[3].addr, 7).await);

    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap().unwrap();
    }
    assert!(answers.load(Ordering::Relaxed) > 0);

    // Dropping the store deletes its files on every server.
    let (ok, out) = cairn(&["store", "drop", "recs", "--masters", &m]);
    assert!(ok, "{out}");
    for i in 0..4 {
        let stores = d.join(format!("t{i}/stores"));
        let left: Vec<_> = std::fs::read_dir(&stores).unwrap().collect();
        assert!(left.is_empty(), "t{i} still has {left:?}");
    }
    for p in tservers.iter_mut().chain(masters.iter_mut()) {
        p.kill9();
    }
}

/// An S3-compatible server (moto) on a loopback port, killed on drop.
struct S3Server {
    child: std::process::Child,
    endpoint: String,
}

impl S3Server {
    /// Starts moto with `python` and creates `bucket`.
    async fn start(python: &std::path::Path, bucket: &str) -> S3Server {
        let port = reserve_port();
        let child = std::process::Command::new(python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "moto did not listen"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Create the bucket with a plain PUT (moto does not check signatures).
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        server
    }

    /// The `AWS_*` variables that point a process at this server.
    fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT", self.endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", "cairn"),
            ("AWS_SECRET_ACCESS_KEY", "cairn-secret"),
            ("AWS_REGION", "us-east-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A static file server for the files under `root` on a loopback port, answering
/// HEAD, GET and single-range `Range: bytes=A-[B]` requests as web servers do. Returns
/// its `http://host:port`.
async fn serve_files(root: std::path::PathBuf) -> String {
    use axum::http::{HeaderMap, StatusCode, Uri, header};
    use axum::response::IntoResponse;
    let handler = move |uri: Uri, headers: HeaderMap| {
        let root = root.clone();
        async move {
            let path = root.join(uri.path().trim_start_matches('/'));
            let Ok(bytes) = std::fs::read(&path) else {
                return StatusCode::NOT_FOUND.into_response();
            };
            let range = headers
                .get(header::RANGE)
                .and_then(|r| r.to_str().ok())
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.split_once('-'));
            let Some((from, to)) = range else {
                return bytes.into_response();
            };
            let len = bytes.len() as u64;
            let from: u64 = from.parse().unwrap_or(0);
            let to: u64 = to
                .parse()
                .map_or(len.saturating_sub(1), |t: u64| t.min(len - 1));
            if from >= len || from > to {
                return StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            }
            (
                StatusCode::PARTIAL_CONTENT,
                [(header::CONTENT_RANGE, format!("bytes {from}-{to}/{len}"))],
                bytes[from as usize..=to as usize].to_vec(),
            )
                .into_response()
        }
    };
    let app = axum::Router::new().fallback(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// `cairn store build` and `cairn store push` with object stores: the input read from
/// S3 and the build written there, tablet servers fetching from S3; then an input and a
/// build on a web server. Wrong outputs and missing sources are refused with messages
/// that say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_and_push_through_s3_and_a_web_server() {
    let Some(python) = python_with("moto.server, flask") else {
        assert!(
            std::env::var("CI").is_err(),
            "moto is not installed in the CI venv (see .ci/run)"
        );
        eprintln!("skipping: no Python with moto[server] (set CAIRN_PYTHON)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s3 = S3Server::start(&python, "builds").await;
    let env = s3.env();

    // The input goes into S3 the way a batch job would leave it.
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&s3.endpoint)
        .with_allow_http(true)
        .with_bucket_name("builds")
        .with_region("us-east-1")
        .with_access_key_id("cairn")
        .with_secret_access_key("cairn-secret")
        .build()
        .unwrap();
    use object_store::ObjectStoreExt;
    store
        .put(
            &object_store::path::Path::from("in/v1/part-0.jsonl"),
            input_text(1).into_bytes().into(),
        )
        .await
        .unwrap();

    let master_addr = reserve_addr();
    let mut master = master_proc(&d.join("m"), &master_addr, &[], d.join("m.log"));
    let mut tservers: Vec<Proc> = (0..2)
        .map(|i| {
            tserver_proc_env(
                &d.join(format!("t{i}")),
                &reserve_addr(),
                std::slice::from_ref(&master_addr),
                d.join(format!("t{i}.log")),
                &[],
                env.clone(),
            )
        })
        .collect();
    let c = Client::connect(std::slice::from_ref(&master_addr))
        .await
        .unwrap();
    wait_live_servers(&c, 2, Duration::from_secs(60)).await;
    let m = master_addr.as_str();
    let (ok, out) = create_recs(m, &[]);
    assert!(ok, "{out}");

    // Version 1: a folder of input in S3, built into S3, fetched from S3.
    let build = |input: &str, output: &str| {
        cairn_with_env(
            &[
                "store",
                "build",
                "recs",
                "--cluster",
                "--masters",
                m,
                "--format",
                "jsonl",
                "-i",
                input,
                "-o",
                output,
            ],
            &env,
        )
    };
    let (ok, out) = build("s3://builds/in/v1/", "s3://builds/out/v1");
    assert!(ok && out.contains("s3://builds/out/v1/node-0"), "{out}");
    let (ok, out) = build("s3://builds/in/v1/", "s3://builds/out/v1");
    assert!(!ok && out.contains("already holds files"), "{out}");
    let (ok, out) = push(m, "s3://builds/out/v1", None);
    assert!(ok && out.contains("now serves version 1"), "{out}");
    let reader = c.open_store("recs").await.unwrap();
    assert_eq!(check_all(&reader, Some(1)).await, 1);

    // Version 2: the input on a web server, the build served by it, fetched over HTTP
    // (with Range requests when a fetch resumes).
    let web_root = d.join("web");
    std::fs::create_dir_all(web_root.join("in")).unwrap();
    std::fs::write(web_root.join("in/v2.jsonl"), input_text(2)).unwrap();
    let web = serve_files(web_root.clone()).await;
    let out_dir = web_root.join("build-v2");
    let (ok, out) = build(&format!("{web}/in/v2.jsonl"), &out_dir.to_string_lossy());
    assert!(ok, "{out}");
    let (ok, out) = build(&format!("{web}/in/v2.jsonl"), &format!("{web}/elsewhere"));
    assert!(!ok && out.contains("read-only"), "{out}");
    let (ok, out) = push(m, &format!("{web}/build-v2"), None);
    assert!(ok && out.contains("now serves version 2"), "{out}");
    assert_eq!(check_all(&reader, Some(2)).await, 2);

    // A prefix with no build fails the push with the missing file named, and version 2
    // stays live.
    let (ok, out) = push(m, "s3://builds/out/none", None);
    assert!(!ok && out.contains("does not exist"), "{out}");
    assert_eq!(check_all(&reader, Some(2)).await, 2);

    for p in tservers.iter_mut() {
        p.kill9();
    }
    master.kill9();
}
