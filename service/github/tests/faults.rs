//! Injected faults: 5xx, stalls, malformed answers, rate limits.

mod common;

use common::*;
use rm_github::{Backoff, GitHubError};
use rm_testkit::{EndpointMatch, Fault, FaultRule};
use std::time::{Duration, Instant};

fn runners() -> EndpointMatch {
    EndpointMatch::name("repo_runners_list")
}

#[tokio::test]
async fn a_5xx_closes_the_outage_gate_until_its_next_try() {
    let w = world().await;
    let t = target("alice/app");
    // Long enough to look at the closed gate on a slow machine, short enough for a test.
    let mut c = config(&w.fake);
    c.backoff = Backoff {
        base: Duration::from_secs(2),
        cap: Duration::from_secs(4),
    };
    let (client, _) = client_with(c, Some(credential(&w.token)));
    let w = World { client, ..w };
    w.fake.inject_fault(FaultRule::times(
        runners(),
        Fault::Status5xx {
            status: 502,
            rate: 1.0,
        },
        1,
    ));
    w.fake.reset_counters();
    let e = w.client.list_runners(&t, None).await.unwrap_err();
    assert!(
        matches!(
            e,
            GitHubError::Transient {
                status: Some(502),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.is_retryable());
    let c = w.fake.counters().endpoint("repo_runners_list");
    assert_eq!(
        (c.requests, c.errors),
        (1, 1),
        "not retried below the caller"
    );
    let b = w.client.budget();
    let e = b
        .endpoints
        .iter()
        .find(|e| e.endpoint == "runners.list")
        .unwrap();
    assert_eq!((e.counts.errors, e.counts.charged), (1, 0));

    // Until the next try, nothing goes out, for any endpoint: the caller learns when to
    // come back.
    let health = w.client.health();
    assert_eq!(health.state, rm_github::HealthState::Unreachable);
    assert_eq!(health.consecutive_failures, 1);
    let next_try = health.next_try.unwrap();
    let before = w.fake.counters().total.requests;
    match w.client.installations().await {
        Err(GitHubError::Unreachable {
            next_try: n,
            failures: 1,
            ..
        }) => assert_eq!(n, next_try),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.fake.counters().total.requests, before, "failed fast");
    // At the next try an ordinary (charged) request is still held back: the probe is the
    // free question, and it opens the gate for everyone.
    let wait = (next_try - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait).await;
    let before = w.fake.counters().total.requests;
    assert!(matches!(
        w.client.list_runners(&t, None).await,
        Err(GitHubError::Unreachable { .. })
    ));
    assert_eq!(w.fake.counters().total.requests, before, "not the probe");
    assert_eq!(w.client.probe_outage().await, Some(true));
    assert_eq!(w.fake.counters().endpoint("rate_limit").charged, 0);
    w.client.list_runners(&t, None).await.unwrap();
    assert_eq!(w.client.health(), rm_github::Health::ok());
    w.client.installations().await.unwrap();
}

#[tokio::test]
async fn a_stalled_server_is_a_transient_timeout() {
    let w = world().await;
    let mut c = config(&w.fake);
    c.request_timeout = Duration::from_millis(300);
    let (client, _) = client_with(c, Some(credential(&w.token)));
    w.fake
        .inject_fault(FaultRule::times(runners(), Fault::Stall, 1));
    let started = Instant::now();
    let e = client
        .list_runners(&target("alice/app"), None)
        .await
        .unwrap_err();
    // Our 300 ms deadline fired, not the fake's hour-long stall (the bound is
    // generous so a loaded machine cannot fail it).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(e, GitHubError::Transient { .. }), "{e:?}");
    assert!(e.to_string().contains("no answer within"), "{e}");
    // The server is fine again: the probe after the gate's next try opens it.
    after_next_try(&client).await;
    assert_eq!(client.probe_outage().await, Some(true));
    client
        .list_runners(&target("alice/app"), None)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_dropped_connection_is_transient() {
    let w = world().await;
    let c = config(&w.fake);
    let (client, _) = client_with(c, Some(credential(&w.token)));
    w.fake
        .inject_fault(FaultRule::times(runners(), Fault::DropConnection, 1));
    let e = client
        .list_runners(&target("alice/app"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, GitHubError::Transient { .. }), "{e:?}");
}

#[tokio::test]
async fn malformed_json_is_transient_and_not_cached() {
    let w = world().await;
    let t = target("alice/app");
    w.fake
        .inject_fault(FaultRule::times(runners(), Fault::MalformedJson, 1));
    let e = w.client.list_runners(&t, None).await.unwrap_err();
    assert!(matches!(e, GitHubError::Transient { .. }), "{e:?}");
    assert!(e.to_string().contains("malformed"), "{e}");
    // A garbled 200 is an answer: it does not close the outage gate.
    assert_eq!(w.client.health(), rm_github::Health::ok());
    assert!(w.client.list_runners(&t, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn retry_after_is_honoured_and_the_gate_fails_fast() {
    let w = world().await;
    let t = target("alice/app");
    w.fake.inject_fault(FaultRule::times(
        runners(),
        Fault::RateLimited {
            status: 429,
            retry_after: Some(1),
            secondary: true,
        },
        1,
    ));
    w.fake.reset_counters();
    let before = chrono::Utc::now();
    let e = w.client.list_runners(&t, None).await.unwrap_err();
    let GitHubError::RateLimited { until, .. } = e else {
        panic!("{e:?}")
    };
    assert!(
        until >= before + chrono::Duration::milliseconds(900)
            && until <= before + chrono::Duration::seconds(10),
        "retry-after 1 s must be honoured (not the 60 s default): {until} vs {before}"
    );
    assert_eq!(
        w.fake.counters().total.requests,
        1,
        "not retried by octocrab or us"
    );
    // While the gate is closed, nothing goes out.
    assert!(matches!(
        w.client.installations().await,
        Err(GitHubError::RateLimited { .. })
    ));
    assert_eq!(w.fake.counters().total.requests, 1);
    // After retry-after, requests flow again.
    let wait = GitHubError::RateLimited {
        until,
        secondary: true,
    }
    .wait()
    .unwrap();
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
    w.client.list_runners(&t, None).await.unwrap();
}

#[tokio::test]
async fn secondary_limit_without_retry_after_waits_a_minute() {
    let w = world().await;
    w.fake.inject_fault(FaultRule::times(
        runners(),
        Fault::RateLimited {
            status: 403,
            retry_after: None,
            secondary: true,
        },
        1,
    ));
    let e = w
        .client
        .list_runners(&target("alice/app"), None)
        .await
        .unwrap_err();
    let GitHubError::RateLimited { until, secondary } = e else {
        panic!("{e:?}")
    };
    assert!(secondary);
    assert!(until - chrono::Utc::now() >= chrono::Duration::seconds(58));
}

#[tokio::test]
async fn primary_limit_waits_for_reset() {
    let w = world().await;
    w.fake.set_remaining(0);
    let e = w.client.list_runners(&target("alice/app"), None).await;
    // GETs of unchanged resources may still pass; a fresh GET is refused.
    let e = match e {
        Err(e) => e,
        Ok(_) => w.client.installations().await.unwrap_err(),
    };
    let GitHubError::RateLimited { until, secondary } = e else {
        panic!("{e:?}")
    };
    assert!(!secondary);
    let rate = w.client.budget().rate.unwrap();
    assert_eq!(rate.remaining, 0);
    assert!(rate.reset > chrono::Utc::now());
    assert_eq!(
        until.timestamp(),
        rate.reset.timestamp(),
        "waits for x-ratelimit-reset"
    );
}
