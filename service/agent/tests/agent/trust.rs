//! The verdict on a runner's job: asked of GitHub once the job is over, journalled with the
//! attempt, and what the clean-up reads (not GitHub again) to decide what the runner leaves
//! behind; none recorded counts as no trust.

use crate::support::*;
use rm_agent::{EventKind, ScrubError};
use rm_core::{JobTrust, Outcome, TrustVerdict};
use std::time::Duration;

fn verdict(trust: JobTrust) -> TrustVerdict {
    TrustVerdict {
        trust,
        job_id: Some(1),
        run_id: Some(1),
        reason: format!("a {trust} run"),
    }
}

/// A persistent target's runner takes a job and ends cleanly; GitHub says `trust` (or nothing).
/// Answers its attempt after the pass that concludes it.
async fn one_job(h: &mut Harness, said: Option<JobTrust>) -> rm_core::Attempt {
    make_persistent(h);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    let a = only_attempt(h);
    if let Some(t) = said {
        h.github
            .state
            .lock()
            .unwrap()
            .verdicts
            .insert(a.runner_name().to_owned(), verdict(t));
    }
    h.github.set_jobs(0);
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
    h.host.kill(a.process().unwrap());
    h.clock.advance(Duration::from_secs(2));
    lp.pass().await;
    h.journal.attempt(a.id())
}

#[tokio::test]
async fn a_trusted_job_keeps_its_workspace_and_caches_and_its_verdict_is_journalled() {
    let mut h = Harness::new();
    let a = one_job(&mut h, Some(JobTrust::Trusted)).await;
    assert_eq!(a.outcome(), Some(Outcome::CompletedJob));
    assert_eq!(
        h.journal.state.lock().unwrap().trust.get(a.id()),
        Some(&verdict(JobTrust::Trusted))
    );
    assert_eq!(h.host.kept_workspace(), vec![true]);
    assert_eq!(
        h.host.state.lock().unwrap().scrub_trust,
        vec![Some(JobTrust::Trusted)]
    );
    // Judged after GitHub was asked which job ran, before the clean-up.
    let calls = h.calls();
    let pos = |c: &str| calls.iter().position(|x| x.starts_with(c)).unwrap();
    assert!(pos("github.job_over") < pos("github.job_verdict"));
    assert!(pos("github.job_verdict") < pos("host.scrub"));
    assert!(h.events().iter().any(
        |e| matches!(e, EventKind::JobJudged { verdict, .. } if verdict.trust == JobTrust::Trusted)
    ));
}

#[tokio::test]
async fn a_forks_job_or_one_nothing_established_leaves_nothing_behind() {
    for said in [Some(JobTrust::Untrusted), None] {
        let mut h = Harness::new();
        let a = one_job(&mut h, said).await;
        assert!(a.is_cleaned(), "{said:?}");
        assert_eq!(h.host.kept_workspace(), vec![false], "{said:?}");
        assert_eq!(
            h.host.state.lock().unwrap().scrub_trust,
            vec![Some(JobTrust::Untrusted)],
            "{said:?}"
        );
    }
}

#[tokio::test]
async fn a_same_repository_pull_requests_job_keeps_its_workspace() {
    let mut h = Harness::new();
    one_job(&mut h, Some(JobTrust::PullRequest)).await;
    assert_eq!(h.host.kept_workspace(), vec![true]);
    assert_eq!(
        h.host.state.lock().unwrap().scrub_trust,
        vec![Some(JobTrust::PullRequest)]
    );
}

#[tokio::test]
async fn a_verdict_that_could_not_be_journalled_is_no_trust() {
    let mut h = Harness::new();
    h.journal.state.lock().unwrap().fail_trust = true;
    one_job(&mut h, Some(JobTrust::Trusted)).await;
    assert_eq!(h.host.kept_workspace(), vec![false]);
    assert_eq!(
        h.host.state.lock().unwrap().scrub_trust,
        vec![Some(JobTrust::Untrusted)]
    );
}

#[tokio::test]
async fn after_a_restart_the_clean_up_reads_the_journalled_verdict_not_github_again() {
    let mut h = Harness::new();
    // The first clean-up fails, so the runner is still to be cleaned when the service
    // restarts.
    h.host
        .state
        .lock()
        .unwrap()
        .scrub_script
        .push_back(ScrubError {
            retryable: true,
            detail: "directory busy".into(),
        });
    let a = one_job(&mut h, Some(JobTrust::Untrusted)).await;
    assert!(!a.is_cleaned());
    // GitHub would now say otherwise: the journal, not a new answer, decides.
    h.github
        .state
        .lock()
        .unwrap()
        .verdicts
        .insert(a.runner_name().to_owned(), verdict(JobTrust::Trusted));
    let restarted = h.make_loop(target());
    h.clock.advance(Duration::from_secs(120));
    restarted.pass().await;
    assert!(h.journal.attempt(a.id()).is_cleaned());
    assert_eq!(h.host.kept_workspace(), vec![false]);
    assert_eq!(
        h.host.state.lock().unwrap().scrub_trust,
        vec![Some(JobTrust::Untrusted)]
    );
    let asked = h
        .calls()
        .iter()
        .filter(|c| c.starts_with("github.job_verdict"))
        .count();
    assert_eq!(asked, 1, "judged once, when the job ended");
}

#[tokio::test]
async fn a_runner_that_left_nothing_to_judge_costs_no_request() {
    let mut h = Harness::new();
    h.host.state.lock().unwrap().nothing_to_judge = true;
    let a = one_job(&mut h, Some(JobTrust::Trusted)).await;
    assert!(a.is_cleaned());
    assert!(
        !h.calls()
            .iter()
            .any(|c| c.starts_with("github.job_verdict")),
        "GitHub was asked: {:?}",
        h.calls()
    );
    // No verdict: nothing is trusted, and the host removes only what changed after the look.
    assert_eq!(h.journal.state.lock().unwrap().trust.get(a.id()), None);
    assert_eq!(
        h.host.state.lock().unwrap().scrub_trust,
        vec![Some(JobTrust::Untrusted)]
    );
}
