//! Spawning, inspecting and stopping runner listeners.
//!
//! A runner is identified by pid + start time, so a pid the kernel recycled for another
//! process is never taken for the runner. Each listener leads its own process group, and
//! stopping it signals the whole group: SIGTERM, a grace period, then SIGKILL.

#[cfg(target_os = "linux")]
pub(crate) mod procfs;
pub(crate) mod uids;

pub use uids::EndedProcesses;

use crate::runtime::Ownership;
use crate::secret::JitConfig;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The listener inside a runtime.
pub const LISTENER: &str = "bin/Runner.Listener";
/// The only channel the JIT config travels through.
pub const JIT_ENV: &str = "ACTIONS_RUNNER_INPUT_JITCONFIG";
/// The listener's stdout/stderr, inside the runtime.
pub const LISTENER_LOG: &str = "_listener.log";
/// The runner's TMPDIR/TEMP/TMP, inside the runtime.
pub const TEMP_DIR: &str = "_tmp";
/// The runner's HOME, inside the runtime (the runner accounts have no home).
pub const HOME_DIR: &str = "_home";
/// The job's resolver configuration, inside the runtime, when the host's is on its loopback.
pub const RESOLV_CONF: &str = "_resolv.conf";

/// Environment variables passed through from the service; everything else is dropped so no
/// service secret leaks into a job.
const PASS_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "TZ"];
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Who a runner process is (the domain's type, journalled at `starting`). Here `start_time`
/// is `/proc/<pid>/stat` field 22: clock ticks after boot.
pub use rm_core::ProcessIdentity;

/// How a process we reaped ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    Alive,
    /// It exited; `status` is known when this host spawned and reaped it.
    Exited {
        status: Option<ExitInfo>,
    },
    /// No process with this identity (never was, or its pid now belongs to another process).
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The group ended within the grace period after SIGTERM.
    Terminated,
    /// The group had to be SIGKILLed.
    Killed,
    /// Nothing of it was running.
    AlreadyGone,
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("refusing to run a runner as root; configure an unprivileged runner account (RunAs)")]
    WouldRunAsRoot,
    #[error("{what} is not supported on this operating system yet")]
    Unsupported { what: &'static str },
    #[error("the runtime {path} has no executable {LISTENER}; was the package materialized?")]
    NoListener { path: PathBuf },
    #[error("starting {path}: {source}")]
    Spawn {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("preparing {path}: {source}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading process {pid}: {source}")]
    Inspect {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("signalling process group {pgid}: {source}")]
    Signal {
        pgid: u32,
        #[source]
        source: nix::Error,
    },
    #[error("the job sandbox cannot be built: {0}; run `runner-manager host doctor` for the fix")]
    Sandbox(String),
    #[error("process group {pgid} still has members {members:?} after SIGKILL")]
    Unkillable { pgid: u32, members: Vec<u32> },
}

/// What to start. Its `Debug` shows the extra environment's names only (values may hold a
/// proxy password).
#[derive(Clone)]
pub struct SpawnRequest<'a> {
    pub runtime: &'a Path,
    pub jit_config: &'a JitConfig,
    /// Run as this identity (must be set when the service is root).
    pub owner: Option<Ownership>,
    /// Extra environment for the listener, set after the service's own (HOME, TMPDIR…) and
    /// before the JIT config (the host's runner environment; never a secret).
    pub extra_env: Vec<(String, String)>,
    /// The groups to run with instead of `owner`'s group alone (a cache namespace's group,
    /// the tool cache writers'); only with `owner`.
    pub groups: Option<crate::caches::RunnerGroups>,
    /// The walls to start it in; `None` only when the operator turned the sandbox off.
    pub sandbox: Option<SandboxSpec<'a>>,
    /// The job's own cgroup, joined between fork and exec (before the identity switch), so
    /// that every process of the job is in it from the first.
    pub cgroup: Option<crate::sandbox::JobCgroup>,
    /// Overlays over the shared caches it was given, mounted in a mount namespace of its own
    /// between fork and exec (while still root): its writes there go to its layers.
    pub layers: Option<crate::caches::layers::LayerMounts>,
}

/// A runner's sandbox: the tools, the host's settings and the shared directories (caches) it
/// was given.
#[derive(Debug, Clone)]
pub struct SandboxSpec<'a> {
    pub tools: crate::sandbox::Tools,
    pub config: &'a crate::sandbox::SandboxConfig,
    pub shared: Vec<PathBuf>,
    /// The host's Docker socket, for a target that opted in.
    pub docker: Option<PathBuf>,
}

