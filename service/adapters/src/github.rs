//! [`GitHubPort`] over `rm_github::GitHubClient`, with GitHub's failures classified the way the
//! agent branches on them.

use crate::pool::Pool;
use rm_agent::{
    DeleteOutcome, DemandSnapshot, GhError, GitHubPort, Jit, JitSecret, PoolClaim, RunnerStatus,
    RunnerView,
};
use rm_core::{LabelSet, Target, Timestamp, RUNNER_NAME_PREFIX};
use rm_github::{ExposeSecret, GitHubClient, GitHubError, Gone, JitRequest, Runner};
use std::sync::{Arc, PoisonError, RwLock};

/// The default runner group ("Default").
pub const DEFAULT_RUNNER_GROUP: u64 = 1;

/// The agent's view of GitHub, over the shared client (sessions, ETags, budget).
#[derive(Clone)]
pub struct GitHubAdapter {
    client: GitHubClient,
    runner_group_id: u64,
    /// The pool this host joined, if any (set and cleared at run time by `pool join/leave`).
    pool: PoolSlot,
}

/// Where the GitHub adapter finds the pool this host joined: shared with the daemon, which
/// sets it when the host joins and clears it when it leaves.
pub type PoolSlot = Arc<RwLock<Option<Arc<Pool>>>>;

impl std::fmt::Debug for GitHubAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHubAdapter")
            .field("runner_group_id", &self.runner_group_id)
            .finish_non_exhaustive()
    }
}

impl GitHubAdapter {
    pub fn new(client: GitHubClient) -> Self {
        GitHubAdapter {
            client,
            runner_group_id: DEFAULT_RUNNER_GROUP,
            pool: PoolSlot::default(),
        }
    }

    /// Places pooled targets through the pool in `slot` (when one is set).
    pub fn with_pool(mut self, slot: PoolSlot) -> Self {
        self.pool = slot;
        self
    }

    fn pool(&self) -> Option<Arc<Pool>> {
        self.pool
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn with_runner_group(mut self, id: u64) -> Self {
        self.runner_group_id = id;
        self
    }

    pub fn client(&self) -> &GitHubClient {
        &self.client
    }
}

/// Maps rm-github's error onto the agent's classification:
/// no answer or the outage gate closed → `Unreachable`, 5xx/garbled → `Transient`, limits → `RateLimited`,
/// 401/sign-in → `Unauthorized`, 403 (and App not installed / not admin) → `Forbidden`.
pub fn map_github_error(e: GitHubError) -> GhError {
    match e {
        // No HTTP status: DNS, connect, timeout, dropped connection.
        GitHubError::Transient {
            detail,
            status: None,
        } => GhError::Unreachable { detail },
        GitHubError::Transient {
            detail,
            status: Some(s),
        } => GhError::Transient {
            detail: format!("HTTP {s}: {detail}"),
        },
        // The host-wide outage gate held the request back: GitHub is not answering.
        e @ GitHubError::Unreachable { .. } => GhError::Unreachable {
            detail: e.to_string(),
        },
        GitHubError::RateLimited { until, .. } => GhError::RateLimited {
            until: Timestamp::from_millis(until.timestamp_millis()),
        },
        GitHubError::Unauthorized | GitHubError::SignInRequired { .. } => GhError::Unauthorized,
        GitHubError::Forbidden { message } => GhError::Forbidden { detail: message },
        e @ (GitHubError::NotInstalled { .. } | GitHubError::NotAdmin { .. }) => {
            GhError::Forbidden {
                detail: e.to_string(),
            }
        }
        GitHubError::NotFound { what } => GhError::NotFound { detail: what },
        GitHubError::Conflict { message } => GhError::Conflict { detail: message },
        e @ GitHubError::StillRunningJob { .. } => GhError::Conflict {
            detail: e.to_string(),
        },
        GitHubError::Invalid { status, message } => GhError::Invalid {
            detail: format!("HTTP {status}: {message}"),
        },
        // The renewed credential could not be saved: it is kept in memory; try again.
        e @ GitHubError::Store(_) => GhError::Transient {
            detail: e.to_string(),
        },
        e @ GitHubError::Config(_) => GhError::Invalid {
            detail: e.to_string(),
        },
    }
}

fn view(r: &Runner) -> RunnerView {
    RunnerView {
        id: r.id,
        name: r.name.clone(),
        busy: r.busy,
        status: if r.is_online() {
            RunnerStatus::Online
        } else {
            RunnerStatus::Offline
        },
    }
}

impl GitHubPort for GitHubAdapter {
    fn pool_label(&self) -> Option<String> {
        self.pool().map(|p| p.label().to_owned())
    }

    async fn pooled_jobs(&self, target: &Target) -> Result<DemandSnapshot, GhError> {
        match self.pool() {
            Some(pool) => {
                pool.pooled_jobs(target, &self.client, || self.queued_jobs(target))
                    .await
            }
            None => self.queued_jobs(target).await,
        }
    }

    async fn pool_claim(
        &self,
        target: &Target,
        runner_name: &str,
        candidates: &[u64],
    ) -> PoolClaim {
        match self.pool() {
            Some(pool) => pool.claim(target, runner_name, candidates).await,
            None => PoolClaim::NotPooled,
        }
    }

