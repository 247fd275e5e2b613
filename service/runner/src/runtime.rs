//! The runner root and one runtime directory per attempt.
//!
//! `<root>` is owned by root (when the service is root) and 0755; each `<root>/<name>` is 0700
//! and owned by the identity its runner runs as, so a runner can write only its own runtime.
//! Names are short on purpose: Windows paths are limited to 260 characters and the runner
//! nests deep work directories below its root.

use crate::account::ResolvedRunAs;
use crate::process::EndedProcesses;
use crate::uid_claims::UidClaims;
use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where runner ids are recorded, inside the runner root (not a valid runtime name).
const SIDECAR_DIR: &str = ".ids";

/// The uid/gid a runtime and its runner belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ownership {
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("runtime name {name:?} must be 1-32 characters of a-z, A-Z, 0-9, '-' or '_'")]
    InvalidName { name: String },
    #[error("runtime {path} already exists; scrub it before reusing the name")]
    AlreadyExists { path: PathBuf },
    #[error("all {count} runner uids from {first_uid} are in use; raise the range or lower host capacity")]
    NoFreeUid { first_uid: u32, count: u32 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A validated runtime directory name (typically the attempt's short id).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RuntimeName(String);

impl RuntimeName {
    pub fn new(name: impl Into<String>) -> Result<Self, RuntimeError> {
        let name = name.into();
        let ok = !name.is_empty()
            && name.len() <= 32
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok {
            Ok(Self(name))
        } else {
            Err(RuntimeError::InvalidName { name })
        }
    }

    /// The runtime of an attempt is named by its id (8–26 of `[a-z0-9]`): short, unique and
    /// recognisable after a crash.
    pub fn for_attempt(id: &rm_core::AttemptId) -> Self {
        Self(id.as_str().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RuntimeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A created runtime directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    pub name: RuntimeName,
    pub path: PathBuf,
    /// `None` when runners run as the service's own user.
    pub owner: Option<Ownership>,
}

/// The directory that holds every runtime.
#[derive(Debug)]
pub struct RunnerRoot {
    path: PathBuf,
    run_as: ResolvedRunAs,
    /// Serializes uid allocation with directory creation, so two prepares never pick one uid.
    alloc: Mutex<()>,
    /// With per-attempt uids: the uids this service holds on the machine.
    claims: Option<UidClaims>,
}

impl RunnerRoot {
    /// Creates the root if needed and sets it to 0755 (owned by root when the service is root).
    /// With per-attempt uids, claims are kept in
    /// [`DEFAULT_UID_CLAIMS_DIR`](crate::uid_claims::DEFAULT_UID_CLAIMS_DIR).
    pub fn prepare(path: impl Into<PathBuf>, run_as: ResolvedRunAs) -> Result<Self, RuntimeError> {
        Self::prepare_with_claims(path, run_as, crate::uid_claims::DEFAULT_UID_CLAIMS_DIR)
    }

    /// [`Self::prepare`] with the claims kept in `claims_dir`; the uids of the runtimes found
    /// (a restart) are claimed again.
    pub fn prepare_with_claims(
        path: impl Into<PathBuf>,
        run_as: ResolvedRunAs,
        claims_dir: impl AsRef<Path>,
    ) -> Result<Self, RuntimeError> {
        let path = path.into();
        crate::passable_dirs::create(&path).map_err(io_err(&path))?;
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::lchown(&path, Some(0), Some(0)).map_err(io_err(&path))?;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).map_err(io_err(&path))?;
        let claims = match run_as {
            ResolvedRunAs::Pool { .. } => match UidClaims::open(claims_dir.as_ref()) {
                Ok(claims) => Some(claims),
                // Runners still never share a uid with a running process; only what a job
                // leaves running is not ended, and two services here may pick one uid at once.
                Err(e) => {
                    tracing::warn!(dir = %claims_dir.as_ref().display(), error = %e, "runner uids cannot be claimed machine-wide: processes a job leaves running will not be ended; make the directory writable for the service");
                    None
                }
            },
            _ => None,
        };
        let root = Self {
            path,
            run_as,
            alloc: Mutex::new(()),
            claims,
        };
        if let Some(claims) = &root.claims {
            for runtime in root.list()? {
                let Some(uid) = runtime.owner.map(|o| o.uid).filter(|u| root.in_range(*u)) else {
                    continue;
                };
                // Either way its leftovers are then not ended here: they may be another
                // service's.
                match claims.try_claim(uid) {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(runtime = %runtime.name, uid, "another runner-manager service on this machine holds the uid of a runtime found here")
                    }
                    Err(e) => {
                        tracing::warn!(runtime = %runtime.name, uid, error = %e, "the uid of a runtime found here could not be claimed")
                    }
                }
            }
        }
        Ok(root)
    }

    /// Whether `uid` is one of the per-attempt uids this root hands out.
    fn in_range(&self, uid: u32) -> bool {
        match self.run_as {
            ResolvedRunAs::Pool {
                first_uid, count, ..
            } => uid >= first_uid && uid - first_uid < count,
            _ => false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn runtime_path(&self, name: &RuntimeName) -> PathBuf {
        self.path.join(name.as_str())
    }

    /// Creates `<root>/<name>` (0700) owned by the identity its runner will run as.
    pub fn create_runtime(&self, name: &RuntimeName) -> Result<Runtime, RuntimeError> {
        let path = self.runtime_path(name);
        let _guard = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
        let owner = match self.run_as {
            ResolvedRunAs::ServiceUser => None,
            ResolvedRunAs::Fixed(o) => Some(o),
            ResolvedRunAs::Pool {
                gid,
                first_uid,
                count,
            } => {
                let used = self.uids_in_use()?;
                // A uid with no runtime here may still run processes: a job's leftovers that
                // could not be ended (see `process::uids`), or another service's runner. It is
                // not handed out.
                let running =
                    crate::process::uids::running_as(|u| self.in_range(u) && !used.contains(&u))
                        .map_err(io_err(Path::new("/proc")))?;
                for (uid, pids) in &running {
                    tracing::info!(uid, ?pids, "runner uid skipped: processes still run as it (left by an earlier job, or another service's runner)");
                }
                let mut picked = None;
                for uid in (0..count).filter_map(|i| first_uid.checked_add(i)) {
                    if used.contains(&uid) || running.contains_key(&uid) {
                        continue;
                    }
                    // Last, as it takes the uid: one another service picked and has not
                    // started anything under yet is skipped too.
                    match &self.claims {
                        Some(claims) if !claims.try_claim(uid).map_err(io_err(claims.dir()))? => {}
                        _ => {
                            picked = Some(uid);
                            break;
                        }
                    }
                }
                let uid = picked.ok_or(RuntimeError::NoFreeUid { first_uid, count })?;
                Some(Ownership { uid, gid })
            }
        };
        let made = fs::create_dir(&path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => RuntimeError::AlreadyExists { path: path.clone() },
                _ => io_err(&path)(e),
            })
            .and_then(|()| {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
                    .map_err(io_err(&path))?;
                if let Some(o) = owner {
                    std::os::unix::fs::lchown(&path, Some(o.uid), Some(o.gid))
                        .map_err(io_err(&path))?;
                }
                Ok(())
            });
        if let Err(e) = made {
            // Not on AlreadyExists: that directory is an earlier runtime's.
            if !matches!(e, RuntimeError::AlreadyExists { .. }) {
                let _ = fs::remove_dir(&path);
            }
            if let (Some(o), Some(claims)) = (owner, &self.claims) {
                claims.release(o.uid);
            }
            return Err(e);
        }
        Ok(Runtime {
            name: name.clone(),
            path,
            owner,
        })
    }

    /// The runtimes present now (for recovery), with their owners.
    pub fn list(&self) -> Result<Vec<Runtime>, RuntimeError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.path).map_err(io_err(&self.path))? {
            let entry = entry.map_err(io_err(&self.path))?;
            let Ok(name) = RuntimeName::new(entry.file_name().to_string_lossy().into_owned())
            else {
                continue;
            };
            let meta = fs::symlink_metadata(entry.path()).map_err(io_err(&entry.path()))?;
            if !meta.is_dir() {
                continue;
            }
            let owner = match self.run_as {
                ResolvedRunAs::ServiceUser => None,
                _ => Some(Ownership {
                    uid: meta.uid(),
                    gid: meta.gid(),
                }),
            };
            out.push(Runtime {
                name,
                path: entry.path(),
                owner,
            });
        }
        Ok(out)
    }

    /// Durably records the runner id GitHub assigned to `name`'s runner, before the journal
    /// does (a crash between the two is recovered from this file). Kept in `<root>/.ids/`,
    /// owned by the service, out of the runner's reach.
    pub fn write_sidecar(&self, name: &RuntimeName, runner_id: u64) -> Result<(), RuntimeError> {
        let dir = self.path.join(SIDECAR_DIR);
        match fs::create_dir(&dir) {
            Ok(()) => fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                .map_err(io_err(&dir))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(&dir)(e)),
        }
        let path = dir.join(name.as_str());
        let tmp = dir.join(format!(".{}.tmp", name.as_str()));
        {
            use std::io::Write;
            let mut f = fs::File::create(&tmp).map_err(io_err(&tmp))?;
            writeln!(f, "{runner_id}").map_err(io_err(&tmp))?;
            f.sync_all().map_err(io_err(&tmp))?;
        }
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(&dir))?;
        Ok(())
    }

    /// The runner id recorded for `name`, if any. A corrupt file reads as `None` (GitHub's
    /// inventory by runner name is the fallback).
    pub fn read_sidecar(&self, name: &RuntimeName) -> Result<Option<u64>, RuntimeError> {
        let path = self.path.join(SIDECAR_DIR).join(name.as_str());
        match fs::read_to_string(&path) {
            Ok(s) => Ok(s.trim().parse().ok()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// Forgets `name`'s runner id (after the attempt is cleaned).
    pub fn remove_sidecar(&self, name: &RuntimeName) -> Result<(), RuntimeError> {
        let path = self.path.join(SIDECAR_DIR).join(name.as_str());
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// The per-attempt uid `name`'s runtime belongs to, when this service holds it on the
    /// machine; `None` when the runtime is gone or runners get no uid of their own.
    pub fn held_uid(&self, name: &RuntimeName) -> Option<u32> {
        let claims = self.claims.as_ref()?;
        let uid = fs::symlink_metadata(self.runtime_path(name)).ok()?.uid();
        (self.in_range(uid) && claims.holds(uid)).then_some(uid)
    }

    /// Ends every process still running as `uid`: what a finished job left outside its
    /// runner's process group. Only a uid this service holds: another's may be a running job.
    pub fn end_processes_of(&self, uid: u32) -> Result<EndedProcesses, RuntimeError> {
        match &self.claims {
            Some(claims) if self.in_range(uid) && claims.holds(uid) => {
                crate::process::uids::end_all_as(uid).map_err(io_err(Path::new("/proc")))
            }
            _ => Ok(EndedProcesses::default()),
        }
    }

    /// Gives a uid back once its runtime is removed, for this or another service to hand out.
    /// Under the allocation lock, and not while a runtime here has it: a runtime made between
    /// the old one's removal and this call may already have been given the held uid again.
    pub fn release_uid(&self, uid: u32) {
        let Some(claims) = &self.claims else {
            return;
        };
        let _guard = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
        match self.uids_in_use() {
            Ok(used) if !used.contains(&uid) => claims.release(uid),
            // Kept: held by this service a while longer is the safe side.
            _ => {}
        }
    }

    /// The filesystem is the record of which per-attempt uid is taken: a runtime's owner.
    fn uids_in_use(&self) -> Result<HashSet<u32>, RuntimeError> {
        let mut used = HashSet::new();
        for entry in fs::read_dir(&self.path).map_err(io_err(&self.path))? {
            let entry = entry.map_err(io_err(&self.path))?;
            if let Ok(meta) = fs::symlink_metadata(entry.path()) {
                used.insert(meta.uid());
            }
        }
        Ok(used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_and_plain() {
        assert!(RuntimeName::new("a1b2c3d4").is_ok());
        assert!(RuntimeName::new("").is_err());
        assert!(RuntimeName::new("../x").is_err());
        assert!(RuntimeName::new("x".repeat(33)).is_err());
        let id = rm_core::AttemptId::new("01jabcdefghjkmnpqrstvwxyz0").unwrap();
        assert_eq!(RuntimeName::for_attempt(&id).as_str(), id.as_str());
    }

    #[test]
    fn creates_private_runtimes_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = RunnerRoot::prepare(dir.path().join("r"), ResolvedRunAs::ServiceUser).unwrap();
        let name = RuntimeName::new("abc").unwrap();
        let rt = root.create_runtime(&name).unwrap();
        let mode = fs::metadata(&rt.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(
            fs::metadata(root.path()).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert!(matches!(
            root.create_runtime(&name),
            Err(RuntimeError::AlreadyExists { .. })
        ));
        assert_eq!(root.list().unwrap().len(), 1);

        assert_eq!(root.read_sidecar(&name).unwrap(), None);
        root.write_sidecar(&name, 42).unwrap();
        root.write_sidecar(&name, 43).unwrap();
        assert_eq!(root.read_sidecar(&name).unwrap(), Some(43));
        assert_eq!(
            root.list().unwrap().len(),
            1,
            "the sidecar dir is not a runtime"
        );
        root.remove_sidecar(&name).unwrap();
        root.remove_sidecar(&name).unwrap();
        assert_eq!(root.read_sidecar(&name).unwrap(), None);
    }

    #[test]
    fn a_uid_that_processes_still_run_as_is_not_handed_out() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to run a process as another uid");
            return;
        }
        use std::os::unix::process::CommandExt;
        // A range of its own: tests run at once, and services on this machine use the default.
        let first_uid = 1_500_000_100;
        let dir = tempfile::tempdir().unwrap();
        let pool = ResolvedRunAs::Pool {
            gid: 65534,
            first_uid,
            count: 3,
        };
        let root =
            RunnerRoot::prepare_with_claims(dir.path().join("r"), pool, dir.path().join("uids"))
                .unwrap();
        // Left running by an earlier job under the first uid, whose runtime is gone.
        let mut leftover = std::process::Command::new("sleep")
            .arg("300")
            .uid(first_uid)
            .gid(65534)
            .spawn()
            .unwrap();
        let a = root
            .create_runtime(&RuntimeName::new("a").unwrap())
            .unwrap();
        assert_eq!(a.owner.unwrap().uid, first_uid + 1);
        // Once it died (a zombie not yet reaped runs nothing), the uid is free again.
        leftover.kill().unwrap();
        let pid = leftover.id();
        let start = std::time::Instant::now();
        while crate::process::procfs::read_stat(pid)
            .unwrap()
            .is_some_and(|s| s.state != 'Z')
        {
            assert!(start.elapsed() < std::time::Duration::from_secs(30));
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let b = root
            .create_runtime(&RuntimeName::new("b").unwrap())
            .unwrap();
        assert_eq!(b.owner.unwrap().uid, first_uid);
        leftover.wait().unwrap();
    }

    #[test]
    fn pool_allocates_distinct_uids_from_the_filesystem() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to chown runtimes");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // Not the default range, which services running on this machine use.
        let pool = ResolvedRunAs::Pool {
            gid: 65534,
            first_uid: 1_500_000_200,
            count: 2,
        };
        let claims = dir.path().join("uids");
        let root = RunnerRoot::prepare_with_claims(dir.path().join("r"), pool, &claims).unwrap();
        let a = root
            .create_runtime(&RuntimeName::new("a").unwrap())
            .unwrap();
        let b = root
            .create_runtime(&RuntimeName::new("b").unwrap())
            .unwrap();
        assert_ne!(a.owner.unwrap().uid, b.owner.unwrap().uid);
        assert!(matches!(
            root.create_runtime(&RuntimeName::new("c").unwrap()),
            Err(RuntimeError::NoFreeUid { .. })
        ));
        // A fresh RunnerRoot (a restart) sees the same uids as taken.
        fs::remove_dir(&a.path).unwrap();
        drop(root);
        let again = RunnerRoot::prepare_with_claims(dir.path().join("r"), pool, &claims).unwrap();
        let c = again
            .create_runtime(&RuntimeName::new("c").unwrap())
            .unwrap();
        assert_eq!(c.owner.unwrap().uid, a.owner.unwrap().uid);
    }

    /// Two runner roots with one claims directory stand for two services on one machine.
    fn two_services(
        dir: &Path,
        first_uid: u32,
        count: u32,
    ) -> (RunnerRoot, RunnerRoot, ResolvedRunAs) {
        let pool = ResolvedRunAs::Pool {
            gid: 65534,
            first_uid,
            count,
        };
        let claims = dir.join("uids");
        let a = RunnerRoot::prepare_with_claims(dir.join("a"), pool, &claims).unwrap();
        let b = RunnerRoot::prepare_with_claims(dir.join("b"), pool, &claims).unwrap();
        (a, b, pool)
    }

    #[test]
    fn a_uid_is_held_machine_wide_from_its_pick_until_its_runtime_is_gone() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to chown runtimes");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let first_uid = 1_500_000_300;
        let (a, b, pool) = two_services(dir.path(), first_uid, 2);
        let name = RuntimeName::new("r1").unwrap();
        assert_eq!(
            a.create_runtime(&name).unwrap().owner.unwrap().uid,
            first_uid
        );
        // No process runs as it yet (the runner is not spawned): the claim alone keeps it.
        assert_eq!(
            b.create_runtime(&RuntimeName::new("r2").unwrap())
                .unwrap()
                .owner
                .unwrap()
                .uid,
            first_uid + 1
        );
        assert!(matches!(
            b.create_runtime(&RuntimeName::new("r3").unwrap()),
            Err(RuntimeError::NoFreeUid { .. })
        ));
        // A restart of the first service claims its runtime's uid again at once. (Here, in one
        // process, a child another test forks keeps a copy of the dropped claim's descriptor
        // — and with it the lock — until its exec closes it: a few milliseconds, more on a
        // busy machine; a restarted service is a new process and has no such wait.)
        drop(a);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let a = loop {
            let a = RunnerRoot::prepare_with_claims(
                dir.path().join("a"),
                pool,
                dir.path().join("uids"),
            )
            .unwrap();
            if a.held_uid(&name).is_some() || std::time::Instant::now() > deadline {
                break a;
            }
            drop(a);
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(a.held_uid(&name), Some(first_uid));
        assert!(matches!(
            b.create_runtime(&RuntimeName::new("r3").unwrap()),
            Err(RuntimeError::NoFreeUid { .. })
        ));
        // Handed out here again between its runtime's removal and the release that follows:
        // the late release must not give away the new runtime's uid.
        fs::remove_dir(a.runtime_path(&name)).unwrap();
        let again = RuntimeName::new("r4").unwrap();
        assert_eq!(
            a.create_runtime(&again).unwrap().owner.unwrap().uid,
            first_uid
        );
        a.release_uid(first_uid);
        assert_eq!(a.held_uid(&again), Some(first_uid));
        assert!(matches!(
            b.create_runtime(&RuntimeName::new("r3").unwrap()),
            Err(RuntimeError::NoFreeUid { .. })
        ));
        // Given back once its runtime is gone, the other service may hand it out.
        fs::remove_dir(a.runtime_path(&again)).unwrap();
        a.release_uid(first_uid);
        assert_eq!(
            b.create_runtime(&RuntimeName::new("r3").unwrap())
                .unwrap()
                .owner
                .unwrap()
                .uid,
            first_uid
        );
    }

    #[test]
    fn the_processes_a_job_left_are_ended_by_the_service_holding_its_uid_only() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to run a process as another uid");
            return;
        }
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let dir = tempfile::tempdir().unwrap();
        let first_uid = 1_500_000_400;
        let (a, b, _) = two_services(dir.path(), first_uid, 2);
        let name = RuntimeName::new("r1").unwrap();
        let uid = a.create_runtime(&name).unwrap().owner.unwrap().uid;
        // A job's process that left its runner's group, as `setsid` makes one.
        let mut leftover = std::process::Command::new("sleep")
            .arg("300")
            .uid(uid)
            .gid(65534)
            .process_group(0)
            .spawn()
            .unwrap();
        let alive = |pid: u32| {
            crate::process::procfs::read_stat(pid)
                .unwrap()
                .is_some_and(|s| s.state != 'Z')
        };
        // The other service does not hold the uid: for all it knows that is a running job.
        assert_eq!(b.end_processes_of(uid).unwrap(), EndedProcesses::default());
        assert!(alive(leftover.id()));
        assert_eq!(a.held_uid(&name), Some(uid));
        let ended = a.end_processes_of(uid).unwrap();
        assert_eq!(ended.ended, vec![leftover.id()]);
        assert!(ended.remaining.is_empty());
        assert_eq!(leftover.wait().unwrap().signal(), Some(9));
        assert!(!alive(leftover.id()));
    }
}
