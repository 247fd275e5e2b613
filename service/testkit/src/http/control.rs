//! HTTP control API under `/_fake/` mirroring the Rust API, so demos and other processes can
//! drive the fake. JSON in, JSON out; errors are 400/404 `{"error": "..."}`. Not counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::Reply;
use super::Req;
use crate::error::FakeError;
use crate::fault::FaultRule;
use crate::server::Shared;
use crate::types::{Conclusion, InstallationRepos, JobSpec};

fn bad(msg: impl std::fmt::Display) -> Reply {
    Reply::json(StatusCode::BAD_REQUEST, json!({"error": msg.to_string()}))
}

fn from_fake<T: serde::Serialize>(r: Result<T, FakeError>) -> Reply {
    match r {
        Ok(v) => Reply::ok(serde_json::to_value(v).unwrap_or(Value::Null)),
        Err(e) => bad(e),
    }
}

fn body<T: for<'de> Deserialize<'de>>(req: &Req) -> Result<T, Reply> {
    serde_json::from_slice(&req.body).map_err(|e| bad(format!("bad JSON body: {e}")))
}

#[derive(Deserialize)]
struct Login {
    login: String,
}

#[derive(Deserialize)]
struct Member {
    login: String,
    #[serde(default)]
    admin: bool,
}

