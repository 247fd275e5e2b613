//! Runner registrations and the broker side of FAKE_PROTOCOL.md (sessions, assignment, completion).

use super::*;

impl World {
    pub fn runner_name_taken(&self, scope: &RunnerScope, name: &str) -> bool {
        self.runners
            .values()
            .any(|r| &r.scope == scope && r.name.eq_ignore_ascii_case(name))
    }

    pub fn register_runner(
        &mut self,
        scope: RunnerScope,
        name: &str,
        group_id: u64,
        custom: &[String],
    ) -> &Runner {
        let id = self.next_runner_id;
        self.next_runner_id += 1;
        let mut labels = Vec::new();
        for (n, ro) in ["self-hosted", "Linux", "X64"]
            .iter()
            .map(|n| (n.to_string(), true))
            .chain(custom.iter().map(|c| (c.clone(), false)))
        {
            if labels
                .iter()
                .any(|l: &Label| l.name.eq_ignore_ascii_case(&n))
            {
                continue;
            }
            let lid = self.next_label_id;
            self.next_label_id += 1;
            labels.push(Label {
                id: lid,
                name: n,
                read_only: ro,
            });
        }
        let runner = Runner {
            id,
            name: name.to_string(),
            scope,
            group_id,
            secret: random_string(40),
            os: "unknown".to_string(),
            online: false,
            busy: false,
            offline_since: None,
            labels,
            job_id: None,
        };
        self.runners.insert(id, runner);
        &self.runners[&id]
    }

    /// Removes a registration (and its sessions).
    pub fn delete_runner(&mut self, id: u64) {
        self.runners.remove(&id);
        self.sessions.retain(|_, s| s.runner_id != id);
    }

