//! Shared test harness: a fake GitHub with a repository and an organization, the fake runner
//! package, `lifecycle-host` as a real child process, and probes of the process table, the
//! runner root and the journal.
#![allow(dead_code)]

use rm_journal::Journal;
use rm_testkit::package::RunnerPackage;
use rm_testkit::{FakeConfig, FakeGitHub, InstallationRepos, JobSpec, JobStatus};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const REPO: &str = "octo/hello";
pub const ORG: &str = "acme";
pub const ORG_REPO: &str = "acme/api";
/// The routing label `lifecycle-host --host-label test` gives its policies.
pub const LABEL: &str = "rm-test-linux-x64";

/// The fake runner package; builds the fake listener first if this checkout has not yet.
pub fn runner_package() -> RunnerPackage {
    if let Ok(p) = RunnerPackage::shared_for_tests() {
        return p;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "rm-fake-runner"])
        .status()
        .expect("cargo build -p rm-fake-runner");
    assert!(status.success(), "building the fake runner listener failed");
    RunnerPackage::shared_for_tests().expect("fake runner package")
}

pub struct World {
    pub gh: FakeGitHub,
    pub token: String,
    pub dir: tempfile::TempDir,
}

impl World {
    pub async fn start() -> World {
        let gh = FakeGitHub::start(FakeConfig {
            poll_hold: Duration::from_millis(300),
            session_timeout: Duration::from_millis(1500),
            ..FakeConfig::default()
        })
        .await
        .expect("fake GitHub");
        gh.create_user("octo").unwrap();
        gh.create_repo(REPO).unwrap();
        gh.create_installation("octo", InstallationRepos::All)
            .unwrap();
        gh.create_org(ORG).unwrap();
        gh.add_org_member(ORG, "octo", true).unwrap();
        gh.create_repo(ORG_REPO).unwrap();
        gh.create_installation(ORG, InstallationRepos::All).unwrap();
        gh.set_runner_package(&runner_package());
        let token = gh.issue_token("octo").unwrap().access_token;
        let dir = tempfile::tempdir().unwrap();
        // Runners run as unprivileged uids: they must be able to reach the runner root.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        World { gh, token, dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn runner_root(&self) -> PathBuf {
        self.data_dir().join("runners")
    }

    pub fn journal_path(&self) -> PathBuf {
        self.data_dir().join("journal.sqlite")
    }

    /// Queues `n` one-job runs on `repo` for this host's label.
    pub fn queue(&self, repo: &str, n: usize, duration: Duration) -> Vec<u64> {
        let mut jobs = Vec::new();
        for i in 0..n {
            self.gh
                .queue_run(
                    repo,
                    vec![JobSpec::new(&format!("job-{i}"), &[LABEL]).duration(duration)],
                )
                .unwrap();
        }
        for j in self.gh.jobs() {
            if j.repo == repo && !jobs.contains(&j.id) {
                jobs.push(j.id);
            }
        }
        jobs
    }

