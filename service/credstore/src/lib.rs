//! The service's copy of the GitHub credential, per start mode (DESIGN.md "Sign-in and the
//! credential"):
//!
//! | start mode | Linux | macOS | Windows |
//! |---|---|---|---|
//! | login ([`open_user`]) | Secret Service ([`KeyringStore`]) | login keychain ([`KeyringStore`]) | the user's Credential Manager ([`KeyringStore`]) |
//! | boot ([`open_machine`]) | root-only 0600 file ([`FileStore`]) | System keychain (`SystemKeychainStore`) | Credential Manager of SYSTEM ([`KeyringStore`]) |
//!
//! Every store implements [`SecretStore`]. The credential ([`StoredCredential`]) keeps its
//! tokens in redacting types, is serialised as JSON only inside this crate, and no error
//! message contains any part of it. Each OS's backend is compiled only for that OS.

mod codec;
mod credential;
mod error;
mod file;
mod os_keyring;
#[cfg(target_os = "macos")]
mod system_keychain;

use std::path::Path;

pub use credential::StoredCredential;
pub use error::{StoreError, SIGN_IN_FIX};
pub use file::FileStore;
pub use os_keyring::{backend_is_persistent, KeyringStore};
#[cfg(target_os = "macos")]
pub use system_keychain::{SystemKeychainStore, SYSTEM_KEYCHAIN};

/// The keyring service name under which the credential is stored.
pub const KEYRING_SERVICE: &str = "runner-manager";
/// The keyring account (user) name of the service's credential entry.
pub const KEYRING_ACCOUNT: &str = "github-credential";

/// Where the service keeps its credential: load, replace, remove, and a description for
/// status output and error messages. Synchronous on purpose: keyrings and small files are
/// quick blocking calls, and a sync trait stays object-safe.
pub trait SecretStore: Send + Sync {
    /// The stored credential, if any.
    fn load(&self) -> Result<Option<StoredCredential>, StoreError>;
    /// Replace the stored credential (a renewed pair is saved before it is used).
    fn save(&self, credential: &StoredCredential) -> Result<(), StoreError>;
    /// Remove the stored credential. Removing an absent credential is not an error.
    fn delete(&self) -> Result<(), StoreError>;
    /// Where the credential lives; never includes the secret.
    fn describe(&self) -> String;
}

impl<S: SecretStore + ?Sized> SecretStore for Box<S> {
    fn load(&self) -> Result<Option<StoredCredential>, StoreError> {
        (**self).load()
    }
    fn save(&self, credential: &StoredCredential) -> Result<(), StoreError> {
        (**self).save(credential)
    }
    fn delete(&self) -> Result<(), StoreError> {
        (**self).delete()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// The store of a login service: the current user's OS keyring.
pub fn open_user() -> Result<Box<dyn SecretStore>, StoreError> {
    Ok(Box::new(KeyringStore::user(KEYRING_ACCOUNT)?))
}

/// The store of a boot service (root/SYSTEM): the machine store of this OS. `file` is where
/// the file store keeps it (Linux and other Unixes: `<data-dir>/credential.json`); macOS and
/// Windows use their system keychain / SYSTEM's Credential Manager and ignore it.
pub fn open_machine(file: &Path) -> Result<Box<dyn SecretStore>, StoreError> {
    machine_store(file)
}

#[cfg(target_os = "macos")]
fn machine_store(_file: &Path) -> Result<Box<dyn SecretStore>, StoreError> {
    Ok(Box::new(SystemKeychainStore::new(KEYRING_ACCOUNT)))
}

#[cfg(target_os = "windows")]
fn machine_store(_file: &Path) -> Result<Box<dyn SecretStore>, StoreError> {
    Ok(Box::new(KeyringStore::machine(KEYRING_ACCOUNT)?))
}

/// Linux and other Unixes: the root-only file is the machine store (a root service has no
/// session bus, so no Secret Service).
#[cfg(not(any(target_os = "macos", target_os = "windows")))]
fn machine_store(file: &Path) -> Result<Box<dyn SecretStore>, StoreError> {
    Ok(Box::new(FileStore::new(file)))
}

#[cfg(all(test, not(any(target_os = "macos", target_os = "windows"))))]
mod tests {
    use super::*;

    #[test]
    fn the_machine_store_here_is_the_file_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credential.json");
        let store = open_machine(&file).unwrap();
        assert!(
            store.describe().contains(&file.display().to_string()),
            "{}",
            store.describe()
        );
        let c = StoredCredential {
            access_token: "ghu_SECRET1".into(),
            expires_at: None,
            refresh_token: None,
            refresh_expires_at: None,
        };
        store.save(&c).unwrap();
        assert!(file.exists());
        assert!(store.load().unwrap().unwrap().same_tokens(&c));
    }
}
