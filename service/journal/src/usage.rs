//! What finished attempts used, kept per policy: the newest [`USAGE_KEPT_PER_POLICY`] rows
//! of each policy. Memory admission reads a policy's [`Journal::typical_peak`] as the
//! expected peak of its next runner.

use rusqlite::{params, Row, TransactionBehavior};

use rm_core::{AttemptId, PolicyId};

use crate::codec::{int_col, parse_col, to_sql_int};
use crate::error::JournalError;
use crate::Journal;

const TABLE: &str = "attempt_usage";
const COLUMNS: &str = "attempt_id, policy_id, ended_at_ms, wall_ms, cpu_ms, peak_rss_bytes, \
                       average_millicores, busiest_millicores";
/// Newest first; the id breaks ties so that which rows are kept never depends on row order.
const NEWEST_FIRST: &str = "ORDER BY ended_at_ms DESC, attempt_id DESC";

/// How many usage rows each policy keeps. Enough for a percentile to ignore an outlier or
/// two, few enough that a policy's history follows what its jobs do now.
pub const USAGE_KEPT_PER_POLICY: usize = 20;

/// What one finished attempt used, as the runner host's meter summed it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptUsage {
    pub attempt_id: AttemptId,
    /// The attempt's policy (possibly one deleted since).
    pub policy_id: PolicyId,
    /// When the attempt ended, milliseconds since the Unix epoch; orders a policy's history.
    pub ended_at_ms: i64,
    /// From the attempt's start to its last sample.
    pub wall_ms: u64,
    /// CPU used by the attempt's whole process tree.
    pub cpu_ms: u64,
    /// The largest resident memory of the whole tree in one sample.
    pub peak_rss_bytes: u64,
    /// `cpu / wall` in thousandths of a core.
    pub average_millicores: u64,
    /// The highest rate over one interval between samples, in thousandths of a core.
    pub busiest_millicores: u64,
}

impl Journal {
    /// Record what an attempt used, then keep only the newest [`USAGE_KEPT_PER_POLICY`] rows
    /// of its policy, in one transaction. Recording an attempt again replaces its row: a retry
    /// after a crash between the measurement and the commit must succeed, and the later
    /// figures are at least as complete.
    pub fn record_usage(&mut self, usage: &AttemptUsage) -> Result<(), JournalError> {
        let wall_ms = to_sql_int("usage wall_ms", usage.wall_ms)?;
        let cpu_ms = to_sql_int("usage cpu_ms", usage.cpu_ms)?;
        let peak = to_sql_int("usage peak_rss_bytes", usage.peak_rss_bytes)?;
        let average = to_sql_int("usage average_millicores", usage.average_millicores)?;
        let busiest = to_sql_int("usage busiest_millicores", usage.busiest_millicores)?;
        let kept = to_sql_int("usage rows kept", USAGE_KEPT_PER_POLICY)?;
        let policy = usage.policy_id.get();
        self.run(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.prepare_cached(&format!(
                "INSERT INTO attempt_usage ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (attempt_id) DO UPDATE SET
                     policy_id = excluded.policy_id, ended_at_ms = excluded.ended_at_ms,
                     wall_ms = excluded.wall_ms, cpu_ms = excluded.cpu_ms,
                     peak_rss_bytes = excluded.peak_rss_bytes,
                     average_millicores = excluded.average_millicores,
                     busiest_millicores = excluded.busiest_millicores"
            ))?
            .execute(params![
                usage.attempt_id.as_str(),
                policy,
                usage.ended_at_ms,
                wall_ms,
                cpu_ms,
                peak,
                average,
                busiest
            ])?;
            tx.prepare_cached(&format!(
                "DELETE FROM attempt_usage WHERE policy_id = ?1 AND attempt_id NOT IN (
                     SELECT attempt_id FROM attempt_usage WHERE policy_id = ?1
                     {NEWEST_FIRST} LIMIT ?2)"
            ))?
            .execute(params![policy, kept])?;
            tx.commit()?;
            Ok(())
        })
    }

    /// The newest `limit` usage rows of `policy`, newest first (at most
    /// [`USAGE_KEPT_PER_POLICY`] exist).
    pub fn recent_usage(
        &mut self,
        policy: PolicyId,
        limit: usize,
    ) -> Result<Vec<AttemptUsage>, JournalError> {
        // Beyond i64::MAX means "all of them" anyway.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM attempt_usage WHERE policy_id = ?1 {NEWEST_FIRST} LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![policy.get(), limit], UsageColumns::read)?;
            rows.map(|row| row?.into_usage()).collect()
        })
    }

    /// The peak memory a new runner of `policy` is expected to reach; `None` without history.
    ///
    /// The 90th percentile (nearest rank) of the kept peaks: of the 20 kept, the 18th
    /// smallest. One or two outliers (a job that ran away once) do not set the expectation,
    /// yet the heavy runs that recur are covered, which the median would not do. With fewer
    /// than ten runs the rank is the largest: little history gives no ground to discount any.
    pub fn typical_peak(&mut self, policy: PolicyId) -> Result<Option<u64>, JournalError> {
        let kept = to_sql_int("usage rows kept", USAGE_KEPT_PER_POLICY)?;
        let mut peaks = self.run(|conn| {
            // Limited too: rows beyond the kept number only exist if a newer build kept more.
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT attempt_id, peak_rss_bytes FROM attempt_usage WHERE policy_id = ?1
                 {NEWEST_FIRST} LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![policy.get(), kept], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })?;
            let mut peaks = Vec::new();
            for row in rows {
                let (key, peak) = row?;
                peaks.push(int_col::<u64>(TABLE, &key, "peak_rss_bytes", peak)?);
            }
            Ok(peaks)
        })?;
        peaks.sort_unstable();
        Ok(nearest_rank_p90(&peaks))
    }
}

