//! What the status tells beyond counts: the job each live runner took (learnt from the jobs
//! listings demand reads anyway, shown in `status --json` and on the watch stream), the login
//! the service learnt from GitHub, and the GitHub it talks to.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_proto::{AuthState, Event, TargetAdd, WatchMessage};
use service_support::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// `runner-manager status --json` of the running service, parsed.
fn status_json(w: &World) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_runner-manager"))
        .arg("--data-dir")
        .arg(w.data_dir())
        .arg("--socket")
        .arg(w.socket())
        .args(["status", "--json"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_shows_on_its_runner_in_status_and_on_the_watch_stream() {
    let w = World::start().await;
    let mut d = w.spawn_daemon(&[]);
    let (client, label) = serving_repo(&w, &mut d, 1).await;
    let mut watch = client.watch().await.unwrap();
    let job_id = w.queue(&label, 1, Duration::from_secs(4))[0];

    let s = status_until(
        &client,
        Duration::from_secs(20),
        "the runner shows its job",
        |s| {
            s.runners
                .iter()
                .any(|r| r.job.as_ref().and_then(|j| j.id) == Some(job_id))
        },
    )
    .await;
    let runner = &s.runners[0];
    let job = runner.job.clone().unwrap();
    assert_eq!(job.name.as_deref(), Some("job-0"));
    assert_eq!(job.repository.as_deref(), Some(REPO));
    assert!(job.run_id.is_some(), "{job:?}");
    assert!(
        job.html_url
            .as_deref()
            .is_some_and(|u| u.ends_with(&format!("/job/{job_id}"))),
        "{job:?}"
    );
    // GitHub names the runner that took it: ours.
    let taken_by = w.gh.job(job_id).and_then(|j| j.runner_name);
    assert_eq!(taken_by.as_deref(), Some(runner.runner_name.as_str()));

    // The CLI shows it while the job runs.
    let json = status_json(&w);
    assert_eq!(json["runners"][0]["job"]["id"], job_id, "{json}");
    assert_eq!(
        w.job_status(job_id),
        Some(rm_testkit::JobStatus::InProgress),
        "checked while running"
    );

    // Watchers got a status carrying the job without asking again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen_on_watch = false;
    while !seen_on_watch {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, watch.next())
            .await
            .expect("the watch stream showed the job in time")
            .expect("the watch stream is open")
            .unwrap();
        seen_on_watch = match msg {
            WatchMessage::Snapshot { status } | WatchMessage::Changed { status } => status
                .runners
                .iter()
                .any(|r| r.job.as_ref().and_then(|j| j.id) == Some(job_id)),
            WatchMessage::Event {
                event: Event::RunnerStateChanged { job, .. },
            } => job.and_then(|j| j.id) == Some(job_id),
            _ => false,
        };
    }

    // Once the job is done the runner is cleaned and leaves the status.
    eventually(Duration::from_secs(20), "the job completed", || {
        w.completed_by_us(job_id)
    })
    .await;
    status_until(&client, Duration::from_secs(15), "runner cleaned", |s| {
        s.runners.is_empty()
    })
    .await;
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_seen_taking_a_job_shows_busy_before_the_inventory_says_so() {
    let w = World::start().await;
    // The service's own timeouts (300 s): a live runner within them is looked up in GitHub's
    // runner inventory only every 30 s, so the journal still says `starting` while the job
    // runs; the demand polls have seen GitHub give it the job.
    let mut d = w.spawn_daemon(&[
        "--registration-timeout-secs",
        "300",
        "--idle-timeout-secs",
        "300",
    ]);
    let (client, label) = serving_repo(&w, &mut d, 1).await;
    let job_id = w.queue(&label, 1, Duration::from_secs(8))[0];
    let s = status_until(
        &client,
        Duration::from_secs(20),
        "the runner shows its job",
        |s| {
            s.runners
                .iter()
                .any(|r| r.job.as_ref().and_then(|j| j.id) == Some(job_id))
        },
    )
    .await;
    assert_eq!(
        w.job_status(job_id),
        Some(rm_testkit::JobStatus::InProgress),
        "checked while running"
    );
    assert_eq!(s.runners[0].state, rm_proto::RunnerState::Busy, "{s:?}");
    eventually(Duration::from_secs(30), "the job completed", || {
        w.completed_by_us(job_id)
    })
    .await;
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_learns_who_signed_in_and_names_its_github() {
    let w = World::start().await;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    let before = client.status().await.unwrap();
    let github = before.github.clone().expect("the service names its GitHub");
    assert_eq!(github.web_base, w.gh.origin());
    assert_eq!(github.api_base, w.gh.origin());
    assert_eq!(github.client_id, w.gh.client_id());
    assert_eq!(before.auth, AuthState::SignedOut);

    // Without a target the service stays off the network: the client's word stands in.
    let (_, mut cred) = w.credential();
    cred.login = Some("mallory".into());
    client.put_credential(&cred).await.unwrap();
    match client.status().await.unwrap().auth {
        AuthState::SignedIn { login, .. } => assert_eq!(login, "mallory"),
        other => panic!("not signed in: {other:?}"),
    }
    assert_eq!(w.gh.counters().total.requests, 0, "{}", d.log_text());

    // Its first target lets it ask GitHub, whose answer replaces the client's word.
    client
        .add_target(&TargetAdd {
            target: REPO.into(),
            ..TargetAdd::default()
        })
        .await
        .unwrap();
    status_until(
        &client,
        Duration::from_secs(10),
        "the login learnt from GitHub once a target exists",
        |s| matches!(&s.auth, AuthState::SignedIn { login, .. } if login == "octo"),
    )
    .await;
    assert_eq!(w.gh.counters().endpoint("user").requests, 1);

    // A client that does not know the login (like `auth login`): the service asks GitHub.
    let (_, mut cred) = w.credential();
    cred.login = None;
    client.put_credential(&cred).await.unwrap();
    match client.status().await.unwrap().auth {
        AuthState::SignedIn { login, .. } => assert_eq!(login, "octo"),
        other => panic!("not signed in: {other:?}"),
    }
    assert_eq!(w.gh.counters().endpoint("user").requests, 2);

    // A wrong hint loses to GitHub's answer.
    let (_, mut cred) = w.credential();
    cred.login = Some("mallory".into());
    client.put_credential(&cred).await.unwrap();
    match client.status().await.unwrap().auth {
        AuthState::SignedIn { login, .. } => assert_eq!(login, "octo"),
        other => panic!("not signed in: {other:?}"),
    }

    // Kept across a restart (the journal holds it) without asking again.
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    let users_before = w.gh.counters().endpoint("user").requests;
    let mut d = w.spawn_daemon(&[]);
    let client = d.client().await;
    status_until(
        &client,
        Duration::from_secs(5),
        "signed in as octo",
        |s| matches!(&s.auth, AuthState::SignedIn { login, .. } if login == "octo"),
    )
    .await;
    assert_eq!(w.gh.counters().endpoint("user").requests, users_before);
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}
