//! Policies: what a host does for one target and profile, and the observed policy state.
//!
//! # Policy state transitions
//!
//! `enabled` is the operator's intent and may change at any time; `state` is what the service
//! observed and changes only along this table (anything else is refused):
//!
//! | from                    | to                      | when                                            |
//! |-------------------------|-------------------------|-------------------------------------------------|
//! | `pending`               | `active`                | the loop reached GitHub and the target is usable |
//! | `pending`               | `draining`              | disabled before it became active (leftovers from a crash are still supervised) |
//! | `active`                | `draining`              | disabled or removed: start nothing, supervise what runs |
//! | `draining`              | `disabled`              | the last owned runner ended                     |
//! | `draining`              | `pending`               | re-enabled before the drain finished            |
//! | `disabled`              | `pending`               | re-enabled                                      |
//! | `pending`/`active`/`draining` | `authentication_failed` | GitHub refused the credential (401)     |
//! | `pending`/`active`/`draining` | `repair_required`       | the target needs the operator (403, 404, missing permission) |
//! | `authentication_failed`/`repair_required` | `pending` | the operator fixed it (new credential, repair) |
//! | `authentication_failed`/`repair_required` | `draining` | disabled while broken; its runners are still supervised |
//!
//! Only `active` starts runners. Every state but `disabled` is supervised: a draining or broken
//! policy may still own live runners, and losing them would leak runtimes and registrations.

use crate::ids::PolicyId;
use crate::labels::{LabelSet, ProfileName};
use crate::target::Target;
use crate::text::text_enum;
use thiserror::Error;

text_enum! {
    /// The observed state of a policy (see the module table).
    pub enum PolicyState ("policy state") {
        Pending => "pending",
        Active => "active",
        Draining => "draining",
        Disabled => "disabled",
        AuthenticationFailed => "authentication_failed",
        RepairRequired => "repair_required",
    }
}

impl PolicyState {
    /// Whether the table allows `self -> next`. Staying in the same state is not a transition.
    pub fn can_transition_to(self, next: PolicyState) -> bool {
        use PolicyState::*;
        matches!(
            (self, next),
            (Pending, Active)
                | (Pending, Draining)
                | (Active, Draining)
                | (Draining, Disabled)
                | (Draining, Pending)
                | (Disabled, Pending)
                | (
                    Pending | Active | Draining,
                    AuthenticationFailed | RepairRequired
                )
                | (AuthenticationFailed | RepairRequired, Pending | Draining)
        )
    }

    /// Only an active policy starts runners.
    pub fn starts_runners(self) -> bool {
        self == PolicyState::Active
    }

    /// Whether the loop must keep supervising this policy's attempts.
    pub fn is_supervised(self) -> bool {
        self != PolicyState::Disabled
    }
}

text_enum! {
    /// Where a runner's work directory lives between jobs.
    #[derive(Default)]
    pub enum WorkspaceMode ("workspace mode") {
        /// A fresh directory per attempt, removed entirely when it is cleaned.
        #[default]
        Ephemeral => "ephemeral",
        /// A slot per concurrent runner keeps `_work` between jobs, scrubbed of credentials
        /// (see [`crate::workspace`]).
        Persistent => "persistent",
    }
}

/// Why a policy or a policy change was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    #[error(
        "min_capacity {min} is above max_capacity {max}: lower min_capacity or raise max_capacity"
    )]
    MinAboveMax { min: u32, max: u32 },
    #[error("min_capacity {min} needs a max_capacity: a monitor-only policy (no max_capacity) starts no runners")]
    MinWithoutMax { min: u32 },
    #[error("policy state cannot go from '{from}' to '{to}'")]
    IllegalTransition { from: PolicyState, to: PolicyState },
}

/// What an operator asks for when adding a policy (everything but the journal-assigned id,
/// state and revision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    pub target: Target,
    pub profile: ProfileName,
    pub enabled: bool,
    pub max_capacity: Option<u32>,
    pub min_capacity: u32,
    pub labels: LabelSet,
    pub workspace_mode: WorkspaceMode,
}

impl PolicySpec {
    /// An enabled, monitor-only, ephemeral policy with the default profile.
    pub fn new(target: Target, labels: LabelSet) -> Self {
        PolicySpec {
            target,
            profile: ProfileName::default(),
            enabled: true,
            max_capacity: None,
            min_capacity: 0,
            labels,
            workspace_mode: WorkspaceMode::Ephemeral,
        }
    }

    pub fn validate(&self) -> Result<(), PolicyError> {
        check_capacity(self.max_capacity, self.min_capacity)
    }
}

fn check_capacity(max: Option<u32>, min: u32) -> Result<(), PolicyError> {
    match max {
        Some(max) if min > max => Err(PolicyError::MinAboveMax { min, max }),
        None if min > 0 => Err(PolicyError::MinWithoutMax { min }),
        _ => Ok(()),
    }
}

