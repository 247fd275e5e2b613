//! Per-job cgroups: each runner's whole process tree in a cgroup v2 of its own, under the
//! subtree systemd delegates to the service (`Delegate=yes`), with memory, process-count, CPU
//! and I/O caps where those controllers are delegated. Written here rather than taken from a
//! crate: the whole interface is a handful of files (`cgroup.procs`, `cgroup.kill`,
//! `cgroup.events` and the caps), and the crates that wrap them (cgroups-rs, controlgroup)
//! bring cgroup v1 and container machinery this needs none of.
//!
//! Layout under the service's own cgroup `<base>`:
//! - `<base>/service`: the service itself (cgroup v2 lets a cgroup that hands controllers to
//!   its children hold no process of its own);
//! - `<base>/jobs`: every job together, at a lower CPU and I/O weight than the service, and
//!   with a memory ceiling that leaves the desktop its share;
//! - `<base>/jobs/<runtime>`: one job, with its own memory, pids caps.
//!
//! The cgroup also ends the job: `cgroup.kill` reaches every process of it, however it
//! detached (`setsid`, double fork, another session), with or without the sandbox's PID
//! namespace, in both service modes.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The service's own leaf under its cgroup.
const SERVICE_LEAF: &str = "service";
/// The parent of every job's cgroup.
const JOBS: &str = "jobs";
/// The controllers a job's caps use, in the order they are enabled.
pub const CONTROLLERS: &[&str] = &["memory", "pids", "cpu", "io"];

/// The caps each job gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapLimits {
    /// Above this a job's memory use is throttled and reclaimed (`memory.high`).
    pub memory_high: u64,
    /// The most a job may hold; beyond it the kernel's OOM killer ends a process of that job
    /// only (`memory.max`). All jobs together get the same ceiling (`jobs/memory.max`).
    pub memory_max: u64,
    /// Processes and threads of one job (`pids.max`): a fork bomb stops there.
    pub pids_max: u64,
    /// The jobs' CPU and I/O weight against the service's 100 (`cpu.weight`, `io.weight`).
    pub cpu_weight: u32,
    pub io_weight: u32,
}

impl CapLimits {
    /// Sized from a host with `total_memory` bytes: a job may use up to three quarters of it
    /// (all jobs together too), and is throttled above half; a quarter always stays with the
    /// desktop. 4096 processes is far above what a build runs (`make -j` on 64 cores) and far
    /// below what stalls a machine.
    pub fn for_memory(total_memory: u64) -> CapLimits {
        CapLimits {
            memory_high: total_memory / 2,
            memory_max: total_memory / 4 * 3,
            pids_max: 4096,
            cpu_weight: 20,
            io_weight: 20,
        }
    }

    /// Sized from this host ([`crate::doctor::total_memory`]; 8 GiB where it cannot be read).
    pub fn for_this_host() -> CapLimits {
        CapLimits::for_memory(crate::doctor::total_memory().unwrap_or(8 << 30))
    }
}

/// Why jobs get no cgroup of their own here; each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("this host has no unified cgroup v2 hierarchy (cgroup v1 controllers only)")]
    NoUnified,
    #[error(
        "the service runs in the machine's root cgroup, which is not its own to divide \
         (it was not started by systemd with `Delegate=yes`)"
    )]
    RootCgroup,
    #[error(
        "the service's cgroup {} is not delegated to it (it may not create cgroups under it)",
        path.display()
    )]
    NotDelegated { path: PathBuf },
    #[error(
        "the service's cgroup {} holds other processes too ({pids:?}: a terminal's or a \
         session's scope), so it is not the service's own",
        path.display()
    )]
    Shared { path: PathBuf, pids: Vec<i32> },
    #[error("setting up the jobs' cgroups under {}: {reason}", path.display())]
    Setup { path: PathBuf, reason: String },
}

impl Unavailable {
    /// What the operator does about it.
    pub fn fix(&self) -> String {
        match self {
            Unavailable::NoUnified => {
                "boot with the unified hierarchy (`systemd.unified_cgroup_hierarchy=1` on the \
                 kernel command line), as current Debian and Ubuntu do by default"
            }
            Unavailable::RootCgroup
            | Unavailable::NotDelegated { .. }
            | Unavailable::Shared { .. } => {
                "run the service from its systemd unit (`runner-manager service install`), \
                 which delegates its cgroup (`Delegate=yes`)"
            }
            Unavailable::Setup { .. } => "see the service's log for the error, then restart it",
        }
        .to_owned()
    }
}

