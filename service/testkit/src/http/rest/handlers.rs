//! REST handlers: each route's answer from the world (access checks included).

use super::*;

pub(super) fn execute(w: &mut World, route: &Route, ctx: &Ctx<'_>) -> Reply {
    match route {
        Route::RateLimit => rate_limit(w, ctx),
        Route::User => match w.account(&ctx.login) {
            Some(a) => Reply::ok(render::user(a, &ctx.urls)),
            None => bad_credentials(),
        },
        Route::UserInstallations => {
            let items: Vec<Value> = w
                .user_installations(&ctx.login)
                .into_iter()
                .map(|i| render::installation(w, i, &ctx.urls))
                .collect();
            paginate(ctx, items, "installations", None)
        }
        Route::InstallationRepos(id) => {
            let Some(inst) = w
                .user_installations(&ctx.login)
                .into_iter()
                .find(|i| i.id == *id)
            else {
                return Reply::error(StatusCode::NOT_FOUND, "Not Found");
            };
            let selection = match inst.repos {
                crate::InstallationRepos::All => "all",
                _ => "selected",
            };
            let items: Vec<Value> = w
                .installation_repos_for(inst, &ctx.login)
                .into_iter()
                .map(|(r, admin)| render::repo(w, r, &ctx.urls, Some(admin)))
                .collect();
            paginate(
                ctx,
                items,
                "repositories",
                Some(("repository_selection", json!(selection))),
            )
        }
        Route::Repo(full) => match (w.repo(full), w.repo_access(&ctx.login, full)) {
            (Some(r), Access::Admin | Access::NoAdmin) => {
                let admin = w.user_repo_admin(&ctx.login, r);
                Reply::ok(render::repo(w, r, &ctx.urls, admin))
            }
            _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
        },
        Route::RunnersList(scope) => with_scope(w, ctx, scope, false, |w, ctx| {
            let name = ctx.req.query_value("name");
            let items: Vec<Value> = w
                .runners
                .values()
                .filter(|r| {
                    &r.scope == scope
                        && name.as_ref().is_none_or(|n| r.name.eq_ignore_ascii_case(n))
                })
                .map(|r| render::runner(w, r))
                .collect();
            paginate(ctx, items, "runners", None)
        }),
        Route::RunnerGet(scope, id) => {
            with_scope(w, ctx, scope, false, |w, _| match w.runners.get(id) {
                Some(r) if &r.scope == scope => Reply::ok(render::runner(w, r)),
                _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
            })
        }
        Route::RunnerDelete(scope, id) => {
            with_scope(w, ctx, scope, true, |w, _| match w.runners.get(id) {
                Some(r) if &r.scope == scope => {
                    if r.busy {
                        Reply::json(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            json!({"message": format!("Bad request - Runner \"{}\" is still running a job\"", r.name),
                               "documentation_url": DOCS, "status": "422"}),
                        )
                    } else {
                        w.delete_runner(*id);
                        Reply::empty(StatusCode::NO_CONTENT)
                    }
                }
                _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
            })
        }
        Route::Jit(scope) => with_scope(w, ctx, scope, true, |w, ctx| jitconfig(w, ctx, scope)),
        Route::RegistrationToken(scope) | Route::RemoveToken(scope) => {
            with_scope(w, ctx, scope, true, |_, _| {
                Reply::json(
                    StatusCode::CREATED,
                    json!({"token": random_string(29).to_ascii_uppercase(),
                       "expires_at": ts(Utc::now() + chrono::Duration::hours(1))}),
                )
            })
        }
        Route::Downloads(scope) => with_scope(w, ctx, scope, false, |w, ctx| {
            let list: Vec<Value> = w
                .package
                .iter()
                .map(|p| {
                    json!({"os": p.os, "architecture": p.arch,
                           "download_url": format!("{}/_downloads/{}", ctx.origin, p.filename),
                           "filename": p.filename, "sha256_checksum": p.sha256})
                })
                .collect();
            Reply::ok(Value::Array(list))
        }),
        Route::RunnerGroups(org) => {
            with_scope(w, ctx, &RunnerScope::Org(org.clone()), false, |_, ctx| {
                paginate(
                    ctx,
                    vec![render::runner_group(org, &ctx.urls)],
                    "runner_groups",
                    None,
                )
            })
        }
        Route::Runs(repo) => with_repo_read(w, ctx, repo, |w, ctx| {
            let status = ctx.req.query_value("status");
            let mut items: Vec<Value> = w
                .runs
                .values()
                .rev()
                .filter(|r| r.repo.eq_ignore_ascii_case(repo))
                .filter(|r| {
                    let (s, c, _, _) = w.run_status(r);
                    status
                        .as_deref()
                        .is_none_or(|f| f == s.as_str() || c.is_some_and(|c| c.as_str() == f))
                })
                .map(|r| render::run(w, r, &ctx.urls))
                .collect();
            items.truncate(1000);
            paginate(ctx, items, "workflow_runs", None)
        }),
        Route::Run(repo, id) => with_repo_read(w, ctx, repo, |w, ctx| match w.runs.get(id) {
            Some(r) if r.repo.eq_ignore_ascii_case(repo) => Reply::ok(render::run(w, r, &ctx.urls)),
            _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
        }),
        Route::RunJobs(repo, id) => with_repo_read(w, ctx, repo, |w, ctx| {
            match ctx.req.query_value("filter").as_deref() {
                None | Some("latest") | Some("all") => {}
                Some(_) => return Reply::validation("WorkflowJob", "filter", "invalid"),
            }
            match w.runs.get(id) {
                Some(r) if r.repo.eq_ignore_ascii_case(repo) => {
                    let items: Vec<Value> = r
                        .job_ids
                        .iter()
                        .filter_map(|j| w.jobs.get(j))
                        .map(|j| render::job(w, j, &ctx.urls))
                        .collect();
                    paginate(ctx, items, "jobs", None)
                }
                _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
            }
        }),
        Route::Job(repo, id) => with_repo_read(w, ctx, repo, |w, ctx| match w.jobs.get(id) {
            Some(j) if j.repo.eq_ignore_ascii_case(repo) => Reply::ok(render::job(w, j, &ctx.urls)),
            _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
        }),
        Route::LatestRelease => latest_release(w, ctx),
    }
}

