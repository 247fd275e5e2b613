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
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest as _, Sha256};

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

// ---------------------------------------------------------------------------------------------
// Layout

const RUN_SH: &str = r#"#!/bin/bash
# Fake actions-runner run.sh (rm-testkit): starts bin/Runner.Listener like the real script.
user_id=$(id -u)
if [ "$user_id" -eq 0 ] && [ -z "$RUNNER_ALLOW_RUNASROOT" ]; then
    echo "Must not run with sudo"
    exit 1
fi

SOURCE="${BASH_SOURCE[0]}"
DIR="$(cd "$(dirname "$SOURCE")" && pwd)"

# Listener exit codes (GITHUB.md 6.3): 2 means "restart me"; anything else ends the runner and,
# like the real run.sh, this script then exits 0 unless RUNNER_MANUALLY_TRAP_SIG is set.
while true; do
    if [ -n "$RUNNER_MANUALLY_TRAP_SIG" ]; then
        "$DIR/bin/Runner.Listener" run "$@" &
        PID=$!
        trap 'kill -INT "$PID" 2>/dev/null' INT TERM
        while true; do
            wait "$PID"
            returnCode=$?
            # A trapped signal interrupts `wait`; wait again for the listener's own code.
            kill -0 "$PID" 2>/dev/null || break
        done
        trap - INT TERM
    else
        "$DIR/bin/Runner.Listener" run "$@"
        returnCode=$?
    fi
    if [ "$returnCode" -eq 2 ]; then
        echo "Restarting runner..."
        sleep 1
        continue
    fi
    if [ -n "$RUNNER_MANUALLY_TRAP_SIG" ]; then
        exit "$returnCode"
    fi
    exit 0
done
"#;

const CONFIG_SH: &str = r#"#!/bin/bash
# Fake actions-runner config.sh (rm-testkit). The fake supports only JIT configuration
# (run.sh --jitconfig / ACTIONS_RUNNER_INPUT_JITCONFIG); registration-token configuration fails.
user_id=$(id -u)
if [ "$user_id" -eq 0 ] && [ -z "$RUNNER_ALLOW_RUNASROOT" ]; then
    echo "Must not run with sudo"
    exit 1
fi

SOURCE="${BASH_SOURCE[0]}"
DIR="$(cd "$(dirname "$SOURCE")" && pwd)"
if [ "$1" = "remove" ]; then
    shift
    exec "$DIR/bin/Runner.Listener" remove "$@"
fi
exec "$DIR/bin/Runner.Listener" configure "$@"
"#;

const RUN_HELPER_SH: &str = r#"#!/bin/bash
# Fake actions-runner run-helper.sh (rm-testkit): one listener run, exit code mapped as the
# real helper maps it (GITHUB.md 6.3): 0,1,5 -> 0; 2 -> 2; others -> 0.
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$DIR/bin/Runner.Listener" run "$@"
returnCode=$?
case "$returnCode" in
    2) echo "Runner listener exit with retryable error, re-launch runner in 5 seconds."; exit 2 ;;
    7) if [ "$ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE" = "1" ]; then exit 7; fi; exit 0 ;;
    *) exit 0 ;;
esac
"#;

const ENV_SH: &str = r#"#!/bin/bash
# Fake actions-runner env.sh (rm-testkit): records PATH and a few variables in .path/.env.
varCheckList=('LANG' 'JAVA_HOME' 'ANT_HOME' 'M2_HOME' 'ANDROID_HOME' 'GRADLE_HOME' 'NVM_BIN'
              'NVM_PATH' 'LD_LIBRARY_PATH' 'PERL5LIB')
envContents=""
if [ -f ".env" ]; then
    envContents=$(cat .env)
else
    touch .env
fi
for var_name in "${varCheckList[@]}"; do
    if [ -n "${!var_name}" ] && ! grep -q "^${var_name}=" .env; then
        echo "${var_name}=${!var_name}" >> .env
    fi
done
echo "$PATH" > .path
: "$envContents"
"#;

const SAFE_SLEEP_SH: &str = r#"#!/bin/bash
# Fake actions-runner safe_sleep.sh (rm-testkit)
sleep "$1"
"#;

const WORKER_SH: &str = r#"#!/bin/sh
# Fake Runner.Worker (rm-testkit): the fake Runner.Listener runs jobs itself.
echo "Runner.Worker is started by Runner.Listener only." >&2
exit 1
"#;

const NODE_SH: &str = r#"#!/bin/sh
# Fake node (rm-testkit)
if [ "$1" = "--version" ]; then echo "v20.19.0"; exit 0; fi
echo "This fake runner package carries no real node." >&2
exit 1
"#;

/// Small filler files with the real package's names, (path, size).
const FILLER: &[(&str, usize)] = &[
    ("bin/Runner.Listener.dll", 48 * 1024),
    ("bin/Runner.Worker.dll", 96 * 1024),
    ("bin/Runner.Common.dll", 64 * 1024),
    ("bin/Runner.Sdk.dll", 16 * 1024),
    ("bin/Runner.PluginHost.dll", 8 * 1024),
    ("bin/Sdk.dll", 32 * 1024),
    ("bin/System.Private.CoreLib.dll", 64 * 1024),
    ("bin/libcoreclr.so", 64 * 1024),
    ("bin/libclrjit.so", 32 * 1024),
    ("bin/libhostfxr.so", 8 * 1024),
    ("externals/node20/LICENSE", 4 * 1024),
    (
        "externals/node20/lib/node_modules/npm/package.json",
        2 * 1024,
    ),
];

type TarOut<W> = tar::Builder<W>;

