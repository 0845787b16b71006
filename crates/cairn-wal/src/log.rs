//! The [`Log`] itself: appends, reads, truncation, garbage collection and recovery.

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::WalError;
use crate::format::{
    ENTRY_HEADER_LEN, EntryHeader, FORMAT_VERSION, HeaderError, MAX_PAYLOAD_LEN,
    SEGMENT_HEADER_LEN, decode_header, encode_entry, encode_header, entry_crc,
    parse_segment_file_name, segment_file_name,
};
use crate::io_util::{all_zero, read_exact_at, sync_dir, write_all_at};

/// When appends are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// `sync_data` the active segment after every [`Log::append`] / [`Log::append_batch`]:
    /// an append that returned `Ok` survives a crash.
    Always,
    /// Never fsync on append; data becomes durable only on an explicit [`Log::sync`], on a
    /// segment roll, or on the structural operations (truncate, reset). For tests, bulk loads,
    /// and callers that group-commit with `sync` themselves.
    Never,
}

/// How a [`Log`] is opened.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Roll to a new segment at the start of an append once the active segment holds at least
    /// this many bytes (header included). Default 64 MiB.
    pub segment_size: u64,
    /// When appends are fsynced. Default [`FsyncPolicy::Always`].
    pub fsync: FsyncPolicy,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_size: 64 * 1024 * 1024,
            fsync: FsyncPolicy::Always,
        }
    }
}

/// One segment file and the in-memory index of its entries.
#[derive(Debug)]
struct Segment {
    /// Index of the first entry (from the header; also in the file name).
    first_index: u64,
    /// Path of the file.
    path: PathBuf,
    /// Open handle (read + write; only the last segment is written).
    file: File,
    /// Byte offset of every entry, in index order.
    offsets: Vec<u64>,
    /// Length of the file in bytes (== end of the last entry).
    len: u64,
}

impl Segment {
    /// Index the next entry appended to this segment would get.
    fn next_index(&self) -> u64 {
        self.first_index + self.offsets.len() as u64
    }

    /// Byte offset just past entry `i` of this segment.
    fn entry_end(&self, i: usize) -> u64 {
        self.offsets.get(i + 1).copied().unwrap_or(self.len)
    }
}

/// The segmented write-ahead log of one tablet (later: its Raft log storage).
///
/// Entries are `(u64 index, payload)` with strictly consecutive indexes. See the crate docs for
/// the on-disk format and the recovery rules.
#[derive(Debug)]
pub struct Log {
    /// The directory holding the segment files.
    dir: PathBuf,
    /// Options the log was opened with.
    opts: LogOptions,
    /// Segments in index order; the last one is the active segment. Empty only for a brand-new
    /// log that has never been appended to or reset.
    segments: Vec<Segment>,
    /// The active segment has writes that have not been fsynced.
    dirty: bool,
    /// A mutation failed midway; the on-disk state is unknown.
    poisoned: bool,
}

/// Outcome of scanning one segment file during recovery.
enum Scanned {
    /// A usable segment, possibly with a torn tail to cut off at `torn_at`.
    Segment { seg: Segment, torn: Option<Torn> },
    /// The last segment is an interrupted roll (shorter than a header, or all zero): remove it.
    IncompleteRoll { path: PathBuf, len: u64 },
}

/// A torn tail found in the last segment.
struct Torn {
    /// Where to truncate the file.
    at: u64,
    /// What was wrong with the entry at `at`.
    reason: String,
}

/// A bad entry found while scanning (classified as torn or corrupt afterwards).
enum BadEntry {
    /// The entry header or payload runs past end of file.
    Incomplete(String),
    /// The payload is all there but the checksum fails; `end` is where the entry ends.
    Checksum { end: u64, detail: String },
}

