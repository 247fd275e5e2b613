//! Shared test fixtures: small hand-made packages, a package source serving local files,
//! the testkit's fake runner package (with a fallback) and a JIT blob maker.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use rm_runner::{DownloadSink, PackageInfo, PackageSource, Platform, SourceError};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const SCRIPT_LISTENER: &str = r#"#!/bin/sh
# Stand-in for Runner.Listener in rm-runner's tests.
mkdir -p _diag
echo "listener started" > "_diag/Runner_$$-utc.log"
case "$RM_TEST_MODE" in
  child)
    sleep 600 &
    echo $! > child.pid ;;
  stubborn-child)
    sh -c 'trap "" TERM; echo $$ > child.pid; while :; do sleep 1; done' &
    ;;
  stubborn)
    trap '' TERM ;;
  probe)
    { echo "uid=$(id -u)"; echo "gid=$(id -g)"; echo "groups=$(id -G)"
      if (echo x > "$RM_TEST_OTHER/intruder") 2>/dev/null; then echo other=written; else echo other=denied; fi
      if (echo x > "$RM_TEST_CACHE/intruder") 2>/dev/null; then echo cache=written; else echo cache=denied; fi
      if (echo x > "$RM_TEST_CACHE_PKG/bin/intruder") 2>/dev/null; then echo pkg=written; else echo pkg=denied; fi
      if (echo x > own-file) 2>/dev/null; then echo own=written; else echo own=denied; fi
      echo done; } > probe.tmp
    mv probe.tmp probe.txt ;;
  exit3)
    exit 3 ;;
  detached)
    setsid sh -c 'echo $$ > detached.pid; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &
    i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done
    while [ ! -s detached.pid ]; do sleep 0.05; done ;;
esac
echo ready > ready
while :; do sleep 1; done
"#;

pub fn platform() -> Platform {
    Platform::current().expect("a platform GitHub ships runners for")
}

/// One entry of a hand-made archive.
pub enum Entry<'a> {
    File(&'a str, u32, &'a [u8]),
    Link(&'a str, &'a str),
}

/// Writes a .tar.gz with the given entries; returns (path, sha256).
pub fn make_tar_gz(path: &Path, entries: &[Entry<'_>]) -> (PathBuf, String) {
    let file = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for entry in entries {
        match entry {
            Entry::File(name, mode, data) => {
                let mut h = tar::Header::new_gnu();
                h.set_size(data.len() as u64);
                h.set_mode(*mode);
                h.set_entry_type(tar::EntryType::Regular);
                tar.append_data(&mut h, name, *data).unwrap();
            }
            Entry::Link(name, target) => {
                let mut h = tar::Header::new_gnu();
                h.set_size(0);
                h.set_mode(0o777);
                h.set_entry_type(tar::EntryType::Symlink);
                tar.append_link(&mut h, name, target).unwrap();
            }
        }
    }
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
    let sha = hex::encode(Sha256::digest(std::fs::read(path).unwrap()));
    (path.to_path_buf(), sha)
}

/// A small package with the script listener, a plain file and an internal symlink.
pub fn script_package(dir: &Path, version: &str) -> PackageInfo {
    let filename = format!("actions-runner-{}-{version}.tar.gz", platform());
    let (_, sha) = make_tar_gz(
        &dir.join(&filename),
        &[
            Entry::File("bin/Runner.Listener", 0o755, SCRIPT_LISTENER.as_bytes()),
            Entry::File("bin/lib.txt", 0o644, b"library"),
            Entry::File(
                "run.sh",
                0o755,
                b"#!/bin/sh\nexec bin/Runner.Listener run \"$@\"\n",
            ),
            Entry::Link("bin/listener-link", "Runner.Listener"),
        ],
    );
    PackageInfo {
        version: version.to_string(),
        platform: platform(),
        download_url: format!("file:{filename}"),
        filename,
        sha256: Some(sha),
    }
}

/// The testkit's fake runner package, or `None` (with the reason printed) when its listener
/// binary has not been built (`cargo build --workspace` builds it).
pub fn kit_package(dir: &Path) -> Option<PackageInfo> {
    match rm_testkit::package::RunnerPackage::shared_for_tests() {
        Ok(pkg) => {
            std::fs::copy(&pkg.path, dir.join(&pkg.filename)).unwrap();
            Some(PackageInfo {
                version: pkg.version.clone(),
                platform: Platform::new(
                    rm_runner::Os::parse(&pkg.os).unwrap(),
                    rm_runner::Arch::parse(&pkg.arch).unwrap(),
                ),
                download_url: format!("file:{}", pkg.filename),
                filename: pkg.filename.clone(),
                sha256: Some(pkg.sha256.clone()),
            })
        }
        Err(e) => {
            eprintln!("using the script package instead of the testkit's: {e}");
            None
        }
    }
}

/// Serves `file:<name>` URLs from a directory; counts downloads; can hold a download until
/// released, to make concurrent callers overlap deterministically.
pub struct DirSource {
    pub dir: PathBuf,
    pub latest: Mutex<HashMap<Platform, PackageInfo>>,
    pub downloads: AtomicUsize,
    pub gated: bool,
    pub started: tokio::sync::Notify,
    /// Opened once, stays open: every download held so far (and later) proceeds.
    pub release: tokio::sync::Semaphore,
}

impl DirSource {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            latest: Mutex::new(HashMap::new()),
            downloads: AtomicUsize::new(0),
            gated: false,
            started: tokio::sync::Notify::new(),
            release: tokio::sync::Semaphore::new(0),
        }
    }

    pub fn downloads(&self) -> usize {
        self.downloads.load(Ordering::SeqCst)
    }
}

