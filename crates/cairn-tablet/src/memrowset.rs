//! The MemRowSet: the in-memory store of newly inserted rows (Kudu paper §4.2).
//!
//! A concurrent ordered map (a lock-free skip list) from encoded primary key to the row
//! as inserted plus its *mutation chain*: every later update, delete and re-insert with
//! its timestamp. Readers evaluate a row at their snapshot by replaying the chain up to
//! it, so they never block writers; writers of one row are serialised by row locks above
//! this layer. When the MemRowSet is flushed it is frozen (no new inserts), but rows in
//! it still take mutations until the flushed DiskRowSet replaces it.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use cairn_common::{HybridTime, Schema};
use crossbeam_skiplist::SkipMap;
use parking_lot::Mutex;

use crate::history::{NewestFirst, Row, RowHistory, apply_change};

/// A row with more changes than this is read newest first ([`NewestFirst`]).
const NEWEST_FIRST_FROM: usize = 8;
use crate::ops::RowChange;

/// One row of a MemRowSet.
#[derive(Debug)]
pub struct MrsRow {
    /// When the row was inserted.
    pub insert_ts: HybridTime,
    /// The row as inserted.
    pub row: Row,
    /// Later changes, in timestamp order.
    pub mutations: Mutex<Vec<(HybridTime, RowChange)>>,
}

impl MrsRow {
    /// The row as of snapshot `snap` (`None`: not visible or deleted).
    pub fn state_at(&self, schema: &Schema, snap: HybridTime) -> Option<Row> {
        self.visible_at(schema, snap).map(Cow::into_owned)
    }

    /// [`MrsRow::state_at`] without copying a row that was never changed (most rows: a
    /// scan reads them in place).
    pub fn visible_at(&self, schema: &Schema, snap: HybridTime) -> Option<Cow<'_, Row>> {
        if self.insert_ts > snap {
            return None;
        }
        let muts = self.mutations.lock();
        if muts.first().is_none_or(|(ts, _)| *ts > snap) {
            return Some(Cow::Borrowed(&self.row));
        }
        if muts.len() > NEWEST_FIRST_FROM {
            // A hot row: read its changes newest first, only back to its latest values.
            let mut fold = NewestFirst::new(schema, snap);
            for (ts, m) in muts.iter().rev() {
                if !fold.visit(*ts, m) {
                    break;
                }
            }
            return fold
                .finish(|| Ok(Some(self.row.clone())))
                .ok()
                .flatten()
                .map(Cow::Owned);
        }
        let mut state = Some(self.row.clone());
        for (ts, m) in muts.iter() {
            if *ts > snap {
                break;
            }
            apply_change(schema, &mut state, m);
        }
        state.map(Cow::Owned)
    }

    /// Whether the row as inserted is its only version at snapshot `snap`: inserted at
    /// or before it and not changed since, up to it.
    pub fn unchanged_at(&self, snap: HybridTime) -> bool {
        self.insert_ts <= snap
            && self
                .mutations
                .lock()
                .first()
                .is_none_or(|(ts, _)| *ts > snap)
    }

    /// Whether the row is live after every change applied so far.
    pub fn is_live(&self) -> bool {
        let muts = self.mutations.lock();
        !matches!(
            muts.iter()
                .rev()
                .find(|(_, m)| !matches!(m, RowChange::Update(_))),
            Some((_, RowChange::Delete))
        )
    }

    /// The row's versions up to and including `upto`.
    pub fn history(&self, schema: &Schema, key: Vec<u8>, upto: HybridTime) -> RowHistory {
        let mut versions = vec![(self.insert_ts, Some(self.row.clone()))];
        let mut state = Some(self.row.clone());
        for (ts, m) in self.mutations.lock().iter() {
            if *ts > upto {
                break;
            }
            apply_change(schema, &mut state, m);
            versions.push((*ts, state.clone()));
        }
        RowHistory { key, versions }
    }

    /// When the row last changed (inserted, or its latest mutation).
    pub fn last_change(&self) -> HybridTime {
        self.mutations
            .lock()
            .last()
            .map_or(self.insert_ts, |(ts, _)| (*ts).max(self.insert_ts))
    }

    /// Changes made after `after`, in order.
    pub fn mutations_after(&self, after: HybridTime) -> Vec<(HybridTime, RowChange)> {
        self.mutations
            .lock()
            .iter()
            .filter(|(ts, _)| *ts > after)
            .cloned()
            .collect()
    }
}

