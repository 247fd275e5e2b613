//! Tunables of the loop, with the reference system's values as defaults.

use rm_core::{Arch, LaunchBackoff, Os, Timeouts};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, Mutex, Semaphore};

use crate::events::AgentEvent;
use crate::launch_backoff::HostFitness;

/// Bounded retries with a doubling delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included.
    pub tries: u32,
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// The delay after failed try number `try_number` (1-based): first, doubled each time,
    /// capped.
    pub fn delay_after(&self, try_number: u32) -> Duration {
        let factor = 1u32
            .checked_shl(try_number.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }
}

impl Default for RetryPolicy {
    /// 3 tries, 2 s doubling to 30 s.
    fn default() -> Self {
        RetryPolicy {
            tries: 3,
            first_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub timeouts: Timeouts,
    /// Retries of `generate-jitconfig`.
    pub jit_retry: RetryPolicy,
    /// Retries of a runtime directory that could not be removed.
    pub cleanup_retry: RetryPolicy,
    /// Failed launches of a policy in a row back off, then give up (`repair_required`).
    pub launch_backoff: LaunchBackoff,
    /// After GitHub refuses to delete a dead runner's registration (it still counts the runner
    /// busy), the waits before each next DELETE; after the last refusal the registration is
    /// left for GitHub to remove. The default tries at 0, 1, 4 and 11 minutes: past GitHub's
    /// ~10 minutes for a runner that vanished mid-job, 4 charged requests in all.
    pub removal_retry: Vec<Duration>,
    /// A runner that reported its job completed and exited 0 is concluded without reading
    /// GitHub's inventory (GitHub deletes an ephemeral registration itself); the next read
    /// confirms it gone, and one is made for that once the oldest such runner has waited this
    /// long (see `unconfirmed_removals`). Default 5 minutes: a registration GitHub failed to
    /// remove is offline and takes no job meanwhile.
    pub removal_confirm: Duration,
    /// How long a stopped runner gets before it is killed.
    pub stop_grace: Duration,
    /// A launch slower than this logs a warning.
    pub slow_launch: Duration,
    /// The deadline `run` gives the drain after shutdown (`None`: wait for the last runner).
    pub drain_deadline: Option<Duration>,
    /// How often a draining loop looks again (an exit notification is faster).
    pub drain_poll: Duration,
    /// How stale GitHub's runner inventory may get while every live runner is alive and within
    /// its timeouts (no decision then needs GitHub's view; the listing only advances the
    /// journalled `starting → idle ⇄ busy` bookkeeping). Capped at a quarter of the shorter
    /// timeout, so the idle timeout starts at most that late. Zero: list on every pass.
    pub inventory_refresh: Duration,
    /// The host's OS and architecture: GitHub gives its runners the default labels
    /// `self-hosted`, OS and arch, which demand matching must count (a job asking for
    /// `[self-hosted, <routing label>]` is ours). Set from the host row where one is known.
    pub os: Os,
    pub arch: Arch,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            timeouts: Timeouts::default(),
            jit_retry: RetryPolicy::default(),
            cleanup_retry: RetryPolicy {
                tries: u32::MAX,
                first_delay: Duration::from_secs(5),
                max_delay: Duration::from_secs(300),
            },
            launch_backoff: LaunchBackoff::default(),
            removal_retry: vec![
                Duration::from_secs(60),
                Duration::from_secs(180),
                Duration::from_secs(420),
            ],
            removal_confirm: Duration::from_secs(300),
            stop_grace: Duration::from_secs(10),
            slow_launch: Duration::from_secs(60),
            drain_deadline: Some(Duration::from_secs(60)),
            drain_poll: Duration::from_secs(5),
            inventory_refresh: Duration::from_secs(30),
            os: this_os(),
            arch: this_arch(),
        }
    }
}

impl AgentConfig {
    /// The inventory refresh in force: [`AgentConfig::inventory_refresh`], at most a quarter of
    /// the shorter of the registration and idle timeouts.
    pub fn effective_inventory_refresh(&self) -> Duration {
        let shorter = self.timeouts.registration.min(self.timeouts.idle);
        self.inventory_refresh.min(shorter / 4)
    }
}

/// The OS this build runs on (Linux for a system the runner does not support: the host row,
/// which refuses such systems, overrides it anyway).
fn this_os() -> Os {
    Os::from_std(std::env::consts::OS).unwrap_or(Os::Linux)
}

/// The architecture this build runs on (x64 for one the runner does not support).
fn this_arch() -> Arch {
    Arch::from_std(std::env::consts::ARCH).unwrap_or(Arch::X64)
}

/// How long a loop waits between passes. The daemon wires GitHub's budget planner here; a
/// plain `Duration` is a fixed interval.
pub trait PollInterval: Send + Sync + 'static {
    fn next_interval(&self) -> Duration;
}

impl PollInterval for Duration {
    fn next_interval(&self) -> Duration {
        *self
    }
}

/// What all loops of one host share: the allocation lock (so two targets never overshoot the
/// host capacity together), the preparation slots, the event channel and the host checks'
/// last result.
#[derive(Debug, Clone)]
pub struct HostShared {
    pub allocation_lock: Arc<Mutex<()>>,
    pub preparations: Arc<Semaphore>,
    pub events: broadcast::Sender<AgentEvent>,
    /// The host checks' last result: an unfit host launches nothing.
    pub fitness: Arc<HostFitness>,
}

impl HostShared {
    /// `max_preparations` runtime directories may be materialized at once (at least one).
    pub fn new(max_preparations: usize) -> Self {
        let (events, _) = broadcast::channel(1024);
        HostShared {
            allocation_lock: Arc::new(Mutex::new(())),
            preparations: Arc::new(Semaphore::new(max_preparations.max(1))),
            events,
            fitness: Arc::new(HostFitness::default()),
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<AgentEvent> {
        self.events.subscribe()
    }
}

impl Default for HostShared {
    /// Two concurrent preparations.
    fn default() -> Self {
        HostShared::new(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_double_and_cap() {
        let r = RetryPolicy::default();
        let got: Vec<u64> = (1..=6).map(|n| r.delay_after(n).as_secs()).collect();
        assert_eq!(got, vec![2, 4, 8, 16, 30, 30]);
        assert_eq!(r.delay_after(200), Duration::from_secs(30));
    }
}
