//! The point leader's side of chaining, on the tablet service (HyperDex §4.1; the
//! driver that writes the links is [`crate::chain`]):
//!
//! - [`TabletService::chained_write`]: a write to a table with subspaces, then its
//!   chain; [`TabletService::chained_bulk_insert`], the same for a bulk insert;
//! - [`TabletService::commit_chained`]: a transaction's commit on such a table, then
//!   the chain of every row it committed here;
//! - [`TabletService::tend_chains`]: the leader's bookkeeping, run every
//!   [`TEND_EVERY`]: it reports the chains that finished (a replicated
//!   `ChainsDone` record takes them off the tablet's list of unchained changes,
//!   [`cairn_tablet::unchained`]) and chains again every change left on that list
//!   for [`RESUME_AFTER`]. Every replica applies the same list, so a new leader — after
//!   the old one died mid-chain, or a restart — finds the chains nobody finished, and
//!   so does a leader whose chain failed after its writer gave up, or that committed a
//!   transaction for a coordinator that went silent. Chaining a change again is
//!   harmless: each region keeps the newest version of each row.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_common::{HybridTime, Value};
use cairn_proto as pb;
use cairn_tablet::ops::LogRecord;

use crate::chain::{ChainDriver, Change};
use crate::error::{Result, TserverError};
use crate::replica::{TabletReplica, TxnStep, WriteOptions};
use crate::service::TabletService;

/// How long an applied change waits for its chain before the leader chains it again:
/// well above what a chain takes, so that a chain still running is rarely repeated.
pub const RESUME_AFTER: Duration = Duration::from_secs(3);

/// How often a point leader tends its chains ([`TabletService::tend_chains`]).
pub const TEND_EVERY: Duration = Duration::from_secs(1);

/// The most changes one tablet resumes in one round.
const RESUME_BATCH: usize = 4096;

impl TabletService {
    /// A write to a tablet of a table with subspaces, on its leader (the rows' point
    /// leader): the write, then its chain through every subspace ([`crate::chain`]).
    /// The answer's timestamp covers the region writes.
    pub(crate) async fn chained_write(
        &self,
        replica: &Arc<TabletReplica>,
        schema: &Arc<cairn_common::Schema>,
        ops: Vec<cairn_tablet::RowOp>,
        wo: WriteOptions,
    ) -> Result<(HybridTime, Vec<(usize, cairn_tablet::RowError)>)> {
        // A transaction's writes are provisional: its commit is chained instead.
        if wo.txn.is_some() {
            return replica.write(ops, wo).await;
        }
        let keys: Vec<Vec<Value>> = ops
            .iter()
            .map(|op| {
                schema
                    .key_indexes()
                    .iter()
                    .map(|&i| op.values[i].clone().unwrap_or(Value::Null))
                    .collect()
            })
            .collect();
        let mut encoded: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
        for k in &keys {
            let refs: Vec<&Value> = k.iter().collect();
            encoded.push(cairn_common::key::encode_values(&refs)?);
        }
        let deadline = wo.deadline;
        self.write_and_chain(replica, keys, encoded, deadline, |r| async move {
            r.write(ops, wo).await
        })
        .await
    }

    /// A bulk insert into a tablet of a table with subspaces, on its leader: the insert,
    /// then the chain of every row of the batch, as [`TabletService::chained_write`]
    /// does for a write. Applying the insert lists each row as unchained on every
    /// replica ([`cairn_tablet::unchained`]), so a chain this leader does not finish
    /// is resumed by the next. The answer's timestamp covers the region writes.
    pub(crate) async fn chained_bulk_insert(
        &self,
        replica: &Arc<TabletReplica>,
        rows: arrow::array::RecordBatch,
        request: Option<cairn_tablet::RequestId>,
        deadline: tokio::time::Instant,
    ) -> Result<(HybridTime, Vec<(usize, cairn_tablet::RowError)>)> {
        let schema = replica.tablet().schema();
        // The keys of the rows the insert accepts, encoded as the tablet lists them
        // (and as the chain locks of plain writes are).
        let shaped = cairn_tablet::bulk::shape_batch(&schema, &rows)?;
        let mut encoded: Vec<Vec<u8>> = cairn_tablet::bulk::row_keys(&schema, &shaped.batch)?
            .into_iter()
            .flatten()
            .collect();
        drop(shaped);
        encoded.sort_unstable();
        encoded.dedup();
        let keys = encoded
            .iter()
            .map(|k| cairn_common::key::decode_row_key(&schema, k))
            .collect::<cairn_common::Result<Vec<_>>>()?;
        self.write_and_chain(replica, keys, encoded, deadline, move |r| async move {
            r.bulk_insert(rows, request, deadline).await
        })
        .await
    }

