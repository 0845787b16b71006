//! Byte layout of segment headers and entries (see the crate docs for the picture).

/// Magic bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"CAIRNWAL";

/// The on-disk format version this build writes and reads.
///
/// Version 2: the entry checksum also covers the length field. Version 1 (checksum over index
/// and payload only) is not read; such segments fail to open with
/// [`WalError::UnsupportedVersion`](crate::WalError::UnsupportedVersion).
pub const FORMAT_VERSION: u32 = 2;

/// Length of a segment header: magic (8) + version (4) + first index (8) + CRC32C (4).
pub const SEGMENT_HEADER_LEN: u64 = 24;

/// Length of an entry header: payload length (4) + CRC32C (4) + index (8).
pub const ENTRY_HEADER_LEN: u64 = 16;

/// Largest payload one entry can carry (the length field is a `u32`).
pub const MAX_PAYLOAD_LEN: u64 = u32::MAX as u64;

/// File name of the segment whose first entry has index `first_index`:
/// `wal-{first_index:020}.log`, so names sort in index order.
pub fn segment_file_name(first_index: u64) -> String {
    format!("wal-{first_index:020}.log")
}

/// Parses a file name produced by [`segment_file_name`]; `None` for anything else.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Encodes a segment header.
pub(crate) fn encode_header(first_index: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[0..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&first_index.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a segment header failed to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// The magic bytes are wrong (not a Cairn WAL segment, or overwritten).
    BadMagic,
    /// The header checksum does not match.
    BadChecksum { stored: u32, computed: u32 },
    /// Valid checksum, unknown version.
    UnsupportedVersion(u32),
}

/// Decodes a segment header, returning its first index.
pub(crate) fn decode_header(h: &[u8; SEGMENT_HEADER_LEN as usize]) -> Result<u64, HeaderError> {
    if h[0..8] != SEGMENT_MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let stored = u32::from_le_bytes([h[20], h[21], h[22], h[23]]);
    let computed = crc32c::crc32c(&h[0..20]);
    if stored != computed {
        return Err(HeaderError::BadChecksum { stored, computed });
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != FORMAT_VERSION {
        return Err(HeaderError::UnsupportedVersion(version));
    }
    let mut first = [0u8; 8];
    first.copy_from_slice(&h[12..20]);
    Ok(u64::from_le_bytes(first))
}

/// CRC32C of an entry: over the little-endian length bytes, then the little-endian index bytes,
/// then the payload. `len` is the value stored in the length field; for a well-formed entry it
/// equals `payload.len()`.
pub(crate) fn entry_crc(len: u32, index: u64, payload: &[u8]) -> u32 {
    let mut prefix = [0u8; 12];
    prefix[0..4].copy_from_slice(&len.to_le_bytes());
    prefix[4..12].copy_from_slice(&index.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&prefix), payload)
}

/// Appends one encoded entry to `buf`. The caller has checked `payload.len() <= MAX_PAYLOAD_LEN`.
pub(crate) fn encode_entry(buf: &mut Vec<u8>, index: u64, payload: &[u8]) {
    debug_assert!(payload.len() as u64 <= MAX_PAYLOAD_LEN);
    let len = payload.len() as u32;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&entry_crc(len, index, payload).to_le_bytes());
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(payload);
}

/// A decoded entry header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryHeader {
    /// Payload length in bytes.
    pub len: u32,
    /// Stored CRC32C over length bytes ++ index bytes ++ payload.
    pub crc: u32,
    /// The entry's log index.
    pub index: u64,
}

impl EntryHeader {
    /// Decodes an entry header.
    pub fn decode(b: &[u8; ENTRY_HEADER_LEN as usize]) -> EntryHeader {
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let crc = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut idx = [0u8; 8];
        idx.copy_from_slice(&b[8..16]);
        EntryHeader {
            len,
            crc,
            index: u64::from_le_bytes(idx),
        }
    }

    /// Total encoded size of the entry (header + payload).
    pub fn total_len(&self) -> u64 {
        ENTRY_HEADER_LEN + u64::from(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_checks() {
        let h = encode_header(42);
        assert_eq!(decode_header(&h), Ok(42));
        let mut bad = h;
        bad[13] ^= 1;
        assert!(matches!(
            decode_header(&bad),
            Err(HeaderError::BadChecksum { .. })
        ));
        let mut bad = h;
        bad[0] = b'X';
        assert_eq!(decode_header(&bad), Err(HeaderError::BadMagic));
    }

    #[test]
    fn file_names_round_trip() {
        for i in [0, 1, 999, u64::MAX] {
            assert_eq!(parse_segment_file_name(&segment_file_name(i)), Some(i));
        }
        assert_eq!(segment_file_name(7), "wal-00000000000000000007.log");
        assert_eq!(parse_segment_file_name("wal-7.log"), None);
        assert_eq!(
            parse_segment_file_name("wal-0000000000000000000x.log"),
            None
        );
        assert_eq!(
            parse_segment_file_name("wal-00000000000000000007.log.tmp"),
            None
        );
        // 20 digits but above u64::MAX.
        assert_eq!(
            parse_segment_file_name("wal-99999999999999999999.log"),
            None
        );
    }

    #[test]
    fn entry_round_trip() {
        let mut buf = Vec::new();
        encode_entry(&mut buf, 9, b"hello");
        assert_eq!(buf.len() as u64, ENTRY_HEADER_LEN + 5);
        let h = EntryHeader::decode(buf[..16].try_into().unwrap());
        assert_eq!((h.len, h.index), (5, 9));
        assert_eq!(h.crc, entry_crc(5, 9, b"hello"));
        // The checksum covers the index and the length field.
        assert_ne!(entry_crc(5, 9, b"hello"), entry_crc(5, 10, b"hello"));
        assert_ne!(
            entry_crc(5, 9, b"hello"),
            entry_crc(5 | 1 << 30, 9, b"hello")
        );
        // An all-zero entry header can never validate, which the zero-filled-tail rule relies on.
        assert_ne!(entry_crc(0, 0, b""), 0);
    }
}
