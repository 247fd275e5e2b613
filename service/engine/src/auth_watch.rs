//! The auth watcher: tells watchers when the credential's state changes (a renewal GitHub
//! refused happens inside the client, not in an agent event), and learns whose credential the
//! service holds (`GET /user`) when only the signing-in client's word is known. A host without
//! targets stays off the network, so the login waits for the first target.

use super::changes::Changed;
use super::doctor::has_targets;
use super::state::{meta, Daemon};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Publishes `auth_changed` (and `sign_in_required`) when the client's auth state changes, e.g.
/// a renewal refused by GitHub. A credential whose login GitHub has not confirmed yet (handed
/// over while the host had no target, or GitHub was unreachable then) gets it learnt here, once
/// the host has a target: a host without targets stays off the network.
pub async fn watch_auth(daemon: Arc<Daemon>, every: Duration) {
    let mut last = daemon.client.auth_state();
    let mut login_known = false;
    let mut next_ask = Instant::now();
    loop {
        if !login_known && is_signed_in(&last) && Instant::now() >= next_ask {
            // At most once a minute while GitHub cannot say.
            next_ask = Instant::now() + LOGIN_RETRY;
            if login_verified(&daemon).await {
                login_known = true;
            } else if !has_targets(&daemon.journal).await {
                next_ask = Instant::now() + TARGETS_RECHECK;
            } else if let Some(login) = learn_login(&daemon).await {
                login_known = store_login(&daemon, &login).await;
                if login_known {
                    daemon.after(Changed::Auth).await;
                }
            }
        }
        tokio::time::sleep(every).await;
        let now = daemon.client.auth_state();
        if now == last {
            continue;
        }
        // A new credential may belong to someone else: check the login again.
        login_known = false;
        next_ask = Instant::now();
        last = now;
        daemon.after(Changed::Auth).await;
    }
}

fn is_signed_in(state: &rm_github::AuthState) -> bool {
    matches!(state, rm_github::AuthState::SignedIn { .. })
}

/// How often the auth watcher asks `GET /user` again while the login is unknown.
const LOGIN_RETRY: Duration = Duration::from_secs(60);

/// How often the auth watcher looks for a first target while the login waits for one.
const TARGETS_RECHECK: Duration = Duration::from_secs(2);

/// How long asking GitHub who signed in may take before sign-in goes on without the login.
const LOGIN_DEADLINE: Duration = Duration::from_secs(15);

/// Asks GitHub whose credential the service holds (`GET /user`); `None` (logged) when it
/// cannot be learnt now.
pub async fn learn_login(daemon: &Daemon) -> Option<String> {
    match tokio::time::timeout(LOGIN_DEADLINE, daemon.client.current_login()).await {
        Ok(Ok(login)) => Some(login),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not learn the signed-in login from GitHub");
            None
        }
        Err(_) => {
            tracing::warn!(
                deadline_secs = LOGIN_DEADLINE.as_secs(),
                "GitHub did not say who signed in in time"
            );
            None
        }
    }
}

/// Whether the stored login came from GitHub (not only from the signing-in client).
async fn login_verified(daemon: &Daemon) -> bool {
    daemon
        .journal
        .with(|j| Ok((j.meta_get(meta::LOGIN)?, j.meta_get(meta::LOGIN_VERIFIED)?)))
        .await
        .is_ok_and(|(login, verified)| {
            login.is_some_and(|l| !l.is_empty()) && verified.as_deref() == Some("1")
        })
}

async fn store_login(daemon: &Daemon, login: &str) -> bool {
    let login = login.to_string();
    match daemon
        .journal
        .with(move |j| {
            j.meta_set(meta::LOGIN, &login)?;
            j.meta_set(meta::LOGIN_VERIFIED, "1")
        })
        .await
    {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "the signed-in login was not recorded");
            false
        }
    }
}
