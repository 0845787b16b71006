//! The tablet metadata file: the durable record of what a tablet consists of.
//!
//! It lists the schema, every DiskRowSet with its files and their checksums, and the log
//! indexes up to which data is durable in those files (`mrs_flushed_index` for the
//! MemRowSet, `durable_index` per rowset). Opening a tablet = read this file, open the
//! files it names (verifying checksums), then replay the log from the lowest durable
//! index. The file is a CRC32C followed by JSON, replaced atomically (write a temporary
//! file, fsync, rename, fsync the directory) so a crash leaves either the old or the new
//! version, never a mix.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use cairn_common::{ColumnId, Schema};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TabletError};

/// Name of the metadata file in the tablet directory.
pub const METADATA_FILE: &str = "tablet-meta";
const FORMAT_VERSION: u32 = 1;

/// A file and its checksum.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FileMeta {
    /// File name within the rowset directory.
    pub name: String,
    /// CRC32C of the whole file.
    pub crc: u32,
    /// Size in bytes.
    pub size: u64,
}

/// A Parquet base file and the columns it holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BaseFileMeta {
    /// File name within the rowset directory.
    pub name: String,
    /// CRC32C of the whole file.
    pub crc: u32,
    /// Size in bytes.
    pub size: u64,
    /// Column ids stored, in file column order.
    pub column_ids: Vec<ColumnId>,
}

/// One DiskRowSet.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RowSetMeta {
    /// Rowset id.
    pub id: u64,
    /// Rows in the base data.
    pub num_rows: u64,
    /// Every op with a log index at or below this is reflected in the rowset's files.
    pub durable_index: u64,
    /// The timestamp of the log record at `durable_index` (records are in timestamp
    /// order): what a reopened tablet takes as the timestamp of its last applied record.
    #[serde(default)]
    pub durable_ts: u64,
    /// Base data files, oldest first.
    pub base_files: Vec<BaseFileMeta>,
    /// Key index.
    pub keys: FileMeta,
    /// REDO delta files, oldest first.
    pub redo_files: Vec<FileMeta>,
    /// UNDO delta files.
    pub undo_files: Vec<FileMeta>,
    /// Persisted predicate skip cache.
    pub skip_cache: Option<FileMeta>,
    /// Next number for a new file in this rowset's directory.
    pub next_file_seq: u64,
}

/// The stored form of a schema (defined in `cairn-common`, where the wire uses it too).
pub use cairn_common::schema::SchemaMeta;

/// The subspace layouts a [`crate::ops::LogRecord::SetSubspaces`] set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SubspacesMeta {
    /// The catalog's version of the layouts.
    pub version: u64,
    /// The record's timestamp: every change after it is chained into them.
    pub ts: u64,
    /// The layouts, as the tablet server encodes them.
    pub layouts: Vec<u8>,
}

/// Everything the metadata file records.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TabletMeta {
    /// Format version of this file.
    pub format_version: u32,
    /// Current schema.
    pub schema: SchemaMeta,
    /// Every op at or below this log index that targeted a MemRowSet is flushed.
    pub mrs_flushed_index: u64,
    /// The timestamp of the log record at `mrs_flushed_index`.
    #[serde(default)]
    pub mrs_flushed_ts: u64,
    /// Next rowset id.
    pub next_rowset_id: u64,
    /// Disk rowsets.
    pub rowsets: Vec<RowSetMeta>,
    /// Answers of applied client requests (see [`crate::results`]).
    #[serde(default)]
    pub results: Vec<crate::results::ClientAnswers>,
    /// The durable mark open transactions allow (see [`crate::txn::TxnTable`]): the
    /// log index before the oldest open transaction's first record, and a timestamp
    /// below that record's. A restart applies the log again from there.
    #[serde(default)]
    pub txn_floor: Option<(u64, u64)>,
    /// The decisions of the two-phase commits this tablet is home of, kept for
    /// [`crate::txn::DECISION_RETENTION`] (see "The status record" in [`crate::txn`]).
    #[serde(default)]
    pub txn_decisions: Vec<crate::txn::TxnDecisionRecord>,
    /// Changes applied but not yet chained into the table's subspaces (see
    /// [`crate::unchained`]).
    #[serde(default)]
    pub unchained: Vec<crate::unchained::Unchained>,
    /// The table's subspaces as the last [`crate::ops::LogRecord::SetSubspaces`] set
    /// them.
    #[serde(default)]
    pub subspaces: Option<SubspacesMeta>,
}

impl TabletMeta {
    /// Metadata of a new, empty tablet.
    pub fn new(schema: &Schema) -> Self {
        TabletMeta {
            format_version: FORMAT_VERSION,
            schema: SchemaMeta::from_schema(schema),
            mrs_flushed_index: 0,
            mrs_flushed_ts: 0,
            next_rowset_id: 1,
            rowsets: vec![],
            results: vec![],
            txn_floor: None,
            txn_decisions: vec![],
            unchained: vec![],
            subspaces: None,
        }
    }

    /// Reads and verifies the metadata of the tablet in `dir`.
    pub fn load(dir: &Path) -> Result<TabletMeta> {
        let p = dir.join(METADATA_FILE);
        let bytes = std::fs::read(&p).map_err(|e| TabletError::io(&p, e))?;
        if bytes.len() < 4 {
            return Err(TabletError::corruption(&p, "metadata file is truncated"));
        }
        let crc = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if crc32c::crc32c(&bytes[4..]) != crc {
            return Err(TabletError::corruption(&p, "metadata checksum mismatch"));
        }
        let m: TabletMeta = serde_json::from_slice(&bytes[4..])
            .map_err(|e| TabletError::corruption(&p, format!("unreadable metadata: {e}")))?;
        if m.format_version != FORMAT_VERSION {
            return Err(TabletError::corruption(
                &p,
                format!("unsupported metadata version {}", m.format_version),
            ));
        }
        Ok(m)
    }

    /// Atomically replaces the metadata file in `dir`.
    pub fn store(&self, dir: &Path) -> Result<()> {
        let body =
            serde_json::to_vec(self).map_err(|e| TabletError::InvalidRequest(e.to_string()))?;
        let mut buf = Vec::with_capacity(body.len() + 4);
        buf.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        buf.extend_from_slice(&body);
        write_atomic(dir, METADATA_FILE, &buf)
    }
}

/// Writes `name` in `dir` atomically and durably.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let dst = dir.join(name);
    let mut f = File::create(&tmp).map_err(|e| TabletError::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| TabletError::io(&tmp, e))?;
    f.sync_all().map_err(|e| TabletError::io(&tmp, e))?;
    std::fs::rename(&tmp, &dst).map_err(|e| TabletError::io(&dst, e))?;
    sync_dir(dir)
}

/// Fsyncs a directory so renames and new files in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| TabletError::io(dir, e))
}
