//! One request: the checks in order, then the handler.
//!
//! Order: browser origin → route (404/405/version) → client API version → peer authorisation
//! → body size → body JSON → handler. Every refusal is an [`ErrorBody`] and happens before
//! the handler runs.

use super::access::{AccessPolicy, Peer};
use super::watch::{start_watch, ChannelBody};
use super::{Handler, ServerLimits};
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::paths::Route;
use crate::requests::{NoBody, TargetList};
use crate::version::{API_HEADER, API_VERSION, MIN_CLIENT_API, SERVICE_VERSION_HEADER};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, ORIGIN, REFERER};
use hyper::{Request, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::Notify;

pub(super) type Body = BoxBody<Bytes, Infallible>;

pub(super) struct Shared<H> {
    pub(super) handler: H,
    pub(super) policy: AccessPolicy,
    pub(super) limits: ServerLimits,
    pub(super) service_version: String,
    /// Becomes true when the server stops: watch streams then end cleanly.
    pub(super) stop: tokio::sync::watch::Receiver<bool>,
}

pub(super) async fn respond<H: Handler>(
    request: Request<Incoming>,
    shared: &Shared<H>,
    peer: Peer,
    kill: Arc<Notify>,
) -> Response<Body> {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let mut response = match handle(request, shared, peer, kill).await {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(
                %peer,
                method,
                path,
                code = %error.code,
                "local API request refused"
            );
            error_response(error)
        }
    };
    let headers = response.headers_mut();
    headers.insert(API_HEADER, HeaderValue::from(API_VERSION));
    headers.insert(
        SERVICE_VERSION_HEADER,
        HeaderValue::from_str(&shared.service_version)
            .unwrap_or_else(|_| HeaderValue::from_static("unknown")),
    );
    response
}

async fn handle<H: Handler>(
    request: Request<Incoming>,
    shared: &Shared<H>,
    peer: Peer,
    kill: Arc<Notify>,
) -> Result<Response<Body>, ApiError> {
    if request.headers().contains_key(ORIGIN) || request.headers().contains_key(REFERER) {
        return Err(ApiError::new(
            ErrorCode::ForbiddenOrigin,
            "requests from web pages are refused (the request carried Origin or Referer): \
             use the runner-manager CLI or tray app",
        ));
    }
    let route = Route::resolve(request.method().as_str(), request.uri().path())?;
    // A target's profile comes in the query; every other route takes none.
    let query = request.uri().query();
    let route = match route {
        Route::UpdateTarget(t) => Route::UpdateTarget(
            t.with_query(query)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        ),
        Route::RemoveTarget(t) => Route::RemoveTarget(
            t.with_query(query)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        ),
        other => other,
    };
    check_client_api(&request)?;
    shared.policy.check(&peer, &route)?;
    let body = if route.takes_body() {
        read_body(request, shared.limits.max_body_bytes).await?
    } else {
        Bytes::new()
    };
    let h = &shared.handler;
    match route {
        Route::Version => json(StatusCode::OK, &h.version()),
        Route::Status => json(StatusCode::OK, &h.status(peer).await?),
        Route::Watch => {
            let start = h.watch(peer).await?;
            let rx = start_watch(start, &shared.limits, kill, shared.stop.clone())?;
            Ok(Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "application/x-ndjson")
                .body(ChannelBody::new(rx).boxed())
                .unwrap_or_else(|_| internal_error()))
        }
        Route::PutCredential => {
            let credential = parse_secret_body(&body)?;
            h.put_credential(peer, credential).await?;
            Ok(no_content())
        }
        Route::DeleteCredential => {
            h.delete_credential(peer).await?;
            Ok(no_content())
        }
        Route::Targets => {
            let targets = h.targets(peer).await?;
            json(StatusCode::OK, &TargetList { targets })
        }
        Route::AddTarget => {
            let add = parse_body(&body)?;
            json(StatusCode::OK, &h.add_target(peer, add).await?)
        }
        Route::UpdateTarget(target) => {
            let update: crate::requests::TargetUpdate = parse_body(&body)?;
            update.check()?;
            json(
                StatusCode::OK,
                &h.update_target(peer, target, update).await?,
            )
        }
        Route::RemoveTarget(target) => {
            h.remove_target(peer, target).await?;
            Ok(no_content())
        }
        Route::SetHostCapacity => {
            let capacity = parse_body(&body)?;
            json(StatusCode::OK, &h.set_host_capacity(peer, capacity).await?)
        }
        Route::SetHostAdmission => {
            let change = parse_body(&body)?;
            json(StatusCode::OK, &h.set_host_admission(peer, change).await?)
        }
        Route::Pool => json(StatusCode::OK, &h.pool(peer).await?),
        Route::JoinPool => {
            let join = parse_quiet_body(
                &body,
                "url (postgres://USER@HOST[:PORT]/DATABASE), password, label and host",
            )?;
            json(StatusCode::OK, &h.join_pool(peer, join).await?)
        }
        Route::LeavePool => {
            h.leave_pool(peer).await?;
            Ok(no_content())
        }
        Route::HostEnv => json(StatusCode::OK, &h.host_env(peer).await?),
        Route::ChangeHostEnv => {
            let change = parse_quiet_body(
                &body,
                "set (an object of NAME: VALUE) and unset (a list of names)",
            )?;
            json(StatusCode::OK, &h.change_host_env(peer, change).await?)
        }
        Route::Caches => json(StatusCode::OK, &h.caches(peer).await?),
        Route::ClearCaches => {
            let clear = parse_body(&body)?;
            json(StatusCode::OK, &h.clear_caches(peer, clear).await?)
        }
        Route::SetHostCaches => {
            let change = parse_body(&body)?;
            json(StatusCode::OK, &h.set_host_caches(peer, change).await?)
        }
        Route::HostDoctor => json(StatusCode::OK, &h.host_doctor(peer).await?),
        Route::Why => json(StatusCode::OK, &h.why(peer).await?),
        Route::Pause => {
            parse_no_body(&body)?;
            json(StatusCode::OK, &h.pause(peer).await?)
        }
        Route::Resume => {
            parse_no_body(&body)?;
            json(StatusCode::OK, &h.resume(peer).await?)
        }
        Route::StartSignIn => {
            let start: crate::signin::SignInStart = if body.iter().all(u8::is_ascii_whitespace) {
                crate::signin::SignInStart::default()
            } else {
                parse_body(&body)?
            };
            json(StatusCode::OK, &h.start_sign_in(peer, start).await?)
        }
        Route::SignInStatus => json(StatusCode::OK, &h.sign_in_status(peer).await?),
        Route::CancelSignIn => json(StatusCode::OK, &h.cancel_sign_in(peer).await?),
        Route::UpdateStatus => json(StatusCode::OK, &h.update_status(peer).await?),
        Route::Update => {
            let request: crate::update::UpdateRequest = if body.iter().all(u8::is_ascii_whitespace)
            {
                crate::update::UpdateRequest::default()
            } else {
                parse_body(&body)?
            };
            json(StatusCode::OK, &h.update(peer, request).await?)
        }
    }
}

