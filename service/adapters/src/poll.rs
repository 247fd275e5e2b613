//! The poll interval from rm-github's budget planner: every target polled as often as the
//! hourly limit (measured per-poll cost, the limit GitHub last reported) allows, between the
//! planner's floor and ceiling.

use rm_agent::PollInterval;
use rm_github::GitHubClient;
use std::time::Duration;

/// GitHub's default hourly limit for a user token, used until GitHub has reported one.
pub const DEFAULT_HOURLY_LIMIT: u64 = 5000;

/// A [`PollInterval`] asking the budget planner before every wait.
pub struct BudgetPoll {
    client: GitHubClient,
    targets: usize,
    /// Overrides the planner's floor (tests poll faster than production may).
    floor: Option<Duration>,
}

impl BudgetPoll {
    /// `targets` loops share the budget.
    pub fn new(client: GitHubClient, targets: usize) -> Self {
        BudgetPoll {
            client,
            targets: targets.max(1),
            floor: None,
        }
    }

    pub fn with_floor(mut self, floor: Duration) -> Self {
        self.floor = Some(floor);
        self
    }
}

impl PollInterval for BudgetPoll {
    fn next_interval(&self) -> Duration {
        let budget = self.client.budget();
        let limit = budget
            .rate
            .as_ref()
            .map(|r| r.limit)
            .unwrap_or(DEFAULT_HOURLY_LIMIT);
        let mut planner = self.client.planner();
        if let Some(floor) = self.floor {
            planner.floor = floor;
        }
        planner.poll_interval(self.targets, limit)
    }
}
