//! The watch stream: snapshot first, then messages in order; slow readers are cut off without
//! holding up anyone else.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// tests may panic on broken fixtures
// They run the server on real Unix sockets; the named pipe's rules are unit-tested in src/.
#![cfg(unix)]

mod support;

use rm_proto::server::{AccessPolicy, ServerLimits};
use rm_proto::*;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn failure_event(n: u32, padding: usize) -> WatchMessage {
    WatchMessage::Event {
        event: Event::RunnerFailed {
            failure: Failure {
                at: UnixMillis(i64::from(n)),
                target: "octo/app".into(),
                attempt_id: Some(format!("attempt-{n}")),
                reason: FailureReason::ProcessExitedUnexpectedly,
                detail: None,
                fix: "x".repeat(padding),
            },
        },
    }
}

async fn next(stream: &mut WatchStream) -> WatchMessage {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("a watch message within 5 s")
        .expect("the stream is open")
        .expect("a valid message")
}

#[tokio::test]
async fn a_watch_starts_with_a_snapshot_then_delivers_messages_in_order() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect(&server.socket).await.unwrap();
    let mut stream = client.watch().await.unwrap();
    match next(&mut stream).await {
        WatchMessage::Snapshot { status } => assert_eq!(*status, sample_status()),
        other => panic!("expected the snapshot first, got {other:?}"),
    }

    let mut changed = sample_status();
    changed.paused = true;
    let sent = vec![
        WatchMessage::Event {
            event: Event::RunnerLaunched {
                at: UnixMillis(1),
                attempt_id: "a1".into(),
                runner_name: "rm-a1".into(),
                target: "octo/app".into(),
            },
        },
        WatchMessage::Changed {
            status: Box::new(changed),
        },
        WatchMessage::Event {
            event: Event::SignInRequired {
                at: UnixMillis(2),
                reason: "refresh token expired".into(),
            },
        },
        WatchMessage::Event {
            event: Event::UpdateReady {
                at: UnixMillis(3),
                current_version: "0.1.0".into(),
                new_version: "0.2.0".into(),
            },
        },
    ];
    for message in &sent {
        server.recorder.events.send(message.clone()).unwrap();
    }
    for expected in &sent {
        assert_eq!(&next(&mut stream).await, expected);
    }
}

#[tokio::test]
async fn a_reader_that_stops_reading_is_dropped_while_a_fast_reader_keeps_receiving() {
    let limits = ServerLimits {
        watch_write_timeout: Duration::from_millis(200),
        watch_queue: 4,
        ..ServerLimits::default()
    };
    let server = start_with(
        Recorder::new(),
        AccessPolicy::root_only().with_operator(current_uid()),
        limits,
    )
    .await;
    let events = server.recorder.events.clone();

    // The slow reader asks for the watch and then never reads.
    let mut slow = tokio::net::UnixStream::connect(&server.socket)
        .await
        .unwrap();
    slow.write_all(b"GET /v1/watch HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let client = Client::connect(&server.socket).await.unwrap();
    let mut fast = client.watch().await.unwrap();
    assert!(matches!(
        next(&mut fast).await,
        WatchMessage::Snapshot { .. }
    ));
    assert!(
        eventually(Duration::from_secs(5), || events.receiver_count() == 2).await,
        "both watches subscribed"
    );

    // Publish large messages in lockstep with the fast reader until the server gives up on the
    // slow one (its forwarder drops its broadcast receiver).
    let mut n = 0;
    while events.receiver_count() == 2 {
        assert!(n < 2000, "the slow reader was never dropped");
        let message = failure_event(n, 16 * 1024);
        events.send(message.clone()).unwrap();
        assert_eq!(next(&mut fast).await, message, "fast reader, message {n}");
        n += 1;
    }

    // The slow reader's connection is closed: draining it reaches EOF without the final
    // chunk of a cleanly ended body.
    let mut drained = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut drained))
        .await
        .expect("the slow reader's connection was closed")
        .unwrap();
    assert!(drained.starts_with(b"HTTP/1.1 200"));
    assert!(
        !drained.ends_with(b"\r\n0\r\n\r\n"),
        "the stream was cut, not ended"
    );

    // The fast reader is unaffected.
    for extra in n..n + 3 {
        let message = failure_event(extra, 10);
        events.send(message.clone()).unwrap();
        assert_eq!(next(&mut fast).await, message);
    }
}

#[tokio::test]
async fn stopping_the_server_closes_open_watch_streams() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect(&server.socket).await.unwrap();
    let mut stream = client.watch().await.unwrap();
    assert!(matches!(
        next(&mut stream).await,
        WatchMessage::Snapshot { .. }
    ));
    let message = failure_event(1, 1);
    server.recorder.events.send(message.clone()).unwrap();
    assert_eq!(next(&mut stream).await, message);
    // The handler still holds the broadcast sender, so only the shutdown can end the stream.
    drop(server);
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the stream ends within 5 s");
    assert!(
        matches!(end, None | Some(Err(ClientError::WatchClosed { .. }))),
        "{end:?}"
    );
}

#[tokio::test]
async fn a_stop_sends_what_was_published_before_it_then_ends_the_stream_cleanly() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect(&server.socket).await.unwrap();
    let mut stream = client.watch().await.unwrap();
    assert!(matches!(
        next(&mut stream).await,
        WatchMessage::Snapshot { .. }
    ));
    // Published, then the server stops at once (a service ending a sign-in as it stops):
    // the reader still gets it, then a clean end rather than a cut connection.
    let last = failure_event(2, 1);
    server.recorder.events.send(last.clone()).unwrap();
    drop(server);
    assert_eq!(next(&mut stream).await, last);
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the stream ends within 5 s");
    assert!(end.is_none(), "{end:?}");
}
