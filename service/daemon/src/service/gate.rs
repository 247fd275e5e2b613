//! Stop launching without stopping supervision: the loops see a host capacity of zero while
//! the operator paused the host or an upgrade drains it, so the allocator grants nothing while
//! every pass still supervises, concludes and cleans.

use super::admission::Admission;
use rm_adapters::JournalAdapter;
use rm_agent::{ActiveCounts, JournalError, JournalPort};
use rm_core::{Attempt, Policy, PolicyId, Target};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
        if self.gate.holds() {
            return Ok(0);
        }
        let capacity = self.inner.host_capacity().await?;
        if !self.admission.active() {
            return Ok(capacity);
        }
        // Never below what is active: admission delays starts, it stops nothing.
        let active = self.inner.active_counts().await?.total;
        if active >= capacity {
            return Ok(capacity);
        }
        let allowed = self.admission.allowed_new().await;
        Ok(capacity.min(active.saturating_add(allowed)))
    }
}