impl Log {
    /// Opens (creating `dir` if missing) and recovers the log in `dir`.
    ///
    /// Every segment is read and verified. A torn tail in the last segment is cut off (with a
    /// warning); anything else that fails validation makes `open` return
    /// [`WalError::Corruption`] without touching the files. See the crate docs for the rule.
    pub fn open(dir: &Path, opts: LogOptions) -> Result<Log, WalError> {
        fs::create_dir_all(dir).map_err(WalError::io(dir))?;
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(WalError::io(dir))? {
            let entry = entry.map_err(WalError::io(dir))?;
            let name = entry.file_name();
            let Some(first_index) = name.to_str().and_then(parse_segment_file_name) else {
                tracing::debug!(dir = %dir.display(), file = ?name, "ignoring non-segment file in WAL directory");
                continue;
            };
            let ty = entry.file_type().map_err(WalError::io(entry.path()))?;
            if !ty.is_file() {
                return Err(WalError::corruption(
                    entry.path(),
                    0,
                    "a segment name is taken by something that is not a regular file",
                ));
            }
            names.push((first_index, entry.path()));
        }
        names.sort_unstable_by_key(|(first, _)| *first);

        // Scan and validate everything before changing anything on disk.
        let count = names.len();
        let mut segments: Vec<Segment> = Vec::with_capacity(count);
        let mut torn_tail = None;
        let mut incomplete_roll = None;
        for (i, (name_index, path)) in names.into_iter().enumerate() {
            let is_last = i + 1 == count;
            match scan_segment(&path, name_index, is_last)? {
                Scanned::IncompleteRoll { path, len } => incomplete_roll = Some((path, len)),
                Scanned::Segment { seg, torn } => {
                    if let Some(prev) = segments.last() {
                        let expected = prev.next_index();
                        if seg.first_index != expected {
                            return Err(WalError::corruption(
                                &seg.path,
                                0,
                                format!(
                                    "segment starts at index {} but the previous segment {} ends \
                                     at index {}, so it must start at {expected}: a segment is \
                                     missing or two segments overlap",
                                    seg.first_index,
                                    prev.path.display(),
                                    expected.wrapping_sub(1),
                                ),
                            ));
                        }
                    }
                    torn_tail = torn;
                    segments.push(seg);
                }
            }
        }

        // Repairs: only the last segment is ever touched.
        if let Some((path, len)) = incomplete_roll {
            tracing::warn!(
                path = %path.display(),
                len,
                "removing incomplete WAL segment left by a crash during a roll"
            );
            fs::remove_file(&path).map_err(WalError::io(&path))?;
            sync_dir(dir).map_err(WalError::io(dir))?;
        }
        if let Some(torn) = torn_tail
            && let Some(seg) = segments.last_mut()
        {
            tracing::warn!(
                path = %seg.path.display(),
                offset = torn.at,
                dropped_bytes = seg.len - torn.at,
                reason = %torn.reason,
                "truncating torn tail of WAL segment left by a crash"
            );
            seg.file.set_len(torn.at).map_err(WalError::io(&seg.path))?;
            seg.file.sync_all().map_err(WalError::io(&seg.path))?;
            seg.len = torn.at;
        }

        tracing::debug!(
            dir = %dir.display(),
            segments = segments.len(),
            first = ?segments.first().map(|s| s.first_index),
            next = ?segments.last().map(Segment::next_index),
            "opened WAL"
        );
        Ok(Log {
            dir: dir.to_path_buf(),
            opts,
            segments,
            dirty: false,
            poisoned: false,
        })
    }

    /// Appends one entry. `index` must be `last_index + 1` (or, for an empty log, the index the
    /// log expects: see [`Log::next_index`]; a brand-new log accepts any index below
    /// `u64::MAX`). Fsyncs if the policy is [`FsyncPolicy::Always`].
    pub fn append(&mut self, index: u64, payload: &[u8]) -> Result<(), WalError> {
        self.append_batch(std::iter::once((index, payload)))
    }

