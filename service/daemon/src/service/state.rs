//! What the API handler and the event pump share: the journal, the GitHub client, the
//! credential store, the launch gate, the watch broadcast and what events taught us (demand
//! per policy, recent failures, launch problems, the host checks).

use super::doctor::Doctor;
use super::gate::Gate;
use super::launch_health::LaunchProblems;
use super::removals::Removals;
use crate::store::ServiceStore;
use rm_adapters::JournalAdapter;
use rm_github::GitHubClient;
use rm_proto::{Demand, Failure, WatchMessage};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::{broadcast, Notify};

/// How many recent failures the status keeps.
pub const RECENT_FAILURES: usize = 20;

/// Journal meta keys the daemon owns (never secrets).
pub mod meta {
    /// The GitHub login the credential belongs to: GitHub's answer to `GET /user`, or the
    /// signing-in client's word until GitHub has been asked (see `LOGIN_VERIFIED`).
    pub const LOGIN: &str = "daemon_github_login";
    /// `1` once `LOGIN` came from GitHub itself. A host without targets stays off the network,
    /// so it keeps the client's word until its first target exists.
    pub const LOGIN_VERIFIED: &str = "daemon_github_login_verified";
    /// When the refresh token runs out (ms since the epoch).
    pub const SIGN_IN_EXPIRES_MS: &str = "daemon_sign_in_expires_ms";
    /// `1` while the operator paused launching.
    pub const PAUSED: &str = "daemon_paused";
}

pub struct Daemon {
    pub journal: JournalAdapter,
    pub client: GitHubClient,
    pub store: Arc<dyn ServiceStore>,
    pub gate: Arc<Gate>,
    pub wake: Arc<Notify>,
    pub removals: Arc<Removals>,
    /// The host checks' last results.
    pub doctor: Doctor,
    /// Why targets are not launching (the loops' back-off).
    pub launch: LaunchProblems,
    pub watch: broadcast::Sender<WatchMessage>,
    demand: Mutex<HashMap<i64, Demand>>,
    failures: Mutex<VecDeque<Failure>>,
    /// The last pass that reached GitHub (ms since the epoch), ahead of the journal, which is
    /// written at most once a minute and at shutdown (each write is an fsync).
    last_contact: Mutex<Option<i64>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Daemon {
    pub fn new(
        journal: JournalAdapter,
        client: GitHubClient,
        store: Arc<dyn ServiceStore>,
        gate: Arc<Gate>,
        wake: Arc<Notify>,
        removals: Arc<Removals>,
        doctor: Doctor,
    ) -> Daemon {
        let (watch, _) = broadcast::channel(256);
        Daemon {
            journal,
            client,
            store,
            gate,
            wake,
            removals,
            doctor,
            launch: LaunchProblems::default(),
            watch,
            demand: Mutex::new(HashMap::new()),
            failures: Mutex::new(VecDeque::new()),
            last_contact: Mutex::new(None),
        }
    }

    /// A pass reached GitHub at `at_ms`.
    pub fn note_contact(&self, at_ms: i64) {
        *locked(&self.last_contact) = Some(at_ms);
    }

    /// The last contact seen by this process, if any (the journal holds older ones).
    pub fn last_contact(&self) -> Option<i64> {
        *locked(&self.last_contact)
    }

    pub fn set_demand(&self, policy: i64, demand: Demand) {
        locked(&self.demand).insert(policy, demand);
    }

    pub fn demand(&self, policy: i64) -> Demand {
        locked(&self.demand)
            .get(&policy)
            .copied()
            .unwrap_or_default()
    }

    /// Newest first, at most [`RECENT_FAILURES`]. A failure already recorded for the same
    /// attempt and reason (a failed launch is reported, then concluded) is not added again;
    /// returns whether it was added.
    pub fn push_failure(&self, failure: Failure) -> bool {
        let mut f = locked(&self.failures);
        let seen = failure.attempt_id.is_some()
            && f.iter()
                .any(|old| old.attempt_id == failure.attempt_id && old.reason == failure.reason);
        if seen {
            return false;
        }
        f.push_front(failure);
        f.truncate(RECENT_FAILURES);
        true
    }

    pub fn failures(&self) -> Vec<Failure> {
        locked(&self.failures).iter().cloned().collect()
    }

    /// Publishes to every watch reader (none is fine).
    pub fn publish(&self, message: WatchMessage) {
        let _ = self.watch.send(message);
    }

    /// Publishes the full status again (after a change).
    pub async fn publish_status(&self) {
        if self.watch.receiver_count() == 0 {
            return;
        }
        match super::status::build(self).await {
            Ok(status) => self.publish(WatchMessage::Changed {
                status: Box::new(status),
            }),
            Err(e) => tracing::warn!(error = %e, "status could not be built for the watchers"),
        }
    }
}
