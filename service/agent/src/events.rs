//! What the agent tells the rest of the service: a broadcast of [`AgentEvent`]s (for the local
//! API's watch stream and the tray), each also logged with tracing key/value fields. No event
//! carries a secret: the JIT config never leaves the launch.

use rm_core::{
    AttemptId, AttemptState, FailureReason, HostCheck, Outcome, PolicyId, PolicyState, ProcessExit,
    Target, TerminateReason, Timestamp,
};
use std::time::Duration;
use tokio::sync::broadcast;

/// How long each step of one launch took (by the agent's clock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchTimings {
    /// Waiting for the host-wide allocation lock.
    pub lock_wait: Duration,
    /// Waiting for a preparation slot and materializing the runtime directory.
    pub materialize: Duration,
    /// `generate-jitconfig`, retries included, plus the sidecar and journal writes.
    pub register: Duration,
    /// Spawning the listener and journalling `starting`.
    pub spawn: Duration,
    pub total: Duration,
}

/// Why a launch did not reach `starting`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchFailure {
    /// GitHub refused for good (403, 401, 404, invalid): never retried.
    Refused {
        detail: String,
        /// The refusal moved the policy to a state of its own (401 → `authentication_failed`,
        /// 403/404 → `repair_required`), which says what to fix. Other refusals (a 422, an
        /// answer we could not read) have none, so they count toward the launch back-off.
        own_state: bool,
    },
    /// Transient failures outlasted the bounded retries.
    RetriesExhausted {
        tries: u32,
        detail: String,
        /// The last try failed because GitHub was unreachable, answered 5xx or rate-limited
        /// us: a host-wide condition with its own back-off and status (`github_health`), not
        /// this target's fault, so it does not count toward the target's launch back-off
        /// (an outage must not leave targets needing repair).
        github_unavailable: bool,
    },
    /// The demand that justified the launch went away before a retry.
    DemandGone {
        tries: u32,
    },
    Materialize {
        detail: String,
    },
    Spawn {
        detail: String,
    },
    /// A journal write failed; the attempt is left to supervision (journal-first).
    Journal {
        detail: String,
    },
}

impl LaunchFailure {
    /// What happened, in words (no secret: details come from typed errors that carry none).
    pub fn describe(&self) -> String {
        match self {
            LaunchFailure::Refused { detail, .. } => detail.clone(),
            LaunchFailure::RetriesExhausted { tries, detail, .. } => {
                format!("{detail} (after {tries} tries)")
            }
            LaunchFailure::DemandGone { tries } => {
                format!("the queued job went away after {tries} tries")
            }
            LaunchFailure::Materialize { detail } | LaunchFailure::Spawn { detail } => {
                detail.clone()
            }
            LaunchFailure::Journal { detail } => {
                format!("the journal could not be written: {detail}")
            }
        }
    }

    /// Whether this failure counts toward the launch back-off. A refusal with a policy state
    /// of its own (`authentication_failed`, `repair_required`) and GitHub being unavailable
    /// (host-wide, backed off by the client) do not; a launch dropped because its job went
    /// away did not fail.
    pub fn counts_for_backoff(&self) -> bool {
        match self {
            LaunchFailure::Refused { own_state, .. } => !own_state,
            LaunchFailure::RetriesExhausted {
                github_unavailable, ..
            } => !github_unavailable,
            LaunchFailure::DemandGone { .. } => false,
            LaunchFailure::Materialize { .. }
            | LaunchFailure::Spawn { .. }
            | LaunchFailure::Journal { .. } => true,
        }
    }
}

/// Why launches of a policy are failing: what the back-off and the status report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchCause {
    /// A launch failed, or its runner ended before it came online.
    Failed {
        reason: FailureReason,
        /// What happened, in words.
        detail: String,
    },
    /// A required host check failed: nothing was launched and no runner registered.
    HostUnfit { check: HostCheck },
}

impl std::fmt::Display for LaunchCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchCause::Failed { reason, detail } => write!(f, "{reason}: {detail}"),
            LaunchCause::HostUnfit { check } => {
                write!(f, "host check {} failed: {}", check.id, check.detail)
            }
        }
    }
}

/// How a crash gap was closed by supervision or startup recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveredFrom {
    /// `jit_received` was not journalled: the runner id came from the sidecar.
    Sidecar,
    /// Neither journal nor sidecar had the runner id: GitHub's inventory had our name.
    Inventory,
    /// `starting` was not journalled: the live process was found by its runtime directory.
    ProcessFound,
}

