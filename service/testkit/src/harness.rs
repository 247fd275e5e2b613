//! Setup that other crates' integration tests share: the fake runner package (built on
//! demand), a fake GitHub with a user, a repository and the package, a child process logging to
//! a file, and a look at the processes running under a directory. Kept here so the adapters'
//! and the daemon's test harnesses do not each carry a copy.

use crate::package::{PackageError, RunnerPackage};
use crate::{FakeConfig, FakeError, FakeGitHub, InstallationRepos};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Why a test world could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error(transparent)]
    Fake(#[from] FakeError),
    #[error("the fake GitHub did not start: {0:#}")]
    Start(anyhow::Error),
    #[error("building the fake runner listener failed: {0}; try `cargo build -p rm-fake-runner`")]
    Build(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The fake runner package; builds the fake listener first if this checkout has not yet.
pub fn runner_package() -> Result<RunnerPackage, HarnessError> {
    if let Ok(p) = RunnerPackage::shared_for_tests() {
        return Ok(p);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "rm-fake-runner"])
        .status()
        .map_err(|e| HarnessError::Build(e.to_string()))?;
    if !status.success() {
        return Err(HarnessError::Build(status.to_string()));
    }
    Ok(RunnerPackage::shared_for_tests()?)
}

/// A fake GitHub with short long-poll holds and session timeouts (tests stay fast), the user
/// `user` owning `repo` through an installation on all its repositories, and the fake runner
/// package published.
pub async fn fake_github_with_repo(user: &str, repo: &str) -> Result<FakeGitHub, HarnessError> {
    let gh = FakeGitHub::start(FakeConfig {
        poll_hold: Duration::from_millis(300),
        session_timeout: Duration::from_millis(1500),
        ..FakeConfig::default()
    })
    .await
    .map_err(HarnessError::Start)?;
    gh.create_user(user)?;
    gh.create_repo(repo)?;
    gh.create_installation(user, InstallationRepos::All)?;
    gh.set_runner_package(&runner_package()?);
    Ok(gh)
}

/// A temporary directory runners can reach: they run as unprivileged uids, so it is
/// world-readable and traversable (0755) rather than the default 0700.
pub fn runner_temp_dir() -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// Live (not zombie) processes whose working directory or command line is under `root`.
pub fn processes_under(root: &Path) -> Vec<(u32, String)> {
    let root_s = root.to_string_lossy().to_string();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim().chars().next());
        if matches!(state, Some('Z') | Some('X') | None) {
            continue;
        }
        let cwd = std::fs::read_link(e.path().join("cwd"))
            .map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default();
        let cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cwd.starts_with(&root_s) || cmdline.contains(&root_s) {
            out.push((pid, cmdline));
        }
    }
    out
}

/// Waits up to `limit` for `child` to end by itself (polling, no fixed sleep); `None` when it
/// did not, after killing and reaping it.
pub fn wait_exit_within(child: &mut Child, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process whose stdout and stderr go to a log file; killed when dropped.
pub struct LoggedChild {
    pub child: Child,
    pub log: PathBuf,
    name: String,
}

impl LoggedChild {
    /// Spawns `cmd` (stdin closed) logging to a new `<name>-<nanos>.log` in `dir`. A binary
    /// copied just now may still be open for writing in a child another test forked
    /// meanwhile (until that child execs): ETXTBSY is transient and is tried again.
    pub fn spawn(cmd: &mut Command, dir: &Path, name: &str) -> std::io::Result<LoggedChild> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let log = dir.join(format!("{name}-{nanos}.log"));
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let mut tries = 0;
        let child = loop {
            match cmd.spawn() {
                Ok(child) => break child,
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        };
        Ok(LoggedChild {
            child,
            log,
            name: name.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, sig);
    }

    /// Waits for the process to end by itself; kills it and panics with its log after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        match wait_exit_within(&mut self.child, limit) {
            Ok(Some(status)) => status,
            Ok(None) => panic!(
                "{} did not exit in {limit:?}; log:\n{}",
                self.name,
                self.log_text()
            ),
            Err(e) => panic!("{} cannot be waited for: {e}", self.name),
        }
    }

    /// SIGTERM, then waits for the drain to finish.
    pub fn terminate(&mut self, limit: Duration) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(limit)
    }
}

impl Drop for LoggedChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
