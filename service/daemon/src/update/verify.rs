//! Release verification: detached minisign (ed25519) signatures over `SHA256SUMS` and over each
//! asset, and the asset's SHA-256 as `SHA256SUMS` lists it. Everything is checked before any
//! installed file is touched.
//!
//! The trusted public key is built into the binary: `installer/release-key.pub`, or the key
//! text in `RUNNER_MANAGER_RELEASE_PUBKEY` at build time (`scripts/release.sh` passes the key
//! the release is signed with, and refuses to sign with any other). Builds with
//! debug assertions (the dev profile, used by tests) may be handed another key at run time
//! (`daemon run --update-trust-key FILE`); release builds, and so every published asset,
//! refuse that flag, so nobody can point an installed service at their own key without
//! replacing the binary itself.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;
use thiserror::Error;

/// The project's release key (minisign public key file), as the build was given it.
pub const BUILT_IN_KEY: &str = match option_env!("RUNNER_MANAGER_RELEASE_PUBKEY") {
    Some(key) => key,
    None => include_str!("../../../../installer/release-key.pub"),
};

/// A release signed with a new key carries it as this asset, with `<it>.minisig`: a signature
/// by a key already trusted (the previous release key), whose trusted comment is
/// [`KEY_COMMENT`]. That is how the release key is rotated without reinstalling.
pub const NEXT_KEY: &str = "release-key.pub";
/// The trusted comment of a key's endorsement.
pub const KEY_COMMENT: &str = "runner-manager release key";
/// Where, in the data directory, the updater keeps a key it learnt that way.
pub const LEARNT_KEY_FILE: &str = "release-key.learnt.pub";

/// The name of the checksum list in every release.
pub const SUMS: &str = "SHA256SUMS";
/// Detached signatures are `<asset>.minisig`.
pub const SIG_SUFFIX: &str = ".minisig";

/// Why a release was refused. Nothing was installed when this is returned.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum VerifyError {
    #[error("the release has no {0}")]
    Missing(String),
    #[error("{asset}: the signature does not verify with runner-manager's release key ({detail})")]
    BadSignature { asset: String, detail: String },
    #[error("{asset}: its SHA-256 is {actual} but SHA256SUMS lists {expected} (the download was altered or truncated)")]
    Checksum {
        asset: String,
        expected: String,
        actual: String,
    },
    #[error("SHA256SUMS does not list {0}")]
    NotListed(String),
    #[error("SHA256SUMS was signed for {signed:?}, not for runner-manager {version}")]
    WrongRelease { signed: String, version: String },
    #[error("{0}")]
    Unreadable(String),
}

/// A public key the updater trusts.
/// The key itself in a minisign public key file (the line after its comment).
pub fn key_line(text: &str) -> Option<&str> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("untrusted comment:"))
}

pub struct TrustedKey {
    key: minisign_verify::PublicKey,
    /// Where it came from, for logs.
    pub origin: String,
}

impl std::fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedKey")
            .field("origin", &self.origin)
            .finish()
    }
}

impl TrustedKey {
    /// The key built into this binary.
    pub fn built_in() -> Result<TrustedKey, String> {
        Self::parse(BUILT_IN_KEY, "built in")
    }

    /// The key an earlier release introduced (see [`NEXT_KEY`]), if one was learnt.
    pub fn learnt(data_dir: &Path) -> Option<TrustedKey> {
        let text = std::fs::read_to_string(data_dir.join(LEARNT_KEY_FILE)).ok()?;
        Self::parse(&text, "endorsed by an earlier release key").ok()
    }

    /// The key in `key_file` if `sig` is this key's endorsement of it: answers it and the
    /// file's text (to keep).
    pub fn endorse(
        &self,
        key_file: &Path,
        sig: &Path,
    ) -> Result<(TrustedKey, String), VerifyError> {
        let comment = self.verify_file(NEXT_KEY, key_file, sig)?;
        if comment.trim() != KEY_COMMENT {
            return Err(VerifyError::BadSignature {
                asset: NEXT_KEY.to_owned(),
                detail: format!("signed as {comment:?}, not as a release key"),
            });
        }
        let text = std::fs::read_to_string(key_file)
            .map_err(|e| VerifyError::Unreadable(format!("cannot read {NEXT_KEY}: {e}")))?;
        let key = Self::parse(&text, "endorsed by an earlier release key")
            .map_err(VerifyError::Unreadable)?;
        Ok((key, text))
    }

