//! `GET /v1/status` (and every watch snapshot): built from the journal (host, policies,
//! attempts, last GitHub contact, login), the GitHub client (auth state, budget, endpoints, the
//! job each runner took) and what the event pump learnt (demand, recent failures, launch
//! problems, host checks). Nothing secret is read here.

use super::state::{meta, Daemon};
use crate::wire::{journal_error, via};
use rm_core::{Attempt, Host, Policy, PolicyId, ProfileName, RoutingPrefix};
use rm_proto::{
    ApiError, AuthState, Budget, GitHubEndpoints, GitHubHealth, GitHubHealthState, HostStatus,
    JobRef, RunnerStatus, Status, TargetKind, TargetSpend, TargetStatus, UnixMillis,
};
use std::collections::BTreeMap;

/// This host with the admission settings in force.
pub fn host_status(
    host: &Host,
    admission: rm_proto::HostAdmission,
    runner_env: &rm_runner::RunnerEnv,
) -> HostStatus {
    HostStatus {
        id: host.id.to_string(),
        label: host.label.to_string(),
        os: via(&host.os.to_string(), rm_proto::Os::Unknown),
        arch: via(&host.arch.to_string(), rm_proto::Arch::Unknown),
        capacity: host.capacity,
        routing_label: host
            .routing_label(&RoutingPrefix::default(), &ProfileName::default())
            .to_string(),
        capacity_note: Some(super::host_row::capacity_note(host.capacity)),
        admission: Some(admission),
        runner_env: runner_env.names(),
    }
}

/// A target as status and the target answers show it; `host_capacity` is what this host runs
/// at once over all targets (a higher maximum gets a note with the fix).
pub fn target_status(
    daemon: &Daemon,
    policy: &Policy,
    active: u32,
    host_capacity: u32,
) -> TargetStatus {
    // Every label the runners register with, the routing label first (as the offline view
    // and `repo add`'s routing-label line expect).
    let labels = policy.labels().to_strings();
    TargetStatus {
        target: policy.target().to_string(),
        kind: if policy.target().is_organization() {
            TargetKind::Org
        } else {
            TargetKind::Repo
        },
        profile: policy.profile().to_string(),
        enabled: policy.enabled(),
        state: via(policy.state().as_str(), rm_proto::TargetState::Unknown),
        max_capacity: policy.max_capacity(),
        min_capacity: policy.min_capacity(),
        labels,
        revision: policy.revision(),
        demand: daemon.demand.of(policy.id().get()),
        active_runners: active,
        problem: daemon.launch.problem(policy),
        typical_peak_rss_bytes: daemon.admission.typical_peak(policy.id()),
        admission: daemon
            .admission
            .own(policy.id())
            .map(|own| rm_proto::TargetAdmission {
                memory_admission: own.memory_admission,
                runner_memory_mb: own.runner_memory_mb,
                memory_headroom_mb: own.memory_headroom_mb,
            }),
        cache: {
            let own = daemon.caches.for_policy(policy.id());
            (own != rm_core::caches::CacheSetting::default()).then(|| rm_proto::TargetCache {
                enabled: own.enabled,
                namespace: own.namespace.map(|n| match n {
                    rm_core::caches::Namespace::Shared(name) => name,
                    other => other.to_string(),
                }),
            })
        },
        workspace: match policy.workspace_mode() {
            rm_core::WorkspaceMode::Persistent => rm_proto::Workspace::Persistent,
            rm_core::WorkspaceMode::Ephemeral => rm_proto::Workspace::Ephemeral,
        },
        saved_workspaces: match policy.workspace_mode() {
            rm_core::WorkspaceMode::Persistent => daemon.caches.workspaces().map_or(0, |w| {
                u32::try_from(w.saved(policy.id())).unwrap_or(u32::MAX)
            }),
            rm_core::WorkspaceMode::Ephemeral => 0,
        },
        sandbox: {
            let choice = daemon.sandboxes.for_policy(policy.id());
            rm_proto::TargetSandbox {
                walls: choice.walls,
                docker: choice.docker,
                memory_max_mb: choice.memory_max_mb,
                warning: choice.warning(),
            }
        },
        pool_label: daemon
            .pool
            .pool()
            .map(|p| p.label().to_owned())
            .filter(|l| policy.labels().to_strings().iter().any(|t| t == l)),
        capacity_note: capacity_note(policy.max_capacity(), host_capacity),
    }
}

/// What a maximum above the host's capacity means, with the fix ("why only one runner?").
pub fn capacity_note(max: Option<u32>, host_capacity: u32) -> Option<String> {
    let max = max.filter(|m| *m > host_capacity)?;
    Some(format!(
        "this host runs at most {host_capacity} runner(s) at once over all targets; to run \
         {max} here, raise it with `runner-manager host set-capacity {max}`"
    ))
}

