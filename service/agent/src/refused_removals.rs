//! Registrations GitHub refused to delete because it still counts the runner busy. A listener
//! that died mid-job stays "busy" at GitHub for about ten minutes, and every refused DELETE is
//! a charged request, so the attempt is concluded and cleaned at once (its process is gone) and
//! only the DELETE waits: retried after each of [`AgentConfig::removal_retry`]'s delays, then
//! given up — GitHub removes the registration of an ephemeral runner itself once it times the
//! job out. Kept in memory only: a restart leaves the registration to GitHub the same way.
//!
//! [`AgentConfig::removal_retry`]: crate::AgentConfig::removal_retry

use crate::clock::Clock;
use crate::events::EventKind;
use crate::ports::{DeleteOutcome, GitHubPort, JournalPort, RunnerHostPort};
use crate::target_loop::{locked, TargetLoop};
use rm_core::{AttemptId, Timestamp};

/// One registration waiting for its next DELETE.
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub(crate) attempt: AttemptId,
    pub(crate) runner_id: u64,
    /// DELETEs GitHub refused so far.
    pub(crate) refusals: u32,
    pub(crate) next_at: Timestamp,
}

impl<J, G, H, C> TargetLoop<J, G, H, C>
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    /// GitHub refused a DELETE of `runner_id` (it counts the runner busy): schedules the next
    /// try, or gives up after the last one. Emits what happened.
    pub(crate) fn removal_refused(&self, attempt: &AttemptId, runner_id: u64, refusals: u32) {
        let delays = &self.config.removal_retry;
        let index = usize::try_from(refusals.saturating_sub(1)).unwrap_or(usize::MAX);
        let mut pending = locked(&self.refused_removals);
        match delays.get(index) {
            Some(&delay) => {
                let next_at = self.now() + delay;
                pending.insert(
                    runner_id,
                    Refused {
                        attempt: attempt.clone(),
                        runner_id,
                        refusals,
                        next_at,
                    },
                );
                drop(pending);
                self.emit(EventKind::DeregisterRefused {
                    attempt: attempt.clone(),
                    retry_in: Some(delay),
                    refusals,
                });
            }
            None => {
                pending.remove(&runner_id);
                drop(pending);
                self.emit(EventKind::DeregisterRefused {
                    attempt: attempt.clone(),
                    retry_in: None,
                    refusals,
                });
            }
        }
    }

    /// Tries again every refused removal that is due.
    pub(crate) async fn retry_refused_removals(&self) {
        let now = self.now();
        let due: Vec<Refused> = locked(&self.refused_removals)
            .values()
            .filter(|r| r.next_at <= now)
            .cloned()
            .collect();
        for r in due {
            match self
                .ports
                .github
                .delete_runner(&self.target, r.runner_id)
                .await
            {
                Ok(DeleteOutcome::Deleted | DeleteOutcome::Gone) => {
                    locked(&self.refused_removals).remove(&r.runner_id);
                    self.emit(EventKind::DeregisteredLate {
                        attempt: r.attempt.clone(),
                    });
                }
                Ok(DeleteOutcome::StillRunningJob) => {
                    self.removal_refused(&r.attempt, r.runner_id, r.refusals + 1)
                }
                // Unreachable or refused otherwise: counts as a try, so the whole stays bounded.
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, attempt = %r.attempt, error = %e, "removing a runner's registration failed; trying later");
                    self.removal_refused(&r.attempt, r.runner_id, r.refusals + 1)
                }
            }
        }
    }

    /// Registrations waiting for a DELETE: (attempt, DELETEs refused, next try).
    pub fn refused_removals(&self) -> Vec<(AttemptId, u32, Timestamp)> {
        locked(&self.refused_removals)
            .values()
            .map(|r| (r.attempt.clone(), r.refusals, r.next_at))
            .collect()
    }
}
