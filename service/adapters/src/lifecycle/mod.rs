//! The lifecycle of a host: one [`TargetLoop`] per target that has a policy in the journal, all
//! sharing one [`HostShared`] (the host-wide allocation lock, preparation slots, events, the
//! launch pause), plus a watcher that notices a runner process has ended and wakes its target's
//! loop at once. Targets added or removed in the journal while running get a loop started or
//! retired in place, without restarting the others. This is the one supervisor of loops: the
//! daemon and `lifecycle-host` both run it.
//!
//! Its own periodic work is kept small for an idle host: the targets are re-read when the
//! owner wakes it ([`Lifecycle::waker`]) and otherwise every [`LifecycleConfig::target_sync`];
//! runner processes are looked at only while attempts are live.

mod config;
mod drive;
mod exits;

pub use config::{
    HookReport, HostFactory, HostProvider, HostUnavailable, LifecycleConfig, PollPlan, TargetHook,
};
pub use exits::ExitWatch;

use crate::github::GitHubAdapter;
use crate::host::HostAdapter;
use crate::journal::JournalAdapter;
use config::PlannedPoll;
use rm_agent::{
    DrainReport, HostShared, JournalPort, PollInterval, Ports, SystemClock, TargetLoop,
};
use rm_core::{PolicyId, Target};
use rm_runner::PackageSource;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The loop type the real adapters make (`J`: the journal port the loops see; the daemon
/// wraps the journal to hold launching).
pub type RealLoop<S, J = JournalAdapter> =
    TargetLoop<J, GitHubAdapter, Arc<HostAdapter<S>>, SystemClock>;

/// The loops started and not ended yet, shared with the exit watcher.
type Loops<S, J> = Arc<Mutex<Vec<Arc<RealLoop<S, J>>>>>;

/// Loops made and not yet handed to `run`.
type ToSpawn<S, J> = mpsc::UnboundedReceiver<Arc<RealLoop<S, J>>>;

impl<S: PackageSource + 'static, J: JournalPort> exits::Wakeable for RealLoop<S, J> {
    fn policy_ids(&self) -> Vec<PolicyId> {
        self.policies().iter().map(|p| p.id()).collect()
    }
    fn wake_now(&self) {
        self.wake();
    }
}

/// What a [`Lifecycle`] is built from.
pub struct LifecycleParts<S: PackageSource + 'static, J> {
    /// The journal: the target set.
    pub journal: JournalAdapter,
    /// The journal port every loop and the exit watcher use (often `journal` itself).
    pub loop_journal: J,
    pub github: GitHubAdapter,
    pub host: HostProvider<S>,
    pub config: LifecycleConfig,
    /// Called before each re-read of the targets.
    pub hook: Option<Arc<dyn TargetHook>>,
    /// Notified by whoever changed the journal: settle the hook, re-read the targets and wake
    /// every loop.
    pub wake: Arc<Notify>,
}

/// The loops of one host and what they share. The set of loops follows the journal's targets
/// while running: [`Lifecycle::sync_targets`] starts a loop for a new target and retires the
/// loop of a removed one (it starts nothing more, supervises its live runners until they end,
/// then exits).
pub struct Lifecycle<S: PackageSource + 'static, J: JournalPort + Clone = JournalAdapter> {
    /// Every loop started and not yet ended: serving ones and retiring ones.
    loops: Loops<S, J>,
    shared: HostShared,
    journal: JournalAdapter,
    loop_journal: J,
    github: GitHubAdapter,
    /// `None` until the first target appears when built by a [`HostFactory`].
    host: Arc<Mutex<Option<Arc<HostAdapter<S>>>>>,
    factory: Option<HostFactory<S>>,
    config: LifecycleConfig,
    poll: Arc<PlannedPoll>,
    hook: Option<Arc<dyn TargetHook>>,
    wake: Arc<Notify>,
    /// Loops made but not yet started: `run` starts them.
    spawn_tx: mpsc::UnboundedSender<Arc<RealLoop<S, J>>>,
    spawn_rx: Mutex<Option<ToSpawn<S, J>>>,
    /// One sync at a time: a stale read must never retire a target a newer read kept.
    sync_lock: tokio::sync::Mutex<()>,
}

/// What one [`Lifecycle::sync_targets`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetChanges {
    /// Targets whose loop was started.
    pub added: Vec<Target>,
    /// Targets whose loop was told to retire.
    pub removed: Vec<Target>,
    /// New targets whose loop could not start (the runner host could not be prepared); the
    /// next re-read tries again.
    pub deferred: Vec<Target>,
}

