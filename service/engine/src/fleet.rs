//! The daemon's loops: an [`rm_adapters::Lifecycle`] over the gated journal (pause/upgrade
//! hold launching), with the runner host built when the first target appears (a host without
//! targets builds no runner host and no package source: it opens no network connection), the
//! poll interval planned by GitHub's budget for the current number of targets, and the removal
//! hook (a removed target's policy is deleted once drained, then its loop ends).

use super::gate::GatedJournal;
use super::removals::{RemovalHook, Removals};
use rm_adapters::{
    GitHubAdapter, GitHubPackageSource, HostAdapter, HostProvider, HostUnavailable, JournalAdapter,
    Lifecycle, LifecycleConfig, LifecycleParts, PollPlan,
};
use rm_agent::AgentConfig;
use rm_core::Target;
use rm_github::GitHubClient;
use rm_runner::{Platform, RunnerHost, RunnerHostConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The daemon's lifecycle.
pub type Fleet = Lifecycle<GitHubPackageSource, GatedJournal>;

/// What the fleet is built from.
pub struct FleetParts {
    pub journal: JournalAdapter,
    pub gated: GatedJournal,
    pub client: GitHubClient,
    pub host_config: RunnerHostConfig,
    pub agent: AgentConfig,
    /// A fixed poll interval (tests); `None`: GitHub's budget planner.
    pub poll: Option<Duration>,
    /// How often ended runner processes are looked for (while runners are live) and a pending
    /// removal is settled.
    pub tick: Duration,
    /// Notified by the API after a change: re-read the targets and wake every loop.
    pub wake: Arc<Notify>,
    pub removals: Arc<Removals>,
    /// The pool this host joined (set and cleared at run time).
    pub pool: rm_adapters::PoolSlot,
}

/// The lifecycle of this host (run it with [`Lifecycle::run`]; it drains with
/// `AgentConfig::drain_deadline` on shutdown and returns each target's drain report).
pub fn build(parts: FleetParts) -> Fleet {
    let poll = match parts.poll {
        Some(fixed) => PollPlan::Fixed(Arc::new(fixed)),
        None => PollPlan::budget(parts.client.clone()),
    };
    let mut config = LifecycleConfig::planned(poll);
    config.agent = parts.agent;
    config.exit_poll = parts.tick;
    config.hook_poll = parts.tick;
    let client = parts.client.clone();
    let host_config = parts.host_config;
    Lifecycle::with_parts(LifecycleParts {
        journal: parts.journal.clone(),
        loop_journal: parts.gated,
        github: GitHubAdapter::new(parts.client).with_pool(parts.pool),
        host: HostProvider::OnFirstTarget(Box::new(move |target: &Target| {
            build_host(&client, &host_config, target)
        })),
        config,
        hook: Some(Arc::new(RemovalHook::new(parts.removals, parts.journal))),
        wake: parts.wake,
    })
}

fn build_host(
    client: &GitHubClient,
    host_config: &RunnerHostConfig,
    any_target: &Target,
) -> Result<Arc<HostAdapter<GitHubPackageSource>>, HostUnavailable> {
    let source = GitHubPackageSource::new(client.clone(), any_target.clone())
        .map_err(|e| HostUnavailable(e.to_string()))?;
    let platform = Platform::current().ok_or_else(|| {
        HostUnavailable("GitHub publishes no runner package for this platform".into())
    })?;
    let host = RunnerHost::open(host_config.clone(), source)
        .map_err(|e| HostUnavailable(e.to_string()))?;
    Ok(Arc::new(HostAdapter::new(host, platform)))
}
