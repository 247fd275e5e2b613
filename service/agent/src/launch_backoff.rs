//! Failing launches back off, then stop; an unfit host launches nothing.
//!
//! Per policy, [`rm_core::LaunchHealth`] counts failed launches in a row. A launch that did not
//! reach `starting`, and a runner that ended before it ever came online, count (even when
//! GitHub was not asked: the next try may not be free); a runner seen online (idle or busy)
//! resets the count. After a failure the next launch waits for the back-off, starts one
//! runner at a time and runs the host checks first; after `give_up_after` failures the policy
//! goes to `repair_required` and starts nothing until the operator retries it (`repo set
//! --retry`, or disable then enable), which the loop sees as the policy leaving that state.
//!
//! The host checks ([`RunnerHostPort::check_fitness`]) run at the first launch and before any
//! launch after a failure; a failed required check counts as a failed launch of each policy
//! that wanted one and makes no JIT request (the sandbox's check not for a policy the
//! operator set to run without it: [`rm_core::first_blocking_for`]). Their last result is shared by every loop
//! ([`HostFitness`]), so one loop's failure makes the others check before their next launch.
//!
//! What survives a restart: only what the journal says. A `repair_required` policy stays so;
//! the in-memory count of a policy still backing off starts again at zero, and the host checks
//! run again before the first launch.

use crate::clock::Clock;
use crate::events::{EventKind, LaunchCause, LaunchFailure};
use crate::ports::{GitHubPort, JournalPort, RunnerHostPort};
use crate::target_loop::{locked, TargetLoop};
use rm_core::{
    first_blocking_for, Attempt, AttemptState, BlockCause, FailureReason, HostCheck, LaunchBlock,
    LaunchHealth, LaunchVerdict, Outcome, Policy, PolicyId, PolicyState, Timestamp,
};
use std::hash::BuildHasher;
use std::sync::Mutex;

/// The host checks' last result, shared by every loop of the host.
#[derive(Debug, Default)]
pub struct HostFitness {
    state: Mutex<FitnessState>,
}

#[derive(Debug, Default)]
struct FitnessState {
    /// `None` until the first check.
    checks: Option<Vec<HostCheck>>,
    /// A launch failed since the last check: check again before the next one.
    stale: bool,
}

impl HostFitness {
    /// Whether a launch of a target with the sandbox choice `sandbox` must run the checks
    /// first: never checked, a launch failed since, or the last check found the host unfit
    /// for it.
    pub fn needs_check(&self, sandbox: &rm_core::TargetSandbox) -> bool {
        let st = locked(&self.state);
        match &st.checks {
            None => true,
            Some(checks) => st.stale || first_blocking_for(checks, sandbox).is_some(),
        }
    }

    /// The last result, if any.
    pub fn last(&self) -> Option<Vec<HostCheck>> {
        locked(&self.state).checks.clone()
    }

    fn record(&self, checks: Vec<HostCheck>) {
        let mut st = locked(&self.state);
        st.checks = Some(checks);
        st.stale = false;
    }

    fn mark_stale(&self) {
        locked(&self.state).stale = true;
    }
}

/// One policy's launch failures, with the last cause.
#[derive(Debug, Clone, Default)]
pub(crate) struct LaunchRecord {
    health: LaunchHealth,
    cause: Option<LaunchCause>,
    /// The policy was seen in `repair_required` after giving up: it leaving that state means
    /// the operator retried or disabled it.
    in_repair: bool,
}

/// What the host checks said in this pass: run at most once per pass of a loop.
pub(crate) type PassFitness = Option<Vec<HostCheck>>;

/// A jitter sample: std's `RandomState` is keyed randomly per instance, which is all the
/// jitter needs (no random-number crate for this).
fn jitter_sample(policy: PolicyId, now: Timestamp) -> u64 {
    std::collections::hash_map::RandomState::new().hash_one((policy.get(), now.as_millis()))
}

