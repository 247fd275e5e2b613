//! A target's own memory admission settings, over the host's: each field `None` follows the
//! host. One row per policy that has any; deleting the policy deletes it.

use rm_core::PolicyId;
use rusqlite::params;

use crate::codec::{int_col, invalid_row, to_sql_int};
use crate::error::JournalError;
use crate::Journal;

const TABLE: &str = "policy_admission";

/// What a target sets for itself (`None`: the host's setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PolicyAdmission {
    pub memory_admission: Option<bool>,
    /// A runner's expected peak before the target has any history (≥ 1).
    pub runner_memory_mb: Option<u64>,
    /// Memory kept free for the user when one of this target's runners starts.
    pub memory_headroom_mb: Option<u64>,
}

impl PolicyAdmission {
    /// Nothing of its own: the host's settings apply.
    pub fn is_empty(&self) -> bool {
        *self == PolicyAdmission::default()
    }
}

impl Journal {
    /// Every policy's own admission settings (policies without any are absent).
    pub fn policy_admissions(&mut self) -> Result<Vec<(PolicyId, PolicyAdmission)>, JournalError> {
        self.run(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT policy_id, memory_admission, runner_memory_mb, memory_headroom_mb
                 FROM policy_admission ORDER BY policy_id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, memory, runner_mb, headroom_mb) = row?;
                let key = id.to_string();
                let memory_admission = match memory {
                    None => None,
                    Some(0) => Some(false),
                    Some(1) => Some(true),
                    Some(other) => {
                        return Err(invalid_row(
                            TABLE,
                            &key,
                            format!("memory_admission {other} is not 0 or 1"),
                        ))
                    }
                };
                let runner_memory_mb = runner_mb
                    .map(|v| int_col::<u64>(TABLE, &key, "runner_memory_mb", v))
                    .transpose()?;
                if runner_memory_mb == Some(0) {
                    return Err(invalid_row(TABLE, &key, "runner_memory_mb 0 is below 1"));
                }
                let memory_headroom_mb = headroom_mb
                    .map(|v| int_col::<u64>(TABLE, &key, "memory_headroom_mb", v))
                    .transpose()?;
                out.push((
                    PolicyId::new(id),
                    PolicyAdmission {
                        memory_admission,
                        runner_memory_mb,
                        memory_headroom_mb,
                    },
                ));
            }
            Ok(out)
        })
    }

    /// Stores `policy`'s own settings; all `None` removes them (the host's apply).
    pub fn put_policy_admission(
        &mut self,
        policy: PolicyId,
        settings: &PolicyAdmission,
    ) -> Result<(), JournalError> {
        if settings.runner_memory_mb == Some(0) {
            return Err(JournalError::InvalidInput {
                what: "target admission settings",
                reason: "runner_memory_mb must be at least 1".into(),
            });
        }
        let runner_mb = settings
            .runner_memory_mb
            .map(|v| to_sql_int("runner_memory_mb", v))
            .transpose()?;
        let headroom_mb = settings
            .memory_headroom_mb
            .map(|v| to_sql_int("memory_headroom_mb", v))
            .transpose()?;
        let empty = settings.is_empty();
        let memory = settings.memory_admission;
        self.run(|conn| {
            if empty {
                conn.execute(
                    "DELETE FROM policy_admission WHERE policy_id = ?1",
                    [policy.get()],
                )?;
                return Ok(());
            }
            let changed = conn.execute(
                "INSERT INTO policy_admission
                    (policy_id, memory_admission, runner_memory_mb, memory_headroom_mb)
                 SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM policies WHERE id = ?1)
                 ON CONFLICT (policy_id) DO UPDATE SET
                    memory_admission = excluded.memory_admission,
                    runner_memory_mb = excluded.runner_memory_mb,
                    memory_headroom_mb = excluded.memory_headroom_mb",
                params![policy.get(), memory, runner_mb, headroom_mb],
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
}
