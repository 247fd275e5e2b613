//! The release feed: `GET /repos/{owner}/{repo}/releases/latest` (GITHUB.md §6.2, also under
//! `/api/v3`) for releases published with [`crate::FakeGitHub::publish_release`], and their
//! asset bytes at `/_releases/{id}/{name}` (GitHub's `browser_download_url` host).
//!
//! Public, as for a public repository: no token needed. Weak `ETag` over the body; a matching
//! `If-None-Match` answers `304` without a body, not charged (counted as `not_modified`).
//! Endpoint names: `release_latest`, `release_asset`.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::faults::{self, Outcome};
use super::render::ts;
use super::{Reply, Req};
use crate::server::Shared;

/// `Some(owner/repo)` when `path` (without `/api/v3`) is a latest-release request.
pub(crate) fn latest_repo(path: &str) -> Option<String> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        // `actions/runner` is the runner package's feed (rest/handlers.rs).
        ["repos", "actions", "runner", "releases", "latest"] => None,
        ["repos", o, r, "releases", "latest"] => Some(format!("{o}/{r}")),
        _ => None,
    }
}

pub(crate) async fn latest(shared: &Arc<Shared>, req: &Req, path: &str, repo: &str) -> Response {
    let endpoint = "release_latest";
    if let Outcome::Respond(resp) = faults::apply(shared, req, path, endpoint, 0, None).await {
        return resp;
    }
    let api = match req.path.strip_prefix("/api/v3") {
        Some(_) => format!("{}/api/v3", shared.origin),
        None => shared.origin.clone(),
    };
    let release = {
        let w = shared.world();
        w.releases.iter().rev().find(|r| r.repo == repo).cloned()
    };
    let finish = |reply: Reply, charged: bool| {
        shared
            .world()
            .counters
            .record(endpoint, reply.status.as_u16(), charged);
        reply.into_response()
    };
    if req.method != Method::GET && req.method != Method::HEAD {
        return finish(Reply::error(StatusCode::NOT_FOUND, "Not Found"), false);
    }
    let Some(r) = release else {
        return finish(Reply::error(StatusCode::NOT_FOUND, "Not Found"), true);
    };
    let assets: Vec<Value> = r
        .assets
        .iter()
        .enumerate()
        .map(|(i, (name, file))| {
            let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
            json!({
                "id": r.id * 100 + i as u64, "name": name, "label": "",
                "content_type": "application/octet-stream", "state": "uploaded",
                "size": size, "download_count": 0,
                "browser_download_url": format!("{}/_releases/{}/{}", shared.origin, r.id, name),
                "url": format!("{api}/repos/{repo}/releases/assets/{}", r.id * 100 + i as u64),
                "created_at": ts(r.published_at), "updated_at": ts(r.published_at)
            })
        })
        .collect();
    let body = json!({
        "id": r.id, "tag_name": r.tag, "name": r.tag, "body": "", "draft": false,
        "prerelease": false, "created_at": ts(r.published_at), "published_at": ts(r.published_at),
        "html_url": format!("{}/{repo}/releases/tag/{}", shared.origin, r.tag),
        "url": format!("{api}/repos/{repo}/releases/{}", r.id),
        "tarball_url": format!("{api}/repos/{repo}/tarball/{}", r.tag),
        "zipball_url": format!("{api}/repos/{repo}/zipball/{}", r.tag),
        "assets": assets
    });
    let reply = Reply::ok(body);
    let (_, bytes) = reply.body_bytes();
    let etag = format!("W/\"{}\"", &hex::encode(Sha256::digest(&bytes))[..40]);
    let matched = req.header("if-none-match").is_some_and(|inm| {
        inm.split(',')
            .any(|t| t.trim().trim_start_matches("W/") == etag.trim_start_matches("W/"))
    });
    if matched {
        return finish(
            Reply::empty(StatusCode::NOT_MODIFIED).header("etag", etag),
            false,
        );
    }
    finish(
        reply
            .header("etag", etag)
            .header("cache-control", "public, max-age=60, s-maxage=60"),
        true,
    )
}

/// `/_releases/{id}/{name}`: an asset's bytes.
pub(crate) async fn asset(shared: &Arc<Shared>, req: &Req) -> Response {
    if let Outcome::Respond(resp) =
        faults::apply(shared, req, &req.path, "release_asset", 0, None).await
    {
        return resp;
    }
    let rest = req.path.trim_start_matches("/_releases/");
    let found = rest.split_once('/').and_then(|(id, name)| {
        let id: u64 = id.parse().ok()?;
        let w = shared.world();
        let r = w.releases.iter().find(|r| r.id == id)?;
        r.assets
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
    });
    let reply = match found {
        Some(p) if req.method == Method::GET => match tokio::fs::read(&p).await {
            Ok(bytes) => Reply::bytes(StatusCode::OK, "application/octet-stream", bytes),
            Err(e) => Reply::error(StatusCode::NOT_FOUND, &format!("asset unreadable: {e}")),
        },
        _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
    };
    shared
        .world()
        .counters
        .record("release_asset", reply.status.as_u16(), false);
    reply.into_response()
}
