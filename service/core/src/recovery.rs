//! The supervision decision: one pure function, [`decide`], used on every supervision pass and
//! by startup recovery (which only supplies the first observation).
//!
//! The caller observes the attempt (is its process alive, what GitHub says, what the runner's
//! `_diag` directory holds — read *before* cleanup deletes it) and carries out the decision.
//! Attempts of unknown policies must not be passed here: they are left untouched (no ownership
//! proof) but still count against capacity.
//!
//! For `allocated`/`jit_received` attempts `process_alive` means "a runner process for this
//! attempt was found" (e.g. by its runtime directory). An `allocated` attempt cannot have one
//! (the JIT config comes first), so it is ignored there. The caller must not pass attempts it is
//! launching right now.
//!
//! # Decision table
//!
//! Rows are checked in order; the first that applies wins. "listed" = GitHub shows the runner.
//!
//! | row | state                 | process | GitHub             | also                         | decision |
//! |-----|-----------------------|---------|--------------------|------------------------------|----------|
//! | R1  | cleaned               | any     | any                |                              | Nothing |
//! | R2  | finished/failed/orphaned | alive | unreachable      |                              | Defer (never kill while blind) |
//! | R3  | finished/failed/orphaned | any  | any                |                              | Clean |
//! | R4  | not concluded         | any     | unreachable        | dead, intent, or a timeout due | Defer |
//! | R5  | not concluded         | any     | unreachable        | nothing due                  | Wait |
//! | R6  | jit_received          | alive   | any                |                              | Adopt (caller records the recovered process) |
//! | R7  | allocated/jit_received| dead    | listed             |                              | Conclude failed(jit_expired), deregister, replace |
//! | R8  | allocated             | —       | not registered     |                              | Conclude failed(launch_interrupted), replace |
//! | R9  | jit_received          | dead    | not registered     |                              | Conclude failed(jit_expired), replace |
//! | R10 | starting/idle/busy    | alive   | busy               |                              | busy: Adopt; else Observe(Busy) — never interrupt a job |
//! | R11 | starting/idle/busy    | alive   | idle/not registered| terminate intent             | Terminate{intent} (re-issue the stop) |
//! | R11a| starting/idle         | alive   | idle/not registered| worker log (a job started)   | Observe(Busy): the runner's own word, before GitHub's listings say so |
//! | R12 | starting              | alive   | idle               |                              | Observe(Idle) |
//! | R13 | starting              | alive   | not registered     | < registration timeout       | Wait |
//! | R14 | starting              | alive   | not registered     | ≥ registration timeout       | Terminate{registration_timeout} |
//! | R15 | idle                  | alive   | idle/not registered| ≥ idle timeout               | Terminate{idle_surplus} |
//! | R16 | idle                  | alive   | idle               | < idle timeout               | Nothing |
//! | R17 | idle                  | alive   | not registered     | < idle timeout               | Wait (runner ending) |
//! | R18 | busy                  | alive   | idle               | no worker log                | Observe(Idle) (assignment not taken up) |
//! | R19 | busy                  | alive   | idle               | worker log                   | Wait (job running or done, runner ending) |
//! | R20 | busy                  | alive   | not registered     |                              | Adopt (job ending, never interrupt) |
//! | R21 | starting/idle/busy    | dead    | any                | the listener said its job completed | Conclude completed_job, deregister if listed |
//! | R22 | starting/idle/busy    | dead    | any                | a job started (busy or worker log), no intent, the exit was a signal or non-zero | Conclude failed(runner_crashed) with the exit, deregister if listed, replace |
//! | R23 | starting/idle/busy    | dead    | any                | a job started, no intent, exit clean or unknown | Conclude orphaned, deregister if listed, replace |
//! | R24 | starting/idle/busy    | dead    | busy               |                              | Conclude orphaned, deregister, replace |
//! | R25 | starting/idle/busy    | dead    | idle/not registered| terminate intent             | Conclude the intent's outcome, deregister if listed |
//! | R26 | starting/idle/busy    | dead    | idle               |                              | Conclude orphaned, deregister, replace |
//! | R27 | starting/idle/busy    | dead    | not registered     | runner log only              | Conclude exited_idle_without_work |
//! | R28 | starting/idle         | dead    | not registered     | no diagnostics               | idle → exited_idle_without_work; starting → failed(process_exited_unexpectedly), replace |
//!
//! A job's success is never assumed: only the listener's own "Job … completed with result"
//! (R21) concludes `completed_job`. A runner that took a job and died without it is a crash when
//! the service saw it die by a signal or a non-zero code, and `orphaned` when it cannot know.
//!
//! `deregister` is true exactly when GitHub still lists the runner (no wasted DELETE). The
//! caller deregisters first, then journals the outcome, then cleans. A `Terminate` is carried
//! out as: journal the intent ([`Attempt::record_terminate_intent`]), stop the process; the next
//! pass sees it dead and concludes (R25). GitHub being unreachable never yields Conclude,
//! Terminate or Clean for an attempt that is not concluded, nor Clean of a live process.

