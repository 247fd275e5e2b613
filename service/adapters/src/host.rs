//! [`RunnerHostPort`] over `rm_runner::RunnerHost`: runtimes materialized from the verified
//! package cache (looked up once and re-checked every 6 h, never downloaded per attempt), the
//! runner id sidecar in `<runner root>/.ids/` (outside the runtime, so a job cannot touch it and
//! a scrub removes it only after the runtime is gone), processes identified by pid + start
//! time, and the host checks of `rm_runner::doctor` over the host's own settings.

use rm_agent::{HostError, JitSecret, RunnerHostPort, ScrubError, SpawnFor};
use rm_core::caches::CacheAccess;
use rm_core::{AttemptId, Evidence, HostCheck, PolicyId, ProcessIdentity};
use rm_runner::{
    CachePlan, InstalledPackage, JitConfig, PackageId, PackageSource, Platform, ProcessState,
    RunnerHost, Runtime, RuntimeName,
};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// The runner host as the agent sees it.
pub struct HostAdapter<S> {
    host: Arc<RunnerHost<S>>,
    platform: Platform,
    /// The package runtimes are made from; refreshed when the cache says a check is due.
    package: tokio::sync::Mutex<Option<InstalledPackage>>,
    /// Runtimes prepared by this process, by path (spawn needs their owner).
    prepared: Mutex<HashMap<PathBuf, Runtime>>,
}

fn io(op: &'static str) -> impl FnOnce(String) -> HostError {
    move |detail| HostError::Io { op, detail }
}

async fn blocking<T: Send + 'static>(
    op: &'static str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, HostError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HostError::Io {
            op,
            detail: format!("task failed: {e}"),
        })?
        .map_err(io(op))
}

/// The runtime name a runtime path ends in.
fn name_of(runtime: &Path) -> Result<RuntimeName, String> {
    let file = runtime
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{} is not a runtime directory", runtime.display()))?;
    RuntimeName::new(file).map_err(|e| e.to_string())
}

impl<S: PackageSource + 'static> HostAdapter<S> {
    pub fn new(host: RunnerHost<S>, platform: Platform) -> Self {
        HostAdapter {
            host: Arc::new(host),
            platform,
            package: tokio::sync::Mutex::new(None),
            prepared: Mutex::new(HashMap::new()),
        }
    }

    pub fn runner_host(&self) -> &Arc<RunnerHost<S>> {
        &self.host
    }

    /// The package to materialize from: the cached one, re-checked against the source when
    /// the check interval has passed. A failed check keeps using what is installed.
    pub async fn package(&self) -> Result<InstalledPackage, HostError> {
        let mut current = self.package.lock().await;
        let now = SystemTime::now();
        let cache = self.host.cache();
        if current.is_none() || cache.should_check(now) {
            match cache.refresh(self.platform, now).await {
                Ok(pkg) => {
                    if pkg.downloaded {
                        self.forget_old_packages(&pkg).await;
                    }
                    *current = Some(pkg);
                }
                Err(e) => {
                    let installed = current
                        .clone()
                        .or_else(|| cache.current(self.platform).ok().flatten());
                    match installed {
                        Some(pkg) => {
                            tracing::warn!(error = %e, package = %pkg.id, "runner package check failed; using the cached one");
                            *current = Some(pkg);
                        }
                        None => {
                            return Err(HostError::PackageUnverified {
                                detail: e.to_string(),
                            })
                        }
                    }
                }
            }
        }
        current.clone().ok_or_else(|| HostError::PackageUnverified {
            detail: "no runner package is installed".into(),
        })
    }

    /// After a new version was installed: keep it and the previous one, remove older ones.
    /// Runtimes are copies, so no attempt holds a cached package open.
    async fn forget_old_packages(&self, installed: &InstalledPackage) {
        let host = Arc::clone(&self.host);
        let keep: HashSet<PackageId> = [installed.id.clone()].into_iter().collect();
        let removed = blocking("removing old runner packages", move || {
            host.cache().gc(&keep).map_err(|e| e.to_string())
        })
        .await;
        match removed {
            Ok(ids) if !ids.is_empty() => {
                tracing::info!(removed = ?ids, "old runner packages removed from the cache")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "old runner packages not removed"),
        }
    }

    fn runtime_for(&self, path: &Path) -> Option<Runtime> {
        if let Some(rt) = self
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
        {
            return Some(rt.clone());
        }
        self.host
            .root()
            .list()
            .ok()?
            .into_iter()
            .find(|rt| rt.path == path)
    }
}

