//! The service side: accepts connections on the Unix socket (or, on Windows, the named pipe),
//! authorises each request by the peer's OS identity, enforces the limits, and calls the
//! [`Handler`] only for requests that passed every check (so a refused or malformed request
//! changes nothing).

mod access;
mod bind_error;
mod dispatch;
#[cfg(windows)]
mod pipe_listener;
#[cfg(unix)]
mod socket;
mod watch;

pub use access::{AccessPolicy, GroupMembership, Peer, PeerIdentity};
pub use bind_error::BindError;
#[cfg(windows)]
pub use pipe_listener::{bind_pipe, PipeListener};
#[cfg(unix)]
pub use socket::bind_socket;

/// What the service listens on: a Unix socket ([`bind_socket`]).
#[cfg(unix)]
pub type Listener = tokio::net::UnixListener;
/// What the service listens on: the named pipe ([`bind_pipe`]).
#[cfg(windows)]
pub type Listener = PipeListener;
#[cfg(unix)]
type Stream = tokio::net::UnixStream;
#[cfg(windows)]
type Stream = tokio::net::windows::named_pipe::NamedPipeServer;

#[cfg(unix)]
async fn accept(listener: &mut Listener) -> std::io::Result<Stream> {
    listener.accept().await.map(|(stream, _)| stream)
}

#[cfg(windows)]
async fn accept(listener: &mut Listener) -> std::io::Result<Stream> {
    listener.accept().await
}

/// The caller's identity as the kernel reports it (`SO_PEERCRED` on Linux, `getpeereid` on
/// macOS).
#[cfg(unix)]
fn peer_of(stream: &Stream) -> std::io::Result<Peer> {
    let cred = stream.peer_cred()?;
    Ok(Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid(),
    })
}

/// The caller's identity from its process token (pid from `GetNamedPipeClientProcessId`).
#[cfg(windows)]
fn peer_of(stream: &Stream) -> std::io::Result<Peer> {
    let (pid, sid, is_admin) = crate::win32::pipe_client_identity(stream)?;
    Ok(Peer {
        sid,
        is_admin,
        pid: Some(pid),
    })
}

use crate::error::ApiError;
use crate::paths::TargetRef;
use crate::requests::{
    CredentialPut, HostAdmissionChange, HostCapacity, HostEnv, HostEnvChange, PauseState,
    TargetAdd, TargetUpdate,
};
use crate::signin::{SignInSession, SignInStart};
use crate::status::{DoctorReport, HostAdmission, HostStatus, Status, TargetStatus};
use crate::version::VersionInfo;
use crate::watch::WatchMessage;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, Notify, Semaphore};

/// What a watch starts from: the current status and a receiver of everything published after
/// it. Subscribe *before* reading the status so that nothing falls between the two (a change
/// seen twice is harmless; a change missed is not).
pub struct WatchStart {
    pub snapshot: Status,
    pub events: broadcast::Receiver<WatchMessage>,
}

