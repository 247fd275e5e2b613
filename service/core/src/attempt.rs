//! One ephemeral runner, from reservation to a scrubbed runtime directory.
//!
//! # States
//!
//! ```text
//! allocated → jit_received → starting → idle ⇄ busy
//!     │            │             │        │      │
//!     └────────────┴─────────────┴────────┴──────┴──→ finished | failed | orphaned → cleaned
//! ```
//!
//! The isolated-backend states (`preparing`, `prepared`, `destroying`, `cleanup_deferred`) are
//! not modelled: this product runs native ephemeral runners only, and a half-modelled state would
//! be worse than none. A runtime directory that cannot be removed yet stays in its concluded
//! state and is retried by the cleaner.
//!
//! # Events and where they are legal
//!
//! | event                                 | from                       | to                         |
//! |---------------------------------------|----------------------------|----------------------------|
//! | [`Attempt::record_jit`]               | allocated                  | jit_received               |
//! | [`Attempt::record_started`]           | jit_received               | starting                   |
//! | [`Attempt::observe`] idle / busy      | starting, idle, busy       | idle / busy (same = no-op) |
//! | [`Attempt::record_terminate_intent`]  | registration_timeout: starting; idle_surplus: idle | (unchanged) |
//! | [`Attempt::conclude`]                 | see below                  | finished / failed / orphaned |
//! | [`Attempt::conclude_after_worker_log`]| starting, idle, busy       | finished (completed_job)   |
//! | [`Attempt::mark_cleaned`]             | finished, failed, orphaned | cleaned                    |
//!
//! Outcomes accepted by `conclude`: `completed_job` only from `busy`; `exited_idle_without_work`
//! and `orphaned` from `starting`/`idle`/`busy` (a live process existed); `failed(reason)` from
//! the states listed by [`FailureReason::allowed_from`]. The runner's `_diag/Worker_*.log` proves
//! a job ran even when the runner was never seen busy, so `conclude_after_worker_log` records
//! `completed_job` from `starting` or `idle` too — the one documented exception.
//!
//! Every event returns `Err` and leaves the attempt unchanged when it is not legal. Fields are
//! private: the state moves only through these methods, or is rebuilt from a stored row through
//! [`Attempt::from_parts`], which refuses inconsistent rows.
//!
//! # Capacity
//!
//! An attempt counts against capacity until it is concluded (`allocated` … `busy`). By the time
//! an attempt is concluded its process has exited or been stopped (the recovery decision
//! terminates before concluding), so only a directory is left; a directory that cannot be
//! removed yet must never block new runners.

use crate::ids::{AttemptId, PolicyId};
use crate::text::{text_enum, ParseEnumError};
use crate::time::Timestamp;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;
use thiserror::Error;

text_enum! {
    /// Where an attempt is in its life (see the module table).
    pub enum AttemptState ("attempt state") {
        Allocated => "allocated",
        JitReceived => "jit_received",
        Starting => "starting",
        Idle => "idle",
        Busy => "busy",
        Finished => "finished",
        Failed => "failed",
        Orphaned => "orphaned",
        Cleaned => "cleaned",
    }
}

impl AttemptState {
    /// Finished, failed, orphaned or cleaned: an outcome has been recorded.
    pub fn is_concluded(self) -> bool {
        matches!(
            self,
            AttemptState::Finished
                | AttemptState::Failed
                | AttemptState::Orphaned
                | AttemptState::Cleaned
        )
    }

    /// A runner process is expected to exist (starting, idle, busy).
    pub fn has_process(self) -> bool {
        matches!(
            self,
            AttemptState::Starting | AttemptState::Idle | AttemptState::Busy
        )
    }

    /// Every attempt that is not concluded holds (or is about to hold) a runner slot.
    pub fn counts_against_capacity(self) -> bool {
        !self.is_concluded()
    }

    /// Not concluded and not known to have taken a job (allocated, jit_received, starting,
    /// idle): such a runner can still serve a queued job, so it is supply the allocator
    /// subtracts from demand. A busy runner's job is no longer queued.
    pub fn can_take_a_job(self) -> bool {
        matches!(
            self,
            AttemptState::Allocated
                | AttemptState::JitReceived
                | AttemptState::Starting
                | AttemptState::Idle
        )
    }
}

