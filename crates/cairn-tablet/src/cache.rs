//! The block cache: decoded pages of base-data columns, shared by every tablet of a
//! server.
//!
//! Reading one row out of a Parquet file means decompressing and decoding the page
//! that holds it, in each column read. Like Kudu's block cache, Cairn keeps recently
//! decoded pages in memory, bounded by a byte budget and evicted least recently used,
//! so hot keys are served without touching Parquet at all. A page is one column's
//! values for a run of at most [`BLOCK_ROWS`] rows of one row group (a Parquet data
//! page), so a lookup that projects two columns caches and reads two pages, not the
//! whole row's worth.
//!
//! The cache holds *decoded* pages (Arrow arrays): base files are memory-mapped, so
//! their compressed pages already sit in the operating system's page cache, and a
//! second copy of them would save no decoding.
//!
//! One cache serves every tablet of a tablet server (`--block-cache-mb`), so a hot
//! tablet may use all of it while cold ones use none. Its counters (hits, misses,
//! evictions) are served as metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef};
use lru::LruCache;
use parking_lot::Mutex;

/// Most rows of one data page (the Parquet data page row limit of base files), and so
/// of one cached page. A lookup that misses the cache decompresses and decodes one
/// such page per column it reads, so pages are kept small: on TPC-H lineitem, 1024
/// rows rather than 4096 cost about 6% more bytes and a few percent of scan speed,
/// and cut a cold lookup of its 16-column rows from 440 µs to 240 µs.
pub const BLOCK_ROWS: usize = 1024;

/// Most shards (locks) the cache splits into.
const MAX_SHARDS: usize = 16;

/// Least capacity of one shard. Each shard evicts on its own, so shards of a few
/// pages each would evict pages that hash together while the cache as a whole has
/// room; a page of [`BLOCK_ROWS`] wide strings is megabytes.
const MIN_SHARD_BYTES: usize = 32 << 20;

/// What identifies a cached page: the base file (its process-unique id), the row
/// group, the column's position in the file and the page's number in that column
/// chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageKey {
    /// Process-unique id of the open base file.
    pub file: u64,
    /// Row group.
    pub group: u32,
    /// Column position in the file.
    pub column: u32,
    /// Page number within the column chunk.
    pub page: u32,
}

struct Shard {
    lru: LruCache<PageKey, ArrayRef>,
    used: usize,
}

/// Counters of a [`BlockCache`], for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCacheStats {
    /// The byte budget.
    pub capacity_bytes: u64,
    /// Bytes of decoded pages held now.
    pub used_bytes: u64,
    /// Pages held now.
    pub pages: u64,
    /// Lookups that found their page.
    pub hits: u64,
    /// Lookups that did not (the page was then decoded).
    pub misses: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
}

