//! Installations, repositories, access checks, runners and package metadata
//! against the fake GitHub over loopback HTTP.

mod common;

use common::*;
use rm_github::{ClientConfig, Endpoints, ExposeSecret, GitHubError, Gone, JitRequest};
use std::time::Duration;

fn jit(name: &str) -> JitRequest {
    JitRequest {
        name: name.into(),
        runner_group_id: 1,
        labels: vec!["rm-home-linux-x64".into()],
        work_folder: Some("_work".into()),
    }
}

#[tokio::test]
async fn installations_and_repositories_with_admin_flags() {
    let w = world().await;
    let installs = w.client.installations().await.unwrap();
    let logins: Vec<_> = installs.iter().map(|i| i.account.login.as_str()).collect();
    assert!(
        logins.contains(&"alice") && logins.contains(&"team"),
        "{logins:?}"
    );
    let alice = installs
        .iter()
        .find(|i| i.account.login == "alice")
        .unwrap();
    let repos = w.client.installation_repositories(alice.id).await.unwrap();
    let app = repos.iter().find(|r| r.full_name == "alice/app").unwrap();
    assert!(app.is_admin());
    let team = installs.iter().find(|i| i.account.login == "team").unwrap();
    let shared = w.client.installation_repositories(team.id).await.unwrap();
    assert!(!shared
        .iter()
        .find(|r| r.full_name == "team/shared")
        .unwrap()
        .is_admin());
    assert!(matches!(
        w.client.installation_repositories(999_999).await,
        Err(GitHubError::NotFound { .. })
    ));
}

#[tokio::test]
async fn access_check_explains_what_to_fix() {
    let w = world().await;
    w.fake.create_user("carol").unwrap();
    w.fake.create_repo("carol/x").unwrap();
    w.fake.add_collaborator("carol/x", "alice", true).unwrap();
    w.client.check_access(&target("alice/app")).await.unwrap();

    let e = w
        .client
        .check_access(&target("team/shared"))
        .await
        .unwrap_err();
    assert!(matches!(e, GitHubError::NotAdmin { .. }), "{e:?}");
    assert!(e.to_string().contains("team/shared") && e.to_string().contains("admin"));

    let e = w.client.check_access(&target("carol/x")).await.unwrap_err();
    assert!(matches!(e, GitHubError::NotInstalled { .. }), "{e:?}");
    assert!(e.to_string().contains("install"), "{e}");

    let e = w
        .client
        .check_access(&target("alice/missing"))
        .await
        .unwrap_err();
    assert!(matches!(e, GitHubError::NotFound { .. }), "{e:?}");
}

