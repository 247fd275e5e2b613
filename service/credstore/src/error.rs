//! What can go wrong with a store, sorted by what the operator must do about it. Every message
//! names the store and the fix, and none contains any part of the credential.

/// A credential store failure. The variant says which kind of fix applies; the message says
/// which store and exactly what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or used in this session (no Secret Service, a locked
    /// keyring, no keyring backend in this build, no rights on the machine keychain). The fix is
    /// in the environment: start/unlock the keyring, run as the right account, or change the
    /// start mode.
    #[error("{0}")]
    Unavailable(String),
    /// The stored credential cannot be decoded: the fix is to sign in again.
    #[error("{0}")]
    Corrupt(String),
    /// The machine file is readable by other users: its tokens may have leaked.
    #[error("{0}")]
    Exposed(String),
    /// Reading, writing or removing failed (disk full, permissions, a damaged directory).
    #[error("{0}")]
    Io(String),
}

/// The fix for a credential that cannot be decoded.
pub const SIGN_IN_FIX: &str = "sign in again with `runner-manager auth login` (it replaces it)";

/// The way out when the per-user store cannot work for a service (no desktop session).
pub const BOOT_SERVICE_FIX: &str =
    "or run the service at boot with `runner-manager service install --start-at boot`";
