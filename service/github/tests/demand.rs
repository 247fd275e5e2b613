//! Demand (queued jobs) per repository and organization, page caps, and
//! conditional requests proven free by the fake's counters.

mod common;

use common::*;
use rm_testkit::{Conclusion, JobSpec};

const LABEL: &str = "rm-home-linux-x64";

#[tokio::test]
async fn queued_jobs_of_queued_and_in_progress_runs() {
    let w = world().await;
    let t = target("alice/app");
    // Both runs exist before the first poll: a run whose first jobs others took before any
    // poll saw it queued is read from the `in_progress` list on a repository's first poll (and
    // later by the backstop, pinned in `local_runs`' unit tests).
    let run1 = w
        .fake
        .queue_run(
            "alice/app",
            vec![
                JobSpec::new("build", &[LABEL]),
                JobSpec::new("lint", &["ubuntu-latest"]),
            ],
        )
        .unwrap();
    // run2: first job done, second still queued → the run is in_progress.
    let run2 = w
        .fake
        .queue_run(
            "alice/app",
            vec![
                JobSpec::new("one", &[LABEL]),
                JobSpec::new("two", &[LABEL, "gpu"]),
            ],
        )
        .unwrap();
    let first = w
        .fake
        .runs()
        .into_iter()
        .find(|r| r.id == run2)
        .unwrap()
        .job_ids[0];
    w.fake.finish_job(first, Conclusion::Success).unwrap();

    let d = w.client.demand(&t).await.unwrap();
    let mut names: Vec<_> = d.jobs.iter().map(|j| j.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["build", "lint", "two"]);
    let two = d.jobs.iter().find(|j| j.name == "two").unwrap();
    assert_eq!(two.run_id, run2);
    assert_eq!(two.labels, [LABEL, "gpu"]);
    assert!(d.jobs.iter().any(|j| j.run_id == run1));
    assert!(!d.is_floor);
    assert_eq!(d.repositories, 1);

    // Polled again, the in-progress run with a queued job is still listed.
    let again = w.client.demand(&t).await.unwrap();
    assert_eq!(again.jobs, d.jobs);

    // As rm-core's demand input.
    let labels = rm_core::LabelSet::parse([LABEL]).unwrap();
    let count = rm_core::match_demand(&labels, &d.job_demands(), d.is_floor);
    assert_eq!(count.matched, 1, "only `build` needs just {LABEL}");
}

#[tokio::test]
async fn unchanged_demand_is_polled_for_free() {
    let w = world().await;
    let t = target("alice/app");
    w.fake
        .queue_run("alice/app", vec![JobSpec::new("build", &[LABEL])])
        .unwrap();
    let first = w.client.demand(&t).await.unwrap();
    assert_eq!(first.jobs.len(), 1);
    assert!(first.charged >= 3, "runs ×2 + jobs: {first:?}");

    w.fake.reset_counters();
    let again = w.client.demand(&t).await.unwrap();
    assert_eq!(again.jobs, first.jobs, "304 reuses the last answer");
    assert_eq!(again.charged, 0);
    let c = w.fake.counters();
    assert_eq!(c.total.charged, 0, "{c:?}");
    assert_eq!(c.total.not_modified, c.total.requests, "{c:?}");
    assert_eq!(c.endpoint("workflow_runs").not_modified, 2);
    assert_eq!(c.endpoint("run_jobs").not_modified, 1);
    let budget = w.client.budget();
    let runs = budget
        .endpoints
        .iter()
        .find(|e| e.endpoint == "runs.list")
        .unwrap();
    assert_eq!(runs.counts.free, 2);
    assert_eq!(runs.counts.charged, 2);
    assert_eq!(budget.polls, 2);
    assert!(budget.rate.as_ref().unwrap().limit == 5000);

    // A change is seen (and charged) on the next poll.
    w.fake
        .queue_run("alice/app", vec![JobSpec::new("test", &[LABEL])])
        .unwrap();
    let changed = w.client.demand(&t).await.unwrap();
    assert_eq!(changed.jobs.len(), 2);
    assert!(changed.charged >= 1);
}

#[tokio::test]
async fn page_caps_make_the_count_a_floor() {
    let w = world().await;
    for i in 0..120 {
        w.fake
            .queue_run("alice/app", vec![JobSpec::new(&format!("j{i}"), &[LABEL])])
            .unwrap();
    }
    let mut c = config(&w.fake);
    c.max_run_pages = 1;
    let (capped, _) = client_with(c, Some(credential(&w.token)));
    let d = capped.demand(&target("alice/app")).await.unwrap();
    assert!(d.is_floor);
    assert_eq!(d.jobs.len(), 100);

    let full = w.client.demand(&target("alice/app")).await.unwrap();
    assert!(!full.is_floor);
    assert_eq!(full.jobs.len(), 120);
}

