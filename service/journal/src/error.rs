//! The one error type of the journal. Callers branch on its variants: a
//! `Conflict` means "re-read and decide again", `Refused`/`Corrupt` mean "do not
//! start on this file", everything else is a bug or an environment problem.

use std::fmt;
use std::path::{Path, PathBuf};

/// The fix printed for a corrupt journal. Recovery is safe because every
/// attempt the journal knew about is also visible in GitHub's runner inventory
/// under a name the service recognises as its own.
pub const CORRUPT_FIX: &str = "move it aside and restart; attempts it recorded will be \
recovered from GitHub's inventory";

/// Why an existing file is not used as a journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// Written by a newer runner-manager: its schema is beyond what this build knows.
    NewerSchema { found: i64, known: i64 },
    /// An SQLite database that belongs to another application (`PRAGMA application_id`).
    ForeignApplication { application_id: i32 },
    /// A non-empty SQLite database without any application id: not ours.
    UnmarkedDatabase,
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NewerSchema { found, known } => write!(
                f,
                "it was written by a newer runner-manager (schema {found}, this build knows {known})"
            ),
            Self::ForeignApplication { application_id } => write!(
                f,
                "it belongs to another application (application_id {application_id:#010x})"
            ),
            Self::UnmarkedDatabase => {
                write!(f, "it is an SQLite database that runner-manager did not create")
            }
        }
    }
}

/// Every failure of a journal operation.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A compare-and-set lost: the row changed since the caller read it.
    /// Nothing was written; re-read the row and decide again.
    #[error("{entity} {id} was changed concurrently ({detail}); re-read it and retry")]
    Conflict {
        entity: &'static str,
        id: String,
        /// What the caller expected and what is stored, for logs.
        detail: String,
    },

    /// No row with that key.
    #[error("{entity} {id} is not in the journal")]
    NotFound { entity: &'static str, id: String },

    /// A unique key is already taken (policy target+profile, attempt id, runner name).
    #[error("{entity} with {key} already exists in the journal")]
    Duplicate { entity: &'static str, key: String },

    /// The file is not used: newer schema or not ours. It was left untouched.
    #[error("refusing journal {}: {reason}: {fix}", path.display())]
    Refused {
        path: PathBuf,
        reason: RefusalReason,
        fix: String,
    },

    /// The file is damaged (not an SQLite file, failed `quick_check`, or SQLite
    /// reported SQLITE_CORRUPT/SQLITE_NOTADB on any call). Found at open, the
    /// file was left untouched; found later, stop using this journal.
    #[error("journal {} is corrupt ({detail}): {CORRUPT_FIX}", path.display())]
    Corrupt { path: PathBuf, detail: String },

    /// A stored row does not satisfy the domain's rules (e.g. an unknown state
    /// name, an impossible attempt). Carries the table and key so the row can
    /// be found and inspected.
    #[error("journal row {table}/{key} is invalid: {reason}")]
    InvalidRow {
        table: &'static str,
        key: String,
        reason: String,
    },

    /// A value the caller passed cannot be stored (e.g. a number out of range).
    #[error("cannot store {what}: {reason}")]
    InvalidInput { what: &'static str, reason: String },

    /// The file could not be opened or created at all.
    #[error(
        "cannot open journal {}: {source}; check that the data directory exists and is \
         writable by the service",
        path.display()
    )]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    /// Reading the file before handing it to SQLite failed.
    #[error("cannot read journal {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// SQLite did not accept a setting the journal's guarantees rely on.
    #[error("journal setup failed: {what}: {detail}")]
    Setup { what: &'static str, detail: String },

    /// Any other SQLite failure (I/O error, disk full, lock wait timed out, ...).
    #[error("journal database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

impl JournalError {
    /// True for the errors that mean "this file must not be used": refusal or corruption.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Refused { .. } | Self::Corrupt { .. })
    }

    /// Turn an SQLite error that means "the file is damaged" into `Corrupt`,
    /// wherever it is first noticed, so callers never retry on a broken file.
    pub(crate) fn classify(self, path: &Path) -> Self {
        use rusqlite::ErrorCode;
        match &self {
            Self::Sqlite(source) => match source.sqlite_error_code() {
                Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase) => Self::Corrupt {
                    path: path.to_path_buf(),
                    detail: source.to_string(),
                },
                _ => self,
            },
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_error(code: i32) -> JournalError {
        JournalError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    #[test]
    fn corruption_found_mid_operation_becomes_corrupt_naming_the_file() {
        let path = Path::new("/data/journal.sqlite3");
        for code in [rusqlite::ffi::SQLITE_CORRUPT, rusqlite::ffi::SQLITE_NOTADB] {
            let err = sqlite_error(code).classify(path);
            assert!(matches!(err, JournalError::Corrupt { .. }), "{err:?}");
            assert!(err.is_refusal());
            let text = err.to_string();
            assert!(text.contains("/data/journal.sqlite3"), "{text}");
            assert!(text.contains(CORRUPT_FIX), "{text}");
        }
        let busy = sqlite_error(rusqlite::ffi::SQLITE_BUSY).classify(path);
        assert!(matches!(busy, JournalError::Sqlite(_)), "{busy:?}");
        assert!(!busy.is_refusal());
    }

    #[test]
    fn newer_schema_message_names_versions_and_fix() {
        let err = JournalError::Refused {
            path: PathBuf::from("/data/journal.sqlite3"),
            reason: RefusalReason::NewerSchema { found: 7, known: 1 },
            fix: "upgrade runner-manager or point --data-dir elsewhere".to_owned(),
        };
        assert_eq!(
            err.to_string(),
            "refusing journal /data/journal.sqlite3: it was written by a newer runner-manager \
             (schema 7, this build knows 1): upgrade runner-manager or point --data-dir elsewhere"
        );
    }
}
