//! The block cache: decoded blocks of base data, for fast repeated point lookups.
//!
//! Reading one row out of a Parquet file means decoding (and decompressing) the page
//! that holds it in every column. Like Kudu's block cache, Cairn keeps recently decoded
//! blocks of [`BLOCK_ROWS`] rows in memory, bounded by a byte budget and evicted least
//! recently used, so hot keys are served without touching Parquet at all.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use lru::LruCache;
use parking_lot::Mutex;

/// Rows per cached block (also the Parquet data page row limit).
pub const BLOCK_ROWS: usize = 4096;

/// Most shards (locks) the cache splits into.
const MAX_SHARDS: usize = 16;

/// Least capacity of one shard. A block holds every column of [`BLOCK_ROWS`] rows,
/// megabytes for wide rows, and each shard evicts on its own: shards of a few blocks
/// each would evict blocks that hash together while the cache as a whole has room
/// (with 16 shards of 16 MiB, a table of 100,000 rows of 1 KiB — about 25 blocks of
/// 4.5 MiB — missed on most lookups and decoded a whole block for each).
const MIN_SHARD_BYTES: usize = 256 << 20;

struct Shard {
    lru: LruCache<(u64, u32), Arc<RecordBatch>>,
    used: usize,
}

/// An LRU cache of decoded base-data blocks keyed by (file uid, block number), split
/// into shards of at least [`MIN_SHARD_BYTES`] (one shard for the default size).
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    capacity_per_shard: usize,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BlockCache({} bytes)",
            self.capacity_per_shard * self.shards.len()
        )
    }
}

impl BlockCache {
    /// A cache holding at most `capacity_bytes` of decoded data (0 disables it).
    pub fn new(capacity_bytes: usize) -> Self {
        let shards = (capacity_bytes / MIN_SHARD_BYTES).clamp(1, MAX_SHARDS);
        BlockCache {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        lru: LruCache::unbounded(),
                        used: 0,
                    })
                })
                .collect(),
            capacity_per_shard: capacity_bytes / shards,
        }
    }

    fn shard(&self, key: (u64, u32)) -> &Mutex<Shard> {
        let h = key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.1 as u64;
        &self.shards[(h as usize) % self.shards.len()]
    }

    /// A cached block, if present.
    pub fn get(&self, file_uid: u64, block: u32) -> Option<Arc<RecordBatch>> {
        self.shard((file_uid, block))
            .lock()
            .lru
            .get(&(file_uid, block))
            .cloned()
    }

    /// Caches a block, evicting least recently used blocks beyond the budget. A block
    /// larger than its shard is not cached (it would evict every other block, then
    /// itself).
    pub fn insert(&self, file_uid: u64, block: u32, batch: Arc<RecordBatch>) {
        let size = batch.get_array_memory_size();
        if size > self.capacity_per_shard {
            return;
        }
        let mut s = self.shard((file_uid, block)).lock();
        if let Some(old) = s.lru.put((file_uid, block), batch) {
            s.used -= old.get_array_memory_size();
        }
        s.used += size;
        while s.used > self.capacity_per_shard {
            match s.lru.pop_lru() {
                Some((_, b)) => s.used -= b.get_array_memory_size(),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, BinaryArray};

    /// A block of about `bytes` bytes.
    fn block(bytes: usize) -> Arc<RecordBatch> {
        let a: ArrayRef = Arc::new(BinaryArray::from_vec(vec![&vec![7u8; bytes][..]]));
        Arc::new(RecordBatch::try_from_iter([("b", a)]).unwrap())
    }

    #[test]
    fn blocks_that_fit_together_stay_cached() {
        // Six blocks of 1 MiB in a cache of 8 MiB: all of them fit, whichever shard
        // each one hashes to.
        let cache = BlockCache::new(8 << 20);
        for b in 0..6 {
            cache.insert(1, b, block(1 << 20));
        }
        for b in 0..6 {
            assert!(cache.get(1, b).is_some(), "block {b} was evicted");
        }
    }

    #[test]
    fn least_recently_used_blocks_go_first() {
        let cache = BlockCache::new(4 << 20);
        for b in 0..3 {
            cache.insert(1, b, block(1 << 20));
        }
        assert!(cache.get(1, 0).is_some());
        cache.insert(1, 3, block(1 << 20));
        cache.insert(1, 4, block(1 << 20));
        assert!(cache.get(1, 0).is_some(), "the block just read stays");
        assert!(
            cache.get(1, 1).is_none(),
            "the least recently used block goes"
        );
        assert!(cache.get(1, 4).is_some());
    }

    #[test]
    fn a_block_larger_than_the_cache_evicts_nothing() {
        let cache = BlockCache::new(4 << 20);
        cache.insert(1, 0, block(1 << 20));
        cache.insert(1, 1, block(5 << 20));
        assert!(cache.get(1, 0).is_some());
        assert!(cache.get(1, 1).is_none());
    }

    #[test]
    fn a_zero_capacity_caches_nothing() {
        let cache = BlockCache::new(0);
        cache.insert(1, 0, block(10));
        assert!(cache.get(1, 0).is_none());
    }
}
