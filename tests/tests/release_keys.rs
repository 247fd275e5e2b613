//! `scripts/release.sh` signs only with the secret half of the public key the binaries embed:
//! a release every installed service would refuse is refused before anything is built, with
//! the fix. (The embedded key is `installer/release-key.pub` unless
//! `RUNNER_MANAGER_RELEASE_PUBKEY_FILE` names another, which the build then embeds.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A throwaway minisign key pair in `dir`: (secret, public).
fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (sec, public) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    let made = Command::new("minisign")
        .args(["-G", "-W", "-f", "-p"])
        .arg(&public)
        .arg("-s")
        .arg(&sec)
        .output()
        .expect("minisign (scripts/lib.sh installs it)");
    assert!(made.status.success(), "{made:?}");
    (sec, public)
}

fn release(dir: &Path, key: &Path, pubkey: Option<&Path>) -> Output {
    let mut cmd = Command::new(repo().join("scripts/release.sh"));
    cmd.args(["9.9.9", "--profile", "dev", "--out"])
        .arg(dir.join("dist"))
        .env("RM_RELEASE_ALLOW_DIRTY", "1")
        .env("RUNNER_MANAGER_SIGNING_KEY_FILE", key)
        .env_remove("RUNNER_MANAGER_SIGNING_KEY")
        .env_remove("RUNNER_MANAGER_RELEASE_PUBKEY_FILE");
    if let Some(p) = pubkey {
        cmd.env("RUNNER_MANAGER_RELEASE_PUBKEY_FILE", p);
    }
    cmd.output().unwrap()
}

#[test]
fn a_key_that_does_not_match_the_embedded_public_key_is_refused_before_building() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = key_pair(dir.path(), "throwaway");
    let (_, other_pub) = key_pair(dir.path(), "other");
    // Against the project's key (no private half here), then against another throwaway key.
    for pubkey in [None, Some(other_pub.as_path())] {
        let out = release(dir.path(), &key, pubkey);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("is not the secret half of")
                && err.contains("installed services would refuse this release")
                && err.contains("RUNNER_MANAGER_RELEASE_PUBKEY_FILE"),
            "{err}"
        );
        assert!(!dir.path().join("dist").exists(), "nothing built");
    }
    // Not a minisign secret key at all.
    let garbage = dir.path().join("garbage.key");
    std::fs::write(&garbage, "not a key\n").unwrap();
    let out = release(dir.path(), &garbage, Some(&other_pub));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("minisign -G -W"), "{err}");
}
