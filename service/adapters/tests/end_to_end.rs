//! End to end over the real adapters: `lifecycle-host` (a real process) serving a repository
//! and an organization at the fake GitHub, with the fake runner package and real listener
//! processes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use rm_core::{AttemptState, OutcomeKind};
use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_served_by_this_host_within_capacity_and_everything_is_cleaned() {
    let w = World::start().await;
    w.queue(REPO, 6, Duration::from_millis(300));
    w.queue(ORG_REPO, 4, Duration::from_millis(300));
    assert_eq!(w.gh.jobs().len(), 10);

    let sampler = Sampler::start(w.runner_root(), w.journal_path());
    let mut host = w.spawn_host(&[REPO, ORG], &["--max", "2", "--host-capacity", "3"], None);
    eventually(
        Duration::from_secs(25),
        "every job completed by a runner of this host",
        || w.all_jobs_done_by_us(),
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Err(left) = w.clean_state() {
        assert!(
            std::time::Instant::now() < deadline,
            "not everything cleaned 10 s after the last job: {left}\n{}",
            host.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let peaks = sampler.finish();
    let status = host.terminate(Duration::from_secs(15));
    assert!(
        status.success(),
        "lifecycle-host exit: {status:?}\n{}",
        host.log_text()
    );

    // Capacity: never more than the host's 3 at once, never more than a policy's 2.
    assert!(peaks.samples > 10, "{peaks:?}");
    assert!(peaks.processes >= 1, "runners were seen running: {peaks:?}");
    assert!(peaks.runtimes <= 3, "{peaks:?}");
    assert!(peaks.processes <= 3, "{peaks:?}");
    assert!(peaks.active_total <= 3, "{peaks:?}");
    assert!(peaks.active_per_policy <= 2, "{peaks:?}");

    // Every job by a runner of ours; the journal all cleaned, each job a completed attempt.
    for j in w.gh.jobs() {
        let name = j.runner_name.unwrap();
        assert!(name.starts_with("rm-"), "{name}");
    }
    let mut journal = w.journal();
    let mut completed = 0;
    let mut outcomes = Vec::new();
    for p in journal.list_policies().unwrap() {
        for a in journal.attempts_for_policy(p.id()).unwrap() {
            assert_eq!(a.state(), AttemptState::Cleaned, "{a:?}");
            if a.outcome().map(|o| o.kind()) == Some(OutcomeKind::CompletedJob) {
                completed += 1;
            }
            outcomes.push(a.outcome());
        }
    }
    // One attempt per job (no surplus runner), each ended by its job: `completed_job` for every
    // attempt (a runner that exits right after the pass read GitHub's inventory is re-read
    // before it could be taken for `orphaned`).
    assert_eq!(outcomes.len(), 10, "one attempt per job: {outcomes:?}");
    assert_eq!(completed, 10, "every attempt completed_job: {outcomes:?}");
    // The package was downloaded once for all attempts (verified cache, never per attempt).
    assert_eq!(w.gh.counters().endpoint("package_download").requests, 1);
    w.clean_state().unwrap();
}