    /// Appends consecutive entries with one write and at most one fsync (plus, if the active
    /// segment is full, a roll before the batch). Indexes are all checked before anything is
    /// written: on [`WalError::OutOfOrder`] nothing is appended. An empty batch does nothing.
    pub fn append_batch<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (u64, &'a [u8])>,
    ) -> Result<(), WalError> {
        self.check_poisoned()?;
        if let Some(source) = injected_error("wal::append") {
            return Err(WalError::Io {
                path: self.dir.clone(),
                source,
            });
        }
        let mut expected = self.next_index();
        let mut first = None;
        let mut buf = Vec::new();
        let mut rel_offsets = Vec::new();
        for (index, payload) in entries {
            if let Some(e) = expected
                && index != e
            {
                return Err(WalError::OutOfOrder {
                    expected: e,
                    got: index,
                });
            }
            if index == u64::MAX {
                return Err(WalError::InvalidIndex {
                    index,
                    detail: "u64::MAX is reserved so that the next index always exists",
                });
            }
            if payload.len() as u64 > MAX_PAYLOAD_LEN {
                return Err(WalError::EntryTooLarge {
                    index,
                    len: payload.len() as u64,
                    max: MAX_PAYLOAD_LEN,
                });
            }
            first.get_or_insert(index);
            rel_offsets.push(buf.len() as u64);
            encode_entry(&mut buf, index, payload);
            expected = Some(index + 1);
        }
        let Some(first) = first else {
            return Ok(());
        };

        match self.segments.last() {
            None => self.create_segment(first)?,
            Some(active) if !active.offsets.is_empty() && active.len >= self.opts.segment_size => {
                self.roll(first)?
            }
            Some(_) => {}
        }
        let fsync = self.opts.fsync;
        let Some(active) = self.segments.last_mut() else {
            unreachable!("a segment was just ensured");
        };
        let base = active.len;
        let mut res = write_all_at(&active.file, &buf, base);
        if res.is_ok() {
            active.offsets.extend(rel_offsets.iter().map(|o| base + o));
            active.len = base + buf.len() as u64;
            if fsync == FsyncPolicy::Always {
                res = active.file.sync_data();
            }
        }
        if let Err(source) = res {
            let path = active.path.clone();
            self.poisoned = true;
            return Err(WalError::Io { path, source });
        }
        if fsync == FsyncPolicy::Never {
            self.dirty = true;
        }
        Ok(())
    }

    /// Fsyncs (`sync_data`) the active segment if it has unsynced appends.
    pub fn sync(&mut self) -> Result<(), WalError> {
        self.check_poisoned()?;
        self.sync_active()
    }

    /// What a caller that group-commits needs to make everything appended so far
    /// durable without holding the log: the index of the last entry and a handle to
    /// the active segment, whose `sync_data` then covers every entry up to that index
    /// (older segments were fsynced when the log rolled past them). `None` for a log
    /// with no entries.
    pub fn sync_point(&self) -> Result<Option<(u64, File)>, WalError> {
        self.check_poisoned()?;
        let Some(active) = self.segments.last() else {
            return Ok(None);
        };
        let Some(last) = self.last_index() else {
            return Ok(None);
        };
        let file = active.file.try_clone().map_err(|source| WalError::Io {
            path: active.path.clone(),
            source,
        })?;
        Ok(Some((last, file)))
    }

    /// Index of the first entry, or `None` if the log holds no entries.
    pub fn first_index(&self) -> Option<u64> {
        let first = self.segments.first()?.first_index;
        (self.next_index()? > first).then_some(first)
    }

    /// Index of the last entry, or `None` if the log holds no entries.
    pub fn last_index(&self) -> Option<u64> {
        let next = self.next_index()?;
        let first = self.segments.first()?.first_index;
        (next > first).then(|| next - 1)
    }

    /// The only index the next append accepts (`last_index + 1`, or the start index of an empty
    /// log after [`Log::reset`] / [`Log::truncate_suffix`]); `None` for a brand-new log, which
    /// accepts any index.
    pub fn next_index(&self) -> Option<u64> {
        self.segments.last().map(Segment::next_index)
    }

    /// True if the log holds no entries.
    pub fn is_empty(&self) -> bool {
        self.first_index().is_none()
    }

