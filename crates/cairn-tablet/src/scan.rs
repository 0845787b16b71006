//! Scans: a snapshot of the tablet read as Arrow record batches.
//!
//! A [`ScanSpec`] names the projected columns, a conjunction of predicates, the read
//! mode (latest or a snapshot within history retention), an optional limit, whether rows
//! must come in primary-key order, and optional encoded key bounds. Predicates on a
//! prefix of the primary key are turned into a key range, which each DiskRowSet maps to
//! a row-ordinal range through its key index; every predicate is still evaluated on the
//! rows, so the range only saves work.
//!
//! A [`Scanner`] is the resumable state of one scan: it holds the components it started
//! with and a cursor per rowset, and returns one batch per [`Scanner::next_batch`] call.
//! Unordered scans read rowset after rowset; ordered scans merge the rowsets' sorted
//! outputs by key. [`Scanner::last_key`] tells where an ordered scan stopped, so a new
//! scan can resume after it (on this tablet or, later, another replica).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::compute::interleave;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use cairn_common::key::encode_value;
use cairn_common::partition::prefix_successor;
use cairn_common::predicate::{conjunction_is_none, simplify_conjunction};
use cairn_common::types::array_from_values;
use cairn_common::{ColumnPredicate, HybridTime, PredicateOp, Schema};

use crate::cache::BLOCK_ROWS;
use crate::diskrowset::{BaseData, Deltas, DiskRowSet, RowSetScan, SkipCache, make_batch};
use crate::error::{Result, TabletError};
use crate::memrowset::MemRowSet;
use crate::tablet::{ReadMode, Tablet};

/// What to scan.
#[derive(Clone, Debug)]
pub struct ScanSpec {
    /// Columns to return, by name (`None`: all, in schema order).
    pub projection: Option<Vec<String>>,
    /// Rows must satisfy all of these.
    pub predicates: Vec<ColumnPredicate>,
    /// Snapshot selection.
    pub read_mode: ReadMode,
    /// Return at most this many rows.
    pub limit: Option<usize>,
    /// Return rows in primary-key order.
    pub ordered: bool,
    /// Rows per batch (approximate for unordered scans of DiskRowSets, which return
    /// whole row groups).
    pub batch_size: usize,
    /// Inclusive lower bound on the encoded primary key.
    pub lower_key: Option<Vec<u8>>,
    /// Exclusive upper bound on the encoded primary key.
    pub upper_key: Option<Vec<u8>>,
    /// Read as this transaction sees the tablet: rows it wrote as its writes left
    /// them (live ones matching the predicates), every other row at the snapshot.
    pub txn: Option<crate::ops::TxnId>,
}

impl Default for ScanSpec {
    fn default() -> Self {
        ScanSpec {
            projection: None,
            predicates: vec![],
            read_mode: ReadMode::Latest,
            limit: None,
            ordered: false,
            batch_size: 4096,
            lower_key: None,
            upper_key: None,
            txn: None,
        }
    }
}