/// The 90th percentile by nearest rank of sorted `values`: the value at rank ⌈0.9·n⌉.
fn nearest_rank_p90(sorted: &[u64]) -> Option<u64> {
    let rank = (sorted.len() * 9).div_ceil(10);
    rank.checked_sub(1).and_then(|i| sorted.get(i)).copied()
}

/// A usage row as SQLite values; decoding checks every number's range.
struct UsageColumns {
    attempt_id: String,
    policy_id: i64,
    ended_at_ms: i64,
    wall_ms: i64,
    cpu_ms: i64,
    peak_rss_bytes: i64,
    average_millicores: i64,
    busiest_millicores: i64,
}

impl UsageColumns {
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            attempt_id: row.get(0)?,
            policy_id: row.get(1)?,
            ended_at_ms: row.get(2)?,
            wall_ms: row.get(3)?,
            cpu_ms: row.get(4)?,
            peak_rss_bytes: row.get(5)?,
            average_millicores: row.get(6)?,
            busiest_millicores: row.get(7)?,
        })
    }

    fn into_usage(self) -> Result<AttemptUsage, JournalError> {
        let key = self.attempt_id.as_str();
        Ok(AttemptUsage {
            attempt_id: parse_col(TABLE, key, "attempt_id", key)?,
            policy_id: PolicyId::new(self.policy_id),
            ended_at_ms: self.ended_at_ms,
            wall_ms: int_col(TABLE, key, "wall_ms", self.wall_ms)?,
            cpu_ms: int_col(TABLE, key, "cpu_ms", self.cpu_ms)?,
            peak_rss_bytes: int_col(TABLE, key, "peak_rss_bytes", self.peak_rss_bytes)?,
            average_millicores: int_col(TABLE, key, "average_millicores", self.average_millicores)?,
            busiest_millicores: int_col(TABLE, key, "busiest_millicores", self.busiest_millicores)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::nearest_rank_p90;

    #[test]
    fn p90_by_nearest_rank() {
        assert_eq!(nearest_rank_p90(&[]), None);
        assert_eq!(nearest_rank_p90(&[7]), Some(7));
        // Fewer than ten values: the rank is the largest.
        assert_eq!(nearest_rank_p90(&[1, 2, 3, 4, 5, 6, 7, 8, 9]), Some(9));
        let ten: Vec<u64> = (1..=10).collect();
        assert_eq!(nearest_rank_p90(&ten), Some(9));
        let eleven: Vec<u64> = (1..=11).collect();
        assert_eq!(nearest_rank_p90(&eleven), Some(10));
        let twenty: Vec<u64> = (1..=20).collect();
        assert_eq!(nearest_rank_p90(&twenty), Some(18));
    }
}
