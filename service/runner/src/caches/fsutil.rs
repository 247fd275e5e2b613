//! Filesystem steps of the caches. Nothing here follows a link: jobs write inside the caches,
//! and the service is root.

use super::{io_at, CachesError};
use crate::runtime::Ownership;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A directory's owner and mode. `owner: None` leaves it to the service's own user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirMode {
    pub owner: Option<Ownership>,
    pub mode: u32,
}

impl DirMode {
    pub fn owned(owner: Option<Ownership>, mode: u32) -> DirMode {
        DirMode { owner, mode }
    }
    pub fn root_group(gid: u32, mode: u32) -> DirMode {
        DirMode {
            owner: Some(Ownership { uid: 0, gid }),
            mode,
        }
    }
}

/// Creates `path` if missing (its parent must exist) and sets its owner and mode. Answers
/// whether it was created. Refuses anything there that is not a real directory.
pub(crate) fn ensure_dir(path: &Path, mode: DirMode) -> Result<bool, CachesError> {
    let created = match fs::create_dir(path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io_at(path)(e)),
    };
    let meta = fs::symlink_metadata(path).map_err(io_at(path))?;
    if !meta.is_dir() {
        return Err(io_at(path)(io::Error::other(
            "expected a directory (not a link); remove it and try again",
        )));
    }
    // Only what differs is set: a directory already right keeps its status-change time, which
    // tells whether a job changed the caches (`changed_since`).
    if let Some(o) = mode.owner {
        if meta.uid() != o.uid || meta.gid() != o.gid {
            std::os::unix::fs::lchown(path, Some(o.uid), Some(o.gid)).map_err(io_at(path))?;
        }
    }
    // After chown, which clears setgid on some filesystems.
    let now = fs::symlink_metadata(path).map_err(io_at(path))?;
    if now.permissions().mode() & 0o7777 != mode.mode {
        fs::set_permissions(path, fs::Permissions::from_mode(mode.mode)).map_err(io_at(path))?;
    }
    Ok(created)
}

pub(crate) fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// A real directory owned by root (a sealed tool).
pub(crate) fn is_root_owned_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == 0)
}

/// Whether a directory holds anything.
pub(crate) fn non_empty(path: &Path) -> bool {
    is_real_dir(path) && fs::read_dir(path).is_ok_and(|mut d| d.next().is_some())
}

/// The group of a real directory, `None` when absent.
pub(crate) fn gid_of(path: &Path) -> Result<Option<u32>, CachesError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(Some(m.gid())),
        Ok(_) => Err(io_at(path)(io::Error::other(
            "expected a directory (not a link); remove it and try again",
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(path)(e)),
    }
}

/// Names in a directory (none when it is absent).
pub(crate) fn child_names(dir: &Path) -> Result<Vec<String>, CachesError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_at(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_at(dir))?;
        if let Ok(name) = entry.file_name().into_string() {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Real directories exactly `depth` levels below `base`.
pub(crate) fn dirs_at_depth(base: &Path, depth: usize) -> Result<Vec<PathBuf>, CachesError> {
    let mut level = vec![base.to_path_buf()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for dir in &level {
            for name in child_names(dir)? {
                let path = dir.join(name);
                if is_real_dir(&path) {
                    next.push(path);
                }
            }
        }
        level = next;
    }
    Ok(level)
}

/// Disk space a tree takes (allocated blocks; hard links counted once per tree walk would
/// need a set, and caches rarely hold them).
pub(crate) fn dir_size(path: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        total = total.saturating_add(m.blocks().saturating_mul(512));
        if m.is_dir() {
            if let Ok(entries) = fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    total
}

/// Whether `root` or anything under it (links not followed) had its status changed (`ctime`)
/// after `since` (seconds, nanoseconds), stopping at the first. Strictly after: what was made
/// while preparing shares the clock tick of the record written last (the kernel's file times
/// are coarse), and no job starts within that tick. A missing `root` has not
/// changed. Errors reading the tree are errors (the caller decides what doubt means).
pub(crate) fn changed_since(root: &Path, since: (i64, i64)) -> io::Result<bool> {
    let changed = |m: &fs::Metadata| (m.ctime(), m.ctime_nsec()) > since;
    let meta = match fs::symlink_metadata(root) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if changed(&meta) {
        return Ok(true);
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if changed(&meta) {
                return Ok(true);
            }
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(false)
}

pub(crate) fn mtime_ms(path: &Path) -> i64 {
    fs::symlink_metadata(path)
        .map(|m| m.mtime().saturating_mul(1000))
        .unwrap_or(0)
}

/// A link at `link` to `target`, owned by the runner.
pub(crate) fn symlink(
    target: &Path,
    link: &Path,
    owner: Option<Ownership>,
) -> Result<(), CachesError> {
    match std::os::unix::fs::symlink(target, link) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(link).map_err(io_at(link))?;
            std::os::unix::fs::symlink(target, link).map_err(io_at(link))?;
        }
        Err(e) => return Err(io_at(link)(e)),
    }
    if let Some(o) = owner {
        std::os::unix::fs::lchown(link, Some(o.uid), Some(o.gid)).map_err(io_at(link))?;
    }
    Ok(())
}

/// Removes a file, link or whole tree (read-only directories included), never following a
/// link out of it.
pub(crate) fn remove_any(path: &Path) -> Result<(), CachesError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(path)(e)),
        Ok(m) if m.is_dir() => crate::scrub::scrub(path)
            .map(|_| ())
            .map_err(|e| CachesError::Io {
                path: path.to_path_buf(),
                source: io::Error::other(e.to_string()),
            }),
        Ok(_) => fs::remove_file(path).map_err(io_at(path)),
    }
}

/// Makes a finished tool read-only to runners: owned by `owner` (root and the runners' group)
/// when given, no write bit for anyone else but root, nothing for others. Children first, the
/// top last: a sealed top means a sealed tree, so it is skipped the next time.
pub(crate) fn seal_tree(path: &Path, owner: Option<Ownership>) -> Result<(), CachesError> {
    let Ok(top) = fs::symlink_metadata(path) else {
        return Ok(());
    };
    let sealed = |m: &fs::Metadata| match owner {
        Some(o) => m.uid() == o.uid && m.gid() == o.gid && m.mode() & 0o222 == 0,
        None => m.mode() & 0o222 == 0,
    };
    if sealed(&top) {
        return Ok(());
    }
    let mut order = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            if let Ok(entries) = fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
        order.push((p, m));
    }
    for (p, m) in order.into_iter().rev() {
        if let Some(o) = owner {
            std::os::unix::fs::lchown(&p, Some(o.uid), Some(o.gid)).map_err(io_at(&p))?;
        }
        if m.file_type().is_symlink() {
            continue;
        }
        let keep = m.mode() & 0o555;
        let mode = match (owner, m.is_dir()) {
            (Some(_), true) => 0o550,
            (Some(_), false) => (keep & 0o550) | 0o440,
            (None, _) => keep | 0o400,
        };
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).map_err(io_at(&p))?;
    }
    Ok(())
}
