//! The OS keyring as a credential store (keyring crate v3): the user's keyring for a login
//! service (Secret Service on Linux, login keychain on macOS, Credential Manager on Windows),
//! and on Windows also the machine store of a boot service.
//!
//! keyring 3 silently falls back to an in-memory mock when built without a backend feature;
//! [`KeyringStore`] refuses to exist in that case, so a mis-built binary cannot "store" a
//! credential that vanishes at exit.

use keyring::credential::CredentialPersistence;
use keyring::Entry;
use secrecy::ExposeSecret;

use crate::error::{BOOT_SERVICE_FIX, SIGN_IN_FIX};
use crate::{codec, SecretStore, StoreError, StoredCredential, KEYRING_SERVICE};

/// The user's keyring, named as its owner knows it.
#[cfg(target_os = "linux")]
const USER_KEYRING: &str = "the user's keyring (Secret Service)";
#[cfg(target_os = "macos")]
const USER_KEYRING: &str = "the user's login keychain";
#[cfg(target_os = "windows")]
const USER_KEYRING: &str = "the user's Windows Credential Manager";
#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
const USER_KEYRING: &str = "the user's OS keyring";

/// Which keyring an entry lives in: decides the fixes an error names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    User,
    /// Windows only: the Credential Manager of the SYSTEM account.
    #[cfg_attr(not(target_os = "windows"), allow(dead_code))]
    Machine,
}

/// A credential stored as one keyring entry (service [`KEYRING_SERVICE`], the given account).
pub struct KeyringStore {
    entry: Entry,
    account: String,
    scope: Scope,
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
        Err(StoreError::Unavailable(format!(
            "this build of runner-manager has no OS keyring backend for this OS (it would keep \
             the credential only in memory): use `--credential-store file`, {BOOT_SERVICE_FIX}"
        )))
    }
}

impl KeyringStore {
    /// The current user's keyring: the store of a login service.
    pub fn user(account: &str) -> Result<Self, StoreError> {
        require_real_backend()?;
        Self::with_entry(
            Entry::new(KEYRING_SERVICE, account),
            account,
            Scope::User,
            USER_KEYRING,
        )
    }

    /// The machine store of a boot service on Windows: the Credential Manager of the account
    /// the process runs as. The installed boot service runs as LocalSystem, so this is SYSTEM's
    /// own credential set, which no interactive user can read.
    #[cfg(target_os = "windows")]
    pub fn machine(account: &str) -> Result<Self, StoreError> {
        require_real_backend()?;
        Self::with_entry(
            Entry::new(KEYRING_SERVICE, account),
            account,
            Scope::Machine,
            "the Windows Credential Manager of the service account (SYSTEM)",
        )
    }

    fn with_entry(
        entry: keyring::Result<Entry>,
        account: &str,
        scope: Scope,
        where_: &'static str,
    ) -> Result<Self, StoreError> {
        let entry = entry.map_err(|e| keyring_error(scope, where_, "open", &e))?;
        Ok(Self {
            entry,
            account: account.to_owned(),
            scope,
            where_,
        })
    }

    fn fail(&self, op: &str, e: &keyring::Error) -> StoreError {
        keyring_error(self.scope, self.where_, op, e)
    }
}

/// The fix when the keyring cannot be reached at all.
fn unreachable_fix(scope: Scope) -> String {
    match scope {
        Scope::Machine => "check that the service runs as LocalSystem: reinstall it with \
                           `runner-manager service install --start-at boot`"
            .to_owned(),
        Scope::User if cfg!(target_os = "linux") => format!(
            "the Secret Service is not running or not reachable on the session bus: start \
             gnome-keyring (or another Secret Service) in your desktop session, {BOOT_SERVICE_FIX}"
        ),
        Scope::User if cfg!(target_os = "macos") => format!(
            "the login keychain cannot be used: log in to a desktop session and check it in \
             Keychain Access, {BOOT_SERVICE_FIX}"
        ),
        Scope::User if cfg!(target_os = "windows") => format!(
            "Credential Manager cannot be used: run the service in your logon session, \
             {BOOT_SERVICE_FIX}"
        ),
        Scope::User => format!("this OS has no supported keyring: {BOOT_SERVICE_FIX}"),
    }
}

