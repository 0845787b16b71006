//! Reads of one row by key: [`Tablet::get`] at a snapshot, the leader's point read
//! [`Tablet::get_point`] (which waits only for writes of its own key), and
//! [`Tablet::change_at`], the row before and after the write that changed it (what a
//! point leader chains into the subspaces, HyperDex §4.1).

use std::time::Instant;

use cairn_common::{HybridTime, Value};

use super::{Location, ReadMode, Tablet, encode_point_key};
use crate::error::{Result, TabletError};
use crate::history::Row;

impl Tablet {
    /// Reads one row by primary key (values in key-column order).
    pub fn get(&self, key: &[Value], mode: ReadMode) -> Result<Option<Row>> {
        self.get_projected(key, mode, None)
    }

    /// Reads one row by primary key, with base data read only for the columns at
    /// the schema positions `want` (`None`: all): a row on disk then costs one page
    /// of each wanted column. Other columns of the row may be `Value::Null`.
    pub fn get_projected(
        &self,
        key: &[Value],
        mode: ReadMode,
        want: Option<&[usize]>,
    ) -> Result<Option<Row>> {
        let schema = self.schema();
        let enc = encode_point_key(&schema, key)?;
        let snap = self.snapshot_for(mode)?;
        let comps = self.components();
        match self.locate(&comps, &enc) {
            Location::Disk(rs, o) => rs.row_at(&schema, o, snap, want),
            Location::Mem(_, r) => Ok(r.state_at(&schema, snap)),
            Location::Absent => Ok(None),
        }
    }

    /// Reads one row by primary key (values in key-column order) at a fresh snapshot,
    /// the leader's point read. Returns the snapshot and the row.
    ///
    /// A snapshot read waits until no write at or below its timestamp is in flight
    /// ([`Tablet::snapshot_for`]); a point read needs only the writes of its own key.
    /// A row write holds its key's row lock from before it takes its timestamp until
    /// it is applied, so once the lock is free every write of the key at or below the
    /// snapshot is applied, and later ones get later timestamps. Two kinds of write
    /// hold no row lock, and the read waits as a snapshot read when one of them may
    /// cover the key: a bulk insert (whose key range is registered until applied —
    /// the read waits for it) and a transaction's commit (the key is owned by the
    /// transaction until its commit is applied — the read waits for every write at
    /// or below its snapshot). With nothing in flight at or below the snapshot, the
    /// read waits for nothing.
    ///
    /// Without `may_block`, answers `Ok(None)` instead of waiting (or reading when a
    /// wait was needed), so an async caller can move to a blocking thread only then.
    /// Base data is read only for the columns at schema positions `want` (`None`:
    /// all), as in [`Tablet::get_projected`].
    ///
    /// REQUIRES: this replica leads and has applied everything it acknowledged (the
    /// caller checked); the caller observed the client's timestamp first; a blocking
    /// context if `may_block`.
    pub fn get_point(
        &self,
        key: &[Value],
        deadline: Instant,
        may_block: bool,
        want: Option<&[usize]>,
    ) -> Result<Option<(HybridTime, Option<Row>)>> {
        self.check_healthy()?;
        let schema = self.schema();
        let enc = encode_point_key(&schema, key)?;
        let (snap, oldest) = self.mvcc.now_and_oldest(&self.clock);
        if oldest.is_some_and(|o| o <= snap) {
            if !may_block {
                return Ok(None);
            }
            let timed_out = || TabletError::SafeTimeTimeout {
                snapshot: snap,
                waited_ms: self.opts.safe_time_timeout.as_millis() as u64,
            };
            let deadline = deadline.min(Instant::now() + self.opts.safe_time_timeout);
            if !self.pending_bulk.wait_clear(&[&enc], deadline) {
                return Err(timed_out());
            }
            drop(
                self.locks
                    .lock_all([&enc], Some(deadline))
                    .ok_or_else(timed_out)?,
            );
            if self.txns.owner(&enc).is_some() {
                self.snapshot_for(ReadMode::Snapshot(snap))?;
            }
        }
        let comps = self.components();
        let row = match self.locate(&comps, &enc) {
            Location::Disk(rs, o) => rs.row_at(&schema, o, snap, want)?,
            Location::Mem(_, r) => r.state_at(&schema, snap),
            Location::Absent => None,
        };
        Ok(Some((snap, row)))
    }

    /// The row `key` just before and just after the write at `ts` (its state at
    /// `ts - 1` and at `ts`), read without waiting for other rows' writes in flight:
    /// the change a point leader chains into the table's subspaces.
    ///
    /// A snapshot read at `ts` waits until no write at or below `ts` is in flight, on
    /// any row; under load that is a wait for other writers' log appends. Only the
    /// writes of `key` matter here, and none at or below `ts` can be in flight once the
    /// write at `ts` is applied: a row write holds the key's row lock from before it
    /// takes its timestamp until it is applied, so an older one was applied before the
    /// write at `ts` took the lock. As in [`Tablet::get_point`], the two kinds of write
    /// without a row lock are waited for when one may cover the key — a bulk insert in
    /// flight whose range holds it, and a transaction owning it — and with nothing in
    /// flight at or below `ts` nothing is waited for.
    ///
    /// Without `may_block`, answers `Ok(None)` instead of waiting, so that an async
    /// caller moves to a blocking thread only then.
    ///
    /// REQUIRES: the write at `ts` of `key` — a row write, a bulk insert or a
    /// transaction's commit — is applied on this replica (later writes of `key` may
    /// have followed: they do not change its history up to `ts`); a blocking context
    /// if `may_block`.
    pub fn change_at(
        &self,
        key: &[Value],
        ts: HybridTime,
        deadline: Instant,
        may_block: bool,
    ) -> Result<Option<(Option<Row>, Option<Row>)>> {
        self.check_healthy()?;
        let before = HybridTime(ts.0.saturating_sub(1));
        let ahm = self.ancient_history_mark();
        if before < ahm {
            return Err(TabletError::SnapshotTooOld {
                requested: before,
                oldest: ahm,
            });
        }
        let schema = self.schema();
        let enc = encode_point_key(&schema, key)?;
        let (_, oldest) = self.mvcc.now_and_oldest(&self.clock);
        if oldest.is_some_and(|o| o <= ts) {
            let now = Instant::now();
            let clear = self.pending_bulk.wait_clear(&[&enc], now);
            if !clear || self.txns.owner(&enc).is_some() {
                if !may_block {
                    return Ok(None);
                }
                if !clear {
                    let deadline = deadline.min(now + self.opts.safe_time_timeout);
                    if !self.pending_bulk.wait_clear(&[&enc], deadline) {
                        return Err(TabletError::SafeTimeTimeout {
                            snapshot: ts,
                            waited_ms: self.opts.safe_time_timeout.as_millis() as u64,
                        });
                    }
                }
                if self.txns.owner(&enc).is_some() {
                    self.snapshot_for(ReadMode::Snapshot(ts))?;
                }
            }
        }
        let comps = self.components();
        Ok(Some(match self.locate(&comps, &enc) {
            Location::Disk(rs, o) => (
                rs.row_at(&schema, o, before, None)?,
                rs.row_at(&schema, o, ts, None)?,
            ),
            Location::Mem(_, r) => (r.state_at(&schema, before), r.state_at(&schema, ts)),
            Location::Absent => (None, None),
        }))
    }
}