/// A client that announces an API older than the service serves is refused up front.
fn check_client_api(request: &Request<Incoming>) -> Result<(), ApiError> {
    let Some(value) = request.headers().get(API_HEADER) else {
        return Ok(());
    };
    let client_api = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .ok_or_else(|| {
            ApiError::bad_request(format!("header {API_HEADER} must be an API version number"))
        })?;
    if client_api < MIN_CLIENT_API {
        return Err(ApiError::new(
            ErrorCode::UnsupportedVersion,
            format!(
                "this service needs clients speaking API {MIN_CLIENT_API} or newer but the \
                 client speaks {client_api}: update the client (CLI or tray)"
            ),
        ));
    }
    Ok(())
}

async fn read_body(request: Request<Incoming>, max: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than {max} bytes: send a smaller body"),
        )
    };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) {
        return Err(too_large());
    }
    match Limited::new(request.into_body(), max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(too_large()),
        Err(error) => Err(ApiError::bad_request(format!(
            "could not read the request body: {error}"
        ))),
    }
}

fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "malformed request body: {e}: fix the JSON and retry"
        ))
    })
}

/// Like [`parse_body`], but the error names only the position: serde's text can quote the
/// offending value, which here may be a token.
fn parse_secret_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "malformed credential body at line {} column {} ({:?} error; details withheld \
             because the body holds tokens): send access_token, expires_at, refresh_token, \
             refresh_expires_at and optionally login",
            e.line(),
            e.column(),
            e.classify()
        ))
    })
}

/// Like [`parse_body`] for bodies whose values may be sensitive (a proxy URL with a
/// password): the error names the position and the expected shape, not serde's text.
fn parse_quiet_body<T: DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "malformed request body at line {} column {} ({:?} error; details withheld because \
             the body may hold sensitive values): send {shape}",
            e.line(),
            e.column(),
            e.classify()
        ))
    })
}

fn parse_no_body(body: &[u8]) -> Result<(), ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    parse_body::<NoBody>(body).map(|_| ())
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Result<Response<Body>, ApiError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| ApiError::internal(format!("could not encode the answer: {e}")))?;
    Ok(Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed())
        .unwrap_or_else(|_| internal_error()))
}

fn no_content() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

fn error_response(error: ApiError) -> Response<Body> {
    let status =
        StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = ErrorBody::from(error);
    let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| {
        br#"{"code":"internal","message":"could not encode the error"}"#.to_vec()
    });
    let mut response = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn internal_error() -> Response<Body> {
    error_response(ApiError::internal("could not build the response"))
}
