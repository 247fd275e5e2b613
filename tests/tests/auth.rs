//! `auth login` in a terminal: the service runs the device flow against the fake GitHub; the
//! CLI shows the code, follows the service's session and says who signed in. Denial is
//! explained and has its own exit code; Ctrl-C cancels the session; flags that contradict the
//! service's GitHub are refused naming its config.json; another local user sees no sign-in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use rm_e2e::{bin, fake_github, is_root, until, Daemon};
use rm_proto::{AuthState, SignInState};
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
    let device_codes = gh.issued_device_codes();
    assert_eq!(device_codes.len(), 1, "one flow, run by the service");
    for (line, start) in printed.iter().zip([
        "To sign in, open ",
        "Waiting for approval",
        "Signed in as octo:",
    ]) {
        assert!(line.starts_with(start), "unexpected line {line:?}");
        assert!(!line.contains("ghu_") && !line.contains("ghr_"), "{line}");
        assert!(!line.contains(&device_codes[0]), "{line}");
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
    // The service learnt the login with GET /user; every request GitHub saw (all of them the
    // service's: the CLI talks only to the service) carried exactly one User-Agent, ours.
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
    // Flags naming the service's own GitHub and App are accepted.
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
    assert!(err.contains("cancelled in the browser"), "{err}");
    assert!(err.contains("runner-manager auth login"), "{err}");
    let client = d.client().await;
    let status = client.status().await.unwrap();
    assert!(
        !matches!(status.auth, AuthState::SignedIn { .. }),
        "{status:?}"
    );
    assert_eq!(
        client.sign_in_status().await.unwrap().state,
        SignInState::Denied
    );
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_services_sign_in() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let (child, code, _printed) = start_login(&d, &gh, &[]).await;
    let client = d.client().await;
    let waiting = client.sign_in_status().await.unwrap();
    assert_eq!(
        (waiting.user_code.as_str(), waiting.state),
        (code.as_str(), SignInState::Waiting)
    );
    let pid = child.id().expect("auth login runs");
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("auth login ended within 20 s of Ctrl-C")
        .unwrap();
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cancelled"), "{err}");
    let ended = client.sign_in_status().await.unwrap();
    assert_eq!(
        (ended.id, ended.state),
        (waiting.id, SignInState::Cancelled)
    );
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_naming_another_github_is_refused_and_starts_nothing() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    for flags in [
        &["--web-base", "https://github.com"][..],
        &["--client-id", "Iv1.someotherapp"][..],
    ] {
        let out = d.run(&[&["auth", "login"][..], flags].concat()).await;
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let config = d.data_dir.join("config.json");
        assert!(err.contains(&config.display().to_string()), "{err}");
        assert!(err.contains("restart the service"), "{err}");
    }
    assert!(gh.issued_device_codes().is_empty(), "no flow was started");
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_user_can_neither_start_nor_see_nor_cancel_a_sign_in() {
    if !is_root() {
        eprintln!("skipped: running a client as another uid needs root (setpriv)");
        return;
    }
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let client = d.client().await;
    let waiting = client
        .start_sign_in(&rm_proto::SignInStart::default())
        .await
        .unwrap();
    // A raw request per route as uid 65534: each is refused before the handler, and the
    // answer carries no user code the other user could enter first.
    for (method, body) in [("GET", None), ("POST", Some("{}")), ("DELETE", None)] {
        let mut probe = tokio::process::Command::new("setpriv");
        probe
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin("proto-probe"))
            .arg(&d.socket)
            .args([method, "/v1/sign-in"]);
        if let Some(b) = body {
            probe.arg(b);
        }
        let out = probe.output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().next(), Some("403"), "{method}: {out:?}");
        assert!(!text.contains(&waiting.user_code), "{method}: {text}");
    }
    let still = client.sign_in_status().await.unwrap();
    assert_eq!((still.id, still.state), (waiting.id, SignInState::Waiting));
    assert_eq!(gh.issued_device_codes().len(), 1);
    d.stop().await.unwrap();
}

/// The doctor's GitHub credential line as `status --json` shows it: (state, checked_at).
async fn credential_check(d: &Daemon) -> Option<(String, i64)> {
    let s: serde_json::Value =
        serde_json::from_slice(&d.run(&["status", "--json"]).await.stdout).ok()?;
    let c = s["host_checks"]
        .as_array()?
        .iter()
        .find(|c| c["id"] == "github_credential")?
        .clone();
    Some((c["state"].as_str()?.to_owned(), c["checked_at"].as_i64()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_never_shows_the_verdict_on_an_earlier_credential() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.ok(&["repo", "add", "octo/hello"]).await;
    // The doctor at start found no credential, and says when it looked.
    let (_, first_at) = until(Duration::from_secs(20), "the first verdict", || async {
        credential_check(&d)
            .await
            .filter(|(state, _)| state == "fail")
    })
    .await;
    assert!(d.ok(&["status"]).await.contains("no GitHub credential"));

    // Right after sign-in (no waiting): the new credential's verdict, taken after it came.
    d.sign_in(&gh, "octo").await;
    let (state, at) = credential_check(&d).await.expect("the credential check");
    assert_eq!(state, "pass");
    assert!(at >= first_at, "{at} < {first_at}");
    let text = d.ok(&["status"]).await;
    assert!(!text.contains("no GitHub credential"), "{text}");

    // And after sign-out, at once again.
    d.ok(&["auth", "logout"]).await;
    let (state, _) = credential_check(&d).await.expect("the credential check");
    assert_eq!(state, "fail");
    d.stop().await.unwrap();
}
