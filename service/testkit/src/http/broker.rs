//! The fake-only job broker the fake runner listener talks to (FAKE_PROTOCOL.md). Never charged
//! against rate limits; counted as endpoint `broker`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::faults::{self, Outcome};
use super::{Reply, Req};
use crate::server::Shared;
use crate::types::Conclusion;
use crate::world::{Assignment, BrokerError};

const GONE: &str = "The runner no longer exists on the server";

pub(crate) async fn handle(shared: &Arc<Shared>, req: &Req) -> Response {
    if let Outcome::Respond(resp) = faults::apply(shared, req, &req.path, "broker", 0, None).await {
        return resp;
    }
    let reply = route(shared, req).await;
    shared
        .world()
        .record_request("broker", reply.status.as_u16(), false);
    reply.into_response()
}

fn msg(status: StatusCode, message: &str) -> Reply {
    Reply::json(status, json!({"message": message}))
}

fn broker_error(e: BrokerError) -> Reply {
    match e {
        BrokerError::Unauthorized => msg(StatusCode::UNAUTHORIZED, "Bad credentials"),
        BrokerError::Gone => msg(StatusCode::NOT_FOUND, GONE),
        BrokerError::Conflict => msg(
            StatusCode::CONFLICT,
            "A session for this runner already exists.",
        ),
        BrokerError::NotFound => msg(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn assignment_json(a: &Assignment) -> Value {
    let behaviour = a.behaviour.as_str();
    let mut job = json!({"job_id": a.job_id, "run_id": a.run_id, "name": a.name, "display_name": a.name,
                   "behaviour": behaviour, "duration_ms": u64::try_from(a.duration.as_millis()).unwrap_or(u64::MAX),
                   "memory_mb": a.memory_mb, "memory_children": a.memory_children});
    if let (Some(command), Some(obj)) = (&a.command, job.as_object_mut()) {
        obj.insert("command".into(), Value::String(command.clone()));
    }
    json!({ "job": job })
}

async fn route(shared: &Arc<Shared>, req: &Req) -> Reply {
    let secret = req.bearer().unwrap_or_default();
    let segs: Vec<&str> = req
        .path
        .trim_start_matches("/_broker/")
        .split('/')
        .collect();
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    match (&req.method, segs.as_slice()) {
        (&Method::POST, ["sessions"]) => {
            let Some(runner_id) = body.get("runner_id").and_then(Value::as_u64) else {
                return msg(
                    StatusCode::BAD_REQUEST,
                    "Problems parsing JSON: runner_id required",
                );
            };
            let os = body.get("os").and_then(Value::as_str);
            match shared.world().broker_create_session(&secret, runner_id, os) {
                Ok(sid) => Reply::ok(json!({"session_id": sid})),
                Err(e) => broker_error(e),
            }
        }
        (&Method::GET, ["sessions", sid, "message"]) => poll(shared, &secret, sid).await,
        (&Method::DELETE, ["sessions", sid]) => {
            match shared.world().broker_delete_session(&secret, sid) {
                Ok(()) => Reply::empty(StatusCode::NO_CONTENT),
                Err(e) => broker_error(e),
            }
        }
        (&Method::POST, ["jobs", id, "complete"]) => {
            let Ok(id) = id.parse::<u64>() else {
                return msg(StatusCode::NOT_FOUND, "Not Found");
            };
            let conclusion = match body.get("result").and_then(Value::as_str) {
                Some("succeeded") => Conclusion::Success,
                Some("failed") => Conclusion::Failure,
                Some("cancelled") | Some("canceled") => Conclusion::Cancelled,
                _ => {
                    return msg(
                        StatusCode::BAD_REQUEST,
                        "result must be succeeded, failed or cancelled",
                    )
                }
            };
            match shared.world().broker_complete(&secret, id, conclusion) {
                Ok(()) => Reply::ok(json!({})),
                Err(e) => broker_error(e),
            }
        }
        _ => msg(StatusCode::NOT_FOUND, "Not Found"),
    }
}

/// Long-poll: hold up to `poll_hold`, checking for an assignable job every few milliseconds.
async fn poll(shared: &Arc<Shared>, secret: &str, sid: &str) -> Reply {
    let deadline = Instant::now() + shared.config.poll_hold;
    let mut stop = shared.shutdown.clone();
    loop {
        match shared.world().broker_poll(secret, sid) {
            Err(e) => return broker_error(e),
            Ok(Some(a)) => return Reply::ok(assignment_json(&a)),
            Ok(None) => {}
        }
        if Instant::now() >= deadline || *stop.borrow() {
            return Reply::empty(StatusCode::NO_CONTENT);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(25)) => {}
            _ = stop.changed() => {}
        }
    }
}
