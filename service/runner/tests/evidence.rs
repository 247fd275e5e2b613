//! Reading the runner's diagnostics from crafted `_diag` directories.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

use rm_runner::{read_evidence, read_evidence_capped, EvidenceKind};
use std::fs;
use std::time::Duration;

#[test]
fn a_worker_log_means_a_job_started_and_only_the_listeners_line_that_it_completed() {
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
    assert_eq!(
        e.kind,
        EvidenceKind::JobStarted,
        "no completion reported yet"
    );
    assert_eq!(e.worker_logs, 1);

    // A console that was flooded, then the listener's own line at its end.
    let console = rt.path().join("_listener.log");
    let mut text = "x".repeat(200 * 1024);
    text.push_str("\n2026-12-07 10:10:12Z: Running job: build\n");
    fs::write(&console, &text).unwrap();
    assert_eq!(
        read_evidence(rt.path()).unwrap().kind,
        EvidenceKind::JobStarted
    );
    text.push_str("2026-12-07 10:10:20Z: Job build completed with result: Failed\n");
    fs::write(&console, &text).unwrap();
    assert_eq!(
        read_evidence(rt.path()).unwrap().kind,
        EvidenceKind::JobCompleted
    );
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
