//! The journal port: the single source of truth across crashes, written before every effect.

use rm_core::{Attempt, AttemptState, Policy, PolicyId, Target};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use thiserror::Error;

/// How many attempts hold a runner slot (every attempt not yet concluded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveCounts {
    pub by_policy: BTreeMap<PolicyId, u32>,
    /// Host-wide, including attempts whose policy is unknown (no ownership proof, but they
    /// hold a slot).
    pub total: u32,
    /// Per policy, the runner names of the slot holders the journal does not know to have
    /// taken a job (allocated, jit_received, starting, idle): what can still serve a queued
    /// job, unless GitHub or the runner already says it took one.
    pub unassigned: BTreeMap<PolicyId, Vec<String>>,
    /// Per policy, the runner names of the slot holders the journal knows took a job (`busy`).
    pub busy: BTreeMap<PolicyId, Vec<String>>,
}

impl ActiveCounts {
    pub fn of(&self, policy: PolicyId) -> u32 {
        self.by_policy.get(&policy).copied().unwrap_or(0)
    }

    /// The policy's runners that can still take a queued job: the journal's unassigned ones
    /// minus those `has_job` names (GitHub's job listings or the runner's diagnostics said
    /// they took one before the journal caught up).
    pub fn unassigned_of(&self, policy: PolicyId, has_job: &BTreeSet<String>) -> u32 {
        let n = self.unassigned.get(&policy).map_or(0, |names| {
            names.iter().filter(|n| !has_job.contains(*n)).count()
        });
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Records one slot holder (for journals that count attempt by attempt).
    pub fn add(&mut self, policy: PolicyId, state: AttemptState, runner_name: &str) {
        if !state.counts_against_capacity() {
            return;
        }
        *self.by_policy.entry(policy).or_insert(0) += 1;
        self.total += 1;
        let names = if state.can_take_a_job() {
            &mut self.unassigned
        } else {
            &mut self.busy
        };
        names
            .entry(policy)
            .or_default()
            .push(runner_name.to_owned());
    }
}

/// Why a journal operation failed. The agent branches on `Conflict` (re-read next pass);
/// everything else is logged and the step retried on a later pass.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JournalError {
    /// A compare-and-set lost: the row changed since it was read. Nothing was written.
    #[error("{what} was changed concurrently: {detail}; it is re-read on the next pass")]
    Conflict { what: String, detail: String },
    #[error("{what} is not in the journal")]
    NotFound { what: String },
    /// The journal could not be used (IO, corruption, a refused file).
    #[error("journal unavailable: {detail}")]
    Unavailable { detail: String },
}

