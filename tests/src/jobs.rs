//! Jobs with shell steps, run to the end: a directory the jobs report through, and a helper
//! that queues jobs and waits until they completed and every runner is gone.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use rm_testkit::{Conclusion, FakeGitHub, JobSpec, JobStatus};

use crate::Daemon;

/// The directory every test service lets its jobs write through the sandbox
/// (`--sandbox-test-share`): the only one, shared by the tests' out directories.
pub fn share_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("rm-e2e-share");
    if std::fs::create_dir(&dir).is_ok() {
        // Anyone may make their directory in it, nobody may remove another's.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    dir
}

/// A directory every runner account may write (the jobs report through files in it), inside
/// [`share_dir`] so that sandboxed jobs reach it.
pub fn out_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("rm-e2e-out")
        .tempdir_in(share_dir())
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

pub fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .to_owned()
}

/// Queues `spec` for `repo`, waits until it completed and every runner is gone (so the next
/// job's runner starts after this one's was cleaned), and answers its conclusion.
pub async fn run(d: &Daemon, gh: &FakeGitHub, repo: &str, specs: Vec<JobSpec>) -> Vec<Conclusion> {
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    gh.queue_run(repo, specs).unwrap();
    let client = d.client().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let jobs: Vec<_> = gh
            .jobs()
            .into_iter()
            .filter(|j| names.contains(&j.name))
            .collect();
        let done =
            jobs.len() == names.len() && jobs.iter().all(|j| j.status == JobStatus::Completed);
        let idle = client.status().await.is_ok_and(|s| s.runners.is_empty());
        if done && idle {
            return jobs.iter().filter_map(|j| j.conclusion).collect();
        }
        if std::time::Instant::now() > deadline {
            let log = d.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "jobs {names:?} not done with their runners gone after 120 s: {jobs:?}\nservice log (newest first):\n{}",
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every file or directory named `name` under `dir` (links not followed).
pub fn find_named(dir: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_name() == name {
                hits.push(e.path());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    hits
}
