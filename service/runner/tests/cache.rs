//! Package cache: verification before extraction, single-flight downloads, GC.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod common;

use common::*;
use rm_runner::{CacheError, PackageCache, PackageId, PackageInfo};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn installs_a_verified_package_read_only_and_reports_progress() {
    let files = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let info = script_package(files.path(), "2.336.0");
    let size = std::fs::metadata(files.path().join(&info.filename))
        .unwrap()
        .len();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = Arc::clone(&seen);
    let cache = PackageCache::open(cache_dir.path(), DirSource::new(files.path()))
        .unwrap()
        .with_progress(Arc::new(move |p| {
            assert_eq!(p.total, Some(size));
            seen2.store(p.done, Ordering::SeqCst);
        }));
    let installed = cache.ensure(&info).await.unwrap();
    assert!(installed.downloaded);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        size,
        "last progress event = whole file"
    );
    assert_eq!(
        installed.dir,
        cache_dir.path().join(format!("2.336.0-{}", platform()))
    );
    assert!(installed.dir.join("bin/Runner.Listener").is_file());
    assert!(
        std::fs::symlink_metadata(installed.dir.join("bin/listener-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Immutable: no write bits anywhere, and no work files left behind.
    use std::os::unix::fs::PermissionsExt;
    for rel in walk(&installed.dir) {
        let meta = std::fs::symlink_metadata(installed.dir.join(&rel)).unwrap();
        if !meta.file_type().is_symlink() {
            assert_eq!(meta.permissions().mode() & 0o222, 0, "{rel:?} is writable");
        }
    }
    assert_eq!(
        entries(cache_dir.path()),
        vec![format!("2.336.0-{}", platform())]
    );
    // A second ensure is a cache hit.
    let again = cache.ensure(&info).await.unwrap();
    assert!(!again.downloaded);
    assert_eq!(cache.source().downloads(), 1);
}

#[tokio::test]
async fn checksum_mismatch_is_refused_before_extraction() {
    let files = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    // Not even a gzip: had extraction run first, the error would be an extraction error.
    std::fs::write(files.path().join("bad.tar.gz"), b"this is not an archive").unwrap();
    let info = PackageInfo {
        version: "2.336.0".into(),
        platform: platform(),
        download_url: "file:bad.tar.gz".into(),
        filename: "bad.tar.gz".into(),
        sha256: Some("0".repeat(64)),
    };
    let cache = PackageCache::open(cache_dir.path(), DirSource::new(files.path())).unwrap();
    let err = cache.ensure(&info).await.unwrap_err();
    match &err {
        CacheError::ChecksumMismatch {
            file,
            expected,
            actual,
        } => {
            assert_eq!(file, "bad.tar.gz");
            assert_eq!(expected, &"0".repeat(64));
            assert_eq!(actual.len(), 64);
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("bad.tar.gz"));
    assert_eq!(cache.source().downloads(), 1);
    assert!(
        entries(cache_dir.path()).is_empty(),
        "nothing installed, no work files"
    );

    // A real archive with a wrong checksum: same refusal, nothing installed.
    let mut good = script_package(files.path(), "2.337.0");
    good.sha256 = Some("ab".repeat(32));
    assert!(matches!(
        cache.ensure(&good).await,
        Err(CacheError::ChecksumMismatch { .. })
    ));
    assert!(entries(cache_dir.path()).is_empty());
}

#[tokio::test]
async fn missing_or_malformed_checksum_fails_closed_without_downloading() {
    let files = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let mut info = script_package(files.path(), "2.336.0");
    let cache = PackageCache::open(cache_dir.path(), DirSource::new(files.path())).unwrap();
    info.sha256 = None;
    let err = cache.ensure(&info).await.unwrap_err();
    assert!(matches!(&err, CacheError::MissingChecksum { file } if *file == info.filename));
    info.sha256 = Some("xyz".into());
    assert!(matches!(
        cache.ensure(&info).await,
        Err(CacheError::InvalidChecksum { .. })
    ));
    assert_eq!(cache.source().downloads(), 0);
    assert!(entries(cache_dir.path()).is_empty());
}

#[tokio::test]
async fn archive_with_a_link_out_of_the_package_is_refused() {
    let files = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let (_, sha) = make_tar_gz(
        &files.path().join("evil.tar.gz"),
        &[
            Entry::File("bin/Runner.Listener", 0o755, b"#!/bin/sh\n"),
            Entry::Link("bin/etc", "../../etc"),
        ],
    );
    let info = PackageInfo {
        version: "2.336.0".into(),
        platform: platform(),
        download_url: "file:evil.tar.gz".into(),
        filename: "evil.tar.gz".into(),
        sha256: Some(sha),
    };
    let cache = PackageCache::open(cache_dir.path(), DirSource::new(files.path())).unwrap();
    let err = cache.ensure(&info).await.unwrap_err();
    assert!(matches!(err, CacheError::Extract { .. }), "{err:?}");
    assert!(entries(cache_dir.path()).is_empty());
}

#[tokio::test]
async fn concurrent_ensures_share_one_download() {
    let files = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let info = script_package(files.path(), "2.336.0");
    let mut source = DirSource::new(files.path());
    source.gated = true;
    let cache = PackageCache::open(cache_dir.path(), source).unwrap();
    // One task polls all three in order: the first call blocks inside its download, the
    // second is then already waiting for the same version, and only then is the download
    // released.
    let both = async {
        tokio::join!(cache.ensure(&info), cache.ensure(&info), async {
            cache.source().started.notified().await;
            cache.source().release.add_permits(1);
        })
    };
    let (a, b, ()) = tokio::time::timeout(Duration::from_secs(10), both)
        .await
        .expect("both ensures finish");
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(cache.source().downloads(), 1);
    assert_eq!(a.dir, b.dir);
    assert!(
        a.downloaded != b.downloaded,
        "exactly one of them downloaded"
    );
}

#[tokio::test]
async fn gc_keeps_current_previous_and_in_use() {
    let files = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = PackageCache::open(cache_dir.path(), DirSource::new(files.path())).unwrap();
    for v in ["2.1.0", "2.2.0", "2.3.0", "2.10.0"] {
        cache
            .ensure(&script_package(files.path(), v))
            .await
            .unwrap();
    }
    let id = |v: &str| PackageId::new(v, platform());
    assert_eq!(cache.current(platform()).unwrap().unwrap().id, id("2.10.0"));

    let in_use: HashSet<_> = [id("2.1.0")].into_iter().collect();
    let removed = cache.gc(&in_use).unwrap();
    assert_eq!(removed, vec![id("2.2.0")]);
    let mut left: Vec<_> = cache
        .installed()
        .unwrap()
        .into_iter()
        .map(|p| p.id.version)
        .collect();
    left.sort();
    assert_eq!(left, vec!["2.1.0", "2.10.0", "2.3.0"]);

    // Once no attempt uses it, the old one goes too; current and previous stay.
    assert_eq!(cache.gc(&HashSet::new()).unwrap(), vec![id("2.1.0")]);
    let mut left: Vec<_> = cache
        .installed()
        .unwrap()
        .into_iter()
        .map(|p| p.id.version)
        .collect();
    left.sort();
    assert_eq!(left, vec!["2.10.0", "2.3.0"]);
    assert!(cache.gc(&HashSet::new()).unwrap().is_empty());
}

#[tokio::test]
async fn refresh_records_the_check_and_open_removes_leftovers() {
    let files = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    // Leftovers of a crash mid-install.
    std::fs::create_dir(cache_dir.path().join(".tmp-2.0.0-linux-x64-1-1")).unwrap();
    std::fs::write(cache_dir.path().join(".download-2.0.0-linux-x64-1-1"), b"x").unwrap();
    let source = DirSource::new(files.path());
    let info = script_package(files.path(), "2.336.0");
    source.latest.lock().unwrap().insert(platform(), info);
    let cache = PackageCache::open(cache_dir.path(), source).unwrap();
    assert!(entries(cache_dir.path()).is_empty());

    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    assert!(cache.should_check(t0));
    let installed = cache.refresh(platform(), t0).await.unwrap();
    assert_eq!(installed.id.version, "2.336.0");
    assert!(!cache.should_check(t0 + Duration::from_secs(5 * 3600)));
    assert!(cache.should_check(t0 + rm_runner::package::CHECK_INTERVAL));
}
