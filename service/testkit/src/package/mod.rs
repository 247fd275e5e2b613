//! The fake runner package: an `actions-runner-<os>-<arch>-<ver>.tar.gz` laid out like the real
//! one (GITHUB.md §6.1), built at test time around the compiled `fake-runner-listener`
//! (package rm-fake-runner), so the product downloads, verifies, unpacks and starts it exactly
//! as it would the real runner.
//!
//! The listener binary is found via [`listener_binary`]; it is built by `cargo build --workspace`
//! / `cargo test --workspace` (Cargo does not build another package's binaries for a
//! dev-dependency, so `cargo test -p rm-testkit` alone needs it built beforehand).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use flate2::write::GzEncoder;
use flate2::Compression;

/// The environment variable that points at the listener binary, overriding the search.
pub const LISTENER_ENV: &str = "RM_FAKE_RUNNER_LISTENER";
/// The listener's file name in the Cargo target directory.
pub const LISTENER_BIN_NAME: &str = "fake-runner-listener";
/// The runner version the real package carried when GITHUB.md was written.
pub const DEFAULT_VERSION: &str = "2.336.0";
/// Bumped whenever the archive layout changes, so cached packages are rebuilt.
const LAYOUT_VERSION: u32 = 1;
/// Every entry's mtime: fixed, so equal inputs give byte-identical archives (2026-01-01).
const ENTRY_MTIME: u64 = 1_767_225_600;

/// Errors building or unpacking a package.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error(
        "the fake runner listener is not at {path}: build it with `cargo build --workspace` \
         (or run the tests with `cargo test --workspace`), or set {LISTENER_ENV} to its path"
    )]
    ListenerMissing { path: PathBuf },
    #[error("unsupported runner package target {os}-{arch}: use os linux|osx, arch x64|arm64|arm")]
    UnsupportedTarget { os: String, arch: String },
    #[error("invalid runner version {0:?}: use digits and dots such as 2.336.0")]
    InvalidVersion(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> PackageError {
    let context = context.into();
    move |source| PackageError::Io { context, source }
}

/// Extra filler so the package has the real one's weight (≈9,000 files / ≈200 MB unpacked)
/// for benchmarks of download/unpack/copy. Exactly `files` files totalling exactly `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Padding {
    pub files: usize,
    pub bytes: u64,
}

impl Padding {
    /// Roughly the real linux-x64 package unpacked.
    pub const REALISTIC: Padding = Padding {
        files: 9_000,
        bytes: 200 * 1024 * 1024,
    };
}

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PackageOptions {
    pub version: String,
    /// `linux` or `osx` (the real asset names' spelling).
    pub os: String,
    /// `x64`, `arm64` or `arm`.
    pub arch: String,
    pub padding: Option<Padding>,
    /// Where the archive is written (created if missing).
    pub out_dir: PathBuf,
}

impl PackageOptions {
    /// Version [`DEFAULT_VERSION`], this host's os/arch, no padding.
    pub fn for_host(out_dir: impl Into<PathBuf>) -> Self {
        let os = if cfg!(target_os = "macos") {
            "osx"
        } else {
            "linux"
        };
        let arch = match std::env::consts::ARCH {
            "aarch64" => "arm64",
            "arm" => "arm",
            _ => "x64",
        };
        Self {
            version: DEFAULT_VERSION.to_owned(),
            os: os.to_owned(),
            arch: arch.to_owned(),
            padding: None,
            out_dir: out_dir.into(),
        }
    }
}

/// A built package archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerPackage {
    pub path: PathBuf,
    /// `actions-runner-<os>-<arch>-<version>.tar.gz`
    pub filename: String,
    /// Lowercase hex SHA-256 of the archive.
    pub sha256: String,
    pub version: String,
    pub os: String,
    pub arch: String,
    /// Archive size in bytes.
    pub size: u64,
}

impl RunnerPackage {
    /// Builds the archive into `options.out_dir` (written to a temporary name, then renamed,
    /// so a reader never sees half a package).
    pub fn build(options: &PackageOptions) -> Result<RunnerPackage, PackageError> {
        Self::build_with_listener(options, &listener_binary()?)
    }

