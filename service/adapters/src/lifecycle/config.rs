//! How a [`super::Lifecycle`] is tuned and what its owner plugs into it: the poll plan, the
//! runner host (ready, or built when the first target appears) and the hook run before each
//! re-read of the targets.

use crate::host::HostAdapter;
use crate::poll::BudgetPoll;
use rm_agent::{AgentConfig, PollInterval};
use rm_core::Target;
use rm_github::GitHubClient;
use rm_runner::PackageSource;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// How the loops' poll interval follows the number of targets.
#[derive(Clone)]
pub enum PollPlan {
    /// The same interval whatever the number of targets (tests, benchmarks, `--poll-ms`).
    Fixed(Arc<dyn PollInterval>),
    /// Planned again whenever the number of targets changes: all loops share one budget.
    PerTargets(Arc<dyn Fn(usize) -> Arc<dyn PollInterval> + Send + Sync>),
}

impl PollPlan {
    /// GitHub's budget planner ([`BudgetPoll`]) for the current number of targets.
    pub fn budget(client: GitHubClient) -> Self {
        PollPlan::PerTargets(Arc::new(move |targets| {
            Arc::new(BudgetPoll::new(client.clone(), targets)) as Arc<dyn PollInterval>
        }))
    }
}

/// The error a [`HostFactory`] reports (logged; the target's loop starts at a later re-read).
#[derive(Debug, thiserror::Error)]
#[error("the runner host could not be prepared: {0}")]
pub struct HostUnavailable(pub String);

/// Builds the runner host from the first target that appears (its package source asks GitHub
/// through that target).
pub type HostFactory<S> =
    Box<dyn Fn(&Target) -> Result<Arc<HostAdapter<S>>, HostUnavailable> + Send + Sync>;

/// Where the loops' runner host comes from.
pub enum HostProvider<S: PackageSource + 'static> {
    /// Built by the caller (its package cache may already be warm).
    Ready(Arc<HostAdapter<S>>),
    /// Built when the first target appears, so a host without targets opens no network
    /// connection; its package cache is warmed right after.
    OnFirstTarget(HostFactory<S>),
}

/// What the owner does before each re-read of the targets (the daemon deletes the policies of
/// removed targets once they have drained).
pub trait TargetHook: Send + Sync + 'static {
    fn settle(&self) -> Pin<Box<dyn Future<Output = HookReport> + Send + '_>>;
}

/// What one [`TargetHook::settle`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookReport {
    /// The journal's targets changed: re-read them now.
    pub changed: bool,
    /// Work is left: call again after [`LifecycleConfig::hook_poll`].
    pub pending: bool,
}

/// How the lifecycle is tuned.
#[derive(Clone)]
pub struct LifecycleConfig {
    pub agent: AgentConfig,
    /// Runtimes materialized at once, host-wide.
    pub max_preparations: usize,
    /// Time between passes of each loop.
    pub poll: PollPlan,
    /// How often the exit watcher looks at the journalled runner processes, while attempts
    /// are live (an idle host does not look).
    pub exit_poll: Duration,
    /// How often the targets are re-read without being woken: a safety net, since whoever
    /// changes them wakes the lifecycle ([`super::Lifecycle::waker`]).
    pub target_sync: Duration,
    /// How often a [`TargetHook`] with pending work is called again.
    pub hook_poll: Duration,
}

impl LifecycleConfig {
    /// A fixed poll interval.
    pub fn new(poll: Arc<dyn PollInterval>) -> Self {
        LifecycleConfig::planned(PollPlan::Fixed(poll))
    }

    pub fn planned(poll: PollPlan) -> Self {
        LifecycleConfig {
            agent: AgentConfig::default(),
            max_preparations: 2,
            poll,
            exit_poll: Duration::from_secs(1),
            target_sync: Duration::from_secs(30),
            hook_poll: Duration::from_secs(1),
        }
    }
}

/// The interval every loop asks for: the plan's current choice, swapped when the number of
/// targets changes, and never ending before GitHub's next try (an outage or a rate limit):
/// a loop whose pass failed fast does not spin, it comes back when a request may go out.
pub(crate) struct PlannedPoll {
    plan: PollPlan,
    current: RwLock<(usize, Arc<dyn PollInterval>)>,
    client: Option<GitHubClient>,
}

impl PlannedPoll {
    /// Planned for one target until the first re-read says otherwise.
    pub(crate) fn new(plan: PollPlan) -> Self {
        let first = match &plan {
            PollPlan::Fixed(p) => Arc::clone(p),
            PollPlan::PerTargets(f) => f(1),
        };
        PlannedPoll {
            plan,
            current: RwLock::new((1, first)),
            client: None,
        }
    }

    /// Waits at least until `client`'s next try.
    pub(crate) fn gated_by(mut self, client: GitHubClient) -> Self {
        self.client = Some(client);
        self
    }

    /// Plans for `targets` (at least one) if that count differs from the last; true if it did.
    pub(crate) fn replan(&self, targets: usize) -> bool {
        let PollPlan::PerTargets(f) = &self.plan else {
            return false;
        };
        let targets = targets.max(1);
        if self.planned_for() == targets {
            return false;
        }
        let next = f(targets);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = (targets, next);
        true
    }

    pub(crate) fn planned_for(&self) -> usize {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

impl PollInterval for PlannedPoll {
    fn next_interval(&self) -> Duration {
        let current = Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .1,
        );
        let planned = current.next_interval();
        match self.client.as_ref().and_then(GitHubClient::next_try) {
            Some(at) => planned.max(until(at)),
            None => planned,
        }
    }
}

/// From now until `at` (zero when it has passed).
fn until(at: chrono::DateTime<chrono::Utc>) -> Duration {
    (at - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO)
}
