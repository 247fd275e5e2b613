//! Jobs kept apart on a root service, where every runner runs as a uid of its own: a process
//! a job leaves running outside its runner's process group (`setsid`, as a detaching daemon
//! does) survives the stop of that group, and would otherwise run on beside later jobs (and,
//! were its uid handed out again, as one of them: able to read its files and its processes'
//! environment and token). The job's PID namespace ends with its runner (the sandbox), and
//! the service holds the uid machine-wide while the runtime exists and ends whatever still
//! runs as it when the runtime is scrubbed.
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
async fn a_process_a_job_leaves_running_is_ended_with_its_runner() {
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

    // The job waits until its leftover has left the group, so it is there when the runner
    // ends.
    let first = format!(
        "id -u > {o}/first.uid\n\
         setsid sh -c 'echo out > {o}/left; exec sleep {LEFTOVER_SECS}' </dev/null >/dev/null 2>&1 &\n\
         while [ ! -s {o}/left ]; do sleep 0.05; done"
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
    // `run` returns once the runner is gone from status. The job's PID namespace ended with
    // its listener and took the leftover with it (the scrub's end of whatever still runs as
    // the uid is the second wall, for a runner started without the sandbox).
    until(Duration::from_secs(30), "the leftover ended", || async {
        let running = leftovers().into_iter().any(|(_, uid)| uid == first_uid);
        (!running).then_some(())
    })
    .await;

    // The service goes on serving: the next job runs (as whichever uid is free, which may be
    // the same one again now that nothing runs as it).
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("comes-after", &[&label]).with_command("true")],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    d.stop().await.unwrap();
}