/// The jobs' cgroups of this service.
#[derive(Debug)]
pub struct JobCgroups {
    jobs: PathBuf,
    /// The controllers the jobs got (a subset of [`CONTROLLERS`]).
    enabled: Vec<&'static str>,
    limits: CapLimits,
}

/// What the service's process says about its cgroup: the unified mount and its own path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The service's cgroup directory.
    pub base: PathBuf,
}

/// The cgroup v2 path in `/proc/<pid>/cgroup` text (the `0::` line).
pub fn unified_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim_end)
}

/// The unified hierarchy's mount point and the cgroup it shows, from `/proc/self/mountinfo`.
pub fn unified_mount(mountinfo: &str) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut fields = left.split_whitespace();
        let root = fields.nth(3)?;
        let point = fields.next()?;
        Some((PathBuf::from(unescape(point)), unescape(root)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if let Some(v) = code {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where this process's cgroup is (no change made). A service already in its own
/// `service` leaf (it set itself up before, and was re-executed) is placed at the leaf's
/// parent.
pub fn placement() -> Result<Placement, Unavailable> {
    let cgroup =
        std::fs::read_to_string("/proc/self/cgroup").map_err(|_| Unavailable::NoUnified)?;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|_| Unavailable::NoUnified)?;
    placement_from(&cgroup, &mountinfo)
}

fn placement_from(cgroup: &str, mountinfo: &str) -> Result<Placement, Unavailable> {
    let path = unified_path(cgroup).ok_or(Unavailable::NoUnified)?;
    let (mount, root) = unified_mount(mountinfo).ok_or(Unavailable::NoUnified)?;
    // A cgroup outside the mount's view cannot be reached through it.
    let relative = path
        .strip_prefix(root.trim_end_matches('/'))
        .ok_or(Unavailable::NoUnified)?
        .trim_start_matches('/');
    if relative.is_empty() {
        return Err(Unavailable::RootCgroup);
    }
    let mut base = mount.join(relative);
    if base.file_name().is_some_and(|n| n == SERVICE_LEAF) {
        if let Some(parent) = base.parent() {
            if parent.join(JOBS).is_dir() {
                base = parent.to_path_buf();
            }
        }
    }
    Ok(Placement { base })
}

/// The processes of a `cgroup.procs` listing that are not `own`.
fn foreign_pids(procs: &str, own: u32) -> Vec<i32> {
    procs
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|p| u32::try_from(*p).ok() != Some(own))
        .collect()
}

/// Whether the service may create and fill cgroups under `base`.
fn delegated(base: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    let w = AccessFlags::W_OK;
    access(base, w | AccessFlags::X_OK).is_ok()
        && access(&base.join("cgroup.procs"), w).is_ok()
        && access(&base.join("cgroup.subtree_control"), w).is_ok()
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value)
}

fn mkdir(path: &Path) -> io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

impl JobCgroups {
    /// Takes this process's delegated cgroup for the jobs: moves the service into
    /// `<base>/service`, hands the wanted controllers that are delegated down to `<base>/jobs`
    /// and sets the jobs' weights and memory ceiling.
    /// A cgroup that holds any process but this one (a service started by hand from a
    /// terminal whose scope its user owns) is left alone: moving a shell or a desktop
    /// program into the service's leaf is not the service's to do.
    pub fn open(limits: CapLimits) -> Result<JobCgroups, Unavailable> {
        let placement = placement()?;
        let procs =
            std::fs::read_to_string(placement.base.join("cgroup.procs")).unwrap_or_default();
        let others = foreign_pids(&procs, std::process::id());
        if !others.is_empty() {
            return Err(Unavailable::Shared {
                path: placement.base,
                pids: others,
            });
        }
        JobCgroups::open_at(&placement.base, limits)
    }

