//! Targets: add, change, remove; the policy a request names and the answer about it.

use super::{bad, check_capacity};
use crate::changes::Changed;
use crate::engine::Engine;
use crate::status;
use crate::wire::journal_error;
use rm_core::{
    Label, LabelSet, Policy, PolicyId, PolicySpec, PolicyState, ProfileName, RoutingPrefix, Target,
    WorkspaceMode,
};
use rm_proto::{ApiError, Peer, TargetAdd, TargetRef, TargetStatus, TargetUpdate};

fn parse_labels(texts: &[String]) -> Result<Vec<Label>, ApiError> {
    texts
        .iter()
        .map(|t| Label::new(t).map_err(|e| bad(format!("{e}: fix the label '{t}'"))))
        .collect()
}

/// The most MiB a target's admission numbers may name (1 TiB: catches a unit mistake).
const MAX_ADMISSION_MB: u64 = 1 << 20;

/// A target's own admission settings from the wire, checked.
/// A target's own admission settings from the wire, checked.
fn own_admission(a: rm_proto::TargetAdmission) -> Result<rm_journal::PolicyAdmission, ApiError> {
    if let Some(mb) = a.runner_memory_mb {
        if !(1..=MAX_ADMISSION_MB).contains(&mb) {
            return Err(bad(format!(
                "admission.runner_memory_mb {mb} is out of range: give 1..={MAX_ADMISSION_MB} \
                 MiB, or null to follow the host"
            )));
        }
    }
    if let Some(mb) = a.memory_headroom_mb {
        if mb > MAX_ADMISSION_MB {
            return Err(bad(format!(
                "admission.memory_headroom_mb {mb} is out of range: give 0..={MAX_ADMISSION_MB} \
                 MiB, or null to follow the host"
            )));
        }
    }
    Ok(rm_journal::PolicyAdmission {
        memory_admission: a.memory_admission,
        runner_memory_mb: a.runner_memory_mb,
        memory_headroom_mb: a.memory_headroom_mb,
    })
}

/// A target's own cache settings as sent, checked.
fn own_cache(c: rm_proto::TargetCache) -> Result<rm_core::caches::CacheSetting, ApiError> {
    let namespace = c
        .namespace
        .map(|n| rm_core::caches::Namespace::shared(&n))
        .transpose()
        .map_err(|e| bad(format!("cache.namespace: {e}")))?;
    Ok(rm_core::caches::CacheSetting {
        enabled: c.enabled,
        namespace,
    })
}

impl Engine {
    /// The policy a path names: the default profile's, else the only one of that target.
    pub(crate) async fn find(&self, target: &TargetRef) -> Result<Policy, ApiError> {
        let wanted = target.name.to_ascii_lowercase();
        let mine: Vec<Policy> = self
            .policies()
            .await?
            .into_iter()
            .filter(|p| p.target().to_string().to_ascii_lowercase() == wanted)
            .filter(|p| !self.daemon.removals.contains(p.id()))
            .collect();
        if let Some(profile) = &target.profile {
            return mine
                .iter()
                .find(|p| p.profile().as_str() == profile)
                .cloned()
                .ok_or_else(|| {
                    let served: Vec<String> =
                        mine.iter().map(|p| p.profile().to_string()).collect();
                    let noun = target.kind.as_str();
                    ApiError::not_found(if served.is_empty() {
                        format!(
                            "{} is not served by this host: add it with `runner-manager {noun} \
                             add {} --profile {profile}`",
                            target.name, target.name
                        )
                    } else {
                        format!(
                            "{} has no profile '{profile}' on this host (its profiles: {}): add it \
                             with `runner-manager {noun} add {} --profile {profile}`",
                            target.name,
                            served.join(", "),
                            target.name
                        )
                    })
                });
        }
        let found = match mine.iter().find(|p| p.profile().is_default()) {
            Some(p) => Some(p.clone()),
            None if mine.len() == 1 => mine.first().cloned(),
            None => None,
        };
        found.ok_or_else(|| {
            let noun = target.kind.as_str();
            ApiError::not_found(format!(
                "{} is not served by this host: add it with `runner-manager {noun} add {}`",
                target.name, target.name
            ))
        })
    }

