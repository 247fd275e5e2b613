//! Jobs kept apart on a root service, where every runner runs as a uid of its own: a process
//! a job leaves running outside its runner's process group (`setsid`, as a detaching daemon
//! does) survives the runner's end, so the uid it runs as is not handed to a later job's
//! runner, which it could otherwise read (its files, its processes' environment and token).
//! Real binary, fake GitHub, fake runner listeners running each job's shell command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::jobs::{out_dir, read, run};
use rm_e2e::{fake_github, is_root, routing_label, until, Daemon};
use rm_testkit::{Conclusion, JobSpec};

/// The argument that marks the leftover process in `/proc`.
const LEFTOVER_SECS: &str = "2987";

/// Pids of the running `sleep LEFTOVER_SECS` processes, with their real uid.
fn leftovers() -> Vec<(i32, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.len() < 2 || !args[0].ends_with(b"sleep") || args[1] != LEFTOVER_SECS.as_bytes() {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok());
        if let Some(uid) = uid {
            found.push((pid, uid));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_job_never_runs_as_the_uid_a_process_left_by_an_earlier_job_runs_as() {
    if !is_root() {
        eprintln!("skipped: runners get a uid each only when the service runs as root");
        return;
    }
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let out = out_dir();
    let o = out.path().display();

    let first = format!(
        "id -u > {o}/first.uid\nsetsid sleep {LEFTOVER_SECS} </dev/null >/dev/null 2>&1 &\ntrue"
    );
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("leaves-a-process", &[&label]).with_command(&first)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    let first_uid: u32 = read(out.path(), "first.uid").parse().unwrap();
    // The first runner is gone and its runtime scrubbed (`run` waits for that); what it left
    // outside its process group still runs as its uid.
    let left = until(Duration::from_secs(30), "the leftover process", || async {
        let l: Vec<(i32, u32)> = leftovers()
            .into_iter()
            .filter(|(_, uid)| *uid == first_uid)
            .collect();
        (!l.is_empty()).then_some(l)
    })
    .await;

    let second = format!("id -u > {o}/second.uid");
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("comes-after", &[&label]).with_command(&second)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    let second_uid: u32 = read(out.path(), "second.uid").parse().unwrap();
    let still: Vec<(i32, u32)> = leftovers()
        .into_iter()
        .filter(|(_, uid)| *uid == first_uid)
        .collect();
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        !still.is_empty(),
        "the leftover ended before the second job: the test shows nothing"
    );
    assert_ne!(
        second_uid, first_uid,
        "the second job ran as the uid a process of the first still runs as"
    );
    d.stop().await.unwrap();
}
