//! "Why isn't my job running?": for every queued job a target's loop saw, the reason no runner
//! of this host started for it — or the runner that will take it.
//!
//! The loop records what one pass saw and decided ([`PassView`]: the jobs, each policy's grant,
//! the launch gate's answer, what held the host's capacity, the runners it started); this module
//! only reads that record. The answer is therefore what the loop did, never a second guess
//! computed later from fresher (and different) numbers.

use crate::allocator::{Grant, Limit};
use crate::attempt::FailureReason;
use crate::demand::{JobDemand, RunsOn};
use crate::fitness::HostCheck;
use crate::ids::PolicyId;
use crate::labels::{default_runner_labels, Arch, LabelSet, Os};
use crate::policy::PolicyState;
use crate::time::Timestamp;

/// Something outside the allocator that held the host's capacity down in this pass (paused,
/// an update, memory admission, a workstation rule), in the words of whoever held it: the
/// domain does not know those reasons, it only passes them on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityHold {
    /// Stable code (`paused`, `memory`, `on_battery`, …).
    pub code: String,
    pub message: String,
    pub fix: String,
}

/// What stopped a policy's launches: the launch back-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockCause {
    /// Launches failed (`reason`), or their runners ended before coming online.
    Failed {
        reason: FailureReason,
        detail: String,
    },
    /// A required host check failed.
    HostUnfit { check: HostCheck },
}

/// The launch gate's answer for a policy that wanted runners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchBlock {
    /// Waiting until `next_try` after `failures` failed launches in a row (or, once it passed,
    /// trying one runner at a time).
    BackingOff {
        failures: u32,
        next_try: Timestamp,
        cause: BlockCause,
    },
    /// Gave up: `repair_required` until the operator retries.
    GaveUp { failures: u32, cause: BlockCause },
}

/// Why GitHub's queue could not be read in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemandUnread {
    RateLimited {
        until: Timestamp,
    },
    Unreachable {
        detail: String,
    },
    /// 401: the sign-in is no longer accepted.
    SignInFailed,
    /// 403/404: GitHub refused the target.
    Refused {
        detail: String,
    },
    Other {
        detail: String,
    },
}

/// Why a whole pass started nothing, whatever the jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassStop {
    /// The service is shutting down or draining (an update, `service drain`).
    Draining,
    /// The target is being removed.
    Retiring,
    /// Launching is paused host-wide.
    Paused,
    Demand(DemandUnread),
    /// The journal could not be read.
    Journal {
        detail: String,
    },
    /// No policy of the target reads GitHub's queue (all disabled, signed out, or needing
    /// repair): the policies say which.
    NothingPolled,
}

/// One policy as the pass saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyPass {
    pub policy_id: PolicyId,
    pub labels: LabelSet,
    pub state: PolicyState,
    pub enabled: bool,
    pub max_capacity: Option<u32>,
    /// Its runners that took a job which GitHub's listing still shows queued (the listing
    /// lags): those jobs are being taken.
    pub lagging: Vec<String>,
    /// Its runners up (or coming up) without a job: they will take queued jobs.
    pub ready: Vec<String>,
    /// Its runners running a job.
    pub busy: Vec<String>,
    /// The allocator's grant (none when the pass did not get that far).
    pub grant: Option<Grant>,
    /// The launch gate's reason, when it allowed fewer runners than granted.
    pub block: Option<LaunchBlock>,
    /// Runners that reached `starting` in this pass.
    pub started: Vec<String>,
    /// What held the host's capacity down for a runner of this policy (paused, memory for
    /// its size, a workstation rule), read with that policy's own capacity read: each policy
    /// keeps its own, so one target's hold is never shown as another's.
    pub hold: Option<CapacityHold>,
}

