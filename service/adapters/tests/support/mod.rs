//! Shared test harness: a fake GitHub with a repository and an organization, the fake runner
//! package, `lifecycle-host` as a real child process, and probes of the process table, the
//! runner root and the journal.
#![allow(dead_code)]

use rm_journal::Journal;
use rm_testkit::harness::LoggedChild;
use rm_testkit::{FakeGitHub, InstallationRepos, JobSpec, JobStatus};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const REPO: &str = "octo/hello";
pub const ORG: &str = "acme";
pub const ORG_REPO: &str = "acme/api";
/// The routing label `lifecycle-host --host-label test` gives its policies.
pub const LABEL: &str = "rm-test-linux-x64";

pub struct World {
    pub gh: FakeGitHub,
    pub token: String,
    pub dir: tempfile::TempDir,
}

impl World {
    pub async fn start() -> World {
        let gh = rm_testkit::harness::fake_github_with_repo("octo", REPO)
            .await
            .unwrap();
        gh.create_org(ORG).unwrap();
        gh.add_org_member(ORG, "octo", true).unwrap();
        gh.create_repo(ORG_REPO).unwrap();
        gh.create_installation(ORG, InstallationRepos::All).unwrap();
        let token = gh.issue_token("octo").unwrap().access_token;
        let dir = rm_testkit::harness::runner_temp_dir().unwrap();
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
        for (flag, value) in [
            ("--poll-ms", "250"),
            ("--exit-poll-ms", "200"),
            ("--target-sync-ms", "250"),
        ] {
            if !extra.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        cmd.args(extra)
            .env("RM_TEST_TOKEN", &self.token)
            .env("RUST_LOG", "debug")
            .env_remove("RM_FAILPOINT");
        if let Some(fp) = failpoint {
            cmd.env("RM_FAILPOINT", fp);
        }
        LoggedChild::spawn(&mut cmd, self.dir.path(), "lifecycle-host").expect("lifecycle-host")
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

pub use rm_testkit::harness::processes_under;

/// `lifecycle-host` as a child process logging to a file (killed when dropped).
pub type HostProc = LoggedChild;

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

/// Listener processes under `root`: those whose program is `Runner.Listener` (the sandbox's
/// own programs above it name it only among their arguments).
pub fn listeners_under(root: &Path) -> usize {
    processes_under(root)
        .iter()
        .filter(|(_, cmd)| is_listener(cmd))
        .count()
}

/// Whether a command line (arguments joined by spaces) runs the listener itself.
pub fn is_listener(cmd: &str) -> bool {
    cmd.split(' ')
        .next()
        .is_some_and(|program| program.ends_with("Runner.Listener"))
}