/// The distinct targets of the journal's policies, in the journal's order.
pub async fn journal_targets(
    journal: &JournalAdapter,
) -> Result<Vec<Target>, rm_agent::JournalError> {
    let policies = journal.with(|j| j.list_policies()).await?;
    let mut targets: Vec<Target> = Vec::new();
    for p in policies {
        if !targets.contains(p.target()) {
            targets.push(p.target().clone());
        }
    }
    Ok(targets)
}

/// Builds one loop per target of the journal's policies (see [`Lifecycle::run`] to start them).
pub async fn spawn_target_loops<S: PackageSource + 'static>(
    journal: JournalAdapter,
    github: GitHubAdapter,
    host: Arc<HostAdapter<S>>,
    config: LifecycleConfig,
) -> Result<Lifecycle<S>, rm_agent::JournalError> {
    let targets = journal_targets(&journal).await?;
    Ok(Lifecycle::new(targets, journal, github, host, config))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: PackageSource + 'static> Lifecycle<S> {
    /// Loops for `targets` over the plain journal and a ready runner host.
    pub fn new(
        targets: Vec<Target>,
        journal: JournalAdapter,
        github: GitHubAdapter,
        host: Arc<HostAdapter<S>>,
        config: LifecycleConfig,
    ) -> Self {
        let lifecycle = Lifecycle::with_parts(LifecycleParts {
            loop_journal: journal.clone(),
            journal,
            github,
            host: HostProvider::Ready(host),
            config,
            hook: None,
            wake: Arc::new(Notify::new()),
        });
        for target in targets {
            if let Err(e) = lifecycle.start_loop(target) {
                // Unreachable with a ready host; logged rather than lost.
                tracing::error!(error = %e, "a target loop could not be made");
            }
        }
        lifecycle
    }
}

