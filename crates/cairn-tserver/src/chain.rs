//! The point leader's side of value-dependent chaining (HyperDex §4.1).
//!
//! A tablet of a table with subspaces is the *key subspace* of its rows, and its leader
//! is their *point leader*. A write to such a tablet goes through
//! [`ChainDriver::chained_write`]:
//!
//! 1. The written keys' chain locks are taken ([`ChainDriver`] keeps a fixed set of
//!    stripes), so the chains of one row never overlap: each change of a row is chained
//!    after the previous one finished, and [`cairn_hyperspace::KeyChains`] has no
//!    older chain in flight to name as a predecessor.
//! 2. The write is replicated and applied as any other (exactly once per request id).
//! 3. Each written row's value before and after the write is read from the tablet's
//!    MVCC history at the write's timestamp: `ts - 1` and `ts`. Reading history rather
//!    than remembering makes a retried request (answered from the result tracker, here
//!    or at a new leader after a failover) chain the same change again.
//! 4. The change is sent along its chain ([`cairn_hyperspace::build_chain`]): for each
//!    subspace, the new value's region stores the row, then the old value's region marks
//!    it removed (subspaces side by side). Each link is a write into the subspace's
//!    region table carrying the version (the write's timestamp), applied by the region
//!    only if its copy is older or absent ([`cairn_hyperspace::admit`],
//!    [`cairn_client::Client::write_region_rows`]): a link applied before is
//!    acknowledged as a duplicate. The links of concurrent chains bound for one region
//!    table share writes: while one write to it runs, the next links queue and go out
//!    together, so a busy server appends and fsyncs once for many chains.
//! 5. Only then is the writer answered, with a timestamp at or after the region writes,
//!    so that the writer's next search sees its change.
//!
//! A transaction's writes are provisional and chain nothing; its commit on each tablet
//! (`TxnFinish`) chains the rows the transaction committed there, at the commit
//! timestamp, before the commit is answered.
//!
//! The write and its chain run on a task of their own, which the caller awaits: a
//! caller that goes away (its RPC timed out or was cancelled) does not stop the chain,
//! which finishes as long as the point leader lives.
//!
//! A chain that cannot finish (a region unreachable past the deadline) fails the
//! request with `UNAVAILABLE`; the client retries it with the same request id, which
//! chains the change again. If nobody retries — the client gave up, or the point
//! leader died mid-chain — the change is still on the tablet's replicated list of
//! unchained changes ([`cairn_tablet::unchained`]), and the tablet's leader, this one
//! or the next, chains it again ([`crate::point_leader`]). Finished chains are noted
//! here ([`ChainDriver::note_done`]) until the leader reports them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cairn_client::Client;
use cairn_client::hyperspace::RegionWrite;
use cairn_common::{Schema, Value};
use cairn_hyperspace::{LinkAction, SubspaceEntry, build_chain, region_row};
use cairn_tablet::unchained::Unchained;

use crate::error::{Result, TserverError};

/// The least time a chain is given to finish, whatever its caller's deadline: a chain
/// left unfinished may leave a subspace behind (see the module docs).
pub const MIN_CHAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How many chain-lock stripes a server keeps.
const STRIPES: usize = 1024;

/// One row's change, as the point leader chains it.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The write's timestamp: the row's new version.
    pub version: u64,
    /// The row before the write (`None`: it did not exist).
    pub old: Option<Vec<Value>>,
    /// The row after the write (`None`: deleted).
    pub new: Option<Vec<Value>>,
}

/// Chains the changes of this server's point-leader tablets into their subspaces.
pub struct ChainDriver {
    client: Client,
    stripes: Vec<Arc<tokio::sync::Mutex<()>>>,
    /// Per tablet, the changes whose chains finished and are not reported yet.
    done: parking_lot::Mutex<HashMap<String, Vec<Unchained>>>,
    /// Tablets whose bookkeeping round is running.
    tending: Arc<parking_lot::Mutex<HashSet<String>>>,
    /// Region rows of concurrent chains, batched per region table.
    batches: Arc<LinkBatches>,
}

/// Marks a tablet's bookkeeping round as running until dropped.
pub struct Tending {
    tablets: Arc<parking_lot::Mutex<HashSet<String>>>,
    tablet: String,
}

impl Drop for Tending {
    fn drop(&mut self) {
        self.tablets.lock().remove(&self.tablet);
    }
}

impl ChainDriver {
    /// A driver writing through `client` (connected to the masters as this server, with
    /// its cluster certificate when the cluster uses TLS).
    pub fn new(client: Client) -> ChainDriver {
        ChainDriver {
            client,
            stripes: (0..STRIPES)
                .map(|_| Arc::new(tokio::sync::Mutex::new(())))
                .collect(),
            done: parking_lot::Mutex::new(HashMap::new()),
            tending: Arc::new(parking_lot::Mutex::new(HashSet::new())),
            batches: Arc::new(LinkBatches::default()),
        }
    }

