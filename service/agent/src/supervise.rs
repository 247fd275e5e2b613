//! Supervision: on every pass, each uncleaned attempt of this target's known policies is
//! observed (process, GitHub's inventory, the runner's diagnostics) and `rm_core::decide` says
//! what to do (live runners within their timeouts may wait, see below). Startup recovery is the
//! same code with `startup = true`.
//!
//! GitHub's inventory is listed only on passes that need it (`github_look_due`): a runner that
//! is alive and within its timeouts decides nothing destructive, so it is left undecided until
//! its journalled view is older than `AgentConfig::inventory_refresh`. Each listing that changed
//! since the last one is a charged request, and a JIT runner's entry changes up to four times.
//! A runner GitHub's job listings show running a job (`GitHubPort::runs_job`, read by the
//! demand polls anyway) is busy by GitHub's word: it is journalled `busy` without a listing,
//! and no refresh or timeout asks about it until its process ends or the listings say the job
//! is over.
//!
//! GitHub's view: a runner counts as registered for the decision only while GitHub shows it
//! `online` (or busy); a JIT runner is listed `offline` from `generate-jitconfig` on, before its
//! listener connects, and treating that as registered would defeat the registration timeout.
//! Deregistration, however, happens whenever GitHub lists the runner at all, so no
//! registration is left behind and no DELETE is sent for a runner GitHub no longer lists.

use crate::clock::Clock;
use crate::events::{EventKind, RecoveredFrom};
use crate::ports::{
    DeleteOutcome, GitHubPort, JournalPort, RunnerHostPort, RunnerStatus, RunnerView, ScrubError,
};
use crate::target_loop::{locked, CleanupBackoff, TargetLoop};
use rm_core::{
    decide, Attempt, AttemptId, AttemptState, Decision, Evidence, GitHubView, JobTrust,
    Observation, Outcome, ProcessIdentity,
};
use std::collections::HashMap;
use std::time::Duration;

/// GitHub's runner inventory by name; `None` when it could not be read this pass.
type Inventory = Option<HashMap<String, RunnerView>>;

/// Decisions carried out for one attempt in one pass, at most: enough for
/// terminate → conclude → clean, and bounded so a misbehaving port cannot spin the loop.
const MAX_STEPS: usize = 6;

/// One observation plus what the caller needs to carry out the decision.
struct Seen {
    obs: Observation,
    /// A process found by its runtime directory (an attempt without a journalled process).
    found: Option<ProcessIdentity>,
    /// The runner as GitHub lists it, whatever its status.
    listed: Option<RunnerView>,
}

enum Step {
    Again,
    Done,
}

