//! How many runners to start, per policy, this pass.
//!
//! `to_start = min(max(demand, min) − unassigned, max − active_owned, host_capacity −
//! active_total)`, never negative. `unassigned` counts the policy's runners that have not taken
//! a job yet (allocated, jit_received, starting, idle): they are the supply that can still serve
//! a queued job. A runner that took a job is supply already spent (its job is no longer queued),
//! so it never holds back a queued job; it counts against the ceilings only, as every live
//! attempt does. `min_capacity` (warm runners) is met by unassigned runners only.
//!
//! When several policies compete for the host's headroom it is granted in ascending policy id
//! order, and the grants together never exceed it. The agent re-reads the headroom under the
//! host-wide allocation lock before each start ([`headroom`]), so two loops never overshoot
//! together.

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
    /// This policy's attempts that count against capacity (every live one, busy or not).
    pub active_owned: u32,
    /// Of those, the ones that have not taken a job as far as anyone knows (the journal's
    /// state, GitHub's job listings, the runner's diagnostics): supply for queued jobs.
    /// Never more than `active_owned` (a larger value is read as `active_owned`).
    pub unassigned: u32,
}

impl PolicyDemand {
    pub fn from_policy(policy: &Policy, demand: u32, active_owned: u32, unassigned: u32) -> Self {
        PolicyDemand {
            policy_id: policy.id(),
            state: policy.state(),
            max_capacity: policy.max_capacity(),
            min_capacity: policy.min_capacity(),
            demand,
            active_owned,
            unassigned,
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
    /// `max_capacity` stops the grant below what demand asks for.
    MaxCapacity,
    /// The host had fewer free slots than the policy wanted.
    HostCapacity,
    /// No `max_capacity`: watch, never start.
    MonitorOnly,
    /// The policy is not `active`, or the service is not reconciling (paused, shutting down).
    NotReconciling,
    /// Runners that have not taken a job yet already cover what the policy wants.
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
    let unassigned = p.unassigned.min(p.active_owned);
    // What the queued jobs (or the warm minimum) still need beyond the runners that can take
    // them, and what the policy's ceiling still allows.
    let need = p.demand.max(min).saturating_sub(unassigned);
    let room = max.saturating_sub(p.active_owned);
    if need == 0 {
        return (0, Limit::Satisfied);
    }
    let (wanted, limit) = if room < need {
        (room, Limit::MaxCapacity)
    } else {
        (need, Limit::Demand)
    };
    if free < wanted {
        return (free, Limit::HostCapacity);
    }
    (wanted, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy whose `owned` runners have none of them taken a job yet.
    fn active(id: i64, max: Option<u32>, min: u32, demand: u32, owned: u32) -> PolicyDemand {
        busy(id, max, min, demand, owned, 0)
    }

    /// A policy with `owned` live runners, `busy` of which took a job.
    fn busy(
        id: i64,
        max: Option<u32>,
        min: u32,
        demand: u32,
        owned: u32,
        busy: u32,
    ) -> PolicyDemand {
        PolicyDemand {
            policy_id: PolicyId::new(id),
            state: PolicyState::Active,
            max_capacity: max,
            min_capacity: min,
            demand,
            active_owned: owned,
            unassigned: owned - busy,
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
    fn busy_runners_do_not_hold_back_queued_jobs() {
        // The reported case: capacity 4, one runner busy on the first job, a second job queued.
        let g = one(&input(4, 1, vec![busy(1, Some(4), 0, 1, 1, 1)]));
        assert_eq!((g.to_start, g.limited_by), (1, Limit::Demand));
        // Two busy, one queued job already has a runner coming up: nothing more to start.
        let g = one(&input(4, 3, vec![busy(1, Some(4), 0, 1, 3, 2)]));
        assert_eq!((g.to_start, g.limited_by), (0, Limit::Satisfied));
        // Busy runners still count against the policy's ceiling and the host's.
        let g = one(&input(8, 3, vec![busy(1, Some(4), 0, 5, 3, 3)]));
        assert_eq!((g.to_start, g.limited_by), (1, Limit::MaxCapacity));
        let g = one(&input(4, 3, vec![busy(1, Some(8), 0, 5, 3, 3)]));
        assert_eq!((g.to_start, g.limited_by), (1, Limit::HostCapacity));
    }

    #[test]
    fn warm_minimum_is_met_by_runners_without_a_job_only() {
        // min 2: one idle runner and one busy one leave one warm runner to start.
        let g = one(&input(4, 2, vec![busy(1, Some(3), 2, 0, 2, 1)]));
        assert_eq!((g.to_start, g.limited_by), (1, Limit::Demand));
    }

    #[test]
    fn an_unassigned_count_above_the_owned_one_is_read_as_the_owned_one() {
        let mut p = active(1, Some(4), 0, 3, 1);
        p.unassigned = 9;
        let g = one(&input(4, 1, vec![p]));
        assert_eq!((g.to_start, g.limited_by), (2, Limit::Demand));
    }

    #[test]
    fn headroom_never_underflows() {
        assert_eq!(headroom(2, 5), 0);
        assert_eq!(headroom(5, 2), 3);
    }
}
