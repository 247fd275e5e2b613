//! Small conversions between stored columns and domain values. Every decode
//! failure becomes [`JournalError::InvalidRow`] naming the table and key, so a
//! hand-edited or damaged row is reported, never a panic.

use std::fmt::Display;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::JournalError;

/// Labels are `[a-z0-9._-]` (enforced by `rm_core::Label`), so a comma can
/// never occur inside one: a comma-joined list needs no escaping.
pub(crate) const LABEL_SEPARATOR: char = ',';

/// A row that does not decode into a domain value.
pub(crate) fn invalid_row(
    table: &'static str,
    key: impl Display,
    reason: impl Display,
) -> JournalError {
    JournalError::InvalidRow {
        table,
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

/// Parse a stored text column through the domain type's own validation.
pub(crate) fn parse_col<T>(
    table: &'static str,
    key: &str,
    column: &str,
    text: &str,
) -> Result<T, JournalError>
where
    T: FromStr,
    T::Err: Display,
{
    text.parse::<T>()
        .map_err(|e| invalid_row(table, key, format!("{column}: {e}")))
}

/// A stored integer as a narrower unsigned domain number.
pub(crate) fn int_col<T>(
    table: &'static str,
    key: &str,
    column: &str,
    value: i64,
) -> Result<T, JournalError>
where
    T: TryFrom<i64>,
{
    T::try_from(value)
        .map_err(|_| invalid_row(table, key, format!("{column} {value} is out of range")))
}

/// A domain number as an SQLite integer (SQLite integers are i64).
pub(crate) fn to_sql_int<T>(what: &'static str, value: T) -> Result<i64, JournalError>
where
    T: TryInto<i64> + Copy + Display,
{
    value.try_into().map_err(|_| JournalError::InvalidInput {
        what,
        reason: format!("{value} does not fit in a 64-bit signed integer"),
    })
}

/// Wall-clock milliseconds for the bookkeeping columns (`created_at_ms`,
/// `updated_at_ms`). Domain decisions never read these; they use the
/// timestamps the domain types carry, which callers supply.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Whether `e` is a UNIQUE or PRIMARY KEY violation (a duplicate key, as
/// opposed to a CHECK failure or an I/O error).
pub(crate) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    e.sqlite_error().is_some_and(|err| {
        err.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
            || err.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    })
}
