//! The pool's schema, versioned. Whichever host connects first with a newer runner-manager
//! migrates it, inside one transaction under an advisory lock (two hosts joining at once never
//! both migrate). A database whose schema is newer than this build knows is refused untouched.

use tokio_postgres::Client;

use crate::error::PoolError;

/// The schema this build writes and reads.
pub const SCHEMA_VERSION: i32 = 2;

/// `pg_advisory_xact_lock` key of the migration ("rmpool" in ASCII).
const MIGRATION_LOCK: i64 = 0x726d_706f_6f6c;

/// Step `n` (1-based) takes the schema from version `n - 1` to `n`. All times are the
/// database's (`now()`), so the hosts' clocks never have to agree.
const STEPS: &[&str] = &[
    // 1: hosts and their leases; per target (a repository or organization) its demand
    // reader's lease and last snapshot, the jobs queued in it, and the claims: one per runner
    // a host started and has not yet seen take a job, bound to one queued job so that runners
    // and queued jobs are counted one to one.
    "CREATE TABLE rm_pool_hosts (
         host_id     text PRIMARY KEY,
         label       text NOT NULL,
         capacity    integer NOT NULL,
         free        integer NOT NULL,
         lease_until timestamptz NOT NULL,
         seen_at     timestamptz NOT NULL
     );
     CREATE TABLE rm_pool_targets (
         target      text PRIMARY KEY,
         reader      text NOT NULL,
         lease_until timestamptz NOT NULL,
         read_at     timestamptz,
         snapshot    text
     );
     CREATE TABLE rm_pool_queue (
         target text NOT NULL,
         job_id bigint NOT NULL,
         PRIMARY KEY (target, job_id)
     );
     CREATE TABLE rm_pool_claims (
         job_id     bigint PRIMARY KEY,
         target     text NOT NULL,
         host_id    text NOT NULL,
         runner     text NOT NULL UNIQUE,
         claimed_at timestamptz NOT NULL,
         ran_job    boolean NOT NULL DEFAULT false
     );
     CREATE INDEX rm_pool_claims_by_host ON rm_pool_claims (host_id);
     CREATE INDEX rm_pool_claims_by_target ON rm_pool_claims (target);",
    // 2: who runs what: each host's runners as of its last heartbeat, with the job each was
    // seen to take (none yet: starting or idle).
    "CREATE TABLE rm_pool_running (
         host_id  text NOT NULL,
         runner   text NOT NULL,
         target   text NOT NULL,
         job_id   bigint,
         job_name text,
         PRIMARY KEY (host_id, runner)
     );",
];

/// Brings the schema to [`SCHEMA_VERSION`]; answers the version found before (0: a new
/// database).
pub(crate) async fn migrate(
    client: &mut Client,
    address: &str,
    user: &str,
) -> Result<i32, PoolError> {
    let err = |e: tokio_postgres::Error| PoolError::from_driver(&e, address, user, false);
    let tx = client.transaction().await.map_err(err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS rm_pool_meta (
             id             integer PRIMARY KEY CHECK (id = 1),
             schema_version integer NOT NULL,
             migrated_at    timestamptz NOT NULL
         )",
    )
    .await
    .map_err(err)?;
    let found: i32 = tx
        .query_opt("SELECT schema_version FROM rm_pool_meta WHERE id = 1", &[])
        .await
        .map_err(err)?
        .map_or(0, |row| row.get(0));
    if found > SCHEMA_VERSION {
        return Err(PoolError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for step in STEPS.iter().skip(usize::try_from(found).unwrap_or(0)) {
        tx.batch_execute(step).await.map_err(err)?;
    }
    if found < SCHEMA_VERSION {
        tx.execute(
            "INSERT INTO rm_pool_meta (id, schema_version, migrated_at) VALUES (1, $1, now())
             ON CONFLICT (id) DO UPDATE SET schema_version = $1, migrated_at = now()",
            &[&SCHEMA_VERSION],
        )
        .await
        .map_err(err)?;
        tracing::info!(
            from = found,
            to = SCHEMA_VERSION,
            "pool database schema migrated"
        );
    }
    tx.commit().await.map_err(err)?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_one_step_per_version() {
        assert_eq!(STEPS.len(), usize::try_from(SCHEMA_VERSION).unwrap());
    }
}