fn runner_status(
    daemon: &Daemon,
    attempt: &Attempt,
    target_of: &BTreeMap<PolicyId, String>,
) -> RunnerStatus {
    let mut state = via(attempt.state().as_str(), rm_proto::RunnerState::Unknown);
    // The journal learns `busy` from the runner inventory, which a live runner within its
    // timeouts is listed at most every `inventory_refresh`; the demand polls (every pass) may
    // already have seen GitHub give it a job. Show that: it is GitHub's word too.
    let running_job = daemon
        .client
        .job_of_runner(attempt.runner_name())
        .is_some_and(|j| j.status == "in_progress");
    if running_job
        && matches!(
            state,
            rm_proto::RunnerState::Starting | rm_proto::RunnerState::Idle
        )
    {
        state = rm_proto::RunnerState::Busy;
    }
    RunnerStatus {
        attempt_id: attempt.id().to_string(),
        runner_name: attempt.runner_name().to_string(),
        target: target_of
            .get(&attempt.policy_id())
            .cloned()
            .unwrap_or_default(),
        state,
        job: job_of(&daemon.client, attempt.runner_name()),
        since: UnixMillis(attempt.state_changed_at().as_millis()),
        usage: daemon.meters.usage(&attempt.id().to_string()),
    }
}

/// The job a runner took, as the demand polls saw it: GitHub's jobs listing names the runner
/// of each assigned job, and demand reads those listings anyway, so this costs no request.
/// `None` until a poll has seen the runner take a job.
pub fn job_of(client: &rm_github::GitHubClient, runner_name: &str) -> Option<JobRef> {
    client.job_of_runner(runner_name).map(|j| JobRef {
        id: Some(j.job_id),
        name: j.name,
        run_id: Some(j.run_id),
        repository: Some(j.repository),
        workflow_name: j.workflow_name,
        html_url: j.html_url,
    })
}

/// Where the service's GitHub is, so `auth login` and the tray sign in against the same one.
pub fn github_endpoints(daemon: &Daemon) -> GitHubEndpoints {
    let config = daemon.client.config();
    GitHubEndpoints {
        web_base: config.endpoints.web().to_string(),
        api_base: config.endpoints.api().to_string(),
        client_id: config.client_id.clone(),
    }
}

/// The auth state for clients: the client's view plus the login the credential was handed
/// over with.
pub fn auth_state(daemon: &Daemon, login: Option<String>, expires: Option<i64>) -> AuthState {
    match daemon.client.auth_state() {
        rm_github::AuthState::SignedOut => AuthState::SignedOut,
        rm_github::AuthState::SignedIn { expires_at, .. } => AuthState::SignedIn {
            login: login.unwrap_or_default(),
            expires_at: expires
                .map(UnixMillis)
                .or(expires_at.map(|t| UnixMillis(t.timestamp_millis()))),
        },
        rm_github::AuthState::SignInRequired { reason } => AuthState::SignInRequired {
            reason: format!("{reason}: sign in again with `runner-manager auth login`"),
        },
    }
}

/// What the service spends of the user's rate limit: requests of the last 60 minutes (charged,
/// free 304s, failed), the quota GitHub last reported, and each target's planned hourly spend
/// at the planned interval (`targets`: the distinct targets, in status order).
fn budget(daemon: &Daemon, targets: &[String]) -> Option<Budget> {
    let snapshot = daemon.client.budget();
    let rate = snapshot.rate.as_ref()?;
    let planner = daemon.client.planner();
    let interval = planner.poll_interval(targets.len(), rate.limit).as_secs();
    let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let planned_per_hour = planner
        .planned_per_target(targets, &snapshot.targets, rate.limit)
        .into_iter()
        .map(|(target, per_hour)| TargetSpend {
            target,
            planned_per_hour: per_hour.round().clamp(0.0, f64::from(u32::MAX)) as u32,
        })
        .collect();
    Some(Budget {
        limit: count(rate.limit),
        remaining: count(rate.remaining),
        reset: Some(UnixMillis(rate.reset.timestamp_millis())),
        charged_last_hour: count(snapshot.last_hour.charged),
        not_modified_last_hour: count(snapshot.last_hour.free),
        errors_last_hour: count(snapshot.last_hour.errors),
        poll_interval_secs: count(interval),
        planned_per_hour,
    })
}

/// Whether GitHub answers this host (the client's outage and rate gates).
pub fn github_health(daemon: &Daemon) -> GitHubHealth {
    let h = daemon.client.health();
    let ms = |t: chrono::DateTime<chrono::Utc>| UnixMillis(t.timestamp_millis());
    GitHubHealth {
        state: match h.state {
            rm_github::HealthState::Ok => GitHubHealthState::Ok,
            rm_github::HealthState::Unreachable => GitHubHealthState::Unreachable,
            rm_github::HealthState::RateLimited => GitHubHealthState::RateLimited,
        },
        since: h.since.map(ms),
        next_try: h.next_try.map(ms),
        detail: h.detail,
        consecutive_failures: h.consecutive_failures,
    }
}

