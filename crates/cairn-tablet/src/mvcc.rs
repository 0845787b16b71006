//! MVCC bookkeeping: which timestamps are still being applied, and the *safe time*
//! below which every write is complete (Kudu paper §3.4, §4.x "MVCC").
//!
//! A write takes its timestamp from [`MvccManager::start`], which registers it as
//! in-flight *under the same lock* that snapshot selection uses; so a snapshot chosen by
//! [`MvccManager::snapshot_now`] never includes a timestamp whose write is still being
//! applied, and a scan at a given timestamp waits ([`MvccManager::wait_until_safe`]) for
//! the writes at or below it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cairn_common::{HybridClock, HybridTime};
use parking_lot::{Condvar, Mutex};

/// Tracks in-flight write timestamps.
#[derive(Debug, Default)]
pub struct MvccManager {
    in_flight: Mutex<BTreeMap<HybridTime, usize>>,
    changed: Condvar,
}

impl MvccManager {
    /// A manager with nothing in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// Assigns a new timestamp from `clock` and registers it as in flight.
    pub fn start(&self, clock: &HybridClock) -> HybridTime {
        let mut g = self.in_flight.lock();
        let ts = clock.now();
        *g.entry(ts).or_default() += 1;
        ts
    }

    /// Registers a given timestamp (log replay, or a leader-assigned one later) as in flight.
    pub fn start_at(&self, clock: &HybridClock, ts: HybridTime) {
        let mut g = self.in_flight.lock();
        clock.update(ts);
        *g.entry(ts).or_default() += 1;
    }

    /// A fresh timestamp from `clock` (not registered) and the oldest write in flight,
    /// read together: every write whose timestamp is at or below the returned one is
    /// either finished or at or after the returned oldest in flight.
    pub fn now_and_oldest(&self, clock: &HybridClock) -> (HybridTime, Option<HybridTime>) {
        let g = self.in_flight.lock();
        (clock.now(), g.keys().next().copied())
    }

    /// Marks a write at `ts` as applied.
    pub fn finish(&self, ts: HybridTime) {
        let mut g = self.in_flight.lock();
        if let Some(c) = g.get_mut(&ts) {
            *c -= 1;
            if *c == 0 {
                g.remove(&ts);
            }
        }
        drop(g);
        self.changed.notify_all();
    }

    /// The latest timestamp at which every write is applied: a consistent snapshot for
    /// `READ_LATEST`.
    pub fn snapshot_now(&self, clock: &HybridClock) -> HybridTime {
        let g = self.in_flight.lock();
        match g.keys().next() {
            Some(first) => first.prev(),
            None => clock.now(),
        }
    }

    /// Blocks until no write at or below `ts` is in flight, after making sure the clock
    /// is past `ts` so no later write can take a timestamp at or below it. Returns
    /// false if `timeout` passed first (a leader's write stuck waiting for its
    /// followers).
    pub fn wait_until_safe(&self, clock: &HybridClock, ts: HybridTime, timeout: Duration) -> bool {
        clock.update(ts);
        let deadline = Instant::now() + timeout;
        let mut g = self.in_flight.lock();
        while g.keys().next().is_some_and(|first| *first <= ts) {
            if self.changed.wait_until(&mut g, deadline).timed_out() {
                return g.keys().next().is_none_or(|first| *first > ts);
            }
        }
        true
    }

    /// Number of writes in flight.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.lock().values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn snapshot_excludes_in_flight_and_waits() {
        let clock = HybridClock::new();
        let m = Arc::new(MvccManager::new());
        let t1 = m.start(&clock);
        let snap = m.snapshot_now(&clock);
        assert!(snap < t1);
        let m2 = m.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            m2.finish(t1);
        });
        assert!(m.wait_until_safe(&clock, t1, std::time::Duration::from_secs(10)));
        assert_eq!(m.in_flight_count(), 0);
        h.join().unwrap();
        assert!(m.snapshot_now(&clock) > t1);
        // A write that never finishes makes the wait give up.
        let t2 = m.start(&clock);
        assert!(!m.wait_until_safe(&clock, t2, std::time::Duration::from_millis(20)));
        m.finish(t2);
    }
}
