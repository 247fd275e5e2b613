//! The lifecycle of a host: one [`TargetLoop`] per target that has a policy in the journal, all
//! sharing one [`HostShared`] (the host-wide allocation lock, preparation slots, events, the
//! launch pause), plus a watcher that notices a runner process has ended and wakes its target's
//! loop at once. Targets added or removed in the journal while running get a loop started or
//! retired in place, without restarting the others.

use crate::github::GitHubAdapter;
use crate::host::HostAdapter;
use crate::journal::JournalAdapter;
use rm_agent::{
    AgentConfig, DrainReport, HostShared, JournalPort, PollInterval, Ports, RunnerHostPort,
    SystemClock, TargetLoop,
};
use rm_core::{Attempt, AttemptId, PolicyId, ProcessIdentity, Target};
use rm_runner::PackageSource;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The loop type the real adapters make.
pub type RealLoop<S> = TargetLoop<JournalAdapter, GitHubAdapter, Arc<HostAdapter<S>>, SystemClock>;

/// How the lifecycle is tuned.
#[derive(Clone)]
pub struct LifecycleConfig {
    pub agent: AgentConfig,
    /// Runtimes materialized at once, host-wide.
    pub max_preparations: usize,
    /// Time between passes of each loop (the budget planner in the service).
    pub poll: Arc<dyn PollInterval>,
    /// How often the exit watcher looks at the journalled runner processes.
    pub exit_poll: Duration,
}

impl LifecycleConfig {
    pub fn new(poll: Arc<dyn PollInterval>) -> Self {
        LifecycleConfig {
            agent: AgentConfig::default(),
            max_preparations: 2,
            poll,
            exit_poll: Duration::from_secs(1),
        }
    }
}

