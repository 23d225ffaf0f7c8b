//! Engine time: a monotonic instant in nanoseconds from an arbitrary zero.
//!
//! `wire` and `proto` never read a clock; the caller passes `now` in. Only the node reads the
//! OS clock. Tests start at [`Instant::ZERO`] and step virtual time.

use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in engine time (nanoseconds since an arbitrary origin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);

    /// An instant `ns` nanoseconds after the origin.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::ZERO + Duration::from_millis(3);
        assert_eq!(t.as_nanos(), 3_000_000);
        assert_eq!(t - Instant::from_nanos(1_000_000), Duration::from_millis(2));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!((t + Duration::MAX).as_nanos(), u64::MAX);
    }
}
