//! News between a pool's hosts, heard through PostgreSQL's `LISTEN`/`NOTIFY`: "look at this
//! target now" instead of at the next poll, so a pool picks a job up about as fast as one host
//! holding all the room would. Two things are news:
//!
//! - a reader publishes a queue holding jobs no host has claimed (it has no room for them): a
//!   host with room starts a runner now;
//! - a host's runner ends: room is free, and the target's reader reads GitHub's queue now, as a
//!   single host does when one of its runners ends (the other hosts' look costs the database a
//!   read or two and GitHub nothing).
//!
//! The notification travels on the connection every host already holds; a lost one (the
//! connection dropped) costs only that one poll's wait, since hosts go on polling.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use tokio::sync::Notify;

/// The channel the hosts notify on. Its payload is `"<host id> <target>"`: host ids hold no
/// spaces (see the join checks), so the first space splits them.
pub const CHANNEL: &str = "rm_pool_news";

/// The payload of the notification `host_id` sends about `target`.
pub fn payload(host_id: &str, target: &str) -> String {
    format!("{host_id} {target}")
}

/// Targets worth a look, as heard since the last [`News::next`]. Shared by every
/// connection a host makes over time (a reconnect keeps the same listener).
#[derive(Debug, Default)]
pub struct News {
    /// This host's id: its own notifications are not news to it.
    host_id: String,
    heard: Mutex<BTreeSet<String>>,
    arrived: Notify,
}

impl News {
    pub fn new(host_id: impl Into<String>) -> News {
        News {
            host_id: host_id.into(),
            ..News::default()
        }
    }

    /// A notification's payload arrived; one that is not ours, or malformed, is dropped.
    pub fn heard(&self, payload: &str) {
        let Some((host, target)) = payload.split_once(' ') else {
            return;
        };
        if host == self.host_id || target.is_empty() {
            return;
        }
        let fresh = self
            .heard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(target.to_owned());
        if fresh {
            self.arrived.notify_one();
        }
    }

    /// The targets heard of since the last call, waiting until there is one. Many
    /// notifications about one target before the call come out as one.
    pub async fn next(&self) -> Vec<String> {
        loop {
            let taken =
                std::mem::take(&mut *self.heard.lock().unwrap_or_else(PoisonError::into_inner));
            if !taken.is_empty() {
                return taken.into_iter().collect();
            }
            self.arrived.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn others_news_comes_out_once_per_target_and_our_own_never() {
        let news = News::new("a");
        news.heard(&payload("a", "o/r")); // ours
        news.heard(&payload("b", "o/r"));
        news.heard(&payload("c", "o/r"));
        news.heard(&payload("b", "org"));
        news.heard("no-space"); // malformed
        news.heard("b "); // no target
        assert_eq!(news.next().await, vec!["o/r".to_owned(), "org".to_owned()]);
        // Nothing more: the next call waits.
        let waited = tokio::time::timeout(Duration::from_millis(50), news.next()).await;
        assert!(waited.is_err(), "nothing was heard, yet next() returned");
        news.heard(&payload("b", "o/r"));
        assert_eq!(news.next().await, vec!["o/r".to_owned()]);
    }
}
