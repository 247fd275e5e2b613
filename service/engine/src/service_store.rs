//! The credential store the service owns, as the engine sees it (the stores themselves, per
//! operating system and start mode, are the binary's: `rm_daemon::store`).

use rm_github::{CredentialStore, StoreError};

/// A credential store the service owns: load/save from [`CredentialStore`], plus removal
/// (sign-out) and a description for status output that never includes the secret.
pub trait ServiceStore: CredentialStore {
    /// Remove the stored credential. Removing an absent credential is not an error.
    fn delete(&self) -> Result<(), StoreError>;
    /// Where the credential lives, for status output and error messages.
    fn describe(&self) -> String;
}