    /// Reads the payload of entry `index`; `None` if it is not in the log (never written,
    /// truncated or garbage-collected). The entry checksum is verified.
    pub fn read(&self, index: u64) -> Result<Option<Vec<u8>>, WalError> {
        let Some((si, ei)) = self.locate(index) else {
            return Ok(None);
        };
        let seg = &self.segments[si];
        let start = seg.offsets[ei];
        let end = seg.entry_end(ei);
        let mut buf = vec![0u8; to_usize(end - start)];
        read_exact_at(&seg.file, &mut buf, start).map_err(WalError::io(&seg.path))?;
        let mut out = Vec::with_capacity(1);
        decode_block(seg, start, index, &buf, &mut out)?;
        Ok(out.pop().map(|(_, p)| p))
    }

    /// Reads the entries with indexes in `start..end_exclusive` that are in the log, in order
    /// (the range is clipped to `first_index..=last_index`; an empty result if nothing
    /// overlaps). One positional read per segment touched; checksums are verified.
    pub fn read_range(
        &self,
        start: u64,
        end_exclusive: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, WalError> {
        let (Some(first), Some(next)) = (self.first_index(), self.next_index()) else {
            return Ok(Vec::new());
        };
        let lo = start.max(first);
        let hi = end_exclusive.min(next);
        if lo >= hi {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(to_usize(hi - lo));
        let mut si = self.segments.partition_point(|s| s.first_index <= lo) - 1;
        let mut idx = lo;
        while idx < hi {
            let seg = &self.segments[si];
            let a = to_usize(idx - seg.first_index);
            let b = to_usize(hi.min(seg.next_index()) - seg.first_index);
            if a < b {
                let from = seg.offsets[a];
                let to = seg.entry_end(b - 1);
                let mut buf = vec![0u8; to_usize(to - from)];
                read_exact_at(&seg.file, &mut buf, from).map_err(WalError::io(&seg.path))?;
                decode_block(seg, from, idx, &buf, &mut out)?;
                idx = seg.first_index + b as u64;
            }
            si += 1;
        }
        Ok(out)
    }

    /// Removes every entry with index `>= from` (Raft conflict resolution) and makes that
    /// durable before returning. Afterwards the next append must be `from`, or, if `from` is at
    /// or below the first entry, the log is empty and the next append must be the old first
    /// index. A no-op if `from > last_index`.
    pub fn truncate_suffix(&mut self, from: u64) -> Result<(), WalError> {
        self.check_poisoned()?;
        let Some(next) = self.next_index() else {
            return Ok(());
        };
        if from >= next {
            return Ok(());
        }
        // Whole segments first, newest first, so a crash at any point leaves a contiguous log.
        let mut removed = false;
        while self.segments.len() > 1 && self.segments.last().is_some_and(|s| s.first_index >= from)
        {
            let Some(seg) = self.segments.last() else {
                break;
            };
            fs::remove_file(&seg.path).map_err(WalError::io(&seg.path))?;
            tracing::debug!(path = %seg.path.display(), "truncate_suffix removed WAL segment");
            self.segments.pop();
            // The segment that was dirty (if any) is gone; the new last one was synced on roll.
            self.dirty = false;
            removed = true;
        }
        let Some(seg) = self.segments.last_mut() else {
            unreachable!("truncate_suffix keeps at least one segment");
        };
        let keep = to_usize(from.saturating_sub(seg.first_index)).min(seg.offsets.len());
        if keep < seg.offsets.len() {
            let new_len = seg.offsets[keep];
            let res = seg.file.set_len(new_len).and_then(|()| seg.file.sync_all());
            if let Err(source) = res {
                let path = seg.path.clone();
                self.poisoned = true;
                return Err(WalError::Io { path, source });
            }
            seg.offsets.truncate(keep);
            seg.len = new_len;
            self.dirty = false;
        }
        if removed && let Err(source) = sync_dir(&self.dir) {
            self.poisoned = true;
            return Err(WalError::Io {
                path: self.dir.clone(),
                source,
            });
        }
        Ok(())
    }

    /// Deletes whole segments all of whose entries have indexes `< retain_from`, oldest first,
    /// never the active (last) segment. Returns how many segments were deleted. Entries
    /// `>= retain_from` are always kept; some below it usually remain too.
    pub fn gc(&mut self, retain_from: u64) -> Result<usize, WalError> {
        self.check_poisoned()?;
        let mut deleted = 0;
        while self.segments.len() > 1 && self.segments[1].first_index <= retain_from {
            let seg = &self.segments[0];
            fs::remove_file(&seg.path).map_err(WalError::io(&seg.path))?;
            tracing::debug!(path = %seg.path.display(), retain_from, "gc removed WAL segment");
            self.segments.remove(0);
            deleted += 1;
        }
        if deleted > 0 {
            // Not poisoning on failure: memory matches the directory, only durability of the
            // removals is unknown, and a resurrected old segment is still a valid prefix.
            sync_dir(&self.dir).map_err(WalError::io(&self.dir))?;
        }
        Ok(deleted)
    }

    /// Drops every entry and segment; afterwards the log is empty and the next append must be
    /// `next_index` (any value below `u64::MAX`, including one below the current first index).
    /// Used when a snapshot replaces the log. Durable before returning.
    ///
    /// Not atomic across a crash: a crash midway leaves either a contiguous prefix of the old
    /// log, nothing (a brand-new log), or the new empty log.
    pub fn reset(&mut self, next_index: u64) -> Result<(), WalError> {
        self.check_poisoned()?;
        if next_index == u64::MAX {
            return Err(WalError::InvalidIndex {
                index: next_index,
                detail: "u64::MAX is reserved so that the next index always exists",
            });
        }
        while let Some(seg) = self.segments.last() {
            fs::remove_file(&seg.path).map_err(WalError::io(&seg.path))?;
            self.segments.pop();
        }
        self.dirty = false;
        tracing::debug!(dir = %self.dir.display(), next_index, "WAL reset");
        self.create_segment(next_index)
    }

    /// Total bytes of all segment files on disk.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.opts
    }

    fn check_poisoned(&self) -> Result<(), WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned {
                dir: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Finds (segment, entry-within-segment) of `index`.
    fn locate(&self, index: u64) -> Option<(usize, usize)> {
        let first = self.segments.first()?.first_index;
        if index < first || index >= self.next_index()? {
            return None;
        }
        let si = self.segments.partition_point(|s| s.first_index <= index) - 1;
        Some((si, to_usize(index - self.segments[si].first_index)))
    }

    fn sync_active(&mut self) -> Result<(), WalError> {
        if !self.dirty {
            return Ok(());
        }
        if let Some(source) = injected_error("wal::fsync") {
            self.poisoned = true;
            return Err(WalError::Io {
                path: self.dir.clone(),
                source,
            });
        }
        if let Some(active) = self.segments.last()
            && let Err(source) = active.file.sync_data()
        {
            let path = active.path.clone();
            self.poisoned = true;
            return Err(WalError::Io { path, source });
        }
        self.dirty = false;
        Ok(())
    }

    /// Syncs the active segment and starts a new one at `first_index`.
    fn roll(&mut self, first_index: u64) -> Result<(), WalError> {
        self.sync_active()?;
        tracing::debug!(dir = %self.dir.display(), first_index, "rolling WAL segment");
        self.create_segment(first_index)
    }

    /// Creates a header-only segment starting at `first_index`, fsyncs it and the directory,
    /// and makes it the active segment.
    fn create_segment(&mut self, first_index: u64) -> Result<(), WalError> {
        let path = self.dir.join(segment_file_name(first_index));
        let res = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|file| {
                write_all_at(&file, &encode_header(first_index), 0)?;
                file.sync_all()?;
                Ok(file)
            });
        let file = match res {
            Ok(f) => f,
            Err(source) => {
                self.poisoned = true;
                return Err(WalError::Io { path, source });
            }
        };
        if let Err(source) = sync_dir(&self.dir) {
            self.poisoned = true;
            return Err(WalError::Io {
                path: self.dir.clone(),
                source,
            });
        }
        self.segments.push(Segment {
            first_index,
            path,
            file,
            offsets: Vec::new(),
            len: SEGMENT_HEADER_LEN,
        });
        self.dirty = false;
        Ok(())
    }
}

/// Converts an in-file length or count to `usize` (lossless on 64-bit targets).
fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Decodes the consecutive entries in `buf` (read from `seg` at byte `base`), expecting the
/// first to have index `first_index`, verifying lengths, indexes and checksums.
fn decode_block(
    seg: &Segment,
    base: u64,
    first_index: u64,
    buf: &[u8],
    out: &mut Vec<(u64, Vec<u8>)>,
) -> Result<(), WalError> {
    let mut pos = 0usize;
    let mut expected = first_index;
    let changed = "the segment changed on disk after the log was opened \
                   (disk or filesystem corruption, or another process writing to it)";
    while pos < buf.len() {
        let at = base + pos as u64;
        let Some(hdr) = buf
            .get(pos..pos + ENTRY_HEADER_LEN as usize)
            .and_then(|s| <&[u8; ENTRY_HEADER_LEN as usize]>::try_from(s).ok())
        else {
            return Err(WalError::corruption(
                &seg.path,
                at,
                format!("entry {expected} is cut short on read; {changed}"),
            ));
        };
        let h = EntryHeader::decode(hdr);
        let payload_start = pos + ENTRY_HEADER_LEN as usize;
        let Some(payload) = buf.get(payload_start..payload_start + h.len as usize) else {
            return Err(WalError::corruption(
                &seg.path,
                at,
                format!(
                    "entry {expected} has a length field of {} that does not match its recorded \
                     extent; {changed}",
                    h.len
                ),
            ));
        };
        if h.index != expected {
            return Err(WalError::corruption(
                &seg.path,
                at,
                format!(
                    "expected entry {expected} but found index {}; {changed}",
                    h.index
                ),
            ));
        }
        let computed = entry_crc(h.len, h.index, payload);
        if computed != h.crc {
            return Err(WalError::corruption(
                &seg.path,
                at,
                format!(
                    "entry {expected} failed its checksum on read (stored {:#010x}, computed \
                     {computed:#010x}); {changed}",
                    h.crc
                ),
            ));
        }
        out.push((h.index, payload.to_vec()));
        pos = payload_start + h.len as usize;
        expected += 1;
    }
    Ok(())
}

/// Reads and verifies one segment file during recovery, applying the torn-tail rule if it is
/// the last segment. Changes nothing on disk.
fn scan_segment(path: &Path, name_index: u64, is_last: bool) -> Result<Scanned, WalError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(WalError::io(path))?;
    let file_len = file.metadata().map_err(WalError::io(path))?.len();
    if file_len < SEGMENT_HEADER_LEN {
        if is_last {
            return Ok(Scanned::IncompleteRoll {
                path: path.to_path_buf(),
                len: file_len,
            });
        }
        return Err(WalError::corruption(
            path,
            0,
            format!(
                "segment is {file_len} bytes, shorter than its {SEGMENT_HEADER_LEN}-byte header, \
                 and it is not the last segment"
            ),
        ));
    }

