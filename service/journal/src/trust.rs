//! The verdict on the job each attempt's runner ran ([`rm_core::TrustVerdict`]), kept with the
//! attempt (and removed with it).

use rm_core::{AttemptId, JobTrust, TrustVerdict};
use rusqlite::{params, OptionalExtension};

use crate::codec::{invalid_row, now_ms, to_sql_int};
use crate::error::JournalError;
use crate::Journal;

impl Journal {
    /// Records `attempt`'s verdict; a later one replaces it (the same job judged again).
    pub fn put_trust(
        &mut self,
        attempt: &AttemptId,
        verdict: &TrustVerdict,
    ) -> Result<(), JournalError> {
        let job = verdict
            .job_id
            .map(|j| to_sql_int("trust job_id", j))
            .transpose()?;
        let run = verdict
            .run_id
            .map(|r| to_sql_int("trust run_id", r))
            .transpose()?;
        let at = now_ms();
        self.run(|conn| {
            conn.prepare_cached(
                "INSERT INTO attempt_trust (attempt_id, trust, job_id, run_id, reason, decided_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (attempt_id) DO UPDATE SET trust = excluded.trust,
                   job_id = excluded.job_id, run_id = excluded.run_id,
                   reason = excluded.reason, decided_at_ms = excluded.decided_at_ms",
            )?
            .execute(params![
                attempt.as_str(),
                verdict.trust.as_str(),
                job,
                run,
                verdict.reason,
                at
            ])?;
            Ok(())
        })
    }

    /// `attempt`'s verdict, if one was recorded.
    pub fn trust_of(&mut self, attempt: &AttemptId) -> Result<Option<TrustVerdict>, JournalError> {
        let key = attempt.as_str().to_owned();
        let row = self.run(|conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT trust, job_id, run_id, reason FROM attempt_trust WHERE attempt_id = ?1",
                )?
                .query_row([&key], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<i64>>(1)?,
                        r.get::<_, Option<i64>>(2)?,
                        r.get::<_, String>(3)?,
                    ))
                })
                .optional()?)
        })?;
        let Some((trust, job, run, reason)) = row else {
            return Ok(None);
        };
        let trust = JobTrust::parse(&trust).ok_or_else(|| {
            invalid_row(
                "attempt_trust",
                &key,
                format!("trust {trust:?} is not known"),
            )
        })?;
        let id = |what: &str, v: Option<i64>| {
            v.map(|v| {
                u64::try_from(v)
                    .map_err(|_| invalid_row("attempt_trust", &key, format!("{what} {v} < 0")))
            })
            .transpose()
        };
        Ok(Some(TrustVerdict {
            trust,
            job_id: id("job_id", job)?,
            run_id: id("run_id", run)?,
            reason,
        }))
    }
}
