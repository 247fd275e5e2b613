//! Demand per target (GITHUB.md §4): queued jobs, found by listing the
//! `queued` and `in_progress` runs (an in-progress run can hold queued jobs)
//! and their latest jobs. Every GET is conditional, so an idle target costs
//! nothing against the primary limit.

use crate::client::{Cost, GitHubClient};
use crate::error::GitHubError;
use crate::models::{JobItem, JobsPage, RunsPage};
use chrono::{DateTime, Utc};
use rm_core::Target;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// One queued job waiting for a runner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueuedJob {
    /// Repository owner.
    pub owner: String,
    /// Repository name.
    pub repo: String,
    /// Workflow run id.
    pub run_id: u64,
    /// Job id.
    pub job_id: u64,
    /// Job name.
    pub name: String,
    /// The `runs-on` labels.
    pub labels: Vec<String>,
    /// When the job was queued.
    pub created_at: Option<DateTime<Utc>>,
    /// What triggered its run (`push`, `pull_request`, ...), if GitHub said.
    pub event: Option<String>,
    /// Its run comes from a pull request of a fork: the run's head repository is another
    /// repository than the one it runs in (`RunSummary::is_from_fork`).
    pub from_fork: bool,
}

/// Queued jobs of one target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Demand {
    /// The queued jobs, oldest first.
    pub jobs: Vec<QueuedJob>,
    /// True when page caps (or a repository that could not be read) mean
    /// there may be more: the count is a floor.
    pub is_floor: bool,
    /// Repositories polled.
    pub repositories: usize,
    /// Requests this poll made (304s included) and how many were charged.
    pub requests: u64,
    /// Charged requests.
    pub charged: u64,
}

/// What the last jobs listing of an in-progress run showed: when every job
/// had started and the run has not changed since (same `updated_at` in the
/// runs list), no job of it can be queued, so its jobs are not listed again.
/// That keeps step progress of long jobs (which changes the jobs listing)
/// from costing a charged request every poll.
pub(crate) struct RunMemo {
    repo: String,
    updated_at: String,
}

/// Job statuses that have not started yet (and may still become `queued`).
const NOT_STARTED: [&str; 4] = ["queued", "waiting", "pending", "requested"];

/// What the runs listings said about one run.
struct SeenRun {
    updated_at: Option<String>,
    /// Listed as `in_progress` (else `queued`).
    in_progress: bool,
    event: Option<String>,
    from_fork: bool,
}

struct RepoDemand {
    jobs: Vec<QueuedJob>,
    is_floor: bool,
    cost: Cost,
}

impl GitHubClient {
    /// Queued jobs for `target`; for an organization over the repositories
    /// the App reaches there (cached list).
    pub async fn demand(&self, target: &Target) -> Result<Demand, GitHubError> {
        let result = match target {
            Target::Repository { owner, name } => {
                let d = self
                    .repository_demand(owner.as_str(), name.as_str())
                    .await?;
                Demand {
                    jobs: d.jobs,
                    is_floor: d.is_floor,
                    repositories: 1,
                    requests: d.cost.requests,
                    charged: d.cost.charged,
                }
            }
            Target::Organization { org } => self.organization_demand(org.as_str()).await?,
        };
        self.record_poll(
            target,
            Cost {
                requests: result.requests,
                charged: result.charged,
            },
        );
        if !result.jobs.is_empty() {
            self.record_demand_seen();
        }
        tracing::debug!(target = %target, jobs = result.jobs.len(), is_floor = result.is_floor, charged = result.charged, "demand polled");
        Ok(result)
    }

