//! Opening a journal file: decide whether the file is ours *before* writing a
//! single byte to it, then configure the connection and migrate.
//!
//! Order matters: the header sniff, identity check and `quick_check` only read.
//! Checkpoint-on-close is disabled until the file is accepted, so even a
//! foreign WAL-mode database with a pending `-wal` is not rewritten by our
//! connection closing.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::error::{JournalError, RefusalReason};
use crate::schema;

/// `PRAGMA application_id` of every journal: ASCII "RMJ1". Marks the file as
/// a runner-manager journal so that we never adopt (or migrate) someone else's
/// database, and so that `file(1)`-style tools can tell what it is.
pub const APPLICATION_ID: i32 = 0x524d_4a31;

/// How long a statement waits for another connection's write lock before it
/// fails with SQLITE_BUSY. Writes are a few rows each, so any real wait is short;
/// this only has to outlast a concurrent commit's fsyncs on a slow disk.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause between attempts to switch a brand-new file to WAL (see [`enable_wal`]).
const WAL_SWITCH_RETRY: Duration = Duration::from_millis(5);

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
const SQLITE_HEADER_LEN: usize = 100;

/// The fix for a file that belongs to something else.
const NOT_OURS_FIX: &str = "this file is not a runner-manager journal: move it aside or point \
--data-dir at another directory";
/// The fix for a journal written by a newer build.
pub(crate) const NEWER_FIX: &str = "upgrade runner-manager or point --data-dir elsewhere";

/// Open (creating if absent), vet, configure and migrate the journal at `path`.
pub(crate) fn open(path: &Path) -> Result<Connection, JournalError> {
    sniff_header(path)?;
    private_file(path);

    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn =
        Connection::open_with_flags(path, flags).map_err(|source| JournalError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    let vet = |conn: &Connection| -> Result<(), JournalError> {
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // One read transaction: the identity must come from one snapshot, or a
        // concurrent first open committing in between looks like a foreign file.
        let snapshot = conn.unchecked_transaction()?;
        check_identity(path, &read_identity(&snapshot)?)?;
        quick_check(path, &snapshot)
        // dropping `snapshot` ends the read transaction (nothing to roll back)
    };
    vet(&conn).map_err(|e| e.classify(path))?;

    // Accepted: from here on we may write.
    let configure = |conn: &mut Connection| -> Result<(), JournalError> {
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)?;
        configure(conn)?;
        schema::migrate(path, conn)
    };
    configure(&mut conn).map_err(|e| e.classify(path))?;
    Ok(conn)
}

/// The journal holds who may do what on this host and every runner's history: readable by its
/// owner only (SQLite gives its `-wal` and `-shm` files the same mode). A new file is created
/// 0600 before SQLite opens it (SQLite would create it 0644); an existing one readable by
/// others (an older build's) loses those bits. Best effort: a file this process cannot change
/// (another owner) is left as it is, and the open goes on to say what is wrong with it, if
/// anything.
#[cfg(unix)]
fn private_file(path: &Path) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if let Ok(meta) = std::fs::metadata(path) {
                let mode = meta.permissions().mode();
                if meta.is_file() && mode & 0o077 != 0 {
                    let _ = std::fs::set_permissions(
                        path,
                        std::fs::Permissions::from_mode(mode & 0o700),
                    );
                }
            }
        }
        Err(_) => {}
    }
}

#[cfg(not(unix))]
fn private_file(_path: &Path) {}

