//! What the demand polls taught: queued jobs per policy (for each target's status line) and
//! whether a poll learnt which job a runner took (GitHub's job listings name it; status shows
//! it at once). Both come for free with the polls the loops make anyway.

use rm_agent::{AgentEvent, EventKind};
use rm_github::GitHubClient;
use rm_proto::Demand;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

pub struct DemandView {
    by_policy: Mutex<HashMap<i64, Demand>>,
    /// The client's runner-job version last published.
    jobs_version: AtomicU64,
}

impl DemandView {
    pub fn new(client: &GitHubClient) -> Self {
        DemandView {
            by_policy: Mutex::new(HashMap::new()),
            jobs_version: AtomicU64::new(client.runner_jobs_version()),
        }
    }

    fn by_policy(&self) -> MutexGuard<'_, HashMap<i64, Demand>> {
        self.by_policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The last demand seen for `policy` (none yet: zero).
    pub fn of(&self, policy: i64) -> Demand {
        self.by_policy().get(&policy).copied().unwrap_or_default()
    }

    /// Learns from a `demand_seen` event; true when a runner's job was learnt meanwhile (the
    /// count alone is shown at the next status anyway: it changes too often to announce).
    pub fn on_event(&self, event: &AgentEvent, client: &GitHubClient) -> bool {
        let EventKind::DemandSeen {
            policy,
            matched,
            unresolvable,
            is_floor,
        } = &event.kind
        else {
            return false;
        };
        self.by_policy().insert(
            policy.get(),
            Demand {
                queued: *matched,
                is_floor: *is_floor,
                unresolvable: *unresolvable,
            },
        );
        let version = client.runner_jobs_version();
        self.jobs_version.swap(version, Ordering::Relaxed) != version
    }
}
