//! Values of a table's hidden auto-incrementing key.
//!
//! A table created without a primary key gets one hidden key column
//! ([`cairn_common::AUTO_INCREMENTING_ID`]), as Kudu 1.17+ does for tables without a
//! unique key. Its values come from the leader master, which hands them out in blocks
//! recorded in the Raft-replicated catalog before they are answered, so no value is
//! ever given twice — not across clients, servers or master failovers. A client keeps
//! the rest of its last block per table and asks for a new one when it runs out; the
//! values a process never used are skipped, like the cached values of a PostgreSQL
//! sequence. Values therefore increase within one client, but rows written by
//! different clients interleave, and gaps are normal.

use std::ops::Range;

use cairn_proto::AllocateAutoIdsRequest;

use crate::client::Client;
use crate::error::Result;
use crate::retry::request;
use crate::table::Table;

/// How many values a client reserves at least per request to the master.
pub const AUTO_ID_BLOCK: u64 = 4096;

/// The most values one request reserves (the master's limit).
const MAX_BLOCK: u64 = 1_000_000;

impl Client {
    /// `n` unused values of `table`'s auto-incrementing key, increasing. Takes them
    /// from this client's reserved block, and reserves more from the master (at least
    /// [`AUTO_ID_BLOCK`]) when the block runs out.
    pub async fn next_auto_ids(&self, table: &Table, n: usize) -> Result<Vec<i64>> {
        let mut out = Vec::with_capacity(n);
        out.extend(self.take_cached_ids(&table.id, n));
        while out.len() < n {
            let missing = (n - out.len()) as u64;
            let ask = missing.clamp(AUTO_ID_BLOCK, MAX_BLOCK);
            let block = self.allocate_auto_ids(table, ask).await?;
            let used = missing.min(ask) as i64;
            out.extend(block.start..block.start + used);
            let rest = block.start + used..block.end;
            if !rest.is_empty() {
                let mut cache = self.auto_id_cache().lock();
                let cached = cache.entry(table.id.clone()).or_insert(0..0);
                if cached.end - cached.start < rest.end - rest.start {
                    *cached = rest;
                }
            }
        }
        Ok(out)
    }

    /// Up to `n` values from this client's cached block of table `table_id`.
    fn take_cached_ids(&self, table_id: &str, n: usize) -> Range<i64> {
        let mut cache = self.auto_id_cache().lock();
        let Some(block) = cache.get_mut(table_id) else {
            return 0..0;
        };
        let take = (n as i64).min(block.end - block.start);
        let got = block.start..block.start + take;
        block.start += take;
        got
    }

    /// Reserves `count` values of `table`'s auto-incrementing key at the master.
    /// A retry after a lost answer reserves a new block; the lost one is skipped.
    pub async fn allocate_auto_ids(&self, table: &Table, count: u64) -> Result<Range<i64>> {
        let req = AllocateAutoIdsRequest {
            table_id: table.id.clone(),
            count,
        };
        let r = self
            .call_master(
                &format!("reserving auto-increment values of table '{}'", table.name),
                move |mut m, t| {
                    let r = request(req.clone(), t);
                    async move { m.allocate_auto_ids(r).await }
                },
            )
            .await
            .map_err(|e| e.for_table(&table.name))?;
        Ok(r.first..r.first.saturating_add(r.count as i64))
    }
}
