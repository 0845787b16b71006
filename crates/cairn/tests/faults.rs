//! The fault harness in CI: a real cluster (3 masters, 5 tablet servers, fsync on,
//! replicas 3) under every fault kind once, with register (native and SQL), counter,
//! set and bank workloads; every history must pass its checker. `CAIRN_FAULT_CYCLES=n`
//! runs more cycles (the long mode is `cairn-faults run --cycles 100`).

use std::time::Duration;

use cairn_faults::cluster::ClusterConfig;
use cairn_faults::nemesis::FaultKind;
use cairn_faults::run::{RunConfig, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_kind_leaves_no_anomaly() {
    let dir = tempfile::tempdir().unwrap();
    let cycles: usize = std::env::var("CAIRN_FAULT_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(FaultKind::ALL.len());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1);
    let cfg = RunConfig {
        cluster: ClusterConfig {
            bin: env!("CARGO_BIN_EXE_cairn").into(),
            dir: dir.path().join("cluster"),
            masters: 3,
            tservers: 5,
            heartbeat_ms: 200,
            election_ms: 1000,
            dead_after_secs: 15,
            max_clock_offset_ms: 500,
        },
        cycles,
        kinds: FaultKind::ALL.to_vec(),
        fault_for: Duration::from_secs(4),
        heal_for: Duration::from_secs(4),
        seed,
        native_registers: 2,
        sql_registers: 2,
        counters: 2,
        sets: 2,
        banks: 2,
        keys: 4,
        ops_per_key: 100,
        tools_dir: std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cairn-faults-tools"),
    };
    let report = run(cfg).await.unwrap();
    eprintln!("{}", report.summary());
    for k in FaultKind::ALL {
        assert!(
            report.faults.get(k.name()).copied().unwrap_or(0) > 0,
            "fault kind {} never ran",
            k.name()
        );
    }
    assert!(
        report.operations.get("ok").copied().unwrap_or(0) > 100,
        "too few operations succeeded to say anything: {:?}",
        report.operations
    );
    if report.anomalies() > 0 {
        // Keep the histories and server logs for the post-mortem.
        let kept = std::env::temp_dir().join(format!("cairn-faults-failed-{seed}"));
        let _ = std::fs::rename(dir.path(), &kept);
        panic!(
            "the fault harness found anomalies (seed {seed}); histories and logs kept in {} \
             (`cairn wal dump {}/cluster/t0/tablets/<tablet id>` reads a replica's log)",
            kept.display(),
            kept.display()
        );
    }
}

mod targeted {
    //! Single faults with a precise expectation, on real processes.

    use std::time::{Duration, Instant};

    use cairn_client::{Client, CreateTableSpec, FlushMode, Operation};
    use cairn_common::{ColumnSpec, DataType, Schema, Value};
    use cairn_faults::cluster::{Cluster, ClusterConfig};
    use cairn_proto as pb;

    fn config(dir: &std::path::Path, tservers: usize) -> ClusterConfig {
        ClusterConfig {
            bin: env!("CARGO_BIN_EXE_cairn").into(),
            dir: dir.to_path_buf(),
            masters: 1,
            tservers,
            heartbeat_ms: 200,
            election_ms: 1000,
            dead_after_secs: 600,
            max_clock_offset_ms: 500,
        }
    }

    async fn kv_table(c: &Client, name: &str) -> cairn_client::Table {
        let schema = Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("v", DataType::Int64),
            ],
            &["k"],
        )
        .unwrap();
        c.create_table(CreateTableSpec::new(name, schema).replicas(3))
            .await
            .unwrap();
        c.open_table(name).await.unwrap()
    }

    async fn put(c: &Client, t: &cairn_client::Table, k: i64, v: i64) {
        let mut s = c.new_session(t);
        s.set_flush_mode(FlushMode::AutoFlushSync);
        s.apply(Operation::upsert(vec![Value::Int64(k), Value::Int64(v)]))
            .await
            .unwrap();
    }

    async fn leader_of(c: &Client, t: &cairn_client::Table, not: Option<&str>) -> String {
        let t0 = Instant::now();
        loop {
            if let Ok(locs) = c.table_locations(t, true).await
                && let Some(l) = locs.first().and_then(|l| l.leader_addr())
                && not != Some(l)
            {
                return l.to_string();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "no (new) leader in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A leader cut off from its followers (and the master) is deposed: it must not
    /// answer a READ_LATEST read with its stale state, and its writes must fail in
    /// bounded time without pinning its threads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn isolated_leader_serves_no_stale_read_and_fails_in_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let cl = Cluster::start(config(dir.path(), 3)).await.unwrap();
        let c = cl.client().await.unwrap();
        let t = kv_table(&c, "kv").await;
        put(&c, &t, 1, 1).await;
        let old = leader_of(&c, &t, None).await;
        let tablet = c.table_locations(&t, true).await.unwrap()[0]
            .tablet_id
            .clone();
        let victim = cl.node_of(&old).unwrap();
        let others: Vec<usize> = (0..cl.nodes.len()).filter(|&i| i != victim).collect();
        let list = |ids: &[usize]| {
            ids.iter()
                .map(|&i| cl.nodes[i].rpc_addr.clone())
                .collect::<Vec<_>>()
                .join(";")
        };
        cl.set_failpoint(
            victim,
            "net::partition",
            &format!("return({})", list(&others)),
        )
        .await
        .unwrap();
        for &i in &others {
            cl.set_failpoint(i, "net::partition", &format!("return({old})"))
                .await
                .unwrap();
        }
        let new = leader_of(&c, &t, Some(&old)).await;
        assert_ne!(new, old);
        put(&c, &t, 1, 2).await;

        // Ask the deposed leader directly.
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{old}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut ts = pb::tablet_server_client::TabletServerClient::new(ch);
        let mut req = tonic::Request::new(pb::ScanRequest {
            tablet_id: tablet.clone(),
            all_columns: true,
            read_mode: pb::ReadMode::ReadLatest as i32,
            ..Default::default()
        });
        req.set_timeout(Duration::from_secs(5));
        match ts.scan(req).await {
            Err(s) => eprintln!("the deposed leader refused the read: {}", s.message()),
            Ok(r) => {
                let r = r.into_inner();
                let rows = cairn_client::decode_ipc(&r.arrow_ipc).unwrap();
                let n: usize = rows.iter().map(|b| b.num_rows()).sum();
                panic!("the deposed leader served a READ_LATEST read ({n} rows): it may be stale");
            }
        }
        // A snapshot read at a timestamp the new leader has written below must not be
        // served from the deposed leader's stale state either (the leader path of a
        // snapshot read confirms leadership too).
        let mut req = tonic::Request::new(pb::ScanRequest {
            tablet_id: tablet.clone(),
            all_columns: true,
            read_mode: pb::ReadMode::ReadAtSnapshot as i32,
            snapshot_timestamp: c.last_timestamp(),
            ..Default::default()
        });
        req.set_timeout(Duration::from_secs(5));
        match ts.scan(req).await {
            Err(s) => eprintln!(
                "the deposed leader refused the snapshot read: {}",
                s.message()
            ),
            Ok(r) => {
                let r = r.into_inner();
                let rows = cairn_client::decode_ipc(&r.arrow_ipc).unwrap();
                panic!(
                    "the deposed leader served a snapshot read at {} after the new leader \
                     wrote below it: {rows:?}",
                    r.snapshot_timestamp
                );
            }
        }
        // A write answered without the log is a read of the leader's state: a
        // conditional update whose condition fails on the stale row (v = 1 there, 2 on
        // the new leader), and an update of a key the stale state lacks but the new
        // leader holds, must not be answered from the stale state.
        put(&c, &t, 7, 7).await;
        let stale_answers = [
            Operation::update(&t.schema, &[Value::Int64(1)], &[("v", Value::Int64(3))])
                .unwrap()
                .if_matches(vec![cairn_common::ColumnPredicate::eq(
                    "v",
                    Value::Int64(2),
                )]),
            Operation::update(&t.schema, &[Value::Int64(7)], &[("v", Value::Int64(8))]).unwrap(),
        ];
        for op in stale_answers {
            let what = format!("{op:?}");
            let enc = cairn_client::encode_write(&t.schema, &[op]).unwrap();
            let mut req = tonic::Request::new(pb::WriteRequest {
                tablet_id: tablet.clone(),
                batches: enc.batches,
                ..Default::default()
            });
            req.set_timeout(Duration::from_secs(5));
            match ts.write(req).await {
                Err(s) => eprintln!("the deposed leader refused {what}: {}", s.message()),
                Ok(r) => panic!(
                    "the deposed leader answered {what} from its stale state: {:?}",
                    r.into_inner().row_errors
                ),
            }
        }
        // Writes to it fail within their deadline, many at once.
        let t0 = Instant::now();
        let mut calls = vec![];
        for i in 0..64i64 {
            let mut ts = ts.clone();
            let ops = [Operation::upsert(vec![
                Value::Int64(100 + i),
                Value::Int64(i),
            ])];
            let enc = cairn_client::encode_write(&t.schema, &ops).unwrap();
            let w = pb::WriteRequest {
                tablet_id: tablet.clone(),
                batches: enc.batches,
                ..Default::default()
            };
            calls.push(tokio::spawn(async move {
                let mut req = tonic::Request::new(w);
                req.set_timeout(Duration::from_secs(1));
                ts.write(req).await
            }));
        }
        for call in calls {
            assert!(
                call.await.unwrap().is_err(),
                "a write on a deposed leader succeeded"
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "writes to a deposed leader took {:?} to fail",
            t0.elapsed()
        );
        // And it still answers.
        let mut req = tonic::Request::new(pb::ListTabletsRequest {});
        req.set_timeout(Duration::from_secs(5));
        ts.list_tablets(req).await.unwrap();

        // Healed, the old leader catches up.
        for i in 0..cl.nodes.len() {
            cl.clear_failpoint(i, "net::partition").await.unwrap();
        }
        let t0 = Instant::now();
        loop {
            if c.scan(&t).execute().await.is_ok() {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30));
        }

        // `cairn wal dump` reads a copy of the new leader's replica offline: its log
        // holds the write the deposed leader never saw, under the new term.
        let replica = dir
            .path()
            .join(cl.nodes[cl.node_of(&new).unwrap()].name())
            .join("tablets")
            .join(&tablet);
        let copy = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(&replica)
            .arg(copy.path())
            .status()
            .unwrap();
        assert!(status.success(), "copying {}", replica.display());
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["wal", "dump"])
            .arg(copy.path().join(&tablet))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "wal dump failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("membership"), "{text}");
        assert!(text.contains("blank"), "{text}");
        assert!(
            text.contains("(0, Int64(1)), (1, Int64(2))"),
            "the new leader's write is missing from its log dump:\n{text}"
        );
    }

    /// A replica whose log writes fail (disk full, I/O error) is reported FAILED, and
    /// the master replaces it on another server, as if its server had died.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_replica_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let cl = Cluster::start(config(dir.path(), 4)).await.unwrap();
        let c = cl.client().await.unwrap();
        let t = kv_table(&c, "kv").await;
        put(&c, &t, 0, 0).await;
        let leader = leader_of(&c, &t, None).await;
        let locs = c.table_locations(&t, true).await.unwrap();
        let follower = locs[0]
            .replicas
            .iter()
            .map(|r| r.addr.clone())
            .find(|a| *a != leader)
            .unwrap();
        let f = cl.node_of(&follower).unwrap();
        cl.set_failpoint(f, "wal::append", "return(EIO)")
            .await
            .unwrap();
        for k in 1..50 {
            put(&c, &t, k, k).await;
        }
        let t0 = Instant::now();
        loop {
            let locs = c.table_locations(&t, true).await.unwrap();
            let addrs: Vec<&str> = locs[0].replicas.iter().map(|r| r.addr.as_str()).collect();
            if !addrs.contains(&follower.as_str()) && addrs.len() == 3 {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "the failed replica on {follower} was not replaced: {addrs:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        cl.clear_failpoint(f, "wal::append").await.unwrap();
        let r = c.scan(&t).execute().await.unwrap();
        assert_eq!(r.num_rows(), 50);
    }
}
