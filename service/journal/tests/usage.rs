//! Attempt usage: rows round-trip, re-recording is idempotent, each policy keeps only its
//! newest rows, the typical peak ignores an outlier, a version-2 file migrates forward with
//! its attempts, and damaged numbers are typed errors.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use rm_core::{Attempt, AttemptId, PolicyId, Timestamp};
use rm_journal::{AttemptUsage, Journal, JournalError, SCHEMA_VERSION, USAGE_KEPT_PER_POLICY};
use rusqlite::Connection;

const MIB: u64 = 1024 * 1024;

fn open() -> (tempfile::TempDir, PathBuf, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let journal = Journal::open(&path).unwrap();
    (dir, path, journal)
}

fn id(n: u32) -> AttemptId {
    AttemptId::new(format!("att{n:08}")).unwrap()
}

/// Attempt `n` of `policy`, ended at `n` seconds, peaking at `peak_mib`.
fn usage(n: u32, policy: i64, peak_mib: u64) -> AttemptUsage {
    AttemptUsage {
        attempt_id: id(n),
        policy_id: PolicyId::new(policy),
        ended_at_ms: 1_700_000_000_000 + i64::from(n) * 1_000,
        wall_ms: 60_000 + u64::from(n),
        cpu_ms: 90_000,
        peak_rss_bytes: peak_mib * MIB,
        average_millicores: 1_500,
        busiest_millicores: 3_900,
    }
}

fn ids(rows: &[AttemptUsage]) -> Vec<AttemptId> {
    rows.iter().map(|u| u.attempt_id.clone()).collect()
}

