//! The last successful contact with GitHub: kept in memory for status, and written to the
//! journal at most once a minute and at shutdown (each write is an fsync), so `status` without
//! a service and the next start know it too. Only a pass that actually reached GitHub counts.

use rm_adapters::JournalAdapter;
use rm_agent::{AgentEvent, EventKind};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How often the contact is written while passes reach GitHub.
const SAVE_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct Contact {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// ms since the epoch.
    last: Option<i64>,
    saved_at: Option<Instant>,
}

impl Contact {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This process's last contact, if any (the journal holds older ones).
    pub fn last(&self) -> Option<i64> {
        self.inner().last
    }

    /// Learns from a `pass_completed` event; never a status change of its own (the pass's
    /// other events are).
    pub async fn on_event(&self, event: &AgentEvent, journal: &JournalAdapter) {
        let EventKind::PassCompleted {
            reached_github: true,
            ..
        } = &event.kind
        else {
            return;
        };
        let due = {
            let mut inner = self.inner();
            inner.last = Some(chrono::Utc::now().timestamp_millis());
            let due = inner.saved_at.is_none_or(|t| t.elapsed() >= SAVE_EVERY);
            if due {
                inner.saved_at = Some(Instant::now());
            }
            due
        };
        if due {
            self.save(journal).await;
        }
    }

    /// Writes the last contact to the journal (nothing when there was none).
    pub async fn save(&self, journal: &JournalAdapter) {
        let Some(at) = self.last() else {
            return;
        };
        let at = at.to_string();
        if let Err(e) = journal
            .with(move |j| j.meta_set(crate::meta::LAST_GITHUB_CONTACT_MS, &at))
            .await
        {
            tracing::warn!(error = %e, "last GitHub contact not recorded");
        }
    }
}
