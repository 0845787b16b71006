//! Randomized transactions through SQL sessions against an oracle of snapshot
//! isolation, on a replicated table spread over three tablets.
//!
//! One driver interleaves the statements of several sessions at random, so every
//! outcome is determined and the oracle can say what each statement must return:
//!
//! - REPEATABLE READ blocks read at the snapshot their first statement took, over
//!   their own writes; an UPDATE of a row another transaction committed since that
//!   snapshot fails with 40001 and aborts the block (25P02 until ROLLBACK);
//! - READ COMMITTED blocks read what committed before each statement, over their own
//!   writes, and never fail an UPDATE for a concurrent commit;
//! - autocommit UPDATEs commit at once; ROLLBACK leaves nothing; COMMIT publishes
//!   every row of the block at once, on every tablet.
//!
//! The driver never lets a statement wait for a row another open block owns (the
//! oracle knows the owners), since one driver cannot both wait and commit; waiting
//! is covered by `transactions.rs`. `CAIRN_SI_SEEDS=n` runs more seeds.

use std::collections::BTreeMap;

use cairn_sql::SqlSession;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{count, q, sql_cluster};

/// Keys of the table (all present from the start).
const KEYS: i64 = 12;

/// A row's committed versions: (commit sequence number, value), oldest first.
type Versions = Vec<(u64, i64)>;

/// An open block as the oracle sees it.
#[derive(Default)]
struct Block {
    repeatable: bool,
    /// REPEATABLE READ: the commit sequence number its first statement read at.
    snapshot: Option<u64>,
    /// Its own writes.
    writes: BTreeMap<i64, i64>,
    /// Failed with 40001: only ROLLBACK is left.
    aborted: bool,
}

struct Oracle {
    rows: BTreeMap<i64, Versions>,
    seq: u64,
}

impl Oracle {
    fn value_at(&self, k: i64, seq: u64) -> i64 {
        self.rows[&k]
            .iter()
            .rev()
            .find(|(s, _)| *s <= seq)
            .map(|(_, v)| *v)
            .expect("every key has a first version")
    }

    /// What `block` reads for `k` in a statement starting now.
    fn read(&self, block: &Block, k: i64) -> i64 {
        if let Some(v) = block.writes.get(&k) {
            return *v;
        }
        self.value_at(k, block.snapshot.unwrap_or(self.seq))
    }

    fn commit(&mut self, writes: &BTreeMap<i64, i64>) {
        if writes.is_empty() {
            return;
        }
        self.seq += 1;
        for (k, v) in writes {
            self.rows
                .get_mut(k)
                .expect("known key")
                .push((self.seq, *v));
        }
    }

    /// Whether `k` changed after `block`'s snapshot (REPEATABLE READ only).
    fn changed_since(&self, block: &Block, k: i64) -> bool {
        block.repeatable
            && block
                .snapshot
                .is_some_and(|snap| self.rows[&k].last().is_some_and(|(s, _)| *s > snap))
    }
}

/// The rows `SELECT k, v … ORDER BY k` returns.
async fn all_rows(s: &SqlSession) -> Vec<(i64, i64)> {
    q(s, "SELECT k, v FROM si ORDER BY k")
        .await
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect()
}

/// A statement that must fail with `code`.
async fn expect_state(s: &SqlSession, sql: &str, code: &str, ctx: &str) {
    match s.execute(sql).await {
        Ok(_) => panic!("{ctx}: {sql} succeeded, expected SQLSTATE {code}"),
        Err(e) => assert_eq!(e.sqlstate(), code, "{ctx}: {sql}: {e}"),
    }
}

/// What a run exercised.
#[derive(Debug, Default)]
struct Seen {
    commits: usize,
    conflicts: usize,
    rollbacks: usize,
    reads: usize,
}

