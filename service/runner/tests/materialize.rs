//! Materializing runtimes from the cache, and scrubbing them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod common;

use common::*;
use rm_runner::account::ResolvedRunAs;
use rm_runner::{
    materialize, scrub, CopyMethod, MaterializeError, MaterializeOptions, PackageCache, RunnerRoot,
    RuntimeName, ScrubError, ScrubRetry, UsedMethod,
};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Every entry of `runtime` matches `package`: same bytes, same exec bits, links stay links.
fn assert_identical(package: &Path, runtime: &Path) -> usize {
    let entries = walk(package);
    assert_eq!(entries, walk(runtime), "same set of paths");
    let mut files = 0;
    for rel in &entries {
        let a = fs::symlink_metadata(package.join(rel)).unwrap();
        let b = fs::symlink_metadata(runtime.join(rel)).unwrap();
        assert_eq!(
            a.file_type().is_symlink(),
            b.file_type().is_symlink(),
            "{rel:?}"
        );
        assert_eq!(a.is_dir(), b.is_dir(), "{rel:?}");
        if a.is_file() {
            files += 1;
            assert_eq!(
                fs::read(package.join(rel)).unwrap(),
                fs::read(runtime.join(rel)).unwrap(),
                "{rel:?} content"
            );
            assert_eq!(
                a.permissions().mode() & 0o111,
                b.permissions().mode() & 0o111,
                "{rel:?} exec bits"
            );
        }
    }
    files
}

