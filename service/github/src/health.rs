//! Whether GitHub answers this host, as the client's two gates see it: the outage gate (5xx
//! and no answer, [`crate::outage`]) and the rate gate (primary and secondary limits). One
//! value for the whole host, with a cheap change signal so the service publishes a change
//! without polling.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// GitHub's reachability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// The last request got an answer (or none was sent yet).
    Ok,
    /// 5xx answers or no answer: every request waits for `next_try`.
    Unreachable,
    /// A rate limit: nothing is sent before `next_try`.
    RateLimited,
}

/// What `status` shows about GitHub's reachability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Health {
    pub state: HealthState,
    /// Since when GitHub has not answered (or has limited this host).
    pub since: Option<DateTime<Utc>>,
    /// When the next request may go out.
    pub next_try: Option<DateTime<Utc>>,
    /// The last failure (or the kind of limit), in words.
    pub detail: Option<String>,
    /// Failed tries in a row (0 unless unreachable).
    pub consecutive_failures: u32,
}

impl Health {
    /// GitHub answers.
    pub fn ok() -> Self {
        Health {
            state: HealthState::Ok,
            since: None,
            next_try: None,
            detail: None,
            consecutive_failures: 0,
        }
    }
}

impl crate::client::GitHubClient {
    /// GitHub's reachability now. An outage wins over a rate limit (nothing answers then).
    pub fn health(&self) -> Health {
        self.health_at(Utc::now())
    }

    pub(crate) fn health_at(&self, now: DateTime<Utc>) -> Health {
        let transport = &self.inner.transport;
        let outage = transport.outage_view();
        if outage.consecutive_failures > 0 {
            return Health {
                state: HealthState::Unreachable,
                since: outage.since,
                next_try: outage.next_try,
                detail: outage.detail,
                consecutive_failures: outage.consecutive_failures,
            };
        }
        match transport.rate_pause(now) {
            Some(p) => Health {
                state: HealthState::RateLimited,
                since: Some(p.since),
                next_try: Some(p.until),
                detail: Some(
                    if p.secondary {
                        "secondary rate limit"
                    } else {
                        "hourly rate limit used up"
                    }
                    .to_string(),
                ),
                consecutive_failures: 0,
            },
            None => Health::ok(),
        }
    }

    /// The earliest time any request may go out, when that is later than now (an outage or a
    /// rate limit): a loop's next pass should not come before it.
    pub fn next_try(&self) -> Option<DateTime<Utc>> {
        let now = Utc::now();
        self.health_at(now).next_try.filter(|t| *t > now)
    }

    /// Changes (its value is a counter) whenever the health may have changed: an outage began,
    /// its delay grew, it ended, or a rate limit closed the gate. A rate limit ending is not
    /// signalled: wait for the `next_try` of the last [`GitHubClient::health`].
    ///
    /// [`GitHubClient::health`]: crate::GitHubClient::health
    pub fn health_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.transport.health_signal.subscribe()
    }
}
