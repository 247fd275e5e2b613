//! The event pump: turns the agent's broadcast into what clients see (watch events, the
//! recent-failure ring, demand per policy, launch problems, host checks), records the last GitHub contact when a pass
//! actually reached GitHub, and notices auth state changes (renewal failures happen inside
//! the client, not in an event). It also publishes the status again when a demand poll learnt
//! which job a runner took, and learns the signed-in login (`GET /user`) when it is missing.

use super::state::Daemon;
use super::status::{job_of, via};
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

/// What the pump remembers between events.
#[derive(Default)]
struct Seen {
    /// When the last GitHub contact was written (at most once a second).
    last_recorded: Option<Instant>,
    /// The client's runner-job version last published.
    jobs_version: u64,
}

/// Runs until the agent's channel closes.
pub async fn pump(daemon: Arc<Daemon>, mut rx: Receiver<AgentEvent>) {
    let mut seen = Seen {
        jobs_version: daemon.client.runner_jobs_version(),
        ..Seen::default()
    };
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
        if handle(&daemon, &event, &mut seen).await {
            daemon.publish_status().await;
        }
    }
}

/// Handles one event; true when the status changed in a way watchers should see.
async fn handle(daemon: &Daemon, event: &AgentEvent, seen: &mut Seen) -> bool {
    let at = UnixMillis(event.at.as_millis());
    let target = event.target.to_string();
    let publish = |e: Event| daemon.publish(WatchMessage::Event { event: e });
    match &event.kind {
        EventKind::PassCompleted { reached_github, .. } => {
            // Only a pass that got an answer from GitHub is a contact. Status reads it from
            // memory; the journal copy (for `status` without a service, and across restarts)
            // is written at most once a minute and at shutdown.
            if *reached_github {
                daemon.note_contact(chrono::Utc::now().timestamp_millis());
                if seen
                    .last_recorded
                    .is_none_or(|t| t.elapsed() >= CONTACT_SAVE_EVERY)
                {
                    seen.last_recorded = Some(Instant::now());
                    save_last_contact(daemon).await;
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
            // The poll that counted demand also read the jobs listings that name each
            // runner's job: watchers see a newly learnt job at once.
            let version = daemon.client.runner_jobs_version();
            let news = version != seen.jobs_version;
            seen.jobs_version = version;
            news
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
            let job = job_of(daemon, &name).map(Box::new);
            publish(Event::RunnerStateChanged {
                at,
                attempt_id: attempt.to_string(),
                runner_name: name,
                target,
                from: via(from.as_str(), rm_proto::RunnerState::Unknown),
                to: via(to.as_str(), rm_proto::RunnerState::Unknown),
                job,
            });
            true
        }
        EventKind::Concluded {
            attempt,
            outcome: o,
            ..
        } => {
            let name = runner_name(daemon, attempt).await;
            let job = job_of(daemon, &name).map(Box::new);
            publish(Event::RunnerConcluded {
                at,
                attempt_id: attempt.to_string(),
                runner_name: name,
                target: target.clone(),
                outcome: outcome(o),
                job,
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
            let name = runner_name(daemon, attempt).await;
            daemon.client.forget_runner_job(&name);
            publish(Event::RunnerCleaned {
                at,
                attempt_id: attempt.to_string(),
                target,
            });
            true
        }
        EventKind::LaunchBackoff { .. }
        | EventKind::LaunchGaveUp { .. }
        | EventKind::LaunchHealthy { .. }
        | EventKind::GitHubRefused { .. } => daemon.launch.on_event(&daemon.journal, event).await,
        EventKind::HostChecked { checks } => {
            daemon.doctor.note_loop_checks(checks);
            true
        }
        EventKind::PolicyStateChanged { .. } => {
            daemon.launch.on_event(&daemon.journal, event).await;
            true
        }
        EventKind::Reserved { .. } | EventKind::Adopted { .. } | EventKind::Drained { .. } => true,
        EventKind::LaunchRetry { .. }
        | EventKind::Recovered { .. }
        | EventKind::TerminateRequested { .. }
        | EventKind::DeregisterRefused { .. } => false,
    }
}

/// Publishes `auth_changed` (and `sign_in_required`) when the client's auth state changes, e.g.
/// a renewal refused by GitHub. A credential whose login GitHub has not confirmed yet (handed
/// over while the host had no target, or GitHub was unreachable then) gets it learnt here, once
/// the host has a target: a host without targets stays off the network.
pub async fn watch_auth(daemon: Arc<Daemon>, every: Duration) {
    let mut last = daemon.client.auth_state();
    let mut login_known = false;
    let mut next_ask = Instant::now();
    loop {
        if !login_known && is_signed_in(&last) && Instant::now() >= next_ask {
            // At most once a minute while GitHub cannot say.
            next_ask = Instant::now() + LOGIN_RETRY;
            if login_verified(&daemon).await {
                login_known = true;
            } else if !has_targets(&daemon).await {
                next_ask = Instant::now() + TARGETS_RECHECK;
            } else if let Some(login) = learn_login(&daemon).await {
                login_known = store_login(&daemon, &login).await;
                if login_known {
                    publish_auth(&daemon).await;
                }
            }
        }
        tokio::time::sleep(every).await;
        let now = daemon.client.auth_state();
        if now == last {
            continue;
        }
        // A new credential may belong to someone else: check the login again.
        login_known = false;
        next_ask = Instant::now();
        last = now;
        publish_auth(&daemon).await;
    }
}

/// Publishes the status again whenever GitHub's health changes: the client signals an outage
/// beginning, each longer wait, its end, and a rate limit (no polling). A rate limit ends by
/// itself, so that one is looked at again when it lifts.
pub async fn watch_health(daemon: Arc<Daemon>) {
    let mut changes = daemon.client.health_changes();
    let mut last = daemon.client.health();
    loop {
        let lifts = match (&last.state, last.next_try) {
            (rm_github::HealthState::RateLimited, Some(at)) => {
                (at - chrono::Utc::now()).to_std().unwrap_or_default()
            }
            _ => Duration::MAX,
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(lifts), if lifts != Duration::MAX => {}
        }
        let now = daemon.client.health();
        if now != last {
            tracing::info!(state = ?now.state, failures = now.consecutive_failures, next_try = ?now.next_try, "GitHub health changed");
            last = now;
            daemon.publish_status().await;
        }
    }
}

/// Whether the journal has any policy: without one the host opens no network connection.
/// A failed read counts as none (asking GitHub can wait for the next look).
pub async fn has_targets(daemon: &Daemon) -> bool {
    daemon
        .journal
        .with(|j| j.list_policies())
        .await
        .map(|p| !p.is_empty())
        .unwrap_or(false)
}

fn is_signed_in(state: &rm_github::AuthState) -> bool {
    matches!(state, rm_github::AuthState::SignedIn { .. })
}

/// How often the last GitHub contact is written to the journal while passes reach GitHub.
const CONTACT_SAVE_EVERY: Duration = Duration::from_secs(60);

/// Writes this process's last GitHub contact to the journal (nothing when there was none).
pub async fn save_last_contact(daemon: &Daemon) {
    let Some(at) = daemon.last_contact() else {
        return;
    };
    let at = at.to_string();
    if let Err(e) = daemon
        .journal
        .with(move |j| j.meta_set(rm_journal::meta_keys::LAST_GITHUB_CONTACT_MS, &at))
        .await
    {
        tracing::warn!(error = %e, "last GitHub contact not recorded");
    }
}

/// How often the auth watcher asks `GET /user` again while the login is unknown.
const LOGIN_RETRY: Duration = Duration::from_secs(60);

/// How often the auth watcher looks for a first target while the login waits for one.
const TARGETS_RECHECK: Duration = Duration::from_secs(2);

/// How long asking GitHub who signed in may take before sign-in goes on without the login.
const LOGIN_DEADLINE: Duration = Duration::from_secs(15);

/// Asks GitHub whose credential the service holds (`GET /user`); `None` (logged) when it
/// cannot be learnt now.
pub async fn learn_login(daemon: &Daemon) -> Option<String> {
    match tokio::time::timeout(LOGIN_DEADLINE, daemon.client.current_login()).await {
        Ok(Ok(login)) => Some(login),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not learn the signed-in login from GitHub");
            None
        }
        Err(_) => {
            tracing::warn!(
                deadline_secs = LOGIN_DEADLINE.as_secs(),
                "GitHub did not say who signed in in time"
            );
            None
        }
    }
}

/// Whether the stored login came from GitHub (not only from the signing-in client).
async fn login_verified(daemon: &Daemon) -> bool {
    use super::state::meta;
    daemon
        .journal
        .with(|j| Ok((j.meta_get(meta::LOGIN)?, j.meta_get(meta::LOGIN_VERIFIED)?)))
        .await
        .is_ok_and(|(login, verified)| {
            login.is_some_and(|l| !l.is_empty()) && verified.as_deref() == Some("1")
        })
}

async fn store_login(daemon: &Daemon, login: &str) -> bool {
    let login = login.to_string();
    match daemon
        .journal
        .with(move |j| {
            j.meta_set(super::state::meta::LOGIN, &login)?;
            j.meta_set(super::state::meta::LOGIN_VERIFIED, "1")
        })
        .await
    {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "the signed-in login was not recorded");
            false
        }
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
