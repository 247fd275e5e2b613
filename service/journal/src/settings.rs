//! The host's admission settings and workstation rules: one optional row (`slot = 1`). The
//! service reads it at start and writes it when the operator changes a setting at run time;
//! no row means the service's built-in defaults.

use rusqlite::{params, OptionalExtension};

use crate::codec::{self, int_col, invalid_row, to_sql_int};
use crate::error::JournalError;
use crate::Journal;

const TABLE: &str = "host_settings";

/// What the service admits by: memory admission's numbers and the workstation rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostSettings {
    pub memory_admission: bool,
    /// A runner's expected peak before its target has any history (≥ 1).
    pub runner_memory_mb: u64,
    /// Memory kept free for the user.
    pub memory_headroom_mb: u64,
    pub wait_on_battery: bool,
    /// New runners wait while the 1-minute load is above this (finite, > 0).
    pub max_load: Option<f64>,
    /// Quiet hours as minutes after local midnight (start, end), each below 1440.
    pub quiet_hours: Option<(u16, u16)>,
    /// New runners wait while the user is active at the session.
    pub idle_only: bool,
}

const MINUTES_PER_DAY: u16 = 24 * 60;

impl HostSettings {
    fn check(&self) -> Result<(), JournalError> {
        let invalid = |reason: String| JournalError::InvalidInput {
            what: "host settings",
            reason,
        };
        if self.runner_memory_mb == 0 {
            return Err(invalid("runner_memory_mb must be at least 1".into()));
        }
        if let Some(load) = self.max_load.filter(|l| !(l.is_finite() && *l > 0.0)) {
            return Err(invalid(format!("max_load {load} must be a number above 0")));
        }
        if let Some((start, end)) = self.quiet_hours {
            if start >= MINUTES_PER_DAY || end >= MINUTES_PER_DAY {
                return Err(invalid(format!(
                    "quiet hours {start}-{end} must be minutes below {MINUTES_PER_DAY}"
                )));
            }
        }
        Ok(())
    }
}

impl Journal {
    /// The stored settings; `None` when none were ever stored (the defaults apply).
    pub fn host_settings(&mut self) -> Result<Option<HostSettings>, JournalError> {
        self.run(|conn| {
            let row = conn
                .prepare_cached(
                    "SELECT memory_admission, runner_memory_mb, memory_headroom_mb,
                            wait_on_battery, max_load, quiet_start_min, quiet_end_min, idle_only
                     FROM host_settings WHERE slot = 1",
                )?
                .query_row([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<f64>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                        r.get::<_, i64>(7)?,
                    ))
                })
                .optional()?;
            let Some((memory, runner_mb, headroom_mb, battery, max_load, start, end, idle)) = row
            else {
                return Ok(None);
            };
            let key = "1";
            let flag = |column: &str, v: i64| match v {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(invalid_row(
                    TABLE,
                    key,
                    format!("{column} {other} is not 0 or 1"),
                )),
            };
            let quiet_hours = match (start, end) {
                (None, None) => None,
                (Some(s), Some(e)) => Some((
                    int_col(TABLE, key, "quiet_start_min", s)?,
                    int_col(TABLE, key, "quiet_end_min", e)?,
                )),
                _ => return Err(invalid_row(TABLE, key, "only one end of the quiet hours")),
            };
            let settings = HostSettings {
                memory_admission: flag("memory_admission", memory)?,
                runner_memory_mb: int_col(TABLE, key, "runner_memory_mb", runner_mb)?,
                memory_headroom_mb: int_col(TABLE, key, "memory_headroom_mb", headroom_mb)?,
                wait_on_battery: flag("wait_on_battery", battery)?,
                max_load,
                quiet_hours,
                idle_only: flag("idle_only", idle)?,
            };
            // A hand-edited row the service would refuse to write is refused on read too.
            settings
                .check()
                .map_err(|e| invalid_row(TABLE, key, e.to_string()))?;
            Ok(Some(settings))
        })
    }

    /// Store the settings (insert or replace the single row).
    pub fn put_host_settings(&mut self, settings: &HostSettings) -> Result<(), JournalError> {
        settings.check()?;
        let runner_mb = to_sql_int("runner_memory_mb", settings.runner_memory_mb)?;
        let headroom_mb = to_sql_int("memory_headroom_mb", settings.memory_headroom_mb)?;
        self.run(|conn| {
            conn.execute(
                "INSERT INTO host_settings (slot, memory_admission, runner_memory_mb,
                        memory_headroom_mb, wait_on_battery, max_load, quiet_start_min,
                        quiet_end_min, idle_only, updated_at_ms)
                 VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (slot) DO UPDATE SET
                    memory_admission = excluded.memory_admission,
                    runner_memory_mb = excluded.runner_memory_mb,
                    memory_headroom_mb = excluded.memory_headroom_mb,
                    wait_on_battery = excluded.wait_on_battery,
                    max_load = excluded.max_load,
                    quiet_start_min = excluded.quiet_start_min,
                    quiet_end_min = excluded.quiet_end_min,
                    idle_only = excluded.idle_only,
                    updated_at_ms = excluded.updated_at_ms",
                params![
                    settings.memory_admission,
                    runner_mb,
                    headroom_mb,
                    settings.wait_on_battery,
                    settings.max_load,
                    settings.quiet_hours.map(|q| q.0),
                    settings.quiet_hours.map(|q| q.1),
                    settings.idle_only,
                    codec::now_ms(),
                ],
            )?;
            Ok(())
        })
    }
}
