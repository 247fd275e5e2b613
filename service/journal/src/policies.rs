//! Policies: one row per (target, profile), updated only by compare-and-set on
//! `revision` so that two writers (a loop and the CLI, say) never overwrite
//! each other silently.

use rusqlite::{params_from_iter, Connection, OptionalExtension, Row, ToSql, TransactionBehavior};

use rm_core::{LabelSet, Policy, PolicyId, PolicyParts, PolicySpec, Target};

use crate::codec::{self, int_col, invalid_row, parse_col, to_sql_int, LABEL_SEPARATOR};
use crate::error::JournalError;
use crate::Journal;

const TABLE: &str = "policies";
const COLUMNS: &str = "id, target, profile, enabled, state, max_capacity, min_capacity, labels, \
                       workspace_mode, revision";

impl Journal {
    /// Store a new policy. Its state is the domain's initial state (`pending`,
    /// or `disabled` if not enabled) and its revision is 1. A second policy for
    /// the same target (case-insensitively) and profile is
    /// [`JournalError::Duplicate`].
    pub fn insert_policy(&mut self, spec: &PolicySpec) -> Result<Policy, JournalError> {
        // Let the domain validate the spec and pick the initial state.
        let initial = Policy::new(PolicyId::new(0), spec.clone()).map_err(|e| {
            JournalError::InvalidInput {
                what: "policy",
                reason: e.to_string(),
            }
        })?;
        let parts = initial.to_parts();
        let values = PolicyValues::new(&parts);
        self.run(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = codec::now_ms();
            let inserted = tx.execute(
                "INSERT INTO policies (target, profile, enabled, state, max_capacity, min_capacity,
                                       labels, workspace_mode, revision, created_at_ms, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, ?9)",
                params_from_iter(values.bind().into_iter().chain([&now as &dyn ToSql])),
            );
            match inserted {
                Ok(_) => {}
                Err(e) if codec::is_unique_violation(&e) => return Err(duplicate(&parts)),
                Err(e) => return Err(e.into()),
            }
            let id = PolicyId::new(tx.last_insert_rowid());
            let stored = select_policy(&tx, id)?.ok_or_else(|| JournalError::NotFound {
                entity: "policy",
                id: id.to_string(),
            })?;
            tx.commit()?;
            Ok(stored)
        })
    }

    /// The policy with `id`, if any.
    pub fn get_policy(&mut self, id: PolicyId) -> Result<Option<Policy>, JournalError> {
        self.run(|conn| select_policy(conn, id))
    }

    /// Every policy, by id.
    pub fn list_policies(&mut self) -> Result<Vec<Policy>, JournalError> {
        self.run(|conn| {
            let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM policies ORDER BY id"))?;
            let rows = stmt.query_map([], PolicyRow::read)?;
            rows.map(|row| row?.into_policy()).collect()
        })
    }

    /// Every policy of `target` (compared case-insensitively, as stored), by id. Each loop
    /// re-reads its policies every pass: this reads only its own rows through the
    /// `(target, profile)` index instead of listing every policy of the host.
    pub fn policies_for_target(&mut self, target: &Target) -> Result<Vec<Policy>, JournalError> {
        let target = target.to_string();
        self.run(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM policies WHERE target = ?1 ORDER BY id"
            ))?;
            let rows = stmt.query_map([&target], PolicyRow::read)?;
            rows.map(|row| row?.into_policy()).collect()
        })
    }

    /// Persist every field of `policy` if, and only if, the stored revision is
    /// still `policy.revision()`. Returns the policy as stored, with the
    /// revision bumped by one. A stale revision is [`JournalError::Conflict`]
    /// and writes nothing; an absent policy is [`JournalError::NotFound`].
    pub fn update_policy(&mut self, policy: &Policy) -> Result<Policy, JournalError> {
        let parts = policy.to_parts();
        let expected = to_sql_int("policy revision", parts.revision)?;
        let values = PolicyValues::new(&parts);
        self.run(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx.execute(
                "UPDATE policies
                    SET target = ?3, profile = ?4, enabled = ?5, state = ?6, max_capacity = ?7,
                        min_capacity = ?8, labels = ?9, workspace_mode = ?10,
                        revision = revision + 1, updated_at_ms = ?11
                  WHERE id = ?1 AND revision = ?2",
                params_from_iter(
                    [&parts.id.get() as &dyn ToSql, &expected]
                        .into_iter()
                        .chain(values.bind())
                        .chain([&codec::now_ms() as &dyn ToSql]),
                ),
            );
            let changed = match changed {
                Ok(n) => n,
                Err(e) if codec::is_unique_violation(&e) => return Err(duplicate(&parts)),
                Err(e) => return Err(e.into()),
            };
            if changed == 0 {
                let found: Option<i64> = tx
                    .query_row(
                        "SELECT revision FROM policies WHERE id = ?1",
                        [parts.id.get()],
                        |r| r.get(0),
                    )
                    .optional()?;
                return Err(match found {
                    None => JournalError::NotFound {
                        entity: "policy",
                        id: parts.id.to_string(),
                    },
                    Some(found) => JournalError::Conflict {
                        entity: "policy",
                        id: parts.id.to_string(),
                        detail: format!(
                            "expected revision {}, found revision {found}",
                            parts.revision
                        ),
                    },
                });
            }
            let stored = select_policy(&tx, parts.id)?.ok_or_else(|| JournalError::NotFound {
                entity: "policy",
                id: parts.id.to_string(),
            })?;
            tx.commit()?;
            Ok(stored)
        })
    }

    /// Remove a policy. Its attempts stay in the journal: they are still
    /// supervised, cleaned and counted against host capacity.
    pub fn delete_policy(&mut self, id: PolicyId) -> Result<(), JournalError> {
        self.run(|conn| {
            let deleted = conn.execute("DELETE FROM policies WHERE id = ?1", [id.get()])?;
            if deleted == 0 {
                return Err(JournalError::NotFound {
                    entity: "policy",
                    id: id.to_string(),
                });
            }
            Ok(())
        })
    }
}

