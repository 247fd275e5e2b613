//! Public value types of the fake's Rust API: what tests put into the world and read back.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which repositories an installation covers (§2 `repository_selection`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallationRepos {
    /// Every repository of the account, including ones created later.
    All,
    /// Only these repositories (`"owner/name"`).
    Selected(Vec<String>),
}

/// A token pair minted by [`crate::FakeGitHub::issue_token`] or the device flow. `Debug` redacts
/// the secrets so they never reach test logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedToken {
    /// `ghu_…` user access token.
    pub access_token: String,
    /// `ghr_…` refresh token (absent only if the fake were configured without expiring tokens).
    pub refresh_token: Option<String>,
    /// When the access token stops working (UTC).
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// When the refresh token stops working (UTC).
    pub refresh_expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedToken")
            .field("access_token", &"<redacted>")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("refresh_expires_at", &self.refresh_expires_at)
            .finish()
    }
}

/// What the fake runner listener does with a job it receives (sent to it by the broker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    /// Sleep `duration`, then complete with `succeeded`.
    #[default]
    Succeed,
    /// Sleep `duration`, then complete with `failed`.
    Fail,
    /// Never complete (until killed).
    Hang,
    /// Exit abruptly mid-job without completing.
    Crash,
}

impl Behaviour {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Behaviour::Succeed => "succeed",
            Behaviour::Fail => "fail",
            Behaviour::Hang => "hang",
            Behaviour::Crash => "crash",
        }
    }
}

/// One job of a queued workflow run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Job display name.
    pub name: String,
    /// The `runs-on` labels; a runner must carry all of them (case-insensitive).
    pub labels: Vec<String>,
    /// What the listener should do with it.
    #[serde(default)]
    pub behaviour: Behaviour,
    /// How long the listener "works" on it (Succeed/Fail).
    #[serde(default, with = "duration_ms", rename = "duration_ms")]
    pub duration: Duration,
    /// Memory the job holds while it works (MiB), in `memory_children` child processes of
    /// the listener (at least one when non-zero): a real process tree to meter.
    #[serde(default)]
    pub memory_mb: u32,
    #[serde(default)]
    pub memory_children: u32,
    /// A step the listener runs while working on the job: `/bin/sh -c <command>` in the job's
    /// work directory, with the listener's environment plus `GITHUB_JOB`, `GITHUB_RUN_ID`,
    /// `RUNNER_TEMP` and `GITHUB_WORKSPACE`. A non-zero exit fails the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The job comes from a pull request of a fork: its run is rendered with
    /// `event: pull_request` and a `head_repository` other than `repository`. A run is from a
    /// fork when any of its jobs is.
    #[serde(default)]
    pub from_fork: bool,
    /// The job comes from a pull request of a branch of the repository itself: its run is
    /// rendered with `event: pull_request`, the repository as its `head_repository` and
    /// `head_branch: feature`. A run is one when any of its jobs is (a fork's wins).
    #[serde(default)]
    pub pull_request: bool,
}

impl JobSpec {
    /// A job that succeeds after `duration`.
    pub fn new(name: &str, labels: &[&str]) -> JobSpec {
        JobSpec {
            name: name.to_string(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            behaviour: Behaviour::Succeed,
            duration: Duration::from_millis(100),
            memory_mb: 0,
            memory_children: 0,
            command: None,
            from_fork: false,
            pull_request: false,
        }
    }

    /// A job whose `runs-on` is an expression GitHub could not resolve (e.g.
    /// `${{ matrix.os }}`): GitHub then reports the literal text as the label, which no runner
    /// carries, so the job never gets a runner.
    pub fn unresolvable(name: &str, expression: &str) -> JobSpec {
        JobSpec {
            name: name.to_string(),
            labels: vec![expression.to_string()],
            behaviour: Behaviour::Succeed,
            duration: Duration::from_millis(100),
            memory_mb: 0,
            memory_children: 0,
            command: None,
            from_fork: false,
            pull_request: false,
        }
    }

    /// Builder: hold `mb` MiB in all while working, spread over `children` child processes.
    pub fn memory(mut self, mb: u32, children: u32) -> JobSpec {
        self.memory_mb = mb;
        self.memory_children = children;
        self
    }

    /// Builder: set the behaviour.
    pub fn behaviour(mut self, behaviour: Behaviour) -> JobSpec {
        self.behaviour = behaviour;
        self
    }

    /// Builder: set the duration.
    pub fn duration(mut self, duration: Duration) -> JobSpec {
        self.duration = duration;
        self
    }

    /// Builder: run `cmd` (`/bin/sh -c`) as the job's step, before the behaviour's duration.
    pub fn with_command(mut self, cmd: &str) -> Self {
        self.command = Some(cmd.to_string());
        self
    }

    /// Builder: the job comes from a pull request of a fork (so does its whole run).
    pub fn from_fork(mut self) -> Self {
        self.from_fork = true;
        self
    }

    /// Builder: the job comes from a pull request of a branch of the repository itself.
    pub fn pull_request(mut self) -> Self {
        self.pull_request = true;
        self
    }
}

/// Job/run status as GitHub spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    InProgress,
    Completed,
}

impl JobStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::InProgress => "in_progress",
            JobStatus::Completed => "completed",
        }
    }
}

/// Job/run conclusion as GitHub spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Conclusion {
    Success,
    Failure,
    Cancelled,
}

impl Conclusion {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Conclusion::Success => "success",
            Conclusion::Failure => "failure",
            Conclusion::Cancelled => "cancelled",
        }
    }
}

/// Where a runner is registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerScope {
    /// `"owner/name"`.
    Repo(String),
    /// Organization login.
    Org(String),
}

/// Snapshot of a registered runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerView {
    pub id: u64,
    pub name: String,
    pub scope: RunnerScope,
    pub runner_group_id: u64,
    /// `online` while a broker session is live, else `offline`.
    pub status: String,
    pub busy: bool,
    pub os: String,
    /// All label names (read-only ones first, then custom).
    pub labels: Vec<String>,
    /// The job it took, if any (JIT runners take at most one).
    pub job_id: Option<u64>,
}

/// Snapshot of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub id: u64,
    pub run_id: u64,
    /// `"owner/name"`.
    pub repo: String,
    pub name: String,
    pub labels: Vec<String>,
    pub status: JobStatus,
    pub conclusion: Option<Conclusion>,
    pub runner_id: Option<u64>,
    pub runner_name: Option<String>,
    pub behaviour: Behaviour,
    /// The step command the listener is given, if any.
    #[serde(default)]
    pub command: Option<String>,
    /// When a runner took it (the broker's clock, not what the REST answers say yet).
    #[serde(default)]
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Snapshot of a workflow run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    pub id: u64,
    pub repo: String,
    pub status: JobStatus,
    pub conclusion: Option<Conclusion>,
    pub job_ids: Vec<u64>,
    /// Rendered as a pull request from a fork (`event: pull_request`, another head repository).
    #[serde(default)]
    pub from_fork: bool,
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// One request as the fake saw it (`FakeGitHub::request_log`). `status` 0: the connection was
/// dropped or stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    pub at: std::time::Instant,
    /// The endpoint name, as in [`crate::Counters`].
    pub endpoint: String,
    pub status: u16,
    pub charged: bool,
    /// The REST request's path and query (empty for other requests).
    pub target: String,
}
