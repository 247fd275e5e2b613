//! The recent-failure log: the runner failures worth telling the user about, newest first and
//! bounded, each with the fix in words. It learns from the agent's events and announces each
//! new failure on the watch stream (`runner_failed`), once per attempt and reason.

use super::watchers::Watchers;
use crate::wire::via;
use rm_agent::{AgentEvent, EventKind};
use rm_core::{AttemptId, FailureReason, Outcome};
use rm_proto::{Event, Failure, UnixMillis};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// How many recent failures the status keeps.
pub const RECENT_FAILURES: usize = 20;

/// What the user can do about a failed runner.
pub fn fix_for(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::JitRequestFailed => {
            "GitHub refused or kept failing to register a runner: check that the GitHub App is \
             installed on the target and you are an admin there (`runner-manager status`); it is \
             retried when demand remains"
        }
        FailureReason::JitExpired => "nothing: the runner was replaced",
        FailureReason::PackageUnverified => {
            "the runner package failed verification: check the disk and network; it is \
             downloaded again on the next launch"
        }
        FailureReason::VersionRejected => {
            "GitHub refused the runner version: update runner-manager so it fetches a current runner"
        }
        FailureReason::ProcessStartFailed => {
            "the runner could not be started: see the service's log for the OS error (disk \
             space, permissions of the runner directory)"
        }
        FailureReason::ProcessExitedUnexpectedly => {
            "the runner exited unexpectedly: its diagnostics are in the service's log; the job \
             is picked up by a replacement if it is still queued"
        }
        FailureReason::TerminatedAfterRegistrationTimeout => {
            "the runner never came online: check that this machine can reach GitHub"
        }
        FailureReason::WorkspaceCleanupDeferred => {
            "a runner directory could not be removed yet: it is retried; check for processes \
             a job left behind"
        }
        FailureReason::LaunchInterrupted => "nothing: the interrupted launch was cleaned up",
        FailureReason::RunnerCrashed => {
            "re-run the job from its page on GitHub (GitHub marks it failed once it gives up on \
             the runner, after about 10 minutes); if runners keep dying, look for what ended \
             them: the service's log, and `journalctl -k | grep -i oom` for the memory killer"
        }
    }
}

#[derive(Default)]
pub struct FailureLog {
    recent: Mutex<VecDeque<Failure>>,
}

impl FailureLog {
    fn recent(&self) -> MutexGuard<'_, VecDeque<Failure>> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Newest first, at most [`RECENT_FAILURES`].
    pub fn list(&self) -> Vec<Failure> {
        self.recent().iter().cloned().collect()
    }

    /// Records `failure` unless the same attempt already failed for the same reason (a failed
    /// launch is reported, then concluded); returns whether it was added.
    pub fn push(&self, failure: Failure) -> bool {
        let mut recent = self.recent();
        let seen = failure.attempt_id.is_some()
            && recent
                .iter()
                .any(|old| old.attempt_id == failure.attempt_id && old.reason == failure.reason);
        if seen {
            return false;
        }
        recent.push_front(failure);
        recent.truncate(RECENT_FAILURES);
        true
    }

    /// Learns from one agent event; announces a new failure. True when the log changed.
    /// `job` names the job GitHub gave the runner, when the listings saw it.
    pub fn on_event(&self, event: &AgentEvent, job: Option<&str>, watchers: &Watchers) -> bool {
        let (attempt, reason, exit) = match &event.kind {
            EventKind::Concluded {
                attempt,
                outcome: Outcome::Failed(reason),
                exit,
                ..
            } => (attempt, *reason, *exit),
            EventKind::LaunchFailed {
                attempt, reason, ..
            } => (attempt, *reason, None),
            EventKind::CleanupDeferred { attempt, .. } => {
                (attempt, FailureReason::WorkspaceCleanupDeferred, None)
            }
            _ => return false,
        };
        let mut f = failure(
            UnixMillis(event.at.as_millis()),
            &event.target.to_string(),
            attempt,
            reason,
        );
        f.detail = detail(reason, exit, job);
        if !self.push(f.clone()) {
            return false;
        }
        watchers.event(Event::RunnerFailed { failure: f });
        true
    }
}

fn failure(at: UnixMillis, target: &str, attempt: &AttemptId, reason: FailureReason) -> Failure {
    Failure {
        at,
        target: target.to_string(),
        attempt_id: Some(attempt.to_string()),
        reason: via(reason.as_str(), rm_proto::FailureReason::Unknown),
        detail: None,
        fix: fix_for(reason).to_string(),
    }
}

/// This runner's story in a sentence: which job it was running and how its process ended.
fn detail(
    reason: FailureReason,
    exit: Option<rm_core::ProcessExit>,
    job: Option<&str>,
) -> Option<String> {
    let job = job.map_or_else(
        || "its job (GitHub's listings did not name it)".to_owned(),
        |j| format!("job {j}"),
    );
    match (reason, exit) {
        (FailureReason::RunnerCrashed, Some(exit)) => Some(format!(
            "The runner {} while running {job}.",
            exit.describe()
        )),
        (FailureReason::RunnerCrashed, None) => {
            Some(format!("The runner died while running {job}."))
        }
        (_, Some(exit)) if !exit.is_clean() => Some(format!("The runner {}.", exit.describe())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rm_core::{Target, Timestamp};

    fn event(kind: EventKind) -> AgentEvent {
        AgentEvent {
            target: Target::parse("octo/app").unwrap(),
            at: Timestamp::from_millis(5),
            kind,
        }
    }

    #[test]
    fn a_failure_is_logged_and_announced_once_per_attempt_and_reason() {
        let log = FailureLog::default();
        let watchers = Watchers::default();
        let mut rx = watchers.subscribe();
        let attempt = AttemptId::new("failedone1").unwrap();
        let launch = event(EventKind::LaunchFailed {
            attempt: attempt.clone(),
            reason: FailureReason::ProcessStartFailed,
            failure: rm_agent::LaunchFailure::Spawn {
                detail: "Permission denied".into(),
            },
        });
        assert!(log.on_event(&launch, None, &watchers));
        let concluded = event(EventKind::Concluded {
            attempt: attempt.clone(),
            outcome: Outcome::Failed(FailureReason::ProcessStartFailed),
            exit: None,
            deregistered: true,
            replace: true,
        });
        assert!(
            !log.on_event(&concluded, None, &watchers),
            "the same failure again"
        );
        let listed = log.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].target, "octo/app");
        assert!(listed[0]
            .fix
            .contains("permissions of the runner directory"));
        assert!(matches!(
            rx.try_recv(),
            Ok(rm_proto::WatchMessage::Event {
                event: Event::RunnerFailed { .. }
            })
        ));
        assert!(rx.try_recv().is_err(), "announced once");
        assert!(!log.on_event(&event(EventKind::Cleaned { attempt }), None, &watchers));
    }

    #[test]
    fn the_log_keeps_the_newest_few() {
        let log = FailureLog::default();
        for i in 0..(RECENT_FAILURES + 5) {
            let id = AttemptId::new(format!("attempt{i:04}")).unwrap();
            log.push(failure(
                UnixMillis(i as i64),
                "octo/app",
                &id,
                FailureReason::JitExpired,
            ));
        }
        let listed = log.list();
        assert_eq!(listed.len(), RECENT_FAILURES);
        assert_eq!(listed[0].at, UnixMillis((RECENT_FAILURES + 4) as i64));
    }
}
