//! Launch back-off: failed launches of one policy in a row space out the next try
//! exponentially (with jitter, capped) and, after a few, give up: the policy goes to
//! `repair_required` and starts nothing until the operator retries it.
//!
//! Why: a failed launch spends the user's GitHub rate limit (a registration and its removal),
//! which every other tool of that user shares, even when the fault is on this machine. Without
//! a back-off a runner that could not start was registered hundreds of times an hour. A
//! failure that cost GitHub nothing (the package, the host checks) counts just the same: the
//! next try may not be free.
//!
//! Pure: the caller passes `now` and a random sample for the jitter.

use crate::time::Timestamp;
use std::time::Duration;

/// The back-off rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchBackoff {
    /// The wait after the first failure.
    pub first_delay: Duration,
    /// The longest wait between two tries.
    pub max_delay: Duration,
    /// This many failures in a row give up (at least one).
    pub give_up_after: u32,
    /// Each wait is shortened by up to this share of it (per mille), so targets that failed
    /// together (one host fault) do not try again in lockstep.
    pub jitter_permille: u32,
}

impl Default for LaunchBackoff {
    /// 15 s doubling to 10 min, giving up after 5 failures (about 4 minutes), 25 % jitter.
    fn default() -> Self {
        LaunchBackoff {
            first_delay: Duration::from_secs(15),
            max_delay: Duration::from_secs(600),
            give_up_after: 5,
            jitter_permille: 250,
        }
    }
}

impl LaunchBackoff {
    /// The wait after failure number `failures` in a row (1-based), before jitter: the first
    /// delay doubled per failure, capped.
    pub fn base_delay(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// [`LaunchBackoff::base_delay`] shortened by the jitter `sample` picks (any value; it is
    /// reduced to a share of [`LaunchBackoff::jitter_permille`]). Never longer than the cap.
    pub fn delay(&self, failures: u32, sample: u64) -> Duration {
        let base = self.base_delay(failures);
        let jitter = u64::from(self.jitter_permille.min(1000));
        let cut_permille = sample % (jitter + 1);
        let base_ms = u64::try_from(base.as_millis()).unwrap_or(u64::MAX);
        let cut = base_ms / 1000 * cut_permille + base_ms % 1000 * cut_permille / 1000;
        Duration::from_millis(base_ms.saturating_sub(cut))
    }
}

/// What one more failure means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchVerdict {
    /// Try again, not before this.
    RetryAt(Timestamp),
    /// Too many in a row: start nothing until the operator retries.
    GiveUp,
}

/// One policy's launch failures in a row. Starts healthy; a success resets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchHealth {
    failures: u32,
    since: Option<Timestamp>,
    next_try: Option<Timestamp>,
    gave_up: bool,
}

impl LaunchHealth {
    /// Counts a failed try that began at `tried_at`; `sample` is a random number for the
    /// jitter. The wait runs from the start of the try, so tries are spaced out by the
    /// back-off and a slow failure (a runner that never came online within minutes) is not
    /// followed by a further wait.
    pub fn record_failure(
        &mut self,
        rules: &LaunchBackoff,
        tried_at: Timestamp,
        sample: u64,
    ) -> LaunchVerdict {
        self.failures = self.failures.saturating_add(1);
        self.since.get_or_insert(tried_at);
        if self.gave_up || self.failures >= rules.give_up_after.max(1) {
            self.gave_up = true;
            self.next_try = None;
            return LaunchVerdict::GiveUp;
        }
        let next = tried_at + rules.delay(self.failures, sample);
        self.next_try = Some(next);
        LaunchVerdict::RetryAt(next)
    }

    /// A launch worked (or the operator retried): back to healthy. Returns whether there was
    /// anything to forget.
    pub fn reset(&mut self) -> bool {
        let had = *self != LaunchHealth::default();
        *self = LaunchHealth::default();
        had
    }

    /// Whether a launch may be tried at `now`: not given up, and the back-off has passed.
    pub fn may_try(&self, now: Timestamp) -> bool {
        !self.gave_up && self.next_try.is_none_or(|t| t <= now)
    }

    /// After a failure, a try is a probe: one runner at a time, the host checked first.
    pub fn is_probing(&self) -> bool {
        self.failures > 0
    }

