//! Write-through owners of the host's persisted choices: each checks a change, writes the
//! journal, then its memory copy, all under its own lock, so that concurrent changes land in
//! the same order in both and a refused change leaves both as they were. The use cases call
//! `change`; what is in force is read with `get` (or the shared handle the runner host reads).
//! The admission settings' owner is `Admission` itself (`Admission::change`); the pool's is
//! `PoolLink`.

use crate::gate::Gate;
use crate::meta;
use crate::status::journal_error;
use rm_adapters::JournalAdapter;
use rm_proto::{ApiError, HostCachesChange, HostEnvChange};
use rm_runner::{CacheSettings, RunnerEnv};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Why a change was not made. Nothing was written either way.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The change itself is wrong; the message names the fix.
    #[error("{0}")]
    Invalid(String),
    /// The journal could not be written.
    #[error(transparent)]
    Journal(#[from] rm_agent::JournalError),
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::Invalid(why) => ApiError::bad_request(why),
            Refusal::Journal(e) => journal_error(e),
        }
    }
}

/// Launching paused by the operator: the journal's flag and the gate the loops read.
pub struct Paused {
    gate: Arc<Gate>,
    changing: Mutex<()>,
}

impl Paused {
    pub fn new(gate: Arc<Gate>) -> Paused {
        Paused {
            gate,
            changing: Mutex::new(()),
        }
    }

    pub fn get(&self) -> bool {
        self.gate.paused()
    }

    pub async fn change(&self, journal: &JournalAdapter, paused: bool) -> Result<bool, Refusal> {
        let _changing = self.changing.lock().await;
        let value = if paused { "1" } else { "0" };
        journal
            .with(move |j| j.meta_set(meta::PAUSED, value))
            .await?;
        self.gate.set_paused(paused);
        Ok(paused)
    }
}

/// The host's runner environment: the journal's rows and the handle each runner's spawn reads.
pub struct HostEnv {
    env: RunnerEnv,
    changing: Mutex<()>,
}

impl HostEnv {
    pub fn new(env: RunnerEnv) -> HostEnv {
        HostEnv {
            env,
            changing: Mutex::new(()),
        }
    }

    /// What runners started from now on get.
    pub fn get(&self) -> &RunnerEnv {
        &self.env
    }

    /// Sets and unsets names; returns the whole environment now. The journal checks the change
    /// whole against what is stored, in its write transaction: a refused change stores
    /// nothing, and its reason names no value.
    pub async fn change(
        &self,
        journal: &JournalAdapter,
        change: HostEnvChange,
    ) -> Result<BTreeMap<String, String>, Refusal> {
        if change.is_empty() {
            return Err(Refusal::Invalid(
                "nothing to change: send set (an object of NAME: VALUE) and/or unset (a list of \
                 names)"
                    .into(),
            ));
        }
        let _changing = self.changing.lock().await;
        let now = journal
            .with(
                move |j| match j.change_runner_env(&change.set, &change.unset) {
                    Ok(now) => Ok(Ok(now)),
                    Err(rm_journal::JournalError::InvalidInput { reason, .. }) => Ok(Err(reason)),
                    Err(other) => Err(other),
                },
            )
            .await?
            .map_err(|reason| Refusal::Invalid(format!("{reason} (nothing was changed)")))?;
        self.env.set(now.clone());
        Ok(now)
    }
}

/// The host's cache settings (size cap, tool cache): the journal's row and the settings the
/// runner host reads at each spawn and prune.
pub struct HostCaches {
    settings: CacheSettings,
    changing: Mutex<()>,
}

impl HostCaches {
    pub fn new(settings: CacheSettings) -> HostCaches {
        HostCaches {
            settings,
            changing: Mutex::new(()),
        }
    }

    pub async fn change(
        &self,
        journal: &JournalAdapter,
        change: &HostCachesChange,
    ) -> Result<rm_journal::HostCacheSettings, Refusal> {
        if *change == HostCachesChange::default() {
            return Err(Refusal::Invalid(
                "nothing to change: send cap_bytes and/or tool_cache".into(),
            ));
        }
        if let Some(cap) = change.cap_bytes {
            if cap < rm_core::caches::MIN_CAP_BYTES {
                return Err(Refusal::Invalid(format!(
                    "cap_bytes {cap} is below the smallest cache size, 64 MiB (67108864): give more"
                )));
            }
        }
        let _changing = self.changing.lock().await;
        let next = rm_journal::HostCacheSettings {
            cap_bytes: change.cap_bytes.unwrap_or(self.settings.cap_bytes()),
            tool_cache: change.tool_cache.unwrap_or(self.settings.tool_cache()),
        };
        let now = chrono::Utc::now().timestamp_millis();
        journal
            .with(move |j| j.put_host_cache_settings(next, now))
            .await?;
        self.settings.set_cap_bytes(next.cap_bytes);
        self.settings.set_tool_cache(next.tool_cache);
        Ok(next)
    }
}
