//! The parts of GitHub's JSON this crate reads. Own structs rather than
//! octocrab's models: those require fields GitHub may omit (e.g. a job's
//! `started_at`), and a lenient reader keeps a quirky answer from stopping the
//! service. Unknown fields are ignored.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A user or organization account.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Account {
    /// Login.
    pub login: String,
    /// `User` or `Organization`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

/// An installation of the App that the signed-in user can reach (§2).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Installation {
    /// Installation id.
    pub id: u64,
    /// Where it is installed.
    pub account: Account,
    /// `all` or `selected`.
    #[serde(default)]
    pub repository_selection: Option<String>,
    /// Permission name → `read` | `write` | `admin`.
    #[serde(default)]
    pub permissions: BTreeMap<String, String>,
    /// Set when the installation is suspended.
    #[serde(default)]
    pub suspended_at: Option<String>,
}

/// The user's permissions on a repository.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct RepoPermissions {
    /// Administration: needed for repository runners.
    #[serde(default)]
    pub admin: bool,
    /// Maintain.
    #[serde(default)]
    pub maintain: bool,
    /// Write.
    #[serde(default)]
    pub push: bool,
    /// Read.
    #[serde(default)]
    pub pull: bool,
}

/// A repository reachable through an installation.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Repository {
    /// Repository id.
    pub id: u64,
    /// Name without owner.
    pub name: String,
    /// `owner/name`.
    pub full_name: String,
    /// Owner.
    pub owner: Account,
    /// The signed-in user's permissions (absent → treated as none).
    #[serde(default)]
    pub permissions: Option<RepoPermissions>,
    /// Archived repositories run no workflows.
    #[serde(default)]
    pub archived: bool,
}

impl Repository {
    /// Whether the user administers it.
    pub fn is_admin(&self) -> bool {
        self.permissions.map(|p| p.admin).unwrap_or(false)
    }
}

/// A runner label.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct RunnerLabel {
    /// Label id.
    #[serde(default)]
    pub id: Option<u64>,
    /// Label text.
    pub name: String,
    /// `read-only` or `custom`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

/// A self-hosted runner (§3.1).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Runner {
    /// Runner id.
    pub id: u64,
    /// Runner name.
    pub name: String,
    /// OS as GitHub reports it (`unknown` until it connects).
    #[serde(default)]
    pub os: String,
    /// `online` or `offline`.
    #[serde(default)]
    pub status: String,
    /// Running a job.
    #[serde(default)]
    pub busy: bool,
    /// Ephemeral (JIT runners are).
    #[serde(default)]
    pub ephemeral: Option<bool>,
    /// Runner group.
    #[serde(default)]
    pub runner_group_id: Option<u64>,
    /// Labels.
    #[serde(default)]
    pub labels: Vec<RunnerLabel>,
}

impl Runner {
    /// Whether GitHub sees it connected.
    pub fn is_online(&self) -> bool {
        self.status.eq_ignore_ascii_case("online")
    }
}

#[derive(Deserialize)]
pub(crate) struct InstallationsPage {
    #[serde(default)]
    pub total_count: Option<u64>,
    #[serde(default)]
    pub installations: Vec<Installation>,
}

#[derive(Deserialize)]
pub(crate) struct RepositoriesPage {
    #[serde(default)]
    pub total_count: Option<u64>,
    #[serde(default)]
    pub repositories: Vec<Repository>,
}

#[derive(Deserialize)]
pub(crate) struct RunSummary {
    pub id: u64,
    #[serde(default)]
    pub updated_at: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct RunsPage {
    #[serde(default)]
    pub total_count: Option<u64>,
    #[serde(default)]
    pub workflow_runs: Vec<RunSummary>,
}

#[derive(Deserialize)]
pub(crate) struct JobItem {
    pub id: u64,
    pub run_id: u64,
    pub status: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub created_at: Option<DateTime<Utc>>,
    /// The runner that took the job; `null` until one is assigned.
    #[serde(default)]
    pub runner_name: Option<String>,
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub workflow_name: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct JobsPage {
    #[serde(default)]
    pub total_count: Option<u64>,
    #[serde(default)]
    pub jobs: Vec<JobItem>,
}

#[derive(Deserialize)]
pub(crate) struct RunnersPage {
    #[serde(default)]
    pub total_count: Option<u64>,
    #[serde(default)]
    pub runners: Vec<Runner>,
}

/// A page of a list: its items and GitHub's `total_count`.
pub(crate) trait Paged: serde::de::DeserializeOwned {
    type Item;
    fn into_items(self) -> (Vec<Self::Item>, Option<u64>);
}

macro_rules! paged {
    ($page:ty, $item:ty, $field:ident) => {
        impl Paged for $page {
            type Item = $item;
            fn into_items(self) -> (Vec<$item>, Option<u64>) {
                (self.$field, self.total_count)
            }
        }
    };
}

paged!(InstallationsPage, Installation, installations);
paged!(RepositoriesPage, Repository, repositories);
paged!(RunsPage, RunSummary, workflow_runs);
paged!(JobsPage, JobItem, jobs);
paged!(RunnersPage, Runner, runners);
