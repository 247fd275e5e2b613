//! One reconcile loop per target: every pass re-reads the policies, supervises this target's
//! attempts, then polls demand and launches what the allocator grants.

use crate::clock::Clock;
use crate::config::{AgentConfig, HostShared, PollInterval};
use crate::events::{EventKind, Events};
use crate::launch_backoff::LaunchRecord;
use crate::ports::{ActiveCounts, GhError, GitHubPort, JournalPort, RunnerHostPort};
use rm_core::{
    AttemptId, JobDemand, PassStop, PassView, Policy, PolicyId, PolicyState, Target, Timestamp,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The four ports one loop uses.
#[derive(Debug, Clone)]
pub struct Ports<J, G, H, C> {
    pub journal: J,
    pub github: G,
    pub host: H,
    pub clock: C,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassReport {
    /// A GitHub call of this pass succeeded.
    pub reached_github: bool,
    /// Runners that reached `starting`.
    pub launched: u32,
    /// This target's attempts still holding a slot after the pass.
    pub active_owned: u32,
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    pub remaining: u32,
    pub timed_out: bool,
}

/// The longest an idle loop trusts its memory that its policies have no uncleaned attempt.
pub(crate) const QUIET_REREAD: Duration = Duration::from_secs(300);
/// The least time between two passes of a loop whose pass took longer than the poll interval.
const MIN_PASS_GAP: Duration = Duration::from_millis(50);

/// A directory that could not be removed: when to try again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CleanupBackoff {
    pub(crate) failures: u32,
    pub(crate) next_try: Timestamp,
}

/// The loop for one target. All methods take `&self` so the daemon can share it (`Arc`) between
/// its run task and status queries; the state it keeps between passes sits behind short locks
/// that are never held across an await.
pub struct TargetLoop<J, G, H, C> {
    pub(crate) target: Target,
    pub(crate) ports: Ports<J, G, H, C>,
    pub(crate) shared: HostShared,
    pub(crate) config: AgentConfig,
    pub(crate) poll: Arc<dyn PollInterval>,
    pub(crate) events: Events,
    pub(crate) exit: Arc<Notify>,
    /// The last copy read successfully (a failed read keeps it).
    pub(crate) policies: Mutex<Vec<Policy>>,
    /// Policies that vanished from the journal while this loop ran (the last copy of each):
    /// when the loop is retired, it supervises their runners too. A pass can read the
    /// journal after a target's policy was deleted but before the loop is told it is retired;
    /// without this, that policy's running runner would be nobody's to conclude and clean.
    pub(crate) vanished: Mutex<Vec<Policy>>,
    pub(crate) cleanup: Mutex<HashMap<AttemptId, CleanupBackoff>>,
    /// Registrations GitHub refused to delete, by runner id (see `refused_removals`).
    pub(crate) refused_removals: Mutex<HashMap<u64, crate::refused_removals::Refused>>,
    /// Runners concluded on their own word, by name, until a read confirms them gone (see
    /// `unconfirmed_removals`).
    pub(crate) unconfirmed_removals:
        Mutex<HashMap<String, crate::unconfirmed_removals::Unconfirmed>>,
    /// Attempts whose taken job was reported to the GitHub port (`runner_took_job`) with a
    /// name, until cleaned.
    pub(crate) jobs_reported: Mutex<std::collections::HashSet<AttemptId>>,
    pub(crate) draining: AtomicBool,
    /// The target was removed: start nothing, supervise until this target owns no runner,
    /// then end (no deadline unless the host shuts down).
    pub(crate) retiring: AtomicBool,
    pub(crate) recovered: AtomicBool,
    /// When the journal last showed no uncleaned attempt of this loop's policies (and these
    /// policy ids). Only this loop writes attempts of its policies, so until it reserves one or
    /// its policy set changes, an idle pass can skip that read; it is re-read at least every
    /// [`QUIET_REREAD`] all the same, and always at startup.
    pub(crate) quiet_since: Mutex<Option<(Timestamp, Vec<PolicyId>)>>,
    /// When supervision last read GitHub's runner inventory successfully.
    pub(crate) inventory_read_at: Mutex<Option<Timestamp>>,
    /// One pass at a time per loop: a pass must never supervise an attempt another pass of the
    /// same loop is launching.
    pub(crate) pass_lock: tokio::sync::Mutex<()>,
    /// Failed launches in a row per policy (see `launch_backoff`).
    pub(crate) launches: Mutex<HashMap<PolicyId, LaunchRecord>>,
    /// What the last pass saw and decided, for `why` (see `rm_core::why`).
    pub(crate) last_pass: Mutex<Option<PassView>>,
    /// The queued jobs as last read, kept for a pass that cannot read them.
    pub(crate) last_jobs: Mutex<Option<JobsSeen>>,
}

/// GitHub's queue as a pass last read it.
#[derive(Debug, Clone)]
pub(crate) struct JobsSeen {
    pub(crate) at: Timestamp,
    pub(crate) jobs: Vec<JobDemand>,
    pub(crate) is_floor: bool,
}

pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<J, G, H, C> TargetLoop<J, G, H, C>
where
    J: JournalPort,
    G: GitHubPort,
    H: RunnerHostPort,
    C: Clock,
{
    pub fn new(
        target: Target,
        ports: Ports<J, G, H, C>,
        shared: HostShared,
        config: AgentConfig,
        poll: Arc<dyn PollInterval>,
    ) -> Self {
        let events = Events {
            tx: shared.events.clone(),
            target: target.clone(),
        };
        TargetLoop {
            target,
            ports,
            shared,
            config,
            poll,
            events,
            exit: Arc::new(Notify::new()),
            policies: Mutex::new(Vec::new()),
            vanished: Mutex::new(Vec::new()),
            cleanup: Mutex::new(HashMap::new()),
            refused_removals: Mutex::new(HashMap::new()),
            unconfirmed_removals: Mutex::new(HashMap::new()),
            jobs_reported: Mutex::new(std::collections::HashSet::new()),
            draining: AtomicBool::new(false),
            retiring: AtomicBool::new(false),
            recovered: AtomicBool::new(false),
            quiet_since: Mutex::new(None),
            inventory_read_at: Mutex::new(None),
            pass_lock: tokio::sync::Mutex::new(()),
            launches: Mutex::new(HashMap::new()),
            last_pass: Mutex::new(None),
            last_jobs: Mutex::new(None),
        }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Notify this when one of the target's runner processes exits: the loop runs a pass at
    /// once instead of waiting for the poll interval.
    pub fn exit_notifier(&self) -> Arc<Notify> {
        self.exit.clone()
    }

    /// The policies as last read.
    pub fn policies(&self) -> Vec<Policy> {
        locked(&self.policies).clone()
    }

    /// What the last pass saw and decided (`None` before the first pass): explain it with
    /// [`rm_core::explain`].
    pub fn last_pass(&self) -> Option<PassView> {
        locked(&self.last_pass).clone()
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.ports.clock.now()
    }

    pub(crate) fn emit(&self, kind: EventKind) {
        self.events.emit(self.now(), kind);
    }

    /// Startup recovery: reconciles every journalled attempt of this target with the ordinary
    /// supervision code (startup only supplies the first observation) and starts nothing.
    /// Called by the first [`TargetLoop::pass`] if the daemon did not call it.
    pub async fn recover(&self) -> PassReport {
        let _pass = self.pass_lock.lock().await;
        self.recovered.store(true, Ordering::SeqCst);
        self.refresh_policies().await;
        let reached_github = self.supervise_all(true).await;
        PassReport {
            reached_github,
            launched: 0,
            active_owned: self.active_owned().await,
        }
    }

    /// One pass: policies (and the operator's intent for them), supervision, then demand and
    /// launches (unless draining). Passes of one loop never overlap.
    pub async fn pass(&self) -> PassReport {
        let _pass = self.pass_lock.lock().await;
        let startup = !self.recovered.swap(true, Ordering::SeqCst);
        self.refresh_policies().await;
        self.follow_launch_records().await;
        let mut reached_github = self.supervise_all(startup).await;
        // The active counts are read once per pass, after supervision concluded what ended:
        // the operator's intent, the allocator and the pass report all use this copy (each
        // launch still re-reads the headroom under the allocation lock).
        // A loop that knows its policies have no uncleaned attempt knows they hold no slot
        // either: its own counts are zero without asking. The host-wide total only matters
        // to start a runner, and the launch reads it then (`total_known`).
        let total_known = !self.known_quiet(&self.policy_ids());
        let counts = if !total_known {
            Some(ActiveCounts::default())
        } else {
            match self.ports.journal.active_counts().await {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(gh_target = %self.target, error = %e, "active counts unreadable; starting nothing this pass");
                    None
                }
            }
        };
        // The operator's intent before launching, so a policy disabled since the last pass
        // starts nothing (the allocator also skips policies not enabled).
        if let (false, Some(counts)) = (self.is_retiring(), &counts) {
            self.follow_operator_intent(counts).await;
        }
        let mut launched = 0;
        let launching = !self.draining.load(Ordering::SeqCst);
        match (launching, &counts) {
            (true, Some(counts)) => {
                let (reached, started) = self.allocate_and_launch(counts, total_known).await;
                reached_github |= reached;
                launched = started;
            }
            (false, _) => {
                let stop = if self.is_retiring() {
                    PassStop::Retiring
                } else if self.draining.load(Ordering::SeqCst) {
                    PassStop::Draining
                } else {
                    PassStop::Paused
                };
                self.record_pass(self.pass_view(Some(stop)));
            }
            (true, None) => self.record_pass(self.pass_view(Some(PassStop::Journal {
                detail: "the active runners could not be counted".into(),
            }))),
        }
        let active_owned = match &counts {
            // Launches that reached `starting` hold a slot; failed ones were concluded.
            Some(c) => self.owned_in(c).saturating_add(launched),
            None => self.active_owned().await,
        };
        let report = PassReport {
            reached_github,
            launched,
            active_owned,
        };
        self.emit(EventKind::PassCompleted {
            reached_github: report.reached_github,
            launched: report.launched,
            active_owned: report.active_owned,
        });
        report
    }

    /// Recovery, then passes at the poll interval (or at once after an exit notification)
    /// until `shutdown` turns true or its sender is dropped; then drains with the configured
    /// deadline.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>) -> DrainReport {
        self.recover().await;
        loop {
            if *shutdown.borrow() {
                break;
            }
            if self.is_retiring() {
                return self.drain_retired(shutdown).await;
            }
            let started = self.now();
            self.pass().await;
            // Passes start at the poll interval, not that long after the last one ended: a pass
            // that did work (listings, launches) would otherwise push every later poll back,
            // and a job queued meanwhile waits for it. Never faster than planned.
            let wait = self
                .poll
                .next_interval()
                .saturating_sub(self.now().duration_since(started))
                .max(MIN_PASS_GAP);
            tokio::select! {
                _ = self.ports.clock.sleep(wait) => {}
                _ = self.exit.notified() => {}
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        self.run_until_drained(self.config.drain_deadline).await
    }

    /// Stops starting runners and supervises until none of this target's attempts is active,
    /// or until `deadline` (from now) has passed. Nothing is lost by stopping early: startup
    /// recovery adopts what is left.
    pub async fn run_until_drained(&self, deadline: Option<Duration>) -> DrainReport {
        self.draining.store(true, Ordering::SeqCst);
        let start = self.now();
        loop {
            let report = self.pass().await;
            let elapsed = self.now().duration_since(start);
            let out_of_time = deadline.is_some_and(|d| elapsed >= d);
            if report.active_owned == 0 || out_of_time {
                let done = DrainReport {
                    remaining: report.active_owned,
                    timed_out: report.active_owned > 0,
                };
                self.emit(EventKind::Drained {
                    remaining: done.remaining,
                    timed_out: done.timed_out,
                });
                return done;
            }
            let mut wait = self.config.drain_poll;
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_sub(elapsed));
            }
            tokio::select! {
                _ = self.ports.clock.sleep(wait) => {}
                _ = self.exit.notified() => {}
            }
        }
    }

    /// The target was removed from the host's set: [`TargetLoop::run`] stops starting
    /// runners, supervises this target's live runners until they end (no deadline unless
    /// `shutdown` comes, then the configured drain deadline applies) and returns. Policies
    /// deleted from the journal meanwhile stay known to this loop, so their attempts are still
    /// supervised, concluded and cleaned.
    pub fn retire(&self) {
        self.retiring.store(true, Ordering::SeqCst);
        self.draining.store(true, Ordering::SeqCst);
        self.exit.notify_one();
    }

    pub fn is_retiring(&self) -> bool {
        self.retiring.load(Ordering::SeqCst)
    }

    /// Wakes the loop for a pass now (an API change, a resumed launch) instead of at the
    /// next poll.
    pub fn wake(&self) {
        self.exit.notify_one();
    }

    /// The retired loop's drain: until nothing of this target is active or left to clean; a
    /// shutdown meanwhile bounds what is left by the drain deadline.
    async fn drain_retired(&self, mut shutdown: watch::Receiver<bool>) -> DrainReport {
        loop {
            if *shutdown.borrow() {
                break;
            }
            let report = self.pass().await;
            // Nothing active is not enough: a finished runner's registration and directory
            // are still this loop's to clean, and once it returns nobody would until the next
            // start.
            if report.active_owned == 0 && self.nothing_left_to_clean().await {
                let done = DrainReport {
                    remaining: 0,
                    timed_out: false,
                };
                self.emit(EventKind::Drained {
                    remaining: 0,
                    timed_out: false,
                });
                return done;
            }
            tokio::select! {
                _ = self.ports.clock.sleep(self.config.drain_poll) => {}
                _ = self.exit.notified() => {}
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        self.run_until_drained(self.config.drain_deadline).await
    }

    /// Whether the loop has stopped starting runners.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Re-reads the policies; a failed read keeps the last copy.
    pub(crate) async fn refresh_policies(&self) {
        match self.ports.journal.policies(&self.target).await {
            Ok(mut policies) => {
                let mut known = locked(&self.policies);
                let mut vanished = locked(&self.vanished);
                for old in known.iter() {
                    if !policies.iter().any(|p| p.id() == old.id())
                        && !vanished.iter().any(|v| v.id() == old.id())
                    {
                        vanished.push(old.clone());
                    }
                }
                if self.is_retiring() {
                    // A removed target's policies may be deleted while its runners still run:
                    // keep supervising them under the last copy (a retired loop starts
                    // nothing).
                    for old in vanished.iter() {
                        if !policies.iter().any(|p| p.id() == old.id()) {
                            policies.push(old.clone());
                        }
                    }
                }
                *known = policies;
            }
            Err(e) => tracing::warn!(
                gh_target = %self.target, error = %e, "policies could not be re-read; keeping the last copy"
            ),
        }
    }

    pub(crate) fn policy_ids(&self) -> Vec<PolicyId> {
        locked(&self.policies).iter().map(|p| p.id()).collect()
    }

    /// Whether the journal's answer "no uncleaned attempt of these policies" from an earlier
    /// pass still holds (nothing reserved since, same policies, recent enough).
    pub(crate) fn known_quiet(&self, own: &[PolicyId]) -> bool {
        match &*locked(&self.quiet_since) {
            Some((at, ids)) => ids == own && self.now().duration_since(*at) < QUIET_REREAD,
            None => false,
        }
    }

    /// Records what the journal just said about this loop's uncleaned attempts; call with
    /// `quiet = false` before reserving an attempt.
    pub(crate) fn note_quiet(&self, own: &[PolicyId], quiet: bool) {
        *locked(&self.quiet_since) = quiet.then(|| (self.now(), own.to_vec()));
    }

    /// No attempt of this loop's policies is uncleaned, by the journal's word (an unreadable
    /// journal says no).
    async fn nothing_left_to_clean(&self) -> bool {
        let own = self.policy_ids();
        if self.known_quiet(&own) {
            return true;
        }
        match self.ports.journal.uncleaned_attempts_of(&own).await {
            Ok(left) => !left.iter().any(|a| own.contains(&a.policy_id())),
            Err(e) => {
                tracing::warn!(gh_target = %self.target, error = %e, "attempts unreadable");
                false
            }
        }
    }

    /// This target's attempts holding a slot, from the journal.
    pub(crate) async fn active_owned(&self) -> u32 {
        match self.ports.journal.active_counts().await {
            Ok(counts) => self.owned_in(&counts),
            Err(e) => {
                tracing::warn!(gh_target = %self.target, error = %e, "active counts unreadable");
                // Unknown: report one so a drain keeps waiting rather than ending blind.
                1
            }
        }
    }

    /// This target's share of `counts`.
    pub(crate) fn owned_in(&self, counts: &ActiveCounts) -> u32 {
        self.policy_ids().iter().map(|id| counts.of(*id)).sum()
    }

    /// Moves a policy's observed state, compare-and-set in the journal. A lost race or an
    /// illegal move is left for the next pass.
    pub(crate) async fn set_policy_state(&self, id: PolicyId, next: PolicyState) {
        let Some(mut policy) = locked(&self.policies)
            .iter()
            .find(|p| p.id() == id)
            .cloned()
        else {
            return;
        };
        let from = policy.state();
        if from == next || policy.transition_to(next).is_err() {
            return;
        }
        match self.ports.journal.update_policy(&policy).await {
            Ok(stored) => {
                if let Some(slot) = locked(&self.policies).iter_mut().find(|p| p.id() == id) {
                    *slot = stored;
                }
                self.emit(EventKind::PolicyStateChanged {
                    policy: id,
                    from,
                    to: next,
                });
            }
            Err(e) => tracing::warn!(
                gh_target = %self.target, policy = id.get(), error = %e, "policy state not updated"
            ),
        }
    }

    /// 401 → `authentication_failed`; 403/404 → `repair_required`, for the given policies.
    pub(crate) async fn note_github_refusal(&self, ids: &[PolicyId], error: &GhError) {
        let next = match error {
            GhError::Unauthorized => PolicyState::AuthenticationFailed,
            GhError::Forbidden { .. } | GhError::NotFound { .. } => PolicyState::RepairRequired,
            _ => return,
        };
        for id in ids {
            self.set_policy_state(*id, next).await;
            self.emit(EventKind::GitHubRefused {
                policy: *id,
                state: next,
                detail: error.to_string(),
            });
        }
    }

    /// The operator's `enabled` flag moves the observed state: disable → draining → disabled
    /// once the policy owns nothing; enable → pending.
    async fn follow_operator_intent(&self, counts: &ActiveCounts) {
        let intents: Vec<(PolicyId, PolicyState)> = locked(&self.policies)
            .iter()
            .filter_map(|p| {
                p.intended_transition(counts.of(p.id()))
                    .map(|next| (p.id(), next))
            })
            .collect();
        for (id, next) in intents {
            self.set_policy_state(id, next).await;
        }
    }
}
