//! `GET /v1/status`: what the tray shows. Mirrors the domain's states as plain string enums so
//! the tray depends on this crate only. Responses accept unknown fields and read unknown enum
//! values as `unknown`, so a newer service does not break an older tray.

use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// Everything the service knows that a client may show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub host: HostStatus,
    /// Paused: no new runners start; running ones finish their job.
    pub paused: bool,
    pub auth: AuthState,
    pub targets: Vec<TargetStatus>,
    pub runners: Vec<RunnerStatus>,
    /// Last successful answer from GitHub; `null` before the first one.
    pub last_github_contact: Option<UnixMillis>,
    /// The REST rate-limit budget; `null` before the first answer.
    pub budget: Option<Budget>,
    /// The most recent failures, newest first (a short, bounded list).
    pub recent_failures: Vec<Failure>,
    /// The GitHub this service talks to, so a client signs in against the same one;
    /// `null` from an older service (assume github.com).
    #[serde(default)]
    pub github: Option<GitHubEndpoints>,
    /// Whether GitHub answers this host, host-wide (an outage backs off every target
    /// together); `ok` from an older service.
    #[serde(default)]
    pub github_health: GitHubHealth,
    /// The host-fitness checks the service ran last (at start, and before a launch after a
    /// failure). A failed `required` check makes the host unfit: nothing is launched and no
    /// runner is registered until it passes. Empty before the first run.
    #[serde(default)]
    pub host_checks: Vec<HostCheck>,
    /// Why new runners wait for memory (memory admission), with the numbers; absent when
    /// they may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionHold>,
    /// Why new runners wait because of a workstation rule (on battery, the user active,
    /// machine busy, quiet hours); absent when none holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workstation: Option<WorkstationHold>,
    /// Runners keep starting without their caches or persistent workspace (they still run,
    /// slower); absent while setting them up works.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caches_problem: Option<CachesProblem>,
    /// The pool of hosts this host joined; absent when it serves alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolStatus>,
    /// Registrations of ended runners that GitHub refused to delete because it still counts
    /// them busy (after a crash, for about ten minutes): retried with back-off, then left to
    /// GitHub, which removes them itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_registrations: Vec<LeftRegistration>,
}

/// One registration GitHub still holds for a runner that ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftRegistration {
    pub target: String,
    pub runner_name: String,
    /// DELETEs GitHub refused so far.
    pub refusals: u32,
    /// When the next DELETE goes out; `null`: given up, GitHub removes it.
    pub next_try_at: Option<UnixMillis>,
    pub since: UnixMillis,
}

/// This host's place in a pool of hosts serving one label (`GET /v1/pool`, `status.pool`).
/// Never carries the database's password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// The label jobs ask for to run on any host of the pool.
    pub label: String,
    /// `host:port` of the pool's PostgreSQL.
    pub address: String,
    /// This host's name in the pool.
    pub host_id: String,
    /// `connected`, `connecting`, `unreachable` (no answer: it resumes by itself) or
    /// `refused` (the database answered and refused this host: a changed password, a
    /// certificate, a newer schema; a person must act).
    pub state: String,
    /// While unreachable or refused: what failed, with the fix. New pooled runners wait on every host
    /// meanwhile; running jobs go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when the database has not answered (while unreachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<UnixMillis>,
    /// The pool's hosts as of the last heartbeat.
    #[serde(default)]
    pub hosts: Vec<PoolHostStatus>,
    /// Runners starting for queued jobs, and who starts them.
    #[serde(default)]
    pub claims: Vec<PoolClaimStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolHostStatus {
    pub host_id: String,
    pub capacity: u32,
    /// Slots free at its last heartbeat.
    pub free: u32,
    /// It heartbeated within its lease (a silent host's claims are placed elsewhere).
    pub alive: bool,
    /// Runners it is starting for queued jobs.
    pub claims: u32,
    /// Its runners and the job each runs, as of its last heartbeat: who runs what.
    #[serde(default)]
    pub running: Vec<PoolRunnerStatus>,
}