text_enum! {
    /// Why an attempt failed. A closed list: the journal stores the text, tests and the tray
    /// branch on it.
    pub enum FailureReason ("failure reason") {
        /// `generate-jitconfig` was refused or kept failing.
        JitRequestFailed => "jit_request_failed",
        /// Registered at GitHub, but the one-shot JIT secret was lost before the runner started
        /// (e.g. the service crashed in between).
        JitExpired => "jit_expired",
        /// The runner package could not be verified (checksum, layout).
        PackageUnverified => "package_unverified",
        /// GitHub or the runner refused the runner version.
        VersionRejected => "version_rejected",
        /// The runner process could not be spawned.
        ProcessStartFailed => "process_start_failed",
        /// The runner process exited without the diagnostics of a normal end.
        ProcessExitedUnexpectedly => "process_exited_unexpectedly",
        /// Alive but never registered within the registration timeout; we stopped it.
        TerminatedAfterRegistrationTimeout => "terminated_after_registration_timeout",
        /// The runtime directory could not be scrubbed, so the attempt could not end cleanly.
        WorkspaceCleanupDeferred => "workspace_cleanup_deferred",
        /// Added here: the service stopped after reserving the attempt and before any runner
        /// registration or process existed (nothing at GitHub, nothing running).
        LaunchInterrupted => "launch_interrupted",
        /// The listener died by a signal or exited non-zero after its job started and before
        /// the job completed: the job was lost.
        RunnerCrashed => "runner_crashed",
    }
}

impl FailureReason {
    /// The states from which an attempt may fail for this reason.
    pub fn allowed_from(self) -> &'static [AttemptState] {
        use AttemptState::*;
        match self {
            FailureReason::JitRequestFailed => &[Allocated],
            FailureReason::JitExpired | FailureReason::LaunchInterrupted => {
                &[Allocated, JitReceived]
            }
            FailureReason::PackageUnverified => &[Allocated, JitReceived],
            FailureReason::ProcessStartFailed => &[JitReceived],
            FailureReason::VersionRejected => &[JitReceived, Starting],
            FailureReason::ProcessExitedUnexpectedly | FailureReason::RunnerCrashed => {
                &[Starting, Idle, Busy]
            }
            FailureReason::TerminatedAfterRegistrationTimeout => &[Starting, Idle, Busy],
            FailureReason::WorkspaceCleanupDeferred => {
                &[Allocated, JitReceived, Starting, Idle, Busy]
            }
        }
    }

    /// Whether a replacement should be started if demand remains. Failures that would recur
    /// (a refused request, a bad package, a spawn error) are not retried by replacement.
    pub fn wants_replacement(self) -> bool {
        matches!(
            self,
            FailureReason::JitExpired
                | FailureReason::ProcessExitedUnexpectedly
                | FailureReason::RunnerCrashed
                | FailureReason::TerminatedAfterRegistrationTimeout
                | FailureReason::LaunchInterrupted
        )
    }
}

text_enum! {
    /// The kind of an [`Outcome`], for the journal's outcome column.
    pub enum OutcomeKind ("outcome") {
        CompletedJob => "completed_job",
        ExitedIdleWithoutWork => "exited_idle_without_work",
        Failed => "failed",
        Orphaned => "orphaned",
    }
}

text_enum! {
    /// Why the service decided to stop a live runner. Journalled before the stop, so a crash in
    /// between is finished by the recovery decision.
    pub enum TerminateReason ("terminate reason") {
        /// Alive without registering at GitHub within the registration timeout.
        RegistrationTimeout => "registration_timeout",
        /// Idle beyond the idle timeout: a surplus runner.
        IdleSurplus => "idle_surplus",
    }
}

impl TerminateReason {
    /// The outcome recorded once the stopped runner is gone.
    pub fn outcome(self) -> Outcome {
        match self {
            TerminateReason::RegistrationTimeout => {
                Outcome::Failed(FailureReason::TerminatedAfterRegistrationTimeout)
            }
            TerminateReason::IdleSurplus => Outcome::ExitedIdleWithoutWork,
        }
    }
}

text_enum! {
    /// What GitHub says a live, registered runner is doing.
    pub enum Observed ("observed runner state") {
        Idle => "idle",
        Busy => "busy",
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A job ran on the runner.
    CompletedJob,
    /// A surplus runner that never took a job. Not a failure, not replaced.
    ExitedIdleWithoutWork,
    Failed(FailureReason),
    /// The process died while GitHub still listed the runner.
    Orphaned,
}

/// A stored outcome that does not make sense.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OutcomeError {
    #[error(transparent)]
    Unknown(#[from] ParseEnumError),
    #[error("outcome 'failed' needs a failure reason")]
    MissingReason,
    #[error("outcome '{kind}' takes no failure reason (got '{reason}')")]
    UnexpectedReason {
        kind: OutcomeKind,
        reason: FailureReason,
    },
    #[error(
        "outcome '{text}' is malformed: expected e.g. 'completed_job' or 'failed(jit_expired)'"
    )]
    Malformed { text: String },
}

impl Outcome {
    /// Whether the runner may have taken a job before it ended: false only for a surplus
    /// runner that never did and for launches that failed before any runner process ran (a
    /// runner that failed or vanished while running may have had one).
    pub fn may_have_run_job(self) -> bool {
        use FailureReason as F;
        !matches!(
            self,
            Outcome::ExitedIdleWithoutWork
                | Outcome::Failed(
                    F::JitRequestFailed
                        | F::JitExpired
                        | F::PackageUnverified
                        | F::ProcessStartFailed
                        | F::LaunchInterrupted
                )
        )
    }

