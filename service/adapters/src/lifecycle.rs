//! The lifecycle of a host: one [`TargetLoop`] per target that has a policy in the journal, all
//! sharing one [`HostShared`] (the host-wide allocation lock, preparation slots, events), plus a
//! watcher that notices a runner process has ended and wakes its target's loop at once.

use crate::github::GitHubAdapter;
use crate::host::HostAdapter;
use crate::journal::JournalAdapter;
use rm_agent::{
    AgentConfig, DrainReport, HostShared, JournalPort, PollInterval, Ports, RunnerHostPort,
    SystemClock, TargetLoop,
};
use rm_core::{AttemptId, PolicyId, ProcessIdentity, Target};
use rm_runner::PackageSource;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

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

/// The loops of one host and what they share.
pub struct Lifecycle<S: PackageSource + 'static> {
    loops: Vec<Arc<RealLoop<S>>>,
    shared: HostShared,
    journal: JournalAdapter,
    host: Arc<HostAdapter<S>>,
    exit_poll: Duration,
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

impl<S: PackageSource + 'static> Lifecycle<S> {
    pub fn new(
        targets: Vec<Target>,
        journal: JournalAdapter,
        github: GitHubAdapter,
        host: Arc<HostAdapter<S>>,
        config: LifecycleConfig,
    ) -> Self {
        let shared = HostShared::new(config.max_preparations);
        let loops = targets
            .into_iter()
            .map(|target| {
                Arc::new(TargetLoop::new(
                    target,
                    Ports {
                        journal: journal.clone(),
                        github: github.clone(),
                        host: Arc::clone(&host),
                        clock: SystemClock,
                    },
                    shared.clone(),
                    config.agent.clone(),
                    Arc::clone(&config.poll),
                ))
            })
            .collect();
        Lifecycle {
            loops,
            shared,
            journal,
            host,
            exit_poll: config.exit_poll,
        }
    }

    pub fn loops(&self) -> &[Arc<RealLoop<S>>] {
        &self.loops
    }

    /// The allocation lock, preparation slots and the event channel (`subscribe()`).
    pub fn shared(&self) -> &HostShared {
        &self.shared
    }

    /// Runs every loop (startup recovery first, then passes) and the exit watcher until
    /// `shutdown` turns true; each loop then drains with its configured deadline. Returns each
    /// target's drain report.
    pub async fn run(&self, shutdown: watch::Receiver<bool>) -> Vec<(Target, DrainReport)> {
        let mut set = JoinSet::new();
        for lp in &self.loops {
            let lp = Arc::clone(lp);
            let rx = shutdown.clone();
            set.spawn(async move {
                let report = lp.run(rx).await;
                (lp.target().clone(), report)
            });
        }
        let watcher = tokio::spawn(watch_exits(
            self.journal.clone(),
            Arc::clone(&self.host),
            self.loops
                .iter()
                .map(|lp| (lp.target().clone(), lp.exit_notifier()))
                .collect(),
            self.exit_poll,
        ));
        let mut reports = Vec::new();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(r) => reports.push(r),
                Err(e) => tracing::error!(error = %e, "a target loop task failed"),
            }
        }
        watcher.abort();
        reports
    }
}

/// Every `every`, inspects the journalled process of each live attempt; when one has ended,
/// wakes the loop of its target once (the loop concludes it in its next pass instead of at the
/// next poll).
async fn watch_exits<S: PackageSource + 'static>(
    journal: JournalAdapter,
    host: Arc<HostAdapter<S>>,
    notifiers: Vec<(Target, Arc<Notify>)>,
    every: Duration,
) {
    let mut notified: HashSet<(AttemptId, ProcessIdentity)> = HashSet::new();
    loop {
        tokio::time::sleep(every).await;
        let (Ok(attempts), Ok(policies)) = (
            journal.uncleaned_attempts().await,
            journal.with(|j| j.list_policies()).await,
        ) else {
            continue;
        };
        let target_of: HashMap<PolicyId, Target> = policies
            .into_iter()
            .map(|p| (p.id(), p.target().clone()))
            .collect();
        let mut live = HashSet::new();
        for attempt in attempts.iter().filter(|a| !a.is_terminal()) {
            let Some(process) = attempt.process() else {
                continue;
            };
            let key = (attempt.id().clone(), process);
            live.insert(key.clone());
            if notified.contains(&key) || host.inspect(process).await.unwrap_or(true) {
                continue;
            }
            let Some(target) = target_of.get(&attempt.policy_id()) else {
                continue;
            };
            if let Some((_, notify)) = notifiers.iter().find(|(t, _)| t == target) {
                tracing::debug!(attempt = %attempt.id(), pid = process.pid, "runner process ended; waking its loop");
                notify.notify_one();
                notified.insert(key);
            }
        }
        notified.retain(|k| live.contains(k));
    }
}
