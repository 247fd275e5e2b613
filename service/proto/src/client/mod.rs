//! The client side, for the CLI and the tray: typed methods per endpoint over the Unix socket
//! (or, on Windows, the named pipe: pass its name, [`crate::pipe::pipe_name`], as the path).
//!
//! Each call opens its own connection (cheap on a local socket, and nothing to reconnect);
//! [`Client::connect`] first checks that both sides speak a compatible API version.

mod error;
mod follow;
mod transport;
mod watch;

pub use error::ClientError;
pub use follow::{
    disconnect_of, sleep_or_forever, Follower, FIRST_RECONNECT_DELAY, MAX_RECONNECT_DELAY,
    UPDATE_STATUS_TIMEOUT,
};
pub use transport::PIPE_BUSY_WAIT;
pub use watch::WatchStream;

use crate::error::{ErrorBody, ErrorCode};
use crate::paths::{self, TargetRef};
use crate::requests::{
    CredentialPut, HostAdmissionChange, HostCapacity, PauseState, TargetAdd, TargetList,
    TargetUpdate,
};
use crate::signin::{SignInSession, SignInStart};
use crate::status::{DoctorReport, HostAdmission, HostStatus, Status, TargetStatus};
use crate::version::{check_compatibility, VersionInfo, API_HEADER, API_VERSION};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest answer the client reads (a status with many runners fits easily).
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// How a client introduces itself and how long it waits.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Named in version-mismatch messages: "this tray needs API 2".
    pub client_name: String,
    /// The API version this client speaks. Leave at [`API_VERSION`]; tests change it.
    pub api_version: u32,
    /// Bound on each request (not on a watch stream).
    pub request_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            client_name: "client".to_owned(),
            api_version: API_VERSION,
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl ClientOptions {
    pub fn named(client_name: impl Into<String>) -> Self {
        ClientOptions {
            client_name: client_name.into(),
            ..ClientOptions::default()
        }
    }
}

/// A handle on the service's local API.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    options: ClientOptions,
    service: VersionInfo,
}

impl Client {
    /// Connects with default options and checks the API versions.
    pub async fn connect(socket: impl AsRef<Path>) -> Result<Client, ClientError> {
        Client::connect_with(socket, ClientOptions::default()).await
    }

