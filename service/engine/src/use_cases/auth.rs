//! The credential: handed over, removed; the service's own sign-in sessions.

use super::bad;
use crate::changes::Changed;
use crate::credential::{self, AskGitHub};
use crate::engine::Engine;
use crate::state::meta;
use crate::wire::journal_error;
use rm_proto::{ApiError, CredentialPut, Peer, SignInSession, SignInStart};
use secrecy::SecretString;
use std::sync::Arc;

fn millis(m: rm_proto::UnixMillis) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp_millis(m.0)
}

fn no_sign_in() -> ApiError {
    ApiError::not_found(
        "no sign-in has been started since the service started: start one with \
         `runner-manager auth login` (or Sign in in the tray)",
    )
}

impl Engine {
    pub async fn put_credential(&self, peer: Peer, c: CredentialPut) -> Result<(), ApiError> {
        if c.access_token.is_empty() {
            return Err(bad(
                "access_token is empty: sign in again with `runner-manager auth login`",
            ));
        }
        let credential = rm_github::Credential {
            access_token: SecretString::from(c.access_token.expose().to_string()),
            expires_at: millis(c.expires_at),
            refresh_token: if c.refresh_token.is_empty() {
                None
            } else {
                Some(SecretString::from(c.refresh_token.expose().to_string()))
            },
            refresh_expires_at: millis(c.refresh_expires_at),
        };
        // The CLI of this version no longer hands credentials over (the service signs in
        // itself, `POST /v1/sign-in`); the tray or an older CLI may.
        credential::store(
            &self.daemon,
            credential,
            c.login.clone(),
            AskGitHub::IfServing,
            peer.uid,
        )
        .await?;
        Ok(())
    }

    pub async fn delete_credential(&self, peer: Peer) -> Result<(), ApiError> {
        let store = Arc::clone(&self.daemon.store);
        tokio::task::spawn_blocking(move || store.delete())
            .await
            .map_err(|e| ApiError::internal(format!("removing the credential failed: {e}")))?
            .map_err(|e| {
                ApiError::service_unavailable(format!(
                    "the credential could not be removed ({e}): check the credential store ({})",
                    self.daemon.store.describe()
                ))
            })?;
        self.daemon.client.sign_out();
        self.daemon
            .journal
            .with(|j| {
                j.meta_delete(meta::LOGIN)?;
                j.meta_delete(meta::SIGN_IN_EXPIRES_MS)
            })
            .await
            .map_err(journal_error)?;
        tracing::info!(uid = peer.uid, "GitHub credential removed (signed out)");
        self.daemon.after(Changed::Credential).await;
        Ok(())
    }

    pub async fn start_sign_in(
        &self,
        peer: Peer,
        request: SignInStart,
    ) -> Result<SignInSession, ApiError> {
        self.sign_in.start(request.restart, peer.uid).await
    }

    pub async fn sign_in_status(&self) -> Result<SignInSession, ApiError> {
        self.sign_in.current().ok_or_else(no_sign_in)
    }

    pub async fn cancel_sign_in(&self, peer: Peer) -> Result<SignInSession, ApiError> {
        self.sign_in.cancel(peer.uid).ok_or_else(no_sign_in)
    }
}
