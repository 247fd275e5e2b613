//! How many runners to start, per policy, this pass.
//!
//! `to_start = min(clamp(demand, min, max) − active_owned, host_capacity − active_total)`,
//! never negative. When several policies compete for the host's headroom it is granted in
//! ascending policy id order, and the grants together never exceed it. The agent re-reads the
//! headroom under the host-wide allocation lock before each start ([`headroom`]), so two loops
//! never overshoot together.

use crate::ids::PolicyId;
use crate::policy::{Policy, PolicyState};

/// The host's free runner slots: `host_capacity − active_total`, never negative.
pub fn headroom(host_capacity: u32, active_total: u32) -> u32 {
    host_capacity.saturating_sub(active_total)
}

/// One policy's view for this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDemand {
    pub policy_id: PolicyId,
    pub state: PolicyState,
    /// `None`: monitor only.
    pub max_capacity: Option<u32>,
    pub min_capacity: u32,
    /// Matching queued jobs (see [`crate::demand`]).
    pub demand: u32,
    /// This policy's attempts that count against capacity.
    pub active_owned: u32,
}

impl PolicyDemand {
    pub fn from_policy(policy: &Policy, demand: u32, active_owned: u32) -> Self {
        PolicyDemand {
            policy_id: policy.id(),
            state: policy.state(),
            max_capacity: policy.max_capacity(),
            min_capacity: policy.min_capacity(),
            demand,
            active_owned,
        }
    }
}

/// Everything the allocator needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationInput {
    pub host_capacity: u32,
    /// Every attempt on this host that counts against capacity, including attempts of unknown
    /// policies (no ownership proof, but they hold a slot).
    pub active_total: u32,
    /// False while the service is paused, shutting down or draining for an upgrade.
    pub reconciling: bool,
    pub policies: Vec<PolicyDemand>,
}

/// Why a policy got what it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// The policy's wanted count (demand raised to `min_capacity`) was granted in full.
    Demand,
    /// Demand exceeds `max_capacity`; the grant stops there.
    MaxCapacity,
    /// The host had fewer free slots than the policy wanted.
    HostCapacity,
    /// No `max_capacity`: watch, never start.
    MonitorOnly,
    /// The policy is not `active`, or the service is not reconciling (paused, shutting down).
    NotReconciling,
    /// The policy already runs what it wants.
    Satisfied,
}

/// One policy's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub policy_id: PolicyId,
    pub to_start: u32,
    pub limited_by: Limit,
}

/// The grants, in ascending policy id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub grants: Vec<Grant>,
}

impl Allocation {
    pub fn total(&self) -> u32 {
        self.grants.iter().map(|g| g.to_start).sum()
    }

    pub fn for_policy(&self, id: PolicyId) -> Option<&Grant> {
        self.grants.iter().find(|g| g.policy_id == id)
    }
}

/// Computes this pass's grants (see the module docs).
pub fn allocate(input: &AllocationInput) -> Allocation {
    let mut policies: Vec<&PolicyDemand> = input.policies.iter().collect();
    policies.sort_by_key(|p| p.policy_id);
    // A caller's total that is smaller than the owned counts is stale; trust the larger.
    let owned_sum = policies
        .iter()
        .fold(0u32, |acc, p| acc.saturating_add(p.active_owned));
    let mut free = headroom(input.host_capacity, input.active_total.max(owned_sum));

    let grants = policies
        .into_iter()
        .map(|p| {
            let (to_start, limited_by) = grant_one(p, input.reconciling, free);
            free -= to_start;
            Grant {
                policy_id: p.policy_id,
                to_start,
                limited_by,
            }
        })
        .collect();
    Allocation { grants }
}

