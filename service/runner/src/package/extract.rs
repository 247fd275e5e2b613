//! Unpacking a verified archive into a private temp directory, refusing entries that
//! would land or point outside it, then making the tree read-only.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("archive entry {entry} is unsafe: {why}")]
    Unsafe { entry: String, why: &'static str },
    #[error("reading the archive: {0}")]
    Io(#[from] io::Error),
}

/// Extracts a `.tar.gz` at `archive` into the existing, empty directory `dest`.
pub(crate) fn extract_tar_gz(archive: &Path, dest: &Path) -> Result<(), ExtractError> {
    let file = fs::File::open(archive)?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(io::BufReader::new(file)));
    tar.set_preserve_permissions(true);
    tar.set_preserve_ownerships(false);
    tar.set_unpack_xattrs(false);
    tar.set_overwrite(true);
    for entry in tar.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let name = path.display().to_string();
        let kind = entry.header().entry_type();
        // `entries()` consumes long-name and pax records itself; what is left must be one of
        // these.
        if !(kind.is_file() || kind.is_dir() || kind.is_symlink() || kind.is_hard_link()) {
            return Err(ExtractError::Unsafe {
                entry: name,
                why: "only files, directories and links are allowed",
            });
        }
        if kind.is_symlink() || kind.is_hard_link() {
            let target = entry
                .link_name()?
                .ok_or(ExtractError::Unsafe {
                    entry: name.clone(),
                    why: "link without a target",
                })?
                .into_owned();
            let base = if kind.is_symlink() {
                path.parent().map(Path::to_path_buf).unwrap_or_default()
            } else {
                PathBuf::new()
            };
            if !stays_inside(&base, &target) {
                return Err(ExtractError::Unsafe {
                    entry: name,
                    why: "link points outside the package",
                });
            }
        }
        if !entry.unpack_in(dest)? {
            return Err(ExtractError::Unsafe {
                entry: name,
                why: "path leaves the package directory",
            });
        }
    }
    Ok(())
}

/// Whether `target`, taken relative to `base` (both relative to the package root), stays
/// inside the root. Absolute targets never do.
pub(crate) fn stays_inside(base: &Path, target: &Path) -> bool {
    let mut depth: i64 = 0;
    for c in base.components().chain(target.components()) {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Removes every write bit below `root` (not following links), so the installed package
/// cannot be changed by accident; owners can still delete it after restoring the bits.
pub(crate) fn make_read_only(root: &Path) -> io::Result<()> {
    let mut stack = vec![root.to_path_buf()];
    let mut dirs = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let meta = entry.metadata()?;
                let mode = meta.permissions().mode() & 0o7777 & !0o222;
                fs::set_permissions(entry.path(), fs::Permissions::from_mode(mode))?;
            }
        }
        dirs.push(dir);
    }
    // Children before parents would not matter for chmod, but the root itself is left to the
    // caller, which renames it into place first.
    for dir in dirs.into_iter().filter(|d| d != root) {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o555))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_targets_are_checked_lexically() {
        assert!(stays_inside(Path::new("bin"), Path::new("../lib/x")));
        assert!(stays_inside(
            Path::new(""),
            Path::new("bin/Runner.Listener")
        ));
        assert!(!stays_inside(
            Path::new("bin"),
            Path::new("../../etc/passwd")
        ));
        assert!(!stays_inside(Path::new("bin"), Path::new("/etc/passwd")));
    }
}
