//! The shuffle: buffered tuples, sorted runs spilled to disk, and their merge.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{ReadOnlyError, Result};

/// Bytes in one arena. Tuples go into fixed-size arenas (a tuple larger than this gets
/// an arena of its own), so a buffer never reallocates and copies what it already
/// holds, and the arenas a spill frees are reused through an [`ArenaPool`] instead of
/// being faulted in (and zeroed by the kernel) again.
pub(super) const ARENA_BYTES: usize = 64 << 10;

/// One buffered tuple: where its key and value sit in the buffer's arenas.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) chunk: u32,
    pub(super) prefix: u64,
    arena: u32,
    off: u32,
    key_len: u32,
    value_len: u32,
}

/// Tuples of one batch or of one shard: arenas of key and value bytes and the entries
/// pointing into them. A shard takes over each batch's arenas whole
/// ([`TupleBuf::append`]) instead of copying them.
#[derive(Debug, Default)]
pub(super) struct TupleBuf {
    arenas: Vec<Vec<u8>>,
    /// Capacity of `arenas`: the memory the buffer holds, which the budget counts.
    arena_bytes: usize,
    pub(super) entries: Vec<Entry>,
}

impl TupleBuf {
    /// An empty buffer with room for `entries` tuples.
    pub(super) fn with_capacity(entries: usize) -> TupleBuf {
        TupleBuf {
            entries: Vec::with_capacity(entries),
            ..TupleBuf::default()
        }
    }

    /// Appends a tuple, taking a new arena from `pool` when the last one is full.
    pub(super) fn push(
        &mut self,
        pool: &ArenaPool,
        chunk: u32,
        prefix: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let len = key.len() + value.len();
        let room = self
            .arenas
            .last()
            .is_some_and(|a| a.capacity() - a.len() >= len);
        if !room {
            let a = pool.take(len);
            self.arena_bytes += a.capacity();
            self.arenas.push(a);
        }
        let arena = self.arenas.len() - 1;
        let a = &mut self.arenas[arena];
        let too_big = || ReadOnlyError::InvalidInput(format!("a {len}-byte tuple is too large"));
        let off = u32::try_from(a.len()).map_err(|_| too_big())?;
        let key_len = u32::try_from(key.len()).map_err(|_| too_big())?;
        let value_len = u32::try_from(value.len()).map_err(|_| too_big())?;
        a.extend_from_slice(key);
        a.extend_from_slice(value);
        self.entries.push(Entry {
            chunk,
            prefix,
            arena: arena as u32,
            off,
            key_len,
            value_len,
        });
        Ok(())
    }

    pub(super) fn key(&self, e: &Entry) -> &[u8] {
        let start = e.off as usize;
        &self.arenas[e.arena as usize][start..start + e.key_len as usize]
    }

    pub(super) fn value(&self, e: &Entry) -> &[u8] {
        let start = e.off as usize + e.key_len as usize;
        &self.arenas[e.arena as usize][start..start + e.value_len as usize]
    }

    /// The memory the buffer holds: its arenas' capacity and its entries.
    pub(super) fn bytes(&self) -> usize {
        self.arena_bytes + self.entries.len() * std::mem::size_of::<Entry>()
    }

    /// Takes over `other`'s tuples (and its arenas, without copying them).
    pub(super) fn append(&mut self, other: TupleBuf) {
        let base = self.arenas.len() as u32;
        self.entries.extend(other.entries.iter().map(|e| Entry {
            arena: e.arena + base,
            ..*e
        }));
        self.arenas.extend(other.arenas);
        self.arena_bytes += other.arena_bytes;
    }

    /// Sorts the entries by (chunk, prefix, key).
    pub(super) fn sort(&mut self) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_unstable_by(|a, b| {
            (a.chunk, a.prefix)
                .cmp(&(b.chunk, b.prefix))
                .then_with(|| self.key(a).cmp(self.key(b)))
        });
        self.entries = entries;
    }

    /// Empties the buffer, keeping its first arena for the next tuples (a group
    /// buffer is cleared once per group).
    pub(super) fn clear(&mut self) {
        self.arenas.truncate(1);
        self.arena_bytes = self.arenas.first().map_or(0, |a| a.capacity());
        if let Some(a) = self.arenas.first_mut() {
            a.clear();
        }
        self.entries.clear();
    }
}

/// Arenas freed by spilled runs, for the next batches to fill.
#[derive(Debug, Default)]
pub(super) struct ArenaPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl ArenaPool {
    /// An empty arena with room for at least `len` bytes.
    fn take(&self, len: usize) -> Vec<u8> {
        if len <= ARENA_BYTES
            && let Some(a) = self.free.lock().ok().and_then(|mut f| f.pop())
        {
            return a;
        }
        Vec::with_capacity(len.max(ARENA_BYTES))
    }

    /// Keeps `buf`'s standard-size arenas for reuse; larger ones are freed.
    pub(super) fn give(&self, buf: TupleBuf) {
        let mut arenas: Vec<Vec<u8>> = buf
            .arenas
            .into_iter()
            .filter(|a| a.capacity() == ARENA_BYTES)
            .collect();
        arenas.iter_mut().for_each(Vec::clear);
        if let Ok(mut f) = self.free.lock() {
            f.append(&mut arenas);
        }
    }

