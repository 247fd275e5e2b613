//! What the service shows besides demand: which job a runner took (learnt from the jobs
//! listings demand reads anyway: no extra request, and kept after the run settles) and who is
//! signed in (`GET /user`).

mod common;

use common::*;
use rm_testkit::JobSpec;

const LABEL: &str = "rm-home-linux-x64";

#[tokio::test]
async fn a_taken_job_is_known_by_runner_name_without_extra_requests() {
    let w = world_with(rm_testkit::FakeConfig {
        poll_hold: std::time::Duration::from_millis(200),
        ..rm_testkit::FakeConfig::default()
    })
    .await;
    let t = target("alice/app");
    w.fake
        .queue_run("alice/app", vec![JobSpec::new("build", &[LABEL])])
        .unwrap();
    assert_eq!(w.client.demand(&t).await.unwrap().jobs.len(), 1);
    assert_eq!(
        w.client.job_of_runner("rm-run-1"),
        None,
        "queued: no runner yet"
    );
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
    let before = w.client.runner_jobs_version();
    w.fake.reset_counters();
    assert!(w.client.demand(&t).await.unwrap().jobs.is_empty());
    let job = w
        .client
        .job_of_runner("rm-run-1")
        .expect("the job is known");
    assert_eq!(job.job_id, job_id);
    assert_eq!(job.name.as_deref(), Some("build"));
    assert_eq!(job.repository, "alice/app");
    assert_eq!(job.status, "in_progress");
    assert!(
        job.html_url
            .as_deref()
            .is_some_and(|u| u.ends_with(&format!("/job/{job_id}"))),
        "{job:?}"
    );
    assert!(w.client.runner_jobs_version() > before, "news for watchers");
    let c = w.fake.counters();
    assert_eq!(c.endpoint("job").requests, 0, "no per-job request: {c:?}");
    assert_eq!(c.endpoint("runner_get").requests, 0, "{c:?}");

    // The run settles and is not listed again; the runner's job stays known.
    w.fake.reset_counters();
    w.client.demand(&t).await.unwrap();
    assert_eq!(w.fake.counters().endpoint("run_jobs").requests, 0);
    assert_eq!(
        w.client.job_of_runner("rm-run-1").map(|j| j.job_id),
        Some(job_id)
    );

    runner.complete(job_id).await;
    w.client.forget_runner_job("rm-run-1");
    assert_eq!(w.client.job_of_runner("rm-run-1"), None);
}

/// Sign-in learns who it is with `GET /user`; asking again with the same token is a free 304.
#[tokio::test]
async fn the_current_login_comes_from_get_user() {
    let w = world().await;
    assert_eq!(w.client.current_login().await.unwrap(), "alice");
    assert_eq!(w.client.current_login().await.unwrap(), "alice");
    let c = w.fake.counters().endpoint("user");
    assert_eq!((c.requests, c.charged, c.not_modified), (2, 1, 1), "{c:?}");
    let bob = w.fake.issue_token("bob").unwrap();
    w.client.set_credential(credential(&bob)).unwrap();
    assert_eq!(w.client.current_login().await.unwrap(), "bob");
    // Every request carried exactly one User-Agent: ours.
    let uas = w.fake.counters().user_agents;
    let ours = rm_github::default_user_agent();
    assert_eq!(uas.keys().collect::<Vec<_>>(), vec![&ours], "{uas:?}");
}
