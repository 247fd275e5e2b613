//! The service's copy of the GitHub credential, per start mode:
//!
//! - login service → the user's OS keyring ([`os_keyring::KeyringStore`]);
//! - boot service → a machine store: on Linux a root-only 0600 file in the data directory
//!   ([`file::FileStore`]), on macOS the System keychain, on Windows the Credential Manager of
//!   the SYSTEM account (both through the keyring crate, compiled behind cfg).
//!
//! Every store implements [`rm_github::CredentialStore`] plus [`ServiceStore::delete`]. The
//! credential is serialised as JSON only inside this module ([`codec`]); it is never logged and
//! no error message contains any part of it.

mod codec;
pub mod file;
pub mod os_keyring;

use std::path::Path;

use rm_github::{CredentialStore, StoreError};

use crate::paths::StartMode;

pub use file::FileStore;
pub use os_keyring::KeyringStore;

/// The keyring service name under which the credential is stored.
pub const KEYRING_SERVICE: &str = "runner-manager";
/// The keyring account (user) name of the service's credential entry.
pub const KEYRING_ACCOUNT: &str = "github-credential";

/// A credential store the service owns: load/save from [`CredentialStore`], plus removal
/// (sign-out) and a description for status output that never includes the secret.
pub trait ServiceStore: CredentialStore {
    /// Remove the stored credential. Removing an absent credential is not an error.
    fn delete(&self) -> Result<(), StoreError>;
    /// Where the credential lives, for status output and error messages.
    fn describe(&self) -> String;
}

/// The store a service started in `mode` with `data_dir` uses.
pub fn open_for_mode(
    mode: StartMode,
    data_dir: &Path,
) -> Result<Box<dyn ServiceStore>, StoreError> {
    match mode {
        StartMode::Login => Ok(Box::new(KeyringStore::user(KEYRING_ACCOUNT)?)),
        StartMode::Boot => machine_store(data_dir),
    }
}

#[cfg(target_os = "linux")]
fn machine_store(data_dir: &Path) -> Result<Box<dyn ServiceStore>, StoreError> {
    Ok(Box::new(FileStore::new(
        data_dir.join(crate::paths::CREDENTIAL_FILE),
    )))
}

#[cfg(any(target_os = "macos", target_os = "windows"))]
fn machine_store(_data_dir: &Path) -> Result<Box<dyn ServiceStore>, StoreError> {
    Ok(Box::new(KeyringStore::machine(KEYRING_ACCOUNT)?))
}

#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
fn machine_store(data_dir: &Path) -> Result<Box<dyn ServiceStore>, StoreError> {
    // Other Unixes: the same root-only file as Linux is the most honest machine store.
    Ok(Box::new(FileStore::new(
        data_dir.join(crate::paths::CREDENTIAL_FILE),
    )))
}
