//! Device-flow sign-in and token renewal against the fake GitHub.

mod common;

use common::*;
use rm_github::{
    AuthState, Credential, CredentialStore, DeviceFlow, DeviceFlowError, ExposeSecret, GitHubError,
    PollOutcome, SecretString,
};
use rm_testkit::{EndpointMatch, FakeConfig, Fault, FaultRule};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn quick_device(interval_s: u64, expires_s: u64) -> FakeConfig {
    FakeConfig {
        device_interval: Duration::from_secs(interval_s),
        device_expires_in: Duration::from_secs(expires_s),
        ..FakeConfig::default()
    }
}

#[tokio::test]
async fn device_flow_approved() {
    let fake = fake_with(quick_device(0, 60)).await;
    fake.create_user("alice").unwrap();
    let flow = DeviceFlow::new(config(&fake)).unwrap();
    let code = flow.start().await.unwrap();
    assert_eq!(code.user_code.len(), 9, "XXXX-XXXX: {}", code.user_code);
    assert!(code.verification_uri.ends_with("/login/device"));
    assert!(!format!("{code:?}").contains(code.device_code.expose_secret()));
    assert!(matches!(
        flow.poll_once(&code).await.unwrap(),
        PollOutcome::Pending
    ));

    let user_code = code.user_code.clone();
    let fake_ref = &fake;
    let mut waits = Vec::new();
    let cred = flow
        .poll_until(&code, |d| {
            waits.push(d);
            fake_ref.approve_device(&user_code, "alice").unwrap();
            async { true }
        })
        .await
        .unwrap();
    assert!(cred.access_token.expose_secret().starts_with("ghu_"));
    assert!(
        cred.refresh_token.is_some()
            && cred.expires_at.is_some()
            && cred.refresh_expires_at.is_some()
    );
    assert_eq!(
        waits,
        [Duration::from_secs(1)],
        "interval 0 is floored at 1 s"
    );

    // The token works.
    let (client, _) = client_with(config(&fake), Some(cred));
    client.installations().await.unwrap();
    // A used code is dead.
    assert!(matches!(
        flow.poll_once(&code).await,
        Err(DeviceFlowError::IncorrectDeviceCode)
    ));
}

#[tokio::test]
async fn device_flow_slow_down_then_denied() {
    let fake = fake_with(quick_device(5, 60)).await;
    let flow = DeviceFlow::new(config(&fake)).unwrap();
    let code = flow.start().await.unwrap();
    assert_eq!(code.interval, Duration::from_secs(5));
    let user_code = code.user_code.clone();
    let fake_ref = &fake;
    let mut waits = Vec::new();
    // Never actually waits: the fake answers slow_down with a longer interval,
    // which the next wait must use; then the user denies.
    let err = flow
        .poll_until(&code, |d| {
            waits.push(d);
            if waits.len() == 3 {
                fake_ref.deny_device(&user_code).unwrap();
            }
            async { true }
        })
        .await
        .unwrap_err();
    assert!(matches!(err, DeviceFlowError::Denied), "{err:?}");
    assert!(err.to_string().contains("Authorize"));
    assert_eq!(
        waits,
        [
            Duration::from_secs(5),
            Duration::from_secs(5),
            Duration::from_secs(10)
        ]
    );
}

#[tokio::test]
async fn device_flow_expired_and_cancelled() {
    let fake = fake_with(quick_device(1, 1)).await;
    let flow = DeviceFlow::new(config(&fake)).unwrap();
    let code = flow.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let err = flow.poll_once(&code).await.unwrap_err();
    assert!(matches!(err, DeviceFlowError::Expired), "{err:?}");
    assert!(err.to_string().contains("start sign-in again"));
    assert!(matches!(
        flow.poll_until(&code, |_| async { true }).await,
        Err(DeviceFlowError::Expired)
    ));

    let code = flow.start().await.unwrap();
    let err = flow
        .poll_until(&code, |_| async { false })
        .await
        .unwrap_err();
    assert!(matches!(err, DeviceFlowError::Cancelled));
}

#[tokio::test]
async fn device_flow_unknown_client() {
    let fake = fake().await;
    let mut c = config(&fake);
    c.client_id = "Iv1.not-this-app".into();
    let err = DeviceFlow::new(c).unwrap().start().await.unwrap_err();
    assert!(
        matches!(err, DeviceFlowError::UnknownClient { .. }),
        "{err:?}"
    );
}

/// A store that records every credential saved, in order.
#[derive(Default)]
struct RecordingStore {
    saved: Mutex<Vec<Credential>>,
    initial: Mutex<Option<Credential>>,
}

#[allow(clippy::unwrap_used)] // test double: a poisoned lock is a failed test
impl CredentialStore for RecordingStore {
    fn load(&self) -> Result<Option<Credential>, rm_github::StoreError> {
        Ok(self
            .saved
            .lock()
            .unwrap()
            .last()
            .cloned()
            .or_else(|| self.initial.lock().unwrap().clone()))
    }
    fn save(&self, c: &Credential) -> Result<(), rm_github::StoreError> {
        self.saved.lock().unwrap().push(c.clone());
        Ok(())
    }
}

