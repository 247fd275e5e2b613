//! SIGTERM stops starting runners but lets the running job finish: `lifecycle-host` exits only
//! after the runner concluded and its runtime was scrubbed (within the drain deadline).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use rm_testkit::JobStatus;
use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_the_busy_runner_then_exits_clean() {
    let w = World::start().await;
    let jobs = w.queue(REPO, 1, Duration::from_millis(2500));
    let mut host = w.spawn_host(&[REPO], &["--max", "1", "--host-capacity", "1"], None);
    eventually(Duration::from_secs(15), "the job taken", || {
        w.gh.job(jobs[0])
            .is_some_and(|j| j.status == JobStatus::InProgress)
    })
    .await;
    // A second job queued now must not get a runner: a draining host starts nothing.
    w.queue(REPO, 1, Duration::from_millis(100));
    let asked = Instant::now();
    let status = host.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", host.log_text());
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "within the drain deadline"
    );
    let first = w.gh.job(jobs[0]).unwrap();
    assert_eq!(
        first.status,
        JobStatus::Completed,
        "the running job was not interrupted"
    );
    let queued: Vec<_> =
        w.gh.jobs()
            .into_iter()
            .filter(|j| j.status == JobStatus::Queued)
            .collect();
    assert_eq!(
        queued.len(),
        1,
        "nothing started for the job queued during the drain"
    );
    w.clean_state().unwrap();
    assert!(host.log_text().contains("loop drained"));
}