    let mut reader = BufReader::with_capacity(256 * 1024, &file);
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    reader.read_exact(&mut header).map_err(WalError::io(path))?;
    let first_index = match decode_header(&header) {
        Ok(first) => first,
        Err(e) => {
            if is_last && all_zero(&file, 0, file_len).map_err(WalError::io(path))? {
                return Ok(Scanned::IncompleteRoll {
                    path: path.to_path_buf(),
                    len: file_len,
                });
            }
            return Err(match e {
                HeaderError::BadMagic => WalError::corruption(
                    path,
                    0,
                    "segment header has the wrong magic bytes (not a Cairn WAL segment, or \
                     overwritten)",
                ),
                HeaderError::BadChecksum { stored, computed } => WalError::corruption(
                    path,
                    0,
                    format!(
                        "segment header failed its checksum (stored {stored:#010x}, computed \
                         {computed:#010x})"
                    ),
                ),
                HeaderError::UnsupportedVersion(found) => WalError::UnsupportedVersion {
                    path: path.to_path_buf(),
                    found,
                    supported: FORMAT_VERSION,
                },
            });
        }
    };
    if first_index != name_index {
        return Err(WalError::corruption(
            path,
            12,
            format!(
                "segment header says the first index is {first_index} but the file name says \
                 {name_index}"
            ),
        ));
    }
    if first_index == u64::MAX {
        return Err(WalError::corruption(
            path,
            12,
            "segment header has first index u64::MAX, which is reserved",
        ));
    }

