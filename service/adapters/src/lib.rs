//! The real implementations of rm-agent's ports, and the wiring that runs one reconcile loop
//! per target over them:
//!
//! - [`JournalAdapter`]: `JournalPort` over the SQLite journal (blocking pool, one mutex).
//! - [`GitHubAdapter`]: `GitHubPort` over `rm_github::GitHubClient` ([`map_github_error`]).
//! - [`HostAdapter`]: `RunnerHostPort` over `rm_runner::RunnerHost`, with
//!   [`GitHubPackageSource`] feeding its verified package cache.
//! - [`BudgetPoll`]: the poll interval from rm-github's budget planner.
//! - [`Lifecycle`] / [`spawn_target_loops`]: the one supervisor of loops (the daemon's and
//!   `lifecycle-host`'s): the loops, the shared allocation lock, the runner-exit watcher, the
//!   target set following the journal, the poll plan, the host built on the first target.

mod github;
mod host;
mod journal;
mod lifecycle;
mod package_source;
mod poll;
pub mod pool;

pub use github::{map_github_error, GitHubAdapter, PoolSlot, DEFAULT_RUNNER_GROUP};
pub use host::HostAdapter;
pub use journal::JournalAdapter;
pub use lifecycle::{
    journal_targets, spawn_target_loops, ExitWatch, HookReport, HostFactory, HostProvider,
    HostUnavailable, Lifecycle, LifecycleConfig, LifecycleParts, PollPlan, RealLoop, TargetChanges,
    TargetHook,
};
pub use package_source::{version_from_filename, GitHubPackageSource};
pub use poll::{BudgetPoll, DEFAULT_HOURLY_LIMIT};
