//! The health watcher: publishes the status again whenever GitHub's reachability changes (the
//! client signals an outage beginning, each longer wait, its end, and a rate limit; nothing is
//! polled), and during an outage sends its probes: a free `GET /rate_limit` each time one is
//! due. The first answer ends the outage for every target and wakes every loop for a poll at
//! once, so a job queued meanwhile starts seconds after GitHub is back.

use super::state::Daemon;
use std::sync::Arc;
use std::time::Duration;

/// The shortest wait between two looks at an outage.
const MIN_WAIT: Duration = Duration::from_millis(200);

/// Publishes the status again whenever GitHub's health changes: the client signals an outage
/// beginning, each longer wait, its end, and a rate limit (no polling). A rate limit ends by
/// itself, so that one is looked at again when it lifts; an outage is probed when its next
/// try comes.
pub async fn watch_health(daemon: Arc<Daemon>) {
    let mut changes = daemon.client.health_changes();
    let mut last = daemon.client.health();
    loop {
        let next = match (&last.state, last.next_try) {
            (
                rm_github::HealthState::RateLimited | rm_github::HealthState::Unreachable,
                Some(at),
            ) => (at - chrono::Utc::now())
                .to_std()
                .unwrap_or_default()
                // A probe already on the wire keeps the time in the past: no busy loop.
                .max(MIN_WAIT),
            _ => Duration::MAX,
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(next), if next != Duration::MAX => {}
        }
        if last.state == rm_github::HealthState::Unreachable {
            if let Some(answered) = daemon.client.probe_outage().await {
                tracing::debug!(answered, "outage probe");
            }
        }
        let now = daemon.client.health();
        if now != last {
            tracing::info!(state = ?now.state, failures = now.consecutive_failures, next_try = ?now.next_try, "GitHub health changed");
            if last.state == rm_github::HealthState::Unreachable
                && now.state == rm_github::HealthState::Ok
            {
                // Every target polls now, not at its next interval.
                daemon.wake.notify_one();
            }
            last = now;
            daemon.publish_status().await;
        }
    }
}