    let mut offsets = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN;
    let mut payload = Vec::new();
    let mut bad = None;
    while pos < file_len {
        let remaining = file_len - pos;
        if remaining < ENTRY_HEADER_LEN {
            bad = Some(BadEntry::Incomplete(format!(
                "only {remaining} bytes left, less than a {ENTRY_HEADER_LEN}-byte entry header"
            )));
            break;
        }
        let mut eh = [0u8; ENTRY_HEADER_LEN as usize];
        reader.read_exact(&mut eh).map_err(WalError::io(path))?;
        let h = EntryHeader::decode(&eh);
        let end = pos + h.total_len();
        if end > file_len {
            let expected = first_index + offsets.len() as u64;
            if let Some(evidence) = damaged_length_evidence(&file, pos, &h, expected, file_len)
                .map_err(WalError::io(path))?
            {
                return Err(WalError::corruption(
                    path,
                    pos,
                    format!(
                        "entry {expected} claims a {}-byte payload, past the end of the file, but \
                         {evidence}: its length field is damaged, so this is not a torn write",
                        h.len
                    ),
                ));
            }
            bad = Some(BadEntry::Incomplete(format!(
                "entry claims a {}-byte payload but the file ends {} bytes after its header",
                h.len,
                remaining - ENTRY_HEADER_LEN
            )));
            break;
        }
        payload.resize(h.len as usize, 0);
        reader
            .read_exact(&mut payload)
            .map_err(WalError::io(path))?;
        let computed = entry_crc(h.len, h.index, &payload);
        if computed != h.crc {
            bad = Some(BadEntry::Checksum {
                end,
                detail: format!(
                    "entry failed its checksum (stored {:#010x}, computed {computed:#010x})",
                    h.crc
                ),
            });
            break;
        }
        let expected = first_index + offsets.len() as u64;
        if h.index != expected || h.index == u64::MAX {
            return Err(WalError::corruption(
                path,
                pos,
                format!(
                    "entry has a valid checksum but index {}, where index {expected} was expected",
                    h.index
                ),
            ));
        }
        offsets.push(pos);
        pos = end;
    }

