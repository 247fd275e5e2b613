//! The REST API (GITHUB.md §0, §2–§5), served under `/` and `/api/v3`: routing, the shared
//! conventions (auth, User-Agent, API version, ETag/304, rate limit, pagination) and handlers.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use base64::Engine;
use chrono::Utc;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::faults::{self, Outcome};
use super::render::{self, ts, Urls};
use super::{Reply, Req, DOCS};
use crate::server::Shared;
use crate::types::RunnerScope;
use crate::world::{random_string, Access, World};

mod handlers;
mod paginate;
mod routes;

use handlers::execute;
use paginate::paginate;
use routes::{route, Route};

const API_VERSIONS: [&str; 2] = ["2022-11-28", "2026-03-10"];
const RATE_DOCS: &str =
    "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-primary-rate-limits";

/// The exact 401 of §1.4 (95 bytes).
pub(crate) fn bad_credentials() -> Reply {
    Reply::error(StatusCode::UNAUTHORIZED, "Bad credentials")
}

/// Per-request context for handlers.
struct Ctx<'a> {
    req: &'a Req,
    login: String,
    urls: Urls,
    origin: String,
}

pub(crate) async fn handle(shared: &Arc<Shared>, req: &Req) -> Response {
    let (prefix, path) = match req.path.strip_prefix("/api/v3") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => ("/api/v3", rest.to_string()),
        _ => ("", req.path.clone()),
    };
    let origin = shared.origin.clone();
    let urls = Urls {
        api: format!("{origin}{prefix}"),
        html: origin.clone(),
    };
    let version = req.header("x-github-api-version").map(str::to_string);
    let request_id = shared.world().request_id();
    let base = |reply: Reply| -> Reply {
        reply
            .header("x-github-request-id", request_id.clone())
            .header("x-github-media-type", "github.v3; format=json")
            .header(
                "x-github-api-version-selected",
                version
                    .clone()
                    .filter(|v| API_VERSIONS.contains(&v.as_str()))
                    .unwrap_or_else(|| API_VERSIONS[0].into()),
            )
    };

    // Trailing slash and unknown paths: 404, as GitHub.
    let route = if path.len() > 1 && path.ends_with('/') {
        None
    } else {
        route(&req.method, &path)
    };
    let Some(route) = route else {
        shared
            .world()
            .record_rest_request(req.bearer().as_deref(), "unknown", 404, false);
        return base(Reply::error(StatusCode::NOT_FOUND, "Not Found")).into_response();
    };
    let endpoint = route.endpoint();
    let login = req.bearer().and_then(|t| shared.world().token_login(&t));
    let user_id = login
        .as_ref()
        .and_then(|l| shared.world().account(l).map(|a| a.id))
        .unwrap_or(0);

    let bearer = req.bearer();
    if let Outcome::Respond(resp) =
        faults::apply(shared, req, &path, &endpoint, user_id, bearer.as_deref()).await
    {
        return resp;
    }

    let target = if req.query.is_empty() {
        path.clone()
    } else {
        format!("{path}?{}", req.query)
    };
    let finish = |reply: Reply, charged: bool| {
        let mut world = shared.world();
        world.record_rest_request(bearer.as_deref(), &endpoint, reply.status.as_u16(), charged);
        world.describe_last_request(&target);
        drop(world);
        base(reply).into_response()
    };
    if req
        .header("user-agent")
        .is_none_or(|ua| ua.trim().is_empty())
    {
        return finish(
            Reply::error(
                StatusCode::FORBIDDEN,
                "Request forbidden by administrative rules. Please make sure your request has a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). Check https://developer.github.com for other possible causes.",
            ),
            false,
        );
    }
    if let Some(v) = &version {
        if !API_VERSIONS.contains(&v.as_str()) {
            return finish(
                Reply::error(
                    StatusCode::BAD_REQUEST,
                    &format!("API version {v} is not supported."),
                ),
                false,
            );
        }
    }
    let Some(login) = login else {
        let reply = if req.bearer().is_some() {
            bad_credentials()
        } else {
            Reply::error(StatusCode::UNAUTHORIZED, "Requires authentication")
        };
        return finish(reply, false);
    };

    let ctx = Ctx {
        req,
        login,
        urls,
        origin,
    };
    let token = req.bearer().unwrap_or_default();
    let mut w = shared.world();
    let state = w.rate_state(user_id);
    let limit = w.rate_limit;
    let exhausted = state.used >= limit;
    let is_get = req.method == Method::GET || req.method == Method::HEAD;
    let is_rate_limit = matches!(route, Route::RateLimit);

    let reply = if exhausted && !is_get && !is_rate_limit {
        None
    } else {
        Some(execute(&mut w, &route, &ctx))
    };

    let rate_headers = |reply: Reply, used: u64| -> Reply {
        reply
            .header("x-ratelimit-limit", limit.to_string())
            .header(
                "x-ratelimit-remaining",
                limit.saturating_sub(used).to_string(),
            )
            .header("x-ratelimit-used", used.to_string())
            .header("x-ratelimit-reset", state.reset.to_string())
            .header("x-ratelimit-resource", "core")
    };
    let limited = || {
        Reply::json(
            StatusCode::FORBIDDEN,
            json!({"message": format!("API rate limit exceeded for user ID {user_id}."),
                   "documentation_url": RATE_DOCS, "status": "403"}),
        )
    };

    let Some(mut reply) = reply else {
        drop(w);
        return finish(rate_headers(limited(), limit.max(state.used)), false);
    };

    // The primary limit is checked before anything else, so an exhausted user gets 403 even
    // for a conditional request that would have been a 304.
    if exhausted && !is_rate_limit {
        drop(w);
        return finish(rate_headers(limited(), limit.max(state.used)), false);
    }

    // Weak ETag over body + token: differs per user, stable while the resource is unchanged.
    if is_get && reply.status == StatusCode::OK {
        let (_, bytes) = reply.body_bytes();
        let mut h = Sha256::new();
        h.update(&bytes);
        h.update(token.as_bytes());
        let etag = format!("W/\"{}\"", &hex::encode(h.finalize())[..40]);
        let lists = shared.config.if_none_match_lists;
        let matched = req.header("if-none-match").is_some_and(|inm| {
            let one = |t: &str| {
                let t = t.trim().trim_start_matches("W/");
                t == "*" || t == etag.trim_start_matches("W/")
            };
            if lists {
                inm.split(',').any(one)
            } else {
                one(inm)
            }
        });
        if matched {
            drop(w);
            let r = Reply::empty(StatusCode::NOT_MODIFIED)
                .header("etag", etag)
                .header("cache-control", "private, max-age=60, s-maxage=60");
            return finish(rate_headers(r, state.used), false);
        }
        reply = reply
            .header("etag", etag)
            .header("cache-control", "private, max-age=60, s-maxage=60")
            .header("vary", "Accept, Authorization, Cookie, X-GitHub-OTP");
    }
    if is_rate_limit {
        drop(w);
        return finish(rate_headers(reply, state.used), false);
    }
    let after = w.charge(user_id);
    drop(w);
    finish(rate_headers(reply, after.used), true)
}
