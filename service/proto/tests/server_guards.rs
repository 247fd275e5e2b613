//! Requests the server refuses before the handler runs: nothing is called, nothing changes.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// tests may panic on broken fixtures
// They run the server on real Unix sockets; the named pipe's rules are unit-tested in src/.
#![cfg(unix)]

mod support;

use rm_proto::server::AccessPolicy;
use rm_proto::*;
use support::*;

async fn operator_server() -> TestServer {
    start(AccessPolicy::root_only().with_operator(current_uid())).await
}

fn post(path: &str, body: &[u8]) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}",
        body.len()
    )
}

#[tokio::test]
async fn browser_requests_with_origin_or_referer_are_refused() {
    let server = operator_server().await;
    for header in [
        "Origin: http://evil.example",
        "Referer: http://evil.example/page",
        "origin: null",
    ] {
        let answer = raw(
            &server.socket,
            &format!("POST /v1/pause HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n{header}"),
            b"",
        )
        .await;
        assert_eq!(answer.status, 403, "{header}");
        let error = answer.error();
        assert_eq!(error.code, ErrorCode::ForbiddenOrigin);
        assert!(error.message.contains("CLI or tray"), "{}", error.message);
    }
    let answer = raw(
        &server.socket,
        "GET /v1/status HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example",
        b"",
    )
    .await;
    assert_eq!(answer.error().code, ErrorCode::ForbiddenOrigin);
    assert!(server.recorder.calls().is_empty());
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_413_declared_or_chunked() {
    let server = operator_server().await;
    let big = format!(
        r#"{{"target":"octo/app","labels":["{}"]}}"#,
        "x".repeat(100 * 1024)
    );
    let answer = raw(
        &server.socket,
        &post("/v1/targets", big.as_bytes()),
        big.as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.error().code, ErrorCode::PayloadTooLarge);

    // Without Content-Length the limit still holds while reading.
    let mut chunked = Vec::new();
    for piece in big.as_bytes().chunks(8 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let answer = raw(
        &server.socket,
        "POST /v1/targets HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked",
        &chunked,
    )
    .await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.error().code, ErrorCode::PayloadTooLarge);
    assert!(server.recorder.calls().is_empty());
}

#[tokio::test]
async fn malformed_json_and_unknown_fields_are_400_with_the_position() {
    let server = operator_server().await;
    let cases: [(&str, &[u8], &str); 6] = [
        ("/v1/targets", br#"{"target": "octo/app""#, "line 1 column"),
        (
            "/v1/targets",
            br#"{"target":"octo/app","max_capacty":2}"#,
            "max_capacty",
        ),
        (
            "/v1/targets",
            br#"{"target":"octo/app","max_capacity":-1}"#,
            "line 1 column",
        ),
        ("/v1/pause", br#"{"now":true}"#, "now"),
        ("/v1/sign-in", br#"{"restrat":true}"#, "restrat"),
        ("/v1/resume", b"not json", "line 1 column"),
    ];
    for (path, body, expected) in cases {
        let answer = raw(&server.socket, &post(path, body), body).await;
        assert_eq!(
            answer.status,
            400,
            "{path} {}",
            String::from_utf8_lossy(body)
        );
        let error = answer.error();
        assert_eq!(error.code, ErrorCode::BadRequest);
        assert!(error.message.contains(expected), "{}", error.message);
    }
    let patch = br#"{"revision":7,"max_capacity":2,"monitor_only":true}"#;
    let answer = raw(
        &server.socket,
        &format!(
            "PATCH /v1/targets/repo/octo/app HTTP/1.1\r\nHost: x\r\nContent-Length: {}",
            patch.len()
        ),
        patch,
    )
    .await;
    assert_eq!(answer.status, 400);
    assert!(answer.error().message.contains("monitor_only"));
    assert!(server.recorder.calls().is_empty());
}

#[tokio::test]
async fn a_malformed_credential_body_never_echoes_the_token() {
    let server = operator_server().await;
    // A token where a number belongs: serde's own message would quote it.
    let body = br#"{"access_token":"ghu_a","expires_at":"ghu_leaky_token_value","refresh_token":"r","refresh_expires_at":1}"#;
    let answer = raw(&server.socket, &post("/v1/credential", body), body).await;
    assert_eq!(answer.status, 400);
    assert!(
        !answer.body.contains("ghu_leaky_token_value"),
        "{}",
        answer.body
    );
    assert!(answer.error().message.contains("line 1 column"));
    assert!(server.recorder.calls().is_empty());
}

#[tokio::test]
async fn unknown_paths_wrong_methods_and_bad_targets_are_refused() {
    let server = operator_server().await;
    let cases = [
        ("GET /v1/nothing-here", 404, ErrorCode::NotFound),
        ("GET /", 404, ErrorCode::NotFound),
        ("GET /v2/status", 400, ErrorCode::UnsupportedVersion),
        ("DELETE /v1/status", 405, ErrorCode::MethodNotAllowed),
        ("GET /v1/pause", 405, ErrorCode::MethodNotAllowed),
        (
            "POST /v1/targets/org/acme",
            405,
            ErrorCode::MethodNotAllowed,
        ),
        (
            "DELETE /v1/targets/repo/only-owner",
            400,
            ErrorCode::BadRequest,
        ),
        (
            "DELETE /v1/targets/repo/octo%2Fapp",
            400,
            ErrorCode::BadRequest,
        ),
        ("DELETE /v1/targets/team/x", 400, ErrorCode::BadRequest),
    ];
    for (line, status, code) in cases {
        let answer = raw(
            &server.socket,
            &format!("{line} HTTP/1.1\r\nHost: x\r\nContent-Length: 0"),
            b"",
        )
        .await;
        assert_eq!(
            (answer.status, answer.error().code),
            (status, code),
            "{line}"
        );
        assert!(!answer.error().message.is_empty());
    }
    assert!(server.recorder.calls().is_empty());
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_at_once() {
    let limits = rm_proto::server::ServerLimits {
        max_connections: 1,
        ..Default::default()
    };
    let server = start_with(
        Recorder::new(),
        AccessPolicy::root_only().with_operator(current_uid()),
        limits,
    )
    .await;
    // The first connection stays open: a watch.
    let mut first = tokio::net::UnixStream::connect(&server.socket)
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    first
        .write_all(b"GET /v1/watch HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    first.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    let mut second = tokio::net::UnixStream::connect(&server.socket)
        .await
        .unwrap();
    let _ = second
        .write_all(b"GET /v1/version HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        second.read_to_end(&mut answer),
    )
    .await
    .expect("closed within 5 s");
    assert!(read.is_err() || answer.is_empty(), "{answer:?}");

    // Once the watch goes away, its slot is free again.
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if Client::connect(&server.socket).await.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never freed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
