//! HTTP front of the fake: one fallback handler that routes by path family (`/_fake` control,
//! `/_broker` listener protocol, `/_downloads` package bytes, `/login` OAuth, REST).

mod broker;
mod control;
mod faults;
mod oauth;
mod releases;
mod render;
mod rest;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};

use crate::server::Shared;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(dispatch).with_state(shared)
}

/// A parsed request, decoupled from axum so handlers are plain functions.
pub(crate) struct Req {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn query_pairs(&self) -> Vec<(String, String)> {
        serde_urlencoded::from_str(&self.query).unwrap_or_default()
    }

    pub fn query_value(&self, key: &str) -> Option<String> {
        self.query_pairs()
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// `Authorization: Bearer|token <t>`.
    pub fn bearer(&self) -> Option<String> {
        let v = self.header("authorization")?.trim();
        let (scheme, tok) = v.split_once(' ')?;
        (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
            .then(|| tok.trim().to_string())
            .filter(|t| !t.is_empty())
    }
}

async fn dispatch(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 16 * 1024 * 1024).await {
        Ok(b) => b,
        Err(_) => {
            return Reply::error(StatusCode::BAD_REQUEST, "Could not read the request body")
                .into_response()
        }
    };
    let req = Req {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        body,
    };
    let path = req.path.clone();
    let uas = || {
        req.headers
            .get_all("user-agent")
            .iter()
            .map(|v| v.to_str().unwrap_or("<not text>"))
    };
    if path.starts_with("/login/") || !path.starts_with("/_") {
        // What GitHub's API and OAuth hosts would see (not the control API, the fake runner's
        // broker protocol or the package download host).
        shared.world().counters.record_user_agents(uas());
    } else if path.starts_with("/_downloads/") {
        shared.world().counters.record_download_user_agents(uas());
    }
    if path == "/_fake" || path.starts_with("/_fake/") {
        control::handle(&shared, &req)
    } else if path.starts_with("/_broker/") {
        broker::handle(&shared, &req).await
    } else if path.starts_with("/_downloads/") {
        download(&shared, &req).await
    } else if path.starts_with("/_releases/") {
        releases::asset(&shared, &req).await
    } else if path.starts_with("/login/") {
        oauth::handle(&shared, &req).await
    } else if let Some(repo) = releases::latest_repo(path.strip_prefix("/api/v3").unwrap_or(&path))
    {
        let rest = path.strip_prefix("/api/v3").unwrap_or(&path).to_string();
        releases::latest(&shared, &req, &rest, &repo).await
    } else {
        rest::handle(&shared, &req).await
    }
}

/// Serves the runner package set with `set_runner_package` (the `download_url` of §3.7).
async fn download(shared: &Arc<Shared>, req: &Req) -> Response {
    let name = req.path.trim_start_matches("/_downloads/").to_string();
    let pkg = shared.world().package.clone();
    let reply = match pkg {
        Some(p) if p.filename == name && req.method == Method::GET => {
            match tokio::fs::read(&p.path).await {
                Ok(bytes) => Reply::bytes(StatusCode::OK, "application/octet-stream", bytes),
                Err(e) => Reply::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("package file unreadable: {e}"),
                ),
            }
        }
        _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
    };
    shared
        .world()
        .record_request("package_download", reply.status.as_u16(), false);
    reply.into_response()
}

/// Body of a reply.
pub(crate) enum Payload {
    Json(Value),
    Raw {
        content_type: String,
        bytes: Vec<u8>,
    },
    Empty,
}

/// A response under construction.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub payload: Payload,
    pub headers: Vec<(String, String)>,
}

pub(crate) const DOCS: &str = "https://docs.github.com/rest";

impl Reply {
    pub fn json(status: StatusCode, value: Value) -> Reply {
        Reply {
            status,
            payload: Payload::Json(value),
            headers: Vec::new(),
        }
    }

    pub fn ok(value: Value) -> Reply {
        Reply::json(StatusCode::OK, value)
    }

    pub fn empty(status: StatusCode) -> Reply {
        Reply {
            status,
            payload: Payload::Empty,
            headers: Vec::new(),
        }
    }

    pub fn bytes(status: StatusCode, content_type: &str, bytes: Vec<u8>) -> Reply {
        Reply {
            status,
            payload: Payload::Raw {
                content_type: content_type.to_string(),
                bytes,
            },
            headers: Vec::new(),
        }
    }

    /// GitHub's error shape: `{message, documentation_url, status: "NNN"}`.
    pub fn error(status: StatusCode, message: &str) -> Reply {
        // Built by hand to keep GitHub's key order (serde_json sorts object keys).
        let body = format!(
            r#"{{"message":{},"documentation_url":"{DOCS}","status":"{}"}}"#,
            Value::String(message.to_string()),
            status.as_u16()
        );
        Reply::bytes(status, "application/json; charset=utf-8", body.into_bytes())
    }

    /// 422 "Validation Failed" with `errors[]`.
    pub fn validation(resource: &str, field: &str, code: &str) -> Reply {
        Reply::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": "Validation Failed",
                   "errors": [{"resource": resource, "field": field, "code": code}],
                   "documentation_url": DOCS, "status": "422"}),
        )
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// Serialized body bytes and content type.
    pub fn body_bytes(&self) -> (Option<&str>, Vec<u8>) {
        match &self.payload {
            Payload::Json(v) => (
                Some("application/json; charset=utf-8"),
                serde_json::to_vec(v).unwrap_or_default(),
            ),
            Payload::Raw {
                content_type,
                bytes,
            } => (Some(content_type.as_str()), bytes.clone()),
            Payload::Empty => (None, Vec::new()),
        }
    }

    pub fn into_response(self) -> Response {
        let (ct, bytes) = self.body_bytes();
        let ct = ct.map(str::to_string);
        let mut resp = Response::new(Body::from(bytes));
        *resp.status_mut() = self.status;
        if let Some(ct) = ct {
            set_header(resp.headers_mut(), "content-type", &ct);
        }
        for (k, v) in &self.headers {
            set_header(resp.headers_mut(), k, v);
        }
        resp
    }
}

pub(crate) fn set_header(h: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        h.append(n, v);
    }
}

/// Body parameters sent as JSON or as a form (OAuth endpoints accept both).
pub(crate) fn params(req: &Req) -> Vec<(String, String)> {
    let ct = req.header("content-type").unwrap_or("");
    let from_json = || -> Option<Vec<(String, String)>> {
        let v: Value = serde_json::from_slice(&req.body).ok()?;
        let obj = v.as_object()?;
        Some(
            obj.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect(),
        )
    };
    let from_form = || serde_urlencoded::from_bytes::<Vec<(String, String)>>(&req.body).ok();
    let body = if ct.contains("json") {
        from_json().or_else(from_form)
    } else {
        from_form().or_else(from_json)
    };
    let mut all = body.unwrap_or_default();
    all.extend(req.query_pairs());
    all
}

pub(crate) fn param(params: &[(String, String)], key: &str) -> Option<String> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}
