//! Behaviour of a healthy log: appends, reads, rolling, gc, truncation, reset, reopen.

use std::path::{Path, PathBuf};

use cairn_wal::{FsyncPolicy, Log, LogOptions, SEGMENT_HEADER_LEN, WalError, segment_file_name};

fn opts(segment_size: u64, fsync: FsyncPolicy) -> LogOptions {
    LogOptions {
        segment_size,
        fsync,
    }
}

fn payload(i: u64) -> Vec<u8> {
    format!("entry-{i};")
        .repeat((i % 5 + 1) as usize)
        .into_bytes()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn append_range(log: &mut Log, range: std::ops::Range<u64>) {
    for i in range {
        log.append(i, &payload(i)).unwrap();
    }
}

fn assert_contents(log: &Log, range: std::ops::Range<u64>) {
    assert_eq!(log.first_index(), Some(range.start));
    assert_eq!(log.last_index(), Some(range.end - 1));
    for i in range.clone() {
        assert_eq!(log.read(i).unwrap(), Some(payload(i)), "entry {i}");
    }
    let all = log.read_range(0, u64::MAX).unwrap();
    let expected: Vec<_> = range.map(|i| (i, payload(i))).collect();
    assert_eq!(all, expected);
}

#[test]
fn log_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Log>();
    check::<WalError>();
}

#[test]
fn default_options() {
    let o = LogOptions::default();
    assert_eq!(o.segment_size, 64 * 1024 * 1024);
    assert_eq!(o.fsync, FsyncPolicy::Always);
}

#[test]
fn fresh_log_is_empty_and_creates_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b/wal");
    let log = Log::open(&dir, LogOptions::default()).unwrap();
    assert!(dir.is_dir());
    assert_eq!(log.first_index(), None);
    assert_eq!(log.last_index(), None);
    assert_eq!(log.next_index(), None);
    assert!(log.is_empty());
    assert_eq!(log.segment_count(), 0);
    assert_eq!(log.size_bytes(), 0);
    assert_eq!(log.read(0).unwrap(), None);
    assert!(log.read_range(0, 10).unwrap().is_empty());
}

#[test]
fn append_read_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mut log = Log::open(tmp.path(), LogOptions::default()).unwrap();
        // A brand-new log accepts any start index.
        append_range(&mut log, 100..150);
        assert_contents(&log, 100..150);
        assert_eq!(log.read(99).unwrap(), None);
        assert_eq!(log.read(150).unwrap(), None);
        assert_eq!(log.next_index(), Some(150));
        assert_eq!(log.segment_count(), 1);
        assert_eq!(
            segment_files(tmp.path()),
            vec![tmp.path().join(segment_file_name(100))]
        );
    }
    let mut log = Log::open(tmp.path(), LogOptions::default()).unwrap();
    assert_contents(&log, 100..150);
    append_range(&mut log, 150..160);
    drop(log);
    let log = Log::open(tmp.path(), LogOptions::default()).unwrap();
    assert_contents(&log, 100..160);
}

#[test]
fn empty_payloads_and_empty_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::open(tmp.path(), opts(1 << 20, FsyncPolicy::Never)).unwrap();
    log.append_batch(std::iter::empty()).unwrap();
    assert_eq!(log.segment_count(), 0);
    log.append(1, b"").unwrap();
    log.append(2, b"x").unwrap();
    log.sync().unwrap();
    drop(log);
    let log = Log::open(tmp.path(), opts(1 << 20, FsyncPolicy::Never)).unwrap();
    assert_eq!(log.read(1).unwrap(), Some(Vec::new()));
    assert_eq!(log.read(2).unwrap(), Some(b"x".to_vec()));
}

#[test]
fn out_of_order_appends_are_rejected_without_side_effects() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::open(tmp.path(), LogOptions::default()).unwrap();
    append_range(&mut log, 1..4);
    let size = log.size_bytes();
    for bad in [1, 3, 5, 0, u64::MAX] {
        match log.append(bad, b"x") {
            Err(WalError::OutOfOrder { expected: 4, got }) => assert_eq!(got, bad),
            other => panic!("expected OutOfOrder, got {other:?}"),
        }
    }
    // A batch with a gap in the middle writes nothing.
    let err = log
        .append_batch([(4, &b"a"[..]), (5, &b"b"[..]), (7, &b"c"[..])])
        .unwrap_err();
    assert!(matches!(
        err,
        WalError::OutOfOrder {
            expected: 6,
            got: 7
        }
    ));
    assert_eq!(log.size_bytes(), size);
    assert_eq!(log.last_index(), Some(3));
    assert!(err.to_string().contains("expected index 6, got 7"));
    // u64::MAX is reserved.
    let tmp2 = tempfile::tempdir().unwrap();
    let mut log2 = Log::open(tmp2.path(), LogOptions::default()).unwrap();
    assert!(matches!(
        log2.append(u64::MAX, b"x"),
        Err(WalError::InvalidIndex { .. })
    ));
    log2.append(u64::MAX - 1, b"x").unwrap();
    assert_eq!(log2.last_index(), Some(u64::MAX - 1));
}

