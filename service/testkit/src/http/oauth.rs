//! OAuth device flow and token refresh (GITHUB.md §1), plus a tiny browser page to approve
//! or deny a code by hand in demos.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::faults::{self, Outcome};
use super::{param, params, Reply, Req};
use crate::server::Shared;
use crate::world::DeviceState;

const ERROR_URI: &str = "https://docs.github.com/developers/apps/authorizing-oauth-apps#error-codes-for-the-device-flow";
const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

pub(crate) async fn handle(shared: &Arc<Shared>, req: &Req) -> Response {
    let endpoint = match (&req.method, req.path.as_str()) {
        (&Method::POST, "/login/device/code") => "device_code",
        (&Method::POST, "/login/oauth/access_token") => "access_token",
        (&Method::GET, "/login/device") | (&Method::POST, "/login/device") => "device_page",
        _ => {
            shared.world().record_request("unknown", 404, false);
            return Reply::error(StatusCode::NOT_FOUND, "Not Found").into_response();
        }
    };
    if let Outcome::Respond(resp) = faults::apply(shared, req, &req.path, endpoint, 0, None).await {
        return resp;
    }
    let reply = match endpoint {
        "device_code" => device_code(shared, req),
        "access_token" => access_token(shared, req),
        _ if req.method == Method::GET => page(StatusCode::OK, &device_form("")),
        _ => device_submit(shared, req),
    };
    shared
        .world()
        .record_request(endpoint, reply.status.as_u16(), false);
    reply.into_response()
}

/// Answers in the format `Accept` asks for: JSON, else `application/x-www-form-urlencoded`.
fn answer(req: &Req, status: StatusCode, value: Value) -> Reply {
    if req.header("accept").is_some_and(|a| a.contains("json")) {
        return Reply::json(status, value);
    }
    let pairs: Vec<(String, String)> = value
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let body = serde_urlencoded::to_string(pairs).unwrap_or_default();
    Reply::bytes(
        status,
        "application/x-www-form-urlencoded; charset=utf-8",
        body.into_bytes(),
    )
}

fn oauth_error(req: &Req, error: &str, description: &str) -> Reply {
    answer(
        req,
        StatusCode::OK,
        json!({"error": error, "error_description": description, "error_uri": ERROR_URI}),
    )
}

fn device_code(shared: &Arc<Shared>, req: &Req) -> Reply {
    let p = params(req);
    match param(&p, "client_id") {
        Some(c) if c == shared.config.client_id => {}
        // GitHub answers a missing (or unknown) client_id with a bare 404.
        _ => return Reply::error(StatusCode::NOT_FOUND, "Not Found"),
    }
    let mut w = shared.world();
    if w.device_flow_disabled {
        return answer(
            req,
            StatusCode::BAD_REQUEST,
            json!({"error": "device_flow_disabled",
                   "error_description": "Device Flow must be explicitly enabled for this App",
                   "error_uri": ERROR_URI}),
        );
    }
    let (device_code, user_code) = w.new_device();
    let body = json!({
        "device_code": device_code,
        "user_code": user_code,
        "verification_uri": format!("{}/login/device", shared.origin),
        "expires_in": w.device_expires_in.as_secs().max(1),
        "interval": w.device_interval.as_secs()
    });
    drop(w);
    answer(req, StatusCode::OK, body)
}

/// Whole seconds left, rounded up, so a fresh token reports exactly its lifetime.
fn ceil_secs(d: chrono::Duration) -> i64 {
    (d.num_milliseconds().max(0) + 999) / 1000
}

fn token_body(t: &crate::IssuedToken) -> Value {
    let now = chrono::Utc::now();
    let mut v = json!({
        "access_token": t.access_token,
        "expires_in": ceil_secs(t.expires_at - now),
        "scope": "",
        "token_type": "bearer"
    });
    if let (Some(r), Some(re), Some(o)) =
        (&t.refresh_token, t.refresh_expires_at, v.as_object_mut())
    {
        o.insert("refresh_token".into(), json!(r));
        o.insert(
            "refresh_token_expires_in".into(),
            json!(ceil_secs(re - now)),
        );
    }
    v
}

