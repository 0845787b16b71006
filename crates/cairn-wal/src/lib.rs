//! `cairn-wal`: the segmented, checksummed write-ahead log of one Cairn tablet.
//!
//! # Job
//!
//! Every operation a tablet accepts is appended here (and, with [`FsyncPolicy::Always`],
//! fsynced) *before* it is acknowledged, so a crash loses nothing that was acknowledged: on
//! restart the tablet replays the log from the last flushed point. The log is deliberately
//! shaped like Raft log storage, which is what it will become (openraft): every entry has a
//! `u64` index, the log can start at any index, indexes are strictly contiguous, the tail can be
//! cut off ([`Log::truncate_suffix`], Raft conflict resolution), old whole segments can be
//! garbage-collected ([`Log::gc`], log compaction after a flush or snapshot), and the whole log
//! can be replaced by an empty one starting at a chosen index ([`Log::reset`], snapshot install).
//!
//! A [`Log`] is a plain single-writer value (`Send + Sync`); callers that share it wrap it in
//! a mutex. Reads take `&self` and use positional reads, so they never move a shared cursor.
//!
//! # On-disk format
//!
//! A log is a directory of segment files named `wal-{first_index:020}.log` (zero-padded, so
//! lexical order is index order). Only the last segment is ever written to (the *active*
//! segment). All integers are little-endian.
//!
//! ```text
//! segment = header entry*
//! header  = magic "CAIRNWAL" (8) | version u32 (=2) | first_index u64 | crc32c u32
//!           (the crc covers the 20 bytes before it; 24 bytes in all)
//! entry   = len u32 | crc32c u32 | index u64 | payload [len bytes]
//!           (the crc covers len bytes ++ index bytes ++ payload; 16-byte entry header)
//! ```
//!
//! Version 2 ([`FORMAT_VERSION`]) differs from version 1 only in that the entry checksum also
//! covers the length field; version 1 segments are refused with [`WalError::UnsupportedVersion`].
//!
//! The first entry of a segment has index `first_index`, and each following entry the next
//! index. A segment may hold only its header: that is how an empty log remembers the index its
//! next append must have (after [`Log::reset`], or after a crash right after a roll).
//! The active segment is rolled (the old one fsynced, a new one created and fsynced together
//! with the directory) at the start of an append when it already holds at least
//! [`LogOptions::segment_size`] bytes; a batch is never split across segments, so a segment
//! exceeds `segment_size` by at most one batch. The log keeps the byte offset of every entry in
//! memory, so a read is one positional read; reads re-verify the entry checksum.
//!
//! # Recovery: torn tail versus corruption
//!
//! [`Log::open`] reads and verifies every segment. A crash can only damage the end of the
//! **last** segment (older segments are fsynced before a roll), so:
//!
//! * **Torn tail** (repaired): in the last segment, an entry that is incomplete (its header
//!   runs past end of file, or its length field points past end of file and the bytes after
//!   its header are *plausibly* a partially written payload, see below), or whose checksum
//!   fails while it ends exactly at end of file or is followed only by zero bytes (a filesystem
//!   can expose zero-filled blocks after a crash, and zeros can never form a valid entry, since
//!   an all-zero entry fails its checksum). The file is truncated at the start of that entry,
//!   fsynced, and a `tracing` warning is logged.
//!   A last segment that is shorter than a header or entirely zero bytes is a roll interrupted
//!   by a crash and is removed (with a warning).
//! * **Corruption** (refused): a bad entry followed by further non-zero bytes, a length field
//!   pointing past end of file that is *not* plausibly torn (below), a bad entry in
//!   any segment but the last, a bad segment header, an entry with a valid checksum but an
//!   unexpected index, a header whose first index disagrees with its file name, or indexes not
//!   contiguous from one segment to the next (a missing or overlapping segment). `open` returns
//!   [`WalError::Corruption`] naming the file and byte offset and changes nothing on disk: the
//!   log never silently drops data that may have been acknowledged.
//!
//! **A length past end of file.** A damaged length field that points past end of file would
//! look like a torn write, and truncating there would drop the (acknowledged) entries after
//! it. Every `u32` length is within [`MAX_PAYLOAD_LEN`], so the length alone proves nothing;
//! the bytes after the entry header are checked instead. A torn write leaves only a prefix of
//! the entry's payload there, so the entry counts as torn *unless* those bytes prove that it
//! was written completely:
//!
//! * its checksum (which covers the length) validates when its length is taken to be exactly
//!   the bytes left in the file, i.e. a complete final entry whose length field was damaged; or
//! * a complete, checksum-valid entry with the next index starts anywhere after the header,
//!   i.e. later entries are intact, which cannot happen when this entry was the one being
//!   written (the next entry is only written after this entry's payload).
//!
//! Either proof makes `open` return [`WalError::Corruption`]. A genuine torn tail is
//! misclassified only if its partial payload happens to pass one of these checks (a 2^-32
//! chance, or a payload that embeds an encoded entry for the next index), and then `open`
//! fails safe rather than dropping data. Conversely, damage that also destroys the evidence
//! (e.g. a damaged length in the final entry together with its checksum, or together with the
//! entry that follows it) still looks like a torn tail and is truncated.
//!
//! # Failure model
//!
//! If a write, fsync, truncation or file creation fails midway, the handle no longer knows what
//! is on disk and all further mutations return [`WalError::Poisoned`]; drop the [`Log`] and open
//! it again, and recovery sorts out the tail.

#![warn(missing_docs)]

mod error;
mod format;
mod io_util;
mod log;

pub use error::WalError;
pub use format::{
    ENTRY_HEADER_LEN, FORMAT_VERSION, MAX_PAYLOAD_LEN, SEGMENT_HEADER_LEN, SEGMENT_MAGIC,
    segment_file_name,
};
pub use log::{FsyncPolicy, Log, LogOptions, sync_segment};
