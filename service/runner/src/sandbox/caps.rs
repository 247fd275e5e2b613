//! Resource caps per job: whether each runner gets a cgroup of its own with memory, process,
//! CPU and I/O caps ([`super::cgroups`]), and the doctor's word on it. Every runner also runs
//! at the lowest CPU priority (`nice 19`) and in the idle I/O class (set at its spawn), so where
//! the caps are off a job hogging CPU or disk still yields to the desktop; memory is then
//! bounded only by memory admission.

use super::cgroups::{CapLimits, JobCgroups, Unavailable, CONTROLLERS};
use rm_core::{CheckState, HostCheck};
use std::sync::{Arc, Mutex, PoisonError};

/// The check's stable id.
pub const CAPS_CHECK: &str = "job_resource_caps";

#[derive(Debug, Default)]
enum State {
    /// Not asked for (tests, tools): runners start in the service's cgroup.
    #[default]
    Unwanted,
    /// Asked for, not set up yet.
    Wanted(CapLimits),
    On(Arc<JobCgroups>),
    Off(Unavailable),
}

/// A runner host's per-job cgroups: wanted or not, and what setting them up gave. Shared:
/// the doctor reads what the host set up.
#[derive(Debug, Clone, Default)]
pub struct JobCaps(Arc<Mutex<State>>);