    /// Failures in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When the first failure of this run happened.
    pub fn since(&self) -> Option<Timestamp> {
        self.since
    }

    /// When the next try may happen; `None` when healthy or given up.
    pub fn next_try(&self) -> Option<Timestamp> {
        self.next_try
    }

    pub fn gave_up(&self) -> bool {
        self.gave_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(jitter: u32) -> LaunchBackoff {
        LaunchBackoff {
            jitter_permille: jitter,
            ..LaunchBackoff::default()
        }
    }

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn delays_double_from_the_first_and_stop_at_the_cap() {
        let r = rules(0);
        let secs: Vec<u64> = (1..=8).map(|n| r.base_delay(n).as_secs()).collect();
        assert_eq!(secs, vec![15, 30, 60, 120, 240, 480, 600, 600]);
        assert_eq!(r.base_delay(u32::MAX), Duration::from_secs(600));
        assert_eq!(r.delay(3, 12345), Duration::from_secs(60), "no jitter");
    }

    #[test]
    fn jitter_only_shortens_and_by_at_most_its_share() {
        let r = rules(250);
        let base = r.base_delay(4);
        let mut seen = std::collections::BTreeSet::new();
        for sample in 0..2_000u64 {
            let d = r.delay(4, sample.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            assert!(d <= base, "{d:?}");
            assert!(d >= base * 3 / 4, "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 100, "the samples spread the waits");
        // Never above the cap, even at the longest wait.
        assert!(r.delay(30, u64::MAX) <= r.max_delay);
    }

    #[test]
    fn failures_back_off_then_give_up_after_the_limit() {
        let r = rules(0);
        let mut h = LaunchHealth::default();
        assert!(h.may_try(t(0)) && !h.is_probing());
        assert_eq!(
            h.record_failure(&r, t(0), 0),
            LaunchVerdict::RetryAt(t(15_000))
        );
        assert!(h.is_probing());
        assert!(!h.may_try(t(14_999)));
        assert!(h.may_try(t(15_000)));
        assert_eq!(
            h.record_failure(&r, t(15_000), 0),
            LaunchVerdict::RetryAt(t(45_000))
        );
        assert_eq!(
            h.record_failure(&r, t(45_000), 0),
            LaunchVerdict::RetryAt(t(105_000))
        );
        assert_eq!(
            h.record_failure(&r, t(105_000), 0),
            LaunchVerdict::RetryAt(t(225_000))
        );
        assert_eq!(h.failures(), 4);
        assert_eq!(h.since(), Some(t(0)));
        assert_eq!(h.record_failure(&r, t(225_000), 0), LaunchVerdict::GiveUp);
        assert!(h.gave_up());
        assert_eq!(h.next_try(), None);
        assert!(!h.may_try(t(i64::MAX)), "given up: nothing until a reset");
        // Five failures, about four minutes: at most five registrations in ten minutes.
        assert!(h.failures() <= 5);
    }

    #[test]
    fn a_success_resets_the_count() {
        let r = rules(0);
        let mut h = LaunchHealth::default();
        assert!(!h.reset(), "nothing to forget");
        h.record_failure(&r, t(0), 0);
        h.record_failure(&r, t(20_000), 0);
        assert!(h.reset());
        assert_eq!(h, LaunchHealth::default());
        assert_eq!(
            h.record_failure(&r, t(50_000), 0),
            LaunchVerdict::RetryAt(t(65_000)),
            "the count starts again at one"
        );
        assert_eq!(h.since(), Some(t(50_000)));
    }

    #[test]
    fn the_wait_runs_from_the_start_of_the_failed_try() {
        let r = rules(0);
        let mut h = LaunchHealth::default();
        // A runner launched at 0 that never came online, concluded after 300 s: its
        // replacement may go at once.
        assert_eq!(
            h.record_failure(&r, t(0), 0),
            LaunchVerdict::RetryAt(t(15_000))
        );
        assert!(h.may_try(t(300_000)));
    }

    #[test]
    fn give_up_after_zero_still_gives_up_on_the_first_failure() {
        let r = LaunchBackoff {
            give_up_after: 0,
            ..rules(0)
        };
        let mut h = LaunchHealth::default();
        assert_eq!(h.record_failure(&r, t(0), 0), LaunchVerdict::GiveUp);
    }
}
