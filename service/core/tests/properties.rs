//! Property tests: random event sequences, random allocator inputs and random observations.

// Helpers outside #[test] functions are test code too; a panic here is a failed test.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use rm_core::*;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Event {
    Jit(u64),
    Started(ProcessIdentity),
    Observe(Observed),
    Intent(TerminateReason),
    Conclude(Outcome),
    WorkerLog,
    Cleaned,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::CompletedJob),
        Just(Outcome::ExitedIdleWithoutWork),
        Just(Outcome::Orphaned),
        proptest::sample::select(FailureReason::ALL).prop_map(Outcome::Failed),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        any::<u64>().prop_map(Event::Jit),
        (any::<u32>(), any::<u64>())
            .prop_map(|(pid, start_time)| Event::Started(ProcessIdentity { pid, start_time })),
        proptest::sample::select(Observed::ALL).prop_map(Event::Observe),
        proptest::sample::select(TerminateReason::ALL).prop_map(Event::Intent),
        outcome().prop_map(Event::Conclude),
        Just(Event::WorkerLog),
        Just(Event::Cleaned),
    ]
}

/// Events with the time at which they happen (the clock may step back a little).
fn events() -> impl Strategy<Value = Vec<(Event, i64)>> {
    proptest::collection::vec((event(), -5_000i64..400_000), 0..24)
}

fn apply(a: &mut Attempt, e: &Event, now: Timestamp) -> Result<(), TransitionError> {
    match e {
        Event::Jit(id) => a.record_jit(*id, now),
        Event::Started(p) => a.record_started(*p, now),
        Event::Observe(o) => a.observe(*o, now),
        Event::Intent(r) => a.record_terminate_intent(*r),
        Event::Conclude(o) => a.conclude(*o, now),
        Event::WorkerLog => a.conclude_after_worker_log(now),
        Event::Cleaned => a.mark_cleaned(now),
    }
}

/// The state edges of LIFECYCLE.md "Attempt states", written out independently of the crate.
fn edge_allowed(from: AttemptState, to: AttemptState) -> bool {
    use AttemptState::*;
    from == to
        || matches!(
            (from, to),
            (Allocated, JitReceived)
                | (JitReceived, Starting)
                | (Starting, Idle | Busy)
                | (Idle, Busy)
                | (Busy, Idle)
                | (Allocated | JitReceived, Failed)
                | (Starting | Idle | Busy, Finished | Failed | Orphaned)
                | (Finished | Failed | Orphaned, Cleaned)
        )
}

fn start() -> Attempt {
    Attempt::allocate(
        AttemptId::new("prop0001").unwrap(),
        PolicyId::new(1),
        Timestamp::from_millis(1_000_000),
    )
}

fn build(evs: &[(Event, i64)]) -> Attempt {
    let mut a = start();
    let mut now = 1_000_000i64;
    for (e, dt) in evs {
        now += dt;
        let _ = apply(&mut a, e, Timestamp::from_millis(now));
    }
    a
}

fn github() -> impl Strategy<Value = GitHubView> {
    prop_oneof![
        Just(GitHubView::Unreachable),
        Just(GitHubView::NotRegistered),
        any::<bool>().prop_map(|busy| GitHubView::Registered { busy }),
    ]
}