/// The loops of one host and what they share. The set of loops follows the journal's targets
/// while running: [`Lifecycle::sync_targets`] (called by [`Lifecycle::run`] every poll
/// interval, and by the daemon right after a change) starts a loop for a new target and
/// retires the loop of a removed one (it starts nothing more, supervises its live runners until
/// they end, then exits).
pub struct Lifecycle<S: PackageSource + 'static> {
    /// Every loop started and not yet ended: serving ones and retiring ones.
    loops: Arc<Mutex<Vec<Arc<RealLoop<S>>>>>,
    shared: HostShared,
    journal: JournalAdapter,
    github: GitHubAdapter,
    host: Arc<HostAdapter<S>>,
    config: LifecycleConfig,
    /// Loops made but not yet started: `run` starts them.
    spawn_tx: mpsc::UnboundedSender<Arc<RealLoop<S>>>,
    spawn_rx: Mutex<Option<mpsc::UnboundedReceiver<Arc<RealLoop<S>>>>>,
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
    pub fn new(
        targets: Vec<Target>,
        journal: JournalAdapter,
        github: GitHubAdapter,
        host: Arc<HostAdapter<S>>,
        config: LifecycleConfig,
    ) -> Self {
        let shared = HostShared::new(config.max_preparations);
        let (spawn_tx, spawn_rx) = mpsc::unbounded_channel();
        let lifecycle = Lifecycle {
            loops: Arc::new(Mutex::new(Vec::new())),
            shared,
            journal,
            github,
            host,
            config,
            spawn_tx,
            spawn_rx: Mutex::new(Some(spawn_rx)),
            sync_lock: tokio::sync::Mutex::new(()),
        };
        for target in targets {
            lifecycle.start_loop(target);
        }
        lifecycle
    }

    /// Makes the loop of `target`, records it and hands it to `run` (caller holds no lock).
    fn start_loop(&self, target: Target) {
        let lp = Arc::new(TargetLoop::new(
            target,
            Ports {
                journal: self.journal.clone(),
                github: self.github.clone(),
                host: Arc::clone(&self.host),
                clock: SystemClock,
            },
            self.shared.clone(),
            self.config.agent.clone(),
            Arc::clone(&self.config.poll),
        ));
        lock(&self.loops).push(Arc::clone(&lp));
        // The receiver lives as long as `self`; a send cannot fail while `self` exists.
        let _ = self.spawn_tx.send(lp);
    }

    /// The loops running now (serving and retiring), in start order.
    pub fn loops(&self) -> Vec<Arc<RealLoop<S>>> {
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

    /// Re-reads the journal's targets: starts a loop for each new one and retires the loop of
    /// each one gone (it finishes its running jobs; nothing is interrupted). A target removed
    /// and added back before its old loop ended is started again once that loop has ended
    /// (two loops never supervise one target). A failed read changes nothing.
    pub async fn sync_targets(&self) -> Result<TargetChanges, rm_agent::JournalError> {
        let _one_at_a_time = self.sync_lock.lock().await;
        let targets = journal_targets(&self.journal).await?;
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
            self.start_loop(target.clone());
            changes.added.push(target);
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

    /// Stops starting runners host-wide; supervision, conclusion and cleanup go on.
    pub fn pause(&self) {
        self.shared.pause_launching();
    }

    /// Starts runners again, with a pass of every loop now.
    pub fn resume(&self) {
        self.shared.resume_launching();
        for lp in lock(&self.loops).iter() {
            lp.wake();
        }
    }

    pub fn is_paused(&self) -> bool {
        self.shared.is_launching_paused()
    }

    /// Runs every loop (startup recovery first, then passes) and the exit watcher until
    /// `shutdown` turns true; each loop then drains with its configured deadline. Re-reads the
    /// journal's targets every poll interval meanwhile ([`Lifecycle::sync_targets`]). Returns
    /// the drain report of every loop that ended, retired ones included. Call it once.
    pub async fn run(&self, shutdown: watch::Receiver<bool>) -> Vec<(Target, DrainReport)> {
        let Some(mut to_spawn) = lock(&self.spawn_rx).take() else {
            tracing::error!("Lifecycle::run called twice; the second call does nothing");
            return Vec::new();
        };
        let watcher = tokio::spawn(watch_exits(
            self.journal.clone(),
            Arc::clone(&self.host),
            Arc::clone(&self.loops),
            self.config.exit_poll,
        ));
        let mut set: JoinSet<(Arc<RealLoop<S>>, DrainReport)> = JoinSet::new();
        let mut reports = Vec::new();
        let mut stop = shutdown.clone();
        let mut stopping = *stop.borrow();
        let mut next_sync = Instant::now() + self.config.poll.next_interval();
        loop {
            if stopping && set.is_empty() {
                // A loop made but not started yet still recovers, then drains at once.
                match to_spawn.try_recv() {
                    Ok(lp) => spawn_loop(&mut set, lp, shutdown.clone()),
                    Err(_) => break,
                }
                continue;
            }
            tokio::select! {
                Some(lp) = to_spawn.recv() => spawn_loop(&mut set, lp, shutdown.clone()),
                Some(joined) = set.join_next(), if !set.is_empty() => match joined {
                    Ok((lp, report)) => {
                        lock(&self.loops).retain(|l| !Arc::ptr_eq(l, &lp));
                        reports.push((lp.target().clone(), report));
                        if !stopping {
                            // A target added back while its old loop was retiring starts now.
                            if let Err(e) = self.sync_targets().await {
                                tracing::warn!(error = %e, "targets not re-read; keeping the current set");
                            }
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "a target loop task failed"),
                },
                _ = tokio::time::sleep_until(next_sync), if !stopping => {
                    if let Err(e) = self.sync_targets().await {
                        tracing::warn!(error = %e, "targets not re-read; keeping the current set");
                    }
                    next_sync = Instant::now() + self.config.poll.next_interval();
                }
                changed = stop.changed(), if !stopping => {
                    stopping = changed.is_err() || *stop.borrow();
                }
            }
        }
        watcher.abort();
        reports
    }
}

fn spawn_loop<S: PackageSource + 'static>(
    set: &mut JoinSet<(Arc<RealLoop<S>>, DrainReport)>,
    lp: Arc<RealLoop<S>>,
    shutdown: watch::Receiver<bool>,
) {
    set.spawn(async move {
        let report = lp.run(shutdown).await;
        (lp, report)
    });
}

/// Notices runner processes that have ended, so the loop supervising one can conclude it at
/// once instead of at its next poll. Each ended process is reported until marked, then never
/// again (the set forgets attempts no longer live, so it stays small). Shared by
/// [`Lifecycle`]'s exit watcher and the daemon's fleet.
#[derive(Debug, Default)]
pub struct ExitWatch {
    notified: HashSet<(AttemptId, ProcessIdentity)>,
}

impl ExitWatch {
    pub fn new() -> Self {
        ExitWatch::default()
    }

    /// The live attempts whose journalled process has ended and was not marked yet (see
    /// [`ExitWatch::mark`]). A failed journal read reports none; a process that cannot be
    /// inspected counts as running.
    pub async fn ended<J: JournalPort, H: RunnerHostPort>(
        &mut self,
        journal: &J,
        host: &H,
    ) -> Vec<Attempt> {
        let Ok(attempts) = journal.uncleaned_attempts().await else {
            return Vec::new();
        };
        let mut live = HashSet::new();
        let mut ended = Vec::new();
        for attempt in attempts.into_iter().filter(|a| !a.is_terminal()) {
            let Some(process) = attempt.process() else {
                continue;
            };
            let key = (attempt.id().clone(), process);
            let seen = self.notified.contains(&key);
            live.insert(key);
            if seen || host.inspect(process).await.unwrap_or(true) {
                continue;
            }
            ended.push(attempt);
        }
        self.notified.retain(|k| live.contains(k));
        ended
    }

    /// `attempt`'s ended process has been acted on: [`ExitWatch::ended`] skips it from now on.
    pub fn mark(&mut self, attempt: &Attempt) {
        if let Some(process) = attempt.process() {
            self.notified.insert((attempt.id().clone(), process));
        }
    }
}

/// Every `every`, looks for runner processes that have ended ([`ExitWatch`]) and wakes the
/// loop that supervises each once. Ownership comes from each loop's last copy of its
/// policies, so a retiring loop whose policies were deleted is still woken.
async fn watch_exits<S: PackageSource + 'static>(
    journal: JournalAdapter,
    host: Arc<HostAdapter<S>>,
    loops: Arc<Mutex<Vec<Arc<RealLoop<S>>>>>,
    every: Duration,
) {
    let mut exits = ExitWatch::new();
    loop {
        tokio::time::sleep(every).await;
        let ended = exits.ended(&journal, &host).await;
        if ended.is_empty() {
            continue;
        }
        let owner: HashMap<PolicyId, Arc<RealLoop<S>>> = lock(&loops)
            .iter()
            .flat_map(|lp| {
                lp.policies()
                    .into_iter()
                    .map(|p| (p.id(), Arc::clone(lp)))
                    .collect::<Vec<_>>()
            })
            .collect();
        for attempt in &ended {
            if let Some(lp) = owner.get(&attempt.policy_id()) {
                tracing::debug!(attempt = %attempt.id(), "runner process ended; waking its loop");
                lp.wake();
                exits.mark(attempt);
            }
        }
    }
}
