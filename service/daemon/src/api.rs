//! The local API's handler. Handlers ask, loops act: a change is written to the journal
//! (compare-and-set), the loops are woken, and their next pass (which re-reads the policies)
//! carries it out.

use rm_core::{
    Label, LabelSet, Policy, PolicyId, PolicySpec, PolicyState, ProfileName, RoutingPrefix, Target,
    WorkspaceMode,
};
use rm_engine::auth_watch::publish_auth;
use rm_engine::credential::{self, AskGitHub};
use rm_engine::sign_in::SignIns;
use rm_engine::state::{meta, Daemon};
use rm_engine::status::{self, journal_error};
use rm_proto::{
    ApiError, CredentialPut, DoctorReport, EnvVar, Handler, HostAdmission, HostAdmissionChange,
    HostCapacity, HostEnv, HostEnvChange, HostStatus, PauseState, Peer, SignInSession, SignInStart,
    Status, TargetAdd, TargetRef, TargetStatus, TargetUpdate, WatchStart,
};
use secrecy::SecretString;
use std::sync::Arc;

pub use rm_engine::MAX_CAPACITY;

#[derive(Clone)]
pub struct Api {
    /// The server's access rules: who may see the runner environment's values.
    pub access: rm_proto::AccessPolicy,
    pub daemon: Arc<Daemon>,
    pub updater: Arc<crate::update::Updater>,
    pub sign_in: Arc<SignIns>,
}

fn millis(m: rm_proto::UnixMillis) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp_millis(m.0)
}

fn bad(what: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(what.to_string())
}

fn parse_labels(texts: &[String]) -> Result<Vec<Label>, ApiError> {
    texts
        .iter()
        .map(|t| Label::new(t).map_err(|e| bad(format!("{e}: fix the label '{t}'"))))
        .collect()
}

/// The most MiB a target's admission numbers may name (1 TiB: catches a unit mistake).
const MAX_ADMISSION_MB: u64 = 1 << 20;

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

/// What the caches hold, as answered.
fn caches_report(daemon: &rm_engine::state::Daemon) -> rm_proto::CachesReport {
    let settings = &daemon.caches;
    let (root, entries) = match settings.caches() {
        Some(c) => {
            let entries = c.entries().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the caches could not be read");
                Vec::new()
            });
            (c.root().display().to_string(), entries)
        }
        None => (String::new(), Vec::new()),
    };
    rm_proto::CachesReport {
        cap_bytes: settings.cap_bytes(),
        tool_cache: settings.tool_cache(),
        root,
        entries: entries.iter().map(cache_entry).collect(),
    }
}

fn cache_entry(e: &rm_runner::EntryInfo) -> rm_proto::CacheEntry {
    rm_proto::CacheEntry {
        namespace: e.namespace.as_ref().map(ToString::to_string),
        tool: e.tool.clone(),
        bytes: e.bytes,
        hits: e.hits,
        last_used_ms: e.last_used_ms,
        in_use: e.in_use,
    }
}

/// The runner environment as answered: values only when `values` (an operator asks).
fn host_env_answer(vars: &std::collections::BTreeMap<String, String>, values: bool) -> HostEnv {
    HostEnv {
        variables: vars
            .iter()
            .map(|(name, value)| EnvVar {
                name: name.clone(),
                value: values.then(|| value.clone()),
            })
            .collect(),
        values_shown: values,
    }
}

fn check_capacity(n: u32, field: &str, min: u32) -> Result<(), ApiError> {
    if n < min || n > MAX_CAPACITY {
        return Err(bad(format!(
            "{field} {n} is out of range: give {min}..={MAX_CAPACITY}"
        )));
    }
    Ok(())
}

impl Api {
    async fn host(&self) -> Result<rm_core::Host, ApiError> {
        self.daemon
            .journal
            .with(|j| j.get_host())
            .await
            .map_err(journal_error)?
            .map(|r| r.host)
            .ok_or_else(|| {
                ApiError::service_unavailable("the host row is missing: restart the service")
            })
    }

    async fn policies(&self) -> Result<Vec<Policy>, ApiError> {
        self.daemon
            .journal
            .with(|j| j.list_policies())
            .await
            .map_err(journal_error)
    }