    pub fn kind(self) -> OutcomeKind {
        match self {
            Outcome::CompletedJob => OutcomeKind::CompletedJob,
            Outcome::ExitedIdleWithoutWork => OutcomeKind::ExitedIdleWithoutWork,
            Outcome::Failed(_) => OutcomeKind::Failed,
            Outcome::Orphaned => OutcomeKind::Orphaned,
        }
    }

    pub fn failure_reason(self) -> Option<FailureReason> {
        match self {
            Outcome::Failed(reason) => Some(reason),
            _ => None,
        }
    }

    /// Rebuilds an outcome from the journal's two columns (kind, reason).
    pub fn from_parts(
        kind: OutcomeKind,
        reason: Option<FailureReason>,
    ) -> Result<Outcome, OutcomeError> {
        match (kind, reason) {
            (OutcomeKind::Failed, Some(reason)) => Ok(Outcome::Failed(reason)),
            (OutcomeKind::Failed, None) => Err(OutcomeError::MissingReason),
            (kind, Some(reason)) => Err(OutcomeError::UnexpectedReason { kind, reason }),
            (OutcomeKind::CompletedJob, None) => Ok(Outcome::CompletedJob),
            (OutcomeKind::ExitedIdleWithoutWork, None) => Ok(Outcome::ExitedIdleWithoutWork),
            (OutcomeKind::Orphaned, None) => Ok(Outcome::Orphaned),
        }
    }

    /// The concluded state this outcome leads to.
    pub fn state(self) -> AttemptState {
        match self {
            Outcome::CompletedJob | Outcome::ExitedIdleWithoutWork => AttemptState::Finished,
            Outcome::Failed(_) => AttemptState::Failed,
            Outcome::Orphaned => AttemptState::Orphaned,
        }
    }

    pub fn is_failure(self) -> bool {
        matches!(self, Outcome::Failed(_))
    }

    /// Whether a replacement should be started if demand remains: an orphaned runner lost its
    /// job, some failures are transient; a surplus runner and a completed job are not replaced.
    pub fn wants_replacement(self) -> bool {
        match self {
            Outcome::Failed(reason) => reason.wants_replacement(),
            Outcome::Orphaned => true,
            Outcome::CompletedJob | Outcome::ExitedIdleWithoutWork => false,
        }
    }

    /// Whether `conclude` accepts this outcome from `state`.
    pub fn allowed_from(self, state: AttemptState) -> bool {
        use AttemptState::*;
        match self {
            Outcome::CompletedJob => state == Busy,
            Outcome::ExitedIdleWithoutWork | Outcome::Orphaned => {
                matches!(state, Starting | Idle | Busy)
            }
            Outcome::Failed(reason) => reason.allowed_from().contains(&state),
        }
    }
}

impl fmt::Display for Outcome {
    /// `completed_job`, `exited_idle_without_work`, `orphaned` or `failed(<reason>)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Failed(reason) => write!(f, "failed({reason})"),
            other => f.write_str(other.kind().as_str()),
        }
    }
}

impl FromStr for Outcome {
    type Err = OutcomeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(inner) = s.strip_prefix("failed(") {
            let reason = inner
                .strip_suffix(')')
                .ok_or_else(|| OutcomeError::Malformed { text: s.to_owned() })?;
            return Ok(Outcome::Failed(reason.parse()?));
        }
        let kind: OutcomeKind = s.parse()?;
        Outcome::from_parts(kind, None)
    }
}

/// A process as the OS names it: the pid plus its start time, so a recycled pid is never
/// mistaken for our runner. `start_time` is whatever the runner adapter reads from the OS
/// (e.g. clock ticks since boot on Linux); the domain only compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub start_time: u64,
}

/// How a runner process ended, known only to the service that started it and saw it end (a
/// restarted service only sees it gone). Through the job sandbox the status is the wrapper's,
/// which passes the listener's code on and reports a death by signal N as 128 + N, as a shell
/// does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessExit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ProcessExit {
    /// Exited by itself with code 0.
    pub fn is_clean(self) -> bool {
        self.signal.is_none() && self.code == Some(0)
    }

    /// The signal that ended it, directly or as reported by the sandbox (128 + N).
    pub fn signal(self) -> Option<i32> {
        self.signal.or_else(|| {
            self.code
                .filter(|c| (129..=192).contains(c))
                .map(|c| c - 128)
        })
    }

    /// In words: "was killed by signal 9 (SIGKILL)", "exited with code 3".
    pub fn describe(self) -> String {
        match (self.signal(), self.code) {
            (Some(sig), _) => match signal_name(sig) {
                Some(name) => format!("was killed by signal {sig} ({name})"),
                None => format!("was killed by signal {sig}"),
            },
            (None, Some(code)) => format!("exited with code {code}"),
            (None, None) => "ended (how is unknown)".to_owned(),
        }
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// Why an attempt event was refused. The attempt is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransitionError {
    #[error("attempt {attempt} is '{state}' and cannot {event}")]
    NotAllowed {
        attempt: AttemptId,
        state: AttemptState,
        event: String,
    },
    #[error(
        "attempt {attempt} already has terminate intent '{existing}' and cannot take '{requested}'"
    )]
    IntentConflict {
        attempt: AttemptId,
        existing: TerminateReason,
        requested: TerminateReason,
    },
}