async fn run_seed(sessions: &[SqlSession], seed: u64, seen: &mut Seen) {
    let mut rng = StdRng::seed_from_u64(seed);
    let admin = &sessions[0];
    // Fresh values for this seed, committed by one autocommit statement.
    let mut oracle = Oracle {
        rows: BTreeMap::new(),
        seq: 0,
    };
    let base = rng.random_range(0..1000);
    count(admin, &format!("UPDATE si SET v = k + {base}")).await;
    for k in 0..KEYS {
        oracle.rows.insert(k, vec![(0, k + base)]);
    }
    let mut blocks: Vec<Option<Block>> = (0..sessions.len()).map(|_| None).collect();
    let owner = |blocks: &[Option<Block>], k: i64| {
        blocks
            .iter()
            .position(|b| b.as_ref().is_some_and(|b| b.writes.contains_key(&k)))
    };
    for step in 0..160 {
        let i = rng.random_range(1..sessions.len());
        let s = &sessions[i];
        let ctx = format!("seed {seed} step {step} session {i}");
        let Some(block) = blocks[i].as_mut() else {
            // No block open: begin one, or run an autocommit UPDATE.
            if rng.random_bool(0.7) {
                let repeatable = rng.random_bool(0.6);
                let sql = if repeatable {
                    "BEGIN ISOLATION LEVEL REPEATABLE READ"
                } else {
                    "BEGIN"
                };
                s.execute(sql).await.unwrap();
                // The first statement reads, so the snapshot is well defined.
                let block = Block {
                    repeatable,
                    snapshot: repeatable.then_some(oracle.seq),
                    ..Block::default()
                };
                let want: Vec<(i64, i64)> =
                    (0..KEYS).map(|k| (k, oracle.read(&block, k))).collect();
                assert_eq!(all_rows(s).await, want, "{ctx}: first read");
                blocks[i] = Some(block);
            } else {
                let k = rng.random_range(0..KEYS);
                if owner(&blocks, k).is_some() {
                    continue;
                }
                let d = rng.random_range(1..10);
                count(s, &format!("UPDATE si SET v = v + {d} WHERE k = {k}")).await;
                let v = oracle.value_at(k, oracle.seq) + d;
                oracle.commit(&BTreeMap::from([(k, v)]));
            }
            continue;
        };
        if block.aborted {
            expect_state(s, "SELECT v FROM si WHERE k = 0", "25P02", &ctx).await;
            s.execute("ROLLBACK").await.unwrap();
            blocks[i] = None;
            continue;
        }
        match rng.random_range(0..10) {
            0..=2 => {
                let k = rng.random_range(0..KEYS);
                let got = q(s, &format!("SELECT v FROM si WHERE k = {k}")).await;
                let block = blocks[i].as_ref().unwrap();
                assert_eq!(
                    got,
                    vec![vec![oracle.read(block, k).to_string()]],
                    "{ctx}: read of {k}"
                );
                seen.reads += 1;
            }
            3 => {
                let block = blocks[i].as_ref().unwrap();
                let want: Vec<(i64, i64)> = (0..KEYS).map(|k| (k, oracle.read(block, k))).collect();
                assert_eq!(all_rows(s).await, want, "{ctx}: scan");
            }
            4..=6 => {
                let k = rng.random_range(0..KEYS);
                if owner(&blocks, k).is_some_and(|o| o != i) {
                    continue;
                }
                let d = rng.random_range(1..10);
                let sql = format!("UPDATE si SET v = v + {d} WHERE k = {k}");
                let block = blocks[i].as_mut().unwrap();
                if oracle.changed_since(block, k) && !block.writes.contains_key(&k) {
                    expect_state(s, &sql, "40001", &ctx).await;
                    seen.conflicts += 1;
                    block.aborted = true;
                    block.writes.clear();
                } else {
                    assert_eq!(count(s, &sql).await, 1, "{ctx}: {sql}");
                    let v = oracle.read(block, k) + d;
                    block.writes.insert(k, v);
                }
            }
            7 | 8 => {
                let block = blocks[i].take().unwrap();
                s.execute("COMMIT")
                    .await
                    .unwrap_or_else(|e| panic!("{ctx}: COMMIT: {e}"));
                seen.commits += 1;
                oracle.commit(&block.writes);
            }
            _ => {
                s.execute("ROLLBACK").await.unwrap();
                seen.rollbacks += 1;
                blocks[i] = None;
            }
        }
    }
    // End every block; the latest rows are the oracle's.
    for (i, b) in blocks.iter_mut().enumerate() {
        if let Some(block) = b.take() {
            if block.aborted {
                sessions[i].execute("ROLLBACK").await.unwrap();
            } else {
                sessions[i].execute("COMMIT").await.unwrap();
                oracle.commit(&block.writes);
            }
        }
    }
    let want: Vec<(i64, i64)> = (0..KEYS)
        .map(|k| (k, oracle.value_at(k, oracle.seq)))
        .collect();
    assert_eq!(all_rows(admin).await, want, "seed {seed}: final rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_sql_transactions_match_a_snapshot_isolation_oracle() {
    let (_cl, engine) = sql_cluster(3).await;
    let sessions: Vec<SqlSession> = (0..5).map(|_| engine.session()).collect();
    let admin = &sessions[0];
    admin
        .execute(
            "CREATE TABLE si (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
             PARTITION BY HASH (k) PARTITIONS 3 WITH (replicas = 3)",
        )
        .await
        .unwrap();
    let rows: Vec<String> = (0..KEYS).map(|k| format!("({k}, {k})")).collect();
    count(admin, &format!("INSERT INTO si VALUES {}", rows.join(", "))).await;
    let seeds: u64 = std::env::var("CAIRN_SI_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let first = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1);
    let mut seen = Seen::default();
    for seed in first..first + seeds {
        run_seed(&sessions, seed, &mut seen).await;
    }
    eprintln!("seeds {first}..{}: {seen:?}", first + seeds);
    assert!(
        seen.commits > 0 && seen.conflicts > 0 && seen.rollbacks > 0 && seen.reads > 0,
        "the random runs should commit, conflict, roll back and read: {seen:?}"
    );
}