    /// Runs `write` — a write of the rows of `keys` (key values; `encoded` as the
    /// tablet encodes them) — under their chain locks, then chains the change it made
    /// ([`TabletService::chain_rows`]) and notes the chains done. Runs on a task of its
    /// own: a caller that goes away does not stop the chain. Returns a timestamp at or
    /// after the region writes, and the write's row errors.
    async fn write_and_chain<W>(
        &self,
        replica: &Arc<TabletReplica>,
        keys: Vec<Vec<Value>>,
        encoded: Vec<Vec<u8>>,
        deadline: tokio::time::Instant,
        write: impl FnOnce(Arc<TabletReplica>) -> W + Send + 'static,
    ) -> Result<(HybridTime, Vec<(usize, cairn_tablet::RowError)>)>
    where
        W: std::future::Future<Output = Result<(HybridTime, Vec<(usize, cairn_tablet::RowError)>)>>
            + Send
            + 'static,
    {
        let driver = self.chain_driver()?;
        let (svc, replica) = (self.clone(), replica.clone());
        tokio::spawn(async move {
            let _locks = driver.lock_keys(&replica.meta.tablet_id, &encoded).await;
            let (ts, errs) = write(replica.clone()).await?;
            let seen = svc
                .chain_rows(&driver, &replica, keys, ts, Newest::Known, deadline)
                .await?;
            driver.note_done(&replica.meta.tablet_id, ts.0, encoded);
            Ok((seen, errs))
        })
        .await
        .map_err(|e| TserverError::Internal(format!("a chained write failed: {e}")))?
    }

