//! When to try again: exponential backoff with jitter for transient failures,
//! and GitHub's own timing for rate limits.

use crate::error::GitHubError;
use chrono::{DateTime, Utc};
use http::HeaderMap;
use std::sync::Mutex;
use std::time::Duration;

/// Exponential backoff with "equal jitter": attempt `n` waits a random time in
/// `[d/2, d]` with `d = min(cap, base * 2^n)`, so many clients that failed
/// together do not return together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// First delay.
    pub base: Duration,
    /// Largest delay.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// Delay before retry number `attempt` (0-based) of a transient failure.
    pub fn delay(&self, attempt: u32) -> Duration {
        let d = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt.min(30)))
            .min(self.cap);
        let half = d / 2;
        let jitter_ms = rand::random_range(0..=half.as_millis().min(u64::MAX as u128) as u64);
        half + Duration::from_millis(jitter_ms)
    }

    /// How long to wait after `err` before attempt `attempt` (0-based);
    /// `None` when waiting cannot help (auth, permissions, bad input).
    pub fn delay_for(&self, err: &GitHubError, attempt: u32) -> Option<Duration> {
        match err {
            GitHubError::Transient { .. } => Some(self.delay(attempt)),
            GitHubError::RateLimited { .. } | GitHubError::Unreachable { .. } => err.wait(),
            _ => None,
        }
    }
}

/// Secondary limits without `retry-after`: wait at least this long.
pub const SECONDARY_FLOOR: Duration = Duration::from_secs(60);
/// ... doubling on each consecutive one, up to this.
pub const SECONDARY_CAP: Duration = Duration::from_secs(900);

/// The longest pause a rate-limit answer can impose. GitHub's limits are hourly
/// windows, so a longer `retry-after` or reset is garbage; believing it would
/// stall every target for that long (or, past chrono's range, panic).
const MAX_RATE_WAIT: chrono::Duration = chrono::Duration::hours(1);

/// Decides whether a 403/429 is a rate limit and until when, following
/// GitHub's rules: honour `retry-after`; else if `x-ratelimit-remaining` is 0
/// wait for `x-ratelimit-reset`; else (secondary) wait at least 60 s, doubling
/// for consecutive secondary limits. `None` = an ordinary 403.
pub fn rate_limit_until(
    status: u16,
    headers: &HeaderMap,
    message: &str,
    now: DateTime<Utc>,
    consecutive_secondary: u32,
) -> Option<(DateTime<Utc>, bool)> {
    if status != 403 && status != 429 {
        return None;
    }
    let num = |n: &str| -> Option<i64> { headers.get(n)?.to_str().ok()?.trim().parse().ok() };
    let lower = message.to_ascii_lowercase();
    let says_secondary = lower.contains("secondary rate limit") || lower.contains("abuse");
    let says_limit = lower.contains("rate limit");
    let latest = now + MAX_RATE_WAIT;
    if let Some(secs) = num("retry-after") {
        let wait = chrono::Duration::try_seconds(secs.max(1)).unwrap_or(MAX_RATE_WAIT);
        return Some((
            (now + wait.min(MAX_RATE_WAIT)),
            says_secondary || num("x-ratelimit-remaining") != Some(0),
        ));
    }
    if num("x-ratelimit-remaining") == Some(0) {
        let reset = num("x-ratelimit-reset")
            .and_then(|s| DateTime::<Utc>::from_timestamp(s, 0))
            .unwrap_or(now + chrono::Duration::seconds(60));
        // Never earlier than one second from now, whatever the clock skew.
        return Some((
            reset.clamp(now + chrono::Duration::seconds(1), latest),
            false,
        ));
    }
    if status == 429 || says_secondary || says_limit {
        let wait = SECONDARY_FLOOR
            .saturating_mul(2u32.saturating_pow(consecutive_secondary.min(10)))
            .min(SECONDARY_CAP);
        let wait = chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(60));
        return Some((now + wait, true));
    }
    None
}

/// Shared "do not call before" gate: after a rate limit every request fails
/// fast with the same `RateLimited` until the time passes, so a limited client
/// does not keep hitting GitHub.
#[derive(Default)]
pub(crate) struct RateGate {
    inner: Mutex<GateInner>,
}

#[derive(Default)]
struct GateInner {
    until: Option<(DateTime<Utc>, bool)>,
    /// When the current pause began.
    since: Option<DateTime<Utc>>,
    consecutive_secondary: u32,
}

/// A rate-limit pause in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pause {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub secondary: bool,
}