struct Read {
    host: Option<Host>,
    policies: Vec<Policy>,
    counts: BTreeMap<PolicyId, u32>,
    attempts: Vec<Attempt>,
    last_contact: Option<String>,
    login: Option<String>,
    expires: Option<String>,
}

pub async fn build(daemon: &Daemon) -> Result<Status, ApiError> {
    let read = daemon
        .journal
        .with(|j| {
            Ok(Read {
                host: j.get_host()?.map(|r| r.host),
                policies: j.list_policies()?,
                counts: j.active_counts_by_policy()?,
                attempts: j.uncleaned_attempts()?,
                last_contact: j.meta_get(crate::meta::LAST_GITHUB_CONTACT_MS)?,
                login: j.meta_get(meta::LOGIN)?,
                expires: j.meta_get(meta::SIGN_IN_EXPIRES_MS)?,
            })
        })
        .await
        .map_err(journal_error)?;
    let host = read.host.ok_or_else(|| {
        ApiError::service_unavailable(
            "the host row is missing from the journal: restart the service",
        )
    })?;
    let target_of: BTreeMap<PolicyId, String> = read
        .policies
        .iter()
        .map(|p| (p.id(), p.target().to_string()))
        .collect();
    // A target being removed is gone for the user; its runners stay listed until cleaned.
    let targets: Vec<TargetStatus> = read
        .policies
        .iter()
        .filter(|p| !daemon.removals.contains(p.id()))
        .map(|p| {
            let active = read.counts.get(&p.id()).copied().unwrap_or(0);
            target_status(daemon, p, active, host.capacity)
        })
        .collect();
    let queued = targets.iter().any(|t| t.demand.queued > 0);
    let mut distinct: Vec<&str> = target_of.values().map(String::as_str).collect();
    distinct.sort_unstable();
    distinct.dedup();
    Ok(Status {
        host: host_status(
            &host,
            daemon.admission.config().to_wire(),
            daemon.runner_env.get(),
        ),
        paused: daemon.paused.get(),
        auth: auth_state(
            daemon,
            read.login,
            read.expires.and_then(|e| e.parse().ok()),
        ),
        runners: read
            .attempts
            .iter()
            .map(|a| runner_status(daemon, a, &target_of))
            .collect(),
        targets,
        // This process's contact is newer than the journal's copy (written once a minute).
        last_github_contact: daemon
            .contact
            .last()
            .or_else(|| read.last_contact.and_then(|v| v.parse().ok()))
            .map(UnixMillis),
        budget: budget(
            daemon,
            &distinct.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        ),
        recent_failures: daemon.failures.list(),
        github: Some(github_endpoints(daemon)),
        github_health: github_health(daemon),
        host_checks: daemon.doctor.checks(),
        admission: daemon.admission.hold().map(|h| rm_proto::AdmissionHold {
            message: h.message(queued),
            fix: h.fix().to_owned(),
            available_bytes: h.available_bytes,
            reserved_bytes: h.reserved_bytes,
            headroom_bytes: h.headroom_bytes,
            expected_bytes: h.expected_bytes,
        }),
        workstation: daemon
            .admission
            .rule_hold()
            .map(|h| rm_proto::WorkstationHold {
                rule: h.rule.to_owned(),
                short: h.short,
                message: h.message,
                fix: h.fix,
            }),
        caches_problem: daemon.caches.setup_problem().map(caches_problem),
        pool: daemon.pool.status(),
        left_registrations: daemon.left_registrations.list(),
    })
}

/// Runners keep starting without their caches or workspace: what failed, and what to do.
fn caches_problem(p: rm_runner::SetupProblem) -> rm_proto::CachesProblem {
    let (message, fix) = match p.what {
        "workspace" => (
            format!(
                "The last {} runners of a target with persistent workspaces started with an empty work folder: {}",
                p.failures, p.detail
            ),
            "Jobs still run, only slower. Check that the runner root's filesystem has space and \
             is writable by the service; `runner-manager repo set TARGET --workspace ephemeral` \
             stops using the workspaces and deletes them."
                .to_owned(),
        ),
        _ => (
            format!(
                "The last {} runners started without their caches: {}",
                p.failures, p.detail
            ),
            "Jobs still run, only slower. Check that the runner root's filesystem has space and \
             is writable by the service; `runner-manager cache clear` removes damaged caches, \
             `runner-manager repo set TARGET --cache off` stops using them."
                .to_owned(),
        ),
    };
    rm_proto::CachesProblem {
        what: p.what.to_owned(),
        failures: p.failures,
        message,
        fix,
    }
}