#[tokio::test]
async fn organization_repositories_are_listed_and_cached() {
    let w = world().await;
    w.fake.create_org("acme").unwrap();
    w.fake.add_org_member("acme", "alice", true).unwrap();
    for r in ["acme/a", "acme/b", "acme/c"] {
        w.fake.create_repo(r).unwrap();
    }
    w.fake
        .create_installation(
            "acme",
            rm_testkit::InstallationRepos::Selected(vec!["acme/a".into(), "acme/c".into()]),
        )
        .unwrap();
    let access = w.client.check_access(&target("acme")).await.unwrap();
    assert_eq!(access.repositories, 2);
    w.fake.reset_counters();
    let repos = w.client.organization_repositories("acme").await.unwrap();
    let mut names: Vec<_> = repos.iter().map(|r| r.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(w.fake.counters().total.requests, 0, "served from the cache");
    let e = w.client.check_access(&target("nowhere")).await.unwrap_err();
    assert!(matches!(e, GitHubError::NotInstalled { .. }));
}

#[tokio::test]
async fn jit_list_get_delete_for_a_repository() {
    let w = world().await;
    let t = target("alice/app");
    let cfg = w
        .client
        .generate_jit_config(&t, &jit("rm-attempt-1"))
        .await
        .unwrap();
    assert_eq!(cfg.runner.name, "rm-attempt-1");
    assert!(!cfg.encoded_jit_config.expose_secret().is_empty());
    assert!(!format!("{cfg:?}").contains(cfg.encoded_jit_config.expose_secret()));

    let e = w
        .client
        .generate_jit_config(&t, &jit("rm-attempt-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, GitHubError::Conflict { .. }),
        "duplicate name: {e:?}"
    );

    let all = w.client.list_runners(&t, None).await.unwrap();
    assert_eq!(all.len(), 1);
    let named = w
        .client
        .list_runners(&t, Some("rm-attempt-1"))
        .await
        .unwrap();
    assert_eq!(named[0].id, cfg.runner.id);
    assert!(w
        .client
        .list_runners(&t, Some("nope"))
        .await
        .unwrap()
        .is_empty());

    let got = w
        .client
        .get_runner(&t, cfg.runner.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.name, "rm-attempt-1");
    assert!(!got.is_online());
    assert!(w.client.get_runner(&t, 424_242).await.unwrap().is_none());

    assert_eq!(
        w.client.delete_runner(&t, cfg.runner.id).await.unwrap(),
        Gone::Deleted
    );
    assert_eq!(
        w.client.delete_runner(&t, cfg.runner.id).await.unwrap(),
        Gone::AlreadyGone
    );
    assert!(w.fake.runners().is_empty());
}

#[tokio::test]
async fn runner_endpoint_errors_are_typed() {
    let w = world().await;
    // Not an admin of team/shared → 403 from GitHub.
    let e = w
        .client
        .generate_jit_config(&target("team/shared"), &jit("x"))
        .await
        .unwrap_err();
    assert!(matches!(e, GitHubError::Forbidden { .. }), "{e:?}");
    // Unknown repository → 404.
    let e = w
        .client
        .list_runners(&target("alice/nope"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, GitHubError::NotFound { .. }), "{e:?}");
    // No labels → 422 validation.
    let mut bad = jit("y");
    bad.labels.clear();
    let e = w
        .client
        .generate_jit_config(&target("alice/app"), &bad)
        .await
        .unwrap_err();
    assert!(
        matches!(e, GitHubError::Invalid { status: 422, .. }),
        "{e:?}"
    );
}

#[tokio::test]
async fn organization_runners() {
    let w = world().await;
    w.fake.create_org("acme").unwrap();
    w.fake.add_org_member("acme", "alice", true).unwrap();
    w.fake
        .create_installation("acme", rm_testkit::InstallationRepos::All)
        .unwrap();
    let t = target("acme");
    let cfg = w
        .client
        .generate_jit_config(&t, &jit("rm-org-1"))
        .await
        .unwrap();
    assert_eq!(w.client.list_runners(&t, None).await.unwrap().len(), 1);
    assert_eq!(
        w.client.delete_runner(&t, cfg.runner.id).await.unwrap(),
        Gone::Deleted
    );
}

#[tokio::test]
async fn runner_listing_follows_every_page() {
    let w = world().await;
    let t = target("alice/app");
    for i in 0..250 {
        w.client
            .generate_jit_config(&t, &jit(&format!("rm-{i:03}")))
            .await
            .unwrap();
    }
    w.fake.reset_counters();
    let runners = w.client.list_runners(&t, None).await.unwrap();
    assert_eq!(runners.len(), 250);
    let mut ids: Vec<_> = runners.iter().map(|r| r.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 250, "no page read twice");
    assert_eq!(
        w.fake.counters().endpoint("repo_runners_list").requests,
        3,
        "100 per page"
    );
}

#[tokio::test]
async fn runner_package_for_this_host() {
    let w = world().await;
    let sha = "ab".repeat(32);
    w.fake
        .set_runner_package(&rm_testkit::package::RunnerPackage {
            path: std::env::temp_dir().join("not-read.tar.gz"),
            filename: "actions-runner-linux-x64-2.336.0.tar.gz".into(),
            sha256: sha.clone(),
            version: "2.336.0".into(),
            os: "linux".into(),
            arch: "x64".into(),
            size: 0,
        });
    let p = w
        .client
        .runner_package_for(&target("alice/app"), "linux", "x64")
        .await
        .unwrap();
    assert_eq!(p.filename, "actions-runner-linux-x64-2.336.0.tar.gz");
    assert_eq!(p.sha256, sha);
    assert!(p
        .url
        .ends_with("/_downloads/actions-runner-linux-x64-2.336.0.tar.gz"));
    let e = w
        .client
        .runner_package_for(&target("alice/app"), "win", "arm64")
        .await
        .unwrap_err();
    assert!(matches!(e, GitHubError::NotFound { .. }));
}

#[tokio::test]
async fn enterprise_style_api_base_works() {
    let w = world().await;
    let mut c = config(&w.fake);
    c.endpoints = Endpoints::custom(&w.fake.origin(), &w.fake.api_v3()).unwrap();
    let (client, _) = client_with(c, Some(credential(&w.token)));
    let runners = client
        .list_runners(&target("alice/app"), None)
        .await
        .unwrap();
    assert!(runners.is_empty());
    assert!(w.fake.counters().endpoint("repo_runners_list").requests >= 1);
}

/// A loopback server for one request: reads its head, answers `status_and_headers`
/// (through the blank line; `content-length` and `connection: close` are added)
/// with JSON `body`, and hands back the request text. Returns its origin.
#[allow(clippy::unwrap_used)] // a broken fixture should fail the test loudly
async fn one_request_server(
    status_and_headers: String,
    body: &'static str,
) -> (String, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let answer = format!(
            "{status_and_headers}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(answer.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&buf).to_string()
    });
    (origin, server)
}

/// Reads one raw request off a socket and answers `[]`, to see the headers sent.
#[tokio::test]
async fn requests_carry_githubs_headers() {
    let (origin, server) = one_request_server("HTTP/1.1 200 OK\r\n".into(), "[]").await;
    let mut c = ClientConfig::new(Endpoints::custom(&origin, &origin).unwrap());
    c.request_timeout = Duration::from_secs(5);
    let (client, _) = client_with(
        c,
        Some(rm_github::Credential::non_expiring(
            "ghu_headercheck".into(),
        )),
    );
    let _ = client
        .runner_package_for(&target("alice/app"), "linux", "x64")
        .await;
    let raw = server.await.unwrap().to_ascii_lowercase();
    assert!(
        raw.starts_with("get /repos/alice/app/actions/runners/downloads "),
        "{raw}"
    );
    assert!(
        raw.contains("accept: application/vnd.github+json\r\n"),
        "{raw}"
    );
    assert!(
        raw.contains("x-github-api-version: 2022-11-28\r\n"),
        "{raw}"
    );
    let ua = format!(
        "user-agent: runner-manager/{}\r\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(raw.contains(&ua), "{raw}");
    // Exactly one User-Agent, ours (octocrab's default stack would append
    // `user-agent: octocrab`).
    let uas: Vec<&str> = raw
        .lines()
        .filter(|l| l.starts_with("user-agent:"))
        .collect();
    assert_eq!(uas, vec![ua.trim_end()], "{raw}");
    assert!(
        raw.contains("authorization: bearer ghu_headercheck\r\n"),
        "{raw}"
    );
}

#[tokio::test]
async fn a_busy_runner_cannot_be_deleted_and_a_finished_one_is_gone() {
    let w = world_with(rm_testkit::FakeConfig {
        poll_hold: Duration::from_millis(200),
        ..rm_testkit::FakeConfig::default()
    })
    .await;
    let t = target("alice/app");
    w.fake
        .queue_run(
            "alice/app",
            vec![rm_testkit::JobSpec::new("build", &["rm-home-linux-x64"])],
        )
        .unwrap();
    let cfg = w
        .client
        .generate_jit_config(&t, &jit("rm-busy-1"))
        .await
        .unwrap();
    let (runner, job_id) = FakeRunner::take_job(&w.fake.origin(), &cfg.encoded_jit_config).await;

    let seen = w
        .client
        .get_runner(&t, cfg.runner.id)
        .await
        .unwrap()
        .unwrap();
    assert!(seen.busy && seen.is_online());
    let e = w.client.delete_runner(&t, cfg.runner.id).await.unwrap_err();
    assert!(
        matches!(e, GitHubError::StillRunningJob { runner_id } if runner_id == cfg.runner.id),
        "{e:?}"
    );
    assert!(
        w.client.demand(&t).await.unwrap().jobs.is_empty(),
        "the job is in progress"
    );

    runner.complete(job_id).await;
    // GitHub removes a JIT registration after its job.
    assert!(w
        .client
        .get_runner(&t, cfg.runner.id)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        w.client.delete_runner(&t, cfg.runner.id).await.unwrap(),
        Gone::AlreadyGone
    );
}

/// A `next` link to another origin is not followed: the credential goes with
/// every page request, so it must never leave the configured API base.
#[tokio::test]
async fn next_page_links_outside_the_api_base_are_not_followed() {
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let foreign = format!(
        "http://{}/user/installations?page=2",
        elsewhere.local_addr().unwrap()
    );
    let (origin, server) = one_request_server(
        format!("HTTP/1.1 200 OK\r\nlink: <{foreign}>; rel=\"next\"\r\n"),
        r#"{"total_count":2,"installations":[{"id":1,"account":{"login":"alice","id":1,"type":"User"}}]}"#,
    )
    .await;
    let mut c = ClientConfig::new(Endpoints::custom(&origin, &origin).unwrap());
    c.request_timeout = Duration::from_secs(5);
    let (client, _) = client_with(
        c,
        Some(rm_github::Credential::non_expiring(
            "ghu_staysathome".into(),
        )),
    );
    let err = client.installations().await.unwrap_err();
    server.await.unwrap();
    assert!(
        matches!(err, GitHubError::Transient { .. })
            && err.to_string().contains("leaves the API base"),
        "{err}"
    );
    // Had the client followed the link, its connection would be queued by now.
    let knocked = tokio::time::timeout(Duration::from_millis(100), elsewhere.accept()).await;
    assert!(
        knocked.is_err(),
        "the client connected to the foreign origin"
    );
}

#[tokio::test]
async fn the_rate_limit_probe_is_free_and_tells_a_dead_credential() {
    let w = world().await;
    w.fake.reset_counters();
    let rate = w.client.rate_limit().await.unwrap().expect("rate headers");
    assert!(rate.limit > 0 && rate.remaining <= rate.limit, "{rate:?}");
    // Neither GitHub nor our own meter charges it.
    let c = w.fake.counters().endpoint("rate_limit");
    assert_eq!((c.requests, c.charged), (1, 0));
    assert_eq!(w.client.budget().totals.charged, 0);
    assert_eq!(w.client.budget().totals.free, 1);

    assert!(w.fake.revoke_token(&w.token.access_token));
    let e = w.client.rate_limit().await.unwrap_err();
    assert!(e.needs_sign_in(), "{e:?}");
}
