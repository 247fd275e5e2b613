//! Persistent workspaces: a slot per concurrent runner of a target that keeps its work folder
//! between jobs, so a checkout is an incremental fetch and build outputs survive.
//!
//! Layout, under `<runner root>/.workspaces/` (root's, 0711: runners may pass through to the
//! work folder they are given, never list what else is there): `<policy>/<n>/work` is a slot's
//! work folder, `<policy>/<n>/package` the runner package it was made with, `<policy>/<n>.lease`
//! names the runtime using the slot now and `<policy>/<n>.reset` asks that the slot be deleted
//! when that runtime is done with it. The work folder stays where it is, so every path a job
//! wrote into it (a venv's interpreter, a build cache) stays valid for the next job: the runner
//! is registered with it as its absolute work folder. Between jobs it belongs to root (0700);
//! a runner claiming it is given the whole tree. Before it is kept, everything credential-like
//! is removed ([`rm_core::workspace`]). It is deleted instead when the runner failed, the
//! package changed, the lease was left by a runtime that is gone (a crash: never cleaned), the
//! target went back to ephemeral workspaces, or the credentials could not be removed.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use rm_core::workspace::{scrub_git_config, CREDENTIAL_FILES, TEMP_DIR};
use rm_core::PolicyId;

use crate::runtime::{Ownership, Runtime, RuntimeName};

/// The directory under the runner root.
pub const WORKSPACES_DIR: &str = ".workspaces";
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

/// A slot claimed for a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedSlot {
    pub index: u32,
    /// The runner's work folder (absolute; it exists and belongs to the runtime's account).
    pub work_folder: PathBuf,
    /// It holds what an earlier job left (false: the runner starts from an empty one).
    pub restored: bool,
    /// What it held was deleted: made with another runner package, or left by a runner that
    /// was never cleaned.
    pub reset: bool,
}

/// What happened to a runtime's slot when it was given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GivenBack {
    /// The runtime held no slot (an ephemeral target's, or a runner for a fork's job).
    NoSlot,
    /// Kept for the next runner, with this many credential files and git configs cleaned.
    Saved { cleaned: usize },
    /// Deleted: the runner failed, a reset was asked for, or the work folder could not be
    /// made safe.
    Reset,
}

/// The persistent workspaces of one runner root.
#[derive(Debug)]
pub struct Workspaces {
    runner_root: PathBuf,
    dir: PathBuf,
    /// Claims, give-backs and resets one at a time (the files are the record; this only keeps
    /// two threads of this process from picking one slot).
    lock: Mutex<()>,
}

impl Workspaces {
    /// Creates `<runner root>/.workspaces` if needed.
    pub fn open(runner_root: &Path) -> Result<Self, WorkspaceError> {
        let dir = runner_root.join(WORKSPACES_DIR);
        pass_through_dir(&dir)?;
        Ok(Workspaces {
            runner_root: runner_root.to_path_buf(),
            dir,
            lock: Mutex::new(()),
        })
    }

