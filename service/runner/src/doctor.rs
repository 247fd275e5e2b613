//! Host fitness checks (`runner-manager host doctor`): plain functions over the filesystem and
//! the OS, each answering one question with what was found and the fix.
//!
//! - `runner_root_reachable` (required): the identity runners run as can enter every directory
//!   from `/` down to the runner root, and the root's filesystem allows executing programs. A
//!   parent left 0700 by root stops every runner with "Permission denied" after it was
//!   registered at GitHub.
//! - `runner_package` (required): the cached package has an executable `bin/Runner.Listener`.
//! - `disk_space` (required): the runner root's filesystem is writable and has room.
//! - `capacity` (advice): the host capacity against cores and memory.
//!
//! Permissions are judged from the mode bits as the kernel would for that uid and its groups
//! (owner, else group, else other). POSIX ACLs are not read: a directory an ACL opens may be
//! reported unreachable, never the other way round.

use crate::account::{lookup_account, RunAs};
use crate::package::current_in;
use crate::platform::Platform;
use crate::process::LISTENER;
use rm_core::{CheckState, HostCheck};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Stable ids of the checks made here.
pub mod ids {
    pub const RUNNER_ROOT: &str = "runner_root_reachable";
    pub const PACKAGE: &str = "runner_package";
    pub const DISK: &str = "disk_space";
    pub const CAPACITY: &str = "capacity";
}

/// Below this much free space a launch is refused: the runner package alone unpacks to a few
/// hundred MiB, before any job writes its workspace.
pub const MIN_FREE_BYTES: u64 = 512 * 1024 * 1024;
/// Below this much free space the check warns.
pub const LOW_FREE_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// Memory one runner and its job are assumed to need, for the capacity advice (a typical CI
/// job: a compiler or a test runner).
pub const MEMORY_PER_RUNNER: u64 = 2 * 1024 * 1024 * 1024;

/// What the checks look at: the service's runner host settings.
#[derive(Debug, Clone, Copy)]
pub struct DoctorSubject<'a> {
    pub runner_root: &'a Path,
    pub cache_dir: &'a Path,
    pub run_as: &'a RunAs,
    /// `None`: GitHub publishes no runner for this machine.
    pub platform: Option<Platform>,
    pub sandbox: &'a crate::sandbox::SandboxConfig,
    /// The per-job cgroups the host set up (or would).
    pub caps: &'a crate::sandbox::JobCaps,
    /// The cache layers the host set up (or would).
    pub layers: &'a crate::caches::layers::CacheLayers,
}

/// The checks a launch depends on, in order: runner root, package, disk, sandbox (required),
/// then the resource caps and the cache layers (advice).
pub fn runner_checks(subject: &DoctorSubject<'_>) -> Vec<HostCheck> {
    vec![
        runner_root_check(subject.runner_root, subject.run_as),
        package_check(subject.cache_dir, subject.platform),
        disk_check(subject.runner_root),
        crate::sandbox::sandbox_check(subject.sandbox, sandbox_probe_identity(subject.run_as)),
        subject.caps.check(),
        subject.layers.check(),
    ]
}

/// Who the sandbox probe runs as: the service's own identity when runners run as it, else an
/// unprivileged one (pasta refuses root; a per-attempt uid may be held by a live runner).
fn sandbox_probe_identity(run_as: &RunAs) -> Option<(u32, u32)> {
    match run_as {
        RunAs::ServiceUser if !nix::unistd::geteuid().is_root() => None,
        _ => Some((NOBODY, NOBODY)),
    }
}

/// `nobody`/`nogroup` on Debian and most distributions.
const NOBODY: u32 = 65534;

fn result(
    id: &str,
    title: &str,
    state: CheckState,
    required: bool,
    detail: String,
    fix: Option<String>,
) -> HostCheck {
    HostCheck {
        id: id.to_string(),
        title: title.to_string(),
        state,
        required,
        detail,
        fix,
    }
}

/// Who runners run as, for permission checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerIdentity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the service's own when runners run as the service user; none
    /// when a uid is set, since the spawn drops them).
    pub groups: Vec<u32>,
    /// For people: "the runner uids from 1500000000 (group runner-manager-runner)".
    pub who: String,
}

