//! The host doctor: every host check (`rm_runner::doctor`'s runner checks and capacity advice,
//! plus whether GitHub answers and takes the credential), run at start, on `GET
//! /v1/host/doctor` and before a retry; the last results are what `status` shows in
//! `host_checks`. The loops run the required runner checks themselves before a launch after a
//! failure; their results are merged in here ([`Doctor::on_event`]).
//!
//! GitHub is asked with `GET /rate_limit`, which GitHub does not charge, and only while the
//! host has a target: a host without targets stays off the network.

use rm_adapters::JournalAdapter;
use rm_core::{CheckState, HostCheck};
use rm_github::GitHubClient;
use rm_github::{AuthState, GitHubError};
use rm_proto::{DoctorReport, UnixMillis};
use rm_runner::{Platform, RunnerHostConfig};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Stable ids of the GitHub checks.
pub const GITHUB_REACHABLE: &str = "github_reachable";
pub const GITHUB_CREDENTIAL: &str = "github_credential";

/// How long asking GitHub may take before the doctor reports it unreachable.
const PROBE_DEADLINE: Duration = Duration::from_secs(15);

/// The checks that need no service: the runner checks and the capacity advice (blocking).
pub fn local_checks(config: &RunnerHostConfig, capacity: u32) -> Vec<HostCheck> {
    let mut checks = rm_runner::doctor::runner_checks(&rm_runner::doctor::DoctorSubject {
        runner_root: &config.runner_root,
        cache_dir: &config.cache_dir,
        run_as: &config.run_as,
        platform: Platform::current(),
        sandbox: &config.sandbox,
        caps: &config.job_caps,
        layers: &config.cache_layers,
    });
    checks.push(rm_runner::doctor::capacity_check(capacity));
    checks
}

/// A check as the local API shows it, taken at `at`.
fn wire_at(c: &HostCheck, at: UnixMillis) -> rm_proto::HostCheck {
    rm_proto::HostCheck {
        checked_at: Some(at),
        ..wire(c)
    }
}

/// A check as the local API shows it.
pub fn wire(c: &HostCheck) -> rm_proto::HostCheck {
    rm_proto::HostCheck {
        id: c.id.clone(),
        title: c.title.clone(),
        state: match c.state {
            CheckState::Pass => rm_proto::CheckState::Pass,
            CheckState::Warn => rm_proto::CheckState::Warn,
            CheckState::Fail => rm_proto::CheckState::Fail,
            CheckState::Skipped => rm_proto::CheckState::Skipped,
        },
        required: c.required,
        detail: c.detail.clone(),
        fix: c.fix.clone(),
        checked_at: None,
    }
}

fn check(id: &str, state: CheckState, detail: String, fix: Option<String>) -> HostCheck {
    let title = match id {
        GITHUB_REACHABLE => "The service can reach GitHub",
        _ => "GitHub accepts the service's credential",
    };
    HostCheck {
        id: id.to_string(),
        title: title.to_string(),
        state,
        required: true,
        detail,
        fix,
    }
}

fn sign_in() -> Option<String> {
    Some("sign in with `runner-manager auth login` (or the tray's Sign in)".into())
}

/// `github_reachable` and `github_credential`, asking GitHub at most once (for free).
pub async fn github_checks(client: &GitHubClient, has_targets: bool) -> Vec<HostCheck> {
    let api = client.config().endpoints.api().to_string();
    let skipped = |id, why: &str| check(id, CheckState::Skipped, why.to_string(), None);
    match client.auth_state() {
        AuthState::SignedOut => {
            return vec![
                skipped(
                    GITHUB_REACHABLE,
                    "not asked: the service holds no credential",
                ),
                check(
                    GITHUB_CREDENTIAL,
                    CheckState::Fail,
                    "the service holds no GitHub credential".into(),
                    sign_in(),
                ),
            ]
        }
        AuthState::SignInRequired { reason } => {
            return vec![
                skipped(
                    GITHUB_REACHABLE,
                    "not asked: the credential stopped working",
                ),
                check(
                    GITHUB_CREDENTIAL,
                    CheckState::Fail,
                    format!("the credential stopped working: {reason}"),
                    sign_in(),
                ),
            ]
        }
        AuthState::SignedIn { .. } => {}
    }
    if !has_targets {
        let why = "not asked: a host without targets stays off the network (add one with \
                   `runner-manager repo add OWNER/REPO`)";
        return vec![
            skipped(GITHUB_REACHABLE, why),
            skipped(GITHUB_CREDENTIAL, why),
        ];
    }
    let answered = |detail: String| check(GITHUB_REACHABLE, CheckState::Pass, detail, None);
    match tokio::time::timeout(PROBE_DEADLINE, client.rate_limit()).await {
        Ok(Ok(rate)) => {
            let left = rate.map_or_else(String::new, |r| {
                format!("; {} of {} requests left this hour", r.remaining, r.limit)
            });
            vec![
                answered(format!("{api} answered{left} (asking is free)")),
                check(
                    GITHUB_CREDENTIAL,
                    CheckState::Pass,
                    "GitHub accepted the credential".into(),
                    None,
                ),
            ]
        }
        Ok(Err(e @ (GitHubError::Unauthorized | GitHubError::SignInRequired { .. }))) => vec![
            answered(format!("{api} answered")),
            check(
                GITHUB_CREDENTIAL,
                CheckState::Fail,
                e.to_string(),
                sign_in(),
            ),
        ],
        Ok(Err(GitHubError::RateLimited { until, .. })) => vec![
            check(
                GITHUB_REACHABLE,
                CheckState::Warn,
                format!("GitHub rate-limits this credential until {until}: nothing is sent before"),
                Some(
                    "wait; other tools using the same GitHub account share its hourly limit".into(),
                ),
            ),
            skipped(GITHUB_CREDENTIAL, "not asked while rate-limited"),
        ],
        Ok(Err(e @ GitHubError::Transient { .. })) => vec![
            check(
                GITHUB_REACHABLE,
                CheckState::Fail,
                e.to_string(),
                Some(format!(
                    "check this machine's network, DNS, proxy and firewall for {api}"
                )),
            ),
            skipped(GITHUB_CREDENTIAL, "not asked: GitHub did not answer"),
        ],
        Ok(Err(e)) => vec![
            answered(format!("{api} answered")),
            check(GITHUB_CREDENTIAL, CheckState::Warn, e.to_string(), None),
        ],
        Err(_) => vec![
            check(
                GITHUB_REACHABLE,
                CheckState::Fail,
                format!("{api} did not answer within {} s", PROBE_DEADLINE.as_secs()),
                Some(format!(
                    "check this machine's network, DNS, proxy and firewall for {api}"
                )),
            ),
            skipped(GITHUB_CREDENTIAL, "not asked: GitHub did not answer"),
        ],
    }
}