impl RateGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateInner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// `Err(RateLimited)` while closed.
    pub(crate) fn check(&self, now: DateTime<Utc>) -> Result<(), GitHubError> {
        match self.lock().until {
            Some((until, secondary)) if until > now => {
                Err(GitHubError::RateLimited { until, secondary })
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn consecutive_secondary(&self) -> u32 {
        self.lock().consecutive_secondary
    }

    /// Closes the gate until `until`; true when that is news (a new or longer pause).
    pub(crate) fn close(&self, until: DateTime<Utc>, secondary: bool, now: DateTime<Utc>) -> bool {
        let mut g = self.lock();
        if g.until.is_none_or(|(u, _)| u <= now) {
            g.since = Some(now);
        }
        if secondary {
            g.consecutive_secondary = g.consecutive_secondary.saturating_add(1);
        }
        let later = match g.until {
            Some((u, _)) => until > u,
            None => true,
        };
        if later {
            g.until = Some((until, secondary));
        }
        later
    }

    /// The pause in force at `now`, if any.
    pub(crate) fn pause(&self, now: DateTime<Utc>) -> Option<Pause> {
        let g = self.lock();
        match g.until {
            Some((until, secondary)) if until > now => Some(Pause {
                since: g.since.unwrap_or(now),
                until,
                secondary,
            }),
            _ => None,
        }
    }

    /// A successful answer ends the secondary-limit streak.
    pub(crate) fn success(&self) {
        self.lock().consecutive_secondary = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn delays_grow_are_jittered_and_capped() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        };
        for attempt in 0..40 {
            let d = b.delay(attempt);
            let full = Duration::from_millis(100)
                .saturating_mul(2u32.saturating_pow(attempt.min(30)))
                .min(Duration::from_secs(2));
            assert!(d >= full / 2 && d <= full, "{attempt}: {d:?}");
        }
        let samples: std::collections::HashSet<_> = (0..20).map(|_| b.delay(4)).collect();
        assert!(samples.len() > 1, "jitter varies");
    }

    #[test]
    fn only_transient_and_rate_limits_are_retried() {
        let b = Backoff::default();
        assert!(b.delay_for(&GitHubError::transient("x", None), 0).is_some());
        assert!(b.delay_for(&GitHubError::Unauthorized, 0).is_none());
        let until = Utc::now() + chrono::Duration::seconds(10);
        let d = b
            .delay_for(
                &GitHubError::RateLimited {
                    until,
                    secondary: false,
                },
                0,
            )
            .unwrap();
        assert!(d > Duration::from_secs(8) && d <= Duration::from_secs(10));
    }

    #[test]
    fn absurd_waits_are_capped_at_an_hour_not_a_panic() {
        let now = Utc::now();
        let hour = now + chrono::Duration::hours(1);
        for h in [
            headers(&[("retry-after", "99999999999999999")]),
            headers(&[("retry-after", "7200")]),
            headers(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "8000000000000"),
            ]),
        ] {
            let (until, _) = rate_limit_until(403, &h, "API rate limit exceeded", now, 0).unwrap();
            assert_eq!(until, hour);
        }
    }

    #[test]
    fn retry_after_wins() {
        let now = Utc::now();
        let (until, _) =
            rate_limit_until(429, &headers(&[("retry-after", "7")]), "", now, 0).unwrap();
        assert_eq!(until, now + chrono::Duration::seconds(7));
    }

    #[test]
    fn primary_waits_for_reset() {
        let now = Utc::now();
        let reset = now.timestamp() + 1200;
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &reset.to_string()),
        ]);
        let (until, secondary) =
            rate_limit_until(403, &h, "API rate limit exceeded for user ID 1.", now, 0).unwrap();
        assert_eq!(until.timestamp(), reset);
        assert!(!secondary);
        // A reset in the past still waits a little.
        let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1")]);
        assert!(rate_limit_until(403, &h, "", now, 0).unwrap().0 > now);
    }

    #[test]
    fn secondary_waits_at_least_a_minute_and_doubles() {
        let now = Utc::now();
        let h = headers(&[("x-ratelimit-remaining", "100")]);
        let msg = "You have exceeded a secondary rate limit.";
        let (u0, s) = rate_limit_until(403, &h, msg, now, 0).unwrap();
        assert!(s);
        assert_eq!(u0 - now, chrono::Duration::seconds(60));
        let (u2, _) = rate_limit_until(403, &h, msg, now, 2).unwrap();
        assert_eq!(u2 - now, chrono::Duration::seconds(240));
        let (u9, _) = rate_limit_until(429, &HeaderMap::new(), "", now, 9).unwrap();
        assert_eq!(u9 - now, chrono::Duration::seconds(900));
    }

    #[test]
    fn plain_forbidden_is_not_a_rate_limit() {
        let h = headers(&[("x-ratelimit-remaining", "4000")]);
        assert!(rate_limit_until(
            403,
            &h,
            "Resource not accessible by integration",
            Utc::now(),
            0
        )
        .is_none());
        assert!(rate_limit_until(500, &h, "", Utc::now(), 0).is_none());
    }

    #[test]
    fn gate_fails_fast_until_time_passes() {
        let g = RateGate::default();
        let now = Utc::now();
        assert!(g.check(now).is_ok());
        assert!(g.close(now + chrono::Duration::seconds(5), true, now));
        let p = g.pause(now).unwrap();
        assert_eq!((p.since, p.secondary), (now, true));
        assert!(g.pause(now + chrono::Duration::seconds(6)).is_none());
        assert!(matches!(
            g.check(now),
            Err(GitHubError::RateLimited {
                secondary: true,
                ..
            })
        ));
        assert!(g.check(now + chrono::Duration::seconds(6)).is_ok());
        assert_eq!(g.consecutive_secondary(), 1);
        g.success();
        assert_eq!(g.consecutive_secondary(), 0);
    }
}
