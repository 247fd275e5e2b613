//! A target's own sandbox choices (`rm_core::TargetSandbox`), going with its policy: no row
//! is the default.

use rm_core::{PolicyId, TargetSandbox};
use rusqlite::params;

use crate::codec::invalid_row;
use crate::error::JournalError;
use crate::Journal;

impl Journal {
    /// Every policy's own sandbox choices (policies with the default are absent).
    pub fn policy_sandboxes(&mut self) -> Result<Vec<(PolicyId, TargetSandbox)>, JournalError> {
        self.run(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT policy_id, walls, docker, memory_max_mb FROM policy_sandbox
                 ORDER BY policy_id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, walls, docker, memory) = row?;
                let key = id.to_string();
                let flag = |name: &str, v: i64| match v {
                    0 => Ok(false),
                    1 => Ok(true),
                    other => Err(invalid_row(
                        "policy_sandbox",
                        &key,
                        format!("{name} {other} is not 0 or 1"),
                    )),
                };
                let memory_max_mb = match memory {
                    None => None,
                    Some(mb) => {
                        Some(u32::try_from(mb).ok().filter(|mb| *mb > 0).ok_or_else(|| {
                            invalid_row(
                                "policy_sandbox",
                                &key,
                                format!("memory_max_mb {mb} is not a size in MiB"),
                            )
                        })?)
                    }
                };
                out.push((
                    PolicyId::new(id),
                    TargetSandbox {
                        walls: flag("walls", walls)?,
                        docker: flag("docker", docker)?,
                        memory_max_mb,
                    },
                ));
            }
            Ok(out)
        })
    }

    /// Stores `policy`'s own sandbox choices; the default removes them.
    pub fn put_policy_sandbox(
        &mut self,
        policy: PolicyId,
        choice: TargetSandbox,
    ) -> Result<(), JournalError> {
        self.run(|conn| {
            if choice.is_default() {
                conn.execute(
                    "DELETE FROM policy_sandbox WHERE policy_id = ?1",
                    [policy.get()],
                )?;
                return Ok(());
            }
            let changed = conn.execute(
                "INSERT INTO policy_sandbox (policy_id, walls, docker, memory_max_mb)
                 SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM policies WHERE id = ?1)
                 ON CONFLICT (policy_id) DO UPDATE SET
                    walls = excluded.walls, docker = excluded.docker,
                    memory_max_mb = excluded.memory_max_mb",
                params![
                    policy.get(),
                    choice.walls,
                    choice.docker,
                    choice.memory_max_mb
                ],
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
