//! The GitHub port: demand, JIT registration, the runner inventory and deregistration.

use crate::secret::JitSecret;
use rm_core::{Arch, JobDemand, LabelSet, Os, Target, Timestamp};
use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// The target's queued jobs this pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemandSnapshot {
    pub jobs: Vec<JobDemand>,
    /// The adapter capped how many runs it listed: the real demand may be higher.
    pub is_floor: bool,
    /// Our runners (by name) that GitHub's job listings show running or having run a job:
    /// they are not supply for queued jobs, whatever the journal says yet. Free: demand
    /// reads those listings anyway.
    pub runners_with_jobs: BTreeSet<String>,
}

/// A successful `generate-jitconfig`: the registered runner and its one-shot config.
#[derive(Debug)]
pub struct Jit {
    pub runner_id: u64,
    pub config: JitSecret,
}

/// Whether GitHub shows the runner connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerStatus {
    Online,
    /// Registered but not connected (a JIT runner before its listener starts, or after it died).
    Offline,
}

/// One runner as GitHub lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerView {
    pub id: u64,
    pub name: String,
    pub busy: bool,
    pub status: RunnerStatus,
}

/// What a DELETE of a runner did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    /// Already gone (404): nothing to do.
    Gone,
    /// GitHub refused because the runner is running a job (422): keep it, try next pass.
    StillRunningJob,
}

/// What the pool answered a claim for a runner about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolClaim {
    /// The target is not placed through a pool: start as usual.
    NotPooled,
    /// The runner holds this queued job's claim: start it.
    Claimed { job_id: u64 },
    /// Every job the runner could take is held by a runner of this pool already: start none.
    NoneLeft,
    /// The pool's database cannot be asked: start none (guessing alone would start a surplus
    /// runner on every host), with the reason in the pool's words.
    Unavailable { detail: String },
}

/// A GitHub failure, classified so the agent knows whether to retry, wait or give up.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GhError {
    /// No answer (DNS, connect, timeout). Retried; supervision treats GitHub as unreachable.
    #[error("GitHub is unreachable: {detail}")]
    Unreachable { detail: String },
    /// A 5xx or another transient answer. Retried.
    #[error("GitHub answered with a transient error: {detail}")]
    Transient { detail: String },
    /// Rate limited until the given time. Retried after it if within the backoff budget.
    #[error("GitHub rate limit reached until {until}")]
    RateLimited { until: Timestamp },
    /// 401: the credential is not accepted. The policy goes to `authentication_failed`.
    #[error("GitHub refused the credential (401): sign in again")]
    Unauthorized,
    /// 403: a terminal refusal, never retried. The policy goes to `repair_required`.
    #[error("GitHub refused the request (403): {detail}")]
    Forbidden { detail: String },
    #[error("GitHub does not know it (404): {detail}")]
    NotFound { detail: String },
    /// 409/422 on registration: a runner with that name already exists.
    #[error("GitHub reports a conflict: {detail}")]
    Conflict { detail: String },
    /// The answer could not be understood.
    #[error("GitHub's answer was invalid: {detail}")]
    Invalid { detail: String },
}

impl GhError {
    /// Worth another try after a backoff.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            GhError::Unreachable { .. } | GhError::Transient { .. } | GhError::RateLimited { .. }
        )
    }
}