/// One runner of a pool host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRunnerStatus {
    pub runner: String,
    /// The repository or organization it serves.
    pub target: String,
    /// The job it runs (or ran); absent while it starts or waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolClaimStatus {
    pub job_id: u64,
    pub target: String,
    pub host_id: String,
    pub runner: String,
}

/// Setting up runners' caches or persistent workspaces failed for the last few runners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachesProblem {
    /// `caches` or `workspace`.
    pub what: String,
    /// Failures in a row.
    pub failures: u32,
    pub message: String,
    pub fix: String,
}

/// New runners wait because of a workstation rule; running jobs go on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkstationHold {
    /// `on_battery`, `user_active`, `busy`, `quiet_hours`.
    pub rule: String,
    /// A few words (`on battery`).
    pub short: String,
    pub message: String,
    pub fix: String,
}

/// New runners wait: the memory available now, less what running jobs are still expected to
/// use and the headroom kept free, is less than a new runner's expected peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionHold {
    pub message: String,
    pub fix: String,
    pub available_bytes: u64,
    pub reserved_bytes: u64,
    pub headroom_bytes: u64,
    pub expected_bytes: u64,
}

/// GitHub's reachability as this host sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GitHubHealth {
    pub state: GitHubHealthState,
    /// Since when GitHub has not answered (or has rate-limited this host).
    #[serde(default)]
    pub since: Option<UnixMillis>,
    /// When the next request to GitHub may go out.
    #[serde(default)]
    pub next_try: Option<UnixMillis>,
    /// The last failure, in words.
    #[serde(default)]
    pub detail: Option<String>,
    /// Failed tries in a row.
    #[serde(default)]
    pub consecutive_failures: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GitHubHealthState {
    /// The last request got an answer (or none was needed yet).
    #[default]
    Ok,
    /// No answer (network) or 5xx answers: every target backs off together.
    Unreachable,
    /// GitHub's primary or secondary rate limit: nothing is sent until `next_try`.
    RateLimited,
    #[serde(other)]
    Unknown,
}

/// One host-fitness check (`runner-manager host doctor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCheck {
    /// Stable id, e.g. `runner_root_reachable`.
    pub id: String,
    /// What is checked, for people.
    pub title: String,
    pub state: CheckState,
    /// A failed required check stops launches; the others are advice.
    pub required: bool,
    /// What was found (the directory and its mode, the free space…).
    pub detail: String,
    /// What to do when it did not pass.
    #[serde(default)]
    pub fix: Option<String>,
    /// When this result was taken (a check is run again when what it depends on changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<UnixMillis>,
}

/// `GET /v1/host/doctor`: every host check, run now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctorReport {
    /// When the checks ran.
    pub at: UnixMillis,
    pub checks: Vec<HostCheck>,
}

impl DoctorReport {
    /// Whether no required check failed (the host may launch).
    pub fn fit(&self) -> bool {
        !self
            .checks
            .iter()
            .any(|c| c.required && c.state == CheckState::Fail)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckState {
    Pass,
    /// Works, but worth a look (advisory).
    Warn,
    Fail,
    /// Not checked (e.g. GitHub not asked because no credential is held).
    Skipped,
    #[serde(other)]
    Unknown,
}

/// Where the service's GitHub is and which App it signs in as (nothing secret: an App's
/// client id is public).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitHubEndpoints {
    /// The web/OAuth origin the device flow runs against, e.g. `https://github.com`.
    pub web_base: String,
    /// The REST base, e.g. `https://api.github.com` or `https://HOST/api/v3`.
    pub api_base: String,
    /// The GitHub App's client id.
    pub client_id: String,
}

/// This machine as the service sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    pub id: String,
    pub label: String,
    pub os: Os,
    pub arch: Arch,
    /// How many runners may run at once on this host, over all targets.
    pub capacity: u32,
    /// The label a workflow's `runs-on` names to reach this host (default profile).
    pub routing_label: String,
    /// How `capacity` was chosen and how to change it, for people.
    #[serde(default)]
    pub capacity_note: Option<String>,
    /// The memory admission settings and workstation rules in force; absent from an older
    /// service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<HostAdmission>,
    /// The names of the host's runner environment variables (`GET /v1/host/env` has the
    /// values, for operators); empty from an older service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runner_env: Vec<String>,
}

