//! The credential in the running service: handed over through the API, renewed by the service
//! alone (the renewed pair persisted in its store), and revoked: the service says "sign in
//! again", keeps running and loses nothing, and a new credential recovers it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_proto::{AuthState, TargetState};
use service_support::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_renews_a_short_lived_token_and_keeps_serving() {
    let w = World::start().await;
    w.gh.set_token_lifetimes(Duration::from_secs(4), Duration::from_secs(3600));
    let (token, cred) = w.credential();
    let mut d = w.spawn_daemon(&["--renew-margin-secs", "2"]);
    let (client, label) = serve_repo_with(&mut d, &cred, 1).await;
    let first = w.queue(&label, 1, Duration::from_millis(200));
    eventually(Duration::from_secs(20), "the first job completed", || {
        w.completed_by_us(first[0])
    })
    .await;
    eventually(Duration::from_secs(15), "the token renewed", || {
        w.gh.counters().endpoint("access_token").requests >= 1
    })
    .await;
    let later = w.queue(&label, 1, Duration::from_millis(200));
    eventually(
        Duration::from_secs(20),
        "a job after renewal completed",
        || w.completed_by_us(later[0]),
    )
    .await;
    let s = client.status().await.unwrap();
    assert!(matches!(s.auth, AuthState::SignedIn { .. }), "{:?}", s.auth);
    // The renewed pair replaced the handed-over one in the service's store.
    let stored = std::fs::read(w.data_dir().join("credential.json")).unwrap();
    assert!(
        !contains(&stored, &token.access_token),
        "the store holds the renewed token"
    );
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
    assert!(
        !d.log_text().contains(&token.access_token),
        "no token in the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_credential_asks_for_sign_in_and_a_new_one_recovers() {
    let w = World::start().await;
    let (token, cred) = w.credential();
    let mut d = w.spawn_daemon(&[]);
    let (client, label) = serve_repo_with(&mut d, &cred, 1).await;
    let first = w.queue(&label, 1, Duration::from_millis(200));
    eventually(Duration::from_secs(20), "the first job completed", || {
        w.completed_by_us(first[0])
    })
    .await;
    status_until(
        &client,
        Duration::from_secs(10),
        "the runner cleaned",
        |s| s.runners.is_empty(),
    )
    .await;
    let attempts_before = w_attempts(&w);

    assert!(w.gh.revoke_token(&token.access_token));
    let s = status_until(&client, Duration::from_secs(15), "sign in required", |s| {
        matches!(s.auth, AuthState::SignInRequired { .. })
    })
    .await;
    if let AuthState::SignInRequired { reason } = &s.auth {
        assert!(reason.contains("auth login"), "names the fix: {reason}");
    }
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "the service keeps running"
    );
    assert_eq!(w_attempts(&w), attempts_before, "nothing lost");
    assert_eq!(s.targets.len(), 1, "the target is kept");

    let (_, fresh) = w.credential();
    client.put_credential(&fresh).await.unwrap();
    let s = status_until(&client, Duration::from_secs(15), "signed in again", |s| {
        matches!(s.auth, AuthState::SignedIn { .. })
            && s.targets
                .iter()
                .all(|t| t.state != TargetState::AuthenticationFailed)
    })
    .await;
    assert_eq!(s.targets.len(), 1);
    let later = w.queue(&label, 1, Duration::from_millis(200));
    eventually(
        Duration::from_secs(20),
        "a job after signing in again",
        || w.completed_by_us(later[0]),
    )
    .await;

    status_until(
        &client,
        Duration::from_secs(10),
        "the runner cleaned",
        |s| s.runners.is_empty(),
    )
    .await;
    // Sign-out purges the service's store and forgets the credential at once.
    client.delete_credential().await.unwrap();
    let s = client.status().await.unwrap();
    assert_eq!(s.auth, AuthState::SignedOut);
    assert!(
        !w.data_dir().join("credential.json").exists(),
        "the stored credential was removed"
    );
    let st = d.terminate(Duration::from_secs(20));
    assert!(st.success(), "{st:?}\n{}", d.log_text());
}

/// Attempt ids in the journal (read while the daemon runs: SQLite allows a second reader).
fn w_attempts(w: &World) -> Vec<String> {
    let mut j = rm_journal::Journal::open(w.journal_path()).unwrap();
    let mut ids: Vec<String> = j
        .list_policies()
        .unwrap()
        .iter()
        .flat_map(|p| j_attempts(&mut j, p.id()))
        .collect();
    ids.sort();
    ids
}

fn j_attempts(j: &mut rm_journal::Journal, id: rm_core::PolicyId) -> Vec<String> {
    j.attempts_for_policy(id)
        .unwrap()
        .iter()
        .map(|a| format!("{}:{}", a.id(), a.state()))
        .collect()
}
