//! `auth login` in a terminal against the fake GitHub's device flow; the credential reaches
//! the service. Denial is explained and has its own exit code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use rm_e2e::{fake_github, until, Daemon};
use rm_proto::AuthState;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Starts `auth login` with `flags`, returns the child and the user code it printed.
async fn start_login(
    d: &Daemon,
    gh: &rm_testkit::FakeGitHub,
    flags: &[&str],
) -> (
    tokio::process::Child,
    String,
    tokio::task::JoinHandle<Vec<String>>,
) {
    let mut child = d
        .cli()
        .args(["auth", "login"])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let code = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line.clone());
            if let Some((_, code)) = line.split_once("enter the code: ") {
                return code.trim().to_owned();
            }
        }
        panic!("auth login ended without printing a code: {seen:?}");
    })
    .await
    .expect("auth login printed a code within 10 s");
    assert!(
        seen.iter()
            .any(|l| l.contains(&format!("{}/login/device", gh.origin()))),
        "no verification URL in {seen:?}"
    );
    // Keep draining stdout so the child never blocks on a full pipe; hand back every line.
    let all = tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            seen.push(l);
        }
        seen
    });
    (child, code, all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_flow_login_hands_the_credential_to_the_service() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let before = d.run(&["auth", "status"]).await;
    assert_eq!(before.status.code(), Some(8), "{before:?}");
    assert!(String::from_utf8_lossy(&before.stderr).contains("runner-manager auth login"));

    // No `--web-base`/`--client-id`: the CLI signs in against the GitHub (and App) the
    // service uses, here the fake.
    let (child, code, printed) = start_login(&d, &gh, &[]).await;
    gh.approve_device(&code, "octo").unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("auth login finished within 20 s")
        .unwrap();
    assert!(out.status.success(), "{out:?}\n{}", d.log());
    // Only the three expected lines: the device code and the tokens are never printed.
    let printed = printed.await.unwrap();
    assert_eq!(printed.len(), 3, "{printed:?}");
    for (line, start) in printed.iter().zip([
        "To sign in, open ",
        "Waiting for approval",
        "signed in as octo:",
    ]) {
        assert!(line.starts_with(start), "unexpected line {line:?}");
        assert!(!line.contains("ghu_") && !line.contains("ghr_"), "{line}");
    }
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let client = d.client().await;
    until(Duration::from_secs(10), "the service signed in", || async {
        matches!(client.status().await.ok()?.auth, AuthState::SignedIn { .. }).then_some(())
    })
    .await;
    let shown = d.ok(&["auth", "status"]).await;
    assert!(shown.contains("signed in as octo"), "{shown}");
    let status: serde_json::Value =
        serde_json::from_str(&d.ok(&["status", "--json"]).await).unwrap();
    assert_eq!(status["auth"]["login"], "octo", "{status}");
    assert_eq!(status["github"]["web_base"], gh.origin(), "{status}");
    // The service learnt the login with one GET /user; every request GitHub saw (the CLI's
    // device flow and the service's calls) carried exactly one User-Agent, ours.
    let counters = gh.counters();
    assert!(counters.endpoint("user").requests >= 1, "{counters:?}");
    let ours = format!("runner-manager/{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        counters.user_agents.keys().collect::<Vec<_>>(),
        vec![&ours],
        "{counters:?}"
    );

    d.ok(&["auth", "logout"]).await;
    let after = d.run(&["auth", "status"]).await;
    assert_eq!(after.status.code(), Some(8), "{after:?}");
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_sign_in_is_explained_with_its_exit_code() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    // The flags still choose where to sign in.
    let origin = gh.origin();
    let client_id = gh.client_id();
    let flags = ["--web-base", &origin, "--client-id", &client_id];
    let (child, code, _printed) = start_login(&d, &gh, &flags).await;
    gh.deny_device(&code).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("auth login finished within 20 s")
        .unwrap();
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused"), "{err}");
    assert!(err.contains("runner-manager auth login"), "{err}");
    let status = d.client().await.status().await.unwrap();
    assert!(
        !matches!(status.auth, AuthState::SignedIn { .. }),
        "{status:?}"
    );
    d.stop().await.unwrap();
}