/// An LRU cache of decoded base-data pages keyed by [`PageKey`], split into shards
/// of at least [`MIN_SHARD_BYTES`].
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    capacity_per_shard: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
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
    /// A cache holding at most `capacity_bytes` of decoded pages (0 disables it).
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
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &PageKey) -> &Mutex<Shard> {
        let h = key.file.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (u64::from(key.group) << 40)
            ^ (u64::from(key.column) << 20)
            ^ u64::from(key.page);
        let h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        &self.shards[((h >> 32) as usize) % self.shards.len()]
    }

    /// A cached page, if present (counted as a hit or a miss).
    pub fn get(&self, key: &PageKey) -> Option<ArrayRef> {
        let found = self.shard(key).lock().lru.get(key).cloned();
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Caches a page, evicting least recently used pages beyond the budget. A page
    /// larger than its shard is not cached (it would evict every other page, then
    /// itself).
    pub fn insert(&self, key: PageKey, page: ArrayRef) {
        let size = page.get_array_memory_size();
        if size > self.capacity_per_shard {
            return;
        }
        let mut s = self.shard(&key).lock();
        if let Some(old) = s.lru.put(key, page) {
            s.used -= old.get_array_memory_size();
        }
        s.used += size;
        let mut evicted = 0;
        while s.used > self.capacity_per_shard {
            match s.lru.pop_lru() {
                Some((_, p)) => {
                    s.used -= p.get_array_memory_size();
                    evicted += 1;
                }
                None => break,
            }
        }
        drop(s);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// The cache's counters now.
    pub fn stats(&self) -> BlockCacheStats {
        let mut out = BlockCacheStats {
            capacity_bytes: (self.capacity_per_shard * self.shards.len()) as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            ..BlockCacheStats::default()
        };
        for s in &self.shards {
            let s = s.lock();
            out.used_bytes += s.used as u64;
            out.pages += s.lru.len() as u64;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::BinaryArray;
    use std::sync::Arc;

    /// A page of about `bytes` bytes.
    fn page(bytes: usize) -> ArrayRef {
        Arc::new(BinaryArray::from_vec(vec![&vec![7u8; bytes][..]]))
    }

    fn key(page: u32) -> PageKey {
        PageKey {
            file: 1,
            group: 0,
            column: 0,
            page,
        }
    }

    #[test]
    fn pages_that_fit_together_stay_cached() {
        // Six pages of 1 MiB in a cache of 8 MiB: all of them fit, whichever shard
        // each one hashes to.
        let cache = BlockCache::new(8 << 20);
        for p in 0..6 {
            cache.insert(key(p), page(1 << 20));
        }
        for p in 0..6 {
            assert!(cache.get(&key(p)).is_some(), "page {p} was evicted");
        }
        let st = cache.stats();
        assert_eq!((st.hits, st.misses, st.evictions, st.pages), (6, 0, 0, 6));
        assert!(st.used_bytes >= 6 << 20 && st.used_bytes <= st.capacity_bytes);
    }

    #[test]
    fn least_recently_used_pages_go_first() {
        let cache = BlockCache::new(4 << 20);
        for p in 0..3 {
            cache.insert(key(p), page(1 << 20));
        }
        assert!(cache.get(&key(0)).is_some());
        cache.insert(key(3), page(1 << 20));
        cache.insert(key(4), page(1 << 20));
        assert!(cache.get(&key(0)).is_some(), "the page just read stays");
        assert!(
            cache.get(&key(1)).is_none(),
            "the least recently used page goes"
        );
        assert!(cache.get(&key(4)).is_some());
        assert!(cache.stats().evictions >= 1);
        assert_eq!(cache.stats().misses, 1);
    }

    #[test]
    fn columns_and_groups_of_one_file_are_distinct_pages() {
        let cache = BlockCache::new(8 << 20);
        let a = key(0);
        let b = PageKey { column: 1, ..a };
        let c = PageKey { group: 1, ..a };
        let (pa, pb) = (page(10), page(20));
        cache.insert(a, pa.clone());
        cache.insert(b, pb.clone());
        assert!(cache.get(&c).is_none());
        assert!(cache.get(&a).is_some_and(|p| Arc::ptr_eq(&p, &pa)));
        assert!(cache.get(&b).is_some_and(|p| Arc::ptr_eq(&p, &pb)));
        assert_eq!(cache.stats().pages, 2);
    }

    #[test]
    fn a_page_larger_than_the_cache_evicts_nothing() {
        let cache = BlockCache::new(4 << 20);
        cache.insert(key(0), page(1 << 20));
        cache.insert(key(1), page(5 << 20));
        assert!(cache.get(&key(0)).is_some());
        assert!(cache.get(&key(1)).is_none());
    }

    #[test]
    fn concurrent_readers_and_writers_keep_the_budget_and_the_counts() {
        let cache = Arc::new(BlockCache::new(64 << 10));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    for i in 0..2000u32 {
                        let k = key((i * 7 + t) % 300);
                        match cache.get(&k) {
                            Some(p) => assert_eq!(p.len(), 1),
                            None => cache.insert(k, page(1000 + (i as usize % 5000))),
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let st = cache.stats();
        assert!(st.used_bytes <= st.capacity_bytes, "{st:?}");
        assert_eq!(st.hits + st.misses, 8000);
        assert!(st.evictions > 0 && st.pages > 0, "{st:?}");
        // What is left is consistent: every page it counts can be read.
        let held = (0..300).filter(|p| cache.get(&key(*p)).is_some()).count();
        assert_eq!(held as u64, st.pages);
    }

    #[test]
    fn a_zero_capacity_caches_nothing() {
        let cache = BlockCache::new(0);
        cache.insert(key(0), page(10));
        assert!(cache.get(&key(0)).is_none());
        assert_eq!(cache.stats().pages, 0);
    }
}
