//! The nemesis: faults injected into the running cluster, one at a time, each healed
//! before the next.
//!
//! Network faults use the failpoint `net::partition` that every server checks before
//! each internal RPC (Raft, heartbeats, master calls): its argument lists the
//! addresses the node must not reach. Setting it on both sides of a cut gives a
//! two-way partition; clients still reach every node, so an isolated leader keeps
//! receiving requests — the test of linearizable reads. Disk faults use `wal::append`
//! (ENOSPC: a full disk) and `wal::fsync` (a slow disk: every fsync of the server's
//! logs, Raft's group commits included, sleeps 200 ms); clock skew uses
//! `clock::skew_ms`.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

use crate::Result;
use crate::cluster::Cluster;
use crate::workload::REGISTERS;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// kill -9 a tablet server, restart it when healing.
    Kill,
    /// SIGSTOP a tablet server, SIGCONT when healing.
    Pause,
    /// Cut a minority of the tablet servers (and one master) off from the rest.
    PartitionMinority,
    /// Cut the leader of a tablet of the register table off from everyone.
    IsolateLeader,
    /// Two halves that cannot talk, and one node that talks to both.
    Bridge,
    /// Skew one tablet server's clock within the allowed offset.
    ClockSkew,
    /// Skew one tablet server's clock far beyond the allowed offset.
    ClockSkewBeyond,
    /// Fail one tablet server's log appends with ENOSPC (its replicas fail and are
    /// replaced); restart it when healing.
    DiskFull,
    /// Make one tablet server's log fsyncs slow.
    SlowDisk,
    /// kill -9 the leader master, restart it when healing.
    KillMasterLeader,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::PartitionMinority,
        FaultKind::IsolateLeader,
        FaultKind::Bridge,
        FaultKind::ClockSkew,
        FaultKind::ClockSkewBeyond,
        FaultKind::DiskFull,
        FaultKind::SlowDisk,
        FaultKind::KillMasterLeader,
    ];

    /// The kind's name in reports and flags.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::PartitionMinority => "partition-minority",
            FaultKind::IsolateLeader => "isolate-leader",
            FaultKind::Bridge => "bridge",
            FaultKind::ClockSkew => "clock-skew",
            FaultKind::ClockSkewBeyond => "clock-skew-beyond",
            FaultKind::DiskFull => "disk-full",
            FaultKind::SlowDisk => "slow-disk",
            FaultKind::KillMasterLeader => "kill-master-leader",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<FaultKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// What an injected fault did, to undo it.
