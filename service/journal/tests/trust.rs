//! The verdict on an attempt's job: round-trips, is replaced by a later one, survives reopening
//! the file, goes with its attempt; a damaged row is a typed error, not a trusted job.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_core::{
    Attempt, AttemptId, JobTrust, LabelSet, PolicySpec, Target, Timestamp, TrustVerdict,
};
use rm_journal::{Journal, JournalError};
use rusqlite::Connection;

fn verdict(trust: JobTrust) -> TrustVerdict {
    TrustVerdict {
        trust,
        job_id: Some(7),
        run_id: Some(3),
        reason: format!("job build (run 3 of me/app): {trust}"),
    }
}

/// A journal file holding one attempt (of a policy of me/app): its directory (keep it), path,
/// the open journal and the attempt's id.
fn with_attempt() -> (tempfile::TempDir, std::path::PathBuf, Journal, AttemptId) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let mut journal = Journal::open(&path).unwrap();
    let spec = PolicySpec::new(
        Target::parse("me/app").unwrap(),
        LabelSet::parse(["rm-home-linux-x64"]).unwrap(),
    );
    let policy = journal.insert_policy(&spec).unwrap().id();
    let id = AttemptId::new("att00000001").unwrap();
    journal
        .insert_attempt(&Attempt::allocate(
            id.clone(),
            policy,
            Timestamp::from_millis(1_700_000_000_000),
        ))
        .unwrap();
    (dir, path, journal, id)
}

#[test]
fn a_verdict_is_kept_with_its_attempt_across_a_reopen_and_goes_with_it() {
    let (dir, path, mut journal, id) = with_attempt();
    let _dir = dir;
    assert_eq!(journal.trust_of(&id).unwrap(), None);

    journal
        .put_trust(&id, &verdict(JobTrust::Untrusted))
        .unwrap();
    journal.put_trust(&id, &verdict(JobTrust::Trusted)).unwrap();
    let unknown = TrustVerdict::unknown("GitHub's listings never named the job");
    let other = AttemptId::new("att00000002").unwrap();
    // A verdict needs its attempt.
    assert!(journal.put_trust(&other, &unknown).is_err());
    drop(journal);

    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(
        journal.trust_of(&id).unwrap(),
        Some(verdict(JobTrust::Trusted))
    );
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE attempt_trust SET trust = 'trusted' || '?' WHERE attempt_id = ?1",
        [id.as_str()],
    )
    .unwrap_err();
    drop(conn);

    // Removing the attempt removes its verdict.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON;").unwrap();
    conn.execute("DELETE FROM attempts WHERE id = ?1", [id.as_str()])
        .unwrap();
    let left: i64 = conn
        .query_row("SELECT count(*) FROM attempt_trust", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
    assert!(matches!(journal.trust_of(&id), Ok(None)));
}

#[test]
fn a_damaged_verdict_is_an_error_not_a_trusted_job() {
    let (dir, path, mut journal, id) = with_attempt();
    let _dir = dir;
    journal.put_trust(&id, &verdict(JobTrust::Trusted)).unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE attempt_trust SET job_id = -1 WHERE attempt_id = ?1",
        [id.as_str()],
    )
    .unwrap();
    drop(conn);
    assert!(matches!(
        journal.trust_of(&id),
        Err(JournalError::InvalidRow { .. })
    ));
}