#[test]
fn append_batch_and_read_range() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::open(tmp.path(), opts(1 << 20, FsyncPolicy::Always)).unwrap();
    let payloads: Vec<Vec<u8>> = (10..20).map(payload).collect();
    log.append_batch((10..20).zip(payloads.iter().map(Vec::as_slice)))
        .unwrap();
    assert_eq!(log.first_index(), Some(10));
    assert_eq!(log.last_index(), Some(19));
    let r = log.read_range(12, 15).unwrap();
    assert_eq!(r, (12..15).map(|i| (i, payload(i))).collect::<Vec<_>>());
    // Clipped at both ends.
    assert_eq!(log.read_range(0, 12).unwrap().len(), 2);
    assert_eq!(log.read_range(18, 100).unwrap().len(), 2);
    assert!(log.read_range(20, 30).unwrap().is_empty());
    assert!(log.read_range(15, 15).unwrap().is_empty());
    assert!(log.read_range(15, 12).unwrap().is_empty());
}

#[test]
fn rolling_across_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let o = || opts(200, FsyncPolicy::Never);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    append_range(&mut log, 1..101);
    let n = log.segment_count();
    assert!(n > 10, "expected many segments, got {n}");
    assert_eq!(segment_files(tmp.path()).len(), n);
    let on_disk: u64 = segment_files(tmp.path())
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(log.size_bytes(), on_disk);
    assert_contents(&log, 1..101);
    // A range read spanning several segments.
    assert_eq!(
        log.read_range(7, 63).unwrap(),
        (7..63).map(|i| (i, payload(i))).collect::<Vec<_>>()
    );
    log.sync().unwrap();
    drop(log);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    assert_eq!(log.segment_count(), n);
    assert_contents(&log, 1..101);
    append_range(&mut log, 101..120);
    assert_contents(&log, 1..120);
}

#[test]
fn batch_is_never_split_across_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::open(tmp.path(), opts(100, FsyncPolicy::Always)).unwrap();
    let payloads: Vec<Vec<u8>> = (1..51).map(payload).collect();
    log.append_batch((1..51).zip(payloads.iter().map(Vec::as_slice)))
        .unwrap();
    assert_eq!(log.segment_count(), 1);
    // The next append rolls, because the active segment is over the limit.
    log.append(51, &payload(51)).unwrap();
    assert_eq!(log.segment_count(), 2);
    assert_contents(&log, 1..52);
}

#[test]
fn gc_deletes_only_whole_old_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::open(tmp.path(), opts(150, FsyncPolicy::Never)).unwrap();
    append_range(&mut log, 1..61);
    let before = log.segment_count();
    assert_eq!(log.gc(0).unwrap(), 0);
    assert_eq!(log.gc(1).unwrap(), 0);
    let deleted = log.gc(30).unwrap();
    assert!(deleted > 0);
    assert_eq!(log.segment_count(), before - deleted);
    assert_eq!(segment_files(tmp.path()).len(), log.segment_count());
    let first = log.first_index().unwrap();
    assert!(first <= 30 && first > 1, "first index {first}");
    assert_contents(&log, first..61);
    assert_eq!(log.read(first - 1).unwrap(), None);
    // gc never removes the active segment, even when asked to drop everything.
    log.gc(u64::MAX).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.last_index(), Some(60));
    let first = log.first_index().unwrap();
    assert_contents(&log, first..61);
    log.sync().unwrap();
    drop(log);
    let mut log = Log::open(tmp.path(), opts(150, FsyncPolicy::Never)).unwrap();
    assert_contents(&log, first..61);
    append_range(&mut log, 61..70);
    assert_contents(&log, first..70);
}

#[test]
fn truncate_suffix_then_append() {
    let tmp = tempfile::tempdir().unwrap();
    let o = || opts(150, FsyncPolicy::Always);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    append_range(&mut log, 1..41);
    let segs = log.segment_count();
    // No-op past the end.
    log.truncate_suffix(41).unwrap();
    log.truncate_suffix(1000).unwrap();
    assert_eq!(log.last_index(), Some(40));
    // Within the active segment, then across segments.
    log.truncate_suffix(39).unwrap();
    assert_contents(&log, 1..39);
    log.truncate_suffix(12).unwrap();
    assert!(log.segment_count() < segs);
    assert_eq!(segment_files(tmp.path()).len(), log.segment_count());
    assert_contents(&log, 1..12);
    assert!(matches!(
        log.append(40, b"x"),
        Err(WalError::OutOfOrder {
            expected: 12,
            got: 40
        })
    ));
    // Append different payloads at the truncated indexes.
    for i in 12..20 {
        log.append(i, format!("new-{i}").as_bytes()).unwrap();
    }
    drop(log);
    let log = Log::open(tmp.path(), o()).unwrap();
    assert_eq!(log.last_index(), Some(19));
    assert_eq!(log.read(11).unwrap(), Some(payload(11)));
    assert_eq!(log.read(12).unwrap(), Some(b"new-12".to_vec()));
    assert_eq!(log.read(19).unwrap(), Some(b"new-19".to_vec()));
}

