//! Plain words for what the service reports: failure reasons, elapsed times, counts.

use crate::status::FailureReason;

/// What happened, in words a person reads in a notification or the dashboard.
pub fn reason_words(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::JitRequestFailed => "GitHub refused to register a runner",
        FailureReason::JitExpired => "the runner's registration ran out before it started",
        FailureReason::PackageUnverified => "the runner package failed verification",
        FailureReason::VersionRejected => "GitHub refused the runner's version",
        FailureReason::ProcessStartFailed => "the runner could not be started",
        FailureReason::ProcessExitedUnexpectedly => "the runner exited unexpectedly",
        FailureReason::TerminatedAfterRegistrationTimeout => "the runner never came online",
        FailureReason::WorkspaceCleanupDeferred => "a runner directory could not be removed yet",
        FailureReason::LaunchInterrupted => "a runner launch was interrupted",
        FailureReason::RunnerCrashed => "a runner died in the middle of its job",
        FailureReason::Unknown => "a runner failed",
    }
}

/// `45s`, `1m 20s`, `2h 5m` (negative reads as 0s).
pub fn elapsed(millis: i64) -> String {
    let secs = millis.max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// `1 job`, `3 jobs`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_times_read_like_a_clock() {
        assert_eq!(elapsed(-5), "0s");
        assert_eq!(elapsed(45_999), "45s");
        assert_eq!(elapsed(80_000), "1m 20s");
        assert_eq!(elapsed(7_500_000), "2h 5m");
        assert_eq!(count(1, "job", "jobs"), "1 job");
        assert_eq!(count(0, "job", "jobs"), "0 jobs");
    }

    #[test]
    fn every_reason_has_words() {
        for r in [
            FailureReason::JitRequestFailed,
            FailureReason::ProcessExitedUnexpectedly,
            FailureReason::Unknown,
        ] {
            assert!(!reason_words(r).is_empty());
        }
    }
}
