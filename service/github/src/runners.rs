//! Self-hosted runners (GITHUB.md §3): JIT registration, inventory, removal.
//! Repository and organization targets differ only in the path prefix.

use crate::client::{expect_success, status_error, GitHubClient};
use crate::error::GitHubError;
use crate::models::{Runner, RunnersPage};
use crate::transport::encode;
use http::Method;
use rm_core::Target;
use secrecy::SecretString;

/// `/repos/{owner}/{repo}` or `/orgs/{org}`.
pub(crate) fn scope_path(target: &Target) -> String {
    match target {
        Target::Repository { owner, name } => format!("/repos/{owner}/{name}"),
        Target::Organization { org } => format!("/orgs/{org}"),
    }
}

/// What to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitRequest {
    /// Unique runner name (derived from the attempt id).
    pub name: String,
    /// Runner group; 1 is "Default".
    pub runner_group_id: u64,
    /// Labels (1–100).
    pub labels: Vec<String>,
    /// Work folder; GitHub's default is `_work`.
    pub work_folder: Option<String>,
}

/// A JIT registration: the runner and its one-shot config (a secret).
#[derive(Clone, Debug)]
pub struct JitConfig {
    /// The registered runner (offline until the binary connects).
    pub runner: Runner,
    /// `encoded_jit_config`, handed to the listener via its environment.
    pub encoded_jit_config: SecretString,
}

/// How a removal ended; both mean the registration no longer exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// 204: removed now.
    Deleted,
    /// 404: it was already gone (GitHub removes JIT runners after their job).
    AlreadyGone,
}

impl GitHubClient {
    /// `POST {scope}/actions/runners/generate-jitconfig`. Not retried here:
    /// a retry after a lost answer would hit 409 for the same name.
    pub async fn generate_jit_config(
        &self,
        target: &Target,
        request: &JitRequest,
    ) -> Result<JitConfig, GitHubError> {
        #[derive(serde::Deserialize)]
        struct Answer {
            runner: Runner,
            encoded_jit_config: String,
        }
        let mut body = serde_json::json!({
            "name": request.name,
            "runner_group_id": request.runner_group_id,
            "labels": request.labels,
        });
        if let (Some(folder), Some(map)) = (&request.work_folder, body.as_object_mut()) {
            map.insert(
                "work_folder".into(),
                serde_json::Value::String(folder.clone()),
            );
        }
        let url = self.api_url(&format!(
            "{}/actions/runners/generate-jitconfig",
            scope_path(target)
        ));
        let answer = self
            .call(Method::POST, &url, "runners.jit", Some(&body), false)
            .await?;
        let what = format!("runner group {} of `{target}`", request.runner_group_id);
        let answer = expect_success(answer, &what)?;
        let parsed: Answer = self.parse(&answer, "runners.jit")?;
        tracing::info!(target = %target, runner_id = parsed.runner.id, runner = %parsed.runner.name, "JIT runner registered");
        Ok(JitConfig {
            runner: parsed.runner,
            encoded_jit_config: SecretString::from(parsed.encoded_jit_config),
        })
    }

    /// `GET {scope}/actions/runners[?name=]`, all pages.
    pub async fn list_runners(
        &self,
        target: &Target,
        name: Option<&str>,
    ) -> Result<Vec<Runner>, GitHubError> {
        let mut path = format!(
            "{}/actions/runners?per_page={}",
            scope_path(target),
            self.config().per_page
        );
        if let Some(name) = name {
            path.push_str("&name=");
            path.push_str(&encode(name));
        }
        let listing = self
            .list::<RunnersPage>(
                self.api_url(&path),
                "runners.list",
                &format!("runners of `{target}`"),
                self.config().max_list_pages,
            )
            .await?;
        if listing.truncated {
            tracing::warn!(target = %target, runners = listing.items.len(), "runner list cut at the page cap");
        }
        Ok(listing.items)
    }

    /// `GET {scope}/actions/runners/{id}`; `None` when it does not exist.
    pub async fn get_runner(
        &self,
        target: &Target,
        runner_id: u64,
    ) -> Result<Option<Runner>, GitHubError> {
        let url = self.api_url(&format!(
            "{}/actions/runners/{runner_id}",
            scope_path(target)
        ));
        match self
            .get_json::<Runner>(
                &url,
                "runners.get",
                &format!("runner {runner_id} of `{target}`"),
            )
            .await
        {
            Ok((runner, _)) => Ok(Some(runner)),
            Err(GitHubError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `DELETE {scope}/actions/runners/{id}`: 204 and 404 both mean gone;
    /// 422 means it is running a job.
    pub async fn delete_runner(
        &self,
        target: &Target,
        runner_id: u64,
    ) -> Result<Gone, GitHubError> {
        let url = self.api_url(&format!(
            "{}/actions/runners/{runner_id}",
            scope_path(target)
        ));
        let answer = self
            .call(Method::DELETE, &url, "runners.delete", None, false)
            .await?;
        match answer.status {
            200..=299 => {
                tracing::info!(target = %target, runner_id, "runner removed");
                Ok(Gone::Deleted)
            }
            404 => Ok(Gone::AlreadyGone),
            422 => Err(GitHubError::StillRunningJob { runner_id }),
            s => Err(status_error(
                s,
                &answer,
                &format!("runner {runner_id} of `{target}`"),
            )),
        }
    }
}