#[tokio::test]
async fn organization_demand_spans_its_repositories() {
    let w = world().await;
    w.fake.create_org("acme").unwrap();
    w.fake.add_org_member("acme", "alice", true).unwrap();
    for r in ["acme/a", "acme/b", "acme/c", "acme/d"] {
        w.fake.create_repo(r).unwrap();
    }
    w.fake
        .create_installation("acme", rm_testkit::InstallationRepos::All)
        .unwrap();
    w.fake
        .queue_run("acme/a", vec![JobSpec::new("a1", &[LABEL])])
        .unwrap();
    w.fake
        .queue_run(
            "acme/c",
            vec![JobSpec::new("c1", &[LABEL]), JobSpec::new("c2", &[LABEL])],
        )
        .unwrap();
    // Not in the org: never counted.
    w.fake
        .queue_run("alice/app", vec![JobSpec::new("x", &[LABEL])])
        .unwrap();

    let d = w.client.demand(&target("acme")).await.unwrap();
    assert_eq!(d.repositories, 4);
    let mut names: Vec<_> = d
        .jobs
        .iter()
        .map(|j| format!("{}/{}:{}", j.owner, j.repo, j.name))
        .collect();
    names.sort();
    assert_eq!(names, ["acme/a:a1", "acme/c:c1", "acme/c:c2"]);
    assert!(!d.is_floor);

    // Idle repeat: free.
    w.fake.reset_counters();
    let again = w.client.demand(&target("acme")).await.unwrap();
    assert_eq!(again.jobs.len(), 3);
    assert_eq!(w.fake.counters().total.charged, 0);
}

#[tokio::test]
async fn a_running_run_with_every_job_started_is_not_relisted() {
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
    let d = w.client.demand(&t).await.unwrap();
    assert!(d.jobs.is_empty(), "the job is running");
    w.fake.reset_counters();
    for _ in 0..3 {
        assert!(w.client.demand(&t).await.unwrap().jobs.is_empty());
    }
    let c = w.fake.counters();
    assert_eq!(
        c.endpoint("run_jobs").requests,
        0,
        "settled run skipped: {c:?}"
    );
    assert_eq!(c.endpoint("workflow_runs").not_modified, 6);
    assert_eq!(c.total.charged, 0);
    runner.complete(job_id).await;
    assert!(w.client.demand(&t).await.unwrap().jobs.is_empty());
}

#[tokio::test]
async fn jobs_from_a_fork_are_marked_so() {
    let w = world().await;
    let t = target("alice/app");
    w.fake
        .queue_run("alice/app", vec![JobSpec::new("push-build", &[LABEL])])
        .unwrap();
    w.fake
        .queue_run(
            "alice/app",
            vec![JobSpec::new("pr-build", &[LABEL]).from_fork()],
        )
        .unwrap();

    let d = w.client.demand(&t).await.unwrap();
    let job = |name: &str| d.jobs.iter().find(|j| j.name == name).unwrap();
    assert!(job("pr-build").from_fork);
    assert_eq!(job("pr-build").event.as_deref(), Some("pull_request"));
    // The fork's job still belongs to (and runs in) the target repository.
    assert_eq!(
        (
            job("pr-build").owner.as_str(),
            job("pr-build").repo.as_str()
        ),
        ("alice", "app")
    );
    assert!(!job("push-build").from_fork);
    assert_eq!(job("push-build").event.as_deref(), Some("push"));

    // Carried into rm-core's demand input.
    let demands = d.job_demands();
    let fork: Vec<_> = demands
        .iter()
        .map(|j| (j.name.as_str(), j.from_fork))
        .collect();
    assert!(fork.contains(&("pr-build", true)) && fork.contains(&("push-build", false)));

    // Read again from the conditional (304) answers: the same.
    let again = w.client.demand(&t).await.unwrap();
    assert_eq!(again.jobs, d.jobs);
}

#[tokio::test]
async fn organization_demand_marks_jobs_from_a_fork() {
    let w = world().await;
    w.fake.create_org("acme").unwrap();
    w.fake.add_org_member("acme", "alice", true).unwrap();
    w.fake.create_repo("acme/lib").unwrap();
    w.fake
        .create_installation("acme", rm_testkit::InstallationRepos::All)
        .unwrap();
    w.fake
        .queue_run(
            "acme/lib",
            vec![
                JobSpec::new("from-fork", &[LABEL]).from_fork(),
                JobSpec::new("same-run", &[LABEL]),
            ],
        )
        .unwrap();
    w.fake
        .queue_run("acme/lib", vec![JobSpec::new("own", &[LABEL])])
        .unwrap();

    let d = w.client.demand(&target("acme")).await.unwrap();
    let mut seen: Vec<_> = d
        .jobs
        .iter()
        .map(|j| (j.name.as_str(), j.from_fork))
        .collect();
    seen.sort();
    // A run is from a fork as a whole: every job of it is.
    assert_eq!(
        seen,
        [("from-fork", true), ("own", false), ("same-run", true)]
    );
    assert!(d
        .job_demands()
        .iter()
        .any(|j| j.name == "from-fork" && j.from_fork && j.repository == "acme/lib"));
}
