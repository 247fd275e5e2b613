//! Attempts: one row per ephemeral runner, written before every external
//! effect. Updates are compare-and-set on the whole previous value, so a
//! writer working from a stale copy gets [`JournalError::Conflict`] instead of
//! silently undoing someone else's transition.

use std::collections::BTreeMap;

use rusqlite::{params_from_iter, Connection, OptionalExtension, Row, ToSql, TransactionBehavior};

use rm_core::{
    Attempt, AttemptId, AttemptParts, AttemptState, FailureReason, Outcome, OutcomeKind, PolicyId,
    ProcessIdentity, Timestamp,
};

use crate::codec::{self, int_col, invalid_row, parse_col, to_sql_int};
use crate::error::JournalError;
use crate::Journal;

const TABLE: &str = "attempts";

/// A slot-holding attempt as the allocator sees it (see [`Journal::active_attempts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveAttempt {
    /// Its policy; possibly one the journal no longer knows.
    pub policy_id: PolicyId,
    pub state: AttemptState,
    pub runner_name: String,
}
const COLUMNS: &str =
    "id, policy_id, runner_name, state, outcome, failure_reason, runner_id, pid, \
                       process_start_time, terminate_intent, created_at_ms, state_changed_at_ms, \
                       concluded_at_ms, cleaned_at_ms";

