//! Attempt rows: every state, outcome and failure reason round-trips; runner
//! names are unique; updates are compare-and-set; capacity counts follow the
//! domain and include attempts of deleted policies; bad rows are typed errors.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use rm_core::{
    Attempt, AttemptId, AttemptState, FailureReason, LabelSet, Observed, Outcome, PolicyId,
    PolicySpec, ProcessIdentity, Target, TerminateReason, Timestamp,
};
use rm_journal::{Journal, JournalError};
use rusqlite::Connection;

fn open() -> (tempfile::TempDir, PathBuf, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let journal = Journal::open(&path).unwrap();
    (dir, path, journal)
}

fn id(n: u32) -> AttemptId {
    AttemptId::new(format!("att{n:08}")).unwrap()
}

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

/// An attempt driven through legal events into `state` (concluded states get
/// a representative outcome).
fn in_state(n: u32, policy: PolicyId, state: AttemptState) -> Attempt {
    use AttemptState::*;
    let mut a = Attempt::allocate(id(n), policy, t(0));
    let steps: &[AttemptState] = match state {
        Allocated => &[],
        JitReceived => &[JitReceived],
        Starting => &[JitReceived, Starting],
        Idle => &[JitReceived, Starting, Idle],
        Busy | Finished | Orphaned | Cleaned => &[JitReceived, Starting, Busy],
        Failed => &[],
    };
    for (i, step) in steps.iter().enumerate() {
        let now = t(10 * (i as i64 + 1));
        match step {
            JitReceived => a.record_jit(4_000 + u64::from(n), now).unwrap(),
            Starting => a
                .record_started(
                    ProcessIdentity {
                        pid: 1_000 + n,
                        start_time: 987_654_321,
                    },
                    now,
                )
                .unwrap(),
            Idle => a.observe(Observed::Idle, now).unwrap(),
            Busy => a.observe(Observed::Busy, now).unwrap(),
            _ => unreachable!(),
        }
    }
    match state {
        Finished => a.conclude(Outcome::CompletedJob, t(100)).unwrap(),
        Orphaned => a.conclude(Outcome::Orphaned, t(100)).unwrap(),
        Failed => a
            .conclude(Outcome::Failed(FailureReason::JitRequestFailed), t(100))
            .unwrap(),
        Cleaned => {
            a.conclude(Outcome::CompletedJob, t(100)).unwrap();
            a.mark_cleaned(t(200)).unwrap();
        }
        _ => {}
    }
    assert_eq!(a.state(), state);
    a
}

fn assert_round_trips(journal: &mut Journal, attempt: &Attempt) {
    assert_eq!(
        journal.get_attempt(attempt.id()).unwrap().as_ref(),
        Some(attempt)
    );
    assert_eq!(
        journal
            .get_attempt_by_runner_name(attempt.runner_name())
            .unwrap()
            .as_ref(),
        Some(attempt)
    );
}

fn policy(journal: &mut Journal, target: &str) -> PolicyId {
    let mut spec = PolicySpec::new(
        Target::parse(target).unwrap(),
        LabelSet::parse(["rm-home-linux-x64"]).unwrap(),
    );
    spec.max_capacity = Some(4);
    journal.insert_policy(&spec).unwrap().id()
}

#[test]
fn every_state_round_trips_on_insert() {
    let (_dir, _path, mut journal) = open();
    for (n, state) in AttemptState::ALL.iter().enumerate() {
        let attempt = in_state(n as u32, PolicyId::new(1), *state);
        journal.insert_attempt(&attempt).unwrap();
        assert_round_trips(&mut journal, &attempt);
    }
}

