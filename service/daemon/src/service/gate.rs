//! Stop launching without stopping supervision: the loops see a host capacity of zero while
//! the operator paused the host or an upgrade drains it, so the allocator grants nothing while
//! every pass still supervises, concludes and cleans.

use super::admission::Admission;
use rm_adapters::JournalAdapter;
use rm_agent::{ActiveCounts, JournalError, JournalPort};
use rm_core::{Attempt, CapacityHold, Policy, PolicyId, Target};
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
    /// What held the last capacity read down, for the loops' record (`why`).
    pub last_hold: Arc<Mutex<Option<CapacityHold>>>,
}

impl GatedJournal {
    pub fn new(inner: JournalAdapter, gate: Arc<Gate>, admission: Arc<Admission>) -> Self {
        GatedJournal {
            inner,
            gate,
            admission,
            last_hold: Arc::default(),
        }
    }

    fn note_hold(&self, hold: Option<CapacityHold>) {
        *self
            .last_hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = hold;
    }

    /// The hold behind a capacity read: the gate's, else admission's verdict of that read.
    fn hold_now(&self) -> Option<CapacityHold> {
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
        if let Some(rule) = self.admission.rule_hold() {
            return Some(CapacityHold {
                code: rule.rule.into(),
                message: rule.message,
                fix: rule.fix,
            });
        }
        self.admission.hold().map(|hold| CapacityHold {
            code: "memory".into(),
            message: hold.message(true),
            fix: hold.fix().into(),
        })
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

    fn capacity_hold(&self) -> Option<CapacityHold> {
        self.last_hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl GatedJournal {
    /// The host capacity for a runner of `policy` (its own expected peak decides admission).
    async fn capacity_for(&self, policy: Option<PolicyId>) -> Result<u32, JournalError> {
        if self.gate.holds() {
            self.note_hold(self.hold_now());
            return Ok(0);
        }
        let capacity = self.inner.host_capacity().await?;
        if !self.admission.active() {
            self.note_hold(None);
            return Ok(capacity);
        }
        // Never below what is active: admission delays starts, it stops nothing.
        let active = self.inner.active_counts().await?.total;
        if active >= capacity {
            // The host is full by its own setting: nothing else held it.
            self.note_hold(None);
            return Ok(capacity);
        }
        let allowed = self.admission.allowed_new(policy).await;
        let admitted = capacity.min(active.saturating_add(allowed));
        self.note_hold((admitted < capacity).then(|| self.hold_now()).flatten());
        Ok(admitted)
    }
}