/// The last results, in check order, each with when it was taken.
pub struct Doctor {
    config: RunnerHostConfig,
    last: Mutex<Vec<(HostCheck, UnixMillis)>>,
}

fn now() -> UnixMillis {
    UnixMillis(chrono::Utc::now().timestamp_millis())
}

/// How long a re-run of the GitHub checks after a credential change may take before status
/// says the new credential is not checked yet (instead of keeping the old verdict).
const RECHECK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Doctor {
    pub fn new(config: RunnerHostConfig) -> Doctor {
        Doctor {
            config,
            last: Mutex::new(Vec::new()),
        }
    }

    /// The last results, as `status` shows them.
    pub fn checks(&self) -> Vec<rm_proto::HostCheck> {
        locked(&self.last)
            .iter()
            .map(|(c, at)| wire_at(c, *at))
            .collect()
    }

    /// Replaces the results with the same ids, keeping the others (and the order).
    fn merge(&self, fresh: &[HostCheck]) {
        let at = now();
        let mut last = locked(&self.last);
        for c in fresh {
            match last.iter_mut().find(|(old, _)| old.id == c.id) {
                Some(old) => *old = (c.clone(), at),
                None => last.push((c.clone(), at)),
            }
        }
    }

    /// Runs the GitHub checks again: what they depend on (the credential, whether the host has
    /// targets) changed, and status must never show the verdict on the old one. Without an
    /// answer within a few seconds the credential shows as not checked yet.
    pub async fn recheck_github(&self, client: &GitHubClient, journal: &JournalAdapter) {
        let has_targets = has_targets(journal).await;
        match tokio::time::timeout(RECHECK_DEADLINE, github_checks(client, has_targets)).await {
            Ok(checks) => self.merge(&checks),
            Err(_) => self.merge(&[check(
                GITHUB_CREDENTIAL,
                CheckState::Skipped,
                format!(
                    "not checked yet: GitHub did not answer within {} s",
                    RECHECK_DEADLINE.as_secs()
                ),
                Some("`runner-manager host doctor` checks again".into()),
            )]),
        }
    }

    /// Learns from a loop that ran the runner checks before a launch; true when it did.
    pub fn on_event(&self, event: &rm_agent::AgentEvent) -> bool {
        match &event.kind {
            rm_agent::EventKind::HostChecked { checks } => {
                self.merge(checks);
                true
            }
            _ => false,
        }
    }

    /// The runner checks and the capacity advice, run now (off the async threads).
    pub async fn run_local(&self, capacity: u32) -> Vec<HostCheck> {
        let config = self.config.clone();
        let checks = tokio::task::spawn_blocking(move || local_checks(&config, capacity))
            .await
            .unwrap_or_else(|e| {
                vec![HostCheck {
                    id: "host_checks".into(),
                    title: "The host checks ran".into(),
                    state: CheckState::Fail,
                    required: false,
                    detail: format!("the checks could not run: {e}"),
                    fix: Some("see the service's log".into()),
                }]
            });
        self.merge(&checks);
        checks
    }

    /// Every check, run now; the results become what `status` shows.
    pub async fn run(&self, client: &GitHubClient, journal: &JournalAdapter) -> DoctorReport {
        let (capacity, has_targets) = journal
            .with(|j| {
                let capacity = j.get_host()?.map_or(1, |r| r.host.capacity);
                Ok((capacity, !j.list_policies()?.is_empty()))
            })
            .await
            .unwrap_or((1, false));
        let mut checks = self.run_local(capacity).await;
        let github = github_checks(client, has_targets).await;
        self.merge(&github);
        checks.extend(github);
        let at = now();
        DoctorReport {
            at,
            checks: checks.iter().map(|c| wire_at(c, at)).collect(),
        }
    }
}

/// Whether the journal has any policy: without one the host opens no network connection.
/// A failed read counts as none (asking GitHub can wait for the next look).
pub async fn has_targets(journal: &JournalAdapter) -> bool {
    journal
        .with(|j| j.list_policies())
        .await
        .map(|p| !p.is_empty())
        .unwrap_or(false)
}
