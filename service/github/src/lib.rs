//! rm-github: everything the service and the tray need from GitHub (see
//! `shared/design/GITHUB.md`): device-flow sign-in, token renewal, installation
//! and repository discovery, demand (queued jobs), JIT runners, runner package
//! metadata, the rate-limit budget and backoff. Built on octocrab's HTTP stack
//! with raw calls, so headers (ETags, rate limits) stay visible.

mod assignments;
mod auth;
pub mod backoff;
pub mod budget;
mod client;
mod config;
mod credential;
mod demand;
mod device_flow;
mod endpoints;
mod error;
mod etag;
mod health;
mod installations;
mod local_runs;
pub mod models;
mod oauth;
mod outage;
mod package;
mod probe;
mod runners;
mod transport;

pub use assignments::RunnerJob;
pub use auth::AuthState;
pub use backoff::Backoff;
pub use budget::{
    BudgetMeter, BudgetSnapshot, Counts, EndpointUsage, Planner, PollPlan, RateLimit,
    TargetPollCost,
};
pub use client::{Cost, GitHubClient};
pub use config::{default_user_agent, ClientConfig, DEFAULT_CLIENT_ID};
pub use credential::{Credential, CredentialStore, MemoryCredentialStore, StoreError};
pub use demand::{Demand, QueuedJob};
pub use device_flow::{DeviceCode, DeviceFlow, DeviceFlowError, PollOutcome};
pub use endpoints::Endpoints;
pub use error::{redact, GitHubError};
pub use health::{Health, HealthState};
pub use outage::OUTAGE_BACKOFF;

/// A plain HTTP client on the same stack as [`GitHubClient`] (rustls, redirects, no retry layer,
/// no default `user-agent: octocrab`) that carries no credential: for downloads from hosts that
/// must never see the token. The caller sets its User-Agent per request
/// ([`default_user_agent`]) and bounds each exchange.
pub fn anonymous_http_client() -> Result<octocrab::Octocrab, GitHubError> {
    transport::octocrab_on_our_stack()
}
pub use installations::TargetAccess;
pub use models::{Account, Installation, RepoPermissions, Repository, Runner, RunnerLabel};
pub use package::{host_platform, platform, RunnerPackage};
pub use runners::{Gone, JitConfig, JitRequest};
pub use secrecy::{ExposeSecret, SecretString};
