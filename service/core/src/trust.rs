//! How far a job's code is trusted, decided fail-closed from the job's own run: which event
//! started it and where its head commit comes from. What a runner leaves behind (what it wrote
//! into the shared caches, its persistent workspace) is kept only as far as this verdict allows.

use std::fmt;

/// The trust a job earned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobTrust {
    /// The repository's own code on a push, schedule, dispatch…: what it writes is kept.
    Trusted,
    /// A pull request from a branch of the repository itself: written by someone with write
    /// access, but not reviewed, so never read by the default branch's jobs.
    PullRequest,
    /// A fork's pull request, or a job whose origin could not be established.
    Untrusted,
}

impl JobTrust {
    pub fn as_str(self) -> &'static str {
        match self {
            JobTrust::Trusted => "trusted",
            JobTrust::PullRequest => "pull_request",
            JobTrust::Untrusted => "untrusted",
        }
    }

    pub fn parse(s: &str) -> Option<JobTrust> {
        [
            JobTrust::Trusted,
            JobTrust::PullRequest,
            JobTrust::Untrusted,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

impl fmt::Display for JobTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict on the job one runner ran, with the job and run it rests on and why, in plain
/// words (journalled with the attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustVerdict {
    pub trust: JobTrust,
    pub job_id: Option<u64>,
    pub run_id: Option<u64>,
    pub reason: String,
}

impl TrustVerdict {
    /// Nothing established which job ran, or where its code came from: untrusted.
    pub fn unknown(reason: impl Into<String>) -> TrustVerdict {
        TrustVerdict {
            trust: JobTrust::Untrusted,
            job_id: None,
            run_id: None,
            reason: reason.into(),
        }
    }
}

/// Events that run a pull request's code, which may come from someone without write access.
pub const PULL_REQUEST_EVENTS: &[&str] = &[
    "pull_request",
    "pull_request_target",
    "pull_request_review",
    "pull_request_review_comment",
];

/// Judges a run of `repository` (`owner/repo`) started by `event` whose head commit comes
/// from `head_repository`. Fail-closed: a head repository other than the run's (names compare
/// ignoring ASCII case, as GitHub's do) is a fork's; without one, only an event that says
/// where its code comes from and cannot be a pull request (`push`, `schedule`,
/// `workflow_dispatch`…) is trusted, and a pull-request event or a missing event is not.
pub fn judge_run(
    repository: &str,
    event: Option<&str>,
    head_repository: Option<&str>,
) -> (JobTrust, String) {
    let event = event.map(str::trim).filter(|e| !e.is_empty());
    let pull_request = event.is_some_and(|e| {
        PULL_REQUEST_EVENTS
            .iter()
            .any(|p| p.eq_ignore_ascii_case(e))
    });
    let head = head_repository.map(str::trim).filter(|h| !h.is_empty());
    match (event, head) {
        (_, Some(head)) if !head.eq_ignore_ascii_case(repository) => (
            JobTrust::Untrusted,
            format!("its code comes from another repository, {head} (a fork)"),
        ),
        (None, _) => (
            JobTrust::Untrusted,
            "its run names no event, so where its code comes from is unknown".to_owned(),
        ),
        (Some(e), None) if pull_request => (
            JobTrust::Untrusted,
            format!("a {e} run that names no head repository (counted as a fork's)"),
        ),
        (Some(e), _) if pull_request => (
            JobTrust::PullRequest,
            format!("a {e} run from a branch of {repository}"),
        ),
        (Some(e), _) => (JobTrust::Trusted, format!("a {e} run of {repository}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_judged_by_its_event_and_head_repository_fail_closed() {
        let j = |event, head| judge_run("octo/hello", event, head).0;
        assert_eq!(j(Some("push"), Some("octo/hello")), JobTrust::Trusted);
        assert_eq!(j(Some("push"), Some("Octo/Hello")), JobTrust::Trusted);
        assert_eq!(j(Some("schedule"), None), JobTrust::Trusted);
        assert_eq!(
            j(Some("pull_request"), Some("octo/hello")),
            JobTrust::PullRequest
        );
        assert_eq!(
            j(Some("pull_request_target"), Some("octo/hello")),
            JobTrust::PullRequest
        );
        assert_eq!(
            j(Some("pull_request"), Some("evil/hello")),
            JobTrust::Untrusted
        );
        // Whatever the event, code from another repository is a fork's.
        assert_eq!(j(Some("push"), Some("evil/hello")), JobTrust::Untrusted);
        assert_eq!(
            j(Some("workflow_run"), Some("evil/hello")),
            JobTrust::Untrusted
        );
        // Missing facts count against the job.
        assert_eq!(j(Some("pull_request"), None), JobTrust::Untrusted);
        assert_eq!(j(Some("pull_request"), Some(" ")), JobTrust::Untrusted);
        assert_eq!(j(None, Some("octo/hello")), JobTrust::Untrusted);
        assert_eq!(j(Some(""), None), JobTrust::Untrusted);
        let (_, why) = judge_run("octo/hello", Some("pull_request"), Some("evil/hello"));
        assert!(why.contains("evil/hello"), "{why}");
    }

    #[test]
    fn trust_round_trips_through_its_words() {
        for t in [
            JobTrust::Trusted,
            JobTrust::PullRequest,
            JobTrust::Untrusted,
        ] {
            assert_eq!(JobTrust::parse(t.as_str()), Some(t));
        }
        assert_eq!(JobTrust::parse("Trusted"), None);
        assert_eq!(TrustVerdict::unknown("x").trust, JobTrust::Untrusted);
    }
}