/// The service's implementation of the endpoints. Every method receives the authorised caller.
/// Handlers ask the per-target loops to act; they do not change state themselves.
pub trait Handler: Send + Sync + 'static {
    /// The service's own version, sent in every response header.
    fn service_version(&self) -> String;

    /// `GET /v1/version`.
    fn version(&self) -> VersionInfo {
        VersionInfo::current(self.service_version())
    }

    /// `GET /v1/status`.
    fn status(&self, peer: Peer) -> impl Future<Output = Result<Status, ApiError>> + Send;

    /// `GET /v1/watch`.
    fn watch(&self, peer: Peer) -> impl Future<Output = Result<WatchStart, ApiError>> + Send;

    /// `POST /v1/credential` (answers `204`).
    fn put_credential(
        &self,
        peer: Peer,
        credential: CredentialPut,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// `DELETE /v1/credential` (answers `204`).
    fn delete_credential(&self, peer: Peer) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// `GET /v1/targets`.
    fn targets(
        &self,
        peer: Peer,
    ) -> impl Future<Output = Result<Vec<TargetStatus>, ApiError>> + Send;

    /// `POST /v1/targets`.
    fn add_target(
        &self,
        peer: Peer,
        request: TargetAdd,
    ) -> impl Future<Output = Result<TargetStatus, ApiError>> + Send;

    /// `PATCH /v1/targets/{kind}/{name}`; a stale `revision` is [`ErrorCode::Conflict`](crate::ErrorCode::Conflict).
    fn update_target(
        &self,
        peer: Peer,
        target: TargetRef,
        request: TargetUpdate,
    ) -> impl Future<Output = Result<TargetStatus, ApiError>> + Send;

    /// `DELETE /v1/targets/{kind}/{name}` (answers `204`).
    fn remove_target(
        &self,
        peer: Peer,
        target: TargetRef,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// `PUT /v1/host/capacity`.
    fn set_host_capacity(
        &self,
        peer: Peer,
        request: HostCapacity,
    ) -> impl Future<Output = Result<HostStatus, ApiError>> + Send;

    /// `PATCH /v1/host/admission`: change memory admission and the workstation rules now;
    /// answers the settings in force.
    fn set_host_admission(
        &self,
        peer: Peer,
        request: HostAdmissionChange,
    ) -> impl Future<Output = Result<HostAdmission, ApiError>> + Send {
        let _ = (peer, request);
        async {
            Err(ApiError::not_found(
                "this service cannot change admission while it runs: update runner-manager \
                 (the service), or use `runner-manager daemon run`'s flags",
            ))
        }
    }

    /// `GET /v1/pool`: this host's place in its pool.
    fn pool(&self, peer: Peer) -> impl Future<Output = Result<crate::PoolStatus, ApiError>> + Send {
        let _ = peer;
        async { Err(pool_unsupported()) }
    }

    /// `PUT /v1/pool`: join a pool (checked against the database before anything is kept).
    fn join_pool(
        &self,
        peer: Peer,
        request: crate::PoolJoin,
    ) -> impl Future<Output = Result<crate::PoolStatus, ApiError>> + Send {
        let _ = (peer, request);
        async { Err(pool_unsupported()) }
    }

    /// `DELETE /v1/pool`: leave the pool.
    fn leave_pool(&self, peer: Peer) -> impl Future<Output = Result<(), ApiError>> + Send {
        let _ = peer;
        async { Err(pool_unsupported()) }
    }

    /// `GET /v1/host/env`: the host's runner environment (values to operators only).
    fn host_env(&self, peer: Peer) -> impl Future<Output = Result<HostEnv, ApiError>> + Send {
        let _ = peer;
        async { Err(host_env_unsupported()) }
    }

    /// `PATCH /v1/host/env`: set and unset runner environment variables; answers the
    /// variables now set.
    fn change_host_env(
        &self,
        peer: Peer,
        request: HostEnvChange,
    ) -> impl Future<Output = Result<HostEnv, ApiError>> + Send {
        let _ = (peer, request);
        async { Err(host_env_unsupported()) }
    }

    /// `GET /v1/caches`: what is cached.
    fn caches(
        &self,
        peer: Peer,
    ) -> impl Future<Output = Result<crate::CachesReport, ApiError>> + Send {
        let _ = peer;
        async { Err(caches_unsupported()) }
    }

    /// `POST /v1/caches/clear`: remove caches no running job has.
    fn clear_caches(
        &self,
        peer: Peer,
        request: crate::CacheClear,
    ) -> impl Future<Output = Result<crate::CacheCleared, ApiError>> + Send {
        let _ = (peer, request);
        async { Err(caches_unsupported()) }
    }

    /// `PATCH /v1/host/caches`: the size cap, the tool cache switch.
    fn set_host_caches(
        &self,
        peer: Peer,
        request: crate::HostCachesChange,
    ) -> impl Future<Output = Result<crate::CachesReport, ApiError>> + Send {
        let _ = (peer, request);
        async { Err(caches_unsupported()) }
    }

    /// `GET /v1/host/doctor`: every host check, run now.
    fn host_doctor(
        &self,
        peer: Peer,
    ) -> impl Future<Output = Result<DoctorReport, ApiError>> + Send {
        let _ = peer;
        async {
            Err(ApiError::not_found(
                "this service cannot run the host checks: update runner-manager (the service)",
            ))
        }
    }

    /// `GET /v1/why`: every queued job of the host's targets and why it has no runner.
    fn why(&self, peer: Peer) -> impl Future<Output = Result<crate::WhyReport, ApiError>> + Send {
        let _ = peer;
        async {
            Err(ApiError::not_found(
                "this service cannot explain waiting jobs: update runner-manager (the service)",
            ))
        }
    }

    /// `POST /v1/pause`.
    fn pause(&self, peer: Peer) -> impl Future<Output = Result<PauseState, ApiError>> + Send;

    /// `POST /v1/resume`.
    fn resume(&self, peer: Peer) -> impl Future<Output = Result<PauseState, ApiError>> + Send;

    /// `POST /v1/sign-in`: start (or join) the service's device-flow sign-in.
    fn start_sign_in(
        &self,
        peer: Peer,
        request: SignInStart,
    ) -> impl Future<Output = Result<SignInSession, ApiError>> + Send {
        let _ = (peer, request);
        async { Err(sign_in_unsupported()) }
    }

    /// `GET /v1/sign-in`: the current (or last) session; `404 not_found` when there is none.
    fn sign_in_status(
        &self,
        peer: Peer,
    ) -> impl Future<Output = Result<SignInSession, ApiError>> + Send {
        let _ = peer;
        async { Err(sign_in_unsupported()) }
    }

    /// `DELETE /v1/sign-in`: cancel the waiting session (answers the cancelled session).
    fn cancel_sign_in(
        &self,
        peer: Peer,
    ) -> impl Future<Output = Result<SignInSession, ApiError>> + Send {
        let _ = peer;
        async { Err(sign_in_unsupported()) }
    }

    /// `GET /v1/update`: the updater's state.
    fn update_status(
        &self,
        peer: Peer,
    ) -> impl Future<Output = Result<crate::update::UpdateStatus, ApiError>> + Send {
        let _ = peer;
        async { Err(update_unsupported()) }
    }

    /// `POST /v1/update`: check the release feed now (and apply a newer release when asked);
    /// answers the updater's state after the check.
    fn update(
        &self,
        peer: Peer,
        request: crate::update::UpdateRequest,
    ) -> impl Future<Output = Result<crate::update::UpdateStatus, ApiError>> + Send {
        let _ = (peer, request);
        async { Err(update_unsupported()) }
    }
}

/// What a service without the caches answers.
fn caches_unsupported() -> ApiError {
    ApiError::not_found("this service has no caches: update runner-manager (the service)")
}

/// What a service without the runner environment answers.
fn pool_unsupported() -> ApiError {
    ApiError::not_found(
        "this service has no pools of hosts: update runner-manager (the service) on this host",
    )
}

fn host_env_unsupported() -> ApiError {
    ApiError::not_found(
        "this service has no runner environment: update runner-manager (the service)",
    )
}

/// What a service without the updater answers.
fn update_unsupported() -> ApiError {
    ApiError::not_found(
        "this service has no updater: update runner-manager by hand (see README, Install)",
    )
}

/// What a service without the sign-in endpoints answers.
fn sign_in_unsupported() -> ApiError {
    ApiError::not_found(
        "this service does not run sign-in itself: update runner-manager (the service)",
    )
}

/// Bounds that protect the service from its clients.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Largest request body accepted (`413 payload_too_large` beyond).
    pub max_body_bytes: usize,
    /// How long one watch line may wait for a reader that does not read before that reader is
    /// disconnected.
    pub watch_write_timeout: Duration,
    /// Lines buffered per watch reader between the broadcast and the socket.
    pub watch_queue: usize,
    /// How long a client may take to send its request headers.
    pub header_read_timeout: Duration,
    /// Open connections served at once; further ones are closed at once (a local user must not
    /// exhaust the service's file descriptors).
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_body_bytes: 64 * 1024,
            watch_write_timeout: Duration::from_secs(5),
            watch_queue: 64,
            header_read_timeout: Duration::from_secs(10),
            max_connections: 256,
        }
    }
}

