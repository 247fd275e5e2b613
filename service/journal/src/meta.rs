//! A small key/value table for daemon bookkeeping (e.g. the last successful
//! GitHub contact). Values are text; callers own their encoding.

use rusqlite::{params, OptionalExtension};

use crate::error::JournalError;
use crate::Journal;

/// Well-known meta keys, so writers and readers cannot drift apart.
pub mod keys {
    /// Milliseconds since the Unix epoch of the last pass that reached GitHub.
    pub const LAST_GITHUB_CONTACT_MS: &str = "last_github_contact_ms";
}

impl Journal {
    /// Read a meta value; `None` if the key was never set.
    pub fn meta_get(&mut self, key: &str) -> Result<Option<String>, JournalError> {
        self.run(|conn| {
            Ok(conn
                .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
                .query_row([key], |r| r.get(0))
                .optional()?)
        })
    }

    /// Set (insert or replace) a meta value.
    pub fn meta_set(&mut self, key: &str, value: &str) -> Result<(), JournalError> {
        self.run(|conn| {
            // Cached: the daemon writes its last GitHub contact here as it polls.
            conn.prepare_cached(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![key, value])?;
            Ok(())
        })
    }

    /// Remove a meta value; removing an absent key is not an error.
    pub fn meta_delete(&mut self, key: &str) -> Result<(), JournalError> {
        self.run(|conn| {
            conn.execute("DELETE FROM meta WHERE key = ?1", [key])?;
            Ok(())
        })
    }
}