    /// Notes that the chains of the changes of `keys` (encoded primary keys) at `ts`
    /// on tablet `tablet_id` are through, to be reported by the tablet's leader.
    pub fn note_done(&self, tablet_id: &str, ts: u64, keys: Vec<Vec<u8>>) {
        let mut done = self.done.lock();
        let list = done.entry(tablet_id.to_string()).or_default();
        list.extend(keys.into_iter().map(|k| (ts, k)));
    }

    /// Takes the finished chains of `tablet_id` noted so far.
    pub fn take_done(&self, tablet_id: &str) -> Vec<Unchained> {
        self.done.lock().remove(tablet_id).unwrap_or_default()
    }

    /// Forgets the noted chains of the tablets `keep` says no to.
    pub fn keep_done_of(&self, keep: impl Fn(&str) -> bool) {
        self.done.lock().retain(|id, _| keep(id));
    }

    /// Starts a bookkeeping round on `tablet_id`, unless one is running.
    pub fn start_tending(&self, tablet_id: &str) -> Option<Tending> {
        self.tending
            .lock()
            .insert(tablet_id.to_string())
            .then(|| Tending {
                tablets: self.tending.clone(),
                tablet: tablet_id.to_string(),
            })
    }

    /// The client the driver writes through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The highest timestamp the driver's writes have seen.
    pub fn last_timestamp(&self) -> u64 {
        self.client.last_timestamp()
    }

    /// Takes the chain locks of `keys` (encoded primary keys of tablet `tablet_id`), in
    /// stripe order so that two writes never wait for each other crosswise.
    pub async fn lock_keys(
        &self,
        tablet_id: &str,
        keys: &[Vec<u8>],
    ) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let stripes = stripes_of(tablet_id, keys);
        let mut guards = Vec::with_capacity(stripes.len());
        for s in stripes {
            guards.push(self.stripes[s].clone().lock_owned().await);
        }
        guards
    }

    /// The chain locks of `keys`, if none is held now (`None`: a chain of one of them, or
    /// of a row sharing a stripe, is running).
    pub fn try_lock_keys(
        &self,
        tablet_id: &str,
        keys: &[Vec<u8>],
    ) -> Option<Vec<tokio::sync::OwnedMutexGuard<()>>> {
        stripes_of(tablet_id, keys)
            .into_iter()
            .map(|s| self.stripes[s].clone().try_lock_owned().ok())
            .collect()
    }

    /// Sends every change of `changes` (rows of `schema`) along its chain through
    /// `subspaces`, returning once every link is applied.
    ///
    /// REQUIRES: the chain locks of the changed rows are held, and each row changes at
    /// most once in `changes`.
    pub async fn propagate(
        &self,
        schema: &Arc<Schema>,
        replicas: u32,
        subspaces: &[SubspaceEntry],
        changes: &[Change],
        timeout: Duration,
    ) -> Result<()> {
        // Tests make chains fail here, as a region out of reach would.
        fail::fail_point!("chain::propagate", |arg| Err(TserverError::Unavailable(
            arg.unwrap_or_else(|| "injected: a region is out of reach".into())
        )));
        let layouts: Vec<_> = subspaces.iter().map(|s| s.layout.clone()).collect();
        // Per subspace, the puts then the removes: each row's links in chain order, and
        // the rows of one step written together.
        let mut steps: Vec<Vec<Link>> = vec![vec![]; subspaces.len() * 2];
        for c in changes {
            let links = build_chain(&layouts, schema, c.old.as_deref(), c.new.as_deref())
                .map_err(|e| TserverError::Internal(format!("cannot chain a change: {e}")))?;
            for l in &links {
                let (row, step) = match l.action {
                    LinkAction::Put => (c.new.as_deref(), l.subspace * 2),
                    LinkAction::Remove => (c.old.as_deref(), l.subspace * 2 + 1),
                };
                let row = row
                    .ok_or_else(|| TserverError::Internal("a chain link without its row".into()))?;
                // A put into a region the row was not in (it is new, or it moves) most
                // likely finds no copy there: insert it first. Anything else finds one.
                let moves_in = l.action == LinkAction::Put
                    && (c.old.is_none()
                        || links
                            .iter()
                            .any(|o| o.subspace == l.subspace && o.action == LinkAction::Remove));
                steps[step].push(Link {
                    row: region_row(
                        row,
                        (l.region, l.cell),
                        c.version,
                        l.action == LinkAction::Remove,
                    ),
                    first: if moves_in {
                        RegionWrite::Insert
                    } else {
                        RegionWrite::IfOlder
                    },
                });
            }
        }
        // Subspaces are independent: their chains run side by side, each in order.
        let mut per_subspace = Vec::with_capacity(subspaces.len());
        let mut steps = steps.into_iter();
        for entry in subspaces {
            let (puts, removes) = (
                steps.next().unwrap_or_default(),
                steps.next().unwrap_or_default(),
            );
            per_subspace.push(async move {
                let table = self
                    .client
                    .region_table_of(schema, replicas, entry)
                    .map_err(client_error)?;
                for links in [puts, removes] {
                    if !links.is_empty() {
                        self.apply_links(&table, links, timeout).await?;
                    }
                }
                Ok::<(), TserverError>(())
            });
        }
        for r in futures::future::join_all(per_subspace).await {
            r?;
        }
        Ok(())
    }

    /// Writes a step's region rows ([`Client::write_region_rows`]) together with the
    /// rows other chains have for the same region table meanwhile: one write per region
    /// table is in flight at a time, and the links that arrive while it runs go out
    /// together in the next one ([`LinkBatches`]). Under load that turns many small
    /// replicated writes (each a log append and an fsync on its region) into a few
    /// larger ones. Every link of a batch shares its outcome.
    async fn apply_links(
        &self,
        table: &Arc<cairn_client::Table>,
        links: Vec<Link>,
        timeout: Duration,
    ) -> Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rows = links.into_iter().map(|l| (l.row, l.first)).collect();
        let start_writer = self.batches.submit(&table.name, rows, timeout, tx);
        if start_writer {
            let (client, batches, table) =
                (self.client.clone(), self.batches.clone(), table.clone());
            tokio::spawn(async move { batches.write_all(&client, &table).await });
        }
        rx.await.map_err(|_| {
            TserverError::Unavailable("a region write was dropped; retry the write".into())
        })?
    }
}

