//! `runner-manager daemon run` as the real service: the real binary, a real socket, the fake
//! GitHub and the fake runner package. Idle host, end to end through the API (with the watch
//! stream and planted secrets), SIGTERM with a busy runner, and the drain deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_proto::{AuthState, TargetAdd, WatchMessage};
use rm_testkit::{Behaviour, JobStatus};
use service_support::*;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_targets_holds_the_lock_and_stays_off_the_network() {
    let w = World::start().await;
    let (_, cred) = w.credential();
    w.gh.reset_counters();
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    // Even with a credential handed over, no target means nothing to ask GitHub (not even who
    // signed in: the client's word stands until a target exists).
    client.put_credential(&cred).await.unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            w.gh.counters().total.requests,
            0,
            "no request to GitHub without targets:\n{}",
            d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = client.status().await.unwrap();
    assert!(s.targets.is_empty());
    assert_eq!(s.last_github_contact, None, "no contact was made");
    assert!(
        matches!(s.auth, AuthState::SignedIn { ref login, .. } if login == "octo"),
        "{:?}",
        s.auth
    );
    // A second daemon on the same data directory is refused (conflict).
    let mut second = w.spawn_daemon(&[]);
    let st = second.wait_exit(Duration::from_secs(10));
    assert_eq!(st.code(), Some(5), "{}", second.log_text());
    let st = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    assert!(
        !w.socket().exists(),
        "the socket is removed on a clean stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_added_through_the_api_are_served_and_secrets_stay_out() {
    let w = World::start().await;
    let (token, cred) = w.credential();
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let mut watch = client.watch().await.unwrap();
    let first = watch.next().await.unwrap().unwrap();
    assert!(matches!(first, WatchMessage::Snapshot { .. }), "{first:?}");

    client.put_credential(&cred).await.unwrap();
    let bad = client
        .add_target(&TargetAdd {
            target: "not a/target/really".into(),
            ..TargetAdd::default()
        })
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("owner/repo"), "{bad}");
    let added = client
        .add_target(&TargetAdd {
            target: REPO.into(),
            max_capacity: Some(2),
            ..TargetAdd::default()
        })
        .await
        .unwrap();
    assert_eq!(added.target, REPO);
    let dup = client
        .add_target(&TargetAdd {
            target: REPO.into(),
            ..TargetAdd::default()
        })
        .await
        .unwrap_err();
    assert!(dup.to_string().contains("already served"), "{dup}");
    // A stale revision is a conflict.
    let stale = client
        .update_target(
            &rm_proto::TargetRef::parse(REPO).unwrap(),
            &rm_proto::TargetUpdate {
                revision: added.revision + 7,
                min_capacity: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(stale.to_string().contains("changed since"), "{stale}");

    let label = client.status().await.unwrap().host.routing_label;
    let jobs = w.queue(&label, 2, Duration::from_millis(300));
    eventually(
        Duration::from_secs(25),
        "both jobs completed by our runners",
        || jobs.iter().all(|j| w.completed_by_us(*j)),
    )
    .await;
    let s = status_until(&client, Duration::from_secs(15), "runners cleaned", |s| {
        s.runners.is_empty() && s.last_github_contact.is_some()
    })
    .await;
    assert_eq!(s.targets.len(), 1);
    assert!(s.budget.is_some(), "budget after GitHub answered");

    // The watch saw the runners come and go.
    let mut launched = 0;
    let mut cleaned = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while cleaned < 2 && Instant::now() < deadline {
        let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(1), watch.next()).await
        else {
            continue;
        };
        if let WatchMessage::Event { event } = m {
            match event {
                rm_proto::Event::RunnerLaunched { .. } => launched += 1,
                rm_proto::Event::RunnerCleaned { .. } => cleaned += 1,
                _ => {}
            }
        }
    }
    assert!(
        launched >= 2 && cleaned >= 2,
        "launched {launched}, cleaned {cleaned}"
    );

    // Planted secrets: not in argv, the status answer, the journal or the debug log.
    let secrets = [
        token.access_token.clone(),
        token.refresh_token.clone().unwrap(),
    ];
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", d.pid())).unwrap();
    let status_json = serde_json::to_string(&client.status().await.unwrap()).unwrap();
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    let log = d.log_text();
    assert!(log.contains("DEBUG"), "the log was captured at debug level");
    let journal_files: Vec<_> = files_under(&w.data_dir())
        .into_iter()
        .filter(|(p, _)| p.to_string_lossy().contains("journal.sqlite3"))
        .collect();
    assert!(!journal_files.is_empty());
    for secret in &secrets {
        assert!(!contains(&cmdline, secret), "secret in argv");
        assert!(
            !status_json.contains(secret.as_str()),
            "secret in the status answer"
        );
        assert!(!log.contains(secret.as_str()), "secret in the log");
        for (p, bytes) in &journal_files {
            assert!(!contains(bytes, secret), "secret in {}", p.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_the_busy_runner_to_finish_its_job() {
    let w = World::start().await;
    let mut d = w.spawn_daemon(&[]);
    let (_client, label) = serving_repo(&w, &mut d, 1).await;
    let jobs = w.queue(&label, 1, Duration::from_millis(2500));
    eventually(Duration::from_secs(20), "the job taken", || {
        w.job_status(jobs[0]) == Some(JobStatus::InProgress)
    })
    .await;
    let st = d.terminate(Duration::from_secs(25));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    assert!(
        w.completed_by_us(jobs[0]),
        "the job finished before the daemon exited"
    );
    assert!(w.gh.runners().is_empty(), "the runner was deregistered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_deadline_stops_waiting_and_the_next_start_adopts() {
    let w = World::start().await;
    let mut d = w.spawn_daemon(&["--drain-deadline", "2"]);
    let (client, label) = serving_repo(&w, &mut d, 1).await;
    let jobs = w.queue_with(&label, 1, Duration::from_secs(1), Behaviour::Hang);
    eventually(Duration::from_secs(20), "the job taken", || {
        w.job_status(jobs[0]) == Some(JobStatus::InProgress)
    })
    .await;
    let asked = Instant::now();
    let st = d.terminate(Duration::from_secs(15));
    let took = asked.elapsed();
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    assert!(
        took < Duration::from_secs(8),
        "stopped after the 2 s deadline, took {took:?}"
    );
    assert!(d.log_text().contains("timed_out=true"), "{}", d.log_text());
    drop(client);

    // The next start adopts the runner that is still working.
    let mut again = w.spawn_daemon(&["--drain-deadline", "1"]);
    let client = again.client().await;
    let s = status_until(
        &client,
        Duration::from_secs(15),
        "the runner adopted",
        |s| s.runners.len() == 1 && s.runners[0].state == rm_proto::RunnerState::Busy,
    )
    .await;
    assert_eq!(s.runners[0].target, REPO);
    eventually(Duration::from_secs(10), "adoption logged", || {
        again.log_text().contains("live runner adopted")
    })
    .await;
    assert_eq!(
        w.job_status(jobs[0]),
        Some(JobStatus::InProgress),
        "the job was never interrupted"
    );
    let st = again.terminate(Duration::from_secs(15));
    assert!(st.success(), "{st:?}\n{}", again.log_text());
    kill_processes_under(&w.data_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_finishes_the_running_job_and_pause_stops_launching() {
    let w = World::start().await;
    let (_, cred) = w.credential();
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    client.put_credential(&cred).await.unwrap();
    let repo = rm_proto::TargetRef::parse(REPO).unwrap();
    let add = TargetAdd {
        target: REPO.into(),
        max_capacity: Some(1),
        ..TargetAdd::default()
    };
    client.add_target(&add).await.unwrap();
    let label = client.status().await.unwrap().host.routing_label;
    let busy = w.queue(&label, 1, Duration::from_secs(3));
    eventually(Duration::from_secs(20), "the job taken", || {
        w.job_status(busy[0]) == Some(JobStatus::InProgress)
    })
    .await;

    // Removing a target with a busy runner: the job finishes, then the target is gone.
    client.remove_target(&repo).await.unwrap();
    let gone = client.remove_target(&repo).await.unwrap_err();
    assert!(gone.to_string().contains("not served"), "{gone}");
    status_until(
        &client,
        Duration::from_secs(25),
        "the removed target deleted",
        |s| s.targets.is_empty() && s.runners.is_empty(),
    )
    .await;
    assert!(
        w.completed_by_us(busy[0]),
        "the running job was not interrupted"
    );

    // Host capacity is validated and stored.
    let refused = client.set_host_capacity(0).await.unwrap_err();
    assert!(refused.to_string().contains("1..=256"), "{refused}");
    assert_eq!(client.set_host_capacity(2).await.unwrap().capacity, 2);

    // Paused: demand is seen, nothing starts; resumed: it is served.
    assert!(client.pause().await.unwrap().paused);
    // Re-adding is refused until the removal has finished (the policy row deleted).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match client.add_target(&add).await {
            Ok(_) => break,
            Err(e) => {
                assert!(e.to_string().contains("still being removed"), "{e}");
                assert!(Instant::now() < deadline, "the removal never finished");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let mut j = rm_journal::Journal::open(w.journal_path()).unwrap();
    assert_eq!(
        j.list_policies().unwrap().len(),
        1,
        "the removed policy row was deleted"
    );
    let waiting = w.queue(&label, 1, Duration::from_millis(200));
    let s = status_until(
        &client,
        Duration::from_secs(15),
        "demand seen while paused",
        |s| s.targets.first().is_some_and(|t| t.demand.queued == 1),
    )
    .await;
    assert!(s.paused);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        w.job_status(waiting[0]),
        Some(JobStatus::Queued),
        "paused starts nothing"
    );
    assert!(client.status().await.unwrap().runners.is_empty());
    assert!(!client.resume().await.unwrap().paused);
    eventually(Duration::from_secs(20), "served after resume", || {
        w.completed_by_us(waiting[0])
    })
    .await;
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_launch_is_reported_once_with_its_fix() {
    use rm_testkit::{EndpointMatch, Fault, FaultRule};
    let w = World::start().await;
    let (_, cred) = w.credential();
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    client.put_credential(&cred).await.unwrap();
    let mut watch = client.watch().await.unwrap();
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::name("repo_jitconfig"),
        Fault::Status5xx {
            status: 502,
            rate: 1.0,
        },
    ));
    let label = add_repo(&client, 1).await;
    let job = w.queue(&label, 1, Duration::from_millis(200))[0];
    let s = status_until(
        &client,
        Duration::from_secs(25),
        "a failure reported",
        |s| !s.recent_failures.is_empty(),
    )
    .await;
    let f = &s.recent_failures[0];
    assert_eq!(f.reason, rm_proto::FailureReason::JitRequestFailed);
    assert_eq!(f.target, REPO);
    assert!(
        f.fix.contains("retried"),
        "names what happens and what to check: {}",
        f.fix
    );
    let mut ids: Vec<_> = s
        .recent_failures
        .iter()
        .map(|f| f.attempt_id.clone())
        .collect();
    ids.dedup();
    assert_eq!(
        ids.len(),
        s.recent_failures.len(),
        "one entry per failed attempt"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = false;
    while !seen && Instant::now() < deadline {
        if let Ok(Some(Ok(WatchMessage::Event {
            event: rm_proto::Event::RunnerFailed { failure },
        }))) = tokio::time::timeout(Duration::from_secs(1), watch.next()).await
        {
            seen = failure.reason == rm_proto::FailureReason::JitRequestFailed;
        }
    }
    assert!(seen, "the watch stream carried the failure");
    // Once GitHub answers again, the job is served.
    w.gh.clear_faults();
    eventually(Duration::from_secs(25), "served after the fault", || {
        w.completed_by_us(job)
    })
    .await;
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

/// Runs the CLI's `status --json` against the daemon as uid/gid 65534 (nobody).
fn status_as_nobody(w: &World) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_runner-manager"))
        .arg("--data-dir")
        .arg(w.dir.path().join("nobody-data"))
        .arg("--socket")
        .arg(w.socket())
        .args(["status", "--json"])
        .env("HOME", "/nonexistent")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_root_and_operators_may_use_the_api() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    let w = World::start().await;
    let mut d = w.spawn_daemon(&[]);
    d.client().await;
    let out = status_as_nobody(&w);
    assert_eq!(
        out.status.code(),
        Some(4),
        "another local user is refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("65534"));
    assert!(d.terminate(Duration::from_secs(10)).success());

    // Named as an operator, the same user may.
    let mut d = w.spawn_daemon(&["--operator", "65534"]);
    d.client().await;
    let out = status_as_nobody(&w);
    assert!(
        out.status.success(),
        "an operator is served: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s.get("host").is_some(), "{s}");
    assert!(d.terminate(Duration::from_secs(10)).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_github_contact_is_recorded_only_when_github_answered() {
    use rm_testkit::{EndpointMatch, Fault, FaultRule};
    let w = World::start().await;
    let (_, cred) = w.credential();
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::Any,
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
    ));
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    client.put_credential(&cred).await.unwrap();
    client
        .add_target(&TargetAdd {
            target: REPO.into(),
            max_capacity: Some(1),
            ..TargetAdd::default()
        })
        .await
        .unwrap();
    // Failed tries back off host-wide (1, 2, 4 … s): three come within a few seconds.
    eventually(Duration::from_secs(15), "passes tried GitHub", || {
        w.gh.counters().total.requests >= 3
    })
    .await;
    let s = client.status().await.unwrap();
    assert_eq!(s.last_github_contact, None, "failed passes are no contact");
    w.gh.clear_faults();
    let s = status_until(&client, Duration::from_secs(15), "contact recorded", |s| {
        s.last_github_contact.is_some()
    })
    .await;
    let at = s.last_github_contact.unwrap().0;
    let now = chrono::Utc::now().timestamp_millis();
    assert!((now - at).abs() < 15_000, "recent: {at} vs {now}");
    // Later passes move it forward in memory; a clean stop writes the newest to the journal.
    let later = status_until(&client, Duration::from_secs(15), "contact moves on", |s| {
        s.last_github_contact.is_some_and(|c| c.0 > at)
    })
    .await
    .last_github_contact
    .unwrap()
    .0;
    assert!(d.terminate(Duration::from_secs(10)).success());
    let mut j = rm_journal::Journal::open(w.journal_path()).unwrap();
    let saved: i64 = j
        .meta_get(rm_journal::meta_keys::LAST_GITHUB_CONTACT_MS)
        .unwrap()
        .expect("saved at shutdown")
        .parse()
        .unwrap();
    assert!(
        saved >= later,
        "saved {saved} is the newest contact (>= {later})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_running_a_job_is_journalled_busy() {
    let w = World::start().await;
    let mut d = w.spawn_daemon(&["--drain-deadline", "1"]);
    let (client, label) = serving_repo(&w, &mut d, 1).await;
    let jobs = w.queue_with(&label, 1, Duration::from_secs(1), Behaviour::Hang);
    eventually(Duration::from_secs(20), "the job taken", || {
        w.job_status(jobs[0]) == Some(JobStatus::InProgress)
    })
    .await;
    // While its job runs, the runner is `busy` (GitHub lists it busy), not `starting`.
    let s = status_until(
        &client,
        Duration::from_secs(10),
        "the runner journalled busy",
        |s| s.runners.len() == 1 && s.runners[0].state == rm_proto::RunnerState::Busy,
    )
    .await;
    assert_eq!(s.runners[0].target, REPO);
    assert_eq!(w.job_status(jobs[0]), Some(JobStatus::InProgress));
    drop(client);
    let st = d.terminate(Duration::from_secs(15));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    kill_processes_under(&w.data_dir());
}
