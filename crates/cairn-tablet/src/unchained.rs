//! Changes not yet chained into a table's subspaces: the point leader's to-do list
//! (HyperDex §4.1, "the point leader … resumes every unfinished chain").
//!
//! A tablet of a table with subspaces is the key subspace of its rows. Every row change
//! it applies — a write at its timestamp, or a transaction's commit at the commit
//! timestamp — must reach the row's regions in every subspace, which its leader does
//! after the change is applied (the tablet server's chain driver). If that leader dies
//! or gives up first, someone must finish the chain. This list is how the next leader
//! knows which: each applied change adds `(timestamp, key)` here, *on every replica*
//! (it is part of applying the log record), and the leader, once a chain is through,
//! replicates a [`crate::ops::LogRecord::ChainsDone`] record that takes the entries
//! off again. Whatever is left on a leader for a while is chained again (chaining is
//! idempotent: regions keep the newest version of each row).
//!
//! The list is persisted with the tablet's metadata, so it survives restarts and
//! travels with tablet copies. Applying records again after a restart adds and removes
//! the same entries in the same order, so the list ends as it was. While an entry is
//! listed, history at and after its timestamp is kept (the tablet's ancient history
//! mark stays below it), because chaining reads the row before and after the change.
//!
//! Only tablets told to track changes ([`UnchainedChanges::track`]) record anything.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// One change waiting for its chain: the change's timestamp and the row's encoded key.
pub type Unchained = (u64, Vec<u8>);

/// The changes a tablet has applied and its leader has not yet reported chained.
#[derive(Debug, Default)]
pub struct UnchainedChanges {
    tracking: AtomicBool,
    entries: Mutex<BTreeSet<Unchained>>,
}

impl UnchainedChanges {
    /// The list as persisted in the tablet's metadata.
    pub fn from_persisted(entries: Vec<Unchained>) -> UnchainedChanges {
        UnchainedChanges {
            tracking: AtomicBool::new(false),
            entries: Mutex::new(entries.into_iter().collect()),
        }
    }

    /// From now on, record the changes applied (the tablet's table has subspaces).
    pub fn track(&self) {
        self.tracking.store(true, Ordering::Release);
    }

    /// Whether changes are recorded.
    pub fn tracking(&self) -> bool {
        self.tracking.load(Ordering::Acquire)
    }

    /// Records that the rows of `keys` changed at `ts`, if changes are tracked.
    pub fn record<'a>(&self, ts: u64, keys: impl IntoIterator<Item = &'a [u8]>) {
        if !self.tracking() {
            return;
        }
        let mut e = self.entries.lock();
        for k in keys {
            e.insert((ts, k.to_vec()));
        }
    }

    /// Takes `done` off the list (entries not listed are ignored).
    pub fn done(&self, done: &[Unchained]) {
        let mut e = self.entries.lock();
        for d in done {
            e.remove(d);
        }
    }

    /// Up to `limit` entries with a timestamp below `before`, oldest first.
    pub fn older_than(&self, before: u64, limit: usize) -> Vec<Unchained> {
        self.entries
            .lock()
            .iter()
            .take_while(|(ts, _)| *ts < before)
            .take(limit)
            .cloned()
            .collect()
    }

    /// The oldest entry's timestamp, if any.
    pub fn oldest(&self) -> Option<u64> {
        self.entries.lock().first().map(|(ts, _)| *ts)
    }

    /// How many changes wait.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.entries.lock().is_empty()
    }

    /// The list, for the tablet's metadata.
    pub fn to_persist(&self) -> Vec<Unchained> {
        self.entries.lock().iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_while_tracking_and_forgets_what_is_done() {
        let u = UnchainedChanges::default();
        u.record(5, [b"a".as_slice()]);
        assert!(u.is_empty(), "an untracked tablet records nothing");
        u.track();
        u.record(5, [b"a".as_slice(), b"b".as_slice()]);
        u.record(9, [b"a".as_slice()]);
        assert_eq!(u.oldest(), Some(5));
        assert_eq!(
            u.older_than(9, 10),
            vec![(5, b"a".to_vec()), (5, b"b".to_vec())]
        );
        assert_eq!(u.older_than(10, 1), vec![(5, b"a".to_vec())]);
        u.done(&[(5, b"a".to_vec()), (7, b"zz".to_vec())]);
        assert_eq!(u.to_persist(), vec![(5, b"b".to_vec()), (9, b"a".to_vec())]);
        let back = UnchainedChanges::from_persisted(u.to_persist());
        assert_eq!(back.len(), 2);
        assert!(!back.tracking());
    }

    #[test]
    fn replaying_a_suffix_of_the_log_ends_in_the_same_list() {
        // Records applied in order: adds and removals. A restart starts from a list
        // persisted after some prefix and applies everything after an earlier point
        // again; the result must be the list of the whole run.
        #[derive(Clone)]
        enum Rec {
            Add(u64, &'static [u8]),
            Done(u64, &'static [u8]),
        }
        let log = [
            Rec::Add(1, b"a"),
            Rec::Add(2, b"b"),
            Rec::Done(1, b"a"),
            Rec::Add(3, b"a"),
            Rec::Done(2, b"b"),
            Rec::Add(4, b"c"),
        ];
        let apply = |u: &UnchainedChanges, r: &Rec| match r {
            Rec::Add(ts, k) => u.record(*ts, [*k]),
            Rec::Done(ts, k) => u.done(&[(*ts, k.to_vec())]),
        };
        let full = UnchainedChanges::default();
        full.track();
        log.iter().for_each(|r| apply(&full, r));
        for persisted_after in 0..=log.len() {
            for replay_from in 0..=persisted_after {
                let first = UnchainedChanges::default();
                first.track();
                log[..persisted_after].iter().for_each(|r| apply(&first, r));
                let reopened = UnchainedChanges::from_persisted(first.to_persist());
                reopened.track();
                log[replay_from..].iter().for_each(|r| apply(&reopened, r));
                assert_eq!(reopened.to_persist(), full.to_persist());
            }
        }
    }
}