impl std::fmt::Debug for SpawnRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnRequest")
            .field("runtime", &self.runtime)
            .field("jit_config", &self.jit_config)
            .field("owner", &self.owner)
            .field(
                "extra_env",
                &self.extra_env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("sandbox", &self.sandbox)
            .field("cgroup", &self.cgroup.as_ref().map(|c| &c.dir))
            .field("layers", &self.layers)
            .finish()
    }
}

/// A started listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnedRunner {
    pub identity: ProcessIdentity,
    pub log: PathBuf,
}

/// Spawns and supervises listeners. Keeps the exit status of the children it spawned (a
/// thread per child reaps it, so none lingers as a zombie).
#[derive(Debug, Clone, Default)]
pub struct ProcessHost {
    exited: Arc<Mutex<HashMap<ProcessIdentity, ExitInfo>>>,
    allow_root: bool,
}

/// Runs the child as `uid` with `groups` (primary and supplementary). std's `uid`/`gid` can
/// only drop every supplementary group, so the switch happens here, in the child between fork
/// and exec: setgroups, setgid, setuid, in that order (after setuid none is allowed).
#[allow(unsafe_code)]
pub(crate) fn drop_to(cmd: &mut Command, uid: u32, groups: crate::caches::RunnerGroups) {
    use nix::unistd::{setgid, setgroups, setuid, Gid, Uid};
    let supplementary: Vec<Gid> = groups
        .supplementary
        .iter()
        .map(|g| Gid::from_raw(*g))
        .collect();
    let primary = Gid::from_raw(groups.primary);
    let uid = Uid::from_raw(uid);
    // Only root may set the supplementary groups; a service that is not root keeps none to
    // drop (as std's own `uid` does).
    let set_groups = nix::unistd::geteuid().is_root();
    // SAFETY: the closure runs in the forked child before exec and only makes the
    // async-signal-safe syscalls setgroups/setgid/setuid, allocating nothing (the vector was
    // built before the fork).
    unsafe {
        cmd.pre_exec(move || {
            if set_groups {
                setgroups(&supplementary).map_err(io::Error::from)?;
            }
            setgid(primary).map_err(io::Error::from)?;
            setuid(uid).map_err(io::Error::from)?;
            Ok(())
        });
    }
}

#[allow(unsafe_code)]
fn into_cgroup(cmd: &mut Command, cgroup: crate::sandbox::JobCgroup) {
    // SAFETY: `join_self` makes only the async-signal-safe syscalls open/write/close on a
    // path built before the fork, allocating nothing.
    unsafe {
        cmd.pre_exec(move || cgroup.join_self());
    }
}

#[allow(unsafe_code)]
fn with_umask(cmd: &mut Command, mask: u32) {
    use nix::sys::stat::{umask, Mode};
    let mode = Mode::from_bits_truncate(mask);
    // SAFETY: umask is async-signal-safe and cannot fail; nothing is allocated in the child.
    unsafe {
        cmd.pre_exec(move || {
            umask(mode);
            Ok(())
        });
    }
}

/// The runner leads a session of its own (and so a process group: `stop` signals it): it has
/// no controlling terminal, so nothing it starts can push keystrokes into the terminal the
/// service was started from (`TIOCSTI`). It gets an empty session keyring of its own instead
/// of the service's (whose keys a possessor may read), and runs at the lowest CPU priority and
/// in the idle I/O class, so a job hogging CPU or disk never stalls the desktop (cgroup caps
/// are not applied yet, see SECURITY.md).
#[allow(unsafe_code)]
fn into_own_session(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe syscalls (setsid, keyctl, setpriority, ioprio_set), allocating nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(io::Error::from)?;
            const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
            // An anonymous new session keyring; a kernel without keyrings has none to leak.
            let _ = libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_JOIN_SESSION_KEYRING,
                std::ptr::null::<libc::c_char>(),
            );
            let _ = libc::setpriority(libc::PRIO_PROCESS, 0, 19);
            const IOPRIO_WHO_PROCESS: libc::c_long = 1;
            const IOPRIO_CLASS_IDLE: libc::c_long = 3;
            let _ = libc::syscall(
                libc::SYS_ioprio_set,
                IOPRIO_WHO_PROCESS,
                0 as libc::c_long,
                IOPRIO_CLASS_IDLE << 13,
            );
            Ok(())
        });
    }
}

