//! Stop launching without stopping supervision: the loops see a host capacity of zero while
//! the operator paused the host or an upgrade drains it, so the allocator grants nothing while
//! every pass still supervises, concludes and cleans.

use super::admission::{Admission, Held};
use rm_adapters::JournalAdapter;
use rm_agent::{ActiveCounts, JournalError, JournalPort};
use rm_core::{Attempt, CapacityHold, Policy, PolicyId, Target};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Why launching is held.
#[derive(Debug, Default)]
pub struct Gate {
    paused: AtomicBool,
    upgrading: AtomicBool,
}

impl Gate {
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
    }
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }
    pub fn set_upgrading(&self) {
        self.upgrading.store(true, Ordering::SeqCst);
    }
    pub fn upgrading(&self) -> bool {
        self.upgrading.load(Ordering::SeqCst)
    }
    fn holds(&self) -> bool {
        self.paused() || self.upgrading()
    }
}

/// The journal port the loops use: the journal, with the host capacity read as zero while the
/// [`Gate`] holds launching, and as no more than the active runners plus what memory admits
/// ([`Admission`]) otherwise.
#[derive(Clone)]
pub struct GatedJournal {
    pub inner: JournalAdapter,
    pub gate: Arc<Gate>,
    pub admission: Arc<Admission>,
    /// What held each policy's last capacity read down, for the loops' record (`why`): per
    /// policy, since the loops read concurrently and one runner may fit where another waits.
    pub holds: Arc<Mutex<HashMap<Option<PolicyId>, CapacityHold>>>,
}

impl GatedJournal {
    pub fn new(inner: JournalAdapter, gate: Arc<Gate>, admission: Arc<Admission>) -> Self {
        GatedJournal {
            inner,
            gate,
            admission,
            holds: Arc::default(),
        }
    }

    fn note_hold(&self, policy: Option<PolicyId>, hold: Option<CapacityHold>) {
        let mut holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
        match hold {
            Some(h) => holds.insert(policy, h),
            None => holds.remove(&policy),
        };
    }

    /// The gate's own hold (paused, updating), if any.
    fn gate_hold(&self) -> Option<CapacityHold> {
        if self.gate.paused() {
            return Some(CapacityHold {
                code: "paused".into(),
                message: "Launching is paused on this host: no new runner starts (running \
                          jobs go on)."
                    .into(),
                fix: "Resume it: `runner-manager service resume`, or Resume in the tray's menu."
                    .into(),
            });
        }
        if self.gate.upgrading() {
            return Some(CapacityHold {
                code: "updating".into(),
                message: "The service is updating itself: new runners start once the new \
                          version runs (running jobs finish first)."
                    .into(),
                fix: "Nothing to do: it goes on by itself.".into(),
            });
        }
        None
    }
}

/// Admission's verdict of one read, in the words `why` shows.
fn admission_hold(held: Held) -> CapacityHold {
    match held {
        Held::Rule(rule) => CapacityHold {
            code: rule.rule.into(),
            message: rule.message,
            fix: rule.fix,
        },
        Held::Memory(hold) => CapacityHold {
            code: "memory".into(),
            message: hold.message(true),
            fix: hold.fix().into(),
        },
    }
}

impl JournalPort for GatedJournal {
    async fn policies(&self, target: &Target) -> Result<Vec<Policy>, JournalError> {
        self.inner.policies(target).await
    }
    async fn update_policy(&self, policy: &Policy) -> Result<Policy, JournalError> {
        self.inner.update_policy(policy).await
    }
    async fn insert_attempt(&self, attempt: &Attempt) -> Result<(), JournalError> {
        self.inner.insert_attempt(attempt).await
    }
    async fn update_attempt(&self, previous: &Attempt, next: &Attempt) -> Result<(), JournalError> {
        self.inner.update_attempt(previous, next).await
    }
    async fn uncleaned_attempts(&self) -> Result<Vec<Attempt>, JournalError> {
        self.inner.uncleaned_attempts().await
    }
    async fn put_trust(
        &self,
        attempt: &rm_core::AttemptId,
        verdict: &rm_core::TrustVerdict,
    ) -> Result<(), JournalError> {
        self.inner.put_trust(attempt, verdict).await
    }
    async fn trust_of(
        &self,
        attempt: &rm_core::AttemptId,
    ) -> Result<Option<rm_core::TrustVerdict>, JournalError> {
        self.inner.trust_of(attempt).await
    }
    async fn uncleaned_attempts_of(
        &self,
        policies: &[PolicyId],
    ) -> Result<Vec<Attempt>, JournalError> {
        self.inner.uncleaned_attempts_of(policies).await
    }
    async fn active_counts(&self) -> Result<ActiveCounts, JournalError> {
        self.inner.active_counts().await
    }
    async fn host_capacity(&self) -> Result<u32, JournalError> {
        self.capacity_for(None).await
    }

    async fn host_capacity_for(&self, policy: PolicyId) -> Result<u32, JournalError> {
        self.capacity_for(Some(policy)).await
    }

    fn capacity_hold_for(&self, policy: PolicyId) -> Option<CapacityHold> {
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&Some(policy))
            .cloned()
    }
}

impl GatedJournal {
    /// The host capacity for a runner of `policy` (its own expected peak decides admission).
    async fn capacity_for(&self, policy: Option<PolicyId>) -> Result<u32, JournalError> {
        if self.gate.holds() {
            self.note_hold(policy, self.gate_hold());
            return Ok(0);
        }
        let capacity = self.inner.host_capacity().await?;
        if !self.admission.active() {
            self.note_hold(policy, None);
            return Ok(capacity);
        }
        // Never below what is active: admission delays starts, it stops nothing.
        let active = self.inner.active_counts().await?.total;
        if active >= capacity {
            // The host is full by its own setting: nothing else held it.
            self.note_hold(policy, None);
            return Ok(capacity);
        }
        let verdict = self.admission.admit(policy).await;
        let admitted = capacity.min(active.saturating_add(verdict.allowed));
        self.note_hold(
            policy,
            verdict
                .held
                .filter(|_| admitted < capacity)
                .map(admission_hold),
        );
        Ok(admitted)
    }
}