/// A policy's stored fields in SQL form, bound in the one order the INSERT and the UPDATE share
/// so the two statements cannot drift apart.
struct PolicyValues<'a> {
    target: String,
    profile: &'a str,
    enabled: bool,
    state: &'a str,
    max_capacity: Option<u32>,
    min_capacity: u32,
    labels: String,
    workspace_mode: &'a str,
}

impl<'a> PolicyValues<'a> {
    fn new(parts: &'a PolicyParts) -> Self {
        Self {
            target: parts.target.to_string(),
            profile: parts.profile.as_str(),
            enabled: parts.enabled,
            state: parts.state.as_str(),
            max_capacity: parts.max_capacity,
            min_capacity: parts.min_capacity,
            labels: encode_labels(&parts.labels),
            workspace_mode: parts.workspace_mode.as_str(),
        }
    }

    /// target, profile, enabled, state, max_capacity, min_capacity, labels, workspace_mode.
    fn bind(&self) -> [&dyn ToSql; 8] {
        [
            &self.target,
            &self.profile,
            &self.enabled,
            &self.state,
            &self.max_capacity,
            &self.min_capacity,
            &self.labels,
            &self.workspace_mode,
        ]
    }
}

/// The refusal for a second policy on the same target and profile.
fn duplicate(parts: &PolicyParts) -> JournalError {
    JournalError::Duplicate {
        entity: "policy",
        key: format!("target {} and profile {}", parts.target, parts.profile),
    }
}

fn select_policy(conn: &Connection, id: PolicyId) -> Result<Option<Policy>, JournalError> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM policies WHERE id = ?1"),
        [id.get()],
        PolicyRow::read,
    )
    .optional()?
    .map(PolicyRow::into_policy)
    .transpose()
}

fn encode_labels(labels: &LabelSet) -> String {
    let mut out = String::new();
    for (i, label) in labels.iter().enumerate() {
        if i > 0 {
            out.push(LABEL_SEPARATOR);
        }
        out.push_str(label.as_str());
    }
    out
}

/// A policy row as raw columns, decoded into a [`Policy`] in a second step so
/// a bad value becomes a typed error rather than a failed row read.
struct PolicyRow {
    id: i64,
    target: String,
    profile: String,
    enabled: bool,
    state: String,
    max_capacity: Option<i64>,
    min_capacity: i64,
    labels: String,
    workspace_mode: String,
    revision: i64,
}

impl PolicyRow {
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            target: row.get(1)?,
            profile: row.get(2)?,
            enabled: row.get(3)?,
            state: row.get(4)?,
            max_capacity: row.get(5)?,
            min_capacity: row.get(6)?,
            labels: row.get(7)?,
            workspace_mode: row.get(8)?,
            revision: row.get(9)?,
        })
    }

    fn into_policy(self) -> Result<Policy, JournalError> {
        let key = self.id.to_string();
        let key = key.as_str();
        let labels = LabelSet::parse(self.labels.split(LABEL_SEPARATOR))
            .map_err(|e| invalid_row(TABLE, key, format!("labels: {e}")))?;
        let parts = PolicyParts {
            id: PolicyId::new(self.id),
            target: parse_col(TABLE, key, "target", &self.target)?,
            profile: parse_col(TABLE, key, "profile", &self.profile)?,
            enabled: self.enabled,
            state: parse_col(TABLE, key, "state", &self.state)?,
            max_capacity: self
                .max_capacity
                .map(|v| int_col(TABLE, key, "max_capacity", v))
                .transpose()?,
            min_capacity: int_col(TABLE, key, "min_capacity", self.min_capacity)?,
            labels,
            workspace_mode: parse_col(TABLE, key, "workspace_mode", &self.workspace_mode)?,
            revision: int_col(TABLE, key, "revision", self.revision)?,
        };
        Policy::from_parts(parts).map_err(|e| invalid_row(TABLE, key, e))
    }
}
