//! The predicate skip cache (HRDBMS §III): per row group of a DiskRowSet's base data,
//! conjunctions known to match no row, consulted by implication.

use std::sync::atomic::{AtomicBool, Ordering};

use cairn_common::predicate::conjunction_implies;
use cairn_common::{ColumnPredicate, Schema};
use parking_lot::RwLock;

/// Predicate-based data skipping (HRDBMS §III): per row group, conjunctions known to
/// match no base row. Base data is immutable, so entries stay true until the base is
/// rewritten (then the cache is cleared). Predicates name their column by id
/// ([`SkipCache::key_of`]), never by name: a dropped column's name may return as a new
/// column with other values. The tablet also clears the cache on every ALTER.
#[derive(Debug, Default)]
pub struct SkipCache {
    pub(crate) groups: RwLock<Vec<Vec<Vec<ColumnPredicate>>>>,
    pub(crate) dirty: AtomicBool,
}

/// Most conjunctions remembered per row group.
const SKIP_CACHE_PER_GROUP: usize = 16;

/// Longest IN list a remembered conjunction may hold.
const SKIP_CACHE_MAX_IN_LIST: usize = 64;

/// The persisted form of a skip cache (the first form, keyed by column name, is no
/// longer read: such a file starts an empty cache).
#[derive(serde::Serialize, serde::Deserialize)]
struct PersistedSkipCache {
    /// Always 2: predicates name columns as `#<column id>`.
    pub(crate) version: u32,
    pub(crate) groups: Vec<Vec<Vec<ColumnPredicate>>>,
}

impl SkipCache {
    /// A scan conjunction in the cache's form: each predicate's column named by its id
    /// (`#<id>`), which no column name can be confused with once every entry uses it.
    pub fn key_of(schema: &Schema, conjunction: &[ColumnPredicate]) -> Vec<ColumnPredicate> {
        conjunction
            .iter()
            .map(|p| ColumnPredicate {
                column: match schema.index_of(&p.column) {
                    Ok(i) => format!("#{}", schema.column(i).id),
                    Err(_) => format!("#?{}", p.column),
                },
                op: p.op.clone(),
            })
            .collect()
    }

    /// Reads a persisted cache; an older format yields an empty cache.
    pub(crate) fn from_persisted(bytes: &[u8]) -> std::result::Result<Self, serde_json::Error> {
        match serde_json::from_slice::<PersistedSkipCache>(bytes) {
            Ok(p) if p.version == 2 => Ok(Self::with_groups(p.groups)),
            Ok(_) => Ok(Self::default()),
            Err(e) => match serde_json::from_slice::<serde_json::Value>(bytes) {
                Ok(_) => Ok(Self::default()),
                Err(_) => Err(e),
            },
        }
    }

    /// The cache to persist, if it changed since last time (clears the dirty flag).
    pub fn serialize_if_dirty(&self) -> Option<std::result::Result<Vec<u8>, serde_json::Error>> {
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return None;
        }
        Some(serde_json::to_vec(&PersistedSkipCache {
            version: 2,
            groups: self.groups.read().clone(),
        }))
    }

    pub(crate) fn with_groups(entries: Vec<Vec<Vec<ColumnPredicate>>>) -> Self {
        SkipCache {
            groups: RwLock::new(entries),
            dirty: AtomicBool::new(false),
        }
    }
    /// Whether a remembered conjunction proves `preds` matches nothing in `rg`.
    pub fn known_empty(&self, rg: usize, preds: &[ColumnPredicate]) -> bool {
        let g = self.groups.read();
        g.get(rg)
            .is_some_and(|cached| cached.iter().any(|c| conjunction_implies(preds, c)))
    }
    /// Remembers that `preds` matched nothing in `rg`. Conjunctions with long IN
    /// lists (a join's key set, different in every query) are not remembered: they
    /// rarely recur, and implication between IN lists costs the product of their
    /// lengths on every later scan.
    pub fn record(&self, rg: usize, num_groups: usize, preds: &[ColumnPredicate]) {
        if preds.iter().any(|p| {
            matches!(&p.op, cairn_common::PredicateOp::InList(vs) if vs.len() > SKIP_CACHE_MAX_IN_LIST)
        }) {
            return;
        }
        let mut g = self.groups.write();
        if g.len() < num_groups {
            g.resize(num_groups, vec![]);
        }
        let list = &mut g[rg];
        if list.iter().any(|c| conjunction_implies(preds, c)) {
            return;
        }
        list.retain(|c| !conjunction_implies(c, preds));
        if list.len() >= SKIP_CACHE_PER_GROUP {
            list.remove(0);
        }
        list.push(preds.to_vec());
        self.dirty.store(true, Ordering::Relaxed);
    }
    /// Number of remembered conjunctions.
    pub fn len(&self) -> usize {
        self.groups.read().iter().map(|g| g.len()).sum()
    }
    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets everything (after the base data changes).
    pub fn clear(&self) {
        self.groups.write().clear();
        self.dirty.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::Value;

    #[test]
    fn skip_cache_forgets_nothing_it_can_use_and_skips_long_in_lists() {
        let c = SkipCache::default();
        let short = vec![ColumnPredicate::in_list(
            "k",
            (0..3).map(Value::Int64).collect(),
        )];
        c.record(0, 2, &short);
        assert_eq!(c.len(), 1);
        assert!(c.known_empty(0, &[ColumnPredicate::eq("k", Value::Int64(1))]));
        assert!(!c.known_empty(1, &short));
        let long = vec![ColumnPredicate::in_list(
            "k",
            (0..SKIP_CACHE_MAX_IN_LIST as i64 + 1)
                .map(Value::Int64)
                .collect(),
        )];
        c.record(1, 2, &long);
        assert_eq!(
            c.len(),
            1,
            "a conjunction with a long IN list is not remembered"
        );
    }
}
