//! Every endpoint through the real client and server on a real socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// tests may panic on broken fixtures
// They run the server on real Unix sockets; the named pipe's rules are unit-tested in src/.
#![cfg(unix)]

mod support;

use rm_proto::server::AccessPolicy;
use rm_proto::*;
use std::os::unix::fs::PermissionsExt;
use support::*;

#[tokio::test]
async fn every_endpoint_round_trips_through_the_client() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect_with(&server.socket, ClientOptions::named("test"))
        .await
        .unwrap();
    assert_eq!(client.service_info().service_version, "0.1.0-test");

    let version = client.version().await.unwrap();
    assert_eq!(version.api, API_VERSION);
    assert_eq!(client.status().await.unwrap(), sample_status());

    let credential = CredentialPut {
        access_token: SecretString::new("ghu_access_token_value"),
        expires_at: UnixMillis(10),
        refresh_token: SecretString::new("ghr_refresh_token_value"),
        refresh_expires_at: UnixMillis(20),
        login: Some("octocat".into()),
    };
    client.put_credential(&credential).await.unwrap();
    let stored = server.recorder.credential.lock().unwrap().clone().unwrap();
    assert_eq!(stored.access_token.expose(), "ghu_access_token_value");
    assert_eq!(stored, credential);
    client.delete_credential().await.unwrap();
    assert!(server.recorder.credential.lock().unwrap().is_none());

    let targets = client.targets().await.unwrap();
    assert_eq!(
        targets
            .iter()
            .map(|t| t.target.as_str())
            .collect::<Vec<_>>(),
        ["octo/app", "acme"]
    );

    let add = TargetAdd {
        target: "octo/new".into(),
        max_capacity: Some(3),
        labels: Some(vec!["gpu".into()]),
        ..TargetAdd::default()
    };
    let added = client.add_target(&add).await.unwrap();
    assert_eq!(added.target, "octo/new");
    assert_eq!(server.recorder.last_add.lock().unwrap().clone(), Some(add));

    let repo = TargetRef::parse("octo/app").unwrap();
    let update = TargetUpdate {
        revision: 7,
        max_capacity: Some(5),
        ..TargetUpdate::default()
    };
    let updated = client.update_target(&repo, &update).await.unwrap();
    assert_eq!((updated.revision, updated.max_capacity), (8, Some(5)));
    assert_eq!(
        server.recorder.last_update.lock().unwrap().clone(),
        Some((repo.clone(), update))
    );

    let org = TargetRef::parse("acme").unwrap();
    client.remove_target(&org).await.unwrap();
    assert_eq!(client.set_host_capacity(6).await.unwrap().capacity, 6);
    assert!(client.pause().await.unwrap().paused);
    assert!(!client.resume().await.unwrap().paused);

    let endpoints: Vec<&str> = server.recorder.calls().iter().map(|c| c.endpoint).collect();
    assert_eq!(
        endpoints,
        [
            "status",
            "put_credential",
            "delete_credential",
            "targets",
            "add_target",
            "update_target",
            "remove_target",
            "set_host_capacity",
            "pause",
            "resume"
        ]
    );
    assert!(server
        .recorder
        .calls()
        .iter()
        .all(|c| c.uid == current_uid()));
    // The kernel's view of the caller, including its pid.
    let peer = server.recorder.last_peer.lock().unwrap().unwrap();
    assert_eq!(peer.pid, Some(std::process::id() as i32));
}