    /// [`JobCgroups::open`] with the service's cgroup given.
    pub fn open_at(base: &Path, limits: CapLimits) -> Result<JobCgroups, Unavailable> {
        if !delegated(base) {
            return Err(Unavailable::NotDelegated {
                path: base.to_path_buf(),
            });
        }
        let setup = |what: &str, e: io::Error| Unavailable::Setup {
            path: base.to_path_buf(),
            reason: format!("{what}: {e}"),
        };
        let leaf = base.join(SERVICE_LEAF);
        mkdir(&leaf).map_err(|e| setup("creating the service's own cgroup", e))?;
        // Every process of the base (this service; after a restart nothing else is there:
        // the jobs are in their own cgroups) goes to the leaf.
        let procs = std::fs::read_to_string(base.join("cgroup.procs"))
            .map_err(|e| setup("reading cgroup.procs", e))?;
        for pid in procs.split_whitespace() {
            match write(&leaf.join("cgroup.procs"), pid) {
                Ok(()) => {}
                // It ended meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(setup("moving the service into its own cgroup", e)),
            }
        }
        let jobs = base.join(JOBS);
        mkdir(&jobs).map_err(|e| setup("creating the jobs' cgroup", e))?;
        let offered = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
        let mut enabled = Vec::new();
        for c in CONTROLLERS {
            if !offered.split_whitespace().any(|o| o == *c) {
                continue;
            }
            let on = write(&base.join("cgroup.subtree_control"), &format!("+{c}"))
                .and_then(|()| write(&jobs.join("cgroup.subtree_control"), &format!("+{c}")));
            match on {
                Ok(()) => enabled.push(*c),
                Err(e) => {
                    tracing::warn!(controller = c, error = %e, "a delegated cgroup controller could not be enabled for the jobs")
                }
            }
        }
        let cgroups = JobCgroups {
            jobs,
            enabled,
            limits,
        };
        cgroups
            .write_caps(&cgroups.jobs, true, limits)
            .map_err(|e| setup("setting the jobs' caps", e))?;
        Ok(cgroups)
    }

    /// The controllers the jobs got.
    pub fn enabled(&self) -> &[&'static str] {
        &self.enabled
    }

    pub fn limits(&self) -> CapLimits {
        self.limits
    }

    /// The directory of job `name`'s cgroup.
    pub fn dir_of(&self, name: &str) -> PathBuf {
        self.jobs.join(name)
    }

    fn has(&self, controller: &str) -> bool {
        self.enabled.contains(&controller)
    }

    /// The caps of `dir`: the jobs' parent gets the weights and the memory ceiling of all
    /// jobs together; a job its own memory and process caps (`l`).
    fn write_caps(&self, dir: &Path, parent: bool, l: CapLimits) -> io::Result<()> {
        if self.has("memory") {
            write(&dir.join("memory.max"), &l.memory_max.to_string())?;
            if !parent {
                write(&dir.join("memory.high"), &l.memory_high.to_string())?;
                // What a job used shows as its own, not swapped out of sight.
                let _ = write(&dir.join("memory.swap.max"), "0");
            }
        }
        if self.has("pids") && !parent {
            write(&dir.join("pids.max"), &l.pids_max.to_string())?;
        }
        if parent {
            if self.has("cpu") {
                write(&dir.join("cpu.weight"), &l.cpu_weight.to_string())?;
            }
            if self.has("io") {
                write(&dir.join("io.weight"), &format!("default {}", l.io_weight))?;
            }
        }
        Ok(())
    }

    /// Creates job `name`'s cgroup with its caps, its memory at most `memory_max` bytes
    /// where its target set its own (throttled above three quarters of it); the runner joins
    /// it at its spawn.
    pub fn create(&self, name: &str, memory_max: Option<u64>) -> io::Result<JobCgroup> {
        let dir = self.dir_of(name);
        mkdir(&dir)?;
        let mut limits = self.limits;
        if let Some(max) = memory_max {
            limits.memory_max = max;
            limits.memory_high = max / 4 * 3;
        }
        if let Err(e) = self.write_caps(&dir, false, limits) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        JobCgroup::at(&dir)
    }

    /// Ends everything in job `name`'s cgroup and removes it. Nothing there is not an error.
    pub fn end(&self, name: &str) -> io::Result<Ended> {
        end_cgroup(&self.dir_of(name))
    }

    /// What job `name` used, from its cgroup (`None`: it has none).
    pub fn usage(&self, name: &str) -> Option<CgroupUsage> {
        usage_of(&self.dir_of(name))
    }

    /// Ends and removes every job cgroup `keep` does not name (left by an earlier run of the
    /// service whose runtimes are gone).
    pub fn sweep(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let mut swept = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.jobs) else {
            return swept;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.path().is_dir() || keep(&name) {
                continue;
            }
            match self.end(&name) {
                Ok(_) => swept.push(name),
                Err(e) => {
                    tracing::warn!(cgroup = %entry.path().display(), error = %e, "a job's cgroup left by an earlier run could not be removed")
                }
            }
        }
        swept
    }
}

