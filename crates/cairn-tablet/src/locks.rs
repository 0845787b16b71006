//! Row locks: writers of the same key are serialised, writers of different keys are not.
//!
//! Locks are striped: a key hashes to one of a fixed number of mutexes. A write batch
//! locks the stripes of all its keys in ascending stripe order, so two batches can never
//! deadlock; unrelated keys that share a stripe merely wait a little.

use parking_lot::{Mutex, MutexGuard};

/// Number of lock stripes.
const STRIPES: usize = 4096;

/// The tablet's row-lock table.
pub struct LockManager {
    stripes: Vec<Mutex<()>>,
}

impl Default for LockManager {
    fn default() -> Self {
        LockManager {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LockManager({} stripes)", self.stripes.len())
    }
}

/// Locks held for one write batch; released on drop.
pub struct RowLocks<'a> {
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl LockManager {
    fn stripe(key: &[u8]) -> usize {
        (xxhash_rust::xxh64::xxh64(key, 0x5EED) as usize) % STRIPES
    }

    /// Locks every key in `keys` (duplicates allowed).
    pub fn lock_all<'a, K: AsRef<[u8]>>(
        &'a self,
        keys: impl IntoIterator<Item = K>,
    ) -> RowLocks<'a> {
        let mut ids: Vec<usize> = keys.into_iter().map(|k| Self::stripe(k.as_ref())).collect();
        ids.sort_unstable();
        ids.dedup();
        RowLocks {
            _guards: ids.into_iter().map(|i| self.stripes[i].lock()).collect(),
        }
    }
}