/// What one pass of a target's loop saw and decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassView {
    pub at: Timestamp,
    pub os: Os,
    pub arch: Arch,
    /// The queued jobs as last read (by this pass, or an earlier one when this pass could not
    /// read them: see `jobs_read_at`).
    pub jobs: Vec<JobDemand>,
    /// When `jobs` were read; `None`: never since the service started.
    pub jobs_read_at: Option<Timestamp>,
    /// GitHub listed only the newest runs: more jobs may be queued.
    pub is_floor: bool,
    pub stop: Option<PassStop>,
    pub policies: Vec<PolicyPass>,
    /// The host capacity the loop read (after any hold).
    pub host_capacity: Option<u32>,
    /// Every runner holding one of the host's slots (all targets).
    pub host_runners: Vec<String>,
}

/// Why one job has no runner of this host (or which runner will take it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// A runner of this host took it moments ago; GitHub's listing has not caught up.
    BeingTaken { runner: String },
    /// A runner of this host that has no job yet will take it.
    RunnerReady { runner: String },
    /// A runner was started for it in this pass.
    RunnerStarting { runner: String },
    /// Its `runs-on` asks for labels no runner of this target has here.
    LabelsMismatch {
        /// The labels the closest policy lacks.
        missing: Vec<String>,
        /// That policy's labels (the routing label first).
        labels: Vec<String>,
        /// It asks for a GitHub-hosted image (`ubuntu-latest`…), not a self-hosted runner.
        github_hosted: bool,
    },
    /// Its `runs-on` could not be read as labels.
    Unresolvable { raw: String },
    /// The target (this profile) is disabled.
    Disabled,
    /// The target watches demand but starts no runners.
    MonitorOnly,
    /// GitHub no longer accepts the sign-in.
    SignInFailed,
    /// The target needs repair (GitHub refused it, or launches kept failing before the
    /// service restarted): fix what status names, then retry.
    RepairRequired,
    /// The target's own maximum is reached; `runners` hold it.
    PolicyFull { max: u32, runners: Vec<String> },
    /// The host's capacity is reached; `runners` hold it.
    HostFull { capacity: u32, runners: Vec<String> },
    /// Something held the host's capacity down (paused, memory, a workstation rule).
    Held(CapacityHold),
    /// The launch back-off or the host checks.
    Blocked(LaunchBlock),
    /// The pass stopped before deciding anything for any job.
    Stopped(PassStop),
    /// A runner was granted but did not start in this pass (its launch failed, or the room
    /// went to another target meanwhile); the next pass decides again.
    NotStartedYet,
    /// The loop has not looked at this target yet.
    NotLookedAtYet,
}

impl Reason {
    /// A runner of this host has it in hand: nothing to fix.
    pub fn is_covered(&self) -> bool {
        matches!(
            self,
            Reason::BeingTaken { .. } | Reason::RunnerReady { .. } | Reason::RunnerStarting { .. }
        )
    }

    /// Stable code for machines (`why --json`).
    pub fn code(&self) -> &str {
        match self {
            Reason::BeingTaken { .. } => "being_taken",
            Reason::RunnerReady { .. } => "runner_ready",
            Reason::RunnerStarting { .. } => "runner_starting",
            Reason::LabelsMismatch {
                github_hosted: true,
                ..
            } => "github_hosted",
            Reason::LabelsMismatch { .. } => "labels_mismatch",
            Reason::Unresolvable { .. } => "runs_on_unresolvable",
            Reason::Disabled => "target_disabled",
            Reason::MonitorOnly => "monitor_only",
            Reason::SignInFailed => "sign_in_failed",
            Reason::RepairRequired => "repair_required",
            Reason::PolicyFull { .. } => "target_full",
            Reason::HostFull { .. } => "host_full",
            Reason::Held(hold) => &hold.code,
            Reason::Blocked(LaunchBlock::BackingOff { cause, .. })
            | Reason::Blocked(LaunchBlock::GaveUp { cause, .. }) => match cause {
                BlockCause::HostUnfit { .. } => "host_unfit",
                BlockCause::Failed {
                    reason: FailureReason::PackageUnverified,
                    ..
                } => "package_unverified",
                BlockCause::Failed { .. } => match self {
                    Reason::Blocked(LaunchBlock::GaveUp { .. }) => "launch_failing",
                    _ => "launch_backoff",
                },
            },
            Reason::Stopped(stop) => match stop {
                PassStop::Draining => "draining",
                PassStop::Retiring => "target_removed",
                PassStop::Paused => "paused",
                PassStop::Demand(DemandUnread::RateLimited { .. }) => "rate_limited",
                PassStop::Demand(DemandUnread::Unreachable { .. }) => "github_unreachable",
                PassStop::Demand(DemandUnread::SignInFailed) => "sign_in_failed",
                PassStop::Demand(DemandUnread::Refused { .. }) => "github_refused",
                PassStop::Demand(DemandUnread::Other { .. }) => "demand_unreadable",
                PassStop::Journal { .. } => "journal_unreadable",
                PassStop::NothingPolled => "not_polled",
            },
            Reason::NotStartedYet => "not_started_yet",
            Reason::NotLookedAtYet => "not_looked_at_yet",
        }
    }
}

