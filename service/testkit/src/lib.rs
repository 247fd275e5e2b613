//! Test kit: a fake GitHub (REST + OAuth device flow + a job broker for the fake runner
//! listener) on loopback HTTP, and a fake runner package builder ([`package`]).
//!
//! The fake speaks the subset of GitHub described in `shared/design/GITHUB.md` with GitHub's
//! shapes, status codes, pagination links, weak ETags/304s and rate-limit headers, so the product
//! talks to it through the same code paths as to github.com (or GHES via [`FakeGitHub::api_v3`]).
//!
//! # Public API
//!
//! ```text
//! FakeGitHub::start(FakeConfig) -> anyhow::Result<FakeGitHub>     (async; binds 127.0.0.1:port)
//!   origin() "http://127.0.0.1:PORT"  (OAuth origin + github.com-style REST base)
//!   api_v3() origin + "/api/v3"        (GHES-style base, same routes)
//!   control_url() origin + "/_fake"    (HTTP control API, see README)
//!   client_id()                        (the app's OAuth client id, DEFAULT_CLIENT_ID by default)
//! world:   create_user(login) / create_org(login) / add_org_member(org, login, admin)
//!          create_repo("owner/name") / add_collaborator(repo, login, admin)
//!          create_installation(account, InstallationRepos::{All, Selected(vec)})
//! auth:    issue_token(login) -> IssuedToken{access_token, refresh_token, expires_at, ..}
//!          revoke_token(tok) / approve_device(user_code, login) / deny_device(user_code)
//!          set_token_lifetimes(access, refresh) / set_device_flow_enabled(bool)
//!          issued_device_codes() (the secret halves handed out, for leak checks)
//! jobs:    queue_run(repo, Vec<JobSpec>) -> run id   (JobSpec::new / ::unresolvable;
//!          .behaviour / .duration / .memory / .with_command(step) / .from_fork())
//!          withdraw_assignment(job_id) / finish_job(job_id, Conclusion)
//! faults:  inject_fault(FaultRule{endpoint: EndpointMatch, fault: Fault, times}) / clear_faults()
//! limits:  set_rate_limit(n) / set_remaining(n)
//! package: set_runner_package(&package::RunnerPackage)
//! views:   counters() -> Counters / reset_counters() / request_log() / runners() / jobs()
//!          requests_by_token() -> BTreeMap<token, Counters>   (REST requests per token)
//!          job(id) / runs()
//! network: Relay::start(fake.addr()) in front of it: cut() (connection refused) / restore()
//! ```
//!
//! All `&self` methods lock a std mutex briefly; call them from anywhere. Errors of world setup
//! are [`FakeError`].

pub mod cgroup;
pub mod config;
pub mod counters;
pub mod error;
pub mod fault;
#[cfg(unix)]
pub mod harness;
mod http;
pub mod package;
mod relay;
mod server;
pub mod types;
mod world;

pub use config::FakeConfig;
pub use counters::{Counters, EndpointCounters};
pub use error::FakeError;
pub use fault::{EndpointMatch, Fault, FaultRule};
pub use relay::Relay;
pub use server::FakeGitHub;
pub use types::{
    Behaviour, Conclusion, InstallationRepos, IssuedToken, JobSpec, JobStatus, JobView,
    LoggedRequest, RunView, RunnerScope, RunnerView,
};

/// OAuth client id the fake app accepts by default (looks like a GitHub App client id).
pub const DEFAULT_CLIENT_ID: &str = "Iv1.fakegithubapp01";
