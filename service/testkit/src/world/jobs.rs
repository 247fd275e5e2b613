//! Workflow runs and jobs, and how a run's status follows its jobs.

use super::*;

impl World {
    pub fn queue_run(&mut self, repo: &str, jobs: Vec<JobSpec>) -> Result<u64, FakeError> {
        if jobs.is_empty() {
            return Err(FakeError::EmptyRun);
        }
        let full = self
            .repo(repo)
            .ok_or_else(|| FakeError::UnknownRepo(repo.to_string()))?
            .full_name();
        let run_id = self.next_run_id;
        self.next_run_id += 1;
        let num = self
            .run_numbers
            .entry(full.to_ascii_lowercase())
            .or_insert(0);
        *num += 1;
        let run_number = *num;
        let now = Utc::now();
        let mut job_ids = Vec::new();
        let from_fork = jobs.iter().any(|j| j.from_fork);
        let pull_request = jobs.iter().any(|j| j.pull_request);
        for spec in jobs {
            let id = self.next_job_id;
            self.next_job_id += 1;
            job_ids.push(id);
            self.jobs.insert(
                id,
                Job {
                    id,
                    run_id,
                    repo: full.clone(),
                    name: spec.name,
                    labels: spec.labels,
                    behaviour: spec.behaviour,
                    duration: spec.duration,
                    memory_mb: spec.memory_mb,
                    memory_children: spec.memory_children,
                    command: spec.command,
                    status: JobStatus::Queued,
                    conclusion: None,
                    created_at: now,
                    started_at: None,
                    completed_at: None,
                    runner_id: None,
                    runner_name: None,
                    runner_group_id: None,
                    assigned_at: None,
                },
            );
        }
        let head_sha = hex::encode(rand::rng().random::<[u8; 20]>());
        self.runs.insert(
            run_id,
            Run {
                id: run_id,
                repo: full,
                run_number,
                name: "CI".to_string(),
                head_sha,
                created_at: now,
                job_ids,
                from_fork,
                pull_request,
            },
        );
        Ok(run_id)
    }

    /// Queues one more job in an existing run, as GitHub does when a job's `needs` are met
    /// (the run, in progress meanwhile, holds a queued job).
    pub fn add_job(&mut self, run_id: u64, spec: JobSpec) -> Result<u64, FakeError> {
        let repo = self
            .runs
            .get(&run_id)
            .ok_or(FakeError::UnknownRun(run_id))?
            .repo
            .clone();
        let id = self.next_job_id;
        self.next_job_id += 1;
        self.jobs.insert(
            id,
            Job {
                id,
                run_id,
                repo,
                name: spec.name,
                labels: spec.labels,
                behaviour: spec.behaviour,
                duration: spec.duration,
                memory_mb: spec.memory_mb,
                memory_children: spec.memory_children,
                command: spec.command,
                status: JobStatus::Queued,
                conclusion: None,
                created_at: Utc::now(),
                started_at: None,
                completed_at: None,
                runner_id: None,
                runner_name: None,
                runner_group_id: None,
                assigned_at: None,
            },
        );
        if let Some(run) = self.runs.get_mut(&run_id) {
            run.job_ids.push(id);
        }
        Ok(id)
    }

    pub fn finish_job(&mut self, job_id: u64, conclusion: Conclusion) {
        if let Some(job) = self.jobs.get_mut(&job_id) {
            let now = Utc::now();
            job.status = JobStatus::Completed;
            job.conclusion = Some(conclusion);
            job.started_at.get_or_insert(now);
            job.completed_at = Some(now);
        }
    }

    pub fn withdraw_assignment(&mut self, job_id: u64) -> Result<(), FakeError> {
        let job = self
            .jobs
            .get_mut(&job_id)
            .ok_or(FakeError::UnknownJob(job_id))?;
        let rid = job.runner_id.ok_or(FakeError::NotAssigned(job_id))?;
        if job.status != JobStatus::InProgress {
            return Err(FakeError::NotAssigned(job_id));
        }
        job.status = JobStatus::Queued;
        job.started_at = None;
        job.runner_id = None;
        job.runner_name = None;
        job.runner_group_id = None;
        job.assigned_at = None;
        if let Some(r) = self.runners.get_mut(&rid) {
            r.busy = false;
            r.job_id = None;
        }
        Ok(())
    }

    /// Run status derived from its jobs (§4): queued until a job starts, in_progress while any
    /// job is unfinished, completed (with the worst conclusion) when all are.
    pub fn run_status(
        &self,
        run: &Run,
    ) -> (
        JobStatus,
        Option<Conclusion>,
        Option<DateTime<Utc>>,
        DateTime<Utc>,
    ) {
        let jobs: Vec<&Job> = run
            .job_ids
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .collect();
        let started = jobs.iter().filter_map(|j| j.started_at).min();
        let updated = jobs
            .iter()
            .flat_map(|j| [Some(j.created_at), j.started_at, j.completed_at])
            .flatten()
            .max()
            .unwrap_or(run.created_at);
        if jobs.iter().all(|j| j.status == JobStatus::Completed) {
            let c = if jobs
                .iter()
                .any(|j| j.conclusion == Some(Conclusion::Failure))
            {
                Conclusion::Failure
            } else if jobs
                .iter()
                .any(|j| j.conclusion == Some(Conclusion::Cancelled))
            {
                Conclusion::Cancelled
            } else {
                Conclusion::Success
            };
            (JobStatus::Completed, Some(c), started, updated)
        } else if jobs.iter().all(|j| j.status == JobStatus::Queued) {
            (JobStatus::Queued, None, None, updated)
        } else {
            (JobStatus::InProgress, None, started, updated)
        }
    }

    pub fn run_view(&self, run: &Run) -> RunView {
        let (status, conclusion, _, _) = self.run_status(run);
        RunView {
            id: run.id,
            repo: run.repo.clone(),
            status,
            conclusion,
            job_ids: run.job_ids.clone(),
            from_fork: run.from_fork,
        }
    }
}