/// Reject a non-empty file that does not even start like an SQLite database,
/// without handing it to SQLite at all.
fn sniff_header(path: &Path) -> Result<(), JournalError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        // Absent: SQLite creates it. Other errors surface from the real open.
        Err(_) => return Ok(()),
    };
    let mut header = Vec::with_capacity(SQLITE_HEADER_LEN);
    if let Err(source) = (&mut file)
        .take(SQLITE_HEADER_LEN as u64)
        .read_to_end(&mut header)
    {
        return Err(JournalError::Io {
            path: path.to_path_buf(),
            source,
        });
    }
    if header.is_empty() {
        return Ok(());
    }
    if header.len() < SQLITE_HEADER_LEN || !header.starts_with(SQLITE_MAGIC) {
        return Err(JournalError::Corrupt {
            path: path.to_path_buf(),
            detail: "it does not start with an SQLite header".to_owned(),
        });
    }
    Ok(())
}

/// What the file says about itself.
#[derive(Debug)]
struct Identity {
    application_id: i32,
    user_version: i64,
    object_count: i64,
}

fn read_identity(conn: &Connection) -> Result<Identity, JournalError> {
    let application_id = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let user_version = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let object_count = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    Ok(Identity {
        application_id,
        user_version,
        object_count,
    })
}

fn check_identity(path: &Path, id: &Identity) -> Result<(), JournalError> {
    let refuse = |reason: RefusalReason, fix: &str| JournalError::Refused {
        path: path.to_path_buf(),
        reason,
        fix: fix.to_owned(),
    };
    match id.application_id {
        APPLICATION_ID if id.user_version > schema::LATEST_VERSION => Err(refuse(
            RefusalReason::NewerSchema {
                found: id.user_version,
                known: schema::LATEST_VERSION,
            },
            NEWER_FIX,
        )),
        APPLICATION_ID => Ok(()),
        // A brand-new (or zero-length) file: ours to initialise.
        0 if id.object_count == 0 && id.user_version == 0 => Ok(()),
        0 => Err(refuse(RefusalReason::UnmarkedDatabase, NOT_OURS_FIX)),
        other => Err(refuse(
            RefusalReason::ForeignApplication {
                application_id: other,
            },
            NOT_OURS_FIX,
        )),
    }
}

/// `quick_check` reads every page (but skips the costly index cross-checks of
/// `integrity_check`); the journal is small, so this costs milliseconds.
fn quick_check(path: &Path, conn: &Connection) -> Result<(), JournalError> {
    let mut stmt = conn.prepare("PRAGMA quick_check(5)")?;
    let problems: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    if problems.len() == 1 && problems[0] == "ok" {
        return Ok(());
    }
    Err(JournalError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("quick_check: {}", problems.join("; ")),
    })
}

/// Connection settings; see the crate README for why these values.
fn configure(conn: &Connection) -> Result<(), JournalError> {
    enable_wal(conn)?;
    // FULL in WAL mode: the WAL is fsynced at every commit, so a commit that
    // returned survives power loss, not only a process crash.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    // Room for every statement the service repeats (rusqlite keeps 16 by default; the loops,
    // the status and the API together use more, and an evicted statement is compiled again).
    conn.set_prepared_statement_cache_capacity(64);
    let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    let fk: i64 = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
    if sync != 2 || fk != 1 {
        return Err(JournalError::Setup {
            what: "synchronous=FULL, foreign_keys=ON",
            detail: format!("SQLite reports synchronous={sync}, foreign_keys={fk}"),
        });
    }
    Ok(())
}

/// Switch the file to WAL (a persistent property of the file, so usually a
/// no-op). The switch needs an exclusive lock, and SQLite does not run the busy
/// handler for it, so when several processes create the journal at once the
/// losers retry here until [`BUSY_TIMEOUT`].
fn enable_wal(conn: &Connection) -> Result<(), JournalError> {
    let current: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if current.eq_ignore_ascii_case("wal") {
        return Ok(());
    }
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(JournalError::Setup {
                    what: "journal_mode=WAL",
                    detail: format!(
                        "SQLite kept journal_mode={mode}; the file system may not support \
                         WAL's shared memory: put --data-dir on a local disk"
                    ),
                })
            }
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(WAL_SWITCH_RETRY);
            }
            Err(e) => return Err(e.into()),
        }
    }
}