use crate::attempt::{
    Attempt, AttemptState, FailureReason, Observed, Outcome, ProcessExit, TerminateReason,
    TransitionError,
};
use crate::time::Timestamp;
use std::time::Duration;

/// GitHub's view of the runner, from the inventory listed this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitHubView {
    /// The inventory could not be read: nothing destructive may be decided.
    Unreachable,
    /// No runner of this attempt's name is listed.
    NotRegistered,
    Registered {
        busy: bool,
    },
}

impl GitHubView {
    pub fn is_listed(self) -> bool {
        matches!(self, GitHubView::Registered { .. })
    }
}

/// What the runner's own diagnostics say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// The listener reported its job completed ("Job … completed with result: …").
    JobCompleted,
    /// A `_diag/Worker_*.log` exists but no completion was reported: a job started and, if the
    /// runner is gone, never finished.
    JobStarted,
    /// Only `_diag/Runner_*.log`: the listener ran, no job did.
    RunnerLogOnly,
    /// No diagnostics (missing or unreadable).
    None,
}

impl Evidence {
    /// A job started on the runner (whether or not it completed).
    pub fn job_ran(self) -> bool {
        matches!(self, Evidence::JobCompleted | Evidence::JobStarted)
    }
}

/// One observation of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub process_alive: bool,
    pub github: GitHubView,
    pub evidence: Evidence,
    /// How the process ended, when the service saw it end (`None`: alive, or not known).
    pub exit: Option<ProcessExit>,
    pub now: Timestamp,
}

/// How long a runner may take to register, and how long it may sit idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub registration: Duration,
    pub idle: Duration,
}

impl Default for Timeouts {
    /// 300 s each, as the reference system.
    fn default() -> Self {
        Timeouts {
            registration: Duration::from_secs(300),
            idle: Duration::from_secs(300),
        }
    }
}

/// A decided conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conclusion {
    pub outcome: Outcome,
    /// Deregister from GitHub first: true only when GitHub still lists the runner.
    pub deregister: bool,
    /// Ask for a replacement if demand remains (the allocator still decides).
    pub replace: bool,
    /// `completed_job` rests on the runner's diagnostics rather than on having been seen busy.
    pub worker_log: bool,
    /// How the runner's process ended, when known (a crash carries it to the user).
    pub exit: Option<ProcessExit>,
}

impl Conclusion {
    fn new(outcome: Outcome, github: GitHubView) -> Self {
        Conclusion {
            outcome,
            deregister: github.is_listed(),
            replace: outcome.wants_replacement(),
            worker_log: false,
            exit: None,
        }
    }

    /// Records this conclusion on the attempt (after deregistering, if asked).
    pub fn apply(&self, attempt: &mut Attempt, now: Timestamp) -> Result<(), TransitionError> {
        if self.worker_log {
            attempt.conclude_after_worker_log(now)
        } else {
            attempt.conclude(self.outcome, now)
        }
    }
}

/// What to do with an attempt this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Steady state; nothing is due.
    Nothing,
    /// Waiting for something outside (registration, GitHub, the runner to exit).
    Wait,
    /// Something destructive is due but must wait until GitHub is reachable again.
    Defer,
    /// A live runner is ours and stays (at startup: adopt it; for `jit_received`, record the
    /// recovered process identity).
    Adopt,
    /// Record what GitHub shows the live runner doing.
    Observe(Observed),
    /// Deregister if asked, then journal the outcome, then clean.
    Conclude(Conclusion),
    /// Journal the terminate intent, then stop the process; the next pass concludes.
    Terminate { reason: TerminateReason },
    /// Kill what is left, remove the runtime directory, verify, journal `cleaned`.
    Clean,
}

