//! A GitHub outage as the real service lives it: four repositories, every GitHub endpoint
//! answering 503 for ten seconds. The service backs off host-wide (the requests it sends are
//! bounded by one back-off schedule, whatever the number of targets), `status` and the watch
//! stream say `unreachable` with since/next try while it lasts and `ok` after, and every
//! target serves its queued job once GitHub answers. Before that, `status` and `host show`
//! carry the traffic: requests of the last hour and each target's planned hourly spend.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_proto::{GitHubHealthState, TargetAdd, TargetState, WatchMessage};
use rm_testkit::{EndpointMatch, Fault, FaultRule, JobSpec};
use service_support::*;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPOS: [&str; 4] = [REPO, "octo/r1", "octo/r2", "octo/r3"];

/// The service's outage schedule (rm-github's default): 1 s doubling, each delay at least half
/// its full value.
const BASE: Duration = Duration::from_secs(1);
const CAP: Duration = Duration::from_secs(6);

fn full_step(k: u32) -> Duration {
    BASE.saturating_mul(2u32.saturating_pow(k)).min(CAP)
}

/// Most probes the schedule lets out in `storm` (the k-th waits at least half its step).
fn most_probes(storm: Duration) -> usize {
    let mut spent = Duration::ZERO;
    let mut k = 0u32;
    loop {
        spent += full_step(k) / 2;
        if spent > storm {
            return k as usize;
        }
        k += 1;
    }
}

