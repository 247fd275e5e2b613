//! The runner lifecycle and the per-target reconcile loop, written against ports so the
//! daemon plugs in the journal, GitHub and the runner host, and tests plug in fakes and a
//! [`FakeClock`].
//!
//! A [`TargetLoop`] per target: startup recovery first, then passes at the poll interval (or
//! at once when a runner exits). Each pass re-reads the policies, supervises the target's
//! attempts with `rm_core::decide`, polls demand and launches what `rm_core::allocate` grants,
//! journal first. Everything it does is broadcast as an [`AgentEvent`].

mod clock;
mod config;
mod events;
pub mod failpoint;
mod ids;
mod launch;
mod launch_backoff;
mod ports;
mod refused_removals;
mod secret;
mod supervise;
mod target_loop;
mod unconfirmed_removals;
mod why;

pub use clock::{Clock, FakeClock, SystemClock};
pub use config::{AgentConfig, HostShared, PollInterval, RetryPolicy};
pub use events::{AgentEvent, EventKind, LaunchCause, LaunchFailure, LaunchTimings, RecoveredFrom};
pub use launch_backoff::HostFitness;
pub use ports::{
    ActiveCounts, DeleteOutcome, DemandSnapshot, GhError, GitHubPort, HostError, Jit, JournalError,
    JournalPort, PoolClaim, RunnerHostPort, RunnerStatus, RunnerView, ScrubError, SpawnFor,
};
pub use secret::JitSecret;
pub use target_loop::{DrainReport, PassReport, Ports, TargetLoop};
