//! The host's own settings: its capacity, memory admission and workstation rules, and the
//! runner environment.

use super::check_capacity;
use crate::changes::Changed;
use crate::engine::Engine;
use crate::status;
use crate::wire::journal_error;
use rm_proto::{
    ApiError, EnvVar, HostAdmission, HostAdmissionChange, HostCapacity, HostEnv, HostEnvChange,
    HostStatus, Peer,
};

/// The runner environment as answered: values only when `values` (an operator asks).
fn host_env_answer(vars: &std::collections::BTreeMap<String, String>, values: bool) -> HostEnv {
    HostEnv {
        variables: vars
            .iter()
            .map(|(name, value)| EnvVar {
                name: name.clone(),
                value: values.then(|| value.clone()),
            })
            .collect(),
        values_shown: values,
    }
}

impl Engine {
    pub async fn set_host_capacity(
        &self,
        peer: Peer,
        req: HostCapacity,
    ) -> Result<HostStatus, ApiError> {
        check_capacity(req.capacity, "capacity", 1)?;
        let capacity = req.capacity;
        let host = self
            .daemon
            .journal
            .with(move |j| {
                let Some(rec) = j.get_host()? else {
                    return Err(rm_journal::JournalError::NotFound {
                        entity: "host",
                        id: "this".into(),
                    });
                };
                let mut host = rec.host;
                host.capacity = capacity;
                j.put_host(&host, rec.runner_root.as_deref())?;
                Ok(host)
            })
            .await
            .map_err(journal_error)?;
        tracing::info!(uid = peer.uid, capacity, "host capacity set");
        self.daemon.after(Changed::Loops).await;
        Ok(status::host_status(
            &host,
            self.daemon.admission.config().to_wire(),
            self.daemon.runner_env.get(),
        ))
    }

    pub async fn set_host_admission(
        &self,
        peer: Peer,
        change: HostAdmissionChange,
    ) -> Result<HostAdmission, ApiError> {
        let now = self
            .daemon
            .admission
            .change(&self.daemon.journal, &change)
            .await?
            .to_wire();
        tracing::info!(
            uid = peer.uid,
            memory_admission = now.memory_admission,
            runner_memory_mb = now.runner_memory_mb,
            memory_headroom_mb = now.memory_headroom_mb,
            wait_on_battery = now.wait_on_battery,
            max_load = ?now.max_load.map(|l| l.0),
            quiet_hours = ?now.quiet_hours,
            idle_only = now.idle_only,
            "admission settings changed"
        );
        // The loops look again at once (a rule turned off starts a held job now); a hold that
        // still stands is recorded again by their next check.
        self.daemon.after(Changed::Loops).await;
        Ok(now)
    }

    /// The runner environment; `values` only for those who may change it (an operator):
    /// readers allowed the status see names only, as a value may be a proxy URL with a
    /// password in it.
    pub async fn host_env(&self, values: bool) -> Result<HostEnv, ApiError> {
        let vars = self
            .daemon
            .journal
            .with(|j| j.runner_env())
            .await
            .map_err(journal_error)?;
        Ok(host_env_answer(&vars, values))
    }

    pub async fn change_host_env(
        &self,
        peer: Peer,
        change: HostEnvChange,
    ) -> Result<HostEnv, ApiError> {
        let set_names: Vec<String> = change.set.keys().cloned().collect();
        let unset_names = change.unset.clone();
        let now = self
            .daemon
            .runner_env
            .change(&self.daemon.journal, change)
            .await?;
        // Names only: values are never logged.
        tracing::info!(
            uid = peer.uid,
            set = ?set_names,
            unset = ?unset_names,
            names = ?now.keys().collect::<Vec<_>>(),
            "runner environment changed: runners started from now on get it"
        );
        self.daemon.after(Changed::Shown).await;
        Ok(host_env_answer(&now, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_environment_goes_to_readers_without_its_values() {
        let vars = [("HTTPS_PROXY".to_owned(), "http://u:pw@p".to_owned())].into();
        let reader = host_env_answer(&vars, false);
        assert!(!reader.values_shown);
        assert_eq!(reader.variables[0].name, "HTTPS_PROXY");
        assert_eq!(reader.variables[0].value, None);
        let operator = host_env_answer(&vars, true);
        assert_eq!(
            operator.variables[0].value.as_deref(),
            Some("http://u:pw@p")
        );
    }
}
