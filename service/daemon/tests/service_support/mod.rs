//! Shared harness of the service tests: a fake GitHub with one repository, the fake runner
//! package, the real `runner-manager daemon run` as a child process on a socket in a temp
//! dir, and an rm-proto client to talk to it.
#![allow(dead_code)]

use rm_proto::{Client, CredentialPut, SecretString, Status, UnixMillis};
use rm_testkit::package::RunnerPackage;
use rm_testkit::{FakeConfig, FakeGitHub, InstallationRepos, IssuedToken, JobSpec, JobStatus};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const REPO: &str = "octo/hello";

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
        gh.set_runner_package(&runner_package());
        let dir = tempfile::tempdir().unwrap();
        // Runners run as unprivileged uids: they must be able to reach the runner root.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        World { gh, dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("api.sock")
    }

    pub fn journal_path(&self) -> PathBuf {
        self.data_dir().join("journal.sqlite3")
    }

    /// Queues `n` one-job runs on `repo` asking for `label`.
    pub fn queue(&self, label: &str, n: usize, duration: Duration) -> Vec<u64> {
        self.queue_with(label, n, duration, rm_testkit::Behaviour::Succeed)
    }

    pub fn queue_with(
        &self,
        label: &str,
        n: usize,
        duration: Duration,
        behaviour: rm_testkit::Behaviour,
    ) -> Vec<u64> {
        let before: Vec<u64> = self.gh.jobs().iter().map(|j| j.id).collect();
        for i in 0..n {
            self.gh
                .queue_run(
                    REPO,
                    vec![JobSpec::new(&format!("job-{i}"), &[label])
                        .duration(duration)
                        .behaviour(behaviour)],
                )
                .unwrap();
        }
        self.gh
            .jobs()
            .iter()
            .map(|j| j.id)
            .filter(|id| !before.contains(id))
            .collect()
    }

    pub fn job_status(&self, id: u64) -> Option<JobStatus> {
        self.gh.job(id).map(|j| j.status)
    }

    pub fn completed_by_us(&self, id: u64) -> bool {
        self.gh.job(id).is_some_and(|j| {
            j.status == JobStatus::Completed
                && j.runner_name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("rm-"))
        })
    }

    /// Starts `runner-manager daemon run` with fast test timings and `extra` flags.
    pub fn spawn_daemon(&self, extra: &[&str]) -> Daemon {
        self.spawn_daemon_bin(Path::new(env!("CARGO_BIN_EXE_runner-manager")), extra)
    }

    /// Like [`World::spawn_daemon`], running the binary at `bin` (a copy, for upgrades).
    pub fn spawn_daemon_bin(&self, bin: &Path, extra: &[&str]) -> Daemon {
        let log = self.dir.path().join(format!(
            "daemon-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("--data-dir")
            .arg(self.data_dir())
            .arg("--socket")
            .arg(self.socket())
            .args(["daemon", "run", "--credential-store", "file"])
            .args([
                "--api-base",
                &self.gh.origin(),
                "--web-base",
                &self.gh.origin(),
            ])
            .args(["--client-id", &self.gh.client_id()])
            .args(["--stop-grace-ms", "2000"])
            .args([
                "--registration-timeout-secs",
                "10",
                "--idle-timeout-secs",
                "10",
            ]);
        for (flag, value) in [
            ("--poll-ms", "250"),
            ("--tick-ms", "200"),
            ("--drain-deadline", "20"),
        ] {
            if !extra.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        cmd.args(extra)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // A binary copied just now may still be open for writing in a child another test
        // forked meanwhile (until that child execs): ETXTBSY is transient, try again.
        let mut tries = 0;
        let child = loop {
            match cmd.spawn() {
                Ok(child) => break child,
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("runner-manager daemon run: {e}"),
            }
        };
        Daemon {
            child,
            log,
            socket: self.socket(),
        }
    }

    /// A credential for `octo` as the device flow would hand it over.
    pub fn credential(&self) -> (IssuedToken, CredentialPut) {
        let t = self.gh.issue_token("octo").unwrap();
        let put = CredentialPut {
            access_token: SecretString::new(t.access_token.clone()),
            expires_at: UnixMillis(t.expires_at.timestamp_millis()),
            refresh_token: SecretString::new(t.refresh_token.clone().unwrap_or_default()),
            refresh_expires_at: UnixMillis(
                t.refresh_expires_at
                    .map(|r| r.timestamp_millis())
                    .unwrap_or(i64::MAX / 2),
            ),
            login: Some("octo".into()),
        };
        (t, put)
    }
}

pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
    pub socket: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Connects once the socket answers (the daemon may still be starting).
    pub async fn client(&mut self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(c) = Client::connect(&self.socket).await {
                return c;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("daemon exited early ({status:?}):\n{}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "the daemon's socket never answered:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, sig);
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
                    "daemon did not exit in {limit:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGTERM, then waits for the drain.
    pub fn terminate(&mut self, limit: Duration) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(limit)
    }
}

impl Drop for Daemon {
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

/// Polls the daemon's status until `check` holds.
pub async fn status_until(
    client: &Client,
    limit: Duration,
    what: &str,
    check: impl Fn(&Status) -> bool,
) -> Status {
    let deadline = Instant::now() + limit;
    loop {
        let s = client.status().await.expect("status");
        if check(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}; last status: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every file under `dir`, with its bytes.
pub fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                if let Ok(bytes) = std::fs::read(&p) {
                    out.push((p, bytes));
                }
            }
        }
    }
    out
}

pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// SIGKILLs live processes whose cwd or command line is under `root` (a hanging job's listener
/// a test leaves behind on purpose).
pub fn kill_processes_under(root: &Path) {
    let root_s = root.to_string_lossy().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let cwd = std::fs::read_link(e.path().join("cwd"))
            .map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default();
        let cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cwd.starts_with(&root_s) || cmdline.contains(&root_s) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
