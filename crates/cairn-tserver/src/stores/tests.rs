//! A store's life on one server: fetch, swap, look up, push again, roll back,
//! restart, drop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use cairn_common::Value;
use cairn_readonly::{BuildOptions, StoreBuilder, StoreLayout, StoreSchema, node_dir};

use super::*;

fn arrow_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Utf8, false),
    ]))
}

fn store_schema() -> StoreSchema {
    StoreSchema::from_arrow(&arrow_schema(), &["id".into()], None).unwrap()
}

/// Builds version `tag` of store "recs" (one node, keys 0..n, values "tag-i").
fn build(out: &Path, n: i64, tag: &str) {
    let opts = BuildOptions {
        threads: 1,
        memory_bytes: 1 << 20,
        spill_dir: out.parent().unwrap().to_path_buf(),
    };
    let layout = StoreLayout::round_robin(1, 4, 1, 1).unwrap();
    let b = StoreBuilder::new("recs", store_schema(), layout, &opts).unwrap();
    let batch = RecordBatch::try_new(
        arrow_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("{tag}-{i}")),
            )),
        ],
    )
    .unwrap();
    b.add_batch(&batch).unwrap();
    b.finish(out).unwrap();
}

fn request(dir: &Path, version: u64) -> FetchRequest {
    FetchRequest {
        rebalance: None,
        store_id: "s1".into(),
        store_name: "recs".into(),
        version,
        source: node_dir(dir, 0).to_string_lossy().to_string(),
        node: 0,
        retained: 2,
        throttle_bytes_per_sec: 0,
    }
}

fn wait_fetched(host: &StoreHost, version: u64) -> StoreStatus {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let s = host.status("s1").unwrap();
        assert_eq!(s.fetch_version, Some(version));
        assert_eq!(s.fetch_error, None);
        if s.fetched {
            return s;
        }
        assert!(Instant::now() < until, "fetch never finished: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn value_of(host: &StoreHost, id: i64) -> (u64, Option<String>) {
    let key = store_schema().encode_key(&[Value::Int64(id)]).unwrap();
    let (v, mut values) = host.get("s1", &[key]).unwrap();
    let row = values
        .pop()
        .unwrap()
        .map(|b| store_schema().decode_value(&b).unwrap());
    (
        v,
        row.map(|r| match &r[0] {
            Value::String(s) => s.clone(),
            other => panic!("{other:?}"),
        }),
    )
}

#[test]
fn fetch_swap_get_rollback_restart_and_drop() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (b1, b2) = (tmp.path().join("b1"), tmp.path().join("b2"));
    build(&b1, 100, "one");
    build(&b2, 100, "two");

    let host = StoreHost::open(&data).unwrap();
    assert!(matches!(
        host.status("s1"),
        Err(TserverError::StoreNotFound(_))
    ));
    // Nothing is served before the first swap, and a swap needs a finished fetch.
    host.fetch(request(&b1, 1)).unwrap();
    wait_fetched(&host, 1);
    assert!(host.get("s1", &[]).is_err(), "no live version yet");
    assert!(
        host.swap("s1", 2, SwapOrder::default()).is_err(),
        "version 2 was never fetched"
    );
    let r = host.swap("s1", 1, SwapOrder::default()).unwrap();
    assert_eq!((r.previous, r.current), (None, 1));
    assert_eq!(value_of(&host, 7), (1, Some("one-7".into())));
    assert_eq!(value_of(&host, 1_000), (1, None));
    // Swapping to the live version again is a no-op (a retried or resumed push).
    assert_eq!(host.swap("s1", 1, SwapOrder::default()).unwrap().current, 1);

    // A second version: fetching it again while it is done changes nothing.
    host.fetch(request(&b2, 2)).unwrap();
    wait_fetched(&host, 2);
    let s = host.fetch(request(&b2, 2)).unwrap();
    assert!(s.fetched);
    assert_eq!(
        value_of(&host, 7).1.as_deref(),
        Some("one-7"),
        "not live before the swap"
    );
    host.swap("s1", 2, SwapOrder::default()).unwrap();
    assert_eq!(value_of(&host, 7), (2, Some("two-7".into())));
    // A rollback is a swap to an older retained version.
    let r = host.swap("s1", 1, SwapOrder::default()).unwrap();
    assert_eq!((r.previous, r.current), (Some(2), 1));
    assert_eq!(value_of(&host, 7), (1, Some("one-7".into())));

    // A restarted server serves what it served before, and can still roll forward.
    drop(host);
    let host = StoreHost::open(&data).unwrap();
    assert_eq!(value_of(&host, 7), (1, Some("one-7".into())));
    assert_eq!(host.status("s1").unwrap().versions, vec![1, 2]);
    host.swap("s1", 2, SwapOrder::default()).unwrap();
    assert_eq!(value_of(&host, 99), (2, Some("two-99".into())));

    // An aborted fetch leaves nothing behind; a dropped store is gone from disk.
    host.fetch(request(&b1, 3)).unwrap();
    host.abort_fetch("s1", 3).unwrap();
    assert!(!data.join("stores/s1/version-3.fetch").exists());
    host.drop_store("s1").unwrap();
    assert!(!data.join("stores/s1").exists());
    assert!(matches!(
        host.get("s1", &[]),
        Err(TserverError::StoreNotFound(_))
    ));
}

#[test]
fn a_foreign_build_fails_the_fetch_and_bad_requests_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let b1 = tmp.path().join("b1");
    build(&b1, 10, "one");
    let host = StoreHost::open(&tmp.path().join("data")).unwrap();
    let mut req = request(&b1, 1);
    req.node = 3;
    host.fetch(req).unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    let err = loop {
        if let Some(e) = host.status("s1").unwrap().fetch_error {
            break e;
        }
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(err.contains("push the build made for this store"), "{err}");
    assert!(host.swap("s1", 1, SwapOrder::default()).is_err());
    // The master's next poll is answered with the failure, not with a fresh attempt
    // (which would hide the error from the master and retry forever).
    let mut again = request(&b1, 1);
    again.node = 3;
    let s = host.fetch(again).unwrap();
    assert_eq!(s.fetch_error.as_deref(), Some(err.as_str()));
    // Once the master has aborted the failed fetch, the version can be fetched anew.
    host.abort_fetch("s1", 1).unwrap();
    host.fetch(request(&b1, 1)).unwrap();
    wait_fetched(&host, 1);

    let mut req = request(&b1, 1);
    req.source = "relative/path".into();
    assert!(host.fetch(req).is_err());
    let mut req = request(&b1, 1);
    req.store_id = "../evil".into();
    assert!(matches!(
        host.fetch(req),
        Err(TserverError::InvalidArgument(_))
    ));
}