/// What the agent asks of GitHub for one target.
pub trait GitHubPort: Send + Sync + 'static {
    /// Jobs whose own status is `queued`, from the target's queued and in-progress runs.
    fn queued_jobs(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<DemandSnapshot, GhError>> + Send;

    /// `generate-jitconfig` for `runner_name` with `labels`; `work_folder` is the runner's
    /// work folder (absolute) when it keeps a persistent workspace, else GitHub's default.
    fn generate_jit(
        &self,
        target: &Target,
        runner_name: &str,
        labels: &LabelSet,
        work_folder: Option<&Path>,
    ) -> impl Future<Output = Result<Jit, GhError>> + Send;

    /// One runner by its exact name.
    fn runner_by_name(
        &self,
        target: &Target,
        name: &str,
    ) -> impl Future<Output = Result<Option<RunnerView>, GhError>> + Send;

    /// The target's runner inventory (at least every runner whose name has our prefix).
    fn runners(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<Vec<RunnerView>, GhError>> + Send;

    fn delete_runner(
        &self,
        target: &Target,
        runner_id: u64,
    ) -> impl Future<Output = Result<DeleteOutcome, GhError>> + Send;

    /// The label of the pool of hosts this host serves, if it joined one. A policy carrying
    /// it is placed through the pool: its demand comes from [`GitHubPort::pooled_jobs`] and
    /// each of its runners starts only with a claim ([`GitHubPort::pool_claim`]).
    fn pool_label(&self) -> Option<String> {
        None
    }

    /// The queued jobs of a target with pooled policies, less the jobs other hosts of the
    /// pool hold (one host reads GitHub for the pool; the others read what it published).
    fn pooled_jobs(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<DemandSnapshot, GhError>> + Send {
        self.queued_jobs(target)
    }

    /// Claims one of `candidates` (queued jobs the runner could take, oldest first) for the
    /// runner `runner_name` about to start, so no other host of the pool starts one for it.
    fn pool_claim(
        &self,
        target: &Target,
        runner_name: &str,
        candidates: &[u64],
    ) -> impl Future<Output = PoolClaim> + Send {
        let _ = (target, runner_name, candidates);
        std::future::ready(PoolClaim::NotPooled)
    }

    /// The runner ended (`ran_job`: it may have taken a job, so its claim counts until the
    /// pool reads GitHub again). Never fails: the adapter retries on its own.
    fn pool_finish(
        &self,
        target: &Target,
        runner_name: &str,
        ran_job: bool,
    ) -> impl Future<Output = ()> + Send {
        let _ = (target, runner_name, ran_job);
        std::future::ready(())
    }

    /// Whether GitHub's job listings, as the demand polls last read them (no request), show
    /// `runner_name` running a job now. GitHub's word that the runner is busy: supervision then
    /// needs no inventory listing to know it (LIFECYCLE.md: learn busy from any source).
    fn runs_job(&self, runner_name: &str) -> bool {
        let _ = runner_name;
        false
    }

    /// A runner of ours took a job whose display name its console gave (`None`: not written
    /// yet). The adapter attributes it when it can without a request (true then), so demand
    /// needs not read the `in_progress` runs our runners account for.
    fn runner_took_job(
        &self,
        target: &Target,
        runner_name: &str,
        job_name: Option<&str>,
        labels: &LabelSet,
        os: Os,
        arch: Arch,
    ) -> bool {
        let _ = (target, runner_name, job_name, labels, os, arch);
        false
    }

    /// The job of a runner of ours ended (its process is gone), before it is concluded: the
    /// adapter confirms with GitHub which job it ran. Never fails.
    fn runner_job_over(&self, runner_name: &str) -> impl Future<Output = ()> + Send {
        let _ = runner_name;
        std::future::ready(())
    }

    /// The verdict on the job `runner_name` ran, after [`GitHubPort::runner_job_over`]:
    /// decided fail-closed from the job's own run (GitHub's word on which job the runner ran,
    /// that run's event and head repository). The default knows nothing: untrusted.
    fn job_verdict(&self, runner_name: &str) -> impl Future<Output = rm_core::TrustVerdict> + Send {
        let _ = runner_name;
        std::future::ready(rm_core::TrustVerdict::unknown(
            "nothing said which job the runner ran",
        ))
    }
}

impl<G: GitHubPort> GitHubPort for Arc<G> {
    fn queued_jobs(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<DemandSnapshot, GhError>> + Send {
        (**self).queued_jobs(target)
    }
    fn generate_jit(
        &self,
        target: &Target,
        runner_name: &str,
        labels: &LabelSet,
        work_folder: Option<&Path>,
    ) -> impl Future<Output = Result<Jit, GhError>> + Send {
        (**self).generate_jit(target, runner_name, labels, work_folder)
    }
    fn runner_by_name(
        &self,
        target: &Target,
        name: &str,
    ) -> impl Future<Output = Result<Option<RunnerView>, GhError>> + Send {
        (**self).runner_by_name(target, name)
    }
    fn runners(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<Vec<RunnerView>, GhError>> + Send {
        (**self).runners(target)
    }
    fn delete_runner(
        &self,
        target: &Target,
        runner_id: u64,
    ) -> impl Future<Output = Result<DeleteOutcome, GhError>> + Send {
        (**self).delete_runner(target, runner_id)
    }
    fn runs_job(&self, runner_name: &str) -> bool {
        (**self).runs_job(runner_name)
    }
    fn runner_took_job(
        &self,
        target: &Target,
        runner_name: &str,
        job_name: Option<&str>,
        labels: &LabelSet,
        os: Os,
        arch: Arch,
    ) -> bool {
        (**self).runner_took_job(target, runner_name, job_name, labels, os, arch)
    }
    fn runner_job_over(&self, runner_name: &str) -> impl Future<Output = ()> + Send {
        (**self).runner_job_over(runner_name)
    }
    fn job_verdict(&self, runner_name: &str) -> impl Future<Output = rm_core::TrustVerdict> + Send {
        (**self).job_verdict(runner_name)
    }
    fn pool_label(&self) -> Option<String> {
        (**self).pool_label()
    }
    fn pooled_jobs(
        &self,
        target: &Target,
    ) -> impl Future<Output = Result<DemandSnapshot, GhError>> + Send {
        (**self).pooled_jobs(target)
    }
    fn pool_claim(
        &self,
        target: &Target,
        runner_name: &str,
        candidates: &[u64],
    ) -> impl Future<Output = PoolClaim> + Send {
        (**self).pool_claim(target, runner_name, candidates)
    }
    fn pool_finish(
        &self,
        target: &Target,
        runner_name: &str,
        ran_job: bool,
    ) -> impl Future<Output = ()> + Send {
        (**self).pool_finish(target, runner_name, ran_job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jit_answer_never_prints_its_config() {
        let jit = Jit {
            runner_id: 7,
            config: JitSecret::new("s3cr3t-config"),
        };
        let shown = format!("{jit:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("runner_id: 7"));
    }
}
