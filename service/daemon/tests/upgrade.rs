//! Upgrade detection against real files and real processes (tiny shell scripts standing in
//! for new builds).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rm_daemon::upgrade::{installed_version, Check, UpgradeWatcher};
use semver::Version;

/// Install `body` at `path` the way a package manager does: write a temporary file, then
/// rename it over the old one.
fn install(path: &Path, body: &str, mode: u32) {
    let tmp = path.with_extension("new");
    fs::write(&tmp, body).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn build(version: &str) -> String {
    format!("#!/bin/sh\necho \"runner-manager {version}\"\n")
}

/// Poll until something other than "not runnable" is seen (a concurrently forked test
/// process can briefly hold a just-written script open: ETXTBSY, which is exactly the
/// "retry later" case) or the deadline passes.
fn settle(w: &mut UpgradeWatcher) -> Check {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = w.poll();
        if !matches!(c, Check::NotRunnable { .. }) || Instant::now() > deadline {
            return c;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

#[test]
fn newer_same_older_and_broken_builds() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("runner-manager");
    install(&bin, &build("0.1.0"), 0o755);
    let mut w = UpgradeWatcher::new(&bin, v("0.1.0")).with_timeout(Duration::from_secs(5));
    assert_eq!(w.poll(), Check::Unchanged);

    // A same-version reinstall is not an upgrade, and is not looked at twice.
    install(&bin, &format!("{}# reinstalled\n", build("0.1.0")), 0o755);
    assert_eq!(settle(&mut w), Check::SameVersion);
    assert_eq!(w.poll(), Check::Unchanged);

    // A half-written file: not runnable, ignored, and retried until it is complete.
    install(&bin, "#!/bin/sh\necho \"runner-man", 0o755);
    assert!(matches!(w.poll(), Check::NotRunnable { .. }));
    assert!(
        matches!(w.poll(), Check::NotRunnable { .. }),
        "must keep retrying"
    );
    install(&bin, &build("0.2.0"), 0o755);
    assert_eq!(
        settle(&mut w),
        Check::Ready {
            version: v("0.2.0")
        }
    );

    // Not executable at all.
    install(&bin, &build("0.3.0"), 0o644);
    assert!(matches!(w.poll(), Check::NotRunnable { .. }));

    // An older build is ignored.
    install(&bin, &build("0.0.9"), 0o755);
    assert_eq!(
        settle(&mut w),
        Check::Older {
            version: v("0.0.9")
        }
    );

    // Removed: nothing to run.
    fs::remove_file(&bin).unwrap();
    assert!(matches!(w.poll(), Check::NotRunnable { .. }));
}

#[test]
fn a_build_that_hangs_or_prints_garbage_is_not_runnable() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("runner-manager");
    install(&bin, "#!/bin/sh\nexec sleep 30\n", 0o755);
    let started = Instant::now();
    let err = installed_version(&bin, Duration::from_millis(300)).unwrap_err();
    assert!(err.contains("did not answer"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));

    install(&bin, "#!/bin/sh\necho hello\n", 0o755);
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        let e = installed_version(&bin, Duration::from_secs(5)).unwrap_err();
        if e.contains("did not print") || Instant::now() > deadline {
            break e;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(err.contains("did not print"), "{err}");
}

#[test]
fn the_real_binary_reports_its_version_in_the_checked_format() {
    let bin = Path::new(env!("CARGO_BIN_EXE_runner-manager"));
    let version = installed_version(bin, Duration::from_secs(30)).unwrap();
    assert_eq!(version, v(rm_daemon::VERSION));
}
