//! Download, verify and unpack a release into `<data-dir>/updates/<version>/`, touching no
//! installed file. A staged release has passed every check: `SHA256SUMS` and the asset are
//! signed with the release key, the asset's SHA-256 matches, the version is newer than ours,
//! and the new binary itself reports that version.

use super::feed::{Feed, FeedError, Release};
use super::install::{Installed, PortableMarker, PORTABLE_BINARY};
use super::verify::{self, TrustedKey, SIG_SUFFIX, SUMS};
use semver::Version;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The portable archive's name in a release.
pub fn portable_asset(version: &Version) -> String {
    format!(
        "runner-manager-{version}-linux-{}.tar.gz",
        std::env::consts::ARCH
    )
}

/// The Debian package's name in a release.
pub fn deb_asset(version: &Version) -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("runner-manager_{version}_{arch}.deb")
}

/// A verified release, ready to swap in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staged {
    /// The unpacked archive's prefix and the files it installs (relative).
    Portable {
        version: Version,
        root: PathBuf,
        files: Vec<String>,
    },
    Deb {
        version: Version,
        deb: PathBuf,
    },
}

impl Staged {
    pub fn version(&self) -> &Version {
        match self {
            Staged::Portable { version, .. } | Staged::Deb { version, .. } => version,
        }
    }
}

/// Why a release was not staged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    /// Something on this side or on the way failed (no answer, a 5xx, the disk full): the
    /// release itself may be fine, so it is tried again, never recorded as refused.
    #[error("{0}")]
    Transient(String),
    /// The release failed a check (signature, checksum, version, contents): not applied again
    /// unless asked.
    #[error("{0}")]
    Refused(String),
}

impl From<String> for StageError {
    /// A check that failed: the release's fault.
    fn from(reason: String) -> Self {
        StageError::Refused(reason)
    }
}

/// Fetches and checks `release` for `installed`. `progress(downloaded, total)`.
pub fn stage(
    feed: &Feed,
    keys: &[&TrustedKey],
    release: &Release,
    installed: &Installed,
    current: &Version,
    data_dir: &Path,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Staged, StageError> {
    let version = &release.version;
    if version <= current {
        return Err(StageError::Refused(format!(
            "the feed's release {version} is not newer than this runner-manager ({current}): refused"
        )));
    }
    let asset = match installed {
        Installed::Portable { .. } => portable_asset(version),
        Installed::Deb { .. } => deb_asset(version),
        Installed::Unmanaged { why, .. } => return Err(StageError::Refused(why.clone())),
    };
    let dir = data_dir
        .join(super::record::UPDATES_DIR)
        .join(version.to_string());
    // A fresh directory each time: nothing half-downloaded or from another try is trusted.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| StageError::Transient(format!("cannot create {}: {e}", dir.display())))?;
    let names = [
        SUMS.to_owned(),
        format!("{SUMS}{SIG_SUFFIX}"),
        format!("{asset}{SIG_SUFFIX}"),
        asset.clone(),
    ];
    let total: Option<u64> = names
        .iter()
        .map(|n| release.asset(n).and_then(|a| a.size))
        .sum();
    let mut before = 0u64;
    let mut fetch = |name: &str, before: &mut u64| -> Result<(), StageError> {
        let a = release.asset(name).ok_or_else(|| {
            StageError::Refused(format!(
                "release {} has no {name}: it cannot be verified, so it is not installed",
                release.tag
            ))
        })?;
        let start = *before;
        let got = feed
            .download(a, &dir.join(name), &mut |n, _| progress(start + n, total))
            .map_err(|e| match e {
                // No answer, a 5xx, or our own disk: the release is not at fault.
                e if e.is_offline() => StageError::Transient(e.to_string()),
                FeedError::Io(detail) => StageError::Transient(detail),
                e => StageError::Refused(e.to_string()),
            })?;
        *before += got;
        Ok(())
    };
    for name in &names {
        fetch(name.as_str(), &mut before)?;
    }
    let v = version.to_string();
    let mut verified = Err(verify::VerifyError::Unreadable("no trusted key".into()));
    for key in keys {
        verified = verify::verify_asset(key, &dir, &v, &asset);
        if verified.is_ok() {
            break;
        }
    }
    // Signed with a key this host does not trust yet: the release may carry it, endorsed by a
    // key it does (a rotation). Learnt only when the endorsement and the release both verify.
    let endorsement = format!("{}{SIG_SUFFIX}", verify::NEXT_KEY);
    if matches!(verified, Err(verify::VerifyError::BadSignature { .. }))
        && release.asset(verify::NEXT_KEY).is_some()
        && release.asset(&endorsement).is_some()
    {
        fetch(verify::NEXT_KEY, &mut before)?;
        fetch(&endorsement, &mut before)?;
        for key in keys {
            let Ok((next, text)) =
                key.endorse(&dir.join(verify::NEXT_KEY), &dir.join(&endorsement))
            else {
                continue;
            };
            verified = verify::verify_asset(&next, &dir, &v, &asset);
            if verified.is_ok() {
                learn_key(data_dir, &text).map_err(StageError::Transient)?;
                tracing::info!(%version, endorsed_by = %key.origin, "the release is signed with a new release key, endorsed by a trusted one: trusted from now on");
                break;
            }
        }
    }
    verified.map_err(|e| match e {
        verify::VerifyError::Unreadable(detail) => StageError::Transient(detail),
        e => StageError::Refused(format!("release {version} refused: {e}")),
    })?;
    let staged = match installed {
        Installed::Portable { .. } => unpack_portable(&dir, &asset, version)?,
        _ => {
            let deb = dir.join(&asset);
            check_deb(&deb, version)?;
            Staged::Deb {
                version: version.clone(),
                deb,
            }
        }
    };
    Ok(staged)
}

/// Keeps a release key learnt from an endorsement (written whole, then renamed into place).
fn learn_key(data_dir: &Path, text: &str) -> Result<(), String> {
    let path = data_dir.join(verify::LEARNT_KEY_FILE);
    let tmp = data_dir.join(format!("{}.new", verify::LEARNT_KEY_FILE));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("cannot keep the new release key in {}: {e}", path.display()))
}

