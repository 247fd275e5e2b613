//! [`JournalPort`] over the SQLite journal. `rm_journal::Journal` is synchronous and `Send` but
//! not `Sync`: it sits behind a std mutex and every call runs on the blocking pool, so a slow
//! fsync never stalls the async threads.

use rm_agent::{ActiveCounts, JournalError, JournalPort};
use rm_core::{Attempt, Policy, PolicyId, Target};
use rm_journal::Journal;
use std::sync::{Arc, Mutex, PoisonError};

/// The shared journal handle the loops and the exit watcher use.
#[derive(Clone)]
pub struct JournalAdapter {
    inner: Arc<Mutex<Journal>>,
}

impl std::fmt::Debug for JournalAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalAdapter").finish_non_exhaustive()
    }
}

fn map_err(e: rm_journal::JournalError) -> JournalError {
    use rm_journal::JournalError as E;
    match e {
        E::Conflict { entity, id, detail } => JournalError::Conflict {
            what: format!("{entity} {id}"),
            detail,
        },
        E::NotFound { entity, id } => JournalError::NotFound {
            what: format!("{entity} {id}"),
        },
        other => JournalError::Unavailable {
            detail: other.to_string(),
        },
    }
}

impl JournalAdapter {
    pub fn new(journal: Journal) -> Self {
        JournalAdapter {
            inner: Arc::new(Mutex::new(journal)),
        }
    }

    /// Runs `f` on the journal on the blocking pool.
    pub async fn with<T, F>(&self, f: F) -> Result<T, JournalError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Journal) -> Result<T, rm_journal::JournalError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut journal = inner.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut journal).map_err(map_err)
        })
        .await
        .map_err(|e| JournalError::Unavailable {
            detail: format!("journal task failed: {e}"),
        })?
    }
}

impl JournalPort for JournalAdapter {
    async fn policies(&self, target: &Target) -> Result<Vec<Policy>, JournalError> {
        let target = target.clone();
        self.with(move |j| j.policies_for_target(&target)).await
    }

    async fn update_policy(&self, policy: &Policy) -> Result<Policy, JournalError> {
        let policy = policy.clone();
        self.with(move |j| j.update_policy(&policy)).await
    }

    async fn insert_attempt(&self, attempt: &Attempt) -> Result<(), JournalError> {
        let attempt = attempt.clone();
        self.with(move |j| j.insert_attempt(&attempt)).await
    }

    async fn update_attempt(&self, previous: &Attempt, next: &Attempt) -> Result<(), JournalError> {
        let (previous, next) = (previous.clone(), next.clone());
        self.with(move |j| j.update_attempt(&previous, &next)).await
    }

    async fn uncleaned_attempts(&self) -> Result<Vec<Attempt>, JournalError> {
        self.with(|j| j.uncleaned_attempts()).await
    }

    async fn put_trust(
        &self,
        attempt: &rm_core::AttemptId,
        verdict: &rm_core::TrustVerdict,
    ) -> Result<(), JournalError> {
        let (attempt, verdict) = (attempt.clone(), verdict.clone());
        self.with(move |j| j.put_trust(&attempt, &verdict)).await
    }

    async fn trust_of(
        &self,
        attempt: &rm_core::AttemptId,
    ) -> Result<Option<rm_core::TrustVerdict>, JournalError> {
        let attempt = attempt.clone();
        self.with(move |j| j.trust_of(&attempt)).await
    }

    async fn uncleaned_attempts_of(
        &self,
        policies: &[PolicyId],
    ) -> Result<Vec<Attempt>, JournalError> {
        let policies = policies.to_vec();
        self.with(move |j| j.uncleaned_attempts_for_policies(&policies))
            .await
    }

    async fn active_counts(&self) -> Result<ActiveCounts, JournalError> {
        // One query: the slot holders of every policy id, known or not, so their count is the
        // host-wide total (attempts of unknown policies included).
        self.with(|j| {
            let mut counts = ActiveCounts::default();
            for a in j.active_attempts()? {
                counts.add(a.policy_id, a.state, &a.runner_name);
            }
            Ok(counts)
        })
        .await
    }

    async fn host_capacity(&self) -> Result<u32, JournalError> {
        match self.with(|j| j.get_host()).await? {
            Some(record) => Ok(record.host.capacity),
            None => Err(JournalError::NotFound {
                what: "this host's row (run `runner-manager` setup to record the host)".into(),
            }),
        }
    }
}
