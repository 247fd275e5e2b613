//! One handle over the cache, the runner root and the processes, in the order a launch uses
//! them, with blocking filesystem work moved off the async threads and a bound on how many
//! runtimes are prepared at once.

use crate::account::{AccountError, ResolvedRunAs, RunAs};
use crate::caches::layers::{LayerMounts, Layers};
use crate::caches::{CacheOwners, CachePlan, CacheSettings, Caches, CachesError};
use crate::evidence::{read_evidence, Evidence, EvidenceError};
use crate::materialize::{
    materialize, CopyMethod, MaterializeError, MaterializeOptions, MaterializeReport,
};
use crate::package::{CacheError, InstalledPackage, PackageCache, PackageSource};
use crate::process::{
    ProcessError, ProcessHost, ProcessIdentity, ProcessState, SpawnRequest, SpawnedRunner,
    StopOutcome,
};
use crate::runner_env::RunnerEnv;
use crate::runtime::{RunnerRoot, Runtime, RuntimeError, RuntimeName};
use crate::scrub::{scrub, ScrubError, ScrubReport};
use crate::secret::JitConfig;
use crate::workspaces::{ClaimedSlot, GivenBack, Workspaces};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Settings of the runner host.
#[derive(Debug, Clone)]
pub struct RunnerHostConfig {
    pub cache_dir: PathBuf,
    pub runner_root: PathBuf,
    pub run_as: RunAs,
    /// Runtimes materialized at the same time (each is disk-bound).
    pub max_concurrent_prepares: usize,
    pub copy: CopyMethod,
    pub copy_threads: usize,
    /// The host's runner environment, given to each runner at its spawn (shared: whoever
    /// holds a clone changes it for every later runner).
    pub env: RunnerEnv,
    /// The caches' size cap and tool cache switch (shared, like `env`).
    pub caches: CacheSettings,
    /// Where the per-attempt uids this service holds are claimed, machine-wide (see
    /// [`crate::uid_claims`]).
    pub uid_claims_dir: PathBuf,
    /// The walls every runner starts inside ([`crate::sandbox`]).
    pub sandbox: crate::sandbox::SandboxConfig,
    /// Each target's own sandbox choices (shared, like `env`).
    pub sandbox_choices: crate::sandbox::TargetChoices,
    /// Whether each runner gets a capped cgroup of its own (the service's; by default none:
    /// runners then start in the caller's cgroup). Shared with the doctor.
    pub job_caps: crate::sandbox::JobCaps,
    /// Whether runners write the shared caches through layers of their own, kept only for a
    /// trusted job ([`crate::caches::layers`]; by default not: they write the caches
    /// directly). Shared with the doctor.
    pub cache_layers: crate::caches::layers::CacheLayers,
}

