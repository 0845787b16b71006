//! HybridTime and the hybrid logical clock (Kudu paper §3.4, Kulkarni et al. HLC).
//!
//! A [`HybridTime`] is a 64-bit number: the physical time in microseconds since the Unix
//! epoch shifted left by 12 bits, plus a 12-bit logical counter. It orders every event in
//! a tablet; MVCC snapshots are HybridTimes. The [`HybridClock`] never goes backwards and
//! is advanced by every timestamp it observes, so causality carries across RPCs.
//!
//! A timestamp that arrives from a client or a peer is *observed* only if it lies at
//! most the clock's maximum offset ahead of the local wall clock (Kudu's
//! `max_clock_error`, default [`DEFAULT_MAX_OFFSET`]): [`HybridClock::observe`] refuses
//! anything further ahead, so a bad or malicious timestamp can neither push the clock
//! into the future nor, through it, move the history GC mark. Timestamps of committed
//! log records are applied unconditionally ([`HybridClock::update`]): the leader chose
//! them, and a replica that may lead next must never hand out a smaller one.
//!
//! Arithmetic on timestamps saturates instead of overflowing.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{CommonError, Result};

/// How far ahead of the local clock a timestamp from elsewhere may be: 500 ms.
pub const DEFAULT_MAX_OFFSET: Duration = Duration::from_millis(500);

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

    /// Builds a timestamp from physical microseconds and a logical counter (physical
    /// times beyond what 52 bits hold saturate to [`HybridTime::MAX`]).
    pub fn from_parts(physical_micros: u64, logical: u64) -> Self {
        if physical_micros >= 1 << (64 - LOGICAL_BITS) {
            return HybridTime::MAX;
        }
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
        HybridTime(
            self.0
                .saturating_sub(micros.saturating_mul(1 << LOGICAL_BITS)),
        )
    }
    /// This timestamp plus a duration in microseconds of physical time (saturating).
    pub fn plus_micros(self, micros: u64) -> Self {
        HybridTime(
            self.0
                .saturating_add(micros.saturating_mul(1 << LOGICAL_BITS)),
        )
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
#[derive(Debug)]
pub struct HybridClock {
    last: AtomicU64,
    max_offset_micros: u64,
}

impl Default for HybridClock {
    fn default() -> Self {
        Self::with_max_offset(DEFAULT_MAX_OFFSET)
    }
}

/// Microseconds since the Unix epoch on this machine's wall clock. With the `fail`
/// crate's failpoints compiled in, the failpoint `clock::skew_ms` (`return(<ms>)`)
/// shifts it, for tests of clock skew.
fn wall_micros() -> u64 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    let skew_ms = skew_ms();
    if skew_ms >= 0 {
        wall.saturating_add(skew_ms as u64 * 1000)
    } else {
        wall.saturating_sub(skew_ms.unsigned_abs() * 1000)
    }
}

fn skew_ms() -> i64 {
    fail::fail_point!("clock::skew_ms", |arg| arg
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0));
    0
}

impl HybridClock {
    /// A clock that has observed nothing yet, with the default maximum offset.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock that refuses observed timestamps more than `max_offset` ahead of it.
    pub fn with_max_offset(max_offset: Duration) -> Self {
        HybridClock {
            last: AtomicU64::new(0),
            max_offset_micros: max_offset.as_micros().min(u64::MAX as u128) as u64,
        }
    }

    /// The maximum offset of observed timestamps.
    pub fn max_offset(&self) -> Duration {
        Duration::from_micros(self.max_offset_micros)
    }

    /// A new timestamp, strictly greater than every timestamp this clock returned or
    /// observed before.
    pub fn now(&self) -> HybridTime {
        let wall = HybridTime::from_micros(wall_micros()).0;
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = wall.max(last.saturating_add(1));
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

    /// The local wall clock as a timestamp (logical 0), never moved by observed
    /// timestamps: what history retention is measured against.
    pub fn wall(&self) -> HybridTime {
        HybridTime::from_micros(wall_micros())
    }

    /// Checks that `ts` is at most the maximum offset ahead of the local wall clock.
    pub fn check(&self, ts: HybridTime) -> Result<()> {
        let wall = wall_micros();
        let limit = wall.saturating_add(self.max_offset_micros);
        let physical = ts.physical_micros();
        if physical > limit {
            return Err(CommonError::ClockOffset {
                observed: ts.0,
                ahead_ms: (physical - wall) / 1000,
                max_ms: self.max_offset_micros / 1000,
            });
        }
        Ok(())
    }

    /// Observes a timestamp from a client or a peer: later `now()` calls return
    /// something greater. Refused (and the clock left alone) if it lies more than the
    /// maximum offset ahead of the local wall clock.
    pub fn observe(&self, ts: HybridTime) -> Result<()> {
        self.check(ts)?;
        self.update(ts);
        Ok(())
    }

    /// Advances the clock to at least `observed` without a bound: for timestamps of
    /// committed log records, which a replica must never undercut once it leads.
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

    #[test]
    fn observe_refuses_timestamps_beyond_the_offset() {
        let c = HybridClock::with_max_offset(Duration::from_millis(500));
        let before = c.now();
        let near = HybridTime::from_micros(c.wall().physical_micros() + 100_000);
        c.observe(near).unwrap();
        assert!(c.now() > near);
        let far = HybridTime::from_micros(c.wall().physical_micros() + 60_000_000);
        let err = c.observe(far).unwrap_err();
        assert!(
            matches!(err, CommonError::ClockOffset { max_ms: 500, .. }),
            "{err}"
        );
        assert!(
            c.peek() < far,
            "a refused timestamp must not move the clock"
        );
        assert!(c.observe(HybridTime::MAX).is_err());
        assert!(c.now() > before);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(HybridTime::from_micros(u64::MAX), HybridTime::MAX);
        assert_eq!(HybridTime(5).minus_micros(u64::MAX), HybridTime::MIN);
        assert_eq!(HybridTime::MAX.plus_micros(1), HybridTime::MAX);
        assert_eq!(HybridTime::MAX.next(), HybridTime::MAX);
        let c = HybridClock::new();
        c.update(HybridTime::MAX);
        assert_eq!(c.now(), HybridTime::MAX);
    }
}
