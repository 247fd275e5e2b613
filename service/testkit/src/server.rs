//! [`FakeGitHub`]: binds the loopback listener, owns the shared world, and exposes the Rust
//! control API tests use to shape the world and read it back.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::FakeConfig;
use crate::counters::Counters;
use crate::error::FakeError;
use crate::fault::FaultRule;
use crate::package::RunnerPackage;
use crate::types::{InstallationRepos, IssuedToken, JobSpec, JobView, RunView, RunnerView};
use crate::world::{PackageInfo, World};

/// State shared by the HTTP handlers and the Rust API. The mutex is never held across an await.
pub(crate) struct Shared {
    pub config: FakeConfig,
    pub origin: String,
    world: Mutex<World>,
    pub shutdown: watch::Receiver<bool>,
}

impl Shared {
    pub fn world(&self) -> MutexGuard<'_, World> {
        // A panic while holding the lock cannot leave the world half-updated in a way that matters
        // to a test double; keep serving.
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake GitHub on 127.0.0.1. Dropping it stops the server.
pub struct FakeGitHub {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeGitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeGitHub")
            .field("origin", &self.shared.origin)
            .finish()
    }
}

impl FakeGitHub {
    /// Binds 127.0.0.1:`config.port` (0 = any free port) and serves on the caller's tokio runtime.
    pub async fn start(config: FakeConfig) -> anyhow::Result<FakeGitHub> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port))
            .await
            .with_context(|| {
                format!(
                    "binding 127.0.0.1:{} for the fake GitHub (is the port in use?)",
                    config.port
                )
            })?;
        let addr = listener
            .local_addr()
            .context("reading the fake GitHub's bound address")?;
        let origin = format!("http://{addr}");
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            world: Mutex::new(World::new(&config)),
            config,
            origin,
            shutdown: rx,
        });
        let app = crate::http::router(shared.clone());
        let mut stop = tx.subscribe();
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|v| *v).await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "fake GitHub server stopped");
            }
        });
        let sweeper_shared = shared.clone();
        let sweeper = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                sweeper_shared.world().sweep(Instant::now());
            }
        });
        tracing::info!(origin = %shared.origin, "fake GitHub listening");
        Ok(FakeGitHub {
            shared,
            addr,
            shutdown: tx,
            tasks: vec![server, sweeper],
        })
    }

    /// `http://127.0.0.1:PORT`: the OAuth origin and a github.com-style REST base.
    pub fn origin(&self) -> String {
        self.shared.origin.clone()
    }

    /// `http://127.0.0.1:PORT/api/v3`: a GHES-style REST base (same routes).
    pub fn api_v3(&self) -> String {
        format!("{}/api/v3", self.shared.origin)
    }

    /// Base of the HTTP control API (`/_fake`).
    pub fn control_url(&self) -> String {
        format!("{}/_fake", self.shared.origin)
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OAuth client id the fake's app accepts.
    pub fn client_id(&self) -> String {
        self.shared.config.client_id.clone()
    }

    // ---- world setup ----

    /// Creates a user; returns its id.
    pub fn create_user(&self, login: &str) -> Result<u64, FakeError> {
        self.shared.world().create_user(login)
    }

    /// Creates an organization; returns its id.
    pub fn create_org(&self, login: &str) -> Result<u64, FakeError> {
        self.shared.world().create_org(login)
    }

    /// Makes `login` a member (admin or not) of `org`. Org admins administer its runners and repos.
    pub fn add_org_member(&self, org: &str, login: &str, admin: bool) -> Result<(), FakeError> {
        self.shared.world().add_org_member(org, login, admin)
    }

    /// Creates `"owner/name"`; the owner (user or org) must exist. Returns the repository id.
    pub fn create_repo(&self, full_name: &str) -> Result<u64, FakeError> {
        self.shared.world().create_repo(full_name)
    }

    /// Gives `login` access to a repository (admin or write-only).
    pub fn add_collaborator(&self, repo: &str, login: &str, admin: bool) -> Result<(), FakeError> {
        self.shared.world().add_collaborator(repo, login, admin)
    }

    /// Installs the app on an account; returns the installation id.
    pub fn create_installation(
        &self,
        account: &str,
        repos: InstallationRepos,
    ) -> Result<u64, FakeError> {
        self.shared.world().create_installation(account, repos)
    }

    /// Mints a `ghu_`/`ghr_` pair for `login` without the device flow.
    pub fn issue_token(&self, login: &str) -> Result<IssuedToken, FakeError> {
        self.shared.world().issue_token(login)
    }

    /// Revokes an access or refresh token and its partner; false if unknown.
    pub fn revoke_token(&self, token: &str) -> bool {
        self.shared.world().revoke_token(token)
    }

    /// The user approves a pending device code (as on `/login/device`).
    pub fn approve_device(&self, user_code: &str, login: &str) -> Result<(), FakeError> {
        self.shared.world().approve_device(user_code, login)
    }

    /// The user presses Cancel on a pending device code.
    pub fn deny_device(&self, user_code: &str) -> Result<(), FakeError> {
        self.shared.world().deny_device(user_code)
    }

    /// Turns the App's "Enable Device Flow" setting off (or on again): `/login/device/code`
    /// answers HTTP 400 and polls answer HTTP 200, both with `error=device_flow_disabled`.
    pub fn set_device_flow_enabled(&self, enabled: bool) {
        self.shared.world().device_flow_disabled = !enabled;
    }

    /// Every device code issued so far (the secret half of each device-flow start), so a test
    /// can check that a client never shows, logs or stores one.
    pub fn issued_device_codes(&self) -> Vec<String> {
        self.shared.world().devices.keys().cloned().collect()
    }

    /// Queues a workflow run with these jobs (all queued); returns the run id.
    pub fn queue_run(&self, repo: &str, jobs: Vec<JobSpec>) -> Result<u64, FakeError> {
        self.shared.world().queue_run(repo, jobs)
    }

    /// Queues a run of the one job `job` and returns that job's id.
    pub fn queue_job(&self, repo: &str, job: JobSpec) -> Result<u64, FakeError> {
        let mut w = self.shared.world();
        let run = w.queue_run(repo, vec![job])?;
        Ok(w.runs[&run].job_ids[0])
    }

    /// Queues one more job in run `run_id` (a job whose `needs` were just met); returns its id.
    pub fn queue_job_in_run(&self, run_id: u64, job: JobSpec) -> Result<u64, FakeError> {
        self.shared.world().add_job(run_id, job)
    }

    /// Puts an assigned job back to `queued` and its runner back to idle (GitHub withdrawing an
    /// assignment).
    pub fn withdraw_assignment(&self, job_id: u64) -> Result<(), FakeError> {
        self.shared.world().withdraw_assignment(job_id)
    }

    /// Completes a job directly (e.g. cancel it), without a runner.
    pub fn finish_job(&self, job_id: u64, conclusion: crate::Conclusion) -> Result<(), FakeError> {
        let mut w = self.shared.world();
        if !w.jobs.contains_key(&job_id) {
            return Err(FakeError::UnknownJob(job_id));
        }
        w.finish_job(job_id, conclusion);
        Ok(())
    }

    // ---- faults, limits, counters ----

    /// Adds a fault rule (rules are checked in insertion order; the first match applies).
    pub fn inject_fault(&self, rule: FaultRule) {
        self.shared.world().faults.push(rule);
    }

    /// Removes all fault rules.
    pub fn clear_faults(&self) {
        self.shared.world().faults.clear();
    }

    /// Snapshot of the request counters.
    pub fn counters(&self) -> Counters {
        self.shared.world().counters.clone()
    }

    /// Zeroes the request counters.
    pub fn reset_counters(&self) {
        let mut w = self.shared.world();
        w.counters = Counters::default();
        w.token_counters.clear();
        w.request_log.clear();
    }

    /// The REST requests that carried a token, counted per token as [`FakeGitHub::counters`]
    /// counts them all (`user_agents` left empty): what each client signed in on its own (e.g.
    /// each service given its own [`FakeGitHub::issue_token`]) spent. The rate limit is per
    /// user, so tokens of one user share it. Since the start or the last `reset_counters`.
    pub fn requests_by_token(&self) -> std::collections::BTreeMap<String, Counters> {
        self.shared.world().token_counters.clone()
    }

    /// Every request counted since the start (or the last `reset_counters`), oldest first:
    /// when each came and how it was answered.
    pub fn request_log(&self) -> Vec<crate::types::LoggedRequest> {
        self.shared.world().request_log.iter().cloned().collect()
    }

    /// Sets the primary rate limit per user (`x-ratelimit-limit`).
    pub fn set_rate_limit(&self, limit: u64) {
        self.shared.world().rate_limit = limit;
    }

    /// Sets every user's remaining requests in the current window (also for users not seen yet).
    pub fn set_remaining(&self, remaining: u64) {
        self.shared.world().set_remaining(remaining);
    }

    /// Lifetimes of tokens minted from now on.
    pub fn set_token_lifetimes(&self, access: Duration, refresh: Duration) {
        let mut w = self.shared.world();
        w.access_lifetime = access;
        w.refresh_lifetime = refresh;
    }

    /// Serves this package: listed by the downloads endpoint (§3.7) and its bytes at
    /// `{origin}/_downloads/{filename}`.
    pub fn set_runner_package(&self, package: &RunnerPackage) {
        self.shared.world().package = Some(PackageInfo {
            path: package.path.clone(),
            filename: package.filename.clone(),
            sha256: package.sha256.clone(),
            os: package.os.clone(),
            arch: package.arch.clone(),
        });
    }

    /// Publishes a release of `repo` (`owner/name`) with these assets (name, file served from
    /// disk); the newest published is `releases/latest`. Returns the release id.
    pub fn publish_release(
        &self,
        repo: &str,
        tag: &str,
        assets: &[(String, std::path::PathBuf)],
    ) -> u64 {
        let mut w = self.shared.world();
        let id = w.releases.iter().map(|r| r.id).max().unwrap_or(0) + 1;
        w.releases.push(crate::world::FakeRelease {
            id,
            repo: repo.to_owned(),
            tag: tag.to_owned(),
            assets: assets.to_vec(),
            published_at: chrono::Utc::now(),
        });
        id
    }

    /// Removes every release (the feed answers 404 again).
    pub fn clear_releases(&self) {
        self.shared.world().releases.clear();
    }

    // ---- views ----

    /// All registered runners (sessions that timed out are swept first).
    pub fn runners(&self) -> Vec<RunnerView> {
        let mut w = self.shared.world();
        w.sweep(Instant::now());
        w.runners.values().map(|r| r.view()).collect()
    }

    /// All jobs, oldest first.
    pub fn jobs(&self) -> Vec<JobView> {
        self.shared
            .world()
            .jobs
            .values()
            .map(|j| j.view())
            .collect()
    }

    /// One job.
    pub fn job(&self, job_id: u64) -> Option<JobView> {
        self.shared.world().jobs.get(&job_id).map(|j| j.view())
    }

    /// All runs, oldest first.
    pub fn runs(&self) -> Vec<RunView> {
        let w = self.shared.world();
        w.runs.values().map(|r| w.run_view(r)).collect()
    }

    /// Stops the server now (also done on drop).
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for FakeGitHub {
    fn drop(&mut self) {
        self.shutdown();
    }
}
