//! What the service writes is readable by its owner and, at most, the operators' group: the
//! journal, its logs, the credential and every other file of its data directory, whatever the
//! umask of whoever started it (a service run by hand, or by a unit without `UMask=`). The
//! daemon here is started with the permissive umask 0000, so that the test fails for any file
//! the service leaves to the umask. The other way round, what others must reach (operators the
//! socket, per-job users the runner root) stays reachable under the strictest umask, 0077,
//! through directories the service had to create on the way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::stat::{umask, Mode};
use rm_e2e::{bin, fake_github, is_root, routing_label, until, Daemon};
use rm_testkit::{Conclusion, FakeGitHub, JobSpec, JobStatus};

/// Every file under `root` that others (not owner, not group) may read or write, and every
/// directory they may list or write, with its mode. Not under `given`: what runners (other
/// users, per job) must reach by design, the runner root and the package cache, whose walls the
/// sandbox tests try.
fn open_to_others(root: &Path, given: &[PathBuf]) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            if given.contains(&e.path()) {
                continue;
            }
            let mode = meta.permissions().mode() & 0o7777;
            let open = if meta.is_dir() { 0o006 } else { 0o007 };
            if mode & open != 0 {
                found.push((e.path(), mode));
            }
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    found
}

/// Signs `d` in, adds octo/hello and waits for one job there to complete. Answers its
/// conclusion.
async fn one_job(gh: &FakeGitHub, d: &Daemon) -> Option<Conclusion> {
    d.sign_in(gh, "octo").await;
    let added = d.ok(&["repo", "add", "octo/hello"]).await;
    let label = routing_label(&added);
    let before = gh.jobs().len();
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("build", &[label.as_str()]).duration(Duration::from_millis(200))],
    )
    .unwrap();
    until(Duration::from_secs(30), "the job done", || async {
        let jobs = gh.jobs();
        let last = jobs.get(before)?;
        (jobs.len() == before + 1 && last.status == JobStatus::Completed).then_some(last.conclusion)
    })
    .await
}

// One test in this binary: the daemons inherit the umask of the process that starts them, so
// nothing else here may create files meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_s_files_are_closed_to_others_and_its_doors_open_whatever_its_umask() {
    nothing_the_service_writes_is_open_to_others().await;
    what_others_must_reach_is_reachable_through_directories_it_made().await;
}

async fn nothing_the_service_writes_is_open_to_others() {
    let gh = fake_github().await;
    let before = umask(Mode::empty());
    let d = Daemon::start(&gh).await;
    umask(before);
    one_job(&gh, &d).await;
    let data = d.data_dir.clone();
    let data_mode = std::fs::metadata(&data).unwrap().permissions().mode() & 0o7777;
    let open = open_to_others(&data, &[data.join("runners"), data.join("cache")]);
    let journal = std::fs::metadata(data.join("journal.sqlite3"))
        .expect("the journal is in the data directory")
        .permissions()
        .mode();
    d.stop().await.unwrap();

    assert_eq!(journal & 0o077, 0, "the journal is {journal:o}");
    // Others may pass through the data directory to the runner root inside it, not list it.
    assert_eq!(data_mode & 0o006, 0, "the data directory is {data_mode:o}");
    assert!(
        open.is_empty(),
        "open to others under {}: {:?}",
        data.display(),
        open.iter()
            .map(|(p, m)| format!("{} {m:o}", p.display()))
            .collect::<Vec<_>>()
    );
}

async fn what_others_must_reach_is_reachable_through_directories_it_made() {
    if !is_root() {
        eprintln!("skipped: connecting as another uid needs root (setpriv)");
        return;
    }
    let gh = fake_github().await;
    let before = umask(Mode::from_bits_truncate(0o077));
    // nobody may operate it: the socket's directories, not the service, would refuse it.
    let d = Daemon::start_in_new_dirs(&gh, &["--operator", "65534"]).await;
    umask(before);
    let status = tokio::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin("runner-manager"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("status")
        .output()
        .await
        .unwrap();
    let made = |p: &Path| p.starts_with(d.dir.path()) && p != d.dir.path();
    let modes: Vec<String> = d
        .data_dir
        .ancestors()
        .take_while(|p| made(p))
        .chain(d.socket.ancestors().skip(1).take_while(|p| made(p)))
        .map(|p| {
            let m = std::fs::metadata(p).map(|m| m.permissions().mode() & 0o7777);
            format!("{} {:o}", p.display(), m.unwrap_or(0))
        })
        .collect();
    assert!(
        status.status.success(),
        "an operator could not reach the socket ({modes:?}): {}",
        String::from_utf8_lossy(&status.stderr)
    );
    // Runners run as users of their own: the runner root, inside the data directory, is
    // reached through the directories created for it.
    let conclusion = one_job(&gh, &d).await;
    d.stop().await.unwrap();
    assert_eq!(
        conclusion,
        Some(Conclusion::Success),
        "the job failed ({modes:?})"
    );
}
