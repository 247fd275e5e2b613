//! The pool's tasks: the heartbeat that keeps this host's lease and tells the pool its room
//! and runners, and the news listener that wakes a target's loop when another host tells of
//! it. The link itself (joining, leaving, the connection) is `pool_link`'s.

use crate::pool_link::{status_of, Room, NEWS_CHECK};
use crate::state::Daemon;
use rm_agent::JournalPort;
use rm_core::Target;
use rm_pool::Running;
use rm_proto::PoolStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The host's capacity, its free slots and its runners now (the pool's view of this host).
pub(crate) async fn room(daemon: &Daemon) -> Room {
    let capacity = daemon.journal.host_capacity().await.unwrap_or(0);
    let active = daemon
        .journal
        .active_counts()
        .await
        .map(|c| c.total)
        .unwrap_or(capacity);
    let read = daemon
        .journal
        .with(|j| Ok((j.uncleaned_attempts()?, j.list_policies()?)))
        .await;
    let running = match read {
        Ok((attempts, policies)) => Some(
            attempts
                .iter()
                .map(|a| {
                    let job = crate::status::job_of(&daemon.client, a.runner_name());
                    Running {
                        runner: a.runner_name().to_string(),
                        target: policies
                            .iter()
                            .find(|p| p.id() == a.policy_id())
                            .map(|p| p.target().to_string())
                            .unwrap_or_default(),
                        job_id: job.as_ref().and_then(|j| j.id),
                        job_name: job.and_then(|j| j.name),
                    }
                })
                .collect(),
        ),
        Err(error) => {
            tracing::debug!(%error, "pool heartbeat: this host's runners");
            None
        }
    };
    Room {
        capacity,
        free: capacity.saturating_sub(active),
        running,
    }
}

/// Keeps this host's lease: a heartbeat every third of the lease while it is in a pool (and
/// the database is asked again after a failure, so launching resumes by itself), and sooner,
/// within [`NEWS_CHECK`], when its runners changed or a runner's job was learnt, so the pool's
/// "who runs what" and free room follow the jobs; watchers hear when the pool's view changes.
pub async fn heartbeat(daemon: Arc<Daemon>) {
    let every = daemon.pool.lease / 3;
    let mut last: Option<PoolStatus> = None;
    let mut last_beat: Option<Instant> = None;
    let mut jobs_seen = daemon.client.runner_jobs_version();
    loop {
        if let Some(pool) = daemon.pool.pool() {
            let jobs_now = daemon.client.runner_jobs_version();
            let news = daemon.pool.take_news() || jobs_now != jobs_seen;
            if news || last_beat.is_none_or(|t| t.elapsed() >= every) {
                jobs_seen = jobs_now;
                last_beat = Some(Instant::now());
                let room = room(&daemon).await;
                if let Err(error) = pool
                    .heartbeat(room.capacity, room.free, room.running.as_deref())
                    .await
                {
                    tracing::debug!(%error, "pool heartbeat");
                }
                let now = status_of(&pool);
                if last.as_ref() != Some(&now) {
                    let was_down = last
                        .as_ref()
                        .is_some_and(|l| matches!(l.state.as_str(), "unreachable" | "refused"));
                    if was_down && now.state == "connected" {
                        // Back: pooled launches were held meanwhile; look again now.
                        daemon.wake.notify_one();
                    }
                    last = Some(now);
                    daemon.publish_status().await;
                }
            }
        } else {
            last = None;
            last_beat = None;
        }
        tokio::time::sleep(NEWS_CHECK.min(every)).await;
    }
}

/// How long the news listener waits before looking whether the pool changed (joined, left).
const NEWS_RELOOK: Duration = Duration::from_secs(1);

/// Wakes a target's loop as soon as another host tells news of it (heard through the pool
/// connection, see [`rm_pool::news`]): its reader published queued jobs no host claimed, so a
/// host with room starts a runner now; or one of its runners ended, so the target's reader
/// reads GitHub's queue now, as a single host does at its own runners' ends. On a host that
/// is not the reader a pass costs the database a read or two and GitHub nothing.
pub async fn news(daemon: Arc<Daemon>) {
    loop {
        let Some(pool) = daemon.pool.pool() else {
            tokio::time::sleep(NEWS_RELOOK).await;
            continue;
        };
        let news = pool.news();
        drop(pool);
        let Ok(targets) = tokio::time::timeout(NEWS_RELOOK, news.next()).await else {
            continue;
        };
        let Some(fleet) = daemon.fleet.get() else {
            continue;
        };
        for name in targets {
            match name.parse::<Target>() {
                Ok(target) => {
                    if fleet.wake(&target) {
                        tracing::debug!(gh_target = %target, "pool news from another host; looking now");
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, target = %name, "pool news about an unknown target")
                }
            }
        }
    }
}
