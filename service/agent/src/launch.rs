//! Allocation and launch, journal first: reserve (`allocated`) under the host-wide allocation
//! lock, materialize, register (`generate-jitconfig`, sidecar, `jit_received`), spawn
//! (`starting`). A failure concludes the attempt and cleans it.

use crate::clock::Clock;
use crate::events::{EventKind, LaunchFailure, LaunchTimings};
use crate::ids::next_attempt_id;
use crate::ports::{
    ActiveCounts, DeleteOutcome, GhError, GitHubPort, Jit, JournalPort, PoolClaim, RunnerHostPort,
    SpawnFor,
};
use crate::target_loop::{JobsSeen, TargetLoop};
use crate::why::{demand_unread, note_runners};
use rm_core::{
    allocate, job_matches_runner, match_demand_for_runner, Allocation, AllocationInput, Attempt,
    AttemptId, CapacityHold, FailureReason, Outcome, PassStop, PassView, Policy, PolicyDemand,
    PolicyId, PolicyState, RunsOn, Timestamp, WorkspaceMode,
};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Notes each policy's grant in the pass's record.
fn note_grants(view: &mut PassView, allocation: &Allocation) {
    for p in &mut view.policies {
        p.grant = allocation.for_policy(p.policy_id).copied();
    }
}

/// Every job this runner could take already has a runner of the pool coming for it.
fn pool_elsewhere() -> CapacityHold {
    CapacityHold {
        code: "pool_elsewhere".into(),
        message: "Other hosts of the pool are starting runners for the jobs this target's \
                  runners could take."
            .into(),
        fix: "Nothing to do: the job runs on whichever host of the pool has room.".into(),
    }
}

/// The pool's database did not answer: no host starts a runner for pooled jobs.
fn pool_unreachable(detail: &str) -> CapacityHold {
    CapacityHold {
        code: "pool_unreachable".into(),
        message: format!(
            "The pool database is unreachable ({detail}): new runners for pooled jobs wait \
             on every host, so no job gets two (running jobs go on)."
        ),
        fix: "Check that PostgreSQL runs and this host reaches it (`runner-manager pool \
              status`); launching resumes by itself once it answers."
            .into(),
    }
}

/// One reserved attempt on its way to `starting`.
struct Reservation {
    attempt: Attempt,
    policy: Policy,
    started: Timestamp,
    lock_wait: Duration,
    /// A queued job the runner may take comes from a fork (its caches are read-only).
    fork_jobs: bool,
}

