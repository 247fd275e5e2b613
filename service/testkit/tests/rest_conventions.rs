//! §0/§5 conventions over raw HTTP: auth errors, headers, ETag/304, rate limits, pagination,
//! GHES prefix, validation errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken expectations

mod common;

use common::{delete, get, get_with, post, raw, world};
use rm_testkit::JobSpec;
use serde_json::json;

#[tokio::test]
async fn auth_user_agent_version_and_trailing_slash() {
    let w = world().await;
    let addr = w.gh.addr();
    assert!(w.gh.revoke_token(&w.token));
    let r = get(addr, "/user", &w.token).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.text(),
        r#"{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}"#
    );
    assert_eq!(r.body.len(), 95);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );

    let r = raw(addr, "GET", "/user", &[("User-Agent", "x")], b"").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["message"], "Requires authentication");

    let t = w.gh.issue_token("octo").unwrap().access_token;
    let auth = format!("token {t}");
    let r = raw(addr, "GET", "/user", &[("Authorization", &auth)], b"").await;
    assert_eq!(r.status, 403);
    assert!(r.json()["message"].as_str().unwrap().contains("User-Agent"));

    // An unknown API version is refused; both published ones are served (and echoed).
    for (version, status) in [
        ("2020-01-01", 400),
        ("2022-11-28", 200),
        ("2026-03-10", 200),
    ] {
        let r = raw(
            addr,
            "GET",
            "/user",
            &[
                ("Authorization", &auth),
                ("User-Agent", "x"),
                ("X-GitHub-Api-Version", version),
            ],
            b"",
        )
        .await;
        assert_eq!(r.status, status, "version {version}");
        if status == 200 {
            assert_eq!(r.header("x-github-api-version-selected"), Some(version));
        }
    }

    assert_eq!(get(addr, "/user/", &t).await.status, 404);
    assert_eq!(
        get(addr, "/repos/octo/hello/actions/runners/", &t)
            .await
            .status,
        404
    );
    assert_eq!(get(addr, "/nope", &t).await.status, 404);
}

#[tokio::test]
async fn every_answer_carries_github_headers() {
    let w = world().await;
    let r = get(w.gh.addr(), "/repos/octo/hello/actions/runners", &w.token).await;
    assert_eq!(r.status, 200);
    for h in [
        "x-github-request-id",
        "x-github-media-type",
        "x-github-api-version-selected",
        "etag",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-used",
        "x-ratelimit-reset",
        "x-ratelimit-resource",
    ] {
        assert!(r.header(h).is_some(), "missing {h}");
    }
    assert_eq!(r.header("x-ratelimit-limit"), Some("5000"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("4999"));
    assert_eq!(r.header("x-ratelimit-used"), Some("1"));
    assert_eq!(r.header("x-ratelimit-resource"), Some("core"));
    assert_eq!(
        r.header("x-github-media-type"),
        Some("github.v3; format=json")
    );
    let reset: i64 = r.header("x-ratelimit-reset").unwrap().parse().unwrap();
    assert!(reset > chrono::Utc::now().timestamp());
    assert!(r.header("etag").unwrap().starts_with("W/\""));
    assert_eq!(
        r.header("x-accepted-github-permissions"),
        Some("administration=read")
    );
}

#[tokio::test]
async fn conditional_requests_are_304_and_free() {
    let w = world().await;
    let addr = w.gh.addr();
    let path = "/repos/octo/hello/actions/runs?status=queued";
    let first = get(addr, path, &w.token).await;
    let etag = first.header("etag").unwrap().to_string();
    let token = w.token.clone();
    let cond = |etag: String| {
        let token = token.clone();
        async move { get_with(addr, path, &token, &[("If-None-Match", &etag)]).await }
    };
    let r = cond(etag.clone()).await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert!(r.header("content-type").is_none());
    assert!(r.header("link").is_none());
    assert!(r.header("content-length").is_none_or(|v| v == "0"));
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(
        r.header("x-ratelimit-remaining"),
        first.header("x-ratelimit-remaining")
    );
    let c = w.gh.counters().endpoint("workflow_runs");
    assert_eq!((c.requests, c.charged, c.not_modified), (2, 1, 1));

    // Another user's ETag differs (the token is part of it).
    w.gh.create_user("bob").unwrap();
    w.gh.add_collaborator("octo/hello", "bob", false).unwrap();
    let bob = w.gh.issue_token("bob").unwrap().access_token;
    assert_ne!(
        get(addr, path, &bob).await.header("etag"),
        Some(etag.as_str())
    );

    // A change makes the old ETag stale: 200 and charged.
    w.gh.queue_run("octo/hello", vec![JobSpec::new("build", &["self-hosted"])])
        .unwrap();
    let r = cond(etag).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["total_count"], 1);
    assert_eq!(w.gh.counters().endpoint("workflow_runs").charged, 3); // octo twice, bob once
}