/// The in-memory rowset.
#[derive(Debug)]
pub struct MemRowSet {
    /// Rowset id (unique within the tablet).
    pub id: u64,
    rows: SkipMap<Vec<u8>, Arc<MrsRow>>,
    bytes: AtomicUsize,
    created: Instant,
    /// Lowest log index of an op that wrote into this MemRowSet (u64::MAX: none).
    first_log_index: AtomicU64,
    /// Rows inserted so far, and the key of every [`KEY_SAMPLE_EVERY`]th: a uniform
    /// sample of the keys (whatever the insert order), from which a flush picks the
    /// boundaries of key ranges of about equal size.
    inserted: AtomicUsize,
    key_sample: Mutex<Vec<Vec<u8>>>,
}

/// One inserted key in this many goes into a MemRowSet's key sample.
const KEY_SAMPLE_EVERY: usize = 1024;

impl MemRowSet {
    /// An empty MemRowSet.
    pub fn new(id: u64) -> Self {
        MemRowSet {
            id,
            rows: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            created: Instant::now(),
            first_log_index: AtomicU64::new(u64::MAX),
            inserted: AtomicUsize::new(0),
            key_sample: Mutex::new(Vec::new()),
        }
    }

    fn note_index(&self, log_index: u64) {
        self.first_log_index.fetch_min(log_index, Ordering::Relaxed);
    }

    /// Inserts a new row (the caller holds the row lock and checked absence).
    pub fn insert(&self, key: Vec<u8>, row: Row, ts: HybridTime, log_index: u64) {
        let size = key.len() + 64 + row.iter().map(|v| 24 + v.size_bytes()).sum::<usize>();
        self.bytes.fetch_add(size, Ordering::Relaxed);
        self.note_index(log_index);
        if self
            .inserted
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(KEY_SAMPLE_EVERY)
        {
            self.key_sample.lock().push(key.clone());
        }
        self.rows.insert(
            key,
            Arc::new(MrsRow {
                insert_ts: ts,
                row,
                mutations: Mutex::new(Vec::new()),
            }),
        );
    }

    /// Appends a change to an existing row's chain.
    pub fn mutate(&self, row: &MrsRow, ts: HybridTime, change: RowChange, log_index: u64) {
        self.bytes
            .fetch_add(change.size_bytes() + 16, Ordering::Relaxed);
        self.note_index(log_index);
        let mut muts = row.mutations.lock();
        debug_assert!(
            muts.last().is_none_or(|(last, _)| *last <= ts) && row.insert_ts <= ts,
            "mutations out of timestamp order: {ts:?} after {:?} (insert {:?})",
            muts.last().map(|m| m.0),
            row.insert_ts
        );
        muts.push((ts, change));
    }

    /// The row with this key, if any (live or deleted).
    pub fn get(&self, key: &[u8]) -> Option<Arc<MrsRow>> {
        self.rows.get(key).map(|e| e.value().clone())
    }

    /// Up to `max` rows with keys in `(after or lower, upper)`, in key order.
    pub fn range_chunk(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        max: usize,
    ) -> Vec<(Vec<u8>, Arc<MrsRow>)> {
        let lower = lower.map(|b| b.to_vec());
        let upper = upper.map(|b| b.to_vec());
        self.rows
            .range((lower, upper))
            .take(max)
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect()
    }

    /// Up to `parts - 1` keys that cut the rows into `parts` key ranges of about
    /// equal size (from the key sample; fewer when the sample is too small).
    pub fn split_keys(&self, parts: usize) -> Vec<Vec<u8>> {
        let mut sample = self.key_sample.lock().clone();
        sample.sort_unstable();
        let mut splits: Vec<Vec<u8>> = (1..parts.max(1))
            .filter_map(|i| sample.get(sample.len() * i / parts).cloned())
            .collect();
        splits.dedup();
        splits
    }

    /// The rows with keys in `[lo, hi)` (`None`: unbounded), in key order, as the skip
    /// list's entries (neither key nor row is copied).
    pub fn entries_between<'a>(
        &'a self,
        lo: Option<&'a [u8]>,
        hi: Option<&'a [u8]>,
    ) -> impl Iterator<Item = crossbeam_skiplist::map::Entry<'a, Vec<u8>, Arc<MrsRow>>> + 'a {
        let lo = lo.map_or(Bound::Unbounded, Bound::Included);
        let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
        self.rows.range::<[u8], _>((lo, hi))
    }

    /// Number of rows (including deleted ones still in the chain).
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// Whether the MemRowSet holds no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// Approximate memory used.
    pub fn mem_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
    /// How long ago the MemRowSet was created.
    pub fn age(&self) -> std::time::Duration {
        self.created.elapsed()
    }
    /// Lowest log index written into it, if any.
    pub fn first_log_index(&self) -> Option<u64> {
        let i = self.first_log_index.load(Ordering::Relaxed);
        (i != u64::MAX).then_some(i)
    }
}