impl<J, G, H, C> TargetLoop<J, G, H, C>
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    /// The launch back-off's word on `policy`, if it has one.
    pub(crate) fn launch_block(&self, policy: PolicyId) -> Option<LaunchBlock> {
        let launches = locked(&self.launches);
        let record = launches.get(&policy)?;
        let cause = match record.cause.clone()? {
            LaunchCause::Failed { reason, detail } => BlockCause::Failed { reason, detail },
            LaunchCause::HostUnfit { check } => BlockCause::HostUnfit { check },
        };
        let failures = record.health.failures();
        if record.health.gave_up() {
            return Some(LaunchBlock::GaveUp { failures, cause });
        }
        Some(LaunchBlock::BackingOff {
            failures,
            next_try: record.health.next_try()?,
            cause,
        })
    }

    /// How many runners `policy` may start now: none while backing off or given up, or when
    /// the host checks (run first after a failure) find the host unfit; one while probing
    /// after a failure; otherwise no limit from here.
    pub(crate) async fn launch_gate(&self, policy: &Policy, pass: &mut PassFitness) -> u32 {
        let now = self.now();
        let (may_try, probing) = match locked(&self.launches).get(&policy.id()) {
            Some(r) => (r.health.may_try(now), r.health.is_probing()),
            None => (true, false),
        };
        if !may_try {
            return 0;
        }
        let sandbox = self.ports.host.sandbox_choice(policy.id());
        if probing || self.shared.fitness.needs_check(&sandbox) {
            if pass.is_none() {
                let checks = self.ports.host.check_fitness().await;
                self.shared.fitness.record(checks.clone());
                self.emit(EventKind::HostChecked {
                    checks: checks.clone(),
                });
                *pass = Some(checks);
            }
            let blocking = pass
                .as_deref()
                .and_then(|checks| first_blocking_for(checks, &sandbox).cloned());
            if let Some(check) = blocking {
                let cause = LaunchCause::HostUnfit { check };
                self.note_launch_failure(policy.id(), now, cause).await;
                return 0;
            }
        }
        if probing {
            1
        } else {
            u32::MAX
        }
    }

    /// A launch did not reach `starting`: report it, and count it unless it does not count
    /// (see [`LaunchFailure::counts_for_backoff`]).
    pub(crate) async fn launch_failed(
        &self,
        attempt: &Attempt,
        reason: FailureReason,
        failure: LaunchFailure,
    ) {
        let cause = failure.counts_for_backoff().then(|| LaunchCause::Failed {
            reason,
            detail: failure.describe(),
        });
        self.emit(EventKind::LaunchFailed {
            attempt: attempt.id().clone(),
            reason,
            failure,
        });
        if let Some(cause) = cause {
            self.note_launch_failure(attempt.policy_id(), attempt.created_at(), cause)
                .await;
        }
    }

    /// Counts one failure: backs off, or gives up and moves the policy to `repair_required`.
    /// The host is checked again before the next launch of any loop.
    pub(crate) async fn note_launch_failure(
        &self,
        policy: PolicyId,
        tried_at: Timestamp,
        cause: LaunchCause,
    ) {
        if self.count_failure(policy, tried_at, cause) {
            self.enter_repair(policy).await;
        }
    }

    /// [`TargetLoop::note_launch_failure`] without the state change; returns whether the
    /// policy gave up (the next pass moves it to `repair_required` if the caller does not).
    fn count_failure(&self, policy: PolicyId, tried_at: Timestamp, cause: LaunchCause) -> bool {
        let now = self.now();
        let sample = jitter_sample(policy, now);
        let (verdict, failures, since) = {
            let mut launches = locked(&self.launches);
            let record = launches.entry(policy).or_default();
            let verdict =
                record
                    .health
                    .record_failure(&self.config.launch_backoff, tried_at, sample);
            record.cause = Some(cause.clone());
            (
                verdict,
                record.health.failures(),
                record.health.since().unwrap_or(now),
            )
        };
        self.shared.fitness.mark_stale();
        match verdict {
            LaunchVerdict::RetryAt(next_try) => {
                self.emit(EventKind::LaunchBackoff {
                    policy,
                    consecutive_failures: failures,
                    since,
                    next_try,
                    cause,
                });
                false
            }
            LaunchVerdict::GiveUp => {
                self.emit(EventKind::LaunchGaveUp {
                    policy,
                    consecutive_failures: failures,
                    since,
                    cause,
                });
                true
            }
        }
    }

    /// Moves a policy that gave up to `repair_required` (a lost compare-and-set is tried again
    /// next pass: until then the given-up record starts nothing).
    async fn enter_repair(&self, policy: PolicyId) {
        self.set_policy_state(policy, PolicyState::RepairRequired)
            .await;
        let now_in_repair = self
            .policies()
            .iter()
            .any(|p| p.id() == policy && p.state() == PolicyState::RepairRequired);
        if now_in_repair {
            if let Some(r) = locked(&self.launches).get_mut(&policy) {
                r.in_repair = true;
            }
        }
    }

    /// What supervision learnt about a launched runner: seen online resets its policy's
    /// count; ended before it came online (exited, or never registered) counts as a failure.
    pub(crate) fn note_progress(&self, before: &Attempt, after: &Attempt) {
        if before.state() != AttemptState::Starting || after.state() == AttemptState::Starting {
            return;
        }
        let policy = after.policy_id();
        let came_online = matches!(after.state(), AttemptState::Idle | AttemptState::Busy)
            || after.outcome() == Some(Outcome::CompletedJob);
        if came_online {
            let reset = match locked(&self.launches).get_mut(&policy) {
                // Given up stays given up: only the operator's retry clears it.
                Some(r) if !r.health.gave_up() => {
                    let had = r.health.reset();
                    r.cause = None;
                    had
                }
                _ => false,
            };
            if reset {
                self.emit(EventKind::LaunchHealthy { policy });
            }
            return;
        }
        let detail = match after.outcome() {
            Some(Outcome::Failed(FailureReason::ProcessExitedUnexpectedly)) => {
                "the runner exited before it came online (see its _diag logs in the service's log)"
            }
            Some(Outcome::Failed(FailureReason::TerminatedAfterRegistrationTimeout)) => {
                "the runner did not come online within the registration timeout"
            }
            _ => return,
        };
        let reason = match after.outcome() {
            Some(Outcome::Failed(r)) => r,
            _ => return,
        };
        // Supervision goes on with its attempt; the next pass moves a policy that gave up.
        self.count_failure(
            policy,
            after.created_at(),
            LaunchCause::Failed {
                reason,
                detail: detail.to_string(),
            },
        );
    }

    /// After the policies were re-read: a policy that gave up and has left `repair_required`
    /// (retried, or disabled) starts afresh; a disabled one forgets its failures; a policy that
    /// gave up but could not be moved to `repair_required` yet is moved now.
    pub(crate) async fn follow_launch_records(&self) {
        let policies = self.policies();
        let mut reset = Vec::new();
        let mut repair = Vec::new();
        {
            let mut launches = locked(&self.launches);
            launches.retain(|id, _| policies.iter().any(|p| p.id() == *id));
            for p in &policies {
                let Some(r) = launches.get_mut(&p.id()) else {
                    continue;
                };
                match p.state() {
                    PolicyState::RepairRequired => r.in_repair = true,
                    PolicyState::Draining | PolicyState::Disabled => reset.push(p.id()),
                    PolicyState::Pending | PolicyState::Active if r.in_repair => reset.push(p.id()),
                    PolicyState::Pending | PolicyState::Active if r.health.gave_up() => {
                        repair.push(p.id())
                    }
                    _ => {}
                }
            }
            for id in &reset {
                launches.remove(id);
            }
        }
        for policy in reset {
            self.emit(EventKind::LaunchHealthy { policy });
        }
        for policy in repair {
            self.enter_repair(policy).await;
        }
    }
}
