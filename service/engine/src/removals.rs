//! Targets being removed. Removal must not lose a running job: the API disables the policy
//! (its loop drains it through ordinary supervision) and records its id here; the policy row is
//! deleted only when its loop has moved it to `disabled` and none of its attempts is left
//! uncleaned. The set is kept in the journal's meta table so a restart in between finishes the
//! removal.

use rm_adapters::{HookReport, JournalAdapter, TargetHook};
use rm_core::{PolicyId, PolicyState};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub struct Removals {
    ids: Mutex<BTreeSet<i64>>,
}

fn encode(ids: &BTreeSet<i64>) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

impl Removals {
    /// The set recorded in the journal (unreadable entries are ignored).
    pub async fn load(journal: &JournalAdapter) -> Removals {
        let text = journal
            .with(|j| j.meta_get(crate::meta::PENDING_REMOVALS))
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let ids = text
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        Removals {
            ids: Mutex::new(ids),
        }
    }

    /// How many removals wait for their target to drain.
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    pub fn contains(&self, id: PolicyId) -> bool {
        self.lock().contains(&id.get())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i64>> {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `id` as being removed.
    pub async fn add(
        &self,
        journal: &JournalAdapter,
        id: PolicyId,
    ) -> Result<(), rm_agent::JournalError> {
        let text = {
            let mut ids = self.lock();
            ids.insert(id.get());
            encode(&ids)
        };
        journal
            .with(move |j| j.meta_set(crate::meta::PENDING_REMOVALS, &text))
            .await
    }

    /// Deletes every policy being removed that has nothing left (no uncleaned attempt);
    /// returns how many removals finished.
    pub async fn settle(&self, journal: &JournalAdapter) -> usize {
        let pending: Vec<i64> = self.lock().iter().copied().collect();
        if pending.is_empty() {
            return 0;
        }
        let outcome = journal
            .with(move |j| {
                let mut done = Vec::new();
                for raw in pending {
                    let id = PolicyId::new(raw);
                    let policy = j.get_policy(id)?;
                    // Its loop moves it to `disabled` only once it owns nothing, in a pass of
                    // its own: no launch of it can still be under way after that.
                    if policy
                        .as_ref()
                        .is_some_and(|p| p.state() != PolicyState::Disabled)
                    {
                        continue;
                    }
                    let exists = policy.is_some();
                    let left = j
                        .attempts_for_policy(id)?
                        .iter()
                        .filter(|a| !a.is_cleaned())
                        .count();
                    if left > 0 {
                        continue;
                    }
                    if exists {
                        j.delete_policy(id)?;
                    }
                    done.push(raw);
                }
                Ok(done)
            })
            .await;
        match outcome {
            Ok(done) if !done.is_empty() => {
                let finished = done.len();
                let text = {
                    let mut ids = self.lock();
                    for d in &done {
                        ids.remove(d);
                    }
                    encode(&ids)
                };
                tracing::info!(policies = ?done, "removed targets have drained; their policies are deleted");
                if let Err(e) = journal
                    .with(move |j| j.meta_set(crate::meta::PENDING_REMOVALS, &text))
                    .await
                {
                    tracing::warn!(error = %e, "pending removals could not be recorded");
                }
                finished
            }
            Ok(_) => 0,
            Err(e) => {
                tracing::warn!(error = %e, "pending removals could not be settled");
                0
            }
        }
    }
}

/// The lifecycle's hook: settles the removals before each re-read of the targets, and every
/// tick while one is pending; a deleted policy makes the lifecycle re-read (its loop ends).
pub struct RemovalHook {
    removals: Arc<Removals>,
    journal: JournalAdapter,
}

impl RemovalHook {
    pub fn new(removals: Arc<Removals>, journal: JournalAdapter) -> Self {
        RemovalHook { removals, journal }
    }
}

impl TargetHook for RemovalHook {
    fn settle(&self) -> Pin<Box<dyn Future<Output = HookReport> + Send + '_>> {
        Box::pin(async move {
            if self.removals.pending() == 0 {
                return HookReport::default();
            }
            let finished = self.removals.settle(&self.journal).await;
            HookReport {
                changed: finished > 0,
                pending: self.removals.pending() > 0,
            }
        })
    }
}
