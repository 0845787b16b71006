//! What the Flight SQL service keeps between calls: results waiting behind tickets
//! and prepared statements behind handles.
//!
//! Flight SQL calls are independent requests, so the server keeps both kinds of state
//! itself, under opaque handles it hands to the client. Neither lives for ever: a
//! result nobody fetches is dropped after [`RESULT_TTL`] (stopping its query), a
//! prepared statement nobody uses after [`PREPARED_IDLE_TTL`], and each map holds at
//! most a fixed number of entries (the oldest goes first).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use datafusion::common::ScalarValue;
use futures::Stream;
use parking_lot::Mutex;
use tonic::Status;

use cairn_sql::session::{Prepared, SqlSession};

/// How long a result waits for its `DoGet`.
pub const RESULT_TTL: Duration = Duration::from_secs(5 * 60);
/// How long an unused prepared statement is kept.
pub const PREPARED_IDLE_TTL: Duration = Duration::from_secs(60 * 60);
/// Most results waiting at once.
pub const MAX_RESULTS: usize = 1024;
/// Most prepared statements open at once.
pub const MAX_PREPARED: usize = 16 * 1024;
/// How long a transaction may stay unused before it is rolled back.
pub const TXN_IDLE_TTL: Duration = Duration::from_secs(10 * 60);
/// Most transactions open at once.
pub const MAX_TRANSACTIONS: usize = 1024;

/// Record batches as they are produced.
pub(crate) type BatchStream = Pin<Box<dyn Stream<Item = Result<RecordBatch, Status>> + Send>>;

/// A result waiting for its `DoGet`: the rows of a query (not yet read), or the count
/// of a statement that already ran.
pub(crate) struct PendingResult {
    /// The schema of the rows.
    pub schema: SchemaRef,
    /// The rows.
    pub stream: BatchStream,
}

/// A prepared statement and what was bound to it.
pub(crate) struct PreparedEntry {
    /// The session it was prepared in (and runs in): a transaction's, if it was
    /// prepared in one.
    pub session: Arc<SqlSession>,
    /// The planned statement.
    pub prepared: Prepared,
    /// Parameter rows bound by the last `DoPut`, one execution each.
    pub bound: Mutex<Vec<Vec<ScalarValue>>>,
}

/// Results and prepared statements by handle.
pub(crate) struct Registry {
    results: Mutex<HashMap<Bytes, (Instant, PendingResult)>>,
    prepared: Mutex<HashMap<Bytes, (Instant, Arc<PreparedEntry>)>>,
    /// Open transactions: the session each runs in. A transaction dropped from here
    /// (ended, idle too long, evicted) is rolled back by its session unless it was
    /// committed.
    transactions: Mutex<HashMap<Bytes, (Instant, Arc<SqlSession>)>>,
    /// Makes handles differ between server runs.
    salt: u64,
    next: AtomicU64,
    result_ttl: Duration,
    prepared_ttl: Duration,
    max_results: usize,
    max_prepared: usize,
}

impl Registry {
    /// A registry with the default limits.
    pub fn new() -> Self {
        Self::with_limits(RESULT_TTL, PREPARED_IDLE_TTL, MAX_RESULTS, MAX_PREPARED)
    }

    /// A registry with other limits.
    pub fn with_limits(
        result_ttl: Duration,
        prepared_ttl: Duration,
        max_results: usize,
        max_prepared: usize,
    ) -> Self {
        let salt = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Registry {
            results: Mutex::new(HashMap::new()),
            prepared: Mutex::new(HashMap::new()),
            transactions: Mutex::new(HashMap::new()),
            salt,
            next: AtomicU64::new(1),
            result_ttl,
            prepared_ttl,
            max_results: max_results.max(1),
            max_prepared: max_prepared.max(1),
        }
    }

    fn handle(&self, kind: char) -> Bytes {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Bytes::from(format!("{kind}-{:016x}-{n}", self.salt))
    }

    /// Keeps a result for one `DoGet`; returns its handle.
    pub fn put_result(&self, result: PendingResult) -> Bytes {
        let handle = self.handle('r');
        // Dropped outside the lock: dropping a stream may stop a query.
        let evicted = insert_bounded(
            &mut self.results.lock(),
            handle.clone(),
            result,
            self.result_ttl,
            self.max_results,
        );
        drop(evicted);
        handle
    }

    /// Takes the result behind `handle` (a result can be fetched once).
    pub fn take_result(&self, handle: &[u8]) -> Option<PendingResult> {
        let (at, r) = self.results.lock().remove(handle)?;
        (at.elapsed() < self.result_ttl).then_some(r)
    }