/// One job and its reason; `policy`: the policy (profile) the reason is about, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobWhy {
    pub job: JobDemand,
    pub policy: Option<PolicyId>,
    pub reason: Reason,
}

/// GitHub's hosted images are named `<os>-<version>` (`ubuntu-latest`, `windows-2022`,
/// `macos-14`); a job asking only for such labels is not for a self-hosted runner.
fn asks_for_github_hosted(required: &[String]) -> bool {
    !required.is_empty()
        && required.iter().all(|l| {
            let l = l.to_ascii_lowercase();
            ["ubuntu-", "windows-", "macos-"]
                .iter()
                .any(|p| l.starts_with(p))
        })
}

/// The labels of `required` a runner of `policy` lacks (GitHub's default labels count as
/// present).
fn missing_labels(policy: &PolicyPass, os: Os, arch: Arch, required: &[String]) -> Vec<String> {
    let defaults = default_runner_labels(os, arch);
    required
        .iter()
        .filter(|l| {
            !policy.labels.contains(l) && !defaults.iter().any(|d| d.eq_ignore_ascii_case(l))
        })
        .cloned()
        .collect()
}

/// The reason for the `index`-th job (oldest first) a policy matched, by the pass's record.
fn policy_reason(view: &PassView, p: &PolicyPass, index: usize) -> Reason {
    if !p.enabled || matches!(p.state, PolicyState::Disabled | PolicyState::Draining) {
        return Reason::Disabled;
    }
    match p.state {
        PolicyState::AuthenticationFailed => return Reason::SignInFailed,
        PolicyState::RepairRequired => {
            return match &p.block {
                Some(block @ LaunchBlock::GaveUp { .. }) => Reason::Blocked(block.clone()),
                _ => Reason::RepairRequired,
            }
        }
        _ => {}
    }
    let Some(max) = p.max_capacity else {
        return Reason::MonitorOnly;
    };
    // The jobs are matched with the runners that can take them, oldest job first: those
    // already taking one (listing lag), those waiting for one, those started now.
    let runner = |r: &String| r.clone();
    let in_hand = p
        .lagging
        .iter()
        .map(|r| Reason::BeingTaken { runner: runner(r) })
        .chain(
            p.ready
                .iter()
                .map(|r| Reason::RunnerReady { runner: runner(r) }),
        )
        .chain(
            p.started
                .iter()
                .map(|r| Reason::RunnerStarting { runner: runner(r) }),
        )
        .nth(index);
    if let Some(reason) = in_hand {
        return reason;
    }
    let Some(grant) = p.grant else {
        return Reason::NotStartedYet;
    };
    if let Some(block) = &p.block {
        return Reason::Blocked(block.clone());
    }
    // A runner was granted and held back (admission, the pool): that hold is what keeps every
    // job past the runners in hand waiting; the target's limit only matters once it clears.
    if let Some(hold) = &p.hold {
        return Reason::Held(hold.clone());
    }
    match grant.limited_by {
        Limit::MaxCapacity => Reason::PolicyFull {
            max,
            runners: p
                .busy
                .iter()
                .chain(&p.ready)
                .chain(&p.started)
                .cloned()
                .collect(),
        },
        Limit::HostCapacity => match &p.hold {
            Some(hold) => Reason::Held(hold.clone()),
            None => Reason::HostFull {
                capacity: view.host_capacity.unwrap_or(0),
                runners: view.host_runners.clone(),
            },
        },
        Limit::NotReconciling => Reason::Stopped(PassStop::Draining),
        Limit::MonitorOnly => Reason::MonitorOnly,
        // Granted, yet not started: a hold met under the allocation lock, or a failed launch.
        Limit::Demand | Limit::Satisfied => match &p.hold {
            Some(hold) => Reason::Held(hold.clone()),
            None => Reason::NotStartedYet,
        },
    }
}