/// Where the host's resolver is on its loopback, the job's own resolver configuration (see
/// [`crate::sandbox::job_resolv_conf`]), written into its runtime; `None` otherwise.
fn job_resolver(runtime: &Path, owner: Option<Ownership>) -> Result<Option<PathBuf>, ProcessError> {
    let host = fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let Some(text) = crate::sandbox::job_resolv_conf(&host) else {
        return Ok(None);
    };
    let path = runtime.join(RESOLV_CONF);
    let err = |source| ProcessError::Prepare {
        path: path.clone(),
        source,
    };
    fs::write(&path, text).map_err(err)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).map_err(err)?;
    if let Some(o) = owner {
        std::os::unix::fs::lchown(&path, Some(o.uid), Some(o.gid)).map_err(err)?;
    }
    Ok(Some(path))
}

fn prepare_dir(path: &Path, owner: Option<Ownership>) -> Result<(), ProcessError> {
    let err = |source| ProcessError::Prepare {
        path: path.to_path_buf(),
        source,
    };
    match fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(err)?;
    if let Some(o) = owner {
        std::os::unix::fs::lchown(path, Some(o.uid), Some(o.gid)).map_err(err)?;
    }
    Ok(())
}

impl ProcessHost {
    /// A host that refuses to start a runner as root (uid 0, or no owner while the service
    /// itself is root).
    pub fn new() -> Self {
        Self::default()
    }

    /// A host that lets runners run as root. Only for tests and for hosts where the operator
    /// explicitly accepted it; jobs then own the machine.
    pub fn allowing_root() -> Self {
        Self {
            allow_root: true,
            ..Self::default()
        }
    }

    /// Starts `<runtime>/bin/Runner.Listener run` in its own process group, as `owner`, with
    /// the JIT config only in its environment, cwd and HOME/TMPDIR inside the runtime, and
    /// stdout/stderr appended to `<runtime>/_listener.log`.
    pub fn spawn(&self, req: &SpawnRequest<'_>) -> Result<SpawnedRunner, ProcessError> {
        let as_root = match req.owner {
            Some(o) => o.uid == 0,
            None => nix::unistd::geteuid().is_root(),
        };
        if as_root && !self.allow_root {
            return Err(ProcessError::WouldRunAsRoot);
        }
        let listener = req.runtime.join(LISTENER);
        match fs::metadata(&listener) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
            _ => {
                return Err(ProcessError::NoListener {
                    path: req.runtime.to_path_buf(),
                })
            }
        }
        let tmp = req.runtime.join(TEMP_DIR);
        let home = req.runtime.join(HOME_DIR);
        prepare_dir(&tmp, req.owner)?;
        prepare_dir(&home, req.owner)?;
        let log_path = req.runtime.join(LISTENER_LOG);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode_0600()
            .open(&log_path)
            .map_err(|source| ProcessError::Prepare {
                path: log_path.clone(),
                source,
            })?;
        if let Some(o) = req.owner {
            std::os::unix::fs::lchown(&log_path, Some(o.uid), Some(o.gid)).map_err(|source| {
                ProcessError::Prepare {
                    path: log_path.clone(),
                    source,
                }
            })?;
        }
        let log_err = log.try_clone().map_err(|source| ProcessError::Prepare {
            path: log_path.clone(),
            source,
        })?;

