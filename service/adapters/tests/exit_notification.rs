//! A runner that exits wakes its target's loop at once: with a 60 s poll interval, the job's
//! runner is still concluded and cleaned within seconds of its exit, by the exit watcher.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exited_runner_is_concluded_without_waiting_for_the_poll() {
    let w = World::start().await;
    w.queue(REPO, 1, Duration::from_millis(300));
    // The first pass (at startup) launches; the next poll would come only after 60 s.
    let mut host = w.spawn_host(
        &[REPO],
        &[
            "--max",
            "1",
            "--host-capacity",
            "1",
            "--poll-ms",
            "60000",
            "--exit-poll-ms",
            "200",
        ],
        None,
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !w.all_jobs_done_by_us() {
        assert!(
            Instant::now() < deadline,
            "job not done; log:\n{}",
            host.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = Instant::now();
    eventually(
        Duration::from_secs(10),
        "cleaned long before the next poll",
        || w.clean_state().is_ok(),
    )
    .await;
    assert!(done.elapsed() < Duration::from_secs(10));
    let log = host.log_text();
    assert!(
        log.contains("runner process ended; waking its loop"),
        "{log}"
    );
    let status = host.terminate(Duration::from_secs(15));
    assert!(status.success());
}
