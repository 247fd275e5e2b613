//! The host's runner environment: variables given to every runner started after a change.
//! One row per variable. A change is checked whole by `rm_core::runner_env` against what is
//! stored, in the same write transaction, so a refused change writes nothing and two writers
//! cannot interleave.

use std::collections::BTreeMap;

use rm_core::runner_env;
use rusqlite::{params, TransactionBehavior};

use crate::codec::{self, invalid_row};
use crate::error::JournalError;
use crate::Journal;

const TABLE: &str = "runner_env";

/// The stored rows; `checked`: each must pass the rules.
fn read(
    conn: &rusqlite::Connection,
    checked: bool,
) -> Result<BTreeMap<String, String>, JournalError> {
    let mut stmt = conn.prepare_cached("SELECT name, value FROM runner_env ORDER BY name")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = BTreeMap::new();
    for row in rows {
        let (name, value) = row?;
        // A hand-edited row the service would refuse to write is refused on read too; the
        // reason names the variable, never its value.
        if checked {
            runner_env::check_var(&name, &value)
                .map_err(|e| invalid_row(TABLE, &name, e.to_string()))?;
        }
        out.insert(name, value);
    }
    Ok(out)
}

impl Journal {
    /// The variables set, by name (empty when none were ever set).
    pub fn runner_env(&mut self) -> Result<BTreeMap<String, String>, JournalError> {
        self.run(|conn| read(conn, true))
    }

    /// Sets `set` and removes `unset` in one transaction and answers the variables now set.
    /// Refused whole ([`JournalError::InvalidInput`], naming the variable and the fix, never a
    /// value) when any variable breaks `rm_core::runner_env`'s rules.
    pub fn change_runner_env(
        &mut self,
        set: &BTreeMap<String, String>,
        unset: &[String],
    ) -> Result<BTreeMap<String, String>, JournalError> {
        self.run(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Unchecked: a row damaged by hand must still be removable by an unset.
            let current = read(&tx, false)?;
            let next = runner_env::apply_change(&current, set, unset).map_err(|e| {
                JournalError::InvalidInput {
                    what: "runner environment",
                    reason: e.to_string(),
                }
            })?;
            for name in unset {
                tx.execute("DELETE FROM runner_env WHERE name = ?1", [name])?;
            }
            let now = codec::now_ms();
            for (name, value) in set {
                tx.execute(
                    "INSERT INTO runner_env (name, value, updated_at_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT (name) DO UPDATE SET
                        value = excluded.value, updated_at_ms = excluded.updated_at_ms",
                    params![name, value, now],
                )?;
            }
            tx.commit()?;
            Ok(next)
        })
    }
}