#[tokio::test]
async fn materializes_the_fake_runner_package_identically() {
    let files = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let info = kit_package(files.path()).unwrap_or_else(|| script_package(files.path(), "2.336.0"));
    let cache =
        PackageCache::open(work.path().join("cache"), DirSource::new(files.path())).unwrap();
    let pkg = cache.ensure(&info).await.unwrap();
    let root = RunnerRoot::prepare(work.path().join("r"), ResolvedRunAs::ServiceUser).unwrap();

    for (name, method) in [
        ("a", CopyMethod::Auto),
        ("p", CopyMethod::ParallelCopy),
        ("s", CopyMethod::SerialCopy),
    ] {
        let rt = root
            .create_runtime(&RuntimeName::new(name).unwrap())
            .unwrap();
        let opts = MaterializeOptions {
            method,
            ..Default::default()
        };
        let report = materialize(&pkg.dir, &rt.path, &opts).unwrap();
        let n = assert_identical(&pkg.dir, &rt.path);
        assert_eq!(report.files, n);
        assert!(rt.path.join("bin/Runner.Listener").is_file());
        assert!(report.bytes > 0);
        if method == CopyMethod::SerialCopy {
            assert_eq!(report.method, UsedMethod::SerialCopy);
            assert_eq!(report.threads, 1);
        }
        // The runtime is the runner's to write into, unlike the cache.
        let mode = fs::metadata(rt.path.join("bin"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o700, 0o700);
    }
}

#[test]
fn clone_is_used_where_supported_and_refused_cleanly_elsewhere() {
    let work = tempfile::tempdir().unwrap();
    let pkg = work.path().join("pkg");
    fs::create_dir_all(pkg.join("bin")).unwrap();
    fs::write(pkg.join("bin/a"), vec![7u8; 100_000]).unwrap();
    let rt = work.path().join("rt");
    fs::create_dir(&rt).unwrap();
    let clone = MaterializeOptions {
        method: CopyMethod::Clone,
        ..Default::default()
    };
    match materialize(&pkg, &rt, &clone) {
        Ok(report) => {
            assert_eq!(report.method, UsedMethod::Clone);
            assert_identical(&pkg, &rt);
        }
        Err(MaterializeError::CloneUnsupported { .. }) => {
            // ext4 and tmpfs (this machine): Auto falls back to a parallel copy.
            let rt2 = work.path().join("rt2");
            fs::create_dir(&rt2).unwrap();
            let report = materialize(&pkg, &rt2, &MaterializeOptions::default()).unwrap();
            assert_eq!(report.method, UsedMethod::ParallelCopy);
            assert_identical(&pkg, &rt2);
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[test]
fn symlinks_stay_links_and_absolute_ones_are_rewritten_inside() {
    let work = tempfile::tempdir().unwrap();
    let pkg = work.path().join("pkg");
    fs::create_dir_all(pkg.join("bin")).unwrap();
    fs::create_dir_all(pkg.join("lib/sub")).unwrap();
    fs::write(pkg.join("bin/tool"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(pkg.join("bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(pkg.join("lib/sub/data"), b"data").unwrap();
    fs::set_permissions(pkg.join("lib/sub/data"), fs::Permissions::from_mode(0o444)).unwrap();
    std::os::unix::fs::symlink("../bin/tool", pkg.join("lib/tool")).unwrap();
    std::os::unix::fs::symlink(pkg.join("lib/sub"), pkg.join("bin/abs")).unwrap();
    let rt = work.path().join("rt");
    fs::create_dir(&rt).unwrap();

    let report = materialize(&pkg, &rt, &MaterializeOptions::default()).unwrap();
    assert_eq!((report.files, report.links), (2, 2));
    assert_eq!(
        fs::read_link(rt.join("lib/tool")).unwrap(),
        Path::new("../bin/tool")
    );
    assert_eq!(
        fs::read_link(rt.join("bin/abs")).unwrap(),
        rt.join("lib/sub")
    );
    assert_eq!(fs::read(rt.join("bin/abs/data")).unwrap(), b"data");
    let mode = fs::metadata(rt.join("bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
    // A read-only file in the package is writable by its owner in the runtime.
    let mode = fs::metadata(rt.join("lib/sub/data"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);

    // A link leaving the package is refused before anything is copied.
    std::os::unix::fs::symlink("/etc", pkg.join("bin/etc")).unwrap();
    let rt2 = work.path().join("rt2");
    fs::create_dir(&rt2).unwrap();
    let err = materialize(&pkg, &rt2, &MaterializeOptions::default()).unwrap_err();
    assert!(
        matches!(err, MaterializeError::LinkEscapes { .. }),
        "{err:?}"
    );
    assert_eq!(fs::read_dir(&rt2).unwrap().count(), 0);
    // A non-empty runtime is refused.
    let err = materialize(&pkg, &rt, &MaterializeOptions::default()).unwrap_err();
    assert!(matches!(err, MaterializeError::NotEmpty { .. }), "{err:?}");
}

#[test]
fn scrub_removes_links_as_links_and_never_follows_them_out() {
    let work = tempfile::tempdir().unwrap();
    let outside = work.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("precious"), b"keep me").unwrap();
    let outside_file = work.path().join("precious-file");
    fs::write(&outside_file, b"keep me too").unwrap();

    let rt = work.path().join("rt");
    fs::create_dir_all(rt.join("_work/deep/er")).unwrap();
    fs::write(rt.join("_work/deep/er/f"), b"x").unwrap();
    std::os::unix::fs::symlink(&outside, rt.join("_work/link-to-dir")).unwrap();
    std::os::unix::fs::symlink(&outside_file, rt.join("link-to-file")).unwrap();
    // A read-only directory, as some tools leave behind.
    fs::create_dir(rt.join("ro")).unwrap();
    fs::write(rt.join("ro/f"), b"x").unwrap();
    fs::set_permissions(rt.join("ro"), fs::Permissions::from_mode(0o500)).unwrap();

    let report = scrub(&rt).unwrap();
    assert!(report.existed);
    assert!(fs::symlink_metadata(&rt).is_err(), "runtime gone");
    assert_eq!(fs::read(outside.join("precious")).unwrap(), b"keep me");
    assert_eq!(fs::read(&outside_file).unwrap(), b"keep me too");

    // The runtime path itself being a link: the link goes, its target stays.
    std::os::unix::fs::symlink(&outside, &rt).unwrap();
    scrub(&rt).unwrap();
    assert!(outside.join("precious").exists());
    assert!(!scrub(&rt).unwrap().existed);
}

#[test]
fn a_busy_tree_is_a_retryable_failure_reported_once() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to bind-mount a busy directory");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let rt = work.path().join("rt");
    let src = work.path().join("src");
    fs::create_dir_all(rt.join("mnt")).unwrap();
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["--bind"])
        .arg(&src)
        .arg(rt.join("mnt"))
        .status();
    if !matches!(mounted, Ok(s) if s.success()) {
        eprintln!("skipped: bind mount not possible here ({mounted:?})");
        return;
    }
    let mut retry = ScrubRetry::default();
    let (err, first) = retry.attempt(&rt).unwrap_err();
    let (_, second) = retry.attempt(&rt).unwrap_err();
    let unmounted = std::process::Command::new("umount")
        .arg(rt.join("mnt"))
        .status()
        .unwrap();
    assert!(unmounted.success());
    assert!(err.is_retryable(), "{err:?}");
    assert!(matches!(err, ScrubError::Retryable { .. }));
    assert!(first.first_failure && !second.first_failure);
    assert!(second.delay > first.delay);
    // Once unmounted, the next attempt completes; the mount source itself survives.
    retry.attempt(&rt).unwrap();
    assert!(!rt.exists());
    assert!(src.exists());
}

/// A package with a directory bigger than one unit of work (64 files), odd modes and nested
/// directories: every file arrives once with its bytes, modes are the package's plus owner
/// write (set-id bits dropped), directories keep owner rwx, and with an owner everything —
/// links included — belongs to it.
#[test]
fn big_directories_modes_and_owner_survive_the_parallel_copy() {
    let work = tempfile::tempdir().unwrap();
    let pkg = work.path().join("pkg");
    fs::create_dir_all(pkg.join("bin/a/b")).unwrap();
    for i in 0..150 {
        let size = if i % 7 == 0 { 40_000 + i } else { i * 3 };
        fs::write(
            pkg.join(format!("bin/f{i:03}")),
            vec![(i % 251) as u8; size],
        )
        .unwrap();
    }
    fs::write(pkg.join("bin/a/b/deep"), b"deep").unwrap();
    fs::set_permissions(pkg.join("bin/f001"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::set_permissions(pkg.join("bin/f002"), fs::Permissions::from_mode(0o400)).unwrap();
    fs::set_permissions(pkg.join("bin/f007"), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("f003", pkg.join("bin/link")).unwrap();
    fs::set_permissions(pkg.join("bin/a"), fs::Permissions::from_mode(0o555)).unwrap();

    let root = nix::unistd::geteuid().is_root();
    // Root can give the runtime away; anyone else can only "give" it to themselves.
    let owner = if root {
        rm_runner::Ownership {
            uid: 4_242_001,
            gid: 4_242_002,
        }
    } else {
        rm_runner::Ownership {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        }
    };
    for (name, method) in [
        ("auto", CopyMethod::Auto),
        ("serial", CopyMethod::SerialCopy),
    ] {
        let rt = work.path().join(name);
        fs::create_dir(&rt).unwrap();
        let opts = MaterializeOptions {
            method,
            threads: 3,
            owner: Some(owner),
        };
        let report = materialize(&pkg, &rt, &opts).unwrap();
        assert_eq!((report.files, report.dirs, report.links), (151, 3, 1));
        assert_eq!(assert_identical(&pkg, &rt), 151);
        let mode = |rel: &str| {
            fs::symlink_metadata(rt.join(rel))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("bin/f001"), 0o755, "set-uid dropped");
        assert_eq!(mode("bin/f002"), 0o600, "owner write added");
        assert_eq!(mode("bin/f007"), 0o700);
        assert_eq!(mode("bin/f004"), 0o644);
        assert_eq!(mode("bin/a"), 0o755, "directories keep owner rwx");
        assert_eq!(
            fs::read_link(rt.join("bin/link")).unwrap(),
            Path::new("f003")
        );
        use std::os::unix::fs::MetadataExt;
        for rel in walk(&rt) {
            let meta = fs::symlink_metadata(rt.join(&rel)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (owner.uid, owner.gid), "{rel:?}");
        }
    }
    fs::set_permissions(pkg.join("bin/a"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn special_files_are_refused_by_name_before_anything_is_copied() {
    let work = tempfile::tempdir().unwrap();
    let pkg = work.path().join("pkg");
    fs::create_dir_all(pkg.join("bin")).unwrap();
    fs::write(pkg.join("bin/tool"), b"x").unwrap();
    nix::unistd::mkfifo(&pkg.join("bin/pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let rt = work.path().join("rt");
    fs::create_dir(&rt).unwrap();
    let err = materialize(&pkg, &rt, &MaterializeOptions::default()).unwrap_err();
    match &err {
        MaterializeError::SpecialFile { path } => assert_eq!(path, &pkg.join("bin/pipe")),
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("bin/pipe"), "{err}");
    assert_eq!(fs::read_dir(&rt).unwrap().count(), 0);
}
