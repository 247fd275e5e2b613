//! What follows a change, once: [`Daemon::after`] tells the auth events, reruns the GitHub
//! checks, wakes the loops and publishes the status, as the change needs. Kept apart from
//! `state` so that the state's owners and the projections over them form no circle.

use crate::meta;
use crate::state::Daemon;
use crate::watchers::now;
use rm_proto::{Event, WatchMessage};
use std::sync::Arc;

/// What changed, for [`Daemon::after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// Only what status shows (the runner environment, a check's answer): the watchers hear.
    Shown,
    /// What the loops act on (a target's settings, pause, capacity, admission, the pool): they
    /// look again now.
    Loops,
    /// The set of targets: the loops, and the GitHub checks again in the background.
    Targets,
    /// The client's own auth state (a renewal, a refusal): the auth events and the checks,
    /// without waking the loops (they see it at their next pass).
    Auth,
    /// A credential stored or removed: the auth events, the checks, and the loops now.
    Credential,
}

impl Daemon {
    /// Who hears of a change, once: the auth events and the GitHub checks for the credential,
    /// the loops for what they act on, then the watchers (the status built once). The set of
    /// targets also re-runs the GitHub checks in the background (a host without targets stays
    /// off the network), and their answer is published when it comes.
    pub async fn after(self: &Arc<Self>, changed: Changed) {
        if matches!(changed, Changed::Auth | Changed::Credential) {
            tell_auth(self).await;
            // The doctor's credential line follows the credential (no "no credential" after
            // sign-in).
            self.doctor
                .recheck_github(&self.client, &self.journal)
                .await;
        }
        if matches!(
            changed,
            Changed::Loops | Changed::Targets | Changed::Credential
        ) {
            self.wake.notify_one();
        }
        if matches!(changed, Changed::Targets) {
            let daemon = Arc::clone(self);
            tokio::spawn(async move {
                daemon
                    .doctor
                    .recheck_github(&daemon.client, &daemon.journal)
                    .await;
                daemon.publish_status().await;
            });
        }
        self.publish_status().await;
    }

    /// Publishes the full status again (after a change), when anyone watches.
    pub async fn publish_status(&self) {
        if !self.watchers.any() {
            return;
        }
        match crate::status::build(self).await {
            Ok(status) => self.watchers.publish(WatchMessage::Changed {
                status: Box::new(status),
            }),
            Err(e) => tracing::warn!(error = %e, "status could not be built for the watchers"),
        }
    }
}

/// Tells watchers about the current auth state (the events; `Daemon::after` then publishes
/// the status).
pub async fn tell_auth(daemon: &Daemon) {
    let at = now();
    let (login, expires) = daemon
        .journal
        .with(|j| {
            Ok((
                j.meta_get(meta::LOGIN)?,
                j.meta_get(meta::SIGN_IN_EXPIRES_MS)?,
            ))
        })
        .await
        .unwrap_or((None, None));
    let auth = crate::status::auth_state(daemon, login, expires.and_then(|e| e.parse().ok()));
    if let rm_proto::AuthState::SignInRequired { reason } = &auth {
        daemon.watchers.publish(WatchMessage::Event {
            event: Event::SignInRequired {
                at,
                reason: reason.clone(),
            },
        });
    }
    daemon.watchers.publish(WatchMessage::Event {
        event: Event::AuthChanged { at, auth },
    });
}
