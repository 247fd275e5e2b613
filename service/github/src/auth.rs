//! The signed-in session: the current credential, its renewal, and the auth
//! state `status` shows.
//!
//! Renewal is single-flight: every access token handed out carries the
//! credential *generation*. A caller that got a 401 asks for a refresh "of
//! generation g"; the first one through the refresh lock refreshes and bumps
//! the generation, the others find a newer generation and reuse its token.
//! GitHub rotates refresh tokens (the old pair dies on use), so a second
//! refresh of the same pair would sign the user out.

use crate::credential::{Credential, CredentialStore};
use crate::error::GitHubError;
use crate::oauth::{token_request, TokenAnswer};
use crate::transport::Transport;
use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the service knows about sign-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AuthState {
    /// No credential.
    SignedOut,
    /// A credential is in use.
    SignedIn {
        /// When the access token expires (renewed before).
        expires_at: Option<DateTime<Utc>>,
        /// Whether it can be renewed.
        renewable: bool,
    },
    /// The credential was refused and cannot be renewed: the user must sign in.
    SignInRequired {
        /// Why, in words (no secrets).
        reason: String,
    },
}

/// A token to put on one request, and the generation it belongs to.
pub(crate) struct Access {
    pub token: SecretString,
    pub generation: u64,
}

struct Inner {
    credential: Option<Credential>,
    generation: u64,
    failed: Option<String>,
    unsaved: bool,
}

pub(crate) struct Session {
    store: Arc<dyn CredentialStore>,
    client_id: String,
    margin: std::time::Duration,
    inner: std::sync::Mutex<Inner>,
    refresh_lock: tokio::sync::Mutex<()>,
    refreshes: AtomicU64,
}