/// One chain step's region rows, its timeout, and where its outcome goes.
struct WaitingLinks {
    rows: Vec<(Vec<Value>, RegionWrite)>,
    timeout: Duration,
    done: tokio::sync::oneshot::Sender<Result<()>>,
}

/// The links of concurrent chains, per region table, batched into shared writes (see
/// [`ChainDriver::apply_links`]). At most one writer task per region table runs; it
/// writes everything waiting, then whatever arrived meanwhile, until nothing waits.
/// A region table has a queue exactly while its writer runs.
#[derive(Default)]
struct LinkBatches {
    queues: parking_lot::Mutex<HashMap<String, Vec<WaitingLinks>>>,
}

impl LinkBatches {
    /// Queues `rows` for region table `table`; `done` receives their outcome. Returns
    /// whether the caller must start the table's writer ([`LinkBatches::write_all`]).
    fn submit(
        &self,
        table: &str,
        rows: Vec<(Vec<Value>, RegionWrite)>,
        timeout: Duration,
        done: tokio::sync::oneshot::Sender<Result<()>>,
    ) -> bool {
        let links = WaitingLinks {
            rows,
            timeout,
            done,
        };
        match self.queues.lock().entry(table.to_string()) {
            std::collections::hash_map::Entry::Occupied(mut q) => {
                q.get_mut().push(links);
                false
            }
            std::collections::hash_map::Entry::Vacant(q) => {
                q.insert(vec![links]);
                true
            }
        }
    }

    /// The writer of region table `table`: writes the waiting links in batches until
    /// none wait, then retires (the next [`LinkBatches::submit`] starts a new one).
    async fn write_all(&self, client: &Client, table: &cairn_client::Table) {
        loop {
            let batch = {
                let mut queues = self.queues.lock();
                let Some(q) = queues.get_mut(&table.name) else {
                    return;
                };
                if q.is_empty() {
                    queues.remove(&table.name);
                    return;
                }
                std::mem::take(q)
            };
            let timeout = batch.iter().map(|w| w.timeout).max().unwrap_or_default();
            let mut rows = Vec::with_capacity(batch.iter().map(|w| w.rows.len()).sum());
            let mut senders = Vec::with_capacity(batch.len());
            for w in batch {
                rows.extend(w.rows);
                senders.push(w.done);
            }
            let outcome = client
                .write_region_rows(table, rows, timeout)
                .await
                .map_err(client_error);
            for s in senders {
                // A chain that went away no longer needs its answer.
                let _ = s.send(match &outcome {
                    Ok(()) => Ok(()),
                    Err(e) => Err(shared_error(e)),
                });
            }
        }
    }
}

/// A copy of a batch's error for each of its chains ([`client_error`] makes only
/// these two kinds).
fn shared_error(e: &TserverError) -> TserverError {
    match e {
        TserverError::Internal(m) => TserverError::Internal(m.clone()),
        e => TserverError::Unavailable(e.to_string()),
    }
}

/// The chain-lock stripes of `keys` of tablet `tablet_id`, in order, each once.
fn stripes_of(tablet_id: &str, keys: &[Vec<u8>]) -> Vec<usize> {
    let mut stripes: Vec<usize> = keys
        .iter()
        .map(|k| {
            let mut h = xxhash_rust::xxh64::Xxh64::new(0);
            h.update(tablet_id.as_bytes());
            h.update(k);
            (h.digest() % STRIPES as u64) as usize
        })
        .collect();
    stripes.sort_unstable();
    stripes.dedup();
    stripes
}

/// One region row a chain writes, and how to try writing it first.
#[derive(Clone, Debug)]
struct Link {
    row: Vec<Value>,
    first: RegionWrite,
}

/// A client error of a chain: a row a region refused is internal; anything else becomes
/// `UNAVAILABLE` (the writer retries and the chain runs again).
fn client_error(e: cairn_client::ClientError) -> TserverError {
    match e {
        cairn_client::ClientError::Subspace {
            message,
            retryable: false,
        } => TserverError::Internal(message),
        e => TserverError::Unavailable(format!("a subspace could not be updated yet: {e}")),
    }
}