/// Runs `f` if the user may use runner endpoints of `scope` (§3 permissions).
fn with_scope(
    w: &mut World,
    ctx: &Ctx<'_>,
    scope: &RunnerScope,
    write: bool,
    f: impl FnOnce(&mut World, &Ctx<'_>) -> Reply,
) -> Reply {
    let (access, perm) = match scope {
        RunnerScope::Repo(r) => (w.repo_access(&ctx.login, r), "administration"),
        RunnerScope::Org(o) => (
            w.org_access(&ctx.login, o),
            "organization_self_hosted_runners",
        ),
    };
    let accepted = format!("{perm}={}", if write { "write" } else { "read" });
    let reply = match access {
        Access::NotFound => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
        Access::NoAdmin => Reply::error(
            StatusCode::FORBIDDEN,
            "Resource not accessible by integration",
        ),
        Access::Admin => f(w, ctx),
    };
    reply.header("x-accepted-github-permissions", accepted)
}

/// Runs `f` if the user can read the repository's Actions data.
fn with_repo_read(
    w: &mut World,
    ctx: &Ctx<'_>,
    repo: &str,
    f: impl FnOnce(&mut World, &Ctx<'_>) -> Reply,
) -> Reply {
    match w.repo_access(&ctx.login, repo) {
        Access::NotFound => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
        _ => f(w, ctx),
    }
    .header("x-accepted-github-permissions", "actions=read")
}

fn rate_limit(w: &mut World, ctx: &Ctx<'_>) -> Reply {
    let uid = w.account(&ctx.login).map(|a| a.id).unwrap_or(0);
    let st = w.rate_state(uid);
    let limit = w.rate_limit;
    let core = json!({"limit": limit, "used": st.used, "remaining": limit.saturating_sub(st.used), "reset": st.reset, "resource": "core"});
    let other = |n: u64, res: &str| json!({"limit": n, "used": 0, "remaining": n, "reset": st.reset, "resource": res});
    Reply::ok(json!({
        "resources": {
            "core": core,
            "search": other(30, "search"),
            "graphql": other(5000, "graphql"),
            "integration_manifest": other(5000, "integration_manifest"),
            "code_search": other(10, "code_search")
        },
        "rate": core
    }))
}

fn latest_release(w: &World, ctx: &Ctx<'_>) -> Reply {
    let Some(p) = &w.package else {
        return Reply::error(StatusCode::NOT_FOUND, "Not Found");
    };
    let now = ts(Utc::now());
    let size = std::fs::metadata(&p.path).map(|m| m.len()).unwrap_or(0);
    // Version is the part of the file name after `<os>-<arch>-`, without the extension.
    let version = p
        .filename
        .rsplit('-')
        .next()
        .map(|v| {
            v.trim_end_matches(".tar.gz")
                .trim_end_matches(".zip")
                .to_string()
        })
        .unwrap_or_default();
    let key = format!("{}-{}", p.os, p.arch);
    Reply::ok(json!({
        "id": 1, "tag_name": format!("v{version}"), "name": format!("v{version}"),
        "body": format!("<!-- BEGIN SHA {key} -->{}<!-- END SHA {key} -->", p.sha256),
        "draft": false, "prerelease": false, "created_at": now, "published_at": now,
        "html_url": format!("{}/actions/runner/releases/tag/v{version}", ctx.origin),
        "url": format!("{}/repos/actions/runner/releases/1", ctx.urls.api),
        "assets_url": format!("{}/repos/actions/runner/releases/1/assets", ctx.urls.api),
        "upload_url": format!("{}/repos/actions/runner/releases/1/assets{{?name,label}}", ctx.urls.api),
        "tarball_url": format!("{}/repos/actions/runner/tarball/v{version}", ctx.urls.api),
        "zipball_url": format!("{}/repos/actions/runner/zipball/v{version}", ctx.urls.api),
        "node_id": "RE_fake", "target_commitish": "main",
        "assets": [{
            "id": 2, "node_id": "RA_fake", "name": p.filename, "label": "", "content_type": "application/gzip",
            "size": size, "state": "uploaded", "download_count": 0,
            "browser_download_url": format!("{}/_downloads/{}", ctx.origin, p.filename),
            "url": format!("{}/repos/actions/runner/releases/assets/2", ctx.urls.api),
            "digest": format!("sha256:{}", p.sha256), "created_at": now, "updated_at": now
        }]
    }))
}

fn jitconfig(w: &mut World, ctx: &Ctx<'_>, scope: &RunnerScope) -> Reply {
    let Ok(body) = serde_json::from_slice::<Value>(&ctx.req.body) else {
        return Reply::error(StatusCode::BAD_REQUEST, "Problems parsing JSON");
    };
    let Some(obj) = body.as_object() else {
        return Reply::error(StatusCode::BAD_REQUEST, "Problems parsing JSON");
    };
    let missing = |k: &str| {
        Reply::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": format!("Invalid input: object is missing required key: {k}"),
                   "errors": [{"resource": "Runner", "field": k, "code": "missing_field"}],
                   "documentation_url": DOCS, "status": "422"}),
        )
    };
    let Some(name) = obj.get("name").and_then(Value::as_str).map(str::to_string) else {
        return missing("name");
    };
    let Some(group) = obj.get("runner_group_id") else {
        return missing("runner_group_id");
    };
    let Some(group) = group.as_u64() else {
        return Reply::validation("Runner", "runner_group_id", "invalid");
    };
    let Some(labels) = obj.get("labels") else {
        return missing("labels");
    };
    let labels: Option<Vec<String>> = labels.as_array().map(|a| {
        a.iter()
            .filter_map(|l| l.as_str().map(str::to_string))
            .collect()
    });
    let Some(labels) = labels.filter(|l| !l.is_empty() && l.len() <= 100) else {
        return Reply::validation("Runner", "labels", "invalid");
    };
    if name.trim().is_empty() {
        return Reply::validation("Runner", "name", "invalid");
    }
    let work_folder = obj
        .get("work_folder")
        .and_then(Value::as_str)
        .unwrap_or("_work")
        .to_string();
    match group {
        1 => {}
        2 => {
            return Reply::error(
                StatusCode::FORBIDDEN,
                "Resource not accessible by integration",
            )
        }
        _ => return Reply::error(StatusCode::NOT_FOUND, "Not Found"),
    }
    if w.runner_name_taken(scope, &name) {
        return Reply::error(
            StatusCode::CONFLICT,
            &format!("Already exists - A runner with the name {name} already exists."),
        );
    }
    let runner = w
        .register_runner(scope.clone(), &name, group, &labels)
        .clone();
    let runner = &runner;
    let blob = jit_blob(
        &ctx.origin,
        runner.id,
        &runner.name,
        group,
        scope,
        &work_folder,
        &runner.secret,
    );
    Reply::json(
        StatusCode::CREATED,
        json!({"runner": render::runner(w, runner), "encoded_jit_config": blob}),
    )
}