#[test]
fn every_outcome_and_failure_reason_round_trips_through_updates() {
    let (_dir, _path, mut journal) = open();
    let mut outcomes = vec![
        Outcome::CompletedJob,
        Outcome::ExitedIdleWithoutWork,
        Outcome::Orphaned,
    ];
    outcomes.extend(FailureReason::ALL.iter().map(|r| Outcome::Failed(*r)));
    for (n, outcome) in (100..).zip(outcomes) {
        // Walk the live states in order and conclude from the first one the
        // domain accepts for this outcome, journalling every step.
        let mut attempt = Attempt::allocate(id(n), PolicyId::new(7), t(0));
        journal.insert_attempt(&attempt).unwrap();
        let mut now = 0;
        loop {
            now += 10;
            if outcome.allowed_from(attempt.state()) {
                let before = attempt.clone();
                attempt.conclude(outcome, t(now)).unwrap();
                journal.update_attempt(&before, &attempt).unwrap();
                break;
            }
            let before = attempt.clone();
            match attempt.state() {
                AttemptState::Allocated => attempt.record_jit(77, t(now)).unwrap(),
                AttemptState::JitReceived => attempt
                    .record_started(
                        ProcessIdentity {
                            pid: 42,
                            start_time: u64::from(n),
                        },
                        t(now),
                    )
                    .unwrap(),
                AttemptState::Starting => attempt.observe(Observed::Idle, t(now)).unwrap(),
                AttemptState::Idle => attempt.observe(Observed::Busy, t(now)).unwrap(),
                other => panic!("{outcome} is never allowed (stuck in {other})"),
            }
            journal.update_attempt(&before, &attempt).unwrap();
            assert_round_trips(&mut journal, &attempt);
        }
        assert_eq!(attempt.outcome(), Some(outcome));
        assert_round_trips(&mut journal, &attempt);

        let before = attempt.clone();
        attempt.mark_cleaned(t(now + 10)).unwrap();
        journal.update_attempt(&before, &attempt).unwrap();
        assert_round_trips(&mut journal, &attempt);
    }
}

#[test]
fn terminate_intents_round_trip() {
    let (_dir, _path, mut journal) = open();
    for (n, (state, reason)) in [
        (AttemptState::Starting, TerminateReason::RegistrationTimeout),
        (AttemptState::Idle, TerminateReason::IdleSurplus),
    ]
    .into_iter()
    .enumerate()
    {
        let mut attempt = in_state(200 + n as u32, PolicyId::new(1), state);
        journal.insert_attempt(&attempt).unwrap();
        let before = attempt.clone();
        attempt.record_terminate_intent(reason).unwrap();
        journal.update_attempt(&before, &attempt).unwrap();
        assert_round_trips(&mut journal, &attempt);
        assert_eq!(
            journal
                .get_attempt(attempt.id())
                .unwrap()
                .unwrap()
                .terminate_intent(),
            Some(reason)
        );
    }
}

#[test]
fn duplicate_attempt_or_runner_name_is_refused() {
    let (_dir, path, mut journal) = open();
    let attempt = in_state(1, PolicyId::new(1), AttemptState::Allocated);
    journal.insert_attempt(&attempt).unwrap();
    let mut again = in_state(1, PolicyId::new(2), AttemptState::JitReceived);
    let err = journal.insert_attempt(&again).unwrap_err();
    match &err {
        JournalError::Duplicate { entity, key } => {
            assert_eq!(*entity, "attempt");
            assert!(key.contains("rm-att00000001"), "{key}");
        }
        other => panic!("expected Duplicate, got {other:?}"),
    }
    assert_round_trips(&mut journal, &attempt); // the first one is untouched

    // The runner name is unique on its own too, not only through the id.
    let conn = Connection::open(&path).unwrap();
    let raw = conn.execute(
        "INSERT INTO attempts (id, policy_id, runner_name, state, created_at_ms,
                               state_changed_at_ms, version, written_at_ms)
         VALUES ('other0001', 1, 'rm-att00000001', 'allocated', 0, 0, 1, 0)",
        [],
    );
    assert!(
        raw.is_err(),
        "second row with the same runner name was accepted"
    );
    again = in_state(2, PolicyId::new(1), AttemptState::Allocated);
    journal.insert_attempt(&again).unwrap();
}

