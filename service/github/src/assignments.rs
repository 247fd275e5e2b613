//! Which job each runner took, learnt for free from the jobs listings demand already reads.
//!
//! GitHub's job objects carry `runner_name` once a runner is assigned. Demand lists the jobs
//! of every queued or in-progress run that may still hold a queued job, and lists them again
//! when the run changes (a job being taken changes it), so a job our runner took shows up with
//! its runner's name without a single extra request. What is seen is kept here by runner name
//! (sticky: a settled run is not listed again) until the service forgets the runner after
//! cleaning it; the map is bounded so runners of other machines in an organization cannot
//! grow it without limit.

use crate::client::GitHubClient;
use crate::models::JobItem;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Most runner → job entries kept; the oldest go first.
const CAPACITY: usize = 1024;

/// The job a runner took, as the jobs listing showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerJob {
    pub job_id: u64,
    pub run_id: u64,
    /// The job's name (`build`, a matrix leg…).
    pub name: Option<String>,
    /// `owner/repo` the run belongs to.
    pub repository: String,
    pub workflow_name: Option<String>,
    /// The job's page on GitHub.
    pub html_url: Option<String>,
    /// `in_progress` or `completed` (as last seen).
    pub status: String,
    /// Its run comes from a pull request of a fork.
    pub from_fork: bool,
    /// A listing this client read named the runner on this job (GitHub's own word), not the
    /// runner's console nor a pool peer: only then may the job earn trust.
    pub confirmed: bool,
}

#[derive(Default)]
pub(crate) struct RunnerJobs {
    /// runner name → (insertion order, job)
    map: Mutex<HashMap<String, (u64, RunnerJob)>>,
    next: AtomicU64,
    /// Bumped whenever an entry is added or changes.
    version: AtomicU64,
}

impl RunnerJobs {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (u64, RunnerJob)>> {
        match self.map.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn note(&self, runner: &str, job: RunnerJob) {
        let mut map = self.lock();
        if map.get(runner).is_some_and(|(_, old)| *old == job) {
            return;
        }
        let order = self.next.fetch_add(1, Ordering::Relaxed);
        map.insert(runner.to_string(), (order, job));
        while map.len() > CAPACITY {
            let oldest = map
                .iter()
                .min_by_key(|(_, (o, _))| *o)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    map.remove(&k);
                }
                None => break,
            }
        }
        self.version.fetch_add(1, Ordering::Relaxed);
    }
}