    /// Drops sessions that stopped polling; their runners go offline.
    pub fn sweep(&mut self, now: Instant) {
        let timeout = self.session_timeout;
        let stale: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_seen) > timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for k in stale {
            if let Some(s) = self.sessions.remove(&k) {
                if let Some(r) = self.runners.get_mut(&s.runner_id) {
                    r.online = false;
                    r.offline_since.get_or_insert(now);
                }
            }
        }
        // A runner that vanished mid-job: GitHub fails the job once it gives up on the runner
        // and deletes the JIT registration, as after any job.
        let lost = self.lost_job_timeout;
        let gave_up: Vec<(u64, Option<u64>)> = self
            .runners
            .values()
            .filter(|r| r.busy && !r.online)
            .filter(|r| {
                r.offline_since
                    .is_some_and(|t| now.duration_since(t) > lost)
            })
            .map(|r| (r.id, r.job_id))
            .collect();
        for (id, job) in gave_up {
            if let Some(job) = job {
                self.finish_job(job, crate::types::Conclusion::Failure);
            }
            self.delete_runner(id);
        }
    }

    fn runner_by_secret(&self, secret: &str) -> Option<u64> {
        self.runners
            .values()
            .find(|r| !secret.is_empty() && r.secret == secret)
            .map(|r| r.id)
    }

    pub fn broker_create_session(
        &mut self,
        secret: &str,
        runner_id: u64,
        os: Option<&str>,
    ) -> Result<String, BrokerError> {
        self.sweep(Instant::now());
        let Some(rid) = self.runner_by_secret(secret) else {
            return Err(if self.runners.contains_key(&runner_id) {
                BrokerError::Unauthorized
            } else {
                BrokerError::Gone
            });
        };
        if rid != runner_id {
            return Err(BrokerError::Unauthorized);
        }
        if self.sessions.values().any(|s| s.runner_id == rid) {
            return Err(BrokerError::Conflict);
        }
        let sid = format!(
            "{}-{}-{}-{}-{}",
            random_string(8),
            random_string(4),
            random_string(4),
            random_string(4),
            random_string(12)
        )
        .to_ascii_lowercase();
        self.sessions.insert(
            sid.clone(),
            Session {
                runner_id: rid,
                last_seen: Instant::now(),
            },
        );
        if let Some(r) = self.runners.get_mut(&rid) {
            r.online = true;
            r.offline_since = None;
            if let Some(os) = os {
                r.os = os.to_string();
            }
        }
        Ok(sid)
    }

    /// Validates a session and its secret; refreshes `last_seen`.
    fn touch_session(&mut self, secret: &str, session_id: &str) -> Result<u64, BrokerError> {
        let Some(s) = self.sessions.get_mut(session_id) else {
            // Deleted or timed out: the listener must create a new session (404 "Not Found");
            // if its registration is gone it hears that instead.
            return match self.runner_by_secret(secret) {
                Some(_) => Err(BrokerError::NotFound),
                None => Err(BrokerError::Gone),
            };
        };
        let rid = s.runner_id;
        match self.runners.get(&rid) {
            None => Err(BrokerError::Gone),
            Some(r) if r.secret != secret => Err(BrokerError::Unauthorized),
            Some(_) => {
                s.last_seen = Instant::now();
                Ok(rid)
            }
        }
    }

    /// One poll: refreshes the session and hands out a matching queued job if there is one.
    pub fn broker_poll(
        &mut self,
        secret: &str,
        session_id: &str,
    ) -> Result<Option<Assignment>, BrokerError> {
        let rid = self.touch_session(secret, session_id)?;
        Ok(self.try_assign(rid))
    }

    fn try_assign(&mut self, rid: u64) -> Option<Assignment> {
        let runner = self.runners.get(&rid)?;
        if runner.busy || runner.job_id.is_some() || !runner.online {
            return None;
        }
        let job_id = self
            .jobs
            .values()
            .filter(|j| j.status == JobStatus::Queued)
            .find(|j| {
                let scope_ok = match &runner.scope {
                    RunnerScope::Repo(r) => r.eq_ignore_ascii_case(&j.repo),
                    RunnerScope::Org(o) => j
                        .repo
                        .split('/')
                        .next()
                        .is_some_and(|owner| owner.eq_ignore_ascii_case(o)),
                };
                scope_ok
                    && j.labels.iter().all(|l| {
                        runner
                            .labels
                            .iter()
                            .any(|rl| rl.name.eq_ignore_ascii_case(l))
                    })
            })
            .map(|j| j.id)?;
        let (rname, gid) = (runner.name.clone(), runner.group_id);
        let now = Utc::now();
        let job = self.jobs.get_mut(&job_id)?;
        job.status = JobStatus::InProgress;
        job.started_at = Some(now);
        job.runner_id = Some(rid);
        job.runner_name = Some(rname);
        job.runner_group_id = Some(gid);
        job.assigned_at = Some(Instant::now());
        let a = Assignment {
            job_id,
            run_id: job.run_id,
            name: job.name.clone(),
            behaviour: job.behaviour,
            duration: job.duration,
            memory_mb: job.memory_mb,
            memory_children: job.memory_children,
            command: job.command.clone(),
        };
        if let Some(r) = self.runners.get_mut(&rid) {
            r.busy = true;
            r.job_id = Some(job_id);
        }
        Some(a)
    }

    pub fn broker_complete(
        &mut self,
        secret: &str,
        job_id: u64,
        conclusion: Conclusion,
    ) -> Result<(), BrokerError> {
        let job = self.jobs.get(&job_id).ok_or(BrokerError::NotFound)?;
        let rid = job.runner_id.ok_or(BrokerError::NotFound)?;
        match self.runners.get(&rid) {
            Some(r) if r.secret == secret => {}
            Some(_) => return Err(BrokerError::Unauthorized),
            None => return Err(BrokerError::Gone),
        }
        self.finish_job(job_id, conclusion);
        // JIT runners take one job; GitHub deletes the registration afterwards (§3.2).
        self.delete_runner(rid);
        Ok(())
    }

    pub fn broker_delete_session(
        &mut self,
        secret: &str,
        session_id: &str,
    ) -> Result<(), BrokerError> {
        let s = self.sessions.get(session_id).ok_or(BrokerError::NotFound)?;
        match self.runners.get(&s.runner_id) {
            Some(r) if r.secret != secret => return Err(BrokerError::Unauthorized),
            Some(_) => {}
            None => {}
        }
        let rid = s.runner_id;
        self.sessions.remove(session_id);
        if let Some(r) = self.runners.get_mut(&rid) {
            r.online = false;
            r.offline_since.get_or_insert_with(Instant::now);
        }
        Ok(())
    }
}