/// The encoded key range `[lower, upper)` implied by predicates on a prefix of the
/// primary key (empty = unbounded).
pub fn key_range_from_predicates(schema: &Schema, preds: &[ColumnPredicate]) -> (Vec<u8>, Vec<u8>) {
    let keys = schema.key_indexes();
    let mut prefix: Vec<u8> = Vec::new();
    for (n, &k) in keys.iter().enumerate() {
        let last = n + 1 == keys.len();
        let name = &schema.column(k).name;
        let Some(p) = preds.iter().find(|p| &p.column == name) else {
            break;
        };
        let enc = |v: &cairn_common::Value| {
            let mut out = prefix.clone();
            encode_value(v, last, &mut out).ok().map(|_| out)
        };
        match &p.op {
            PredicateOp::Equality(v) => match enc(v) {
                Some(e) => {
                    prefix = e;
                    if last {
                        let mut upper = prefix.clone();
                        upper.push(0);
                        return (prefix, upper);
                    }
                }
                None => break,
            },
            PredicateOp::Range { lower, upper } => {
                let lo = match lower {
                    None => Some(prefix.clone()),
                    Some((v, inc)) => enc(v).map(|mut e| {
                        if !inc {
                            if last {
                                e.push(0)
                            } else {
                                e = prefix_successor(e).unwrap_or_default()
                            }
                        }
                        e
                    }),
                };
                let hi = match upper {
                    None => prefix_successor(prefix.clone()).unwrap_or_default(),
                    Some((v, inc)) => match enc(v) {
                        Some(mut e) => {
                            if *inc {
                                if last {
                                    e.push(0)
                                } else {
                                    e = prefix_successor(e).unwrap_or_default()
                                }
                            }
                            e
                        }
                        None => vec![],
                    },
                };
                return (lo.unwrap_or_default(), hi);
            }
            PredicateOp::InList(vs) => {
                // The list's smallest and largest values bound the keys (the predicate
                // itself still filters what lies between them).
                let mut vals = vs.iter().filter(|v| !v.is_null());
                let Some(first) = vals.next() else { break };
                let (mut min, mut max) = (first, first);
                let mut comparable = true;
                for v in vals {
                    match (v.partial_cmp_same(min), v.partial_cmp_same(max)) {
                        (Some(a), Some(b)) => {
                            if a.is_lt() {
                                min = v;
                            }
                            if b.is_gt() {
                                max = v;
                            }
                        }
                        _ => comparable = false,
                    }
                }
                if !comparable {
                    break;
                }
                let (Some(lo), Some(mut hi)) = (enc(min), enc(max)) else {
                    break;
                };
                if last {
                    hi.push(0);
                } else {
                    hi = prefix_successor(hi).unwrap_or_default();
                }
                return (lo, hi);
            }
            _ => break,
        }
    }
    if prefix.is_empty() {
        (vec![], vec![])
    } else {
        let upper = prefix_successor(prefix.clone()).unwrap_or_default();
        (prefix, upper)
    }
}

/// Smallest first read window of a limited scan over a rowset (rows).
const FIRST_WINDOW_MIN: usize = 64;

/// Rows a rowset's first read covers: `cap` for an unlimited scan; for a limited one
/// its limit, at least [`FIRST_WINDOW_MIN`] and at most `cap` (the window then doubles
/// after every read, see [`Source`]).
fn first_window(limit: Option<usize>, cap: usize) -> usize {
    limit.map_or(cap, |l| {
        l.clamp(FIRST_WINDOW_MIN, cap.max(FIRST_WINDOW_MIN))
    })
}

enum Source {
    /// A transaction's own rows ([`ScanSpec::txn`]), in key order; read once.
    Txn(Option<KeyedBatch>),
    Mem {
        mrs: Arc<MemRowSet>,
        after: Option<Vec<u8>>,
        done: bool,
        /// Rows the next read takes at most: like a DiskRowSet's window, near the
        /// limit at first and doubling, up to the batch size.
        window: usize,
    },
    Disk {
        rs: Arc<DiskRowSet>,
        base: Arc<BaseData>,
        deltas: Deltas,
        rg: usize,
        a: u32,
        b: u32,
        /// Ordinal the next read starts at.
        next: u32,
        /// Rows the next read covers at most: a limited scan starts near its limit and
        /// doubles the window after every read, so `k >= x LIMIT 10` does not decode
        /// the rest of a row group, while a selective limited scan soon reads whole
        /// row groups again. Unlimited scans read whole row groups.
        window: u32,
    },
}

struct KeyedBatch {
    batch: RecordBatch,
    keys: Vec<Vec<u8>>,
}