impl Session {
    pub(crate) fn new(
        store: Arc<dyn CredentialStore>,
        client_id: String,
        margin: std::time::Duration,
    ) -> Result<Self, GitHubError> {
        let credential = store
            .load()
            .map_err(|e| GitHubError::Store(e.to_string()))?;
        Ok(Self {
            store,
            client_id,
            margin,
            inner: std::sync::Mutex::new(Inner {
                credential,
                generation: 1,
                failed: None,
                unsaved: false,
            }),
            refresh_lock: tokio::sync::Mutex::new(()),
            refreshes: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub(crate) fn state(&self) -> AuthState {
        let g = self.lock();
        match (&g.failed, &g.credential) {
            (Some(reason), _) => AuthState::SignInRequired {
                reason: reason.clone(),
            },
            (None, None) => AuthState::SignedOut,
            (None, Some(c)) => AuthState::SignedIn {
                expires_at: c.expires_at,
                renewable: c.can_renew(),
            },
        }
    }

    /// Installs a new credential (from sign-in): saved first, then used.
    pub(crate) fn set_credential(&self, credential: Credential) -> Result<(), GitHubError> {
        self.store
            .save(&credential)
            .map_err(|e| GitHubError::Store(e.to_string()))?;
        self.install(Some(credential));
        Ok(())
    }

    /// Re-reads the store (told that a new credential arrived).
    pub(crate) fn reload(&self) -> Result<AuthState, GitHubError> {
        let credential = self
            .store
            .load()
            .map_err(|e| GitHubError::Store(e.to_string()))?;
        self.install(credential);
        Ok(self.state())
    }

    /// Forgets the credential in memory (the caller purges the stores).
    pub(crate) fn sign_out(&self) {
        self.install(None);
    }

    fn install(&self, credential: Option<Credential>) {
        let mut g = self.lock();
        g.credential = credential;
        g.generation += 1;
        g.failed = None;
        g.unsaved = false;
    }

    pub(crate) fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::SeqCst)
    }

    fn require_sign_in(&self, reason: &str) -> GitHubError {
        tracing::warn!(reason, "GitHub sign-in required");
        self.lock().failed = Some(reason.to_string());
        GitHubError::SignInRequired {
            reason: reason.to_string(),
        }
    }

    /// The token for the next request, renewed first when it is about to expire.
    pub(crate) async fn access(&self, transport: &Transport) -> Result<Access, GitHubError> {
        let (credential, generation, unsaved) = {
            let g = self.lock();
            if let Some(reason) = &g.failed {
                return Err(GitHubError::SignInRequired {
                    reason: reason.clone(),
                });
            }
            match &g.credential {
                None => {
                    return Err(GitHubError::SignInRequired {
                        reason: "no GitHub credential yet".into(),
                    })
                }
                Some(c) => (c.clone(), g.generation, g.unsaved),
            }
        };
        if unsaved {
            self.save_pending(generation)?;
        }
        let now = Utc::now();
        if credential.expires_within(now, self.margin) {
            if credential.can_renew() {
                match self.refresh(transport, generation).await {
                    Ok(a) => return Ok(a),
                    // Not yet expired: keep going on the old token and renew later.
                    Err(e)
                        if e.is_retryable()
                            && !credential.expires_within(now, std::time::Duration::ZERO) =>
                    {
                        tracing::warn!(error = %e, "token renewal failed; using the current token meanwhile");
                    }
                    Err(e) => return Err(e),
                }
            } else if credential.expires_within(now, std::time::Duration::ZERO) {
                return Err(self.require_sign_in("the access token expired and cannot be renewed"));
            }
        }
        Ok(Access {
            token: credential.access_token,
            generation,
        })
    }

    /// A request with generation `seen` got 401: renew once (single flight).
    pub(crate) async fn unauthorized(
        &self,
        transport: &Transport,
        seen: u64,
    ) -> Result<Access, GitHubError> {
        let renewable = {
            let g = self.lock();
            if g.generation != seen {
                // Someone already replaced the credential; try with the new one.
                return match (&g.failed, &g.credential) {
                    (None, Some(c)) => Ok(Access {
                        token: c.access_token.clone(),
                        generation: g.generation,
                    }),
                    (Some(r), _) => Err(GitHubError::SignInRequired { reason: r.clone() }),
                    (None, None) => Err(GitHubError::Unauthorized),
                };
            }
            g.credential
                .as_ref()
                .map(Credential::can_renew)
                .unwrap_or(false)
        };
        if !renewable {
            self.require_sign_in(
                "GitHub refused the access token (401) and it has no refresh token",
            );
            return Err(GitHubError::Unauthorized);
        }
        self.refresh(transport, seen).await
    }

    /// Marks the session failed after a renewed token was refused too.
    pub(crate) fn refused_after_renewal(&self) -> GitHubError {
        self.require_sign_in("GitHub refused the renewed access token (401); the App authorization may have been revoked");
        GitHubError::Unauthorized
    }

    fn save_pending(&self, generation: u64) -> Result<(), GitHubError> {
        let credential = {
            let g = self.lock();
            if g.generation != generation || !g.unsaved {
                return Ok(());
            }
            g.credential.clone()
        };
        if let Some(c) = credential {
            self.store
                .save(&c)
                .map_err(|e| GitHubError::Store(e.to_string()))?;
            let mut g = self.lock();
            if g.generation == generation {
                g.unsaved = false;
            }
        }
        Ok(())
    }

    async fn refresh(&self, transport: &Transport, seen: u64) -> Result<Access, GitHubError> {
        let _flight = self.refresh_lock.lock().await;
        let refresh_token = {
            let g = self.lock();
            if let Some(reason) = &g.failed {
                return Err(GitHubError::SignInRequired {
                    reason: reason.clone(),
                });
            }
            let Some(c) = &g.credential else {
                return Err(GitHubError::SignInRequired {
                    reason: "no GitHub credential yet".into(),
                });
            };
            if g.generation != seen {
                return Ok(Access {
                    token: c.access_token.clone(),
                    generation: g.generation,
                });
            }
            if let Some(at) = c.refresh_expires_at {
                if at <= Utc::now() {
                    drop(g);
                    return Err(self.require_sign_in(
                        "the refresh token expired (they last about six months)",
                    ));
                }
            }
            match &c.refresh_token {
                Some(t) => t.clone(),
                None => {
                    drop(g);
                    return Err(self.require_sign_in("the access token cannot be renewed"));
                }
            }
        };
        self.refreshes.fetch_add(1, Ordering::SeqCst);
        tracing::info!("renewing the GitHub access token");
        let answer = token_request(
            transport,
            &[
                ("client_id", &self.client_id),
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token.expose_secret()),
            ],
        )
        .await?;
        match answer {
            TokenAnswer::Token(new) => {
                // Saved before use: the old pair is already dead at GitHub.
                let saved = self.store.save(&new);
                let mut g = self.lock();
                g.generation += 1;
                g.credential = Some(new.clone());
                g.failed = None;
                g.unsaved = saved.is_err();
                let generation = g.generation;
                drop(g);
                if let Err(e) = saved {
                    tracing::error!(error = %e, "could not save the renewed credential");
                    return Err(GitHubError::Store(e.to_string()));
                }
                tracing::info!(expires_at = ?new.expires_at, "GitHub access token renewed");
                Ok(Access {
                    token: new.access_token,
                    generation,
                })
            }
            TokenAnswer::Refused {
                code, description, ..
            } => {
                let reason = if code == "bad_refresh_token" {
                    "GitHub refused the refresh token (bad_refresh_token: expired, revoked or already used)".to_string()
                } else {
                    format!("GitHub refused to renew the token ({code}: {description})")
                };
                Err(self.require_sign_in(&reason))
            }
        }
    }
}