impl<J, G, H, C> TargetLoop<J, G, H, C>
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    /// Supervises every uncleaned attempt of this target's policies. Attempts of policies the
    /// journal does not know are not touched (no ownership proof); they still count against
    /// capacity through the journal's counts. Returns whether GitHub was reached.
    pub(crate) async fn supervise_all(&self, startup: bool) -> bool {
        self.retry_refused_removals().await;
        let own = self.policy_ids();
        if own.is_empty() {
            self.confirm_removals_if_due(true).await;
            return false;
        }
        if !startup && self.known_quiet(&own) {
            self.confirm_removals_if_due(true).await;
            return false;
        }
        let attempts = match self.ports.journal.uncleaned_attempts_of(&own).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(gh_target = %self.target, error = %e, "attempts unreadable; supervision skipped this pass");
                return false;
            }
        };
        self.confirm_removals_if_due(!attempts.iter().any(|a| own.contains(&a.policy_id())))
            .await;
        self.note_quiet(&own, !attempts.iter().any(|a| own.contains(&a.policy_id())));
        let mine: Vec<Attempt> = attempts
            .into_iter()
            .filter(|a| own.contains(&a.policy_id()) && !a.is_cleaned())
            .filter(|a| !a.needs_cleaning() || self.cleanup_due(a.id()))
            .collect();
        if mine.is_empty() {
            return false;
        }
        // GitHub's view matters for every attempt not yet concluded, and for a concluded one
        // whose process may still run (never killed while GitHub is unreachable). Concluded
        // attempts without a process only need their directory removed: no API call for them.
        let needs_github = mine
            .iter()
            .any(|a| !a.is_terminal() || a.process().is_some());
        // Even then, a pass whose every attempt is alive and within its timeouts decides
        // nothing that needs GitHub (no conclusion, no termination): the inventory is only
        // read again once it is stale (see `AgentConfig::inventory_refresh`).
        let look = needs_github && (startup || self.github_look_due(&mine).await);
        let (mut inventory, reached) = if !look {
            // No listing, but GitHub's job listings may say a starting or idle runner took a
            // job: that is GitHub's word it is busy, journalled without asking again.
            let busy = mine
                .iter()
                .filter(|a| self.seen_taking_a_job(a))
                .map(|a| {
                    let view = RunnerView {
                        id: a.runner_id().unwrap_or_default(),
                        name: a.runner_name().to_string(),
                        busy: true,
                        status: RunnerStatus::Online,
                    };
                    (view.name.clone(), view)
                })
                .collect();
            (Some(busy), false)
        } else {
            match self.ports.github.runners(&self.target).await {
                Ok(list) => {
                    *locked(&self.inventory_read_at) = Some(self.now());
                    let listed = list.into_iter().map(|v| (v.name.clone(), v)).collect();
                    self.confirm_removals(&listed).await;
                    (Some(listed), true)
                }
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, error = %e, "runner inventory unreadable; nothing destructive this pass");
                    self.note_github_refusal(&own, &e).await;
                    (None, false)
                }
            }
        };
        for attempt in mine {
            // Without a look, only attempts whose decision cannot depend on GitHub are
            // supervised: concluded ones whose process is gone (they are cleaned), and runners
            // that took a job by GitHub's listings or their own diagnostics (journalled busy).
            if !look
                && !attempt.is_terminal()
                && !self.seen_taking_a_job(&attempt)
                && !self.worker_started(&attempt).await
                && !self.finished_its_job(&attempt).await
            {
                self.report_job_taken(&attempt).await;
                continue;
            }
            self.supervise_one(attempt, &mut inventory, startup, look)
                .await;
        }
        reached
    }

    /// Whether this pass must read GitHub's runner inventory: some attempt's decision needs
    /// GitHub's view now (not yet started, process dead, a terminate intent, a registration or
    /// idle timeout due, or a concluded attempt whose process still runs), or a live runner's
    /// view is stale: neither read nor changed state for [`AgentConfig::inventory_refresh`].
    /// Processes are inspected here, before the inventory is read; `observe` inspects them
    /// again.
    ///
    /// [`AgentConfig::inventory_refresh`]: crate::AgentConfig::inventory_refresh
    async fn github_look_due(&self, attempts: &[Attempt]) -> bool {
        let now = self.now();
        let refresh = self.config.effective_inventory_refresh();
        let read_at = *locked(&self.inventory_read_at);
        for a in attempts {
            if a.is_terminal() && a.process().is_none() {
                continue;
            }
            if !a.is_terminal() {
                if !a.state().has_process() || a.terminate_intent().is_some() {
                    return true; // allocated / jit_received (R6–R9), or R11 / R23
                }
                // GitHub's job listings say it runs a job: no timeout applies to a busy runner
                // and nothing about it is stale; only its process ending needs a look.
                if self.ports.github.runs_job(a.runner_name()) {
                    if let Some(process) = a.process() {
                        if matches!(self.ports.host.inspect(process).await, Ok(false))
                            && !self.finished_its_job(a).await
                        {
                            return true;
                        }
                    }
                    continue;
                }
                let timeout = match a.state() {
                    AttemptState::Starting => self.config.timeouts.registration,
                    AttemptState::Idle => self.config.timeouts.idle,
                    _ => Duration::MAX,
                };
                if a.time_in_state(now) >= timeout {
                    return true; // R12–R15 with a timeout due
                }
                let seen = read_at.map_or(a.state_changed_at(), |r| r.max(a.state_changed_at()));
                // A clock that stepped back counts as stale.
                if seen > now || now.has_elapsed(seen, refresh) {
                    return true;
                }
            }
            let Some(process) = a.process() else {
                return true;
            };
            // Not inspectable: `observe` skips the attempt this pass, a look would not help.
            let Ok(alive) = self.ports.host.inspect(process).await else {
                continue;
            };
            // A listener that said its job completed and exited 0 is concluded on its own
            // word (R21); its registration is confirmed gone by a later read.
            if !alive && self.finished_its_job(a).await {
                continue;
            }
            // A live process of a concluded attempt is only stopped while GitHub answers; a
            // dead one of a live attempt is concluded on GitHub's view.
            if alive == a.is_terminal() {
                return true;
            }
        }
        false
    }

    /// A live `starting`/`idle` attempt (no stop asked) whose runner's diagnostics show its
    /// worker started: a job is running there, whatever GitHub says yet (`rm_core` R11a).
    async fn worker_started(&self, a: &Attempt) -> bool {
        matches!(a.state(), AttemptState::Starting | AttemptState::Idle)
            && a.process().is_some()
            && a.terminate_intent().is_none()
            && self
                .ports
                .host
                .evidence(&self.ports.host.runtime_dir(a.id()))
                .await
                .job_ran()
    }

    /// A live attempt whose listener reported its job completed ("Job … completed with
    /// result") and exited 0, as the service saw it exit: GitHub removes such a JIT runner's
    /// registration itself (GITHUB.md §6.3), so concluding it needs no look at the inventory.
    async fn finished_its_job(&self, a: &Attempt) -> bool {
        let Some(process) = a.process() else {
            return false;
        };
        if a.is_terminal() || !a.state().has_process() {
            return false;
        }
        if !matches!(self.ports.host.inspect(process).await, Ok(false)) {
            return false;
        }
        if !self
            .ports
            .host
            .exit_of(process)
            .await
            .is_some_and(|e| e.is_clean())
        {
            return false;
        }
        self.ports
            .host
            .evidence(&self.ports.host.runtime_dir(a.id()))
            .await
            == Evidence::JobCompleted
    }

    /// A live busy runner's job, reported once to the GitHub port with the name its console
    /// gave (retried on later passes while the name is not written yet).
    async fn report_job_taken(&self, a: &Attempt) {
        if a.state() != AttemptState::Busy || a.process().is_none() {
            return;
        }
        self.report_job_taken_even_if_dead(a).await;
    }

    /// Decides, once the runner's job is over, how far that job is trusted (from its own run,
    /// by GitHub's word) and journals the verdict with the attempt: the clean-up reads it from
    /// there, so a restart in between judges what the runner left the same way. A verdict that
    /// cannot be journalled is not kept anywhere else: the clean-up then finds none, which
    /// counts as no trust.
    async fn judge_job(&self, a: &Attempt) {
        let runtime = self.ports.host.runtime_dir(a.id());
        if !self.ports.host.needs_verdict(&runtime).await {
            // Nothing it could leave behind changed: no request. The clean-up, finding no
            // verdict, still removes nothing but what changed after this look.
            return;
        }
        let verdict = self.ports.github.job_verdict(a.runner_name()).await;
        if let Err(e) = self.ports.journal.put_trust(a.id(), &verdict).await {
            tracing::warn!(gh_target = %self.target, attempt = %a.id(), error = %e, "the job's verdict could not be journalled; what its runner left is not trusted");
        }
        self.emit(EventKind::JobJudged {
            attempt: a.id().clone(),
            verdict,
        });
    }

    async fn report_job_taken_even_if_dead(&self, a: &Attempt) {
        if locked(&self.jobs_reported).contains(a.id()) {
            return;
        }
        let of_policy = |list: &[rm_core::Policy]| {
            list.iter()
                .find(|p| p.id() == a.policy_id())
                .map(|p| p.labels().clone())
        };
        let known_policy = of_policy(&locked(&self.policies));
        let Some(labels) = known_policy.or_else(|| of_policy(&locked(&self.vanished))) else {
            return;
        };
        let name = self
            .ports
            .host
            .job_name(&self.ports.host.runtime_dir(a.id()))
            .await;
        let known = self.ports.github.runner_took_job(
            &self.target,
            a.runner_name(),
            name.as_deref(),
            &labels,
            self.config.os,
            self.config.arch,
        );
        if known || name.is_some() {
            locked(&self.jobs_reported).insert(a.id().clone());
        }
    }

    /// A live `starting`/`idle` attempt (no stop asked) whose runner GitHub's job listings show
    /// running a job: it is busy by GitHub's word, to be journalled so without a listing.
    fn seen_taking_a_job(&self, a: &Attempt) -> bool {
        matches!(a.state(), AttemptState::Starting | AttemptState::Idle)
            && a.process().is_some()
            && a.terminate_intent().is_none()
            && self.ports.github.runs_job(a.runner_name())
    }

    /// `looked`: the inventory was read this pass (else a runner it does not list is only
    /// presumed gone, and confirmed later: see `unconfirmed_removals`).
    async fn supervise_one(
        &self,
        mut attempt: Attempt,
        inventory: &mut Inventory,
        startup: bool,
        looked: bool,
    ) {
        let mut alive_seen = false;
        for _ in 0..MAX_STEPS {
            if attempt.needs_cleaning() && !self.cleanup_due(attempt.id()) {
                break;
            }
            if attempt.state() == AttemptState::Allocated
                && !self.close_registration_gap(&mut attempt, inventory).await
            {
                break;
            }
            let Some(seen) = self.observe(&attempt, inventory).await else {
                break;
            };
            alive_seen |= seen.obs.process_alive;
            let decision = decide(&attempt, &seen.obs, &self.config.timeouts);
            tracing::debug!(gh_target = %self.target, attempt = %attempt.id(), state = %attempt.state(), ?decision, "supervision decision");
            let step = match decision {
                Decision::Nothing | Decision::Wait | Decision::Defer => Step::Done,
                Decision::Adopt => self.adopt(&mut attempt, seen.found).await,
                Decision::Observe(observed) => {
                    let before = attempt.clone();
                    match attempt.observe(observed, seen.obs.now) {
                        Ok(()) if self.write(&before, &attempt).await => Step::Again,
                        _ => Step::Done,
                    }
                }
                Decision::Terminate { reason } => {
                    let before = attempt.clone();
                    if attempt.record_terminate_intent(reason).is_err()
                        || (before != attempt && !self.write(&before, &attempt).await)
                    {
                        Step::Done
                    } else {
                        self.emit(EventKind::TerminateRequested {
                            attempt: attempt.id().clone(),
                            reason,
                        });
                        self.stop_process(&attempt).await
                    }
                }
                Decision::Conclude(conclusion) => {
                    let presumed_gone = !looked && seen.listed.is_none();
                    if attempt.state() == AttemptState::Busy || seen.obs.evidence.job_ran() {
                        // Which job it ran, by GitHub's word, before the conclusion is
                        // announced (the fork guard and the failure notice read it).
                        self.report_job_taken_even_if_dead(&attempt).await;
                        self.ports
                            .github
                            .runner_job_over(attempt.runner_name())
                            .await;
                        self.judge_job(&attempt).await;
                    }
                    let Some(deregistered) =
                        self.deregister(&attempt, seen.listed, inventory).await
                    else {
                        break;
                    };
                    crate::failpoint!("after_deregister");
                    let before = attempt.clone();
                    if conclusion.apply(&mut attempt, seen.obs.now).is_err()
                        || !self.write(&before, &attempt).await
                    {
                        break;
                    }
                    crate::failpoint!("after_conclude");
                    if presumed_gone {
                        if let Some(id) = attempt.runner_id() {
                            self.confirm_removal_later(attempt.id(), attempt.runner_name(), id);
                        }
                    }
                    self.emit(EventKind::Concluded {
                        attempt: attempt.id().clone(),
                        outcome: attempt.outcome().unwrap_or(conclusion.outcome),
                        exit: conclusion.exit,
                        deregistered,
                        replace: conclusion.replace,
                    });
                    Step::Again
                }
                Decision::Clean => {
                    self.clean(&mut attempt).await;
                    Step::Done
                }
            };
            if matches!(step, Step::Done) {
                break;
            }
        }
        self.report_job_taken(&attempt).await;
        if startup && alive_seen && !attempt.is_terminal() {
            self.emit(EventKind::Adopted {
                attempt: attempt.id().clone(),
                state: attempt.state(),
            });
        }
    }

    /// Builds the observation; `None` when the process could not be inspected (nothing is
    /// decided blind about a process).
    async fn observe(&self, attempt: &Attempt, inventory: &mut Inventory) -> Option<Seen> {
        let host = &self.ports.host;
        let runtime = host.runtime_dir(attempt.id());
        let inspected = match attempt.process() {
            Some(p) => host.inspect(p).await.map(|alive| (alive, None)),
            None if attempt.state() == AttemptState::JitReceived => host
                .find_process(&runtime)
                .await
                .map(|found| (found.is_some(), found)),
            None => Ok((false, None)),
        };
        let (process_alive, found) = match inspected {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "process not inspectable; attempt skipped this pass");
                return None;
            }
        };
        let mut listed = inventory
            .as_ref()
            .and_then(|m| m.get(attempt.runner_name()))
            .cloned();
        let mut github = github_view(inventory.is_some(), listed.as_ref());
        let exit = match attempt.process() {
            Some(p) if !process_alive => host.exit_of(p).await,
            _ => None,
        };
        // A runner the service saw die by a signal or an error is concluded the same whatever
        // GitHub shows (a crash; `deregister` follows the listing): no second look needed.
        let crashed = exit.is_some_and(|e| !e.is_clean());
        if !process_alive
            && !crashed
            && matches!(github, GitHubView::Registered { .. })
            && attempt.state().has_process()
            && !attempt.is_terminal()
        {
            // The inventory was read before the process was inspected: a runner that finished
            // its job and exited in between still shows busy/idle there. Ask again before the
            // dead process is concluded `orphaned`; the diagnostics are read after this answer.
            match self
                .ports
                .github
                .runner_by_name(&self.target, attempt.runner_name())
                .await
            {
                Ok(fresh) => {
                    if let Some(m) = inventory.as_mut() {
                        match &fresh {
                            Some(v) => m.insert(v.name.clone(), v.clone()),
                            None => m.remove(attempt.runner_name()),
                        };
                    }
                    github = github_view(true, fresh.as_ref());
                    listed = fresh;
                }
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "runner not re-read; nothing destructive this pass");
                    github = GitHubView::Unreachable;
                }
            }
        }
        let evidence = if attempt.state().has_process() {
            host.evidence(&runtime).await
        } else {
            Evidence::None
        };
        Some(Seen {
            obs: Observation {
                process_alive,
                github,
                evidence,
                exit,
                now: self.now(),
            },
            found,
            listed,
        })
    }

    /// Crash gap: registered at GitHub but `jit_received` not journalled. The runner id comes
    /// from the sidecar, else from GitHub's inventory by our runner name; it is journalled
    /// before anything is decided. Returns false when the journal write failed.
    async fn close_registration_gap(&self, attempt: &mut Attempt, inventory: &Inventory) -> bool {
        let sidecar = match self.ports.host.read_sidecar(attempt.id()).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "sidecar unreadable");
                None
            }
        };
        let listed = inventory
            .as_ref()
            .and_then(|m| m.get(attempt.runner_name()))
            .map(|v| v.id);
        let (runner_id, from) = match (sidecar, listed) {
            (Some(id), _) => (id, RecoveredFrom::Sidecar),
            (None, Some(id)) => (id, RecoveredFrom::Inventory),
            (None, None) => return true,
        };
        let before = attempt.clone();
        if attempt.record_jit(runner_id, self.now()).is_err() {
            return true;
        }
        if !self.write(&before, attempt).await {
            return false;
        }
        self.emit(EventKind::Recovered {
            attempt: attempt.id().clone(),
            from,
        });
        true
    }

    /// `Adopt`: a `jit_received` attempt whose process was found is journalled `starting`
    /// (the process spawned before `starting` was written); anything else stays as it is.
    async fn adopt(&self, attempt: &mut Attempt, found: Option<ProcessIdentity>) -> Step {
        let (AttemptState::JitReceived, Some(process)) = (attempt.state(), found) else {
            return Step::Done;
        };
        let before = attempt.clone();
        if attempt.record_started(process, self.now()).is_err()
            || !self.write(&before, attempt).await
        {
            return Step::Done;
        }
        self.emit(EventKind::Recovered {
            attempt: attempt.id().clone(),
            from: RecoveredFrom::ProcessFound,
        });
        Step::Again
    }

    async fn stop_process(&self, attempt: &Attempt) -> Step {
        let Some(process) = attempt.process() else {
            return Step::Done;
        };
        match self.ports.host.stop(process, self.config.stop_grace).await {
            Ok(()) => Step::Again,
            Err(e) => {
                tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "runner not stopped; retrying next pass");
                Step::Done
            }
        }
    }

    /// Deregisters the runner if GitHub still lists it. `Some(deleted)` to go on concluding
    /// (a refusal because GitHub counts it busy is retried later, see `refused_removals`),
    /// `None` to keep the attempt for the next pass (the request failed).
    async fn deregister(
        &self,
        attempt: &Attempt,
        listed: Option<RunnerView>,
        inventory: &mut Inventory,
    ) -> Option<bool> {
        let Some(view) = listed else {
            return Some(false);
        };
        match self.ports.github.delete_runner(&self.target, view.id).await {
            Ok(outcome @ (DeleteOutcome::Deleted | DeleteOutcome::Gone)) => {
                if let Some(m) = inventory.as_mut() {
                    m.remove(attempt.runner_name());
                }
                Some(outcome == DeleteOutcome::Deleted)
            }
            // Its process was seen gone but GitHub still counts it busy, for minutes after a
            // crash: concluded now, the DELETE retried with back-off.
            Ok(DeleteOutcome::StillRunningJob) if attempt.process().is_some() => {
                if let Some(m) = inventory.as_mut() {
                    m.remove(attempt.runner_name());
                }
                self.removal_refused(attempt.id(), view.id, 1);
                Some(false)
            }
            // No process was journalled (the service stopped between spawning it and saying
            // so) and none was found, yet GitHub says its runner runs a job: a process of it
            // lives where the service cannot see it. Kept until the job ends; never cleaned
            // (that would end the job).
            Ok(DeleteOutcome::StillRunningJob) => {
                tracing::info!(gh_target = %self.target, attempt = %attempt.id(), "GitHub says this runner runs a job though no process of it was found; waiting for the job to end");
                None
            }
            Err(e) => {
                tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "deregistration failed; retrying next pass");
                None
            }
        }
    }

    /// Kill what is left, scrub the runtime directory, journal `cleaned`. A directory that
    /// cannot be removed yet is retried with backoff and reported once.
    pub(crate) async fn clean(&self, attempt: &mut Attempt) {
        let host = &self.ports.host;
        let runtime = host.runtime_dir(attempt.id());
        let leftover = match attempt.process() {
            Some(p) => host.inspect(p).await.map(|alive| alive.then_some(p)),
            None => host.find_process(&runtime).await,
        };
        let leftover = match leftover {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "leftover process not inspectable; cleaning later");
                return;
            }
        };
        if let Some(p) = leftover {
            if let Err(e) = host.stop(p, self.config.stop_grace).await {
                tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "leftover process not stopped; cleaning later");
                return;
            }
        }
        // The job's trust, as journalled when it ended: none recorded for a runner that may
        // have run a job (a crash before the verdict, a journal that failed) is no trust.
        let job = if attempt.outcome().is_none_or(Outcome::may_have_run_job) {
            Some(match self.ports.journal.trust_of(attempt.id()).await {
                Ok(Some(v)) => v.trust,
                Ok(None) => JobTrust::Untrusted,
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, attempt = %attempt.id(), error = %e, "the job's verdict could not be read; cleaning later");
                    return;
                }
            })
        } else {
            None
        };
        // A fork's job (or one of unknown origin) leaves no workspace for the next.
        let keep_workspace = rm_core::workspace::keeps_workspace(attempt.outcome())
            && job != Some(JobTrust::Untrusted);
        if self.ports.github.pool_label().is_some() {
            // Its pool claim, if it held one, ends with it (the adapter retries on failure).
            let ran_job = attempt.outcome().is_none_or(Outcome::may_have_run_job);
            self.ports
                .github
                .pool_finish(&self.target, attempt.runner_name(), ran_job)
                .await;
        }
        match host.scrub(&runtime, keep_workspace, job).await {
            Ok(()) => {
                crate::failpoint!("after_clean");
                let before = attempt.clone();
                if attempt.mark_cleaned(self.now()).is_ok() && self.write(&before, attempt).await {
                    locked(&self.cleanup).remove(attempt.id());
                    locked(&self.jobs_reported).remove(attempt.id());
                    self.emit(EventKind::Cleaned {
                        attempt: attempt.id().clone(),
                    });
                }
            }
            Err(e) => self.defer_cleanup(attempt.id(), &e),
        }
    }

    fn cleanup_due(&self, id: &AttemptId) -> bool {
        locked(&self.cleanup)
            .get(id)
            .is_none_or(|b| b.next_try <= self.now())
    }

    fn defer_cleanup(&self, id: &AttemptId, error: &ScrubError) {
        let now = self.now();
        let retry = self.config.cleanup_retry;
        let first = {
            let mut map = locked(&self.cleanup);
            let entry = map.entry(id.clone()).or_insert(CleanupBackoff {
                failures: 0,
                next_try: now,
            });
            entry.failures = entry.failures.saturating_add(1);
            let delay = if error.retryable {
                retry.delay_after(entry.failures)
            } else {
                retry.max_delay
            };
            entry.next_try = now + delay;
            entry.failures == 1
        };
        if first {
            self.emit(EventKind::CleanupDeferred {
                attempt: id.clone(),
                retryable: error.retryable,
                detail: error.detail.clone(),
            });
        } else {
            tracing::debug!(gh_target = %self.target, attempt = %id, error = %error, "runtime directory still not removable");
        }
    }

    /// Journals `after` over `before` (lost-update guarded) and reports a state change.
    /// False when the write failed: the attempt is re-read next pass.
    pub(crate) async fn write(&self, before: &Attempt, after: &Attempt) -> bool {
        match self.ports.journal.update_attempt(before, after).await {
            Ok(()) => {
                self.state_changed(before, after);
                true
            }
            Err(e) => {
                tracing::warn!(gh_target = %self.target, attempt = %after.id(), error = %e, "attempt not journalled; re-read next pass");
                false
            }
        }
    }

    pub(crate) fn state_changed(&self, before: &Attempt, after: &Attempt) {
        if before.state() != after.state() {
            self.emit(EventKind::StateChanged {
                attempt: after.id().clone(),
                from: before.state(),
                to: after.state(),
            });
        }
        self.note_progress(before, after);
    }
}

/// GitHub's view of one runner for the decision: registered only while `online` or busy (a JIT
/// registration is listed `offline` before its listener connects).
fn github_view(reached: bool, listed: Option<&RunnerView>) -> GitHubView {
    match listed {
        _ if !reached => GitHubView::Unreachable,
        Some(v) if v.status == RunnerStatus::Online || v.busy => {
            GitHubView::Registered { busy: v.busy }
        }
        _ => GitHubView::NotRegistered,
    }
}
