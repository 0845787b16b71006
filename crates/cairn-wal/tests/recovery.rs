//! Recovery: torn tails are repaired, everything else is reported as corruption.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use cairn_wal::{
    ENTRY_HEADER_LEN, FORMAT_VERSION, FsyncPolicy, Log, LogOptions, SEGMENT_HEADER_LEN, WalError,
    segment_file_name,
};
use proptest::prelude::*;

fn opts(segment_size: u64) -> LogOptions {
    LogOptions {
        segment_size,
        fsync: FsyncPolicy::Never,
    }
}

fn payload(i: u64) -> Vec<u8> {
    format!("payload-{i}|")
        .repeat((i % 4 + 1) as usize)
        .into_bytes()
}

/// Byte offset of entry `i` in a segment starting at `first` holding `payload(first..)`.
fn entry_offset(first: u64, i: u64) -> u64 {
    SEGMENT_HEADER_LEN
        + (first..i)
            .map(|j| ENTRY_HEADER_LEN + payload(j).len() as u64)
            .sum::<u64>()
}

/// Writes entries `range` with the given segment size and returns the sorted segment paths.
fn write_log(dir: &Path, range: std::ops::Range<u64>, segment_size: u64) -> Vec<PathBuf> {
    let mut log = Log::open(dir, opts(segment_size)).unwrap();
    for i in range {
        log.append(i, &payload(i)).unwrap();
    }
    log.sync().unwrap();
    drop(log);
    segments(dir)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn first_index_of(path: &Path) -> u64 {
    path.file_name().unwrap().to_str().unwrap()[4..24]
        .parse()
        .unwrap()
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

fn set_len(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn append_bytes(path: &Path, extra: &[u8]) {
    let mut bytes = fs::read(path).unwrap();
    bytes.extend_from_slice(extra);
    fs::write(path, bytes).unwrap();
}

fn flip_bit(path: &Path, offset: u64, bit: u32) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 1 << bit;
    fs::write(path, bytes).unwrap();
}

/// Encodes an entry exactly as the log does (format version 2: the checksum covers
/// len bytes ++ index bytes ++ payload).
fn encode_entry(index: u64, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    let mut covered = len.to_vec();
    covered.extend_from_slice(&index.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&covered), payload);
    let mut v = Vec::new();
    v.extend_from_slice(&len);
    v.extend_from_slice(&crc.to_le_bytes());
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// Checks that the log holds exactly `payload(range)` and accepts the next append.
fn assert_recovered(dir: &Path, range: std::ops::Range<u64>, segment_size: u64) {
    let mut log = Log::open(dir, opts(segment_size)).unwrap();
    assert_eq!(log.next_index(), Some(range.end));
    let got = log.read_range(0, u64::MAX).unwrap();
    let want: Vec<_> = range.clone().map(|i| (i, payload(i))).collect();
    assert_eq!(got, want);
    log.append(range.end, b"after recovery").unwrap();
    log.sync().unwrap();
    drop(log);
    let log = Log::open(dir, opts(segment_size)).unwrap();
    assert_eq!(log.last_index(), Some(range.end));
    assert_eq!(
        log.read(range.end).unwrap(),
        Some(b"after recovery".to_vec())
    );
}

/// Asserts `open` fails with corruption at `offset` of `path`, leaving the files untouched.
fn assert_corruption(dir: &Path, path: &Path, offset: Option<u64>) {
    let before: Vec<_> = segments(dir).iter().map(|p| fs::read(p).unwrap()).collect();
    let err = Log::open(dir, opts(1 << 20)).unwrap_err();
    match &err {
        WalError::Corruption {
            path: p, offset: o, ..
        } => {
            assert_eq!(p, path, "{err}");
            if let Some(offset) = offset {
                assert_eq!(*o, offset, "{err}");
            }
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("byte offset"), "{msg}");
    let after: Vec<_> = segments(dir).iter().map(|p| fs::read(p).unwrap()).collect();
    assert_eq!(before, after, "a failed open must not modify the log");
}

#[test]
fn torn_tail_cut_at_every_byte_of_the_last_entry() {
    let last_len = ENTRY_HEADER_LEN + payload(5).len() as u64;
    for cut in 1..last_len {
        let tmp = tempfile::tempdir().unwrap();
        let segs = write_log(tmp.path(), 1..6, 1 << 20);
        let full = fs::metadata(&segs[0]).unwrap().len();
        set_len(&segs[0], full - cut);
        assert_recovered(tmp.path(), 1..5, 1 << 20);
    }
}

#[test]
fn torn_tail_partial_entry_garbage() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    // A real entry for index 6 with only part of its payload on disk.
    let entry = encode_entry(6, &[7u8; 100]);
    append_bytes(&segs[0], &entry[..40]);
    assert_recovered(tmp.path(), 1..6, 1 << 20);
    let len = fs::metadata(&segs[0]).unwrap().len();
    assert!(len > entry_offset(1, 6));

    // Fewer bytes than an entry header.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    append_bytes(&segs[0], &[0xde, 0xad, 0xbe]);
    assert_recovered(tmp.path(), 1..6, 1 << 20);
}

#[test]
fn torn_tail_truncates_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    append_bytes(&segs[0], &[1, 2, 3, 4, 5]);
    let log = Log::open(tmp.path(), opts(1 << 20)).unwrap();
    assert_eq!(
        fs::metadata(&segs[0]).unwrap().len(),
        entry_offset(1, 6),
        "torn bytes must be cut off"
    );
    assert_eq!(log.size_bytes(), entry_offset(1, 6));
}

#[test]
fn checksum_failure_in_the_final_entry_is_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    let off = entry_offset(1, 5);
    flip_byte(&segs[0], off + ENTRY_HEADER_LEN + 2);
    assert_recovered(tmp.path(), 1..5, 1 << 20);
}