    /// The policy a path names: the default profile's, else the only one of that target.
    async fn find(&self, target: &TargetRef) -> Result<Policy, ApiError> {
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

    async fn view(&self, policy: &Policy) -> Result<TargetStatus, ApiError> {
        let id = policy.id();
        let active = self
            .daemon
            .journal
            .with(move |j| j.active_count(id))
            .await
            .map_err(journal_error)?;
        Ok(status::target_status(&self.daemon, policy, active))
    }

    /// Deletes a target's saved workspaces (a runner using one now saves nothing when it
    /// ends). A failure is logged with its fix; the change it follows still stands.
    async fn reset_workspaces(&self, policy: PolicyId) {
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

    async fn changed(&self) {
        self.daemon.wake.notify_one();
        self.daemon.publish_status().await;
    }

    /// The host's set of targets changed, and with it what the GitHub checks may do (a host
    /// without targets stays off the network): they run again in the background, then status
    /// is published again.
    fn recheck_github_later(&self) {
        let daemon = Arc::clone(&self.daemon);
        tokio::spawn(async move {
            daemon.doctor.recheck_github(&daemon).await;
            daemon.publish_status().await;
        });
    }
}

impl Handler for Api {
    fn service_version(&self) -> String {
        crate::VERSION.to_string()
    }

    async fn status(&self, _peer: Peer) -> Result<Status, ApiError> {
        status::build(&self.daemon).await
    }

    async fn watch(&self, _peer: Peer) -> Result<WatchStart, ApiError> {
        // Subscribe first: a change between the two is seen twice rather than missed.
        let events = self.daemon.watchers.subscribe();
        let snapshot = status::build(&self.daemon).await?;
        Ok(WatchStart { snapshot, events })
    }

    async fn put_credential(&self, peer: Peer, c: CredentialPut) -> Result<(), ApiError> {
        if c.access_token.is_empty() {
            return Err(bad(
                "access_token is empty: sign in again with `runner-manager auth login`",
            ));
        }
        let credential = rm_github::Credential {
            access_token: SecretString::from(c.access_token.expose().to_string()),
            expires_at: millis(c.expires_at),
            refresh_token: if c.refresh_token.is_empty() {
                None
            } else {
                Some(SecretString::from(c.refresh_token.expose().to_string()))
            },
            refresh_expires_at: millis(c.refresh_expires_at),
        };
        // The CLI of this version no longer hands credentials over (the service signs in
        // itself, `POST /v1/sign-in`); the tray or an older CLI may.
        credential::store(
            &self.daemon,
            credential,
            c.login.clone(),
            AskGitHub::IfServing,
            peer.uid,
        )
        .await?;
        Ok(())
    }

    async fn delete_credential(&self, peer: Peer) -> Result<(), ApiError> {
        let store = Arc::clone(&self.daemon.store);
        tokio::task::spawn_blocking(move || store.delete())
            .await
            .map_err(|e| ApiError::internal(format!("removing the credential failed: {e}")))?
            .map_err(|e| {
                ApiError::service_unavailable(format!(
                    "the credential could not be removed ({e}): check the credential store ({})",
                    self.daemon.store.describe()
                ))
            })?;
        self.daemon.client.sign_out();
        self.daemon
            .journal
            .with(|j| {
                j.meta_delete(meta::LOGIN)?;
                j.meta_delete(meta::SIGN_IN_EXPIRES_MS)
            })
            .await
            .map_err(journal_error)?;
        tracing::info!(uid = peer.uid, "GitHub credential removed (signed out)");
        publish_auth(&self.daemon).await;
        self.changed().await;
        Ok(())
    }

    async fn targets(&self, _peer: Peer) -> Result<Vec<TargetStatus>, ApiError> {
        Ok(status::build(&self.daemon).await?.targets)
    }

    async fn add_target(&self, peer: Peer, req: TargetAdd) -> Result<TargetStatus, ApiError> {
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
        let extra = parse_labels(req.labels.as_deref().unwrap_or_default())?;
        let host = self.host().await?;
        let routing = host.routing_label(&RoutingPrefix::default(), &profile);
        let labels = LabelSet::new(std::iter::once(routing).chain(extra))
            .map_err(|e| bad(format!("{e}: send fewer labels")))?;
        let spec = PolicySpec {
            target: target.clone(),
            profile: profile.clone(),
            enabled: req.enabled.unwrap_or(true),
            max_capacity: req.max_capacity,
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
        self.recheck_github_later();
        self.changed().await;
        Ok(status::target_status(&self.daemon, &policy, 0))
    }

    async fn update_target(
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
        self.changed().await;
        self.view(&stored).await
    }

    async fn remove_target(&self, peer: Peer, target: TargetRef) -> Result<(), ApiError> {
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
                    self.recheck_github_later();
                    self.changed().await;
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

    async fn set_host_capacity(
        &self,
        peer: Peer,
        req: HostCapacity,
    ) -> Result<HostStatus, ApiError> {
        check_capacity(req.capacity, "capacity", 1)?;
        let capacity = req.capacity;
        let host = self
            .daemon
            .journal
            .with(move |j| {
                let Some(rec) = j.get_host()? else {
                    return Err(rm_journal::JournalError::NotFound {
                        entity: "host",
                        id: "this".into(),
                    });
                };
                let mut host = rec.host;
                host.capacity = capacity;
                j.put_host(&host, rec.runner_root.as_deref())?;
                Ok(host)
            })
            .await
            .map_err(journal_error)?;
        tracing::info!(uid = peer.uid, capacity, "host capacity set");
        self.changed().await;
        Ok(status::host_status(
            &host,
            self.daemon.admission.config().to_wire(),
            &self.daemon.runner_env,
        ))
    }

    async fn set_host_admission(
        &self,
        peer: Peer,
        change: HostAdmissionChange,
    ) -> Result<HostAdmission, ApiError> {
        if change.is_empty() {
            return Err(bad(
                "nothing to change: send at least one of memory_admission, runner_memory_mb, \
                 memory_headroom_mb, wait_on_battery, max_load, quiet_hours, idle_only",
            ));
        }
        let admission = Arc::clone(&self.daemon.admission);
        let _changing = admission.changing.lock().await;
        // Validated before anything is written: a refused change leaves every setting as it was.
        let next = admission
            .config()
            .apply(&change)
            .map_err(|e| bad(format!("{e}: fix the request")))?;
        let stored = next.to_stored();
        self.daemon
            .journal
            .with(move |j| j.put_host_settings(&stored))
            .await
            .map_err(journal_error)?;
        admission.set_config(next);
        let now = next.to_wire();
        tracing::info!(
            uid = peer.uid,
            memory_admission = now.memory_admission,
            runner_memory_mb = now.runner_memory_mb,
            memory_headroom_mb = now.memory_headroom_mb,
            wait_on_battery = now.wait_on_battery,
            max_load = ?now.max_load.map(|l| l.0),
            quiet_hours = ?now.quiet_hours,
            idle_only = now.idle_only,
            "admission settings changed"
        );
        // The loops look again at once (a rule turned off starts a held job now); a hold that
        // still stands is recorded again by their next check.
        self.changed().await;
        Ok(now)
    }

    async fn host_env(&self, peer: Peer) -> Result<HostEnv, ApiError> {
        let vars = self
            .daemon
            .journal
            .with(|j| j.runner_env())
            .await
            .map_err(journal_error)?;
        // Readers allowed the status see names only: a value may be a proxy URL with a
        // password in it.
        let operator = self.access.may_change(&peer.identity());
        Ok(host_env_answer(&vars, operator))
    }

    async fn change_host_env(
        &self,
        peer: Peer,
        change: HostEnvChange,
    ) -> Result<HostEnv, ApiError> {
        if change.is_empty() {
            return Err(bad(
                "nothing to change: send set (an object of NAME: VALUE) and/or unset (a list of \
                 names)",
            ));
        }
        let _changing = self.daemon.env_changing.lock().await;
        let set_names: Vec<String> = change.set.keys().cloned().collect();
        let unset_names = change.unset.clone();
        // The journal checks the change whole against what is stored, in its write
        // transaction: a refused change stores nothing, and its error names no value.
        let now = self
            .daemon
            .journal
            .with(
                move |j| match j.change_runner_env(&change.set, &change.unset) {
                    Ok(now) => Ok(Ok(now)),
                    Err(rm_journal::JournalError::InvalidInput { reason, .. }) => Ok(Err(reason)),
                    Err(other) => Err(other),
                },
            )
            .await
            .map_err(journal_error)?
            .map_err(|reason| bad(format!("{reason} (nothing was changed)")))?;
        self.daemon.runner_env.set(now.clone());
        // Names only: values are never logged.
        tracing::info!(
            uid = peer.uid,
            set = ?set_names,
            unset = ?unset_names,
            names = ?now.keys().collect::<Vec<_>>(),
            "runner environment changed: runners started from now on get it"
        );
        self.daemon.publish_status().await;
        Ok(host_env_answer(&now, true))
    }

    async fn caches(&self, _peer: Peer) -> Result<rm_proto::CachesReport, ApiError> {
        let daemon = Arc::clone(&self.daemon);
        tokio::task::spawn_blocking(move || caches_report(&daemon))
            .await
            .map_err(|e| ApiError::internal(format!("reading the caches failed: {e}")))
    }

    async fn clear_caches(
        &self,
        peer: Peer,
        req: rm_proto::CacheClear,
    ) -> Result<rm_proto::CacheCleared, ApiError> {
        let tool = match req.tool.as_deref() {
            None => None,
            Some(t) if t == rm_core::caches::TOOL_CACHE_ID => Some(t.to_owned()),
            Some(t) => match rm_core::caches::find_tool(t) {
                Some(tool) => Some(tool.id.to_owned()),
                None => {
                    return Err(bad(
                        rm_core::caches::CacheError::UnknownTool(t.to_owned()).to_string()
                    ))
                }
            },
        };
        let namespace = match &req.target {
            None => None,
            Some(text) => {
                let target = rm_core::Target::parse(text).map_err(|e| bad(e.to_string()))?;
                let policies = self
                    .daemon
                    .journal
                    .with(|j| j.list_policies())
                    .await
                    .map_err(journal_error)?;
                let Some(policy) = policies.iter().find(|p| p.target() == &target) else {
                    return Err(ApiError::not_found(format!(
                        "{text} is not a target of this host: see `runner-manager repo list`"
                    )));
                };
                let setting = self.daemon.caches.for_policy(policy.id());
                Some(
                    setting
                        .namespace
                        .unwrap_or_else(|| rm_core::caches::Namespace::of_target(&target)),
                )
            }
        };
        let filter = rm_runner::ClearFilter { namespace, tool };
        let Some(caches) = self.daemon.caches.caches() else {
            return Ok(rm_proto::CacheCleared {
                removed: Vec::new(),
                in_use: Vec::new(),
            });
        };
        let removal = tokio::task::spawn_blocking(move || caches.clear(&filter))
            .await
            .map_err(|e| ApiError::internal(format!("clearing the caches failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("clearing the caches failed: {e}")))?;
        tracing::info!(
            uid = peer.uid,
            removed = removal.removed.len(),
            in_use = removal.in_use.len(),
            "caches cleared"
        );
        Ok(rm_proto::CacheCleared {
            removed: removal.removed.iter().map(cache_entry).collect(),
            in_use: removal.in_use.iter().map(cache_entry).collect(),
        })
    }

    async fn set_host_caches(
        &self,
        peer: Peer,
        req: rm_proto::HostCachesChange,
    ) -> Result<rm_proto::CachesReport, ApiError> {
        if req == rm_proto::HostCachesChange::default() {
            return Err(bad("nothing to change: send cap_bytes and/or tool_cache"));
        }
        if let Some(cap) = req.cap_bytes {
            if cap < rm_core::caches::MIN_CAP_BYTES {
                return Err(bad(format!(
                    "cap_bytes {cap} is below the smallest cache size, 64 MiB (67108864): give more"
                )));
            }
        }
        let settings = rm_journal::HostCacheSettings {
            cap_bytes: req.cap_bytes.unwrap_or(self.daemon.caches.cap_bytes()),
            tool_cache: req.tool_cache.unwrap_or(self.daemon.caches.tool_cache()),
        };
        let now = chrono::Utc::now().timestamp_millis();
        self.daemon
            .journal
            .with(move |j| j.put_host_cache_settings(settings, now))
            .await
            .map_err(journal_error)?;
        self.daemon.caches.set_cap_bytes(settings.cap_bytes);
        self.daemon.caches.set_tool_cache(settings.tool_cache);
        tracing::info!(
            uid = peer.uid,
            cap_bytes = settings.cap_bytes,
            tool_cache = settings.tool_cache,
            "cache settings changed"
        );
        let daemon = Arc::clone(&self.daemon);
        let cap = settings.cap_bytes;
        tokio::task::spawn_blocking(move || {
            // A smaller cap applies now, not after the next job.
            if let Some(c) = daemon.caches.caches() {
                if let Err(e) = c.prune(cap) {
                    tracing::warn!(error = %e, "the caches could not be pruned");
                }
            }
            caches_report(&daemon)
        })
        .await
        .map_err(|e| ApiError::internal(format!("reading the caches failed: {e}")))
    }

    async fn host_doctor(&self, _peer: Peer) -> Result<DoctorReport, ApiError> {
        let report = self.daemon.doctor.run(&self.daemon).await;
        self.daemon.publish_status().await;
        Ok(report)
    }

    async fn pool(&self, _peer: Peer) -> Result<rm_proto::PoolStatus, ApiError> {
        self.daemon.pool.status().ok_or_else(|| {
            ApiError::not_found("this host is in no pool (`runner-manager pool join` joins one)")
        })
    }

    async fn join_pool(
        &self,
        _peer: Peer,
        join: rm_proto::PoolJoin,
    ) -> Result<rm_proto::PoolStatus, ApiError> {
        self.daemon.pool.join(&self.daemon, join).await
    }

    async fn leave_pool(&self, _peer: Peer) -> Result<(), ApiError> {
        self.daemon.pool.leave(&self.daemon).await
    }

    async fn why(&self, _peer: Peer) -> Result<rm_proto::WhyReport, ApiError> {
        let Some(fleet) = self.daemon.fleet.get() else {
            return Err(ApiError::service_unavailable(
                "the service is still starting: ask again in a few seconds",
            ));
        };
        let passes = fleet
            .loops()
            .iter()
            .map(|l| (l.target().clone(), l.policies(), l.last_pass()))
            .collect();
        let now = rm_core::Timestamp::from_millis(chrono::Utc::now().timestamp_millis());
        Ok(rm_engine::why::report(&self.daemon, passes, now))
    }

    async fn pause(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.set_paused(peer, true).await
    }

    async fn resume(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.set_paused(peer, false).await
    }

    async fn update_status(&self, _peer: Peer) -> Result<rm_proto::UpdateStatus, ApiError> {
        Ok(self.updater.status())
    }

    async fn update(
        &self,
        peer: Peer,
        request: rm_proto::UpdateRequest,
    ) -> Result<rm_proto::UpdateStatus, ApiError> {
        tracing::info!(%peer, apply = request.apply, "update check asked for");
        Ok(self.updater.check(request.apply).await)
    }

    async fn start_sign_in(
        &self,
        peer: Peer,
        request: SignInStart,
    ) -> Result<SignInSession, ApiError> {
        self.sign_in.start(request.restart, peer.uid).await
    }

    async fn sign_in_status(&self, _peer: Peer) -> Result<SignInSession, ApiError> {
        self.sign_in.current().ok_or_else(no_sign_in)
    }

    async fn cancel_sign_in(&self, peer: Peer) -> Result<SignInSession, ApiError> {
        self.sign_in.cancel(peer.uid).ok_or_else(no_sign_in)
    }
}

fn no_sign_in() -> ApiError {
    ApiError::not_found(
        "no sign-in has been started since the service started: start one with \
         `runner-manager auth login` (or Sign in in the tray)",
    )
}

impl Api {
    /// `--retry`: only a target in `repair_required` is retried, and only once the host checks
    /// pass (a retry that would fail again at once spends the rate limit for nothing). Moves it
    /// to `pending`; its loop sees it leave `repair_required` and starts counting afresh.
    async fn prepare_retry(&self, target: &TargetRef, policy: &mut Policy) -> Result<(), ApiError> {
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
            self.daemon.publish_status().await;
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

    async fn set_paused(&self, peer: Peer, paused: bool) -> Result<PauseState, ApiError> {
        let value = if paused { "1" } else { "0" };
        self.daemon
            .journal
            .with(move |j| j.meta_set(meta::PAUSED, value))
            .await
            .map_err(journal_error)?;
        self.daemon.gate.set_paused(paused);
        tracing::info!(
            uid = peer.uid,
            paused,
            "launching {}",
            if paused { "paused" } else { "resumed" }
        );
        self.changed().await;
        Ok(PauseState { paused })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_environment_goes_to_readers_without_its_values() {
        let vars = [("HTTPS_PROXY".to_owned(), "http://u:pw@p".to_owned())].into();
        let reader = host_env_answer(&vars, false);
        assert!(!reader.values_shown);
        assert_eq!(reader.variables[0].name, "HTTPS_PROXY");
        assert_eq!(reader.variables[0].value, None);
        let operator = host_env_answer(&vars, true);
        assert_eq!(
            operator.variables[0].value.as_deref(),
            Some("http://u:pw@p")
        );
    }
}