    /// As [`RunnerPackage::build`] with an explicit listener binary.
    pub fn build_with_listener(
        options: &PackageOptions,
        listener: &Path,
    ) -> Result<RunnerPackage, PackageError> {
        validate(options)?;
        let listener_bytes = std::fs::read(listener).map_err(io_err(format!(
            "reading the listener {}",
            listener.display()
        )))?;
        std::fs::create_dir_all(&options.out_dir)
            .map_err(io_err(format!("creating {}", options.out_dir.display())))?;
        let filename = format!(
            "actions-runner-{}-{}-{}.tar.gz",
            options.os, options.arch, options.version
        );
        let path = options.out_dir.join(&filename);
        let partial = options.out_dir.join(format!(
            ".{filename}.{}-{:?}.partial",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::File::create(&partial)
            .map_err(io_err(format!("creating {}", partial.display())))?;
        let hashing = HashingWriter::new(file);
        let gz = GzEncoder::new(hashing, Compression::fast());
        let mut tar = tar::Builder::new(gz);
        write_layout(&mut tar, options, &listener_bytes)
            .map_err(io_err(format!("writing {}", partial.display())))?;
        let hashing = tar
            .into_inner()
            .and_then(GzEncoder::finish)
            .map_err(io_err(format!("finishing {}", partial.display())))?;
        let (file, sha256, size) = hashing.finish();
        file.sync_all()
            .map_err(io_err(format!("syncing {}", partial.display())))?;
        drop(file);
        std::fs::rename(&partial, &path)
            .map_err(io_err(format!("renaming to {}", path.display())))?;
        Ok(RunnerPackage {
            path,
            filename,
            sha256,
            version: options.version.clone(),
            os: options.os.clone(),
            arch: options.arch.clone(),
            size,
        })
    }

    /// A host package (no padding) built once per process (and reused across processes while
    /// the listener binary is unchanged) under the system temp dir. Cheap to call from every test.
    pub fn shared_for_tests() -> Result<RunnerPackage, PackageError> {
        static CACHE: OnceLock<Mutex<Option<(u64, RunnerPackage)>>> = OnceLock::new();
        let listener = listener_binary()?;
        let meta = std::fs::metadata(&listener)
            .map_err(io_err(format!("reading {}", listener.display())))?;
        let mut hasher = DefaultHasher::new();
        (LAYOUT_VERSION, &listener, meta.len()).hash(&mut hasher);
        meta.modified().ok().hash(&mut hasher);
        let key = hasher.finish();

        let cache = CACHE.get_or_init(|| Mutex::new(None));
        let mut guard = cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, pkg)) = guard.as_ref() {
            if *k == key && pkg.path.is_file() {
                return Ok(pkg.clone());
            }
        }
        let base = std::env::temp_dir().join("rm-testkit-runner-package");
        prune_old(&base, Duration::from_secs(24 * 3600));
        let options = PackageOptions::for_host(base.join(format!("{key:016x}")));
        let pkg = RunnerPackage::build_with_listener(&options, &listener)?;
        *guard = Some((key, pkg.clone()));
        Ok(pkg)
    }

    /// Unpacks the archive into `dir` (created if missing), keeping file modes, as the product's
    /// provisioning does. Returns `dir`.
    pub fn unpack_into(&self, dir: &Path) -> Result<PathBuf, PackageError> {
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let file = std::fs::File::open(&self.path)
            .map_err(io_err(format!("opening {}", self.path.display())))?;
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
        archive.set_preserve_permissions(true);
        archive.unpack(dir).map_err(io_err(format!(
            "unpacking {} into {}",
            self.filename,
            dir.display()
        )))?;
        Ok(dir.to_path_buf())
    }
}

/// Finds the compiled `fake-runner-listener`: `$RM_FAKE_RUNNER_LISTENER` if set, else next to
/// the running executable or its parent directory (tests run from `target/<profile>/deps/`,
/// binaries live in `target/<profile>/`).
pub fn listener_binary() -> Result<PathBuf, PackageError> {
    if let Some(path) = std::env::var_os(LISTENER_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(PackageError::ListenerMissing { path })
        };
    }
    let exe = std::env::current_exe().map_err(io_err("locating the current executable"))?;
    let name = format!("{LISTENER_BIN_NAME}{}", std::env::consts::EXE_SUFFIX);
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let candidates = [Some(dir.clone()), dir.parent().map(Path::to_path_buf)];
    for candidate in candidates.iter().flatten() {
        let path = candidate.join(&name);
        if path.is_file() {
            return Ok(path);
        }
    }
    let expected = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    };
    Err(PackageError::ListenerMissing {
        path: expected.join(name),
    })
}

fn validate(options: &PackageOptions) -> Result<(), PackageError> {
    let os_ok = matches!(options.os.as_str(), "linux" | "osx");
    let arch_ok = matches!(options.arch.as_str(), "x64" | "arm64" | "arm");
    if !os_ok || !arch_ok {
        return Err(PackageError::UnsupportedTarget {
            os: options.os.clone(),
            arch: options.arch.clone(),
        });
    }
    let v = &options.version;
    if v.is_empty()
        || v.starts_with('.')
        || v.ends_with('.')
        || !v.chars().all(|c| c.is_ascii_digit() || c == '.')
    {
        return Err(PackageError::InvalidVersion(v.clone()));
    }
    Ok(())
}

/// Removes cached package directories untouched for longer than `age` (best effort).
fn prune_old(base: &Path, age: Duration) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|d| d > age);
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

mod hash;
mod layout;