/// One event, for one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEvent {
    pub target: Target,
    pub at: Timestamp,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    DemandSeen {
        policy: PolicyId,
        matched: u32,
        unresolvable: u32,
        is_floor: bool,
    },
    /// Reserved in the journal; the launch proceeds.
    Reserved {
        attempt: AttemptId,
        policy: PolicyId,
    },
    LaunchRetry {
        attempt: AttemptId,
        try_number: u32,
        delay: Duration,
        detail: String,
    },
    Launched {
        attempt: AttemptId,
        policy: PolicyId,
        runner_id: u64,
        timings: LaunchTimings,
        /// Slower than the configured threshold (60 s): also logged as a warning.
        slow: bool,
        /// Started for a queue holding a fork's job: it got no persistent workspace and may
        /// not write the caches.
        fork_jobs: bool,
    },
    LaunchFailed {
        attempt: AttemptId,
        reason: FailureReason,
        failure: LaunchFailure,
    },
    StateChanged {
        attempt: AttemptId,
        from: AttemptState,
        to: AttemptState,
    },
    Recovered {
        attempt: AttemptId,
        from: RecoveredFrom,
    },
    /// Startup recovery found the runner alive and kept it.
    Adopted {
        attempt: AttemptId,
        state: AttemptState,
    },
    TerminateRequested {
        attempt: AttemptId,
        reason: TerminateReason,
    },
    /// GitHub refused to delete the registration of a runner whose process is gone (it still
    /// counts it busy). The attempt is concluded anyway; the DELETE is tried again in
    /// `retry_in`, or, when `None`, given up: GitHub removes the registration itself.
    DeregisterRefused {
        attempt: AttemptId,
        retry_in: Option<Duration>,
        /// DELETEs refused so far.
        refusals: u32,
    },
    /// A registration GitHub refused to delete earlier is gone now.
    DeregisteredLate {
        attempt: AttemptId,
    },
    /// The job a runner ran is over and judged (journalled with the attempt).
    JobJudged {
        attempt: AttemptId,
        verdict: rm_core::TrustVerdict,
    },
    Concluded {
        attempt: AttemptId,
        outcome: Outcome,
        /// How the runner's process ended, when the service saw it end.
        exit: Option<ProcessExit>,
        deregistered: bool,
        /// The outcome asks for a replacement if demand remains (the allocator decides).
        replace: bool,
    },
    Cleaned {
        attempt: AttemptId,
    },
    /// The runtime directory could not be removed; retried with backoff. Sent once per attempt.
    CleanupDeferred {
        attempt: AttemptId,
        retryable: bool,
        detail: String,
    },
    PolicyStateChanged {
        policy: PolicyId,
        from: PolicyState,
        to: PolicyState,
    },
    /// Launches of the policy failed `consecutive_failures` times in a row: nothing is tried
    /// before `next_try`.
    LaunchBackoff {
        policy: PolicyId,
        consecutive_failures: u32,
        since: Timestamp,
        next_try: Timestamp,
        cause: LaunchCause,
    },
    /// Launches kept failing: the policy goes to `repair_required` and starts nothing until
    /// the operator retries it.
    LaunchGaveUp {
        policy: PolicyId,
        consecutive_failures: u32,
        since: Timestamp,
        cause: LaunchCause,
    },
    /// The policy's failure count was reset: a runner came online, or the operator retried or
    /// disabled it.
    LaunchHealthy {
        policy: PolicyId,
    },
    /// GitHub refused the target (401, or 403/404): the policy moved to `state`
    /// (`authentication_failed` or `repair_required`). `detail` says what GitHub answered.
    GitHubRefused {
        policy: PolicyId,
        state: PolicyState,
        detail: String,
    },
    /// The required host checks ran (at the first launch, after a failure).
    HostChecked {
        checks: Vec<HostCheck>,
    },
    /// One pass ended. `reached_github`: a GitHub call of this pass succeeded (the daemon
    /// records the last contact from it).
    PassCompleted {
        reached_github: bool,
        launched: u32,
        active_owned: u32,
    },
    /// The drain ended: `remaining` owned runners still active (non-zero after the deadline).
    Drained {
        remaining: u32,
        timed_out: bool,
    },
}

/// Sends events and logs them. Sending never fails the caller: no subscriber is fine.
#[derive(Debug, Clone)]
pub(crate) struct Events {
    pub(crate) tx: broadcast::Sender<AgentEvent>,
    pub(crate) target: Target,
}

impl Events {
    pub(crate) fn emit(&self, at: Timestamp, kind: EventKind) {
        log(&self.target, &kind);
        let _ = self.tx.send(AgentEvent {
            target: self.target.clone(),
            at,
            kind,
        });
    }
}

