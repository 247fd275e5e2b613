//! Opening: fresh files are initialised, reopening is idempotent, and files
//! that are not ours, newer or damaged are refused *and left byte-for-byte
//! unchanged*.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use rm_journal::{Journal, JournalError, RefusalReason, APPLICATION_ID, SCHEMA_VERSION};
use rusqlite::Connection;

fn journal_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("journal.sqlite3")
}

fn pragma_i64(path: &Path, pragma: &str) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row(&format!("PRAGMA {pragma}"), [], |r| r.get(0))
        .unwrap()
}

fn table_names(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Open must fail as a refusal and leave the file exactly as it was.
fn assert_refused_untouched(path: &Path) -> JournalError {
    let before = fs::read(path).unwrap();
    let err = Journal::open(path).unwrap_err();
    assert!(err.is_refusal(), "expected a refusal, got {err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "message must name the file: {text}"
    );
    // (assert! rather than assert_eq!: a failure must not dump kilobytes of bytes)
    assert!(
        fs::read(path).unwrap() == before,
        "refused file was modified"
    );
    // Refusing twice gives the same answer: nothing was "fixed" the first time.
    let again = Journal::open(path).unwrap_err();
    assert_eq!(again.to_string(), text);
    err
}

#[test]
fn fresh_file_is_created_marked_and_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let journal = Journal::open(&path).unwrap();
    assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(journal.path(), path);
    drop(journal);

    assert_eq!(
        pragma_i64(&path, "application_id"),
        i64::from(APPLICATION_ID)
    );
    assert_eq!(pragma_i64(&path, "user_version"), SCHEMA_VERSION);
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal", "WAL mode is persistent in the file");
    drop(conn);
    for table in ["attempt_usage", "attempts", "hosts", "meta", "policies"] {
        assert!(
            table_names(&path).iter().any(|t| t == table),
            "missing table {table}"
        );
    }
}

#[test]
fn zero_length_file_is_initialised() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    fs::write(&path, b"").unwrap();
    let journal = Journal::open(&path).unwrap();
    assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
}

#[test]
fn reopening_keeps_data_and_does_not_migrate_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let mut journal = Journal::open(&path).unwrap();
    journal.meta_set("k", "v1").unwrap();
    drop(journal);
    let tables = table_names(&path);

    for _ in 0..3 {
        let mut journal = Journal::open(&path).unwrap();
        assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(journal.meta_get("k").unwrap().as_deref(), Some("v1"));
        assert!(journal.integrity_check().unwrap().is_empty());
    }
    assert_eq!(
        table_names(&path),
        tables,
        "reopen must not change the schema"
    );
}

#[test]
fn two_journals_can_share_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let mut a = Journal::open(&path).unwrap();
    let mut b = Journal::open(&path).unwrap();
    a.meta_set("k", "from a").unwrap();
    assert_eq!(b.meta_get("k").unwrap().as_deref(), Some("from a"));
    b.meta_delete("k").unwrap();
    assert_eq!(a.meta_get("k").unwrap(), None);
}

#[test]
fn concurrent_first_opens_initialise_the_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let openers: Vec<_> = (0..4)
        .map(|i| {
            let barrier = std::sync::Arc::clone(&barrier);
            let path = path.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut journal = Journal::open(&path).unwrap();
                journal.meta_set(&format!("opener-{i}"), "ok").unwrap();
            })
        })
        .collect();
    for opener in openers {
        opener.join().unwrap();
    }
    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
    for i in 0..4 {
        assert_eq!(
            journal.meta_get(&format!("opener-{i}")).unwrap().as_deref(),
            Some("ok")
        );
    }
}

#[test]
fn newer_schema_is_refused_with_upgrade_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    drop(Journal::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);

    let err = assert_refused_untouched(&path);
    match &err {
        JournalError::Refused { reason, fix, .. } => {
            assert_eq!(
                *reason,
                RefusalReason::NewerSchema {
                    found: SCHEMA_VERSION + 1,
                    known: SCHEMA_VERSION
                }
            );
            assert!(fix.contains("upgrade runner-manager"), "{fix}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "schema {}, this build knows {SCHEMA_VERSION}",
            SCHEMA_VERSION + 1
        )),
        "{text}"
    );
}

