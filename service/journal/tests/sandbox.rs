//! A target's own sandbox choices: round-trip, clear, go with their policy; an unknown policy
//! is refused; a damaged row makes the file refused at open.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_core::{LabelSet, PolicyId, PolicySpec, Target, TargetSandbox};
use rm_journal::{Journal, JournalError};
use rusqlite::Connection;

fn open_with_policy() -> (tempfile::TempDir, Journal, PolicyId) {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = Journal::open(dir.path().join("journal.sqlite3")).unwrap();
    let spec = PolicySpec::new(
        Target::parse("me/app").unwrap(),
        LabelSet::parse(["rm-home-linux-x64"]).unwrap(),
    );
    let id = journal.insert_policy(&spec).unwrap().id();
    (dir, journal, id)
}

#[test]
fn a_targets_sandbox_choices_round_trip_clear_and_go_with_their_policy() {
    let (_dir, mut journal, id) = open_with_policy();
    assert!(journal.policy_sandboxes().unwrap().is_empty());
    let docker = TargetSandbox {
        walls: true,
        docker: true,
        memory_max_mb: None,
    };
    journal.put_policy_sandbox(id, docker).unwrap();
    assert_eq!(journal.policy_sandboxes().unwrap(), vec![(id, docker)]);
    let off = TargetSandbox {
        walls: false,
        docker: false,
        memory_max_mb: None,
    };
    journal.put_policy_sandbox(id, off).unwrap();
    assert_eq!(journal.policy_sandboxes().unwrap(), vec![(id, off)]);
    // A memory cap of its own alone is a choice away from the default: kept.
    let capped = TargetSandbox {
        memory_max_mb: Some(2048),
        ..TargetSandbox::default()
    };
    journal.put_policy_sandbox(id, capped).unwrap();
    assert_eq!(journal.policy_sandboxes().unwrap(), vec![(id, capped)]);
    journal
        .put_policy_sandbox(id, TargetSandbox::default())
        .unwrap();
    assert!(journal.policy_sandboxes().unwrap().is_empty(), "cleared");

    journal.put_policy_sandbox(id, off).unwrap();
    journal.delete_policy(id).unwrap();
    assert!(
        journal.policy_sandboxes().unwrap().is_empty(),
        "gone with the policy"
    );
}

#[test]
fn an_unknown_policy_is_refused() {
    let (_dir, mut journal, _id) = open_with_policy();
    let off = TargetSandbox {
        walls: false,
        docker: false,
        memory_max_mb: None,
    };
    let err = journal
        .put_policy_sandbox(PolicyId::new(999), off)
        .unwrap_err();
    assert!(matches!(err, JournalError::NotFound { .. }), "{err:?}");
    assert!(journal.policy_sandboxes().unwrap().is_empty());
}

/// Stores `choice`, then writes `damage` (an `UPDATE` the CHECK constraints would refuse)
/// the hard way, and answers why the file is refused at open.
fn refused_after(choice: TargetSandbox, damage: &str) -> JournalError {
    let (dir, mut journal, id) = open_with_policy();
    journal.put_policy_sandbox(id, choice).unwrap();
    drop(journal);
    let path = dir.path().join("journal.sqlite3");
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("PRAGMA ignore_check_constraints = ON; {damage}"))
        .unwrap();
    Journal::open(&path).unwrap_err()
}

#[test]
fn a_damaged_row_makes_the_file_refused() {
    let off = TargetSandbox {
        walls: false,
        docker: false,
        memory_max_mb: None,
    };
    // Refused at open with the table named, never read as "no sandbox".
    let err = refused_after(off, "UPDATE policy_sandbox SET walls = 2;");
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("policy_sandbox"), "{err}");
}

#[test]
fn a_damaged_memory_cap_is_refused_not_read_as_the_default() {
    let capped = TargetSandbox {
        memory_max_mb: Some(1024),
        ..TargetSandbox::default()
    };
    let err = refused_after(capped, "UPDATE policy_sandbox SET memory_max_mb = -5;");
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("policy_sandbox"), "{err}");
}
