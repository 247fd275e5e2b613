//! What our own runners tell the demand polls (`local_runs`): a run our runner is busy with is
//! not read from the `in_progress` list, its job is known from the runner's console name, and
//! GitHub's word comes from one listing of the run when the job ends. Against the fake GitHub
//! on loopback, whose counters say which requests were made and charged.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns; a panic is a failed test

mod common;

use common::*;
use rm_core::{Arch, LabelSet, Os, Target};
use rm_github::GitHubClient;
use rm_testkit::{FakeGitHub, JobSpec};

const LABEL: &str = "rm-home-linux-x64";

fn labels() -> LabelSet {
    LabelSet::parse([LABEL]).unwrap()
}

/// Registers `name` and lets it take a job at the fake's broker; returns the job id.
async fn take(w: &World, t: &Target, name: &str) -> (FakeRunner, u64) {
    let cfg = w
        .client
        .generate_jit_config(
            t,
            &rm_github::JitRequest {
                name: name.into(),
                runner_group_id: 1,
                labels: vec![LABEL.into()],
                work_folder: None,
            },
        )
        .await
        .unwrap();
    FakeRunner::take_job(&w.fake.origin(), &cfg.encoded_jit_config).await
}

fn took(client: &GitHubClient, t: &Target, runner: &str, name: &str) -> bool {
    client.runner_took_job(t, runner, Some(name), &labels(), Os::Linux, Arch::X64)
}

/// (requests to the run lists, charged; requests to job listings, charged) since the reset.
fn reads(fake: &FakeGitHub) -> (u64, u64, u64, u64) {
    let c = fake.counters();
    let runs = c.endpoint("workflow_runs");
    let jobs = c.endpoint("run_jobs");
    (runs.requests, runs.charged, jobs.requests, jobs.charged)
}

#[tokio::test]
async fn a_run_our_runner_is_busy_with_is_not_read_again_until_its_job_ends() {
    let w = world().await;
    let t = target("alice/app");
    let run = w
        .fake
        .queue_run("alice/app", vec![JobSpec::new("build", &[LABEL])])
        .unwrap();
    assert_eq!(w.client.demand(&t).await.unwrap().jobs.len(), 1);
    let (runner, job_id) = take(&w, &t, "rm-run-1").await;

    // The console named the job: attributed by the one queued job of that name, no request.
    w.fake.reset_counters();
    assert!(took(&w.client, &t, "rm-run-1", "build"));
    let job = w.client.job_of_runner("rm-run-1").expect("attributed");
    assert_eq!((job.job_id, job.run_id), (job_id, run));
    assert!(w.client.runs_job("rm-run-1"));
    assert_eq!(w.fake.counters().total.requests, 0);

    // While it runs, only the `queued` list is read (charged once: the run left it).
    for _ in 0..5 {
        assert!(w.client.demand(&t).await.unwrap().jobs.is_empty());
    }
    let (runs, runs_charged, jobs, _) = reads(&w.fake);
    assert_eq!(runs, 5, "one list per poll, not two");
    assert_eq!(runs_charged, 1);
    assert_eq!(jobs, 0, "the run is not listed again");

    // Its job ends: one listing of its run, GitHub's word on the job.
    runner.complete(job_id).await;
    w.fake.reset_counters();
    w.client.runner_job_over("rm-run-1").await;
    assert_eq!(reads(&w.fake), (0, 0, 1, 1));
    let job = w.client.job_of_runner("rm-run-1").expect("still known");
    assert_eq!(job.status, "completed");
    assert!(!w.client.runs_job("rm-run-1"));
}

/// Without local knowledge, the same run would cost the `in_progress` list every poll: the
/// check that the test above can fail.
#[tokio::test]
async fn a_run_no_runner_of_ours_accounts_for_is_read_from_the_in_progress_list() {
    let w = world().await;
    let t = target("alice/app");
    w.fake
        .queue_run("alice/app", vec![JobSpec::new("build", &[LABEL])])
        .unwrap();
    assert_eq!(w.client.demand(&t).await.unwrap().jobs.len(), 1);
    let (runner, job_id) = take(&w, &t, "rm-run-1").await;
    w.fake.reset_counters();
    for _ in 0..5 {
        w.client.demand(&t).await.unwrap();
    }
    let (runs, runs_charged, jobs, jobs_charged) = reads(&w.fake);
    assert_eq!(runs, 10, "both lists on every poll");
    assert_eq!(
        runs_charged, 2,
        "the run left the queued list and entered the in_progress one"
    );
    assert_eq!(
        (jobs, jobs_charged),
        (1, 1),
        "and its jobs were listed again"
    );
    runner.complete(job_id).await;
}

