//! The file machine store (Linux and other Unixes): one root-only (0600) JSON file in the
//! service's data directory.
//!
//! Written atomically so that a crash or a full disk never leaves a half-written credential
//! (a renewed pair is stored before it is used, and GitHub rotates the refresh token on
//! every renewal, so losing the file means signing in again): a temporary file in the same
//! directory, created 0600, is written and fsynced, renamed over the old file, and the
//! directory is fsynced so the rename itself survives a power cut.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use secrecy::ExposeSecret;

use crate::error::SIGN_IN_FIX;
use crate::{codec, SecretStore, StoreError, StoredCredential};

/// A credential kept in one file. See the module documentation for the write protocol.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        }
    }

    /// The write protocol with a hook run just before the rename (tests inject failures there).
    fn write_with(
        &self,
        credential: &StoredCredential,
        before_rename: impl FnOnce(&File) -> io::Result<()>,
    ) -> Result<(), StoreError> {
        let text = codec::encode(credential).map_err(StoreError::Io)?;
        let dir = self.dir();
        let fail = |what: &str, e: io::Error| {
            StoreError::Io(format!(
                "cannot write credential file {}: {what}: {e}; nothing was changed: check that \
                 the data directory exists, is writable by the service and its disk is not full",
                self.path.display()
            ))
        };
        // tempfile creates the file with mode 0600 from the start (O_EXCL, never wider).
        let mut tmp = tempfile::Builder::new()
            .prefix(".credential.")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| fail("creating a temporary file", e))?;
        tmp.write_all(text.expose_secret().as_bytes())
            .map_err(|e| fail("writing", e))?;
        tmp.as_file().sync_all().map_err(|e| fail("syncing", e))?;
        before_rename(tmp.as_file()).map_err(|e| fail("before replacing", e))?;
        // On failure `persist` hands the temporary file back and dropping it removes it.
        tmp.persist(&self.path)
            .map_err(|e| fail("replacing the old file", e.error))?;
        sync_dir(dir).map_err(|e| fail("syncing the directory", e))?;
        Ok(())
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    // Directories cannot be opened for syncing on Windows; the rename is journalled by NTFS.
    Ok(())
}

impl SecretStore for FileStore {
    fn load(&self) -> Result<Option<StoredCredential>, StoreError> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(StoreError::Corrupt(format!(
                    "credential file {} is corrupt (not UTF-8): {SIGN_IN_FIX}",
                    self.path.display()
                )))
            }
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "cannot read credential file {}: {e}; check that the service runs as root",
                    self.path.display()
                )))
            }
        };
        check_private(&self.path)?;
        codec::decode(&text).map(Some).map_err(|why| {
            StoreError::Corrupt(format!(
                "credential file {} is corrupt: {why}: {SIGN_IN_FIX}",
                self.path.display()
            ))
        })
    }

    fn save(&self, credential: &StoredCredential) -> Result<(), StoreError> {
        self.write_with(credential, |_| Ok(()))
    }

    fn delete(&self) -> Result<(), StoreError> {
        match fs::remove_file(&self.path) {
            Ok(()) => sync_dir(self.dir()).map_err(|e| {
                StoreError::Io(format!(
                    "removed credential file {} but could not sync its directory: {e}",
                    self.path.display()
                ))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::Io(format!(
                "cannot remove credential file {}: {e}; remove it by hand",
                self.path.display()
            ))),
        }
    }

    fn describe(&self) -> String {
        format!("root-only file {}", self.path.display())
    }
}

/// Refuse a credential file others can read: it means someone changed its mode, and using it
/// would hide that the tokens may have leaked.
#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(path)
        .map_err(|e| {
            StoreError::Io(format!(
                "cannot inspect credential file {}: {e}",
                path.display()
            ))
        })?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(StoreError::Exposed(format!(
            "credential file {} is readable by other users (mode {mode:04o}): its tokens may have \
             leaked; run `runner-manager auth logout`, revoke the app's tokens on GitHub, then \
             `runner-manager auth login`",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<(), StoreError> {
    // Windows uses Credential Manager as its machine store; a file here is only ever an
    // explicit choice (`--credential-store file`) and inherits the data directory's ACL.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(n: u32) -> StoredCredential {
        StoredCredential {
            access_token: format!("ghu_SECRET{n}").into(),
            expires_at: None,
            refresh_token: Some(format!("ghr_SECRET{n}").into()),
            refresh_expires_at: None,
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_failed_write_loses_nothing_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path().join("credential.json"));
        store.save(&cred(1)).unwrap();
        let err = store
            .write_with(&cred(2), |_| Err(io::Error::other("disk on fire")))
            .unwrap_err();
        assert!(matches!(err, StoreError::Io(_)), "{err:?}");
        assert!(err.to_string().contains("nothing was changed"), "{err}");
        assert!(!err.to_string().contains("SECRET"), "{err}");
        assert!(store.load().unwrap().unwrap().same_tokens(&cred(1)));
        assert_eq!(entries(dir.path()), ["credential.json"]);
    }
}