impl<S: PackageSource + 'static> RunnerHostPort for HostAdapter<S> {
    fn runtime_dir(&self, attempt: &AttemptId) -> PathBuf {
        self.host
            .root()
            .runtime_path(&RuntimeName::for_attempt(attempt))
    }

    async fn materialize(&self, attempt: &AttemptId) -> Result<PathBuf, HostError> {
        let package = self.package().await?;
        let name = RuntimeName::for_attempt(attempt);
        let prepared = self
            .host
            .prepare(&name, &package)
            .await
            .map_err(|e| match e {
                rm_runner::HostError::Cache(c) => HostError::PackageUnverified {
                    detail: c.to_string(),
                },
                other => HostError::Io {
                    op: "materializing the runtime",
                    detail: other.to_string(),
                },
            })?;
        tracing::debug!(
            attempt = %attempt,
            files = prepared.report.files,
            elapsed_ms = prepared.report.elapsed.as_millis() as u64,
            "runtime materialized"
        );
        let path = prepared.runtime.path.clone();
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.clone(), prepared.runtime);
        Ok(path)
    }

    async fn claim_workspace(
        &self,
        attempt: &AttemptId,
        policy: PolicyId,
    ) -> Result<Option<PathBuf>, HostError> {
        let path = self.runtime_dir(attempt);
        let rt = self.runtime_for(&path).ok_or_else(|| HostError::Io {
            op: "claiming a persistent workspace",
            detail: format!("{} is not a prepared runtime", path.display()),
        })?;
        // The package the runtime was just made from: a slot kept with another is reset.
        let package = self
            .package
            .lock()
            .await
            .as_ref()
            .map(|p| p.id.to_string())
            .unwrap_or_default();
        let host = Arc::clone(&self.host);
        blocking("claiming a persistent workspace", move || {
            host.claim_workspace(&rt, policy, &package)
                .map(|slot| slot.map(|s| s.work_folder))
                .map_err(|e| e.to_string())
        })
        .await
    }

    async fn write_sidecar(&self, attempt: &AttemptId, runner_id: u64) -> Result<(), HostError> {
        let host = Arc::clone(&self.host);
        let name = RuntimeName::for_attempt(attempt);
        blocking("writing the runner id sidecar", move || {
            host.root()
                .write_sidecar(&name, runner_id)
                .map_err(|e| e.to_string())
        })
        .await
    }

    async fn read_sidecar(&self, attempt: &AttemptId) -> Result<Option<u64>, HostError> {
        let host = Arc::clone(&self.host);
        let name = RuntimeName::for_attempt(attempt);
        blocking("reading the runner id sidecar", move || {
            host.root().read_sidecar(&name).map_err(|e| e.to_string())
        })
        .await
    }

    async fn spawn(
        &self,
        runtime: &Path,
        jit: JitSecret,
        spawn_for: &SpawnFor,
    ) -> Result<ProcessIdentity, HostError> {
        let rt = self
            .runtime_for(runtime)
            .ok_or_else(|| HostError::SpawnFailed {
                detail: format!("{} is not a prepared runtime", runtime.display()),
            })?;
        let host = Arc::clone(&self.host);
        let setting = host.config().caches.for_policy(spawn_for.policy);
        let namespace = setting.effective(&spawn_for.target);
        let plan = CachePlan {
            // The tool cache is its repository's (or shared as its caches are): never another
            // repository's. An organization's runner may take any repository's job: its own.
            tool_namespace: namespace.clone().or_else(|| match &spawn_for.target {
                rm_core::Target::Repository { .. } => {
                    Some(rm_core::caches::Namespace::of_target(&spawn_for.target))
                }
                rm_core::Target::Organization { .. } => None,
            }),
            namespace,
            access: CacheAccess::for_jobs(spawn_for.fork_jobs),
            tool_cache: true,
        };
        let choice = host.config().sandbox_choices.for_policy(spawn_for.policy);
        if let Some(warning) = choice.warning() {
            tracing::warn!(runtime = %runtime.display(), gh_target = %spawn_for.target, "{warning}");
        }
        if plan.access == CacheAccess::ReadOnly && plan.namespace.is_some() {
            tracing::info!(runtime = %runtime.display(), gh_target = %spawn_for.target, "a queued job comes from a fork: this runner reads the caches and does not write them");
        }
        tokio::task::spawn_blocking(move || {
            let config = JitConfig::new(jit.expose());
            drop(jit);
            host.spawn(&rt, &config, Some(&plan), choice)
                .map(|run| run.identity)
                .map_err(|e| HostError::SpawnFailed {
                    detail: e.to_string(),
                })
        })
        .await
        .map_err(|e| HostError::SpawnFailed {
            detail: format!("task failed: {e}"),
        })?
    }

    async fn inspect(&self, process: ProcessIdentity) -> Result<bool, HostError> {
        match self.host.inspect(process) {
            Ok(ProcessState::Alive) => Ok(true),
            Ok(ProcessState::Exited { .. } | ProcessState::Gone) => Ok(false),
            Err(e) => Err(HostError::Io {
                op: "inspecting the runner process",
                detail: e.to_string(),
            }),
        }
    }

    async fn exit_of(&self, process: ProcessIdentity) -> Option<rm_core::ProcessExit> {
        match self.host.inspect(process) {
            Ok(ProcessState::Exited {
                status: Some(status),
            }) => Some(rm_core::ProcessExit {
                code: status.code,
                signal: status.signal,
            }),
            _ => None,
        }
    }

    async fn find_process(&self, runtime: &Path) -> Result<Option<ProcessIdentity>, HostError> {
        // No directory, no process running from it (a crash before materialize finished, or
        // after the scrub).
        if !runtime.is_dir() {
            return Ok(None);
        }
        let host = Arc::clone(&self.host);
        let runtime = runtime.to_path_buf();
        blocking("finding the runner process", move || {
            host.processes()
                .find_in_runtime(&runtime)
                .map(|found| found.into_iter().next())
                .map_err(|e| e.to_string())
        })
        .await
    }

    async fn stop(&self, process: ProcessIdentity, grace: Duration) -> Result<(), HostError> {
        self.host
            .stop(process, grace)
            .await
            .map(|_| ())
            .map_err(|e| HostError::Io {
                op: "stopping the runner process",
                detail: e.to_string(),
            })
    }

    async fn job_name(&self, runtime: &Path) -> Option<String> {
        let name = name_of(runtime).ok()?;
        self.host.running_job_name(&name).await
    }

    async fn evidence(&self, runtime: &Path) -> Evidence {
        let Ok(name) = name_of(runtime) else {
            return Evidence::None;
        };
        match self.host.evidence(&name).await {
            Ok(ev) => ev.into(),
            Err(e) => {
                tracing::debug!(runtime = %runtime.display(), error = %e, "runner diagnostics unreadable");
                Evidence::None
            }
        }
    }

    async fn check_fitness(&self) -> Vec<HostCheck> {
        let host = Arc::clone(&self.host);
        let platform = self.platform;
        match tokio::task::spawn_blocking(move || host.fitness(Some(platform))).await {
            Ok(checks) => checks,
            Err(e) => {
                // Our own task failing says nothing about the host: launch as before.
                tracing::warn!(error = %e, "host checks could not run");
                Vec::new()
            }
        }
    }

    fn sandbox_choice(&self, policy: rm_core::PolicyId) -> rm_core::TargetSandbox {
        self.host.config().sandbox_choices.for_policy(policy)
    }

    async fn needs_verdict(&self, runtime: &Path) -> bool {
        // A name that is not ours cannot be looked at: ask (doubt costs a verdict).
        let Ok(name) = name_of(runtime) else {
            return true;
        };
        let host = Arc::clone(&self.host);
        tokio::task::spawn_blocking(move || host.needs_verdict(&name))
            .await
            .unwrap_or(true)
    }

    async fn scrub(
        &self,
        runtime: &Path,
        keep_workspace: bool,
        job: Option<rm_core::JobTrust>,
    ) -> Result<(), ScrubError> {
        let name = name_of(runtime).map_err(|detail| ScrubError {
            retryable: false,
            detail,
        })?;
        #[cfg(feature = "failpoints")]
        if rm_agent::failpoint::armed("mid_scrub") {
            // Remove part of the tree first, so the crash leaves a half-scrubbed runtime.
            let _ = std::fs::remove_dir_all(runtime.join("bin"));
            rm_agent::failpoint!("mid_scrub");
        }
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(runtime);
        match self.host.scrub(&name, keep_workspace, job).await {
            Ok(_) => Ok(()),
            Err(rm_runner::HostError::Scrub(e)) => Err(ScrubError {
                retryable: e.is_retryable(),
                detail: e.to_string(),
            }),
            Err(e) => Err(ScrubError {
                retryable: true,
                detail: e.to_string(),
            }),
        }
    }
}
