//! The operator's choices as the journal kept them, read once at start. A damaged row never
//! keeps the service from starting: it is logged with the command that stores it again, and
//! the safe default applies (inside the sandbox, no runner environment, the default caches).

use crate::state::meta;
use rm_core::PolicyId;
use rm_journal::{Journal, PolicyAdmission};
use rm_runner::sandbox::TargetChoices;
use rm_runner::{CacheSettings, RunnerEnv};

/// What was stored, in the shapes the service and the runner host share.
pub struct Stored {
    /// Launching paused by the operator.
    pub paused: bool,
    /// The targets' own admission settings over the host's.
    pub own_admission: Vec<(PolicyId, PolicyAdmission)>,
    /// The host's runner environment.
    pub runner_env: RunnerEnv,
    /// The caches' settings, the host's and the targets' own.
    pub caches: CacheSettings,
    /// The targets' sandbox choices.
    pub sandboxes: TargetChoices,
}

impl Stored {
    pub fn load(journal: &mut Journal) -> Stored {
        let paused = journal
            .meta_get(meta::PAUSED)
            .ok()
            .flatten()
            .is_some_and(|v| v == "1");
        let own_admission = journal.policy_admissions().unwrap_or_else(|error| {
            tracing::warn!(%error, "the targets' own admission settings are unreadable: the host's apply until `repo set --memory-admission …` stores new ones");
            Vec::new()
        });
        // Logged by name only: values may be secret.
        let runner_env = RunnerEnv::default();
        match journal.runner_env() {
            Ok(vars) => {
                tracing::info!(names = ?vars.keys().collect::<Vec<_>>(), "runner environment");
                runner_env.set(vars);
            }
            Err(error) => {
                tracing::warn!(%error, "the runner environment is unreadable: runners get none until `runner-manager host env` fixes it");
            }
        }
        let caches = CacheSettings::default();
        match journal.host_cache_settings() {
            Ok(h) => {
                caches.set_cap_bytes(h.cap_bytes);
                caches.set_tool_cache(h.tool_cache);
            }
            Err(error) => {
                tracing::warn!(%error, "the cache settings are unreadable: the defaults apply until `runner-manager host set-cache-size` stores new ones");
            }
        }
        match journal.policy_caches() {
            Ok(own) => caches.set_policies(own),
            Err(error) => {
                tracing::warn!(%error, "the targets' own cache settings are unreadable: the defaults apply until `repo set --cache …` stores new ones");
            }
        }
        let sandboxes = TargetChoices::default();
        match journal.policy_sandboxes() {
            Ok(own) => {
                for (policy, choice) in own {
                    sandboxes.set(policy, choice);
                }
            }
            Err(error) => {
                tracing::warn!(%error, "the targets' sandbox choices are unreadable: every target's runners start inside the sandbox, without Docker, until `repo set --sandbox …/--docker …` stores them again");
            }
        }
        Stored {
            paused,
            own_admission,
            runner_env,
            caches,
            sandboxes,
        }
    }
}