/// A job's cgroup, ready for its runner to join.
#[derive(Debug, Clone)]
pub struct JobCgroup {
    pub dir: PathBuf,
    /// `cgroup.procs`, as the child writes it between fork and exec.
    procs: CString,
}

impl JobCgroup {
    fn at(dir: &Path) -> io::Result<JobCgroup> {
        use std::os::unix::ffi::OsStrExt;
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a cgroup path"))?;
        Ok(JobCgroup {
            dir: dir.to_path_buf(),
            procs,
        })
    }

    /// Moves the calling process into this cgroup. Called in the forked child before exec
    /// (and before it drops its identity: `cgroup.procs` is the service's): only `open`,
    /// `write` and `close`, allocating nothing.
    pub(crate) fn join_self(&self) -> io::Result<()> {
        // SAFETY: plain syscalls on a NUL-terminated path and a static buffer.
        #[allow(unsafe_code)]
        unsafe {
            let fd = libc::open(self.procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = io::Error::last_os_error();
            libc::close(fd);
            if n != 1 {
                return Err(err);
            }
        }
        Ok(())
    }
}

/// What ending a job's cgroup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It had no cgroup (already removed, or the job ran without one).
    NoCgroup,
    /// Removed; `killed` processes were still in it.
    Removed { killed: usize },
}

/// How long the processes of a killed cgroup have to be gone.
const KILL_WAIT: Duration = Duration::from_secs(5);

fn pids_in(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn populated(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("cgroup.events")) {
        Ok(text) => text.lines().any(|l| l.trim() == "populated 1"),
        Err(_) => !pids_in(dir).is_empty(),
    }
}

