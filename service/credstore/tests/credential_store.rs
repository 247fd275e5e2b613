//! The credential stores against real storage: files in a temp dir, and the real Secret
//! Service (gnome-keyring) when scripts/test.sh provides one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

use std::fs;
use std::path::Path;

use rm_credstore::{FileStore, KeyringStore, SecretStore, StoreError, StoredCredential};

fn cred(n: u32) -> StoredCredential {
    StoredCredential {
        access_token: format!("ghu_SECRETaccess{n}").into(),
        expires_at: Some("2030-01-01T00:00:00Z".parse().unwrap()),
        refresh_token: Some(format!("ghr_SECRETrefresh{n}").into()),
        refresh_expires_at: Some("2030-07-01T00:00:00Z".parse().unwrap()),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn file_store_round_trips_with_mode_0600_and_replaces_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credential.json");
    let store = FileStore::new(&path);
    assert!(
        store.load().unwrap().is_none(),
        "absent file = no credential"
    );

    store.save(&cred(1)).unwrap();
    #[cfg(unix)]
    assert_eq!(mode(&path), 0o600);
    let loaded = store.load().unwrap().unwrap();
    assert!(loaded.same_tokens(&cred(1)));
    assert_eq!(loaded.expires_at, cred(1).expires_at);
    assert_eq!(loaded.refresh_expires_at, cred(1).refresh_expires_at);

    // Replacing keeps exactly one file: no temporary files left behind.
    for n in 2..6 {
        store.save(&cred(n)).unwrap();
    }
    assert_eq!(names(dir.path()), ["credential.json"]);
    assert!(store.load().unwrap().unwrap().same_tokens(&cred(5)));
    #[cfg(unix)]
    assert_eq!(mode(&path), 0o600);

    store.delete().unwrap();
    assert!(store.load().unwrap().is_none());
    store.delete().unwrap(); // deleting nothing is fine
    assert!(!store.describe().contains("SECRET"));
}

#[test]
fn corrupt_file_is_a_clear_error_naming_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credential.json");
    let store = FileStore::new(&path);
    store.save(&cred(1)).unwrap();
    // Truncate it mid-token, as a torn write by something else would.
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, &text[..text.len() / 2]).unwrap();
    let err = store.load().unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    let err = err.to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("runner-manager auth login"), "{err}");
    assert!(!err.contains("SECRET"), "{err}");

    fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
    let err = store.load().unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("corrupt") && err.contains("runner-manager auth login"),
        "{err}"
    );
}

#[cfg(unix)]
#[test]
fn a_file_readable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credential.json");
    let store = FileStore::new(&path);
    store.save(&cred(1)).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let err = store.load().unwrap_err();
    assert!(matches!(err, StoreError::Exposed(_)), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("0644") && err.contains("auth login"), "{err}");
    assert!(!err.contains("SECRET"), "{err}");
}

#[test]
fn a_failed_replace_keeps_nothing_half_written() {
    // The target path is a non-empty directory: the final rename fails.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credential.json");
    fs::create_dir(&path).unwrap();
    fs::write(path.join("keep"), "x").unwrap();
    let err = FileStore::new(&path)
        .save(&cred(1))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(!err.contains("SECRET"), "{err}");
    assert_eq!(
        names(dir.path()),
        ["credential.json"],
        "temporary file left behind"
    );
    assert_eq!(names(&path), ["keep"]);
}

/// The real Secret Service. scripts/test.sh runs the tests inside `dbus-run-session` with an
/// unlocked gnome-keyring and sets RM_TEST_SECRET_SERVICE=1; elsewhere this test says why it
/// does nothing.
#[test]
fn secret_service_round_trip() {
    if std::env::var("RM_TEST_SECRET_SERVICE").as_deref() != Ok("1") {
        eprintln!(
            "SKIPPED secret_service_round_trip: RM_TEST_SECRET_SERVICE is not 1 (run \
             scripts/test.sh, which starts a session bus with gnome-keyring)"
        );
        return;
    }
    let account = format!("test-{}", std::process::id());
    let store = KeyringStore::user(&account).unwrap();
    store.delete().unwrap();
    assert!(store.load().unwrap().is_none());
    store.save(&cred(1)).unwrap();
    store.save(&cred(2)).unwrap();
    // It really is in the Secret Service (not a mock): ask it through another client.
    if let Ok(out) = std::process::Command::new("secret-tool")
        .args(["lookup", "service", "runner-manager", "username", &account])
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("ghu_SECRETaccess2"),
            "secret-tool saw: {text:?}"
        );
    }
    // A second handle (as after a restart) reads what the first stored.
    let again = KeyringStore::user(&account).unwrap();
    let loaded = again.load().unwrap().unwrap();
    assert!(loaded.same_tokens(&cred(2)));
    assert_eq!(loaded.expires_at, cred(2).expires_at);
    assert!(!format!("{again:?}").contains("SECRET"));
    assert!(again.describe().contains(&account));
    again.delete().unwrap();
    assert!(store.load().unwrap().is_none());
}
