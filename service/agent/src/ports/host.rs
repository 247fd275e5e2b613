//! The runner host port: runtime directories, the runner id sidecar, processes, diagnostics
//! and scrubbing.

use crate::secret::JitSecret;
use rm_core::{AttemptId, Evidence, HostCheck, PolicyId, ProcessExit, ProcessIdentity, Target};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// A runner host failure.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HostError {
    /// The runner package in the local cache could not be verified (checksum, layout).
    #[error("runner package unverified: {detail}")]
    PackageUnverified { detail: String },
    /// The runner process could not be spawned.
    #[error("runner process could not start: {detail}")]
    SpawnFailed { detail: String },
    #[error("{op} failed: {detail}")]
    Io { op: &'static str, detail: String },
}

/// A runtime directory that could not be removed (yet).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("runtime directory could not be removed: {detail}")]
pub struct ScrubError {
    /// Busy files, a process still exiting: try again later. Not retryable still gets retried
    /// at the longest backoff, since an operator may fix it.
    pub retryable: bool,
    pub detail: String,
}

/// Whom a runner is started for: its caches follow from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnFor {
    pub policy: PolicyId,
    pub target: Target,
    /// A queued job the runner may take comes from a pull request of a fork: it reads the
    /// caches and never writes them.
    pub fork_jobs: bool,
}

/// What the agent asks of the machine. Every path is an attempt's runtime directory.
pub trait RunnerHostPort: Send + Sync + 'static {
    /// Where `attempt`'s runtime directory is (or would be), without touching it.
    fn runtime_dir(&self, attempt: &AttemptId) -> PathBuf;

    /// Copies the verified runner package into the attempt's fresh runtime directory.
    fn materialize(
        &self,
        attempt: &AttemptId,
    ) -> impl Future<Output = Result<PathBuf, HostError>> + Send;

    /// Claims a persistent workspace slot of `policy` for the attempt's prepared runtime and
    /// answers its work folder (absolute), to register the runner with. `None`: this host
    /// keeps no workspaces. The default keeps none.
    fn claim_workspace(
        &self,
        attempt: &AttemptId,
        policy: PolicyId,
    ) -> impl Future<Output = Result<Option<PathBuf>, HostError>> + Send {
        let _ = (attempt, policy);
        async { Ok(None) }
    }

    /// Durably records the runner id GitHub assigned, before the journal does.
    fn write_sidecar(
        &self,
        attempt: &AttemptId,
        runner_id: u64,
    ) -> impl Future<Output = Result<(), HostError>> + Send;

    fn read_sidecar(
        &self,
        attempt: &AttemptId,
    ) -> impl Future<Output = Result<Option<u64>, HostError>> + Send;

    /// Starts the listener with the JIT config in its environment only, and the caches
    /// `spawn_for` is allowed.
    fn spawn(
        &self,
        runtime: &Path,
        jit: JitSecret,
        spawn_for: &SpawnFor,
    ) -> impl Future<Output = Result<ProcessIdentity, HostError>> + Send;

    /// Whether that exact process (pid and start time) is still running.
    fn inspect(
        &self,
        process: ProcessIdentity,
    ) -> impl Future<Output = Result<bool, HostError>> + Send;

    /// A runner process running from `runtime`, if any: recovers a process spawned before
    /// `starting` was journalled.
    fn find_process(
        &self,
        runtime: &Path,
    ) -> impl Future<Output = Result<Option<ProcessIdentity>, HostError>> + Send;

    /// How that process ended, if this host started it and saw it end (a restarted service
    /// cannot know). The default knows nothing.
    fn exit_of(
        &self,
        process: ProcessIdentity,
    ) -> impl Future<Output = Option<ProcessExit>> + Send {
        let _ = process;
        async { None }
    }

    /// The display name of the job the runner took, from its console ("Running job: …"), once
    /// written.
    fn job_name(&self, runtime: &Path) -> impl Future<Output = Option<String>> + Send {
        let _ = runtime;
        async { None }
    }

    /// Asks the process to stop, killing it after `grace`.
    fn stop(
        &self,
        process: ProcessIdentity,
        grace: Duration,
    ) -> impl Future<Output = Result<(), HostError>> + Send;

    /// What the runner's `_diag` directory shows; unreadable counts as [`Evidence::None`].
    fn evidence(&self, runtime: &Path) -> impl Future<Output = Evidence> + Send;

    /// Removes the runtime directory entirely and verifies nothing is left. A persistent
    /// workspace slot it holds is saved first when `keep_workspace` (the runner ended
    /// cleanly and its job earned it), else reset. `job`: the trust of the job the runner
    /// ran (`None`: it cannot have run one); what it may have written into the shared caches
    /// is removed when that job was not trusted.
    fn scrub(
        &self,
        runtime: &Path,
        keep_workspace: bool,
        job: Option<rm_core::JobTrust>,
    ) -> impl Future<Output = Result<(), ScrubError>> + Send;

    /// The required host checks a launch depends on (the runner root reachable by the runner
    /// identity, the package runnable, the disk): a host failing one is unfit, and the loop
    /// makes no JIT request. Asked at the first launch and before a launch after any failure,
    /// never on a healthy host's every launch. The default checks nothing.
    fn check_fitness(&self) -> impl Future<Output = Vec<HostCheck>> + Send {
        async { Vec::new() }
    }

    /// Whether the runner of `runtime`, whose job just ended, may have left something the
    /// job's trust decides (a persistent workspace to save, a change in the shared caches it
    /// could write): only then is GitHub asked for a verdict. The default: yes.
    fn needs_verdict(&self, runtime: &Path) -> impl Future<Output = bool> + Send {
        let _ = runtime;
        async { true }
    }

    /// `policy`'s own sandbox choice: a target set to run without the walls is not held back
    /// by a host that cannot build them. The default: walled.
    fn sandbox_choice(&self, _policy: rm_core::PolicyId) -> rm_core::TargetSandbox {
        rm_core::TargetSandbox::default()
    }
}