impl Decision {
    /// Whether the decision changes the world (GitHub, a process, the runtime directory).
    pub fn is_destructive(&self) -> bool {
        matches!(
            self,
            Decision::Conclude(_) | Decision::Terminate { .. } | Decision::Clean
        )
    }
}

/// The decision for one attempt (see the module table).
pub fn decide(attempt: &Attempt, obs: &Observation, timeouts: &Timeouts) -> Decision {
    use AttemptState::*;
    let state = attempt.state();
    let alive = obs.process_alive && state != Allocated;
    let gh = obs.github;

    // R1–R3: concluded attempts only need cleaning.
    if state == Cleaned {
        return Decision::Nothing;
    }
    if state.is_concluded() {
        if alive && gh == GitHubView::Unreachable {
            return Decision::Defer;
        }
        return Decision::Clean;
    }

    let in_state = attempt.time_in_state(obs.now);
    let timeout_due = match state {
        Starting => in_state >= timeouts.registration,
        Idle => in_state >= timeouts.idle,
        _ => false,
    };

    // R4–R5: blind, so nothing destructive.
    if gh == GitHubView::Unreachable {
        let due = !alive || attempt.terminate_intent().is_some() || timeout_due;
        return if due { Decision::Defer } else { Decision::Wait };
    }

    match state {
        Allocated | JitReceived => before_start(state, alive, gh),
        Starting | Idle | Busy if alive => live(attempt, state, gh, obs.evidence, timeout_due),
        _ => dead(attempt, state, gh, obs.evidence, obs.exit),
    }
}

fn before_start(state: AttemptState, alive: bool, gh: GitHubView) -> Decision {
    if state == AttemptState::JitReceived && alive {
        return Decision::Adopt; // R6
    }
    // R7 (listed), R8 (allocated, unlisted), R9 (jit_received, unlisted).
    let reason = match (state, gh.is_listed()) {
        (AttemptState::Allocated, false) => FailureReason::LaunchInterrupted,
        _ => FailureReason::JitExpired,
    };
    Decision::Conclude(Conclusion::new(Outcome::Failed(reason), gh))
}

fn live(
    attempt: &Attempt,
    state: AttemptState,
    gh: GitHubView,
    evidence: Evidence,
    timeout_due: bool,
) -> Decision {
    use AttemptState::*;
    // R10: a job is running; nothing may interrupt it.
    if gh == (GitHubView::Registered { busy: true }) {
        return if state == Busy {
            Decision::Adopt
        } else {
            Decision::Observe(Observed::Busy)
        };
    }
    // R11
    if let Some(reason) = attempt.terminate_intent() {
        return Decision::Terminate { reason };
    }
    // R11a: the runner's worker started: busy now, not when GitHub's answers catch up.
    if matches!(state, Starting | Idle) && evidence.job_ran() {
        return Decision::Observe(Observed::Busy);
    }
    let listed = gh.is_listed();
    let registration_timeout = Decision::Terminate {
        reason: TerminateReason::RegistrationTimeout,
    };
    let idle_surplus = Decision::Terminate {
        reason: TerminateReason::IdleSurplus,
    };
    match state {
        // R12, R14, R13
        Starting if listed => Decision::Observe(Observed::Idle),
        Starting if timeout_due => registration_timeout,
        Starting => Decision::Wait,
        // R15, R16, R17
        Idle if timeout_due => idle_surplus,
        Idle if listed => Decision::Nothing,
        Idle => Decision::Wait,
        // R18, R19: GitHub shows a busy runner idle again.
        Busy if listed && !evidence.job_ran() => Decision::Observe(Observed::Idle),
        Busy if listed => Decision::Wait,
        // R20: busy, unlisted: the job is ending; never interrupt it.
        _ => Decision::Adopt,
    }
}

