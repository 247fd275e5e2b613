//! What the service writes is readable by its owner and, at most, the operators' group: the
//! journal, its logs, the credential and every other file of its data directory, whatever the
//! umask of whoever started it (a service run by hand, or by a unit without `UMask=`). The
//! daemon here is started with the permissive umask 0000, so that the test fails for any file
//! the service leaves to the umask.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::stat::{umask, Mode};
use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{JobSpec, JobStatus};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_the_service_writes_is_open_to_others_whatever_its_umask() {
    let gh = fake_github().await;
    // The daemon inherits the umask of the process that starts it (the only test in this
    // binary, so nothing else here creates files meanwhile).
    let before = umask(Mode::empty());
    let d = Daemon::start(&gh).await;
    umask(before);
    d.sign_in(&gh, "octo").await;
    let added = d.ok(&["repo", "add", "octo/hello"]).await;
    let label = routing_label(&added);
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("build", &[label.as_str()]).duration(Duration::from_millis(200))],
    )
    .unwrap();
    until(Duration::from_secs(30), "the job done", || async {
        let jobs = gh.jobs();
        (jobs.len() == 1 && jobs.iter().all(|j| j.status == JobStatus::Completed)).then_some(())
    })
    .await;
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