/// The resumable state of one scan.
pub struct Scanner {
    tablet: Arc<Tablet>,
    schema: Arc<Schema>,
    snapshot: HybridTime,
    projection: Vec<usize>,
    predicates: Vec<(usize, ColumnPredicate)>,
    /// The conjunction as the skip caches key it (columns by id).
    skip_key: Vec<ColumnPredicate>,
    out_schema: SchemaRef,
    lower: Vec<u8>,
    upper: Vec<u8>,
    batch_size: usize,
    limit_left: Option<usize>,
    ordered: bool,
    sources: Vec<Source>,
    current: usize,
    heads: Vec<Option<(KeyedBatch, usize)>>,
    heads_primed: bool,
    last_key: Option<Vec<u8>>,
    empty: bool,
    /// Keys a transaction scan takes from its own rows: the stores' versions of
    /// them are left out.
    hide: Option<std::collections::BTreeSet<Vec<u8>>>,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Scanner(snapshot={:?}, sources={})",
            self.snapshot,
            self.sources.len()
        )
    }
}

impl Scanner {
    pub(crate) fn new(tablet: Arc<Tablet>, spec: ScanSpec) -> Result<Scanner> {
        let schema = tablet.schema();
        let projection: Vec<usize> = match &spec.projection {
            None => (0..schema.num_columns()).collect(),
            Some(names) => names
                .iter()
                .map(|n| schema.index_of(n))
                .collect::<cairn_common::Result<_>>()?,
        };
        for p in &spec.predicates {
            p.validate(&schema)?;
        }
        if spec.batch_size == 0 {
            return Err(TabletError::InvalidRequest(
                "batch size must be at least 1".into(),
            ));
        }
        let conjunction = simplify_conjunction(&spec.predicates);
        let predicates = conjunction
            .iter()
            .map(|p| Ok((schema.index_of(&p.column)?, p.clone())))
            .collect::<cairn_common::Result<Vec<_>>>()?;
        let (mut lower, mut upper) = key_range_from_predicates(&schema, &conjunction);
        if let Some(l) = spec.lower_key
            && l > lower
        {
            lower = l;
        }
        if let Some(u) = spec.upper_key
            && (upper.is_empty() || u < upper)
        {
            upper = u;
        }
        let snapshot = tablet.snapshot_for(spec.read_mode)?;
        let comps = tablet.components();
        let mut sources = Vec::new();
        for m in comps.frozen.iter().chain(std::iter::once(&comps.mrs)) {
            sources.push(Source::Mem {
                mrs: m.clone(),
                after: None,
                done: false,
                window: first_window(spec.limit, spec.batch_size),
            });
        }
        for rs in &comps.disk {
            if rs.keys.is_empty()
                || (!upper.is_empty() && rs.keys.min_key() >= upper.as_slice())
                || (!lower.is_empty() && rs.keys.max_key() < lower.as_slice())
            {
                continue;
            }
            let (a, b) = rs.ordinal_range(&lower, &upper);
            let (base, deltas) = rs.view();
            sources.push(Source::Disk {
                rs: rs.clone(),
                base,
                deltas,
                rg: 0,
                a,
                b,
                next: a,
                window: spec
                    .limit
                    .map_or(u32::MAX, |l| first_window(Some(l), BLOCK_ROWS) as u32),
            });
        }
        let empty = conjunction_is_none(&conjunction)
            || (!upper.is_empty() && lower >= upper)
            || spec.limit == Some(0);
        let skip_key = SkipCache::key_of(&schema, &conjunction);
        let out_schema = schema.project_arrow(&projection);
        let mut hide = None;
        if let Some(txn) = spec.txn {
            let in_range =
                |k: &[u8]| k >= lower.as_slice() && (upper.is_empty() || k < upper.as_slice());
            let keys: Vec<Vec<u8>> = tablet
                .txns()
                .keys_of(txn)
                .into_iter()
                .filter(|k| in_range(k))
                .collect();
            if !keys.is_empty() {
                let mut rows = Vec::new();
                let mut live_keys = Vec::new();
                for k in &keys {
                    if let Some(r) = tablet.current_row_in(Some(txn), &comps, k)?
                        && predicates.iter().all(|(c, p)| p.matches_value(&r[*c]))
                    {
                        rows.push(r);
                        live_keys.push(k.clone());
                    }
                }
                let own = if rows.is_empty() {
                    None
                } else {
                    let cols = projection
                        .iter()
                        .map(|&c| {
                            array_from_values(
                                &schema.column(c).data_type,
                                rows.iter().map(|r| &r[c]),
                            )
                        })
                        .collect::<cairn_common::Result<Vec<ArrayRef>>>()?;
                    Some(KeyedBatch {
                        batch: make_batch(&out_schema, cols, rows.len())?,
                        keys: live_keys,
                    })
                };
                sources.push(Source::Txn(own));
                hide = Some(keys.into_iter().collect());
            }
        }
        Ok(Scanner {
            out_schema,
            tablet,
            schema,
            snapshot,
            projection,
            predicates,
            skip_key,
            lower,
            upper,
            batch_size: spec.batch_size,
            limit_left: spec.limit,
            ordered: spec.ordered,
            sources,
            current: 0,
            heads: vec![],
            heads_primed: false,
            last_key: None,
            empty,
            hide,
        })
    }

