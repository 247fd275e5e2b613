//! Why a target is not launching, from the loops' launch back-off events: each policy's
//! current problem (`TargetStatus.problem`) with the cause in words and the fix.
//!
//! A policy backing off shows `launch_backoff` (or `host_unfit`) with the failures so far and
//! the next try; one that gave up shows `launch_failing` (or `host_unfit`) with the retry
//! command. The given-up problems are kept in the journal's meta table too: the policy stays
//! `repair_required` across a restart, and so does the reason it needs repair. A back-off in
//! progress is not kept (the loops start counting again after a restart).

use super::failure_log::fix_for;
use rm_adapters::JournalAdapter;
use rm_agent::{AgentEvent, EventKind, LaunchCause};
use rm_core::{FailureReason, Policy, PolicyId, PolicyState, Target, Timestamp};
use rm_proto::{ProblemCode, TargetProblem, UnixMillis};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The journal meta key holding the given-up problems (JSON: policy id → problem).

#[derive(Debug, Clone)]
struct Entry {
    problem: TargetProblem,
    gave_up: bool,
}

/// The problems the loops reported, per policy id.
#[derive(Debug, Default)]
pub struct LaunchProblems {
    entries: Mutex<BTreeMap<i64, Entry>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn millis(t: Timestamp) -> UnixMillis {
    UnixMillis(t.as_millis())
}

/// What went wrong, in words.
pub fn reason_words(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::JitRequestFailed => "GitHub did not register the runner",
        FailureReason::JitExpired => "the runner's registration was lost before it started",
        FailureReason::PackageUnverified => "the runner package could not be prepared",
        FailureReason::VersionRejected => "GitHub refused the runner version",
        FailureReason::ProcessStartFailed => "the runner process could not be started",
        FailureReason::ProcessExitedUnexpectedly => "the runner exited before it came online",
        FailureReason::TerminatedAfterRegistrationTimeout => {
            "the runner did not come online in time"
        }
        FailureReason::WorkspaceCleanupDeferred => "a runner directory could not be removed",
        FailureReason::LaunchInterrupted => "the launch was interrupted",
        FailureReason::RunnerCrashed => "the runner died in the middle of its job",
    }
}

/// The command that retries `target`.
pub fn retry_command(target: &Target) -> String {
    let noun = if target.is_organization() {
        "org"
    } else {
        "repo"
    };
    format!("runner-manager {noun} set {target} --retry")
}

/// The problem a GitHub refusal describes: the policy went to `state` because GitHub answered
/// `detail`.
fn refusal_problem(
    target: &Target,
    state: PolicyState,
    detail: &str,
    since: Timestamp,
) -> TargetProblem {
    let (code, message, fix) = if state == PolicyState::AuthenticationFailed {
        (
            ProblemCode::SignInRequired,
            format!("GitHub no longer accepts the service's sign-in ({detail})"),
            "sign in again (`runner-manager auth login`, or Sign in… in the tray); the target \
             resumes by itself"
                .to_string(),
        )
    } else {
        let noun = if target.is_organization() {
            "organization"
        } else {
            "repository"
        };
        (
            ProblemCode::GitHubRefused,
            format!("GitHub refused this {noun}, so it starts nothing: {detail}"),
            format!(
                "check that the GitHub App is installed on {target}, that you are an admin \
                 there and that the name is right; then run `{}`",
                retry_command(target)
            ),
        )
    };
    TargetProblem {
        code,
        message,
        fix,
        since: millis(since),
        consecutive_failures: 0,
        next_try: None,
    }
}

