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
    /// What triggered the run: `push`, `pull_request`, `workflow_dispatch`, ...
    #[serde(default)]
    pub event: Option<String>,
    /// The repository the run belongs to (the one whose runs were listed).
    #[serde(default, deserialize_with = "lenient")]
    pub repository: Option<RunRepository>,
    /// Where the run's head commit comes from; another repository for a pull request from a
    /// fork. GitHub omits it for some events and may send `null`.
    #[serde(default, deserialize_with = "lenient")]
    pub head_repository: Option<RunRepository>,
}

/// The part of a run's `repository` / `head_repository` this crate reads.
#[derive(Deserialize)]
pub(crate) struct RunRepository {
    #[serde(default)]
    pub full_name: Option<String>,
}

impl RunSummary {
    /// The trust the run's jobs earn ([`rm_core::judge_run`], fail-closed), the run being one
    /// of `repository.full_name` or, without that, of `listed_in` (the `owner/repo` whose runs
    /// were read).
    pub fn trust(&self, listed_in: &str) -> (rm_core::JobTrust, String) {
        let base = full_name(self.repository.as_ref()).unwrap_or(listed_in);
        rm_core::judge_run(
            base,
            self.event.as_deref(),
            full_name(self.head_repository.as_ref()),
        )
    }

    /// Whether the run must be treated as a fork's (untrusted): [`RunSummary::trust`].
    pub fn is_from_fork(&self, listed_in: &str) -> bool {
        self.trust(listed_in).0 == rm_core::JobTrust::Untrusted
    }
}

fn full_name(repo: Option<&RunRepository>) -> Option<&str> {
    repo.and_then(|r| r.full_name.as_deref())
        .map(str::trim)
        .filter(|n| !n.is_empty())
}

/// `T` when the value reads as one; `None` for null or anything else, so that one odd
/// field does not make a whole page unreadable.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

#[derive(Deserialize)]
pub(crate) struct RunsPage {
    #[serde(default)]
    pub total_count: Option<u64>,
    #[serde(default)]
    pub workflow_runs: Vec<RunSummary>,
}

#[derive(Clone, Deserialize)]
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn run(json: &str) -> RunSummary {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_run_without_a_head_repository_is_trusted_only_for_an_event_that_is_no_pull_request() {
        // Omitted (some events) and null alike.
        for r in [
            run(r#"{"id":1,"event":"schedule","repository":{"full_name":"octo/app"}}"#),
            run(
                r#"{"id":1,"event":"push","repository":{"full_name":"octo/app"},"head_repository":null}"#,
            ),
            run(r#"{"id":1,"event":"workflow_dispatch","head_repository":{"full_name":null}}"#),
            run(r#"{"id":1,"event":"push","head_repository":{}}"#),
        ] {
            assert!(!r.is_from_fork("octo/app"));
            assert!(!r.is_from_fork("someone/else"));
        }
    }

    #[test]
    fn a_pull_request_without_a_head_repository_or_a_run_without_an_event_is_a_forks() {
        // Fail closed: where the code comes from cannot be established.
        for r in [
            run(r#"{"id":1,"event":"pull_request","repository":{"full_name":"octo/app"}}"#),
            run(
                r#"{"id":1,"event":"pull_request_target","repository":{"full_name":"octo/app"},"head_repository":null}"#,
            ),
            run(r#"{"id":1,"event":"Pull_Request","head_repository":{"full_name":null}}"#),
            run(r#"{"id":1,"repository":{"full_name":"octo/app"},"head_repository":null}"#),
            run(r#"{"id":1,"event":"","head_repository":{}}"#),
        ] {
            assert!(r.is_from_fork("octo/app"));
        }
    }

    #[test]
    fn the_same_repository_in_another_case_is_not_a_fork() {
        let r = run(
            r#"{"id":1,"event":"push","repository":{"full_name":"Octo/App"},
                "head_repository":{"full_name":"octo/app"}}"#,
        );
        assert_eq!(r.event.as_deref(), Some("push"));
        assert!(!r.is_from_fork("octo/app"));
        // `repository` is the base when present, not the name the runs were read under.
        assert!(!r.is_from_fork("other/name"));
    }

    #[test]
    fn another_head_repository_is_a_fork() {
        let r = run(
            r#"{"id":1,"event":"pull_request","repository":{"full_name":"octo/app"},
                "head_repository":{"full_name":"mallory/app","fork":true}}"#,
        );
        assert_eq!(r.event.as_deref(), Some("pull_request"));
        assert!(r.is_from_fork("octo/app"));
        assert_eq!(r.trust("octo/app").0, rm_core::JobTrust::Untrusted);
        let r = run(
            r#"{"id":1,"event":"pull_request","repository":{"full_name":"octo/app"},
                "head_repository":{"full_name":"octo/app"}}"#,
        );
        assert!(!r.is_from_fork("octo/app"));
        assert_eq!(r.trust("octo/app").0, rm_core::JobTrust::PullRequest);
    }

    #[test]
    fn without_a_repository_the_listed_one_is_the_base() {
        let r = run(r#"{"id":1,"event":"push","head_repository":{"full_name":"mallory/app"}}"#);
        assert!(r.is_from_fork("octo/app"));
        assert!(!r.is_from_fork("Mallory/App"));
        let r = run(
            r#"{"id":1,"event":"push","repository":null,"head_repository":{"full_name":"octo/app"}}"#,
        );
        assert!(!r.is_from_fork("octo/app"));
        // Without an event, where the code comes from is not established: a fork's.
        let r = run(r#"{"id":1,"repository":null,"head_repository":{"full_name":"octo/app"}}"#);
        assert!(r.is_from_fork("octo/app"));
    }

    #[test]
    fn an_odd_repository_value_does_not_spoil_the_page() {
        let page: RunsPage = serde_json::from_str(
            r#"{"total_count":3,"workflow_runs":[
                {"id":1,"event":"push","repository":"octo/app","head_repository":42},
                {"id":2,"repository":{"full_name":"octo/app"},"head_repository":{"full_name":"x/app"}},
                {"id":3,"repository":"octo/app","head_repository":42}]}"#,
        )
        .unwrap();
        assert_eq!(page.workflow_runs.len(), 3);
        assert!(!page.workflow_runs[0].is_from_fork("octo/app"));
        assert!(page.workflow_runs[1].is_from_fork("octo/app"));
        // Unreadable head and no event: where its code comes from is unknown.
        assert!(page.workflow_runs[2].is_from_fork("octo/app"));
    }
}