impl RunnerJobs {
    /// The jobs of `repo`'s runs that are no longer queued or in progress are over: a job seen
    /// `in_progress` there is marked `completed` (its run left both lists, so its jobs are not
    /// listed again to say so).
    fn settle(&self, repo: &str, listed: &dyn Fn(u64) -> bool) {
        let mut map = self.lock();
        let mut changed = false;
        for (_, job) in map.values_mut() {
            if job.repository == repo && job.status == "in_progress" && !listed(job.run_id) {
                job.status = "completed".to_string();
                changed = true;
            }
        }
        if changed {
            self.version.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl GitHubClient {
    /// `repo`'s runs listed queued or in progress this poll (the whole lists, not cut by a
    /// page cap): jobs of any other run seen running are over.
    pub(crate) fn settle_assignments(&self, repo: &str, listed: &dyn Fn(u64) -> bool) {
        self.inner.runner_jobs.settle(repo, listed);
    }

    /// Whether GitHub's job listings (read by the demand polls anyway, no extra request) show
    /// `runner_name` running a job now.
    pub fn runs_job(&self, runner_name: &str) -> bool {
        self.job_of_runner(runner_name)
            .is_some_and(|j| j.status == "in_progress")
    }

    /// Records the runner of every assigned job in one run's listing (`repo` is `owner/repo`).
    /// `jobs` are one run's; `from_fork`: that run comes from a fork's pull request.
    pub(crate) fn note_assignments(&self, repo: &str, jobs: &[JobItem], from_fork: bool) {
        for j in jobs {
            let Some(runner) = j.runner_name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            if j.status != "in_progress" && j.status != "completed" {
                continue;
            }
            self.inner.local_runs.named(runner, j.run_id, j.id);
            self.inner.runner_jobs.note(
                runner,
                RunnerJob {
                    job_id: j.id,
                    run_id: j.run_id,
                    name: j.name.clone(),
                    repository: repo.to_string(),
                    workflow_name: j.workflow_name.clone(),
                    html_url: j.html_url.clone(),
                    status: j.status.clone(),
                    from_fork,
                    confirmed: true,
                },
            );
        }
    }

    /// `runner`, a runner of ours serving `target` (`labels`, on `os`/`arch`), took a job whose
    /// display name its console gave (`name`; `None` while not written yet). Attributed at once
    /// when the listings already named it, or when exactly one known queued job fits (see
    /// `local_runs`); true when its job is known. No request either way.
    pub fn runner_took_job(
        &self,
        target: &rm_core::Target,
        runner: &str,
        name: Option<&str>,
        labels: &rm_core::LabelSet,
        os: rm_core::Os,
        arch: rm_core::Arch,
    ) -> bool {
        let local = &self.inner.local_runs;
        if let Some(j) = self.job_of_runner(runner) {
            local.busy_with(target, runner, j.run_id, j.job_id);
            return true;
        }
        let Some(taken) = local.took_job(target, runner, name.unwrap_or(""), labels, os, arch)
        else {
            return false;
        };
        let j = taken.job;
        self.inner.runner_jobs.note(
            runner,
            RunnerJob {
                job_id: j.id,
                run_id: taken.run_id,
                name: j.name,
                repository: taken.repo,
                workflow_name: j.workflow_name,
                html_url: j.html_url,
                status: "in_progress".into(),
                from_fork: taken.from_fork,
                confirmed: false,
            },
        );
        tracing::debug!(
            runner,
            job = j.id,
            run = taken.run_id,
            "runner's job known from its console"
        );
        true
    }

    /// `runner`'s job ended (its process is gone). The run it was attributed to is listed once
    /// more (1 request): GitHub's word on which job the runner ran replaces the console's, and
    /// a job the run queued next is seen; the run is then watched briefly for one that comes
    /// late. Without an attribution, or when the listing does not name the runner, the
    /// `in_progress` list is read on the next poll. Errors are left to those polls.
    pub async fn runner_job_over(&self, runner: &str) {
        let local = &self.inner.local_runs;
        let (run, scope) = local.job_over(runner);
        let Some(scope) = scope else {
            return;
        };
        let Some((run_id, (repo, from_fork, _))) =
            run.and_then(|r| local.run_info(r).map(|i| (r, i)))
        else {
            local.read_in_progress_next(&scope);
            return;
        };
        match self.list_run_jobs(&repo, run_id).await {
            Ok(Some(listing)) => {
                let named = listing
                    .items
                    .iter()
                    .any(|j| j.runner_name.as_deref() == Some(runner));
                local.listed(
                    run_id,
                    &repo,
                    from_fork,
                    None,
                    &listing.items,
                    listing.truncated,
                );
                self.note_assignments(&repo, &listing.items, from_fork);
                if !named {
                    local.read_in_progress_next(&scope);
                }
                local.watch(run_id, std::time::Instant::now());
            }
            Ok(None) => local.read_in_progress_next(&scope),
            Err(e) => {
                tracing::debug!(runner, run = run_id, error = %e, "a finished job's run not listed; the next poll reads the lists");
                local.read_in_progress_next(&scope);
            }
        }
    }

    /// Learns `runner`'s job from another host's reading of the listings (a pool's reader
    /// publishes what its polls saw): kept as if this client had read it, so a host that does
    /// not read a pooled target's listings itself still knows what its runners run.
    pub fn learn_runner_job(&self, runner: &str, job: RunnerJob) {
        // A peer's word never widens trust: only this client's own listing confirms a job.
        let confirmed = self
            .job_of_runner(runner)
            .is_some_and(|j| j.confirmed && j.job_id == job.job_id);
        self.inner
            .runner_jobs
            .note(runner, RunnerJob { confirmed, ..job });
    }

    /// The verdict on the job `runner` ran ([`rm_core::TrustVerdict`]), fail-closed: trusted
    /// only when a jobs listing this client read named the runner on a job (GitHub's word, not
    /// the console's nor a pool peer's) and that job's run says where its code comes from (as
    /// the runs list showed it, or read now: one request, when this client never listed it).
    /// Anything not established makes it untrusted.
    pub async fn job_verdict(&self, runner: &str) -> rm_core::TrustVerdict {
        use rm_core::TrustVerdict;
        let Some(job) = self.job_of_runner(runner) else {
            return TrustVerdict::unknown("GitHub's listings never named the job this runner ran");
        };
        let name = job
            .name
            .clone()
            .unwrap_or_else(|| format!("#{}", job.job_id));
        if !job.confirmed {
            // Named by the runner's console or a pool peer only: GitHub's word on that job
            // (one request) confirms it or nothing does.
            let unconfirmed = |why: String| TrustVerdict {
                job_id: Some(job.job_id),
                run_id: Some(job.run_id),
                ..TrustVerdict::unknown(why)
            };
            match self.get_job(&job.repository, job.job_id).await {
                Ok(Some(j))
                    if j.runner_name.as_deref() == Some(runner) && j.run_id == job.run_id => {}
                Ok(_) => {
                    return unconfirmed(format!(
                        "GitHub does not name this runner on job {name}, which its console or a \
                         pool peer named"
                    ))
                }
                Err(e) => {
                    return unconfirmed(format!(
                        "job {name}, which its console or a pool peer named, could not be read \
                         from GitHub: {e}"
                    ))
                }
            }
        }
        let (trust, reason) = match self.inner.local_runs.run_info(job.run_id) {
            Some((repo, from_fork, event)) => {
                let head = (!from_fork).then_some(repo.as_str());
                let (trust, reason) = rm_core::judge_run(&repo, event.as_deref(), head);
                if from_fork {
                    (
                        rm_core::JobTrust::Untrusted,
                        format!(
                            "its run comes from a fork of {repo} or does not say where its code \
                             comes from"
                        ),
                    )
                } else {
                    (trust, reason)
                }
            }
            None => match self.get_run(&job.repository, job.run_id).await {
                Ok(Some(run)) => run.trust(&job.repository),
                Ok(None) => (
                    rm_core::JobTrust::Untrusted,
                    format!("its run {} is not found on GitHub", job.run_id),
                ),
                Err(e) => (
                    rm_core::JobTrust::Untrusted,
                    format!("its run {} could not be read: {e}", job.run_id),
                ),
            },
        };
        TrustVerdict {
            trust,
            job_id: Some(job.job_id),
            run_id: Some(job.run_id),
            reason: format!(
                "job {name} (run {} of {}): {reason}",
                job.run_id, job.repository
            ),
        }
    }

    /// `GET /repos/{full}/actions/jobs/{job_id}`; `None` when it does not exist.
    async fn get_job(
        &self,
        full: &str,
        job_id: u64,
    ) -> Result<Option<crate::models::JobItem>, crate::GitHubError> {
        let url = self.api_url(&format!("/repos/{full}/actions/jobs/{job_id}"));
        match self
            .get_json::<crate::models::JobItem>(&url, "jobs.get", &format!("job {job_id}"))
            .await
        {
            Ok((job, _)) => Ok(Some(job)),
            Err(crate::GitHubError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /repos/{full}/actions/runs/{run_id}`; `None` when it does not exist.
    async fn get_run(
        &self,
        full: &str,
        run_id: u64,
    ) -> Result<Option<crate::models::RunSummary>, crate::GitHubError> {
        let url = self.api_url(&format!("/repos/{full}/actions/runs/{run_id}"));
        match self
            .get_json::<crate::models::RunSummary>(&url, "runs.get", &format!("run {run_id}"))
            .await
        {
            Ok((run, _)) => Ok(Some(run)),
            Err(crate::GitHubError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The job `runner_name` was last seen running (or having run), if a demand poll saw it.
    pub fn job_of_runner(&self, runner_name: &str) -> Option<RunnerJob> {
        self.inner
            .runner_jobs
            .lock()
            .get(runner_name)
            .map(|(_, j)| j.clone())
    }

    /// The runners whose name starts with `prefix` that the listings saw take a job (running
    /// or done): no longer supply for queued jobs.
    pub fn runners_with_jobs(&self, prefix: &str) -> BTreeSet<String> {
        self.inner
            .runner_jobs
            .lock()
            .iter()
            .filter(|(name, (_, job))| {
                name.starts_with(prefix)
                    && (job.status == "in_progress" || job.status == "completed")
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Forgets a runner that is gone (cleaned up).
    pub fn forget_runner_job(&self, runner_name: &str) {
        self.inner.runner_jobs.lock().remove(runner_name);
    }

    /// Changes whenever a runner's job is learnt or changes: a cheap "is there news" check.
    pub fn runner_jobs_version(&self) -> u64 {
        self.inner.runner_jobs.version.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64) -> RunnerJob {
        RunnerJob {
            job_id: id,
            run_id: 1,
            name: Some("build".into()),
            repository: "o/r".into(),
            workflow_name: None,
            html_url: None,
            status: "in_progress".into(),
            from_fork: false,
            confirmed: true,
        }
    }

    #[test]
    fn the_oldest_entries_go_first_and_unchanged_notes_are_not_news() {
        let jobs = RunnerJobs::default();
        for i in 0..(CAPACITY as u64 + 5) {
            jobs.note(&format!("rm-{i}"), job(i));
        }
        let map = jobs.lock();
        assert_eq!(map.len(), CAPACITY);
        assert!(!map.contains_key("rm-0") && !map.contains_key("rm-4"));
        assert!(map.contains_key("rm-5"));
        drop(map);
        let v = jobs.version.load(Ordering::Relaxed);
        jobs.note("rm-7", job(7));
        assert_eq!(jobs.version.load(Ordering::Relaxed), v, "same job: no news");
        jobs.note("rm-7", job(70));
        assert_eq!(jobs.version.load(Ordering::Relaxed), v + 1);
    }

    #[test]
    fn a_job_whose_run_left_the_lists_is_over() {
        let jobs = RunnerJobs::default();
        jobs.note("rm-a", job(1)); // run 1 of o/r
        let mut other = job(2);
        other.run_id = 2;
        jobs.note("rm-b", other.clone());
        let mut elsewhere = job(3);
        elsewhere.repository = "o/x".into();
        jobs.note("rm-c", elsewhere);
        let v = jobs.version.load(Ordering::Relaxed);
        jobs.settle("o/r", &|run| run == 2);
        let status = |n: &str| jobs.lock().get(n).unwrap().1.status.clone();
        assert_eq!(status("rm-a"), "completed");
        assert_eq!(status("rm-b"), "in_progress", "its run is still listed");
        assert_eq!(status("rm-c"), "in_progress", "another repository");
        assert_eq!(jobs.version.load(Ordering::Relaxed), v + 1);
        jobs.settle("o/r", &|run| run == 2);
        assert_eq!(jobs.version.load(Ordering::Relaxed), v + 1, "no news");
    }
}
