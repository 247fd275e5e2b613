//! Shared harness of the service tests: a fake GitHub with one repository, the fake runner
//! package, the real `runner-manager daemon run` as a child process on a socket in a temp
//! dir, and an rm-proto client to talk to it.
#![allow(dead_code)]

use rm_proto::{Client, CredentialPut, SecretString, Status, TargetAdd, UnixMillis};
use rm_testkit::harness::LoggedChild;
use rm_testkit::{FakeGitHub, IssuedToken, JobSpec, JobStatus};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const REPO: &str = "octo/hello";

pub struct World {
    pub gh: FakeGitHub,
    pub dir: tempfile::TempDir,
}

impl World {
    pub async fn start() -> World {
        let gh = rm_testkit::harness::fake_github_with_repo("octo", REPO)
            .await
            .unwrap();
        let dir = rm_testkit::harness::runner_temp_dir().unwrap();
        World { gh, dir }
    }

    /// [`World::start`] with a device flow polled every `interval` whose codes live `expires_in`.
    pub async fn with_device_flow(interval: Duration, expires_in: Duration) -> World {
        let gh = FakeGitHub::start(rm_testkit::FakeConfig {
            poll_hold: Duration::from_millis(300),
            session_timeout: Duration::from_millis(1500),
            device_interval: interval,
            device_expires_in: expires_in,
            ..rm_testkit::FakeConfig::default()
        })
        .await
        .unwrap();
        gh.create_user("octo").unwrap();
        gh.create_repo(REPO).unwrap();
        gh.create_installation("octo", rm_testkit::InstallationRepos::All)
            .unwrap();
        gh.set_runner_package(&rm_testkit::harness::runner_package().unwrap());
        let dir = rm_testkit::harness::runner_temp_dir().unwrap();
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
            .args(["--stop-grace-ms", "2000"]);
        for (flag, value) in [
            ("--registration-timeout-secs", "10"),
            ("--idle-timeout-secs", "10"),
            ("--poll-ms", "250"),
            ("--tick-ms", "200"),
            ("--drain-deadline", "20"),
        ] {
            if !extra.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        // The update watchdog restarts the service itself only outside a service manager.
        cmd.args(extra)
            .env("RUST_LOG", "debug")
            .env_remove("INVOCATION_ID");
        Daemon {
            process: LoggedChild::spawn(&mut cmd, self.dir.path(), "daemon")
                .unwrap_or_else(|e| panic!("runner-manager daemon run: {e}")),
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

/// `runner-manager daemon run` as a child process logging to a file (killed when dropped);
/// derefs to the [`LoggedChild`] (pid, log, signals, waiting for its exit).
pub struct Daemon {
    pub process: LoggedChild,
    pub socket: PathBuf,
}

impl std::ops::Deref for Daemon {
    type Target = LoggedChild;
    fn deref(&self) -> &LoggedChild {
        &self.process
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut LoggedChild {
        &mut self.process
    }
}

impl Daemon {
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
}

/// Adds [`REPO`] with up to `max` runners; returns the routing label its jobs must ask for.
pub async fn add_repo(client: &Client, max: u32) -> String {
    client
        .add_target(&TargetAdd {
            target: REPO.into(),
            max_capacity: Some(max),
            ..TargetAdd::default()
        })
        .await
        .unwrap();
    client.status().await.unwrap().host.routing_label
}

/// Connects to `d`, hands it a credential for `octo` and adds [`REPO`] with up to `max`
/// runners: a daemon ready to serve. Returns the client and the routing label.
pub async fn serving_repo(w: &World, d: &mut Daemon, max: u32) -> (Client, String) {
    let (_, cred) = w.credential();
    serve_repo_with(d, &cred, max).await
}

/// [`serving_repo`] with the credential `cred`.
pub async fn serve_repo_with(d: &mut Daemon, cred: &CredentialPut, max: u32) -> (Client, String) {
    let client = d.client().await;
    client.put_credential(cred).await.unwrap();
    let label = add_repo(&client, max).await;
    (client, label)
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
    for (pid, _) in rm_testkit::harness::processes_under(root) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
