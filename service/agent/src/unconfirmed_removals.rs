//! Runners concluded without reading GitHub's runner inventory. A JIT listener that reported
//! its job completed and exited 0 has had its registration deleted by GitHub (GITHUB.md §6.3);
//! reading the inventory to see that costs a charged request per job (the listing changed), so
//! such a runner is concluded on its own evidence and its removal is confirmed on a later read
//! instead: whichever read supervision makes next, or one made for them once the oldest has
//! waited [`AgentConfig::removal_confirm`] (one read covers every runner ended since), at a
//! moment this target has no runner (the listing is then back to a state read before, a free
//! `304`), or regardless once it has waited twice that long. A
//! registration still listed then is deleted, so nothing is left at GitHub either way. Kept in
//! memory only: after a restart, a leftover is GitHub's to expire (an ephemeral runner not
//! connected for a day is removed).
//!
//! [`AgentConfig::removal_confirm`]: crate::AgentConfig::removal_confirm

use crate::clock::Clock;
use crate::events::EventKind;
use crate::ports::{DeleteOutcome, GitHubPort, JournalPort, RunnerHostPort, RunnerView};
use crate::target_loop::{locked, TargetLoop};
use rm_core::{AttemptId, Timestamp};
use std::collections::HashMap;

/// One runner whose registration GitHub should have removed itself.
#[derive(Debug, Clone)]
pub(crate) struct Unconfirmed {
    pub(crate) attempt: AttemptId,
    pub(crate) runner_id: u64,
    pub(crate) since: Timestamp,
}

impl<J, G, H, C> TargetLoop<J, G, H, C>
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    /// `runner` was concluded without a look at GitHub's inventory: confirm it gone later.
    pub(crate) fn confirm_removal_later(&self, attempt: &AttemptId, runner: &str, runner_id: u64) {
        locked(&self.unconfirmed_removals).insert(
            runner.to_string(),
            Unconfirmed {
                attempt: attempt.clone(),
                runner_id,
                since: self.now(),
            },
        );
    }

    /// Whether the oldest unconfirmed removal has waited long enough for a read of its own
    /// (`quiet`: this target has no runner now).
    pub(crate) fn removal_confirmation_due(&self, quiet: bool) -> bool {
        let now = self.now();
        let wait = if quiet {
            self.config.removal_confirm
        } else {
            self.config.removal_confirm.saturating_mul(2)
        };
        locked(&self.unconfirmed_removals)
            .values()
            .any(|u| u.since > now || now.has_elapsed(u.since, wait))
    }

    /// Reads the inventory for the unconfirmed removals once the oldest is due (supervision
    /// reads it for other reasons too; those reads confirm them for free).
    pub(crate) async fn confirm_removals_if_due(&self, quiet: bool) {
        if !self.removal_confirmation_due(quiet) {
            return;
        }
        match self.ports.github.runners(&self.target).await {
            Ok(list) => {
                *locked(&self.inventory_read_at) = Some(self.now());
                let listed = list.into_iter().map(|v| (v.name.clone(), v)).collect();
                self.confirm_removals(&listed).await;
            }
            // Kept for the next pass; the read's own back-off and the outage gate bound it.
            Err(e) => {
                tracing::warn!(gh_target = %self.target, error = %e, "runner inventory unreadable; removals confirmed later")
            }
        }
    }

    /// Settles every unconfirmed removal against a fresh inventory: gone is confirmed, still
    /// listed is deleted now (a refusal goes the refused-removal way, with its back-off).
    pub(crate) async fn confirm_removals(&self, listed: &HashMap<String, RunnerView>) {
        let pending: Vec<(String, Unconfirmed)> =
            std::mem::take(&mut *locked(&self.unconfirmed_removals))
                .into_iter()
                .collect();
        for (name, u) in pending {
            let Some(view) = listed.get(&name) else {
                continue;
            };
            tracing::info!(gh_target = %self.target, attempt = %u.attempt, runner = %name, "a finished runner is still registered at GitHub; removing it");
            match self.ports.github.delete_runner(&self.target, view.id).await {
                Ok(DeleteOutcome::Deleted | DeleteOutcome::Gone) => {
                    self.emit(EventKind::DeregisteredLate {
                        attempt: u.attempt.clone(),
                    })
                }
                Ok(DeleteOutcome::StillRunningJob) => {
                    self.removal_refused(&u.attempt, u.runner_id, 1)
                }
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, attempt = %u.attempt, error = %e, "removing a finished runner's registration failed; trying again");
                    locked(&self.unconfirmed_removals).insert(name, u);
                }
            }
        }
    }
}