/// Every job of the pass, oldest first, with its reason.
pub fn explain(view: &PassView) -> Vec<JobWhy> {
    let mut jobs: Vec<&JobDemand> = view.jobs.iter().collect();
    jobs.sort_by_key(|j| (j.job_id, j.run_id));
    let mut policies: Vec<&PolicyPass> = view.policies.iter().collect();
    policies.sort_by_key(|p| p.policy_id);
    // How many jobs each policy has been given so far (each job counts once per policy it
    // matches, as the allocator counts it).
    let mut taken = vec![0usize; policies.len()];
    jobs.into_iter()
        .map(|job| {
            let required = match &job.labels {
                RunsOn::Labels(l) if !l.is_empty() => l,
                RunsOn::Labels(_) => {
                    return JobWhy {
                        job: job.clone(),
                        policy: None,
                        reason: Reason::Unresolvable { raw: "[]".into() },
                    }
                }
                RunsOn::Unresolvable(raw) => {
                    return JobWhy {
                        job: job.clone(),
                        policy: None,
                        reason: Reason::Unresolvable { raw: raw.clone() },
                    }
                }
            };
            let mut best: Option<(PolicyId, Reason)> = None;
            let mut closest: Option<(&PolicyPass, Vec<String>)> = None;
            for (k, p) in policies.iter().enumerate() {
                let missing = missing_labels(p, view.os, view.arch, required);
                if !missing.is_empty() {
                    if closest
                        .as_ref()
                        .is_none_or(|(_, m)| missing.len() < m.len())
                    {
                        closest = Some((p, missing));
                    }
                    continue;
                }
                let reason = match &view.stop {
                    Some(stop) if *stop != PassStop::NothingPolled => Reason::Stopped(stop.clone()),
                    _ => policy_reason(view, p, taken[k]),
                };
                taken[k] += 1;
                // A runner in hand beats any obstacle; otherwise the first policy's reason.
                if best.is_none() || (reason.is_covered() && !best_covered(&best)) {
                    best = Some((p.policy_id, reason));
                }
            }
            match (best, closest) {
                (Some((policy, reason)), _) => JobWhy {
                    job: job.clone(),
                    policy: Some(policy),
                    reason,
                },
                (None, closest) => {
                    let (policy, labels, missing) = match closest {
                        Some((p, missing)) => (Some(p.policy_id), p.labels.to_strings(), missing),
                        None => (None, Vec::new(), required.clone()),
                    };
                    JobWhy {
                        job: job.clone(),
                        policy,
                        reason: Reason::LabelsMismatch {
                            missing,
                            labels,
                            github_hosted: asks_for_github_hosted(required),
                        },
                    }
                }
            }
        })
        .collect()
}

fn best_covered(best: &Option<(PolicyId, Reason)>) -> bool {
    best.as_ref().is_some_and(|(_, r)| r.is_covered())
}

#[cfg(test)]
mod tests;
