//! In-process cluster tests: every RPC path through the client, bad input, snapshot
//! reads on followers, replica agreement, schema changes, drop, restart, follower
//! catch-up, bulk loads, re-replication after a server dies, and colocation groups.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cairn_client::{ClientError, Operation, ReadMode};
use cairn_common::{AlterOp, ColumnPredicate, ColumnSpec, DataType, Value};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rpc_paths_bad_input_alter_and_drop() {
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 2, 3)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..1000).await;
    assert_eq!(c.scan(&t).count().await.unwrap(), 1000);
    let after_load = c.last_timestamp();

    // Row errors, updates, deletes.
    let mut s = c.new_session(&t);
    s.set_flush_mode(cairn_client::FlushMode::Manual);
    s.apply(row(5)).await.unwrap();
    s.apply(
        Operation::update(
            &t.schema,
            &[Value::Int64(7)],
            &[("v", Value::String("x".into()))],
        )
        .unwrap(),
    )
    .await
    .unwrap();
    s.apply(Operation::delete(&t.schema, &[Value::Int64(8)]).unwrap())
        .await
        .unwrap();
    s.apply(Operation::delete(&t.schema, &[Value::Int64(123_456)]).unwrap())
        .await
        .unwrap();
    let errs = s.flush().await.unwrap();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs.iter()
            .any(|e| e.op_index == 0 && e.message.contains("already present"))
    );
    assert!(
        errs.iter()
            .any(|e| e.op_index == 3 && e.message.contains("not found"))
    );
    let r = c
        .scan(&t)
        .predicate(ColumnPredicate::eq("id", Value::Int64(7)))
        .read_mode(ReadMode::ReadYourWrites)
        .execute()
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 1);
    let v = r.batches.iter().find(|b| b.num_rows() > 0).unwrap();
    let vs = v
        .column(1)
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .unwrap();
    assert_eq!(vs.value(0), "x");
    assert_eq!(c.scan(&t).count().await.unwrap(), 999);
    // Time travel: the snapshot after the load still has row 8.
    assert_eq!(
        c.scan(&t)
            .read_mode(ReadMode::Snapshot(after_load))
            .count()
            .await
            .unwrap(),
        1000
    );

    // Bad input: each a clear error, nothing changes.
    assert!(matches!(
        c.open_table("nope").await,
        Err(ClientError::TableNotFound(_))
    ));
    let mut s = c.new_session(&t);
    s.set_flush_mode(cairn_client::FlushMode::Manual);
    let wrong_type = Operation::insert(vec![Value::String("a".into()), Value::Null, Value::Null]);
    let r1 = s.apply(wrong_type).await;
    let missing_key = Operation::insert(vec![Value::Null, Value::Null, Value::Null]);
    let r2 = s.apply(missing_key).await;
    let oversize = Operation::insert(vec![
        Value::Int64(5_000_000),
        Value::String("x".repeat(100_000)),
        Value::Null,
    ]);
    let r3 = s.apply(oversize).await;
    let flushed = s.flush().await.unwrap();
    assert!(r1.is_err() || !flushed.is_empty());
    assert!(r2.is_err() || flushed.len() >= 2);
    assert!(
        r3.is_err()
            || flushed.iter().any(|e| e.message.contains("bytes")
                || e.message.contains("large")
                || e.message.contains("exceeds")),
        "{r3:?} {flushed:?}"
    );
    assert_eq!(c.scan(&t).count().await.unwrap(), 999);

    // Malformed RPC bytes: rejected, the server keeps serving. (Asked again if the
    // leader moved between finding it and the write.)
    let locs = c.table_locations(&t, true).await.unwrap();
    let malformed = cairn_proto::WriteRequest {
        tablet_id: locs[0].tablet_id.clone(),
        batches: vec![cairn_proto::RowBatch {
            op_kinds: vec![0u8].into(),
            arrow_ipc: vec![1u8, 2, 3, 4].into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut attempts = 0;
    let (leader, bad) = loop {
        let leader = current_leader(&c, &t, 0).await;
        let mut raw = c.tablet_server(&leader).await.unwrap();
        let bad = raw.write(malformed.clone()).await.unwrap_err();
        attempts += 1;
        if bad.code() != tonic::Code::FailedPrecondition || attempts == 100 {
            break (leader, bad);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut raw = c.tablet_server(&leader).await.unwrap();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    let mut cons =
        cairn_proto::consensus_client::ConsensusClient::connect(format!("http://{leader}"))
            .await
            .unwrap();
    let bad = cons
        .append_entries(cairn_proto::RaftRequest {
            group_id: locs[0].tablet_id.clone(),
            payload: vec![0xff; 7].into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    let bad = raw
        .scan(cairn_proto::ScanRequest {
            tablet_id: "no-such".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::NotFound);
    assert_eq!(c.scan(&t).count().await.unwrap(), 999);

    // Snapshot reads on every replica, and replicas agree.
    for l in locs.iter() {
        for rep in &l.replicas {
            let n = c
                .scan(&t)
                .only_tablet(l.tablet_id.clone())
                .read_mode(ReadMode::Snapshot(c.last_timestamp()))
                .count()
                .await
                .unwrap();
            assert!(n > 0, "replica {} of {}", rep.addr, l.tablet_id);
        }
    }
    assert_eq!(check_replicas_agree(&c, &t, &cl.ts_addrs).await, 999);

    // Leader step-down: another replica takes over, nothing is lost. Leadership may
    // have moved since the locations above were read, so ask whoever leads now.
    let tablet0 = locs[0].tablet_id.clone();
    let mut attempts = 0;
    let old_leader = loop {
        let leader = current_leader(&c, &t, 0).await;
        let mut lc = c.tablet_server(&leader).await.unwrap();
        let r = lc
            .step_down(cairn_proto::StepDownRequest {
                tablet_id: tablet0.clone(),
            })
            .await;
        attempts += 1;
        if r.is_ok() {
            break leader;
        }
        assert!(attempts < 100, "no leader accepted a step-down: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    wait_for(Duration::from_secs(20), "another replica to lead", || {
        let c = c.clone();
        let t = t.clone();
        let old_leader = old_leader.clone();
        let tablet0 = tablet0.clone();
        async move {
            let Ok(l) = c.table_locations(&t, true).await else {
                return false;
            };
            l.iter().any(|x| {
                x.tablet_id == tablet0 && x.leader_addr().is_some_and(|a| a != old_leader.as_str())
            })
        }
    })
    .await;
    assert_eq!(c.scan(&t).count().await.unwrap(), 999);

    // ALTER: add a column with a default, write it, read it.
    c.alter_table(
        "t",
        vec![AlterOp::AddColumn(
            ColumnSpec::new("extra", DataType::Int32).nullable(),
        )],
    )
    .await
    .unwrap();
    let t2 = c.open_table("t").await.unwrap();
    assert_eq!(t2.schema.num_columns(), 4);
    let mut s = c.new_session(&t2);
    s.apply(Operation::insert(vec![
        Value::Int64(9_999),
        Value::Null,
        Value::Null,
        Value::Int32(42),
    ]))
    .await
    .unwrap();
    assert!(s.flush().await.unwrap().is_empty());
    let r = c
        .scan(&t2)
        .predicate(ColumnPredicate::eq("extra", Value::Int32(42)))
        .execute()
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 1);

    // DROP: the table is gone and so are its replicas.
    c.drop_table("t", false).await.unwrap();
    assert!(matches!(
        c.open_table("t").await,
        Err(ClientError::TableNotFound(_))
    ));
    assert!(c.drop_table("t", true).await.is_ok());
    let addrs = cl.ts_addrs.clone();
    wait_for(
        Duration::from_secs(20),
        "replicas of the dropped table to be deleted",
        || {
            let c = c.clone();
            let addrs = addrs.clone();
            async move {
                for a in &addrs {
                    let mut ts = c.tablet_server(a).await.unwrap();
                    if !ts
                        .list_tablets(cairn_proto::ListTabletsRequest {})
                        .await
                        .unwrap()
                        .into_inner()
                        .tablets
                        .is_empty()
                    {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_catches_up_and_restart_keeps_everything() {
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 2, 3)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..500).await;
    // Stop a server; writes go on with the other two.
    cl.stop_tserver(2).await;
    insert_range(&c, &t, 500..1500).await;
    cl.start_tserver(2).await;
    let live = cl.ts_addrs.clone();
    wait_replicas_agree(&c, &t, &live, 1500, "the stopped follower to catch up").await;
    // Restart everything: all data is there.
    cl.restart_all().await;
    let c = cl.client().await;
    let t = c.open_table("t").await.unwrap();
    let ids = all_ids(&c, &t).await;
    assert_eq!(ids, (0..1500).collect::<Vec<_>>());
}

/// Rows of the test schema with ids `ids` as one Arrow batch (`n` left out: NULL).
fn id_batch(ids: std::ops::Range<i64>) -> arrow::array::RecordBatch {
    arrow::array::RecordBatch::try_from_iter(vec![
        (
            "id",
            Arc::new(arrow::array::Int64Array::from_iter_values(ids.clone()))
                as arrow::array::ArrayRef,
        ),
        (
            "v",
            Arc::new(arrow::array::StringArray::from_iter_values(
                ids.map(|i| format!("row-{i}")),
            )),
        ),
    ])
    .unwrap()
}

/// Bulk loads over gRPC and in process: rows are routed to their tablets in chunks,
/// existing keys come back as row errors, a follower that was down catches up on the
/// bulk records, and everything survives a restart of every server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bulk_loads_replicate_and_survive_restarts() {
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("b", 3, 3)).await.unwrap();
    let t = c.open_table("b").await.unwrap();
    insert_range(&c, &t, 0..100).await;
    cl.stop_tserver(2).await;

    // Over gRPC, in small chunks; ids 50..100 exist already.
    let mut loader = c.bulk_loader(&t).await.unwrap();
    loader.set_chunk_bytes(64 << 10);
    for start in (50..5050).step_by(1000) {
        loader.add(id_batch(start..start + 1000)).await.unwrap();
    }
    let summary = loader.finish().await.unwrap();
    assert_eq!(summary.rows_written, 4950);
    assert_eq!(
        summary.row_errors.iter().map(|e| e.row).collect::<Vec<_>>(),
        (0..50).collect::<Vec<_>>()
    );
    assert!(
        summary
            .row_errors
            .iter()
            .all(|e| e.kind == cairn_proto::RowErrorKind::AlreadyPresent)
    );

    // In process, with a key repeated within the load and a row that breaks a rule.
    let ip = cl.in_process_client().await;
    let t2 = ip.open_table("b").await.unwrap();
    let mut loader = ip.bulk_loader(&t2).await.unwrap();
    loader.add(id_batch(5050..6000)).await.unwrap();
    loader.add(id_batch(5999..6000)).await.unwrap();
    let bad = arrow::array::RecordBatch::try_from_iter(vec![(
        "id",
        Arc::new(arrow::array::Int64Array::from(vec![None, Some(7000)])) as arrow::array::ArrayRef,
    )])
    .unwrap();
    loader.add(bad).await.unwrap();
    let summary = loader.finish().await.unwrap();
    assert_eq!(summary.rows_written, 951);
    let errors: Vec<_> = summary.row_errors.iter().map(|e| (e.row, e.kind)).collect();
    assert_eq!(
        errors,
        vec![
            (950, cairn_proto::RowErrorKind::AlreadyPresent),
            (951, cairn_proto::RowErrorKind::Invalid)
        ]
    );
    let want: Vec<i64> = (0..6000).chain([7000]).collect();
    assert_eq!(all_ids(&c, &t).await, want);
    // The loaded rows went straight to DiskRowSets.
    for ts in cl.tservers.iter().flatten() {
        for r in ts.manager().list() {
            if r.meta.table_id == t.id {
                let stats = r.tablet().stats();
                assert!(stats.mrs_rows <= 100, "{stats:?}");
                assert!(stats.disk_rows >= 1500, "{stats:?}");
            }
        }
    }

    cl.start_tserver(2).await;
    let live = cl.ts_addrs.clone();
    wait_replicas_agree(
        &c,
        &t,
        &live,
        6001,
        "the stopped follower to apply the loads",
    )
    .await;
    cl.restart_all().await;
    let c = cl.client().await;
    let t = c.open_table("b").await.unwrap();
    assert_eq!(all_ids(&c, &t).await, want);
    let live = cl.ts_addrs.clone();
    wait_replicas_agree(&c, &t, &live, 6001, "replicas to agree after the restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dead_tserver_is_rereplicated() {
    let mut cl = InProc::start(4, Duration::from_secs(3)).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 1, 3)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..300).await;
    let locs = c.table_locations(&t, true).await.unwrap();
    let victim_addr = locs[0]
        .replicas
        .iter()
        .find(|r| !r.leader)
        .unwrap()
        .addr
        .clone();
    let victim = cl.ts_addrs.iter().position(|a| *a == victim_addr).unwrap();
    cl.stop_tserver(victim).await;
    let live: Vec<String> = cl
        .ts_addrs
        .iter()
        .filter(|a| **a != victim_addr)
        .cloned()
        .collect();
    wait_for(
        Duration::from_secs(60),
        "the tablet to be re-replicated",
        || {
            let c = c.clone();
            let t = t.clone();
            let victim_addr = victim_addr.clone();
            async move {
                let Ok(l) = c.table_locations(&t, true).await else {
                    return false;
                };
                let voters: Vec<_> = l[0].replicas.iter().filter(|r| r.voter).collect();
                voters.len() == 3
                    && voters.iter().all(|r| r.live && r.addr != victim_addr)
                    && l[0].leader_addr().is_some()
            }
        },
    )
    .await;
    wait_replicas_agree(&c, &t, &live, 300, "the new replica to agree").await;
    // The dead server comes back: its evicted replica is an orphan and is deleted.
    cl.start_tserver(victim).await;
    let addr = cl.ts_addrs[victim].clone();
    wait_for(
        Duration::from_secs(30),
        "the evicted replica to be deleted",
        || {
            let c = c.clone();
            let addr = addr.clone();
            async move {
                let Ok(mut ts) = c.tablet_server(&addr).await else {
                    return false;
                };
                match ts.list_tablets(cairn_proto::ListTabletsRequest {}).await {
                    Ok(r) => r.into_inner().tablets.is_empty(),
                    Err(_) => false,
                }
            }
        },
    )
    .await;
    assert_eq!(c.scan(&t).count().await.unwrap(), 300);
}

/// Each bucket's servers, as sets of addresses, in bucket order.
async fn bucket_servers(
    c: &cairn_client::Client,
    t: &cairn_client::Table,
) -> Vec<std::collections::BTreeSet<String>> {
    c.table_locations(t, true)
        .await
        .unwrap()
        .iter()
        .map(|l| {
            l.replicas
                .iter()
                .filter(|r| r.voter)
                .map(|r| r.addr.clone())
                .collect()
        })
        .collect()
}

/// Tables hashed alike share each bucket's servers (a colocation group), also after
/// a server dies and its replicas are re-created elsewhere; `none` and a table hashed
/// otherwise stay out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn colocated_tables_keep_buckets_together_through_rereplication() {
    let mut cl = InProc::start(5, Duration::from_secs(3)).await;
    let c = cl.client().await;
    c.create_table(table_spec("a", 4, 3)).await.unwrap();
    c.create_table(table_spec("b", 4, 3)).await.unwrap();
    c.create_table(table_spec("lone", 4, 3).colocation(cairn_client::Colocation::None))
        .await
        .unwrap();
    let with_a = |name: &str, buckets| {
        table_spec(name, buckets, 3).colocation(cairn_client::Colocation::With("a".into()))
    };
    c.create_table(with_a("c", 4)).await.unwrap();
    let e = c.create_table(with_a("d", 8)).await.unwrap_err();
    assert!(e.to_string().contains("bucket count"), "{e}");
    let e = c
        .create_table(with_a("d", 4).colocation(cairn_client::Colocation::With("lone".into())))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no colocation group"), "{e}");
    let open = |n: &'static str| {
        let c = c.clone();
        async move { c.open_table(n).await.unwrap() }
    };
    let (a, b, lone, cc) = (
        open("a").await,
        open("b").await,
        open("lone").await,
        open("c").await,
    );
    assert_eq!(
        a.colocation.as_deref(),
        Some("hash(INT64) x4 seed 0 replicas 3")
    );
    assert_eq!(
        (&b.colocation, &cc.colocation),
        (&a.colocation, &a.colocation)
    );
    assert_eq!(lone.colocation, None);
    let sa = bucket_servers(&c, &a).await;
    assert_eq!(sa, bucket_servers(&c, &b).await);
    assert_eq!(sa, bucket_servers(&c, &cc).await);
    for t in [&a, &b] {
        insert_range(&c, t, 0..100).await;
    }
    // A server holding replicas of the group dies: each bucket's new replica goes to
    // the same server for every table.
    let victim_addr = sa[0].iter().next().unwrap().clone();
    let victim = cl.ts_addrs.iter().position(|x| *x == victim_addr).unwrap();
    cl.stop_tserver(victim).await;
    for t in [&a, &b, &cc] {
        let (c, t, victim_addr) = (c.clone(), t.clone(), victim_addr.clone());
        wait_for(Duration::from_secs(90), "re-replication", move || {
            let (c, t, victim_addr) = (c.clone(), t.clone(), victim_addr.clone());
            async move {
                let Ok(l) = c.table_locations(&t, true).await else {
                    return false;
                };
                l.iter().all(|l| {
                    let voters: Vec<_> = l.replicas.iter().filter(|r| r.voter).collect();
                    voters.len() == 3 && voters.iter().all(|r| r.live && r.addr != victim_addr)
                })
            }
        })
        .await;
    }
    let sa = bucket_servers(&c, &a).await;
    assert_eq!(sa, bucket_servers(&c, &b).await, "after re-replication");
    assert_eq!(sa, bucket_servers(&c, &cc).await, "after re-replication");
    for t in [&a, &b] {
        assert_eq!(c.scan(t).count().await.unwrap(), 100);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lagging_follower_gets_a_tablet_copy() {
    // Snapshot (checkpoint) every 20 entries and keep only 5 behind it, so a follower
    // that misses 80 entries can only catch up by copying the tablet.
    let group = cairn_consensus::GroupOptions {
        snapshot_every: 20,
        keep_behind_snapshot: 5,
        ..fast_group()
    };
    let mut cl = InProc::start_with(3, Duration::from_secs(300), group).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 1, 3)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_batched(&c, &t, 0..100, 10).await;
    let last_index = |ts: &Option<cairn_tserver::TabletServer>| {
        ts.as_ref()
            .map(|ts| ts.manager().list())
            .unwrap_or_default()
            .iter()
            .map(|r| r.group.status().last_log_index)
            .max()
            .unwrap_or(0)
    };
    let stopped_at = last_index(&cl.tservers[1]);
    cl.stop_tserver(1).await;
    insert_batched(&c, &t, 100..1000, 10).await;
    c.scan(&t).count().await.unwrap();
    // Purging runs in the background after a snapshot: restart the follower only once
    // the leader's log no longer holds what it missed.
    let purged_past = |cl: &InProc| {
        cl.tservers.iter().flatten().any(|ts| {
            ts.manager().list().iter().any(|r| {
                let s = r.group.status();
                s.role == cairn_consensus::ReplicaRole::Leader && s.purged_index > stopped_at
            })
        })
    };
    wait_for(
        Duration::from_secs(30),
        "the leader to purge its log past the stopped follower",
        || {
            let done = purged_past(&cl);
            async move { done }
        },
    )
    .await;
    cl.start_tserver(1).await;
    let live = cl.ts_addrs.clone();
    wait_replicas_agree(
        &c,
        &t,
        &live,
        1000,
        "the lagging follower to install a tablet copy",
    )
    .await;
    assert!(
        cairn_consensus::state_machine::snapshots_installed() >= 1,
        "the follower caught up without a tablet copy"
    );
    // The copied replica serves snapshot reads and keeps up with new writes.
    insert_batched(&c, &t, 1000..1100, 10).await;
    wait_replicas_agree(&c, &t, &cl.ts_addrs, 1100, "the copied replica to keep up").await;
    cl.restart_all().await;
    let c = cl.client().await;
    let t = c.open_table("t").await.unwrap();
    let ids = all_ids(&c, &t).await;
    if ids.len() != 1100 {
        for (i, ts) in cl.tservers.iter().enumerate() {
            for r in ts.as_ref().unwrap().manager().list() {
                let tab = r.tablet();
                eprintln!(
                    "replica state after restart: ts{i} {:?} durable {} applied {} stats {:?}",
                    r.group.status(),
                    tab.durable_index(),
                    tab.applied_index(),
                    tab.stats()
                );
            }
        }
    }
    assert_eq!(ids, (0..1100).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ordered_scan_resumes_on_another_replica() {
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 1, 3)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..3000).await;
    let leader = current_leader(&c, &t, 0).await;
    let mut cur = c
        .scan(&t)
        .projection(["id"])
        .ordered(true)
        .batch_rows(100)
        .read_mode(ReadMode::Snapshot(c.last_timestamp()))
        .cursor()
        .await
        .unwrap();
    let mut ids: Vec<i64> = Vec::new();
    let take = |b: arrow::array::RecordBatch, ids: &mut Vec<i64>| {
        let a = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        ids.extend(a.values().iter().copied());
    };
    let first = cur.next_batch().await.unwrap().unwrap();
    take(first, &mut ids);
    // The server holding the scanner dies mid-scan.
    let i = cl.ts_addrs.iter().position(|a| *a == leader).unwrap();
    cl.stop_tserver(i).await;
    while let Some(b) = cur.next_batch().await.unwrap() {
        take(b, &mut ids);
    }
    assert_eq!(
        ids,
        (0..3000).collect::<Vec<_>>(),
        "rows missing, repeated or out of order"
    );
}

/// Scans and writes through in-process servers (as the SQL engine of `cairn local` makes
/// them) give the same rows as over gRPC: continued and closed scanners, limits, ordered
/// scans, and writes that follow a leader that stepped down.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_process_calls_match_grpc() {
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let grpc = cl.client().await;
    // Each server wrapped to count the calls that reach it in process.
    let c = cl.client().await;
    let calls = Arc::new(AtomicUsize::new(0));
    for t in cl.tservers.iter().flatten() {
        let counted = Counted {
            inner: t.service(),
            calls: calls.clone(),
        };
        c.register_in_process(t.addr(), Arc::new(counted));
    }
    c.create_table(table_spec("t", 3, 3)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..2000).await;
    assert_eq!(all_ids(&c, &t).await, (0..2000).collect::<Vec<_>>());
    assert_eq!(all_ids(&grpc, &t).await, all_ids(&c, &t).await);

    // Small batches: every tablet's scanner is continued many times.
    let ids = |r: cairn_client::ScanResult| first_column_ids(&r.batches);
    let snap = ReadMode::Snapshot(c.last_timestamp());
    let ordered = |cl: &cairn_client::Client| {
        cl.scan(&t)
            .projection(["id"])
            .ordered(true)
            .batch_rows(64)
            .read_mode(snap)
            .predicate(ColumnPredicate::range(
                "id",
                Value::Int64(100),
                Value::Int64(1500),
            ))
            .execute()
    };
    let local = ids(ordered(&c).await.unwrap());
    assert_eq!(local.len(), 1400);
    assert_eq!(local, ids(ordered(&grpc).await.unwrap()));
    let limited = c
        .scan(&t)
        .projection(["id"])
        .limit(7)
        .execute()
        .await
        .unwrap();
    assert_eq!(limited.num_rows(), 7);

    // A cursor dropped mid-scan closes its scanner on the server.
    let mut cur = c.scan(&t).batch_rows(10).cursor().await.unwrap();
    assert!(cur.next_batch().await.unwrap().is_some());
    cur.close().await;
    wait_for(Duration::from_secs(10), "scanners to be closed", || {
        let open: usize = cl
            .tservers
            .iter()
            .flatten()
            .map(|t| t.service().open_scanners())
            .sum();
        async move { open == 0 }
    })
    .await;

    // The leader of tablet 0 steps down; in-process writes find the new one.
    let tablet0 = c.table_locations(&t, true).await.unwrap()[0]
        .tablet_id
        .clone();
    let leader = current_leader(&c, &t, 0).await;
    let mut lc = grpc.tablet_server(&leader).await.unwrap();
    let _ = lc
        .step_down(cairn_proto::StepDownRequest { tablet_id: tablet0 })
        .await;
    insert_range(&c, &t, 2000..2600).await;
    assert_eq!(all_ids(&c, &t).await, (0..2600).collect::<Vec<_>>());
    assert_eq!(all_ids(&grpc, &t).await, (0..2600).collect::<Vec<_>>());
    assert!(
        calls.load(Ordering::Relaxed) > 50,
        "the calls did not go in process"
    );
}

/// An in-process server that counts the calls it gets.
struct Counted {
    inner: cairn_tserver::service::TabletService,
    calls: Arc<AtomicUsize>,
}

impl cairn_proto::InProcessTabletServer for Counted {
    fn scan(
        &self,
        req: cairn_proto::ScanRequest,
    ) -> futures::future::BoxFuture<'static, Result<cairn_proto::InProcessScan, tonic::Status>>
    {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.scan(req)
    }

    fn write(
        &self,
        req: cairn_proto::WriteRequest,
    ) -> futures::future::BoxFuture<'static, Result<cairn_proto::WriteResponse, tonic::Status>>
    {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.write(req)
    }

    fn txn_control(
        &self,
        req: cairn_proto::TxnControlRequest,
    ) -> futures::future::BoxFuture<'static, Result<cairn_proto::TxnControlResponse, tonic::Status>>
    {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.txn_control(req)
    }

    fn get(
        &self,
        req: cairn_proto::GetRequest,
    ) -> futures::future::BoxFuture<'static, Result<cairn_proto::GetResponse, tonic::Status>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.get(req)
    }

    fn bulk_insert(
        &self,
        req: cairn_proto::BulkInsertRequest,
        rows: arrow::array::RecordBatch,
    ) -> futures::future::BoxFuture<'static, Result<cairn_proto::WriteResponse, tonic::Status>>
    {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.bulk_insert(req, rows)
    }
}

/// A timestamp further ahead of a server's clock than the allowed offset (500 ms) —
/// propagated by a client, or asked for as a snapshot — is refused with a clear error,
/// and moves neither the server's clock nor its history GC mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timestamps_beyond_the_clock_offset_are_refused() {
    let cl = InProc::start(1, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 1, 1)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..10).await;
    let locs = c.table_locations(&t, true).await.unwrap();
    let tablet = locs[0].tablet_id.clone();
    let mut ts = c
        .tablet_server(locs[0].leader_addr().unwrap())
        .await
        .unwrap();
    let now = cairn_common::HybridClock::new().now();
    let hour_ahead = now.plus_micros(3_600_000_000).0;
    let enc = cairn_client::encode_write(&t.schema, &[row(100)]).unwrap();
    let err = ts
        .write(cairn_proto::WriteRequest {
            tablet_id: tablet.clone(),
            batches: enc.batches.clone(),
            propagated_timestamp: hour_ahead,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("ahead of this server's clock"),
        "{err:?}"
    );
    let err = ts
        .scan(cairn_proto::ScanRequest {
            tablet_id: tablet.clone(),
            all_columns: true,
            read_mode: cairn_proto::ReadMode::ReadAtSnapshot as i32,
            snapshot_timestamp: hour_ahead,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains("ahead of this server's clock"),
        "{err:?}"
    );
    // The clock did not move: the next write is stamped now, and history a minute old
    // is still readable.
    let r = ts
        .write(cairn_proto::WriteRequest {
            tablet_id: tablet.clone(),
            batches: enc.batches,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        r.timestamp < now.plus_micros(60_000_000).0,
        "the write was stamped {} (the clock jumped ahead)",
        r.timestamp
    );
    assert_eq!(
        c.scan(&t)
            .read_mode(ReadMode::Snapshot(now.0))
            .count()
            .await
            .unwrap(),
        10
    );
}

/// Every RPC that takes a tablet, table or Raft group id refuses ids that are not
/// plain names. `DeleteTablet` names a directory with its id: an empty id, `..`, an
/// absolute path or `a/b` must delete nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_ids_are_refused_by_every_rpc() {
    let cl = InProc::start(1, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 1, 1)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..10).await;
    let victim = cl.dir.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), b"x").unwrap();
    let tablets_dir = cl.ts_dir(0).join("tablets");
    let addr = cl.ts_addrs[0].clone();
    let mut raw = c.tablet_server(&addr).await.unwrap();
    let hostile = [
        String::new(),
        ".".to_string(),
        "..".to_string(),
        "/x".to_string(),
        "a/b".to_string(),
        victim.display().to_string(),
        "../victim".to_string(),
    ];
    let refused = |r: Result<tonic::Status, String>, what: &str, id: &str| {
        let s = r.unwrap_or_else(|e| panic!("{what}({id:?}) succeeded: {e}"));
        assert_eq!(
            s.code(),
            tonic::Code::InvalidArgument,
            "{what}({id:?}): {s:?}"
        );
        assert!(s.message().contains("invalid"), "{what}({id:?}): {s:?}");
    };
    fn err<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Result<tonic::Status, String> {
        match r {
            Ok(v) => Err(format!("{v:?}")),
            Err(s) => Ok(s),
        }
    }
    use cairn_proto as pb;
    for id in &hostile {
        let tid = || id.clone();
        refused(
            err(raw
                .delete_tablet(pb::DeleteTabletRequest { tablet_id: tid() })
                .await),
            "DeleteTablet",
            id,
        );
        refused(
            err(raw
                .create_tablet(pb::CreateTabletRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "CreateTablet",
            id,
        );
        refused(
            err(raw
                .write(pb::WriteRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "Write",
            id,
        );
        refused(
            err(raw
                .txn_control(pb::TxnControlRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "TxnControl",
            id,
        );
        refused(
            err(raw
                .bulk_insert(pb::BulkInsertRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "BulkInsert",
            id,
        );
        refused(
            err(raw
                .scan(pb::ScanRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "Scan",
            id,
        );
        refused(
            err(raw
                .checksum(pb::ChecksumRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "Checksum",
            id,
        );
        refused(
            err(raw
                .change_config(pb::ChangeConfigRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "ChangeConfig",
            id,
        );
        refused(
            err(raw
                .step_down(pb::StepDownRequest { tablet_id: tid() })
                .await),
            "StepDown",
            id,
        );
        refused(
            err(raw
                .flush_tablet(pb::FlushTabletRequest { tablet_id: tid() })
                .await),
            "FlushTablet",
            id,
        );
        refused(
            err(raw
                .safe_index(pb::SafeIndexRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "SafeIndex",
            id,
        );
        refused(
            err(raw
                .alter_schema(pb::AlterSchemaRequest {
                    tablet_id: tid(),
                    ..Default::default()
                })
                .await),
            "AlterSchema",
            id,
        );
        let mut cons = pb::consensus_client::ConsensusClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let rr = || pb::RaftRequest {
            group_id: id.clone(),
            payload: Default::default(),
        };
        refused(err(cons.append_entries(rr()).await), "AppendEntries", id);
        refused(err(cons.vote(rr()).await), "Vote", id);
        refused(
            err(cons.install_snapshot(rr()).await),
            "InstallSnapshot",
            id,
        );
        let mut master = c.master().await.unwrap();
        let report = pb::TabletReport {
            tablet_id: tid(),
            table_id: "0123456789abcdef".into(),
            ..Default::default()
        };
        refused(
            err(master
                .heartbeat(pb::HeartbeatRequest {
                    node_id: 999,
                    addr: "127.0.0.1:1".into(),
                    tablets: vec![report.clone()],
                    full_report: false,
                })
                .await),
            "Heartbeat(tablet_id)",
            id,
        );
        refused(
            err(master
                .heartbeat(pb::HeartbeatRequest {
                    node_id: 999,
                    addr: "127.0.0.1:1".into(),
                    tablets: vec![pb::TabletReport {
                        tablet_id: "0123456789abcdef".into(),
                        table_id: tid(),
                        ..report
                    }],
                    full_report: false,
                })
                .await),
            "Heartbeat(table_id)",
            id,
        );
    }
    // Nothing was deleted: the victim, the tablets directory and the table's rows.
    assert!(victim.join("keep").exists());
    assert!(tablets_dir.is_dir());
    assert_eq!(std::fs::read_dir(&tablets_dir).unwrap().count(), 1);
    assert_eq!(c.scan(&t).count().await.unwrap(), 10);
}

/// Mutual TLS with a cluster CA: servers and clients holding certificates the CA
/// signed work end to end; a client or tablet server whose certificate another CA
/// signed, one with no certificate, and a plaintext one are all refused, so a rogue
/// server can neither heartbeat to the master nor take part in Raft.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_tls_admits_only_the_cluster_ca() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path(), &["node", "client"]);
    let other = tempfile::tempdir().unwrap();
    make_certs(other.path(), &["rogue"]);
    let cluster_tls = tls_of(certs.path(), "node");
    let cl = InProc::start_tls(2, cluster_tls.clone()).await;
    let c = cl.client().await;
    c.create_table(table_spec("t", 2, 2)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    insert_range(&c, &t, 0..100).await;
    let masters = [cl.master_addr.clone()];
    let short = cairn_client::ClientOptions::default()
        .rpc_timeout(Duration::from_secs(1))
        .operation_timeout(Duration::from_secs(3));
    let client_with = |tls: Option<Arc<cairn_proto::TlsConfig>>| {
        let masters = masters.clone();
        let short = short.clone();
        async move {
            cairn_client::Client::connect(&masters)
                .await
                .unwrap()
                .with_tls(tls)
                .with_options(short)
        }
    };
    // A client with its own certificate from the cluster CA reads everything.
    let c2 = client_with(Some(tls_of(certs.path(), "client"))).await;
    let t2 = c2.open_table("t").await.unwrap();
    assert_eq!(c2.scan(&t2).count().await.unwrap(), 100);
    // Plaintext, another CA's certificate (trusting the right CA), and no certificate.
    let rogue = tls_of(other.path(), "rogue");
    let rogue_trusting_cluster = Arc::new(cairn_proto::TlsConfig {
        ca_pem: cluster_tls.ca_pem.clone(),
        ..(*rogue).clone()
    });
    for (what, tls) in [
        ("plaintext", None),
        ("another CA", Some(rogue.clone())),
        ("another CA's cert", Some(rogue_trusting_cluster.clone())),
    ] {
        let bad = client_with(tls).await;
        assert!(bad.list_tables().await.is_err(), "{what} was served");
    }
    // TLS that trusts the cluster CA but presents no certificate.
    let no_cert = tonic::transport::Endpoint::from_shared(format!("https://{}", cl.master_addr))
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(&cluster_tls.ca_pem)),
        )
        .unwrap();
    let refused = match no_cert.connect().await {
        Err(_) => true,
        Ok(ch) => cairn_proto::master_client::MasterClient::new(ch)
            .list_tables(cairn_proto::ListTablesRequest {})
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    // Consensus RPCs from a server with another CA's certificate fail at the handshake.
    let ch = cairn_proto::tls::endpoint(&cl.ts_addrs[0], Some(&rogue_trusting_cluster))
        .unwrap()
        .connect_lazy();
    let vote = cairn_proto::consensus_client::ConsensusClient::new(ch)
        .vote(cairn_proto::RaftRequest {
            group_id: "master".into(),
            payload: Default::default(),
        })
        .await
        .unwrap_err();
    assert_ne!(vote.code(), tonic::Code::InvalidArgument, "{vote:?}");
    // A tablet server with another CA's certificate never registers with the master.
    let rogue_dir = tempfile::tempdir().unwrap();
    let mut o = cairn_tserver::TserverOptions::new(
        rogue_dir.path(),
        &reserve_addr(),
        vec![cl.master_addr.clone()],
    );
    o.heartbeat_interval = Duration::from_millis(100);
    o.tls = Some(rogue_trusting_cluster.clone());
    let rogue_ts = cairn_tserver::TabletServer::start(o).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let servers = c.list_tablet_servers().await.unwrap();
    assert_eq!(servers.len(), 2, "{servers:?}");
    assert!(servers.iter().all(|s| s.addr != rogue_ts.addr()));
    rogue_ts.shutdown().await;
    assert_eq!(c.scan(&t).count().await.unwrap(), 100);
}

/// Native clients on a cluster with TLS: a client without a certificate must log in;
/// its token carries the user's privileges, which tablet servers check without the
/// master (42501's PERMISSION_DENIED for a table, or a read-only store, without the
/// privilege); a forged or
/// missing token is UNAUTHENTICATED; administrative and internal RPCs are refused to
/// users that are not superusers, and Raft and heartbeats to everyone without a
/// cluster certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_carry_privileges_and_admin_rpcs_need_admins() {
    use cairn_proto::auth::{Privileges, ScramVerifier, UserOp};
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path(), &["node"]);
    let cl = InProc::start_tls(1, tls_of(certs.path(), "node")).await;
    let admin = cl.client().await;
    admin.create_table(table_spec("t", 2, 1)).await.unwrap();
    let t = admin.open_table("t").await.unwrap();
    insert_range(&admin, &t, 0..50).await;
    let verifier = |p: &str| Some(ScramVerifier::from_password(p).unwrap().to_string());
    for (name, superuser) in [("ann", false), ("root", true)] {
        admin
            .user_ddl(&UserOp::Create {
                name: name.into(),
                password: verifier(&format!("{name}-pw")),
                superuser,
                create: false,
                if_not_exists: false,
            })
            .await
            .unwrap();
    }
    let ca_only = cairn_proto::TlsConfig::ca_only(&certs.path().join("ca.pem")).unwrap();
    let short = cairn_client::ClientOptions::default()
        .rpc_timeout(Duration::from_secs(2))
        .operation_timeout(Duration::from_secs(5));
    let user_client = || async {
        cairn_client::Client::connect(std::slice::from_ref(&cl.master_addr))
            .await
            .unwrap()
            .with_tls(Some(ca_only.clone()))
            .with_options(short.clone())
    };
    // No certificate and no login: nothing.
    let anon = user_client().await;
    assert!(matches!(
        anon.list_tables().await,
        Err(ClientError::Unauthenticated(_))
    ));
    assert!(matches!(
        user_client().await.login("ann", "wrong").await,
        Err(ClientError::Unauthenticated(_))
    ));
    let ann = user_client().await.login("ann", "ann-pw").await.unwrap();
    let t_ann = ann.open_table("t").await.unwrap();
    let e = ann.scan(&t_ann).count().await.unwrap_err();
    assert!(matches!(e, ClientError::PermissionDenied(_)), "{e}");
    assert!(matches!(
        ann.create_table(table_spec("mine", 2, 1)).await,
        Err(ClientError::PermissionDenied(_))
    ));
    assert!(matches!(
        ann.drop_table("t", false).await,
        Err(ClientError::PermissionDenied(_))
    ));
    // Privileges are in the token: granted ones reach the next login.
    let grant_select_to_ann = |table: &str| {
        let op = UserOp::Grant {
            users: vec!["ann".into()],
            tables: vec![table.into()],
            privileges: Privileges::SELECT,
            create: false,
            revoke: false,
        };
        let admin = admin.clone();
        async move { admin.user_ddl(&op).await }
    };
    grant_select_to_ann("t").await.unwrap();
    let ann = user_client().await.login("ann", "ann-pw").await.unwrap();
    assert_eq!(ann.scan(&t_ann).count().await.unwrap(), 50);
    let mut s = ann.new_session(&t_ann);
    s.set_flush_mode(cairn_client::FlushMode::Manual);
    s.apply(row(1000)).await.unwrap();
    let e = s.flush().await.unwrap_err();
    assert!(format!("{e}").contains("permission denied"), "{e}");
    // A read-only store too: lookups and scans need SELECT on it, which a grant by
    // name gives (refused at once, not retried on every replica).
    let store_dir = tempfile::tempdir().unwrap();
    create_and_push_store(&admin, "st", 1, 20, store_dir.path()).await;
    let st = ann.open_store("st").await.unwrap();
    let e = st.get(&[Value::Int64(3)]).await.unwrap_err();
    assert!(matches!(e, ClientError::PermissionDenied(_)), "{e}");
    assert!(
        e.to_string().contains("permission denied for table st"),
        "{e}"
    );
    let e = st.scan_all(0).await.unwrap_err();
    assert!(matches!(e, ClientError::PermissionDenied(_)), "{e}");
    grant_select_to_ann("st").await.unwrap();
    let ann = user_client().await.login("ann", "ann-pw").await.unwrap();
    let st = ann.open_store("st").await.unwrap();
    assert_eq!(
        st.get(&[Value::Int64(3)]).await.unwrap(),
        Some(vec![Value::String("v-3".into())])
    );
    assert_eq!(st.scan_all(0).await.unwrap().1.len(), 20);
    // Raw RPCs as ann: every administrative one is refused.
    let leader = t_ann_leader(&admin, &t).await;
    let mut ts = ann.tablet_server(&leader.1).await.unwrap();
    let tablet = leader.0.clone();
    let denied = |r: Result<tonic::Status, ()>| {
        let s = r.unwrap();
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    };
    denied(
        ts.list_tablets(cairn_proto::ListTabletsRequest {})
            .await
            .err()
            .ok_or(()),
    );
    denied(
        ts.delete_tablet(cairn_proto::DeleteTabletRequest {
            tablet_id: tablet.clone(),
        })
        .await
        .err()
        .ok_or(()),
    );
    denied(
        ts.step_down(cairn_proto::StepDownRequest {
            tablet_id: tablet.clone(),
        })
        .await
        .err()
        .ok_or(()),
    );
    denied(
        ts.checksum(cairn_proto::ChecksumRequest {
            tablet_id: tablet.clone(),
            ..Default::default()
        })
        .await
        .err()
        .ok_or(()),
    );
    denied(
        ts.change_config(cairn_proto::ChangeConfigRequest {
            tablet_id: tablet.clone(),
            ..Default::default()
        })
        .await
        .err()
        .ok_or(()),
    );
    denied(
        ts.flush_tablet(cairn_proto::FlushTabletRequest {
            tablet_id: tablet.clone(),
        })
        .await
        .err()
        .ok_or(()),
    );
    let mut master = ann.master().await.unwrap();
    denied(
        master
            .heartbeat(cairn_proto::HeartbeatRequest {
                node_id: 1,
                addr: "127.0.0.1:1".into(),
                ..Default::default()
            })
            .await
            .err()
            .ok_or(()),
    );
    denied(
        master
            .list_users(cairn_proto::ListUsersRequest {})
            .await
            .err()
            .ok_or(()),
    );
    // Raft needs a cluster certificate: not even a superuser's token will do.
    let root = user_client().await.login("root", "root-pw").await.unwrap();
    let ch = cairn_proto::tls::endpoint(&leader.1, Some(&ca_only))
        .unwrap()
        .connect_lazy();
    let vote = cairn_proto::consensus_client::ConsensusClient::new(ch)
        .vote(cairn_proto::RaftRequest {
            group_id: tablet.clone(),
            payload: Default::default(),
        })
        .await
        .unwrap_err();
    assert_eq!(vote.code(), tonic::Code::Unauthenticated, "{vote:?}");
    // A superuser's token may administer; the table is intact.
    let mut ts_root = root.tablet_server(&leader.1).await.unwrap();
    assert!(
        !ts_root
            .list_tablets(cairn_proto::ListTabletsRequest {})
            .await
            .unwrap()
            .into_inner()
            .tablets
            .is_empty()
    );
    // A forged token is refused.
    let mut forged = anon.tablet_server(&leader.1).await.unwrap();
    let mut req = tonic::Request::new(cairn_proto::ListTabletsRequest {});
    req.metadata_mut()
        .insert("authorization", "Bearer cairn1.e30.AAAA".parse().unwrap());
    let e = forged.list_tablets(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert_eq!(admin.scan(&t).count().await.unwrap(), 50);
}

/// The first tablet of `t` and its leader's address.
async fn t_ann_leader(c: &cairn_client::Client, t: &cairn_client::Table) -> (String, String) {
    let locs = c.table_locations(t, true).await.unwrap();
    let l = &locs[0];
    (
        l.tablet_id.clone(),
        l.leader_addr().expect("a leader").to_string(),
    )
}

/// The `n` column of every row at `snapshot` (0: latest), by id.
async fn balances(
    c: &cairn_client::Client,
    t: &cairn_client::Table,
    snapshot: u64,
) -> (u64, Vec<(i64, i64)>) {
    let mode = if snapshot == 0 {
        ReadMode::Latest
    } else {
        ReadMode::Snapshot(snapshot)
    };
    let r = c
        .scan(t)
        .projection(["id", "n"])
        .read_mode(mode)
        .execute()
        .await
        .unwrap();
    let mut out = Vec::new();
    for b in &r.batches {
        let ids = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        let ns = b
            .column(1)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        for i in 0..b.num_rows() {
            out.push((ids.value(i), ns.value(i)));
        }
    }
    out.sort_unstable();
    (r.snapshot_timestamp, out)
}

/// Multi-row transactions across the tablets of a replicated table: the transaction's
/// scans see its own rows and nobody else's do; a rolled-back transaction leaves
/// nothing; a committed one appears at one timestamp on every
/// tablet; a single write to a key a transaction owns waits for its commit; and
/// concurrent bank transfers (first committer wins) keep the total at every snapshot
/// read, also while a tablet server is stopped and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_commit_atomically_across_tablets() {
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("acct", 4, 3)).await.unwrap();
    let t = c.open_table("acct").await.unwrap();
    let schema = t.schema.clone();
    let put =
        |id: i64, n: i64| Operation::insert(vec![Value::Int64(id), Value::Null, Value::Int64(n)]);

    // Rollback: nothing is left, on any tablet.
    let txn = c.begin_transaction();
    let mut s = txn.session(&t);
    for id in 100..120 {
        s.apply(put(id, 1)).await.unwrap();
    }
    assert!(s.flush().await.unwrap().is_empty());
    assert!(txn.participants() > 1, "the rows should span tablets");
    assert!(
        all_ids(&c, &t).await.is_empty(),
        "provisional rows are not visible"
    );
    let own = txn.scan(&t).projection(["id"]).execute().await.unwrap();
    let mut own = first_column_ids(&own.batches);
    own.sort_unstable();
    assert_eq!(
        own,
        (100..120).collect::<Vec<_>>(),
        "the transaction sees its own rows"
    );
    txn.rollback().await.unwrap();
    assert!(all_ids(&c, &t).await.is_empty());

    // Commit: every row at one timestamp.
    let txn = c.begin_transaction();
    let mut s = txn.session(&t);
    for id in 0..8 {
        s.apply(put(id, 100)).await.unwrap();
    }
    assert!(s.flush().await.unwrap().is_empty());
    let cts = txn.commit().await.unwrap();
    assert_eq!(balances(&c, &t, cts.0).await.1.len(), 8);
    assert!(balances(&c, &t, cts.prev().0).await.1.is_empty());

    // A single write waits for the transaction that owns its key.
    let txn = c.begin_transaction();
    let mut s = txn.session(&t);
    s.apply(Operation::update(&schema, &[Value::Int64(0)], &[("n", Value::Int64(90))]).unwrap())
        .await
        .unwrap();
    s.apply(Operation::update(&schema, &[Value::Int64(1)], &[("n", Value::Int64(110))]).unwrap())
        .await
        .unwrap();
    assert!(s.flush().await.unwrap().is_empty());
    let (c2, t2, schema2) = (c.clone(), t.clone(), schema.clone());
    let single = tokio::spawn(async move {
        let mut s = c2.new_session(&t2);
        s.apply(
            Operation::update(&schema2, &[Value::Int64(0)], &[("n", Value::Int64(95))]).unwrap(),
        )
        .await
        .unwrap();
        s.flush().await.unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !single.is_finished(),
        "the write must wait for the transaction"
    );
    txn.commit().await.unwrap();
    assert!(single.await.unwrap().is_empty());
    // Put the total back to 800 (0: 95, 1: 110 → 0: 90).
    let mut s = c.new_session(&t);
    s.apply(Operation::update(&schema, &[Value::Int64(0)], &[("n", Value::Int64(90))]).unwrap())
        .await
        .unwrap();
    assert!(s.flush().await.unwrap().is_empty());
    let total = |rows: &[(i64, i64)]| rows.iter().map(|(_, n)| n).sum::<i64>();
    assert_eq!(total(&balances(&c, &t, 0).await.1), 800);

    // Bank transfers, with a reader checking every snapshot it reads.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (c, t, stop) = (c.clone(), t.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                let (snap, rows) = balances(&c, &t, 0).await;
                assert_eq!(rows.len(), 8);
                assert_eq!(total(&rows), 800, "balances at snapshot {snap}: {rows:?}");
                reads += 1;
            }
            reads
        })
    };
    let mut workers = Vec::new();
    for w in 0..3i64 {
        let (c, t, schema) = (c.clone(), t.clone(), schema.clone());
        workers.push(tokio::spawn(async move {
            let mut done = 0;
            let mut i = 0i64;
            while done < 12 {
                i += 1;
                let from = (w * 3 + i) % 8;
                let to = (from + 1 + i % 7) % 8;
                if to == from {
                    continue;
                }
                let (snap, rows) = balances(&c, &t, 0).await;
                let bal = |id| rows.iter().find(|(k, _)| *k == id).unwrap().1;
                let txn = c.begin_transaction();
                let mut s = txn.session(&t);
                s.set_atomic(true);
                s.set_flush_mode(cairn_client::FlushMode::Manual);
                for (id, n) in [(from, bal(from) - 3), (to, bal(to) + 3)] {
                    let op =
                        Operation::update(&schema, &[Value::Int64(id)], &[("n", Value::Int64(n))])
                            .unwrap()
                            .unchanged_since(snap);
                    s.apply(op).await.unwrap();
                }
                if !s.flush().await.is_ok_and(|e| e.is_empty()) {
                    // First committer wins (or a write failed over): read again and
                    // retry.
                    let _ = txn.rollback().await;
                    continue;
                }
                // A commit that fails during the failover is retried as a new
                // transfer: either way the total is unchanged.
                if txn.commit().await.is_ok() {
                    done += 1;
                }
            }
        }));
    }
    // A tablet server stops and comes back while transfers run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cl.stop_tserver(1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cl.start_tserver(1).await;
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.await.unwrap() > 0);
    let rows = balances(&c, &t, 0).await.1;
    assert_eq!(total(&rows), 800, "{rows:?}");
}

/// Writers of one hot row take turns: a write that finds the row locked (another
/// write on its way through Raft) waits for the lock on a blocking thread instead of
/// failing, so every one of many concurrent updates of two keys succeeds, and the
/// rows end as some writer's last update left them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_of_one_row_all_succeed() {
    let cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("hot", 1, 3)).await.unwrap();
    let t = c.open_table("hot").await.unwrap();
    let mut s = c.new_session(&t);
    s.apply(row(1)).await.unwrap();
    s.apply(row(2)).await.unwrap();
    let mut writers = Vec::new();
    for w in 0..16i64 {
        let (c, t) = (c.clone(), t.clone());
        writers.push(tokio::spawn(async move {
            let mut s = c.new_session(&t);
            for i in 0..25i64 {
                let key = [Value::Int64(1 + (i % 2))];
                let op = Operation::update(&t.schema, &key, &[("n", Value::Int64(w * 100 + i))])
                    .unwrap();
                s.apply(op).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    // Key 1 gets each writer's even i (its last is 24), key 2 the odd ones (23).
    for (id, last) in [(1i64, 24i64), (2, 23)] {
        let got = c
            .get(&t, &[Value::Int64(id)], &["n".into()], ReadMode::Latest)
            .await
            .unwrap();
        let Some([Value::Int64(n)]) = got.as_deref() else {
            panic!("row {id}: {got:?}");
        };
        assert!((0..16).contains(&(n / 100)), "row {id}: n = {n}");
        assert_eq!(
            n % 100,
            last,
            "row {id} is not a writer's last update: n = {n}"
        );
    }
}

/// Group commit: concurrent writers on one replicated tablet share log entries (the
/// leader's proposer put more records than entries into the log), every
/// acknowledged write is there, the replicas agree, and the batched entries replay
/// the same after a restart of the whole cluster. Keyed reads (`Client::get`) see
/// every write, also through a server in this process.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_share_log_entries_and_keyed_reads_see_them() {
    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(table_spec("gc", 1, 3)).await.unwrap();
    let t = c.open_table("gc").await.unwrap();
    let mut writers = Vec::new();
    for w in 0..24i64 {
        let (c, t) = (c.clone(), t.clone());
        writers.push(tokio::spawn(async move {
            let mut s = c.new_session(&t);
            for i in 0..40 {
                let id = w * 1000 + i;
                s.apply(row(id)).await.unwrap();
                // Half the writers read their own row back at once, by key.
                if w % 2 == 0 {
                    let got = c
                        .get(&t, &[Value::Int64(id)], &[], ReadMode::Latest)
                        .await
                        .unwrap();
                    assert_eq!(got.map(|r| r[2].clone()), Some(Value::Int64(id * 2)));
                }
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let stats: Vec<_> = cl
        .tservers
        .iter()
        .flatten()
        .flat_map(|s| s.manager().list())
        .map(|r| r.proposer_stats())
        .collect();
    let records: u64 = stats.iter().map(|s| s.records).sum();
    let entries: u64 = stats.iter().map(|s| s.entries).sum();
    assert!(records >= 960, "{stats:?}");
    assert!(entries < records, "no write shared an entry: {stats:?}");
    let live = cl.ts_addrs.clone();
    assert_eq!(check_replicas_agree(&c, &t, &live).await, 960);
    cl.restart_all().await;
    let c = cl.in_process_client().await;
    let t = c.open_table("gc").await.unwrap();
    assert_eq!(check_replicas_agree(&c, &t, &live).await, 960);
    for id in [0i64, 39, 23_000, 23_039] {
        let got = c
            .get(&t, &[Value::Int64(id)], &["v".into()], ReadMode::Latest)
            .await
            .unwrap();
        assert_eq!(got, Some(vec![Value::String(format!("row-{id}"))]));
    }
    assert_eq!(
        c.get(&t, &[Value::Int64(5_000_000)], &[], ReadMode::Latest)
            .await
            .unwrap(),
        None
    );
    let past = c.last_timestamp();
    let mut s = c.new_session(&t);
    s.apply(Operation::delete(&t.schema, &[Value::Int64(0)]).unwrap())
        .await
        .unwrap();
    assert_eq!(
        c.get(&t, &[Value::Int64(0)], &[], ReadMode::Latest)
            .await
            .unwrap(),
        None
    );
    let then = c
        .get(
            &t,
            &[Value::Int64(0)],
            &["n".into()],
            ReadMode::Snapshot(past),
        )
        .await
        .unwrap();
    assert_eq!(then, Some(vec![Value::Int64(0)]));
    assert!(
        c.get(&t, &[Value::String("x".into())], &[], ReadMode::Latest)
            .await
            .is_err()
    );
    assert!(
        c.get(&t, &[Value::Int64(1)], &["nope".into()], ReadMode::Latest)
            .await
            .is_err()
    );
}

/// A read-only store is a catalog object: its ring is laid out over the live tablet
/// servers, names are unique, bad requests say what to change, and the entry survives
/// a restart of the whole cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_are_catalog_objects_laid_out_over_live_servers() {
    use cairn_client::CreateStoreSpec;
    use cairn_readonly::{StoreColumn, StoreSchema};

    let mut cl = InProc::start(3, Duration::from_secs(300)).await;
    cl.wait_live(3).await;
    let c = cl.client().await;
    let col = |name: &str, data_type, nullable| StoreColumn {
        name: name.into(),
        data_type,
        nullable,
    };
    let schema = StoreSchema {
        key: vec![col("user_id", DataType::Int64, false)],
        value: vec![col("score", DataType::Double, true)],
    };
    let mut spec = CreateStoreSpec::new("recs", schema.clone());
    spec.replication = 2;
    let id = c.create_store(spec.clone()).await.unwrap();
    let s = c.get_store("recs").await.unwrap();
    assert_eq!(s.id, id);
    assert_eq!(s.schema, schema);
    assert_eq!(
        s.nodes.len(),
        3,
        "every live tablet server is a node of the ring"
    );
    assert_eq!(s.layout.partition_nodes.len(), 12);
    assert_eq!(s.layout.replication, 2);
    assert_eq!(s.current_version, None);
    let mut ids: Vec<u64> = s.nodes.iter().map(|n| n.node_id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);

    // Names are unique; IF NOT EXISTS answers with the existing store.
    match c.create_store(spec.clone()).await {
        Err(ClientError::AlreadyExists(m)) => assert!(m.contains("recs"), "{m}"),
        other => panic!("a second store 'recs' was not refused: {other:?}"),
    }
    spec.if_not_exists = true;
    assert_eq!(c.create_store(spec).await.unwrap(), id);
    // More copies than servers, or fewer partitions than servers: refused with why.
    // (Too few live servers is retried, as servers may be starting: a short budget.)
    let impatient = c.clone().with_options(
        cairn_client::ClientOptions::default().operation_timeout(Duration::from_secs(2)),
    );
    let mut too_many = CreateStoreSpec::new("wide", schema.clone());
    too_many.replication = 4;
    let e = impatient
        .create_store(too_many)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("only 3 are live"), "{e}");
    let mut too_few = CreateStoreSpec::new("narrow", schema.clone());
    too_few.partitions = 2;
    let e = c.create_store(too_few).await.unwrap_err().to_string();
    assert!(e.contains("ring partitions"), "{e}");
    assert!(matches!(
        c.get_store("nope").await,
        Err(ClientError::NotFound(_))
    ));

    // The entry is in the replicated catalog: it survives a restart.
    cl.restart_all().await;
    let c = cl.client().await;
    wait_for(Duration::from_secs(30), "the store after a restart", || {
        let c = c.clone();
        async move { c.get_store("recs").await.is_ok() }
    })
    .await;
    assert_eq!(c.get_store("recs").await.unwrap(), s);
    let names: Vec<String> = c
        .list_stores()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["recs".to_string()]);

    c.drop_store("recs", false).await.unwrap();
    assert!(c.list_stores().await.unwrap().is_empty());
    assert!(matches!(
        c.drop_store("recs", false).await,
        Err(ClientError::NotFound(_))
    ));
    c.drop_store("recs", true).await.unwrap();
}