#[tokio::test]
async fn primary_rate_limit_exhaustion() {
    let w = world().await;
    let addr = w.gh.addr();
    w.gh.set_remaining(1);
    let r = get(addr, "/user", &w.token).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let user_etag = r.header("etag").unwrap().to_string();
    let r = get(addr, "/user", &w.token).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let uid = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        uid.starts_with("API rate limit exceeded for user ID "),
        "{uid}"
    );
    assert_eq!(r.json()["status"], "403");
    // A conditional request with a matching ETag is refused too (the limit comes first).
    let r = get_with(addr, "/user", &w.token, &[("If-None-Match", &user_etag)]).await;
    assert_eq!(r.status, 403);
    // Mutations are refused before they happen.
    let r = post(
        addr,
        "/repos/octo/hello/actions/runners/generate-jitconfig",
        &w.token,
        &json!({"name": "r", "runner_group_id": 1, "labels": ["x"]}),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(w.gh.runners().is_empty());
    // GET /rate_limit still answers and is free.
    let r = get(addr, "/rate_limit", &w.token).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["resources"]["core"]["remaining"], 0);
    assert_eq!(w.gh.counters().endpoint("rate_limit").charged, 0);
    // Limits are per user.
    w.gh.create_user("bob").unwrap();
    w.gh.set_rate_limit(10);
    let bob = w.gh.issue_token("bob").unwrap().access_token;
    let r = get(addr, "/user", &bob).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit"), Some("10"));
}