/// The host's memory admission and workstation rules (`runner-manager host set-admission`,
/// `host set-rules`; `PATCH /v1/host/admission`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAdmission {
    /// Memory admission on: a runner starts only when the memory available covers it.
    pub memory_admission: bool,
    /// A runner's expected peak before its target has any history, in MiB.
    pub runner_memory_mb: u64,
    /// Memory kept free for the user, in MiB.
    pub memory_headroom_mb: u64,
    /// New runners wait on battery.
    pub wait_on_battery: bool,
    /// New runners wait while the 1-minute load is above this; `null`: no limit.
    pub max_load: Option<LoadAverage>,
    /// `HH:MM-HH:MM` local time; `null`: none.
    pub quiet_hours: Option<String>,
    /// New runners wait while the user is active at the session.
    pub idle_only: bool,
}

/// A load average (a finite number above 0).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LoadAverage(pub f64);

// JSON has no NaN, and the service refuses non-finite loads: equality is total here, so the
// status (which holds this) keeps `Eq`.
impl Eq for LoadAverage {}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Os {
    Linux,
    Macos,
    Windows,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    X64,
    Arm64,
    Arm,
    #[serde(other)]
    Unknown,
}

/// The service's GitHub credential, as `{"state": "...", ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AuthState {
    /// No credential: nothing is polled.
    SignedOut,
    /// A usable credential for `login`; `expires_at` is when the refresh token runs out (the
    /// service renews the access token itself).
    SignedIn {
        login: String,
        expires_at: Option<UnixMillis>,
    },
    /// The credential stopped working (revoked, refresh token expired): the user must sign in
    /// again. `reason` says why, for people.
    SignInRequired { reason: String },
    #[serde(other)]
    Unknown,
}

/// Whether a target is a repository or an organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// `owner/repo`.
    Repo,
    /// `org`.
    Org,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Repo => "repo",
            TargetKind::Org => "org",
        }
    }
}

/// A target's lifecycle state (the domain's policy state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetState {
    Pending,
    Active,
    Draining,
    Disabled,
    AuthenticationFailed,
    RepairRequired,
    #[serde(other)]
    Unknown,
}

/// One served repository or organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetStatus {
    /// `owner/repo` or `org`.
    pub target: String,
    pub kind: TargetKind,
    pub profile: String,
    pub enabled: bool,
    pub state: TargetState,
    /// Most runners at once for this target; `null` means monitor only (demand is watched, no
    /// runner starts).
    pub max_capacity: Option<u32>,
    pub min_capacity: u32,
    /// The labels the runners register with: the routing label first, then the extra ones
    /// (GitHub's default `self-hosted`/OS/arch labels are not listed).
    pub labels: Vec<String>,
    /// Compare-and-set token: send it back in [`TargetUpdate`](crate::TargetUpdate).
    pub revision: u64,
    pub demand: Demand,
    pub active_runners: u32,
    /// Why this target is not serving jobs as it should, and the fix; `null` when it is fine.
    #[serde(default)]
    pub problem: Option<TargetProblem>,
    /// What its runners typically peak at (resident memory of the whole process tree; the
    /// 90th percentile of its last 20 metered jobs); absent before its first metered job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typical_peak_rss_bytes: Option<u64>,
    /// The target's own memory admission settings (`null`: it follows the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<TargetAdmission>,
    /// The target's own cache settings (`null`: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::caches::TargetCache>,
    /// Whether its runners keep their work folder between jobs.
    #[serde(default)]
    pub workspace: Workspace,
    /// Persistent workspaces saved for its next runners (0 for an ephemeral target).
    #[serde(default)]
    pub saved_workspaces: u32,
    /// What its runners start with: the job sandbox (unless the operator turned it off for
    /// this target) and Docker (only if turned on).
    #[serde(default)]
    pub sandbox: TargetSandbox,
    /// The label of the pool this host joined, when this target's runners register with it:
    /// jobs asking for it may run on any host of the pool. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_label: Option<String>,
    /// When the target's maximum is above what this host runs at once over all targets: what
    /// that means and the fix. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_note: Option<String>,
}

