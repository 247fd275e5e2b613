//! The pool of hosts this host joined: its URL (without the password), label and host name in
//! the journal's meta, the password in the credential store (its own entry), the connection
//! the GitHub adapter places pooled targets through, and the heartbeat that keeps this host's
//! lease and tells the pool how much room it has.

use crate::meta;
use rm_adapters::pool::{Pool, PoolConfig, PoolHealth};
use rm_adapters::{JournalAdapter, PoolSlot};
use rm_core::Label;
use rm_credstore::{SecretStore, StoredCredential};
use rm_pool::{PoolUrl, Running, StoreSettings};
use rm_proto::{ApiError, PoolClaimStatus, PoolHostStatus, PoolJoin, PoolRunnerStatus, PoolStatus};
use secrecy::SecretString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

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
pub(crate) const NEWS_CHECK: Duration = Duration::from_secs(1);

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

    /// Whether a runner changed since the last look (and forgets it).
    pub(crate) fn take_news(&self) -> bool {
        self.news.swap(false, Ordering::Relaxed)
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
    pub async fn restore(&self, journal: &JournalAdapter) {
        let stored = journal
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
    /// Joins a pool: checked, kept in the journal and the credential store, then in force (the
    /// caller wakes the loops).
    pub(crate) async fn join(
        &self,
        journal: &JournalAdapter,
        join: PoolJoin,
        room: Room,
    ) -> Result<PoolStatus, ApiError> {
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
                journal
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
        Ok(status_of(&pool))
    }

    /// Leaves the pool: its claims go at once (when the database answers; else they lapse with
    /// this host's lease), the settings and the password are forgotten.
    pub(crate) async fn leave(&self, journal: &JournalAdapter) -> Result<(), ApiError> {
        let Some(pool) = self.pool() else {
            return Err(ApiError::not_found(
                "this host is in no pool (`runner-manager pool join` joins one)",
            ));
        };
        if let Err(error) = pool.leave().await {
            tracing::warn!(%error, "the pool was not told: this host's claims lapse with its lease");
        }
        journal
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
        Ok(())
    }

    pub fn status(&self) -> Option<PoolStatus> {
        self.pool().map(|p| status_of(&p))
    }
}

/// What this host tells the pool of itself at each heartbeat.
pub(crate) struct Room {
    pub capacity: u32,
    pub free: u32,
    /// Its runners, each with the job it was seen to take: who runs what (`None` when the
    /// journal could not be read: the pool keeps what it was told last).
    pub running: Option<Vec<Running>>,
}

pub(crate) fn status_of(pool: &Pool) -> PoolStatus {
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
