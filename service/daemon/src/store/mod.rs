//! The service's copy of the GitHub credential, per start mode. The stores themselves live in
//! `rm-credstore` (checkable for every OS from Linux); this module adapts them to the GitHub
//! client's port ([`rm_github::CredentialStore`]) and picks one by [`StartMode`]:
//!
//! - login service → the user's OS keyring;
//! - boot service → the machine store: a root-only 0600 file `<data-dir>/credential.json` on
//!   Linux, the System keychain on macOS, SYSTEM's Credential Manager on Windows.

use std::path::{Path, PathBuf};

use rm_credstore::SecretStore;
use rm_github::{Credential, CredentialStore, StoreError};

use crate::paths::{StartMode, CREDENTIAL_FILE};

pub use rm_credstore::{KEYRING_ACCOUNT, KEYRING_SERVICE};

pub use rm_engine::ServiceStore;

/// One of `rm-credstore`'s stores seen through the GitHub client's port.
#[derive(Debug)]
pub struct Port<S>(S);

/// The root-only file store (`--credential-store file`, and the boot store on Linux).
pub type FileStore = Port<rm_credstore::FileStore>;
/// A keyring entry (the login store on every OS, the boot store on Windows).
pub type KeyringStore = Port<rm_credstore::KeyringStore>;

impl FileStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Port(rm_credstore::FileStore::new(path))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl KeyringStore {
    /// The current user's keyring entry for `account`.
    pub fn user(account: &str) -> Result<Self, StoreError> {
        rm_credstore::KeyringStore::user(account)
            .map(Port)
            .map_err(convert_error)
    }
}

/// The store a service started in `mode` with `data_dir` uses.
pub fn open_for_mode(
    mode: StartMode,
    data_dir: &Path,
) -> Result<Box<dyn ServiceStore>, StoreError> {
    let store = match mode {
        StartMode::Login => rm_credstore::open_user(),
        StartMode::Boot => rm_credstore::open_machine(&data_dir.join(CREDENTIAL_FILE)),
    };
    Ok(Box::new(Port(store.map_err(convert_error)?)))
}

/// The port's error is a message; the store's message already names the store and the fix.
fn convert_error(e: rm_credstore::StoreError) -> StoreError {
    StoreError(e.to_string())
}

fn to_stored(c: &Credential) -> rm_credstore::StoredCredential {
    rm_credstore::StoredCredential {
        access_token: c.access_token.clone(),
        expires_at: c.expires_at,
        refresh_token: c.refresh_token.clone(),
        refresh_expires_at: c.refresh_expires_at,
    }
}

fn from_stored(c: rm_credstore::StoredCredential) -> Credential {
    Credential {
        access_token: c.access_token,
        expires_at: c.expires_at,
        refresh_token: c.refresh_token,
        refresh_expires_at: c.refresh_expires_at,
    }
}

impl<S: SecretStore> CredentialStore for Port<S> {
    fn load(&self) -> Result<Option<Credential>, StoreError> {
        self.0
            .load()
            .map(|c| c.map(from_stored))
            .map_err(convert_error)
    }

    fn save(&self, credential: &Credential) -> Result<(), StoreError> {
        self.0.save(&to_stored(credential)).map_err(convert_error)
    }
}

impl<S: SecretStore> ServiceStore for Port<S> {
    fn delete(&self) -> Result<(), StoreError> {
        self.0.delete().map_err(convert_error)
    }

    fn describe(&self) -> String {
        self.0.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred() -> Credential {
        Credential {
            access_token: "ghu_SECRETaccess".into(),
            expires_at: Some("2030-01-02T03:04:05Z".parse().unwrap()),
            refresh_token: Some("ghr_SECRETrefresh".into()),
            refresh_expires_at: Some("2030-06-01T00:00:00Z".parse().unwrap()),
        }
    }

    #[test]
    fn the_port_keeps_every_field_and_the_stores_errors() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path().join(CREDENTIAL_FILE));
        assert!(store.load().unwrap().is_none());
        store.save(&cred()).unwrap();
        let back = store.load().unwrap().unwrap();
        assert!(back.same_tokens(&cred()));
        assert_eq!(back.expires_at, cred().expires_at);
        assert_eq!(back.refresh_expires_at, cred().refresh_expires_at);
        assert_eq!(store.path(), dir.path().join(CREDENTIAL_FILE));

        std::fs::write(store.path(), "{").unwrap();
        let err = store.load().unwrap_err().to_string();
        assert!(
            err.contains("corrupt") && err.contains("auth login"),
            "{err}"
        );
        store.delete().unwrap();
        assert!(store.load().unwrap().is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_boot_service_on_linux_uses_the_file_in_its_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_for_mode(StartMode::Boot, dir.path()).unwrap();
        store.save(&cred()).unwrap();
        assert!(dir.path().join(CREDENTIAL_FILE).exists());
        assert!(
            store.describe().contains(CREDENTIAL_FILE),
            "{}",
            store.describe()
        );
        assert!(store.load().unwrap().unwrap().same_tokens(&cred()));
    }
}