impl Journal {
    /// Record a new attempt (normally freshly `allocated`, before any package,
    /// GitHub or process effect). An attempt id or runner name already in the
    /// journal is [`JournalError::Duplicate`]; nothing is overwritten.
    pub fn insert_attempt(&mut self, attempt: &Attempt) -> Result<(), JournalError> {
        let row = AttemptColumns::from_attempt(attempt)?;
        self.run(|conn| {
            let inserted = conn.execute(
                "INSERT INTO attempts (id, policy_id, runner_name, state, outcome, failure_reason,
                                       runner_id, pid, process_start_time, terminate_intent,
                                       created_at_ms, state_changed_at_ms, concluded_at_ms,
                                       cleaned_at_ms, version, written_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 1, ?15)",
                params_from_iter(
                    [&row.id as &dyn ToSql, &row.policy_id, &row.runner_name]
                        .into_iter()
                        .chain(row.changeable())
                        .chain([&codec::now_ms() as &dyn ToSql]),
                ),
            );
            match inserted {
                Ok(_) => Ok(()),
                Err(e) if codec::is_unique_violation(&e) => Err(JournalError::Duplicate {
                    entity: "attempt",
                    key: format!("id {} or runner name {}", row.id, row.runner_name),
                }),
                Err(e) => Err(e.into()),
            }
        })
    }

    /// Persist `next` (the whole attempt, after one or more transitions) if,
    /// and only if, the stored row still equals `previous`, the copy the
    /// caller started from. Otherwise nothing is written and the result is
    /// [`JournalError::Conflict`] (or [`JournalError::NotFound`]).
    ///
    /// ```text
    /// let before = attempt.clone();
    /// attempt.observe(Observed::Busy, now)?;
    /// journal.update_attempt(&before, &attempt)?;
    /// ```
    pub fn update_attempt(
        &mut self,
        previous: &Attempt,
        next: &Attempt,
    ) -> Result<(), JournalError> {
        if previous.id() != next.id() || previous.policy_id() != next.policy_id() {
            return Err(JournalError::InvalidInput {
                what: "attempt update",
                reason: format!(
                    "previous ({}, policy {}) and next ({}, policy {}) are different attempts",
                    previous.id(),
                    previous.policy_id(),
                    next.id(),
                    next.policy_id()
                ),
            });
        }
        let row = AttemptColumns::from_attempt(next)?;
        self.run(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let stored = select_one(&tx, "id", &row.id)?.ok_or_else(|| JournalError::NotFound {
                entity: "attempt",
                id: row.id.clone(),
            })?;
            if &stored != previous {
                return Err(JournalError::Conflict {
                    entity: "attempt",
                    id: row.id.clone(),
                    detail: format!(
                        "expected '{}' since {}, stored '{}' since {}",
                        previous.state(),
                        previous.state_changed_at(),
                        stored.state(),
                        stored.state_changed_at()
                    ),
                });
            }
            tx.execute(
                "UPDATE attempts
                    SET state = ?2, outcome = ?3, failure_reason = ?4, runner_id = ?5, pid = ?6,
                        process_start_time = ?7, terminate_intent = ?8, created_at_ms = ?9,
                        state_changed_at_ms = ?10, concluded_at_ms = ?11, cleaned_at_ms = ?12,
                        version = version + 1, written_at_ms = ?13
                  WHERE id = ?1",
                params_from_iter(
                    [&row.id as &dyn ToSql]
                        .into_iter()
                        .chain(row.changeable())
                        .chain([&codec::now_ms() as &dyn ToSql]),
                ),
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// The attempt with `id`, if any.
    pub fn get_attempt(&mut self, id: &AttemptId) -> Result<Option<Attempt>, JournalError> {
        self.run(|conn| select_one(conn, "id", id.as_str()))
    }

    /// The attempt whose runner registered under `runner_name` at GitHub, if
    /// it is one of ours and still journalled.
    pub fn get_attempt_by_runner_name(
        &mut self,
        runner_name: &str,
    ) -> Result<Option<Attempt>, JournalError> {
        self.run(|conn| select_one(conn, "runner_name", runner_name))
    }

    /// Every attempt of `policy` (whatever its state), oldest first.
    pub fn attempts_for_policy(&mut self, policy: PolicyId) -> Result<Vec<Attempt>, JournalError> {
        self.run(|conn| {
            select_many(
                conn,
                "WHERE policy_id = ?1 ORDER BY created_at_ms, id",
                [policy.get()],
            )
        })
    }

    /// Every attempt not yet `cleaned`, of any policy (including policies that
    /// no longer exist), oldest first: what startup recovery and the cleaner
    /// walk.
    pub fn uncleaned_attempts(&mut self) -> Result<Vec<Attempt>, JournalError> {
        self.run(|conn| {
            select_many(
                conn,
                "WHERE state <> ?1 ORDER BY created_at_ms, id",
                [AttemptState::Cleaned.as_str()],
            )
        })
    }

    /// The attempts of `policies` not yet `cleaned`, oldest first: what one target's loop
    /// supervises each pass. Served by the partial index of uncleaned attempts, so the cost
    /// follows the live attempts of these policies, not the host's whole history.
    pub fn uncleaned_attempts_for_policies(
        &mut self,
        policies: &[PolicyId],
    ) -> Result<Vec<Attempt>, JournalError> {
        if policies.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; policies.len()].join(", ");
        let clause = format!(
            // `INDEXED BY`: SQLite's planner otherwise prefers `attempts_by_policy`, which walks
            // every cleaned row of the policy's history; a query the index cannot serve fails
            // loudly (every test exercising this query would) instead of scanning silently.
            "INDEXED BY attempts_uncleaned_by_policy \
             WHERE state <> '{}' AND policy_id IN ({marks}) ORDER BY created_at_ms, id",
            AttemptState::Cleaned.as_str()
        );
        self.run(|conn| {
            select_many(
                conn,
                &clause,
                params_from_iter(policies.iter().map(|p| p.get())),
            )
        })
    }

    /// How many attempts of `policy` hold a runner slot (the states for which
    /// `AttemptState::counts_against_capacity` is true).
    pub fn active_count(&mut self, policy: PolicyId) -> Result<u32, JournalError> {
        let sql = format!(
            "SELECT count(*) FROM attempts WHERE policy_id = ?1 AND state IN ({})",
            active_states_sql()
        );
        self.run(|conn| {
            let n: i64 = conn.query_row(&sql, [policy.get()], |r| r.get(0))?;
            int_col(TABLE, "count", "count", n)
        })
    }

    /// How many attempts on this host hold a runner slot, over all policies,
    /// including attempts whose policy was deleted or is unknown.
    pub fn active_total(&mut self) -> Result<u32, JournalError> {
        let sql = format!(
            "SELECT count(*) FROM attempts WHERE state IN ({})",
            active_states_sql()
        );
        self.run(|conn| {
            let n: i64 = conn.query_row(&sql, [], |r| r.get(0))?;
            int_col(TABLE, "count", "count", n)
        })
    }

    /// Every slot-holding attempt as the allocator needs it: its policy (known
    /// or not), its state and its runner name (so a caller can tell which of
    /// the runners that have not taken a job by the journal's word have taken
    /// one by GitHub's). At most a host's capacity of rows.
    pub fn active_attempts(&mut self) -> Result<Vec<ActiveAttempt>, JournalError> {
        let sql = format!(
            "SELECT policy_id, state, runner_name FROM attempts WHERE state IN ({})",
            active_states_sql()
        );
        self.run(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (policy, state, runner_name) = row?;
                let state: AttemptState = parse_col(TABLE, &runner_name, "state", &state)?;
                out.push(ActiveAttempt {
                    policy_id: PolicyId::new(policy),
                    state,
                    runner_name,
                });
            }
            Ok(out)
        })
    }

    /// Slot-holding attempts per policy id, for every policy id that has any,
    /// whether or not the policy still exists.
    pub fn active_counts_by_policy(&mut self) -> Result<BTreeMap<PolicyId, u32>, JournalError> {
        let sql = format!(
            "SELECT policy_id, count(*) FROM attempts WHERE state IN ({}) GROUP BY policy_id",
            active_states_sql()
        );
        self.run(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
            let mut out = BTreeMap::new();
            for row in rows {
                let (policy, n) = row?;
                out.insert(PolicyId::new(policy), int_col(TABLE, "count", "count", n)?);
            }
            Ok(out)
        })
    }
}