        let mut cmd = match &req.sandbox {
            Some(spec) => {
                let (uid, gid) = match req.owner {
                    Some(o) => (o.uid, req.groups.as_ref().map_or(o.gid, |g| g.primary)),
                    None => (
                        nix::unistd::geteuid().as_raw(),
                        nix::unistd::getegid().as_raw(),
                    ),
                };
                let resolv_conf = job_resolver(req.runtime, req.owner)?;
                let walls = crate::sandbox::Walls {
                    config: spec.config,
                    runtime: Some(req.runtime),
                    shared: &spec.shared,
                    uid,
                    gid,
                    docker: spec.docker.as_deref(),
                    resolv_conf: resolv_conf.as_deref(),
                    layers: req
                        .layers
                        .as_ref()
                        .filter(|l| l.in_chain() && !l.is_empty()),
                };
                let (program, args) =
                    crate::sandbox::wrap(&spec.tools, &walls, &listener, &["run"]);
                let mut cmd = Command::new(program);
                cmd.args(args);
                cmd
            }
            None => {
                let mut cmd = Command::new(&listener);
                cmd.arg("run");
                cmd
            }
        };
        cmd.current_dir(req.runtime).env_clear();
        for key in PASS_ENV {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        if std::env::var_os("PATH").is_none() {
            cmd.env("PATH", DEFAULT_PATH);
        }
        cmd.env("HOME", &home)
            .env("TMPDIR", &tmp)
            .env("TEMP", &tmp)
            .env("TMP", &tmp);
        for (k, v) in &req.extra_env {
            cmd.env(k, v);
        }
        cmd.env(JIT_ENV, req.jit_config.expose());
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        // First: std's own `uid`/`gid` would switch before any `pre_exec` runs, and the
        // runner's identity may not write the cgroup's `cgroup.procs`.
        if let Some(cgroup) = req.cgroup.clone() {
            into_cgroup(&mut cmd, cgroup);
        }
        // Mounting needs root: before the identity switch.
        if let Some(layers) = req.layers.clone().filter(|l| !l.is_empty()) {
            layers.apply_to(&mut cmd);
        }
        if let Some(o) = req.owner {
            let groups = req.groups.clone().unwrap_or(crate::caches::RunnerGroups {
                primary: o.gid,
                supplementary: Vec::new(),
            });
            drop_to(&mut cmd, o.uid, groups);
        }
        // What a job writes in a shared cache, the next job (another uid, same group) must be
        // able to replace; nobody else may read it.
        with_umask(&mut cmd, 0o007);
        // After the identity switch, so the session keyring made here is the runner's.
        into_own_session(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            path: listener.clone(),
            source,
        })?;
        let pid = child.id();
        // Read before anything can reap it: an exited child stays a zombie until waited for,
        // and a zombie's stat is still readable.
        let identity = match start_time(pid) {
            Ok(Some(start_time)) => ProcessIdentity { pid, start_time },
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProcessError::Spawn {
                    path: listener,
                    source: io::Error::other("the listener's start time could not be read"),
                });
            }
        };
        let exited = Arc::clone(&self.exited);
        let reaper = std::thread::Builder::new()
            .name(format!("reap-{pid}"))
            .spawn(move || {
                if let Ok(status) = child.wait() {
                    let info = ExitInfo {
                        code: status.code(),
                        signal: status.signal(),
                    };
                    tracing::info!(pid, code = ?info.code, signal = ?info.signal, "runner listener exited");
                    exited
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(identity, info);
                }
            });
        if let Err(e) = reaper {
            return Err(ProcessError::Spawn {
                path: listener,
                source: e,
            });
        }
        tracing::info!(pid, runtime = %req.runtime.display(), "runner listener started");
        Ok(SpawnedRunner {
            identity,
            log: log_path,
        })
    }

    /// Whether the process is still the runner and still running.
    pub fn inspect(&self, id: ProcessIdentity) -> Result<ProcessState, ProcessError> {
        if let Some(status) = self.exit_status(id) {
            return Ok(ProcessState::Exited {
                status: Some(status),
            });
        }
        match stat(id.pid)? {
            Some(s) if s.start_time == id.start_time => {
                if s.state == 'Z' || s.state == 'X' {
                    Ok(ProcessState::Exited {
                        status: self.exit_status(id),
                    })
                } else {
                    Ok(ProcessState::Alive)
                }
            }
            Some(_) => Ok(ProcessState::Gone),
            // The reaper may have won the race between the two looks.
            None => Ok(match self.exit_status(id) {
                Some(status) => ProcessState::Exited {
                    status: Some(status),
                },
                None => ProcessState::Gone,
            }),
        }
    }

    /// The live listener(s) running in `runtime`: group leaders whose working directory is the
    /// runtime. Used by startup recovery when a spawn happened but `starting` was not journalled.
    #[cfg(target_os = "linux")]
    pub fn find_in_runtime(&self, runtime: &Path) -> Result<Vec<ProcessIdentity>, ProcessError> {
        let dir = runtime
            .canonicalize()
            .map_err(|source| ProcessError::Inspect { pid: 0, source })?;
        let found = procfs::group_leaders_in(&dir)
            .map_err(|source| ProcessError::Inspect { pid: 0, source })?;
        Ok(found
            .into_iter()
            .map(|(pid, stat)| ProcessIdentity {
                pid,
                start_time: stat.start_time,
            })
            .collect())
    }

    /// Elsewhere: not supported yet.
    #[cfg(not(target_os = "linux"))]
    pub fn find_in_runtime(&self, _runtime: &Path) -> Result<Vec<ProcessIdentity>, ProcessError> {
        Err(ProcessError::Unsupported {
            what: "finding a runner by its runtime",
        })
    }

    /// Drops the remembered exit status of a concluded runner.
    pub fn forget(&self, id: ProcessIdentity) {
        self.exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    fn exit_status(&self, id: ProcessIdentity) -> Option<ExitInfo> {
        self.exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .copied()
    }

    /// Stops the runner's whole process group: SIGTERM, up to `grace` for it to end, then
    /// SIGKILL. A pid that now belongs to another process is left alone.
    pub async fn stop(
        &self,
        id: ProcessIdentity,
        grace: Duration,
    ) -> Result<StopOutcome, ProcessError> {
        let pgid = id.pid;
        match stat(pgid)? {
            // The pid was recycled: the kernel does not reuse a pid while a group of that id
            // exists, so this group is not ours. Touch nothing.
            Some(s) if s.start_time != id.start_time => return Ok(StopOutcome::AlreadyGone),
            // The leader is ours (alive or a zombie), or gone with possible orphans of its
            // group left: those still carry its pid as their group id.
            _ => {}
        }
        if group_members(pgid)?.is_empty() {
            return Ok(StopOutcome::AlreadyGone);
        }
        tracing::info!(
            pgid,
            grace_ms = grace.as_millis() as u64,
            "stopping runner process group"
        );
        terminate(pgid)?;
        if wait_group_empty(pgid, grace).await? {
            return Ok(StopOutcome::Terminated);
        }
        tracing::warn!(
            pgid,
            "runner did not stop within the grace period; killing its group"
        );
        signal_group(pgid, nix::sys::signal::Signal::SIGKILL)?;
        if wait_group_empty(pgid, Duration::from_secs(5)).await? {
            return Ok(StopOutcome::Killed);
        }
        Err(ProcessError::Unkillable {
            pgid,
            members: group_members(pgid)?,
        })
    }
}