impl JobCaps {
    /// Per-job cgroups with `limits`, set up by [`JobCaps::set_up`] (the service's).
    pub fn wanted(limits: CapLimits) -> JobCaps {
        JobCaps(Arc::new(Mutex::new(State::Wanted(limits))))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the service's delegated cgroup for the jobs, once, when wanted. Where it cannot,
    /// the reason is kept for the doctor and jobs start without caps.
    pub fn set_up(&self) -> Option<Arc<JobCgroups>> {
        let mut state = self.state();
        if let State::Wanted(limits) = *state {
            *state = match JobCgroups::open(limits) {
                Ok(c) => {
                    tracing::info!(controllers = ?c.enabled(), memory_max = limits.memory_max, pids_max = limits.pids_max, "each job runs in a cgroup of its own");
                    State::On(Arc::new(c))
                }
                Err(e) => {
                    tracing::warn!(reason = %e, fix = %e.fix(), "jobs run without per-job cgroup caps (nice 19 and idle I/O instead)");
                    State::Off(e)
                }
            };
        }
        drop(state);
        self.cgroups()
    }

    /// The jobs' cgroups, when they are set up.
    pub fn cgroups(&self) -> Option<Arc<JobCgroups>> {
        match &*self.state() {
            State::On(c) => Some(Arc::clone(c)),
            _ => None,
        }
    }

    /// The doctor's check: what the caps are on this host.
    pub fn check(&self) -> HostCheck {
        match &*self.state() {
            State::On(c) => on_check(c.enabled(), c.limits()),
            State::Off(reason) => off_check(reason),
            State::Unwanted | State::Wanted(_) => offered_check(),
        }
    }
}

const FALLBACK: &str = "jobs run at nice 19 in the idle I/O class instead, and memory \
                        admission bounds how many start";

fn check(state: CheckState, detail: String, fix: Option<String>) -> HostCheck {
    HostCheck {
        id: CAPS_CHECK.to_owned(),
        title: "Jobs cannot starve the desktop".to_owned(),
        state,
        required: false,
        detail,
        fix,
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

fn on_check(enabled: &[&str], l: CapLimits) -> HostCheck {
    let mut caps = Vec::new();
    if enabled.contains(&"memory") {
        caps.push(format!(
            "memory up to {} (throttled above {})",
            gib(l.memory_max),
            gib(l.memory_high)
        ));
    }
    if enabled.contains(&"pids") {
        caps.push(format!("{} processes", l.pids_max));
    }
    if enabled.contains(&"cpu") {
        caps.push(format!(
            "CPU weight {} against the service's 100",
            l.cpu_weight
        ));
    }
    if enabled.contains(&"io") {
        caps.push(format!("I/O weight {}", l.io_weight));
    }
    let missing: Vec<&str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| !enabled.contains(c))
        .collect();
    let own = "each job runs in a cgroup of its own, and everything in it ends with the job";
    if missing.is_empty() {
        return check(
            CheckState::Pass,
            format!("{own}; its caps: {}", caps.join(", ")),
            None,
        );
    }
    let have = if caps.is_empty() {
        String::new()
    } else {
        format!("; its caps: {}", caps.join(", "))
    };
    check(
        CheckState::Warn,
        format!(
            "{own}{have}; but the {} controller(s) are not delegated to the service, so those \
             caps are off: {FALLBACK}",
            missing.join(", ")
        ),
        Some(
            "delegate them to the service (systemd: `Delegate=yes`, which the unit \
             `runner-manager service install` writes has); a controller the host binds to a \
             cgroup v1 hierarchy needs the unified hierarchy (`systemd.unified_cgroup_hierarchy=1`)"
                .to_owned(),
        ),
    )
}

fn off_check(reason: &Unavailable) -> HostCheck {
    check(
        CheckState::Warn,
        format!("{reason}: no per-job memory, process, CPU or I/O caps; {FALLBACK}"),
        Some(reason.fix()),
    )
}

/// Without a service that set them up (the offline doctor): what the host's unified
/// hierarchy offers.
fn offered_check() -> HostCheck {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let Some((mount, _)) = super::cgroups::unified_mount(&mountinfo) else {
        return off_check(&Unavailable::NoUnified);
    };
    let offered = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
    let have: Vec<&str> = offered.split_whitespace().collect();
    let missing: Vec<&str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| !have.contains(c))
        .collect();
    if missing.is_empty() {
        check(
            CheckState::Pass,
            "cgroup v2 offers the memory, pids, cpu and io controllers: a service started \
             from its systemd unit runs each job in a capped cgroup of its own"
                .to_owned(),
            None,
        )
    } else {
        check(
            CheckState::Warn,
            format!(
                "this host's cgroup v2 lacks the {} controller(s) (bound to cgroup v1): those \
                 per-job caps are off; {FALLBACK}",
                missing.join(", ")
            ),
            Some(Unavailable::NoUnified.fix()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_that_are_off_say_why_what_applies_instead_and_the_fix() {
        let c = off_check(&Unavailable::RootCgroup);
        assert_eq!(c.state, CheckState::Warn);
        assert!(!c.required);
        assert!(c.detail.contains("nice 19") && c.detail.contains("root cgroup"));
        assert!(c.fix.unwrap().contains("Delegate=yes"));
        let v1 = off_check(&Unavailable::NoUnified);
        assert!(v1.detail.contains("cgroup v1"));
        assert!(v1.fix.unwrap().contains("unified"));
    }

    #[test]
    fn caps_that_are_on_are_listed_and_missing_controllers_named() {
        let l = CapLimits::for_memory(16 << 30);
        let all = on_check(CONTROLLERS, l);
        assert_eq!(all.state, CheckState::Pass);
        assert!(
            all.detail.contains("memory up to 12.0 GiB"),
            "{}",
            all.detail
        );
        assert!(all.detail.contains("4096 processes"));
        let some = on_check(&["cpu", "io"], l);
        assert_eq!(some.state, CheckState::Warn);
        assert!(
            some.detail.contains("memory, pids controller(s)"),
            "{}",
            some.detail
        );
        assert!(some.detail.contains("CPU weight 20"));
        assert!(some.fix.unwrap().contains("Delegate=yes"));
        let none = on_check(&[], l);
        assert!(
            none.detail.contains("memory, pids, cpu, io controller(s)"),
            "{}",
            none.detail
        );
    }

    #[test]
    fn an_unwanted_host_reports_what_the_machine_offers() {
        let c = JobCaps::default().check();
        assert_eq!(c.id, CAPS_CHECK);
        assert!(matches!(c.state, CheckState::Pass | CheckState::Warn));
        assert!(JobCaps::default().cgroups().is_none());
        assert!(JobCaps::default().set_up().is_none());
    }
}
