//! Noticing that a runner process has ended, or that its worker started (it took a job), so
//! the loop supervising it concludes it, or journals it busy, at once instead of at its next
//! poll. The watcher looks only while attempts are live: an idle host does not read the
//! journal until a loop reserves or adopts a runner; and it looks often ([`WAITING_LOOK`])
//! only while a runner waits for a job, so busy shows within a few hundred milliseconds
//! whatever GitHub's answers say yet.

use crate::host::HostAdapter;
use rm_agent::{AgentEvent, EventKind, JournalPort, RunnerHostPort};
use rm_core::{Attempt, AttemptId, AttemptState, PolicyId, ProcessIdentity};
use rm_runner::PackageSource;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

/// How often the watcher looks while a runner waits for a job (`starting`/`idle`).
pub const WAITING_LOOK: Duration = Duration::from_millis(100);

/// Notices runner processes that have ended, and waiting runners whose worker started. Each is
/// reported until marked, then never again (the set forgets attempts no longer live, so it
/// stays small).
#[derive(Debug, Default)]
pub struct ExitWatch {
    notified: HashSet<(AttemptId, ProcessIdentity)>,
    /// Waiting runners already reported for a started worker.
    took_job: HashSet<AttemptId>,
    /// Those the last look found (see [`ExitWatch::take_took_jobs`]).
    took_now: Vec<Attempt>,
    /// The last look saw a live (not concluded) attempt, or could not read the journal.
    live: bool,
    /// The last look saw a runner waiting for a job.
    waiting: bool,
}

impl ExitWatch {
    pub fn new() -> Self {
        ExitWatch::default()
    }

    /// The live attempts whose journalled process has ended and was not marked yet (see
    /// [`ExitWatch::mark`]); the waiting ones whose worker started are kept for
    /// [`ExitWatch::take_took_jobs`]. A failed journal read reports none; a process that
    /// cannot be inspected counts as running.
    pub async fn ended<J: JournalPort, H: RunnerHostPort>(
        &mut self,
        journal: &J,
        host: &H,
    ) -> Vec<Attempt> {
        let Ok(attempts) = journal.uncleaned_attempts().await else {
            self.live = true;
            return Vec::new();
        };
        let mut live = HashSet::new();
        let mut waiting = HashSet::new();
        let mut ended = Vec::new();
        self.live = false;
        self.waiting = false;
        for attempt in attempts.into_iter().filter(|a| !a.is_terminal()) {
            self.live = true;
            let Some(process) = attempt.process() else {
                continue;
            };
            let key = (attempt.id().clone(), process);
            let seen = self.notified.contains(&key);
            live.insert(key);
            if seen {
                continue;
            }
            if !host.inspect(process).await.unwrap_or(true) {
                ended.push(attempt);
                continue;
            }
            let waits = matches!(attempt.state(), AttemptState::Starting | AttemptState::Idle)
                && attempt.terminate_intent().is_none();
            if !waits {
                continue;
            }
            self.waiting = true;
            waiting.insert(attempt.id().clone());
            if !self.took_job.contains(attempt.id())
                && host
                    .evidence(&host.runtime_dir(attempt.id()))
                    .await
                    .job_ran()
            {
                self.took_job.insert(attempt.id().clone());
                self.took_now.push(attempt);
            }
        }
        self.notified.retain(|k| live.contains(k));
        self.took_job.retain(|id| waiting.contains(id));
        ended
    }

    /// The waiting runners whose worker the last [`ExitWatch::ended`] found started (each
    /// once): their loop journals them busy.
    pub fn take_took_jobs(&mut self) -> Vec<Attempt> {
        std::mem::take(&mut self.took_now)
    }

    /// Whether the last look saw a runner waiting for a job: look again soon.
    pub fn has_waiting(&self) -> bool {
        self.waiting
    }

    /// Whether the last [`ExitWatch::ended`] saw a live attempt (or could not tell): only then
    /// is another look useful.
    pub fn has_live(&self) -> bool {
        self.live
    }

    /// `attempt`'s ended process has been acted on: [`ExitWatch::ended`] skips it from now on.
    pub fn mark(&mut self, attempt: &Attempt) {
        if let Some(process) = attempt.process() {
            self.notified.insert((attempt.id().clone(), process));
        }
    }
}

/// An event after which a runner process may exist (or soon will).
fn may_start_a_runner(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Reserved { .. } | EventKind::Launched { .. } | EventKind::Adopted { .. }
    )
}

/// What a loop has to offer the watcher: the policies it supervises and a way to wake it.
pub(crate) trait Wakeable: Send + Sync + 'static {
    fn policy_ids(&self) -> Vec<PolicyId>;
    fn wake_now(&self);
}

/// Looks every `every` while attempts are live ([`ExitWatch`]) and wakes the loop that
/// supervises each ended process once. Ownership comes from each loop's last copy of its
/// policies, so a retiring loop whose policies were deleted is still woken. With nothing live
/// it sleeps until an event says a runner may start (a lagging receiver counts as one).
pub(crate) async fn watch_exits<J: JournalPort, S: PackageSource + 'static, L: Wakeable>(
    journal: J,
    host: Arc<Mutex<Option<Arc<HostAdapter<S>>>>>,
    loops: Arc<Mutex<Vec<Arc<L>>>>,
    every: Duration,
    mut events: broadcast::Receiver<AgentEvent>,
) {
    let mut exits = ExitWatch::new();
    // The first look: startup recovery may have adopted live runners.
    let mut armed = true;
    loop {
        if !armed {
            match events.recv().await {
                Ok(ev) => armed = may_start_a_runner(&ev.kind),
                Err(RecvError::Lagged(_)) => armed = true,
                Err(RecvError::Closed) => return,
            }
            continue;
        }
        let wait = if exits.has_waiting() {
            every.min(WAITING_LOOK)
        } else {
            every
        };
        tokio::time::sleep(wait).await;
        // What happened until now is covered by the look below.
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = events.try_recv() {}
        let Some(host) = super::lock(&host).clone() else {
            // No runner host yet: no runner can exist.
            armed = false;
            continue;
        };
        let ended = exits.ended(&journal, &host).await;
        let took_jobs = exits.take_took_jobs();
        armed = exits.has_live();
        if ended.is_empty() && took_jobs.is_empty() {
            continue;
        }
        let owner: HashMap<PolicyId, Arc<L>> = super::lock(&loops)
            .iter()
            .flat_map(|lp| {
                lp.policy_ids()
                    .into_iter()
                    .map(|p| (p, Arc::clone(lp)))
                    .collect::<Vec<_>>()
            })
            .collect();
        for attempt in &ended {
            if let Some(lp) = owner.get(&attempt.policy_id()) {
                tracing::debug!(attempt = %attempt.id(), "runner process ended; waking its loop");
                lp.wake_now();
                exits.mark(attempt);
            }
        }
        for attempt in &took_jobs {
            if let Some(lp) = owner.get(&attempt.policy_id()) {
                tracing::debug!(attempt = %attempt.id(), "runner's worker started; waking its loop");
                lp.wake_now();
            }
        }
    }
}