#[test]
fn zero_filled_tail_is_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    append_bytes(&segs[0], &[0u8; 4096]);
    assert_recovered(tmp.path(), 1..6, 1 << 20);

    // Zeros over the last entry's payload, followed by more zeros.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    let off = entry_offset(1, 5);
    let mut bytes = fs::read(&segs[0]).unwrap();
    bytes.truncate((off + ENTRY_HEADER_LEN) as usize);
    bytes.extend_from_slice(&[0u8; 512]);
    fs::write(&segs[0], bytes).unwrap();
    assert_recovered(tmp.path(), 1..5, 1 << 20);
}

#[test]
fn torn_tail_of_a_later_segment_after_rolls() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..60, 200);
    assert!(segs.len() > 3);
    let last = segs.last().unwrap();
    let len = fs::metadata(last).unwrap().len();
    set_len(last, len - 3);
    assert_recovered(tmp.path(), 1..59, 200);
}

#[test]
fn header_only_last_segment_is_kept() {
    // A crash right after a roll leaves the new segment with just its header.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..60, 200);
    let last = segs.last().unwrap();
    let first = first_index_of(last);
    set_len(last, SEGMENT_HEADER_LEN);
    let log = Log::open(tmp.path(), opts(200)).unwrap();
    assert_eq!(log.segment_count(), segs.len());
    assert_eq!(log.last_index(), Some(first - 1));
    drop(log);
    assert_recovered(tmp.path(), 1..first, 200);
}

#[test]
fn incomplete_last_segment_from_an_interrupted_roll_is_removed() {
    for junk in [
        &[][..],
        &[b'C', b'A', b'I'][..],
        &[0u8; 24][..],
        &[0u8; 100][..],
    ] {
        let tmp = tempfile::tempdir().unwrap();
        write_log(tmp.path(), 1..10, 1 << 20);
        let stray = tmp.path().join(segment_file_name(10));
        fs::write(&stray, junk).unwrap();
        let log = Log::open(tmp.path(), opts(1 << 20)).unwrap();
        assert!(!stray.exists(), "junk {junk:?} should have been removed");
        assert_eq!(log.segment_count(), 1);
        drop(log);
        assert_recovered(tmp.path(), 1..10, 1 << 20);
    }
    // The only segment being empty yields a brand-new log.
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join(segment_file_name(1)), b"").unwrap();
    let log = Log::open(tmp.path(), opts(1 << 20)).unwrap();
    assert_eq!(log.segment_count(), 0);
    assert_eq!(log.next_index(), None);
}

#[test]
fn flipped_byte_in_the_middle_of_the_last_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    for (entry, delta) in [(2, ENTRY_HEADER_LEN + 3), (3, 5), (4, 9), (1, 0)] {
        let off = entry_offset(1, entry);
        flip_byte(&segs[0], off + delta);
        assert_corruption(tmp.path(), &segs[0], Some(off));
        flip_byte(&segs[0], off + delta); // undo
    }
    assert_recovered(tmp.path(), 1..6, 1 << 20);
}

