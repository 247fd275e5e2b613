//! The loops of this host: one [`TargetLoop`] per target that has a policy in the journal,
//! all sharing one [`HostShared`] (allocation lock, preparation slots, events).
//!
//! The set of loops follows the journal while the daemon runs: a target added through the API
//! gets a loop at the next tick; a removed target was first disabled (its loop drained it
//! through ordinary supervision) and its policy deleted only when nothing of it is left, so
//! stopping its loop loses no running job. A host without targets builds no runner host and
//! no package source: it opens no network connection.

use super::gate::GatedJournal;
use super::removals::Removals;
use rm_adapters::{
    journal_targets, BudgetPoll, ExitWatch, GitHubAdapter, GitHubPackageSource, HostAdapter,
    JournalAdapter,
};
use rm_agent::{
    AgentConfig, DrainReport, HostShared, PollInterval, Ports, SystemClock, TargetLoop,
};
use rm_core::Target;
use rm_github::GitHubClient;
use rm_runner::{Platform, RunnerHost, RunnerHostConfig};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

type Host = Arc<HostAdapter<GitHubPackageSource>>;
type Loop = TargetLoop<GatedJournal, GitHubAdapter, Host, SystemClock>;

/// What the fleet is built from.
pub struct FleetParts {
    pub journal: JournalAdapter,
    pub gated: GatedJournal,
    pub client: GitHubClient,
    pub host_config: RunnerHostConfig,
    pub agent: AgentConfig,
    /// A fixed poll interval (tests); `None`: GitHub's budget planner.
    pub poll: Option<Duration>,
    /// How often ended runner processes are looked for (and the target set re-read).
    pub tick: Duration,
    pub shared: HostShared,
    /// Notified by the API after a change: re-read the targets and wake every loop.
    pub wake: Arc<Notify>,
    pub removals: Arc<Removals>,
}

struct Running {
    target: Target,
    lp: Arc<Loop>,
    stop: watch::Sender<bool>,
    task: JoinHandle<DrainReport>,
}

/// The poll interval of every loop: the budget planner for the current number of targets.
struct FleetPoll {
    fixed: Option<Duration>,
    planner: RwLock<Option<Arc<BudgetPoll>>>,
}

impl PollInterval for FleetPoll {
    fn next_interval(&self) -> Duration {
        if let Some(d) = self.fixed {
            return d;
        }
        let planner = self
            .planner
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        planner.map_or(Duration::from_secs(60), |p| p.next_interval())
    }
}

