//! Forward-only schema migrations, versioned by `PRAGMA user_version`.
//!
//! Migration `n` (1-based) takes the schema from version `n-1` to `n`. Entries
//! are never edited once released; a change is a new entry. A file whose
//! version is above [`LATEST_VERSION`] is refused at open, never migrated down.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{JournalError, RefusalReason};
use crate::open::APPLICATION_ID;

/// Version 1: hosts, policies, attempts, meta.
///
/// - `policies.id` is AUTOINCREMENT so a deleted policy's id is never reused:
///   attempts keep their `policy_id` after the policy is gone and must never
///   be mistaken for attempts of a newer policy.
/// - `attempts.policy_id` is deliberately not a foreign key: attempts of a
///   removed policy survive, are still supervised and still count against
///   host capacity.
/// - `hosts` holds at most one row (`slot = 1`): this machine.
/// - `policies.target` compares case-insensitively, as GitHub names do, so
///   `Me/App` and `me/app` cannot become two policies.
/// - No column holds a secret (token, JIT config, device code).
const V1: &str = r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE hosts (
    slot          INTEGER PRIMARY KEY CHECK (slot = 1),
    id            TEXT NOT NULL,
    os            TEXT NOT NULL,
    arch          TEXT NOT NULL,
    label         TEXT NOT NULL,
    capacity      INTEGER NOT NULL CHECK (capacity >= 0),
    runner_root   TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE policies (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    target         TEXT NOT NULL COLLATE NOCASE,
    profile        TEXT NOT NULL,
    enabled        INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    state          TEXT NOT NULL,
    max_capacity   INTEGER CHECK (max_capacity IS NULL OR max_capacity >= 0),
    min_capacity   INTEGER NOT NULL CHECK (min_capacity >= 0),
    labels         TEXT NOT NULL,
    workspace_mode TEXT NOT NULL,
    revision       INTEGER NOT NULL CHECK (revision >= 1),
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    UNIQUE (target, profile)
) STRICT;

CREATE TABLE attempts (
    id                  TEXT PRIMARY KEY NOT NULL,
    policy_id           INTEGER NOT NULL,
    runner_name         TEXT NOT NULL UNIQUE,
    state               TEXT NOT NULL,
    outcome             TEXT,
    failure_reason      TEXT,
    runner_id           INTEGER,
    pid                 INTEGER,
    process_start_time  INTEGER,
    terminate_intent    TEXT,
    created_at_ms       INTEGER NOT NULL,
    state_changed_at_ms INTEGER NOT NULL,
    concluded_at_ms     INTEGER,
    cleaned_at_ms       INTEGER,
    version             INTEGER NOT NULL CHECK (version >= 1),
    written_at_ms       INTEGER NOT NULL,
    CHECK ((pid IS NULL) = (process_start_time IS NULL)),
    CHECK (failure_reason IS NULL OR outcome = 'failed')
) STRICT;

CREATE INDEX attempts_by_policy ON attempts (policy_id);
CREATE INDEX attempts_by_state ON attempts (state);
"#;

/// Version 2: a partial index of the attempts not yet cleaned, by policy. Every loop reads
/// its target's uncleaned attempts each pass; cleaned rows (the whole history) stay out of it.
const V2: &str = r#"
CREATE INDEX attempts_uncleaned_by_policy ON attempts (policy_id, created_at_ms)
    WHERE state <> 'cleaned';
"#;

/// Version 3: what each finished attempt used, by policy, for memory admission (a new
/// runner's expected peak is its policy's typical peak).
///
/// - `attempt_id` is not a foreign key to `attempts`: usage is history that must outlive the
///   attempt row (a later prune of cleaned attempts must neither fail nor take it along).
/// - Only the newest rows per policy are kept (`usage::USAGE_KEPT_PER_POLICY`); the index
///   serves both "newest of a policy" and the prune after each insert.
const V3: &str = r#"
CREATE TABLE attempt_usage (
    attempt_id         TEXT PRIMARY KEY NOT NULL,
    policy_id          INTEGER NOT NULL,
    ended_at_ms        INTEGER NOT NULL,
    wall_ms            INTEGER NOT NULL CHECK (wall_ms >= 0),
    cpu_ms             INTEGER NOT NULL CHECK (cpu_ms >= 0),
    peak_rss_bytes     INTEGER NOT NULL CHECK (peak_rss_bytes >= 0),
    average_millicores INTEGER NOT NULL CHECK (average_millicores >= 0),
    busiest_millicores INTEGER NOT NULL CHECK (busiest_millicores >= 0)
) STRICT;

CREATE INDEX attempt_usage_by_policy ON attempt_usage (policy_id, ended_at_ms);
"#;

/// Version 4: the host's admission settings and workstation rules, changed at run time
/// (`runner-manager host set-admission` / `set-rules`). At most one row (`slot = 1`); no row
/// means the built-in defaults. Quiet hours are minutes after local midnight, both or neither.
const V4: &str = r#"
CREATE TABLE host_settings (
    slot               INTEGER PRIMARY KEY CHECK (slot = 1),
    memory_admission   INTEGER NOT NULL CHECK (memory_admission IN (0, 1)),
    runner_memory_mb   INTEGER NOT NULL CHECK (runner_memory_mb >= 1),
    memory_headroom_mb INTEGER NOT NULL CHECK (memory_headroom_mb >= 0),
    wait_on_battery    INTEGER NOT NULL CHECK (wait_on_battery IN (0, 1)),
    max_load           REAL CHECK (max_load IS NULL OR max_load > 0),
    quiet_start_min    INTEGER CHECK (quiet_start_min IS NULL OR quiet_start_min BETWEEN 0 AND 1439),
    quiet_end_min      INTEGER CHECK (quiet_end_min IS NULL OR quiet_end_min BETWEEN 0 AND 1439),
    idle_only          INTEGER NOT NULL CHECK (idle_only IN (0, 1)),
    updated_at_ms      INTEGER NOT NULL,
    CHECK ((quiet_start_min IS NULL) = (quiet_end_min IS NULL))
) STRICT;
"#;

/// Version 5: a target's own memory admission settings (`repo set --memory-admission`,
/// `--runner-memory-mb`, `--memory-headroom-mb`); a NULL column, or no row, follows the host's.
/// Goes with its policy.
const V5: &str = r#"
CREATE TABLE policy_admission (
    policy_id          INTEGER PRIMARY KEY NOT NULL REFERENCES policies (id) ON DELETE CASCADE,
    memory_admission   INTEGER CHECK (memory_admission IS NULL OR memory_admission IN (0, 1)),
    runner_memory_mb   INTEGER CHECK (runner_memory_mb IS NULL OR runner_memory_mb >= 1),
    memory_headroom_mb INTEGER CHECK (memory_headroom_mb IS NULL OR memory_headroom_mb >= 0)
) STRICT;
"#;

/// Version 6: the host's runner environment (`runner-manager host env set`), given to every
/// runner started after a change. One row per variable; the rules (no secret-like or
/// runner-owned names, sizes) are `rm_core::runner_env`'s, checked before a write.
const V6: &str = r#"
CREATE TABLE runner_env (
    name          TEXT PRIMARY KEY NOT NULL,
    value         TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
"#;

/// Version 7: the caches. A target's own cache settings (`repo set --cache on|off`,
/// `--cache-namespace NAME`; NULL, or no row, is the default), going with its policy, and the
/// host's (`host set-cache-size`, the tool cache switch), one row at most.
const V7: &str = r#"
CREATE TABLE policy_cache (
    policy_id INTEGER PRIMARY KEY NOT NULL REFERENCES policies (id) ON DELETE CASCADE,
    enabled   INTEGER CHECK (enabled IS NULL OR enabled IN (0, 1)),
    namespace TEXT CHECK (namespace IS NULL OR length(namespace) BETWEEN 1 AND 64)
) STRICT;

CREATE TABLE cache_settings (
    slot          INTEGER PRIMARY KEY CHECK (slot = 1),
    cap_bytes     INTEGER NOT NULL CHECK (cap_bytes >= 0),
    tool_cache    INTEGER NOT NULL CHECK (tool_cache IN (0, 1)),
    updated_at_ms INTEGER NOT NULL
) STRICT;
"#;

/// Version 8: a target's own sandbox choices (`repo set --sandbox off`, `--docker on`), going
/// with its policy; no row is the default (inside the walls, no Docker).
const V8: &str = r#"
CREATE TABLE policy_sandbox (
    policy_id INTEGER PRIMARY KEY NOT NULL REFERENCES policies (id) ON DELETE CASCADE,
    walls     INTEGER NOT NULL CHECK (walls IN (0, 1)),
    docker    INTEGER NOT NULL CHECK (docker IN (0, 1))
) STRICT;
"#;

/// Version 9: the verdict on the job an attempt's runner ran (`rm_core::TrustVerdict`),
/// decided when the runner's job ended from the job's own run and kept with the attempt, so
/// that what its runner leaves behind is judged the same after a restart.
const V9: &str = r#"
CREATE TABLE attempt_trust (
    attempt_id TEXT PRIMARY KEY NOT NULL REFERENCES attempts (id) ON DELETE CASCADE,
    trust      TEXT NOT NULL CHECK (trust IN ('trusted', 'pull_request', 'untrusted')),
    job_id     INTEGER,
    run_id     INTEGER,
    reason     TEXT NOT NULL,
    decided_at_ms INTEGER NOT NULL
) STRICT;
"#;

/// Version 10: a target's own cap on the memory one of its jobs may hold (MiB; `NULL`: the
/// host's default), with its other sandbox choices.
const V10: &str = r#"
ALTER TABLE policy_sandbox ADD COLUMN memory_max_mb INTEGER CHECK (memory_max_mb > 0);
"#;

const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10];

/// The schema version this build writes and understands.
pub const LATEST_VERSION: i64 = MIGRATIONS.len() as i64;

/// Bring the file up to [`LATEST_VERSION`] in one immediate transaction. The
/// version is re-read under the write lock, so two processes opening a fresh
/// file at once apply each migration exactly once.
pub(crate) fn migrate(path: &Path, conn: &mut Connection) -> Result<(), JournalError> {
    if user_version(conn)? == LATEST_VERSION {
        return Ok(()); // the usual case: no write lock, no write
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current = user_version(&tx)?;
    if current > LATEST_VERSION {
        return Err(JournalError::Refused {
            path: path.to_path_buf(),
            reason: RefusalReason::NewerSchema {
                found: current,
                known: LATEST_VERSION,
            },
            fix: crate::open::NEWER_FIX.to_owned(),
        });
    }
    let start = usize::try_from(current).map_err(|_| JournalError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("impossible schema version {current}"),
    })?;
    for migration in &MIGRATIONS[start..] {
        tx.execute_batch(migration)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.pragma_update(None, "user_version", LATEST_VERSION)?;
    tx.commit()?;
    Ok(())
}

pub(crate) fn user_version(conn: &Connection) -> Result<i64, JournalError> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}
