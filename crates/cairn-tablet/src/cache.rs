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
const SHARDS: usize = 16;

struct Shard {
    lru: LruCache<(u64, u32), Arc<RecordBatch>>,
    used: usize,
}

/// A sharded LRU cache of decoded base-data blocks keyed by (file uid, block number).
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    capacity_per_shard: usize,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockCache({} bytes)", self.capacity_per_shard * SHARDS)
    }
}

impl BlockCache {
    /// A cache holding at most `capacity_bytes` of decoded data (0 disables it).
    pub fn new(capacity_bytes: usize) -> Self {
        BlockCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        lru: LruCache::unbounded(),
                        used: 0,
                    })
                })
                .collect(),
            capacity_per_shard: capacity_bytes / SHARDS,
        }
    }

    fn shard(&self, key: (u64, u32)) -> &Mutex<Shard> {
        let h = key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.1 as u64;
        &self.shards[(h as usize) % SHARDS]
    }

    /// A cached block, if present.
    pub fn get(&self, file_uid: u64, block: u32) -> Option<Arc<RecordBatch>> {
        self.shard((file_uid, block))
            .lock()
            .lru
            .get(&(file_uid, block))
            .cloned()
    }

    /// Caches a block, evicting least recently used blocks beyond the budget.
    pub fn insert(&self, file_uid: u64, block: u32, batch: Arc<RecordBatch>) {
        if self.capacity_per_shard == 0 {
            return;
        }
        let size = batch.get_array_memory_size();
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