#[test]
fn flipped_length_bit_of_a_middle_entry_of_the_last_segment_is_corruption() {
    // Several segments, so the damaged entry is in the middle of the last one.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..60, 200);
    assert!(segs.len() > 2);
    let last = segs.last().unwrap();
    let first = first_index_of(last);
    let len = fs::metadata(last).unwrap().len();
    let mid = first + 1;
    assert!(
        entry_offset(first, mid + 1) < len,
        "entry {mid} must not be the last one"
    );
    let off = entry_offset(first, mid);
    let mut past_eof = 0;
    for bit in 0..32 {
        let (byte, b) = (off + u64::from(bit / 8), bit % 8);
        flip_bit(last, byte, b);
        let claimed = u32::from_le_bytes(
            fs::read(last).unwrap()[off as usize..][..4]
                .try_into()
                .unwrap(),
        );
        if off + ENTRY_HEADER_LEN + u64::from(claimed) > len {
            past_eof += 1;
        }
        // Whether the damaged length now points past end of file (formerly taken for a torn
        // write and silently truncated) or not: corruption, and nothing changes on disk.
        assert_corruption(tmp.path(), last, Some(off));
        flip_bit(last, byte, b); // undo
    }
    assert!(
        past_eof >= 20,
        "most high bits must point past EOF ({past_eof})"
    );
    let msg = {
        flip_bit(last, off + 2, 6);
        let msg = Log::open(tmp.path(), opts(200)).unwrap_err().to_string();
        flip_bit(last, off + 2, 6);
        msg
    };
    assert!(msg.contains("length field is damaged"), "{msg}");
    assert!(msg.contains(&format!("entry {}", mid + 1)), "{msg}");
    assert_recovered(tmp.path(), 1..60, 200);

    // The same in a single-segment log, for every entry but the last.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..8, 1 << 20);
    for entry in 1..7 {
        let off = entry_offset(1, entry);
        for byte in 1..4 {
            flip_bit(&segs[0], off + byte, 7);
            assert_corruption(tmp.path(), &segs[0], Some(off));
            flip_bit(&segs[0], off + byte, 7);
        }
    }
    assert_recovered(tmp.path(), 1..8, 1 << 20);
}

#[test]
fn flipped_length_bit_of_the_final_entry_is_corruption() {
    // The final entry is complete; a damaged length must not get it dropped as torn.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    let off = entry_offset(1, 5);
    for bit in 0..32 {
        let (byte, b) = (off + u64::from(bit / 8), bit % 8);
        flip_bit(&segs[0], byte, b);
        assert_corruption(tmp.path(), &segs[0], Some(off));
        flip_bit(&segs[0], byte, b);
    }
    assert_recovered(tmp.path(), 1..6, 1 << 20);
}

#[test]
fn torn_tails_inside_the_last_entry_still_recover() {
    // A file cut inside the last entry (its length then points past end of file) is a torn
    // write, in a multi-segment log and for a cut inside a batch.
    let last_len = ENTRY_HEADER_LEN + payload(59).len() as u64;
    for cut in 1..last_len {
        let tmp = tempfile::tempdir().unwrap();
        let segs = write_log(tmp.path(), 1..60, 200);
        let last = segs.last().unwrap();
        let len = fs::metadata(last).unwrap().len();
        set_len(last, len - cut);
        assert_recovered(tmp.path(), 1..59, 200);
    }

    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..4, 1 << 20);
    let mut log = Log::open(tmp.path(), opts(1 << 20)).unwrap();
    let batch: Vec<_> = (4..8).map(|i| (i, payload(i))).collect();
    log.append_batch(batch.iter().map(|(i, p)| (*i, p.as_slice())))
        .unwrap();
    log.sync().unwrap();
    drop(log);
    // Cut in the middle of the payload of entry 6, the third of the batch.
    set_len(&segs[0], entry_offset(1, 6) + ENTRY_HEADER_LEN + 3);
    assert_recovered(tmp.path(), 1..6, 1 << 20);

    // A torn final entry followed by zero-filled blocks that still end before its payload does.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    let entry = encode_entry(6, &[9u8; 1000]);
    let mut tail = entry[..100].to_vec();
    tail.extend_from_slice(&[0u8; 512]);
    append_bytes(&segs[0], &tail);
    assert_recovered(tmp.path(), 1..6, 1 << 20);
}

#[test]
fn flipped_byte_in_an_older_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..60, 200);
    let len = fs::metadata(&segs[0]).unwrap().len();
    // The final byte of a non-last segment: would be a torn tail in the last segment.
    flip_byte(&segs[0], len - 1);
    assert_corruption(tmp.path(), &segs[0], None);
    flip_byte(&segs[0], len - 1);
    // Middle of a middle segment.
    let mid = &segs[segs.len() / 2];
    let first = first_index_of(mid);
    let off = entry_offset(first, first + 1);
    flip_byte(mid, off + ENTRY_HEADER_LEN);
    assert_corruption(tmp.path(), mid, Some(off));
}

#[test]
fn truncated_older_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..60, 200);
    let len = fs::metadata(&segs[1]).unwrap().len();
    set_len(&segs[1], len - 2);
    assert_corruption(tmp.path(), &segs[1], None);
    // An older segment cut exactly at an entry boundary leaves a gap in the indexes.
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..60, 200);
    let first = first_index_of(&segs[0]);
    set_len(&segs[0], entry_offset(first, first + 1));
    assert_corruption(tmp.path(), &segs[1], Some(0));
}