fn log(target: &Target, kind: &EventKind) {
    // Not `target`: that name is tracing's own (the module path) in most subscribers.
    let gh_target = target.to_string();
    match kind {
        EventKind::DemandSeen {
            policy,
            matched,
            unresolvable,
            is_floor,
        } => tracing::debug!(
            %gh_target, policy = policy.get(), matched, unresolvable, is_floor, "demand seen"
        ),
        EventKind::Reserved { attempt, policy } => {
            tracing::info!(%gh_target, attempt = %attempt, policy = policy.get(), "attempt reserved")
        }
        EventKind::LaunchRetry {
            attempt,
            try_number,
            delay,
            detail,
        } => tracing::warn!(
            %gh_target, attempt = %attempt, try_number, delay_ms = delay.as_millis() as u64,
            error = %detail, "launch step failed transiently; retrying"
        ),
        EventKind::Launched {
            attempt,
            runner_id,
            timings,
            ..
        } => tracing::info!(
            %gh_target, attempt = %attempt, runner_id,
            lock_wait_ms = timings.lock_wait.as_millis() as u64,
            materialize_ms = timings.materialize.as_millis() as u64,
            register_ms = timings.register.as_millis() as u64,
            spawn_ms = timings.spawn.as_millis() as u64,
            total_ms = timings.total.as_millis() as u64,
            "runner launched"
        ),
        EventKind::LaunchFailed {
            attempt,
            reason,
            failure,
        } => tracing::warn!(
            %gh_target, attempt = %attempt, reason = %reason, failure = ?failure, "launch failed"
        ),
        EventKind::StateChanged { attempt, from, to } => tracing::info!(
            %gh_target, attempt = %attempt, from = %from, to = %to, "attempt state changed"
        ),
        EventKind::Recovered { attempt, from } => tracing::info!(
            %gh_target, attempt = %attempt, from = ?from, "crash gap closed"
        ),
        EventKind::Adopted { attempt, state } => tracing::info!(
            %gh_target, attempt = %attempt, state = %state, "live runner adopted"
        ),
        EventKind::TerminateRequested { attempt, reason } => tracing::info!(
            %gh_target, attempt = %attempt, reason = %reason, "stopping runner"
        ),
        EventKind::DeregisterRefused {
            attempt,
            retry_in: Some(retry_in),
            refusals,
        } => tracing::info!(
            %gh_target, attempt = %attempt, refusals, retry_in_secs = retry_in.as_secs(),
            "GitHub still counts the runner busy and refused to delete its registration; trying again later"
        ),
        EventKind::DeregisterRefused {
            attempt,
            retry_in: None,
            refusals,
        } => tracing::warn!(
            %gh_target, attempt = %attempt, refusals,
            "GitHub kept refusing to delete the runner's registration; left for GitHub to remove when it times the job out"
        ),
        EventKind::DeregisteredLate { attempt } => tracing::info!(
            %gh_target, attempt = %attempt, "runner registration removed after GitHub released it"
        ),
        EventKind::Concluded {
            attempt,
            outcome,
            exit,
            deregistered,
            replace,
        } => tracing::info!(
            %gh_target, attempt = %attempt, outcome = %outcome, exit = exit.map(|e| e.describe()), deregistered, replace, "attempt concluded"
        ),
        EventKind::Cleaned { attempt } => {
            tracing::info!(%gh_target, attempt = %attempt, "runtime scrubbed; attempt cleaned")
        }
        EventKind::JobJudged { attempt, verdict } => tracing::info!(
            %gh_target,
            attempt = %attempt,
            trust = %verdict.trust,
            job = ?verdict.job_id,
            run = ?verdict.run_id,
            reason = %verdict.reason,
            "the job's trust"
        ),
        EventKind::CleanupDeferred {
            attempt,
            retryable,
            detail,
        } => tracing::warn!(
            %gh_target, attempt = %attempt, retryable, error = %detail,
            "runtime directory could not be removed yet; retrying with backoff"
        ),
        EventKind::PolicyStateChanged { policy, from, to } => tracing::info!(
            %gh_target, policy = policy.get(), from = %from, to = %to, "policy state changed"
        ),
        EventKind::LaunchBackoff {
            policy,
            consecutive_failures,
            next_try,
            cause,
            ..
        } => tracing::warn!(
            %gh_target, policy = policy.get(), consecutive_failures, next_try = %next_try,
            cause = %cause, "launch failed; backing off"
        ),
        EventKind::LaunchGaveUp {
            policy,
            consecutive_failures,
            cause,
            ..
        } => tracing::error!(
            %gh_target, policy = policy.get(), consecutive_failures, cause = %cause,
            "launches keep failing; the target needs repair and starts nothing until retried"
        ),
        EventKind::LaunchHealthy { policy } => {
            tracing::info!(%gh_target, policy = policy.get(), "launch failures reset")
        }
        EventKind::GitHubRefused {
            policy,
            state,
            detail,
        } => tracing::warn!(
            %gh_target, policy = policy.get(), state = %state, %detail,
            "GitHub refused the target; it starts nothing until fixed"
        ),
        EventKind::HostChecked { checks } => match rm_core::first_blocking(checks) {
            Some(c) => tracing::warn!(
                %gh_target, check = %c.id, detail = %c.detail, "host unfit: nothing is launched (a target set to run without the sandbox is not held back by the sandbox's check)"
            ),
            None => tracing::debug!(%gh_target, checks = checks.len(), "host checks passed"),
        },
        EventKind::PassCompleted {
            reached_github,
            launched,
            active_owned,
        } => tracing::debug!(
            %gh_target, reached_github, launched, active_owned, "pass completed"
        ),
        EventKind::Drained {
            remaining,
            timed_out,
        } => tracing::info!(
            %gh_target, remaining, timed_out, "drain ended"
        ),
    }
}
