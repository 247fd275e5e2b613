//! GitHub-shaped JSON for the fake's objects (fields per GITHUB.md; strict enough for octocrab).

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::types::{JobStatus, RunnerScope};
use crate::world::{Account, AccountKind, Installation, Job, Repo, Run, Runner, World};

/// Bases for URLs inside bodies: `api` is origin (+ `/api/v3`), `html` the origin.
pub(crate) struct Urls {
    pub api: String,
    pub html: String,
}

pub(crate) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn node_id(prefix: &str, id: u64) -> String {
    use base64::Engine;
    format!(
        "{prefix}_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(id.to_be_bytes())
    )
}

pub(crate) fn user(a: &Account, u: &Urls) -> Value {
    let api = format!("{}/users/{}", u.api, a.login);
    json!({
        "login": a.login,
        "id": a.id,
        "node_id": node_id(if a.kind == AccountKind::Org { "O" } else { "U" }, a.id),
        "avatar_url": format!("{}/avatars/u/{}?v=4", u.html, a.id),
        "gravatar_id": "",
        "url": api,
        "html_url": format!("{}/{}", u.html, a.login),
        "followers_url": format!("{api}/followers"),
        "following_url": format!("{api}/following{{/other_user}}"),
        "gists_url": format!("{api}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/subscriptions"),
        "organizations_url": format!("{api}/orgs"),
        "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events{{/privacy}}"),
        "received_events_url": format!("{api}/received_events"),
        "type": if a.kind == AccountKind::Org { "Organization" } else { "User" },
        "user_view_type": "public",
        "site_admin": false
    })
}

pub(crate) fn repo(w: &World, r: &Repo, u: &Urls, admin: Option<bool>) -> Value {
    let full = r.full_name();
    let api = format!("{}/repos/{full}", u.api);
    let owner = w
        .account(&r.owner)
        .map(|a| user(a, u))
        .unwrap_or(Value::Null);
    let mut v = json!({
        "id": r.id,
        "node_id": node_id("R", r.id),
        "name": r.name,
        "full_name": full,
        "private": true,
        "owner": owner,
        "html_url": format!("{}/{full}", u.html),
        "description": null,
        "fork": false,
        "url": api,
        "hooks_url": format!("{api}/hooks"),
        "created_at": ts(r.created),
        "updated_at": ts(r.created),
        "pushed_at": ts(r.created),
        "git_url": format!("git://127.0.0.1/{full}.git"),
        "clone_url": format!("{}/{full}.git", u.html),
        "default_branch": "main",
        "archived": false,
        "disabled": false,
        "visibility": "private",
        "size": 1,
        "stargazers_count": 0,
        "watchers_count": 0,
        "forks_count": 0,
        "open_issues_count": 0
    });
    if let (Some(admin), Some(obj)) = (admin, v.as_object_mut()) {
        obj.insert(
            "permissions".into(),
            json!({"admin": admin, "maintain": admin, "push": true, "triage": true, "pull": true}),
        );
    }
    v
}

pub(crate) fn installation(w: &World, i: &Installation, u: &Urls) -> Value {
    let account = w.accounts.get(&i.account);
    let (kind, target_id) = match account {
        Some(a) if a.kind == AccountKind::Org => ("Organization", a.id),
        Some(a) => ("User", a.id),
        None => ("User", 0),
    };
    json!({
        "id": i.id,
        "account": account.map(|a| user(a, u)).unwrap_or(Value::Null),
        "repository_selection": match i.repos { crate::InstallationRepos::All => "all", _ => "selected" },
        "access_tokens_url": format!("{}/app/installations/{}/access_tokens", u.api, i.id),
        "repositories_url": format!("{}/installation/repositories", u.api),
        "html_url": format!("{}/settings/installations/{}", u.html, i.id),
        "app_id": 424242,
        "app_slug": "runner-manager-fake",
        "client_id": crate::DEFAULT_CLIENT_ID,
        "target_id": target_id,
        "target_type": kind,
        "permissions": {
            "administration": "write",
            "actions": "read",
            "metadata": "read",
            "organization_self_hosted_runners": "write"
        },
        "events": [],
        "created_at": ts(i.created),
        "updated_at": ts(i.created),
        "single_file_name": null,
        "has_multiple_single_files": false,
        "single_file_paths": [],
        "suspended_by": null,
        "suspended_at": null
    })
}