#[test]
fn stale_update_conflicts_and_writes_nothing() {
    let (_dir, _path, mut journal) = open();
    let base = in_state(1, PolicyId::new(1), AttemptState::Idle);
    journal.insert_attempt(&base).unwrap();

    // Writer A: idle -> busy.
    let mut a = base.clone();
    a.observe(Observed::Busy, t(500)).unwrap();
    journal.update_attempt(&base, &a).unwrap();

    // Writer B started from the same idle copy: it must not undo A.
    let mut b = base.clone();
    b.record_terminate_intent(TerminateReason::IdleSurplus)
        .unwrap();
    let err = journal.update_attempt(&base, &b).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::Conflict {
                entity: "attempt",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("stored 'busy'"), "{err}");
    assert_round_trips(&mut journal, &a);

    // Different attempts as previous/next are a caller bug.
    let other = in_state(2, PolicyId::new(1), AttemptState::Idle);
    assert!(matches!(
        journal.update_attempt(&a, &other).unwrap_err(),
        JournalError::InvalidInput { .. }
    ));
    // Updating an attempt that was never inserted.
    assert!(matches!(
        journal.update_attempt(&other, &other).unwrap_err(),
        JournalError::NotFound {
            entity: "attempt",
            ..
        }
    ));
}

#[test]
fn queries_by_policy_and_uncleaned() {
    let (_dir, _path, mut journal) = open();
    let p1 = PolicyId::new(1);
    let p2 = PolicyId::new(2);
    let a = in_state(1, p1, AttemptState::Busy);
    let b = in_state(2, p1, AttemptState::Cleaned);
    let c = in_state(3, p2, AttemptState::Failed);
    for x in [&a, &b, &c] {
        journal.insert_attempt(x).unwrap();
    }
    assert_eq!(journal.attempts_for_policy(p1).unwrap(), vec![a.clone(), b]);
    assert_eq!(journal.attempts_for_policy(p2).unwrap(), vec![c.clone()]);
    assert!(journal
        .attempts_for_policy(PolicyId::new(3))
        .unwrap()
        .is_empty());
    assert_eq!(
        journal.uncleaned_attempts().unwrap(),
        vec![a.clone(), c.clone()]
    );
    // Per set of policies: only theirs, cleaned ones left out, oldest first.
    assert_eq!(
        journal.uncleaned_attempts_for_policies(&[p1]).unwrap(),
        vec![a.clone()]
    );
    assert_eq!(
        journal.uncleaned_attempts_for_policies(&[p2]).unwrap(),
        vec![c.clone()]
    );
    assert_eq!(
        journal.uncleaned_attempts_for_policies(&[p2, p1]).unwrap(),
        vec![a, c]
    );
    assert!(journal
        .uncleaned_attempts_for_policies(&[])
        .unwrap()
        .is_empty());
    assert!(journal
        .uncleaned_attempts_for_policies(&[PolicyId::new(3)])
        .unwrap()
        .is_empty());
    assert_eq!(journal.get_attempt(&id(99)).unwrap(), None);
    assert_eq!(
        journal.get_attempt_by_runner_name("someone-else").unwrap(),
        None
    );
}

#[test]
fn capacity_counts_exactly_the_states_the_domain_counts() {
    let (_dir, _path, mut journal) = open();
    let p = PolicyId::new(1);
    for (n, state) in AttemptState::ALL.iter().enumerate() {
        journal
            .insert_attempt(&in_state(n as u32, p, *state))
            .unwrap();
    }
    let expected = AttemptState::ALL
        .iter()
        .filter(|s| s.counts_against_capacity())
        .count() as u32;
    assert!(expected > 0 && expected < AttemptState::ALL.len() as u32);
    assert_eq!(journal.active_count(p).unwrap(), expected);
    assert_eq!(journal.active_total().unwrap(), expected);
}

