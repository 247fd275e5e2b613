//! Policy rows: insert, read, list, delete, and compare-and-set updates,
//! including two writers racing from the same revision.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};
use std::thread;

use rm_core::{LabelSet, PolicyId, PolicySpec, PolicyState, Target, WorkspaceMode};
use rm_journal::{Journal, JournalError};

fn spec(target: &str) -> PolicySpec {
    let mut spec = PolicySpec::new(
        Target::parse(target).unwrap(),
        LabelSet::parse(["rm-home-linux-x64", "gpu"]).unwrap(),
    );
    spec.max_capacity = Some(3);
    spec.min_capacity = 1;
    spec
}

fn open() -> (tempfile::TempDir, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("journal.sqlite3")).unwrap();
    (dir, journal)
}

#[test]
fn insert_returns_revision_one_and_reads_back_equal() {
    let (_dir, mut journal) = open();
    let policy = journal.insert_policy(&spec("me/app")).unwrap();
    assert_eq!(policy.revision(), 1);
    assert_eq!(policy.state(), PolicyState::Pending);
    assert_eq!(policy.target().to_string(), "me/app");
    assert_eq!(policy.labels().to_strings(), ["rm-home-linux-x64", "gpu"]);
    assert_eq!((policy.max_capacity(), policy.min_capacity()), (Some(3), 1));
    assert_eq!(policy.workspace_mode(), WorkspaceMode::Ephemeral);
    assert_eq!(
        journal.get_policy(policy.id()).unwrap(),
        Some(policy.clone())
    );

    let mut disabled = spec("my-org");
    disabled.enabled = false;
    disabled.max_capacity = None; // monitor only
    disabled.min_capacity = 0;
    let org = journal.insert_policy(&disabled).unwrap();
    assert_eq!(org.state(), PolicyState::Disabled);
    assert!(org.is_monitor_only());
    assert!(org.target().is_organization());

    assert_eq!(journal.list_policies().unwrap(), vec![policy, org]);
}

#[test]
fn same_target_and_profile_is_a_duplicate_case_insensitively() {
    let (_dir, mut journal) = open();
    journal.insert_policy(&spec("me/app")).unwrap();
    let err = journal.insert_policy(&spec("Me/App")).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::Duplicate {
                entity: "policy",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(journal.list_policies().unwrap().len(), 1);
}

#[test]
fn invalid_spec_is_refused_before_writing() {
    let (_dir, mut journal) = open();
    let mut bad = spec("me/app");
    bad.min_capacity = 5; // above max 3
    let err = journal.insert_policy(&bad).unwrap_err();
    assert!(matches!(err, JournalError::InvalidInput { .. }), "{err:?}");
    assert!(journal.list_policies().unwrap().is_empty());
}

#[test]
fn update_bumps_revision_and_stale_revision_conflicts() {
    let (_dir, mut journal) = open();
    let v1 = journal.insert_policy(&spec("me/app")).unwrap();

    let mut change = v1.clone();
    change.transition_to(PolicyState::Active).unwrap();
    change.set_capacity(Some(5), 2).unwrap();
    change.set_labels(LabelSet::parse(["rm-home-linux-x64"]).unwrap());
    let v2 = journal.update_policy(&change).unwrap();
    assert_eq!(v2.revision(), 2);
    assert_eq!(v2.state(), PolicyState::Active);
    assert_eq!((v2.max_capacity(), v2.min_capacity()), (Some(5), 2));
    assert_eq!(v2.labels().to_strings(), ["rm-home-linux-x64"]);
    assert_eq!(journal.get_policy(v1.id()).unwrap(), Some(v2.clone()));

    // A writer still holding revision 1 must not overwrite revision 2.
    let mut stale = v1.clone();
    stale.set_enabled(false);
    let err = journal.update_policy(&stale).unwrap_err();
    match &err {
        JournalError::Conflict {
            entity: "policy",
            detail,
            ..
        } => assert_eq!(detail, "expected revision 1, found revision 2"),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(journal.get_policy(v1.id()).unwrap(), Some(v2));
}

#[test]
fn update_and_delete_of_absent_policy_are_not_found() {
    let (_dir, mut journal) = open();
    let policy = journal.insert_policy(&spec("me/app")).unwrap();
    journal.delete_policy(policy.id()).unwrap();
    assert_eq!(journal.get_policy(policy.id()).unwrap(), None);
    assert!(matches!(
        journal.update_policy(&policy).unwrap_err(),
        JournalError::NotFound {
            entity: "policy",
            ..
        }
    ));
    assert!(matches!(
        journal.delete_policy(policy.id()).unwrap_err(),
        JournalError::NotFound { .. }
    ));
    assert_eq!(journal.get_policy(PolicyId::new(999)).unwrap(), None);
}

#[test]
fn deleted_policy_ids_are_never_reused() {
    let (_dir, mut journal) = open();
    let first = journal.insert_policy(&spec("me/app")).unwrap();
    journal.delete_policy(first.id()).unwrap();
    let second = journal.insert_policy(&spec("me/app")).unwrap();
    assert!(
        second.id() > first.id(),
        "{:?} reused {:?}",
        second.id(),
        first.id()
    );
}

#[test]
fn two_writers_from_the_same_revision_exactly_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let base = Journal::open(&path)
        .unwrap()
        .insert_policy(&spec("me/app"))
        .unwrap();

    for round in 0..5 {
        let barrier = Arc::new(Barrier::new(2));
        let writers: Vec<_> = [true, false]
            .into_iter()
            .map(|enabled| {
                let barrier = Arc::clone(&barrier);
                let path = path.clone();
                let id = base.id();
                thread::spawn(move || {
                    let mut journal = Journal::open(&path).unwrap();
                    let mut policy = journal.get_policy(id).unwrap().unwrap();
                    policy.set_enabled(enabled);
                    barrier.wait(); // both hold the same revision now
                    (enabled, journal.update_policy(&policy))
                })
            })
            .collect();
        let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();

        let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
        let losers: Vec<_> = results
            .iter()
            .filter(|(_, r)| matches!(r, Err(JournalError::Conflict { .. })))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        assert_eq!(losers.len(), 1, "round {round}: {results:?}");

        let (winner_enabled, winner) = winners[0];
        let winner = winner.as_ref().unwrap();
        let stored = Journal::open(&path)
            .unwrap()
            .get_policy(base.id())
            .unwrap()
            .unwrap();
        assert_eq!(&stored, winner, "the stored row is the winner's");
        assert_eq!(stored.enabled(), *winner_enabled);
        assert_eq!(stored.revision(), 2 + round);
    }
}

#[test]
fn policies_for_target_reads_only_that_target_case_insensitively() {
    let (_dir, mut journal) = open();
    let a = journal.insert_policy(&spec("me/app")).unwrap();
    let other = journal.insert_policy(&spec("me/other")).unwrap();
    let mut gpu = spec("Me/App");
    gpu.profile = rm_core::ProfileName::new("gpu").unwrap();
    let b = journal.insert_policy(&gpu).unwrap();
    let mine = journal
        .policies_for_target(&Target::parse("ME/app").unwrap())
        .unwrap();
    assert_eq!(mine, vec![a, b]);
    assert_eq!(
        journal
            .policies_for_target(&Target::parse("me/other").unwrap())
            .unwrap(),
        vec![other]
    );
    assert!(journal
        .policies_for_target(&Target::parse("org").unwrap())
        .unwrap()
        .is_empty());
}
