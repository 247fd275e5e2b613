//! The OS keyring as a credential store (keyring crate v3): the user's keyring for a login
//! service (Secret Service on Linux, login keychain on macOS, Credential Manager on Windows),
//! and on macOS/Windows also the machine store of a boot service.
//!
//! keyring 3 silently falls back to an in-memory mock when built without a backend feature;
//! [`KeyringStore`] refuses to exist in that case, so a mis-built binary cannot "store" a
//! credential that vanishes at exit.

use keyring::credential::CredentialPersistence;
use keyring::Entry;
use rm_github::{Credential, CredentialStore, StoreError};
use secrecy::ExposeSecret;

use super::{codec, ServiceStore, KEYRING_SERVICE};

/// A credential stored as one keyring entry (service [`KEYRING_SERVICE`], the given account).
pub struct KeyringStore {
    entry: Entry,
    account: String,
    where_: &'static str,
}

impl std::fmt::Debug for KeyringStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyringStore")
            .field("account", &self.account)
            .field("where", &self.where_)
            .finish()
    }
}

/// Whether this build's default keyring backend persists anything (not the mock).
pub fn backend_is_persistent() -> bool {
    matches!(
        keyring::default::default_credential_builder().persistence(),
        CredentialPersistence::UntilDelete | CredentialPersistence::UntilReboot
    )
}

fn require_real_backend() -> Result<(), StoreError> {
    if backend_is_persistent() {
        Ok(())
    } else {
        Err(StoreError(
            "this build of runner-manager has no OS keyring backend (it would keep the \
             credential only in memory): rebuild with the keyring backend features enabled, or \
             run the service at boot (`runner-manager service install --start-at boot`)"
                .to_owned(),
        ))
    }
}

impl KeyringStore {
    /// The current user's keyring.
    pub fn user(account: &str) -> Result<Self, StoreError> {
        require_real_backend()?;
        Self::with_entry(
            Entry::new(KEYRING_SERVICE, account),
            account,
            "the user's OS keyring",
        )
    }

    /// The machine keyring of a boot service: the System keychain on macOS.
    #[cfg(target_os = "macos")]
    pub fn machine(account: &str) -> Result<Self, StoreError> {
        require_real_backend()?;
        Self::with_entry(
            Entry::new_with_target("System", KEYRING_SERVICE, account),
            account,
            "the System keychain",
        )
    }

    /// The machine keyring of a boot service: the Credential Manager of the account the
    /// service runs as, which is SYSTEM for the installed service.
    #[cfg(target_os = "windows")]
    pub fn machine(account: &str) -> Result<Self, StoreError> {
        require_real_backend()?;
        Self::with_entry(
            Entry::new(KEYRING_SERVICE, account),
            account,
            "the Credential Manager of the service account (SYSTEM)",
        )
    }

    fn with_entry(
        entry: keyring::Result<Entry>,
        account: &str,
        where_: &'static str,
    ) -> Result<Self, StoreError> {
        let entry = entry.map_err(|e| keyring_error(where_, "open", &e))?;
        Ok(Self {
            entry,
            account: account.to_owned(),
            where_,
        })
    }
}

/// A message for a keyring failure. keyring's `Display` never shows secret bytes (its
/// `BadEncoding` variant carries them but does not print them); `Debug` would, so it is
/// never used.
fn keyring_error(where_: &str, op: &str, e: &keyring::Error) -> StoreError {
    let fix = match e {
        keyring::Error::NoStorageAccess(_) => {
            "unlock your login keyring (log in to a desktop session), or run the service at boot \
             with `runner-manager service install --start-at boot`"
        }
        keyring::Error::BadEncoding(_) => "sign in again with `runner-manager auth login`",
        _ => {
            "check that the keyring service is running (on Linux: a Secret Service such as \
              gnome-keyring on the session bus), then retry"
        }
    };
    StoreError(format!(
        "cannot {op} the credential in {where_}: {e}: {fix}"
    ))
}

impl CredentialStore for KeyringStore {
    fn load(&self) -> Result<Option<Credential>, StoreError> {
        let text = match self.entry.get_password() {
            Ok(t) => t,
            Err(keyring::Error::NoEntry) => return Ok(None),
            Err(e) => return Err(keyring_error(self.where_, "read", &e)),
        };
        codec::decode(&text).map(Some).map_err(|why| {
            StoreError(format!(
                "the credential in {} (account {}) is corrupt: {why}: sign in again with \
                 `runner-manager auth login`",
                self.where_, self.account
            ))
        })
    }

    fn save(&self, credential: &Credential) -> Result<(), StoreError> {
        let text = codec::encode(credential).map_err(StoreError)?;
        self.entry
            .set_password(text.expose_secret())
            .map_err(|e| keyring_error(self.where_, "store", &e))
    }
}

impl ServiceStore for KeyringStore {
    fn delete(&self) -> Result<(), StoreError> {
        match self.entry.delete_credential() {
            Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
            Err(e) => Err(keyring_error(self.where_, "remove", &e)),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} (service {KEYRING_SERVICE}, account {})",
            self.where_, self.account
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_has_a_persistent_keyring_backend() {
        // Fails if the backend features were dropped and keyring fell back to its mock.
        assert!(backend_is_persistent());
    }
}