    /// Whether the stores hold at most `max` rows in the scan's key range (at any
    /// version, matching or not): what it reads is then small and bounded, so a
    /// caller may read it where a long read would be in the way (an async task).
    /// Counts a MemRowSet's rows up to `max + 1` only; reads no data.
    pub fn stored_rows_at_most(&self, max: usize) -> bool {
        if self.empty {
            return true;
        }
        let mut left = max;
        for s in &self.sources {
            if let Source::Disk { a, b, .. } = s {
                let n = (b - a) as usize;
                if n > left {
                    return false;
                }
                left -= n;
            }
        }
        for s in &self.sources {
            if let Source::Mem { mrs, .. } = s {
                let n = Tablet::mrs_range(mrs, None, &self.lower, &self.upper, left + 1).len();
                if n > left {
                    return false;
                }
                left -= n;
            }
        }
        true
    }

    /// The snapshot timestamp the scan reads at.
    pub fn snapshot(&self) -> HybridTime {
        self.snapshot
    }
    /// Schema of the returned batches.
    pub fn schema(&self) -> SchemaRef {
        self.out_schema.clone()
    }
    /// For ordered scans: the encoded key of the last row returned.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.last_key.as_deref()
    }

    /// The next batch of source `i`; in a transaction's scan, without the rows the
    /// transaction's own source replaces.
    fn next_from(&mut self, i: usize) -> Result<Option<KeyedBatch>> {
        if let Source::Txn(own) = &mut self.sources[i] {
            return Ok(own.take());
        }
        loop {
            let Some(kb) = self.next_stored(i)? else {
                return Ok(None);
            };
            let Some(hide) = &self.hide else {
                return Ok(Some(kb));
            };
            let keep: arrow::array::BooleanArray =
                kb.keys.iter().map(|k| Some(!hide.contains(k))).collect();
            let n = keep.true_count();
            if n == kb.keys.len() {
                return Ok(Some(kb));
            }
            if n == 0 {
                continue;
            }
            let batch = arrow::compute::filter_record_batch(&kb.batch, &keep)?;
            let keys = kb
                .keys
                .into_iter()
                .zip(keep.values().iter())
                .filter_map(|(k, keep)| keep.then_some(k))
                .collect();
            return Ok(Some(KeyedBatch { batch, keys }));
        }
    }

    /// The next batch a store (MemRowSet or DiskRowSet) source holds at the snapshot.
    fn next_stored(&mut self, i: usize) -> Result<Option<KeyedBatch>> {
        let want_keys = self.ordered || self.hide.is_some();
        let rs_scan = RowSetScan {
            schema: &self.schema,
            projection: &self.projection,
            predicates: &self.predicates,
            conjunction: &self.skip_key,
            snapshot: self.snapshot,
            out_schema: self.out_schema.clone(),
        };
        match &mut self.sources[i] {
            Source::Txn(_) => Ok(None),
            Source::Mem {
                mrs,
                after,
                done,
                window,
            } => loop {
                if *done {
                    return Ok(None);
                }
                let take = *window;
                *window = (*window * 2).min(self.batch_size.max(take));
                let chunk =
                    Tablet::mrs_range(mrs, after.as_deref(), &self.lower, &self.upper, take);
                if chunk.len() < take {
                    *done = true;
                }
                let Some((k, _)) = chunk.last() else {
                    return Ok(None);
                };
                *after = Some(k.clone());
                let mut rows = Vec::with_capacity(chunk.len());
                let mut keys = Vec::new();
                for (key, row) in &chunk {
                    let Some(r) = row.visible_at(&self.schema, self.snapshot) else {
                        continue;
                    };
                    if self.predicates.iter().all(|(c, p)| p.matches_value(&r[*c])) {
                        rows.push(r);
                        if want_keys {
                            keys.push(key.clone());
                        }
                    }
                }
                if rows.is_empty() {
                    continue;
                }
                let cols = self
                    .projection
                    .iter()
                    .map(|&c| {
                        array_from_values(
                            &self.schema.column(c).data_type,
                            rows.iter().map(|r| &r[c]),
                        )
                    })
                    .collect::<cairn_common::Result<Vec<ArrayRef>>>()?;
                let batch = make_batch(&self.out_schema, cols, rows.len())?;
                return Ok(Some(KeyedBatch { batch, keys }));
            },
            Source::Disk {
                rs,
                base,
                deltas,
                rg,
                a,
                b,
                next,
                window,
            } => {
                while *rg < rs.num_row_groups() {
                    let g = *rg;
                    let (gs, ge) = base.group_range(g);
                    let lo = (*next).max(*a).max(gs);
                    let end = (*b).min(ge);
                    if lo >= end {
                        *rg += 1;
                        continue;
                    }
                    let hi = end.min(lo.saturating_add(*window));
                    *next = hi;
                    *window = window.saturating_mul(2);
                    if hi == end {
                        *rg += 1;
                    }
                    if let Some(ob) =
                        rs.scan_group(&rs_scan, base, deltas, g, lo, hi, &self.tablet.counters)?
                    {
                        let keys = if want_keys {
                            let mut c = rs.keys.cursor();
                            ob.ordinals
                                .iter()
                                .map(|o| c.seek(*o as usize).to_vec())
                                .collect()
                        } else {
                            vec![]
                        };
                        return Ok(Some(KeyedBatch {
                            batch: ob.batch,
                            keys,
                        }));
                    }
                }
                Ok(None)
            }
        }
    }

    fn apply_limit(&mut self, b: RecordBatch) -> RecordBatch {
        match &mut self.limit_left {
            None => b,
            Some(left) => {
                let n = b.num_rows().min(*left);
                *left -= n;
                b.slice(0, n)
            }
        }
    }

    /// The next batch, or `None` when the scan is complete.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.empty || self.limit_left == Some(0) {
            return Ok(None);
        }
        if !self.ordered {
            while self.current < self.sources.len() {
                if let Some(kb) = self.next_from(self.current)? {
                    let b = self.apply_limit(kb.batch);
                    return Ok(Some(b));
                }
                self.current += 1;
            }
            return Ok(None);
        }
        if !self.heads_primed {
            self.heads_primed = true;
            for i in 0..self.sources.len() {
                let h = self.next_from(i)?.map(|kb| (kb, 0));
                self.heads.push(h);
            }
        }
        let want = match self.limit_left {
            Some(l) => l.min(self.batch_size),
            None => self.batch_size,
        };
        let mut held: Vec<RecordBatch> = Vec::new();
        let mut held_of: Vec<Option<usize>> = vec![None; self.heads.len()];
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(want);
        while picks.len() < want {
            let mut best: Option<usize> = None;
            for (i, h) in self.heads.iter().enumerate() {
                if let Some((kb, pos)) = h {
                    let k = &kb.keys[*pos];
                    if best.is_none_or(|b| {
                        let (bk, bp) = self.heads[b]
                            .as_ref()
                            .map(|(kb, p)| (kb, *p))
                            .unwrap_or_else(|| unreachable!());
                        k < &bk.keys[bp]
                    }) {
                        best = Some(i);
                    }
                }
            }
            let Some(i) = best else { break };
            let slot = match held_of[i] {
                Some(s) => s,
                None => {
                    held.push(
                        self.heads[i]
                            .as_ref()
                            .map(|(kb, _)| kb.batch.clone())
                            .unwrap_or_else(|| unreachable!()),
                    );
                    held_of[i] = Some(held.len() - 1);
                    held.len() - 1
                }
            };
            let (exhausted, key) = {
                let (kb, pos) = self.heads[i].as_mut().unwrap_or_else(|| unreachable!());
                picks.push((slot, *pos));
                let key = kb.keys[*pos].clone();
                *pos += 1;
                (*pos >= kb.keys.len(), key)
            };
            self.last_key = Some(key);
            if exhausted {
                self.heads[i] = self.next_from(i)?.map(|kb| (kb, 0));
                held_of[i] = None;
            }
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let cols = (0..self.out_schema.fields().len())
            .map(|c| {
                let arrays: Vec<&dyn Array> = held.iter().map(|b| b.column(c).as_ref()).collect();
                interleave(&arrays, &picks)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let n = picks.len();
        let b = make_batch(&self.out_schema, cols, n)?;
        Ok(Some(self.apply_limit(b)))
    }

    /// Reads every remaining batch.
    pub fn collect_all(&mut self) -> Result<Vec<RecordBatch>> {
        let mut out = vec![];
        while let Some(b) = self.next_batch()? {
            out.push(b);
        }
        Ok(out)
    }

    /// Counts the remaining rows.
    pub fn count_rows(&mut self) -> Result<usize> {
        let mut n = 0;
        while let Some(b) = self.next_batch()? {
            n += b.num_rows();
        }
        Ok(n)
    }
}

impl Iterator for Scanner {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

/// The encoded key right after `key` (to resume a scan after a returned row).
pub fn key_successor(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(0);
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_common::key::encode_row_key;
    use cairn_common::{ColumnSpec, DataType, Value};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("r", DataType::Int32),
                ColumnSpec::new("id", DataType::Int64),
            ],
            &["r", "id"],
        )
        .unwrap()
    }

    fn inside(schema: &Schema, range: &(Vec<u8>, Vec<u8>), r: i32, id: i64) -> bool {
        let k = encode_row_key(schema, &[Value::Int32(r), Value::Int64(id)]).unwrap();
        k >= range.0 && (range.1.is_empty() || k < range.1)
    }

    #[test]
    fn an_in_list_on_the_key_prefix_bounds_the_scan() {
        let s = schema();
        let list = |vs: Vec<Value>| vec![ColumnPredicate::in_list("r", vs)];
        let range = key_range_from_predicates(
            &s,
            &list(vec![Value::Int32(7), Value::Int32(3), Value::Int32(5)]),
        );
        assert!(inside(&s, &range, 3, i64::MIN) && inside(&s, &range, 7, i64::MAX));
        assert!(
            inside(&s, &range, 4, 0),
            "between the values: the predicate filters"
        );
        assert!(!inside(&s, &range, 2, i64::MAX) && !inside(&s, &range, 8, i64::MIN));
        // A list on the last key column, after an equality on the first.
        let preds = vec![
            ColumnPredicate::eq("r", Value::Int32(1)),
            ColumnPredicate::in_list("id", vec![Value::Int64(10), Value::Int64(-4)]),
        ];
        let range = key_range_from_predicates(&s, &preds);
        assert!(inside(&s, &range, 1, -4) && inside(&s, &range, 1, 10));
        assert!(!inside(&s, &range, 1, 11) && !inside(&s, &range, 1, -5));
        assert!(!inside(&s, &range, 2, 0));
        // Only NULLs, or none: no bound from the list.
        assert_eq!(
            key_range_from_predicates(&s, &list(vec![Value::Null])),
            (vec![], vec![])
        );
    }
}