/// A policy as stored: every field, for the journal to write and to rebuild through
/// [`Policy::from_parts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyParts {
    pub id: PolicyId,
    pub target: Target,
    pub profile: ProfileName,
    pub enabled: bool,
    pub state: PolicyState,
    pub max_capacity: Option<u32>,
    pub min_capacity: u32,
    pub labels: LabelSet,
    pub workspace_mode: WorkspaceMode,
    pub revision: u64,
}

/// One policy. Fields are private so the state only moves along the table and capacities stay
/// consistent. `revision` is the value the journal loaded; the domain never changes it — the
/// journal's compare-and-set update checks it and bumps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    id: PolicyId,
    target: Target,
    profile: ProfileName,
    enabled: bool,
    state: PolicyState,
    max_capacity: Option<u32>,
    min_capacity: u32,
    labels: LabelSet,
    workspace_mode: WorkspaceMode,
    revision: u64,
}

impl Policy {
    /// A new policy with its journal id: state `pending` (or `disabled` when not enabled),
    /// revision 0.
    pub fn new(id: PolicyId, spec: PolicySpec) -> Result<Self, PolicyError> {
        spec.validate()?;
        let state = if spec.enabled {
            PolicyState::Pending
        } else {
            PolicyState::Disabled
        };
        Ok(Policy {
            id,
            target: spec.target,
            profile: spec.profile,
            enabled: spec.enabled,
            state,
            max_capacity: spec.max_capacity,
            min_capacity: spec.min_capacity,
            labels: spec.labels,
            workspace_mode: spec.workspace_mode,
            revision: 0,
        })
    }

    /// Rebuilds a stored policy, refusing an inconsistent row.
    pub fn from_parts(parts: PolicyParts) -> Result<Self, PolicyError> {
        check_capacity(parts.max_capacity, parts.min_capacity)?;
        Ok(Policy {
            id: parts.id,
            target: parts.target,
            profile: parts.profile,
            enabled: parts.enabled,
            state: parts.state,
            max_capacity: parts.max_capacity,
            min_capacity: parts.min_capacity,
            labels: parts.labels,
            workspace_mode: parts.workspace_mode,
            revision: parts.revision,
        })
    }

    pub fn to_parts(&self) -> PolicyParts {
        PolicyParts {
            id: self.id,
            target: self.target.clone(),
            profile: self.profile.clone(),
            enabled: self.enabled,
            state: self.state,
            max_capacity: self.max_capacity,
            min_capacity: self.min_capacity,
            labels: self.labels.clone(),
            workspace_mode: self.workspace_mode,
            revision: self.revision,
        }
    }

    pub fn id(&self) -> PolicyId {
        self.id
    }
    pub fn target(&self) -> &Target {
        &self.target
    }
    pub fn profile(&self) -> &ProfileName {
        &self.profile
    }
    pub fn enabled(&self) -> bool {
        self.enabled
    }
    pub fn state(&self) -> PolicyState {
        self.state
    }
    pub fn max_capacity(&self) -> Option<u32> {
        self.max_capacity
    }
    pub fn min_capacity(&self) -> u32 {
        self.min_capacity
    }
    pub fn labels(&self) -> &LabelSet {
        &self.labels
    }
    pub fn workspace_mode(&self) -> WorkspaceMode {
        self.workspace_mode
    }
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Monitor-only policies watch demand and never start a runner.
    pub fn is_monitor_only(&self) -> bool {
        self.max_capacity.is_none()
    }

    /// Only an active policy starts runners.
    pub fn starts_runners(&self) -> bool {
        self.state.starts_runners()
    }

    /// Records the operator's intent; the state follows through [`Policy::intended_transition`].
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    /// Sets both capacities at once (they are validated together); unchanged on error.
    pub fn set_capacity(&mut self, max: Option<u32>, min: u32) -> Result<(), PolicyError> {
        check_capacity(max, min)?;
        self.max_capacity = max;
        self.min_capacity = min;
        Ok(())
    }

    pub fn set_workspace_mode(&mut self, mode: WorkspaceMode) {
        self.workspace_mode = mode;
    }

    pub fn set_labels(&mut self, labels: LabelSet) {
        self.labels = labels;
    }

    /// Moves the observed state along the table; unchanged on error. Re-entering the current
    /// state is accepted as a no-op.
    pub fn transition_to(&mut self, next: PolicyState) -> Result<(), PolicyError> {
        if next == self.state {
            return Ok(());
        }
        if !self.state.can_transition_to(next) {
            return Err(PolicyError::IllegalTransition {
                from: self.state,
                to: next,
            });
        }
        self.state = next;
        Ok(())
    }