#[test]
fn attempts_of_deleted_policies_survive_and_still_count() {
    let (_dir, _path, mut journal) = open();
    let kept = policy(&mut journal, "me/kept");
    let gone = policy(&mut journal, "me/gone");
    let unknown = PolicyId::new(9_999); // never existed in this journal

    let rows = [
        in_state(1, kept, AttemptState::Allocated),
        in_state(2, kept, AttemptState::Busy),
        in_state(3, kept, AttemptState::Finished),
        in_state(4, kept, AttemptState::Cleaned),
        in_state(5, gone, AttemptState::Starting),
        in_state(6, gone, AttemptState::Idle),
        in_state(7, gone, AttemptState::Orphaned),
        in_state(8, unknown, AttemptState::JitReceived),
    ];
    for row in &rows {
        journal.insert_attempt(row).unwrap();
    }
    journal.delete_policy(gone).unwrap();

    assert_eq!(journal.active_count(kept).unwrap(), 2);
    assert_eq!(journal.active_count(gone).unwrap(), 2);
    assert_eq!(journal.active_count(unknown).unwrap(), 1);
    assert_eq!(journal.active_total().unwrap(), 5);
    let by_policy = journal.active_counts_by_policy().unwrap();
    assert_eq!(
        by_policy.into_iter().collect::<Vec<_>>(),
        vec![(kept, 2), (gone, 2), (unknown, 1)]
    );
    // The same slot holders with their states and runner names, for the allocator.
    let mut active: Vec<(PolicyId, AttemptState, String)> = journal
        .active_attempts()
        .unwrap()
        .into_iter()
        .map(|a| (a.policy_id, a.state, a.runner_name))
        .collect();
    active.sort_by_key(|(_, _, name)| name.clone());
    let mut expected: Vec<(PolicyId, AttemptState, String)> = rows
        .iter()
        .filter(|a| a.counts_against_capacity())
        .map(|a| (a.policy_id(), a.state(), a.runner_name().to_owned()))
        .collect();
    expected.sort_by_key(|(_, _, name)| name.clone());
    assert_eq!(active, expected);
    assert_eq!(journal.attempts_for_policy(gone).unwrap().len(), 3);
    assert_eq!(journal.uncleaned_attempts().unwrap().len(), 7);
}

#[test]
fn bad_rows_are_typed_errors_not_panics() {
    let (_dir, path, mut journal) = open();
    let attempt = in_state(1, PolicyId::new(1), AttemptState::Busy);
    journal.insert_attempt(&attempt).unwrap();
    let conn = Connection::open(&path).unwrap();
    let corrupt_with = |sql: &str| {
        conn.execute_batch(&format!("BEGIN; {sql}; COMMIT;"))
            .unwrap();
    };
    let restore = "UPDATE attempts SET state = 'busy', outcome = NULL, failure_reason = NULL, \
                   runner_id = 4001, runner_name = 'rm-att00000001' WHERE id = 'att00000001'";
    for (sql, expect) in [
        (
            "UPDATE attempts SET state = 'exploded'",
            "unknown attempt state 'exploded'",
        ),
        ("UPDATE attempts SET outcome = 'failed'", "outcome"),
        ("UPDATE attempts SET runner_id = NULL", "needs a runner id"),
        (
            "UPDATE attempts SET runner_id = -5",
            "runner_id -5 is out of range",
        ),
        (
            "UPDATE attempts SET runner_name = 'rm-other0001'",
            "runner_name",
        ),
        (
            "UPDATE attempts SET state = 'failed', outcome = 'failed', failure_reason = 'gremlins'",
            "unknown failure reason 'gremlins'",
        ),
    ] {
        corrupt_with(sql);
        let err = journal.get_attempt(attempt.id()).unwrap_err();
        match &err {
            JournalError::InvalidRow { table, key, reason } => {
                assert_eq!(*table, "attempts");
                assert_eq!(key, "att00000001");
                assert!(reason.contains(expect), "{sql}: {reason}");
            }
            other => panic!("{sql}: expected InvalidRow, got {other:?}"),
        }
        assert!(journal.uncleaned_attempts().is_err());
        corrupt_with(restore);
        assert_round_trips(&mut journal, &attempt);
    }

    // A policy row with an unknown state is refused the same way.
    let p = policy(&mut journal, "me/app");
    corrupt_with(&format!(
        "UPDATE policies SET state = 'asleep' WHERE id = {}",
        p.get()
    ));
    let err = journal.get_policy(p).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::InvalidRow {
                table: "policies",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(journal.list_policies().is_err());
}
