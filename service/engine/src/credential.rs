//! Taking a new GitHub credential: one path for a credential a client hands over
//! (`POST /v1/credential`) and for the one the service's own sign-in receives
//! (the service's own sign-in). The client stores it (the credential store of the start mode) and uses
//! it at once; the journal records whose it is; policies parked by a refused credential resume.

use super::auth_watch::learn_login;
use super::changes::Changed;
use super::doctor::has_targets;
use super::state::{meta, Daemon};
use crate::wire::journal_error;
use rm_core::PolicyState;
use rm_proto::ApiError;
use std::sync::Arc;

/// Whether to ask GitHub whose the credential is (`GET /user`) before answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskGitHub {
    /// Only when the host has a target: a host without targets stays off the network, and the
    /// handing client's word stands in until the auth watcher asks.
    IfServing,
    /// Always: the service has just been talking to GitHub for this sign-in.
    Always,
}

/// Stores `credential`, records the login and tells watchers. Returns the login recorded
/// (`None` when neither GitHub nor the client said).
pub async fn store(
    daemon: &Arc<Daemon>,
    credential: rm_github::Credential,
    hint: Option<String>,
    ask: AskGitHub,
    uid: u32,
) -> Result<Option<String>, ApiError> {
    let refresh_expires_ms = credential
        .refresh_expires_at
        .map_or(i64::MAX, |t| t.timestamp_millis());
    let client = daemon.client.clone();
    tokio::task::spawn_blocking(move || client.set_credential(credential))
        .await
        .map_err(|e| ApiError::internal(format!("storing the credential failed: {e}")))?
        .map_err(|e| {
            ApiError::service_unavailable(format!(
                "the credential could not be stored ({e}): check the service's credential \
                 store ({}) and sign in again",
                daemon.store.describe()
            ))
        })?;
    let ask = match ask {
        AskGitHub::Always => true,
        AskGitHub::IfServing => has_targets(&daemon.journal).await,
    };
    let learnt = if ask { learn_login(daemon).await } else { None };
    let verified = if learnt.is_some() { "1" } else { "0" };
    let login = learnt.or(hint).unwrap_or_default();
    let expires = refresh_expires_ms.to_string();
    let stored_login = login.clone();
    daemon
        .journal
        .with(move |j| {
            j.meta_set(meta::LOGIN, &stored_login)?;
            j.meta_set(meta::LOGIN_VERIFIED, verified)?;
            j.meta_set(meta::SIGN_IN_EXPIRES_MS, &expires)
        })
        .await
        .map_err(journal_error)?;
    tracing::info!(uid, login = %login, "new GitHub credential stored");
    recover_auth_failed(daemon).await;
    daemon.after(Changed::Credential).await;
    Ok(Some(login).filter(|l| !l.is_empty()))
}

/// A new credential works again: policies parked in `authentication_failed` go back to
/// `pending` (their loops resume at the next pass).
async fn recover_auth_failed(daemon: &Daemon) {
    for _ in 0..3 {
        let Ok(policies) = daemon.journal.with(|j| j.list_policies()).await else {
            return;
        };
        let mut conflict = false;
        for mut p in policies
            .into_iter()
            .filter(|p| p.state() == PolicyState::AuthenticationFailed)
        {
            if p.transition_to(PolicyState::Pending).is_err() {
                continue;
            }
            if let Err(e) = daemon.journal.with(move |j| j.update_policy(&p)).await {
                tracing::debug!(error = %e, "policy changed meanwhile; retrying its recovery");
                conflict = true;
            }
        }
        if !conflict {
            return;
        }
    }
}
