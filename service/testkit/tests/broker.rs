//! The broker side of FAKE_PROTOCOL.md, with the test playing the listener over raw HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken expectations

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use common::{delete, eventually, get, post, world_with};
use rm_testkit::{Behaviour, FakeConfig, JobSpec, JobStatus};
use serde_json::{json, Value};

/// Short long-polls keep the tests quick. Sessions outlive any stall of a loaded machine, so a
/// slow step never drops one behind a test's back; only the timeout test shortens them.
fn fast() -> FakeConfig {
    FakeConfig {
        poll_hold: Duration::from_millis(200),
        session_timeout: Duration::from_secs(30),
        ..FakeConfig::default()
    }
}

/// Sessions that time out quickly, but not between two consecutive steps of a test.
fn short_sessions() -> FakeConfig {
    FakeConfig {
        session_timeout: Duration::from_secs(1),
        ..fast()
    }
}

struct Jit {
    runner_id: u64,
    secret: String,
    runner_file: Value,
}

/// A JSON document carried base64-encoded in a JSON string (how the JIT blob nests its files).
fn decode_json(encoded: &Value) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

async fn jit(addr: SocketAddr, token: &str, name: &str, labels: &[&str]) -> Jit {
    let r = post(
        addr,
        "/repos/octo/hello/actions/runners/generate-jitconfig",
        token,
        &json!({"name": name, "runner_group_id": 1, "labels": labels, "work_folder": "_work"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    let files = decode_json(&v["encoded_jit_config"]);
    let runner_file = decode_json(&files[".runner"]);
    let creds = decode_json(&files[".credentials"]);
    let rsa = decode_json(&files[".credentials_rsaparams"]);
    assert_eq!(rsa["exponent"], "AQAB");
    assert_eq!(creds["Scheme"], "OAuthAccessToken");
    let secret = creds["Data"]["token"].as_str().unwrap().to_string();
    assert_eq!(secret.len(), 40);
    Jit {
        runner_id: v["runner"]["id"].as_u64().unwrap(),
        secret,
        runner_file,
    }
}

async fn broker(
    addr: SocketAddr,
    method: &str,
    path: &str,
    secret: &str,
    body: Value,
) -> common::Raw {
    common::send_json(addr, method, path, Some(secret), &body).await
}

/// `POST /_broker/sessions` for the runner, as its listener would.
async fn open_session(addr: SocketAddr, j: &Jit) -> common::Raw {
    broker(
        addr,
        "POST",
        "/_broker/sessions",
        &j.secret,
        json!({"runner_id": j.runner_id}),
    )
    .await
}

/// A new session's id (the session must be granted).
async fn session_id(addr: SocketAddr, j: &Jit) -> String {
    let s = open_session(addr, j).await;
    assert_eq!(s.status, 200, "{}", s.text());
    s.json()["session_id"].as_str().unwrap().to_string()
}

/// One long-poll for a message on the session.
async fn next_message(addr: SocketAddr, j: &Jit, sid: &str) -> common::Raw {
    let path = format!("/_broker/sessions/{sid}/message");
    broker(addr, "GET", &path, &j.secret, Value::Null).await
}

/// `GET /repos/octo/hello/actions/{path}` as JSON: GitHub's view of runners, jobs and runs.
async fn repo_json(addr: SocketAddr, token: &str, path: &str) -> Value {
    let r = get(addr, &format!("/repos/octo/hello/actions/{path}"), token).await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

/// `DELETE` of the runner's registration through the REST API.
async fn delete_registration(addr: SocketAddr, token: &str, runner_id: u64) -> common::Raw {
    let path = format!("/repos/octo/hello/actions/runners/{runner_id}");
    delete(addr, &path, token).await
}

#[tokio::test]
async fn jit_blob_has_the_contract_shape() {
    let w = world_with(fast()).await;
    let j = jit(w.gh.addr(), &w.token, "shape", &["gpu"]).await;
    let f = &j.runner_file;
    let o = w.gh.origin();
    assert_eq!(f["AgentId"], j.runner_id);
    assert_eq!(f["AgentName"], "shape");
    assert_eq!(f["PoolId"], 1);
    assert_eq!(f["PoolName"], "Default");
    assert_eq!(f["ServerUrl"], format!("{o}/_broker/"));
    assert_eq!(f["ServerUrlV2"], format!("{o}/_broker/"));
    assert_eq!(f["GitHubUrl"], format!("{o}/octo/hello"));
    assert_eq!(f["WorkFolder"], "_work");
    assert_eq!(f["Ephemeral"], true);
    assert_eq!(f["UseV2Flow"], true);
}

#[tokio::test]
async fn one_job_lifecycle_through_the_broker() {
    let w = world_with(fast()).await;
    let addr = w.gh.addr();
    let j = jit(addr, &w.token, "r1", &["gpu"]).await;
    let charged_before = w.gh.counters().total.charged;

    // Bad secret, then a real session; the runner comes online; a second session conflicts.
    let bad = broker(
        addr,
        "POST",
        "/_broker/sessions",
        "nope",
        json!({"runner_id": j.runner_id}),
    )
    .await;
    assert_eq!(bad.status, 401);
    let s = broker(
        addr,
        "POST",
        "/_broker/sessions",
        &j.secret,
        json!({"runner_id": j.runner_id, "os": "Linux"}),
    )
    .await;
    assert_eq!(s.status, 200);
    let sid = s.json()["session_id"].as_str().unwrap().to_string();
    let again = open_session(addr, &j).await;
    assert_eq!(again.status, 409);
    assert_eq!(
        again.json()["message"],
        "A session for this runner already exists."
    );
    let rest = repo_json(addr, &w.token, &format!("runners/{}", j.runner_id)).await;
    assert_eq!(rest["status"], "online");
    assert_eq!(rest["os"], "Linux");

    // Nothing queued: the poll is held, then 204.
    let t = Instant::now();
    assert_eq!(next_message(addr, &j, &sid).await.status, 204);
    assert!(t.elapsed() >= Duration::from_millis(150));

    // A job the runner cannot take (label) and one it can.
    w.gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("other", &["self-hosted", "arm-only"])],
    )
    .unwrap();
    let run =
        w.gh.queue_run(
            "octo/hello",
            vec![JobSpec::new("build", &["SELF-HOSTED", "gpu"]).behaviour(Behaviour::Fail)],
        )
        .unwrap();
    let m = next_message(addr, &j, &sid).await;
    assert_eq!(m.status, 200);
    let job = m.json()["job"].clone();
    assert_eq!(job["name"], "build");
    assert_eq!(job["display_name"], "build");
    assert_eq!(job["behaviour"], "fail");
    assert_eq!(job["run_id"], run);
    let job_id = job["job_id"].as_u64().unwrap();

    // GitHub's view: job in progress on this runner, runner busy, run in progress; delete refused.
    let jv = repo_json(addr, &w.token, &format!("jobs/{job_id}")).await;
    assert_eq!(jv["status"], "in_progress");
    assert_eq!(jv["runner_id"], j.runner_id);
    assert_eq!(jv["runner_name"], "r1");
    assert_eq!(jv["runner_group_name"], "Default");
    let rv = repo_json(addr, &w.token, &format!("runs/{run}")).await;
    assert_eq!(rv["status"], "in_progress");
    let del = delete_registration(addr, &w.token, j.runner_id).await;
    assert_eq!(del.status, 422);
    assert!(w.gh.runners()[0].busy);

    // Complete: job done, registration gone, the listener's next poll hears so.
    let c = broker(
        addr,
        "POST",
        &format!("/_broker/jobs/{job_id}/complete"),
        &j.secret,
        json!({"result": "failed"}),
    )
    .await;
    assert_eq!(c.status, 200);
    let done = w.gh.job(job_id).unwrap();
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!(done.conclusion, Some(rm_testkit::Conclusion::Failure));
    assert!(w.gh.runners().is_empty());
    let gone = next_message(addr, &j, &sid).await;
    assert_eq!(gone.status, 404);
    assert_eq!(
        gone.json()["message"],
        "The runner no longer exists on the server"
    );
    let rv = repo_json(addr, &w.token, &format!("runs/{run}")).await;
    assert_eq!(rv["status"], "completed");
    assert_eq!(rv["conclusion"], "failure");

    // The broker is never charged.
    assert!(w.gh.counters().endpoint("broker").requests >= 6);
    assert_eq!(w.gh.counters().endpoint("broker").charged, 0);
    assert_eq!(w.gh.counters().total.charged, charged_before + 5); // the five REST calls above
}

#[tokio::test]
async fn silent_sessions_time_out_and_deleted_registrations_end_polls() {
    let w = world_with(short_sessions()).await;
    let addr = w.gh.addr();
    let j = jit(addr, &w.token, "quiet", &["x"]).await;
    let sid = session_id(addr, &j).await;
    assert_eq!(w.gh.runners()[0].status, "online");
    assert!(eventually(|| w.gh.runners()[0].status == "offline").await);
    // The dropped session answers 404 "Not Found" (not "runner gone"); a new session works.
    let lost = next_message(addr, &j, &sid).await;
    assert_eq!(lost.status, 404);
    assert_eq!(lost.json()["message"], "Not Found");
    assert_eq!(w.gh.runners()[0].status, "offline");
    assert_eq!(open_session(addr, &j).await.status, 200);
    assert_eq!(w.gh.runners()[0].status, "online");

    // Clean shutdown while idle.
    let j2 = jit(addr, &w.token, "clean", &["x"]).await;
    let sid = session_id(addr, &j2).await;
    assert_eq!(
        broker(
            addr,
            "DELETE",
            &format!("/_broker/sessions/{sid}"),
            &j2.secret,
            Value::Null
        )
        .await
        .status,
        204
    );
    assert!(w
        .gh
        .runners()
        .iter()
        .any(|r| r.name == "clean" && r.status == "offline"));

    // Registration deleted through REST while a listener waits: its poll and any new session
    // hear that the runner is gone.
    let j3 = jit(addr, &w.token, "doomed", &["x"]).await;
    let sid = session_id(addr, &j3).await;
    let del = delete_registration(addr, &w.token, j3.runner_id).await;
    assert_eq!(del.status, 204);
    let r = next_message(addr, &j3, &sid).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["message"],
        "The runner no longer exists on the server"
    );
    let s = open_session(addr, &j3).await;
    assert_eq!(s.status, 404);
    assert_eq!(
        s.json()["message"],
        "The runner no longer exists on the server"
    );
}

#[tokio::test]
async fn withdrawn_assignment_requeues_and_frees_the_runner() {
    let w = world_with(fast()).await;
    let addr = w.gh.addr();
    let j = jit(addr, &w.token, "w1", &["x"]).await;
    let sid = session_id(addr, &j).await;
    w.gh.queue_run("octo/hello", vec![JobSpec::new("b", &["x"])])
        .unwrap();
    let m = next_message(addr, &j, &sid).await;
    assert_eq!(m.status, 200, "{}", m.text());
    let job_id = m.json()["job"]["job_id"].as_u64().unwrap();
    w.gh.withdraw_assignment(job_id).unwrap();
    let job = w.gh.job(job_id).unwrap();
    assert_eq!(job.status, JobStatus::Queued);
    assert_eq!(job.runner_id, None);
    let r = &w.gh.runners()[0];
    assert!(!r.busy);
    assert_eq!(r.job_id, None);
    assert!(w.gh.withdraw_assignment(job_id).is_err());
    // Org-scoped runners take jobs of the org's repositories.
    let org = post(
        addr,
        "/orgs/acme/actions/runners/generate-jitconfig",
        &w.token,
        &json!({"name": "o1", "runner_group_id": 1, "labels": ["y"]}),
    )
    .await;
    assert_eq!(org.status, 201);
    assert!(w
        .gh
        .runners()
        .iter()
        .any(|r| r.scope == rm_testkit::RunnerScope::Org("acme".into())));
}
