//! Persistent workspaces: a slot per concurrent runner of a target that keeps `_work` between
//! jobs, so a checkout is an incremental fetch and build outputs survive.
//!
//! Layout, under `<runner root>/.workspaces/` (root only, 0700: no runner can reach a saved
//! slot): `<policy>/<n>/work` is the saved `_work`, `<policy>/<n>/package` the runner package
//! it was made with, and `<policy>/<n>.lease` names the runtime using the slot now. A slot is
//! moved into a runtime at spawn (a rename on one filesystem, then its files are given to the
//! runtime's account) and moved back when the runtime is scrubbed, after everything
//! credential-like was removed ([`rm_core::workspace`]). It is reset (deleted) instead when the
//! runner failed, the package changed, the target went back to ephemeral workspaces, or the
//! credentials could not be removed.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use rm_core::workspace::{scrub_git_config, CREDENTIAL_FILES, TEMP_DIR};

use rm_core::PolicyId;

use crate::runtime::{Ownership, Runtime, RuntimeName};

/// The directory under the runner root.
pub const WORKSPACES_DIR: &str = ".workspaces";
/// The runner's work folder inside a runtime (the JIT config's `work_folder`).
pub const WORK_FOLDER: &str = "_work";
/// A git config bigger than this is not a config we rewrite: the slot is reset instead.
const MAX_GIT_CONFIG: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} cannot be removed: {detail}")]
    Remove { path: PathBuf, detail: String },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A slot given to a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenSlot {
    pub index: u32,
    /// The slot had a saved workspace (false: the runner starts from an empty `_work`).
    pub restored: bool,
    /// A saved workspace was dropped because it was made with another runner package.
    pub reset_for_package: bool,
}

/// What happened to a runtime's workspace when it was given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GivenBack {
    /// The runtime held no slot (an ephemeral target's, or its slot was reset meanwhile).
    NoSlot,
    /// Saved for the next runner, with this many credential files and git configs cleaned.
    Saved { cleaned: usize },
    /// Deleted: the runner failed, or the workspace could not be made safe.
    Reset,
}

/// The persistent workspaces of one runner root.
#[derive(Debug)]
pub struct Workspaces {
    runner_root: PathBuf,
    dir: PathBuf,
    /// Takes, give-backs and resets one at a time (the files are the record; this only keeps
    /// two threads of this process from picking one slot).
    lock: Mutex<()>,
}

impl Workspaces {
    /// Creates `<runner root>/.workspaces` (0700) if needed.
    pub fn open(runner_root: &Path) -> Result<Self, WorkspaceError> {
        let dir = runner_root.join(WORKSPACES_DIR);
        private_dir(&dir)?;
        Ok(Workspaces {
            runner_root: runner_root.to_path_buf(),
            dir,
            lock: Mutex::new(()),
        })
    }

    fn policy_dir(&self, policy: PolicyId) -> PathBuf {
        self.dir.join(policy.to_string())
    }