/// What is inconsistent in a stored attempt row.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordProblem {
    #[error("state '{state}' needs an outcome")]
    OutcomeMissing { state: AttemptState },
    #[error("state '{state}' cannot have an outcome")]
    UnexpectedOutcome { state: AttemptState },
    #[error("outcome '{outcome}' does not lead to state '{state}'")]
    OutcomeMismatch {
        state: AttemptState,
        outcome: Outcome,
    },
    #[error("concluded_at must be set exactly when the attempt is concluded (state '{state}')")]
    ConcludedAt { state: AttemptState },
    #[error("cleaned_at must be set exactly when the attempt is cleaned (state '{state}')")]
    CleanedAt { state: AttemptState },
    #[error("state '{state}' needs a runner id")]
    RunnerIdMissing { state: AttemptState },
    #[error("state '{state}' cannot have a runner id")]
    RunnerIdUnexpected { state: AttemptState },
    #[error("state '{state}' needs a process identity")]
    ProcessMissing { state: AttemptState },
    #[error("state '{state}' cannot have a process identity")]
    ProcessUnexpected { state: AttemptState },
    #[error("state '{state}' cannot carry terminate intent '{intent}'")]
    IntentUnexpected {
        state: AttemptState,
        intent: TerminateReason,
    },
    #[error("timestamps out of order: {what}")]
    TimeOrder { what: &'static str },
}

/// A stored attempt row that does not describe a reachable attempt.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("stored attempt {attempt} is inconsistent: {problem}")]
pub struct AttemptRecordError {
    pub attempt: AttemptId,
    pub problem: RecordProblem,
}

/// An attempt as stored: every field, for the journal to write and to rebuild through
/// [`Attempt::from_parts`]. The runner name is not stored here: it is derived from the id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptParts {
    pub id: AttemptId,
    pub policy_id: PolicyId,
    pub state: AttemptState,
    pub outcome: Option<Outcome>,
    pub runner_id: Option<u64>,
    pub process: Option<ProcessIdentity>,
    pub terminate_intent: Option<TerminateReason>,
    pub created_at: Timestamp,
    pub state_changed_at: Timestamp,
    pub concluded_at: Option<Timestamp>,
    pub cleaned_at: Option<Timestamp>,
}

/// One attempt. See the module docs for the legal events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    id: AttemptId,
    policy_id: PolicyId,
    runner_name: String,
    state: AttemptState,
    outcome: Option<Outcome>,
    runner_id: Option<u64>,
    process: Option<ProcessIdentity>,
    terminate_intent: Option<TerminateReason>,
    created_at: Timestamp,
    state_changed_at: Timestamp,
    concluded_at: Option<Timestamp>,
    cleaned_at: Option<Timestamp>,
}

impl Attempt {
    /// A freshly reserved attempt (`allocated`), to be journalled before any external effect.
    pub fn allocate(id: AttemptId, policy_id: PolicyId, now: Timestamp) -> Attempt {
        Attempt {
            runner_name: id.runner_name(),
            id,
            policy_id,
            state: AttemptState::Allocated,
            outcome: None,
            runner_id: None,
            process: None,
            terminate_intent: None,
            created_at: now,
            state_changed_at: now,
            concluded_at: None,
            cleaned_at: None,
        }
    }

    /// Rebuilds a stored attempt, refusing a row no sequence of legal events could produce.
    pub fn from_parts(parts: AttemptParts) -> Result<Attempt, AttemptRecordError> {
        check_parts(&parts).map_err(|problem| AttemptRecordError {
            attempt: parts.id.clone(),
            problem,
        })?;
        Ok(Attempt {
            runner_name: parts.id.runner_name(),
            id: parts.id,
            policy_id: parts.policy_id,
            state: parts.state,
            outcome: parts.outcome,
            runner_id: parts.runner_id,
            process: parts.process,
            terminate_intent: parts.terminate_intent,
            created_at: parts.created_at,
            state_changed_at: parts.state_changed_at,
            concluded_at: parts.concluded_at,
            cleaned_at: parts.cleaned_at,
        })
    }

    pub fn to_parts(&self) -> AttemptParts {
        AttemptParts {
            id: self.id.clone(),
            policy_id: self.policy_id,
            state: self.state,
            outcome: self.outcome,
            runner_id: self.runner_id,
            process: self.process,
            terminate_intent: self.terminate_intent,
            created_at: self.created_at,
            state_changed_at: self.state_changed_at,
            concluded_at: self.concluded_at,
            cleaned_at: self.cleaned_at,
        }
    }