impl<J, G, H, C> TargetLoop<J, G, H, C>
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    /// Polls demand, runs the allocator and launches its grants. Returns whether GitHub was
    /// reached and how many runners reached `starting`. `counts` is exact for this loop's
    /// policies; its host-wide total only if `total_known` (else it is read before starting).
    pub(crate) async fn allocate_and_launch(
        &self,
        counts: &ActiveCounts,
        total_known: bool,
    ) -> (bool, u32) {
        let mut view = self.pass_view(None);
        let outcome = self.decide_and_launch(counts, total_known, &mut view).await;
        self.record_pass(view);
        outcome
    }

    /// [`TargetLoop::allocate_and_launch`], noting what it sees and decides in `view`.
    async fn decide_and_launch(
        &self,
        counts: &ActiveCounts,
        total_known: bool,
        view: &mut PassView,
    ) -> (bool, u32) {
        let policies = self.policies();
        let polled: Vec<&Policy> = policies
            .iter()
            .filter(|p| matches!(p.state(), PolicyState::Active | PolicyState::Pending))
            .collect();
        if polled.is_empty() {
            view.stop = Some(PassStop::NothingPolled);
            return (false, 0);
        }
        // A target with pooled policies reads its demand through the pool (one host of the
        // pool asks GitHub); its jobs held by other hosts' runners are not demand here.
        let pool_label = self.ports.github.pool_label();
        let pooled = |p: &Policy| {
            pool_label
                .as_deref()
                .is_some_and(|label| p.labels().contains(label))
        };
        let read = if polled.iter().any(|p| pooled(p)) {
            self.ports.github.pooled_jobs(&self.target).await
        } else {
            self.ports.github.queued_jobs(&self.target).await
        };
        let snapshot = match read {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(gh_target = %self.target, error = %e, "demand could not be read; starting nothing this pass");
                let ids: Vec<_> = polled.iter().map(|p| p.id()).collect();
                self.note_github_refusal(&ids, &e).await;
                view.stop = Some(PassStop::Demand(demand_unread(&e)));
                return (false, 0);
            }
        };
        self.note_jobs(
            view,
            JobsSeen {
                at: self.now(),
                jobs: snapshot.jobs.clone(),
                is_floor: snapshot.is_floor,
            },
        );
        // GitHub answered: a pending policy whose operator wants it becomes active.
        for p in polled
            .iter()
            .filter(|p| p.state() == PolicyState::Pending && p.enabled())
        {
            self.set_policy_state(p.id(), PolicyState::Active).await;
        }
        let policies = self.policies();
        // Refresh the record's policies: some may have become active just now.
        let fresh = self.pass_view(None).policies;
        view.policies = fresh;
        let mut matched: HashMap<_, u32> = HashMap::new();
        for p in policies.iter().filter(|p| p.state() == PolicyState::Active) {
            let count = match_demand_for_runner(
                p.labels(),
                self.config.os,
                self.config.arch,
                &snapshot.jobs,
                snapshot.is_floor,
            );
            self.emit(EventKind::DemandSeen {
                policy: p.id(),
                matched: count.matched,
                unresolvable: u32::try_from(count.unresolvable.len()).unwrap_or(u32::MAX),
                is_floor: count.is_floor,
            });
            matched.insert(p.id(), count.matched);
        }
        // The runners' own diagnostics are the third source: a Worker log means a job started
        // (read only when queued jobs could use the runners that do not show one yet).
        let wanting: Vec<PolicyId> = matched
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(id, _)| *id)
            .collect();
        let jobs = JobKnowledge {
            diagnosed: self
                .jobs_from_diagnostics(counts, &wanting, &snapshot.runners_with_jobs)
                .await,
            listed: snapshot.runners_with_jobs,
        };
        let has_job = jobs.has_job();
        note_runners(view, counts, &has_job, |p| jobs.lagging_names(counts, p));
        // The queued jobs the runners without a job still have to serve: the listings' count,
        // less the jobs the listings have not caught up with (see `JobKnowledge::lagging`).
        let demand_of = |counts: &ActiveCounts, p: &Policy| {
            let listed = matched.get(&p.id()).copied().unwrap_or(0);
            listed.saturating_sub(jobs.lagging(counts, p.id()))
        };
        let allocation_with = |counts: &ActiveCounts, host_capacity: u32| {
            allocate(&AllocationInput {
                host_capacity,
                active_total: counts.total,
                reconciling: !self.draining.load(Ordering::SeqCst),
                // A policy the operator disabled starts nothing even before its state follows.
                policies: policies
                    .iter()
                    .filter(|p| p.enabled())
                    .map(|p| {
                        PolicyDemand::from_policy(
                            p,
                            demand_of(counts, p),
                            counts.of(p.id()),
                            counts.unassigned_of(p.id(), &has_job),
                        )
                    })
                    .collect(),
            })
        };
        // A grant never grows when the host has less room, so when even an unbounded host
        // would start nothing (the idle case: no demand, minimums met) the capacity is not
        // read at all: an idle pass costs one journal round trip less.
        let unbounded = allocation_with(counts, u32::MAX);
        if unbounded.grants.iter().all(|g| g.to_start == 0) {
            note_grants(view, &unbounded);
            return (true, 0);
        }
        let read;
        let counts = if total_known {
            counts
        } else {
            match self.ports.journal.active_counts().await {
                Ok(c) => {
                    read = c;
                    &read
                }
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, error = %e, "active counts unreadable; starting nothing this pass");
                    view.stop = Some(PassStop::Journal {
                        detail: e.to_string(),
                    });
                    return (true, 0);
                }
            }
        };
        note_runners(view, counts, &has_job, |p| jobs.lagging_names(counts, p));
        // The room for the largest grant among the policies that want runners (admission may
        // answer per policy: each runner's own expected size); each start re-reads its own.
        let mut capacity = 0;
        for grant in unbounded.grants.iter().filter(|g| g.to_start > 0) {
            match self.ports.journal.host_capacity_for(grant.policy_id).await {
                Ok(cap) => {
                    capacity = capacity.max(cap);
                    // Read at once, with this policy's own read: another loop's read may
                    // replace the journal's note of it before this pass is over.
                    let hold = self.ports.journal.capacity_hold_for(grant.policy_id);
                    if let Some(p) = view
                        .policies
                        .iter_mut()
                        .find(|p| p.policy_id == grant.policy_id)
                    {
                        p.hold = hold;
                    }
                }
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, error = %e, "capacity unreadable; starting nothing this pass");
                    view.stop = Some(PassStop::Journal {
                        detail: e.to_string(),
                    });
                    return (true, 0);
                }
            }
        }
        view.host_capacity = Some(capacity);
        let allocation = allocation_with(counts, capacity);
        note_grants(view, &allocation);

        let mut reservations = Vec::new();
        let mut fitness = None;
        for grant in allocation.grants.iter().filter(|g| g.to_start > 0) {
            let Some(policy) = policies.iter().find(|p| p.id() == grant.policy_id) else {
                continue;
            };
            // Back-off and host checks (`launch_backoff`): after a failure, one at a time.
            let allowed = self.launch_gate(policy, &mut fitness).await;
            let record = view
                .policies
                .iter_mut()
                .find(|p| p.policy_id == policy.id());
            if let Some(record) = record {
                record.block = (allowed < grant.to_start)
                    .then(|| self.launch_block(policy.id()))
                    .flatten();
            }
            let demand = demand_of(counts, policy);
            let fork_jobs = snapshot.jobs.iter().any(|j| {
                j.from_fork
                    && matches!(&j.labels, RunsOn::Labels(l) if job_matches_runner(policy.labels(), self.config.os, self.config.arch, l))
            });
            // A pooled runner starts only with a claim on one of the jobs it could take.
            let candidates = pooled(policy).then(|| {
                let mut ids: Vec<u64> = snapshot
                    .jobs
                    .iter()
                    .filter(|j| {
                        matches!(&j.labels, RunsOn::Labels(l) if job_matches_runner(policy.labels(), self.config.os, self.config.arch, l))
                    })
                    .map(|j| j.job_id)
                    .collect();
                ids.sort_unstable();
                ids
            });
            for _ in 0..grant.to_start.min(allowed) {
                match self
                    .reserve(policy, demand, &has_job, fork_jobs, candidates.as_deref())
                    .await
                {
                    Ok(r) => reservations.push(r),
                    Err(Some(pool_hold)) => {
                        if let Some(p) = view
                            .policies
                            .iter_mut()
                            .find(|p| p.policy_id == policy.id())
                        {
                            p.hold = Some(pool_hold);
                        }
                        break;
                    }
                    Err(None) => {
                        // The room went while the lock was awaited: say what held it.
                        let hold = self.ports.journal.capacity_hold_for(policy.id());
                        if let Some(p) = view
                            .policies
                            .iter_mut()
                            .find(|p| p.policy_id == policy.id())
                        {
                            p.hold = hold.or(p.hold.take());
                        }
                        break;
                    }
                }
            }
        }
        let names: Vec<(PolicyId, String)> = reservations
            .iter()
            .map(|r| (r.policy.id(), r.attempt.id().runner_name()))
            .collect();
        let results =
            futures_util::future::join_all(reservations.into_iter().map(|r| self.launch(r))).await;
        for ((policy, name), _) in names.into_iter().zip(&results).filter(|(_, ok)| **ok) {
            if let Some(p) = view.policies.iter_mut().find(|p| p.policy_id == policy) {
                p.started.push(name.clone());
            }
            // It holds one of the host's slots from now on.
            view.host_runners.push(name);
        }
        let launched = results.into_iter().filter(|ok| *ok).count();
        (true, u32::try_from(launched).unwrap_or(u32::MAX))
    }

    /// The unassigned runners of `policies` that the listings do not show with a job but whose
    /// diagnostics show one started (a `_diag/Worker_*.log`). One directory read per such
    /// runner, and only while queued jobs wait.
    async fn jobs_from_diagnostics(
        &self,
        counts: &ActiveCounts,
        policies: &[PolicyId],
        listed: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for policy in policies {
            let Some(names) = counts.unassigned.get(policy) else {
                continue;
            };
            for name in names.iter().filter(|n| !listed.contains(*n)) {
                let Some(id) = AttemptId::from_runner_name(name) else {
                    continue;
                };
                let runtime = self.ports.host.runtime_dir(&id);
                if self.ports.host.evidence(&runtime).await.job_ran() {
                    found.insert(name.clone());
                }
            }
        }
        found
    }

    /// Step 1: under the host-wide lock, re-read the headroom and, if the policy still gets a
    /// runner (and, for a pooled policy, the pool gives it a claim on one of `pool_jobs`),
    /// journal the attempt `allocated` before any effect. `Err(Some(hold))`: the pool held it.
    async fn reserve(
        &self,
        policy: &Policy,
        demand: u32,
        has_job: &BTreeSet<String>,
        fork_jobs: bool,
        pool_jobs: Option<&[u64]>,
    ) -> Result<Reservation, Option<CapacityHold>> {
        let started = self.now();
        let _guard = self.shared.allocation_lock.lock().await;
        let lock_wait = self.now().duration_since(started);
        let journal = &self.ports.journal;
        let (counts, capacity) = match (
            journal.active_counts().await,
            journal.host_capacity_for(policy.id()).await,
        ) {
            (Ok(c), Ok(cap)) => (c, cap),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(gh_target = %self.target, error = %e, "headroom unreadable; not starting");
                return Err(None);
            }
        };
        let grant = allocate(&AllocationInput {
            host_capacity: capacity,
            active_total: counts.total,
            reconciling: !self.draining.load(Ordering::SeqCst),
            policies: vec![PolicyDemand::from_policy(
                policy,
                demand,
                counts.of(policy.id()),
                counts.unassigned_of(policy.id(), has_job),
            )],
        });
        if grant.total() == 0 {
            return Err(None);
        }
        let now = self.now();
        let id = next_attempt_id(now).ok_or(None)?;
        let runner_name = id.runner_name();
        if let Some(jobs) = pool_jobs {
            match self
                .ports
                .github
                .pool_claim(&self.target, &runner_name, jobs)
                .await
            {
                PoolClaim::NotPooled => {}
                PoolClaim::Claimed { job_id } => {
                    tracing::debug!(gh_target = %self.target, runner = %runner_name, job_id, "pool claim");
                }
                PoolClaim::NoneLeft => return Err(Some(pool_elsewhere())),
                PoolClaim::Unavailable { detail } => {
                    return Err(Some(pool_unreachable(&detail)));
                }
            }
        }
        let attempt = Attempt::allocate(id, policy.id(), now);
        // From here on this loop's policies may own an attempt: the next pass reads them.
        self.note_quiet(&[], false);
        if let Err(e) = journal.insert_attempt(&attempt).await {
            tracing::warn!(gh_target = %self.target, error = %e, "attempt not reserved");
            if pool_jobs.is_some() {
                // No runner will use the claim: its job needs another.
                self.ports
                    .github
                    .pool_finish(&self.target, &runner_name, false)
                    .await;
            }
            return Err(None);
        }
        crate::failpoint!("after_reserve");
        self.emit(EventKind::Reserved {
            attempt: attempt.id().clone(),
            policy: policy.id(),
        });
        Ok(Reservation {
            attempt,
            policy: policy.clone(),
            started,
            lock_wait,
            fork_jobs,
        })
    }

    /// Steps 2–5. Returns whether the runner reached `starting`.
    async fn launch(&self, r: Reservation) -> bool {
        let Reservation {
            mut attempt,
            policy,
            started,
            lock_wait,
            fork_jobs,
        } = r;
        let host = &self.ports.host;

        // 2. Materialize, within the host's preparation slots.
        let t = self.now();
        let materialized = match self.shared.preparations.acquire().await {
            Ok(_permit) => host.materialize(attempt.id()).await,
            Err(_) => return false,
        };
        let runtime = match materialized {
            Ok(path) => path,
            Err(e) => {
                let failure = LaunchFailure::Materialize {
                    detail: e.to_string(),
                };
                self.fail(attempt, FailureReason::PackageUnverified, failure, false)
                    .await;
                return false;
            }
        };
        crate::failpoint!("after_materialize");
        // A persistent target's runner keeps its work folder in a slot, registered as its
        // work folder; a runner that may take a fork's job starts from an empty one.
        let work_folder = if policy.workspace_mode() == WorkspaceMode::Persistent && !fork_jobs {
            match host.claim_workspace(attempt.id(), policy.id()).await {
                Ok(folder) => folder,
                // A job in an empty work folder is slower, not wrong: it still runs.
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "the runner starts without its persistent workspace");
                    None
                }
            }
        } else {
            None
        };
        let materialize = self.now().duration_since(t);

        // 3. Register: JIT, sidecar, then journal `jit_received`.
        let t = self.now();
        let jit = match self
            .request_jit(&attempt, &policy, work_folder.as_deref())
            .await
        {
            Ok(jit) => jit,
            Err((reason, failure)) => {
                self.fail(attempt, reason, failure, false).await;
                return false;
            }
        };
        let Jit { runner_id, config } = jit;
        crate::failpoint!("after_jit");
        if let Err(e) = host.write_sidecar(attempt.id(), runner_id).await {
            // The journal write below still records the id; only a crash in between would need
            // GitHub's inventory to find it.
            tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "runner id sidecar not written");
        }
        crate::failpoint!("after_sidecar");
        let before = attempt.clone();
        if attempt.record_jit(runner_id, self.now()).is_err() {
            return false;
        }
        if let Err(e) = self.ports.journal.update_attempt(&before, &attempt).await {
            // Journal first: never spawn what the journal does not know. Remove the
            // registration; supervision concludes the `allocated` attempt.
            drop(config);
            let _ = self
                .ports
                .github
                .delete_runner(&self.target, runner_id)
                .await;
            // The sidecar has the id: the next pass records it and concludes `jit_expired`.
            let failure = LaunchFailure::Journal {
                detail: e.to_string(),
            };
            self.launch_failed(&attempt, FailureReason::JitExpired, failure)
                .await;
            return false;
        }
        self.state_changed(&before, &attempt);
        let register = self.now().duration_since(t);

        // 4. Spawn with the secret, then journal `starting`.
        let t = self.now();
        let spawn_for = SpawnFor {
            policy: policy.id(),
            target: self.target.clone(),
            fork_jobs,
        };
        let process = match host.spawn(&runtime, config, &spawn_for).await {
            Ok(p) => p,
            Err(e) => {
                let failure = LaunchFailure::Spawn {
                    detail: e.to_string(),
                };
                // Deregister first; if GitHub cannot be reached the attempt stays
                // `jit_received` and supervision concludes it (jit_expired) and deregisters.
                match self
                    .ports
                    .github
                    .delete_runner(&self.target, runner_id)
                    .await
                {
                    Ok(outcome) => {
                        let deleted = outcome == DeleteOutcome::Deleted;
                        self.fail(attempt, FailureReason::ProcessStartFailed, failure, deleted)
                            .await
                    }
                    Err(_) => {
                        let reason = FailureReason::ProcessStartFailed;
                        self.launch_failed(&attempt, reason, failure).await
                    }
                }
                return false;
            }
        };
        crate::failpoint!("after_spawn");
        let before = attempt.clone();
        if attempt.record_started(process, self.now()).is_ok() {
            match self.ports.journal.update_attempt(&before, &attempt).await {
                Ok(()) => {
                    crate::failpoint!("after_starting_journalled");
                    self.state_changed(&before, &attempt)
                }
                // Recovery finds the process by its runtime directory and journals it.
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "`starting` not journalled")
                }
            }
        }
        let spawn = self.now().duration_since(t);

        // 5. Timings.
        let timings = LaunchTimings {
            lock_wait,
            materialize,
            register,
            spawn,
            total: self.now().duration_since(started),
        };
        let slow = timings.total > self.config.slow_launch;
        if slow {
            tracing::warn!(
                gh_target = %self.target, attempt = %attempt.id(),
                total_ms = timings.total.as_millis() as u64,
                "slow launch: the runner took longer than expected to start"
            );
        }
        self.emit(EventKind::Launched {
            attempt: attempt.id().clone(),
            policy: policy.id(),
            runner_id,
            timings,
            slow,
            fork_jobs,
        });
        true
    }

    /// `generate-jitconfig` with bounded retries for transient failures; a retry happens only
    /// while the demand that justified the launch remains. A refusal is never retried.
    async fn request_jit(
        &self,
        attempt: &Attempt,
        policy: &Policy,
        work_folder: Option<&std::path::Path>,
    ) -> Result<Jit, (FailureReason, LaunchFailure)> {
        let retry = self.config.jit_retry;
        let github = &self.ports.github;
        let mut try_number = 0u32;
        loop {
            try_number += 1;
            let err = match github
                .generate_jit(
                    &self.target,
                    attempt.runner_name(),
                    policy.labels(),
                    work_folder,
                )
                .await
            {
                Ok(jit) => return Ok(jit),
                Err(e) => e,
            };
            match &err {
                GhError::Conflict { .. } => {
                    // Our own name is taken: an earlier try got through although its answer
                    // was lost. Its secret is gone, so remove it and register again.
                    if let Ok(Some(view)) = github
                        .runner_by_name(&self.target, attempt.runner_name())
                        .await
                    {
                        let _ = github.delete_runner(&self.target, view.id).await;
                    }
                }
                e if e.is_transient() => {}
                refusal => {
                    self.note_github_refusal(&[policy.id()], refusal).await;
                    let own_state = matches!(
                        refusal,
                        GhError::Unauthorized
                            | GhError::Forbidden { .. }
                            | GhError::NotFound { .. }
                    );
                    return Err((
                        FailureReason::JitRequestFailed,
                        LaunchFailure::Refused {
                            detail: refusal.to_string(),
                            own_state,
                        },
                    ));
                }
            }
            let exhausted = || {
                (
                    FailureReason::JitRequestFailed,
                    LaunchFailure::RetriesExhausted {
                        tries: try_number,
                        detail: err.to_string(),
                        github_unavailable: err.is_transient(),
                    },
                )
            };
            if try_number >= retry.tries {
                return Err(exhausted());
            }
            let mut delay = retry.delay_after(try_number);
            if let GhError::RateLimited { until } = &err {
                let wait = until.duration_since(self.now());
                if wait > retry.max_delay {
                    return Err(exhausted());
                }
                delay = delay.max(wait);
            }
            self.emit(EventKind::LaunchRetry {
                attempt: attempt.id().clone(),
                try_number,
                delay,
                detail: err.to_string(),
            });
            self.ports.clock.sleep(delay).await;
            if !self.demand_remains(policy).await {
                return Err((
                    FailureReason::LaunchInterrupted,
                    LaunchFailure::DemandGone { tries: try_number },
                ));
            }
        }
    }

    /// Whether the queued jobs (or the warm minimum) still need the runner being launched:
    /// more than the policy's other runners without a job can serve. An unreadable demand
    /// counts as remaining: the retries are bounded anyway.
    async fn demand_remains(&self, policy: &Policy) -> bool {
        let Ok(snapshot) = self.ports.github.queued_jobs(&self.target).await else {
            return true;
        };
        let Ok(counts) = self.ports.journal.active_counts().await else {
            return true;
        };
        let matched = match_demand_for_runner(
            policy.labels(),
            self.config.os,
            self.config.arch,
            &snapshot.jobs,
            snapshot.is_floor,
        )
        .matched;
        let jobs = JobKnowledge {
            listed: snapshot.runners_with_jobs,
            diagnosed: BTreeSet::new(),
        };
        let max = policy.max_capacity().unwrap_or(0);
        let queued = matched.saturating_sub(jobs.lagging(&counts, policy.id()));
        let wanted = queued.max(policy.min_capacity().min(max));
        // The launch being retried is one of the unassigned (it is `allocated`).
        let others = counts
            .unassigned_of(policy.id(), &jobs.has_job())
            .saturating_sub(1);
        others < wanted
    }

    /// Concludes a launch that did not reach `starting` and cleans its runtime directory.
    async fn fail(
        &self,
        mut attempt: Attempt,
        reason: FailureReason,
        failure: LaunchFailure,
        deregistered: bool,
    ) {
        let before = attempt.clone();
        let concluded = attempt
            .conclude(Outcome::Failed(reason), self.now())
            .is_ok()
            && self
                .ports
                .journal
                .update_attempt(&before, &attempt)
                .await
                .is_ok();
        self.launch_failed(&attempt, reason, failure).await;
        if concluded {
            self.state_changed(&before, &attempt);
            self.emit(EventKind::Concluded {
                attempt: attempt.id().clone(),
                outcome: Outcome::Failed(reason),
                exit: None,
                deregistered,
                replace: Outcome::Failed(reason).wants_replacement(),
            });
            self.clean(&mut attempt).await;
        }
    }
}