impl RunnerHostConfig {
    /// Defaults: [`RunAs::default_for_service`], 2 concurrent prepares, auto clone/copy on
    /// [`crate::materialize::default_threads`] threads (one per core, 2–8).
    pub fn new(cache_dir: impl Into<PathBuf>, runner_root: impl Into<PathBuf>) -> Self {
        Self {
            cache_dir: cache_dir.into(),
            runner_root: runner_root.into(),
            run_as: RunAs::default_for_service(),
            max_concurrent_prepares: 2,
            copy: CopyMethod::Auto,
            copy_threads: crate::materialize::default_threads(),
            env: RunnerEnv::default(),
            caches: CacheSettings::default(),
            uid_claims_dir: PathBuf::from(crate::uid_claims::DEFAULT_UID_CLAIMS_DIR),
            sandbox: crate::sandbox::SandboxConfig::default(),
            sandbox_choices: crate::sandbox::TargetChoices::default(),
            job_caps: crate::sandbox::JobCaps::default(),
            cache_layers: crate::caches::layers::CacheLayers::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Account(#[from] AccountError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Materialize(#[from] MaterializeError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    #[error(transparent)]
    Scrub(#[from] ScrubError),
    #[error(transparent)]
    Caches(#[from] CachesError),
    #[error("a runner host task failed: {0}")]
    Task(String),
}

/// A runtime ready to spawn in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRuntime {
    pub runtime: Runtime,
    pub package: InstalledPackage,
    pub report: MaterializeReport,
}

/// The runner host.
pub struct RunnerHost<S> {
    config: RunnerHostConfig,
    cache: Arc<PackageCache<S>>,
    root: Arc<RunnerRoot>,
    processes: ProcessHost,
    /// `None` when the caches' directory could not be set up (logged; runners then start
    /// without caches).
    caches: Option<Arc<Caches>>,
    /// `None` when `.workspaces` could not be set up (logged; every runner then starts from
    /// an empty `_work`).
    workspaces: Option<Arc<Workspaces>>,
    /// `None` where jobs get no cgroup of their own (see the doctor's caps check).
    cgroups: Option<Arc<crate::sandbox::JobCgroups>>,
    /// `None` where jobs write the shared caches directly (see the doctor's layers check).
    layers: Option<Arc<Layers>>,
    prepares: tokio::sync::Semaphore,
    copy: CopyMethod,
    copy_threads: usize,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HostError> + Send + 'static,
) -> Result<T, HostError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HostError::Task(e.to_string()))?
}

impl<S: PackageSource> RunnerHost<S> {
    /// Resolves the runner identity, opens the cache and prepares the runner root.
    pub fn open(config: RunnerHostConfig, source: S) -> Result<Self, HostError> {
        let run_as = config.run_as.resolve()?;
        let cache = PackageCache::open(&config.cache_dir, source)?;
        let root =
            RunnerRoot::prepare_with_claims(&config.runner_root, run_as, &config.uid_claims_dir)?;
        let owners = match run_as {
            ResolvedRunAs::ServiceUser => CacheOwners::Single { runner: None },
            ResolvedRunAs::Fixed(o) => CacheOwners::Single { runner: Some(o) },
            ResolvedRunAs::Pool {
                gid,
                first_uid,
                count,
            } => CacheOwners::Groups {
                runner_gid: gid,
                // Group ids from the same numbers as the runners' user ids: far from any
                // system or login group.
                first_gid: first_uid,
                count,
            },
        };
        let platform =
            crate::Platform::current().map_or_else(|| "unknown".to_owned(), |p| p.to_string());
        let caches = match Caches::open(&config.runner_root, owners, &platform) {
            Ok(c) => {
                let c = Arc::new(c);
                config.caches.set_caches(Arc::clone(&c));
                Some(c)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the caches could not be set up; runners start without them");
                None
            }
        };
        let workspaces = match Workspaces::open(&config.runner_root) {
            Ok(w) => {
                let w = Arc::new(w);
                config.caches.set_workspaces(Arc::clone(&w));
                Some(w)
            }
            Err(e) => {
                tracing::warn!(error = %e, "persistent workspaces could not be set up; runners start from an empty work folder");
                None
            }
        };
        let cgroups = config.job_caps.set_up();
        if let Some(c) = &cgroups {
            // A job cgroup whose runtime is gone was left by a run of the service that ended
            // before its scrub; the recovery scrubs the runtimes that are still there.
            let runner_root = config.runner_root.clone();
            let swept = c.sweep(|name| runner_root.join(name).exists());
            if !swept.is_empty() {
                tracing::info!(cgroups = ?swept, "job cgroups left by an earlier run were ended and removed");
            }
        }
        let layers = config.cache_layers.set_up(&config.runner_root);
        if let Some(l) = &layers {
            // A layer whose runtime is gone was left by a run that ended before its scrub
            // (which commits or drops it first): nothing in it is trusted any more.
            let runner_root = config.runner_root.clone();
            let dropped = l.sweep(|name| runner_root.join(name).exists());
            if !dropped.is_empty() {
                tracing::info!(layers = ?dropped, "cache layers left by an earlier run were dropped");
            }
        }
        let (max_prepares, copy, copy_threads) = (
            config.max_concurrent_prepares,
            config.copy,
            config.copy_threads,
        );
        Ok(Self {
            config,
            cache: Arc::new(cache),
            root: Arc::new(root),
            processes: ProcessHost::new(),
            caches,
            workspaces,
            cgroups,
            layers,
            prepares: tokio::sync::Semaphore::new(max_prepares.max(1)),
            copy,
            copy_threads: copy_threads.max(1),
        })
    }

    /// The settings this host was opened with.
    pub fn config(&self) -> &RunnerHostConfig {
        &self.config
    }

    /// The required host checks a launch depends on ([`crate::doctor::runner_checks`]):
    /// blocking filesystem work, a few `stat`s.
    pub fn fitness(&self, platform: Option<crate::Platform>) -> Vec<rm_core::HostCheck> {
        crate::doctor::runner_checks(&crate::doctor::DoctorSubject {
            runner_root: &self.config.runner_root,
            cache_dir: &self.config.cache_dir,
            run_as: &self.config.run_as,
            platform,
            sandbox: &self.config.sandbox,
            caps: &self.config.job_caps,
            layers: &self.config.cache_layers,
        })
    }

    pub fn cache(&self) -> &PackageCache<S> {
        &self.cache
    }

    pub fn root(&self) -> &RunnerRoot {
        &self.root
    }

    pub fn processes(&self) -> &ProcessHost {
        &self.processes
    }

    /// Creates the attempt's runtime and fills it from `package`. A failure removes what was
    /// made, so the name can be used again.
    pub async fn prepare(
        &self,
        name: &RuntimeName,
        package: &InstalledPackage,
    ) -> Result<PreparedRuntime, HostError> {
        let _permit = self
            .prepares
            .acquire()
            .await
            .map_err(|e| HostError::Task(e.to_string()))?;
        let (root, name, package) = (Arc::clone(&self.root), name.clone(), package.clone());
        let (copy, threads) = (self.copy, self.copy_threads);
        blocking(move || {
            let runtime = root.create_runtime(&name)?;
            let options = MaterializeOptions {
                method: copy,
                threads,
                owner: runtime.owner,
            };
            match materialize(&package.dir, &runtime.path, &options) {
                Ok(report) => Ok(PreparedRuntime {
                    runtime,
                    package,
                    report,
                }),
                Err(e) => {
                    match scrub(&runtime.path) {
                        Ok(_) => {
                            if let Some(o) = runtime.owner {
                                root.release_uid(o.uid);
                            }
                        }
                        Err(s) => {
                            tracing::warn!(runtime = %runtime.path.display(), error = %s, "could not remove a half-prepared runtime")
                        }
                    }
                    Err(e.into())
                }
            }
        })
        .await
    }

    /// The caches, when they could be set up.
    /// Whether the job `name`'s runner ran may have left something its trust decides: a
    /// persistent workspace slot to save, or a change in the shared caches it could write.
    /// Nothing: no verdict is needed, and GitHub is not asked for one.
    pub fn needs_verdict(&self, name: &RuntimeName) -> bool {
        let slot = self
            .workspaces
            .as_ref()
            .is_some_and(|w| w.work_folder_of(name).is_some());
        if slot {
            return true;
        }
        match &self.layers {
            // Its writes are in its layers, and nothing it did reached the caches.
            Some(l) if l.has(name.as_str()) => l.written(name.as_str()),
            _ => self
                .caches
                .as_ref()
                .is_some_and(|c| c.changed_since_prepare(name.as_str())),
        }
    }

    pub fn caches(&self) -> Option<&Arc<Caches>> {
        self.caches.as_ref()
    }

    /// The persistent workspaces, when they could be set up.
    pub fn workspaces(&self) -> Option<&Arc<Workspaces>> {
        self.workspaces.as_ref()
    }

    /// Claims a persistent workspace slot of `policy` for a prepared runtime (blocking: a
    /// kept work folder is given to the runner's account). `None` when workspaces could not be
    /// set up on this host.
    pub fn claim_workspace(
        &self,
        runtime: &Runtime,
        policy: rm_core::PolicyId,
        package: &str,
    ) -> Result<Option<ClaimedSlot>, HostError> {
        let Some(slots) = &self.workspaces else {
            return Ok(None);
        };
        let claimed = slots.claim(runtime, policy, package);
        self.config
            .caches
            .note_workspace_setup(claimed.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        let slot = claimed
            .map_err(|e| HostError::Task(format!("claiming a persistent workspace: {e}")))?;
        tracing::info!(
            runtime = %runtime.name,
            slot = slot.index,
            restored = slot.restored,
            reset = slot.reset,
            "persistent workspace given to the runner"
        );
        Ok(Some(slot))
    }

    /// Starts the listener in a prepared runtime, with the caches `plan` gives it, inside the
    /// walls unless the host or its target (`choice`) opted out (blocking: a read-only
    /// runner's caches are copied).
    pub fn spawn(
        &self,
        runtime: &Runtime,
        jit_config: &JitConfig,
        plan: Option<&CachePlan>,
        choice: rm_core::TargetSandbox,
    ) -> Result<SpawnedRunner, HostError> {
        let mut extra_env = self.config.env.get().to_vec();
        let mut groups = None;
        let mut shared = Vec::new();
        let mut layers = None;
        let walled = !self.config.sandbox.is_off() && choice.walls;
        // The per-user service mounts layers inside the sandbox's user namespace: a target
        // without the walls writes the caches directly, under the older rule.
        let layered = self
            .layers
            .as_ref()
            .filter(|l| walled || l.without_sandbox());
        if let (Some(caches), Some(plan)) = (&self.caches, plan) {
            let plan = CachePlan {
                tool_cache: plan.tool_cache && self.config.caches.tool_cache(),
                // With layers, no job's writes reach the caches before its verdict: every
                // runner gets the shared caches (no private copies for a fork's job).
                access: if layered.is_some() {
                    rm_core::caches::CacheAccess::ReadWrite
                } else {
                    plan.access
                },
                ..plan.clone()
            };
            let prepared = caches.prepare(runtime, &plan);
            self.config
                .caches
                .note_caches_setup(prepared.as_ref().map(|_| ()).map_err(|e| e.to_string()));
            match prepared {
                Ok(prepared) => {
                    if let Some(l) = layered {
                        // Fail closed: a runner whose caches cannot be layered does not start
                        // with them writable.
                        layers = Some(self.layers_for(l, runtime, &prepared.shared)?);
                    }
                    // After the host's environment: the caches' variables are the service's.
                    extra_env.extend(prepared.env);
                    groups = prepared.groups;
                    shared = prepared.shared;
                }
                // A job without caches is slower, not wrong: it still runs.
                Err(e) => {
                    tracing::warn!(runtime = %runtime.path.display(), error = %e, "the runner starts without caches")
                }
            }
        }
        // A persistent workspace lives outside the runtime: the sandbox shows it too.
        if let Some(work) = self
            .workspaces
            .as_ref()
            .and_then(|w| w.work_folder_of(&runtime.name))
        {
            shared.push(work);
        }
        // Docker, for a target that opted in: its socket, and on a root service its group
        // (a runner's uid is in no group of the host's).
        let docker = if choice.docker {
            let socket = crate::sandbox::docker_socket().ok_or_else(|| {
                ProcessError::Sandbox(
                    "this target may use Docker, but no Docker daemon listens on \
                     /run/docker.sock: start Docker, or `repo set … --docker off`"
                        .to_owned(),
                )
            })?;
            if let Some(owner) = runtime.owner {
                use std::os::unix::fs::MetadataExt;
                let gid = std::fs::metadata(&socket)
                    .map_err(|e| ProcessError::Sandbox(format!("{}: {e}", socket.display())))?
                    .gid();
                let g = groups.get_or_insert_with(|| crate::caches::RunnerGroups {
                    primary: owner.gid,
                    supplementary: Vec::new(),
                });
                if g.primary != gid && !g.supplementary.contains(&gid) {
                    g.supplementary.push(gid);
                }
            }
            Some(socket)
        } else {
            None
        };
        let sandbox = if !walled {
            None
        } else {
            // Fail closed: no runner starts outside the walls unless the operator said so.
            let tools =
                crate::sandbox::Tools::find().map_err(|m| ProcessError::Sandbox(m.to_string()))?;
            Some(crate::process::SandboxSpec {
                tools,
                config: &self.config.sandbox,
                shared,
                docker,
            })
        };
        let cgroup = match &self.cgroups {
            Some(c) => Some(
                c.create(
                    runtime.name.as_str(),
                    choice.memory_max_mb.map(|mb| u64::from(mb) << 20),
                )
                .map_err(|e| ProcessError::Prepare {
                    path: c.dir_of(runtime.name.as_str()),
                    source: e,
                })?,
            ),
            None => None,
        };
        let spawned = self.processes.spawn(&SpawnRequest {
            runtime: &runtime.path,
            jit_config,
            owner: runtime.owner,
            extra_env,
            groups,
            sandbox,
            cgroup: cgroup.clone(),
            layers,
        });
        if let (Err(_), Some(c), Some(_)) = (&spawned, &self.cgroups, &cgroup) {
            let _ = c.end(runtime.name.as_str());
        }
        Ok(spawned?)
    }

    fn layers_for(
        &self,
        layers: &Layers,
        runtime: &Runtime,
        shared: &[PathBuf],
    ) -> Result<LayerMounts, HostError> {
        let mounts = layers.prepare(runtime.name.as_str(), shared);
        self.config
            .caches
            .note_caches_setup(mounts.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        Ok(mounts?)
    }

    pub fn inspect(&self, id: ProcessIdentity) -> Result<ProcessState, HostError> {
        Ok(self.processes.inspect(id)?)
    }

    pub async fn stop(
        &self,
        id: ProcessIdentity,
        grace: Duration,
    ) -> Result<StopOutcome, HostError> {
        Ok(self.processes.stop(id, grace).await?)
    }

    /// Reads the runtime's diagnostics (off the async threads).
    pub async fn evidence(&self, name: &RuntimeName) -> Result<Evidence, HostError> {
        let path = self.root.runtime_path(name);
        blocking(move || Ok(read_evidence(&path)?)).await
    }

    /// The display name of the job the runner took, from its console (off the async threads).
    pub async fn running_job_name(&self, name: &RuntimeName) -> Option<String> {
        let path = self.root.runtime_path(name);
        tokio::task::spawn_blocking(move || crate::evidence::running_job_name(&path))
            .await
            .ok()
            .flatten()
    }

    /// Ends whatever the job left running under the runtime's uid (when this service holds it),
    /// removes the runtime entirely, then its runner id sidecar, and gives the uid back (off
    /// the async threads).
    /// A persistent workspace it holds is saved first when `keep_workspace` (the runner ended
    /// cleanly), else reset. `job`: the trust of the job the runner ran (`None`: it ran none);
    /// an untrusted job's runner that could write shared caches has those caches removed, in
    /// use or not, so no later job uses what it wrote. Retryable failures come back as
    /// [`HostError::Scrub`]; drive them with [`crate::ScrubRetry`].
    pub async fn scrub(
        &self,
        name: &RuntimeName,
        keep_workspace: bool,
        job: Option<rm_core::JobTrust>,
    ) -> Result<ScrubReport, HostError> {
        let (root, name) = (Arc::clone(&self.root), name.clone());
        let caches = self.caches.clone();
        let workspaces = self.workspaces.clone();
        let cgroups = self.cgroups.clone();
        let layers = self.layers.clone();
        let cap = self.config.caches.cap_bytes();
        blocking(move || {
            let path = root.runtime_path(&name);
            // Everything in the job's cgroup ends first, however it detached; one that does
            // not end keeps the scrub from completing (retried).
            if let Some(cgroups) = &cgroups {
                match cgroups.end(name.as_str()) {
                    Ok(crate::sandbox::cgroups::Ended::Removed { killed }) if killed > 0 => {
                        tracing::info!(runtime = %name, killed, "processes the job left in its cgroup were ended");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        return Err(HostError::Scrub(ScrubError::Retryable {
                            path: cgroups.dir_of(name.as_str()),
                            source: e,
                        }));
                    }
                }
            }
            // First, so nothing the job left running writes into the workspace being saved
            // or the runtime being removed.
            let uid = root.held_uid(&name);
            let mut ended_all = true;
            if let Some(uid) = uid {
                // Whatever is left keeps the uid held, and is not handed out while it runs;
                // the scrub goes on.
                match root.end_processes_of(uid) {
                    Ok(ended) => {
                        if !ended.ended.is_empty() {
                            tracing::info!(runtime = %name, uid, pids = ?ended.ended, "processes the job left running were ended");
                        }
                        if !ended.remaining.is_empty() {
                            tracing::warn!(runtime = %name, uid, pids = ?ended.remaining, "processes the job left running did not end after SIGKILL");
                            ended_all = false;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(runtime = %name, uid, error = %e, "the processes the job left running could not be ended");
                        ended_all = false;
                    }
                }
            }
            if let Some(slots) = workspaces {
                // Never blocks the scrub: a slot that cannot be saved is simply not there next
                // time.
                match slots.give_back(&name, keep_workspace) {
                    Ok(GivenBack::Saved { cleaned }) => tracing::info!(runtime = %name, cleaned, "persistent workspace saved for the next job"),
                    Ok(GivenBack::Reset) => tracing::info!(runtime = %name, "persistent workspace reset"),
                    Ok(GivenBack::NoSlot) => {}
                    Err(e) => tracing::warn!(runtime = %name, error = %e, "the persistent workspace could not be given back"),
                }
            }
            // Before the runtime goes: a crash in between finds the layer again, with the
            // runtime, and the recovery's scrub finishes it the same way.
            let layered = layers.as_ref().is_some_and(|l| l.has(name.as_str()));
            if let Some(l) = &layers {
                // Also removes what a spawn that failed half way left.
                finish_layers(l, &name, job, ended_all);
            }
            let report = scrub(&path)?;
            // A runner with layers wrote nothing in the caches (and a retried scrub still
            // knows it had them): only one without is suspected of the caches' changes.
            if let (Some(caches), Some(rm_core::JobTrust::Untrusted), false) =
                (&caches, job, layered)
            {
                purge_untrusted_writes(caches, &name);
            }
            if let Some(caches) = caches {
                // The runtime is gone: its leases end, then the caches are brought under
                // the cap between jobs. Neither undoes the scrub if it fails.
                if let Err(e) = caches.release(name.as_str()) {
                    tracing::warn!(runtime = %name, error = %e, "the runner's cache leases could not be released");
                }
                match caches.prune(cap) {
                    Ok(r) if !r.removed.is_empty() => tracing::info!(removed = r.removed.len(), cap, "caches pruned to the size cap"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "the caches could not be pruned"),
                }
            }
            if let Some(l) = &layers {
                if let Err(e) = l.forget(name.as_str()) {
                    tracing::warn!(runtime = %name, error = %e, "what is left of the job's cache layers could not be removed; the next start does");
                }
            }
            root.remove_sidecar(&name)?;
            if let (Some(uid), true) = (uid, ended_all) {
                root.release_uid(uid);
            }
            Ok(report)
        })
        .await
    }
}

/// Commits the runner's cache layers when its job was trusted and nothing of it still runs;
/// drops them otherwise. Never holds the scrub up: a commit that fails part way keeps what
/// it moved and drops the rest (a cache is only ever a head start), and a layer that cannot
/// be removed is left to the next start's sweep.
fn finish_layers(
    layers: &Layers,
    name: &RuntimeName,
    job: Option<rm_core::JobTrust>,
    ended_all: bool,
) {
    let trusted = job == Some(rm_core::JobTrust::Trusted);
    if trusted && !ended_all {
        tracing::warn!(runtime = %name, "a process of the trusted job did not end: what it wrote in the caches is dropped, not kept");
    }
    let keep = trusted && ended_all;
    match layers.finish(name.as_str(), keep) {
        Ok(f) if keep && f.written => {
            tracing::info!(runtime = %name, moved = f.moved, removed = f.removed, "the trusted job's cache writes were kept")
        }
        Ok(f) if f.written => {
            tracing::info!(runtime = %name, trust = %job.map_or("no job", |t| t.as_str()), "the job's cache writes were dropped: only a trusted job's reach the caches")
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(runtime = %name, error = %e, kept = keep, "the job's cache layer could not be finished; what is left of it is dropped");
            if let Err(e) = layers.finish(name.as_str(), false) {
                tracing::warn!(runtime = %name, error = %e, "the job's cache layer could not be removed; the next start drops it")
            }
        }
    }
}

/// An untrusted job's runner could write shared caches (GitHub gave it a job queued after it
/// started as a writer, or its job's origin could not be established) and something in them
/// changed meanwhile: those caches go, so no later job uses what it wrote.
fn purge_untrusted_writes(caches: &Caches, name: &RuntimeName) {
    if !caches.changed_since_prepare(name.as_str()) {
        return;
    }
    for namespace in caches.written_by(name.as_str()) {
        tracing::warn!(runtime = %name, namespace = %namespace, "a job that is not trusted (or whose origin could not be established) ran on a runner that could write the caches, and they changed; removing that namespace's caches so no later job uses what it wrote");
        match caches.purge(&namespace) {
            Ok(r) => {
                tracing::info!(removed = r.removed.len(), namespace = %namespace, "caches an untrusted job could write removed")
            }
            Err(e) => {
                tracing::error!(error = %e, namespace = %namespace, "the caches an untrusted job could write could not be removed: clear them with `runner-manager cache clear`")
            }
        }
    }
}
