//! The simulated GitHub: accounts, repositories, installations, tokens, device codes, runners,
//! runs and jobs, and the rules that change them. Plain data behind one mutex; no IO here.
//! Types holding secrets (tokens, device codes, runner credentials) deliberately lack `Debug`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::distr::{Alphanumeric, SampleString};
use rand::Rng;

use crate::counters::Counters;
use crate::error::FakeError;
use crate::fault::FaultRule;
use crate::types::{
    Behaviour, Conclusion, InstallationRepos, IssuedToken, JobSpec, JobStatus, JobView, RunView,
    RunnerScope, RunnerView,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccountKind {
    User,
    Org,
}

#[derive(Debug, Clone)]
pub(crate) struct Account {
    pub id: u64,
    pub login: String,
    pub kind: AccountKind,
    /// Org members: lowercase login -> is admin.
    pub members: BTreeMap<String, bool>,
}

#[derive(Debug, Clone)]
pub(crate) struct Repo {
    pub id: u64,
    pub owner: String,
    pub name: String,
    /// lowercase login -> admin.
    pub collaborators: BTreeMap<String, bool>,
    pub created: DateTime<Utc>,
}

impl Repo {
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Installation {
    pub id: u64,
    /// lowercase account login.
    pub account: String,
    pub repos: InstallationRepos,
    pub created: DateTime<Utc>,
}

#[derive(Clone)]
pub(crate) struct AccessToken {
    pub login: String,
    pub expires_at: DateTime<Utc>,
    pub revoked: bool,
}

#[derive(Clone)]
pub(crate) struct RefreshToken {
    pub login: String,
    pub access: String,
    pub expires_at: DateTime<Utc>,
    pub used: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeviceState {
    Pending,
    Approved(String),
    Denied,
    Consumed,
}

#[derive(Clone)]
pub(crate) struct Device {
    pub user_code: String,
    pub expires_at: Instant,
    pub interval_secs: u64,
    pub last_poll: Option<Instant>,
    pub state: DeviceState,
}

#[derive(Debug, Clone)]
pub(crate) struct Label {
    pub id: u64,
    pub name: String,
    pub read_only: bool,
}

#[derive(Clone)]
pub(crate) struct Runner {
    pub id: u64,
    pub name: String,
    pub scope: RunnerScope,
    pub group_id: u64,
    pub secret: String,
    pub os: String,
    pub online: bool,
    pub busy: bool,
    pub labels: Vec<Label>,
    pub job_id: Option<u64>,
    /// When its last broker session was dropped (it went offline).
    pub offline_since: Option<std::time::Instant>,
}

impl Runner {
    pub fn view(&self) -> RunnerView {
        RunnerView {
            id: self.id,
            name: self.name.clone(),
            scope: self.scope.clone(),
            runner_group_id: self.group_id,
            status: if self.online { "online" } else { "offline" }.to_string(),
            busy: self.busy,
            os: self.os.clone(),
            labels: self.labels.iter().map(|l| l.name.clone()).collect(),
            job_id: self.job_id,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub runner_id: u64,
    pub last_seen: Instant,
}

#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub id: u64,
    pub repo: String,
    pub run_number: u64,
    pub name: String,
    pub head_sha: String,
    pub created_at: DateTime<Utc>,
    pub job_ids: Vec<u64>,
    /// A pull request from a fork (any of its specs said so).
    pub from_fork: bool,
    /// A pull request from a branch of the repository itself.
    pub pull_request: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub id: u64,
    pub run_id: u64,
    pub repo: String,
    pub name: String,
    pub labels: Vec<String>,
    pub behaviour: Behaviour,
    pub duration: Duration,
    pub memory_mb: u32,
    pub memory_children: u32,
    pub command: Option<String>,
    pub status: JobStatus,
    pub conclusion: Option<Conclusion>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub runner_id: Option<u64>,
    pub runner_name: Option<String>,
    pub runner_group_id: Option<u64>,
    /// When a runner took it (the REST answers may show that late, `report_delay`).
    pub assigned_at: Option<std::time::Instant>,
}

impl Job {
    pub fn view(&self) -> JobView {
        JobView {
            id: self.id,
            run_id: self.run_id,
            repo: self.repo.clone(),
            name: self.name.clone(),
            labels: self.labels.clone(),
            status: self.status,
            conclusion: self.conclusion,
            runner_id: self.runner_id,
            runner_name: self.runner_name.clone(),
            behaviour: self.behaviour,
            command: self.command.clone(),
            started_at: self.started_at,
        }
    }
}

/// Per-user primary rate-limit window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateState {
    pub used: u64,
    pub reset: i64,
}

/// What a user may do with a repository or organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Not visible (404, GitHub hides private resources).
    NotFound,
    /// Visible but not administrable (403).
    NoAdmin,
    Admin,
}

/// Why a broker call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BrokerError {
    Unauthorized,
    Gone,
    Conflict,
    NotFound,
}

/// A job handed to a runner by the broker.
#[derive(Debug, Clone)]
pub(crate) struct Assignment {
    pub job_id: u64,
    pub run_id: u64,
    pub name: String,
    pub behaviour: Behaviour,
    pub duration: Duration,
    pub memory_mb: u32,
    pub memory_children: u32,
    pub command: Option<String>,
}

/// One published release of a repository: its tag and asset files (served from disk).
#[derive(Debug, Clone)]
pub(crate) struct FakeRelease {
    pub id: u64,
    pub repo: String,
    pub tag: String,
    pub assets: Vec<(String, std::path::PathBuf)>,
    pub published_at: DateTime<Utc>,
}

/// Package served by the downloads endpoint.
#[derive(Debug, Clone)]
pub(crate) struct PackageInfo {
    pub path: std::path::PathBuf,
    pub filename: String,
    pub sha256: String,
    pub os: String,
    pub arch: String,
}

pub(crate) struct World {
    next_id: u64,
    pub accounts: BTreeMap<String, Account>,
    pub repos: BTreeMap<String, Repo>,
    pub installations: BTreeMap<u64, Installation>,
    pub tokens: HashMap<String, AccessToken>,
    pub refresh: HashMap<String, RefreshToken>,
    pub devices: HashMap<String, Device>,
    pub runners: BTreeMap<u64, Runner>,
    next_runner_id: u64,
    next_label_id: u64,
    pub sessions: HashMap<String, Session>,
    pub runs: BTreeMap<u64, Run>,
    pub jobs: BTreeMap<u64, Job>,
    next_run_id: u64,
    next_job_id: u64,
    run_numbers: HashMap<String, u64>,
    pub rate: HashMap<u64, RateState>,
    pub rate_limit: u64,
    /// Remaining requests a user's first window starts with (set by `set_remaining`).
    pub initial_remaining: Option<u64>,
    pub faults: Vec<FaultRule>,
    pub counters: Counters,
    /// The REST requests that carried a token, per token (known to the fake or not): what each
    /// client signed in on its own spent (`FakeGitHub::requests_by_token`).
    pub token_counters: BTreeMap<String, Counters>,
    /// Every request counted, in order, the newest [`REQUEST_LOG_CAPACITY`].
    pub request_log: std::collections::VecDeque<crate::types::LoggedRequest>,
    pub package: Option<PackageInfo>,
    /// Published releases (the release feed, `http/releases.rs`), oldest first.
    pub releases: Vec<FakeRelease>,
    pub access_lifetime: Duration,
    pub refresh_lifetime: Duration,
    pub device_interval: Duration,
    pub device_expires_in: Duration,
    /// The App's "Enable Device Flow" setting is off: both OAuth device endpoints refuse with
    /// `device_flow_disabled`.
    pub device_flow_disabled: bool,
    pub session_timeout: Duration,
    pub lost_job_timeout: Duration,
    pub report_delay: Duration,
    request_seq: u64,
}

pub(crate) fn random_string(len: usize) -> String {
    Alphanumeric.sample_string(&mut rand::rng(), len)
}

fn valid_login(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

/// `now + d`, saturating at the latest representable date: a lifetime set absurdly long by a test
/// means "never expires", not a panic while the world is locked.
fn later(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Requests the log keeps (the oldest go first).
pub const REQUEST_LOG_CAPACITY: usize = 20_000;

impl World {
    /// Counts one request and appends it to the request log.
    pub fn record_request(&mut self, endpoint: &str, status: u16, charged: bool) {
        self.counters.record(endpoint, status, charged);
        if self.request_log.len() >= REQUEST_LOG_CAPACITY {
            self.request_log.pop_front();
        }
        self.request_log.push_back(crate::types::LoggedRequest {
            at: std::time::Instant::now(),
            endpoint: endpoint.to_string(),
            status,
            charged,
            target: String::new(),
        });
    }

    /// Names the path and query of the request [`World::record_request`] logged last.
    pub fn describe_last_request(&mut self, target: &str) {
        if let Some(last) = self.request_log.back_mut() {
            last.target = target.to_string();
        }
    }

    /// [`World::record_request`] for a REST request, also counted under the token it carried.
    pub fn record_rest_request(
        &mut self,
        token: Option<&str>,
        endpoint: &str,
        status: u16,
        charged: bool,
    ) {
        self.record_request(endpoint, status, charged);
        if let Some(token) = token {
            self.token_counters
                .entry(token.to_owned())
                .or_default()
                .record(endpoint, status, charged);
        }
    }

    pub fn new(config: &crate::FakeConfig) -> World {
        World {
            next_id: 1000,
            accounts: BTreeMap::new(),
            repos: BTreeMap::new(),
            installations: BTreeMap::new(),
            tokens: HashMap::new(),
            refresh: HashMap::new(),
            devices: HashMap::new(),
            runners: BTreeMap::new(),
            next_runner_id: 1,
            next_label_id: 1,
            sessions: HashMap::new(),
            runs: BTreeMap::new(),
            jobs: BTreeMap::new(),
            next_run_id: 7_000_000_001,
            next_job_id: 20_000_000_001,
            run_numbers: HashMap::new(),
            rate: HashMap::new(),
            rate_limit: config.rate_limit,
            initial_remaining: None,
            releases: Vec::new(),
            faults: Vec::new(),
            counters: Counters::default(),
            token_counters: BTreeMap::new(),
            request_log: std::collections::VecDeque::new(),
            package: None,
            access_lifetime: config.access_token_lifetime,
            refresh_lifetime: config.refresh_token_lifetime,
            device_interval: config.device_interval,
            device_expires_in: config.device_expires_in,
            device_flow_disabled: false,
            session_timeout: config.session_timeout,
            lost_job_timeout: config.lost_job_timeout,
            report_delay: config.report_delay,
            request_seq: 0,
        }
    }

    /// Whether the REST answers do not show yet that a runner took `job` (`report_delay`).
    pub(crate) fn taken_unreported(&self, job: u64) -> bool {
        self.jobs
            .get(&job)
            .and_then(|j| j.assigned_at)
            .is_some_and(|t| t.elapsed() < self.report_delay)
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn request_id(&mut self) -> String {
        self.request_seq += 1;
        format!(
            "FAKE:{:04X}:{:06X}",
            std::process::id() & 0xFFFF,
            self.request_seq
        )
    }
}

mod accounts;
mod auth;
mod jobs;
mod rate;
mod runners;

#[cfg(test)]
mod tests {
    use super::*;

    fn world() -> World {
        let mut w = World::new(&crate::FakeConfig::default());
        w.create_user("octo").unwrap();
        w.create_repo("octo/hello").unwrap();
        w
    }

    #[test]
    fn run_status_follows_jobs() {
        let mut w = world();
        let spec = |n: &str| JobSpec::new(n, &["self-hosted"]);
        let run = w
            .queue_run("octo/hello", vec![spec("a"), spec("b")])
            .unwrap();
        let ids = w.runs[&run].job_ids.clone();
        assert_eq!(w.run_view(&w.runs[&run]).status, JobStatus::Queued);
        w.finish_job(ids[0], Conclusion::Success);
        assert_eq!(w.run_view(&w.runs[&run]).status, JobStatus::InProgress);
        w.finish_job(ids[1], Conclusion::Cancelled);
        let v = w.run_view(&w.runs[&run]);
        assert_eq!(
            (v.status, v.conclusion),
            (JobStatus::Completed, Some(Conclusion::Cancelled))
        );
    }

    #[test]
    fn refresh_rotation_kills_the_old_pair() {
        let mut w = world();
        let t = w.issue_token("octo").unwrap();
        let r = t.refresh_token.clone().unwrap();
        let t2 = w.refresh_token(&r).unwrap();
        assert!(w.token_login(&t.access_token).is_none());
        assert_eq!(w.token_login(&t2.access_token).as_deref(), Some("octo"));
        assert!(w.refresh_token(&r).is_none());
    }

    #[test]
    fn setup_errors_name_the_problem() {
        let mut w = world();
        assert_eq!(
            w.create_repo("ghost/x"),
            Err(FakeError::UnknownAccount("ghost".into()))
        );
        assert_eq!(
            w.create_repo("nonsense"),
            Err(FakeError::InvalidName("nonsense".into()))
        );
        assert_eq!(
            w.create_user("OCTO"),
            Err(FakeError::AlreadyExists("OCTO".into()))
        );
        assert_eq!(w.queue_run("octo/hello", vec![]), Err(FakeError::EmptyRun));
        assert_eq!(
            w.add_org_member("octo", "octo", true),
            Err(FakeError::NotAnOrg("octo".into()))
        );
    }
}
