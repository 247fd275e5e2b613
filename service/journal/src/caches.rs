//! The caches' settings: a target's own (on/off, a shared namespace) over the defaults, and
//! the host's size cap and tool cache switch. The rules for a namespace name and a size are
//! `rm_core::caches`', checked before a write and again on a read.

use rm_core::caches::{CacheSetting, Namespace, DEFAULT_CAP_BYTES, MIN_CAP_BYTES};
use rm_core::PolicyId;
use rusqlite::{params, OptionalExtension};

use crate::codec::{int_col, invalid_row, to_sql_int};
use crate::error::JournalError;
use crate::Journal;

/// The host's cache settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCacheSettings {
    pub cap_bytes: u64,
    pub tool_cache: bool,
}

impl Default for HostCacheSettings {
    fn default() -> Self {
        HostCacheSettings {
            cap_bytes: DEFAULT_CAP_BYTES,
            tool_cache: true,
        }
    }
}

impl Journal {
    /// Every policy's own cache settings (policies without any are absent).
    pub fn policy_caches(&mut self) -> Result<Vec<(PolicyId, CacheSetting)>, JournalError> {
        self.run(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT policy_id, enabled, namespace FROM policy_cache ORDER BY policy_id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, enabled, namespace) = row?;
                let key = id.to_string();
                let enabled = match enabled {
                    None => None,
                    Some(0) => Some(false),
                    Some(1) => Some(true),
                    Some(other) => {
                        return Err(invalid_row(
                            "policy_cache",
                            &key,
                            format!("enabled {other} is not 0 or 1"),
                        ))
                    }
                };
                let namespace = namespace
                    .map(|n| {
                        Namespace::shared(&n)
                            .map_err(|e| invalid_row("policy_cache", &key, e.to_string()))
                    })
                    .transpose()?;
                out.push((PolicyId::new(id), CacheSetting { enabled, namespace }));
            }
            Ok(out)
        })
    }

    /// Stores `policy`'s own cache settings; the default removes them.
    pub fn put_policy_cache(
        &mut self,
        policy: PolicyId,
        setting: &CacheSetting,
    ) -> Result<(), JournalError> {
        let namespace = match &setting.namespace {
            None => None,
            Some(Namespace::Shared(name)) => Some(name.clone()),
            Some(other) => {
                return Err(JournalError::InvalidInput {
                    what: "target cache settings",
                    reason: format!("only a shared namespace is stored, not {other}"),
                })
            }
        };
        let enabled = setting.enabled;
        let empty = *setting == CacheSetting::default();
        self.run(|conn| {
            if empty {
                conn.execute(
                    "DELETE FROM policy_cache WHERE policy_id = ?1",
                    [policy.get()],
                )?;
                return Ok(());
            }
            let changed = conn.execute(
                "INSERT INTO policy_cache (policy_id, enabled, namespace)
                 SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM policies WHERE id = ?1)
                 ON CONFLICT (policy_id) DO UPDATE SET
                    enabled = excluded.enabled, namespace = excluded.namespace",
                params![policy.get(), enabled, namespace],
            )?;
            if changed == 0 {
                return Err(JournalError::NotFound {
                    entity: "policy",
                    id: policy.to_string(),
                });
            }
            Ok(())
        })
    }

    /// The host's cache settings (the defaults until changed).
    pub fn host_cache_settings(&mut self) -> Result<HostCacheSettings, JournalError> {
        self.run(|conn| {
            let row = conn
                .query_row(
                    "SELECT cap_bytes, tool_cache FROM cache_settings WHERE slot = 1",
                    [],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                )
                .optional()?;
            let Some((cap, tool_cache)) = row else {
                return Ok(HostCacheSettings::default());
            };
            Ok(HostCacheSettings {
                cap_bytes: int_col("cache_settings", "1", "cap_bytes", cap)?,
                tool_cache: tool_cache == 1,
            })
        })
    }

    /// Stores the host's cache settings.
    pub fn put_host_cache_settings(
        &mut self,
        settings: HostCacheSettings,
        now_ms: i64,
    ) -> Result<(), JournalError> {
        if settings.cap_bytes < MIN_CAP_BYTES {
            return Err(JournalError::InvalidInput {
                what: "cache size",
                reason: format!(
                    "{} bytes is below the smallest cap, 64 MiB",
                    settings.cap_bytes
                ),
            });
        }
        let cap = to_sql_int("cap_bytes", settings.cap_bytes)?;
        self.run(|conn| {
            conn.execute(
                "INSERT INTO cache_settings (slot, cap_bytes, tool_cache, updated_at_ms)
                 VALUES (1, ?1, ?2, ?3)
                 ON CONFLICT (slot) DO UPDATE SET cap_bytes = excluded.cap_bytes,
                    tool_cache = excluded.tool_cache, updated_at_ms = excluded.updated_at_ms",
                params![cap, settings.tool_cache, now_ms],
            )?;
            Ok(())
        })
    }
}
