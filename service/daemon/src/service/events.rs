//! The event pump: turns the agent's broadcast into what clients see (watch events, the
//! recent-failure ring, demand per policy), records the last GitHub contact when a pass
//! actually reached GitHub, and notices auth state changes (renewal failures happen inside
//! the client, not in an event).

use super::state::Daemon;
use super::status::via;
use rm_agent::{AgentEvent, EventKind};
use rm_core::{AttemptId, FailureReason, Outcome};
use rm_proto::{Event, Failure, RunnerOutcome, UnixMillis, WatchMessage};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::{error::RecvError, Receiver};

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
    }
}

fn outcome(o: &Outcome) -> RunnerOutcome {
    match o {
        Outcome::CompletedJob => RunnerOutcome::CompletedJob,
        Outcome::ExitedIdleWithoutWork => RunnerOutcome::ExitedIdleWithoutWork,
        Outcome::Failed(_) => RunnerOutcome::Failed,
        Outcome::Orphaned => RunnerOutcome::Orphaned,
    }
}

async fn runner_name(daemon: &Daemon, attempt: &AttemptId) -> String {
    let id = attempt.clone();
    daemon
        .journal
        .with(move |j| j.get_attempt(&id))
        .await
        .ok()
        .flatten()
        .map(|a| a.runner_name().to_string())
        .unwrap_or_default()
}

fn failure(at: UnixMillis, target: &str, attempt: &AttemptId, reason: FailureReason) -> Failure {
    Failure {
        at,
        target: target.to_string(),
        attempt_id: Some(attempt.to_string()),
        reason: via(reason.as_str(), rm_proto::FailureReason::Unknown),
        fix: fix_for(reason).to_string(),
    }
}

/// Runs until the agent's channel closes.
pub async fn pump(daemon: Arc<Daemon>, mut rx: Receiver<AgentEvent>) {
    let mut last_recorded: Option<Instant> = None;
    loop {
        let event = match rx.recv().await {
            Ok(e) => e,
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "event pump lagged behind the agent");
                daemon.publish_status().await;
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if handle(&daemon, &event, &mut last_recorded).await {
            daemon.publish_status().await;
        }
    }
}

/// Handles one event; true when the status changed in a way watchers should see.
async fn handle(daemon: &Daemon, event: &AgentEvent, last_recorded: &mut Option<Instant>) -> bool {
    let at = UnixMillis(event.at.as_millis());
    let target = event.target.to_string();
    let publish = |e: Event| daemon.publish(WatchMessage::Event { event: e });
    match &event.kind {
        EventKind::PassCompleted { reached_github, .. } => {
            // Only a pass that got an answer from GitHub is a contact; at most one write a second.
            if *reached_github
                && last_recorded.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
            {
                *last_recorded = Some(Instant::now());
                let now = chrono::Utc::now().timestamp_millis().to_string();
                if let Err(e) = daemon
                    .journal
                    .with(move |j| j.meta_set(rm_journal::meta_keys::LAST_GITHUB_CONTACT_MS, &now))
                    .await
                {
                    tracing::warn!(error = %e, "last GitHub contact not recorded");
                }
            }
            false
        }
        EventKind::DemandSeen {
            policy,
            matched,
            unresolvable,
            is_floor,
        } => {
            daemon.set_demand(
                policy.get(),
                rm_proto::Demand {
                    queued: *matched,
                    is_floor: *is_floor,
                    unresolvable: *unresolvable,
                },
            );
            false
        }
        EventKind::Launched { attempt, .. } => {
            let name = runner_name(daemon, attempt).await;
            publish(Event::RunnerLaunched {
                at,
                attempt_id: attempt.to_string(),
                runner_name: name,
                target,
            });
            true
        }
        EventKind::StateChanged { attempt, from, to } => {
            let name = runner_name(daemon, attempt).await;
            publish(Event::RunnerStateChanged {
                at,
                attempt_id: attempt.to_string(),
                runner_name: name,
                target,
                from: via(from.as_str(), rm_proto::RunnerState::Unknown),
                to: via(to.as_str(), rm_proto::RunnerState::Unknown),
                job: None,
            });
            true
        }
        EventKind::Concluded {
            attempt,
            outcome: o,
            ..
        } => {
            let name = runner_name(daemon, attempt).await;
            publish(Event::RunnerConcluded {
                at,
                attempt_id: attempt.to_string(),
                runner_name: name,
                target: target.clone(),
                outcome: outcome(o),
                job: None,
            });
            if let Outcome::Failed(reason) = o {
                let f = failure(at, &target, attempt, *reason);
                if daemon.push_failure(f.clone()) {
                    publish(Event::RunnerFailed { failure: f });
                }
            }
            true
        }
        EventKind::LaunchFailed {
            attempt, reason, ..
        } => {
            let f = failure(at, &target, attempt, *reason);
            if daemon.push_failure(f.clone()) {
                publish(Event::RunnerFailed { failure: f });
            }
            true
        }
        EventKind::CleanupDeferred { attempt, .. } => {
            let f = failure(
                at,
                &target,
                attempt,
                FailureReason::WorkspaceCleanupDeferred,
            );
            if daemon.push_failure(f.clone()) {
                publish(Event::RunnerFailed { failure: f });
            }
            true
        }
        EventKind::Cleaned { attempt } => {
            publish(Event::RunnerCleaned {
                at,
                attempt_id: attempt.to_string(),
                target,
            });
            true
        }
        EventKind::PolicyStateChanged { .. }
        | EventKind::Reserved { .. }
        | EventKind::Adopted { .. }
        | EventKind::Drained { .. } => true,
        EventKind::LaunchRetry { .. }
        | EventKind::Recovered { .. }
        | EventKind::TerminateRequested { .. }
        | EventKind::DeregisterRefused { .. } => false,
    }
}

/// Publishes `auth_changed` (and `sign_in_required`) when the client's auth state changes, e.g.
/// a renewal refused by GitHub.
pub async fn watch_auth(daemon: Arc<Daemon>, every: Duration) {
    let mut last = daemon.client.auth_state();
    loop {
        tokio::time::sleep(every).await;
        let now = daemon.client.auth_state();
        if now == last {
            continue;
        }
        last = now;
        publish_auth(&daemon).await;
    }
}

/// Tells watchers about the current auth state.
pub async fn publish_auth(daemon: &Daemon) {
    let at = UnixMillis(chrono::Utc::now().timestamp_millis());
    let (login, expires) = daemon
        .journal
        .with(|j| {
            Ok((
                j.meta_get(super::state::meta::LOGIN)?,
                j.meta_get(super::state::meta::SIGN_IN_EXPIRES_MS)?,
            ))
        })
        .await
        .unwrap_or((None, None));
    let auth = super::status::auth_state(daemon, login, expires.and_then(|e| e.parse().ok()));
    if let rm_proto::AuthState::SignInRequired { reason } = &auth {
        daemon.publish(WatchMessage::Event {
            event: Event::SignInRequired {
                at,
                reason: reason.clone(),
            },
        });
    }
    daemon.publish(WatchMessage::Event {
        event: Event::AuthChanged { at, auth },
    });
    daemon.publish_status().await;
}