/// Which of our runners took a job, by source, for one pass. GitHub's job listings were read
/// with the demand count, so the two agree; the journal's `busy` (from the runner inventory)
/// and the runners' own diagnostics can be ahead of the listings. A runner that took a job is
/// no supply for a queued one, whoever says so first; but while the listings do not show its
/// job taken, that job is most likely still in the queued count, so it is taken off the
/// demand as well. Otherwise the pass would start a runner for a job already being run: a
/// surplus runner that idles until its timeout.
struct JobKnowledge {
    /// Runners the job listings show with a job (running or done).
    listed: BTreeSet<String>,
    /// Runners whose diagnostics show a job started.
    diagnosed: BTreeSet<String>,
}

impl JobKnowledge {
    /// Every runner known to have taken a job.
    fn has_job(&self) -> BTreeSet<String> {
        self.listed.union(&self.diagnosed).cloned().collect()
    }

    /// The policy's runners that took a job by the journal's or their diagnostics' word but
    /// not (yet) by the listings'.
    fn lagging(&self, counts: &ActiveCounts, policy: PolicyId) -> u32 {
        u32::try_from(self.lagging_names(counts, policy).len()).unwrap_or(u32::MAX)
    }

    /// The runners [`JobKnowledge::lagging`] counts.
    fn lagging_names(&self, counts: &ActiveCounts, policy: PolicyId) -> Vec<String> {
        let busy = counts.busy.get(&policy).into_iter().flatten();
        let diagnosed = counts
            .unassigned
            .get(&policy)
            .into_iter()
            .flatten()
            .filter(|n| self.diagnosed.contains(*n));
        busy.chain(diagnosed)
            .filter(|n| !self.listed.contains(*n))
            .cloned()
            .collect()
    }
}