/// The problem a back-off or give-up event describes.
pub(crate) fn problem(
    target: &Target,
    failures: u32,
    since: Timestamp,
    next_try: Option<Timestamp>,
    cause: &LaunchCause,
) -> TargetProblem {
    let gave_up = next_try.is_none();
    let (code, what, fix) = match cause {
        LaunchCause::Failed { reason, detail } => (
            if gave_up {
                ProblemCode::LaunchFailing
            } else {
                ProblemCode::LaunchBackoff
            },
            format!("{} ({detail})", reason_words(*reason)),
            fix_for(*reason).to_string(),
        ),
        LaunchCause::HostUnfit { check } => (
            ProblemCode::HostUnfit,
            format!(
                "this host is unfit, so nothing is launched: host check '{}' failed: {}",
                check.id, check.detail
            ),
            check
                .fix
                .clone()
                .unwrap_or_else(|| "see `runner-manager host doctor`".into()),
        ),
    };
    let (message, fix) = if gave_up {
        (
            format!(
                "{failures} launches failed in a row, so this target starts nothing until it is \
                 retried; the last: {what}"
            ),
            format!("{fix}; then run `{}`", retry_command(target)),
        )
    } else {
        (
            format!(
                "{failures} launch(es) failed in a row; the next is tried after a pause; the \
                 last: {what}"
            ),
            fix,
        )
    };
    TargetProblem {
        code,
        message,
        fix,
        since: millis(since),
        consecutive_failures: failures,
        next_try: next_try.map(millis),
    }
}

impl LaunchProblems {
    /// Adds the given-up problems recorded in the journal (an unreadable record is dropped).
    pub async fn restore(&self, journal: &JournalAdapter) {
        let text = journal
            .with(|j| j.meta_get(crate::meta::LAUNCH_PROBLEMS))
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let saved: BTreeMap<i64, TargetProblem> = serde_json::from_str(&text).unwrap_or_default();
        let mut entries = locked(&self.entries);
        for (id, problem) in saved {
            entries.insert(
                id,
                Entry {
                    problem,
                    gave_up: true,
                },
            );
        }
    }

    /// The problem to show for `policy` in its current state: a given-up one while it is
    /// `repair_required`, a back-off while it may still launch.
    pub fn problem(&self, policy: &Policy) -> Option<TargetProblem> {
        let entries = locked(&self.entries);
        let e = entries.get(&policy.id().get())?;
        let refusal = matches!(
            e.problem.code,
            ProblemCode::GitHubRefused | ProblemCode::SignInRequired
        );
        let shown = match policy.state() {
            PolicyState::RepairRequired => {
                e.gave_up && e.problem.code != ProblemCode::SignInRequired
            }
            PolicyState::AuthenticationFailed => e.problem.code == ProblemCode::SignInRequired,
            PolicyState::Pending | PolicyState::Active => !e.gave_up && !refusal,
            _ => false,
        };
        shown.then(|| e.problem.clone())
    }

    /// Learns from one agent event; true when a problem changed. Given-up problems are
    /// written to the journal.
    pub async fn on_event(&self, journal: &JournalAdapter, event: &AgentEvent) -> bool {
        let (id, entry) = match &event.kind {
            EventKind::LaunchBackoff {
                policy,
                consecutive_failures,
                since,
                next_try,
                cause,
            } => (
                *policy,
                Some(Entry {
                    problem: problem(
                        &event.target,
                        *consecutive_failures,
                        *since,
                        Some(*next_try),
                        cause,
                    ),
                    gave_up: false,
                }),
            ),
            EventKind::LaunchGaveUp {
                policy,
                consecutive_failures,
                since,
                cause,
            } => (
                *policy,
                Some(Entry {
                    problem: problem(&event.target, *consecutive_failures, *since, None, cause),
                    gave_up: true,
                }),
            ),
            EventKind::LaunchHealthy { policy } => (*policy, None),
            EventKind::GitHubRefused {
                policy,
                state,
                detail,
            } => {
                let mut problem = refusal_problem(&event.target, *state, detail, event.at);
                // The same refusal seen again (each pass that asks GitHub) changes nothing.
                if let Some(old) = locked(&self.entries).get(&policy.get()) {
                    if old.problem.code == problem.code && old.problem.message == problem.message {
                        return false;
                    }
                    if old.problem.code == problem.code {
                        problem.since = old.problem.since;
                    }
                }
                (
                    *policy,
                    Some(Entry {
                        problem,
                        gave_up: true,
                    }),
                )
            }
            // Retried, disabled or signed in again: whatever stopped it is the past.
            EventKind::PolicyStateChanged {
                policy,
                from: PolicyState::RepairRequired | PolicyState::AuthenticationFailed,
                ..
            } => (*policy, None),
            _ => return false,
        };
        self.set(journal, id, entry).await
    }