/// The SQL list of states that count against capacity, taken from the
/// domain so the journal's counts can never disagree with the allocator.
/// The values are the domain's fixed snake_case names, safe to inline.
fn active_states_sql() -> String {
    AttemptState::ALL
        .iter()
        .filter(|s| s.counts_against_capacity())
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn select_one(
    conn: &Connection,
    column: &str,
    value: &str,
) -> Result<Option<Attempt>, JournalError> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM attempts WHERE {column} = ?1"),
        [value],
        AttemptColumns::read,
    )
    .optional()?
    .map(AttemptColumns::into_attempt)
    .transpose()
}

fn select_many(
    conn: &Connection,
    clause: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Attempt>, JournalError> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM attempts {clause}"))?;
    let rows = stmt.query_map(params, AttemptColumns::read)?;
    rows.map(|row| row?.into_attempt()).collect()
}

/// An attempt as SQLite values. Decoding goes through `Attempt::from_parts`,
/// which refuses rows no sequence of legal transitions could produce.
struct AttemptColumns {
    id: String,
    policy_id: i64,
    runner_name: String,
    state: String,
    outcome: Option<String>,
    failure_reason: Option<String>,
    runner_id: Option<i64>,
    pid: Option<i64>,
    process_start_time: Option<i64>,
    terminate_intent: Option<String>,
    created_at_ms: i64,
    state_changed_at_ms: i64,
    concluded_at_ms: Option<i64>,
    cleaned_at_ms: Option<i64>,
}

impl AttemptColumns {
    /// The columns a transition may change, in the one order both the INSERT and the UPDATE
    /// bind them (right after the key columns), so the two statements cannot drift apart.
    fn changeable(&self) -> [&dyn ToSql; 11] {
        [
            &self.state,
            &self.outcome,
            &self.failure_reason,
            &self.runner_id,
            &self.pid,
            &self.process_start_time,
            &self.terminate_intent,
            &self.created_at_ms,
            &self.state_changed_at_ms,
            &self.concluded_at_ms,
            &self.cleaned_at_ms,
        ]
    }