impl<S: PackageSource + 'static, J: JournalPort + Clone> Lifecycle<S, J> {
    /// A lifecycle with no loop yet: [`Lifecycle::run`] reads the targets first.
    pub fn with_parts(parts: LifecycleParts<S, J>) -> Self {
        let shared = HostShared::new(parts.config.max_preparations);
        let gated_by = parts.github.client().clone();
        let (spawn_tx, spawn_rx) = mpsc::unbounded_channel();
        let (host, factory) = match parts.host {
            HostProvider::Ready(h) => (Some(h), None),
            HostProvider::OnFirstTarget(f) => (None, Some(f)),
        };
        Lifecycle {
            loops: Arc::new(Mutex::new(Vec::new())),
            shared,
            journal: parts.journal,
            loop_journal: parts.loop_journal,
            github: parts.github,
            host: Arc::new(Mutex::new(host)),
            factory,
            poll: Arc::new(PlannedPoll::new(parts.config.poll.clone()).gated_by(gated_by)),
            config: parts.config,
            hook: parts.hook,
            wake: parts.wake,
            spawn_tx,
            spawn_rx: Mutex::new(Some(spawn_rx)),
            sync_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The runner host, once built.
    pub fn host(&self) -> Option<Arc<HostAdapter<S>>> {
        lock(&self.host).clone()
    }

    /// The runner host, built from `target` by the factory on first use.
    fn host_for(&self, target: &Target) -> Result<Arc<HostAdapter<S>>, HostUnavailable> {
        let mut slot = lock(&self.host);
        if let Some(h) = slot.as_ref() {
            return Ok(Arc::clone(h));
        }
        let Some(factory) = &self.factory else {
            return Err(HostUnavailable("no runner host was given".into()));
        };
        let host = factory(target)?;
        *slot = Some(Arc::clone(&host));
        tracing::info!(gh_target = %target, "runner host prepared for the first target");
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let warm = Arc::clone(&host);
            rt.spawn(async move {
                if let Err(e) = warm.package().await {
                    tracing::warn!(error = %e, "runner package not cached yet; launches will try again");
                }
            });
        }
        Ok(host)
    }

    /// Makes the loop of `target`, records it and hands it to `run` (caller holds no lock).
    fn start_loop(&self, target: Target) -> Result<(), HostUnavailable> {
        let host = self.host_for(&target)?;
        let lp = Arc::new(TargetLoop::new(
            target,
            Ports {
                journal: self.loop_journal.clone(),
                github: self.github.clone(),
                host,
                clock: SystemClock,
            },
            self.shared.clone(),
            self.config.agent.clone(),
            Arc::clone(&self.poll) as Arc<dyn PollInterval>,
        ));
        lock(&self.loops).push(Arc::clone(&lp));
        // The receiver lives as long as `self`; a send cannot fail while `self` exists.
        let _ = self.spawn_tx.send(lp);
        Ok(())
    }

    /// The loops running now (serving and retiring), in start order.
    pub fn loops(&self) -> Vec<Arc<RealLoop<S, J>>> {
        lock(&self.loops).clone()
    }

    /// The targets served now (loops not retiring).
    pub fn targets(&self) -> Vec<Target> {
        lock(&self.loops)
            .iter()
            .filter(|lp| !lp.is_retiring())
            .map(|lp| lp.target().clone())
            .collect()
    }

    /// The allocation lock, preparation slots and the event channel (`subscribe()`).
    pub fn shared(&self) -> &HostShared {
        &self.shared
    }

    /// Notify this after changing the journal's targets, policies or the host: the hook is
    /// settled, the targets re-read and every loop runs a pass now.
    pub fn waker(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// The number of targets the poll interval is planned for (one until targets are read).
    pub fn poll_planned_for(&self) -> usize {
        self.poll.planned_for()
    }

    /// Re-reads the journal's targets: starts a loop for each new one and retires the loop of
    /// each one gone (it finishes its running jobs; nothing is interrupted). A target removed
    /// and added back before its old loop ended is started again once that loop has ended
    /// (two loops never supervise one target). The poll interval is planned again when the
    /// number of targets changed. A failed read changes nothing.
    pub async fn sync_targets(&self) -> Result<TargetChanges, rm_agent::JournalError> {
        let _one_at_a_time = self.sync_lock.lock().await;
        let targets = journal_targets(&self.journal).await?;
        if self.poll.replan(targets.len()) {
            tracing::debug!(
                targets = targets.len(),
                "poll interval planned for the new number of targets"
            );
        }
        let mut changes = TargetChanges::default();
        let to_start: Vec<Target> = {
            let loops = lock(&self.loops);
            for lp in loops.iter() {
                if !lp.is_retiring() && !targets.contains(lp.target()) {
                    lp.retire();
                    changes.removed.push(lp.target().clone());
                }
            }
            targets
                .into_iter()
                .filter(|t| !loops.iter().any(|lp| lp.target() == t))
                .collect()
        };
        for target in to_start {
            match self.start_loop(target.clone()) {
                Ok(()) => changes.added.push(target),
                Err(e) => {
                    tracing::error!(gh_target = %target, error = %e, "the target's loop cannot start yet; retrying");
                    changes.deferred.push(target);
                }
            }
        }
        for t in &changes.added {
            tracing::info!(gh_target = %t, "target added; its loop starts");
        }
        for t in &changes.removed {
            tracing::info!(gh_target = %t, "target removed; its loop finishes its running jobs, starts nothing, then ends");
        }
        Ok(changes)
    }

    /// Runs a pass of `target`'s loop now (after an API change) instead of at its next poll.
    /// False when no loop serves that target.
    pub fn wake(&self, target: &Target) -> bool {
        let loops = lock(&self.loops);
        let mut woken = false;
        for lp in loops.iter().filter(|lp| lp.target() == target) {
            lp.wake();
            woken = true;
        }
        woken
    }

    /// A pass of every loop now.
    pub fn wake_all(&self) {
        for lp in lock(&self.loops).iter() {
            lp.wake();
        }
    }

    /// The hook's settle; returns whether it has work left.
    async fn settle_hook(&self) -> HookReport {
        match &self.hook {
            Some(hook) => hook.settle().await,
            None => HookReport::default(),
        }
    }

    /// Re-reads the targets; true asks for another try soon (a loop could not start).
    async fn resync(&self) -> bool {
        match self.sync_targets().await {
            Ok(changes) => !changes.deferred.is_empty(),
            Err(e) => {
                tracing::warn!(error = %e, "targets not re-read; keeping the current set");
                false
            }
        }
    }

    /// Reads the targets, recovers every one (concurrently) before any loop launches, then
    /// runs the loops and the exit watcher until `shutdown` turns true; each loop then drains
    /// with the agent's deadline. Meanwhile the targets are re-read when woken
    /// ([`Lifecycle::waker`]), when a loop ends and every [`LifecycleConfig::target_sync`].
    /// Returns the drain report of every loop that ended, retired ones included. Call it once.
    pub async fn run(&self, shutdown: watch::Receiver<bool>) -> Vec<(Target, DrainReport)> {
        let Some(mut to_spawn) = lock(&self.spawn_rx).take() else {
            tracing::error!("Lifecycle::run called twice; the second call does nothing");
            return Vec::new();
        };
        // Subscribed before any loop runs: the watcher misses no reservation.
        let events = self.shared.subscribe();
        let mut hook_pending = self.settle_hook().await.pending;
        let mut retry_soon = self.resync().await;

        // Startup recovery of every target before any loop's first launch.
        let mut initial = Vec::new();
        while let Ok(lp) = to_spawn.try_recv() {
            initial.push(lp);
        }
        let mut recoveries = JoinSet::new();
        for lp in &initial {
            let lp = Arc::clone(lp);
            recoveries.spawn(async move { lp.recover().await });
        }
        while recoveries.join_next().await.is_some() {}
        if !initial.is_empty() {
            tracing::info!(targets = initial.len(), "startup recovery done");
        }

        let watcher = tokio::spawn(exits::watch_exits(
            self.loop_journal.clone(),
            Arc::clone(&self.host),
            Arc::clone(&self.loops),
            self.config.exit_poll,
            events,
        ));
        let mut set: JoinSet<(Arc<RealLoop<S, J>>, DrainReport)> = JoinSet::new();
        for lp in initial {
            self.spawn_loop(&mut set, lp, shutdown.clone(), true);
        }
        let mut reports = Vec::new();
        let mut stop = shutdown.clone();
        let mut stopping = *stop.borrow();
        let mut next_sync = self.next_sync(retry_soon);
        let mut next_hook = Instant::now() + self.config.hook_poll;
        loop {
            // The signal itself, not only the branch below that notices its change: `select!`
            // may hand us a loop that ended *because* shutdown began before that branch runs.
            stopping |= *stop.borrow();
            if stopping && set.is_empty() {
                // A loop made but not started yet still recovers, then drains at once.
                match to_spawn.try_recv() {
                    Ok(lp) => self.spawn_loop(&mut set, lp, shutdown.clone(), false),
                    Err(_) => break,
                }
                continue;
            }
            tokio::select! {
                Some(lp) = to_spawn.recv() => self.spawn_loop(&mut set, lp, shutdown.clone(), false),
                Some(joined) = set.join_next(), if !set.is_empty() => match joined {
                    Ok((lp, report)) => {
                        lock(&self.loops).retain(|l| !Arc::ptr_eq(l, &lp));
                        reports.push((lp.target().clone(), report));
                        stopping |= *stop.borrow();
                        if !stopping {
                            // A target added back while its old loop was retiring starts now.
                            retry_soon = self.resync().await;
                            next_sync = self.next_sync(retry_soon);
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "a target loop task failed"),
                },
                () = self.wake.notified(), if !stopping => {
                    hook_pending = self.settle_hook().await.pending;
                    next_hook = Instant::now() + self.config.hook_poll;
                    retry_soon = self.resync().await;
                    next_sync = self.next_sync(retry_soon);
                    self.wake_all();
                }
                () = tokio::time::sleep_until(next_hook), if hook_pending && !stopping => {
                    let report = self.settle_hook().await;
                    hook_pending = report.pending;
                    next_hook = Instant::now() + self.config.hook_poll;
                    if report.changed {
                        retry_soon = self.resync().await;
                        next_sync = self.next_sync(retry_soon);
                    }
                }
                () = tokio::time::sleep_until(next_sync), if !stopping => {
                    hook_pending = self.settle_hook().await.pending;
                    retry_soon = self.resync().await;
                    next_sync = self.next_sync(retry_soon);
                }
                changed = stop.changed(), if !stopping => {
                    stopping = changed.is_err() || *stop.borrow();
                }
            }
        }
        watcher.abort();
        reports
    }

    /// When to re-read the targets next: the safety-net interval, or soon after a loop could
    /// not start.
    fn next_sync(&self, retry_soon: bool) -> Instant {
        let wait = if retry_soon {
            self.config.hook_poll.min(self.config.target_sync)
        } else {
            self.config.target_sync
        };
        Instant::now() + wait
    }

    fn spawn_loop(
        &self,
        set: &mut JoinSet<(Arc<RealLoop<S, J>>, DrainReport)>,
        lp: Arc<RealLoop<S, J>>,
        shutdown: watch::Receiver<bool>,
        recovered: bool,
    ) {
        let poll = Arc::clone(&self.poll) as Arc<dyn PollInterval>;
        let agent = self.config.agent.clone();
        set.spawn(async move {
            let report = drive::drive(Arc::clone(&lp), shutdown, poll, agent, recovered).await;
            (lp, report)
        });
    }
}
