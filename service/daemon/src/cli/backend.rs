//! What the CLI's target and host commands need from "the service", as one trait.
//!
//! [`JournalBackend`] works directly on the journal in `--data-dir` (this build). Once the
//! local API lands, a client implementation replaces it and the commands stay as they are:
//! the trait's types are plain views, independent of both the journal and the wire format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rm_core::{
    Host, Label, LabelSet, Policy, PolicySpec, PolicyState, ProfileName, RoutingPrefix, Target,
    WorkspaceMode,
};
use rm_journal::{Journal, JournalError};
use serde::Serialize;

use crate::exit::{ExitCode, Failure};
use crate::paths;
use crate::run::AdmissionConfig;
use rm_engine::doctor::{local_checks, wire, GITHUB_CREDENTIAL, GITHUB_REACHABLE};
use rm_engine::host_row::machine_host;

/// The most runners a host or a policy may be given (the service's own limit).
pub use crate::run::MAX_CAPACITY;

/// How many runners a new policy may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    /// Up to the host's capacity.
    HostDefault,
    Max(u32),
    /// Watch demand, start nothing.
    MonitorOnly,
}

/// `repo add` / `org add`.
#[derive(Debug, Clone)]
pub struct AddTarget {
    pub target: Target,
    pub profile: ProfileName,
    pub enabled: bool,
    pub capacity: Capacity,
    pub min_capacity: u32,
    pub extra_labels: Vec<Label>,
}

/// `repo set` / `org set`: `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct UpdateTarget {
    pub capacity: Option<Capacity>,
    pub min_capacity: Option<u32>,
    pub enabled: Option<bool>,
    pub extra_labels: Option<Vec<Label>>,
    /// Retry a target in `repair_required` (the host checks run first).
    pub retry: bool,
}

/// One policy as the CLI shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetView {
    pub id: i64,
    pub target: String,
    pub kind: &'static str,
    pub profile: String,
    pub enabled: bool,
    pub state: String,
    pub max_capacity: Option<u32>,
    pub min_capacity: u32,
    pub routing_label: String,
    pub labels: Vec<String>,
    pub active_runners: u32,
}

/// This host as the CLI shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostView {
    pub id: String,
    pub label: String,
    pub os: String,
    pub arch: String,
    pub capacity: u32,
    pub runner_root: PathBuf,
    /// Memory admission and the workstation rules as stored (the defaults before any were).
    pub admission: rm_proto::HostAdmission,
    /// The names of the runner environment's variables (`host env show` has the values).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runner_env: Vec<String>,
}

/// `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusView {
    pub host: HostView,
    pub targets: Vec<TargetView>,
    pub active_runners: u32,
    /// Milliseconds since the epoch of the last pass that reached GitHub.
    pub last_github_contact_ms: Option<i64>,
    /// How this answer was obtained (`journal` until the local API is wired).
    pub source: &'static str,
}

/// The operations behind `repo`, `org`, `host` and `status`.
pub trait Backend {
    fn add_target(&mut self, req: &AddTarget) -> Result<TargetView, Failure>;
    fn list_targets(&mut self) -> Result<Vec<TargetView>, Failure>;
    fn update_target(
        &mut self,
        target: &Target,
        profile: &ProfileName,
        change: &UpdateTarget,
    ) -> Result<TargetView, Failure>;
    fn remove_target(
        &mut self,
        target: &Target,
        profile: &ProfileName,
    ) -> Result<TargetView, Failure>;
    fn host(&mut self) -> Result<HostView, Failure>;
    fn set_host_capacity(&mut self, capacity: u32) -> Result<HostView, Failure>;
    fn status(&mut self) -> Result<StatusView, Failure>;
}

/// The journal in a data directory, used directly.
#[derive(Debug)]
pub struct JournalBackend {
    journal: Journal,
    data_dir: PathBuf,
}