impl PackageSource for DirSource {
    async fn latest(&self, platform: Platform) -> Result<PackageInfo, SourceError> {
        self.latest
            .lock()
            .unwrap()
            .get(&platform)
            .cloned()
            .ok_or_else(|| SourceError::permanent("no package for this platform"))
    }

    async fn download(&self, url: &str, sink: &mut DownloadSink) -> Result<(), SourceError> {
        self.downloads.fetch_add(1, Ordering::SeqCst);
        self.started.notify_one();
        if self.gated {
            // The permit goes back on drop, so the gate stays open for everyone.
            let _open = self
                .release
                .acquire()
                .await
                .map_err(|e| SourceError::permanent(e.to_string()))?;
        }
        let name = url
            .strip_prefix("file:")
            .ok_or_else(|| SourceError::permanent(format!("unsupported url {url}")))?;
        let data = std::fs::read(self.dir.join(name))
            .map_err(|e| SourceError::retryable(format!("{name}: {e}")))?;
        sink.set_total(data.len() as u64);
        for chunk in data.chunks(16 * 1024) {
            sink.write(chunk)
                .await
                .map_err(|e| SourceError::retryable(e.to_string()))?;
        }
        Ok(())
    }
}

/// A well-formed JIT blob (FAKE_PROTOCOL.md) whose server is `origin`, with `token` inside.
pub fn jit_blob(origin: &str, token: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let runner = format!(
        r#"{{"AgentId":7,"AgentName":"rm-test","PoolId":1,"PoolName":"Default","ServerUrl":"{origin}/_broker/","ServerUrlV2":"{origin}/_broker/","GitHubUrl":"{origin}/o/r","WorkFolder":"_work","Ephemeral":true,"DisableUpdate":false,"IsHostedServer":false,"UseV2Flow":true}}"#
    );
    let creds = format!(r#"{{"Scheme":"OAuthAccessToken","Data":{{"token":"{token}"}}}}"#);
    let rsa = r#"{"d":"AQID","dp":"AQID","dq":"AQID","exponent":"AQAB","inverseQ":"AQID","modulus":"AQID","p":"AQID","q":"AQID"}"#;
    b64(&format!(
        r#"{{".runner":"{}",".credentials":"{}",".credentials_rsaparams":"{}"}}"#,
        b64(&runner),
        b64(&creds),
        b64(rsa)
    ))
}

/// Polls `f` every 20 ms until it returns `Some` or `limit` passes.
pub fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temp dir whose path other users can traverse (tempfile makes 0700 dirs).
pub fn open_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("rmr").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Every path below `root`, relative, sorted.
pub fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let child = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(child.clone());
            }
            out.push(child);
        }
    }
    out.sort();
    out
}