    pub(crate) async fn view(&self, policy: &Policy) -> Result<TargetStatus, ApiError> {
        let id = policy.id();
        let active = self
            .daemon
            .journal
            .with(move |j| j.active_count(id))
            .await
            .map_err(journal_error)?;
        let capacity = self.host().await?.capacity;
        Ok(status::target_status(
            &self.daemon,
            policy,
            active,
            capacity,
        ))
    }

    /// Deletes a target's saved workspaces (a runner using one now saves nothing when it
    /// ends). A failure is logged with its fix; the change it follows still stands.
    pub(crate) async fn reset_workspaces(&self, policy: PolicyId) {
        let Some(slots) = self.daemon.caches.workspaces() else {
            return;
        };
        match tokio::task::spawn_blocking(move || slots.reset_policy(policy)).await {
            Ok(Ok(true)) => tracing::info!(
                policy = policy.get(),
                "the target's persistent workspaces were deleted"
            ),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::error!(policy = policy.get(), error = %e, "the target's persistent workspaces could not be deleted: remove them under <runner root>/.workspaces")
            }
            Err(e) => {
                tracing::error!(policy = policy.get(), error = %e, "the target's persistent workspaces could not be deleted")
            }
        }
    }

    pub async fn add_target(&self, peer: Peer, req: TargetAdd) -> Result<TargetStatus, ApiError> {
        let target = Target::parse(&req.target).map_err(|e| {
            bad(format!(
                "{e}: give 'owner/repo' for a repository or 'org' for an organization"
            ))
        })?;
        let profile = match &req.profile {
            Some(p) => ProfileName::new(p).map_err(|e| bad(format!("{e}: fix the profile")))?,
            None => ProfileName::default(),
        };
        if let Some(n) = req.max_capacity {
            check_capacity(n, "max_capacity", 1)?;
        }
        let min = req.min_capacity.unwrap_or(0);
        check_capacity(min, "min_capacity", 0)?;
        let mut extra = parse_labels(req.labels.as_deref().unwrap_or_default())?;
        if req.pool {
            let Some(pool) = self.daemon.pool.pool() else {
                return Err(bad(
                    "this host is in no pool: join one first (`runner-manager pool join \
                     postgres://USER@HOST/DATABASE --label LABEL --password-stdin`), or give the \
                     pool's label with `--label LABEL`",
                ));
            };
            let label = Label::new(pool.label())
                .map_err(|e| ApiError::internal(format!("the pool's label is unusable: {e}")))?;
            if !extra.contains(&label) {
                extra.push(label);
            }
        }
        let host = self.host().await?;
        let routing = host.routing_label(&RoutingPrefix::default(), &profile);
        let labels = LabelSet::new(std::iter::once(routing).chain(extra))
            .map_err(|e| bad(format!("{e}: send fewer labels")))?;
        // The clients' default maximum, filled in here so that they need not ask for it.
        let max_capacity = match req.max_capacity {
            None if req.up_to_host => Some(host.capacity.max(1)),
            given => given,
        };
        let spec = PolicySpec {
            target: target.clone(),
            profile: profile.clone(),
            enabled: req.enabled.unwrap_or(true),
            max_capacity,
            min_capacity: min,
            labels,
            workspace_mode: WorkspaceMode::Ephemeral,
        };
        spec.validate()
            .map_err(|e| bad(format!("{e}: fix the request")))?;
        let wanted = target.to_string().to_ascii_lowercase();
        let existing = self.policies().await?.into_iter().find(|p| {
            p.target().to_string().to_ascii_lowercase() == wanted && p.profile() == &profile
        });
        if existing
            .as_ref()
            .is_some_and(|p| self.daemon.removals.contains(p.id()))
        {
            return Err(ApiError::conflict(format!(
                "{target} is still being removed (its runners finish their jobs first): add it \
                 again once `runner-manager status` shows no runner of it"
            )));
        }
        if existing.is_some() {
            let noun = if target.is_organization() {
                "org"
            } else {
                "repo"
            };
            return Err(ApiError::conflict(format!(
                "{target} is already served by this host: change it with `runner-manager {noun} set {target}`"
            )));
        }
        let policy = self
            .daemon
            .journal
            .with(move |j| j.insert_policy(&spec))
            .await
            .map_err(journal_error)?;
        tracing::info!(uid = peer.uid, gh_target = %target, policy = policy.id().get(), "target added");
        self.daemon.after(Changed::Targets).await;
        Ok(status::target_status(
            &self.daemon,
            &policy,
            0,
            host.capacity,
        ))
    }

    pub async fn update_target(
        &self,
        peer: Peer,
        target: TargetRef,
        req: TargetUpdate,
    ) -> Result<TargetStatus, ApiError> {
        let mut policy = self.find(&target).await?;
        if policy.revision() != req.revision {
            return Err(ApiError::conflict(format!(
                "{} changed since revision {} (it is at {}): read it again and retry",
                target.name,
                req.revision,
                policy.revision()
            )));
        }
        if let Some(n) = req.max_capacity {
            check_capacity(n, "max_capacity", 1)?;
        }
        if let Some(n) = req.min_capacity {
            check_capacity(n, "min_capacity", 0)?;
        }
        let max = match (req.monitor_only, req.max_capacity) {
            (Some(true), _) => None,
            (_, Some(n)) => Some(n),
            _ => policy.max_capacity(),
        };
        let min = req.min_capacity.unwrap_or(policy.min_capacity());
        policy
            .set_capacity(max, min)
            .map_err(|e| bad(format!("{e}: fix max_capacity/min_capacity")))?;
        if let Some(enabled) = req.enabled {
            policy.set_enabled(enabled);
        }
        if let Some(labels) = &req.labels {
            let host = self.host().await?;
            let routing = host.routing_label(&RoutingPrefix::default(), policy.profile());
            let set = LabelSet::new(std::iter::once(routing).chain(parse_labels(labels)?))
                .map_err(|e| bad(format!("{e}: send fewer labels")))?;
            policy.set_labels(set);
        }
        let workspace = req.workspace.map(|w| match w {
            rm_proto::Workspace::Persistent => WorkspaceMode::Persistent,
            _ => WorkspaceMode::Ephemeral,
        });
        if let Some(mode) = workspace {
            policy.set_workspace_mode(mode);
        }
        let own = req.admission.map(own_admission).transpose()?;
        let own_cache = req.cache.map(own_cache).transpose()?;
        let cache_stored = own_cache.clone();
        let sandbox = req.sandbox.as_ref().map(|change| {
            let mut choice = self.daemon.sandboxes.for_policy(policy.id());
            if let Some(walls) = change.walls {
                choice.walls = walls;
            }
            if let Some(docker) = change.docker {
                choice.docker = docker;
            }
            if let Some(mb) = change.memory_max_mb {
                choice.memory_max_mb = (mb != 0).then_some(mb);
            }
            choice
        });
        let retry = req.retry == Some(true);
        if retry {
            self.prepare_retry(&target, &mut policy).await?;
        }
        let stored = self
            .daemon
            .journal
            .with(move |j| {
                let stored = j.update_policy(&policy)?;
                if let Some(own) = &own {
                    j.put_policy_admission(stored.id(), own)?;
                }
                if let Some(own) = &cache_stored {
                    j.put_policy_cache(stored.id(), own)?;
                }
                if let Some(choice) = sandbox {
                    j.put_policy_sandbox(stored.id(), choice)?;
                }
                Ok(stored)
            })
            .await
            .map_err(journal_error)?;
        if let Some(own) = own {
            self.daemon.admission.set_own(stored.id(), own);
            tracing::info!(uid = peer.uid, gh_target = %target.name, settings = ?own, "target admission settings changed");
        }
        if let Some(own) = own_cache {
            tracing::info!(uid = peer.uid, gh_target = %target.name, settings = ?own, "target cache settings changed: runners started from now on use them");
            self.daemon.caches.set_policy(stored.id(), own);
        }
        if let Some(choice) = sandbox {
            self.daemon.sandboxes.set(stored.id(), choice);
            if let Some(warning) = choice.warning() {
                tracing::warn!(uid = peer.uid, gh_target = %target.name, walls = choice.walls, docker = choice.docker, memory_max_mb = ?choice.memory_max_mb, "target sandbox changed: runners started from now on: {warning}");
            } else if let Some(mb) = choice.memory_max_mb {
                tracing::info!(uid = peer.uid, gh_target = %target.name, memory_max_mb = mb, "target's job memory cap changed: runners started from now on get it");
            } else {
                tracing::info!(uid = peer.uid, gh_target = %target.name, "target sandbox back to the default: runners started from now on start inside it, without Docker");
            }
        }
        if let Some(mode) = workspace {
            tracing::info!(uid = peer.uid, gh_target = %target.name, workspace = %mode, "target workspace mode changed: runners started from now on use it");
            if mode == WorkspaceMode::Ephemeral {
                self.reset_workspaces(stored.id()).await;
            }
        }
        if retry {
            self.daemon
                .launch
                .forget(&self.daemon.journal, stored.id())
                .await;
        }
        tracing::info!(uid = peer.uid, gh_target = %target.name, revision = stored.revision(), retry, "target updated");
        self.daemon.after(Changed::Loops).await;
        self.view(&stored).await
    }

    pub async fn remove_target(&self, peer: Peer, target: TargetRef) -> Result<(), ApiError> {
        // Disable first so the loop drains it; the policy is deleted once nothing is left.
        for _ in 0..3 {
            let mut policy = self.find(&target).await?;
            let id = policy.id();
            policy.set_enabled(false);
            match self
                .daemon
                .journal
                .with(move |j| j.update_policy(&policy))
                .await
            {
                Ok(_) => {
                    self.daemon
                        .removals
                        .add(&self.daemon.journal, id)
                        .await
                        .map_err(journal_error)?;
                    self.reset_workspaces(id).await;
                    tracing::info!(uid = peer.uid, gh_target = %target.name, "target removed; its runners finish their job first");
                    self.daemon.after(Changed::Targets).await;
                    return Ok(());
                }
                Err(rm_agent::JournalError::Conflict { .. }) => continue,
                Err(e) => return Err(journal_error(e)),
            }
        }
        Err(ApiError::conflict(format!(
            "{} kept changing while being removed: retry",
            target.name
        )))
    }

    /// `--retry`: only a target in `repair_required` is retried, and only once the host checks
    /// pass (a retry that would fail again at once spends the rate limit for nothing). Moves it
    /// to `pending`; its loop sees it leave `repair_required` and starts counting afresh.
    pub(crate) async fn prepare_retry(
        &self,
        target: &TargetRef,
        policy: &mut Policy,
    ) -> Result<(), ApiError> {
        match policy.state() {
            PolicyState::RepairRequired => {}
            PolicyState::AuthenticationFailed => {
                return Err(ApiError::conflict(format!(
                    "{} waits for a working GitHub credential, not for a repair: sign in again \
                     with `runner-manager auth login`",
                    target.name
                )))
            }
            state => {
                return Err(ApiError::conflict(format!(
                    "{} is {state}, not waiting for repair: there is nothing to retry (failed \
                     launches are tried again by themselves after a pause; `runner-manager \
                     status` shows when)",
                    target.name
                )))
            }
        }
        let capacity = self.host().await?.capacity;
        let checks = self.daemon.doctor.run_local(capacity).await;
        let sandbox = self.daemon.sandboxes.for_policy(policy.id());
        if let Some(c) = rm_core::first_blocking_for(&checks, &sandbox) {
            self.daemon.after(Changed::Shown).await;
            let fix = c
                .fix
                .clone()
                .unwrap_or_else(|| "see `runner-manager host doctor`".into());
            return Err(ApiError::conflict(format!(
                "{} cannot be retried yet: host check '{}' fails: {}; fix: {fix}; then retry",
                target.name, c.id, c.detail
            )));
        }
        policy
            .transition_to(PolicyState::Pending)
            .map_err(|e| ApiError::internal(format!("{e}: the retry was not recorded")))
    }
}