/// Runs the loops until `stop` turns true, then lets each drain with the agent's deadline
/// (`AgentConfig::drain_deadline`). Returns each target's drain report.
pub async fn run(parts: FleetParts, mut stop: watch::Receiver<bool>) -> Vec<(Target, DrainReport)> {
    let poll = Arc::new(FleetPoll {
        fixed: parts.poll,
        planner: RwLock::new(None),
    });
    let mut host: Option<Host> = None;
    let mut running: Vec<Running> = Vec::new();
    let mut stopping: Vec<JoinHandle<DrainReport>> = Vec::new();
    let mut exits = ExitWatch::new();
    let mut first = true;
    loop {
        if *stop.borrow() {
            break;
        }
        parts.removals.settle(&parts.journal).await;
        sync(&parts, &poll, &mut host, &mut running, &mut stopping, first).await;
        first = false;
        if let Some(h) = &host {
            watch_exits(&parts.journal, h, &running, &mut exits).await;
        }
        stopping.retain(|t| !t.is_finished());
        tokio::select! {
            () = parts.wake.notified() => {
                for r in &running {
                    r.lp.exit_notifier().notify_one();
                }
            }
            () = tokio::time::sleep(parts.tick) => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    tracing::info!(loops = running.len(), "stopping the loops: draining");
    for r in &running {
        let _ = r.stop.send(true);
    }
    let mut reports = Vec::new();
    for r in running {
        match r.task.await {
            Ok(report) => reports.push((r.target, report)),
            Err(e) => tracing::error!(error = %e, "a target loop task failed"),
        }
    }
    for t in stopping {
        let _ = t.await;
    }
    reports
}

/// Starts a loop for every new target and stops the loops of targets gone from the journal.
async fn sync(
    parts: &FleetParts,
    poll: &Arc<FleetPoll>,
    host: &mut Option<Host>,
    running: &mut Vec<Running>,
    stopping: &mut Vec<JoinHandle<DrainReport>>,
    startup: bool,
) {
    let targets = match journal_targets(&parts.journal).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "targets could not be read; keeping the loops as they are");
            return;
        }
    };
    let mut i = 0;
    while i < running.len() {
        if targets.contains(&running[i].target) {
            i += 1;
            continue;
        }
        let gone = running.swap_remove(i);
        tracing::info!(gh_target = %gone.target, "target removed: stopping its loop");
        let _ = gone.stop.send(true);
        stopping.push(gone.task);
    }
    let new: Vec<Target> = targets
        .iter()
        .filter(|t| !running.iter().any(|r| &r.target == *t))
        .cloned()
        .collect();
    if new.is_empty() {
        return;
    }
    if let Ok(mut g) = poll.planner.write() {
        *g = Some(Arc::new(BudgetPoll::new(
            parts.client.clone(),
            targets.len(),
        )));
    }
    let mut built = Vec::new();
    for target in new {
        let h = match host {
            Some(h) => Arc::clone(h),
            None => match build_host(parts, &target) {
                Ok(h) => {
                    let warm = Arc::clone(&h);
                    tokio::spawn(async move {
                        if let Err(e) = warm.package().await {
                            tracing::warn!(error = %e, "runner package not cached yet; launches will try again");
                        }
                    });
                    *host = Some(Arc::clone(&h));
                    h
                }
                Err(e) => {
                    tracing::error!(error = %e, "the runner host could not be prepared; retrying");
                    return;
                }
            },
        };
        built.push(Arc::new(TargetLoop::new(
            target,
            Ports {
                journal: parts.gated.clone(),
                github: GitHubAdapter::new(parts.client.clone()),
                host: h,
                clock: SystemClock,
            },
            parts.shared.clone(),
            parts.agent.clone(),
            Arc::clone(poll) as Arc<dyn PollInterval>,
        )));
    }
    if startup {
        // Startup recovery of every target before any loop's first launch.
        let mut set = tokio::task::JoinSet::new();
        for lp in &built {
            let lp = Arc::clone(lp);
            set.spawn(async move { lp.recover().await });
        }
        while set.join_next().await.is_some() {}
        tracing::info!(targets = built.len(), "startup recovery done");
    }
    for lp in built {
        let (tx, rx) = watch::channel(false);
        let target = lp.target().clone();
        tracing::info!(gh_target = %target, "starting the loop of a target");
        let task = tokio::spawn(drive(
            Arc::clone(&lp),
            rx,
            parts.agent.drain_deadline,
            Arc::clone(poll),
        ));
        running.push(Running {
            target,
            lp,
            stop: tx,
            task,
        });
    }
}

/// Passes at the poll interval (or at once when woken) until `stop`, then the drain. Like
/// `TargetLoop::run`, except that recovery is left to the first pass when the fleet did not
/// already run it (so a recovered loop is not recovered twice).
async fn drive(
    lp: Arc<Loop>,
    mut stop: watch::Receiver<bool>,
    deadline: Option<Duration>,
    poll: Arc<FleetPoll>,
) -> DrainReport {
    let wake = lp.exit_notifier();
    loop {
        if *stop.borrow() {
            break;
        }
        lp.pass().await;
        let wait = poll.next_interval();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = wake.notified() => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    lp.run_until_drained(deadline).await
}

fn build_host(parts: &FleetParts, any_target: &Target) -> Result<Host, String> {
    let source = GitHubPackageSource::new(parts.client.clone(), any_target.clone())
        .map_err(|e| e.to_string())?;
    let platform = Platform::current()
        .ok_or_else(|| "GitHub publishes no runner package for this platform".to_string())?;
    let host = RunnerHost::open(parts.host_config.clone(), source).map_err(|e| e.to_string())?;
    Ok(Arc::new(HostAdapter::new(host, platform)))
}

/// Wakes the loops once per runner process seen ended, so its conclusion does not wait for the
/// poll interval.
async fn watch_exits(
    journal: &JournalAdapter,
    host: &Host,
    running: &[Running],
    exits: &mut ExitWatch,
) {
    let ended = exits.ended(journal, host).await;
    for attempt in &ended {
        tracing::debug!(attempt = %attempt.id(), "runner process ended; waking the loops");
        exits.mark(attempt);
    }
    if !ended.is_empty() {
        for r in running {
            r.lp.exit_notifier().notify_one();
        }
    }
}
