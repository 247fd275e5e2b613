//! How this copy was installed, detected from the system, never guessed:
//!
//! - **deb**: dpkg's database owns the running binary's path (`dpkg-query --search`);
//! - **portable**: the portable archive's marker `share/runner-manager/portable.json` sits in
//!   the prefix the binary runs from (`<prefix>/bin/runner-manager`) and lists that binary;
//! - anything else (`cargo install`, a copied binary) is **unmanaged**: updates are announced,
//!   never applied.

use rm_proto::InstallKind;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Debian package's name.
pub const DEB_PACKAGE: &str = "runner-manager";
/// The portable marker, relative to the prefix.
pub const PORTABLE_MARKER: &str = "share/runner-manager/portable.json";
/// The service binary, relative to a portable prefix.
pub const PORTABLE_BINARY: &str = "bin/runner-manager";

/// `share/runner-manager/portable.json`, written by `scripts/release.sh` into the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortableMarker {
    pub kind: String,
    pub version: String,
    /// Every file the archive installs, relative to the prefix (the marker included).
    pub files: Vec<String>,
}

impl PortableMarker {
    pub fn read(prefix: &Path) -> Result<PortableMarker, String> {
        let path = prefix.join(PORTABLE_MARKER);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let marker: PortableMarker = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a portable marker: {e}", path.display()))?;
        if marker.kind != "portable" || !marker.files.iter().any(|f| f == PORTABLE_BINARY) {
            return Err(format!(
                "{} does not describe a portable runner-manager",
                path.display()
            ));
        }
        for f in &marker.files {
            let p = Path::new(f);
            if p.is_absolute()
                || p.components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(format!("{}: unsafe file name {f:?}", path.display()));
            }
        }
        Ok(marker)
    }
}

/// What was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    Deb {
        exe: PathBuf,
    },
    Portable {
        prefix: PathBuf,
        marker: PortableMarker,
    },
    Unmanaged {
        exe: PathBuf,
        why: String,
    },
}

impl Installed {
    pub fn kind(&self) -> InstallKind {
        match self {
            Installed::Deb { .. } => InstallKind::Deb,
            Installed::Portable { .. } => InstallKind::Portable,
            Installed::Unmanaged { .. } => InstallKind::Unmanaged,
        }
    }

    /// The installed service binary.
    pub fn exe(&self) -> PathBuf {
        match self {
            Installed::Deb { exe } | Installed::Unmanaged { exe, .. } => exe.clone(),
            Installed::Portable { prefix, .. } => prefix.join(PORTABLE_BINARY),
        }
    }
}

/// Detects how `exe` (the running binary, canonical) was installed.
pub fn detect(exe: &Path) -> Installed {
    if dpkg_owns(exe) {
        return Installed::Deb {
            exe: exe.to_path_buf(),
        };
    }
    let prefix = exe.parent().and_then(Path::parent);
    let portable = prefix.and_then(|p| {
        let marker = PortableMarker::read(p).ok()?;
        let same = std::fs::canonicalize(p.join(PORTABLE_BINARY)).ok()? == exe;
        same.then(|| Installed::Portable {
            prefix: p.to_path_buf(),
            marker,
        })
    });
    portable.unwrap_or_else(|| Installed::Unmanaged {
        exe: exe.to_path_buf(),
        why: format!(
            "{} belongs to no package and no portable install (built from source or copied): \
             install the new release by hand",
            exe.display()
        ),
    })
}

/// Whether dpkg's database lists `path` as a file of our package.
fn dpkg_owns(path: &Path) -> bool {
    let Ok(out) = Command::new("dpkg-query")
        .arg("--search")
        .arg(path)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return false; // no dpkg here
    };
    out.status.success()
        && String::from_utf8_lossy(&out.stdout).lines().any(|l| {
            l.split_once(": ").is_some_and(|(pkgs, file)| {
                Path::new(file.trim()) == path
                    && pkgs
                        .split(", ")
                        .any(|p| p.split(':').next() == Some(DEB_PACKAGE))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_beside_the_binary_is_a_portable_install_and_nothing_else_is_guessed() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        let exe = prefix.join(PORTABLE_BINARY);
        std::fs::write(&exe, "x").unwrap();
        assert!(matches!(detect(&exe), Installed::Unmanaged { .. }));

        std::fs::create_dir_all(prefix.join("share/runner-manager")).unwrap();
        let marker = PortableMarker {
            kind: "portable".into(),
            version: "1.0.0".into(),
            files: vec![PORTABLE_BINARY.into(), PORTABLE_MARKER.into()],
        };
        std::fs::write(
            prefix.join(PORTABLE_MARKER),
            serde_json::to_string(&marker).unwrap(),
        )
        .unwrap();
        assert_eq!(detect(&exe).kind(), InstallKind::Portable);

        // A marker naming files outside the prefix is refused (and so is the install).
        let evil = PortableMarker {
            files: vec![PORTABLE_BINARY.into(), "../../etc/passwd".into()],
            ..marker
        };
        std::fs::write(
            prefix.join(PORTABLE_MARKER),
            serde_json::to_string(&evil).unwrap(),
        )
        .unwrap();
        assert_eq!(detect(&exe).kind(), InstallKind::Unmanaged);
    }

    #[test]
    fn dpkg_does_not_own_a_temp_file() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(!dpkg_owns(f.path()));
    }
}