/// What the loop reads and writes in the journal.
pub trait JournalPort: Send + Sync + 'static {
    /// Every policy of `target`, whatever its state (the loop filters).
    fn policies(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<Vec<Policy>, JournalError>> + Send;

    /// Compare-and-set on `policy.revision()`; returns the stored policy (revision bumped).
    fn update_policy(
        &self,
        policy: &Policy,
    ) -> impl Future<Output = Result<Policy, JournalError>> + Send;

    /// Records a new (`allocated`) attempt. Refuses a duplicate id.
    fn insert_attempt(
        &self,
        attempt: &Attempt,
    ) -> impl Future<Output = Result<(), JournalError>> + Send;

    /// Writes `next` only if the stored row still equals `previous` (lost-update guard),
    /// otherwise `Conflict`.
    fn update_attempt(
        &self,
        previous: &Attempt,
        next: &Attempt,
    ) -> impl Future<Output = Result<(), JournalError>> + Send;

    /// Every attempt on the host that is not `cleaned`, of every policy (the loop keeps its own).
    fn uncleaned_attempts(&self)
        -> impl Future<Output = Result<Vec<Attempt>, JournalError>> + Send;

    /// The attempts of `policies` that are not `cleaned`: what one loop supervises each pass.
    /// The default filters [`JournalPort::uncleaned_attempts`]; a journal with a cheaper query
    /// (an index of uncleaned attempts by policy) overrides it.
    fn uncleaned_attempts_of(
        &self,
        policies: &[PolicyId],
    ) -> impl Future<Output = Result<Vec<Attempt>, JournalError>> + Send {
        let policies = policies.to_vec();
        async move {
            Ok(self
                .uncleaned_attempts()
                .await?
                .into_iter()
                .filter(|a| policies.contains(&a.policy_id()))
                .collect())
        }
    }

    /// Active (non-concluded) attempts per policy and host-wide.
    fn active_counts(&self) -> impl Future<Output = Result<ActiveCounts, JournalError>> + Send;

    /// The host's ceiling over all policies.
    fn host_capacity(&self) -> impl Future<Output = Result<u32, JournalError>> + Send;

    /// The host's ceiling for a new runner of `policy` (a journal that admits runners by
    /// their expected size answers per policy); by default the same for every policy.
    fn host_capacity_for(
        &self,
        policy: PolicyId,
    ) -> impl Future<Output = Result<u32, JournalError>> + Send {
        let _ = policy;
        self.host_capacity()
    }

    /// What held the last [`JournalPort::host_capacity_for`] read for `policy` below the
    /// host's setting (paused, memory admission for that policy's runner, a workstation
    /// rule), in the holder's words; the loop records it with that policy so `why` can say
    /// it. A plain journal holds nothing.
    fn capacity_hold_for(&self, policy: PolicyId) -> Option<rm_core::CapacityHold> {
        let _ = policy;
        None
    }

    /// Records the verdict on the job `attempt`'s runner ran (kept with the attempt).
    fn put_trust(
        &self,
        attempt: &rm_core::AttemptId,
        verdict: &rm_core::TrustVerdict,
    ) -> impl Future<Output = Result<(), JournalError>> + Send;

    /// `attempt`'s recorded verdict, if any.
    fn trust_of(
        &self,
        attempt: &rm_core::AttemptId,
    ) -> impl Future<Output = Result<Option<rm_core::TrustVerdict>, JournalError>> + Send;
}

impl<J: JournalPort> JournalPort for Arc<J> {
    fn policies(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<Vec<Policy>, JournalError>> + Send {
        (**self).policies(target)
    }
    fn update_policy(
        &self,
        policy: &Policy,
    ) -> impl Future<Output = Result<Policy, JournalError>> + Send {
        (**self).update_policy(policy)
    }
    fn insert_attempt(
        &self,
        attempt: &Attempt,
    ) -> impl Future<Output = Result<(), JournalError>> + Send {
        (**self).insert_attempt(attempt)
    }
    fn update_attempt(
        &self,
        previous: &Attempt,
        next: &Attempt,
    ) -> impl Future<Output = Result<(), JournalError>> + Send {
        (**self).update_attempt(previous, next)
    }
    fn uncleaned_attempts(
        &self,
    ) -> impl Future<Output = Result<Vec<Attempt>, JournalError>> + Send {
        (**self).uncleaned_attempts()
    }
    fn uncleaned_attempts_of(
        &self,
        policies: &[PolicyId],
    ) -> impl Future<Output = Result<Vec<Attempt>, JournalError>> + Send {
        (**self).uncleaned_attempts_of(policies)
    }
    fn active_counts(&self) -> impl Future<Output = Result<ActiveCounts, JournalError>> + Send {
        (**self).active_counts()
    }
    fn host_capacity(&self) -> impl Future<Output = Result<u32, JournalError>> + Send {
        (**self).host_capacity()
    }
    fn host_capacity_for(
        &self,
        policy: PolicyId,
    ) -> impl Future<Output = Result<u32, JournalError>> + Send {
        (**self).host_capacity_for(policy)
    }
    fn capacity_hold_for(&self, policy: PolicyId) -> Option<rm_core::CapacityHold> {
        (**self).capacity_hold_for(policy)
    }
    fn put_trust(
        &self,
        attempt: &rm_core::AttemptId,
        verdict: &rm_core::TrustVerdict,
    ) -> impl Future<Output = Result<(), JournalError>> + Send {
        (**self).put_trust(attempt, verdict)
    }
    fn trust_of(
        &self,
        attempt: &rm_core::AttemptId,
    ) -> impl Future<Output = Result<Option<rm_core::TrustVerdict>, JournalError>> + Send {
        (**self).trust_of(attempt)
    }
}