fn links(link: &str) -> Vec<(String, String)> {
    link.split(", ")
        .map(|p| {
            let (url, rel) = p.split_once("; ").unwrap();
            (
                rel.trim_start_matches("rel=\"")
                    .trim_end_matches('"')
                    .to_string(),
                url.trim_matches(['<', '>']).to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn pagination_links_are_absolute_and_correct() {
    let w = world().await;
    let addr = w.gh.addr();
    for i in 0..5 {
        w.gh.queue_run(
            "octo/hello",
            vec![JobSpec::new(&format!("j{i}"), &["self-hosted"])],
        )
        .unwrap();
    }
    let o = w.gh.origin();
    let r = get(addr, "/repos/octo/hello/actions/runs?per_page=2", &w.token).await;
    assert_eq!(r.json()["total_count"], 5);
    assert_eq!(r.json()["workflow_runs"].as_array().unwrap().len(), 2);
    let l = links(r.header("link").unwrap());
    assert_eq!(
        l,
        vec![
            (
                "next".into(),
                format!("{o}/repos/octo/hello/actions/runs?per_page=2&page=2")
            ),
            (
                "last".into(),
                format!("{o}/repos/octo/hello/actions/runs?per_page=2&page=3")
            ),
        ]
    );
    let r = get(
        addr,
        "/api/v3/repos/octo/hello/actions/runs?per_page=2&page=2",
        &w.token,
    )
    .await;
    let l = links(r.header("link").unwrap());
    let rels: Vec<&str> = l.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(rels, ["next", "last", "prev", "first"]);
    assert_eq!(
        l[2].1,
        format!("{o}/api/v3/repos/octo/hello/actions/runs?per_page=2&page=1")
    );
    let r = get(
        addr,
        "/repos/octo/hello/actions/runs?per_page=2&page=3",
        &w.token,
    )
    .await;
    assert_eq!(r.json()["workflow_runs"].as_array().unwrap().len(), 1);
    let rels: Vec<String> = links(r.header("link").unwrap())
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(rels, ["prev", "first"]);
    // Default 30, max 100, single page: no link header.
    let r = get(
        addr,
        "/repos/octo/hello/actions/runs?per_page=500",
        &w.token,
    )
    .await;
    assert_eq!(r.json()["workflow_runs"].as_array().unwrap().len(), 5);
    assert!(r.header("link").is_none());
    // Newest run first.
    let ids: Vec<u64> = r.json()["workflow_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_u64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|p| p[0] > p[1]));
}

#[tokio::test]
async fn jitconfig_validation_and_access() {
    let w = world().await;
    let addr = w.gh.addr();
    let path = "/repos/octo/hello/actions/runners/generate-jitconfig";
    let r = post(addr, path, &w.token, &json!({"name": "a", "labels": ["x"]})).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Invalid input: object is missing required key: runner_group_id"
    );
    let r = post(
        addr,
        path,
        &w.token,
        &json!({"name": "a", "runner_group_id": 1, "labels": []}),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["errors"][0]["field"], "labels");
    let many: Vec<String> = (0..101).map(|i| format!("l{i}")).collect();
    let r = post(
        addr,
        path,
        &w.token,
        &json!({"name": "a", "runner_group_id": 1, "labels": many}),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        post(
            addr,
            path,
            &w.token,
            &json!({"name": "a", "runner_group_id": 2, "labels": ["x"]})
        )
        .await
        .status,
        403
    );
    assert_eq!(
        post(
            addr,
            path,
            &w.token,
            &json!({"name": "a", "runner_group_id": 7, "labels": ["x"]})
        )
        .await
        .status,
        404
    );
    let bad = raw(
        addr,
        "POST",
        path,
        &[
            ("Authorization", &format!("Bearer {}", w.token)),
            ("User-Agent", "t"),
        ],
        b"{nope",
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["message"], "Problems parsing JSON");
    // Unknown repo, uninstalled repo, and a non-admin: 404, 404, 403.
    let body = json!({"name": "a", "runner_group_id": 1, "labels": ["x"]});
    assert_eq!(
        post(
            addr,
            "/repos/octo/nope/actions/runners/generate-jitconfig",
            &w.token,
            &body
        )
        .await
        .status,
        404
    );
    w.gh.create_org("other").unwrap();
    w.gh.create_repo("other/x").unwrap();
    w.gh.add_org_member("other", "octo", true).unwrap();
    assert_eq!(
        post(
            addr,
            "/repos/other/x/actions/runners/generate-jitconfig",
            &w.token,
            &body
        )
        .await
        .status,
        404
    );
    w.gh.create_user("bob").unwrap();
    w.gh.add_collaborator("octo/hello", "bob", false).unwrap();
    let bob = w.gh.issue_token("bob").unwrap().access_token;
    let r = post(addr, path, &bob, &body).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "Resource not accessible by integration"
    );
    // bob still reads runs (Actions read) and sees admin=false on the installation's repo list.
    assert_eq!(
        get(addr, "/repos/octo/hello/actions/runs", &bob)
            .await
            .status,
        200
    );
    let created = post(addr, path, &w.token, &body).await;
    assert_eq!(created.status, 201);
    assert_eq!(created.json()["runner"]["status"], "offline");
    let dup = post(addr, path, &w.token, &body).await;
    assert_eq!(dup.status, 409);
    // Runner ids are small (octocrab's Job.runner_id is u32).
    assert!(created.json()["runner"]["id"].as_u64().unwrap() < u64::from(u32::MAX));
    assert_eq!(
        get(addr, "/repos/octo/hello/actions/runners/999", &w.token)
            .await
            .status,
        404
    );
    let del = delete(addr, "/repos/octo/hello/actions/runners/999", &w.token).await;
    assert_eq!(del.status, 404);
}

#[tokio::test]
async fn jobs_filter_and_unresolvable_labels() {
    let w = world().await;
    let addr = w.gh.addr();
    let run =
        w.gh.queue_run(
            "octo/hello",
            vec![JobSpec::unresolvable("matrix", "${{ matrix.os }}")],
        )
        .unwrap();
    let r = get(
        addr,
        &format!("/repos/octo/hello/actions/runs/{run}/jobs?filter=all"),
        &w.token,
    )
    .await;
    assert_eq!(r.json()["jobs"][0]["labels"][0], "${{ matrix.os }}");
    assert_eq!(
        r.json()["jobs"][0]["started_at"],
        r.json()["jobs"][0]["created_at"]
    );
    let r = get(
        addr,
        &format!("/repos/octo/hello/actions/runs/{run}/jobs?filter=bogus"),
        &w.token,
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        get(addr, "/repos/octo/hello/actions/runs/1/jobs", &w.token)
            .await
            .status,
        404
    );
    // The status filter also matches conclusions.
    let job = w.gh.jobs()[0].id;
    w.gh.finish_job(job, rm_testkit::Conclusion::Success)
        .unwrap();
    for (status, runs) in [
        ("success", 1),
        ("completed", 1),
        ("failure", 0),
        ("queued", 0),
    ] {
        let path = format!("/repos/octo/hello/actions/runs?status={status}");
        let r = get(addr, &path, &w.token).await;
        assert_eq!(r.json()["total_count"], runs, "status={status}");
    }
    let r = get(addr, "/user/installations/999999/repositories", &w.token).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn requests_are_also_counted_per_token() {
    let w = world().await;
    let addr = w.gh.addr();
    // A second token of the same user: one rate limit, two clients told apart.
    let other = w.gh.issue_token("octo").unwrap().access_token;
    for _ in 0..2 {
        assert_eq!(get(addr, "/user", &w.token).await.status, 200);
    }
    assert_eq!(
        get(addr, "/repos/octo/hello/actions/runs", &other)
            .await
            .status,
        200
    );
    // A faulty answer counts under its token too; one without a token under none.
    w.gh.inject_fault(rm_testkit::FaultRule::times(
        rm_testkit::EndpointMatch::name("user"),
        rm_testkit::Fault::Status5xx {
            status: 502,
            rate: 1.0,
        },
        1,
    ));
    assert_eq!(get(addr, "/user", &other).await.status, 502);
    let r = raw(addr, "GET", "/user", &[("User-Agent", "x")], b"").await;
    assert_eq!(r.status, 401);

    let by = w.gh.requests_by_token();
    assert_eq!(by.len(), 2, "{by:?}");
    let mine = &by[&w.token];
    assert_eq!(mine.endpoint("user").requests, 2);
    assert_eq!(mine.endpoint("user").charged, 2);
    assert_eq!(mine.total.requests, 2);
    let theirs = &by[&other];
    assert_eq!(theirs.endpoint("workflow_runs").charged, 1);
    assert_eq!(theirs.endpoint("user").requests, 1);
    assert_eq!(theirs.endpoint("user").errors, 1);
    assert_eq!(theirs.total.requests, 2);
    // The totals still count every request, with or without a token.
    assert_eq!(w.gh.counters().endpoint("user").requests, 4);

    w.gh.reset_counters();
    assert!(w.gh.requests_by_token().is_empty());
}
