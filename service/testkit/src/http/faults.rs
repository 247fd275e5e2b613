//! Applying injected faults to a request before it is handled.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use rand::Rng;
use serde_json::json;

use super::{Reply, Req, DOCS};
use crate::fault::Fault;
use crate::server::Shared;

/// Picks the first armed rule matching this request and consumes one of its `times`.
fn pick(shared: &Shared, req: &Req, path: &str, endpoint: &str) -> Option<Fault> {
    let mut w = shared.world();
    let idx = w.faults.iter().position(|r| {
        r.times != Some(0)
            && r.endpoint.matches(req.method.as_str(), path, endpoint)
            && match r.fault {
                // A rate outside 0..=1 (NaN included, which `random_bool` would panic on) from the
                // Rust API is read as never or always; the control API refuses it.
                Fault::Status5xx { rate, .. } => {
                    rate >= 1.0 || (rate > 0.0 && rand::rng().random_bool(rate))
                }
                _ => true,
            }
    })?;
    let fault = w.faults[idx].fault.clone();
    if let Some(t) = w.faults[idx].times.as_mut() {
        *t = t.saturating_sub(1);
        if *t == 0 {
            w.faults.remove(idx);
        }
    }
    Some(fault)
}

/// Outcome of fault handling: a finished faulty response, or continue normally.
pub(crate) enum Outcome {
    Respond(Response),
    Continue,
}

/// Applies a fault. `path` is the route path (without `/api/v3`). Faulty answers are counted
/// under `endpoint` as errors (a malformed 200 counts as a request only), and under `token`
/// when given (a REST request's token).
pub(crate) async fn apply(
    shared: &Arc<Shared>,
    req: &Req,
    path: &str,
    endpoint: &str,
    user_id: u64,
    token: Option<&str>,
) -> Outcome {
    let Some(fault) = pick(shared, req, path, endpoint) else {
        return Outcome::Continue;
    };
    tracing::debug!(endpoint, ?fault, "injecting fault");
    let record = |status: u16| {
        shared
            .world()
            .record_rest_request(token, endpoint, status, false)
    };
    match fault {
        Fault::Latency(d) => {
            let mut stop = shared.shutdown.clone();
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = stop.wait_for(|v| *v) => {}
            }
            Outcome::Continue
        }
        Fault::Status5xx { status, .. } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            record(code.as_u16());
            let msg = if code == StatusCode::BAD_GATEWAY {
                "Server Error"
            } else {
                "Service Unavailable"
            };
            Outcome::Respond(Reply::error(code, msg).into_response())
        }
        Fault::Unauthorized => {
            record(401);
            Outcome::Respond(super::rest::bad_credentials().into_response())
        }
        Fault::RateLimited {
            status,
            retry_after,
            secondary,
        } => {
            let code = if status == 429 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::FORBIDDEN
            };
            record(code.as_u16());
            let (limit, used, remaining, reset) = {
                let mut w = shared.world();
                let st = w.rate_state(user_id);
                let limit = w.rate_limit;
                if secondary {
                    (limit, st.used, limit.saturating_sub(st.used), st.reset)
                } else {
                    (limit, limit, 0, st.reset)
                }
            };
            let message = if secondary {
                "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID FAKE.".to_string()
            } else {
                format!("API rate limit exceeded for user ID {user_id}.")
            };
            let mut reply = Reply::json(
                code,
                json!({"message": message, "documentation_url": DOCS, "status": code.as_u16().to_string()}),
            )
            .header("x-ratelimit-limit", limit.to_string())
            .header("x-ratelimit-remaining", remaining.to_string())
            .header("x-ratelimit-used", used.to_string())
            .header("x-ratelimit-reset", reset.to_string())
            .header("x-ratelimit-resource", "core");
            if let Some(s) = retry_after {
                reply = reply.header("retry-after", s.to_string());
            }
            Outcome::Respond(reply.into_response())
        }
        Fault::Refuse { status, message } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
            record(code.as_u16());
            Outcome::Respond(Reply::error(code, &message).into_response())
        }
        Fault::MalformedJson => {
            record(200);
            Outcome::Respond(
                Reply::bytes(
                    StatusCode::OK,
                    "application/json; charset=utf-8",
                    br#"{"total_count": 1, "runners": [{"id": "#.to_vec(),
                )
                .into_response(),
            )
        }
        Fault::DropConnection => {
            record(0);
            // The body stream fails at once: hyper aborts the connection without a complete answer.
            let stream = futures_util::stream::once(async {
                Err::<axum::body::Bytes, std::io::Error>(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "fault: drop connection",
                ))
            });
            let mut resp = Response::new(Body::from_stream(stream));
            super::set_header(
                resp.headers_mut(),
                "content-type",
                "application/json; charset=utf-8",
            );
            Outcome::Respond(resp)
        }
        Fault::Stall => {
            record(0);
            let mut stop = shared.shutdown.clone();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
                _ = stop.wait_for(|v| *v) => {}
            }
            Outcome::Respond(
                Reply::error(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable")
                    .into_response(),
            )
        }
    }
}