pub use hash::sha256_file;
use hash::HashingWriter;
use layout::write_layout;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Any executable stands in for the listener: these tests check the archive, not the binary.
    fn fake_listener(dir: &Path) -> PathBuf {
        let path = dir.join("listener-stand-in");
        std::fs::write(&path, b"#!/bin/sh\necho listener\n").unwrap();
        path
    }

    fn entries(pkg: &RunnerPackage) -> BTreeMap<String, (u32, u64, tar::EntryType)> {
        let file = std::fs::File::open(&pkg.path).unwrap();
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    (h.mode().unwrap(), h.size().unwrap(), h.entry_type()),
                )
            })
            .collect()
    }

    #[test]
    fn layout_matches_the_real_package() {
        let tmp = tempfile::tempdir().unwrap();
        let mut options = PackageOptions::for_host(tmp.path().join("out"));
        options.os = "linux".into();
        options.arch = "x64".into();
        let pkg = RunnerPackage::build_with_listener(&options, &fake_listener(tmp.path())).unwrap();
        assert_eq!(pkg.filename, "actions-runner-linux-x64-2.336.0.tar.gz");
        assert_eq!(pkg.path, tmp.path().join("out").join(&pkg.filename));
        let e = entries(&pkg);
        for (path, mode) in [
            ("run.sh", 0o755),
            ("config.sh", 0o755),
            ("env.sh", 0o755),
            ("safe_sleep.sh", 0o755),
            ("bin/Runner.Listener", 0o755),
            ("bin/Runner.Worker", 0o755),
            ("bin/Runner.Listener.dll", 0o644),
            ("bin/libcoreclr.so", 0o644),
            ("externals/node20/bin/node", 0o755),
        ] {
            let (m, _, kind) = e
                .get(path)
                .unwrap_or_else(|| panic!("{path} missing: {e:?}"));
            assert_eq!((*m, *kind), (mode, tar::EntryType::Regular), "{path}");
        }
        // Top level: no wrapping directory.
        assert!(e.keys().all(|k| !k.starts_with("actions-runner")));
        assert_eq!(e["bin/"].2, tar::EntryType::Directory);
        // The packed listener is the given binary, unchanged.
        let unpacked = tmp.path().join("unpacked");
        pkg.unpack_into(&unpacked).unwrap();
        assert_eq!(
            std::fs::read(unpacked.join("bin/Runner.Listener")).unwrap(),
            std::fs::read(fake_listener(tmp.path())).unwrap()
        );
        assert_eq!(
            std::fs::read_to_string(unpacked.join("bin/fake-runner.version")).unwrap(),
            "2.336.0\n"
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(unpacked.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn sha256_and_size_describe_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let options = PackageOptions::for_host(tmp.path());
        let pkg = RunnerPackage::build_with_listener(&options, &fake_listener(tmp.path())).unwrap();
        assert_eq!(pkg.sha256, sha256_file(&pkg.path).unwrap());
        assert_eq!(pkg.sha256.len(), 64);
        assert_eq!(pkg.size, std::fs::metadata(&pkg.path).unwrap().len());
        // Same inputs, same bytes: the checksum is stable across builds.
        let again =
            RunnerPackage::build_with_listener(&options, &fake_listener(tmp.path())).unwrap();
        assert_eq!(again.sha256, pkg.sha256);
        // No partial files left behind.
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".partial")), "{names:?}");
    }

    #[test]
    fn padding_adds_exactly_the_requested_files_and_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let mut options = PackageOptions::for_host(tmp.path());
        let plain =
            RunnerPackage::build_with_listener(&options, &fake_listener(tmp.path())).unwrap();
        let plain_entries = entries(&plain);
        options.padding = Some(Padding {
            files: 250,
            bytes: 1_000_003,
        });
        options.version = "2.400.1".into();
        let padded =
            RunnerPackage::build_with_listener(&options, &fake_listener(tmp.path())).unwrap();
        let padded_entries = entries(&padded);
        let added: Vec<_> = padded_entries
            .iter()
            .filter(|(k, v)| !plain_entries.contains_key(*k) && v.2 == tar::EntryType::Regular)
            .collect();
        assert_eq!(added.len(), 250);
        assert_eq!(added.iter().map(|(_, v)| v.1).sum::<u64>(), 1_000_003);
        assert!(added.iter().any(|(k, _)| k.starts_with("bin/pad")));
        assert!(added
            .iter()
            .any(|(k, _)| k.starts_with("externals/node20/lib/")));
        // Compressible, but not to nothing.
        let ratio = padded.size as f64 / 1_000_003.0;
        assert!((0.3..0.9).contains(&ratio), "ratio {ratio}");
    }

    #[test]
    fn bad_options_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let listener = fake_listener(tmp.path());
        let mut options = PackageOptions::for_host(tmp.path());
        options.os = "win".into();
        assert!(matches!(
            RunnerPackage::build_with_listener(&options, &listener),
            Err(PackageError::UnsupportedTarget { .. })
        ));
        let mut options = PackageOptions::for_host(tmp.path());
        options.version = "../x".into();
        assert!(matches!(
            RunnerPackage::build_with_listener(&options, &listener),
            Err(PackageError::InvalidVersion(_))
        ));
    }

    #[test]
    fn missing_listener_error_says_how_to_build_it() {
        let err = PackageError::ListenerMissing {
            path: PathBuf::from("/nowhere/fake-runner-listener"),
        };
        assert!(err.to_string().contains("cargo build --workspace"), "{err}");
    }
}