pub(crate) fn runner(w: &World, r: &Runner) -> Value {
    let busy = r.busy && !r.job_id.is_some_and(|j| w.taken_unreported(j));
    json!({
        "id": r.id,
        "runner_group_id": r.group_id,
        "name": r.name,
        "os": r.os,
        "status": if r.online { "online" } else { "offline" },
        "busy": busy,
        "ephemeral": true,
        "labels": r.labels.iter().map(|l| json!({
            "id": l.id, "name": l.name, "type": if l.read_only { "read-only" } else { "custom" }
        })).collect::<Vec<_>>()
    })
}

pub(crate) fn runner_group(org: &str, u: &Urls) -> Value {
    let base = format!("{}/orgs/{org}/actions/runner-groups/1", u.api);
    json!({
        "id": 1,
        "name": "Default",
        "visibility": "all",
        "default": true,
        "inherited": false,
        "allows_public_repositories": false,
        "restricted_to_workflows": false,
        "selected_workflows": [],
        "workflow_restrictions_read_only": false,
        "runners_url": format!("{base}/runners"),
        "selected_repositories_url": format!("{base}/repositories"),
        "hosted_runners_url": format!("{base}/hosted-runners")
    })
}

fn workflow_id(w: &World, repo: &str) -> u64 {
    w.repo(repo)
        .map(|r| 100_000_000 + r.id)
        .unwrap_or(100_000_000)
}

pub(crate) fn run(w: &World, run: &Run, u: &Urls) -> Value {
    let api = format!("{}/repos/{}/actions/runs/{}", u.api, run.repo, run.id);
    let (status, conclusion, started, updated) = w.run_status(run);
    let repo = w.repo(&run.repo);
    let repo_json = repo
        .map(|r| self::repo(w, r, u, None))
        .unwrap_or(Value::Null);
    let actor = repo
        .and_then(|r| w.account(&r.owner))
        .map(|a| user(a, u))
        .unwrap_or(Value::Null);
    let wid = workflow_id(w, &run.repo);
    let suite = run.id + 1_000_000_000;
    // A pull request from a fork: GitHub names the fork as the head repository and the
    // target as `repository`.
    let (event, head_repository, head_branch) = match repo.filter(|_| run.from_fork) {
        Some(r) => ("pull_request", fork_of(w, r, u), "main"),
        None if run.pull_request => ("pull_request", repo_json.clone(), "feature"),
        None => ("push", repo_json.clone(), "main"),
    };
    json!({
        "id": run.id,
        "name": run.name,
        "node_id": node_id("WFR", run.id),
        "head_branch": head_branch,
        "head_sha": run.head_sha,
        "path": ".github/workflows/ci.yml",
        "display_title": "Fake commit",
        "run_number": run.run_number,
        "run_attempt": 1,
        "event": event,
        "status": status.as_str(),
        "conclusion": conclusion.map(|c| c.as_str()),
        "workflow_id": wid,
        "check_suite_id": suite,
        "check_suite_node_id": node_id("CS", suite),
        "url": api,
        "html_url": format!("{}/{}/actions/runs/{}", u.html, run.repo, run.id),
        "pull_requests": [],
        "created_at": ts(run.created_at),
        "updated_at": ts(updated),
        "run_started_at": ts(started.unwrap_or(run.created_at)),
        "jobs_url": format!("{api}/jobs"),
        "logs_url": format!("{api}/logs"),
        "check_suite_url": format!("{}/repos/{}/check-suites/{suite}", u.api, run.repo),
        "artifacts_url": format!("{api}/artifacts"),
        "cancel_url": format!("{api}/cancel"),
        "rerun_url": format!("{api}/rerun"),
        "previous_attempt_url": null,
        "workflow_url": format!("{}/repos/{}/actions/workflows/{wid}", u.api, run.repo),
        "actor": actor.clone(),
        "triggering_actor": actor,
        "head_commit": {
            "id": run.head_sha,
            "tree_id": run.head_sha.chars().rev().collect::<String>(),
            "message": "Fake commit",
            "timestamp": ts(run.created_at),
            "author": {"name": "Fake Author", "email": "fake@example.com"},
            "committer": {"name": "Fake Author", "email": "fake@example.com"}
        },
        "repository": repo_json,
        "head_repository": head_repository
    })
}

