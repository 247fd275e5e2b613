//! The host's admission settings: absent until stored, round-trip, one row only, refused
//! values change nothing, a version-3 file migrates forward with its host row, and a damaged
//! row is a typed error.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_core::{Arch, Host, HostId, HostLabel, Os};
use rm_journal::{HostSettings, Journal, JournalError, SCHEMA_VERSION};
use rusqlite::Connection;

fn settings() -> HostSettings {
    HostSettings {
        memory_admission: true,
        runner_memory_mb: 2048,
        memory_headroom_mb: 1024,
        wait_on_battery: false,
        max_load: None,
        quiet_hours: None,
        idle_only: false,
    }
}

fn open() -> (tempfile::TempDir, std::path::PathBuf, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let journal = Journal::open(&path).unwrap();
    (dir, path, journal)
}

#[test]
fn settings_are_absent_until_stored_then_round_trip_in_one_row() {
    let (_dir, path, mut journal) = open();
    assert_eq!(journal.host_settings().unwrap(), None);
    journal.put_host_settings(&settings()).unwrap();
    assert_eq!(journal.host_settings().unwrap(), Some(settings()));
    let changed = HostSettings {
        memory_admission: false,
        runner_memory_mb: 1,
        memory_headroom_mb: 0,
        wait_on_battery: true,
        max_load: Some(6.5),
        quiet_hours: Some((22 * 60, 7 * 60 + 30)),
        idle_only: true,
    };
    journal.put_host_settings(&changed).unwrap();
    drop(journal);
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(journal.host_settings().unwrap(), Some(changed));
    let rows: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM host_settings", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}

#[test]
fn refused_values_change_nothing() {
    let (_dir, _path, mut journal) = open();
    journal.put_host_settings(&settings()).unwrap();
    let bad = [
        HostSettings {
            runner_memory_mb: 0,
            ..settings()
        },
        HostSettings {
            max_load: Some(-1.0),
            ..settings()
        },
        HostSettings {
            max_load: Some(f64::NAN),
            ..settings()
        },
        HostSettings {
            quiet_hours: Some((1440, 0)),
            ..settings()
        },
        HostSettings {
            runner_memory_mb: u64::MAX,
            ..settings()
        },
    ];
    for b in bad {
        let e = journal.put_host_settings(&b).unwrap_err();
        assert!(matches!(e, JournalError::InvalidInput { .. }), "{b:?}: {e}");
    }
    assert_eq!(journal.host_settings().unwrap(), Some(settings()));
}

#[test]
fn a_version_3_journal_migrates_forward_and_keeps_its_host() {
    let (_dir, path, mut journal) = open();
    let host = Host {
        id: HostId::new("box-1").unwrap(),
        os: Os::Linux,
        arch: Arch::X64,
        label: HostLabel::from_machine_name("box"),
        capacity: 3,
    };
    journal.put_host(&host, None).unwrap();
    drop(journal);
    // Version 4 only adds `host_settings`, version 5 `policy_admission`, version 6
    // `runner_env`, version 7 the caches' tables, version 8 `policy_sandbox` and version 9
    // `attempt_trust`: without them, stamped 3, this is version 3's file.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE host_settings; DROP TABLE policy_admission; DROP TABLE runner_env;
             DROP TABLE policy_cache; DROP TABLE cache_settings; DROP TABLE policy_sandbox;
             DROP TABLE attempt_trust; PRAGMA user_version = 3;",
        )
        .unwrap();
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(SCHEMA_VERSION, 10);
    assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(journal.get_host().unwrap().unwrap().host, host);
    assert_eq!(journal.host_settings().unwrap(), None, "the defaults apply");
    journal.put_host_settings(&settings()).unwrap();
    assert_eq!(journal.host_settings().unwrap(), Some(settings()));
}

#[test]
fn a_damaged_row_is_a_typed_error() {
    let (_dir, path, mut journal) = open();
    journal.put_host_settings(&settings()).unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "ignore_check_constraints", true)
        .unwrap();
    for (sql, said) in [
        ("UPDATE host_settings SET idle_only = 7", "idle_only 7"),
        (
            "UPDATE host_settings SET idle_only = 0, quiet_start_min = 5",
            "quiet hours",
        ),
        (
            "UPDATE host_settings SET quiet_start_min = NULL, runner_memory_mb = 0",
            "runner_memory_mb",
        ),
    ] {
        conn.execute_batch(sql).unwrap();
        let e = journal.host_settings().unwrap_err();
        assert!(
            matches!(
                &e,
                JournalError::InvalidRow {
                    table: "host_settings",
                    ..
                }
            ),
            "{sql}: {e}"
        );
        assert!(e.to_string().contains(said), "{sql}: {e}");
    }
}