    let torn = match bad {
        None => None,
        Some(bad) => {
            let (is_torn, reason) = match bad {
                BadEntry::Incomplete(reason) => (true, reason),
                BadEntry::Checksum { end, detail } => {
                    // Nothing but zeros (or nothing at all) after the bad entry: it is the
                    // last thing that was being written. Zeros can never form a valid entry.
                    let torn = all_zero(&file, end, file_len).map_err(WalError::io(path))?;
                    let detail = if torn {
                        detail
                    } else {
                        format!(
                            "{detail}, and {} more bytes (not all zero) follow it, so this is not \
                             a torn write",
                            file_len - end
                        )
                    };
                    (torn, detail)
                }
            };
            if !is_last {
                return Err(WalError::corruption(
                    path,
                    pos,
                    format!(
                        "{reason} (entry {}); only the last segment may have a torn tail",
                        first_index + offsets.len() as u64
                    ),
                ));
            }
            if !is_torn {
                return Err(WalError::corruption(path, pos, reason));
            }
            Some(Torn { at: pos, reason })
        }
    };

    Ok(Scanned::Segment {
        seg: Segment {
            first_index,
            path: path.to_path_buf(),
            file,
            offsets,
            len: file_len,
        },
        torn,
    })
}

/// For an entry at `pos` whose length field points past the end of the file (`file_len`):
/// looks at the bytes after its header for proof that the entry was written completely and its
/// length field was damaged afterwards, which a torn write can never produce. Returns a
/// description of the proof, or `None` if the bytes are consistent with a partially written
/// entry (a prefix of its payload). `expected` is the index the entry should have.
///
/// Two proofs are looked for (both also catch a length that was damaged together with other
/// header bytes, as long as the evidence checked is intact):
///
/// * the entry's stored checksum validates when its length is taken to be exactly the bytes
///   left in the file: a complete final entry with a damaged length field;
/// * a complete, checksum-valid entry with index `expected + 1` starts somewhere after the
///   header: the entries after it are intact, so this one cannot be the torn last write (the
///   next entry is only ever written after this one's payload).
///
/// A genuine torn tail is misjudged only if its partial payload happens to pass one of these
/// checks (a 2^-32 chance for the first; for the second, the payload must itself embed a valid
/// encoded entry for the next index), and then `open` fails safe with a corruption error
/// instead of dropping data.
fn damaged_length_evidence(
    file: &File,
    pos: u64,
    h: &EntryHeader,
    expected: u64,
    file_len: u64,
) -> std::io::Result<Option<String>> {
    let start = pos + ENTRY_HEADER_LEN;
    let mut rest = vec![0u8; to_usize(file_len - start)];
    read_exact_at(file, &mut rest, start)?;

    if let Ok(len) = u32::try_from(rest.len())
        && entry_crc(len, h.index, &rest) == h.crc
    {
        return Ok(Some(format!(
            "its checksum matches the {len}-byte payload that is actually there"
        )));
    }

    let hdr = ENTRY_HEADER_LEN as usize;
    let next = expected.wrapping_add(1).to_le_bytes();
    for q in 0..rest.len().saturating_sub(hdr - 1) {
        if rest[q + 8..q + hdr] != next {
            continue;
        }
        let Ok(eh) = <&[u8; ENTRY_HEADER_LEN as usize]>::try_from(&rest[q..q + hdr]) else {
            continue;
        };
        let n = EntryHeader::decode(eh);
        let Some(payload) = rest.get(q + hdr..q + hdr + n.len as usize) else {
            continue;
        };
        if entry_crc(n.len, n.index, payload) == n.crc {
            return Ok(Some(format!(
                "a complete, checksum-valid entry {} starts at byte offset {} inside that \
                 claimed payload",
                n.index,
                start + q as u64
            )));
        }
    }
    Ok(None)
}

