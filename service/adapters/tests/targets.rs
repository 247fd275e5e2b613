//! Targets added or removed while `lifecycle-host` runs (issue 6): the journal's target set is
//! re-read every poll interval; a new target's loop starts without disturbing running jobs, and
//! a removed target's loop finishes its running job, cleans up, starts nothing more and ends.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use rm_core::{AttemptState, LabelSet, OutcomeKind, PolicySpec, Target};
use rm_testkit::JobStatus;
use std::time::Duration;
use support::*;

fn done_by_us(w: &World, job: u64) -> bool {
    w.gh.job(job).is_some_and(|j| {
        j.status == JobStatus::Completed
            && j.runner_name
                .as_deref()
                .is_some_and(|n| n.starts_with("rm-"))
    })
}

fn in_progress(w: &World, job: u64) -> bool {
    w.gh.job(job)
        .is_some_and(|j| j.status == JobStatus::InProgress)
}

/// Every journalled attempt, with its outcome kind.
fn attempts(w: &World) -> Vec<(AttemptState, Option<OutcomeKind>)> {
    let mut j = w.journal();
    let mut all = j.uncleaned_attempts().unwrap();
    for p in j.list_policies().unwrap() {
        all.extend(j.attempts_for_policy(p.id()).unwrap());
    }
    all.sort_by(|a, b| a.id().cmp(b.id()));
    all.dedup_by(|a, b| a.id() == b.id());
    all.iter()
        .map(|a| (a.state(), a.outcome().map(|o| o.kind())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_added_while_a_job_runs_is_served_and_the_running_job_is_kept() {
    let w = World::start().await;
    let first = w.queue(REPO, 1, Duration::from_millis(4000));
    let mut host = w.spawn_host(&[REPO], &["--max", "1", "--host-capacity", "2"], None);
    eventually(Duration::from_secs(15), "the first job taken", || {
        in_progress(&w, first[0])
    })
    .await;

    // The organization is added in the journal (as the CLI or tray would) while that job runs.
    let mut spec = PolicySpec::new(
        Target::parse(ORG).unwrap(),
        LabelSet::parse([LABEL]).unwrap(),
    );
    spec.max_capacity = Some(1);
    w.journal().insert_policy(&spec).unwrap();
    let second = w.queue(ORG_REPO, 1, Duration::from_millis(300));
    eventually(
        Duration::from_secs(15),
        "the new target's job completed by a runner of this host",
        || done_by_us(&w, second[0]),
    )
    .await;
    assert!(
        in_progress(&w, first[0]) || done_by_us(&w, first[0]),
        "the first job was not lost: {:?}",
        w.gh.job(first[0])
    );
    eventually(Duration::from_secs(15), "the first job completed", || {
        done_by_us(&w, first[0])
    })
    .await;
    eventually(Duration::from_secs(10), "everything cleaned", || {
        w.clean_state().is_ok()
    })
    .await;
    let status = host.terminate(Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", host.log_text());
    assert!(
        host.log_text().contains("target added"),
        "{}",
        host.log_text()
    );
    // One runner per job, both ended by their job: the first was never interrupted.
    assert_eq!(
        attempts(&w),
        vec![
            (AttemptState::Cleaned, Some(OutcomeKind::CompletedJob)),
            (AttemptState::Cleaned, Some(OutcomeKind::CompletedJob)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_removed_with_a_busy_runner_finishes_the_job_cleans_and_starts_nothing() {
    let w = World::start().await;
    let running = w.queue(ORG_REPO, 1, Duration::from_millis(3000));
    let mut host = w.spawn_host(&[REPO, ORG], &["--max", "1", "--host-capacity", "2"], None);
    eventually(
        Duration::from_secs(15),
        "the organization's job taken",
        || in_progress(&w, running[0]),
    )
    .await;

    // The organization is removed (its policy deleted) while its runner runs the job.
    {
        let mut j = w.journal();
        let org = j
            .list_policies()
            .unwrap()
            .into_iter()
            .find(|p| p.target().to_string() == ORG)
            .unwrap();
        j.delete_policy(org.id()).unwrap();
    }
    eventually(Duration::from_secs(5), "the loop retired", || {
        host.log_text().contains("target removed")
    })
    .await;
    // `queue` lists every job of the repository: the new one is the last.
    let later = *w
        .queue(ORG_REPO, 1, Duration::from_millis(100))
        .last()
        .unwrap();
    assert_ne!(later, running[0]);
    assert!(
        in_progress(&w, running[0]),
        "the running job was not interrupted"
    );

    eventually(Duration::from_secs(15), "the running job completed", || {
        done_by_us(&w, running[0])
    })
    .await;
    // The retired loop ends by itself once its runner is cleaned (no shutdown asked).
    eventually(Duration::from_secs(10), "the retired loop ended", || {
        host.log_text()
            .lines()
            .any(|l| l.contains("drain ended") && l.contains(ORG))
    })
    .await;
    if let Err(e) = w.clean_state() {
        panic!("{e}\n{}", host.log_text());
    }
    assert_eq!(
        w.gh.job(later).unwrap().status,
        JobStatus::Queued,
        "no runner started for the removed target: {:?} {:?}\n{}",
        w.gh.job(later),
        attempts(&w),
        host.log_text()
    );
    // One attempt for that target, the job's, concluded and cleaned under the deleted policy.
    let log = host.log_text();
    let reserved = log
        .lines()
        .filter(|l| l.contains("attempt reserved") && l.contains(ORG))
        .count();
    assert_eq!(reserved, 1, "{log}");
    let name = w.gh.job(running[0]).unwrap().runner_name.unwrap();
    let attempt = w
        .journal()
        .get_attempt_by_runner_name(&name)
        .unwrap()
        .unwrap();
    assert_eq!(attempt.state(), AttemptState::Cleaned);
    assert_eq!(
        attempt.outcome().map(|o| o.kind()),
        Some(OutcomeKind::CompletedJob)
    );
    let status = host.terminate(Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", host.log_text());
}
