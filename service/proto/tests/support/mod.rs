//! A test service: a recording handler behind the real server on a real socket in a temp dir.
#![allow(dead_code)]

use rm_proto::server::{serve_until, AccessPolicy, Handler, Peer, ServerLimits, WatchStart};
use rm_proto::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, oneshot};

/// One handler call: which endpoint, and the caller's uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub endpoint: &'static str,
    pub uid: u32,
}

#[derive(Clone)]
pub struct Recorder {
    pub calls: Arc<Mutex<Vec<Call>>>,
    pub credential: Arc<Mutex<Option<CredentialPut>>>,
    pub last_update: Arc<Mutex<Option<(TargetRef, TargetUpdate)>>>,
    pub last_add: Arc<Mutex<Option<TargetAdd>>>,
    pub events: broadcast::Sender<WatchMessage>,
    /// The identity the server passed with the last call.
    pub last_peer: Arc<Mutex<Option<Peer>>>,
    /// What `GET /v1/version` reports (to simulate other service versions).
    pub version: VersionInfo,
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            calls: Arc::default(),
            credential: Arc::default(),
            last_update: Arc::default(),
            last_add: Arc::default(),
            events: broadcast::channel(1024).0,
            last_peer: Arc::default(),
            version: VersionInfo::current("0.1.0-test"),
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, endpoint: &'static str, peer: Peer) {
        *self.last_peer.lock().unwrap() = Some(peer);
        self.calls.lock().unwrap().push(Call {
            endpoint,
            uid: peer.uid,
        });
    }
}

pub fn sample_target(name: &str, revision: u64) -> TargetStatus {
    TargetStatus {
        target: name.to_owned(),
        kind: if name.contains('/') {
            TargetKind::Repo
        } else {
            TargetKind::Org
        },
        profile: "default".into(),
        enabled: true,
        state: TargetState::Active,
        max_capacity: Some(2),
        min_capacity: 0,
        labels: vec!["gpu".into()],
        revision,
        demand: Demand {
            queued: 3,
            is_floor: false,
            unresolvable: 1,
        },
        active_runners: 1,
        problem: None,
        typical_peak_rss_bytes: Some(700 << 20),
        admission: None,
        cache: None,
        workspace: Workspace::Ephemeral,
        saved_workspaces: 0,
        sandbox: Default::default(),
        pool_label: None,
        capacity_note: None,
    }
}

pub fn sample_host(capacity: u32) -> HostStatus {
    HostStatus {
        id: "host-1".into(),
        label: "devbox".into(),
        os: Os::Linux,
        arch: Arch::X64,
        capacity,
        routing_label: "rm-devbox-linux-x64-default".into(),
        capacity_note: None,
        admission: None,
        runner_env: vec![],
    }
}

pub fn sample_status() -> Status {
    Status {
        host: sample_host(4),
        paused: false,
        auth: AuthState::SignedIn {
            login: "octocat".into(),
            expires_at: Some(UnixMillis(1_700_000_000_000)),
        },
        targets: vec![sample_target("octo/app", 7)],
        runners: vec![RunnerStatus {
            attempt_id: "01HZZZZZZZZZZZZZZZZZZZZZZZ".into(),
            runner_name: "rm-01HZZZZZZZZZZZZZZZZZZZZZZZ".into(),
            target: "octo/app".into(),
            state: RunnerState::Busy,
            job: Some(JobRef {
                id: Some(42),
                name: Some("build".into()),
                run_id: Some(7),
                repository: Some("octo/app".into()),
                ..JobRef::default()
            }),
            since: UnixMillis(1_700_000_001_000),
            usage: Some(RunnerUsage {
                rss_bytes: 300 << 20,
                peak_rss_bytes: 512 << 20,
                cpu_ms: 90_000,
                average_millicores: 1_500,
                busiest_millicores: 2_000,
            }),
        }],
        last_github_contact: Some(UnixMillis(1_700_000_002_000)),
        budget: Some(Budget {
            limit: 5000,
            remaining: 4990,
            reset: Some(UnixMillis(1_700_000_003_000)),
            charged_last_hour: 10,
            not_modified_last_hour: 90,
            errors_last_hour: 0,
            poll_interval_secs: 15,
            planned_per_hour: Vec::new(),
        }),
        recent_failures: vec![Failure {
            at: UnixMillis(1_700_000_000_500),
            target: "octo/app".into(),
            attempt_id: Some("01HYYYYYYYYYYYYYYYYYYYYYYY".into()),
            reason: FailureReason::ProcessStartFailed,
            detail: None,
            fix: "check the runner package".into(),
        }],
        github: Some(GitHubEndpoints {
            web_base: "https://github.com".into(),
            api_base: "https://api.github.com".into(),
            client_id: "Iv1.sample".into(),
        }),
        github_health: Default::default(),
        host_checks: Vec::new(),
        admission: None,
        workstation: None,
        caches_problem: None,
        left_registrations: Vec::new(),
        pool: None,
    }
}