/// The identity `run_as` gives runners; the error names the fix.
pub fn runner_identity(run_as: &RunAs) -> Result<RunnerIdentity, String> {
    match run_as {
        RunAs::ServiceUser => {
            let uid = nix::unistd::geteuid().as_raw();
            let gid = nix::unistd::getegid().as_raw();
            let groups = nix::unistd::getgroups()
                .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
                .unwrap_or_default();
            Ok(RunnerIdentity {
                uid,
                gid,
                groups,
                who: format!("the service's user (uid {uid})"),
            })
        }
        RunAs::Account { name } => {
            let account = lookup_account(name)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| missing_account(name))?;
            Ok(RunnerIdentity {
                uid: account.uid,
                gid: account.gid,
                groups: Vec::new(),
                who: format!("the runner account {name} (uid {})", account.uid),
            })
        }
        RunAs::PerAttemptUid {
            group_account,
            first_uid,
            ..
        } => {
            let account = lookup_account(group_account)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| missing_account(group_account))?;
            Ok(RunnerIdentity {
                uid: *first_uid,
                gid: account.gid,
                groups: Vec::new(),
                who: format!("the runner uids from {first_uid} (group {group_account})"),
            })
        }
    }
}

fn missing_account(name: &str) -> String {
    crate::account::AccountError::Missing {
        name: name.to_string(),
    }
    .to_string()
}

/// Which class of a mode's bits applies to `who` for a file owned by `owner`/`group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Owner,
    Group,
    Other,
}

impl Class {
    fn of(who: &RunnerIdentity, owner: u32, group: u32) -> Class {
        if who.uid == owner {
            Class::Owner
        } else if who.gid == group || who.groups.contains(&group) {
            Class::Group
        } else {
            Class::Other
        }
    }

    /// The execute (search, for a directory) bit of this class.
    fn exec_bit(self) -> u32 {
        match self {
            Class::Owner => 0o100,
            Class::Group => 0o010,
            Class::Other => 0o001,
        }
    }

    fn chmod_letter(self) -> char {
        match self {
            Class::Owner => 'u',
            Class::Group => 'g',
            Class::Other => 'o',
        }
    }
}

fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => uid.to_string(),
    }
}

fn group_name(gid: u32) -> String {
    match nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)) {
        Ok(Some(g)) => g.name,
        _ => gid.to_string(),
    }
}

/// The deepest existing directory on the way to `path` (`path` itself when it exists),
/// with symbolic links resolved as the kernel would follow them.
fn deepest_existing(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    loop {
        if p.exists() {
            return std::fs::canonicalize(&p).unwrap_or(p);
        }
        if !p.pop() {
            return PathBuf::from("/");
        }
    }
}

/// Every directory from `/` down to `dir`, `dir` included.
fn chain(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dir.ancestors().map(Path::to_path_buf).collect();
    out.reverse();
    out
}

const ROOT_TITLE: &str = "The runner account can reach and execute inside the runner root";

/// `runner_root_reachable`: every directory down to the runner root lets the runner identity
/// through, and its filesystem is not mounted `noexec`.
pub fn runner_root_check(runner_root: &Path, run_as: &RunAs) -> HostCheck {
    let fail = |detail: String, fix: String| {
        result(
            ids::RUNNER_ROOT,
            ROOT_TITLE,
            CheckState::Fail,
            true,
            detail,
            Some(fix),
        )
    };
    let who =
        match runner_identity(run_as) {
            Ok(w) => w,
            Err(e) => return fail(
                format!("runners cannot run: {e}"),
                "create the runner account (`runner-manager service install` does) and restart \
                 the service"
                    .into(),
            ),
        };
    if who.uid == 0 {
        return fail(
            "runners would run as root; the service refuses to run jobs as root".into(),
            "run the service as root with its per-runner uids (the default), or as an \
             unprivileged user"
                .into(),
        );
    }
    let existing = deepest_existing(runner_root);
    for dir in chain(&existing) {
        let meta = match std::fs::metadata(&dir) {
            Ok(m) => m,
            Err(e) => {
                return fail(
                    format!("{} cannot be read: {e}", dir.display()),
                    format!("check that {} exists and is a directory", dir.display()),
                )
            }
        };
        if !meta.is_dir() {
            return fail(
                format!("{} is not a directory", dir.display()),
                format!(
                    "remove or rename {}, or choose another data directory (`--data-dir`)",
                    dir.display()
                ),
            );
        }
        let mode = meta.permissions().mode() & 0o7777;
        let class = Class::of(&who, meta.uid(), meta.gid());
        if mode & class.exec_bit() == 0 {
            return fail(
                format!(
                    "{} is mode {mode:04o} (owner {}, group {}): {} cannot enter it, so no \
                     runner under it can start (\"Permission denied\")",
                    dir.display(),
                    user_name(meta.uid()),
                    group_name(meta.gid()),
                    who.who
                ),
                format!(
                    "`chmod {}+x {}` (or `chmod 755 {}`), then retry the targets that stopped",
                    class.chmod_letter(),
                    dir.display(),
                    dir.display()
                ),
            );
        }
    }
    if let Ok(fs) = nix::sys::statvfs::statvfs(&existing) {
        if fs.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC) {
            return fail(
                format!(
                    "{} is on a filesystem mounted noexec: no runner can be executed from it",
                    existing.display()
                ),
                "remount that filesystem without `noexec`, or choose a data directory on \
                 another filesystem (`--data-dir`)"
                    .into(),
            );
        }
    }
    let detail = if existing == runner_root || runner_root.exists() {
        format!(
            "{} can enter every directory down to {}",
            who.who,
            runner_root.display()
        )
    } else {
        format!(
            "{} does not exist yet (the service creates it, mode 0755, at the first launch); {} \
             can enter every directory down to {}",
            runner_root.display(),
            who.who,
            existing.display()
        )
    };
    result(
        ids::RUNNER_ROOT,
        ROOT_TITLE,
        CheckState::Pass,
        true,
        detail,
        None,
    )
}

