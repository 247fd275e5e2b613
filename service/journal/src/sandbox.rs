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
                "SELECT policy_id, walls, docker FROM policy_sandbox ORDER BY policy_id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, walls, docker) = row?;
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
                out.push((
                    PolicyId::new(id),
                    TargetSandbox {
                        walls: flag("walls", walls)?,
                        docker: flag("docker", docker)?,
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
                "INSERT INTO policy_sandbox (policy_id, walls, docker)
                 SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM policies WHERE id = ?1)
                 ON CONFLICT (policy_id) DO UPDATE SET
                    walls = excluded.walls, docker = excluded.docker",
                params![policy.get(), choice.walls, choice.docker],
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