/// Ids of fork repositories and their owners: far above anything the world numbers itself.
const FORK_ID_BASE: u64 = 900_000_000;

/// The fork a pull request came from: `<owner>-fork/<name>`, `"fork": true`, with its own id
/// and its own (user) owner. It exists only in the runs that name it.
fn fork_of(w: &World, r: &Repo, u: &Urls) -> Value {
    let owner = Account {
        id: FORK_ID_BASE + w.account(&r.owner).map(|a| a.id).unwrap_or(0),
        login: format!("{}-fork", r.owner),
        kind: AccountKind::User,
        members: Default::default(),
    };
    let fork = Repo {
        id: FORK_ID_BASE + r.id,
        owner: owner.login.clone(),
        ..r.clone()
    };
    let mut v = repo(w, &fork, u, None);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("owner".into(), user(&owner, u));
        obj.insert("fork".into(), Value::Bool(true));
    }
    v
}

pub(crate) fn job(w: &World, j: &Job, u: &Urls) -> Value {
    if j.status == JobStatus::InProgress && w.taken_unreported(j.id) {
        // GitHub has not caught up with the runner taking it (`report_delay`).
        let shown = Job {
            status: JobStatus::Queued,
            started_at: None,
            runner_id: None,
            runner_name: None,
            runner_group_id: None,
            assigned_at: None,
            ..j.clone()
        };
        return job(w, &shown, u);
    }
    let api = format!("{}/repos/{}/actions/jobs/{}", u.api, j.repo, j.id);
    let head_sha = w
        .runs
        .get(&j.run_id)
        .map(|r| r.head_sha.clone())
        .unwrap_or_default();
    let workflow_name = w
        .runs
        .get(&j.run_id)
        .map(|r| r.name.clone())
        .unwrap_or_else(|| "CI".into());
    let head_branch = match w.runs.get(&j.run_id) {
        Some(r) if r.pull_request && !r.from_fork => "feature",
        _ => "main",
    };
    let step = |name: &str, number: u32| match j.status {
        JobStatus::Queued => None,
        JobStatus::InProgress => Some(json!({
            "name": name, "status": if number == 1 { "in_progress" } else { "queued" }, "conclusion": null,
            "number": number, "started_at": if number == 1 { j.started_at.map(ts) } else { None }, "completed_at": null
        })),
        JobStatus::Completed => Some(json!({
            "name": name, "status": "completed", "conclusion": j.conclusion.map(|c| c.as_str()),
            "number": number, "started_at": j.started_at.map(ts), "completed_at": j.completed_at.map(ts)
        })),
    };
    let steps: Vec<Value> = [step("Set up job", 1), step("Run tests", 2)]
        .into_iter()
        .flatten()
        .collect();
    json!({
        "id": j.id,
        "run_id": j.run_id,
        "run_url": format!("{}/repos/{}/actions/runs/{}", u.api, j.repo, j.run_id),
        "run_attempt": 1,
        "node_id": node_id("CR", j.id),
        "head_sha": head_sha,
        "head_branch": head_branch,
        "url": api,
        "html_url": format!("{}/{}/actions/runs/{}/job/{}", u.html, j.repo, j.run_id, j.id),
        "status": j.status.as_str(),
        "conclusion": j.conclusion.map(|c| c.as_str()),
        "created_at": ts(j.created_at),
        // GitHub reports started_at even for queued jobs (octocrab requires it): use created_at.
        "started_at": ts(j.started_at.unwrap_or(j.created_at)),
        "completed_at": j.completed_at.map(ts),
        "name": j.name,
        "workflow_name": workflow_name,
        "steps": steps,
        "check_run_url": format!("{}/repos/{}/check-runs/{}", u.api, j.repo, j.id),
        "labels": j.labels,
        "runner_id": j.runner_id,
        "runner_name": j.runner_name,
        "runner_group_id": j.runner_group_id,
        "runner_group_name": j.runner_group_id.map(|_| "Default")
    })
}

/// `GitHubUrl` for a runner's `.runner` file.
pub(crate) fn github_url(origin: &str, scope: &RunnerScope) -> String {
    match scope {
        RunnerScope::Repo(r) => format!("{origin}/{r}"),
        RunnerScope::Org(o) => format!("{origin}/{o}"),
    }
}