    async fn organization_demand(&self, org: &str) -> Result<Demand, GitHubError> {
        let repos = self.organization_repositories(org).await?;
        let mut set = tokio::task::JoinSet::new();
        for r in repos.iter() {
            let client = self.clone();
            let owner = r.owner.login.clone();
            let name = r.name.clone();
            set.spawn(async move {
                let d = client.repository_demand(&owner, &name).await;
                (format!("{owner}/{name}"), d)
            });
        }
        let mut out = Demand {
            jobs: Vec::new(),
            is_floor: false,
            repositories: repos.len(),
            requests: 0,
            charged: 0,
        };
        let mut fatal: Option<GitHubError> = None;
        while let Some(joined) = set.join_next().await {
            let Ok((repo, result)) = joined else {
                out.is_floor = true;
                continue;
            };
            match result {
                Ok(mut d) => {
                    out.jobs.append(&mut d.jobs);
                    out.is_floor |= d.is_floor;
                    out.requests += d.cost.requests;
                    out.charged += d.cost.charged;
                }
                Err(e) if e.needs_sign_in() || matches!(e, GitHubError::RateLimited { .. }) => {
                    fatal.get_or_insert(e);
                }
                Err(e) => {
                    tracing::warn!(repo, error = %e, "could not read demand of a repository; counting a floor");
                    out.is_floor = true;
                }
            }
        }
        if let Some(e) = fatal {
            return Err(e);
        }
        out.jobs.sort_by_key(|j| (j.created_at, j.job_id));
        Ok(out)
    }

    async fn repository_demand(&self, owner: &str, repo: &str) -> Result<RepoDemand, GitHubError> {
        let per_page = self.config().per_page;
        let mut cost = Cost::default();
        let mut is_floor = false;
        let full = format!("{owner}/{repo}");
        let now = Instant::now();
        let local = &self.inner.local_runs;
        // The `in_progress` list only while something there may concern us (`local_runs`).
        let read_in_progress = local.in_progress_due(&full, now);
        let statuses: &[&str] = if read_in_progress {
            &["queued", "in_progress"]
        } else {
            &["queued"]
        };
        let mut runs_seen: BTreeMap<u64, SeenRun> = BTreeMap::new();
        for status in statuses {
            let url = self.api_url(&format!(
                "/repos/{owner}/{repo}/actions/runs?status={status}&per_page={per_page}"
            ));
            let runs = self
                .list::<RunsPage>(
                    url,
                    "runs.list",
                    &format!("repository `{owner}/{repo}`"),
                    self.config().max_run_pages,
                )
                .await?;
            cost += runs.cost;
            is_floor |= runs.truncated;
            for r in runs.items {
                let from_fork = r.is_from_fork(&full);
                runs_seen.insert(
                    r.id,
                    SeenRun {
                        updated_at: r.updated_at,
                        in_progress: *status == "in_progress",
                        event: r.event,
                        from_fork,
                    },
                );
            }
        }
        let queued: BTreeSet<u64> = runs_seen
            .iter()
            .filter(|(_, r)| !r.in_progress)
            .map(|(id, _)| *id)
            .collect();
        local.queued_listed(&full, &queued);
        if read_in_progress {
            self.forget_runs(&full, &runs_seen);
            if !is_floor {
                self.settle_assignments(&full, &|run| runs_seen.contains_key(&run));
            }
            let listed: BTreeSet<u64> = runs_seen.keys().copied().collect();
            local.both_listed(&full, &listed, !is_floor, now);
        }
        let mut jobs = Vec::new();
        let mut to_list: Vec<(u64, Option<String>, bool, Option<String>)> = Vec::new();
        for (run_id, run) in runs_seen {
            let SeenRun {
                updated_at,
                in_progress,
                event,
                from_fork,
            } = run;
            if in_progress
                && (self.is_settled(run_id, updated_at.as_deref())
                    || local.accounted_for(run_id, now))
            {
                continue;
            }
            to_list.push((run_id, event, from_fork, updated_at.filter(|_| in_progress)));
        }
        // A run whose job of ours just ended, not in the lists read this poll: listed anyway
        // (free while unchanged) for a job it queues next — on a poll with no new run to list,
        // whose jobs would wait for these requests.
        let watched = local.watched(&full, now, !to_list.is_empty());
        for (run_id, from_fork, event) in watched {
            if !to_list.iter().any(|(id, ..)| *id == run_id) {
                to_list.push((run_id, event, from_fork, None));
            }
        }
        for (run_id, event, from_fork, in_progress_at) in to_list {
            let Some(listing) = self.list_run_jobs(&full, run_id).await? else {
                continue; // The run was deleted between the two calls.
            };
            cost += listing.cost;
            is_floor |= listing.truncated;
            let settled = !listing.truncated
                && listing
                    .items
                    .iter()
                    .all(|j| !NOT_STARTED.contains(&j.status.as_str()));
            self.remember_run(run_id, &full, in_progress_at.filter(|_| settled));
            local.listed(
                run_id,
                &full,
                from_fork,
                event.clone(),
                &listing.items,
                listing.truncated,
            );
            self.note_assignments(&full, &listing.items, from_fork);
            jobs.extend(
                listing
                    .items
                    .into_iter()
                    .filter(|j| j.status == "queued")
                    .map(|j| QueuedJob {
                        owner: owner.to_string(),
                        repo: repo.to_string(),
                        run_id: j.run_id,
                        job_id: j.id,
                        name: j.name.unwrap_or_default(),
                        labels: j.labels,
                        created_at: j.created_at,
                        event: event.clone(),
                        from_fork,
                    }),
            );
        }
        jobs.sort_by_key(|j| (j.created_at, j.job_id));
        Ok(RepoDemand {
            jobs,
            is_floor,
            cost,
        })
    }

