//! Time as the domain sees it: a value passed in by the caller, never read from a clock here.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// Milliseconds since the Unix epoch (UTC). Callers read the clock and pass `now`; the domain
/// only compares and offsets timestamps, which keeps every decision reproducible in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// 1970-01-01T00:00:00Z.
    pub const UNIX_EPOCH: Timestamp = Timestamp(0);

    /// A timestamp from milliseconds since the Unix epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the Unix epoch (the value the journal stores).
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// How long after `earlier` this is; zero when `earlier` is not earlier (a clock that
    /// stepped back must not produce a huge or negative age).
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        let diff = self.0.saturating_sub(earlier.0);
        Duration::from_millis(u64::try_from(diff).unwrap_or(0))
    }

    /// Whether at least `span` has passed since `earlier`.
    pub fn has_elapsed(self, earlier: Timestamp, span: Duration) -> bool {
        self.duration_since(earlier) >= span
    }
}

fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturates at the largest representable timestamp.
    fn add(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_millis(rhs)))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturates at the smallest representable timestamp.
    fn sub(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_millis(rhs)))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_against_durations() {
        let t = Timestamp::from_millis(10_000);
        assert_eq!((t + Duration::from_secs(2)).as_millis(), 12_000);
        assert_eq!((t - Duration::from_millis(500)).as_millis(), 9_500);
        assert_eq!(
            Timestamp::from_millis(12_500).duration_since(t),
            Duration::from_millis(2_500)
        );
    }

    #[test]
    fn a_clock_stepping_back_gives_zero_age() {
        let t = Timestamp::from_millis(10_000);
        assert_eq!(
            Timestamp::from_millis(9_000).duration_since(t),
            Duration::ZERO
        );
        assert!(!Timestamp::from_millis(9_000).has_elapsed(t, Duration::from_millis(1)));
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        let t = Timestamp::from_millis(i64::MAX - 1);
        assert_eq!((t + Duration::from_secs(10)).as_millis(), i64::MAX);
        let t = Timestamp::from_millis(i64::MIN + 1);
        assert_eq!((t - Duration::from_secs(10)).as_millis(), i64::MIN);
    }
}