    async fn pool_finish(&self, _target: &Target, runner_name: &str, ran_job: bool) {
        if let Some(pool) = self.pool() {
            pool.finish(runner_name, ran_job).await;
        }
    }

    async fn queued_jobs(&self, target: &Target) -> Result<DemandSnapshot, GhError> {
        let demand = self.client.demand(target).await.map_err(map_github_error)?;
        Ok(DemandSnapshot {
            jobs: demand.job_demands(),
            is_floor: demand.is_floor,
            // Learnt by this very poll (or an earlier one) from the same listings.
            runners_with_jobs: self.client.runners_with_jobs(RUNNER_NAME_PREFIX),
        })
    }

    async fn generate_jit(
        &self,
        target: &Target,
        runner_name: &str,
        labels: &LabelSet,
        work_folder: Option<&std::path::Path>,
    ) -> Result<Jit, GhError> {
        let request = JitRequest {
            name: runner_name.to_string(),
            runner_group_id: self.runner_group_id,
            labels: labels.to_strings(),
            work_folder: work_folder.map(|p| p.display().to_string()),
        };
        let answer = self
            .client
            .generate_jit_config(target, &request)
            .await
            .map_err(map_github_error)?;
        Ok(Jit {
            runner_id: answer.runner.id,
            config: JitSecret::new(answer.encoded_jit_config.expose_secret()),
        })
    }

    async fn runner_by_name(
        &self,
        target: &Target,
        name: &str,
    ) -> Result<Option<RunnerView>, GhError> {
        let list = self
            .client
            .list_runners(target, Some(name))
            .await
            .map_err(map_github_error)?;
        Ok(list.iter().find(|r| r.name == name).map(view))
    }

    async fn runners(&self, target: &Target) -> Result<Vec<RunnerView>, GhError> {
        let list = self
            .client
            .list_runners(target, None)
            .await
            .map_err(map_github_error)?;
        Ok(list.iter().map(view).collect())
    }

    fn runs_job(&self, runner_name: &str) -> bool {
        self.client.runs_job(runner_name)
    }

    fn runner_took_job(
        &self,
        target: &Target,
        runner_name: &str,
        job_name: Option<&str>,
        labels: &rm_core::LabelSet,
        os: rm_core::Os,
        arch: rm_core::Arch,
    ) -> bool {
        self.client
            .runner_took_job(target, runner_name, job_name, labels, os, arch)
    }

    async fn runner_job_over(&self, runner_name: &str) {
        self.client.runner_job_over(runner_name).await
    }

    async fn job_verdict(&self, runner_name: &str) -> rm_core::TrustVerdict {
        self.client.job_verdict(runner_name).await
    }

    async fn delete_runner(
        &self,
        target: &Target,
        runner_id: u64,
    ) -> Result<DeleteOutcome, GhError> {
        match self.client.delete_runner(target, runner_id).await {
            Ok(Gone::Deleted) => Ok(DeleteOutcome::Deleted),
            Ok(Gone::AlreadyGone) => Ok(DeleteOutcome::Gone),
            Err(GitHubError::StillRunningJob { .. }) => Ok(DeleteOutcome::StillRunningJob),
            Err(e) => Err(map_github_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified_for_the_agent() {
        let unreachable = map_github_error(GitHubError::Transient {
            detail: "connect refused".into(),
            status: None,
        });
        assert!(matches!(unreachable, GhError::Unreachable { .. }));
        let bad_gateway = map_github_error(GitHubError::Transient {
            detail: "bad gateway".into(),
            status: Some(502),
        });
        assert!(matches!(bad_gateway, GhError::Transient { .. }));
        let now = chrono::Utc::now();
        let gated = map_github_error(GitHubError::Unreachable {
            since: now,
            next_try: now + chrono::Duration::seconds(4),
            failures: 3,
            detail: "HTTP 503".into(),
        });
        assert!(matches!(gated, GhError::Unreachable { .. }), "{gated:?}");
        assert!(gated.to_string().contains("next try"), "{gated}");
        let until = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
        assert_eq!(
            map_github_error(GitHubError::RateLimited {
                until,
                secondary: true
            }),
            GhError::RateLimited {
                until: Timestamp::from_millis(1_800_000_000_000)
            }
        );
        assert_eq!(
            map_github_error(GitHubError::Unauthorized),
            GhError::Unauthorized
        );
        assert_eq!(
            map_github_error(GitHubError::SignInRequired {
                reason: "revoked".into()
            }),
            GhError::Unauthorized
        );
        assert!(matches!(
            map_github_error(GitHubError::Forbidden {
                message: "nope".into()
            }),
            GhError::Forbidden { .. }
        ));
        assert!(matches!(
            map_github_error(GitHubError::NotAdmin {
                repository: "o/r".into()
            }),
            GhError::Forbidden { .. }
        ));
        assert!(matches!(
            map_github_error(GitHubError::NotFound { what: "x".into() }),
            GhError::NotFound { .. }
        ));
        assert!(matches!(
            map_github_error(GitHubError::Conflict {
                message: "exists".into()
            }),
            GhError::Conflict { .. }
        ));
        assert!(!map_github_error(GitHubError::Invalid {
            status: 422,
            message: "bad".into()
        })
        .is_transient());
    }
}