impl JournalBackend {
    /// Open (creating if needed) the data directory's journal.
    pub fn open(data_dir: &Path) -> Result<Self, Failure> {
        crate::paths::restrict_umask();
        crate::paths::create_data_dir(data_dir).map_err(|e| {
            Failure::internal(format!(
                "cannot create the data directory {}: {e}; choose another with `--data-dir`",
                data_dir.display()
            ))
        })?;
        let journal = Journal::open(paths::journal_path(data_dir)).map_err(journal_failure)?;
        Ok(Self {
            journal,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// The stored admission settings (the defaults before any were stored).
    fn admission(&mut self) -> Result<AdmissionConfig, Failure> {
        match self.journal.host_settings().map_err(journal_failure)? {
            Some(s) => AdmissionConfig::from_stored(&s).map_err(|e| {
                Failure::internal(format!(
                    "the stored admission settings are damaged ({e}): set them again with \
                     `runner-manager --offline host set-admission` and `host set-rules`"
                ))
            }),
            None => Ok(AdmissionConfig::default()),
        }
    }

    /// Changes memory admission or the workstation rules as stored; validated first, so a
    /// refused change stores nothing. The service reads them when it starts.
    pub fn set_host_admission(
        &mut self,
        change: &rm_proto::HostAdmissionChange,
    ) -> Result<rm_proto::HostAdmission, Failure> {
        // A damaged row is replaced by the defaults with the change applied.
        let current = self.admission().unwrap_or_default();
        let next = current.apply(change).map_err(Failure::usage)?;
        self.journal
            .put_host_settings(&next.to_stored())
            .map_err(journal_failure)?;
        Ok(next.to_wire())
    }

    /// The runner environment as stored (values included: whoever may open the journal may
    /// read them).
    pub fn runner_env(&mut self) -> Result<BTreeMap<String, String>, Failure> {
        self.journal.runner_env().map_err(|e| {
            Failure::internal(format!(
                "{e}: remove the damaged variable with `runner-manager --offline host env unset \
                 NAME`"
            ))
        })
    }

    /// The names for `host show`; a damaged row shows none there (`host env show` names it).
    fn runner_env_names(&mut self) -> Vec<String> {
        self.journal
            .runner_env()
            .map(|vars| vars.into_keys().collect())
            .unwrap_or_default()
    }

    /// Sets and unsets runner environment variables as stored, checked whole first (a refused
    /// change stores nothing). The service gives them to runners after it starts.
    pub fn change_runner_env(
        &mut self,
        set: &BTreeMap<String, String>,
        unset: &[String],
    ) -> Result<BTreeMap<String, String>, Failure> {
        self.journal
            .change_runner_env(set, unset)
            .map_err(journal_failure)
    }

    /// The host row, created on first use from the machine's name, OS, architecture and CPUs.
    fn ensure_host(&mut self) -> Result<(Host, PathBuf), Failure> {
        if let Some(rec) = self.journal.get_host().map_err(journal_failure)? {
            let root = rec
                .runner_root
                .unwrap_or_else(|| paths::default_runner_root(&self.data_dir));
            return Ok((rec.host, root));
        }
        let host = machine_host()?;
        self.journal
            .put_host(&host, None)
            .map_err(journal_failure)?;
        Ok((host, paths::default_runner_root(&self.data_dir)))
    }

    fn find(&mut self, target: &Target, profile: &ProfileName) -> Result<Policy, Failure> {
        let wanted = target.to_string().to_ascii_lowercase();
        self.journal
            .list_policies()
            .map_err(journal_failure)?
            .into_iter()
            .find(|p| {
                p.target().to_string().to_ascii_lowercase() == wanted && p.profile() == profile
            })
            .ok_or_else(|| {
                let noun = noun(target);
                Failure::new(
                    ExitCode::NotFound,
                    format!(
                        "{target}{} is not served by this host: add it with `runner-manager {noun} \
                         add {target}`, or see what is with `runner-manager {noun} list`",
                        profile_suffix(profile)
                    ),
                )
            })
    }

    /// `--retry` on the stopped service: as the service does it, a target in
    /// `repair_required` goes back to `pending` once the host checks pass.
    fn prepare_retry(
        &mut self,
        target: &Target,
        policy: &mut Policy,
        capacity: u32,
    ) -> Result<(), Failure> {
        if policy.state() != PolicyState::RepairRequired {
            return Err(Failure::new(
                ExitCode::Conflict,
                format!(
                    "{target} is {}, not waiting for repair: there is nothing to retry",
                    policy.state()
                ),
            ));
        }
        let checks = local_checks(&crate::paths::runner_host_config(&self.data_dir), capacity);
        let sandboxes = self.journal.policy_sandboxes().map_err(journal_failure)?;
        let sandbox = sandboxes
            .iter()
            .find(|(id, _)| *id == policy.id())
            .map(|(_, s)| *s)
            .unwrap_or_default();
        if let Some(c) = rm_core::first_blocking_for(&checks, &sandbox) {
            return Err(Failure::new(
                ExitCode::HostUnfit,
                format!(
                    "{target} cannot be retried yet: host check '{}' fails: {}; fix: {}; then retry",
                    c.id,
                    c.detail,
                    c.fix.as_deref().unwrap_or("see `runner-manager host doctor`")
                ),
            ));
        }
        policy
            .transition_to(PolicyState::Pending)
            .map_err(|e| Failure::internal(e.to_string()))
    }

    /// `host doctor --offline`: the checks that need no service; GitHub is not asked.
    pub fn doctor(&mut self) -> Result<rm_proto::DoctorReport, Failure> {
        let (host, _) = self.ensure_host()?;
        let mut checks: Vec<rm_proto::HostCheck> = local_checks(
            &crate::paths::runner_host_config(&self.data_dir),
            host.capacity,
        )
        .iter()
        .map(wire)
        .collect();
        for id in [GITHUB_REACHABLE, GITHUB_CREDENTIAL] {
            checks.push(rm_proto::HostCheck {
                id: id.into(),
                title: "GitHub".into(),
                state: rm_proto::CheckState::Skipped,
                required: true,
                detail: "not asked with --offline (the running service asks GitHub)".into(),
                fix: None,
                checked_at: None,
            });
        }
        Ok(rm_proto::DoctorReport {
            at: rm_proto::UnixMillis(chrono::Utc::now().timestamp_millis()),
            checks,
        })
    }

    fn view(&mut self, policy: &Policy, host: &Host) -> Result<TargetView, Failure> {
        let active = self
            .journal
            .active_count(policy.id())
            .map_err(journal_failure)?;
        Ok(view(policy, host, active))
    }
}

fn noun(target: &Target) -> &'static str {
    if target.is_organization() {
        "org"
    } else {
        "repo"
    }
}

fn profile_suffix(profile: &ProfileName) -> String {
    if profile.is_default() {
        String::new()
    } else {
        format!(" (profile {profile})")
    }
}

fn view(policy: &Policy, host: &Host, active: u32) -> TargetView {
    TargetView {
        id: policy.id().get(),
        target: policy.target().to_string(),
        kind: if policy.target().is_organization() {
            "organization"
        } else {
            "repository"
        },
        profile: policy.profile().to_string(),
        enabled: policy.enabled(),
        state: policy.state().to_string(),
        max_capacity: policy.max_capacity(),
        min_capacity: policy.min_capacity(),
        routing_label: host
            .routing_label(&RoutingPrefix::default(), policy.profile())
            .to_string(),
        labels: policy.labels().to_strings(),
        active_runners: active,
    }
}

fn host_view(
    host: &Host,
    root: &Path,
    admission: &AdmissionConfig,
    runner_env: Vec<String>,
) -> HostView {
    HostView {
        id: host.id.to_string(),
        label: host.label.to_string(),
        os: host.os.to_string(),
        arch: host.arch.to_string(),
        capacity: host.capacity,
        runner_root: root.to_path_buf(),
        admission: admission.to_wire(),
        runner_env,
    }
}

/// A journal failure as the CLI reports it.
pub fn journal_failure(e: JournalError) -> Failure {
    let code = match &e {
        JournalError::Conflict { .. } | JournalError::Duplicate { .. } => ExitCode::Conflict,
        JournalError::NotFound { .. } => ExitCode::NotFound,
        JournalError::InvalidInput { .. } => ExitCode::Usage,
        _ => ExitCode::Internal,
    };
    Failure::new(code, e.to_string())
}

fn labels_for(host: &Host, profile: &ProfileName, extra: &[Label]) -> Result<LabelSet, Failure> {
    let routing = host.routing_label(&RoutingPrefix::default(), profile);
    LabelSet::new(std::iter::once(routing).chain(extra.iter().cloned()))
        .map_err(|e| Failure::usage(format!("{e}: pass fewer `--label`s")))
}

/// Retries of a compare-and-set that lost to a concurrent writer (the daemon's loop).
const CAS_ATTEMPTS: usize = 3;

impl Backend for JournalBackend {
    fn add_target(&mut self, req: &AddTarget) -> Result<TargetView, Failure> {
        let (host, _) = self.ensure_host()?;
        let max = match req.capacity {
            Capacity::HostDefault => Some(host.capacity.max(1)),
            Capacity::Max(n) => Some(n),
            Capacity::MonitorOnly => None,
        };
        let spec = PolicySpec {
            target: req.target.clone(),
            profile: req.profile.clone(),
            enabled: req.enabled,
            max_capacity: max,
            min_capacity: req.min_capacity,
            labels: labels_for(&host, &req.profile, &req.extra_labels)?,
            workspace_mode: WorkspaceMode::Ephemeral,
        };
        spec.validate().map_err(|e| Failure::usage(e.to_string()))?;
        // A different spelling of the same target is the same target at GitHub.
        if self.find(&req.target, &req.profile).is_ok() {
            let noun = noun(&req.target);
            return Err(Failure::new(
                ExitCode::Conflict,
                format!(
                    "{}{} is already served by this host: change it with `runner-manager {noun} \
                     set {}`",
                    req.target,
                    profile_suffix(&req.profile),
                    req.target
                ),
            ));
        }
        let policy = self.journal.insert_policy(&spec).map_err(journal_failure)?;
        Ok(view(&policy, &host, 0))
    }

    fn list_targets(&mut self) -> Result<Vec<TargetView>, Failure> {
        let policies = self.journal.list_policies().map_err(journal_failure)?;
        if policies.is_empty() {
            return Ok(Vec::new());
        }
        let (host, _) = self.ensure_host()?;
        let counts = self
            .journal
            .active_counts_by_policy()
            .map_err(journal_failure)?;
        Ok(policies
            .iter()
            .map(|p| view(p, &host, counts.get(&p.id()).copied().unwrap_or(0)))
            .collect())
    }

    fn update_target(
        &mut self,
        target: &Target,
        profile: &ProfileName,
        change: &UpdateTarget,
    ) -> Result<TargetView, Failure> {
        let (host, _) = self.ensure_host()?;
        let mut last = None;
        for _ in 0..CAS_ATTEMPTS {
            let mut policy = self.find(target, profile)?;
            let max = match change.capacity {
                None => policy.max_capacity(),
                Some(Capacity::HostDefault) => Some(host.capacity.max(1)),
                Some(Capacity::Max(n)) => Some(n),
                Some(Capacity::MonitorOnly) => None,
            };
            let min = change.min_capacity.unwrap_or(policy.min_capacity());
            policy
                .set_capacity(max, min)
                .map_err(|e| Failure::usage(e.to_string()))?;
            if let Some(enabled) = change.enabled {
                policy.set_enabled(enabled);
            }
            if let Some(extra) = &change.extra_labels {
                policy.set_labels(labels_for(&host, profile, extra)?);
            }
            if change.retry {
                self.prepare_retry(target, &mut policy, host.capacity)?;
            }
            match self.journal.update_policy(&policy) {
                Ok(stored) => return self.view(&stored, &host),
                Err(e @ JournalError::Conflict { .. }) => last = Some(e),
                Err(e) => return Err(journal_failure(e)),
            }
        }
        let detail = last.map(|e| e.to_string()).unwrap_or_default();
        Err(Failure::new(
            ExitCode::Conflict,
            format!("{target} kept changing while being updated ({detail}): run the command again"),
        ))
    }

    fn remove_target(
        &mut self,
        target: &Target,
        profile: &ProfileName,
    ) -> Result<TargetView, Failure> {
        let (host, _) = self.ensure_host()?;
        let policy = self.find(target, profile)?;
        let shown = self.view(&policy, &host)?;
        self.journal
            .delete_policy(policy.id())
            .map_err(journal_failure)?;
        Ok(shown)
    }

    fn host(&mut self) -> Result<HostView, Failure> {
        let (host, root) = self.ensure_host()?;
        let admission = self.admission()?;
        Ok(host_view(&host, &root, &admission, self.runner_env_names()))
    }

    fn set_host_capacity(&mut self, capacity: u32) -> Result<HostView, Failure> {
        let (mut host, root) = self.ensure_host()?;
        let stored_root = self
            .journal
            .get_host()
            .map_err(journal_failure)?
            .and_then(|r| r.runner_root);
        host.capacity = capacity;
        self.journal
            .put_host(&host, stored_root.as_deref())
            .map_err(journal_failure)?;
        let admission = self.admission()?;
        Ok(host_view(&host, &root, &admission, self.runner_env_names()))
    }

    fn status(&mut self) -> Result<StatusView, Failure> {
        let host = self.host()?;
        let targets = self.list_targets()?;
        let active_runners = self.journal.active_total().map_err(journal_failure)?;
        let last_github_contact_ms = self
            .journal
            .meta_get(rm_journal::meta_keys::LAST_GITHUB_CONTACT_MS)
            .map_err(journal_failure)?
            .and_then(|v| v.parse().ok());
        Ok(StatusView {
            host,
            targets,
            active_runners,
            last_github_contact_ms,
            source: "journal",
        })
    }
}