/// The fix when the keyring is there but refuses access (locked, no logon session).
fn locked_fix(scope: Scope) -> String {
    match scope {
        Scope::Machine => unreachable_fix(scope),
        Scope::User if cfg!(target_os = "windows") => format!(
            "there is no logon session for this user: run the service as a login service of a \
             signed-in user, {BOOT_SERVICE_FIX}"
        ),
        Scope::User => format!(
            "the keyring is locked: unlock your login keyring (log in to a desktop session), \
             {BOOT_SERVICE_FIX}"
        ),
    }
}

/// A message for a keyring failure. keyring's `Display` never shows secret bytes (its
/// `BadEncoding` variant carries them but does not print them); `Debug` would, so it is
/// never used.
fn keyring_error(scope: Scope, where_: &str, op: &str, e: &keyring::Error) -> StoreError {
    let what = format!("cannot {op} the credential in {where_}: {e}");
    match e {
        keyring::Error::NoStorageAccess(_) => {
            StoreError::Unavailable(format!("{what}: {}", locked_fix(scope)))
        }
        keyring::Error::PlatformFailure(_) => {
            StoreError::Unavailable(format!("{what}: {}", unreachable_fix(scope)))
        }
        keyring::Error::BadEncoding(_) => StoreError::Corrupt(format!("{what}: {SIGN_IN_FIX}")),
        keyring::Error::Ambiguous(_) => StoreError::Corrupt(format!(
            "{what}: remove the duplicate entries of service {KEYRING_SERVICE} with the keyring's \
             own tool (e.g. Seahorse or secret-tool), then {SIGN_IN_FIX}"
        )),
        keyring::Error::TooLong(..) => StoreError::Io(format!(
            "{what}: use `--credential-store file` for this service"
        )),
        _ => StoreError::Unavailable(format!("{what}: {}", unreachable_fix(scope))),
    }
}

impl SecretStore for KeyringStore {
    fn load(&self) -> Result<Option<StoredCredential>, StoreError> {
        let text = match self.entry.get_password() {
            Ok(t) => t,
            Err(keyring::Error::NoEntry) => return Ok(None),
            Err(e) => return Err(self.fail("read", &e)),
        };
        codec::decode(&text).map(Some).map_err(|why| {
            StoreError::Corrupt(format!(
                "the credential in {} (account {}) is corrupt: {why}: {SIGN_IN_FIX}",
                self.where_, self.account
            ))
        })
    }

    fn save(&self, credential: &StoredCredential) -> Result<(), StoreError> {
        let text = codec::encode(credential).map_err(StoreError::Io)?;
        self.entry
            .set_password(text.expose_secret())
            .map_err(|e| self.fail("store", &e))
    }

    fn delete(&self) -> Result<(), StoreError> {
        match self.entry.delete_credential() {
            Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
            Err(e) => Err(self.fail("remove", &e)),
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

    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
    #[test]
    fn this_build_has_a_persistent_keyring_backend() {
        // Fails if the backend features were dropped and keyring fell back to its mock.
        assert!(backend_is_persistent());
    }

    #[test]
    fn errors_sort_by_fix_and_name_it() {
        let platform = keyring::Error::PlatformFailure("no bus".into());
        let e = keyring_error(Scope::User, USER_KEYRING, "read", &platform);
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains("--start-at boot"), "{e}");
        #[cfg(target_os = "linux")]
        assert!(
            e.to_string().contains("Secret Service is not running")
                && e.to_string().contains("start gnome-keyring"),
            "{e}"
        );

        let locked = keyring::Error::NoStorageAccess("locked".into());
        let e = keyring_error(Scope::User, USER_KEYRING, "read", &locked);
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
        #[cfg(target_os = "linux")]
        assert!(e.to_string().contains("unlock your login keyring"), "{e}");

        // The bytes of a badly encoded secret are never printed.
        let bad = keyring::Error::BadEncoding(b"ghu_SECRET\xff".to_vec());
        let e = keyring_error(Scope::User, USER_KEYRING, "read", &bad);
        assert!(matches!(e, StoreError::Corrupt(_)), "{e:?}");
        assert!(e.to_string().contains("auth login"), "{e}");
        assert!(!e.to_string().contains("SECRET"), "{e}");

        let e = keyring_error(Scope::Machine, "SYSTEM", "store", &platform);
        assert!(e.to_string().contains("LocalSystem"), "{e}");
    }
}