    fn policy_dir(&self, policy: PolicyId) -> PathBuf {
        self.dir.join(policy.to_string())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives `runtime` a free slot of `policy` and answers its work folder, given to the
    /// runtime's account. A lease left by a runtime that no longer exists (a crash) is taken
    /// over, and what that runner left is deleted: it was never cleaned.
    pub fn claim(
        &self,
        runtime: &Runtime,
        policy: PolicyId,
        package: &str,
    ) -> Result<ClaimedSlot, WorkspaceError> {
        let _guard = self.lock();
        let dir = self.policy_dir(policy);
        pass_through_dir(&dir)?;
        let (index, stale) = self.free_slot(&dir)?;
        let slot = dir.join(index.to_string());
        let work = slot.join("work");
        let made_with = fs::read_to_string(slot.join("package")).unwrap_or_default();
        let mut reset = false;
        if is_real_dir(&work) && (stale || made_with.trim() != package) {
            remove_tree(&work)?;
            reset = true;
        }
        remove_tree(&dir.join(format!("{index}.reset")))?;
        write_atomic(&dir.join(format!("{index}.lease")), runtime.name.as_str())?;
        pass_through_dir(&slot)?;
        write_atomic(&slot.join("package"), package)?;
        let restored = is_real_dir(&work);
        if !restored {
            fs::create_dir(&work).map_err(io_at(&work))?;
        }
        if let Some(owner) = runtime.owner {
            give_tree(&work, owner)?;
        }
        fs::set_permissions(&work, fs::Permissions::from_mode(0o700)).map_err(io_at(&work))?;
        Ok(ClaimedSlot {
            index,
            work_folder: work,
            restored,
            reset,
        })
    }

    /// The first slot index without a live lease, and whether its lease was stale.
    fn free_slot(&self, dir: &Path) -> Result<(u32, bool), WorkspaceError> {
        for index in 0u32.. {
            let lease = dir.join(format!("{index}.lease"));
            let holder = match fs::read_to_string(&lease) {
                Ok(h) => h,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((index, false)),
                Err(e) => return Err(io_at(&lease)(e)),
            };
            if !self.is_live(&holder) {
                tracing::info!(slot = %lease.display(), "a workspace slot left by a runner that is gone is reset and reused");
                return Ok((index, true));
            }
        }
        unreachable!("u32 slot indices run out only after 4 billion live runners")
    }

    /// Whether the runtime a lease names still exists.
    fn is_live(&self, holder: &str) -> bool {
        RuntimeName::new(holder.trim())
            .is_ok_and(|name| self.runner_root.join(name.as_str()).exists())
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

    /// The work folder of the slot `runtime` holds, if it holds one (its sandbox binds it).
    pub fn work_folder_of(&self, runtime: &RuntimeName) -> Option<PathBuf> {
        let _guard = self.lock();
        let (dir, index) = self.held_by(runtime).ok()??;
        let work = dir.join(index).join("work");
        is_real_dir(&work).then_some(work)
    }

    /// Ends `runtime`'s use of its slot: with `keep` (and no reset asked for), the work folder
    /// is cleaned of credentials and kept, root's, for the next runner; otherwise (or if the
    /// cleaning fails) it is deleted.
    pub fn give_back(
        &self,
        runtime: &RuntimeName,
        keep: bool,
    ) -> Result<GivenBack, WorkspaceError> {
        let _guard = self.lock();
        let Some((dir, index)) = self.held_by(runtime)? else {
            return Ok(GivenBack::NoSlot);
        };
        let work = dir.join(&index).join("work");
        let reset_marker = dir.join(format!("{index}.reset"));
        let keep = keep && fs::symlink_metadata(&reset_marker).is_err();
        let outcome = if keep && is_real_dir(&work) {
            match remove_credentials(&work).and_then(|cleaned| seal(&work).map(|()| cleaned)) {
                Ok(cleaned) => GivenBack::Saved { cleaned },
                Err(e) => {
                    tracing::warn!(runtime = %runtime, error = %e, "the workspace could not be cleaned of credentials; the slot is reset");
                    remove_tree(&work)?;
                    GivenBack::Reset
                }
            }
        } else {
            remove_tree(&work)?;
            GivenBack::Reset
        };
        remove_tree(&reset_marker)?;
        remove_tree(&dir.join(format!("{index}.lease")))?;
        Ok(outcome)
    }

    /// Deletes every slot of `policy` (`--workspace ephemeral`, the target removed, a fork's
    /// job seen in it). A slot a runner uses now is deleted when that runner gives it back.
    /// True when anything was deleted or marked.
    pub fn reset_policy(&self, policy: PolicyId) -> Result<bool, WorkspaceError> {
        let _guard = self.lock();
        let dir = self.policy_dir(policy);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_at(&dir)(e)),
        };
        let mut live = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(index) = name.strip_suffix(".lease") {
                if self.is_live(&fs::read_to_string(entry.path()).unwrap_or_default()) {
                    live.push(index.to_owned());
                }
            }
        }
        if live.is_empty() {
            remove_tree(&dir)?;
            return Ok(true);
        }
        for entry in fs::read_dir(&dir).map_err(io_at(&dir))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let index = name.split('.').next().unwrap_or_default();
            if !live.iter().any(|l| l == index) {
                remove_tree(&entry.path())?;
            }
        }
        for index in live {
            write_atomic(&dir.join(format!("{index}.reset")), "")?;
        }
        Ok(true)
    }

    /// The slots of `policy` holding a work folder (for status).
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

/// Takes a kept work folder out of every runner's reach until the next claim: root's, 0700.
/// Without root there is no other account to keep out.
fn seal(work: &Path) -> Result<(), WorkspaceError> {
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::lchown(work, Some(0), Some(0)).map_err(io_at(work))?;
    }
    fs::set_permissions(work, fs::Permissions::from_mode(0o700)).map_err(io_at(work))
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

/// A directory runners may pass through but not list (0711).
fn pass_through_dir(path: &Path) -> Result<(), WorkspaceError> {
    match fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_at(path)(e)),
    }
    fs::set_permissions(path, fs::Permissions::from_mode(0o711)).map_err(io_at(path))
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