    /// Gives `runtime` a free slot of `policy`: its saved workspace becomes the runtime's
    /// `_work`, owned by the runtime's account. A lease left by a runtime that no longer
    /// exists (a crash) is taken over.
    pub fn take(
        &self,
        runtime: &Runtime,
        policy: PolicyId,
        package: &str,
    ) -> Result<TakenSlot, WorkspaceError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = self.policy_dir(policy);
        private_dir(&dir)?;
        let index = self.free_slot(&dir)?;
        let lease = dir.join(format!("{index}.lease"));
        write_atomic(&lease, runtime.name.as_str())?;
        let slot = dir.join(index.to_string());
        private_dir(&slot)?;
        let saved = slot.join("work");
        let package_file = slot.join("package");
        let made_with = fs::read_to_string(&package_file).unwrap_or_default();
        let mut reset_for_package = false;
        if is_real_dir(&saved) && made_with.trim() != package {
            remove_tree(&saved)?;
            reset_for_package = true;
        }
        write_atomic(&package_file, package)?;
        let work = runtime.path.join(WORK_FOLDER);
        let restored = is_real_dir(&saved);
        if restored {
            // A fresh runtime has no `_work`; anything there is the package's, not a job's.
            remove_tree(&work)?;
            fs::rename(&saved, &work).map_err(io_at(&work))?;
            if let Some(owner) = runtime.owner {
                give_tree(&work, owner)?;
            }
        }
        Ok(TakenSlot {
            index,
            restored,
            reset_for_package,
        })
    }

    /// The first slot index without a live lease.
    fn free_slot(&self, dir: &Path) -> Result<u32, WorkspaceError> {
        for index in 0u32.. {
            let lease = dir.join(format!("{index}.lease"));
            let holder = match fs::read_to_string(&lease) {
                Ok(h) => h,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(index),
                Err(e) => return Err(io_at(&lease)(e)),
            };
            let live = RuntimeName::new(holder.trim())
                .is_ok_and(|name| self.runner_root.join(name.as_str()).exists());
            if !live {
                tracing::info!(slot = %lease.display(), "a workspace lease of a runtime that is gone is taken over");
                return Ok(index);
            }
        }
        unreachable!("u32 slot indices run out only after 4 billion live runners")
    }

    /// The policy whose slot `runtime` holds, if any.
    pub fn holder_policy(&self, runtime: &str) -> Option<PolicyId> {
        let name = RuntimeName::new(runtime).ok()?;
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let (dir, _) = self.held_by(&name).ok()??;
        let id = dir.file_name()?.to_str()?.parse().ok()?;
        Some(PolicyId::new(id))
    }

    /// The slot `runtime` holds, as (policy directory, slot index).
    fn held_by(&self, runtime: &RuntimeName) -> Result<Option<(PathBuf, String)>, WorkspaceError> {
        let policies = match fs::read_dir(&self.dir) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(&self.dir)(e)),
        };
        for policy in policies.flatten() {
            let Ok(leases) = fs::read_dir(policy.path()) else {
                continue;
            };
            for lease in leases.flatten() {
                let name = lease.file_name().to_string_lossy().into_owned();
                let Some(index) = name.strip_suffix(".lease") else {
                    continue;
                };
                let holder = fs::read_to_string(lease.path()).unwrap_or_default();
                if holder.trim() == runtime.as_str() {
                    return Ok(Some((policy.path(), index.to_owned())));
                }
            }
        }
        Ok(None)
    }

    /// Ends `runtime`'s use of its slot, before the runtime is scrubbed: with `keep`, its
    /// `_work` is cleaned of credentials and saved for the next runner; otherwise (or if the
    /// cleaning fails) the slot is emptied. The runtime's own `_work` is left to the scrub.
    pub fn give_back(
        &self,
        runtime: &RuntimeName,
        runtime_path: &Path,
        keep: bool,
    ) -> Result<GivenBack, WorkspaceError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((dir, index)) = self.held_by(runtime)? else {
            return Ok(GivenBack::NoSlot);
        };
        let slot = dir.join(&index);
        let saved = slot.join("work");
        let work = runtime_path.join(WORK_FOLDER);
        remove_tree(&saved)?;
        let outcome = if keep && is_real_dir(&work) {
            match remove_credentials(&work) {
                Ok(cleaned) => {
                    private_dir(&slot)?;
                    fs::rename(&work, &saved).map_err(io_at(&saved))?;
                    GivenBack::Saved { cleaned }
                }
                Err(e) => {
                    tracing::warn!(runtime = %runtime, error = %e, "the workspace could not be cleaned of credentials; the slot is reset");
                    GivenBack::Reset
                }
            }
        } else {
            GivenBack::Reset
        };
        let lease = dir.join(format!("{index}.lease"));
        match fs::remove_file(&lease) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_at(&lease)(e)),
        }
        Ok(outcome)
    }

    /// Deletes every slot of `policy` (`--workspace ephemeral`, the target removed, a fork's
    /// job seen in it). A runtime using a slot now keeps its `_work` until it ends and then
    /// saves nothing: its lease is gone.
    pub fn reset_policy(&self, policy: PolicyId) -> Result<bool, WorkspaceError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = self.policy_dir(policy);
        let existed = dir.exists();
        remove_tree(&dir)?;
        Ok(existed)
    }

    /// The number of saved workspaces of `policy` (for status).
    pub fn saved(&self, policy: PolicyId) -> usize {
        let dir = self.policy_dir(policy);
        fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| is_real_dir(&e.path().join("work")))
                    .count()
            })
            .unwrap_or(0)
    }
}

