//! Upgrade with runners at work: a copy of `runner-manager` serves a job when its file is
//! replaced by a newer build (a script reporting 99.0.0). The service stops launching, waits
//! without a deadline for the active runner (counted from the journal), then exits non-zero to
//! hand over. A SIGTERM during that wait wins and stops with the drain deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_testkit::{Behaviour, JobStatus};
use service_support::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn install(path: &Path, body: &str) {
    let tmp = path.with_extension("new");
    fs::write(&tmp, body).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn copy_binary(w: &World) -> PathBuf {
    let bin = w.dir.path().join("bin").join("runner-manager");
    fs::create_dir_all(bin.parent().unwrap()).unwrap();
    fs::copy(env!("CARGO_BIN_EXE_runner-manager"), &bin).unwrap();
    bin
}

async fn serve_one_job(
    w: &World,
    d: &mut Daemon,
    duration: Duration,
    behaviour: Behaviour,
) -> (rm_proto::Client, String, u64) {
    let (client, label) = serving_repo(w, d, 2).await;
    let job = w.queue_with(&label, 1, duration, behaviour)[0];
    eventually(Duration::from_secs(20), "the job taken", || {
        w.job_status(job) == Some(JobStatus::InProgress)
    })
    .await;
    (client, label, job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_the_busy_runner_then_hands_over() {
    let w = World::start().await;
    let bin = copy_binary(&w);
    let mut d = w.spawn_daemon_bin(&bin, &["--upgrade-poll-ms", "100", "--drain-deadline", "1"]);
    let (_client, label, job) =
        serve_one_job(&w, &mut d, Duration::from_secs(4), Behaviour::Succeed).await;
    install(&bin, "#!/bin/sh\necho \"runner-manager 99.0.0\"\n");
    eventually(Duration::from_secs(10), "the upgrade noticed", || {
        d.log_text().contains("a newer runner-manager is installed")
    })
    .await;
    // Draining for the upgrade starts nothing new.
    let second = w.queue(&label, 1, Duration::from_millis(100))[0];
    // No deadline: the 1 s shutdown deadline does not apply, the job runs to its end.
    let status = d.wait_exit(Duration::from_secs(25));
    assert_eq!(
        status.code(),
        Some(1),
        "non-zero to hand over:\n{}",
        d.log_text()
    );
    assert!(d.log_text().contains("hand over to runner-manager 99.0.0"));
    assert!(w.completed_by_us(job), "the running job finished first");
    assert_eq!(
        w.job_status(second),
        Some(JobStatus::Queued),
        "nothing started during the drain"
    );
    assert!(
        w.gh.runners().is_empty(),
        "the runner was deregistered before the hand-over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_the_upgrade_drain_wins() {
    let w = World::start().await;
    let bin = copy_binary(&w);
    let mut d = w.spawn_daemon_bin(&bin, &["--upgrade-poll-ms", "100", "--drain-deadline", "2"]);
    let (_client, _label, _job) =
        serve_one_job(&w, &mut d, Duration::from_secs(1), Behaviour::Hang).await;
    install(&bin, "#!/bin/sh\necho \"runner-manager 99.0.0\"\n");
    eventually(Duration::from_secs(10), "the upgrade noticed", || {
        d.log_text().contains("a newer runner-manager is installed")
    })
    .await;
    let asked = Instant::now();
    let status = d.terminate(Duration::from_secs(15));
    assert!(
        status.success(),
        "the stop wins with exit 0: {status:?}\n{}",
        d.log_text()
    );
    assert!(
        asked.elapsed() < Duration::from_secs(8),
        "within the drain deadline"
    );
    assert!(d
        .log_text()
        .contains("stop requested during the upgrade drain"));
    kill_processes_under(&w.data_dir());
}
