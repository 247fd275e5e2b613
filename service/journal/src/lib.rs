//! The runner-manager journal: an SQLite file that records this host and its
//! admission settings and runner environment, its policies, every runner attempt and what recent
//! attempts used, and is the single source of truth across crashes. See
//! README.md for the schema, durability and refusal rules.
//!
//! [`Journal`] is a plain synchronous value owning one connection; async
//! callers wrap it in a mutex and `spawn_blocking`. Several `Journal`s (threads
//! or processes) may share one file: writes take SQLite's write lock up front
//! and wait up to [`BUSY_TIMEOUT`] for it.

mod attempts;
mod caches;
mod codec;
mod error;
mod hosts;
mod meta;
mod open;
mod policies;
mod policy_admission;
mod runner_env;
mod sandbox;
mod schema;
mod settings;
mod trust;
mod usage;

use std::path::{Path, PathBuf};

use rusqlite::Connection;

pub use attempts::ActiveAttempt;
pub use caches::HostCacheSettings;
pub use error::{JournalError, RefusalReason, CORRUPT_FIX};
pub use hosts::HostRecord;
pub use meta::keys as meta_keys;
pub use open::{APPLICATION_ID, BUSY_TIMEOUT};
pub use policy_admission::PolicyAdmission;
pub use schema::LATEST_VERSION as SCHEMA_VERSION;
pub use settings::HostSettings;
pub use usage::{AttemptUsage, USAGE_KEPT_PER_POLICY};

/// An open, vetted and migrated journal file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    conn: Connection,
}

impl Journal {
    /// Open the journal at `path`, creating and initialising it if the file is
    /// absent or empty. An existing file is used only if it is ours, not from a
    /// newer schema and passes `quick_check`; otherwise it is refused with
    /// [`JournalError::Refused`] or [`JournalError::Corrupt`] and left untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let conn = open::open(&path)?;
        Ok(Self { path, conn })
    }

    /// The file this journal was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file (always [`SCHEMA_VERSION`] after `open`).
    pub fn schema_version(&self) -> Result<i64, JournalError> {
        schema::user_version(&self.conn).map_err(|e| e.classify(&self.path))
    }

    /// Run `PRAGMA integrity_check` (the full check, slower than the
    /// `quick_check` done at open). Returns the problems found; empty = sound.
    pub fn integrity_check(&mut self) -> Result<Vec<String>, JournalError> {
        self.run(|conn| {
            let mut stmt = conn.prepare("PRAGMA integrity_check")?;
            let rows: Vec<String> = stmt
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<_, _>>()?;
            Ok(rows.into_iter().filter(|r| r != "ok").collect())
        })
    }

    /// Every operation goes through here so that corruption noticed at any
    /// point is reported as [`JournalError::Corrupt`] naming the file.
    fn run<T>(
        &mut self,
        op: impl FnOnce(&mut Connection) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        op(&mut self.conn).map_err(|e| e.classify(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_can_move_to_a_blocking_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<Journal>();
        assert_send::<JournalError>();
    }
}