    /// Keeps a prepared statement; returns its handle.
    pub fn put_prepared(&self, entry: PreparedEntry) -> Bytes {
        let handle = self.handle('p');
        let evicted = insert_bounded(
            &mut self.prepared.lock(),
            handle.clone(),
            Arc::new(entry),
            self.prepared_ttl,
            self.max_prepared,
        );
        drop(evicted);
        handle
    }

    /// The prepared statement behind `handle` (and marks it used).
    pub fn prepared(&self, handle: &[u8]) -> Option<Arc<PreparedEntry>> {
        let mut map = self.prepared.lock();
        let (at, entry) = map.get_mut(handle)?;
        if at.elapsed() >= self.prepared_ttl {
            map.remove(handle);
            return None;
        }
        *at = Instant::now();
        Some(entry.clone())
    }

    /// Keeps the session of a new transaction; returns the transaction's id.
    pub fn put_transaction(&self, session: Arc<SqlSession>) -> Bytes {
        let handle = self.handle('t');
        let evicted = insert_bounded(
            &mut self.transactions.lock(),
            handle.clone(),
            session,
            TXN_IDLE_TTL,
            MAX_TRANSACTIONS,
        );
        drop(evicted);
        handle
    }

    /// The session of transaction `id` (and marks it used).
    pub fn transaction(&self, id: &[u8]) -> Option<Arc<SqlSession>> {
        let mut map = self.transactions.lock();
        let (at, session) = map.get_mut(id)?;
        if at.elapsed() >= TXN_IDLE_TTL {
            let gone = map.remove(id);
            drop(map);
            drop(gone);
            return None;
        }
        *at = Instant::now();
        Some(session.clone())
    }

    /// Takes transaction `id` out (to end it).
    pub fn take_transaction(&self, id: &[u8]) -> Option<Arc<SqlSession>> {
        let (_, session) = self.transactions.lock().remove(id)?;
        Some(session)
    }

    /// Forgets a prepared statement; whether it was there.
    pub fn close_prepared(&self, handle: &[u8]) -> bool {
        let removed = self.prepared.lock().remove(handle);
        removed.is_some()
    }

    /// How many results and prepared statements are kept.
    #[cfg(test)]
    pub fn len(&self) -> (usize, usize) {
        (self.results.lock().len(), self.prepared.lock().len())
    }
}

/// Inserts `value` under `handle`, first evicting entries older than `ttl` and then the
/// oldest ones until fewer than `max` remain. Returns the evicted values so the caller
/// can drop them after releasing the lock.
fn insert_bounded<V>(
    map: &mut HashMap<Bytes, (Instant, V)>,
    handle: Bytes,
    value: V,
    ttl: Duration,
    max: usize,
) -> Vec<(Instant, V)> {
    let now = Instant::now();
    let mut evicted = vec![];
    let expired: Vec<Bytes> = map
        .iter()
        .filter(|(_, (at, _))| now.duration_since(*at) >= ttl)
        .map(|(k, _)| k.clone())
        .collect();
    for k in expired {
        evicted.extend(map.remove(&k));
    }
    while map.len() >= max {
        let Some(oldest) = map
            .iter()
            .min_by_key(|(_, (at, _))| *at)
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        evicted.extend(map.remove(&oldest));
    }
    map.insert(handle, (now, value));
    evicted
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::Schema;

    use super::*;

    fn empty() -> PendingResult {
        PendingResult {
            schema: Arc::new(Schema::empty()),
            stream: Box::pin(futures::stream::empty()),
        }
    }

    #[test]
    fn results_are_taken_once() {
        let r = Registry::new();
        let h = r.put_result(empty());
        let h2 = r.put_result(empty());
        assert_ne!(h, h2);
        assert!(r.take_result(&h).is_some());
        assert!(r.take_result(&h).is_none());
        assert!(r.take_result(b"nonsense").is_none());
        assert_eq!(r.len(), (1, 0));
    }

    #[test]
    fn oldest_results_go_first() {
        let r = Registry::with_limits(RESULT_TTL, PREPARED_IDLE_TTL, 2, 2);
        let a = r.put_result(empty());
        std::thread::sleep(Duration::from_millis(2));
        let b = r.put_result(empty());
        std::thread::sleep(Duration::from_millis(2));
        let c = r.put_result(empty());
        assert!(r.take_result(&a).is_none());
        assert!(r.take_result(&b).is_some());
        assert!(r.take_result(&c).is_some());
    }

    #[test]
    fn expired_results_are_dropped() {
        let r = Registry::with_limits(Duration::from_millis(1), PREPARED_IDLE_TTL, 10, 10);
        let a = r.put_result(empty());
        std::thread::sleep(Duration::from_millis(5));
        assert!(r.take_result(&a).is_none());
        let _ = r.put_result(empty());
        std::thread::sleep(Duration::from_millis(5));
        let _ = r.put_result(empty());
        assert_eq!(r.len(), (1, 0));
    }
}