    pub fn id(&self) -> &AttemptId {
        &self.id
    }
    pub fn policy_id(&self) -> PolicyId {
        self.policy_id
    }
    /// `rm-<id>`: the name registered at GitHub.
    pub fn runner_name(&self) -> &str {
        &self.runner_name
    }
    pub fn state(&self) -> AttemptState {
        self.state
    }
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }
    pub fn runner_id(&self) -> Option<u64> {
        self.runner_id
    }
    pub fn process(&self) -> Option<ProcessIdentity> {
        self.process
    }
    pub fn terminate_intent(&self) -> Option<TerminateReason> {
        self.terminate_intent
    }
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }
    pub fn state_changed_at(&self) -> Timestamp {
        self.state_changed_at
    }
    pub fn concluded_at(&self) -> Option<Timestamp> {
        self.concluded_at
    }
    pub fn cleaned_at(&self) -> Option<Timestamp> {
        self.cleaned_at
    }

    /// Concluded (finished, failed, orphaned) or cleaned: no runner slot is held any more.
    pub fn is_terminal(&self) -> bool {
        self.state.is_concluded()
    }

    /// Concluded but its runtime directory not yet removed.
    pub fn needs_cleaning(&self) -> bool {
        self.state.is_concluded() && self.state != AttemptState::Cleaned
    }

    pub fn is_cleaned(&self) -> bool {
        self.state == AttemptState::Cleaned
    }

    /// See the module docs: every attempt that is not concluded counts.
    pub fn counts_against_capacity(&self) -> bool {
        self.state.counts_against_capacity()
    }

    /// How long the attempt has been in its current state.
    pub fn time_in_state(&self, now: Timestamp) -> Duration {
        now.duration_since(self.state_changed_at)
    }

    fn refuse(&self, event: impl Into<String>) -> TransitionError {
        TransitionError::NotAllowed {
            attempt: self.id.clone(),
            state: self.state,
            event: event.into(),
        }
    }

    /// Timestamps never go backwards within one attempt, even if the caller's clock does.
    fn enter(&mut self, state: AttemptState, now: Timestamp) -> Timestamp {
        let at = now.max(self.state_changed_at);
        self.state = state;
        self.state_changed_at = at;
        at
    }

    /// `allocated → jit_received`: GitHub returned a JIT config for runner `runner_id`.
    pub fn record_jit(&mut self, runner_id: u64, now: Timestamp) -> Result<(), TransitionError> {
        if self.state != AttemptState::Allocated {
            return Err(self.refuse("record a JIT registration"));
        }
        self.runner_id = Some(runner_id);
        self.enter(AttemptState::JitReceived, now);
        Ok(())
    }

    /// `jit_received → starting`: the runner process was spawned (or found again by recovery).
    pub fn record_started(
        &mut self,
        process: ProcessIdentity,
        now: Timestamp,
    ) -> Result<(), TransitionError> {
        if self.state != AttemptState::JitReceived {
            return Err(self.refuse("record a started process"));
        }
        self.process = Some(process);
        self.enter(AttemptState::Starting, now);
        Ok(())
    }

    /// GitHub lists the live runner as idle or busy. Observing the current state again is a
    /// no-op (the idle timer keeps running).
    pub fn observe(&mut self, observed: Observed, now: Timestamp) -> Result<(), TransitionError> {
        let next = match observed {
            Observed::Idle => AttemptState::Idle,
            Observed::Busy => AttemptState::Busy,
        };
        match self.state {
            s if s == next => Ok(()),
            AttemptState::Starting | AttemptState::Idle | AttemptState::Busy => {
                self.enter(next, now);
                Ok(())
            }
            _ => Err(self.refuse(format!("be observed {observed}"))),
        }
    }

    /// Journals the decision to stop a live runner, before stopping it. Repeating the same
    /// intent is a no-op; a different one is refused.
    pub fn record_terminate_intent(
        &mut self,
        reason: TerminateReason,
    ) -> Result<(), TransitionError> {
        if let Some(existing) = self.terminate_intent {
            if existing == reason {
                return Ok(());
            }
            return Err(TransitionError::IntentConflict {
                attempt: self.id.clone(),
                existing,
                requested: reason,
            });
        }
        let legal = match reason {
            TerminateReason::RegistrationTimeout => self.state == AttemptState::Starting,
            TerminateReason::IdleSurplus => self.state == AttemptState::Idle,
        };
        if !legal {
            return Err(self.refuse(format!("record terminate intent '{reason}'")));
        }
        self.terminate_intent = Some(reason);
        Ok(())
    }

    /// Records the outcome (see the module docs for which outcome is legal from where).
    pub fn conclude(&mut self, outcome: Outcome, now: Timestamp) -> Result<(), TransitionError> {
        if !outcome.allowed_from(self.state) {
            return Err(self.refuse(format!("conclude as '{outcome}'")));
        }
        self.finish(outcome, now);
        Ok(())
    }

    /// `completed_job` on the evidence of a `_diag/Worker_*.log`: a job ran even if it was too
    /// short to be seen busy, so this is legal from `starting`, `idle` and `busy`.
    pub fn conclude_after_worker_log(&mut self, now: Timestamp) -> Result<(), TransitionError> {
        if !self.state.has_process() {
            return Err(self.refuse("conclude as 'completed_job' from a worker log"));
        }
        self.finish(Outcome::CompletedJob, now);
        Ok(())
    }

    fn finish(&mut self, outcome: Outcome, now: Timestamp) {
        let at = self.enter(outcome.state(), now);
        self.outcome = Some(outcome);
        self.concluded_at = Some(at);
    }

    /// `finished | failed | orphaned → cleaned`: the runtime directory is gone and verified.
    pub fn mark_cleaned(&mut self, now: Timestamp) -> Result<(), TransitionError> {
        if !self.needs_cleaning() {
            return Err(self.refuse("be marked cleaned"));
        }
        let at = self.enter(AttemptState::Cleaned, now);
        self.cleaned_at = Some(at);
        Ok(())
    }
}

