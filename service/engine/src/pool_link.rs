//! The pool of hosts this host joined: its URL (without the password), label and host name in
//! the journal's meta, the password in the credential store (its own entry), the connection
//! the GitHub adapter places pooled targets through, and the heartbeat that keeps this host's
//! lease and tells the pool how much room it has.

use super::state::{Changed, Daemon};
use crate::meta;
use rm_adapters::pool::{Pool, PoolConfig, PoolHealth};
use rm_adapters::PoolSlot;
use rm_agent::JournalPort;
use rm_core::{Label, Target};
use rm_credstore::{SecretStore, StoredCredential};
use rm_pool::{PoolUrl, Running, StoreSettings};
use rm_proto::{ApiError, PoolClaimStatus, PoolHostStatus, PoolJoin, PoolRunnerStatus, PoolStatus};
use secrecy::SecretString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use std::time::Instant;

/// The pool's password's own entry in the credential store (beside the GitHub credential).
pub const SECRET_ACCOUNT: &str = "pool-password";
/// Its file, for the file store.
pub const SECRET_FILE: &str = "pool-credential.json";

/// This host's link to its pool (none until it joins).
pub struct PoolLink {
    pub slot: PoolSlot,
    secret: Box<dyn SecretStore>,
    pub lease: Duration,
    /// A runner of this host changed (started, took a job, ended) since the last heartbeat:
    /// the next one goes out within [`NEWS_CHECK`], not a third of the lease later.
    news: AtomicBool,
}

/// How often the heartbeat task looks for news to tell the pool (a flag and a counter: no
/// database statement unless there is news or a heartbeat is due).
const NEWS_CHECK: Duration = Duration::from_secs(1);

fn bad(what: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(what.to_string())
}

/// A host name as the pool shows it: letters, digits, `.`, `_`, `-`, at most 64.
fn check_host_id(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the host name '{name}' is not usable in a pool: give 1 to 64 letters, digits, '.', \
             '_' or '-' with `--host NAME`"
        ))
    }
}

impl PoolLink {
    pub fn new(secret: Box<dyn SecretStore>, lease: Duration) -> PoolLink {
        PoolLink {
            slot: PoolSlot::default(),
            secret,
            lease,
            news: AtomicBool::new(false),
        }
    }

    /// One of this host's runners changed: the pool hears of it at the next news check.
    pub fn runners_changed(&self) {
        self.news.store(true, Ordering::Relaxed);
    }

    pub fn pool(&self) -> Option<Arc<Pool>> {
        self.slot
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, pool: Option<Arc<Pool>>) {
        *self.slot.write().unwrap_or_else(PoisonError::into_inner) = pool;
    }

    fn settings(&self, host_id: &str) -> StoreSettings {
        let mut settings = StoreSettings::new(host_id);
        settings.lease = self.lease;
        // A claim's runner is journalled milliseconds after the claim: a lease is ample.
        settings.orphan_grace = self.lease;
        settings
    }

