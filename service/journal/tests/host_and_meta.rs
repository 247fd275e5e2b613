//! The single host row and the meta key/value table.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use rm_core::{Arch, Host, HostId, HostLabel, Os};
use rm_journal::{meta_keys, Journal, JournalError};
use rusqlite::Connection;

fn host(id: &str, capacity: u32) -> Host {
    Host {
        id: HostId::new(id).unwrap(),
        os: Os::Linux,
        arch: Arch::Arm64,
        label: HostLabel::from_machine_name("Build Box"),
        capacity,
    }
}

#[test]
fn host_row_round_trips_and_is_replaced_not_duplicated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(journal.get_host().unwrap(), None);

    journal
        .put_host(&host("box-1", 2), Some(Path::new("/var/lib/rm/runners")))
        .unwrap();
    let stored = journal.get_host().unwrap().unwrap();
    assert_eq!(stored.host, host("box-1", 2));
    assert_eq!(
        stored.runner_root.as_deref(),
        Some(Path::new("/var/lib/rm/runners"))
    );

    // A renamed host replaces the row: there is only ever one.
    journal.put_host(&host("box-2", 0), None).unwrap();
    drop(journal);
    let mut journal = Journal::open(&path).unwrap();
    let stored = journal.get_host().unwrap().unwrap();
    assert_eq!(stored.host, host("box-2", 0));
    assert_eq!(stored.runner_root, None);
    let rows: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM hosts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}

#[test]
fn bad_host_row_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let mut journal = Journal::open(&path).unwrap();
    journal.put_host(&host("box-1", 2), None).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE hosts SET os = 'plan9'", [])
        .unwrap();
    let err = journal.get_host().unwrap_err();
    match &err {
        JournalError::InvalidRow { table, reason, .. } => {
            assert_eq!(*table, "hosts");
            assert!(reason.contains("plan9"), "{reason}");
        }
        other => panic!("expected InvalidRow, got {other:?}"),
    }
}

#[test]
fn meta_values_are_set_replaced_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let mut journal = Journal::open(&path).unwrap();
    let key = meta_keys::LAST_GITHUB_CONTACT_MS;
    assert_eq!(journal.meta_get(key).unwrap(), None);
    journal.meta_set(key, "1700000000000").unwrap();
    journal.meta_set(key, "1700000005000").unwrap();
    drop(journal);
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(
        journal.meta_get(key).unwrap().as_deref(),
        Some("1700000005000")
    );
    journal.meta_delete(key).unwrap();
    journal.meta_delete(key).unwrap();
    assert_eq!(journal.meta_get(key).unwrap(), None);
}

#[test]
fn no_column_can_hold_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    drop(Journal::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT m.name, p.name FROM sqlite_schema m, pragma_table_info(m.name) p
             WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'",
        )
        .unwrap();
    let columns: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(columns.len() > 20, "{columns:?}");
    for (table, column) in columns {
        for word in [
            "token",
            "secret",
            "jit_config",
            "jitconfig",
            "password",
            "device_code",
        ] {
            assert!(
                !column.contains(word),
                "{table}.{column} looks like a secret"
            );
        }
    }
}