    /// Chains the change that the write at `ts` made to each row of `keys` (key
    /// values) into the replica's subspaces: the row before (`ts - 1`) and after
    /// (`ts`), read from the tablet's history ([`cairn_tablet::Tablet::change_at`]).
    /// Returns a timestamp at or after the region writes. `newest` says whether a
    /// row may have changed again after `ts` (see [`Newest`]).
    ///
    /// REQUIRES: the chain locks of `keys` are held, or no other write of these rows
    /// can be chained meanwhile.
    async fn chain_rows(
        &self,
        driver: &crate::chain::ChainDriver,
        replica: &Arc<TabletReplica>,
        mut keys: Vec<Vec<Value>>,
        ts: HybridTime,
        newest: Newest,
        deadline: tokio::time::Instant,
    ) -> Result<HybridTime> {
        keys.sort_by(|a, b| {
            a.iter()
                .zip(b)
                .map(|(x, y)| x.partial_cmp_same(y).unwrap_or(std::cmp::Ordering::Equal))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        keys.dedup();
        // Tests hold chains here, between a write and the read of its rows.
        while chain_held() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let tablet = replica.tablet();
        // Only this write's rows matter, so the reads wait for no other writer: on
        // this task in the usual case, on a blocking thread when one must wait. The
        // rows come in the tablet's schema of the moment, and are chained in it: the
        // read is repeated if the schema changed while it ran.
        let std_deadline = deadline.into_std();
        let keys = Arc::new(keys);
        let (schema, changes) = loop {
            let schema = tablet.schema();
            let changes = match changes_at(&tablet, &keys, ts, newest, std_deadline, false)? {
                Some(changes) => changes,
                None => {
                    let (tablet, keys) = (tablet.clone(), keys.clone());
                    tokio::task::spawn_blocking(move || {
                        changes_at(&tablet, &keys, ts, newest, std_deadline, true)?.ok_or_else(
                            || {
                                TserverError::Internal(
                                    "a blocking history read did not read".into(),
                                )
                            },
                        )
                    })
                    .await
                    .map_err(|e| {
                        TserverError::Internal(format!("reading a write's rows failed: {e}"))
                    })??
                }
            };
            if Arc::ptr_eq(&schema, &tablet.schema()) {
                break (schema, changes);
            }
        };
        if !changes.is_empty() {
            // A chain outlives its caller's deadline if need be (see `crate::chain`).
            let timeout = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .max(crate::chain::MIN_CHAIN_TIMEOUT);
            driver
                .propagate(&schema, 1, &replica.subspaces(), &changes, timeout)
                .await?;
        }
        let seen = HybridTime(driver.last_timestamp().max(ts.0));
        self.observe(seen.0)?;
        Ok(seen)
    }

    /// Commits transaction `txn` on a tablet of a table with subspaces, then chains the
    /// rows it committed here into them. The chain locks are taken after the commit:
    /// until then the transaction owns its rows, and a plain write holding a chain
    /// lock may be waiting for them. A write chained in between carries a newer
    /// version, which the regions keep (see [`crate::chain`]).
    pub(crate) async fn commit_chained(
        &self,
        replica: &Arc<TabletReplica>,
        txn: cairn_tablet::TxnId,
        step: TxnStep,
        deadline: tokio::time::Instant,
    ) -> Result<pb::TxnControlResponse> {
        let driver = self.chain_driver()?;
        let tablet = replica.tablet();
        let schema = tablet.schema();
        // Encoded as the chain locks of plain writes are (the key columns in key order).
        let encoded = tablet.txn_keys(txn);
        let keys = encoded
            .iter()
            .map(|k| cairn_common::key::decode_row_key(&schema, k))
            .collect::<cairn_common::Result<Vec<_>>>()?;
        // On a task of its own: a caller that goes away does not stop the chain.
        let (svc, replica) = (self.clone(), replica.clone());
        let timestamp = tokio::spawn(async move {
            let ts = replica.txn_control(txn, step, deadline).await?;
            Ok::<_, TserverError>(match ts {
                Some(ts) if !keys.is_empty() => {
                    let _locks = driver.lock_keys(&replica.meta.tablet_id, &encoded).await;
                    let seen = svc
                        .chain_rows(&driver, &replica, keys, ts, Newest::Unknown, deadline)
                        .await?;
                    driver.note_done(&replica.meta.tablet_id, ts.0, encoded);
                    seen.0
                }
                Some(ts) => ts.0,
                None => 0,
            })
        })
        .await
        .map_err(|e| TserverError::Internal(format!("a chained commit failed: {e}")))??;
        Ok(pb::TxnControlResponse {
            timestamp,
            state: pb::TxnState::Pending as i32,
        })
    }

    /// One round of chain bookkeeping on every tablet of a table with subspaces that
    /// this server leads (see the module docs). A tablet still busy with the previous
    /// round is skipped; each tablet's round runs on a task of its own.
    pub async fn tend_chains(&self) {
        let Ok(driver) = self.chain_driver() else {
            return;
        };
        let replicas = self.manager().list();
        // Noted chains of tablets no longer here are nobody's to report.
        driver.keep_done_of(|id| replicas.iter().any(|r| r.meta.tablet_id == id));
        for replica in replicas {
            // A tablet whose table has (or had) subspaces tracks its changes.
            if !replica.tablet().unchained().tracking() {
                continue;
            }
            let id = replica.meta.tablet_id.clone();
            if replica.group.check_leader_ready().is_err() {
                // A follower reports nothing: its leader chains these again.
                driver.take_done(&id);
                continue;
            }
            let Some(busy) = driver.start_tending(&id) else {
                continue;
            };
            let svc = self.clone();
            let driver = driver.clone();
            tokio::spawn(async move {
                let _busy = busy;
                match svc.tend_tablet(&driver, &replica).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(tablet = %replica.meta.tablet_id, changes = n,
                        "resumed the chains of changes nobody finished chaining"),
                    Err(e) => tracing::debug!(tablet = %replica.meta.tablet_id, error = %e,
                        "tending unfinished chains (tried again shortly)"),
                }
            });
        }
    }

    /// [`TabletService::tend_chains`] on one tablet: reports the finished chains, then
    /// chains again every change waiting longer than [`RESUME_AFTER`] and reports
    /// those. Returns how many changes it chained again.
    async fn tend_tablet(
        &self,
        driver: &ChainDriver,
        replica: &Arc<TabletReplica>,
    ) -> Result<usize> {
        let id = &replica.meta.tablet_id;
        self.report_done(driver, replica).await?;
        let tablet = replica.tablet();
        let before = tablet
            .clock()
            .now()
            .minus_micros(RESUME_AFTER.as_micros() as u64);
        let waiting = tablet.unchained().older_than(before.0, RESUME_BATCH);
        if waiting.is_empty() {
            return Ok(0);
        }
        let schema = tablet.schema();
        let mut by_ts: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        for (ts, key) in waiting {
            by_ts.entry(ts).or_default().push(key);
        }
        let mut resumed = 0;
        for (ts, encoded) in by_ts {
            let keys = encoded
                .iter()
                .map(|k| cairn_common::key::decode_row_key(&schema, k))
                .collect::<cairn_common::Result<Vec<_>>>()?;
            // A change whose row is being chained right now is left to that chain
            // (under load a chain may take longer than RESUME_AFTER; chaining it again
            // meanwhile would only add load).
            let Some(_locks) = driver.try_lock_keys(id, &encoded) else {
                continue;
            };
            let deadline = tokio::time::Instant::now() + crate::chain::MIN_CHAIN_TIMEOUT;
            self.chain_rows(
                driver,
                replica,
                keys,
                HybridTime(ts),
                Newest::Unknown,
                deadline,
            )
            .await?;
            resumed += encoded.len();
            driver.note_done(id, ts, encoded);
        }
        self.report_done(driver, replica).await?;
        Ok(resumed)
    }

    /// Replicates the finished chains of `replica`'s tablet as a `ChainsDone` record.
    /// Those not reported (the record failed) stay on the tablet's list and are
    /// chained again later.
    async fn report_done(&self, driver: &ChainDriver, replica: &TabletReplica) -> Result<()> {
        let done = driver.take_done(&replica.meta.tablet_id);
        if done.is_empty() {
            return Ok(());
        }
        let record = LogRecord::ChainsDone { done }.encode();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        replica.propose_record(record, deadline).await
    }
}

/// Whether the `chain::before_read` failpoint holds chains back (it is set in
/// tests only; builds without failpoints never hold).
fn chain_held() -> bool {
    fail::fail_point!("chain::before_read", |_| true);
    false
}

/// Whether the write being chained is known to be its rows' newest.
///
/// A chain normally runs under its rows' chain locks from before its write, so no
/// newer write of them has been chained yet, and a newer one chains after it into the
/// same subspaces or more. A change chained again by the bookkeeping, or a
/// transaction's commit (whose chain locks are taken after it applies), may have been
/// overtaken by a newer change that was chained first. In the subspaces that newer
/// change reached, its tombstone outranks the older copy; but a subspace added since
/// was filled by its backfill, with no tombstone where the older row would go. So the
/// older change must not put its row anywhere once the row has changed again: it only
/// removes its old row (the newer change, or the backfill, put the row's current
/// values where they belong).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Newest {
    /// Nothing can have changed the rows since the write (its chain locks were held
    /// from before it).
    Known,
    /// A newer write may have been chained already: check each row.
    Unknown,
}

