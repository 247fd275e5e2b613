//! The host's runner environment as the runner host uses it: one shared, replaceable set of
//! variables read at each spawn, so a change reaches every runner started after it without a
//! restart (running ones keep what they started with).

use std::sync::{Arc, PoisonError, RwLock};

/// The variables, in the order they are set (later wins for a repeated name).
pub type Vars = Arc<Vec<(String, String)>>;

/// Variables given to every runner this host starts. Clones share one set. Its `Debug` shows
/// names only: values may hold a proxy password.
#[derive(Clone, Default)]
pub struct RunnerEnv(Arc<RwLock<Vars>>);

impl RunnerEnv {
    /// Replaces the set; runners spawned from now on get it.
    pub fn set(&self, vars: impl IntoIterator<Item = (String, String)>) {
        let vars = Arc::new(vars.into_iter().collect::<Vec<_>>());
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = vars;
    }

    /// The set now (cheap: shared, not copied).
    pub fn get(&self) -> Vars {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The names set now.
    pub fn names(&self) -> Vec<String> {
        self.get().iter().map(|(k, _)| k.clone()).collect()
    }
}

impl std::fmt::Debug for RunnerEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RunnerEnv").field(&self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_set_and_debug_shows_names_only() {
        let env = RunnerEnv::default();
        let other = env.clone();
        other.set([("HTTPS_PROXY".to_owned(), "http://u:pw@proxy".to_owned())]);
        assert_eq!(env.get().len(), 1);
        let debug = format!("{env:?}");
        assert!(
            debug.contains("HTTPS_PROXY") && !debug.contains("pw@"),
            "{debug}"
        );
    }
}