fn dead(
    attempt: &Attempt,
    state: AttemptState,
    gh: GitHubView,
    evidence: Evidence,
    exit: Option<ProcessExit>,
) -> Decision {
    use AttemptState::*;
    let intent = attempt.terminate_intent();
    let job_started = (state == Busy || evidence.job_ran()) && intent.is_none();
    let conclusion = if evidence == Evidence::JobCompleted {
        Conclusion {
            worker_log: true,
            ..Conclusion::new(Outcome::CompletedJob, gh) // R21
        }
    } else if job_started && exit.is_some_and(|e| !e.is_clean()) {
        Conclusion {
            exit,
            ..Conclusion::new(Outcome::Failed(FailureReason::RunnerCrashed), gh) // R22
        }
    } else if job_started || gh == (GitHubView::Registered { busy: true }) {
        Conclusion {
            exit,
            ..Conclusion::new(Outcome::Orphaned, gh) // R23, R24
        }
    } else if let Some(reason) = intent {
        Conclusion::new(reason.outcome(), gh) // R25
    } else if gh.is_listed() {
        Conclusion::new(Outcome::Orphaned, gh) // R26
    } else if evidence == Evidence::RunnerLogOnly {
        Conclusion::new(Outcome::ExitedIdleWithoutWork, gh) // R27
    } else {
        // R28: the diagnostics say nothing and no job was seen: GitHub's last sample decides.
        let outcome = match state {
            Idle => Outcome::ExitedIdleWithoutWork,
            _ => Outcome::Failed(FailureReason::ProcessExitedUnexpectedly),
        };
        Conclusion::new(outcome, gh)
    };
    Decision::Conclude(conclusion)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempt::{ProcessExit, ProcessIdentity};
    use crate::ids::{AttemptId, PolicyId};

    const T0: i64 = 1_000_000;
    const PROC: ProcessIdentity = ProcessIdentity {
        pid: 7,
        start_time: 1,
    };
    const BUSY: GitHubView = GitHubView::Registered { busy: true };
    const IDLE: GitHubView = GitHubView::Registered { busy: false };
    const GONE: GitHubView = GitHubView::NotRegistered;
    const BLIND: GitHubView = GitHubView::Unreachable;

    /// An attempt that entered `state` at T0.
    fn attempt(state: AttemptState) -> Attempt {
        let now = Timestamp::from_millis(T0);
        let mut a = Attempt::allocate(AttemptId::new("recover01").unwrap(), PolicyId::new(1), now);
        use AttemptState::*;
        if state == Allocated {
            return a;
        }
        a.record_jit(5, now).unwrap();
        if state == JitReceived {
            return a;
        }
        a.record_started(PROC, now).unwrap();
        match state {
            Starting => {}
            Idle => a.observe(Observed::Idle, now).unwrap(),
            Busy => a.observe(Observed::Busy, now).unwrap(),
            Finished => a.conclude_after_worker_log(now).unwrap(),
            Failed => a
                .conclude(
                    Outcome::Failed(FailureReason::ProcessExitedUnexpectedly),
                    now,
                )
                .unwrap(),
            Orphaned => a.conclude(Outcome::Orphaned, now).unwrap(),
            Cleaned => {
                a.conclude(Outcome::Orphaned, now).unwrap();
                a.mark_cleaned(now).unwrap();
            }
            Allocated | JitReceived => unreachable!(),
        }
        a
    }

    fn with_intent(state: AttemptState, reason: TerminateReason) -> Attempt {
        let mut a = attempt(state);
        a.record_terminate_intent(reason).unwrap();
        a
    }

    /// Observed `after_secs` after the attempt entered its state.
    fn obs(alive: bool, github: GitHubView, evidence: Evidence, after_secs: u64) -> Observation {
        Observation {
            process_alive: alive,
            github,
            evidence,
            exit: None,
            now: Timestamp::from_millis(T0) + Duration::from_secs(after_secs),
        }
    }

    fn d(a: &Attempt, o: Observation) -> Decision {
        decide(a, &o, &Timeouts::default())
    }

    fn conclude(outcome: Outcome, deregister: bool) -> Decision {
        Decision::Conclude(Conclusion {
            outcome,
            deregister,
            replace: outcome.wants_replacement(),
            worker_log: false,
            exit: None,
        })
    }

    fn failed(reason: FailureReason, deregister: bool) -> Decision {
        conclude(Outcome::Failed(reason), deregister)
    }

    fn terminate(reason: TerminateReason) -> Decision {
        Decision::Terminate { reason }
    }

    #[test]
    fn r1_cleaned_needs_nothing() {
        for gh in [BLIND, GONE, IDLE, BUSY] {
            assert_eq!(
                d(
                    &attempt(AttemptState::Cleaned),
                    obs(true, gh, Evidence::None, 0)
                ),
                Decision::Nothing
            );
        }
    }

    #[test]
    fn r2_concluded_with_a_live_process_is_not_cleaned_while_blind() {
        for s in [
            AttemptState::Finished,
            AttemptState::Failed,
            AttemptState::Orphaned,
        ] {
            assert_eq!(
                d(&attempt(s), obs(true, BLIND, Evidence::None, 0)),
                Decision::Defer
            );
        }
    }

    #[test]
    fn r3_concluded_is_cleaned() {
        for s in [
            AttemptState::Finished,
            AttemptState::Failed,
            AttemptState::Orphaned,
        ] {
            assert_eq!(
                d(&attempt(s), obs(false, BLIND, Evidence::None, 0)),
                Decision::Clean
            );
            assert_eq!(
                d(&attempt(s), obs(true, IDLE, Evidence::None, 0)),
                Decision::Clean
            );
            assert_eq!(
                d(&attempt(s), obs(false, GONE, Evidence::JobCompleted, 0)),
                Decision::Clean
            );
        }
    }

    #[test]
    fn r4_blind_with_something_due_defers() {
        use AttemptState::*;
        // dead
        for s in [Allocated, JitReceived, Starting, Idle, Busy] {
            assert_eq!(
                d(&attempt(s), obs(false, BLIND, Evidence::JobCompleted, 0)),
                Decision::Defer,
                "{s}"
            );
        }
        // timeouts due
        assert_eq!(
            d(&attempt(Starting), obs(true, BLIND, Evidence::None, 300)),
            Decision::Defer
        );
        assert_eq!(
            d(&attempt(Idle), obs(true, BLIND, Evidence::None, 301)),
            Decision::Defer
        );
        // intent journalled
        let a = with_intent(Idle, TerminateReason::IdleSurplus);
        assert_eq!(d(&a, obs(true, BLIND, Evidence::None, 0)), Decision::Defer);
    }

    #[test]
    fn r5_blind_with_nothing_due_waits() {
        use AttemptState::*;
        assert_eq!(
            d(&attempt(Starting), obs(true, BLIND, Evidence::None, 299)),
            Decision::Wait
        );
        assert_eq!(
            d(&attempt(Idle), obs(true, BLIND, Evidence::None, 10)),
            Decision::Wait
        );
        assert_eq!(
            d(&attempt(Busy), obs(true, BLIND, Evidence::None, 10_000)),
            Decision::Wait
        );
        assert_eq!(
            d(&attempt(JitReceived), obs(true, BLIND, Evidence::None, 0)),
            Decision::Wait
        );
    }

    #[test]
    fn r6_jit_received_with_a_live_process_is_adopted() {
        // The crash gap "process spawned but starting not journalled".
        for gh in [GONE, IDLE, BUSY] {
            assert_eq!(
                d(
                    &attempt(AttemptState::JitReceived),
                    obs(true, gh, Evidence::None, 0)
                ),
                Decision::Adopt
            );
        }
    }

    #[test]
    fn r7_registered_but_never_started_is_jit_expired_and_deregistered() {
        for s in [AttemptState::Allocated, AttemptState::JitReceived] {
            for gh in [IDLE, BUSY] {
                let dec = d(&attempt(s), obs(false, gh, Evidence::None, 0));
                assert_eq!(dec, failed(FailureReason::JitExpired, true), "{s}");
                let Decision::Conclude(c) = dec else {
                    unreachable!()
                };
                assert!(c.replace && c.deregister);
            }
        }
        // An allocated attempt cannot own a process; a stray "alive" changes nothing.
        assert_eq!(
            d(
                &attempt(AttemptState::Allocated),
                obs(true, IDLE, Evidence::None, 0)
            ),
            failed(FailureReason::JitExpired, true)
        );
    }

    #[test]
    fn r8_allocated_with_nothing_at_github_was_interrupted() {
        assert_eq!(
            d(
                &attempt(AttemptState::Allocated),
                obs(false, GONE, Evidence::None, 0)
            ),
            failed(FailureReason::LaunchInterrupted, false)
        );
    }

    #[test]
    fn r9_jit_received_dead_and_unlisted_is_jit_expired_without_delete() {
        assert_eq!(
            d(
                &attempt(AttemptState::JitReceived),
                obs(false, GONE, Evidence::None, 0)
            ),
            failed(FailureReason::JitExpired, false)
        );
    }

    #[test]
    fn r10_a_running_job_is_never_interrupted() {
        use AttemptState::*;
        assert_eq!(
            d(&attempt(Busy), obs(true, BUSY, Evidence::None, 100_000)),
            Decision::Adopt
        );
        assert_eq!(
            d(&attempt(Idle), obs(true, BUSY, Evidence::None, 100_000)),
            Decision::Observe(Observed::Busy)
        );
        assert_eq!(
            d(&attempt(Starting), obs(true, BUSY, Evidence::None, 100_000)),
            Decision::Observe(Observed::Busy)
        );
        // Even with a stop already journalled.
        let a = with_intent(Idle, TerminateReason::IdleSurplus);
        assert_eq!(
            d(&a, obs(true, BUSY, Evidence::None, 0)),
            Decision::Observe(Observed::Busy)
        );
    }

    #[test]
    fn r11_a_journalled_intent_is_carried_out_again() {
        let a = with_intent(AttemptState::Starting, TerminateReason::RegistrationTimeout);
        assert_eq!(
            d(&a, obs(true, GONE, Evidence::None, 0)),
            terminate(TerminateReason::RegistrationTimeout)
        );
        let a = with_intent(AttemptState::Idle, TerminateReason::IdleSurplus);
        assert_eq!(
            d(&a, obs(true, IDLE, Evidence::None, 0)),
            terminate(TerminateReason::IdleSurplus)
        );
    }

    #[test]
    fn r11a_a_started_worker_is_busy_before_github_says_so() {
        for s in [AttemptState::Starting, AttemptState::Idle] {
            for gh in [GONE, IDLE] {
                for ev in [Evidence::JobStarted, Evidence::JobCompleted] {
                    assert_eq!(
                        d(&attempt(s), obs(true, gh, ev, 1)),
                        Decision::Observe(Observed::Busy),
                        "{s} {gh:?} {ev:?}"
                    );
                }
            }
            // Our own stop goes on (the intent was journalled before the job came).
            let reason = match s {
                AttemptState::Starting => TerminateReason::RegistrationTimeout,
                _ => TerminateReason::IdleSurplus,
            };
            let a = with_intent(s, reason);
            assert_eq!(
                d(&a, obs(true, IDLE, Evidence::JobStarted, 1)),
                terminate(reason)
            );
        }
    }

    #[test]
    fn r12_starting_and_registered_idle_becomes_idle() {
        assert_eq!(
            d(
                &attempt(AttemptState::Starting),
                obs(true, IDLE, Evidence::None, 5)
            ),
            Decision::Observe(Observed::Idle)
        );
    }

    #[test]
    fn r13_starting_unregistered_within_the_timeout_waits() {
        assert_eq!(
            d(
                &attempt(AttemptState::Starting),
                obs(true, GONE, Evidence::None, 299)
            ),
            Decision::Wait
        );
    }

    #[test]
    fn r14_starting_unregistered_past_the_timeout_is_terminated() {
        assert_eq!(
            d(
                &attempt(AttemptState::Starting),
                obs(true, GONE, Evidence::None, 300)
            ),
            terminate(TerminateReason::RegistrationTimeout)
        );
    }

    #[test]
    fn r15_idle_past_the_timeout_is_stopped_as_surplus() {
        for gh in [IDLE, GONE] {
            assert_eq!(
                d(
                    &attempt(AttemptState::Idle),
                    obs(true, gh, Evidence::None, 300)
                ),
                terminate(TerminateReason::IdleSurplus)
            );
        }
    }

    #[test]
    fn r16_idle_within_the_timeout_needs_nothing() {
        assert_eq!(
            d(
                &attempt(AttemptState::Idle),
                obs(true, IDLE, Evidence::None, 299)
            ),
            Decision::Nothing
        );
    }

    #[test]
    fn r17_idle_and_unlisted_within_the_timeout_waits() {
        assert_eq!(
            d(
                &attempt(AttemptState::Idle),
                obs(true, GONE, Evidence::None, 10)
            ),
            Decision::Wait
        );
    }

    #[test]
    fn r18_busy_shown_idle_without_a_worker_log_goes_back_to_idle() {
        for ev in [Evidence::None, Evidence::RunnerLogOnly] {
            assert_eq!(
                d(&attempt(AttemptState::Busy), obs(true, IDLE, ev, 10)),
                Decision::Observe(Observed::Idle)
            );
        }
    }

    #[test]
    fn r19_busy_shown_idle_with_a_worker_log_waits_for_the_exit() {
        for ev in [Evidence::JobStarted, Evidence::JobCompleted] {
            assert_eq!(
                d(&attempt(AttemptState::Busy), obs(true, IDLE, ev, 10)),
                Decision::Wait
            );
        }
    }

    #[test]
    fn r20_busy_and_unlisted_is_adopted() {
        assert_eq!(
            d(
                &attempt(AttemptState::Busy),
                obs(true, GONE, Evidence::JobCompleted, 10)
            ),
            Decision::Adopt
        );
    }

    const KILLED: ProcessExit = ProcessExit {
        code: None,
        signal: Some(9),
    };
    /// What the sandbox reports for a listener killed by SIGKILL inside it.
    const KILLED_IN_SANDBOX: ProcessExit = ProcessExit {
        code: Some(137),
        signal: None,
    };
    const CLEAN: ProcessExit = ProcessExit {
        code: Some(0),
        signal: None,
    };

    fn dead_with(evidence: Evidence, gh: GitHubView, exit: Option<ProcessExit>) -> Observation {
        Observation {
            exit,
            ..obs(false, gh, evidence, 0)
        }
    }

    fn with_exit(d: Decision, exit: Option<ProcessExit>) -> Decision {
        match d {
            Decision::Conclude(c) => Decision::Conclude(Conclusion { exit, ..c }),
            other => other,
        }
    }

    #[test]
    fn r21_only_the_listeners_own_completion_means_a_job_completed() {
        for s in [
            AttemptState::Starting,
            AttemptState::Idle,
            AttemptState::Busy,
        ] {
            for gh in [GONE, IDLE, BUSY] {
                // Even a non-zero exit after the job completed (e.g. killed while tearing down).
                for exit in [None, Some(CLEAN), Some(KILLED)] {
                    let dec = d(&attempt(s), dead_with(Evidence::JobCompleted, gh, exit));
                    let want = Decision::Conclude(Conclusion {
                        outcome: Outcome::CompletedJob,
                        deregister: gh.is_listed(),
                        replace: false,
                        worker_log: true,
                        exit: None,
                    });
                    assert_eq!(dec, want, "{s} {gh:?} {exit:?}");
                }
            }
        }
    }

    #[test]
    fn r22_a_runner_that_dies_by_a_signal_or_an_error_mid_job_crashed() {
        let crashed = |deregister| failed(FailureReason::RunnerCrashed, deregister);
        for exit in [
            KILLED,
            KILLED_IN_SANDBOX,
            ProcessExit {
                code: Some(1),
                signal: None,
            },
        ] {
            for gh in [GONE, IDLE, BUSY] {
                // Seen busy, whatever the diagnostics say...
                for ev in [
                    Evidence::JobStarted,
                    Evidence::None,
                    Evidence::RunnerLogOnly,
                ] {
                    assert_eq!(
                        d(&attempt(AttemptState::Busy), dead_with(ev, gh, Some(exit))),
                        with_exit(crashed(gh.is_listed()), Some(exit)),
                        "busy {ev:?} {gh:?} {exit:?}"
                    );
                }
                // ...or a job started before it was seen busy.
                for s in [AttemptState::Starting, AttemptState::Idle] {
                    assert_eq!(
                        d(&attempt(s), dead_with(Evidence::JobStarted, gh, Some(exit))),
                        with_exit(crashed(gh.is_listed()), Some(exit)),
                        "{s} {gh:?} {exit:?}"
                    );
                }
            }
        }
        // The failure asks for a replacement (the allocator decides whether demand remains).
        let Decision::Conclude(c) = d(
            &attempt(AttemptState::Busy),
            dead_with(Evidence::JobStarted, BUSY, Some(KILLED)),
        ) else {
            unreachable!()
        };
        assert!(c.replace);
        assert_eq!(
            KILLED_IN_SANDBOX.describe(),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            ProcessExit {
                code: Some(3),
                signal: None
            }
            .describe(),
            "exited with code 3"
        );
    }

    #[test]
    fn r23_a_job_that_never_completed_is_never_a_success() {
        for exit in [None, Some(CLEAN)] {
            for gh in [GONE, IDLE, BUSY] {
                assert_eq!(
                    d(
                        &attempt(AttemptState::Busy),
                        dead_with(Evidence::None, gh, exit)
                    ),
                    with_exit(conclude(Outcome::Orphaned, gh.is_listed()), exit),
                    "{gh:?} {exit:?}"
                );
                assert_eq!(
                    d(
                        &attempt(AttemptState::Idle),
                        dead_with(Evidence::JobStarted, gh, exit)
                    ),
                    with_exit(conclude(Outcome::Orphaned, gh.is_listed()), exit),
                    "{gh:?} {exit:?}"
                );
            }
        }
    }

    #[test]
    fn r24_dead_while_github_shows_it_busy_is_orphaned() {
        for s in [AttemptState::Starting, AttemptState::Idle] {
            for ev in [Evidence::RunnerLogOnly, Evidence::None] {
                assert_eq!(
                    d(&attempt(s), obs(false, BUSY, ev, 0)),
                    conclude(Outcome::Orphaned, true),
                    "{s}"
                );
            }
        }
    }

    #[test]
    fn r25_a_stopped_runner_concludes_with_its_intent() {
        let a = with_intent(AttemptState::Starting, TerminateReason::RegistrationTimeout);
        assert_eq!(
            d(&a, obs(false, GONE, Evidence::RunnerLogOnly, 0)),
            failed(FailureReason::TerminatedAfterRegistrationTimeout, false)
        );
        // Our own stop is not a crash, whatever signal ended it.
        assert_eq!(
            d(&a, dead_with(Evidence::RunnerLogOnly, GONE, Some(KILLED))),
            failed(FailureReason::TerminatedAfterRegistrationTimeout, false)
        );
        let a = with_intent(AttemptState::Idle, TerminateReason::IdleSurplus);
        assert_eq!(
            d(&a, obs(false, IDLE, Evidence::None, 0)),
            conclude(Outcome::ExitedIdleWithoutWork, true)
        );
    }

    #[test]
    fn r26_dead_while_github_shows_it_idle_is_orphaned() {
        for s in [AttemptState::Starting, AttemptState::Idle] {
            assert_eq!(
                d(&attempt(s), obs(false, IDLE, Evidence::RunnerLogOnly, 0)),
                conclude(Outcome::Orphaned, true)
            );
        }
    }

    #[test]
    fn r27_only_a_runner_log_means_no_job_ran() {
        for s in [AttemptState::Starting, AttemptState::Idle] {
            let dec = d(&attempt(s), obs(false, GONE, Evidence::RunnerLogOnly, 0));
            assert_eq!(dec, conclude(Outcome::ExitedIdleWithoutWork, false));
            let Decision::Conclude(c) = dec else {
                unreachable!()
            };
            assert!(!c.replace, "a surplus runner is not replaced");
        }
    }

    #[test]
    fn r28_without_diagnostics_the_last_sample_decides() {
        let o = obs(false, GONE, Evidence::None, 0);
        assert_eq!(
            d(&attempt(AttemptState::Idle), o),
            conclude(Outcome::ExitedIdleWithoutWork, false)
        );
        assert_eq!(
            d(&attempt(AttemptState::Starting), o),
            failed(FailureReason::ProcessExitedUnexpectedly, false)
        );
    }

    #[test]
    fn every_conclusion_applies_to_the_attempt_it_was_decided_for() {
        use AttemptState::*;
        let evidences = [
            Evidence::JobCompleted,
            Evidence::JobStarted,
            Evidence::RunnerLogOnly,
            Evidence::None,
        ];
        for s in [Allocated, JitReceived, Starting, Idle, Busy] {
            for gh in [GONE, IDLE, BUSY] {
                for ev in evidences {
                    for alive in [false, true] {
                        let mut a = attempt(s);
                        let o = obs(alive, gh, ev, 1_000);
                        if let Decision::Conclude(c) = d(&a, o) {
                            c.apply(&mut a, o.now).unwrap();
                            assert_eq!(a.outcome(), Some(c.outcome));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn custom_timeouts_are_honoured() {
        let t = Timeouts {
            registration: Duration::from_secs(10),
            idle: Duration::from_secs(20),
        };
        let o = obs(true, GONE, Evidence::None, 10);
        assert_eq!(
            decide(&attempt(AttemptState::Starting), &o, &t),
            terminate(TerminateReason::RegistrationTimeout)
        );
        let o = obs(true, IDLE, Evidence::None, 19);
        assert_eq!(
            decide(&attempt(AttemptState::Idle), &o, &t),
            Decision::Nothing
        );
    }
}
