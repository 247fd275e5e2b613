//! OAuth device flow and refresh (GITHUB.md §1): octocrab's typed calls and every error raw.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken expectations

mod common;

use std::time::Duration;

use common::{raw, world, world_with};
use octocrab::auth::{Continue, TokenResponse};
use octocrab::secrecy::{ExposeSecret, SecretString};
use rm_testkit::FakeConfig;
use serde_json::Value;

fn oauth_crab(origin: &str) -> octocrab::Octocrab {
    octocrab::Octocrab::builder()
        .base_uri(origin)
        .unwrap()
        .add_header(http::header::ACCEPT, "application/json".to_string())
        .build()
        .unwrap()
}

/// POSTs form params to an OAuth endpoint asking for JSON.
async fn form(addr: std::net::SocketAddr, path: &str, body: &str) -> Value {
    let r = raw(
        addr,
        "POST",
        path,
        &[
            ("Accept", "application/json"),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        body.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

async fn new_code(addr: std::net::SocketAddr, client_id: &str) -> (String, String) {
    let v = form(
        addr,
        "/login/device/code",
        &format!("client_id={client_id}&scope="),
    )
    .await;
    (
        v["device_code"].as_str().unwrap().to_string(),
        v["user_code"].as_str().unwrap().to_string(),
    )
}

fn poll_body(client_id: &str, code: &str) -> String {
    format!("client_id={client_id}&device_code={code}&grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code")
}

#[tokio::test]
async fn octocrab_device_flow_to_a_working_token() {
    let w = world_with(FakeConfig {
        device_interval: Duration::ZERO,
        ..FakeConfig::default()
    })
    .await;
    let crab = oauth_crab(&w.gh.origin());
    let client_id = SecretString::from(w.gh.client_id());
    let codes = crab
        .authenticate_as_device(&client_id, ["repo"])
        .await
        .unwrap();
    assert_eq!(codes.device_code.len(), 40);
    assert_eq!(codes.user_code.len(), 9);
    assert_eq!(&codes.user_code[4..5], "-");
    assert_eq!(
        codes.verification_uri,
        format!("{}/login/device", w.gh.origin())
    );
    assert_eq!(codes.expires_in, 900);

    match codes.poll_once(&crab, &client_id).await.unwrap() {
        TokenResponse::Continue {
            error: Continue::AuthorizationPending,
        } => {}
        _ => panic!("expected authorization_pending"),
    }
    w.gh.approve_device(&codes.user_code, "octo").unwrap();
    let oauth = match codes.poll_once(&crab, &client_id).await.unwrap() {
        TokenResponse::Ok(o) => o,
        _ => panic!("expected a token"),
    };
    assert!(oauth.access_token.expose_secret().starts_with("ghu_"));
    assert!(oauth
        .refresh_token
        .as_ref()
        .unwrap()
        .expose_secret()
        .starts_with("ghr_"));
    assert_eq!(oauth.expires_in, Some(28_800));
    assert_eq!(oauth.token_type, "bearer");

    let api = common::octocrab(&w.gh.origin(), oauth.access_token.expose_secret());
    assert_eq!(api.current().user().await.unwrap().login, "octo");
}

#[tokio::test]
async fn device_flow_errors_are_http_200() {
    let w = world().await; // interval 5 s
    let addr = w.gh.addr();
    let cid = w.gh.client_id();
    let (code, user_code) = new_code(addr, &cid).await;

    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
    assert_eq!(v["error"], "authorization_pending");
    assert_eq!(
        v["error_description"],
        "The authorization request is still pending."
    );
    // Polling again at once: slow_down with interval + 5, and the new floor persists.
    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
    assert_eq!(v["error"], "slow_down");
    assert_eq!(v["interval"], 10);
    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
    assert_eq!(v["interval"], 15);

    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, "0000")).await;
    assert_eq!(v["error"], "incorrect_device_code");
    assert_eq!(
        v["error_description"],
        "The device_code provided is not valid."
    );
    let v = form(
        addr,
        "/login/oauth/access_token",
        &poll_body("wrong", &code),
    )
    .await;
    assert_eq!(v["error"], "incorrect_client_credentials");
    let v = form(
        addr,
        "/login/oauth/access_token",
        &format!("client_id={cid}&device_code={code}"),
    )
    .await;
    assert_eq!(v["error"], "unsupported_grant_type");

    // Cancel: dead thereafter.
    w.gh.deny_device(&user_code).unwrap();
    for _ in 0..2 {
        let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
        assert_eq!(v["error"], "access_denied");
    }
    assert!(w.gh.approve_device(&user_code, "octo").is_err());

    // Missing client_id on the code request: 404.
    let r = raw(
        addr,
        "POST",
        "/login/device/code",
        &[("Accept", "application/json")],
        b"",
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn a_disabled_device_flow_refuses_both_endpoints_and_codes_are_listed() {
    let w = world().await;
    let addr = w.gh.addr();
    let cid = w.gh.client_id();
    let (code, _) = new_code(addr, &cid).await;
    assert_eq!(w.gh.issued_device_codes(), vec![code.clone()]);

    w.gh.set_device_flow_enabled(false);
    let r = raw(
        addr,
        "POST",
        "/login/device/code",
        &[
            ("Accept", "application/json"),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        format!("client_id={cid}").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"], "device_flow_disabled");
    // A code issued before the switch is refused too (GitHub's errors here are HTTP 200).
    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
    assert_eq!(v["error"], "device_flow_disabled");
    // Refresh is not the device flow: it keeps working.
    let t = w.gh.issue_token("octo").unwrap();
    let refresh = t.refresh_token.unwrap();
    let v = form(
        addr,
        "/login/oauth/access_token",
        &format!("client_id={cid}&grant_type=refresh_token&refresh_token={refresh}"),
    )
    .await;
    assert!(v["access_token"].is_string(), "{v}");

    w.gh.set_device_flow_enabled(true);
    new_code(addr, &cid).await;
    assert_eq!(w.gh.issued_device_codes().len(), 2);
}

#[tokio::test]
async fn expiry_success_once_and_form_encoding() {
    let w = world_with(FakeConfig {
        device_interval: Duration::ZERO,
        device_expires_in: Duration::from_millis(300),
        ..FakeConfig::default()
    })
    .await;
    let addr = w.gh.addr();
    let cid = w.gh.client_id();
    let (code, _) = new_code(addr, &cid).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
    assert_eq!(v["error"], "expired_token");

    // The rest on a fake whose codes live the usual 15 minutes, so a slow machine between
    // creating, approving and polling a code cannot expire it.
    let w = world_with(FakeConfig {
        device_interval: Duration::ZERO,
        ..FakeConfig::default()
    })
    .await;
    let addr = w.gh.addr();
    let cid = w.gh.client_id();
    let (code, user_code) = new_code(addr, &cid).await;
    w.gh.approve_device(&user_code, "octo").unwrap();
    // Without Accept: json the answer is form-encoded.
    let r = raw(
        addr,
        "POST",
        "/login/oauth/access_token",
        &[],
        poll_body(&cid, &code).as_bytes(),
    )
    .await;
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/x-www-form-urlencoded"));
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&r.body).unwrap();
    assert!(pairs
        .iter()
        .any(|(k, v)| k == "access_token" && v.starts_with("ghu_")));
    assert!(pairs.iter().any(|(k, v)| k == "expires_in" && v == "28800"));
    // A second poll after success: incorrect_device_code.
    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
    assert_eq!(v["error"], "incorrect_device_code");
}

#[tokio::test]
async fn refresh_rotates_and_kills_the_old_pair() {
    let w = world().await;
    let addr = w.gh.addr();
    let cid = w.gh.client_id();
    let t = w.gh.issue_token("octo").unwrap();
    let refresh = t.refresh_token.clone().unwrap();
    let body = format!("client_id={cid}&grant_type=refresh_token&refresh_token={refresh}");
    let v = form(addr, "/login/oauth/access_token", &body).await;
    let new_access = v["access_token"].as_str().unwrap().to_string();
    assert!(new_access.starts_with("ghu_"));
    assert!(v["refresh_token"].as_str().unwrap().starts_with("ghr_"));
    assert_eq!(v["refresh_token_expires_in"], 15_811_200);
    // The old refresh token is spent; the old access token is dead.
    let v = form(addr, "/login/oauth/access_token", &body).await;
    assert_eq!(v["error"], "bad_refresh_token");
    assert_eq!(
        v["error_description"],
        "The refresh token passed is incorrect or expired."
    );
    assert_eq!(
        common::get(addr, "/user", &t.access_token).await.status,
        401
    );
    assert_eq!(common::get(addr, "/user", &new_access).await.status, 200);
    // JSON bodies work too.
    let r = raw(
        addr,
        "POST",
        "/login/oauth/access_token",
        &[
            ("Accept", "application/json"),
            ("Content-Type", "application/json"),
        ],
        format!(
            r#"{{"client_id":"{cid}","grant_type":"refresh_token","refresh_token":"ghr_nope"}}"#
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.json()["error"], "bad_refresh_token");
}

#[tokio::test]
async fn expired_access_token_gets_bad_credentials() {
    let w = world().await;
    // Long enough for the first request even on a loaded machine; the sleep below outlasts it.
    w.gh.set_token_lifetimes(Duration::from_secs(1), Duration::from_secs(60));
    let t = w.gh.issue_token("octo").unwrap();
    assert_eq!(
        common::get(w.gh.addr(), "/user", &t.access_token)
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = common::get(w.gh.addr(), "/user", &t.access_token).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["message"], "Bad credentials");
}

#[tokio::test]
async fn browser_page_approves_a_code() {
    let w = world_with(FakeConfig {
        device_interval: Duration::ZERO,
        ..FakeConfig::default()
    })
    .await;
    let addr = w.gh.addr();
    let cid = w.gh.client_id();
    let page = raw(addr, "GET", "/login/device", &[], b"").await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<form"));
    let (code, user_code) = new_code(addr, &cid).await;
    let body = format!("user_code={user_code}&login=octo&action=approve");
    let r = raw(
        addr,
        "POST",
        "/login/device",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = form(addr, "/login/oauth/access_token", &poll_body(&cid, &code)).await;
    assert!(v["access_token"].as_str().unwrap().starts_with("ghu_"));
}

#[tokio::test]
async fn absurd_lifetimes_mean_never_expiring_not_a_panic() {
    let w = world().await;
    w.gh.set_token_lifetimes(Duration::MAX, Duration::from_secs(u64::MAX / 4));
    let t = w.gh.issue_token("octo").unwrap();
    assert!(t.expires_at > chrono::Utc::now() + chrono::Duration::days(365 * 1000));
    assert_eq!(
        common::get(w.gh.addr(), "/user", &t.access_token)
            .await
            .status,
        200
    );
    // The refresh grant answers with huge but well-formed lifetimes.
    let cid = w.gh.client_id();
    let refresh = t.refresh_token.clone().unwrap();
    let body = format!("client_id={cid}&grant_type=refresh_token&refresh_token={refresh}");
    let v = form(w.gh.addr(), "/login/oauth/access_token", &body).await;
    assert!(v["expires_in"].as_i64().unwrap() > 365 * 86_400, "{v}");
}