const PACKAGE_TITLE: &str = "The runner package is present and runnable";

/// `runner_package`: the newest cached package for `platform` has an executable listener.
/// No package yet is not a failure: the first launch downloads and verifies it.
pub fn package_check(cache_dir: &Path, platform: Option<Platform>) -> HostCheck {
    let with = |state, detail: String, fix: Option<String>| {
        result(ids::PACKAGE, PACKAGE_TITLE, state, true, detail, fix)
    };
    let Some(platform) = platform else {
        return with(
            CheckState::Fail,
            "GitHub publishes no runner for this operating system and architecture".into(),
            Some("run the service on Linux, macOS or Windows on x64 or arm64".into()),
        );
    };
    let current = match current_in(cache_dir, platform) {
        Ok(c) => c,
        Err(_) if !cache_dir.exists() => None,
        Err(e) => {
            return with(
                CheckState::Fail,
                format!("the package cache cannot be read: {e}"),
                Some(format!(
                    "check {} (it belongs to the service's user)",
                    cache_dir.display()
                )),
            )
        }
    };
    let Some(package) = current else {
        return with(
            CheckState::Skipped,
            format!(
                "no {platform} runner package in {} yet: the first launch downloads and verifies it",
                cache_dir.display()
            ),
            None,
        );
    };
    let listener = package.dir.join(LISTENER);
    let refetch = format!(
        "remove {} so the next launch downloads the package again",
        package.dir.display()
    );
    match std::fs::metadata(&listener) {
        Ok(m) if m.is_file() => {
            let mode = m.permissions().mode() & 0o7777;
            // Runtimes are copies owned by the runner: the owner's execute bit is the one
            // that counts there.
            if mode & 0o100 == 0 {
                with(
                    CheckState::Fail,
                    format!(
                        "{} is mode {mode:04o}: not executable, so no runner made from package {} \
                         can start",
                        listener.display(),
                        package.id
                    ),
                    Some(format!("`chmod 755 {}`, or {refetch}", listener.display())),
                )
            } else {
                with(
                    CheckState::Pass,
                    format!(
                        "package {} in {}: {LISTENER} is executable",
                        package.id,
                        package.dir.display()
                    ),
                    None,
                )
            }
        }
        Ok(_) => with(
            CheckState::Fail,
            format!("{} is not a regular file", listener.display()),
            Some(refetch),
        ),
        Err(e) => with(
            CheckState::Fail,
            format!(
                "{} is missing from the cached package: {e}",
                listener.display()
            ),
            Some(refetch),
        ),
    }
}

const DISK_TITLE: &str = "The runner root's filesystem is writable with free space";

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1024.0 * 1024.0 * 1024.0))
}

/// `disk_space`: the filesystem under the runner root is writable by the service and has at
/// least [`MIN_FREE_BYTES`] free (warns below [`LOW_FREE_BYTES`]).
pub fn disk_check(runner_root: &Path) -> HostCheck {
    let with = |state, detail: String, fix: Option<String>| {
        result(ids::DISK, DISK_TITLE, state, true, detail, fix)
    };
    let dir = deepest_existing(runner_root);
    let move_it = "or move the data directory to a roomier filesystem (`--data-dir`)";
    let fs = match nix::sys::statvfs::statvfs(&dir) {
        Ok(fs) => fs,
        Err(e) => {
            return with(
                CheckState::Fail,
                format!(
                    "the filesystem of {} cannot be examined: {e}",
                    dir.display()
                ),
                Some(format!("check that {} is mounted", dir.display())),
            )
        }
    };
    if fs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
        return with(
            CheckState::Fail,
            format!("the filesystem of {} is mounted read-only", dir.display()),
            Some(format!("remount it read-write, {move_it}")),
        );
    }
    if let Err(e) = nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK) {
        return with(
            CheckState::Fail,
            format!("the service cannot write to {}: {e}", dir.display()),
            Some(format!(
                "give the service's user write access to {}, {move_it}",
                dir.display()
            )),
        );
    }
    // The field types differ per platform (u32 on some 32-bit ones).
    #[allow(clippy::useless_conversion)]
    let free = u64::from(fs.blocks_available()).saturating_mul(u64::from(fs.fragment_size()));
    let found = format!("{} free on the filesystem of {}", gib(free), dir.display());
    if free < MIN_FREE_BYTES {
        with(
            CheckState::Fail,
            format!(
                "{found}; a runner needs at least {} for its package and the job's files",
                gib(MIN_FREE_BYTES)
            ),
            Some(format!("free space there, {move_it}")),
        )
    } else if free < LOW_FREE_BYTES {
        with(
            CheckState::Warn,
            format!("{found}: jobs that write much may run out"),
            Some(format!("free space there, {move_it}")),
        )
    } else {
        with(CheckState::Pass, found, None)
    }
}