fn evidence() -> impl Strategy<Value = Evidence> {
    prop_oneof![
        Just(Evidence::JobCompleted),
        Just(Evidence::JobStarted),
        Just(Evidence::RunnerLogOnly),
        Just(Evidence::None),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn event_sequences_never_reach_an_illegal_state(evs in events()) {
        let mut a = start();
        let mut now = 1_000_000i64;
        for (e, dt) in &evs {
            now += dt;
            let before = a.clone();
            match apply(&mut a, e, Timestamp::from_millis(now)) {
                Err(_) => prop_assert_eq!(&a, &before, "a refused event changed the attempt"),
                Ok(()) => {
                    prop_assert!(
                        edge_allowed(before.state(), a.state()),
                        "{} -> {} via {:?}", before.state(), a.state(), e
                    );
                    if a.outcome() == Some(Outcome::CompletedJob) && before.outcome().is_none() {
                        prop_assert!(
                            before.state() == AttemptState::Busy || matches!(e, Event::WorkerLog)
                        );
                    }
                    prop_assert!(a.state_changed_at() >= before.state_changed_at());
                }
            }
            prop_assert_eq!(a.outcome().is_some(), a.is_terminal());
            prop_assert_eq!(a.counts_against_capacity(), !a.is_terminal());
            // Whatever is reached, the journal can store it and load it back.
            let reloaded = Attempt::from_parts(a.to_parts());
            prop_assert_eq!(reloaded, Ok(a.clone()));
        }
    }

    #[test]
    fn the_allocator_never_grants_beyond_host_or_policy_capacity(
        host_capacity in 0u32..12,
        reconciling in any::<bool>(),
        policies in proptest::collection::vec(
            (
                proptest::sample::select(PolicyState::ALL),
                proptest::option::of(0u32..8),
                0u32..8,
                0u32..20,
                1i64..50,
            ),
            0..6,
        ),
        attempts in proptest::collection::vec(
            (0usize..8, proptest::sample::select(AttemptState::ALL)),
            0..20,
        ),
    ) {
        // Attempts on policy indexes beyond the list belong to unknown policies.
        let mut seen = std::collections::BTreeSet::new();
        let mut demands = Vec::new();
        for (i, (state, max, min, demand, id)) in policies.iter().enumerate() {
            if !seen.insert(*id) { continue; }
            let min = max.map_or(0, |m| (*min).min(m));
            let owned = attempts
                .iter()
                .filter(|(p, s)| *p == i && s.counts_against_capacity())
                .count() as u32;
            let unassigned = attempts
                .iter()
                .filter(|(p, s)| *p == i && s.can_take_a_job())
                .count() as u32;
            demands.push(PolicyDemand {
                policy_id: PolicyId::new(*id),
                state: *state,
                max_capacity: *max,
                min_capacity: min,
                demand: *demand,
                active_owned: owned,
                unassigned,
            });
        }
        let active_total = attempts.iter().filter(|(_, s)| s.counts_against_capacity()).count() as u32;
        let input = AllocationInput { host_capacity, active_total, reconciling, policies: demands.clone() };
        let allocation = allocate(&input);

        prop_assert!(allocation.total() <= headroom(host_capacity, active_total));
        prop_assert_eq!(allocation.grants.len(), demands.len());
        let ids: Vec<_> = allocation.grants.iter().map(|g| g.policy_id).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        prop_assert_eq!(ids, sorted);
        for p in &demands {
            let g = allocation.for_policy(p.policy_id).unwrap();
            match p.max_capacity {
                _ if !reconciling || p.state != PolicyState::Active => prop_assert_eq!(g.to_start, 0),
                None => prop_assert_eq!(g.to_start, 0),
                Some(max) => {
                    prop_assert!(p.active_owned + g.to_start <= max.max(p.active_owned));
                    // Never more than the jobs (or warm minimum) the unassigned runners leave.
                    prop_assert!(g.to_start <= p.demand.max(p.min_capacity).saturating_sub(p.unassigned));
                }
            }
        }
    }

    #[test]
    fn blind_decisions_never_destroy_an_unconcluded_attempt(
        evs in events(),
        alive in any::<bool>(),
        ev in evidence(),
        after in 0u64..2_000,
    ) {
        let a = build(&evs);
        let obs = Observation {
            process_alive: alive,
            github: GitHubView::Unreachable,
            evidence: ev,
            exit: None,
            now: a.state_changed_at() + Duration::from_secs(after),
        };
        let decision = decide(&a, &obs, &Timeouts::default());
        if !a.is_terminal() {
            prop_assert!(!decision.is_destructive(), "{:?} for {:?}", decision, a.state());
        }
        if alive {
            prop_assert_ne!(decision, Decision::Clean);
        }
    }

    #[test]
    fn every_decision_can_be_carried_out(
        evs in events(),
        alive in any::<bool>(),
        gh in github(),
        ev in evidence(),
        after in 0u64..2_000,
    ) {
        let mut a = build(&evs);
        let now = a.state_changed_at() + Duration::from_secs(after);
        let obs = Observation { process_alive: alive, github: gh, evidence: ev, exit: None, now };
        match decide(&a, &obs, &Timeouts::default()) {
            Decision::Conclude(c) => {
                prop_assert_eq!(c.deregister, gh.is_listed());
                c.apply(&mut a, now).unwrap();
                prop_assert_eq!(a.outcome(), Some(c.outcome));
            }
            Decision::Observe(o) => a.observe(o, now).unwrap(),
            Decision::Terminate { reason } => {
                prop_assert!(alive);
                a.record_terminate_intent(reason).unwrap();
            }
            Decision::Clean => a.mark_cleaned(now).unwrap(),
            Decision::Adopt => prop_assert!(alive),
            Decision::Nothing | Decision::Wait | Decision::Defer => {}
        }
    }
}

proptest! {
    #[test]
    fn any_machine_name_gives_a_valid_host_label(name in any::<String>()) {
        let label = HostLabel::from_machine_name(&name);
        prop_assert_eq!(HostLabel::new(label.as_str()), Ok(label.clone()));
        let routing = routing_label(
            &RoutingPrefix::default(),
            &label,
            Os::Linux,
            Arch::X64,
            &ProfileName::default(),
        );
        prop_assert!(Label::new(routing.as_str()).is_ok());
    }

    #[test]
    fn valid_targets_display_as_they_were_typed(
        owner in "[A-Za-z0-9]{1,10}(-[A-Za-z0-9]{1,10}){0,2}",
        repo in "[A-Za-z0-9._-]{1,40}",
    ) {
        prop_assume!(repo != "." && repo != "..");
        let text = format!("{owner}/{repo}");
        prop_assert_eq!(Target::parse(&text).unwrap().to_string(), text);
        prop_assert_eq!(Target::parse(&owner).unwrap().to_string(), owner);
    }

    #[test]
    fn matched_jobs_only_require_policy_labels(
        required in proptest::collection::vec(
            proptest::collection::vec("[a-dA-D]", 0..4), 0..12),
    ) {
        let labels = LabelSet::parse(["a", "b"]).unwrap();
        let jobs: Vec<JobDemand> = required
            .iter()
            .enumerate()
            .map(|(i, l)| JobDemand { job_id: i as u64, run_id: 1, repository: String::new(), name: String::new(), queued_at_ms: None, labels: RunsOn::Labels(l.clone()), from_fork: false })
            .collect();
        let count = match_demand(&labels, &jobs, false);
        let want = required
            .iter()
            .filter(|l| !l.is_empty() && l.iter().all(|x| matches!(x.as_str(), "a" | "b" | "A" | "B")))
            .count() as u32;
        prop_assert_eq!(count.matched, want);
        let empty = required.iter().filter(|l| l.is_empty()).count();
        prop_assert_eq!(count.unresolvable.len(), empty);
    }

    /// Turning a live runner from "no job yet" into "took a job" never lowers the grant, unless
    /// a ceiling (policy maximum, host capacity) binds; and the grant then equals what the
    /// ceilings allow. An extra unassigned runner always lowers an unconstrained grant by one
    /// (it can take one of the queued jobs).
    #[test]
    fn busy_runners_never_hold_back_queued_jobs_but_unassigned_ones_do(
        host_capacity in 0u32..16,
        max in 0u32..10,
        min in 0u32..4,
        demand in 0u32..20,
        busy in 0u32..10,
        unassigned in 0u32..10,
        others in 0u32..6,
    ) {
        let owned = busy + unassigned;
        let policy = |busy: u32, unassigned: u32| PolicyDemand {
            policy_id: PolicyId::new(1),
            state: PolicyState::Active,
            max_capacity: Some(max),
            min_capacity: min.min(max),
            demand,
            active_owned: busy + unassigned,
            unassigned,
        };
        let grant = |busy: u32, unassigned: u32| {
            let input = AllocationInput {
                host_capacity,
                active_total: busy + unassigned + others,
                reconciling: true,
                policies: vec![policy(busy, unassigned)],
            };
            allocate(&input).grants[0].to_start
        };
        let ceiling = max
            .saturating_sub(owned)
            .min(host_capacity.saturating_sub(owned + others));
        let wanted = demand.max(min.min(max));

        // Busy runners leave the whole need to be granted, as far as the ceilings allow.
        let g = grant(busy, unassigned);
        prop_assert_eq!(g, wanted.saturating_sub(unassigned).min(ceiling));
        if unassigned > 0 {
            // One unassigned runner becoming busy: the grant never shrinks (the ceilings
            // are the same: every live runner counts against them).
            prop_assert!(grant(busy + 1, unassigned - 1) >= g);
        }
        // One more unassigned runner (in place of nothing): with room to spare and jobs it
        // can take, it takes exactly one job off the grant.
        if wanted > unassigned + 1 && ceiling > wanted {
            prop_assert_eq!(grant(busy, unassigned + 1), g - 1);
        }
    }
}