#[derive(Deserialize)]
struct NewRepo {
    full_name: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Selection {
    Keyword(String),
    List(Vec<String>),
}

#[derive(Deserialize)]
struct NewInstallation {
    account: String,
    repositories: Selection,
}

#[derive(Deserialize)]
struct Token {
    token: String,
}

#[derive(Deserialize)]
struct Device {
    user_code: String,
    #[serde(default)]
    login: String,
}

#[derive(Deserialize)]
struct NewRun {
    repo: String,
    jobs: Vec<JobSpec>,
}

#[derive(Deserialize)]
struct Finish {
    conclusion: Conclusion,
}

#[derive(Deserialize)]
struct Limits {
    limit: Option<u64>,
    remaining: Option<u64>,
}

#[derive(Deserialize)]
struct NewReleaseAsset {
    name: String,
    path: std::path::PathBuf,
}

#[derive(Deserialize)]
struct NewRelease {
    repo: String,
    tag: String,
    assets: Vec<NewReleaseAsset>,
}

#[derive(Deserialize)]
struct Lifetimes {
    access_secs: u64,
    refresh_secs: u64,
}

pub(crate) fn handle(shared: &Arc<Shared>, req: &Req) -> Response {
    match route(shared, req) {
        Ok(r) | Err(r) => r.into_response(),
    }
}

fn route(shared: &Arc<Shared>, req: &Req) -> Result<Reply, Reply> {
    let segs: Vec<&str> = req
        .path
        .trim_start_matches("/_fake")
        .trim_matches('/')
        .split('/')
        .collect();
    let mut w = shared.world();
    let post = req.method == Method::POST;
    let get = req.method == Method::GET;
    let del = req.method == Method::DELETE;
    let id = |s: &str| s.parse::<u64>().map_err(|_| bad(format!("not an id: {s}")));
    Ok(match segs.as_slice() {
        [""] if get => Reply::ok(json!({
            "origin": shared.origin, "api_v3": format!("{}/api/v3", shared.origin),
            "client_id": shared.config.client_id,
            "device_page": format!("{}/login/device", shared.origin)
        })),
        ["users"] if post => from_fake(
            w.create_user(&body::<Login>(req)?.login)
                .map(|id| json!({"id": id})),
        ),
        ["orgs"] if post => from_fake(
            w.create_org(&body::<Login>(req)?.login)
                .map(|id| json!({"id": id})),
        ),
        ["orgs", org, "members"] if post => {
            let m: Member = body(req)?;
            from_fake(w.add_org_member(org, &m.login, m.admin).map(|_| json!({})))
        }
        ["repos"] if post => from_fake(
            w.create_repo(&body::<NewRepo>(req)?.full_name)
                .map(|id| json!({"id": id})),
        ),
        ["repos", o, r, "collaborators"] if post => {
            let m: Member = body(req)?;
            from_fake(
                w.add_collaborator(&format!("{o}/{r}"), &m.login, m.admin)
                    .map(|_| json!({})),
            )
        }
        ["installations"] if post => {
            let b: NewInstallation = body(req)?;
            let repos = match b.repositories {
                Selection::Keyword(k) if k == "all" => InstallationRepos::All,
                Selection::Keyword(k) => {
                    return Err(bad(format!(
                        "repositories must be \"all\" or a list, not {k:?}"
                    )))
                }
                Selection::List(l) => InstallationRepos::Selected(l),
            };
            from_fake(
                w.create_installation(&b.account, repos)
                    .map(|id| json!({"id": id})),
            )
        }
        ["tokens"] if post => from_fake(w.issue_token(&body::<Login>(req)?.login)),
        ["tokens", "revoke"] if post => {
            Reply::ok(json!({"revoked": w.revoke_token(&body::<Token>(req)?.token)}))
        }
        ["device", "approve"] if post => {
            let d: Device = body(req)?;
            from_fake(w.approve_device(&d.user_code, &d.login).map(|_| json!({})))
        }
        ["device", "deny"] if post => {
            let d: Device = body(req)?;
            from_fake(w.deny_device(&d.user_code).map(|_| json!({})))
        }
        ["runs"] if post => {
            let b: NewRun = body(req)?;
            from_fake(w.queue_run(&b.repo, b.jobs).map(|id| json!({"id": id})))
        }
        ["runs"] if get => Reply::ok(json!(w
            .runs
            .values()
            .map(|r| w.run_view(r))
            .collect::<Vec<_>>())),
        ["jobs"] if get => Reply::ok(json!(w.jobs.values().map(|j| j.view()).collect::<Vec<_>>())),
        ["jobs", j, "withdraw"] if post => {
            from_fake(w.withdraw_assignment(id(j)?).map(|_| json!({})))
        }
        ["jobs", j, "finish"] if post => {
            let j = id(j)?;
            let f: Finish = body(req)?;
            if !w.jobs.contains_key(&j) {
                return Err(bad(FakeError::UnknownJob(j)));
            }
            w.finish_job(j, f.conclusion);
            Reply::ok(json!({}))
        }
        ["runners"] if get => {
            w.sweep(Instant::now());
            Reply::ok(json!(w
                .runners
                .values()
                .map(|r| r.view())
                .collect::<Vec<_>>()))
        }
        ["faults"] if post => {
            let rule: FaultRule = body(req)?;
            if let Some(problem) = rule.problem() {
                return Err(bad(format!("fault rule refused: {problem}")));
            }
            w.faults.push(rule);
            Reply::ok(json!({}))
        }
        ["faults"] if del => {
            w.faults.clear();
            Reply::empty(StatusCode::NO_CONTENT)
        }
        ["counters"] if get => Reply::ok(json!(w.counters)),
        ["counters"] if del => {
            w.counters = Default::default();
            w.token_counters.clear();
            Reply::empty(StatusCode::NO_CONTENT)
        }
        ["rate_limit"] if post => {
            let l: Limits = body(req)?;
            if let Some(limit) = l.limit {
                w.rate_limit = limit;
            }
            if let Some(rem) = l.remaining {
                w.set_remaining(rem);
            }
            Reply::ok(json!({}))
        }
        ["releases"] if post => {
            let b: NewRelease = body(req)?;
            let id = w.releases.iter().map(|r| r.id).max().unwrap_or(0) + 1;
            w.releases.push(crate::world::FakeRelease {
                id,
                repo: b.repo,
                tag: b.tag,
                assets: b.assets.into_iter().map(|a| (a.name, a.path)).collect(),
                published_at: chrono::Utc::now(),
            });
            Reply::ok(json!({"id": id}))
        }
        ["releases"] if del => {
            w.releases.clear();
            Reply::empty(StatusCode::NO_CONTENT)
        }
        ["token_lifetimes"] if post => {
            let l: Lifetimes = body(req)?;
            w.access_lifetime = Duration::from_secs(l.access_secs);
            w.refresh_lifetime = Duration::from_secs(l.refresh_secs);
            Reply::ok(json!({}))
        }
        _ => {
            return Err(Reply::json(
                StatusCode::NOT_FOUND,
                json!({"error": "unknown control endpoint; see service/testkit/README.md"}),
            ))
        }
    })
}