    /// Connects and checks the API versions; a mismatch names the side to update.
    pub async fn connect_with(
        socket: impl AsRef<Path>,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let mut client = Client {
            socket: socket.as_ref().to_owned(),
            options,
            service: VersionInfo::current("unknown"),
        };
        let info = client.version().await?;
        check_compatibility(
            client.options.api_version,
            &client.options.client_name,
            &info,
        )?;
        client.service = info;
        Ok(client)
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// What the service reported at connect time.
    pub fn service_info(&self) -> &VersionInfo {
        &self.service
    }

    /// `GET /v1/version`.
    pub async fn version(&self) -> Result<VersionInfo, ClientError> {
        self.call(Method::GET, paths::VERSION, None::<&()>).await
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> Result<Status, ClientError> {
        self.call(Method::GET, paths::STATUS, None::<&()>).await
    }

    /// `GET /v1/watch`: a snapshot first, then changes and events; see [`WatchStream`].
    pub async fn watch(&self) -> Result<WatchStream, ClientError> {
        let response = tokio::time::timeout(
            self.options.request_timeout,
            self.exchange(Method::GET, paths::WATCH, None),
        )
        .await
        .map_err(|_| self.timeout())??;
        let response = self.check_status(response).await?;
        Ok(WatchStream::new(response.into_body(), self.socket.clone()))
    }

    /// `POST /v1/credential`.
    pub async fn put_credential(&self, credential: &CredentialPut) -> Result<(), ClientError> {
        self.call_empty(Method::POST, paths::CREDENTIAL, Some(credential))
            .await
    }

    /// `DELETE /v1/credential`.
    pub async fn delete_credential(&self) -> Result<(), ClientError> {
        self.call_empty(Method::DELETE, paths::CREDENTIAL, None::<&()>)
            .await
    }

    /// `GET /v1/targets`.
    pub async fn targets(&self) -> Result<Vec<TargetStatus>, ClientError> {
        let list: TargetList = self.call(Method::GET, paths::TARGETS, None::<&()>).await?;
        Ok(list.targets)
    }

    /// `POST /v1/targets`.
    pub async fn add_target(&self, request: &TargetAdd) -> Result<TargetStatus, ClientError> {
        self.call(Method::POST, paths::TARGETS, Some(request)).await
    }

    /// `PATCH /v1/targets/{kind}/{name}`.
    pub async fn update_target(
        &self,
        target: &TargetRef,
        request: &TargetUpdate,
    ) -> Result<TargetStatus, ClientError> {
        self.call(Method::PATCH, &target.path(), Some(request))
            .await
    }

    /// `DELETE /v1/targets/{kind}/{name}`.
    pub async fn remove_target(&self, target: &TargetRef) -> Result<(), ClientError> {
        self.call_empty(Method::DELETE, &target.path(), None::<&()>)
            .await
    }

    /// `PUT /v1/host/capacity`.
    pub async fn set_host_capacity(&self, capacity: u32) -> Result<HostStatus, ClientError> {
        self.call(
            Method::PUT,
            paths::HOST_CAPACITY,
            Some(&HostCapacity { capacity }),
        )
        .await
    }

    /// `PATCH /v1/host/admission`.
    pub async fn set_host_admission(
        &self,
        change: &HostAdmissionChange,
    ) -> Result<HostAdmission, ClientError> {
        self.call(Method::PATCH, paths::HOST_ADMISSION, Some(change))
            .await
    }

    /// `GET /v1/pool`.
    pub async fn pool(&self) -> Result<crate::PoolStatus, ClientError> {
        self.call(Method::GET, paths::POOL, None::<&()>).await
    }

    /// `PUT /v1/pool`.
    pub async fn join_pool(
        &self,
        join: &crate::PoolJoin,
    ) -> Result<crate::PoolStatus, ClientError> {
        self.call(Method::PUT, paths::POOL, Some(join)).await
    }

    /// `DELETE /v1/pool`.
    pub async fn leave_pool(&self) -> Result<(), ClientError> {
        self.call_empty(Method::DELETE, paths::POOL, None::<&()>)
            .await
    }

    /// `GET /v1/host/env`.
    pub async fn host_env(&self) -> Result<crate::HostEnv, ClientError> {
        self.call(Method::GET, paths::HOST_ENV, None::<&()>).await
    }

    /// `PATCH /v1/host/env`.
    pub async fn change_host_env(
        &self,
        change: &crate::HostEnvChange,
    ) -> Result<crate::HostEnv, ClientError> {
        self.call(Method::PATCH, paths::HOST_ENV, Some(change))
            .await
    }

    /// `GET /v1/caches`.
    pub async fn caches(&self) -> Result<crate::CachesReport, ClientError> {
        self.call(Method::GET, paths::CACHES, None::<&()>).await
    }

    /// `POST /v1/caches/clear`.
    pub async fn clear_caches(
        &self,
        clear: &crate::CacheClear,
    ) -> Result<crate::CacheCleared, ClientError> {
        self.call(Method::POST, paths::CACHES_CLEAR, Some(clear))
            .await
    }

    /// `PATCH /v1/host/caches`.
    pub async fn change_host_caches(
        &self,
        change: &crate::HostCachesChange,
    ) -> Result<crate::CachesReport, ClientError> {
        self.call(Method::PATCH, paths::HOST_CACHES, Some(change))
            .await
    }

    /// `GET /v1/host/doctor`.
    pub async fn host_doctor(&self) -> Result<DoctorReport, ClientError> {
        self.call(Method::GET, paths::HOST_DOCTOR, None::<&()>)
            .await
    }

    /// `GET /v1/why`.
    pub async fn why(&self) -> Result<crate::WhyReport, ClientError> {
        self.call(Method::GET, paths::WHY, None::<&()>).await
    }

    /// `POST /v1/pause`.
    pub async fn pause(&self) -> Result<PauseState, ClientError> {
        self.call(Method::POST, paths::PAUSE, None::<&()>).await
    }

    /// `POST /v1/resume`.
    pub async fn resume(&self) -> Result<PauseState, ClientError> {
        self.call(Method::POST, paths::RESUME, None::<&()>).await
    }

    /// `GET /v1/update`.
    pub async fn update_status(&self) -> Result<crate::update::UpdateStatus, ClientError> {
        self.call(Method::GET, paths::UPDATE, None::<&()>).await
    }

    /// `POST /v1/update`: check now; with `apply`, apply a newer release.
    pub async fn update(
        &self,
        request: &crate::update::UpdateRequest,
    ) -> Result<crate::update::UpdateStatus, ClientError> {
        self.call(Method::POST, paths::UPDATE, Some(request)).await
    }

    /// `POST /v1/sign-in`: starts the service's device-flow sign-in, or joins the one still
    /// waiting unless `restart`. An older service answers `404 not_found`.
    pub async fn start_sign_in(&self, request: &SignInStart) -> Result<SignInSession, ClientError> {
        self.call(Method::POST, paths::SIGN_IN, Some(request)).await
    }

    /// `GET /v1/sign-in`: the current or last sign-in session (`404 not_found` when none).
    pub async fn sign_in_status(&self) -> Result<SignInSession, ClientError> {
        self.call(Method::GET, paths::SIGN_IN, None::<&()>).await
    }

    /// `DELETE /v1/sign-in`: cancels the waiting sign-in; answers the session as it ends.
    pub async fn cancel_sign_in(&self) -> Result<SignInSession, ClientError> {
        self.call(Method::DELETE, paths::SIGN_IN, None::<&()>).await
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let bytes = self.request_body(body)?;
        let work = async {
            let response = self.exchange(method, path, bytes).await?;
            let response = self.check_status(response).await?;
            let bytes = self.read_all(response.into_body()).await?;
            serde_json::from_slice(&bytes).map_err(|e| self.protocol(format!("bad JSON: {e}")))
        };
        tokio::time::timeout(self.options.request_timeout, work)
            .await
            .map_err(|_| self.timeout())?
    }

    async fn call_empty<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<(), ClientError> {
        let bytes = self.request_body(body)?;
        let work = async {
            let response = self.exchange(method, path, bytes).await?;
            let response = self.check_status(response).await?;
            self.read_all(response.into_body()).await.map(|_| ())
        };
        tokio::time::timeout(self.options.request_timeout, work)
            .await
            .map_err(|_| self.timeout())?
    }

    fn request_body<B: Serialize>(&self, body: Option<&B>) -> Result<Option<Bytes>, ClientError> {
        body.map(|b| {
            serde_json::to_vec(b)
                .map(Bytes::from)
                .map_err(|e| self.protocol(format!("could not encode the request: {e}")))
        })
        .transpose()
    }

    /// Sends one request on a fresh connection; returns once the headers arrived.
    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Response<Incoming>, ClientError> {
        let stream = transport::connect(&self.socket).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| self.protocol(format!("HTTP handshake failed: {e}")))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "local API connection ended with an error");
            }
        });
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, HeaderValue::from_static("localhost"))
            .header(API_HEADER, HeaderValue::from(self.options.api_version));
        if body.is_some() {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| self.protocol(format!("could not build the request: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.protocol(format!("the request failed: {e}")))?;
        if !response.headers().contains_key(API_HEADER) {
            return Err(self.protocol(format!(
                "the answer lacks the {API_HEADER} header: is another program listening on \
                 this socket?"
            )));
        }
        Ok(response)
    }

    /// Turns an error status into the matching [`ClientError`].
    async fn check_status(
        &self,
        response: Response<Incoming>,
    ) -> Result<Response<Incoming>, ClientError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = self.read_all(response.into_body()).await?;
        let body: ErrorBody = serde_json::from_slice(&bytes).map_err(|e| {
            self.protocol(format!("HTTP {status} with an unreadable error body: {e}"))
        })?;
        if body.code == ErrorCode::UnauthorizedPeer {
            return Err(ClientError::PermissionDenied {
                socket: self.socket.clone(),
                message: body.message,
            });
        }
        Err(ClientError::Api {
            status: status.as_u16(),
            code: body.code,
            message: body.message,
        })
    }

    async fn read_all(&self, body: Incoming) -> Result<Bytes, ClientError> {
        Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(|e| self.protocol(format!("could not read the answer: {e}")))
    }

    fn protocol(&self, detail: String) -> ClientError {
        ClientError::Protocol {
            socket: self.socket.clone(),
            detail,
        }
    }

    fn timeout(&self) -> ClientError {
        ClientError::Timeout {
            socket: self.socket.clone(),
            after: self.options.request_timeout,
        }
    }
}