/// The blob of FAKE_PROTOCOL.md: base64 JSON of base64 file contents.
fn jit_blob(
    origin: &str,
    id: u64,
    name: &str,
    group: u64,
    scope: &RunnerScope,
    work: &str,
    secret: &str,
) -> String {
    let b64 = |v: &Value| base64::engine::general_purpose::STANDARD.encode(v.to_string());
    let runner = json!({
        "AgentId": id, "AgentName": name, "PoolId": group, "PoolName": "Default",
        "ServerUrl": format!("{origin}/_broker/"), "ServerUrlV2": format!("{origin}/_broker/"),
        "GitHubUrl": render::github_url(origin, scope), "WorkFolder": work,
        "Ephemeral": true, "DisableUpdate": false, "IsHostedServer": false, "UseV2Flow": true
    });
    let creds = json!({"Scheme": "OAuthAccessToken", "Data": {"token": secret}});
    let filler = |n: usize| base64::engine::general_purpose::STANDARD.encode(random_string(n));
    let rsa = json!({"d": filler(256), "dp": filler(128), "dq": filler(128), "exponent": "AQAB",
                     "inverseQ": filler(128), "modulus": filler(256), "p": filler(128), "q": filler(128)});
    b64(
        &json!({".runner": b64(&runner), ".credentials": b64(&creds), ".credentials_rsaparams": b64(&rsa)}),
    )
}