#[tokio::test]
async fn a_job_the_run_queues_when_ours_ends_is_found_without_the_in_progress_list() {
    let w = world().await;
    let t = target("alice/app");
    let run = w
        .fake
        .queue_run("alice/app", vec![JobSpec::new("build", &[LABEL])])
        .unwrap();
    w.client.demand(&t).await.unwrap();
    let (runner, job_id) = take(&w, &t, "rm-run-1").await;
    assert!(took(&w.client, &t, "rm-run-1", "build"));
    w.client.demand(&t).await.unwrap();
    // `test` needs `build`: GitHub queues it in the same run when `build` ends, a moment
    // after the runner's process is gone.
    runner.complete(job_id).await;
    w.client.runner_job_over("rm-run-1").await;
    let next = w
        .fake
        .queue_job_in_run(run, JobSpec::new("test", &[LABEL]))
        .unwrap();
    w.fake.reset_counters();
    let demand = w.client.demand(&t).await.unwrap();
    assert_eq!(
        demand.jobs.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        vec![next],
        "the watched run is listed on the next poll"
    );
    let (runs, _, jobs, _) = reads(&w.fake);
    assert_eq!(runs, 1, "only the queued list: {runs}");
    assert_eq!(jobs, 1);
}

#[tokio::test]
async fn two_queued_jobs_of_one_name_leave_the_attribution_to_githubs_listings() {
    let w = world().await;
    let t = target("alice/app");
    for _ in 0..2 {
        w.fake
            .queue_run("alice/app", vec![JobSpec::new("build", &[LABEL])])
            .unwrap();
    }
    assert_eq!(w.client.demand(&t).await.unwrap().jobs.len(), 2);
    let (runner, job_id) = take(&w, &t, "rm-run-1").await;
    assert!(
        !took(&w.client, &t, "rm-run-1", "build"),
        "either job: not guessed"
    );
    assert_eq!(w.client.job_of_runner("rm-run-1"), None);
    w.fake.reset_counters();
    w.client.demand(&t).await.unwrap();
    let (runs, _, _, _) = reads(&w.fake);
    assert_eq!(
        runs, 2,
        "the in_progress list is read while the runner's job is unknown"
    );
    assert_eq!(
        w.client.job_of_runner("rm-run-1").map(|j| j.job_id),
        Some(job_id),
        "GitHub's listing named it"
    );
    runner.complete(job_id).await;
}

#[tokio::test]
async fn a_fork_job_of_the_same_name_is_never_taken_for_ours() {
    let w = world().await;
    let t = target("alice/app");
    w.fake
        .queue_job("alice/app", JobSpec::new("build", &[LABEL]))
        .unwrap();
    let fork_job = w
        .fake
        .queue_job("alice/app", JobSpec::new("build", &[LABEL]).from_fork())
        .unwrap();
    w.client.demand(&t).await.unwrap();
    let (runner, job_id) = take(&w, &t, "rm-run-1").await;
    assert!(!took(&w.client, &t, "rm-run-1", "build"));
    w.client.demand(&t).await.unwrap();
    let job = w.client.job_of_runner("rm-run-1").expect("listed");
    assert_eq!(job.job_id, job_id);
    assert_eq!(
        job.from_fork,
        job_id == fork_job,
        "GitHub's word on the fork"
    );
    runner.complete(job_id).await;
}

#[tokio::test]
async fn a_run_with_a_job_for_other_runners_keeps_the_in_progress_list_read() {
    let w = world().await;
    let t = target("alice/app");
    w.fake
        .queue_run(
            "alice/app",
            vec![
                JobSpec::new("build", &[LABEL]),
                JobSpec::new("lint", &["ubuntu-latest"]),
            ],
        )
        .unwrap();
    w.client.demand(&t).await.unwrap();
    let (runner, job_id) = take(&w, &t, "rm-run-1").await;
    assert!(took(&w.client, &t, "rm-run-1", "build"));
    w.fake.reset_counters();
    for _ in 0..3 {
        w.client.demand(&t).await.unwrap();
    }
    let (runs, _, _, _) = reads(&w.fake);
    assert_eq!(
        runs, 6,
        "`lint` may end and queue a job for us: both lists every poll"
    );
    runner.complete(job_id).await;
}

#[tokio::test]
async fn a_runner_whose_job_is_not_in_its_run_falls_back_to_the_lists() {
    let w = world().await;
    let t = target("alice/app");
    w.fake
        .queue_run("alice/app", vec![JobSpec::new("build", &[LABEL])])
        .unwrap();
    w.client.demand(&t).await.unwrap();
    let (runner, job_id) = take(&w, &t, "rm-run-1").await;
    // A console name no known job has (the run was queued after the last poll).
    assert!(!took(&w.client, &t, "rm-run-1", "deploy"));
    runner.complete(job_id).await;
    w.fake.reset_counters();
    w.client.runner_job_over("rm-run-1").await;
    assert_eq!(reads(&w.fake), (0, 0, 0, 0), "nothing to list at once");
    w.client.demand(&t).await.unwrap();
    let (runs, _, _, _) = reads(&w.fake);
    assert_eq!(runs, 2, "the next poll reads both lists");
}