/// The changes the write at `ts` made to the rows of `keys` ([`Change`]s; rows it left
/// as they were have none). With [`Newest::Unknown`], a row changed again since
/// `ts` gives a change without its new row (see [`Newest`]). `Ok(None)` when a read
/// would have to wait and `may_block` is false.
///
/// REQUIRES: as [`cairn_tablet::Tablet::change_at`]; a blocking context if `may_block`.
fn changes_at(
    tablet: &cairn_tablet::Tablet,
    keys: &[Vec<Value>],
    ts: HybridTime,
    newest: Newest,
    deadline: std::time::Instant,
    may_block: bool,
) -> Result<Option<Vec<Change>>> {
    if newest == Newest::Unknown && !may_block {
        // Reading the newest row may wait for a transaction's commit.
        return Ok(None);
    }
    let mut out = Vec::new();
    for k in keys {
        let Some((old, mut new)) = tablet.change_at(k, ts, deadline, may_block)? else {
            return Ok(None);
        };
        if old == new {
            continue;
        }
        if newest == Newest::Unknown
            && new.is_some()
            && tablet.get(k, cairn_tablet::ReadMode::Latest)? != new
        {
            new = None;
            if old.is_none() {
                continue;
            }
        }
        out.push(Change {
            version: ts.0,
            old,
            new,
        });
    }
    Ok(Some(out))
}
