//! Bad input reaching the tray: garbage and unknown kinds in the watch stream, and a user the
//! service refuses. The app stays up and says what is wrong.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::tray::{session_or_skip, SessionOptions};
use rm_e2e::{fake_github, is_root, Daemon};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

fn status(paused: bool) -> serde_json::Value {
    let v = json!({
        "host": {"id": "h", "label": "box", "os": "linux", "arch": "x64", "capacity": 2,
                 "routing_label": "rm-box-linux-x64"},
        "paused": paused,
        "auth": {"state": "signed_in", "login": "octo", "expires_at": null},
        "targets": [], "runners": [], "last_github_contact": null, "budget": null,
        "recent_failures": []
    });
    // The shape the real service sends (checked against the wire types).
    serde_json::from_value::<rm_proto::Status>(v.clone()).expect("a valid status");
    v
}

/// A stand-in for the service that speaks the local API but sends a watch stream with
/// garbage in it, or (`version`) announces other API versions. A mock on purpose: the real
/// service cannot be made to send garbage or to speak another API.
async fn serve_garbage(listener: UnixListener) {
    serve(
        listener,
        json!({"api": 1, "service_version": "0.0.0-fake", "min_client_api": 1}),
    )
    .await
}

async fn serve(listener: UnixListener, version: serde_json::Value) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let version = version.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&head);
            let headers = "HTTP/1.1 200 OK\r\nx-runner-manager-api: 1\r\n\
                           x-runner-manager-version: 0.0.0-fake\r\ncontent-type: application/json\r\n";
            if text.starts_with("GET /v1/version ") {
                let body = version.to_string();
                let reply = format!(
                    "{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            } else if text.starts_with("GET /v1/watch ") {
                let mut out = format!("{headers}connection: close\r\n\r\n");
                out += &format!("{}\n", json!({"type": "snapshot", "status": status(false)}));
                out += "this is not json {{{\n";
                out += &format!(
                    "{}\n",
                    json!({"type": "event", "event": {"kind": "moon_landing", "at": 1}})
                );
                out += &format!("{}\n", json!({"type": "heartbeat", "n": 1}));
                out += "{\"type\": \"changed\", \"status\": 42}\n";
                out += &format!("{}\n", json!({"type": "changed", "status": status(true)}));
                let _ = conn.write_all(out.as_bytes()).await;
                // Keep the stream open, as the service does.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_unknown_kinds_in_the_stream_are_skipped_and_the_tray_goes_on() {
    let Some(mut s) = session_or_skip(
        "garbage_and_unknown_kinds_in_the_stream_are_skipped_and_the_tray_goes_on",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let socket = s.home.path().join("fake-service.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    tokio::spawn(serve_garbage(listener));
    let log = s.home.path().join("tray.log");
    let mut tray = s
        .tray(None, &["--socket", &socket.display().to_string()], &log)
        .spawn()
        .unwrap();
    // The change after the garbage arrived: the stream went on past it.
    s.until_menu("the change after the garbage", |m| {
        m.header() == "Paused · 0 targets"
    })
    .await;
    assert!(tray.try_wait().unwrap().is_none(), "the tray runs on");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("skipped an unreadable watch line").count(),
        2,
        "the garbage line and the malformed change are named: {text}"
    );
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_the_service_refuses_is_told_not_allowed_and_how_to_get_access() {
    if !is_root() {
        eprintln!("SKIPPED: running the tray as another user needs root (setpriv)");
        return;
    }
    let Some(mut s) = session_or_skip(
        "a_user_the_service_refuses_is_told_not_allowed_and_how_to_get_access",
        SessionOptions {
            as_nobody: true,
            ..SessionOptions::default()
        },
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let log = s.home.path().join("tray.log");
    let socket = d.socket.display().to_string();
    let mut tray = s.tray(None, &["--socket", &socket], &log).spawn().unwrap();
    let m = s
        .until_menu("not allowed", |m| m.header() == "Not allowed")
        .await;
    assert!(m.labels()[1].contains("--operator"), "{}", m.render());
    assert_ne!(s.item().await.unwrap()["IconName"], serde_json::Value::Null);
    assert!(tray.try_wait().unwrap().is_none(), "the tray runs on");
    d.stop().await.unwrap();
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_speaking_another_api_says_which_side_to_update() {
    let Some(mut s) = session_or_skip(
        "a_service_speaking_another_api_says_which_side_to_update",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    // A newer service that no longer serves this tray's API.
    let socket = s.home.path().join("newer-service.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    tokio::spawn(serve(
        listener,
        json!({"api": 3, "service_version": "9.0.0", "min_client_api": 2}),
    ));
    let log = s.home.path().join("tray.log");
    let mut tray = s
        .tray(None, &["--socket", &socket.display().to_string()], &log)
        .spawn()
        .unwrap();
    let m = s
        .until_menu("update needed", |m| m.header() == "Update needed")
        .await;
    assert!(
        m.labels()[1].contains("Update the runner-manager tray"),
        "{}",
        m.render()
    );
    assert!(tray.try_wait().unwrap().is_none(), "the tray runs on");
    s.quit().await;
}