/// A target's sandbox choices, as the local API shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetSandbox {
    /// Its runners start inside the sandbox (`false`: the operator turned it off for it).
    pub walls: bool,
    /// Its jobs can use the host's Docker daemon (root-equivalent).
    pub docker: bool,
    /// The most memory one of its jobs may hold, in MiB (absent: the host's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_mb: Option<u32>,
    /// What that means, in plain words, when it is not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl Default for TargetSandbox {
    fn default() -> Self {
        TargetSandbox {
            walls: true,
            docker: false,
            memory_max_mb: None,
            warning: None,
        }
    }
}

/// Where a target's runners keep their work folder (`_work`) between jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workspace {
    /// A fresh one per job, removed with the runner.
    #[default]
    Ephemeral,
    /// A slot per concurrent runner, kept between jobs without credentials.
    Persistent,
    #[serde(other)]
    Unknown,
}

/// A target's own memory admission settings over the host's; a `null` field follows the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetAdmission {
    /// Memory admission on or off for this target's runners.
    #[serde(default)]
    pub memory_admission: Option<bool>,
    /// A runner's expected peak before the target has any history, in MiB (≥ 1).
    #[serde(default)]
    pub runner_memory_mb: Option<u64>,
    /// Memory kept free when one of its runners starts, in MiB.
    #[serde(default)]
    pub memory_headroom_mb: Option<u64>,
}

/// Something keeping a target from serving jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetProblem {
    pub code: ProblemCode,
    /// What is wrong, in words.
    pub message: String,
    /// What the user can do.
    pub fix: String,
    pub since: UnixMillis,
    /// Launch failures in a row (0 when the problem is not about launches).
    #[serde(default)]
    pub consecutive_failures: u32,
    /// When the next launch may be tried (back-off); `null` when nothing is tried until the
    /// user acts.
    #[serde(default)]
    pub next_try: Option<UnixMillis>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemCode {
    /// Launches failed recently; the next is delayed by back-off.
    LaunchBackoff,
    /// Launches kept failing: nothing starts until the cause is fixed and the target is
    /// retried (`repair_required`).
    LaunchFailing,
    /// A required host check failed (`host_checks`): nothing starts on this host.
    HostUnfit,
    /// GitHub refused the target (403/404: App not installed, not an admin, no such target).
    GitHubRefused,
    /// The credential stopped working.
    SignInRequired,
    #[serde(other)]
    Unknown,
}

/// Queued jobs that ask for this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Demand {
    pub queued: u32,
    /// `queued` is a lower bound (the scan stopped early, e.g. to save rate limit).
    pub is_floor: bool,
    /// Queued jobs whose labels could not be resolved (e.g. a matrix expression).
    pub unresolvable: u32,
}

/// A runner attempt's state (the domain's attempt state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerState {
    Allocated,
    JitReceived,
    Starting,
    Idle,
    Busy,
    Finished,
    Failed,
    Orphaned,
    Cleaned,
    #[serde(other)]
    Unknown,
}

/// The job a runner took, as far as it is known (from GitHub's jobs listing; `null` fields
/// were not reported).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobRef {
    pub id: Option<u64>,
    pub name: Option<String>,
    /// The workflow run the job belongs to.
    #[serde(default)]
    pub run_id: Option<u64>,
    /// `owner/repo` of the run.
    #[serde(default)]
    pub repository: Option<String>,
    #[serde(default)]
    pub workflow_name: Option<String>,
    /// The job's page on GitHub.
    #[serde(default)]
    pub html_url: Option<String>,
}