    fn from_attempt(attempt: &Attempt) -> Result<Self, JournalError> {
        let p = attempt.to_parts();
        Ok(Self {
            id: p.id.as_str().to_owned(),
            policy_id: p.policy_id.get(),
            runner_name: attempt.runner_name().to_owned(),
            state: p.state.as_str().to_owned(),
            outcome: p.outcome.map(|o| o.kind().as_str().to_owned()),
            failure_reason: p
                .outcome
                .and_then(Outcome::failure_reason)
                .map(|r| r.as_str().to_owned()),
            runner_id: p
                .runner_id
                .map(|id| to_sql_int("runner id", id))
                .transpose()?,
            pid: p.process.map(|proc| i64::from(proc.pid)),
            process_start_time: p
                .process
                .map(|proc| to_sql_int("process start time", proc.start_time))
                .transpose()?,
            terminate_intent: p.terminate_intent.map(|t| t.as_str().to_owned()),
            created_at_ms: p.created_at.as_millis(),
            state_changed_at_ms: p.state_changed_at.as_millis(),
            concluded_at_ms: p.concluded_at.map(Timestamp::as_millis),
            cleaned_at_ms: p.cleaned_at.map(Timestamp::as_millis),
        })
    }

    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            policy_id: row.get(1)?,
            runner_name: row.get(2)?,
            state: row.get(3)?,
            outcome: row.get(4)?,
            failure_reason: row.get(5)?,
            runner_id: row.get(6)?,
            pid: row.get(7)?,
            process_start_time: row.get(8)?,
            terminate_intent: row.get(9)?,
            created_at_ms: row.get(10)?,
            state_changed_at_ms: row.get(11)?,
            concluded_at_ms: row.get(12)?,
            cleaned_at_ms: row.get(13)?,
        })
    }

    fn into_attempt(self) -> Result<Attempt, JournalError> {
        let key = self.id.as_str();
        let id: AttemptId = parse_col(TABLE, key, "id", key)?;
        if self.runner_name != id.runner_name() {
            return Err(invalid_row(
                TABLE,
                key,
                format!(
                    "runner_name '{}' is not the name derived from the id ('{}')",
                    self.runner_name,
                    id.runner_name()
                ),
            ));
        }
        let outcome = match self.outcome.as_deref() {
            None if self.failure_reason.is_some() => {
                return Err(invalid_row(TABLE, key, "failure_reason without an outcome"))
            }
            None => None,
            Some(kind) => {
                let kind: OutcomeKind = parse_col(TABLE, key, "outcome", kind)?;
                let reason: Option<FailureReason> = self
                    .failure_reason
                    .as_deref()
                    .map(|r| parse_col(TABLE, key, "failure_reason", r))
                    .transpose()?;
                Some(
                    Outcome::from_parts(kind, reason)
                        .map_err(|e| invalid_row(TABLE, key, format!("outcome: {e}")))?,
                )
            }
        };
        let process = match (self.pid, self.process_start_time) {
            (None, None) => None,
            (Some(pid), Some(start_time)) => Some(ProcessIdentity {
                pid: int_col(TABLE, key, "pid", pid)?,
                start_time: int_col(TABLE, key, "process_start_time", start_time)?,
            }),
            _ => {
                return Err(invalid_row(
                    TABLE,
                    key,
                    "pid and process_start_time must be set together",
                ))
            }
        };
        let parts = AttemptParts {
            id,
            policy_id: PolicyId::new(self.policy_id),
            state: parse_col(TABLE, key, "state", &self.state)?,
            outcome,
            runner_id: self
                .runner_id
                .map(|v| int_col(TABLE, key, "runner_id", v))
                .transpose()?,
            process,
            terminate_intent: self
                .terminate_intent
                .as_deref()
                .map(|t| parse_col(TABLE, key, "terminate_intent", t))
                .transpose()?,
            created_at: Timestamp::from_millis(self.created_at_ms),
            state_changed_at: Timestamp::from_millis(self.state_changed_at_ms),
            concluded_at: self.concluded_at_ms.map(Timestamp::from_millis),
            cleaned_at: self.cleaned_at_ms.map(Timestamp::from_millis),
        };
        Attempt::from_parts(parts).map_err(|e| invalid_row(TABLE, key, e))
    }
}
