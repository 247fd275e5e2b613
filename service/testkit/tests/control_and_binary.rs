//! The `/_fake` control API and the `fake-github` binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken expectations

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{get, raw};
use rm_testkit::{FakeConfig, FakeGitHub};
use serde_json::{json, Value};

async fn ctl(addr: std::net::SocketAddr, method: &str, path: &str, body: Value) -> common::Raw {
    common::send_json(addr, method, path, None, &body).await
}

#[tokio::test]
async fn control_api_builds_a_world_and_reads_it_back() {
    let gh = FakeGitHub::start(FakeConfig::default()).await.unwrap();
    let a = gh.addr();
    assert_eq!(
        ctl(a, "POST", "/_fake/users", json!({"login": "octo"}))
            .await
            .status,
        200
    );
    assert_eq!(
        ctl(a, "POST", "/_fake/orgs", json!({"login": "acme"}))
            .await
            .status,
        200
    );
    assert_eq!(
        ctl(
            a,
            "POST",
            "/_fake/orgs/acme/members",
            json!({"login": "octo", "admin": true})
        )
        .await
        .status,
        200
    );
    assert_eq!(
        ctl(a, "POST", "/_fake/repos", json!({"full_name": "acme/api"}))
            .await
            .status,
        200
    );
    let bad = ctl(a, "POST", "/_fake/repos", json!({"full_name": "ghost/api"})).await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("ghost"));
    let inst = ctl(
        a,
        "POST",
        "/_fake/installations",
        json!({"account": "acme", "repositories": ["acme/api"]}),
    )
    .await;
    assert!(inst.json()["id"].as_u64().is_some());
    let tok = ctl(a, "POST", "/_fake/tokens", json!({"login": "octo"}))
        .await
        .json();
    let token = tok["access_token"].as_str().unwrap().to_string();
    assert!(tok["refresh_token"].as_str().unwrap().starts_with("ghr_"));
    let run = ctl(
        a,
        "POST",
        "/_fake/runs",
        json!({"repo": "acme/api", "jobs": [
        {"name": "build", "labels": ["self-hosted"], "behaviour": "hang", "duration_ms": 10}]}),
    )
    .await;
    let run_id = run.json()["id"].as_u64().unwrap();
    let jobs = ctl(a, "GET", "/_fake/jobs", Value::Null).await.json();
    assert_eq!(jobs[0]["run_id"], run_id);
    assert_eq!(jobs[0]["behaviour"], "hang");
    let r = get(a, "/repos/acme/api/actions/runs?status=queued", &token).await;
    assert_eq!(r.json()["total_count"], 1);
    let job_id = jobs[0]["id"].as_u64().unwrap();
    assert_eq!(
        ctl(
            a,
            "POST",
            &format!("/_fake/jobs/{job_id}/finish"),
            json!({"conclusion": "cancelled"})
        )
        .await
        .status,
        200
    );
    let runs = ctl(a, "GET", "/_fake/runs", Value::Null).await.json();
    assert_eq!(runs[0]["status"], "completed");
    assert_eq!(runs[0]["conclusion"], "cancelled");
    assert_eq!(
        ctl(a, "POST", "/_fake/rate_limit", json!({"remaining": 0}))
            .await
            .status,
        200
    );
    assert_eq!(get(a, "/user", &token).await.status, 403);
    assert_eq!(
        ctl(a, "POST", "/_fake/tokens/revoke", json!({"token": token}))
            .await
            .json()["revoked"],
        true
    );
    assert_eq!(get(a, "/user", &token).await.status, 401);
    let c = ctl(a, "GET", "/_fake/counters", Value::Null).await.json();
    assert_eq!(c["endpoints"]["workflow_runs"]["charged"], 1);
    assert_eq!(ctl(a, "GET", "/_fake/nope", Value::Null).await.status, 404);
}

#[tokio::test]
async fn device_approval_through_the_control_api() {
    let gh = FakeGitHub::start(FakeConfig {
        device_interval: Duration::ZERO,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let a = gh.addr();
    gh.create_user("octo").unwrap();
    let body = format!("client_id={}", gh.client_id());
    let codes = raw(
        a,
        "POST",
        "/login/device/code",
        &[("Accept", "application/json")],
        body.as_bytes(),
    )
    .await
    .json();
    let user_code = codes["user_code"].as_str().unwrap();
    let r = ctl(
        a,
        "POST",
        "/_fake/device/approve",
        json!({"user_code": user_code, "login": "octo"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let poll = format!(
        "client_id={}&device_code={}&grant_type=urn:ietf:params:oauth:grant-type:device_code",
        gh.client_id(),
        codes["device_code"].as_str().unwrap()
    );
    let t = raw(
        a,
        "POST",
        "/login/oauth/access_token",
        &[("Accept", "application/json")],
        poll.as_bytes(),
    )
    .await
    .json();
    assert!(t["access_token"].as_str().unwrap().starts_with("ghu_"));
}

#[tokio::test]
async fn binary_seeds_the_demo_world_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-github"))
        .args(["--port", "0", "--seed-demo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut origin = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.split("REST base (github.com style):").nth(1) {
            origin = Some(rest.trim().to_string());
        }
        if line.contains("issue a token with") {
            break;
        }
    }
    let origin = origin.expect("the binary prints its REST base");
    let addr: std::net::SocketAddr = origin.trim_start_matches("http://").parse().unwrap();
    let tok = ctl(addr, "POST", "/_fake/tokens", json!({"login": "octo"}))
        .await
        .json();
    let token = tok["access_token"].as_str().unwrap();
    let inst = get(addr, "/user/installations", token).await.json();
    assert_eq!(inst["total_count"], 2);
    let runners = get(addr, "/orgs/acme/actions/runners", token).await;
    assert_eq!(runners.status, 200);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            assert!(s.success(), "exit status {s:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "fake-github did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