/// Makes everything written to `segment` durable (`sync_data`): the fsync of a caller
/// that group-commits, on the active segment [`Log::sync_point`] handed out. It goes
/// through the `wal::fsync` failpoint like the log's own fsyncs, so a slow or failing
/// disk injected there slows or fails group commits too.
pub fn sync_segment(segment: &File) -> std::io::Result<()> {
    if let Some(e) = injected_error("wal::fsync") {
        return Err(e);
    }
    segment.sync_data()
}

/// An I/O error injected by failpoint `name` (`return(ENOSPC)`, `return(EIO)`; the
/// `sleep(ms)` and `delay(ms)` actions make the call slow instead). Without failpoints
/// compiled in, never.
fn injected_error(name: &str) -> Option<std::io::Error> {
    // ENOSPC ("No space left on device") is 28 on Linux, EIO ("Input/output error") 5.
    let errno = |arg: Option<String>| -> Option<std::io::Error> {
        Some(std::io::Error::from_raw_os_error(
            match arg.as_deref().map(str::trim) {
                Some("ENOSPC") => 28,
                _ => 5,
            },
        ))
    };
    // Without failpoints compiled in, the macros below expand to nothing.
    let _ = &errno;
    match name {
        "wal::append" => {
            fail::fail_point!("wal::append", errno);
        }
        _ => {
            fail::fail_point!("wal::fsync", errno);
        }
    }
    None
}
