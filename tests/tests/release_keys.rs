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

fn trusted_keys(exe: &Path) -> String {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(exe)
        .arg("--data-dir")
        .arg(data.path())
        .args(["update", "--trusted-keys"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn key_of(pub_file: &Path) -> String {
    let text = std::fs::read_to_string(pub_file).unwrap();
    text.lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("untrusted comment:"))
        .expect("a key line")
        .trim()
        .to_owned()
}

/// A release build embeds the public key it was given (`RUNNER_MANAGER_RELEASE_PUBKEY_FILE`),
/// the one its assets are signed with; a build without it embeds `installer/release-key.pub`.
/// The release is the one `scripts/test.sh` makes for the update tests with a throwaway key.
#[test]
fn a_release_embeds_the_public_key_it_was_built_with() {
    let (Ok(dir), Ok(pubkey), Ok(version)) = (
        std::env::var("RM_TEST_RELEASE_DIR"),
        std::env::var("RM_TEST_RELEASE_PUBKEY"),
        std::env::var("RM_TEST_RELEASE_VERSION"),
    ) else {
        eprintln!(
            "SKIPPED: no test release (run through scripts/test.sh, which builds one with a \
             throwaway key)"
        );
        return;
    };
    // release.sh names the archive by `uname -m`, which is Rust's name on x86_64 and aarch64.
    let name = format!("runner-manager-{version}-linux-{}", std::env::consts::ARCH);
    let unpacked = tempfile::tempdir().unwrap();
    let tar = Command::new("tar")
        .arg("-xzf")
        .arg(Path::new(&dir).join(format!("{name}.tar.gz")))
        .arg("-C")
        .arg(unpacked.path())
        .output()
        .unwrap();
    assert!(tar.status.success(), "{tar:?}");
    let released = unpacked.path().join(&name).join("bin/runner-manager");

    let expected = key_of(Path::new(&pubkey));
    let shown = trusted_keys(&released);
    assert_eq!(shown.trim(), format!("built in: {expected}"), "{shown}");
    // The workspace's own build (no key given) trusts the project's key, not the throwaway.
    let own = trusted_keys(&rm_e2e::bin("runner-manager"));
    assert_eq!(
        own.trim(),
        format!(
            "built in: {}",
            key_of(&repo().join("installer/release-key.pub"))
        ),
        "{own}"
    );
}
