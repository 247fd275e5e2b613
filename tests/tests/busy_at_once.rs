//! A runner's job shows as running as soon as the runner's own worker starts, not when
//! GitHub's answers catch up: the fake GitHub here shows a taken job as still queued (and its
//! runner not busy) for seconds, and status still says `busy` at once. Figure (median of the
//! runs here) in BENCHMARKS.md; the test pins that the local evidence is what decides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rm_e2e::{fake_github_with, routing_label, until, Daemon};
use rm_proto::{RunnerState, WatchMessage};
use rm_testkit::{FakeConfig, JobSpec, JobStatus};

/// How long the fake GitHub's REST answers lag behind a runner taking a job.
const REPORT_DELAY: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_shows_from_the_runners_own_worker_before_github_reports_it() {
    let gh = fake_github_with(FakeConfig {
        device_interval: Duration::from_secs(1),
        poll_hold: Duration::from_millis(300),
        session_timeout: Duration::from_millis(1500),
        report_delay: REPORT_DELAY,
        ..FakeConfig::default()
    })
    .await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let label = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
            .await,
    );
    let client = d.client().await;
    let mut watch = client.watch().await.unwrap();

    let job = gh
        .queue_job(
            "octo/hello",
            JobSpec::new("long", &[label.as_str()]).duration(Duration::from_secs(8)),
        )
        .unwrap();
    let taken = until(Duration::from_secs(30), "the job taken", || async {
        (gh.job(job)?.status == JobStatus::InProgress).then(Instant::now)
    })
    .await;
    // The moment the broker handed the job over (the fake's own clock, not its REST answers).
    let handed_over = gh.job(job).unwrap().started_at.unwrap();
    // The watch stream says busy, long before GitHub's answers would.
    let busy_at = tokio::time::timeout(REPORT_DELAY, async {
        while let Some(Ok(msg)) = watch.next().await {
            if let WatchMessage::Snapshot { status } | WatchMessage::Changed { status } = msg {
                if status.runners.iter().any(|r| r.state == RunnerState::Busy) {
                    return chrono::Utc::now();
                }
            }
        }
        panic!("the watch stream ended");
    })
    .await
    .expect("busy shown before GitHub reported the job taken");
    let lag = (busy_at - handed_over).to_std().unwrap_or_default();
    assert!(taken.elapsed() < REPORT_DELAY);
    println!("busy shown {lag:?} after the runner took its job (GitHub reports it after {REPORT_DELAY:?})");
    // Within REPORT_DELAY of the hand-over, GitHub's answers still showed the job queued and
    // the runner idle: it was the runner's own word.
    assert!(lag < REPORT_DELAY, "{lag:?}");
    // No second runner for the job that still looks queued at GitHub meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        gh.runners().len(),
        1,
        "no surplus runner: {:?}",
        gh.runners()
    );
    d.stop().await.unwrap();
}