    /// The latest jobs of one run of `full` (`owner/repo`); `None` when the run is gone.
    pub(crate) async fn list_run_jobs(
        &self,
        full: &str,
        run_id: u64,
    ) -> Result<Option<crate::client::Listing<JobItem>>, GitHubError> {
        let per_page = self.config().per_page;
        let url = self.api_url(&format!(
            "/repos/{full}/actions/runs/{run_id}/jobs?filter=latest&per_page={per_page}"
        ));
        match self
            .list::<JobsPage>(
                url,
                "jobs.list",
                &format!("jobs of run {run_id}"),
                self.config().max_job_pages,
            )
            .await
        {
            Ok(l) => Ok(Some(l)),
            Err(GitHubError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl GitHubClient {
    fn memo(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, RunMemo>> {
        match self.inner.settled_runs.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn is_settled(&self, run_id: u64, updated_at: Option<&str>) -> bool {
        match (self.memo().get(&run_id), updated_at) {
            (Some(m), Some(u)) => m.updated_at == u,
            _ => false,
        }
    }

    fn remember_run(&self, run_id: u64, repo: &str, settled_at: Option<String>) {
        let mut memo = self.memo();
        match settled_at {
            Some(updated_at) => {
                memo.insert(
                    run_id,
                    RunMemo {
                        repo: repo.to_string(),
                        updated_at,
                    },
                );
            }
            None => {
                memo.remove(&run_id);
            }
        }
    }

    /// Drops memos of this repository's runs that are no longer listed.
    fn forget_runs(&self, repo: &str, listed: &BTreeMap<u64, SeenRun>) {
        self.memo()
            .retain(|id, m| m.repo != repo || listed.contains_key(id));
    }
}

impl QueuedJob {
    /// rm-core's demand input: labels, or the raw text when a label is still
    /// an unexpanded expression.
    pub fn to_job_demand(&self) -> rm_core::JobDemand {
        let labels = if self.labels.iter().any(|l| l.contains("${{")) {
            rm_core::RunsOn::Unresolvable(self.labels.join(", "))
        } else {
            rm_core::RunsOn::Labels(self.labels.clone())
        };
        rm_core::JobDemand {
            job_id: self.job_id,
            run_id: self.run_id,
            repository: format!("{}/{}", self.owner, self.repo),
            name: self.name.clone(),
            queued_at_ms: self.created_at.map(|t| t.timestamp_millis()),
            labels,
            from_fork: self.from_fork,
        }
    }
}

impl Demand {
    /// All jobs as rm-core demand input (pass `is_floor` along to `match_demand`).
    pub fn job_demands(&self) -> Vec<rm_core::JobDemand> {
        self.jobs.iter().map(QueuedJob::to_job_demand).collect()
    }
}
