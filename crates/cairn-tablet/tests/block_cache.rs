//! The block cache under point reads and short scans: a read decodes one page of
//! each column it projects and no other, the cache's counters say so, and reads
//! whose rows straddle page boundaries return the right rows whether the cache holds
//! everything, a few pages or nothing.

mod common;

use std::sync::Arc;

use cairn_common::{ColumnPredicate, ColumnSpec, DataType, Schema, Value};
use cairn_tablet::cache::{BLOCK_ROWS, BlockCache};
use cairn_tablet::{LocalTablet, ReadMode, RowOp, ScanSpec, TabletOptions};
use common::{rows_of, small_options};

/// Rows of the test table: one row group of three pages per column.
const ROWS: i64 = 10_000;

fn schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("a", DataType::Int32),
            ColumnSpec::new("b", DataType::Int64),
            // Distinct strings: plain-encoded, so its pages reach PAGE_BYTES and end
            // before BLOCK_ROWS rows, at other rows than the other columns' pages.
            ColumnSpec::new("s", DataType::String),
        ],
        &["k"],
    )
    .unwrap()
}

fn row(k: i64) -> Vec<Value> {
    vec![
        Value::Int64(k),
        Value::Int32((k % 1000) as i32),
        Value::Int64(k * 3),
        Value::String(format!("row {k}")),
    ]
}

/// A tablet of [`ROWS`] rows on disk in one row group, reading through `cache`.
fn tablet(dir: &std::path::Path, cache: Arc<BlockCache>) -> Arc<LocalTablet> {
    let opts = TabletOptions {
        rows_per_row_group: 65_536,
        target_rowset_bytes: 64 << 20,
        mrs_flush_bytes: 64 << 20,
        block_cache: cache,
        ..small_options()
    };
    let t = LocalTablet::create(dir, schema(), opts).unwrap();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(1000) {
        let r = t
            .write(chunk.iter().map(|&k| RowOp::insert(row(k))).collect())
            .unwrap();
        assert!(r.row_errors.is_empty(), "{:?}", r.row_errors);
    }
    t.flush_all().unwrap();
    assert_eq!(t.stats().mrs_rows, 0, "every row is on disk");
    t
}

#[test]
fn a_point_read_decodes_one_page_of_each_projected_column() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(BlockCache::new(64 << 20));
    let t = tablet(dir.path(), cache.clone());
    let before = cache.stats();
    let key = [Value::Int64(5000)];

    // Column b alone: one page decoded.
    let got = t
        .tablet()
        .get_projected(&key, ReadMode::Latest, Some(&[2]))
        .unwrap()
        .unwrap();
    assert_eq!(got[2], Value::Int64(15_000));
    let st = cache.stats();
    assert_eq!(st.misses - before.misses, 1, "{st:?}");
    assert_eq!(st.pages - before.pages, 1, "{st:?}");

    // Again: served from the cache.
    let again = t
        .tablet()
        .get_projected(&key, ReadMode::Latest, Some(&[2]))
        .unwrap()
        .unwrap();
    assert_eq!(again[2], Value::Int64(15_000));
    let st2 = cache.stats();
    assert_eq!(st2.misses, st.misses);
    assert_eq!(st2.hits - st.hits, 1);

    // The whole row: the three other columns' pages, then nothing more.
    assert_eq!(t.get(&key, ReadMode::Latest).unwrap(), Some(row(5000)));
    let st3 = cache.stats();
    assert_eq!(st3.misses - st2.misses, 3, "{st3:?}");
    assert_eq!(t.get(&key, ReadMode::Latest).unwrap(), Some(row(5000)));
    assert_eq!(cache.stats().misses, st3.misses);

    // A row on another page of the same group decodes that page.
    assert_eq!(
        t.get(&[Value::Int64(100)], ReadMode::Latest).unwrap(),
        Some(row(100))
    );
    assert_eq!(cache.stats().misses - st3.misses, 4);
    assert_eq!(cache.stats().evictions, 0);

    // A projection made against a wider schema (before an ALTER dropped columns)
    // reads the positions that still exist and nothing else.
    let got = t
        .tablet()
        .get_projected(&key, ReadMode::Latest, Some(&[2, 9]))
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(got[2], Value::Int64(15_000));
}

/// Reads of `[lo, hi)` by key range and one by one by key, checked against the rows
/// written.
fn check_reads(t: &LocalTablet, ranges: &[(i64, i64)]) {
    for &(lo, hi) in ranges {
        let batches = t
            .scan(ScanSpec {
                predicates: vec![ColumnPredicate::range(
                    "k",
                    Value::Int64(lo),
                    Value::Int64(hi),
                )],
                ordered: true,
                ..ScanSpec::default()
            })
            .unwrap()
            .collect_all()
            .unwrap();
        let want: Vec<Vec<Value>> = (lo.max(0)..hi.min(ROWS)).map(row).collect();
        assert_eq!(rows_of(&schema(), &batches), want, "rows [{lo}, {hi})");
        for k in [lo, hi - 1] {
            let got = t.get(&[Value::Int64(k)], ReadMode::Latest).unwrap();
            assert_eq!(got, (0..ROWS).contains(&k).then(|| row(k)), "key {k}");
        }
    }
}

#[test]
fn short_reads_across_page_boundaries_with_any_cache_size() {
    let page = BLOCK_ROWS as i64;
    let ranges = [
        (page - 1, page + 1),
        (page - 10, 2 * page - 10),
        (2 * page - 1, 2 * page + 3),
        (0, page),
        (ROWS - 5, ROWS + 5),
        (2 * page + 100, 2 * page + 200),
    ];
    for cache_bytes in [64 << 20, 96 << 10, 0] {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(BlockCache::new(cache_bytes));
        let t = tablet(dir.path(), cache.clone());
        check_reads(&t, &ranges);
        // Twice: the second time from whatever the cache kept.
        check_reads(&t, &ranges);
        let st = cache.stats();
        assert!(st.used_bytes <= st.capacity_bytes, "{st:?}");
        if cache_bytes == 96 << 10 {
            assert!(st.evictions > 0, "a tiny cache evicts: {st:?}");
        }
        if cache_bytes == 64 << 20 {
            assert!(st.hits > 0 && st.evictions == 0, "{st:?}");
        }
    }
}

#[test]
fn tablets_share_one_cache() {
    let cache = Arc::new(BlockCache::new(64 << 20));
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let t1 = tablet(d1.path(), cache.clone());
    let t2 = tablet(d2.path(), cache.clone());
    let key = [Value::Int64(7)];
    let s0 = cache.stats();
    assert_eq!(t1.get(&key, ReadMode::Latest).unwrap(), Some(row(7)));
    let s1 = cache.stats();
    assert_eq!(t2.get(&key, ReadMode::Latest).unwrap(), Some(row(7)));
    let s2 = cache.stats();
    // The second tablet's files are other files: its own pages, in the same cache.
    assert_eq!(s1.misses - s0.misses, 4, "{s1:?}");
    assert_eq!(s2.misses - s1.misses, 4, "{s2:?}");
    assert_eq!(s2.pages - s0.pages, 8, "{s2:?}");
}