#[derive(Debug)]
pub enum Injected {
    /// Killed these nodes.
    Killed(Vec<usize>),
    /// Paused these nodes.
    Paused(Vec<usize>),
    /// Set `net::partition` on these nodes.
    Partitioned(Vec<usize>),
    /// Set this failpoint on these nodes.
    Failpoint(&'static str, Vec<usize>),
    /// Set a failpoint that failed the node's replicas: clear it and restart them.
    FailpointThenRestart(&'static str, Vec<usize>),
}

/// Sets `net::partition` on `from` nodes to cut them off from `to` nodes.
async fn cut(c: &Cluster, from: &[usize], to: &[usize]) -> Result<()> {
    let addrs: Vec<String> = to.iter().map(|&i| c.nodes[i].rpc_addr.clone()).collect();
    let list = addrs.join(";");
    for &i in from {
        c.set_failpoint(i, "net::partition", &format!("return({list})"))
            .await?;
    }
    Ok(())
}

/// The address of the leader of the first tablet of the register table, if known.
async fn register_leader(c: &Cluster) -> Option<usize> {
    let client = c.client().await.ok()?;
    let t = client.open_table(REGISTERS).await.ok()?;
    let locs = client.table_locations(&t, true).await.ok()?;
    let addr = locs.first()?.leader_addr()?.to_string();
    c.node_of(&addr)
}

/// The leader master, if known.
async fn master_leader(c: &Cluster) -> Option<usize> {
    let client = c.client().await.ok()?;
    let ms = client.list_masters().await.ok()?;
    let m = ms.iter().find(|m| m.role.eq_ignore_ascii_case("leader"))?;
    c.node_of(&m.addr)
}

/// Injects a fault of `kind`.
pub async fn inject(c: &mut Cluster, kind: FaultKind, rng: &mut StdRng) -> Result<Injected> {
    let ts = c.tservers();
    let pick = |rng: &mut StdRng, v: &[usize]| v[rng.random_range(0..v.len())];
    Ok(match kind {
        FaultKind::Kill => {
            let i = pick(rng, &ts);
            c.kill(i);
            Injected::Killed(vec![i])
        }
        FaultKind::Pause => {
            let i = pick(rng, &ts);
            c.pause(i);
            Injected::Paused(vec![i])
        }
        FaultKind::PartitionMinority => {
            // Two tablet servers and one master on the small side.
            let mut all: Vec<usize> = (0..c.nodes.len()).collect();
            let mut small: Vec<usize> = Vec::new();
            let mut tss = ts.clone();
            for _ in 0..(ts.len() / 2).max(1) {
                let k = rng.random_range(0..tss.len());
                small.push(tss.remove(k));
            }
            let ms = c.masters();
            if ms.len() > 1 {
                small.push(pick(rng, &ms));
            }
            all.retain(|i| !small.contains(i));
            cut(c, &small, &all).await?;
            cut(c, &all, &small).await?;
            let mut both = small;
            both.extend(all);
            Injected::Partitioned(both)
        }
        FaultKind::IsolateLeader => {
            let victim = match register_leader(c).await {
                Some(i) => i,
                None => pick(rng, &ts),
            };
            let others: Vec<usize> = (0..c.nodes.len()).filter(|&i| i != victim).collect();
            cut(c, &[victim], &others).await?;
            cut(c, &others, &[victim]).await?;
            let mut all = others;
            all.push(victim);
            Injected::Partitioned(all)
        }
        FaultKind::Bridge => {
            // Tablet servers split in two halves; the middle one talks to both.
            let mut tss = ts.clone();
            let bridge = tss.remove(rng.random_range(0..tss.len()));
            let half = tss.len() / 2;
            let (a, b) = tss.split_at(half);
            let ms = c.masters();
            let mut left: Vec<usize> = a.to_vec();
            let mut right: Vec<usize> = b.to_vec();
            // Masters stay with the right side (a majority of them somewhere).
            right.extend(ms);
            cut(c, &left, &right).await?;
            cut(c, &right, &left).await?;
            tracing::info!(bridge = %c.nodes[bridge].name(), "bridge partition");
            left.extend(right);
            Injected::Partitioned(left)
        }
        FaultKind::ClockSkew | FaultKind::ClockSkewBeyond => {
            let i = pick(rng, &ts);
            let max = c.cfg.max_clock_offset_ms as i64;
            let ms = if kind == FaultKind::ClockSkew {
                rng.random_range(max / 4..max.max(2) * 3 / 4)
            } else {
                max * rng.random_range(4..20)
            };
            let ms = if rng.random_bool(0.5) { ms } else { -ms };
            c.set_failpoint(i, "clock::skew_ms", &format!("return({ms})"))
                .await?;
            Injected::Failpoint("clock::skew_ms", vec![i])
        }
        FaultKind::DiskFull => {
            let i = pick(rng, &ts);
            c.set_failpoint(i, "wal::append", "return(ENOSPC)").await?;
            Injected::FailpointThenRestart("wal::append", vec![i])
        }
        FaultKind::SlowDisk => {
            let i = pick(rng, &ts);
            c.set_failpoint(i, "wal::fsync", "sleep(200)").await?;
            Injected::Failpoint("wal::fsync", vec![i])
        }
        FaultKind::KillMasterLeader => {
            let ms = c.masters();
            let i = match master_leader(c).await {
                Some(i) => i,
                None => pick(rng, &ms),
            };
            c.kill(i);
            Injected::Killed(vec![i])
        }
    })
}

/// Undoes an injected fault.
pub async fn heal(c: &mut Cluster, injected: Injected) -> Result<()> {
    match injected {
        Injected::Killed(v) => {
            for i in v {
                c.restart(i)?;
            }
        }
        Injected::Paused(v) => {
            for i in v {
                c.resume(i);
            }
        }
        Injected::Partitioned(v) => {
            for i in v {
                // A node may be down meanwhile (never: faults do not overlap), or
                // slow to answer; try a few times.
                for attempt in 0..5 {
                    match c.clear_failpoint(i, "net::partition").await {
                        Ok(()) => break,
                        Err(e) if attempt == 4 => return Err(e),
                        Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                    }
                }
            }
        }
        Injected::Failpoint(name, v) => {
            for i in v {
                c.clear_failpoint(i, name).await?;
            }
        }
        Injected::FailpointThenRestart(name, v) => {
            for i in v {
                let _ = c.clear_failpoint(i, name).await;
                c.kill(i);
                c.restart(i)?;
            }
        }
    }
    Ok(())
}
