//! `cairn wal dump`: prints a tablet replica's Raft log, entry by entry, for an
//! operator or a developer reading a fault run's post-mortem (Kudu's `kudu wal dump`).
//!
//! It reads the files directly, without a server: point it at a replica's folder
//! (`<data>/tablets/<tablet id>`) or its `raft` folder, on a stopped server or a
//! copy. Each line is one entry: index, term, proposing leader, then the decoded
//! record (write batches one record per line, indented).

use std::path::{Path, PathBuf};

use cairn_consensus::log_store::{DumpedPayload, LogStore};
use cairn_tablet::FsyncPolicy;
use cairn_tablet::ops::{LogRecord, decode_batch};
use clap::Args;

use super::ToolResult;

/// `cairn wal dump`
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// A tablet replica's folder (`<data dir>/tablets/<tablet id>`) or its `raft`
    /// folder.
    pub dir: PathBuf,
    /// Only entries at or after this log index.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// Only records of this transaction: `txn-<16 hex digits>` as errors and logs
    /// print it, or the decimal number a dump shows in `TxnId(...)`.
    #[arg(long)]
    pub txn: Option<String>,
}

/// The `raft` folder `dir` names.
fn raft_dir(dir: &Path) -> ToolResult<PathBuf> {
    let candidates = [dir.join("raft"), dir.to_path_buf()];
    for c in candidates {
        if c.join("wal").is_dir() {
            return Ok(c);
        }
    }
    Err(format!(
        "{} holds no Raft log: give a tablet replica's folder (<data dir>/tablets/<tablet id>) \
         or its raft folder",
        dir.display()
    )
    .into())
}

/// A transaction id as `txn-<hex>` or decimal.
fn parse_txn(t: &str) -> ToolResult<u64> {
    let t = t.trim();
    let parsed = match t.strip_prefix("txn-") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse::<u64>().ok(),
    };
    parsed.ok_or_else(|| {
        format!(
            "--txn {t}: not a transaction id; give it as txn-<16 hex digits> \
             (txn-b694b6b927a6c963) or as the decimal number of TxnId(...)"
        )
        .into()
    })
}

/// The transaction a record belongs to, if any.
fn txn_of(r: &LogRecord) -> Option<u64> {
    match r {
        LogRecord::TxnWrite { txn, .. }
        | LogRecord::TxnBeginCommit { txn, .. }
        | LogRecord::TxnFinish { txn, .. } => Some(txn.0),
        _ => None,
    }
}

/// Runs `cairn wal dump`.
pub fn dump(a: DumpArgs) -> ToolResult<()> {
    let txn = a.txn.as_deref().map(parse_txn).transpose()?;
    let dir = raft_dir(&a.dir)?;
    // Opening recovers a torn tail like a restart: on a copy, never on a live server's
    // folder.
    let log = LogStore::open(&dir, FsyncPolicy::Never)?;
    for e in log.dump()? {
        if e.index < a.from {
            continue;
        }
        let head = format!("{:>8} term {:>3} leader {:016x}", e.index, e.term, e.leader);
        match e.payload {
            DumpedPayload::Blank if txn.is_none() => println!("{head} blank"),
            DumpedPayload::Membership(m) if txn.is_none() => println!("{head} membership {m}"),
            DumpedPayload::Normal(b) => {
                let records = match decode_batch(&b)? {
                    Some(rs) => rs,
                    None => vec![&b[..]],
                };
                let mut lines = Vec::new();
                for r in records {
                    match LogRecord::decode(r) {
                        Ok(rec) if txn.is_none() || txn_of(&rec) == txn => {
                            lines.push(format!("{rec:?}"))
                        }
                        Ok(_) => {}
                        Err(err) => lines.push(format!("<undecodable record: {err}>")),
                    }
                }
                match lines.as_slice() {
                    [] => {}
                    [one] => println!("{head} {one}"),
                    many => {
                        println!("{head} batch of {}", many.len());
                        for l in many {
                            println!("           {l}");
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_parse_as_printed() {
        assert_eq!(parse_txn("txn-00000000000000ff").unwrap(), 255);
        assert_eq!(parse_txn(" 255 ").unwrap(), 255);
        assert!(parse_txn("txn-zz").is_err());
        assert!(parse_txn("ff").is_err());
    }

    #[test]
    fn a_folder_without_a_log_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let e = raft_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("holds no Raft log"), "{e}");
    }
}
