//! Small file-system helpers: positional reads/writes and directory fsync.

use std::fs::File;
use std::io;
use std::path::Path;

/// Reads exactly `buf.len()` bytes at `offset` without moving any shared cursor (on Unix).
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Reads exactly `buf.len()` bytes at `offset`.
#[cfg(not(unix))]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

/// Writes all of `buf` at `offset`.
#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

/// Writes all of `buf` at `offset`.
#[cfg(not(unix))]
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(buf)
}

/// Makes creations, renames and removals of directory entries in `dir` durable.
#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directory fsync is not available (nor needed in the same way) off Unix.
#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// True if the bytes of `file` in `from..to` are all zero.
pub(crate) fn all_zero(file: &File, from: u64, to: u64) -> io::Result<bool> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pos = from;
    while pos < to {
        let n = usize::try_from((to - pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let chunk = &mut buf[..n];
        read_exact_at(file, chunk, pos)?;
        if chunk.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}