/// One runner attempt that is not cleaned yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerStatus {
    pub attempt_id: String,
    pub runner_name: String,
    pub target: String,
    pub state: RunnerState,
    pub job: Option<JobRef>,
    /// When it entered `state`.
    pub since: UnixMillis,
    /// What its process tree (the runner, its job and everything they started) uses, sampled
    /// every 2 s; absent before the first sample or where the service cannot meter (not Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunnerUsage>,
}

/// A runner's process tree as metered: memory now and at its peak, CPU on average and at its
/// busiest (millicores: 1000 = one core busy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerUsage {
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
    pub cpu_ms: u64,
    pub average_millicores: u64,
    pub busiest_millicores: u64,
}

/// The GitHub REST budget and how it is being spent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub limit: u32,
    pub remaining: u32,
    /// When GitHub resets the window.
    pub reset: Option<UnixMillis>,
    pub charged_last_hour: u32,
    /// Conditional requests answered `304 Not Modified` (not charged).
    pub not_modified_last_hour: u32,
    pub errors_last_hour: u32,
    /// The current poll interval, stretched when the budget runs low.
    pub poll_interval_secs: u32,
    /// What each target is planned to cost per hour at the current interval (charged
    /// requests), so a user can see what the product spends of their rate limit.
    #[serde(default)]
    pub planned_per_hour: Vec<TargetSpend>,
}

/// A target's planned hourly spend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetSpend {
    pub target: String,
    pub planned_per_hour: u32,
}

/// Why an attempt failed (the domain's failure reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    JitRequestFailed,
    JitExpired,
    PackageUnverified,
    VersionRejected,
    ProcessStartFailed,
    ProcessExitedUnexpectedly,
    TerminatedAfterRegistrationTimeout,
    WorkspaceCleanupDeferred,
    LaunchInterrupted,
    RunnerCrashed,
    #[serde(other)]
    Unknown,
}

/// A failure worth telling the user about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub at: UnixMillis,
    pub target: String,
    pub attempt_id: Option<String>,
    pub reason: FailureReason,
    /// What happened to this runner in particular (the job it was running, how its process
    /// ended), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What the user can do about it.
    pub fix: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_state_is_tagged_by_state() {
        let a = AuthState::SignedIn {
            login: "octocat".into(),
            expires_at: Some(UnixMillis(5)),
        };
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::json!({"state": "signed_in", "login": "octocat", "expires_at": 5})
        );
        let out: AuthState = serde_json::from_str(r#"{"state":"signed_out"}"#).unwrap();
        assert_eq!(out, AuthState::SignedOut);
        let later: AuthState = serde_json::from_str(r#"{"state":"locked"}"#).unwrap();
        assert_eq!(later, AuthState::Unknown);
    }

    #[test]
    fn fields_an_older_service_does_not_send_read_as_null() {
        let job: JobRef = serde_json::from_str(r#"{"id":7,"name":"build"}"#).unwrap();
        assert_eq!(job.id, Some(7));
        assert_eq!((job.run_id, job.html_url), (None, None));
        let github: Option<GitHubEndpoints> = serde_json::from_value(
            serde_json::json!({"web_base": "https://ghe.example", "api_base": "https://ghe.example/api/v3", "client_id": "Iv1.x"}),
        )
        .unwrap();
        assert_eq!(github.unwrap().web_base, "https://ghe.example");
    }

    #[test]
    fn unknown_enum_values_from_a_newer_service_are_tolerated() {
        let s: RunnerState = serde_json::from_str("\"hibernating\"").unwrap();
        assert_eq!(s, RunnerState::Unknown);
        let s: RunnerState = serde_json::from_str("\"jit_received\"").unwrap();
        assert_eq!(s, RunnerState::JitReceived);
        let r: FailureReason = serde_json::from_str("\"cosmic_ray\"").unwrap();
        assert_eq!(r, FailureReason::Unknown);
        let t: TargetState = serde_json::from_str("\"authentication_failed\"").unwrap();
        assert_eq!(t, TargetState::AuthenticationFailed);
    }
}
