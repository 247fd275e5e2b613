//! Every fault kind, matched by endpoint name or by route, over raw HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken expectations

mod common;

use std::time::{Duration, Instant};

use common::{get, raw, world};
use rm_testkit::{EndpointMatch, Fault, FaultRule};

const RUNNERS: &str = "/repos/octo/hello/actions/runners";

#[tokio::test]
async fn status_5xx_for_n_times_then_normal() {
    let w = world().await;
    let addr = w.gh.addr();
    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::name("repo_runners_list"),
        Fault::Status5xx {
            status: 502,
            rate: 1.0,
        },
        2,
    ));
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::name("user"),
        Fault::Status5xx {
            status: 500,
            rate: 0.0,
        },
    ));
    assert_eq!(get(addr, RUNNERS, &w.token).await.status, 502);
    let r = get(addr, RUNNERS, &w.token).await;
    assert_eq!(r.status, 502);
    assert!(r.json()["message"].is_string());
    assert_eq!(get(addr, RUNNERS, &w.token).await.status, 200);
    assert_eq!(get(addr, "/user", &w.token).await.status, 200); // rate 0.0 never fires
    let c = w.gh.counters().endpoint("repo_runners_list");
    assert_eq!((c.requests, c.errors, c.charged), (3, 2, 1));
}

#[tokio::test]
async fn latency_delays_and_route_patterns_match_both_prefixes() {
    let w = world().await;
    let addr = w.gh.addr();
    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::route("GET", "/repos/*/*/actions/runs"),
        Fault::Latency(Duration::from_millis(300)),
        2,
    ));
    let t = Instant::now();
    assert_eq!(
        get(addr, "/repos/octo/hello/actions/runs", &w.token)
            .await
            .status,
        200
    );
    assert!(t.elapsed() >= Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(
        get(addr, "/api/v3/repos/octo/hello/actions/runs", &w.token)
            .await
            .status,
        200
    );
    assert!(t.elapsed() >= Duration::from_millis(300));
    // Other paths are untouched: with the runs route held for a minute, /user still answers
    // (a generous bound, so a loaded machine cannot fail it).
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::route("GET", "/repos/*/*/actions/runs"),
        Fault::Latency(Duration::from_secs(60)),
    ));
    let user = tokio::time::timeout(Duration::from_secs(20), get(addr, "/user", &w.token)).await;
    assert_eq!(user.map(|r| r.status).ok(), Some(200));
}

#[tokio::test]
async fn unauthorized_and_rate_limited() {
    let w = world().await;
    let addr = w.gh.addr();
    w.gh.inject_fault(FaultRule::times(EndpointMatch::Any, Fault::Unauthorized, 1));
    let r = get(addr, "/user", &w.token).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body.len(), 95);

    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::name("user"),
        Fault::RateLimited {
            status: 429,
            retry_after: Some(7),
            secondary: true,
        },
        1,
    ));
    let r = get(addr, "/user", &w.token).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("secondary rate limit"));
    assert_ne!(r.header("x-ratelimit-remaining"), Some("0"));

    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::name("user"),
        Fault::RateLimited {
            status: 403,
            retry_after: None,
            secondary: false,
        },
        1,
    ));
    let r = get(addr, "/user", &w.token).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert!(r.header("retry-after").is_none());
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .starts_with("API rate limit exceeded for user ID"));
    assert_eq!(get(addr, "/user", &w.token).await.status, 200);
}

#[tokio::test]
async fn malformed_json_dropped_connection_and_stall() {
    let w = world().await;
    let addr = w.gh.addr();
    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::name("repo_runners_list"),
        Fault::MalformedJson,
        1,
    ));
    let r = get(addr, RUNNERS, &w.token).await;
    assert_eq!(r.status, 200);
    assert!(serde_json::from_slice::<serde_json::Value>(&r.body).is_err());

    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::name("repo_runners_list"),
        Fault::DropConnection,
        1,
    ));
    let r = get(addr, RUNNERS, &w.token).await;
    assert!(!r.complete, "the body must be cut off: {r:?}");

    w.gh.inject_fault(FaultRule::times(
        EndpointMatch::name("repo_runners_list"),
        Fault::Stall,
        1,
    ));
    let stalled =
        tokio::time::timeout(Duration::from_millis(300), get(addr, RUNNERS, &w.token)).await;
    assert!(stalled.is_err(), "a stalled request must not answer");
    assert_eq!(get(addr, RUNNERS, &w.token).await.status, 200);

    w.gh.clear_faults();
    w.gh.inject_fault(FaultRule::always(
        EndpointMatch::Any,
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
    ));
    assert_eq!(get(addr, "/user", &w.token).await.status, 503);
    w.gh.clear_faults();
    assert_eq!(get(addr, "/user", &w.token).await.status, 200);
}

#[tokio::test]
async fn faults_via_the_control_api() {
    let w = world().await;
    let addr = w.gh.addr();
    let rule = r#"{"endpoint":{"name":"access_token"},"fault":{"status5xx":{"status":503,"rate":1.0}},"times":1}"#;
    let r = raw(
        addr,
        "POST",
        "/_fake/faults",
        &[("Content-Type", "application/json")],
        rule.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = raw(
        addr,
        "POST",
        "/login/oauth/access_token",
        &[("Accept", "application/json")],
        b"",
    )
    .await;
    assert_eq!(r.status, 503);
    let rule = r#"{"endpoint":"any","fault":{"latency":50}}"#;
    assert_eq!(
        raw(addr, "POST", "/_fake/faults", &[], rule.as_bytes())
            .await
            .status,
        200
    );
    assert_eq!(
        raw(addr, "DELETE", "/_fake/faults", &[], b"").await.status,
        204
    );
    let c = raw(addr, "GET", "/_fake/counters", &[], b"").await.json();
    assert_eq!(c["endpoints"]["access_token"]["errors"], 1);
}

#[tokio::test]
async fn control_api_refuses_fault_rules_that_cannot_work() {
    let w = world().await;
    let addr = w.gh.addr();
    for (rule, hint) in [
        (
            r#"{"endpoint":"any","fault":{"status5xx":{"status":200,"rate":1.0}}}"#,
            "use 500, 502, 503 or 504",
        ),
        (
            r#"{"endpoint":"any","fault":{"status5xx":{"status":503,"rate":1.5}}}"#,
            "outside 0.0-1.0",
        ),
        (
            r#"{"endpoint":"any","fault":{"rate_limited":{"status":500,"retry_after":null,"secondary":false}}}"#,
            "neither 403 nor 429",
        ),
        (
            r#"{"endpoint":"any","fault":"unauthorized","times":0}"#,
            "times must be at least 1",
        ),
    ] {
        let r = raw(addr, "POST", "/_fake/faults", &[], rule.as_bytes()).await;
        assert_eq!(r.status, 400, "{rule}: {}", r.text());
        let error = r.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains(hint), "{rule}: {error}");
    }
    // Nothing was armed: the API answers normally.
    assert_eq!(get(addr, "/user", &w.token).await.status, 200);
}
