//! Machine-wide claims on per-attempt uids. Each runner root keeps its own runtimes, so the
//! filesystem alone cannot tell two runner-manager services on one machine (each with its own
//! data directory and runner root, sharing the default uid range) which uids the other uses.
//! A claim is an exclusive `flock` on `<dir>/<uid>`, held by the service from the moment it
//! picks the uid until the runtime is scrubbed. It gives two things: a uid another service has
//! picked but not yet started a process under is never picked here, and the processes running
//! as a uid this service holds are this service's job's, so it may end them.
//!
//! `flock` locks belong to the open file description and end with the process, so a crashed
//! service leaves no stale claim; at its start it claims again the uids of the runtimes it
//! finds.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where a root service keeps its claims: on a tmpfs cleared at boot, like the processes they
/// describe (the systemd unit's `RuntimeDirectory`, writable under `ProtectSystem=strict`).
#[cfg(target_os = "linux")]
pub const DEFAULT_UID_CLAIMS_DIR: &str = "/run/runner-manager/uids";
#[cfg(not(target_os = "linux"))]
pub const DEFAULT_UID_CLAIMS_DIR: &str = "/var/run/runner-manager/uids";

/// This service's claims.
#[derive(Debug)]
pub struct UidClaims {
    dir: PathBuf,
    held: Mutex<HashMap<u32, File>>,
}

impl UidClaims {
    /// Creates `dir` (0700) if needed.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
        Ok(Self {
            dir,
            held: Mutex::new(HashMap::new()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Claims `uid` for this service: true when it holds it now (already held included),
    /// false when another service does.
    pub fn try_claim(&self, uid: u32) -> io::Result<bool> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.contains_key(&uid) {
            return Ok(true);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(uid.to_string()))?;
        if !fs4::fs_std::FileExt::try_lock_exclusive(&file)? {
            return Ok(false);
        }
        held.insert(uid, file);
        Ok(true)
    }

    pub fn holds(&self, uid: u32) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&uid)
    }

    /// Gives `uid` back (closing the file ends the lock). The file stays: removing it while
    /// another service waits on it would let two services lock two different files of one name.
    pub fn release(&self, uid: u32) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_is_held_by_one_service_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        // Two opens stand for two services: flock locks of separate opens exclude each other
        // even within one process.
        let a = UidClaims::open(dir.path().join("uids")).unwrap();
        let b = UidClaims::open(dir.path().join("uids")).unwrap();
        assert!(a.try_claim(7).unwrap());
        assert!(a.try_claim(7).unwrap(), "a claim already held is held");
        assert!(!b.try_claim(7).unwrap());
        assert!(b.try_claim(8).unwrap());
        assert!(a.holds(7) && !b.holds(7));
        a.release(7);
        assert!(!a.holds(7));
        assert!(b.try_claim(7).unwrap());
        assert!(!a.try_claim(7).unwrap());
        let mode = fs::metadata(a.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