fn access_token(shared: &Arc<Shared>, req: &Req) -> Reply {
    let p = params(req);
    let grant = param(&p, "grant_type");
    if grant.as_deref() != Some(DEVICE_GRANT) && grant.as_deref() != Some("refresh_token") {
        return oauth_error(
            req,
            "unsupported_grant_type",
            "The grant type is not supported.",
        );
    }
    if param(&p, "client_id").as_deref() != Some(shared.config.client_id.as_str()) {
        return oauth_error(
            req,
            "incorrect_client_credentials",
            "The client_id and/or client_secret passed are incorrect.",
        );
    }
    let mut w = shared.world();
    if w.device_flow_disabled && grant.as_deref() == Some(DEVICE_GRANT) {
        return oauth_error(
            req,
            "device_flow_disabled",
            "Device Flow must be explicitly enabled for this App",
        );
    }
    if grant.as_deref() == Some("refresh_token") {
        let Some(refresh) = param(&p, "refresh_token") else {
            return oauth_error(
                req,
                "bad_refresh_token",
                "The refresh token passed is incorrect or expired.",
            );
        };
        return match w.refresh_token(&refresh) {
            Some(t) => answer(req, StatusCode::OK, token_body(&t)),
            None => oauth_error(
                req,
                "bad_refresh_token",
                "The refresh token passed is incorrect or expired.",
            ),
        };
    }
    let code = param(&p, "device_code").unwrap_or_default();
    let now = Instant::now();
    let Some(d) = w.devices.get_mut(&code) else {
        return oauth_error(
            req,
            "incorrect_device_code",
            "The device_code provided is not valid.",
        );
    };
    if d.state == DeviceState::Consumed {
        return oauth_error(
            req,
            "incorrect_device_code",
            "The device_code provided is not valid.",
        );
    }
    if now >= d.expires_at {
        return oauth_error(req, "expired_token", "The device_code has expired.");
    }
    if d.state == DeviceState::Denied {
        return oauth_error(
            req,
            "access_denied",
            "The authorization request was denied.",
        );
    }
    let too_soon = d
        .last_poll
        .is_some_and(|t| now.duration_since(t) < Duration::from_secs(d.interval_secs));
    d.last_poll = Some(now);
    if too_soon {
        d.interval_secs += 5;
        let interval = d.interval_secs;
        return answer(
            req,
            StatusCode::OK,
            json!({"error": "slow_down",
                   "error_description": "Too many requests have been made in the same timeframe.",
                   "error_uri": ERROR_URI, "interval": interval}),
        );
    }
    match d.state.clone() {
        DeviceState::Approved(login) => {
            d.state = DeviceState::Consumed;
            match w.issue_token(&login) {
                Ok(t) => answer(req, StatusCode::OK, token_body(&t)),
                Err(_) => oauth_error(
                    req,
                    "access_denied",
                    "The authorization request was denied.",
                ),
            }
        }
        _ => oauth_error(
            req,
            "authorization_pending",
            "The authorization request is still pending.",
        ),
    }
}

fn page(status: StatusCode, body: &str) -> Reply {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Fake GitHub - Device activation</title></head><body>{body}</body></html>"
    );
    Reply::bytes(status, "text/html; charset=utf-8", html.into_bytes())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn device_form(note: &str) -> String {
    format!(
        "<h1>Device activation (fake GitHub)</h1><p>{}</p>\
         <form method=\"post\" action=\"/login/device\">\
         <label>Code <input name=\"user_code\" placeholder=\"XXXX-XXXX\"></label> \
         <label>Sign in as <input name=\"login\" value=\"octo\"></label> \
         <button name=\"action\" value=\"approve\">Authorize</button> \
         <button name=\"action\" value=\"deny\">Cancel</button></form>",
        escape(note)
    )
}

fn device_submit(shared: &Arc<Shared>, req: &Req) -> Reply {
    let p = params(req);
    let code = param(&p, "user_code").unwrap_or_default();
    let login = param(&p, "login").unwrap_or_default();
    let action = param(&p, "action").unwrap_or_else(|| "approve".into());
    let result = {
        let mut w = shared.world();
        if action == "deny" {
            w.deny_device(&code)
        } else {
            w.approve_device(&code, &login)
        }
    };
    match result {
        Ok(()) if action == "deny" => page(StatusCode::OK, "<h1>Authorization cancelled</h1>"),
        Ok(()) => page(
            StatusCode::OK,
            "<h1>Congratulations, you're all set!</h1><p>Your device is now connected.</p>",
        ),
        Err(e) => page(StatusCode::BAD_REQUEST, &device_form(&e.to_string())),
    }
}