fn end_cgroup(dir: &Path) -> io::Result<Ended> {
    if !dir.is_dir() {
        return Ok(Ended::NoCgroup);
    }
    let killed = pids_in(dir).len();
    let deadline = Instant::now() + KILL_WAIT;
    if killed > 0 {
        // `cgroup.kill` (Linux 5.14) reaches every process at once, also those forking now;
        // before it, each listed process is SIGKILLed until none is left.
        let kill_all = write(&dir.join("cgroup.kill"), "1");
        while populated(dir) {
            if kill_all.is_err() {
                for pid in pids_in(dir) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "processes {:?} in {} did not end after SIGKILL",
                    pids_in(dir),
                    dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // A cgroup whose last process just exited may briefly refuse removal.
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(Ended::Removed { killed }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ended::Removed { killed }),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A job's use, as its cgroup counted it: exact, whoever its processes were re-parented to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupUsage {
    /// `cpu.stat`'s `usage_usec` (counted with or without the cpu controller).
    pub cpu: Duration,
    /// `memory.peak` (Linux 5.19, with the memory controller).
    pub peak_memory: Option<u64>,
}

fn usage_of(dir: &Path) -> Option<CgroupUsage> {
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let usec: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))?
        .trim()
        .parse()
        .ok()?;
    let peak_memory = std::fs::read_to_string(dir.join("memory.peak"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Some(CgroupUsage {
        cpu: Duration::from_micros(usec),
        peak_memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn the_service_cgroup_is_found_under_the_unified_mount() {
        let cgroup = "9:name=systemd:/\n0::/system.slice/runner-manager.service\n";
        let p = placement_from(cgroup, MOUNTINFO).unwrap();
        assert_eq!(
            p.base,
            PathBuf::from("/sys/fs/cgroup/unified/system.slice/runner-manager.service")
        );
    }

    #[test]
    fn the_root_cgroup_and_a_v1_host_are_refused_with_their_reason() {
        assert_eq!(
            placement_from("0::/\n", MOUNTINFO),
            Err(Unavailable::RootCgroup)
        );
        assert_eq!(
            placement_from("4:memory:/x\n", MOUNTINFO),
            Err(Unavailable::NoUnified)
        );
        let v1_only = "22 1 0:21 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        assert_eq!(
            placement_from("0::/a\n", v1_only),
            Err(Unavailable::NoUnified)
        );
        assert!(Unavailable::RootCgroup.fix().contains("Delegate=yes"));
        assert!(Unavailable::NoUnified
            .fix()
            .contains("unified_cgroup_hierarchy"));
    }

    #[test]
    fn a_mount_of_a_sub_cgroup_and_escaped_paths_are_read() {
        let info = "41 31 0:38 /user.slice /sys/fs/with\\040space rw - cgroup2 cgroup2 rw\n";
        let p = placement_from("0::/user.slice/app.slice/rm.service\n", info).unwrap();
        assert_eq!(
            p.base,
            PathBuf::from("/sys/fs/with space/app.slice/rm.service")
        );
        // A cgroup outside what the mount shows.
        assert_eq!(
            placement_from("0::/system.slice/x\n", info),
            Err(Unavailable::NoUnified)
        );
    }

    #[test]
    fn a_cgroup_shared_with_other_processes_is_not_the_services() {
        assert_eq!(foreign_pids("", 7), Vec::<i32>::new());
        assert_eq!(foreign_pids("7\n", 7), Vec::<i32>::new());
        assert_eq!(foreign_pids("3\n7\n9\n", 7), vec![3, 9]);
        let e = Unavailable::Shared {
            path: PathBuf::from("/sys/fs/cgroup/user.slice/x.scope"),
            pids: vec![3],
        };
        assert!(e.to_string().contains("not the service's own"), "{e}");
        assert!(e.fix().contains("Delegate=yes"));
    }

    #[test]
    fn limits_leave_the_desktop_a_quarter_of_memory() {
        let l = CapLimits::for_memory(16 << 30);
        assert_eq!(l.memory_max, 12 << 30);
        assert_eq!(l.memory_high, 8 << 30);
        assert!(l.memory_high < l.memory_max);
        assert!(l.cpu_weight < 100 && l.io_weight < 100);
    }

    /// The caps' files as a delegated cgroup with every controller would have them. A
    /// stand-in: this machine's cgroup v2 has no controller (they are bound to v1), so the
    /// real files do not exist here; the e2e tests use the real hierarchy for the rest.
    #[test]
    fn caps_are_written_where_their_controllers_are_enabled() {
        let dir = tempfile::tempdir().unwrap();
        let cgroups = JobCgroups {
            jobs: dir.path().to_path_buf(),
            enabled: vec!["memory", "pids", "cpu", "io"],
            limits: CapLimits::for_memory(8 << 30),
        };
        cgroups
            .write_caps(dir.path(), true, cgroups.limits)
            .unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("cpu.weight"), "20");
        assert_eq!(read("io.weight"), "default 20");
        assert_eq!(read("memory.max"), (6u64 << 30).to_string());
        assert!(!dir.path().join("pids.max").exists());
        let job = cgroups.create("job", None).unwrap().dir;
        let read = |f: &str| std::fs::read_to_string(job.join(f)).unwrap();
        assert_eq!(read("pids.max"), "4096");
        assert_eq!(read("memory.high"), (4u64 << 30).to_string());
        assert!(!job.join("cpu.weight").exists());
        // A target's own cap.
        let own = cgroups.create("own", Some(1 << 30)).unwrap().dir;
        let read = |f: &str| std::fs::read_to_string(own.join(f)).unwrap();
        assert_eq!(read("memory.max"), (1u64 << 30).to_string());
        assert_eq!(read("memory.high"), (768u64 << 20).to_string());
        assert_eq!(read("pids.max"), "4096");

        let none = JobCgroups {
            enabled: vec![],
            ..cgroups
        };
        let bare = none.create("bare", Some(1 << 30)).unwrap().dir;
        assert_eq!(std::fs::read_dir(&bare).unwrap().count(), 0);
        // Removed with what it holds (nothing runs in a stand-in).
        assert!(matches!(none.end("bare"), Ok(Ended::Removed { killed: 0 })));
    }

    #[test]
    fn cpu_and_peak_are_read_from_the_cgroups_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(usage_of(dir.path()), None);
        std::fs::write(
            dir.path().join("cpu.stat"),
            "usage_usec 2500000\nuser_usec 2000000\n",
        )
        .unwrap();
        assert_eq!(
            usage_of(dir.path()),
            Some(CgroupUsage {
                cpu: Duration::from_millis(2500),
                peak_memory: None
            })
        );
        std::fs::write(dir.path().join("memory.peak"), "1048576\n").unwrap();
        assert_eq!(usage_of(dir.path()).unwrap().peak_memory, Some(1 << 20));
    }
}
