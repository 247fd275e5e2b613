//! Authorisation by the peer's OS identity: a client run as another user (uid 65534 through
//! `setpriv`) is refused unless the policy names it.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// tests may panic on broken fixtures
// They run the server on real Unix sockets; the named pipe's rules are unit-tested in src/.
#![cfg(unix)]

mod support;

use rm_proto::server::AccessPolicy;
use rm_proto::*;
use std::path::Path;
use std::process::Command;
use support::*;

const NOBODY: u32 = 65534;

/// Runs `proto-probe` as uid/gid 65534; `None` (with the reason printed) when this test process
/// cannot switch users.
fn probe_as_nobody(socket: &Path, method: &str, path: &str) -> Option<(u16, String)> {
    if current_uid() != 0 {
        println!(
            "skipped: switching to uid {NOBODY} needs root (running as {})",
            current_uid()
        );
        return None;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        println!("skipped: setpriv is not installed");
        return None;
    }
    let output = Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            env!("CARGO_BIN_EXE_proto-probe"),
        ])
        .arg(socket)
        .args([method, path])
        .output()
        .expect("setpriv runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "probe failed: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (status, body) = stdout.split_once('\n').expect("status line");
    Some((
        status.trim().parse().expect("numeric status"),
        body.trim().to_owned(),
    ))
}

/// [`probe_as_nobody`] off the async runtime (the server under test runs on it).
async fn probe(socket: &Path, method: &'static str, path: &'static str) -> Option<(u16, String)> {
    let socket = socket.to_path_buf();
    tokio::task::spawn_blocking(move || probe_as_nobody(&socket, method, path))
        .await
        .unwrap()
}

fn error_code(body: &str) -> ErrorCode {
    serde_json::from_str::<ErrorBody>(body)
        .unwrap_or_else(|e| panic!("{e}: {body}"))
        .code
}

#[tokio::test]
async fn another_user_is_refused_everything_but_the_version() {
    let server = start(AccessPolicy::root_only()).await;
    let Some((status, body)) = probe(&server.socket, "GET", "/v1/status").await else {
        return;
    };
    assert_eq!(status, 403, "{body}");
    assert_eq!(error_code(&body), ErrorCode::UnauthorizedPeer);
    assert!(body.contains("uid 65534"), "{body}");
    assert!(body.contains("operators"), "{body}");

    let (status, body) = probe(&server.socket, "POST", "/v1/pause").await.unwrap();
    assert_eq!(
        (status, error_code(&body)),
        (403, ErrorCode::UnauthorizedPeer)
    );

    let (status, body) = probe(&server.socket, "GET", "/v1/version").await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        server.recorder.calls().is_empty(),
        "{:?}",
        server.recorder.calls()
    );
}

#[tokio::test]
async fn an_operator_uid_may_change_things() {
    let server = start(AccessPolicy::root_only().with_operator(NOBODY)).await;
    let Some((status, body)) = probe(&server.socket, "POST", "/v1/pause").await else {
        return;
    };
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        server.recorder.calls(),
        [Call {
            endpoint: "pause",
            uid: NOBODY
        }]
    );
}

#[tokio::test]
async fn read_only_access_for_everyone_opens_reads_but_not_changes() {
    let server = start(AccessPolicy::root_only().with_read_only_for_all(true)).await;
    let Some((status, body)) = probe(&server.socket, "GET", "/v1/status").await else {
        return;
    };
    assert_eq!(status, 200, "{body}");
    let (status, body) = probe(&server.socket, "POST", "/v1/resume").await.unwrap();
    assert_eq!(
        (status, error_code(&body)),
        (403, ErrorCode::UnauthorizedPeer)
    );
    assert_eq!(
        server.recorder.calls(),
        [Call {
            endpoint: "status",
            uid: NOBODY
        }]
    );
}

/// Runs without root: this process's own uid, not an operator, is refused through the client.
#[tokio::test]
async fn a_non_operator_user_gets_permission_denied_from_the_client() {
    let me = current_uid();
    if me == 0 {
        println!("skipped: root is always an operator; the setpriv tests cover refusal");
        return;
    }
    let server = start(AccessPolicy::root_only()).await;
    let client = Client::connect(&server.socket).await.unwrap();
    let err = client.status().await.unwrap_err();
    assert!(
        matches!(&err, ClientError::PermissionDenied { message, .. } if message.contains(&format!("uid {me}"))),
        "{err:?}"
    );
    assert!(server.recorder.calls().is_empty());
}

#[tokio::test]
async fn root_is_always_allowed() {
    if current_uid() != 0 {
        println!("skipped: needs root");
        return;
    }
    let server = start(AccessPolicy::root_only()).await;
    let client = Client::connect(&server.socket).await.unwrap();
    assert!(client.pause().await.unwrap().paused);
    assert_eq!(
        server.recorder.calls(),
        [Call {
            endpoint: "pause",
            uid: 0
        }]
    );
}