    /// The operator retried `policy`: forget its problem.
    pub async fn forget(&self, journal: &JournalAdapter, policy: PolicyId) {
        self.set(journal, policy, None).await;
    }

    async fn set(&self, journal: &JournalAdapter, policy: PolicyId, entry: Option<Entry>) -> bool {
        let (changed, saved) = {
            let mut entries = locked(&self.entries);
            let was_given_up = entries.get(&policy.get()).is_some_and(|e| e.gave_up);
            let now_given_up = entry.as_ref().is_some_and(|e| e.gave_up);
            let changed = match entry {
                Some(e) => {
                    entries.insert(policy.get(), e);
                    true
                }
                None => entries.remove(&policy.get()).is_some(),
            };
            let saved = (was_given_up || now_given_up).then(|| {
                entries
                    .iter()
                    .filter(|(_, e)| e.gave_up)
                    .map(|(id, e)| (*id, e.problem.clone()))
                    .collect::<BTreeMap<_, _>>()
            });
            (changed, saved)
        };
        if let Some(saved) = saved {
            let text = serde_json::to_string(&saved).unwrap_or_default();
            if let Err(e) = journal
                .with(move |j| j.meta_set(crate::meta::LAUNCH_PROBLEMS, &text))
                .await
            {
                tracing::warn!(error = %e, "the launch problems were not recorded");
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_up_problem_names_the_cause_and_the_retry_command() {
        let target = Target::parse("octo/app").unwrap();
        let cause = LaunchCause::Failed {
            reason: FailureReason::ProcessStartFailed,
            detail: "starting bin/Runner.Listener: Permission denied (os error 13)".into(),
        };
        let p = problem(&target, 5, Timestamp::from_millis(7), None, &cause);
        assert_eq!(p.code, ProblemCode::LaunchFailing);
        assert!(
            p.message.contains("5 launches failed in a row"),
            "{}",
            p.message
        );
        assert!(p.message.contains("Permission denied"), "{}", p.message);
        assert!(
            p.fix
                .ends_with("then run `runner-manager repo set octo/app --retry`"),
            "{}",
            p.fix
        );
        assert_eq!((p.since, p.next_try), (UnixMillis(7), None));
        let org = Target::parse("acme").unwrap();
        assert_eq!(retry_command(&org), "runner-manager org set acme --retry");
        let backing_off = problem(
            &target,
            2,
            Timestamp::from_millis(7),
            Some(Timestamp::from_millis(9)),
            &cause,
        );
        assert_eq!(backing_off.code, ProblemCode::LaunchBackoff);
        assert_eq!(backing_off.next_try, Some(UnixMillis(9)));
        assert!(!backing_off.fix.contains("--retry"));
    }

    #[test]
    fn a_refusal_names_what_github_said_and_the_fix() {
        let target = Target::parse("octo/app").unwrap();
        let p = refusal_problem(
            &target,
            PolicyState::RepairRequired,
            "GitHub refused the request (403): Resource not accessible by integration",
            Timestamp::from_millis(3),
        );
        assert_eq!(p.code, ProblemCode::GitHubRefused);
        assert!(
            p.message.contains("Resource not accessible"),
            "{}",
            p.message
        );
        assert!(p.fix.contains("installed on octo/app"), "{}", p.fix);
        assert!(p.fix.contains("repo set octo/app --retry"), "{}", p.fix);
        let p = refusal_problem(
            &target,
            PolicyState::AuthenticationFailed,
            "GitHub refused the credential (401): sign in again",
            Timestamp::from_millis(3),
        );
        assert_eq!(p.code, ProblemCode::SignInRequired);
        assert!(p.fix.contains("auth login"), "{}", p.fix);
    }
}