/// `runner-manager ARGS` against the running service: stdout.
fn cli(w: &World, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_runner-manager"))
        .arg("--data-dir")
        .arg(w.data_dir())
        .arg("--socket")
        .arg(w.socket())
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn cli_json(w: &World, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&cli(w, args)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_backs_off_host_wide_shows_in_status_and_every_target_resumes() {
    let w = World::start().await;
    for r in &REPOS[1..] {
        w.gh.create_repo(r).unwrap();
    }
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let (_, cred) = w.credential();
    client.put_credential(&cred).await.unwrap();
    for r in REPOS {
        client
            .add_target(&TargetAdd {
                target: r.into(),
                max_capacity: Some(1),
                ..TargetAdd::default()
            })
            .await
            .unwrap();
    }

    // GitHub answers: the traffic is shown, with a planned spend for every target.
    let s = status_until(
        &client,
        Duration::from_secs(20),
        "every target polled",
        |s| {
            s.targets.len() == 4
                && s.targets.iter().all(|t| t.state == TargetState::Active)
                && s.budget.as_ref().is_some_and(|b| {
                    b.charged_last_hour > 0
                        && b.planned_per_hour.len() == 4
                        && b.not_modified_last_hour > 0
                })
        },
    )
    .await;
    assert_eq!(s.github_health.state, GitHubHealthState::Ok);
    let b = s.budget.clone().unwrap();
    let planned: Vec<&str> = b
        .planned_per_hour
        .iter()
        .map(|t| t.target.as_str())
        .collect();
    assert_eq!(planned, ["octo/hello", "octo/r1", "octo/r2", "octo/r3"]);
    assert_eq!(b.limit, 5000);
    assert!(b.remaining < 5000 && b.reset.is_some(), "{b:?}");
    let text = cli(&w, &["status"]);
    assert!(
        text.contains("GitHub requests, last hour: ")
            && text.contains(" charged · ")
            && text.contains(" free (304) · ")
            && text.contains("quota left ")
            && text.contains("of 5,000 (resets ")
            && text.contains("planned: octo/hello ~"),
        "{text}"
    );
    assert!(!text.contains("unreachable"), "{text}");
    let host = cli(&w, &["host", "show"]);
    assert!(host.contains("GitHub requests, last hour: "), "{host}");
    let host = cli_json(&w, &["host", "show", "--json"]);
    assert_eq!(host["capacity"], s.host.capacity, "{host}");
    assert_eq!(host["budget"]["planned_per_hour"][3]["target"], "octo/r3");
    assert_eq!(host["budget"]["limit"], 5000);
    assert_eq!(host["github_health"]["state"], "ok");

    // What the watch stream says about GitHub, in order.
    let seen: Arc<Mutex<Vec<GitHubHealthState>>> = Arc::default();
    let mut watch = client.watch().await.unwrap();
    let reader = {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Some(Ok(msg)) = watch.next().await {
                if let WatchMessage::Snapshot { status } | WatchMessage::Changed { status } = msg {
                    let mut seen = seen.lock().unwrap();
                    if seen.last() != Some(&status.github_health.state) {
                        seen.push(status.github_health.state);
                    }
                }
            }
        })
    };

    // The outage.
    let label = s.host.routing_label.clone();
    w.gh.reset_counters();
    let began = Instant::now();
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::Any,
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
    ));
    let s = status_until(
        &client,
        Duration::from_secs(20),
        "GitHub unreachable after a few tries",
        |s| {
            s.github_health.state == GitHubHealthState::Unreachable
                && s.github_health.consecutive_failures >= 2
        },
    )
    .await;
    let h = &s.github_health;
    let (since, next_try) = (h.since.unwrap(), h.next_try.unwrap());
    assert!(next_try > since, "{h:?}");
    assert!(
        h.detail.as_deref().is_some_and(|d| d.contains("503")),
        "{h:?}"
    );
    let text = cli(&w, &["status"]);
    assert!(
        text.contains("GitHub unreachable since ") && text.contains(" failures), next try "),
        "{text}"
    );
    let json = cli_json(&w, &["status", "--json"]);
    assert_eq!(json["github_health"]["state"], "unreachable", "{json}");
    assert!(json["github_health"]["next_try"].is_i64(), "{json}");
    assert!(json["github_health"]["since"].is_i64(), "{json}");
    assert!(
        json["budget"]["errors_last_hour"].as_u64().unwrap() >= 2,
        "{json}"
    );

    // Watchers were told without anything else happening (no job, no runner).
    eventually(Duration::from_secs(5), "the watch saw the outage", || {
        seen.lock().unwrap().last() == Some(&GitHubHealthState::Unreachable)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(began.elapsed())).await;
    let storm = began.elapsed();
    let sent =
        w.gh.request_log()
            .iter()
            .filter(|r| r.status >= 500)
            .count();
    // One target's back-off would send 1 + most_probes; the first round may catch every
    // target's poll in flight, and the login/inventory lookups of the service share the gate.
    let bound = REPOS.len() + 1 + most_probes(storm);
    let failures = client
        .status()
        .await
        .unwrap()
        .github_health
        .consecutive_failures;
    println!("outage of {storm:?}: {sent} requests, {failures} failed tries (bound {bound})");
    assert!(sent <= bound, "{sent} requests in {storm:?}, bound {bound}");
    // One failed try per step, never faster than the schedule (targets failing together
    // count once).
    assert!(
        failures as usize <= 1 + most_probes(storm),
        "{failures} failed tries in {storm:?}: faster than the schedule"
    );
    assert!(failures >= 3, "{failures}");

    // Once every target saw the outage, only the free probe (`GET /rate_limit`) reached GitHub:
    // the back-off spends nothing of the rate limit.
    let log = w.gh.request_log();
    let first_probe = log
        .iter()
        .position(|r| r.endpoint == "rate_limit")
        .expect("the outage was probed with the free question");
    let after: Vec<&str> = log[first_probe..]
        .iter()
        .map(|r| r.endpoint.as_str())
        .collect();
    assert!(after.iter().all(|e| *e == "rate_limit"), "{after:?}");
    assert!(log.iter().all(|r| !r.charged), "nothing charged: {log:?}");

    // A job queued on each target while GitHub is down, then GitHub answers again: ok for
    // everyone within one step, and every job starts within seconds of the end (the first
    // probe that gets an answer wakes every target at once).
    let jobs: Vec<u64> = REPOS
        .iter()
        .map(|r| {
            w.gh.queue_job(r, JobSpec::new("build", &[label.as_str()]))
                .unwrap()
        })
        .collect();
    w.gh.clear_faults();
    let cleared = Instant::now();
    let step = full_step(failures.saturating_sub(1));
    status_until(
        &client,
        step + Duration::from_secs(10),
        "GitHub ok again",
        |s| s.github_health.state == GitHubHealthState::Ok,
    )
    .await;
    eventually(Duration::from_secs(10), "the watch saw it end", || {
        seen.lock().unwrap().last() == Some(&GitHubHealthState::Ok)
    })
    .await;
    // Every target polls again: each job is taken (the goal: within 10 s of the end; the
    // schedule's cap is 6 s, the wake immediate) and served.
    for (repo, job) in REPOS.iter().zip(&jobs) {
        eventually(Duration::from_secs(10), repo, || {
            w.gh.job(*job)
                .is_some_and(|j| j.status != rm_testkit::JobStatus::Queued)
        })
        .await;
    }
    println!(
        "every job taken {:?} after the fault cleared",
        cleared.elapsed()
    );
    for (repo, job) in REPOS.iter().zip(&jobs) {
        eventually(step + Duration::from_secs(40), repo, || {
            w.completed_by_us(*job)
        })
        .await;
    }
    println!("all served {:?} after the fault cleared", cleared.elapsed());
    let states = seen.lock().unwrap().clone();
    assert_eq!(
        states,
        [
            GitHubHealthState::Ok,
            GitHubHealthState::Unreachable,
            GitHubHealthState::Ok
        ],
        "the watch stream published the change both ways"
    );
    reader.abort();
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}
