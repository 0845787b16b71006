//! Row locks: writers of the same key are serialised, writers of different keys are not.
//!
//! Locks are striped: a key hashes to one of a fixed number of stripes. A write batch
//! locks the stripes of all its keys in ascending stripe order, so two batches can never
//! deadlock; unrelated keys that share a stripe merely wait a little. A leader holds a
//! batch's locks until the batch is applied — also after its client gave up waiting, so
//! the guard ([`RowLocks`]) is owned and may move to another thread. Taking locks waits
//! at most until a deadline.
//!
//! Bulk inserts take no row locks (a chunk touches every stripe); instead a leader
//! registers each chunk's key range until it is applied ([`PendingRanges`]), and a write
//! that must see the current state of its rows (a condition, an all-or-nothing batch)
//! first waits for the pending chunks covering them.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Number of lock stripes.
const STRIPES: usize = 4096;

/// The tablet's row-lock table.
pub struct LockManager {
    held: Mutex<Vec<bool>>,
    released: Condvar,
}

impl Default for LockManager {
    fn default() -> Self {
        LockManager {
            held: Mutex::new(vec![false; STRIPES]),
            released: Condvar::new(),
        }
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LockManager({STRIPES} stripes)")
    }
}

/// Locks held for one write batch; released on drop.
pub struct RowLocks {
    manager: Arc<LockManager>,
    stripes: Vec<usize>,
}

impl std::fmt::Debug for RowLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RowLocks({} stripes)", self.stripes.len())
    }
}

impl Drop for RowLocks {
    fn drop(&mut self) {
        let mut held = self.manager.held.lock();
        for &i in &self.stripes {
            held[i] = false;
        }
        drop(held);
        self.manager.released.notify_all();
    }
}

impl LockManager {
    fn stripe(key: &[u8]) -> usize {
        (xxhash_rust::xxh64::xxh64(key, 0x5EED) as usize) % STRIPES
    }

    /// Locks every key in `keys` (duplicates allowed), waiting until `deadline` at
    /// most; `None` if it passed first.
    pub fn lock_all<K: AsRef<[u8]>>(
        self: &Arc<Self>,
        keys: impl IntoIterator<Item = K>,
        deadline: Option<Instant>,
    ) -> Option<RowLocks> {
        let mut ids: Vec<usize> = keys.into_iter().map(|k| Self::stripe(k.as_ref())).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut held = self.held.lock();
        let mut taken = 0;
        while taken < ids.len() {
            let i = ids[taken];
            if held[i] {
                let timed_out = match deadline {
                    Some(d) => self.released.wait_until(&mut held, d).timed_out(),
                    None => {
                        self.released.wait(&mut held);
                        false
                    }
                };
                if timed_out && held[i] {
                    for &j in &ids[..taken] {
                        held[j] = false;
                    }
                    drop(held);
                    self.released.notify_all();
                    return None;
                }
                continue;
            }
            held[i] = true;
            taken += 1;
        }
        Some(RowLocks {
            manager: self.clone(),
            stripes: ids,
        })
    }
}

/// A registered range: (id, smallest key, largest key).
type Range = (u64, Vec<u8>, Vec<u8>);

/// Key ranges of bulk inserts proposed but not yet applied (see the module docs).
#[derive(Debug, Default)]
pub struct PendingRanges {
    ranges: Mutex<Vec<Range>>,
    next: std::sync::atomic::AtomicU64,
    changed: Condvar,
}

/// A registered range; unregistered on drop.
pub struct PendingRange {
    owner: Arc<PendingRanges>,
    id: u64,
}

impl std::fmt::Debug for PendingRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingRange({})", self.id)
    }
}

impl Drop for PendingRange {
    fn drop(&mut self) {
        self.owner.ranges.lock().retain(|(i, _, _)| *i != self.id);
        self.owner.changed.notify_all();
    }
}

impl PendingRanges {
    /// Registers `[min, max]` until the returned guard is dropped.
    pub fn register(self: &Arc<Self>, min: Vec<u8>, max: Vec<u8>) -> PendingRange {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.ranges.lock().push((id, min, max));
        PendingRange {
            owner: self.clone(),
            id,
        }
    }

    /// Waits until no registered range contains any of `keys`; false if `deadline`
    /// passed first.
    pub fn wait_clear<K: AsRef<[u8]>>(&self, keys: &[K], deadline: Instant) -> bool {
        let mut r = self.ranges.lock();
        loop {
            let covered = r.iter().any(|(_, lo, hi)| {
                keys.iter()
                    .any(|k| k.as_ref() >= lo.as_slice() && k.as_ref() <= hi.as_slice())
            });
            if !covered {
                return true;
            }
            if self.changed.wait_until(&mut r, deadline).timed_out() {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn locks_serialise_and_time_out() {
        let m = Arc::new(LockManager::default());
        let a = m.lock_all([b"k1".as_slice(), b"k2"], None).unwrap();
        let soon = Instant::now() + Duration::from_millis(30);
        assert!(m.lock_all([b"k2".as_slice()], Some(soon)).is_none());
        // A timed-out attempt released what it had taken.
        let c = m
            .lock_all(
                [b"zz".as_slice()],
                Some(Instant::now() + Duration::from_secs(1)),
            )
            .unwrap();
        drop(c);
        let m2 = m.clone();
        let h = std::thread::spawn(move || m2.lock_all([b"k1".as_slice()], None).is_some());
        std::thread::sleep(Duration::from_millis(20));
        drop(a);
        assert!(h.join().unwrap());
    }

    #[test]
    fn pending_ranges_block_until_dropped() {
        let p = Arc::new(PendingRanges::default());
        let g = p.register(b"b".to_vec(), b"d".to_vec());
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(p.wait_clear(&[b"a".as_slice(), b"e"], soon));
        assert!(!p.wait_clear(&[b"c".as_slice()], soon));
        let p2 = p.clone();
        let h = std::thread::spawn(move || {
            p2.wait_clear(&[b"c".as_slice()], Instant::now() + Duration::from_secs(5))
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(g);
        assert!(h.join().unwrap());
    }
}