/// Removes, below `work`, the job's temp directory, every credential file, and the
/// credentials in every git repository's config; returns how many it cleaned. Links are never
/// followed: only real directories are walked and configs are opened without following one.
pub fn remove_credentials(work: &Path) -> Result<usize, WorkspaceError> {
    let mut cleaned = 0;
    let temp = work.join(TEMP_DIR);
    if fs::symlink_metadata(&temp).is_ok() {
        remove_tree(&temp)?;
        cleaned += 1;
    }
    let mut stack = vec![(work.to_path_buf(), false)];
    while let Some((dir, in_git)) = stack.pop() {
        for entry in fs::read_dir(&dir).map_err(io_at(&dir))? {
            let entry = entry.map_err(io_at(&dir))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io_at(&path))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if kind.is_dir() {
                stack.push((path, in_git || name == ".git"));
            } else if CREDENTIAL_FILES.contains(&name.as_ref()) {
                remove_tree(&path)?;
                cleaned += 1;
            } else if in_git && name == "config" && kind.is_file() && clean_git_config(&path)? {
                cleaned += 1;
            }
        }
    }
    Ok(cleaned)
}

/// Rewrites one git config without its credentials; true when it had some.
fn clean_git_config(path: &Path) -> Result<bool, WorkspaceError> {
    use std::io::{Read as _, Seek as _, Write as _};
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc_nofollow())
        .open(path)
        .map_err(io_at(path))?;
    let meta = file.metadata().map_err(io_at(path))?;
    if !meta.is_file() || meta.len() > MAX_GIT_CONFIG {
        return Err(WorkspaceError::Io {
            path: path.to_path_buf(),
            source: io::Error::other("not a git config this service rewrites"),
        });
    }
    let mut raw = Vec::new();
    file.read_to_end(&mut raw).map_err(io_at(path))?;
    let text = String::from_utf8_lossy(&raw);
    let Some(clean) = scrub_git_config(&text) else {
        return Ok(false);
    };
    file.set_len(0).map_err(io_at(path))?;
    file.rewind().map_err(io_at(path))?;
    file.write_all(clean.as_bytes()).map_err(io_at(path))?;
    Ok(true)
}

fn libc_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

/// Gives every entry of `tree` (links themselves, never their targets) to `owner`.
fn give_tree(tree: &Path, owner: Ownership) -> Result<(), WorkspaceError> {
    let mut stack = vec![tree.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path).map_err(io_at(&path))?;
        if meta.uid() != owner.uid || meta.gid() != owner.gid {
            std::os::unix::fs::lchown(&path, Some(owner.uid), Some(owner.gid))
                .map_err(io_at(&path))?;
        }
        if meta.is_dir() {
            for entry in fs::read_dir(&path).map_err(io_at(&path))? {
                stack.push(entry.map_err(io_at(&path))?.path());
            }
        }
    }
    Ok(())
}

fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

fn private_dir(path: &Path) -> Result<(), WorkspaceError> {
    use std::os::unix::fs::PermissionsExt as _;
    match fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_at(path)(e)),
    }
    fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(io_at(path))
}

fn write_atomic(path: &Path, text: &str) -> Result<(), WorkspaceError> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).map_err(io_at(&tmp))?;
    fs::rename(&tmp, path).map_err(io_at(path))
}

fn remove_tree(path: &Path) -> Result<(), WorkspaceError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(path)(e)),
        Ok(m) if m.is_dir() => {
            crate::scrub::scrub(path)
                .map(|_| ())
                .map_err(|e| WorkspaceError::Remove {
                    path: path.to_path_buf(),
                    detail: e.to_string(),
                })
        }
        Ok(_) => fs::remove_file(path).map_err(io_at(path)),
    }
}

#[cfg(test)]
mod tests;
