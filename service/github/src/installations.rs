//! Installations and repositories of the signed-in user (GITHUB.md §2): which
//! accounts the App is installed on, which repositories it reaches there, and
//! whether the user administers them.

use crate::client::GitHubClient;
use crate::error::GitHubError;
use crate::models::{Installation, InstallationsPage, RepositoriesPage, Repository};
use rm_core::Target;
use std::sync::Arc;
use std::time::Instant;

/// What a successful access check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetAccess {
    /// The installation serving the target.
    pub installation_id: u64,
    /// Repositories the App reaches under it (for an organization) or 1.
    pub repositories: usize,
}

impl GitHubClient {
    /// `GET /user/installations`, all pages.
    pub async fn installations(&self) -> Result<Vec<Installation>, GitHubError> {
        let url = self.api_url(&format!(
            "/user/installations?per_page={}",
            self.config().per_page
        ));
        let listing = self
            .list::<InstallationsPage>(
                url,
                "installations.list",
                "the App's installations",
                self.config().max_list_pages,
            )
            .await?;
        if listing.truncated {
            // An installation past the cap looks "not installed" to the access check.
            tracing::warn!(
                installations = listing.items.len(),
                "installation list cut at the page cap; raise max_list_pages"
            );
        }
        Ok(listing.items)
    }

    /// `GET /user/installations/{id}/repositories`, all pages.
    pub async fn installation_repositories(
        &self,
        installation_id: u64,
    ) -> Result<Vec<Repository>, GitHubError> {
        let url = self.api_url(&format!(
            "/user/installations/{installation_id}/repositories?per_page={}",
            self.config().per_page
        ));
        let listing = self
            .list::<RepositoriesPage>(
                url,
                "installations.repositories",
                "the installation's repositories",
                self.config().max_list_pages,
            )
            .await?;
        if listing.truncated {
            tracing::warn!(
                installation_id,
                repositories = listing.items.len(),
                "repository list cut at the page cap; raise max_list_pages"
            );
        }
        Ok(listing.items)
    }

    /// The installation on `account` (case-insensitive), or `NotInstalled`.
    pub async fn installation_for(&self, account: &str) -> Result<Installation, GitHubError> {
        let found = self
            .installations()
            .await?
            .into_iter()
            .find(|i| i.account.login.eq_ignore_ascii_case(account));
        match found {
            Some(i) if i.suspended_at.is_some() => Err(GitHubError::Forbidden {
                message: format!("the GitHub App installation on `{account}` is suspended; unsuspend it in the account's settings"),
            }),
            Some(i) => Ok(i),
            None => Err(GitHubError::NotInstalled {
                account: account.to_string(),
            }),
        }
    }

    /// The repositories the App reaches in organization `org` (not archived),
    /// cached for `repo_cache_ttl` (10 minutes by default).
    pub async fn organization_repositories(
        &self,
        org: &str,
    ) -> Result<Arc<Vec<Repository>>, GitHubError> {
        let key = org.to_ascii_lowercase();
        let ttl = self.config().repo_cache_ttl;
        if let Some((at, repos)) = self.org_cache().get(&key) {
            if at.elapsed() < ttl {
                return Ok(repos.clone());
            }
        }
        self.refresh_organization_repositories(org).await
    }

    /// Re-reads `org`'s repositories now.
    pub async fn refresh_organization_repositories(
        &self,
        org: &str,
    ) -> Result<Arc<Vec<Repository>>, GitHubError> {
        let installation = self.installation_for(org).await?;
        let repos: Vec<Repository> = self
            .installation_repositories(installation.id)
            .await?
            .into_iter()
            .filter(|r| r.owner.login.eq_ignore_ascii_case(org) && !r.archived)
            .collect();
        let repos = Arc::new(repos);
        self.org_cache()
            .insert(org.to_ascii_lowercase(), (Instant::now(), repos.clone()));
        tracing::debug!(
            org,
            repositories = repos.len(),
            "organization repositories refreshed"
        );
        Ok(repos)
    }

    fn org_cache(&self) -> std::sync::MutexGuard<'_, crate::client::OrgRepoCache> {
        match self.inner.org_repos.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Checks early that runners can be managed for `target`: the App is
    /// installed on its account, reaches the repository, and the user
    /// administers it. Errors name the fix.
    pub async fn check_access(&self, target: &Target) -> Result<TargetAccess, GitHubError> {
        match target {
            Target::Organization { org } => {
                let installation = self.installation_for(org.as_str()).await?;
                let repos = self.refresh_organization_repositories(org.as_str()).await?;
                Ok(TargetAccess {
                    installation_id: installation.id,
                    repositories: repos.len(),
                })
            }
            Target::Repository { owner, name } => {
                let installation = self.installation_for(owner.as_str()).await?;
                let full = format!("{owner}/{name}");
                let repo = self
                    .installation_repositories(installation.id)
                    .await?
                    .into_iter()
                    .find(|r| r.full_name.eq_ignore_ascii_case(&full));
                match repo {
                    None => Err(GitHubError::NotFound {
                        what: format!("repository `{full}` among those the GitHub App may access; add it to the App's installation on `{owner}`"),
                    }),
                    Some(r) if !r.is_admin() => Err(GitHubError::NotAdmin { repository: full }),
                    Some(_) => Ok(TargetAccess {
                        installation_id: installation.id,
                        repositories: 1,
                    }),
                }
            }
        }
    }
}