    pub fn all_jobs_done_by_us(&self) -> bool {
        self.gh.jobs().iter().all(|j| {
            j.status == JobStatus::Completed
                && j.runner_name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("rm-"))
        })
    }

    /// Starts `lifecycle-host` for `targets`.
    pub fn spawn_host(
        &self,
        targets: &[&str],
        extra: &[&str],
        failpoint: Option<&str>,
    ) -> HostProc {
        let log = self.dir.path().join(format!(
            "host-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lifecycle-host"));
        cmd.arg("--data-dir")
            .arg(self.data_dir())
            .args([
                "--api-base",
                &self.gh.origin(),
                "--web-base",
                &self.gh.origin(),
            ])
            .args(["--stop-grace-ms", "2000"])
            .args([
                "--registration-timeout-secs",
                "10",
                "--idle-timeout-secs",
                "10",
            ])
            .args(["--drain-deadline-secs", "10"]);
        for t in targets {
            cmd.args(["--target", t]);
        }
        // Fast polls unless the test sets its own.
        for (flag, value) in [("--poll-ms", "250"), ("--exit-poll-ms", "200")] {
            if !extra.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        cmd.args(extra)
            .env("RM_TEST_TOKEN", &self.token)
            .env("RUST_LOG", "debug")
            .env_remove("RM_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(fp) = failpoint {
            cmd.env("RM_FAILPOINT", fp);
        }
        HostProc {
            child: cmd.spawn().expect("lifecycle-host"),
            log,
        }
    }

    pub fn journal(&self) -> Journal {
        Journal::open(self.journal_path()).unwrap()
    }

    /// Runtime directories under the runner root (the `.ids` sidecar directory excluded).
    pub fn runtime_dirs(&self) -> Vec<PathBuf> {
        runtime_dirs(&self.runner_root())
    }

    pub fn sidecars(&self) -> usize {
        std::fs::read_dir(self.runner_root().join(".ids"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Everything is clean: no registration at the fake, no runtime directory, no sidecar,
    /// no live process under the runner root, every journalled attempt `cleaned`.
    pub fn clean_state(&self) -> Result<(), String> {
        let runners = self.gh.runners();
        if !runners.is_empty() {
            return Err(format!("registrations left: {runners:?}"));
        }
        let dirs = self.runtime_dirs();
        if !dirs.is_empty() {
            return Err(format!("runtime directories left: {dirs:?}"));
        }
        if self.sidecars() != 0 {
            return Err("sidecars left".into());
        }
        let procs = processes_under(&self.runner_root());
        if !procs.is_empty() {
            return Err(format!("processes left: {procs:?}"));
        }
        let mut j = self.journal();
        let uncleaned = j.uncleaned_attempts().map_err(|e| e.to_string())?;
        if !uncleaned.is_empty() {
            return Err(format!(
                "uncleaned attempts: {:?}",
                uncleaned
                    .iter()
                    .map(|a| (a.id().to_string(), a.state()))
                    .collect::<Vec<_>>()
            ));
        }
        Ok(())
    }
}

pub fn runtime_dirs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Live (non-zombie) processes whose cwd or command line is under `root`.
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

pub struct HostProc {
    pub child: Child,
    pub log: PathBuf,
}

impl HostProc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to end by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "lifecycle-host did not exit in {limit:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGTERM, then waits for the drain to finish.
    pub fn terminate(&mut self, limit: Duration) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(limit)
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `check` until it is true or `limit` passes.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the process ended by abort (SIGABRT) or another signal.
pub fn died_by_signal(status: &ExitStatus) -> bool {
    status.signal().is_some()
}

/// Samples, every 100 ms, live runtimes, listener processes and the journal's active counts,
/// keeping the maximum of each.
#[derive(Default, Debug, Clone, Copy)]
pub struct Peaks {
    pub runtimes: usize,
    pub processes: usize,
    pub active_total: u32,
    pub active_per_policy: u32,
    pub samples: u64,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    peaks: Arc<Mutex<Peaks>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub fn start(root: PathBuf, journal: PathBuf) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks = Arc::new(Mutex::new(Peaks::default()));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peaks));
        let thread = std::thread::spawn(move || {
            let mut j: Option<Journal> = None;
            while !s.load(Ordering::SeqCst) {
                let runtimes = runtime_dirs(&root).len();
                let processes = listeners_under(&root);
                if j.is_none() && journal.exists() {
                    j = Journal::open(&journal).ok();
                }
                let (total, per_policy) = match j.as_mut() {
                    Some(j) => (
                        j.active_total().unwrap_or(0),
                        j.active_counts_by_policy()
                            .map(|m| m.values().copied().max().unwrap_or(0))
                            .unwrap_or(0),
                    ),
                    None => (0, 0),
                };
                {
                    let mut pk = p.lock().unwrap();
                    pk.runtimes = pk.runtimes.max(runtimes);
                    pk.processes = pk.processes.max(processes);
                    pk.active_total = pk.active_total.max(total);
                    pk.active_per_policy = pk.active_per_policy.max(per_policy);
                    pk.samples += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler {
            stop,
            peaks,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> Peaks {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        *self.peaks.lock().unwrap()
    }
}

/// Listener processes (group leaders running `Runner.Listener`) under `root`.
pub fn listeners_under(root: &Path) -> usize {
    processes_under(root)
        .iter()
        .filter(|(_, cmd)| cmd.contains("Runner.Listener"))
        .count()
}
