//! The verdict on the job a runner ran (`job_verdict`), fail-closed: trusted only on GitHub's
//! own word about which job the runner ran and on where that job's run comes from.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use rm_core::JobTrust;
use rm_testkit::JobSpec;

const LABEL: &str = "rm-home-linux-x64";

/// Queues `spec` on alice/app, has runner `rm-run-1` take it, and lets a demand poll list it
/// (as the service's own polls do). Answers the job's id.
async fn ran(w: &World, spec: JobSpec, poll: bool) -> u64 {
    let t = target("alice/app");
    w.fake.queue_run("alice/app", vec![spec]).unwrap();
    assert_eq!(w.client.demand(&t).await.unwrap().jobs.len(), 1);
    let cfg = w
        .client
        .generate_jit_config(
            &t,
            &rm_github::JitRequest {
                name: "rm-run-1".into(),
                runner_group_id: 1,
                labels: vec![LABEL.into()],
                work_folder: None,
            },
        )
        .await
        .unwrap();
    let (runner, job_id) = FakeRunner::take_job(&w.fake.origin(), &cfg.encoded_jit_config).await;
    if poll {
        w.client.demand(&t).await.unwrap();
    }
    runner.complete(job_id).await;
    job_id
}

/// A finished job of alice/app as a pool peer publishes it.
fn as_published(
    job_id: u64,
    run_id: u64,
    from_fork: bool,
    confirmed: bool,
) -> rm_github::RunnerJob {
    rm_github::RunnerJob {
        job_id,
        run_id,
        name: Some("build".into()),
        repository: "alice/app".into(),
        workflow_name: None,
        html_url: None,
        status: "completed".into(),
        from_fork,
        confirmed,
    }
}

fn fast() -> rm_testkit::FakeConfig {
    rm_testkit::FakeConfig {
        poll_hold: std::time::Duration::from_millis(200),
        ..rm_testkit::FakeConfig::default()
    }
}

#[tokio::test]
async fn a_push_is_trusted_a_branch_pull_request_is_one_and_a_forks_is_not() {
    for (spec, trust, words) in [
        (
            JobSpec::new("build", &[LABEL]),
            JobTrust::Trusted,
            "a push run of alice/app",
        ),
        (
            JobSpec::new("build", &[LABEL]).pull_request(),
            JobTrust::PullRequest,
            "a pull_request run from a branch of alice/app",
        ),
        (
            JobSpec::new("build", &[LABEL]).from_fork(),
            JobTrust::Untrusted,
            "fork",
        ),
    ] {
        let w = world_with(fast()).await;
        let job_id = ran(&w, spec, true).await;
        w.fake.reset_counters();
        let v = w.client.job_verdict("rm-run-1").await;
        assert_eq!(v.trust, trust, "{v:?}");
        assert_eq!(v.job_id, Some(job_id));
        assert!(v.reason.contains(words), "{v:?}");
        // The run was listed by the polls already: nothing more is asked.
        assert_eq!(w.fake.counters().total.requests, 0, "{v:?}");
    }
}

#[tokio::test]
async fn without_githubs_word_on_the_job_nothing_is_trusted() {
    let w = world_with(fast()).await;
    let v = w.client.job_verdict("rm-never-seen").await;
    assert_eq!(v.trust, JobTrust::Untrusted);
    assert_eq!(v.job_id, None);
    assert!(v.reason.contains("never named"), "{v:?}");
}

#[tokio::test]
async fn a_pool_peers_word_is_confirmed_with_github_before_it_earns_trust() {
    let w = world_with(fast()).await;
    let job_id = ran(&w, JobSpec::new("build", &[LABEL]), false).await;
    let run_id = w.fake.jobs()[0].run_id;
    // Another host of the pool, which never read the listings itself.
    let (member, _) = client_with(config(&w.fake), Some(credential(&w.token)));
    // A peer cannot vouch for itself: its `confirmed` is not taken.
    let peer_says = |runner: &str, from_fork: bool| {
        member.learn_runner_job(runner, as_published(job_id, run_id, from_fork, true))
    };
    peer_says("rm-run-1", false);
    assert!(!member.job_of_runner("rm-run-1").unwrap().confirmed);
    w.fake.reset_counters();
    let v = member.job_verdict("rm-run-1").await;
    assert_eq!(v.trust, JobTrust::Trusted, "{v:?}");
    let c = w.fake.counters();
    assert_eq!(c.endpoint("job").requests, 1, "{c:?}");
    assert_eq!(c.endpoint("workflow_run").requests, 1, "{c:?}");

    // A peer naming another runner on that job earns it nothing: GitHub names rm-run-1.
    peer_says("rm-run-2", false);
    let v = member.job_verdict("rm-run-2").await;
    assert_eq!(v.trust, JobTrust::Untrusted, "{v:?}");
    assert!(v.reason.contains("does not name this runner"), "{v:?}");
}

#[tokio::test]
async fn a_job_github_cannot_be_asked_about_is_not_trusted() {
    let w = world_with(fast()).await;
    let job_id = ran(&w, JobSpec::new("build", &[LABEL]), false).await;
    let run_id = w.fake.jobs()[0].run_id;
    w.client
        .learn_runner_job("rm-run-1", as_published(job_id, run_id, false, false));
    w.fake.inject_fault(rm_testkit::FaultRule::times(
        rm_testkit::EndpointMatch::route("GET", "/repos/*/*/actions/jobs/*"),
        rm_testkit::Fault::Status5xx {
            status: 500,
            rate: 1.0,
        },
        10,
    ));
    let v = w.client.job_verdict("rm-run-1").await;
    assert_eq!(v.trust, JobTrust::Untrusted, "{v:?}");
    assert!(v.reason.contains("could not be read"), "{v:?}");
}