#[test]
fn flipped_header_byte_is_an_error() {
    for byte in 0..SEGMENT_HEADER_LEN {
        // In the last (here: only) segment, with entries.
        let tmp = tempfile::tempdir().unwrap();
        let segs = write_log(tmp.path(), 1..6, 1 << 20);
        flip_byte(&segs[0], byte);
        assert_corruption(tmp.path(), &segs[0], Some(0));
        // In an older segment.
        let tmp = tempfile::tempdir().unwrap();
        let segs = write_log(tmp.path(), 1..30, 200);
        flip_byte(&segs[1], byte);
        assert_corruption(tmp.path(), &segs[1], Some(0));
    }
    // A header-only last segment (after reset) is not treated as an interrupted roll.
    let tmp = tempfile::tempdir().unwrap();
    let mut log = Log::open(tmp.path(), opts(1 << 20)).unwrap();
    log.reset(42).unwrap();
    drop(log);
    let seg = tmp.path().join(segment_file_name(42));
    flip_byte(&seg, 15);
    assert_corruption(tmp.path(), &seg, Some(0));
}

#[test]
fn unsupported_version_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..3, 1 << 20);
    let mut bytes = fs::read(&segs[0]).unwrap();
    assert_eq!(bytes[8..12], FORMAT_VERSION.to_le_bytes());
    assert_eq!(
        FORMAT_VERSION, 2,
        "the length-covering entry checksum is format version 2"
    );
    // Version 1 (entry checksum not covering the length) and a future version are refused.
    for version in [1u32, 3] {
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[0..20]);
        bytes[20..24].copy_from_slice(&crc.to_le_bytes());
        fs::write(&segs[0], &bytes).unwrap();
        match Log::open(tmp.path(), opts(1 << 20)) {
            Err(WalError::UnsupportedVersion {
                found,
                supported: FORMAT_VERSION,
                ..
            }) if found == version => {}
            other => panic!("expected UnsupportedVersion, got {other:?}"),
        }
    }
}

#[test]
fn valid_checksum_with_wrong_index_is_corruption_even_at_the_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    append_bytes(&segs[0], &encode_entry(7, b"skips index 6"));
    assert_corruption(tmp.path(), &segs[0], Some(entry_offset(1, 6)));
}

#[test]
fn missing_middle_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..60, 200);
    assert!(segs.len() >= 3);
    fs::remove_file(&segs[1]).unwrap();
    assert_corruption(tmp.path(), &segs[2], Some(0));
}

#[test]
fn header_disagreeing_with_file_name_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    let renamed = tmp.path().join(segment_file_name(2));
    fs::rename(&segs[0], &renamed).unwrap();
    assert_corruption(tmp.path(), &renamed, Some(12));
}

#[test]
fn corruption_message_says_what_and_where() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    let off = entry_offset(1, 2);
    flip_byte(&segs[0], off + ENTRY_HEADER_LEN);
    let msg = Log::open(tmp.path(), opts(1 << 20))
        .unwrap_err()
        .to_string();
    assert!(msg.contains(&format!("byte offset {off}")), "{msg}");
    assert!(msg.contains("checksum"), "{msg}");
    assert!(msg.contains("not a torn write"), "{msg}");
    assert!(msg.contains("restore"), "{msg}");
}

#[test]
fn corruption_after_open_is_caught_on_read() {
    let tmp = tempfile::tempdir().unwrap();
    let segs = write_log(tmp.path(), 1..6, 1 << 20);
    let log = Log::open(tmp.path(), opts(1 << 20)).unwrap();
    let off = entry_offset(1, 3);
    flip_byte(&segs[0], off + ENTRY_HEADER_LEN + 1);
    assert_eq!(log.read(2).unwrap(), Some(payload(2)));
    match log.read(3) {
        Err(WalError::Corruption { offset, .. }) => assert_eq!(offset, off),
        other => panic!("expected corruption, got {other:?}"),
    }
    assert!(matches!(
        log.read_range(1, 6),
        Err(WalError::Corruption { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Cutting the last segment anywhere recovers exactly the entries that end before the cut.
    #[test]
    fn cut_anywhere_recovers_the_complete_prefix(n in 1u64..12, cut_frac in 0.0f64..1.0) {
        let tmp = tempfile::tempdir().unwrap();
        let segs = write_log(tmp.path(), 1..n + 1, 1 << 20);
        let full = fs::metadata(&segs[0]).unwrap().len();
        let cut = SEGMENT_HEADER_LEN + ((full - SEGMENT_HEADER_LEN) as f64 * cut_frac) as u64;
        set_len(&segs[0], cut);
        let survivors = (1..=n).take_while(|&i| entry_offset(1, i + 1) <= cut).count() as u64;
        assert_recovered(tmp.path(), 1..survivors + 1, 1 << 20);
    }
}