/// Total memory in bytes, where the OS says.
pub(crate) fn total_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// `capacity` (advice): `capacity` runners at once against this machine's cores and memory.
pub fn capacity_check(capacity: u32) -> HostCheck {
    let cores = std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1);
    capacity_advice(capacity, cores, total_memory())
}

/// The advice for `capacity` runners on `cores` cores and `memory` bytes (pure, for tests).
pub fn capacity_advice(capacity: u32, cores: u32, memory: Option<u64>) -> HostCheck {
    let title = "Capacity against cores and memory";
    let mem_text = memory.map_or_else(|| "unknown memory".to_string(), gib);
    let found = format!("capacity {capacity} runner(s) at once; {cores} core(s), {mem_text}");
    let by_memory = memory.map(|m| u32::try_from(m / MEMORY_PER_RUNNER).unwrap_or(u32::MAX));
    let fits = by_memory.map_or(cores, |m| cores.min(m)).max(1);
    let (state, detail, fix) = if capacity > cores {
        (
            CheckState::Warn,
            format!("{found}: more runners than cores, so jobs running together compete for CPU"),
            Some(format!("`runner-manager host set-capacity {fits}`")),
        )
    } else if by_memory.is_some_and(|m| capacity > m) {
        (
            CheckState::Warn,
            format!(
                "{found}: {capacity} jobs at about {} each may not fit in memory",
                gib(MEMORY_PER_RUNNER)
            ),
            Some(format!("`runner-manager host set-capacity {fits}`")),
        )
    } else {
        (CheckState::Pass, found, None)
    };
    result(ids::CAPACITY, title, state, false, detail, fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(uid: u32, gid: u32, groups: &[u32]) -> RunnerIdentity {
        RunnerIdentity {
            uid,
            gid,
            groups: groups.to_vec(),
            who: "test".into(),
        }
    }

    #[test]
    fn the_kernel_s_class_order_decides() {
        let w = who(1000, 100, &[200]);
        assert_eq!(Class::of(&w, 1000, 100), Class::Owner);
        assert_eq!(Class::of(&w, 0, 100), Class::Group);
        assert_eq!(Class::of(&w, 0, 200), Class::Group);
        assert_eq!(Class::of(&w, 0, 0), Class::Other);
        // The owner class applies even when only the group or other bits would let it in.
        assert_eq!(Class::of(&w, 1000, 0).exec_bit() & 0o011, 0);
    }

    #[test]
    fn chain_runs_from_the_root_down() {
        assert_eq!(
            chain(Path::new("/a/b")),
            vec![
                PathBuf::from("/"),
                PathBuf::from("/a"),
                PathBuf::from("/a/b")
            ]
        );
    }

    #[test]
    fn capacity_advice_warns_beyond_cores_or_memory() {
        let gib = 1024 * 1024 * 1024u64;
        let ok = capacity_advice(2, 4, Some(16 * gib));
        assert_eq!(ok.state, CheckState::Pass);
        assert!(!ok.required);
        let cpu = capacity_advice(8, 2, Some(64 * gib));
        assert_eq!(cpu.state, CheckState::Warn);
        assert!(cpu.detail.contains("2 core(s)"), "{}", cpu.detail);
        assert_eq!(
            cpu.fix.as_deref(),
            Some("`runner-manager host set-capacity 2`")
        );
        let mem = capacity_advice(4, 8, Some(4 * gib));
        assert_eq!(mem.state, CheckState::Warn);
        assert_eq!(
            mem.fix.as_deref(),
            Some("`runner-manager host set-capacity 2`")
        );
        assert_eq!(capacity_advice(1, 1, None).state, CheckState::Pass);
    }
}
