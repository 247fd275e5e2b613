//! This machine's row. The table holds at most one row (`slot = 1`), so a
//! renamed host replaces its old identity instead of leaving a stale second host.

use std::path::{Path, PathBuf};

use rusqlite::{params, OptionalExtension};

use rm_core::{Host, HostId};

use crate::codec::{self, int_col, invalid_row, parse_col};
use crate::error::JournalError;
use crate::Journal;

const TABLE: &str = "hosts";

/// The stored host and the runner root directory the service uses on it.
/// (`rm_core::Host` leaves the directory out: it is an IO concern.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRecord {
    pub host: Host,
    pub runner_root: Option<PathBuf>,
}

impl Journal {
    /// Record this host (insert or replace the single host row).
    pub fn put_host(
        &mut self,
        host: &Host,
        runner_root: Option<&Path>,
    ) -> Result<(), JournalError> {
        let root = runner_root
            .map(|p| {
                p.to_str()
                    .map(str::to_owned)
                    .ok_or_else(|| JournalError::InvalidInput {
                        what: "runner root",
                        reason: format!("{} is not valid UTF-8: choose a UTF-8 path", p.display()),
                    })
            })
            .transpose()?;
        self.run(|conn| {
            let now = codec::now_ms();
            conn.execute(
                "INSERT INTO hosts (slot, id, os, arch, label, capacity, runner_root,
                                    created_at_ms, updated_at_ms)
                 VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
                 ON CONFLICT (slot) DO UPDATE SET
                    id = excluded.id, os = excluded.os, arch = excluded.arch,
                    label = excluded.label, capacity = excluded.capacity,
                    runner_root = excluded.runner_root, updated_at_ms = excluded.updated_at_ms",
                params![
                    host.id.as_str(),
                    host.os.as_str(),
                    host.arch.as_str(),
                    host.label.as_str(),
                    host.capacity,
                    root,
                    now,
                ],
            )?;
            Ok(())
        })
    }

    /// This host's row, if [`Journal::put_host`] was ever called.
    pub fn get_host(&mut self) -> Result<Option<HostRecord>, JournalError> {
        self.run(|conn| {
            let row = conn
                .prepare_cached(
                    "SELECT id, os, arch, label, capacity, runner_root FROM hosts WHERE slot = 1",
                )?
                .query_row([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(4)?,
                        r.get::<_, Option<String>>(5)?,
                    ))
                })
                .optional()?;
            let Some((id, os, arch, label, capacity, root)) = row else {
                return Ok(None);
            };
            let key = id.as_str();
            let host = Host {
                id: HostId::new(id.as_str()).map_err(|e| invalid_row(TABLE, key, e))?,
                os: parse_col(TABLE, key, "os", &os)?,
                arch: parse_col(TABLE, key, "arch", &arch)?,
                label: parse_col(TABLE, key, "label", &label)?,
                capacity: int_col(TABLE, key, "capacity", capacity)?,
            };
            Ok(Some(HostRecord {
                host,
                runner_root: root.map(PathBuf::from),
            }))
        })
    }
}