impl<H: RunnerHostPort> RunnerHostPort for Arc<H> {
    fn runtime_dir(&self, attempt: &AttemptId) -> PathBuf {
        (**self).runtime_dir(attempt)
    }
    fn materialize(
        &self,
        attempt: &AttemptId,
    ) -> impl Future<Output = Result<PathBuf, HostError>> + Send {
        (**self).materialize(attempt)
    }
    fn claim_workspace(
        &self,
        attempt: &AttemptId,
        policy: PolicyId,
    ) -> impl Future<Output = Result<Option<PathBuf>, HostError>> + Send {
        (**self).claim_workspace(attempt, policy)
    }
    fn write_sidecar(
        &self,
        attempt: &AttemptId,
        runner_id: u64,
    ) -> impl Future<Output = Result<(), HostError>> + Send {
        (**self).write_sidecar(attempt, runner_id)
    }
    fn read_sidecar(
        &self,
        attempt: &AttemptId,
    ) -> impl Future<Output = Result<Option<u64>, HostError>> + Send {
        (**self).read_sidecar(attempt)
    }
    fn spawn(
        &self,
        runtime: &Path,
        jit: JitSecret,
        spawn_for: &SpawnFor,
    ) -> impl Future<Output = Result<ProcessIdentity, HostError>> + Send {
        (**self).spawn(runtime, jit, spawn_for)
    }
    fn inspect(
        &self,
        process: ProcessIdentity,
    ) -> impl Future<Output = Result<bool, HostError>> + Send {
        (**self).inspect(process)
    }
    fn find_process(
        &self,
        runtime: &Path,
    ) -> impl Future<Output = Result<Option<ProcessIdentity>, HostError>> + Send {
        (**self).find_process(runtime)
    }
    fn exit_of(
        &self,
        process: ProcessIdentity,
    ) -> impl Future<Output = Option<ProcessExit>> + Send {
        (**self).exit_of(process)
    }
    fn stop(
        &self,
        process: ProcessIdentity,
        grace: Duration,
    ) -> impl Future<Output = Result<(), HostError>> + Send {
        (**self).stop(process, grace)
    }
    fn evidence(&self, runtime: &Path) -> impl Future<Output = Evidence> + Send {
        (**self).evidence(runtime)
    }
    fn job_name(&self, runtime: &Path) -> impl Future<Output = Option<String>> + Send {
        (**self).job_name(runtime)
    }
    fn scrub(
        &self,
        runtime: &Path,
        keep_workspace: bool,
        job: Option<rm_core::JobTrust>,
    ) -> impl Future<Output = Result<(), ScrubError>> + Send {
        (**self).scrub(runtime, keep_workspace, job)
    }
    fn check_fitness(&self) -> impl Future<Output = Vec<HostCheck>> + Send {
        (**self).check_fitness()
    }
    fn sandbox_choice(&self, policy: rm_core::PolicyId) -> rm_core::TargetSandbox {
        (**self).sandbox_choice(policy)
    }
    fn needs_verdict(&self, runtime: &Path) -> impl Future<Output = bool> + Send {
        (**self).needs_verdict(runtime)
    }
}
