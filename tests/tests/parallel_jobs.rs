//! Jobs run in parallel as capacity allows: a running job never holds back the jobs queued
//! after it, a burst is served with no surplus runner (runners started − jobs served = 0), and
//! the host's capacity is never exceeded. Real binary, fake GitHub, fake runners.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{FakeGitHub, JobSpec, JobStatus};

/// Registration and idle timeouts of 40 s make the runner inventory's refresh 10 s (a quarter
/// of the shorter timeout): the long jobs below outlast it, so what decides is what the
/// service learns in the same pass (GitHub's job listings), not a later inventory read.
const TIMEOUTS: [&str; 4] = [
    "--registration-timeout-secs",
    "40",
    "--idle-timeout-secs",
    "40",
];

async fn serving(gh: &FakeGitHub, capacity: u32, max: u32) -> (Daemon, String) {
    let d = Daemon::start_with(gh, &TIMEOUTS).await;
    d.sign_in(gh, "octo").await;
    d.ok(&["host", "set-capacity", &capacity.to_string()]).await;
    let added = d
        .ok(&[
            "repo",
            "add",
            "octo/hello",
            "--max-runners",
            &max.to_string(),
        ])
        .await;
    (d, routing_label(&added))
}

fn status_of(gh: &FakeGitHub, job: u64) -> JobStatus {
    gh.job(job).map(|j| j.status).expect("the job exists")
}

async fn queue(gh: &FakeGitHub, label: &str, name: &str, secs: u64) -> u64 {
    let run = gh
        .queue_run(
            "octo/hello",
            vec![JobSpec::new(name, &[label]).duration(Duration::from_secs(secs))],
        )
        .unwrap();
    gh.runs()
        .into_iter()
        .find(|r| r.id == run)
        .and_then(|r| r.job_ids.first().copied())
        .expect("the queued job")
}

async fn until_taken(gh: &FakeGitHub, job: u64, what: &str) {
    until(Duration::from_secs(20), what, || async {
        (status_of(gh, job) != JobStatus::Queued).then_some(())
    })
    .await;
}

/// Every job completed, every runner gone from GitHub and from status.
async fn until_all_done(d: &Daemon, gh: &FakeGitHub, jobs: usize) {
    until(
        Duration::from_secs(60),
        "every job done and no runner left",
        || async {
            let all = gh.jobs();
            let done = all.len() == jobs && all.iter().all(|j| j.status == JobStatus::Completed);
            if !done || !gh.runners().is_empty() {
                return None;
            }
            let v: serde_json::Value =
                serde_json::from_slice(&d.run(&["status", "--json"]).await.stdout).ok()?;
            v["runners"].as_array()?.is_empty().then_some(())
        },
    )
    .await;
}

/// Runners started (JIT registrations) minus jobs served; each job ran on its own runner.
fn surplus(gh: &FakeGitHub) -> i64 {
    let registered = gh.counters().endpoint("repo_jitconfig").charged as i64;
    let served = gh
        .jobs()
        .iter()
        .filter(|j| j.status == JobStatus::Completed && j.runner_name.is_some())
        .count() as i64;
    registered - served
}

/// The reported case: capacity 4, one repository allowed 4 runners, long jobs queued one after
/// another while the earlier ones run. Each is taken while every earlier one is still running
/// (before the fix the third waited for a running job to end although slots were free).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_never_holds_back_jobs_queued_after_it() {
    let gh = fake_github().await;
    let (d, label) = serving(&gh, 4, 4).await;

    let a = queue(&gh, &label, "first", 24).await;
    until_taken(&gh, a, "the first job taken").await;
    let b = queue(&gh, &label, "second", 18).await;
    until_taken(&gh, b, "the second job taken while the first runs").await;
    assert_eq!(
        status_of(&gh, a),
        JobStatus::InProgress,
        "the second job waited for the first to end"
    );
    let c = queue(&gh, &label, "third", 1).await;
    until_taken(&gh, c, "the third job taken while two run").await;
    for (job, name) in [(a, "first"), (b, "second")] {
        assert_eq!(
            status_of(&gh, job),
            JobStatus::InProgress,
            "the third job waited for the {name} to end\n{}",
            d.log()
        );
    }

    until_all_done(&d, &gh, 3).await;
    assert_eq!(
        surplus(&gh),
        0,
        "a runner started for no job: {:?}",
        gh.counters()
    );
    d.stop().await.unwrap();
}

/// Ten jobs at once on a host that runs four at a time: every job served, one runner per job,
/// never more than four runners at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_ten_jobs_is_served_with_no_surplus_and_within_capacity() {
    let gh = fake_github().await;
    let (d, label) = serving(&gh, 4, 10).await;
    for i in 0..10 {
        gh.queue_run(
            "octo/hello",
            vec![JobSpec::new(&format!("burst-{i}"), &[label.as_str()])
                .duration(Duration::from_millis(1500))],
        )
        .unwrap();
    }
    // Watch GitHub's side while the burst runs: registered runners and jobs in progress.
    let mut most_registered = 0usize;
    let mut most_running = 0usize;
    until(Duration::from_secs(90), "all ten jobs done", || {
        let registered = gh.runners().len();
        let jobs = gh.jobs();
        let running = jobs
            .iter()
            .filter(|j| j.status == JobStatus::InProgress)
            .count();
        most_registered = most_registered.max(registered);
        most_running = most_running.max(running);
        let done = jobs.iter().all(|j| j.status == JobStatus::Completed);
        async move { done.then_some(()) }
    })
    .await;
    until_all_done(&d, &gh, 10).await;
    assert!(
        most_registered <= 4 && most_running <= 4,
        "more than the host's 4 at once: {most_registered} registered, {most_running} running"
    );
    assert!(most_running >= 2, "the burst ran one job at a time");
    assert_eq!(
        surplus(&gh),
        0,
        "runners started for no job: {:?}",
        gh.counters()
    );
    let log = d.log();
    assert!(
        !log.contains("exited_idle_without_work"),
        "a runner idled out unused:\n{log}"
    );
    d.stop().await.unwrap();
}