/// SIGTERM to the runner's group, sparing the sandbox's own processes: they end by themselves
/// once the listener has finished, and the namespace with them.
fn terminate(pgid: u32) -> Result<(), ProcessError> {
    #[cfg(target_os = "linux")]
    {
        let wrappers = crate::sandbox::wrapper_chain(pgid)
            .map_err(|source| ProcessError::Inspect { pid: pgid, source })?;
        if !wrappers.is_empty() {
            for pid in group_members(pgid)? {
                if wrappers.contains(&pid) {
                    continue;
                }
                if let Ok(raw) = i32::try_from(pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(raw),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                }
            }
            return Ok(());
        }
    }
    signal_group(pgid, nix::sys::signal::Signal::SIGTERM)
}

/// Polls until the group has no live member or `limit` passes.
async fn wait_group_empty(pgid: u32, limit: Duration) -> Result<bool, ProcessError> {
    let deadline = Instant::now() + limit;
    loop {
        if group_members(pgid)?.is_empty() {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signal_group(pgid: u32, signal: nix::sys::signal::Signal) -> Result<(), ProcessError> {
    let raw = i32::try_from(pgid).map_err(|_| ProcessError::Signal {
        pgid,
        source: nix::Error::EINVAL,
    })?;
    match nix::sys::signal::killpg(nix::unistd::Pid::from_raw(raw), signal) {
        Ok(()) | Err(nix::Error::ESRCH) => Ok(()),
        Err(source) => Err(ProcessError::Signal { pgid, source }),
    }
}

#[cfg(target_os = "linux")]
fn stat(pid: u32) -> Result<Option<procfs::Stat>, ProcessError> {
    procfs::read_stat(pid).map_err(|source| ProcessError::Inspect { pid, source })
}

#[cfg(target_os = "linux")]
fn start_time(pid: u32) -> Result<Option<u64>, ProcessError> {
    Ok(stat(pid)?.map(|s| s.start_time))
}

#[cfg(target_os = "linux")]
fn group_members(pgid: u32) -> Result<Vec<u32>, ProcessError> {
    let raw = i32::try_from(pgid).map_err(|_| ProcessError::Inspect {
        pid: pgid,
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    procfs::live_group_members(raw).map_err(|source| ProcessError::Inspect { pid: pgid, source })
}

#[cfg(not(target_os = "linux"))]
mod procfs {
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Stat {
        pub state: char,
        pub start_time: u64,
    }
}

#[cfg(not(target_os = "linux"))]
fn stat(_pid: u32) -> Result<Option<procfs::Stat>, ProcessError> {
    Err(ProcessError::Unsupported {
        what: "identifying processes by start time",
    })
}

#[cfg(not(target_os = "linux"))]
fn start_time(_pid: u32) -> Result<Option<u64>, ProcessError> {
    Err(ProcessError::Unsupported {
        what: "identifying processes by start time",
    })
}

#[cfg(not(target_os = "linux"))]
fn group_members(_pgid: u32) -> Result<Vec<u32>, ProcessError> {
    Err(ProcessError::Unsupported {
        what: "listing a process group",
    })
}

/// Opening the log 0600 without an extension trait import at every call site.
trait OpenMode {
    fn mode_0600(&mut self) -> &mut Self;
}

impl OpenMode for fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}
