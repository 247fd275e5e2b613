//! A login service without a Secret Service (a headless host, a root shell): every operation
//! fails with an error that says so and names the fixes. Its own test binary because it points
//! this process's session bus address at nothing.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

use rm_credstore::{KeyringStore, SecretStore, StoreError, StoredCredential};

#[test]
fn without_a_secret_service_the_error_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("no-bus");
    // Edition 2021: set_var is safe; this binary holds this one test, so no other thread reads
    // the environment meanwhile.
    std::env::set_var(
        "DBUS_SESSION_BUS_ADDRESS",
        format!("unix:path={}", nowhere.display()),
    );
    let store = KeyringStore::user("test-no-bus").unwrap();
    let cred = StoredCredential {
        access_token: "ghu_SECRETx".into(),
        expires_at: None,
        refresh_token: None,
        refresh_expires_at: None,
    };
    for err in [
        store.load().unwrap_err(),
        store.save(&cred).unwrap_err(),
        store.delete().unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("Secret Service is not running") && text.contains("start gnome-keyring"),
            "{text}"
        );
        assert!(text.contains("--start-at boot"), "{text}");
        assert!(!text.contains("SECRET"), "{text}");
    }
}