    /// A key file (minisign's public key format). Only honoured by builds with debug
    /// assertions; see the module doc.
    pub fn from_file(path: &Path) -> Result<TrustedKey, String> {
        if !cfg!(debug_assertions) {
            return Err(
                "`--update-trust-key` exists for tests only and is refused by release builds: \
                 remove it (updates are verified with the key built into runner-manager)"
                    .into(),
            );
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    fn parse(text: &str, origin: &str) -> Result<TrustedKey, String> {
        let b64 = key_line(text).ok_or_else(|| format!("the release key ({origin}) is empty"))?;
        let key = minisign_verify::PublicKey::from_base64(b64)
            .map_err(|e| format!("the release key ({origin}) is not a minisign public key: {e}"))?;
        Ok(TrustedKey {
            key,
            origin: origin.to_owned(),
        })
    }

    /// Verifies `file` against its detached signature `sig`; returns the signature's trusted
    /// comment (signed too).
    pub fn verify_file(&self, name: &str, file: &Path, sig: &Path) -> Result<String, VerifyError> {
        let sig_text = std::fs::read_to_string(sig)
            .map_err(|_| VerifyError::Missing(format!("{name}{SIG_SUFFIX}")))?;
        let signature = minisign_verify::Signature::decode(&sig_text).map_err(|e| {
            VerifyError::BadSignature {
                asset: name.to_owned(),
                detail: format!("unreadable signature: {e}"),
            }
        })?;
        let bad = |e: minisign_verify::Error| VerifyError::BadSignature {
            asset: name.to_owned(),
            detail: e.to_string(),
        };
        let mut verifier = self.key.verify_stream(&signature).map_err(bad)?;
        let mut f = std::fs::File::open(file)
            .map_err(|e| VerifyError::Unreadable(format!("cannot read {name}: {e}")))?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| VerifyError::Unreadable(format!("cannot read {name}: {e}")))?;
            if n == 0 {
                break;
            }
            verifier.update(&buf[..n]);
        }
        verifier.finalize().map_err(bad)?;
        Ok(signature.trusted_comment().to_owned())
    }
}

/// The trusted comment `scripts/release.sh` signs `SHA256SUMS` with: binds the list to one
/// version, so an old list cannot be replayed under a newer tag.
pub fn sums_comment(version: &str) -> String {
    format!("runner-manager {version} {SUMS}")
}

/// `SHA256SUMS` lines: `<64 hex>  <name>` (two spaces, or ` *` for binary mode).
pub fn parse_sums(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (hash, rest) = l.split_once(' ')?;
            let name = rest.trim_start_matches([' ', '*']).trim();
            (hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) && !name.is_empty())
                .then(|| (hash.to_ascii_lowercase(), name.to_owned()))
        })
        .collect()
}

pub fn sha256_file(path: &Path) -> Result<String, String> {
    let mut f =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Checks one downloaded asset in `dir` (beside `SHA256SUMS` and the signatures): the list's
/// signature and version, the asset's signature, and its SHA-256.
pub fn verify_asset(
    key: &TrustedKey,
    dir: &Path,
    version: &str,
    asset: &str,
) -> Result<(), VerifyError> {
    let sums = dir.join(SUMS);
    let comment = key.verify_file(SUMS, &sums, &dir.join(format!("{SUMS}{SIG_SUFFIX}")))?;
    if comment.trim() != sums_comment(version) {
        return Err(VerifyError::WrongRelease {
            signed: comment,
            version: version.to_owned(),
        });
    }
    let text = std::fs::read_to_string(&sums)
        .map_err(|e| VerifyError::Unreadable(format!("cannot read {SUMS}: {e}")))?;
    let expected = parse_sums(&text)
        .into_iter()
        .find(|(_, n)| n == asset)
        .map(|(h, _)| h)
        .ok_or_else(|| VerifyError::NotListed(asset.to_owned()))?;
    let path = dir.join(asset);
    key.verify_file(asset, &path, &dir.join(format!("{asset}{SIG_SUFFIX}")))?;
    let actual = sha256_file(&path).map_err(VerifyError::Unreadable)?;
    if actual != expected {
        return Err(VerifyError::Checksum {
            asset: asset.to_owned(),
            expected,
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A throwaway key and signatures made with `minisign -G -W` / `minisign -S -t ...`.
    const PUB: &str = "untrusted comment: minisign public key 6FB211BBF625E7EB\nRWTr5yX2uxGyb9Lto0hMqH7gQvtETU6fA1gHuDxQ+0FWhijWYJH9Vc9D\n";
    const SIG_HI: &str = "untrusted comment: signature from minisign secret key\nRUTr5yX2uxGyb7HAe07Ykr8AXfERVWKtGyWBjpvX6O1BfZTFDzTDgyldE79+5WoSiZOE9tNTQ8TU7XhsbFYmBHtZbXJ817RriQw=\ntrusted comment: runner-manager 1.0 x\nnDEjTz4OkIRbS3G1YRXC6uO83vQQ1wRkuwagJxqbo6aSfEV6BDT5YMsmMFIlD5hVaPnSWudTKL5vtQ6yMwBTCw==\n";

    #[test]
    fn the_built_in_key_parses() {
        TrustedKey::built_in().unwrap();
    }

    #[test]
    fn a_signed_file_verifies_and_a_changed_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let key = TrustedKey::parse(PUB, "test").unwrap();
        let f = dir.path().join("x");
        let s = dir.path().join("x.minisig");
        std::fs::write(&f, "hi\n").unwrap();
        std::fs::write(&s, SIG_HI).unwrap();
        assert_eq!(
            key.verify_file("x", &f, &s).unwrap(),
            "runner-manager 1.0 x"
        );
        std::fs::write(&f, "hj\n").unwrap();
        assert!(matches!(
            key.verify_file("x", &f, &s),
            Err(VerifyError::BadSignature { .. })
        ));
        // Another key does not verify it either.
        std::fs::write(&f, "hi\n").unwrap();
        let other = TrustedKey::built_in().unwrap();
        assert!(matches!(
            other.verify_file("x", &f, &s),
            Err(VerifyError::BadSignature { .. })
        ));
    }

    #[test]
    fn sums_lines_parse() {
        let h = "a".repeat(64);
        let text = format!("{h}  one.deb\n{h} *two.tar.gz\nnot a line\n");
        let got = parse_sums(&text);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].1, "two.tar.gz");
    }
}
