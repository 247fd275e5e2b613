//! Reading the runner's diagnostics from crafted `_diag` directories.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

use rm_runner::{read_evidence, read_evidence_capped, EvidenceKind};
use std::fs;
use std::time::Duration;

#[test]
fn worker_log_means_a_job_ran_runner_log_alone_means_none() {
    let rt = tempfile::tempdir().unwrap();
    assert_eq!(
        read_evidence(rt.path()).unwrap().kind,
        EvidenceKind::Nothing
    );

    let diag = rt.path().join("_diag");
    fs::create_dir(&diag).unwrap();
    assert_eq!(
        read_evidence(rt.path()).unwrap().kind,
        EvidenceKind::Nothing
    );
    fs::write(diag.join("notes.txt"), b"x").unwrap();
    fs::create_dir(diag.join("Worker_dir.log")).unwrap(); // a directory is not a log
    assert_eq!(
        read_evidence(rt.path()).unwrap().kind,
        EvidenceKind::Nothing
    );

    fs::write(diag.join("Runner_20260101-101010-utc.log"), b"listening").unwrap();
    let e = read_evidence(rt.path()).unwrap();
    assert_eq!(
        (e.kind, e.runner_logs, e.truncated),
        (EvidenceKind::NoJob, 1, false)
    );

    fs::write(diag.join("Worker_20260101-101011-utc.log"), b"job").unwrap();
    let e = read_evidence(rt.path()).unwrap();
    assert_eq!(e.kind, EvidenceKind::JobRan);
    assert_eq!(e.worker_logs, 1);
}

#[test]
fn the_scan_is_capped() {
    let rt = tempfile::tempdir().unwrap();
    let diag = rt.path().join("_diag");
    fs::create_dir(&diag).unwrap();
    for i in 0..50 {
        fs::write(diag.join(format!("Runner_{i}.log")), b"x").unwrap();
    }
    let e = read_evidence_capped(rt.path(), 10, Duration::from_secs(5)).unwrap();
    assert!(e.truncated);
    assert_eq!(e.runner_logs, 10);
    assert_eq!(e.kind, EvidenceKind::NoJob);
    let e = read_evidence(rt.path()).unwrap();
    assert!(!e.truncated);
    assert_eq!(e.runner_logs, 50);
}
