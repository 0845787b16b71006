//! Which rowsets to compact: Kudu's budgeted rowset-compaction policy (paper §4.7).
//!
//! A key lookup or scan must consult every DiskRowSet whose key range covers the key,
//! so the cost that compaction reduces is the *height* of overlapping rowsets. Each
//! rowset's *width* is the fraction of the key space it spans (measured over the sorted
//! boundary keys of all rowsets). Compacting a set of rowsets that together span a key
//! interval replaces widths summing to `Σ wᵢ` by one rowset of width `w(interval)`, so
//! the benefit is `Σ wᵢ − w(interval)`. For every candidate interval (a pair of rowset
//! boundary keys) the policy solves a 0/1 knapsack — sizes in MiB, capacity the I/O
//! budget — over the rowsets inside it, and picks the best benefit overall.

use std::sync::Arc;

use crate::diskrowset::DiskRowSet;

/// Smallest benefit (in key-space widths) worth a compaction.
pub const MIN_BENEFIT: f64 = 0.01;

/// Picks rowsets to compact within `budget_bytes`; empty when nothing is worth it.
pub fn pick_compaction(rowsets: &[Arc<DiskRowSet>], budget_bytes: u64) -> Vec<Arc<DiskRowSet>> {
    let rs: Vec<&Arc<DiskRowSet>> = rowsets.iter().filter(|r| !r.keys.is_empty()).collect();
    if rs.len() < 2 {
        return vec![];
    }
    let mut bounds: Vec<&[u8]> = rs
        .iter()
        .flat_map(|r| [r.keys.min_key(), r.keys.max_key()])
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let span = (bounds.len().max(2) - 1) as f64;
    let pos = |k: &[u8]| bounds.partition_point(|b| *b < k) as f64;
    let width = |r: &DiskRowSet| (pos(r.keys.max_key()) - pos(r.keys.min_key())) / span;
    let cap = (budget_bytes >> 20).max(1) as usize;
    let size_mib = |r: &DiskRowSet| ((r.size_bytes() >> 20) as usize + 1).min(cap + 1);

    let mut best: (f64, Vec<usize>) = (MIN_BENEFIT, vec![]);
    for (i, lo) in bounds.iter().enumerate() {
        for hi in &bounds[i + 1..] {
            let inside: Vec<usize> = (0..rs.len())
                .filter(|&j| rs[j].keys.min_key() >= *lo && rs[j].keys.max_key() <= *hi)
                .collect();
            if inside.len() < 2 {
                continue;
            }
            let chosen = knapsack(&inside, |j| size_mib(rs[j]), |j| width(rs[j]), cap);
            if chosen.len() < 2 {
                continue;
            }
            let lo_k = chosen
                .iter()
                .map(|&j| rs[j].keys.min_key())
                .min()
                .unwrap_or(lo);
            let hi_k = chosen
                .iter()
                .map(|&j| rs[j].keys.max_key())
                .max()
                .unwrap_or(hi);
            let union = (pos(hi_k) - pos(lo_k)) / span;
            let benefit: f64 = chosen.iter().map(|&j| width(rs[j])).sum::<f64>() - union;
            if benefit > best.0 {
                best = (benefit, chosen);
            }
        }
    }
    best.1.into_iter().map(|j| rs[j].clone()).collect()
}

/// 0/1 knapsack: items with integer weights and real values, capacity `cap`.
fn knapsack(
    items: &[usize],
    weight: impl Fn(usize) -> usize,
    value: impl Fn(usize) -> f64,
    cap: usize,
) -> Vec<usize> {
    let n = items.len();
    let mut dp = vec![vec![0.0f64; cap + 1]; n + 1];
    for (i, &it) in items.iter().enumerate() {
        let (w, v) = (weight(it), value(it));
        for c in 0..=cap {
            dp[i + 1][c] = dp[i][c];
            if w <= c && dp[i][c - w] + v > dp[i + 1][c] {
                dp[i + 1][c] = dp[i][c - w] + v;
            }
        }
    }
    let mut out = vec![];
    let mut c = cap;
    for i in (0..n).rev() {
        if dp[i + 1][c] != dp[i][c] {
            out.push(items[i]);
            c -= weight(items[i]);
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::knapsack;

    #[test]
    fn knapsack_picks_best_fit() {
        let w = [3usize, 4, 2];
        let v = [4.0, 5.0, 3.0];
        let items = [0, 1, 2];
        assert_eq!(knapsack(&items, |i| w[i], |i| v[i], 6), vec![1, 2]);
        assert_eq!(knapsack(&items, |i| w[i], |i| v[i], 1), Vec::<usize>::new());
    }
}