    /// The transition the operator's intent calls for, given how many attempts the policy still
    /// owns (non-terminal ones): disable → drain → disabled once empty; enable → pending.
    /// `pending -> active` and the failure states are decided by the loop from GitHub's answers.
    pub fn intended_transition(&self, active_owned: u32) -> Option<PolicyState> {
        use PolicyState::*;
        match (self.enabled, self.state) {
            (false, Pending | Active | AuthenticationFailed | RepairRequired) => Some(Draining),
            (false, Draining) if active_owned == 0 => Some(Disabled),
            (true, Disabled | Draining) => Some(Pending),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PolicySpec {
        PolicySpec::new(
            Target::parse("me/app").unwrap(),
            LabelSet::parse(["rm-home-linux-x64"]).unwrap(),
        )
    }

    #[test]
    fn transition_table_is_exactly_the_documented_one() {
        use PolicyState::*;
        let allowed = [
            (Pending, Active),
            (Pending, Draining),
            (Active, Draining),
            (Draining, Disabled),
            (Draining, Pending),
            (Disabled, Pending),
            (Pending, AuthenticationFailed),
            (Active, AuthenticationFailed),
            (Draining, AuthenticationFailed),
            (Pending, RepairRequired),
            (Active, RepairRequired),
            (Draining, RepairRequired),
            (AuthenticationFailed, Pending),
            (RepairRequired, Pending),
            (AuthenticationFailed, Draining),
            (RepairRequired, Draining),
        ];
        for from in PolicyState::ALL {
            for to in PolicyState::ALL {
                assert_eq!(
                    from.can_transition_to(*to),
                    allowed.contains(&(*from, *to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn only_active_starts_runners_and_only_disabled_is_unsupervised() {
        for s in PolicyState::ALL {
            assert_eq!(s.starts_runners(), *s == PolicyState::Active);
            assert_eq!(s.is_supervised(), *s != PolicyState::Disabled);
        }
    }

    #[test]
    fn illegal_transition_leaves_the_policy_unchanged() {
        let mut p = Policy::new(PolicyId::new(1), spec()).unwrap();
        assert_eq!(p.state(), PolicyState::Pending);
        let before = p.clone();
        let err = p.transition_to(PolicyState::Disabled).unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy state cannot go from 'pending' to 'disabled'"
        );
        assert_eq!(p, before);
        p.transition_to(PolicyState::Active).unwrap();
        assert!(p.starts_runners());
    }

    #[test]
    fn capacities_are_validated() {
        let mut s = spec();
        s.max_capacity = Some(2);
        s.min_capacity = 3;
        assert_eq!(
            Policy::new(PolicyId::new(1), s.clone()).unwrap_err(),
            PolicyError::MinAboveMax { min: 3, max: 2 }
        );
        s.max_capacity = None;
        assert_eq!(s.validate(), Err(PolicyError::MinWithoutMax { min: 3 }));
        let mut p = Policy::new(PolicyId::new(1), spec()).unwrap();
        assert!(p.is_monitor_only());
        assert!(p.set_capacity(Some(1), 2).is_err());
        assert!(p.is_monitor_only());
        p.set_capacity(Some(4), 1).unwrap();
        assert_eq!((p.max_capacity(), p.min_capacity()), (Some(4), 1));
    }

    #[test]
    fn persistent_workspace_round_trips() {
        let mut s = spec();
        s.workspace_mode = WorkspaceMode::Persistent;
        assert_eq!(s.validate(), Ok(()));
        let mut p = Policy::new(PolicyId::new(1), s).unwrap();
        assert_eq!(p.workspace_mode(), WorkspaceMode::Persistent);
        let back = Policy::from_parts(p.to_parts()).unwrap();
        assert_eq!(back.workspace_mode(), WorkspaceMode::Persistent);
        p.set_workspace_mode(WorkspaceMode::Ephemeral);
        assert_eq!(p.workspace_mode(), WorkspaceMode::Ephemeral);
    }

    #[test]
    fn parts_round_trip() {
        let mut p = Policy::new(PolicyId::new(9), spec()).unwrap();
        p.set_capacity(Some(3), 1).unwrap();
        p.transition_to(PolicyState::Active).unwrap();
        assert_eq!(Policy::from_parts(p.to_parts()).unwrap(), p);
    }

    #[test]
    fn intent_drives_drain_and_reenable() {
        let mut p = Policy::new(PolicyId::new(1), spec()).unwrap();
        p.transition_to(PolicyState::Active).unwrap();
        assert_eq!(p.intended_transition(2), None);
        p.set_enabled(false);
        assert_eq!(p.intended_transition(2), Some(PolicyState::Draining));
        p.transition_to(PolicyState::Draining).unwrap();
        assert_eq!(p.intended_transition(1), None);
        assert_eq!(p.intended_transition(0), Some(PolicyState::Disabled));
        p.transition_to(PolicyState::Disabled).unwrap();
        p.set_enabled(true);
        assert_eq!(p.intended_transition(0), Some(PolicyState::Pending));
        let disabled = Policy::new(
            PolicyId::new(2),
            PolicySpec {
                enabled: false,
                ..spec()
            },
        )
        .unwrap();
        assert_eq!(disabled.state(), PolicyState::Disabled);
    }

    #[test]
    fn text_forms_round_trip() {
        for s in PolicyState::ALL {
            assert_eq!(s.as_str().parse::<PolicyState>(), Ok(*s));
        }
        assert_eq!(
            PolicyState::AuthenticationFailed.as_str(),
            "authentication_failed"
        );
        assert_eq!(WorkspaceMode::default().as_str(), "ephemeral");
        assert_eq!(
            "persistent".parse::<WorkspaceMode>(),
            Ok(WorkspaceMode::Persistent)
        );
    }
}