#[tokio::test]
async fn renews_before_expiry_and_saves_first() {
    let w = world().await;
    // A token that expires in 60 s, with a 5 minute renewal margin.
    w.fake
        .set_token_lifetimes(Duration::from_secs(60), Duration::from_secs(3600));
    let old = w.fake.issue_token("alice").unwrap();
    w.fake
        .set_token_lifetimes(Duration::from_secs(28_800), Duration::from_secs(3600));
    let store = Arc::new(RecordingStore::default());
    *store.initial.lock().unwrap() = Some(credential(&old));
    let client = rm_github::GitHubClient::new(config(&w.fake), store.clone()).unwrap();

    w.fake.reset_counters();
    client.installations().await.unwrap();
    assert_eq!(client.refresh_count(), 1);
    assert_eq!(w.fake.counters().endpoint("access_token").requests, 1);
    let saved = store.saved.lock().unwrap().clone();
    assert_eq!(saved.len(), 1);
    assert_ne!(saved[0].access_token.expose_secret(), old.access_token);
    // The next call uses the saved (renewed) token without renewing again.
    client.installations().await.unwrap();
    assert_eq!(client.refresh_count(), 1);
    assert!(matches!(
        client.auth_state(),
        AuthState::SignedIn {
            renewable: true,
            ..
        }
    ));
    // Rotation: the old pair is dead.
    let (old_client, _) = client_with(
        config(&w.fake),
        Some(rm_github::Credential::non_expiring(SecretString::from(
            old.access_token.clone(),
        ))),
    );
    assert!(matches!(
        old_client.installations().await,
        Err(GitHubError::Unauthorized)
    ));
}

#[tokio::test]
async fn concurrent_401s_trigger_exactly_one_refresh() {
    let w = world().await;
    let t = target("alice/app");
    // Both of the next two requests get 401 although the token is fine.
    w.fake.inject_fault(FaultRule::times(
        EndpointMatch::name("repo_runners_list"),
        Fault::Unauthorized,
        2,
    ));
    w.fake.reset_counters();
    let (a, b) = tokio::join!(
        w.client.list_runners(&t, None),
        w.client.list_runners(&t, None)
    );
    a.unwrap();
    b.unwrap();
    let c = w.fake.counters();
    assert_eq!(
        c.endpoint("repo_runners_list").errors,
        2,
        "both saw 401: {c:?}"
    );
    assert_eq!(c.endpoint("access_token").requests, 1, "single flight");
    assert_eq!(w.client.refresh_count(), 1);
    let stored = w.store.load().unwrap().unwrap();
    assert_ne!(stored.access_token.expose_secret(), w.token.access_token);
    assert_eq!(w.store.saves(), 1);
    // The old pair is dead: its access token is refused, its refresh token too.
    let (old, _) = client_with(config(&w.fake), Some(credential(&w.token)));
    let e = old.list_runners(&t, None).await.unwrap_err();
    assert!(e.needs_sign_in(), "{e:?}");
    assert!(matches!(old.auth_state(), AuthState::SignInRequired { .. }));
}

#[tokio::test]
async fn revoked_credential_requires_sign_in_without_looping() {
    let w = world().await;
    assert!(w.fake.revoke_token(&w.token.access_token));
    w.fake.reset_counters();
    let e = w.client.installations().await.unwrap_err();
    assert!(matches!(e, GitHubError::SignInRequired { .. }), "{e:?}");
    assert!(e.to_string().contains("sign in"), "{e}");
    match w.client.auth_state() {
        AuthState::SignInRequired { reason } => {
            assert!(reason.contains("bad_refresh_token"), "{reason}")
        }
        s => panic!("{s:?}"),
    }
    let c = w.fake.counters();
    assert_eq!(c.endpoint("access_token").requests, 1);
    assert_eq!(c.endpoint("user_installations").requests, 1);
    // Further calls fail fast, without requests.
    assert!(w.client.installations().await.unwrap_err().needs_sign_in());
    assert_eq!(w.fake.counters().total.requests, c.total.requests);
    // A new sign-in recovers.
    let fresh = w.fake.issue_token("alice").unwrap();
    w.client.set_credential(credential(&fresh)).unwrap();
    w.client.installations().await.unwrap();
}

#[tokio::test]
async fn a_credential_without_refresh_half_never_renews() {
    let w = world().await;
    let (client, _) = client_with(
        config(&w.fake),
        Some(Credential::non_expiring(SecretString::from(
            w.token.access_token.clone(),
        ))),
    );
    w.fake
        .inject_fault(FaultRule::times(EndpointMatch::Any, Fault::Unauthorized, 1));
    w.fake.reset_counters();
    let e = client.installations().await.unwrap_err();
    assert!(matches!(e, GitHubError::Unauthorized), "{e:?}");
    assert_eq!(w.fake.counters().endpoint("access_token").requests, 0);
    assert!(matches!(
        client.auth_state(),
        AuthState::SignInRequired { .. }
    ));
}

#[tokio::test]
async fn signed_out_and_reload() {
    let w = world().await;
    let (client, store) = client_with(config(&w.fake), None);
    assert_eq!(client.auth_state(), AuthState::SignedOut);
    assert!(matches!(
        client.installations().await,
        Err(GitHubError::SignInRequired { .. })
    ));
    store.save(&credential(&w.token)).unwrap();
    assert!(matches!(
        client.reload_credential().unwrap(),
        AuthState::SignedIn { .. }
    ));
    client.installations().await.unwrap();
    client.sign_out();
    assert_eq!(client.auth_state(), AuthState::SignedOut);
}