    /// Frees every pooled arena (the map phase is over).
    pub(super) fn drain(&self) {
        if let Ok(mut f) = self.free.lock() {
            *f = Vec::new();
        }
    }
}

/// One shard of the shuffle: buffered tuples and the runs already spilled.
#[derive(Debug, Default)]
pub(super) struct Sorter {
    /// The shard's number, which names its run files.
    pub(super) shard: usize,
    pub(super) buf: TupleBuf,
    /// Runs written in full.
    pub(super) runs: Vec<PathBuf>,
    /// Run numbers handed out by [`Sorter::take_run`], written or not.
    pub(super) next_run: usize,
}

impl Sorter {
    /// Takes the buffered tuples out, with the path their run will have, so that the
    /// caller can sort and write them ([`write_run`]) without holding the shard's lock
    /// and then record the path in `runs`.
    pub(super) fn take_run(&mut self, dir: &Path) -> (TupleBuf, PathBuf) {
        let path = dir.join(format!("shard-{}-run-{}", self.shard, self.next_run));
        self.next_run += 1;
        let capacity = self.buf.entries.len();
        (
            std::mem::replace(&mut self.buf, TupleBuf::with_capacity(capacity)),
            path,
        )
    }
}

/// Sorts `buf` and writes it as a run at `path`. Returns the bytes written.
pub(super) fn write_run(buf: &mut TupleBuf, path: &Path) -> Result<u64> {
    buf.sort();
    let file = File::create(path)
        .map_err(|e| ReadOnlyError::io(format!("cannot create spill file {path:?}"), e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut written = 0u64;
    let err = |e| ReadOnlyError::io(format!("cannot write spill file {path:?}"), e);
    for e in &buf.entries {
        let mut head = [0u8; 20];
        head[..4].copy_from_slice(&e.chunk.to_le_bytes());
        head[4..12].copy_from_slice(&e.prefix.to_le_bytes());
        head[12..16].copy_from_slice(&e.key_len.to_le_bytes());
        head[16..20].copy_from_slice(&e.value_len.to_le_bytes());
        w.write_all(&head).map_err(err)?;
        w.write_all(buf.key(e)).map_err(err)?;
        w.write_all(buf.value(e)).map_err(err)?;
        written += 20 + e.key_len as u64 + e.value_len as u64;
    }
    w.flush().map_err(err)?;
    Ok(written)
}

/// A sorted run being merged: the current tuple and the rest of the file.
pub(super) struct RunReader {
    file: BufReader<File>,
    path: PathBuf,
    chunk: u32,
    prefix: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    done: bool,
}

impl RunReader {
    fn open(path: &Path) -> Result<RunReader> {
        let f = File::open(path)
            .map_err(|e| ReadOnlyError::io(format!("cannot open spill file {path:?}"), e))?;
        let mut r = RunReader {
            file: BufReader::with_capacity(1 << 20, f),
            path: path.to_path_buf(),
            chunk: 0,
            prefix: 0,
            key: Vec::new(),
            value: Vec::new(),
            done: false,
        };
        r.advance()?;
        Ok(r)
    }

    fn advance(&mut self) -> Result<()> {
        let mut head = [0u8; 20];
        let err = |e| ReadOnlyError::io(format!("cannot read spill file {:?}", self.path), e);
        match self.file.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                self.done = true;
                return Ok(());
            }
            Err(e) => return Err(err(e)),
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        self.chunk = u32_at(0);
        let mut p = [0u8; 8];
        p.copy_from_slice(&head[4..12]);
        self.prefix = u64::from_le_bytes(p);
        self.key.resize(u32_at(12) as usize, 0);
        self.value.resize(u32_at(16) as usize, 0);
        let path = self.path.clone();
        let err = |e| ReadOnlyError::io(format!("cannot read spill file {path:?}"), e);
        self.file.read_exact(&mut self.key).map_err(err)?;
        self.file.read_exact(&mut self.value).map_err(err)?;
        Ok(())
    }
}

/// Merges sorted runs, calling `f` with every tuple in (chunk, prefix, key) order.
///
/// A linear minimum over the runs' heads: runs are few (input bytes over the memory
/// budget), so a heap would not pay for itself.
pub(super) fn merge_runs(
    paths: &[PathBuf],
    mut f: impl FnMut(u32, u64, &[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    let mut runs = paths
        .iter()
        .map(|p| RunReader::open(p))
        .collect::<Result<Vec<_>>>()?;
    loop {
        let mut best: Option<usize> = None;
        for (i, r) in runs.iter().enumerate() {
            if r.done {
                continue;
            }
            let better = best.is_none_or(|b| {
                let o = &runs[b];
                (r.chunk, r.prefix, &r.key) < (o.chunk, o.prefix, &o.key)
            });
            if better {
                best = Some(i);
            }
        }
        let Some(b) = best else { return Ok(()) };
        let r = &mut runs[b];
        f(r.chunk, r.prefix, &r.key, &r.value)?;
        r.advance()?;
    }
}