/// Serves the API on `listener` until the process ends, with default limits.
pub async fn serve<H: Handler>(listener: Listener, handler: H, policy: AccessPolicy) {
    serve_until(
        listener,
        handler,
        policy,
        ServerLimits::default(),
        std::future::pending::<()>(),
    )
    .await
}

/// How long open connections get, once `shutdown` completed, to finish the answer in flight:
/// a watch stream sends what was published before the stop (a sign-in the stop cancelled,
/// say), then ends cleanly.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Serves the API on `listener` until `shutdown` completes; then stops accepting, lets open
/// connections finish their answer in flight (watch streams end after what was published
/// before the stop) and closes them, within [`STOP_GRACE`].
pub async fn serve_until<H: Handler>(
    mut listener: Listener,
    handler: H,
    policy: AccessPolicy,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let all_slots = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let shared = Arc::new(dispatch::Shared {
        service_version: handler.service_version(),
        handler,
        policy,
        limits,
        stop: stop_rx.clone(),
    });
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&mut listener) => match accepted {
                Ok(stream) => match Arc::clone(&slots).try_acquire_owned() {
                    Ok(slot) => {
                        let (shared, stop) = (Arc::clone(&shared), stop_rx.clone());
                        tokio::spawn(async move {
                            connection(stream, shared, stop).await;
                            drop(slot);
                        });
                    }
                    Err(_) => tracing::warn!(
                        max = shared.limits.max_connections,
                        "too many local API connections; closing a new one"
                    ),
                },
                Err(error) => {
                    // Transient (e.g. out of file descriptors): back off instead of spinning.
                    tracing::warn!(%error, "accepting a local API connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it is closed: all slots back means all closed.
    let closed = slots.acquire_many(all_slots);
    if tokio::time::timeout(STOP_GRACE + Duration::from_millis(500), closed)
        .await
        .is_err()
    {
        tracing::debug!("local API connections still open after the stop grace; leaving them");
    }
}

/// Resolves once the server stops (the guard `wait_for` returns is not held across awaits).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

async fn connection<H: Handler>(
    stream: Stream,
    shared: Arc<dispatch::Shared<H>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let peer = match peer_of(&stream) {
        Ok(peer) => peer,
        Err(error) => {
            tracing::warn!(%error, "cannot read the peer's identity; closing the connection");
            return;
        }
    };
    // Fired by a watch forwarder to disconnect a reader that does not keep up; the connection
    // future is dropped, which closes the socket even while a write is blocked.
    let kill = Arc::new(Notify::new());
    let service = {
        let shared = Arc::clone(&shared);
        let kill = Arc::clone(&kill);
        service_fn(move |request| {
            let shared = Arc::clone(&shared);
            let kill = Arc::clone(&kill);
            async move { Ok::<_, Infallible>(dispatch::respond(request, &shared, peer, kill).await) }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.header_read_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, %peer, "local API connection ended with an error");
            }
        }
        () = kill.notified() => {
            tracing::info!(%peer, pid = ?peer.pid, "disconnected a watch reader that fell behind");
        }
        () = stopped(&mut stop) => {
            // Finish the answer in flight (an idle connection closes at once), bounded.
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(STOP_GRACE, conn).await;
        }
    }
}
