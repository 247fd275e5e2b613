//! Failing launches back off and end in `repair_required`; the host doctor names what to fix;
//! a retry after the fix serves the job. The real binary, the fake GitHub, the fake runner.
//!
//! The back-off runs on the same code path with test timings (hidden `--launch-backoff-ms
//! 100 --launch-backoff-max-ms 4000`): 150 times the default's speed, so the issue's "at most
//! five registrations in ten minutes" is watched over four seconds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_proto::{CheckState, ProblemCode, Status, TargetState};
use rm_testkit::{EndpointMatch, Fault, FaultRule};
use service_support::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BACKOFF: [&str; 4] = [
    "--launch-backoff-ms",
    "100",
    "--launch-backoff-max-ms",
    "4000",
];
/// Ten minutes at the test's back-off speed (the default's 600 s cap is 4 s here).
const TEN_MINUTES: Duration = Duration::from_secs(4);

fn cli(w: &World, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner-manager"))
        .arg("--data-dir")
        .arg(w.data_dir())
        .arg("--socket")
        .arg(w.socket())
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn registrations(w: &World) -> u64 {
    w.gh.counters().endpoint("repo_jitconfig").requests
}

fn state(s: &Status) -> TargetState {
    s.targets[0].state
}

fn chmod(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_the_runner_cannot_execute_ends_in_repair_and_a_retry_after_the_fix_serves_the_job(
) {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (runners get their own uid only under a root service)");
        return;
    }
    let w = World::start().await;
    let mut d = w.spawn_daemon(&BACKOFF);
    let (client, label) = serving_repo(&w, &mut d, 2).await;
    // A first job proves the host works (and runs the host checks once, at the first launch).
    let first = w.queue(&label, 1, Duration::from_millis(200))[0];
    eventually(Duration::from_secs(30), "the first job served", || {
        w.completed_by_us(first)
    })
    .await;

    // The cause: the runner root's parent left 0700 by root, so the runner's uid
    // cannot reach bin/Runner.Listener ("Permission denied" after it was registered).
    let data = w.data_dir();
    chmod(&data, 0o700);
    let before = registrations(&w);
    let started = Instant::now();
    let job = w.queue(&label, 1, Duration::from_millis(200))[0];
    let s = status_until(
        &client,
        Duration::from_secs(60),
        "the target needs repair",
        |s| state(s) == TargetState::RepairRequired,
    )
    .await;
    let shown = data.display().to_string();
    let problem = s.targets[0].problem.clone().expect("a problem is shown");
    assert_eq!(problem.code, ProblemCode::HostUnfit, "{problem:?}");
    assert!(
        problem.message.contains(&shown) && problem.message.contains("0700"),
        "names the directory and its mode: {}",
        problem.message
    );
    assert!(
        problem.fix.contains(&format!("chmod o+x {shown}"))
            && problem
                .fix
                .contains("runner-manager repo set octo/hello --retry"),
        "{}",
        problem.fix
    );
    assert_eq!(problem.consecutive_failures, 5);
    assert_eq!(problem.next_try, None, "nothing until the operator acts");
    let root_check = s
        .host_checks
        .iter()
        .find(|c| c.id == "runner_root_reachable")
        .expect("the host checks are in the status");
    assert_eq!(root_check.state, CheckState::Fail);

    // At most five registrations in "ten minutes" (here: one, the launch that failed;
    // the host checks stopped the rest before any JIT request).
    let wait = TEN_MINUTES.saturating_sub(started.elapsed());
    tokio::time::sleep(wait).await;
    let spent = registrations(&w) - before;
    assert!((1..=5).contains(&spent), "{spent} registrations");
    assert_eq!(
        spent, 1,
        "the host checks after the failure stopped every further one"
    );
    assert!(
        d.log_text().contains("Permission denied"),
        "the launch failed as in the issue:\n{}",
        d.log_text()
    );
    assert!(
        w.gh.runners().iter().all(|r| !r.name.starts_with("rm-")),
        "every failed registration was removed again"
    );

    // The doctor names the directory, its mode and the fix, and exits non-zero.
    let out = cli(&w, &["host", "doctor"]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out));
    let doctor = text(&out);
    assert!(
        doctor.contains("FAIL  The runner account can reach and execute inside the runner root")
            && doctor.contains(&format!("{shown} is mode 0700"))
            && doctor.contains(&format!("fix: `chmod o+x {shown}`")),
        "{doctor}"
    );
    // A retry before the fix is refused, naming the check; nothing changes.
    let out = cli(&w, &["repo", "set", REPO, "--retry"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(
        text(&out).contains("runner_root_reachable"),
        "{}",
        text(&out)
    );
    assert_eq!(
        state(&client.status().await.unwrap()),
        TargetState::RepairRequired
    );

    // Fixed and retried: the job is served, the problem is gone.
    chmod(&data, 0o755);
    let out = cli(&w, &["repo", "set", REPO, "--retry"]);
    assert!(out.status.success(), "{}", text(&out));
    eventually(
        Duration::from_secs(30),
        "the job served after the retry",
        || w.completed_by_us(job),
    )
    .await;
    let s = client.status().await.unwrap();
    assert_eq!(state(&s), TargetState::Active);
    assert_eq!(s.targets[0].problem, None);
    let out = cli(&w, &["host", "doctor", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: rm_proto::DoctorReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.fit());
    assert!(report
        .checks
        .iter()
        .any(|c| c.id == "github_credential" && c.state == CheckState::Pass));
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_that_costs_github_nothing_counts_and_repair_survives_a_restart() {
    let w = World::start().await;
    // The runner package cannot be fetched: every launch fails before registering.
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::name("repo_runner_downloads"),
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
    ));
    let mut d = w.spawn_daemon(&BACKOFF);
    let (client, label) = serving_repo(&w, &mut d, 2).await;
    let job = w.queue(&label, 1, Duration::from_millis(200))[0];
    let s = status_until(
        &client,
        Duration::from_secs(60),
        "the target needs repair",
        |s| state(s) == TargetState::RepairRequired,
    )
    .await;
    assert_eq!(registrations(&w), 0, "no registration was ever made");
    let problem = s.targets[0].problem.clone().expect("a problem is shown");
    assert_eq!(problem.code, ProblemCode::LaunchFailing, "{problem:?}");
    assert!(
        problem.message.contains("5 launches failed in a row")
            && problem
                .message
                .contains("the runner package could not be prepared"),
        "{}",
        problem.message
    );
    assert!(
        problem
            .fix
            .contains("runner-manager repo set octo/hello --retry"),
        "{}",
        problem.fix
    );
    let human = text(&cli(&w, &["status"]));
    assert!(
        human.contains("launch_failing: 5 launches failed in a row"),
        "{human}"
    );

    // The policy stays in repair, and the reason with it, across a restart.
    assert!(d.terminate(Duration::from_secs(20)).success());
    let mut d = w.spawn_daemon(&BACKOFF);
    let client = d.client().await;
    let s = client.status().await.unwrap();
    assert_eq!(state(&s), TargetState::RepairRequired);
    assert_eq!(s.targets[0].problem, Some(problem));
    assert_eq!(registrations(&w), 0);

    // Re-enabling clears it too (disable, then enable), once the cause is gone.
    w.gh.clear_faults();
    let out = cli(&w, &["repo", "set", REPO, "--disable"]);
    assert!(out.status.success(), "{}", text(&out));
    status_until(&client, Duration::from_secs(20), "disabled", |s| {
        state(s) == TargetState::Disabled
    })
    .await;
    let out = cli(&w, &["repo", "set", REPO, "--enable"]);
    assert!(out.status.success(), "{}", text(&out));
    eventually(
        Duration::from_secs(30),
        "the job served after re-enabling",
        || w.completed_by_us(job),
    )
    .await;
    let s = client.status().await.unwrap();
    assert_eq!(state(&s), TargetState::Active);
    assert_eq!(s.targets[0].problem, None);
    // `--retry` on a target that is not waiting for repair says so and changes nothing.
    let out = cli(&w, &["repo", "set", REPO, "--retry"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(
        text(&out).contains("not waiting for repair"),
        "{}",
        text(&out)
    );
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

/// GitHub refusing the target (403: the App lacks the permission) stops it at once in
/// `repair_required`, with GitHub's words and the fix in status; a retry once GitHub accepts
/// serves the job. One registration attempt, not a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_github_refuses_shows_the_refusal_and_the_fix() {
    let w = World::start().await;
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::name("repo_jitconfig"),
        Fault::Refuse {
            status: 403,
            message: "Resource not accessible by integration".into(),
        },
    ));
    let mut d = w.spawn_daemon(&BACKOFF);
    let (client, label) = serving_repo(&w, &mut d, 2).await;
    let job = w.queue(&label, 1, Duration::from_millis(200))[0];
    let s = status_until(
        &client,
        Duration::from_secs(30),
        "the target needs repair",
        |s| state(s) == TargetState::RepairRequired && s.targets[0].problem.is_some(),
    )
    .await;
    let problem = s.targets[0].problem.clone().expect("a problem is shown");
    assert_eq!(problem.code, ProblemCode::GitHubRefused, "{problem:?}");
    assert!(
        problem
            .message
            .contains("Resource not accessible by integration"),
        "GitHub's words: {}",
        problem.message
    );
    assert!(
        problem.fix.contains("installed on octo/hello")
            && problem
                .fix
                .contains("runner-manager repo set octo/hello --retry"),
        "{}",
        problem.fix
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(registrations(&w), 1, "a refusal is never retried");

    w.gh.clear_faults();
    let out = cli(&w, &["repo", "set", REPO, "--retry"]);
    assert!(out.status.success(), "{}", text(&out));
    eventually(
        Duration::from_secs(30),
        "the job served after the retry",
        || w.completed_by_us(job),
    )
    .await;
    let s = client.status().await.unwrap();
    assert_eq!(state(&s), TargetState::Active);
    assert_eq!(s.targets[0].problem, None);
    assert!(d.terminate(Duration::from_secs(20)).success());
}
