//! `GET /v1/why`: for every queued job GitHub shows for the host's targets, why no runner of
//! this host started for it — or which runner will take it. The reasons are the loops' own
//! decisions on their last pass (recorded, not re-guessed), in words with the fix.

use crate::status::{Failure, TargetKind};
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WhyReport {
    pub targets: Vec<TargetWhy>,
}

/// One target's queued jobs as its loop last saw them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetWhy {
    /// `owner/repo` or the organization.
    pub target: String,
    pub kind: TargetKind,
    /// When the loop's last pass ran (`null`: it has not run yet).
    #[serde(default)]
    pub checked_at: Option<UnixMillis>,
    /// When GitHub's queue was last read (`null`: never since the service started).
    #[serde(default)]
    pub jobs_read_at: Option<UnixMillis>,
    /// GitHub listed only the newest runs: more jobs may be queued than shown.
    #[serde(default)]
    pub is_floor: bool,
    /// What held the whole target back, when something did (the queue unread, paused, …);
    /// each job says it too.
    #[serde(default)]
    pub summary: Option<WhyReason>,
    pub jobs: Vec<JobWhy>,
    /// This target's runner failures of the last hour, newest first: a job whose runner died
    /// under it is not queued any more, and this is where `why` says what became of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_failures: Vec<Failure>,
}

/// One queued job and its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobWhy {
    pub job_id: u64,
    pub run_id: u64,
    /// `owner/repo` (an organization's jobs come from many; empty when unknown).
    #[serde(default)]
    pub repository: String,
    /// The job's name in its workflow.
    #[serde(default)]
    pub name: String,
    /// The job's page on GitHub.
    #[serde(default)]
    pub url: Option<String>,
    /// When GitHub queued it.
    #[serde(default)]
    pub queued_at: Option<UnixMillis>,
    /// The labels its `runs-on` asks for (empty when it could not be read as labels).
    #[serde(default)]
    pub runs_on: Vec<String>,
    /// The profile the reason is about, when one matched (or came closest).
    #[serde(default)]
    pub profile: Option<String>,
    pub reason: WhyReason,
}

/// A reason in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhyReason {
    /// Stable: `runner_starting`, `runner_ready`, `being_taken`, `labels_mismatch`,
    /// `github_hosted`, `runs_on_unresolvable`, `target_disabled`, `monitor_only`,
    /// `target_full`, `host_full`, `paused`, `updating`, `memory`, a workstation rule
    /// (`on_battery`, `busy`, `quiet_hours`, `user_active`), `launch_backoff`,
    /// `launch_failing`, `package_unverified`, `host_unfit`, `repair_required`,
    /// `rate_limited`, `github_unreachable`, `sign_in_failed`, `github_refused`, `draining`,
    /// `target_removed`, `journal_unreadable`, `demand_unreadable`, `not_polled`,
    /// `not_started_yet`, `not_looked_at_yet`.
    pub code: String,
    /// A runner of this host has the job in hand: nothing to fix.
    #[serde(default)]
    pub covered: bool,
    pub message: String,
    /// What the user can do (`null` when nothing is needed).
    #[serde(default)]
    pub fix: Option<String>,
    /// The runners the reason names (the one taking the job, or those holding the slots).
    #[serde(default)]
    pub runners: Vec<String>,
    /// When the condition is expected to clear (a rate limit, a back-off), if known.
    #[serde(default)]
    pub until: Option<UnixMillis>,
}
