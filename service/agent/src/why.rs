//! The record of a pass for "why isn't my job running?": what the loop saw (the queued jobs,
//! its runners) and what it decided (grants, the launch gate, holds, the runners it started),
//! kept as the pass goes so that `why` reports decisions, not guesses (see `rm_core::why`).

use crate::clock::Clock;
use crate::ports::{ActiveCounts, GhError, GitHubPort, JournalPort, RunnerHostPort};
use crate::target_loop::{locked, JobsSeen, TargetLoop};
use rm_core::{DemandUnread, PassStop, PassView, PolicyId, PolicyPass};
use std::collections::BTreeSet;

impl<J, G, H, C> TargetLoop<J, G, H, C>
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    /// A record of this pass with the policies as read and the jobs as last seen; the
    /// decisions are filled in as the pass makes them.
    pub(crate) fn pass_view(&self, stop: Option<PassStop>) -> PassView {
        let seen = locked(&self.last_jobs).clone();
        let policies = self
            .policies()
            .iter()
            .map(|p| PolicyPass {
                policy_id: p.id(),
                labels: p.labels().clone(),
                state: p.state(),
                enabled: p.enabled(),
                max_capacity: p.max_capacity(),
                lagging: Vec::new(),
                ready: Vec::new(),
                busy: Vec::new(),
                grant: None,
                // A policy that gave up says so even before it wants a runner.
                block: self.launch_block(p.id()),
                started: Vec::new(),
                hold: None,
            })
            .collect();
        PassView {
            at: self.now(),
            os: self.config.os,
            arch: self.config.arch,
            jobs: seen.as_ref().map(|s| s.jobs.clone()).unwrap_or_default(),
            jobs_read_at: seen.as_ref().map(|s| s.at),
            is_floor: seen.as_ref().is_some_and(|s| s.is_floor),
            stop,
            policies,
            host_capacity: None,
            host_runners: Vec::new(),
        }
    }

    pub(crate) fn record_pass(&self, view: PassView) {
        *locked(&self.last_pass) = Some(view);
    }

    /// Remembers a successful read of GitHub's queue.
    pub(crate) fn note_jobs(&self, view: &mut PassView, seen: JobsSeen) {
        view.jobs.clone_from(&seen.jobs);
        view.jobs_read_at = Some(seen.at);
        view.is_floor = seen.is_floor;
        *locked(&self.last_jobs) = Some(seen);
    }
}

/// Why the queue could not be read, for the record.
pub(crate) fn demand_unread(error: &GhError) -> DemandUnread {
    match error {
        GhError::RateLimited { until } => DemandUnread::RateLimited { until: *until },
        GhError::Unreachable { detail } | GhError::Transient { detail } => {
            DemandUnread::Unreachable {
                detail: detail.clone(),
            }
        }
        GhError::Unauthorized => DemandUnread::SignInFailed,
        GhError::Forbidden { .. } | GhError::NotFound { .. } => DemandUnread::Refused {
            detail: error.to_string(),
        },
        other => DemandUnread::Other {
            detail: other.to_string(),
        },
    }
}

/// Fills each policy's runners from the counts: those with a job, those still waiting for one
/// and those whose job GitHub's listing does not show yet (`lagging`, per policy).
pub(crate) fn note_runners(
    view: &mut PassView,
    counts: &ActiveCounts,
    has_job: &BTreeSet<String>,
    lagging: impl Fn(PolicyId) -> Vec<String>,
) {
    for p in &mut view.policies {
        let unassigned = counts.unassigned.get(&p.policy_id).into_iter().flatten();
        let (taken, waiting): (Vec<&String>, Vec<&String>) =
            unassigned.partition(|n| has_job.contains(*n));
        p.ready = waiting.into_iter().cloned().collect();
        p.busy = counts
            .busy
            .get(&p.policy_id)
            .into_iter()
            .flatten()
            .chain(taken)
            .cloned()
            .collect();
        p.lagging = lagging(p.policy_id);
    }
    view.host_runners = counts
        .unassigned
        .values()
        .chain(counts.busy.values())
        .flatten()
        .cloned()
        .collect();
    view.host_runners.sort();
}