#[test]
fn database_of_another_application_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "application_id", 0x1234_5678)
        .unwrap();
    conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');")
        .unwrap();
    drop(conn);

    let err = assert_refused_untouched(&path);
    assert!(
        matches!(
            err,
            JournalError::Refused {
                reason: RefusalReason::ForeignApplication {
                    application_id: 0x1234_5678
                },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("--data-dir"), "{err}");
}

#[test]
fn unmarked_non_empty_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE policies (x INTEGER); INSERT INTO policies VALUES (1);")
        .unwrap();
    drop(conn);

    let err = assert_refused_untouched(&path);
    assert!(
        matches!(
            err,
            JournalError::Refused {
                reason: RefusalReason::UnmarkedDatabase,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn garbage_file_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("short", b"not a database".to_vec()),
        ("long", vec![0x5a; 8192]),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, &bytes).unwrap();
        let err = assert_refused_untouched(&path);
        assert!(matches!(err, JournalError::Corrupt { .. }), "{err:?}");
        assert!(
            err.to_string().contains("move it aside and restart"),
            "{err}"
        );
    }
}

#[test]
fn damaged_pages_are_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    drop(Journal::open(&path).unwrap()); // last connection: checkpoints the WAL
                                         // The pages of a fresh journal hold the header and the schema (more than page 1 since
                                         // the schema grew); the rows written next land on pages after them.
    let schema_bytes = fs::read(&path).unwrap().len();
    let mut journal = Journal::open(&path).unwrap();
    for i in 0..200 {
        journal
            .meta_set(&format!("key-{i}"), &"x".repeat(100))
            .unwrap();
    }
    drop(journal);
    let mut bytes = fs::read(&path).unwrap();
    let page_size = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    assert!(
        bytes.len() > schema_bytes + 3 * page_size,
        "test needs several pages"
    );
    // Keep the header and the schema intact, scribble over every b-tree page after them.
    for b in &mut bytes[schema_bytes..] {
        *b = 0xA5;
    }
    fs::write(&path, &bytes).unwrap();

    let err = assert_refused_untouched(&path);
    match &err {
        JournalError::Corrupt { path: p, detail } => {
            assert_eq!(p, &path);
            assert!(detail.starts_with("quick_check: "), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(err.to_string().contains("recovered from GitHub"), "{err}");
}

#[test]
fn missing_directory_is_an_open_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent").join("journal.sqlite3");
    let err = Journal::open(&path).unwrap_err();
    assert!(matches!(err, JournalError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("absent"), "{err}");
    assert!(!path.exists());
}

#[test]
fn refusing_a_foreign_wal_database_does_not_checkpoint_it() {
    use rusqlite::config::DbConfig;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    let wal = dir.path().join("other.db-wal");
    // Another application's WAL-mode database whose last writes are still
    // only in its -wal file (its writer closed without checkpointing).
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "application_id", 0x0bad_cafe)
        .unwrap();
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
        .unwrap();
    conn.execute_batch("CREATE TABLE notes (body TEXT);")
        .unwrap();
    conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")
        .unwrap();
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .unwrap();
    conn.execute("INSERT INTO notes VALUES ('only in the wal')", [])
        .unwrap();
    drop(conn);
    let wal_before = fs::read(&wal).unwrap();
    assert!(!wal_before.is_empty());

    let err = assert_refused_untouched(&path);
    assert!(
        matches!(
            err,
            JournalError::Refused {
                reason: RefusalReason::ForeignApplication { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        fs::read(&wal).unwrap() == wal_before,
        "the -wal was consumed"
    );
}

#[cfg(unix)]
#[test]
fn the_journal_and_its_wal_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let mut j = Journal::open(&path).unwrap();
    // A write makes the -wal exist.
    j.meta_set("probe", "1").unwrap();
    assert_eq!(mode(&path), 0o600);
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    assert_eq!(
        mode(&wal),
        0o600,
        "SQLite gives the WAL the database's mode"
    );
    drop(j);
    // A journal an older build left readable by everyone is closed up at the next open.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    drop(Journal::open(&path).unwrap());
    assert_eq!(mode(&path), 0o600);
}