fn check_parts(p: &AttemptParts) -> Result<(), RecordProblem> {
    use AttemptState::*;
    let state = p.state;
    let concluded = state.is_concluded();
    match (concluded, p.outcome) {
        (true, None) => return Err(RecordProblem::OutcomeMissing { state }),
        (false, Some(_)) => return Err(RecordProblem::UnexpectedOutcome { state }),
        (true, Some(outcome)) if state != Cleaned && outcome.state() != state => {
            return Err(RecordProblem::OutcomeMismatch { state, outcome })
        }
        _ => {}
    }
    if concluded != p.concluded_at.is_some() {
        return Err(RecordProblem::ConcludedAt { state });
    }
    if (state == Cleaned) != p.cleaned_at.is_some() {
        return Err(RecordProblem::CleanedAt { state });
    }
    match (state, p.runner_id) {
        (Allocated, Some(_)) => return Err(RecordProblem::RunnerIdUnexpected { state }),
        (JitReceived | Starting | Idle | Busy, None) => {
            return Err(RecordProblem::RunnerIdMissing { state })
        }
        _ => {}
    }
    match (state, p.process) {
        (Allocated | JitReceived, Some(_)) => {
            return Err(RecordProblem::ProcessUnexpected { state })
        }
        (Starting | Idle | Busy, None) => return Err(RecordProblem::ProcessMissing { state }),
        _ => {}
    }
    if let Some(intent) = p.terminate_intent {
        let legal = match intent {
            TerminateReason::RegistrationTimeout => state.has_process() || concluded,
            TerminateReason::IdleSurplus => matches!(state, Idle | Busy) || concluded,
        };
        if !legal {
            return Err(RecordProblem::IntentUnexpected { state, intent });
        }
    }
    if p.state_changed_at < p.created_at {
        return Err(RecordProblem::TimeOrder {
            what: "state_changed_at is before created_at",
        });
    }
    if let Some(concluded_at) = p.concluded_at {
        if concluded_at < p.created_at || concluded_at > p.state_changed_at {
            return Err(RecordProblem::TimeOrder {
                what: "concluded_at is outside created_at..=state_changed_at",
            });
        }
        if let Some(cleaned_at) = p.cleaned_at {
            if cleaned_at < concluded_at || cleaned_at != p.state_changed_at {
                return Err(RecordProblem::TimeOrder {
                    what: "cleaned_at must follow concluded_at and equal state_changed_at",
                });
            }
        }
    }
    if state.is_concluded() && state != Cleaned && p.concluded_at != Some(p.state_changed_at) {
        return Err(RecordProblem::TimeOrder {
            what: "concluded_at must equal state_changed_at until the attempt is cleaned",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn new_attempt() -> Attempt {
        Attempt::allocate(
            AttemptId::new("abcdefgh12").unwrap(),
            PolicyId::new(1),
            t(1_000),
        )
    }

    const PROC: ProcessIdentity = ProcessIdentity {
        pid: 4242,
        start_time: 99,
    };

    fn running(observed: Option<Observed>) -> Attempt {
        let mut a = new_attempt();
        a.record_jit(17, t(2_000)).unwrap();
        a.record_started(PROC, t(3_000)).unwrap();
        if let Some(o) = observed {
            a.observe(o, t(4_000)).unwrap();
        }
        a
    }

    #[test]
    fn the_happy_path_reaches_cleaned() {
        let mut a = new_attempt();
        assert_eq!(a.state(), AttemptState::Allocated);
        assert_eq!(a.runner_name(), "rm-abcdefgh12");
        assert!(a.counts_against_capacity());
        a.record_jit(17, t(2_000)).unwrap();
        assert_eq!(
            (a.state(), a.runner_id()),
            (AttemptState::JitReceived, Some(17))
        );
        a.record_started(PROC, t(3_000)).unwrap();
        assert_eq!(
            (a.state(), a.process()),
            (AttemptState::Starting, Some(PROC))
        );
        a.observe(Observed::Idle, t(4_000)).unwrap();
        a.observe(Observed::Busy, t(5_000)).unwrap();
        a.conclude(Outcome::CompletedJob, t(6_000)).unwrap();
        assert_eq!(a.state(), AttemptState::Finished);
        assert_eq!(a.concluded_at(), Some(t(6_000)));
        assert!(a.is_terminal() && a.needs_cleaning() && !a.counts_against_capacity());
        a.mark_cleaned(t(7_000)).unwrap();
        assert!(a.is_cleaned());
        assert_eq!(a.cleaned_at(), Some(t(7_000)));
        assert_eq!(Attempt::from_parts(a.to_parts()).unwrap(), a);
    }

    #[test]
    fn completed_job_needs_busy_unless_a_worker_log_proves_it() {
        let mut a = running(Some(Observed::Idle));
        let before = a.clone();
        let err = a.conclude(Outcome::CompletedJob, t(9_000)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "attempt abcdefgh12 is 'idle' and cannot conclude as 'completed_job'"
        );
        assert_eq!(a, before);
        a.conclude_after_worker_log(t(9_000)).unwrap();
        assert_eq!(a.outcome(), Some(Outcome::CompletedJob));

        let mut s = running(None);
        s.conclude_after_worker_log(t(9_000)).unwrap();
        assert_eq!(s.state(), AttemptState::Finished);

        let mut j = new_attempt();
        assert!(j.conclude_after_worker_log(t(9_000)).is_err());
    }

    #[test]
    fn illegal_events_leave_the_attempt_unchanged() {
        let mut a = new_attempt();
        let before = a.clone();
        assert!(a.record_started(PROC, t(2_000)).is_err());
        assert!(a.observe(Observed::Idle, t(2_000)).is_err());
        assert!(a.mark_cleaned(t(2_000)).is_err());
        assert!(a.conclude(Outcome::Orphaned, t(2_000)).is_err());
        assert!(a
            .record_terminate_intent(TerminateReason::IdleSurplus)
            .is_err());
        assert_eq!(a, before);

        let mut done = running(Some(Observed::Busy));
        done.conclude(Outcome::Orphaned, t(5_000)).unwrap();
        let before = done.clone();
        assert!(done.conclude(Outcome::Orphaned, t(6_000)).is_err());
        assert!(done.record_jit(1, t(6_000)).is_err());
        assert!(done.observe(Observed::Busy, t(6_000)).is_err());
        assert_eq!(done, before);
    }

    #[test]
    fn failure_reasons_are_checked_against_the_state() {
        let mut a = new_attempt();
        assert!(a
            .conclude(
                Outcome::Failed(FailureReason::ProcessExitedUnexpectedly),
                t(2_000)
            )
            .is_err());
        a.conclude(Outcome::Failed(FailureReason::JitRequestFailed), t(2_000))
            .unwrap();
        assert_eq!(a.state(), AttemptState::Failed);

        let mut s = running(None);
        assert!(s
            .conclude(Outcome::Failed(FailureReason::JitRequestFailed), t(5_000))
            .is_err());
        s.conclude(
            Outcome::Failed(FailureReason::TerminatedAfterRegistrationTimeout),
            t(5_000),
        )
        .unwrap();
    }

    #[test]
    fn observing_the_same_state_keeps_the_timer() {
        let mut a = running(Some(Observed::Idle));
        a.observe(Observed::Idle, t(50_000)).unwrap();
        assert_eq!(a.state_changed_at(), t(4_000));
        a.observe(Observed::Busy, t(60_000)).unwrap();
        a.observe(Observed::Idle, t(70_000)).unwrap();
        assert_eq!(a.state_changed_at(), t(70_000));
    }

    #[test]
    fn timestamps_never_go_backwards() {
        let mut a = new_attempt();
        a.record_jit(1, t(500)).unwrap();
        assert_eq!(a.state_changed_at(), t(1_000));
        assert!(Attempt::from_parts(a.to_parts()).is_ok());
    }

    #[test]
    fn terminate_intent_rules() {
        let mut s = running(None);
        assert!(s
            .record_terminate_intent(TerminateReason::IdleSurplus)
            .is_err());
        s.record_terminate_intent(TerminateReason::RegistrationTimeout)
            .unwrap();
        s.record_terminate_intent(TerminateReason::RegistrationTimeout)
            .unwrap();
        let err = s
            .record_terminate_intent(TerminateReason::IdleSurplus)
            .unwrap_err();
        assert!(matches!(err, TransitionError::IntentConflict { .. }));
        assert_eq!(
            s.terminate_intent(),
            Some(TerminateReason::RegistrationTimeout)
        );

        let mut i = running(Some(Observed::Idle));
        i.record_terminate_intent(TerminateReason::IdleSurplus)
            .unwrap();
        assert_eq!(i.state(), AttemptState::Idle);
        assert!(Attempt::from_parts(i.to_parts()).is_ok());
    }

    #[test]
    fn inconsistent_rows_are_refused() {
        let good = running(Some(Observed::Busy)).to_parts();
        let cases: Vec<(AttemptParts, &str)> = vec![
            (
                AttemptParts {
                    outcome: Some(Outcome::Orphaned),
                    ..good.clone()
                },
                "state 'busy' cannot have an outcome",
            ),
            (
                AttemptParts {
                    process: None,
                    ..good.clone()
                },
                "state 'busy' needs a process identity",
            ),
            (
                AttemptParts {
                    runner_id: None,
                    ..good.clone()
                },
                "state 'busy' needs a runner id",
            ),
            (
                AttemptParts {
                    state: AttemptState::Finished,
                    ..good.clone()
                },
                "state 'finished' needs an outcome",
            ),
            (
                AttemptParts {
                    state: AttemptState::Failed,
                    outcome: Some(Outcome::Orphaned),
                    concluded_at: Some(good.state_changed_at),
                    ..good.clone()
                },
                "outcome 'orphaned' does not lead to state 'failed'",
            ),
            (
                AttemptParts {
                    state: AttemptState::Allocated,
                    process: None,
                    ..good.clone()
                },
                "state 'allocated' cannot have a runner id",
            ),
            (
                AttemptParts {
                    created_at: t(999_999),
                    ..good.clone()
                },
                "timestamps out of order: state_changed_at is before created_at",
            ),
            (
                AttemptParts {
                    state: AttemptState::Starting,
                    terminate_intent: Some(TerminateReason::IdleSurplus),
                    ..good.clone()
                },
                "state 'starting' cannot carry terminate intent 'idle_surplus'",
            ),
            (
                AttemptParts {
                    cleaned_at: Some(t(9_000)),
                    ..good.clone()
                },
                "cleaned_at must be set exactly when the attempt is cleaned (state 'busy')",
            ),
        ];
        for (parts, problem) in cases {
            let err = Attempt::from_parts(parts).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("stored attempt abcdefgh12 is inconsistent: {problem}")
            );
        }
        assert!(Attempt::from_parts(good).is_ok());
    }

    #[test]
    fn text_forms_are_the_spec_spelling() {
        assert_eq!(AttemptState::JitReceived.as_str(), "jit_received");
        assert_eq!(
            Outcome::ExitedIdleWithoutWork.to_string(),
            "exited_idle_without_work"
        );
        assert_eq!(
            Outcome::Failed(FailureReason::TerminatedAfterRegistrationTimeout).to_string(),
            "failed(terminated_after_registration_timeout)"
        );
        for s in AttemptState::ALL {
            assert_eq!(s.as_str().parse::<AttemptState>(), Ok(*s));
        }
        for r in FailureReason::ALL {
            let o = Outcome::Failed(*r);
            assert_eq!(o.to_string().parse::<Outcome>(), Ok(o));
            assert_eq!(Outcome::from_parts(OutcomeKind::Failed, Some(*r)), Ok(o));
        }
        for o in [
            Outcome::CompletedJob,
            Outcome::ExitedIdleWithoutWork,
            Outcome::Orphaned,
        ] {
            assert_eq!(o.to_string().parse::<Outcome>(), Ok(o));
            assert_eq!(Outcome::from_parts(o.kind(), None), Ok(o));
        }
        assert_eq!(
            Outcome::from_parts(OutcomeKind::Failed, None),
            Err(OutcomeError::MissingReason)
        );
        assert!("failed(nope)".parse::<Outcome>().is_err());
        assert!("failed(jit_expired".parse::<Outcome>().is_err());
        assert_eq!(
            "busyy".parse::<AttemptState>().unwrap_err().to_string(),
            "unknown attempt state 'busyy': expected one of allocated, jit_received, starting, idle, busy, finished, failed, orphaned, cleaned"
        );
        assert_eq!(TerminateReason::IdleSurplus.as_str(), "idle_surplus");
    }

    #[test]
    fn only_runners_that_never_ran_may_not_have_taken_a_job() {
        use FailureReason as F;
        assert!(Outcome::CompletedJob.may_have_run_job());
        assert!(Outcome::Orphaned.may_have_run_job());
        assert!(Outcome::Failed(F::ProcessExitedUnexpectedly).may_have_run_job());
        assert!(Outcome::Failed(F::TerminatedAfterRegistrationTimeout).may_have_run_job());
        assert!(!Outcome::ExitedIdleWithoutWork.may_have_run_job());
        for early in [
            F::JitRequestFailed,
            F::JitExpired,
            F::PackageUnverified,
            F::ProcessStartFailed,
            F::LaunchInterrupted,
        ] {
            assert!(!Outcome::Failed(early).may_have_run_job(), "{early:?}");
        }
    }
}
