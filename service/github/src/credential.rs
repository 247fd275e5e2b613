//! The user's GitHub credential and the port through which it is persisted.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use std::fmt;
use std::sync::Mutex;

/// A GitHub App user access token, with its refresh half when the App issues
/// expiring tokens. `Debug` never shows the secrets.
#[derive(Clone)]
pub struct Credential {
    /// `ghu_…` (or `gho_…` for an OAuth App).
    pub access_token: SecretString,
    /// When the access token stops working; `None` = does not expire.
    pub expires_at: Option<DateTime<Utc>>,
    /// `ghr_…`; `None` = this credential can never be renewed.
    pub refresh_token: Option<SecretString>,
    /// When the refresh token stops working.
    pub refresh_expires_at: Option<DateTime<Utc>>,
}

impl Credential {
    /// A credential without expiry or refresh half (e.g. a token pasted by an operator).
    pub fn non_expiring(access_token: SecretString) -> Self {
        Self {
            access_token,
            expires_at: None,
            refresh_token: None,
            refresh_expires_at: None,
        }
    }

    /// Whether a refresh token is present.
    pub fn can_renew(&self) -> bool {
        self.refresh_token.is_some()
    }

    /// Whether the access token expires within `margin` of `now`.
    pub fn expires_within(&self, now: DateTime<Utc>, margin: std::time::Duration) -> bool {
        match self.expires_at {
            Some(at) => {
                let margin = chrono::Duration::from_std(margin).unwrap_or(chrono::Duration::zero());
                at - margin <= now
            }
            None => false,
        }
    }

    /// Same secrets (used by tests and by the store to skip needless writes).
    pub fn same_tokens(&self, other: &Credential) -> bool {
        self.access_token.expose_secret() == other.access_token.expose_secret()
            && self
                .refresh_token
                .as_ref()
                .map(|t| t.expose_secret().to_string())
                == other
                    .refresh_token
                    .as_ref()
                    .map(|t| t.expose_secret().to_string())
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("access_token", &"[REDACTED]")
            .field("expires_at", &self.expires_at)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "[REDACTED]"),
            )
            .field("refresh_expires_at", &self.refresh_expires_at)
            .finish()
    }
}

/// Error from a credential store; the message must not contain secrets.
#[derive(Debug, thiserror::Error)]
#[error("credential store: {0}")]
pub struct StoreError(pub String);

/// Where the service keeps its copy of the credential (keyring, root-only file…).
///
/// Synchronous on purpose: keyrings and small files are blocking, quick calls,
/// and a sync trait stays object-safe (`Arc<dyn CredentialStore>`).
pub trait CredentialStore: Send + Sync {
    /// The stored credential, if any.
    fn load(&self) -> Result<Option<Credential>, StoreError>;
    /// Replace the stored credential. Called with a renewed pair *before* it is used.
    fn save(&self, credential: &Credential) -> Result<(), StoreError>;
}

/// An in-memory store: for tests, the CLI's one-shot use, and as a fallback.
#[derive(Default)]
pub struct MemoryCredentialStore {
    inner: Mutex<Option<Credential>>,
    saves: std::sync::atomic::AtomicUsize,
}

impl MemoryCredentialStore {
    /// A store holding `credential`.
    pub fn new(credential: Option<Credential>) -> Self {
        Self {
            inner: Mutex::new(credential),
            saves: Default::default(),
        }
    }

    /// How many times `save` was called.
    pub fn saves(&self) -> usize {
        self.saves.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl CredentialStore for MemoryCredentialStore {
    fn load(&self) -> Result<Option<Credential>, StoreError> {
        Ok(self
            .inner
            .lock()
            .map_err(|_| StoreError("poisoned".into()))?
            .clone())
    }

    fn save(&self, credential: &Credential) -> Result<(), StoreError> {
        *self
            .inner
            .lock()
            .map_err(|_| StoreError("poisoned".into()))? = Some(credential.clone());
        self.saves.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_both_tokens() {
        let c = Credential {
            access_token: "ghu_secretA".into(),
            expires_at: None,
            refresh_token: Some("ghr_secretB".into()),
            refresh_expires_at: None,
        };
        let s = format!("{c:?}");
        assert!(!s.contains("secretA") && !s.contains("secretB"), "{s}");
        assert!(s.contains("REDACTED"));
    }

    #[test]
    fn expiry_margin() {
        let now = Utc::now();
        let mut c = Credential::non_expiring("t".into());
        assert!(!c.expires_within(now, std::time::Duration::from_secs(300)));
        c.expires_at = Some(now + chrono::Duration::seconds(200));
        assert!(c.expires_within(now, std::time::Duration::from_secs(300)));
        assert!(!c.expires_within(now, std::time::Duration::from_secs(100)));
    }

    #[test]
    fn memory_store_round_trip() {
        let s = MemoryCredentialStore::default();
        assert!(s.load().unwrap().is_none());
        s.save(&Credential::non_expiring("ghu_1".into())).unwrap();
        assert_eq!(s.saves(), 1);
        assert!(s
            .load()
            .unwrap()
            .unwrap()
            .same_tokens(&Credential::non_expiring("ghu_1".into())));
    }
}
