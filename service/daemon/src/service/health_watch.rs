//! The health watcher: publishes the status again whenever GitHub's reachability changes (the
//! client signals an outage beginning, each longer wait, its end, and a rate limit; nothing is
//! polled).

use super::state::Daemon;
use std::sync::Arc;
use std::time::Duration;

/// Publishes the status again whenever GitHub's health changes: the client signals an outage
/// beginning, each longer wait, its end, and a rate limit (no polling). A rate limit ends by
/// itself, so that one is looked at again when it lifts.
pub async fn watch_health(daemon: Arc<Daemon>) {
    let mut changes = daemon.client.health_changes();
    let mut last = daemon.client.health();
    loop {
        let lifts = match (&last.state, last.next_try) {
            (rm_github::HealthState::RateLimited, Some(at)) => {
                (at - chrono::Utc::now()).to_std().unwrap_or_default()
            }
            _ => Duration::MAX,
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(lifts), if lifts != Duration::MAX => {}
        }
        let now = daemon.client.health();
        if now != last {
            tracing::info!(state = ?now.state, failures = now.consecutive_failures, next_try = ?now.next_try, "GitHub health changed");
            last = now;
            daemon.publish_status().await;
        }
    }
}
