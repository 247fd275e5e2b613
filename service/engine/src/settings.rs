//! Write-through owners of the host's persisted choices: each checks a change, writes the
//! journal, then its memory copy, all under its own lock, so that concurrent changes land in
//! the same order in both and a refused change leaves both as they were. The use cases call
//! `change`; what is in force is read with `get` (or the shared handle the runner host reads).
//! The admission settings' owner is `Admission` itself (`Admission::change`); the pool's is
//! `PoolLink`.

use crate::gate::Gate;
use crate::meta;
pub use crate::wire::Refusal;
use rm_adapters::JournalAdapter;
use rm_proto::{HostCachesChange, HostEnvChange};
use rm_runner::{CacheSettings, RunnerEnv};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Mutex;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(dir: &tempfile::TempDir) -> JournalAdapter {
        let j = rm_journal::Journal::open(dir.path().join("journal.sqlite3")).expect("opens");
        JournalAdapter::new(j)
    }

    fn set(name: &str, value: &str) -> HostEnvChange {
        HostEnvChange {
            set: [(name.to_owned(), value.to_owned())].into(),
            unset: Vec::new(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_env_changes_leave_the_journal_and_the_runners_copy_alike() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(&dir);
        let env = Arc::new(HostEnv::new(RunnerEnv::default()));
        let mut changes = tokio::task::JoinSet::new();
        for i in 0..24 {
            let (env, journal) = (Arc::clone(&env), journal.clone());
            changes.spawn(async move {
                // Each writes the same name: the last writer must win in both copies.
                env.change(&journal, set("PROXY", &format!("http://p{i}")))
                    .await
                    .expect("a valid change is stored")
            });
        }
        while let Some(done) = changes.join_next().await {
            done.unwrap();
        }
        let stored = journal.with(|j| j.runner_env()).await.unwrap();
        let memory: BTreeMap<String, String> = env.get().get().iter().cloned().collect();
        assert_eq!(stored, memory, "the memory copy is the journal's");
    }

    #[tokio::test]
    async fn a_refused_env_change_leaves_both_copies_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(&dir);
        let env = HostEnv::new(RunnerEnv::default());
        env.change(&journal, set("PROXY", "http://p"))
            .await
            .unwrap();
        let refused = env.change(&journal, set("lower case", "x")).await;
        assert!(
            matches!(&refused, Err(Refusal::Invalid(why)) if why.contains("nothing was changed")),
            "{refused:?}"
        );
        let empty = env
            .change(
                &journal,
                HostEnvChange {
                    set: Default::default(),
                    unset: Vec::new(),
                },
            )
            .await;
        assert!(matches!(empty, Err(Refusal::Invalid(_))), "{empty:?}");
        let stored = journal.with(|j| j.runner_env()).await.unwrap();
        let want: BTreeMap<String, String> = [("PROXY".to_owned(), "http://p".to_owned())].into();
        assert_eq!(stored, want);
        let memory: BTreeMap<String, String> = env.get().get().iter().cloned().collect();
        assert_eq!(memory, want);
    }

    #[tokio::test]
    async fn pausing_writes_the_journal_and_the_gate_together() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(&dir);
        let gate = Arc::new(Gate::default());
        let paused = Paused::new(Arc::clone(&gate));
        assert!(!paused.get());
        paused.change(&journal, true).await.unwrap();
        assert!(gate.paused() && paused.get());
        let stored = journal.with(|j| j.meta_get(meta::PAUSED)).await.unwrap();
        assert_eq!(stored.as_deref(), Some("1"));
        paused.change(&journal, false).await.unwrap();
        let stored = journal.with(|j| j.meta_get(meta::PAUSED)).await.unwrap();
        assert_eq!(stored.as_deref(), Some("0"));
        assert!(!gate.paused());
    }

    #[tokio::test]
    async fn a_cache_cap_below_the_smallest_is_refused_and_nothing_changes() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(&dir);
        let settings = CacheSettings::default();
        let caches = HostCaches::new(settings.clone());
        let before = (settings.cap_bytes(), settings.tool_cache());
        let refused = caches
            .change(
                &journal,
                &HostCachesChange {
                    cap_bytes: Some(1),
                    tool_cache: Some(!before.1),
                },
            )
            .await;
        assert!(matches!(refused, Err(Refusal::Invalid(_))), "{refused:?}");
        assert_eq!((settings.cap_bytes(), settings.tool_cache()), before);
        let cap = rm_core::caches::MIN_CAP_BYTES * 2;
        let now = caches
            .change(
                &journal,
                &HostCachesChange {
                    cap_bytes: Some(cap),
                    tool_cache: None,
                },
            )
            .await
            .unwrap();
        assert_eq!((now.cap_bytes, now.tool_cache), (cap, before.1));
        assert_eq!(
            settings.cap_bytes(),
            cap,
            "the runner host's handle sees it"
        );
        let stored = journal.with(|j| j.host_cache_settings()).await.unwrap();
        assert_eq!(stored.cap_bytes, cap);
    }
}
