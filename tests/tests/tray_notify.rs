//! Notifications the tray raises from the service's events: one failing runner gives exactly
//! one notification naming the target and the fix (and clicking it opens the dashboard); a
//! burst of twenty failures gives at most two. Real service, fake GitHub failing
//! `generate-jitconfig`, the tray under Xvfb with a fake notification server that records
//! every Notify call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rm_e2e::tray::{session_or_skip, Session, SessionOptions};
use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_proto::{Event, WatchMessage};
use rm_testkit::{EndpointMatch, Fault, FaultRule, JobSpec, JobStatus};
use serde_json::{json, Value};

fn jit_fails(times: Option<u32>) -> FaultRule {
    let fault = Fault::Status5xx {
        status: 502,
        rate: 1.0,
    };
    let at = EndpointMatch::name("repo_jitconfig");
    match times {
        Some(n) => FaultRule::times(at, fault, n),
        None => FaultRule::always(at, fault),
    }
}

async fn failure_notices(s: &mut Session) -> Vec<Value> {
    s.notifications()
        .await
        .into_iter()
        .filter(|n| {
            n["summary"]
                .as_str()
                .unwrap_or("")
                .starts_with("Runner failed")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_runner_gives_exactly_one_notification_naming_the_target_and_the_fix() {
    let Some(mut s) = session_or_skip(
        "one_failing_runner_gives_exactly_one_notification_naming_the_target_and_the_fix",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let label = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await,
    );
    let log = d.dir.path().join("tray.log");
    let socket = d.socket.display().to_string();
    let _tray = s.tray(None, &["--socket", &socket], &log).spawn().unwrap();
    s.until_menu("idle", |m| m.header() == "Idle · 1 target")
        .await;

    // generate-jitconfig fails for all three tries of one launch; the next launch works.
    gh.inject_fault(jit_fails(Some(3)));
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("build", &["self-hosted", &label]).duration(Duration::from_millis(300))],
    )
    .unwrap();
    until(
        Duration::from_secs(90),
        "the job served after one failed launch",
        || async {
            gh.jobs()
                .iter()
                .any(|j| j.status == JobStatus::Completed)
                .then_some(())
        },
    )
    .await;
    let failures = d.client().await.status().await.unwrap().recent_failures;
    assert_eq!(failures.len(), 1, "one failed runner: {failures:?}");
    let start = Instant::now();
    let notices = loop {
        let n = failure_notices(&mut s).await;
        if !n.is_empty() || start.elapsed() > Duration::from_secs(20) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        notices.len(),
        1,
        "{notices:#?}\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let n = &notices[0];
    assert_eq!(n["summary"], "Runner failed · octo/hello");
    let body = n["body"].as_str().unwrap();
    assert!(
        body.starts_with("GitHub refused to register a runner."),
        "{body}"
    );
    assert!(
        body.contains("What to do:") && body.contains("GitHub App is installed"),
        "{body}"
    );
    assert_eq!(n["app_name"], "runner-manager");
    assert!(
        n["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "default"),
        "{n}"
    );

    // Clicking it opens the dashboard.
    assert!(!s.windows().await.iter().any(|w| w == "runner-manager"));
    s.cmd(json!({"cmd": "invoke", "id": n["id"], "action": "default"}))
        .await;
    let start = Instant::now();
    while !s.windows().await.iter().any(|w| w == "runner-manager") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no dashboard after the click: {:?}",
            s.windows().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And nothing else was raised about it.
    assert_eq!(failure_notices(&mut s).await.len(), 1);
    d.stop().await.unwrap();
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_twenty_failures_gives_at_most_two_notifications() {
    let Some(mut s) = session_or_skip(
        "a_burst_of_twenty_failures_gives_at_most_two_notifications",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    d.ok(&["host", "set-capacity", "20"]).await;
    let label = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "20"])
            .await,
    );
    let log = d.dir.path().join("tray.log");
    let socket = d.socket.display().to_string();
    let _tray = s.tray(None, &["--socket", &socket], &log).spawn().unwrap();
    s.until_menu("idle", |m| m.header() == "Idle · 1 target")
        .await;

    // Count the failures the service really reports, on a watch of our own.
    let client = d.client().await;
    let mut watch = client.watch().await.unwrap();
    gh.inject_fault(jit_fails(None));
    let jobs: Vec<JobSpec> = (0..20)
        .map(|i| {
            JobSpec::new(&format!("job-{i}"), &["self-hosted", &label])
                .duration(Duration::from_millis(200))
        })
        .collect();
    gh.queue_run("octo/hello", jobs).unwrap();
    let mut failed = 0;
    tokio::time::timeout(Duration::from_secs(120), async {
        while failed < 20 {
            if let Some(Ok(WatchMessage::Event {
                event: Event::RunnerFailed { .. },
            })) = watch.next().await
            {
                failed += 1;
            }
        }
    })
    .await
    .expect("twenty failures within 120 s");
    // The held failures are summarised once the burst is over: wait for that summary.
    let start = Instant::now();
    let notices = loop {
        let n = failure_notices(&mut s).await;
        if n.len() >= 2 || start.elapsed() > Duration::from_secs(40) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(notices.len(), 2, "{notices:#?}");
    assert_eq!(notices[0]["summary"], "Runner failed · octo/hello");
    let summary = notices[1]["body"].as_str().unwrap();
    assert!(summary.starts_with("…and "), "{summary}");
    assert!(summary.contains("more failures"), "{summary}");
    gh.clear_faults();
    d.stop().await.unwrap();
    s.quit().await;
}
