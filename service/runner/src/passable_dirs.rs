//! Directories the service creates on a path other users must walk (per-job runner users to
//! the runner root and the package cache, operators to the local API's socket).
//!
//! The service runs with umask 027, so `create_dir_all` would make every missing ancestor
//! 0750 and cut those users off (e.g. a fresh `~/.local/share` on the way to the data
//! directory). Each directory created here is set to 0711 instead: others may pass through,
//! never list. Directories that already exist are left as their owner made them.

use std::io;
use std::path::Path;

/// The mode of each directory [`create`] makes: passable, not listable, by others.
pub const PASSABLE_MODE: u32 = 0o711;

/// Creates `path` and its missing ancestors, each new one 0711. Callers that want another mode
/// for `path` itself set it afterwards.
pub fn create(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    // Missing ancestors, outermost first.
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || p.is_dir() {
            break;
        }
        missing.push(p);
        at = p.parent();
    }
    for dir in missing.into_iter().rev() {
        match std::fs::create_dir(dir) {
            Ok(()) => set_passable(dir)?,
            // Made meanwhile by someone else: theirs to mode.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_passable(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PASSABLE_MODE))
}

#[cfg(not(unix))]
fn set_passable(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn new_ancestors_are_passable_and_existing_ones_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let existing = tmp.path().join("home");
        std::fs::create_dir(&existing).unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o700)).unwrap();
        let leaf = existing.join(".local/share/runner-manager");
        create(&leaf).unwrap();
        // Whatever this process's umask: the modes are set, not left to it.
        for p in [
            existing.join(".local"),
            existing.join(".local/share"),
            leaf.clone(),
        ] {
            assert_eq!(mode(&p), 0o711, "{}", p.display());
        }
        assert_eq!(mode(&existing), 0o700, "an existing directory was changed");
        // Again: nothing to do, and an existing leaf keeps its mode.
        std::fs::set_permissions(&leaf, std::fs::Permissions::from_mode(0o750)).unwrap();
        create(&leaf).unwrap();
        assert_eq!(mode(&leaf), 0o750);
    }

    #[test]
    fn a_file_in_the_way_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), b"").unwrap();
        assert!(create(&tmp.path().join("f/sub")).is_err());
    }
}
