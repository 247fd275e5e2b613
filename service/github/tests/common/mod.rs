//! Shared setup for the integration tests: a fake GitHub on loopback and a
//! client pointed at it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use rm_github::{
    Backoff, ClientConfig, Credential, Endpoints, GitHubClient, MemoryCredentialStore, SecretString,
};
use rm_testkit::{FakeConfig, FakeGitHub, InstallationRepos, IssuedToken};
use std::sync::Arc;
use std::time::Duration;

pub async fn fake() -> FakeGitHub {
    FakeGitHub::start(FakeConfig::default()).await.unwrap()
}

pub async fn fake_with(config: FakeConfig) -> FakeGitHub {
    FakeGitHub::start(config).await.unwrap()
}

/// Fast-failing settings for tests.
pub fn config(fake: &FakeGitHub) -> ClientConfig {
    let mut c = ClientConfig::new(Endpoints::custom(&fake.origin(), &fake.origin()).unwrap());
    c.client_id = fake.client_id();
    c.request_timeout = Duration::from_secs(5);
    c.backoff = Backoff {
        base: Duration::from_millis(10),
        cap: Duration::from_millis(50),
    };
    c
}

pub fn credential(t: &IssuedToken) -> Credential {
    Credential {
        access_token: SecretString::from(t.access_token.clone()),
        expires_at: Some(t.expires_at),
        refresh_token: t.refresh_token.clone().map(SecretString::from),
        refresh_expires_at: t.refresh_expires_at,
    }
}

pub fn client_with(
    config: ClientConfig,
    credential: Option<Credential>,
) -> (GitHubClient, Arc<MemoryCredentialStore>) {
    let store = Arc::new(MemoryCredentialStore::new(credential));
    let client = GitHubClient::new(config, store.clone()).unwrap();
    (client, store)
}

/// A user `alice` who administers `alice/app` and is a plain member of the
/// organization `team` (repository `team/shared`); the App is installed on
/// both. (Non-admin access could equally come from collaborating on another
/// user's repository: the fake lists every installation covering a repository
/// the user can reach, GITHUB.md §2.)
pub struct World {
    pub fake: FakeGitHub,
    pub token: IssuedToken,
    pub client: GitHubClient,
    pub store: Arc<MemoryCredentialStore>,
}

pub async fn world() -> World {
    world_with(FakeConfig::default()).await
}

pub async fn world_with(fc: FakeConfig) -> World {
    let fake = fake_with(fc).await;
    fake.create_user("alice").unwrap();
    fake.create_user("bob").unwrap();
    fake.create_repo("alice/app").unwrap();
    fake.create_org("team").unwrap();
    fake.add_org_member("team", "alice", false).unwrap();
    fake.create_repo("team/shared").unwrap();
    fake.create_installation("alice", InstallationRepos::All)
        .unwrap();
    fake.create_installation("team", InstallationRepos::All)
        .unwrap();
    let token = fake.issue_token("alice").unwrap();
    let (client, store) = client_with(config(&fake), Some(credential(&token)));
    World {
        fake,
        token,
        client,
        store,
    }
}

pub fn target(s: &str) -> rm_core::Target {
    rm_core::Target::parse(s).unwrap()
}

/// Waits until the client's outage (or rate) gate lets a request out again.
pub async fn after_next_try(client: &GitHubClient) {
    if let Some(at) = client.next_try() {
        let wait = (at - chrono::Utc::now()).to_std().unwrap_or_default();
        tokio::time::sleep(wait).await;
    }
}

/// Polls `f` until it is true or the deadline passes.
pub async fn eventually(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if f() {
            return true;
        }
        if tokio::time::Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Plays a JIT runner against the fake's broker (FAKE_PROTOCOL.md): decodes
/// the config, opens a session and waits for a job. Returns the job id and a
/// handle to complete it.
pub struct FakeRunner {
    http: octocrab::Octocrab,
    origin: String,
    secret: String,
}

impl FakeRunner {
    pub async fn take_job(origin: &str, blob: &SecretString) -> (FakeRunner, u64) {
        use base64::Engine;
        use rm_github::ExposeSecret;
        let b64 = base64::engine::general_purpose::STANDARD;
        let outer: serde_json::Value =
            serde_json::from_slice(&b64.decode(blob.expose_secret()).unwrap()).unwrap();
        let file = |k: &str| -> serde_json::Value {
            serde_json::from_slice(&b64.decode(outer[k].as_str().unwrap()).unwrap()).unwrap()
        };
        let runner_id = file(".runner")["AgentId"].as_u64().unwrap();
        let secret = file(".credentials")["Data"]["token"]
            .as_str()
            .unwrap()
            .to_string();
        let r = FakeRunner {
            http: octocrab::Octocrab::builder().build().unwrap(),
            origin: origin.to_string(),
            secret,
        };
        let (_, s) = r
            .send(
                http::Method::POST,
                "/_broker/sessions",
                Some(serde_json::json!({"runner_id": runner_id})),
            )
            .await;
        let sid = serde_json::from_str::<serde_json::Value>(&s).unwrap()["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        loop {
            let (status, body) = r
                .send(
                    http::Method::GET,
                    &format!("/_broker/sessions/{sid}/message"),
                    None,
                )
                .await;
            if status == 200 {
                let m: serde_json::Value = serde_json::from_str(&body).unwrap();
                return (r, m["job"]["job_id"].as_u64().unwrap());
            }
            assert_eq!(status, 204, "{body}");
        }
    }

    pub async fn complete(&self, job_id: u64) {
        let (status, _) = self
            .send(
                http::Method::POST,
                &format!("/_broker/jobs/{job_id}/complete"),
                Some(serde_json::json!({"result": "succeeded"})),
            )
            .await;
        assert_eq!(status, 200);
    }

    async fn send(
        &self,
        method: http::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, String) {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.origin))
            .header("authorization", format!("Bearer {}", self.secret))
            .header("content-type", "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default())
            .unwrap();
        let resp = self.http.execute(req).await.unwrap();
        let status = resp.status().as_u16();
        (status, self.http.body_to_string(resp).await.unwrap())
    }
}