fn unpack_portable(dir: &Path, asset: &str, version: &Version) -> Result<Staged, String> {
    let out = dir.join("unpacked");
    let file =
        std::fs::File::open(dir.join(asset)).map_err(|e| format!("cannot open {asset}: {e}"))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive.set_preserve_permissions(true);
    // `unpack` refuses entries that would land outside `out` (absolute paths, `..`).
    archive
        .unpack(&out)
        .map_err(|e| format!("{asset} cannot be unpacked: {e}"))?;
    // One top directory, `runner-manager-<version>-linux-<arch>/`.
    let mut tops = std::fs::read_dir(&out)
        .map_err(|e| format!("cannot read {}: {e}", out.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path());
    let root = match (tops.next(), tops.next()) {
        (Some(root), None) if root.is_dir() => root,
        _ => return Err(format!("{asset} does not hold exactly one top directory")),
    };
    let marker = PortableMarker::read(&root).map_err(|e| format!("{asset}: {e}"))?;
    for f in &marker.files {
        let p = root.join(f);
        let meta = std::fs::symlink_metadata(&p).map_err(|_| format!("{asset} lacks {f}"))?;
        if !meta.is_file() {
            return Err(format!("{asset}: {f} is not a regular file"));
        }
    }
    let reported =
        crate::upgrade::installed_version(&root.join(PORTABLE_BINARY), Duration::from_secs(10))
            .map_err(|e| format!("the new binary does not run: {e}"))?;
    if &reported != version {
        return Err(format!(
            "release {version}'s binary reports {reported}: refused"
        ));
    }
    Ok(Staged::Portable {
        version: version.clone(),
        root,
        files: marker.files,
    })
}

fn check_deb(deb: &Path, version: &Version) -> Result<(), String> {
    let field = |name: &str| -> Result<String, String> {
        let out = std::process::Command::new("dpkg-deb")
            .arg("--field")
            .arg(deb)
            .arg(name)
            .output()
            .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
        if !out.status.success() {
            return Err(format!("{} is not a Debian package", deb.display()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let package = field("Package")?;
    let v = field("Version")?;
    if package != super::install::DEB_PACKAGE || v != version.to_string() {
        return Err(format!(
            "{} holds {package} {v}, not runner-manager {version}: refused",
            deb.display()
        ));
    }
    Ok(())
}