#[test]
fn truncate_suffix_at_segment_boundary_and_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let o = || opts(150, FsyncPolicy::Never);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    append_range(&mut log, 5..40);
    // Find a segment boundary from the file names.
    let second: u64 = segment_files(tmp.path())[1]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()[4..24]
        .parse()
        .unwrap();
    log.truncate_suffix(second).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_contents(&log, 5..second);
    // Truncating at or below the first entry empties the log but keeps its start.
    log.truncate_suffix(2).unwrap();
    assert_eq!(log.first_index(), None);
    assert_eq!(log.last_index(), None);
    assert_eq!(log.next_index(), Some(5));
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.size_bytes(), SEGMENT_HEADER_LEN);
    drop(log);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    assert_eq!(log.next_index(), Some(5));
    assert!(matches!(
        log.append(6, b"x"),
        Err(WalError::OutOfOrder {
            expected: 5,
            got: 6
        })
    ));
    append_range(&mut log, 5..8);
    assert_contents(&log, 5..8);
}

#[test]
fn reset_above_inside_and_below() {
    let tmp = tempfile::tempdir().unwrap();
    let o = || opts(150, FsyncPolicy::Never);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    append_range(&mut log, 10..40);
    assert!(log.segment_count() > 1);
    for next in [100, 20, 10, 3] {
        log.reset(next).unwrap();
        assert!(log.is_empty());
        assert_eq!(log.next_index(), Some(next));
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.size_bytes(), SEGMENT_HEADER_LEN);
        assert_eq!(
            segment_files(tmp.path()),
            vec![tmp.path().join(segment_file_name(next))]
        );
        assert_eq!(log.read(next).unwrap(), None);
        assert!(matches!(
            log.append(next + 1, b"x"),
            Err(WalError::OutOfOrder { .. })
        ));
        append_range(&mut log, next..next + 20);
        assert_contents(&log, next..next + 20);
    }
    // An empty reset log survives reopen and still insists on its next index.
    log.reset(77).unwrap();
    drop(log);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    assert_eq!(log.next_index(), Some(77));
    assert!(log.append(1, b"x").is_err());
    append_range(&mut log, 77..80);
    assert_contents(&log, 77..80);
    // A brand-new log can be reset too.
    let tmp2 = tempfile::tempdir().unwrap();
    let mut log2 = Log::open(tmp2.path(), o()).unwrap();
    log2.reset(5).unwrap();
    assert_eq!(log2.next_index(), Some(5));
    assert!(log2.reset(u64::MAX).is_err());
}

#[test]
fn fsync_never_with_explicit_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let o = || opts(1 << 20, FsyncPolicy::Never);
    let mut log = Log::open(tmp.path(), o()).unwrap();
    append_range(&mut log, 0..10);
    log.sync().unwrap();
    log.sync().unwrap();
    drop(log);
    let log = Log::open(tmp.path(), o()).unwrap();
    assert_contents(&log, 0..10);
}

#[test]
fn size_bytes_tracks_files() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::open(tmp.path(), opts(1 << 20, FsyncPolicy::Never)).unwrap();
    log.append(1, b"abcd").unwrap();
    assert_eq!(log.size_bytes(), SEGMENT_HEADER_LEN + 16 + 4);
    log.append(2, b"").unwrap();
    assert_eq!(log.size_bytes(), SEGMENT_HEADER_LEN + 16 + 4 + 16);
}

#[test]
fn other_files_in_the_directory_are_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("README"), b"hello").unwrap();
    std::fs::write(tmp.path().join("wal-1.log"), b"not a segment name").unwrap();
    let mut log = Log::open(tmp.path(), LogOptions::default()).unwrap();
    append_range(&mut log, 1..3);
    drop(log);
    let log = Log::open(tmp.path(), LogOptions::default()).unwrap();
    assert_contents(&log, 1..3);
}

#[test]
fn sync_point_names_the_last_entry_and_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), opts(300, FsyncPolicy::Never)).unwrap();
    assert!(log.sync_point().unwrap().is_none(), "nothing to sync yet");
    append_range(&mut log, 1..4);
    let (last, file) = log.sync_point().unwrap().unwrap();
    assert_eq!(last, 3);
    file.sync_data().unwrap();
    // Past a roll, the handle is the new active segment's.
    append_range(&mut log, 4..40);
    assert!(segment_files(dir.path()).len() > 1);
    let (last, file) = log.sync_point().unwrap().unwrap();
    assert_eq!(last, 39);
    let active = segment_files(dir.path()).pop().unwrap();
    assert_eq!(
        file.metadata().unwrap().len(),
        std::fs::metadata(active).unwrap().len()
    );
    file.sync_data().unwrap();
    drop(log);
    let log = Log::open(dir.path(), opts(300, FsyncPolicy::Never)).unwrap();
    assert_contents(&log, 1..40);
}
