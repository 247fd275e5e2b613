//! A runner that dies in the middle of its job is a failure, never a success: the attempt ends
//! `failed(runner_crashed)` with how the listener ended and which job it was running, in
//! status's recent failures; the registration GitHub keeps calling busy is removed with a
//! back-off (a few DELETEs, not one per pass) and shown in status until it is gone. Real
//! service, fake GitHub keeping the vanished runner busy for seconds (GitHub: ~10 minutes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::{fake_github_with, routing_label, until, Daemon};
use rm_testkit::{FakeConfig, JobSpec, JobStatus};
use serde_json::Value;

async fn status(d: &Daemon) -> Option<Value> {
    serde_json::from_slice(&d.run(&["status", "--json"]).await.stdout).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_killed_mid_job_is_a_crash_and_its_removal_backs_off() {
    let gh = fake_github_with(FakeConfig {
        device_interval: Duration::from_secs(1),
        poll_hold: Duration::from_millis(300),
        session_timeout: Duration::from_millis(1500),
        // After its listener vanished, GitHub keeps the runner busy this long.
        lost_job_timeout: Duration::from_secs(6),
        ..FakeConfig::default()
    })
    .await;
    // DELETEs refused while GitHub counts the runner busy are tried again after 1, 2, then
    // 6 s: at 0, 1, 3 and 9 s, the last one after GitHub let go (~7.5 s).
    let d = Daemon::start_with(&gh, &["--removal-retry-ms", "1000,2000,6000"]).await;
    d.sign_in(&gh, "octo").await;
    let label = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await,
    );

    // The job's step kills its own listener (its parent) with SIGKILL, as the OOM killer or a
    // `kill -9` would.
    let run = gh
        .queue_run(
            "octo/hello",
            vec![JobSpec::new("crasher", &[label.as_str()])
                .with_command("sleep 1; kill -9 $PPID; sleep 30")
                .duration(Duration::from_secs(30))],
        )
        .unwrap();
    let job = gh
        .runs()
        .into_iter()
        .find(|r| r.id == run)
        .and_then(|r| r.job_ids.first().copied())
        .unwrap();
    until(Duration::from_secs(30), "the job taken", || async {
        (gh.job(job)?.status != JobStatus::Queued).then_some(())
    })
    .await;
    gh.reset_counters();

    // Concluded as a crash, with the exit and the job named.
    let failure = until(Duration::from_secs(30), "the crash recorded", || async {
        let s = status(&d).await?;
        let f = s["recent_failures"].as_array()?.first()?.clone();
        (f["reason"] == "runner_crashed").then_some(f)
    })
    .await;
    let detail = failure["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("killed by signal 9 (SIGKILL)") && detail.contains("crasher"),
        "{failure}"
    );
    assert!(
        failure["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("re-run the job"),
        "{failure}"
    );
    let text = d.ok(&["status"]).await;
    assert!(text.contains("runner_crashed"), "{text}");
    // `why` tells what became of the job: it is not queued any more, its runner died.
    let why = d.ok(&["why", "octo/hello"]).await;
    assert!(
        why.contains("a runner died in the middle of its job")
            && why.contains("killed by signal 9")
            && why.contains("crasher")
            && why.contains("fix: re-run the job"),
        "{why}"
    );

    // While GitHub refuses, status says the registration is left and when it is tried again.
    let left = until(
        Duration::from_secs(10),
        "the refused removal shown",
        || async {
            let s = status(&d).await?;
            let l = s["left_registrations"].as_array()?.first()?.clone();
            Some(l)
        },
    )
    .await;
    assert_eq!(left["target"], "octo/hello", "{left}");
    let text = d.ok(&["status"]).await;
    assert!(text.contains("registration left at GitHub"), "{text}");

    // GitHub lets go; the next DELETE (or GitHub itself) removes it and status forgets it.
    until(Duration::from_secs(30), "the registration gone", || async {
        let s = status(&d).await?;
        let none = s
            .get("left_registrations")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty());
        (none && gh.runners().is_empty()).then_some(())
    })
    .await;
    let deletes = gh.counters().endpoint("repo_runner_delete");
    assert!(
        (2..=4).contains(&deletes.requests),
        "backed off, not one DELETE per pass: {deletes:?}"
    );
    let runs = gh.jobs();
    assert!(
        runs.iter().all(|j| j.status == JobStatus::Completed),
        "GitHub failed the lost job"
    );
    d.stop().await.unwrap();
}
