//! REST routing: path and method to a [`Route`] and its endpoint name.

use super::*;

#[derive(Debug, Clone)]
pub(super) enum Route {
    RateLimit,
    User,
    UserInstallations,
    InstallationRepos(u64),
    Repo(String),
    RunnersList(RunnerScope),
    RunnerGet(RunnerScope, u64),
    RunnerDelete(RunnerScope, u64),
    Jit(RunnerScope),
    RegistrationToken(RunnerScope),
    RemoveToken(RunnerScope),
    Downloads(RunnerScope),
    RunnerGroups(String),
    Runs(String),
    Run(String, u64),
    RunJobs(String, u64),
    Job(String, u64),
    LatestRelease,
}

impl Route {
    /// Endpoint name used by counters and fault matching (listed in the README).
    pub(super) fn endpoint(&self) -> String {
        let scoped = |s: &RunnerScope, n: &str| match s {
            RunnerScope::Repo(_) => format!("repo_{n}"),
            RunnerScope::Org(_) => format!("org_{n}"),
        };
        match self {
            Route::RateLimit => "rate_limit".into(),
            Route::User => "user".into(),
            Route::UserInstallations => "user_installations".into(),
            Route::InstallationRepos(_) => "installation_repositories".into(),
            Route::Repo(_) => "repo".into(),
            Route::RunnersList(s) => scoped(s, "runners_list"),
            Route::RunnerGet(s, _) => scoped(s, "runner_get"),
            Route::RunnerDelete(s, _) => scoped(s, "runner_delete"),
            Route::Jit(s) => scoped(s, "jitconfig"),
            Route::RegistrationToken(s) => scoped(s, "registration_token"),
            Route::RemoveToken(s) => scoped(s, "remove_token"),
            Route::Downloads(s) => scoped(s, "runner_downloads"),
            Route::RunnerGroups(_) => "org_runner_groups".into(),
            Route::Runs(_) => "workflow_runs".into(),
            Route::Run(..) => "workflow_run".into(),
            Route::RunJobs(..) => "run_jobs".into(),
            Route::Job(..) => "job".into(),
            Route::LatestRelease => "latest_release".into(),
        }
    }
}

pub(super) fn route(method: &Method, path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let get = method == Method::GET || method == Method::HEAD;
    let id = |s: &str| s.parse::<u64>().ok();
    let r = match segs.as_slice() {
        ["rate_limit"] if get => Route::RateLimit,
        ["user"] if get => Route::User,
        ["user", "installations"] if get => Route::UserInstallations,
        ["user", "installations", i, "repositories"] if get => Route::InstallationRepos(id(i)?),
        ["repos", "actions", "runner", "releases", "latest"] if get => Route::LatestRelease,
        ["repos", o, r] if get => Route::Repo(format!("{o}/{r}")),
        ["repos", o, r, "actions", "runners", rest @ ..] => {
            runner_route(method, RunnerScope::Repo(format!("{o}/{r}")), rest)?
        }
        ["orgs", org, "actions", "runners", rest @ ..] => {
            runner_route(method, RunnerScope::Org(org.to_string()), rest)?
        }
        ["orgs", org, "actions", "runner-groups"] if get => Route::RunnerGroups(org.to_string()),
        ["repos", o, r, "actions", "runs"] if get => Route::Runs(format!("{o}/{r}")),
        ["repos", o, r, "actions", "runs", i] if get => Route::Run(format!("{o}/{r}"), id(i)?),
        ["repos", o, r, "actions", "runs", i, "jobs"] if get => {
            Route::RunJobs(format!("{o}/{r}"), id(i)?)
        }
        ["repos", o, r, "actions", "jobs", i] if get => Route::Job(format!("{o}/{r}"), id(i)?),
        _ => return None,
    };
    Some(r)
}

fn runner_route(method: &Method, scope: RunnerScope, rest: &[&str]) -> Option<Route> {
    let get = method == Method::GET || method == Method::HEAD;
    let post = method == Method::POST;
    Some(match rest {
        [] if get => Route::RunnersList(scope),
        ["downloads"] if get => Route::Downloads(scope),
        ["generate-jitconfig"] if post => Route::Jit(scope),
        ["registration-token"] if post => Route::RegistrationToken(scope),
        ["remove-token"] if post => Route::RemoveToken(scope),
        [i] if get => Route::RunnerGet(scope, i.parse().ok()?),
        [i] if method == Method::DELETE => Route::RunnerDelete(scope, i.parse().ok()?),
        _ => return None,
    })
}