fn schema_sql(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn usage_round_trips_newest_first() {
    let (_dir, path, mut journal) = open();
    let rows = [usage(1, 1, 300), usage(3, 1, 500), usage(2, 1, 400)];
    for row in &rows {
        journal.record_usage(row).unwrap();
    }
    let recent = journal.recent_usage(PolicyId::new(1), 10).unwrap();
    assert_eq!(
        recent,
        vec![rows[1].clone(), rows[2].clone(), rows[0].clone()]
    );
    assert_eq!(
        ids(&journal.recent_usage(PolicyId::new(1), 2).unwrap()),
        vec![id(3), id(2)]
    );
    assert!(journal
        .recent_usage(PolicyId::new(1), 0)
        .unwrap()
        .is_empty());
    assert!(journal
        .recent_usage(PolicyId::new(2), 10)
        .unwrap()
        .is_empty());

    // Durable across reopening, like every other row.
    drop(journal);
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(journal.recent_usage(PolicyId::new(1), 10).unwrap(), recent);
}

#[test]
fn recording_an_attempt_again_replaces_its_row() {
    let (_dir, _path, mut journal) = open();
    let first = usage(1, 1, 300);
    journal.record_usage(&first).unwrap();
    journal.record_usage(&first).unwrap();
    assert_eq!(
        journal.recent_usage(PolicyId::new(1), 10).unwrap(),
        vec![first.clone()]
    );

    let retried = AttemptUsage {
        peak_rss_bytes: 350 * MIB,
        wall_ms: 61_000,
        ..first
    };
    journal.record_usage(&retried).unwrap();
    assert_eq!(
        journal.recent_usage(PolicyId::new(1), 10).unwrap(),
        vec![retried]
    );
}

#[test]
fn only_the_newest_rows_of_the_policy_are_kept() {
    let (_dir, _path, mut journal) = open();
    let kept = u32::try_from(USAGE_KEPT_PER_POLICY).unwrap();
    assert_eq!(kept, 20);
    // Another policy's older history, which must be left alone.
    for n in 0..5 {
        journal.record_usage(&usage(1_000 + n, 2, 100)).unwrap();
    }
    // Recorded out of order: age, not arrival, decides what goes.
    let mut order: Vec<u32> = (1..=kept + 5).collect();
    order.reverse();
    order.swap(0, 7);
    for n in order {
        journal.record_usage(&usage(n, 1, 200)).unwrap();
    }
    let recent = journal.recent_usage(PolicyId::new(1), 100).unwrap();
    let expected: Vec<AttemptId> = (6..=kept + 5).rev().map(id).collect();
    assert_eq!(ids(&recent), expected);

    // An old attempt reported late is pruned at once; a new one pushes the oldest out.
    journal.record_usage(&usage(2, 1, 200)).unwrap();
    assert_eq!(
        ids(&journal.recent_usage(PolicyId::new(1), 100).unwrap()),
        expected
    );
    journal.record_usage(&usage(kept + 6, 1, 200)).unwrap();
    let recent = ids(&journal.recent_usage(PolicyId::new(1), 100).unwrap());
    assert_eq!(recent.len(), USAGE_KEPT_PER_POLICY);
    assert_eq!(recent.first(), Some(&id(kept + 6)));
    assert_eq!(recent.last(), Some(&id(7)));

    let other = journal.recent_usage(PolicyId::new(2), 100).unwrap();
    assert_eq!(
        ids(&other),
        (1_000..1_005).rev().map(id).collect::<Vec<_>>()
    );
}

#[test]
fn typical_peak_is_the_90th_percentile_of_the_kept_peaks() {
    let (_dir, _path, mut journal) = open();
    assert_eq!(journal.typical_peak(PolicyId::new(1)).unwrap(), None);

    // 19 ordinary runs of 500–590 MiB and one that ran away to 8 GiB.
    for n in 0..19 {
        journal
            .record_usage(&usage(n, 1, 500 + 5 * u64::from(n)))
            .unwrap();
    }
    journal.record_usage(&usage(19, 1, 8 * 1024)).unwrap();
    // Sorted: 500, 505, ..., 590, 8192 MiB; rank ⌈0.9·20⌉ = 18 → 585 MiB.
    assert_eq!(
        journal.typical_peak(PolicyId::new(1)).unwrap(),
        Some(585 * MIB)
    );

    // Little history: the largest seen.
    journal.record_usage(&usage(100, 2, 700)).unwrap();
    journal.record_usage(&usage(101, 2, 900)).unwrap();
    journal.record_usage(&usage(102, 2, 800)).unwrap();
    assert_eq!(
        journal.typical_peak(PolicyId::new(2)).unwrap(),
        Some(900 * MIB)
    );
    assert_eq!(journal.typical_peak(PolicyId::new(3)).unwrap(), None);
}

#[test]
fn usage_outlives_its_attempt_and_policy() {
    let (_dir, _path, mut journal) = open();
    // No attempt row is needed (the row may be pruned one day), and deleting the policy
    // leaves its history, as it leaves its attempts.
    journal.record_usage(&usage(1, 7, 300)).unwrap();
    assert_eq!(journal.get_attempt(&id(1)).unwrap(), None);
    assert_eq!(
        journal.typical_peak(PolicyId::new(7)).unwrap(),
        Some(300 * MIB)
    );
}

#[test]
fn a_version_2_journal_migrates_forward_and_keeps_its_attempts() {
    let (_dir, path, mut journal) = open();
    let created = Timestamp::from_millis(1_700_000_000_000);
    let attempts: Vec<Attempt> = (1..=3)
        .map(|n| Attempt::allocate(id(n), PolicyId::new(1), created))
        .collect();
    for attempt in &attempts {
        journal.insert_attempt(attempt).unwrap();
    }
    journal.meta_set("k", "kept").unwrap();
    drop(journal);
    let fresh_schema = schema_sql(&path);

    // Version 3 only adds the usage table (and its index), version 4 the host settings and
    // version 5 the targets' admission settings, version 6 the runner environment, version 7
    // the caches' settings, so taking them away and stamping version 2 gives exactly the file
    // version 2 wrote.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP TABLE attempt_usage; DROP TABLE host_settings; DROP TABLE policy_admission;
         DROP TABLE runner_env; DROP TABLE policy_cache; DROP TABLE cache_settings;
         DROP TABLE policy_sandbox; DROP TABLE attempt_trust; PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(conn);
    assert!(schema_sql(&path)
        .iter()
        .all(|s| !s.contains("attempt_usage")));

    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(SCHEMA_VERSION, 10);
    assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
    for attempt in &attempts {
        assert_eq!(
            journal.get_attempt(attempt.id()).unwrap().as_ref(),
            Some(attempt)
        );
    }
    assert_eq!(journal.uncleaned_attempts().unwrap(), attempts);
    assert_eq!(journal.meta_get("k").unwrap().as_deref(), Some("kept"));
    journal.record_usage(&usage(1, 1, 300)).unwrap();
    assert_eq!(
        journal.typical_peak(PolicyId::new(1)).unwrap(),
        Some(300 * MIB)
    );
    assert!(journal.integrity_check().unwrap().is_empty());
    drop(journal);
    assert_eq!(
        schema_sql(&path),
        fresh_schema,
        "a migrated file has the schema of a fresh one"
    );
}

#[test]
fn damaged_usage_numbers_are_typed_errors_not_panics() {
    let (_dir, path, mut journal) = open();
    journal.record_usage(&usage(1, 1, 300)).unwrap();
    let conn = Connection::open(&path).unwrap();
    // The table's CHECKs keep negatives out; a hand-edited or damaged file need not have
    // gone through them.
    conn.pragma_update(None, "ignore_check_constraints", true)
        .unwrap();
    let restore = format!(
        "UPDATE attempt_usage SET wall_ms = 60001, cpu_ms = 90000, peak_rss_bytes = {}, \
         average_millicores = 1500, busiest_millicores = 3900, attempt_id = 'att00000001'",
        300 * MIB
    );
    for (sql, column) in [
        ("UPDATE attempt_usage SET wall_ms = -1", "wall_ms -1"),
        ("UPDATE attempt_usage SET cpu_ms = -2", "cpu_ms -2"),
        (
            "UPDATE attempt_usage SET peak_rss_bytes = -3",
            "peak_rss_bytes -3",
        ),
        (
            "UPDATE attempt_usage SET average_millicores = -4",
            "average_millicores -4",
        ),
        (
            "UPDATE attempt_usage SET busiest_millicores = -5",
            "busiest_millicores -5",
        ),
        (
            "UPDATE attempt_usage SET attempt_id = 'NOT-AN-ID'",
            "attempt_id",
        ),
    ] {
        conn.execute_batch(sql).unwrap();
        let err = journal.recent_usage(PolicyId::new(1), 10).unwrap_err();
        match &err {
            JournalError::InvalidRow { table, reason, .. } => {
                assert_eq!(*table, "attempt_usage");
                assert!(reason.contains(column), "{sql}: {reason}");
            }
            other => panic!("{sql}: expected InvalidRow, got {other:?}"),
        }
        assert!(
            err.to_string().contains("attempt_usage/"),
            "the message names the table: {err}"
        );
        conn.execute_batch(&restore).unwrap();
        assert_eq!(
            journal.recent_usage(PolicyId::new(1), 10).unwrap(),
            vec![usage(1, 1, 300)]
        );
    }

    // typical_peak decodes the peaks the same way.
    conn.execute_batch("UPDATE attempt_usage SET peak_rss_bytes = -3")
        .unwrap();
    let err = journal.typical_peak(PolicyId::new(1)).unwrap_err();
    match &err {
        JournalError::InvalidRow { table, key, reason } => {
            assert_eq!(*table, "attempt_usage");
            assert_eq!(key, "att00000001");
            assert!(
                reason.contains("peak_rss_bytes -3 is out of range"),
                "{reason}"
            );
        }
        other => panic!("expected InvalidRow, got {other:?}"),
    }
}

#[test]
fn numbers_beyond_sqlite_integers_are_refused_on_write() {
    let (_dir, _path, mut journal) = open();
    let huge = AttemptUsage {
        peak_rss_bytes: u64::MAX,
        ..usage(1, 1, 300)
    };
    let err = journal.record_usage(&huge).unwrap_err();
    assert!(matches!(err, JournalError::InvalidInput { .. }), "{err:?}");
    assert!(journal
        .recent_usage(PolicyId::new(1), 10)
        .unwrap()
        .is_empty());
}
