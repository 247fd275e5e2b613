//! A target's own admission settings: absent until stored, round-trip, cleared by storing
//! nothing, refused for an unknown policy or a zero expectation (nothing changes), and gone
//! with their policy.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_core::{LabelSet, PolicyId, PolicySpec, Target};
use rm_journal::{Journal, JournalError, PolicyAdmission};

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
fn settings_round_trip_clear_and_go_with_their_policy() {
    let (_dir, mut journal, id) = open_with_policy();
    assert!(journal.policy_admissions().unwrap().is_empty());
    let own = PolicyAdmission {
        memory_admission: Some(false),
        runner_memory_mb: Some(6144),
        memory_headroom_mb: None,
    };
    journal.put_policy_admission(id, &own).unwrap();
    assert_eq!(journal.policy_admissions().unwrap(), vec![(id, own)]);
    let changed = PolicyAdmission {
        memory_headroom_mb: Some(0),
        ..PolicyAdmission::default()
    };
    journal.put_policy_admission(id, &changed).unwrap();
    assert_eq!(journal.policy_admissions().unwrap(), vec![(id, changed)]);
    journal
        .put_policy_admission(id, &PolicyAdmission::default())
        .unwrap();
    assert!(journal.policy_admissions().unwrap().is_empty(), "cleared");

    journal.put_policy_admission(id, &own).unwrap();
    journal.delete_policy(id).unwrap();
    assert!(
        journal.policy_admissions().unwrap().is_empty(),
        "gone with the policy"
    );
}

#[test]
fn refused_settings_change_nothing() {
    let (_dir, mut journal, id) = open_with_policy();
    let own = PolicyAdmission {
        runner_memory_mb: Some(512),
        ..PolicyAdmission::default()
    };
    journal.put_policy_admission(id, &own).unwrap();
    let zero = PolicyAdmission {
        runner_memory_mb: Some(0),
        ..PolicyAdmission::default()
    };
    assert!(matches!(
        journal.put_policy_admission(id, &zero),
        Err(JournalError::InvalidInput { .. })
    ));
    assert!(matches!(
        journal.put_policy_admission(PolicyId::new(999), &own),
        Err(JournalError::NotFound { .. })
    ));
    assert_eq!(journal.policy_admissions().unwrap(), vec![(id, own)]);
}