fn write_layout<W: Write>(
    tar: &mut TarOut<W>,
    options: &PackageOptions,
    listener: &[u8],
) -> io::Result<()> {
    for dir in [
        "bin",
        "externals",
        "externals/node20",
        "externals/node20/bin",
    ] {
        add_dir(tar, dir)?;
    }
    add_file(tar, "run.sh", 0o755, RUN_SH.as_bytes())?;
    add_file(tar, "config.sh", 0o755, CONFIG_SH.as_bytes())?;
    add_file(tar, "run-helper.sh", 0o755, RUN_HELPER_SH.as_bytes())?;
    add_file(tar, "env.sh", 0o755, ENV_SH.as_bytes())?;
    add_file(tar, "safe_sleep.sh", 0o755, SAFE_SLEEP_SH.as_bytes())?;
    add_file(tar, "bin/Runner.Listener", 0o755, listener)?;
    add_file(tar, "bin/Runner.Worker", 0o755, WORKER_SH.as_bytes())?;
    add_file(
        tar,
        "bin/fake-runner.version",
        0o644,
        format!("{}\n", options.version).as_bytes(),
    )?;
    add_file(tar, "externals/node20/bin/node", 0o755, NODE_SH.as_bytes())?;
    let mut buf = Vec::new();
    let mut created = std::collections::HashSet::new();
    for (i, (path, size)) in FILLER.iter().enumerate() {
        ensure_parents(tar, path, &mut created)?;
        fill(&mut buf, *size, i as u64 + 1);
        add_file(tar, path, 0o644, &buf)?;
    }
    if let Some(padding) = options.padding {
        write_padding(tar, padding, &mut buf, &mut created)?;
    }
    Ok(())
}

/// Padding files per directory, like the real package's many small assemblies and modules.
const PAD_FILES_PER_DIR: usize = 100;

/// Padding file `index` of `files`: half under `bin/`, half under `externals/node20/`, 100 per
/// directory, two levels deep.
fn padding_path(index: usize, files: usize) -> String {
    let in_bin = index < files.div_ceil(2);
    let local = if in_bin {
        index
    } else {
        index - files.div_ceil(2)
    };
    let dir = local / PAD_FILES_PER_DIR;
    if in_bin {
        format!("bin/pad{:02}/d{dir:03}/lib{local:05}.dll", dir % 10)
    } else {
        format!(
            "externals/node20/lib/node_modules/pad{:02}/d{dir:03}/m{local:05}.js",
            dir % 10
        )
    }
}

fn write_padding<W: Write>(
    tar: &mut TarOut<W>,
    padding: Padding,
    buf: &mut Vec<u8>,
    created: &mut std::collections::HashSet<String>,
) -> io::Result<()> {
    if padding.files == 0 {
        return Ok(());
    }
    let files = padding.files as u64;
    let per_file = padding.bytes / files;
    let extra = padding.bytes % files;
    for i in 0..padding.files {
        let size = per_file + u64::from((i as u64) < extra);
        let path = padding_path(i, padding.files);
        ensure_parents(tar, &path, created)?;
        let size = usize::try_from(size)
            .map_err(|_| io::Error::other("padding file larger than memory"))?;
        fill(buf, size, 0x9e37_79b9_7f4a_7c15 ^ i as u64);
        add_file(tar, &path, 0o644, buf)?;
    }
    Ok(())
}

fn ensure_parents<W: Write>(
    tar: &mut TarOut<W>,
    path: &str,
    created: &mut std::collections::HashSet<String>,
) -> io::Result<()> {
    let mut prefix = String::new();
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        if created.insert(prefix.clone()) {
            add_dir(tar, &prefix)?;
        }
    }
    Ok(())
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(ENTRY_MTIME);
    h.set_uid(1001);
    h.set_gid(1001);
    h
}

fn add_dir<W: Write>(tar: &mut TarOut<W>, path: &str) -> io::Result<()> {
    let mut h = header(tar::EntryType::Directory, 0o755, 0);
    tar.append_data(&mut h, format!("{path}/"), io::empty())
}

fn add_file<W: Write>(tar: &mut TarOut<W>, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
    let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
    tar.append_data(&mut h, path, data)
}

/// Fills `buf` with `len` pseudo-random bytes from a 16-letter alphabet: cheap to make, and
/// compressing to about half like real binaries rather than to nothing like zeros.
fn fill(buf: &mut Vec<u8>, len: usize, seed: u64) {
    buf.clear();
    buf.reserve(len);
    let mut state = seed.wrapping_add(0x632b_e59b_d9b4_e019);
    while buf.len() < len {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        for byte in z.to_le_bytes() {
            if buf.len() == len {
                break;
            }
            buf.push(b'a' + (byte & 0x0f));
        }
    }
}

/// Hashes and counts what passes through to the file.
struct HashingWriter {
    inner: std::fs::File,
    hasher: Sha256,
    written: u64,
}

impl HashingWriter {
    fn new(inner: std::fs::File) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    fn finish(self) -> (std::fs::File, String, u64) {
        (
            self.inner,
            hex::encode(self.hasher.finalize()),
            self.written,
        )
    }
}

impl Write for HashingWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(data)?;
        self.hasher.update(&data[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// SHA-256 (hex) of a file, for checking a package against its advertised checksum.
pub fn sha256_file(path: &Path) -> Result<String, PackageError> {
    let mut file =
        std::fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(io_err(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

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

    #[test]
    fn padding_paths_are_unique_and_nested() {
        let paths: std::collections::HashSet<_> =
            (0..9_000).map(|i| padding_path(i, 9_000)).collect();
        assert_eq!(paths.len(), 9_000);
        assert!(paths.iter().all(|p| p.split('/').count() >= 4));
    }
}