impl Handler for Recorder {
    fn service_version(&self) -> String {
        self.version.service_version.clone()
    }

    fn version(&self) -> VersionInfo {
        self.version.clone()
    }

    async fn status(&self, peer: Peer) -> Result<Status, ApiError> {
        self.record("status", peer);
        Ok(sample_status())
    }

    async fn watch(&self, peer: Peer) -> Result<WatchStart, ApiError> {
        self.record("watch", peer);
        let events = self.events.subscribe();
        Ok(WatchStart {
            snapshot: sample_status(),
            events,
        })
    }

    async fn put_credential(&self, peer: Peer, credential: CredentialPut) -> Result<(), ApiError> {
        self.record("put_credential", peer);
        *self.credential.lock().unwrap() = Some(credential);
        Ok(())
    }

    async fn delete_credential(&self, peer: Peer) -> Result<(), ApiError> {
        self.record("delete_credential", peer);
        *self.credential.lock().unwrap() = None;
        Ok(())
    }

    async fn targets(&self, peer: Peer) -> Result<Vec<TargetStatus>, ApiError> {
        self.record("targets", peer);
        Ok(vec![sample_target("octo/app", 7), sample_target("acme", 1)])
    }

    async fn add_target(&self, peer: Peer, request: TargetAdd) -> Result<TargetStatus, ApiError> {
        self.record("add_target", peer);
        let status = sample_target(&request.target, 1);
        *self.last_add.lock().unwrap() = Some(request);
        Ok(status)
    }

    async fn update_target(
        &self,
        peer: Peer,
        target: TargetRef,
        request: TargetUpdate,
    ) -> Result<TargetStatus, ApiError> {
        self.record("update_target", peer);
        if request.revision != 7 {
            return Err(ApiError::conflict(format!(
                "{target} is at revision 7, not {}: re-read it and retry",
                request.revision
            )));
        }
        let mut status = sample_target(&target.name, 8);
        status.max_capacity = request.max_capacity;
        *self.last_update.lock().unwrap() = Some((target, request));
        Ok(status)
    }

    async fn remove_target(&self, peer: Peer, target: TargetRef) -> Result<(), ApiError> {
        self.record("remove_target", peer);
        if target.name == "ghost/repo" {
            return Err(ApiError::not_found(
                "ghost/repo is not served: see `runner-manager targets`",
            ));
        }
        Ok(())
    }

    async fn set_host_capacity(
        &self,
        peer: Peer,
        request: HostCapacity,
    ) -> Result<HostStatus, ApiError> {
        self.record("set_host_capacity", peer);
        Ok(sample_host(request.capacity))
    }

    async fn pause(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.record("pause", peer);
        Ok(PauseState { paused: true })
    }

    async fn resume(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.record("resume", peer);
        Ok(PauseState { paused: false })
    }
}

/// A running test service. Dropping it stops the server.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub recorder: Recorder,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn start(policy: AccessPolicy) -> TestServer {
    start_with(Recorder::new(), policy, ServerLimits::default()).await
}

pub async fn start_with(
    recorder: Recorder,
    policy: AccessPolicy,
    limits: ServerLimits,
) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    // Other users (the peer tests run a client as uid 65534) must reach the socket: the
    // directory is traversable and the socket writable by all; authorisation is by uid.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("api.sock");
    let listener = bind_socket(&socket, 0o666).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let handler = recorder.clone();
    tokio::spawn(async move {
        serve_until(listener, handler, policy, limits, async {
            let _ = stopped.await;
        })
        .await;
    });
    TestServer {
        dir,
        socket,
        recorder,
        stop: Some(stop),
    }
}

/// A raw HTTP exchange (`Connection: close` is added): status, head, body.
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Raw {
    pub fn error(&self) -> ErrorBody {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

pub async fn raw(socket: &std::path::Path, head: &str, body: &[u8]) -> Raw {
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let mut request = head.trim_end_matches("\r\n").to_owned();
    request.push_str("\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    // The server may answer (and close) before the whole body is sent (413): ignore that.
    let _ = stream.write_all(body).await;
    // Read until EOF; a reset after the answer (the server closed with our body unread, as
    // after a 413) ends the answer too.
    let mut out = Vec::new();
    let read = async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(_) if !out.is_empty() => break,
                Err(e) => panic!("read: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the server answers within 5 s");
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    Raw {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// Polls `check` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

/// The uid this test process runs as (the owner of a file it creates).
pub fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().metadata().unwrap().uid()
}
