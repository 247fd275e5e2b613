//! The macOS machine store of a boot service: the System keychain
//! (`/Library/Keychains/System.keychain`), through security-framework (already in the tree as
//! keyring's apple-native backend). Only root can write it, and items a root daemon creates
//! there are readable by that daemon without a prompt, which is what a service started at boot
//! (before anyone logs in) needs.

use secrecy::ExposeSecret;
use security_framework::base::Error as SecError;
use security_framework::os::macos::keychain::SecKeychain;

use crate::error::SIGN_IN_FIX;
use crate::{codec, SecretStore, StoreError, StoredCredential, KEYRING_SERVICE};

/// Where the System keychain lives.
pub const SYSTEM_KEYCHAIN: &str = "/Library/Keychains/System.keychain";

/// errSecItemNotFound: no item with this service and account.
const ITEM_NOT_FOUND: i32 = -25300;

/// A credential stored as one generic password item of the System keychain.
#[derive(Debug, Clone)]
pub struct SystemKeychainStore {
    account: String,
}

impl SystemKeychainStore {
    pub fn new(account: &str) -> Self {
        Self {
            account: account.to_owned(),
        }
    }

    fn open(&self, op: &str) -> Result<SecKeychain, StoreError> {
        SecKeychain::open(SYSTEM_KEYCHAIN).map_err(|e| self.fail(op, e))
    }

    fn fail(&self, op: &str, e: SecError) -> StoreError {
        // The message of an OSStatus names the condition only, never the item's data.
        StoreError::Unavailable(format!(
            "cannot {op} the credential in the System keychain {SYSTEM_KEYCHAIN} (OSStatus {}: \
             {e}): a boot service must run as root: reinstall it with `runner-manager service \
             install --start-at boot`, or run the service at login with the user's keychain",
            e.code()
        ))
    }
}

impl SecretStore for SystemKeychainStore {
    fn load(&self) -> Result<Option<StoredCredential>, StoreError> {
        let keychain = self.open("read")?;
        let password = match keychain.find_generic_password(KEYRING_SERVICE, &self.account) {
            Ok((password, _item)) => password,
            Err(e) if e.code() == ITEM_NOT_FOUND => return Ok(None),
            Err(e) => return Err(self.fail("read", e)),
        };
        let text = std::str::from_utf8(&password).map_err(|_| {
            StoreError::Corrupt(format!(
                "the credential in the System keychain (account {}) is corrupt (not UTF-8): \
                 {SIGN_IN_FIX}",
                self.account
            ))
        })?;
        codec::decode(text).map(Some).map_err(|why| {
            StoreError::Corrupt(format!(
                "the credential in the System keychain (account {}) is corrupt: {why}: \
                 {SIGN_IN_FIX}",
                self.account
            ))
        })
    }

    fn save(&self, credential: &StoredCredential) -> Result<(), StoreError> {
        let text = codec::encode(credential).map_err(StoreError::Io)?;
        self.open("store")?
            .set_generic_password(
                KEYRING_SERVICE,
                &self.account,
                text.expose_secret().as_bytes(),
            )
            .map_err(|e| self.fail("store", e))
    }

    fn delete(&self) -> Result<(), StoreError> {
        match self
            .open("remove")?
            .find_generic_password(KEYRING_SERVICE, &self.account)
        {
            Ok((_password, item)) => {
                // SecKeychainItemDelete's status is not returned by security-framework: look
                // again, so that a sign-out that did not happen is reported.
                item.delete();
                match self
                    .open("remove")?
                    .find_generic_password(KEYRING_SERVICE, &self.account)
                {
                    Err(e) if e.code() == ITEM_NOT_FOUND => Ok(()),
                    Ok(_) => Err(StoreError::Io(format!(
                        "the credential in the System keychain (account {}) could not be \
                         removed: remove it with Keychain Access (System keychain, item \
                         {KEYRING_SERVICE}) as an administrator",
                        self.account
                    ))),
                    Err(e) => Err(self.fail("remove", e)),
                }
            }
            Err(e) if e.code() == ITEM_NOT_FOUND => Ok(()),
            Err(e) => Err(self.fail("remove", e)),
        }
    }

    fn describe(&self) -> String {
        format!(
            "the System keychain {SYSTEM_KEYCHAIN} (service {KEYRING_SERVICE}, account {})",
            self.account
        )
    }
}