fn grant_one(p: &PolicyDemand, reconciling: bool, free: u32) -> (u32, Limit) {
    if !reconciling || !p.state.starts_runners() {
        return (0, Limit::NotReconciling);
    }
    let Some(max) = p.max_capacity else {
        return (0, Limit::MonitorOnly);
    };
    let min = p.min_capacity.min(max);
    let wanted = p.demand.clamp(min, max);
    let capped = p.demand > max;
    let need = wanted.saturating_sub(p.active_owned);
    if need == 0 {
        let limit = if capped && p.demand > p.active_owned {
            Limit::MaxCapacity
        } else {
            Limit::Satisfied
        };
        return (0, limit);
    }
    if free < need {
        return (free, Limit::HostCapacity);
    }
    (
        need,
        if capped {
            Limit::MaxCapacity
        } else {
            Limit::Demand
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn active(id: i64, max: Option<u32>, min: u32, demand: u32, owned: u32) -> PolicyDemand {
        PolicyDemand {
            policy_id: PolicyId::new(id),
            state: PolicyState::Active,
            max_capacity: max,
            min_capacity: min,
            demand,
            active_owned: owned,
        }
    }

    fn input(capacity: u32, total: u32, policies: Vec<PolicyDemand>) -> AllocationInput {
        AllocationInput {
            host_capacity: capacity,
            active_total: total,
            reconciling: true,
            policies,
        }
    }

    fn one(inp: &AllocationInput) -> Grant {
        allocate(inp).grants[0]
    }

    #[test]
    fn demand_is_granted_when_everything_allows_it() {
        let g = one(&input(4, 0, vec![active(1, Some(3), 0, 2, 0)]));
        assert_eq!((g.to_start, g.limited_by), (2, Limit::Demand));
    }

    #[test]
    fn max_capacity_caps_demand() {
        let g = one(&input(10, 1, vec![active(1, Some(3), 0, 7, 1)]));
        assert_eq!((g.to_start, g.limited_by), (2, Limit::MaxCapacity));
        let g = one(&input(10, 3, vec![active(1, Some(3), 0, 7, 3)]));
        assert_eq!((g.to_start, g.limited_by), (0, Limit::MaxCapacity));
    }

    #[test]
    fn host_capacity_caps_the_grant_and_counts_unknown_attempts() {
        // 1 owned + 2 of an unknown policy: 4 − 3 = 1 free.
        let g = one(&input(4, 3, vec![active(1, Some(5), 0, 5, 1)]));
        assert_eq!((g.to_start, g.limited_by), (1, Limit::HostCapacity));
        let g = one(&input(2, 5, vec![active(1, Some(5), 0, 5, 0)]));
        assert_eq!((g.to_start, g.limited_by), (0, Limit::HostCapacity));
    }

    #[test]
    fn min_capacity_keeps_warm_runners_without_demand() {
        let g = one(&input(4, 0, vec![active(1, Some(3), 2, 0, 0)]));
        assert_eq!((g.to_start, g.limited_by), (2, Limit::Demand));
        let g = one(&input(4, 2, vec![active(1, Some(3), 2, 0, 2)]));
        assert_eq!((g.to_start, g.limited_by), (0, Limit::Satisfied));
    }

    #[test]
    fn monitor_only_and_inactive_policies_start_nothing() {
        let g = one(&input(4, 0, vec![active(1, None, 0, 3, 0)]));
        assert_eq!((g.to_start, g.limited_by), (0, Limit::MonitorOnly));
        for state in PolicyState::ALL
            .iter()
            .filter(|s| **s != PolicyState::Active)
        {
            let mut p = active(1, Some(3), 0, 3, 0);
            p.state = *state;
            let g = one(&input(4, 0, vec![p]));
            assert_eq!(
                (g.to_start, g.limited_by),
                (0, Limit::NotReconciling),
                "{state}"
            );
        }
        let mut paused = input(4, 0, vec![active(1, Some(3), 0, 3, 0)]);
        paused.reconciling = false;
        assert_eq!(one(&paused).limited_by, Limit::NotReconciling);
    }

    #[test]
    fn owned_above_wanted_is_never_negative() {
        let g = one(&input(4, 3, vec![active(1, Some(3), 0, 1, 3)]));
        assert_eq!((g.to_start, g.limited_by), (0, Limit::Satisfied));
    }

    #[test]
    fn competing_policies_share_headroom_in_policy_id_order() {
        let a = allocate(&input(
            3,
            0,
            vec![active(7, Some(5), 0, 2, 0), active(2, Some(5), 0, 2, 0)],
        ));
        assert_eq!(a.grants[0].policy_id, PolicyId::new(2));
        assert_eq!(
            (a.grants[0].to_start, a.grants[0].limited_by),
            (2, Limit::Demand)
        );
        assert_eq!(
            (a.grants[1].to_start, a.grants[1].limited_by),
            (1, Limit::HostCapacity)
        );
        assert_eq!(a.total(), 3);
        assert_eq!(a.for_policy(PolicyId::new(7)).map(|g| g.to_start), Some(1));
    }

    #[test]
    fn a_stale_total_below_the_owned_sum_is_not_trusted() {
        let a = allocate(&input(
            3,
            0,
            vec![active(1, Some(3), 0, 3, 2), active(2, Some(3), 0, 3, 1)],
        ));
        assert_eq!(a.total(), 0);
    }

    #[test]
    fn headroom_never_underflows() {
        assert_eq!(headroom(2, 5), 0);
        assert_eq!(headroom(5, 2), 3);
    }
}
