//! HybridTime and the hybrid logical clock (Kudu paper §3.4, Kulkarni et al. HLC).
//!
//! A [`HybridTime`] is a 64-bit number: the physical time in microseconds since the Unix
//! epoch shifted left by 12 bits, plus a 12-bit logical counter. It orders every event in
//! a tablet; MVCC snapshots are HybridTimes. The [`HybridClock`] never goes backwards and
//! is advanced by every timestamp it observes (`update`), so causality carries across
//! RPCs once servers exist.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Number of low bits holding the logical counter.
pub const LOGICAL_BITS: u32 = 12;

/// A hybrid timestamp: `physical_micros << 12 | logical`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HybridTime(pub u64);

impl HybridTime {
    /// The smallest timestamp; nothing happens before it.
    pub const MIN: HybridTime = HybridTime(0);
    /// The largest timestamp; a snapshot at `MAX` sees everything committed.
    pub const MAX: HybridTime = HybridTime(u64::MAX);

    /// Builds a timestamp from physical microseconds and a logical counter.
    pub fn from_parts(physical_micros: u64, logical: u64) -> Self {
        HybridTime((physical_micros << LOGICAL_BITS) | (logical & ((1 << LOGICAL_BITS) - 1)))
    }
    /// Builds a timestamp for a physical time in microseconds with logical 0.
    pub fn from_micros(physical_micros: u64) -> Self {
        Self::from_parts(physical_micros, 0)
    }
    /// The physical component in microseconds since the Unix epoch.
    pub fn physical_micros(self) -> u64 {
        self.0 >> LOGICAL_BITS
    }
    /// The logical component.
    pub fn logical(self) -> u64 {
        self.0 & ((1 << LOGICAL_BITS) - 1)
    }
    /// The next timestamp (saturating).
    pub fn next(self) -> Self {
        HybridTime(self.0.saturating_add(1))
    }
    /// The previous timestamp (saturating).
    pub fn prev(self) -> Self {
        HybridTime(self.0.saturating_sub(1))
    }
    /// This timestamp minus a duration in microseconds of physical time (saturating).
    pub fn minus_micros(self, micros: u64) -> Self {
        HybridTime(self.0.saturating_sub(micros << LOGICAL_BITS))
    }
}

impl fmt::Debug for HybridTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HT({}.{})", self.physical_micros(), self.logical())
    }
}

impl fmt::Display for HybridTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A hybrid logical clock: monotonic, close to wall time, advanced by observed timestamps.
#[derive(Debug, Default)]
pub struct HybridClock {
    last: AtomicU64,
}

fn wall_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl HybridClock {
    /// A clock that has observed nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new timestamp, strictly greater than every timestamp this clock returned or
    /// observed before.
    pub fn now(&self) -> HybridTime {
        let wall = HybridTime::from_micros(wall_micros()).0;
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = wall.max(last + 1);
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return HybridTime(next),
                Err(actual) => last = actual,
            }
        }
    }

    /// The latest timestamp handed out or observed, without advancing the clock.
    pub fn peek(&self) -> HybridTime {
        HybridTime(self.last.load(Ordering::Acquire))
    }

    /// Observes a timestamp from elsewhere (a peer, a log record): later `now()` calls
    /// return something greater.
    pub fn update(&self, observed: HybridTime) {
        self.last.fetch_max(observed.0, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip() {
        let t = HybridTime::from_parts(1_700_000_000_000_000, 17);
        assert_eq!(t.physical_micros(), 1_700_000_000_000_000);
        assert_eq!(t.logical(), 17);
    }

    #[test]
    fn clock_is_monotonic_and_follows_updates() {
        let c = HybridClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b > a);
        let future = HybridTime::from_micros(a.physical_micros() + 60_000_000);
        c.update(future);
        let d = c.now();
        assert!(d > future);
        assert_eq!(d.physical_micros(), future.physical_micros());
    }
}