    /// The pool kept in the journal, if this host joined one (a damaged entry is logged and
    /// the host serves alone until it joins again).
    pub async fn restore(&self, daemon: &Daemon) {
        let stored = daemon
            .journal
            .with(|j| {
                Ok((
                    j.meta_get(meta::POOL_URL)?,
                    j.meta_get(meta::POOL_LABEL)?,
                    j.meta_get(meta::POOL_HOST)?,
                ))
            })
            .await;
        let (url, label, host) = match stored {
            Ok((Some(url), Some(label), Some(host))) => (url, label, host),
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(%error, "the pool settings are unreadable: serving alone");
                return;
            }
        };
        let url = match PoolUrl::parse_stored(&url) {
            Ok(url) => url,
            Err(error) => {
                tracing::warn!(%error, "the stored pool URL is unusable: serving alone until `runner-manager pool join`");
                return;
            }
        };
        let password = match self.secret.load() {
            Ok(c) => c.map(|c| c.access_token),
            Err(error) => {
                tracing::warn!(%error, "the pool's password cannot be read: joining without it");
                None
            }
        };
        tracing::info!(address = %url.address(), %label, host = %host, "pool");
        self.set(Some(Arc::new(Pool::new(PoolConfig {
            url,
            password,
            label,
            settings: self.settings(&host),
        }))));
    }

    /// Joins the pool `join` names: checked here, then against the database (its schema set
    /// up or migrated, this host's first heartbeat) before anything is kept.
    pub async fn join(&self, daemon: &Arc<Daemon>, join: PoolJoin) -> Result<PoolStatus, ApiError> {
        if let Some(current) = self.pool() {
            return Err(ApiError::conflict(format!(
                "this host is in the pool '{}' at {} already: `runner-manager pool leave` first",
                current.label(),
                current.address()
            )));
        }
        let (url, in_url) = PoolUrl::parse(&join.url).map_err(bad)?;
        if in_url.is_some() {
            return Err(bad(
                "the pool URL carries a password, which would stay in shell histories and process \
                 lists: give the URL without it and the password on standard input \
                 (`runner-manager pool join postgres://USER@HOST/DATABASE --label LABEL \
                 --password-stdin`)",
            ));
        }
        let label = Label::new(&join.label)
            .map_err(|e| bad(format!("{e}: fix the pool label")))?
            .as_str()
            .to_owned();
        let host = match join.host {
            Some(h) => h,
            None => super::host_row::machine_name(),
        };
        check_host_id(&host).map_err(bad)?;
        let password = join
            .password
            .as_ref()
            .map(|p| SecretString::from(p.expose().to_owned()));
        let pool = Arc::new(Pool::new(PoolConfig {
            url: url.clone(),
            password: password.clone(),
            label: label.clone(),
            settings: self.settings(&host),
        }));
        let room = room(daemon).await;
        pool.heartbeat(room.capacity, room.free, room.running.as_deref())
            .await
            .map_err(|e| bad(format!("{e} (this host did not join)")))?;
        // Kept: the password first, so a restart never finds a pool without it.
        let secret = match &password {
            Some(p) => self.secret.save(&StoredCredential {
                access_token: p.clone(),
                expires_at: None,
                refresh_token: None,
                refresh_expires_at: None,
            }),
            None => self.secret.delete(),
        };
        let kept = match secret {
            Ok(()) => {
                let (u, l, h) = (url.to_string(), label.clone(), host.clone());
                daemon
                    .journal
                    .with(move |j| {
                        j.meta_set(meta::POOL_URL, &u)?;
                        j.meta_set(meta::POOL_LABEL, &l)?;
                        j.meta_set(meta::POOL_HOST, &h)
                    })
                    .await
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = kept {
            // Not kept: leave again so the pool does not wait for this host's lease.
            let _ = pool.leave().await;
            return Err(ApiError::internal(format!(
                "the pool settings could not be kept ({e}): this host did not join"
            )));
        }
        tracing::info!(address = %url.address(), %label, %host, "joined the pool");
        self.set(Some(Arc::clone(&pool)));
        daemon.after(Changed::Loops).await;
        Ok(status_of(&pool))
    }

    /// Leaves the pool: its claims go at once (when the database answers; else they lapse with
    /// this host's lease), the settings and the password are forgotten.
    pub async fn leave(&self, daemon: &Arc<Daemon>) -> Result<(), ApiError> {
        let Some(pool) = self.pool() else {
            return Err(ApiError::not_found(
                "this host is in no pool (`runner-manager pool join` joins one)",
            ));
        };
        if let Err(error) = pool.leave().await {
            tracing::warn!(%error, "the pool was not told: this host's claims lapse with its lease");
        }
        daemon
            .journal
            .with(|j| {
                j.meta_delete(meta::POOL_URL)?;
                j.meta_delete(meta::POOL_LABEL)?;
                j.meta_delete(meta::POOL_HOST)
            })
            .await
            .map_err(|e| ApiError::internal(format!("the pool settings stay: {e}")))?;
        if let Err(error) = self.secret.delete() {
            tracing::warn!(%error, "the pool's password could not be removed from the credential store");
        }
        self.set(None);
        tracing::info!(label = %pool.label(), "left the pool");
        daemon.after(Changed::Loops).await;
        Ok(())
    }

    pub fn status(&self) -> Option<PoolStatus> {
        self.pool().map(|p| status_of(&p))
    }
}

/// What this host tells the pool of itself at each heartbeat.
struct Room {
    capacity: u32,
    free: u32,
    /// Its runners, each with the job it was seen to take: who runs what (`None` when the
    /// journal could not be read: the pool keeps what it was told last).
    running: Option<Vec<Running>>,
}

/// The host's capacity, its free slots and its runners now (the pool's view of this host).
async fn room(daemon: &Daemon) -> Room {
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
                    let job = super::status::job_of(&daemon.client, a.runner_name());
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

fn status_of(pool: &Pool) -> PoolStatus {
    let (state, message, since) = match pool.health() {
        PoolHealth::Connecting => ("connecting", None, None),
        PoolHealth::Connected => ("connected", None, None),
        PoolHealth::Unreachable {
            message,
            since,
            refused,
        } => (
            if refused { "refused" } else { "unreachable" },
            Some(message),
            Some(rm_proto::UnixMillis(since.timestamp_millis())),
        ),
    };
    let view = pool.view();
    PoolStatus {
        label: pool.label().to_owned(),
        address: pool.address(),
        host_id: pool.host_id().to_owned(),
        state: state.to_owned(),
        message,
        since,
        hosts: view
            .hosts
            .into_iter()
            .map(|h| PoolHostStatus {
                host_id: h.host_id,
                capacity: h.capacity,
                free: h.free,
                alive: h.alive,
                claims: h.claims,
                running: h
                    .running
                    .into_iter()
                    .map(|r| PoolRunnerStatus {
                        runner: r.runner,
                        target: r.target,
                        job_id: r.job_id,
                        job_name: r.job_name,
                    })
                    .collect(),
            })
            .collect(),
        claims: view
            .claims
            .into_iter()
            .map(|c| PoolClaimStatus {
                job_id: c.job_id,
                target: c.target,
                host_id: c.host_id,
                runner: c.runner,
            })
            .collect(),
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
            let news = daemon.pool.news.swap(false, Ordering::Relaxed) || jobs_now != jobs_seen;
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