#[tokio::test]
async fn handler_refusals_arrive_as_typed_api_errors() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect(&server.socket).await.unwrap();
    let stale = TargetUpdate {
        revision: 3,
        ..TargetUpdate::default()
    };
    let err = client
        .update_target(&TargetRef::parse("octo/app").unwrap(), &stale)
        .await
        .unwrap_err();
    match err {
        ClientError::Api {
            status,
            code,
            message,
        } => {
            assert_eq!((status, code), (409, ErrorCode::Conflict));
            assert!(message.contains("re-read it and retry"), "{message}");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let err = client
        .remove_target(&TargetRef::parse("ghost/repo").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Api {
                status: 404,
                code: ErrorCode::NotFound,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_service_without_sign_in_answers_404_naming_the_update() {
    // The test handler keeps the trait's default sign-in methods, as a service from before
    // `/v1/sign-in` does: every client method gets a 404 that says to update the service.
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect(&server.socket).await.unwrap();
    let answers = [
        client.start_sign_in(&SignInStart { restart: true }).await,
        client.sign_in_status().await,
        client.cancel_sign_in().await,
    ];
    for answer in answers {
        match answer {
            Err(ClientError::Api {
                status: 404,
                code: ErrorCode::NotFound,
                message,
            }) => assert!(message.contains("update runner-manager"), "{message}"),
            other => panic!("expected 404 not_found, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_admission_change_needs_a_newer_service_or_an_operator_and_a_known_field() {
    // The test handler keeps the trait's default: a service from before run-time admission.
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect(&server.socket).await.unwrap();
    let change = rm_proto::HostAdmissionChange {
        idle_only: Some(true),
        ..Default::default()
    };
    match client.set_host_admission(&change).await {
        Err(ClientError::Api {
            status: 404,
            code: ErrorCode::NotFound,
            message,
        }) => assert!(message.contains("update runner-manager"), "{message}"),
        other => panic!("expected 404 not_found, got {other:?}"),
    }
    // A caller who is not an operator is refused before the handler.
    let closed = start(AccessPolicy::root_only()).await;
    if current_uid() != 0 {
        let client = Client::connect(&closed.socket).await.unwrap();
        match client.set_host_admission(&change).await {
            Err(ClientError::Api { code, .. }) => assert_eq!(code, ErrorCode::UnauthorizedPeer),
            other => panic!("expected forbidden, got {other:?}"),
        }
    }
    assert!(closed.recorder.calls().is_empty());
}

#[tokio::test]
async fn version_mismatch_names_the_side_to_update_both_ways() {
    // A client that needs a newer API than the service speaks.
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let options = ClientOptions {
        api_version: API_VERSION + 1,
        ..ClientOptions::named("tray")
    };
    let err = Client::connect_with(&server.socket, options)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the service speaks API {API_VERSION} but this tray needs {}: update runner-manager \
             (the service, now 0.1.0-test)",
            API_VERSION + 1
        )
    );

    // A service that no longer serves this client's API.
    let mut recorder = Recorder::new();
    recorder.version = VersionInfo {
        api: API_VERSION + 1,
        service_version: "2.0.0".into(),
        min_client_api: API_VERSION + 1,
    };
    let newer = start_with(
        recorder,
        AccessPolicy::root_only().with_operator(current_uid()),
        Default::default(),
    )
    .await;
    let err = Client::connect_with(&newer.socket, ClientOptions::named("tray"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::VersionMismatch(VersionMismatch::ClientTooOld { .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("update the tray"), "{err}");
}

#[tokio::test]
async fn every_response_carries_the_api_and_service_version_headers() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    for head in [
        "GET /v1/version HTTP/1.1\r\nHost: x",
        "GET /v1/nowhere HTTP/1.1\r\nHost: x",
        "POST /v1/status HTTP/1.1\r\nHost: x\r\nContent-Length: 0",
    ] {
        let answer = raw(&server.socket, head, b"").await;
        let head_lower = answer.head.to_ascii_lowercase();
        assert!(
            head_lower.contains(&format!("{API_HEADER}: {API_VERSION}")),
            "{}",
            answer.head
        );
        assert!(
            head_lower.contains(&format!("{SERVICE_VERSION_HEADER}: 0.1.0-test")),
            "{}",
            answer.head
        );
    }
}

#[tokio::test]
async fn a_client_announcing_a_too_old_api_is_refused_by_the_service() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let answer = raw(
        &server.socket,
        &format!("GET /v1/status HTTP/1.1\r\nHost: x\r\n{API_HEADER}: 0"),
        b"",
    )
    .await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error().code, ErrorCode::UnsupportedVersion);
    assert!(answer.error().message.contains("update the client"));
    assert!(server.recorder.calls().is_empty());
}

#[tokio::test]
async fn a_missing_or_dead_socket_means_the_service_is_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.sock");
    let err = Client::connect(&missing).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::ServiceNotRunning { socket, .. } if socket == &missing),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("runner-manager daemon run"),
        "{err}"
    );

    // A socket file left behind by a dead service: connection refused.
    let dead = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let err = Client::connect(&dead).await.unwrap_err();
    assert!(
        matches!(err, ClientError::ServiceNotRunning { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn bind_socket_sets_the_mode_explicitly_and_replaces_only_stale_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    for mode in [0o666, 0o600, 0o660] {
        let listener = bind_socket(&path, mode).unwrap();
        let actual = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(actual, mode, "mode {mode:o} (umask must not cut it)");
        // A live socket is not taken over.
        let err = bind_socket(&path, mode).unwrap_err();
        assert!(matches!(err, BindError::InUse { .. }), "{err:?}");
        drop(listener);
        // Now stale (file left, nobody listening): the next round binds over it.
    }

    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, b"keep me").unwrap();
    let err = bind_socket(&file, 0o666).unwrap_err();
    assert!(matches!(err, BindError::NotASocket { .. }), "{err:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

#[tokio::test]
async fn host_doctor_and_retry_reach_the_handler() {
    let server = start(AccessPolicy::root_only().with_operator(current_uid())).await;
    let client = Client::connect(&server.socket).await.unwrap();
    // A service without the doctor (the recorder keeps the default) says to update it.
    match client.host_doctor().await {
        Err(ClientError::Api { code, message, .. }) => {
            assert_eq!(code, ErrorCode::NotFound);
            assert!(message.contains("update runner-manager"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let repo = TargetRef::parse("octo/app").unwrap();
    let retry = TargetUpdate {
        revision: 7,
        retry: Some(true),
        ..TargetUpdate::default()
    };
    client.update_target(&repo, &retry).await.unwrap();
    assert_eq!(
        server.recorder.last_update.lock().unwrap().clone(),
        Some((repo, retry))
    );
    let report = DoctorReport {
        at: UnixMillis(1),
        checks: vec![HostCheck {
            id: "disk_space".into(),
            title: "disk".into(),
            state: CheckState::Warn,
            required: true,
            detail: "1.5 GiB free".into(),
            fix: None,
            checked_at: None,
        }],
    };
    assert!(report.fit(), "a warning does not make the host unfit");
    let mut unfit = report.clone();
    unfit.checks[0].state = CheckState::Fail;
    assert!(!unfit.fit());
}
