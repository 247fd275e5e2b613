//! Resource caps per job: what this host allows, for the doctor. Per-job cgroups need cgroup
//! v2 with the memory, pids, cpu and io controllers delegated to the service; until the
//! service creates them, and wherever they are missing, every runner runs at the lowest CPU
//! priority (`nice 19`) and in the idle I/O class instead (set at its spawn), so a job hogging
//! CPU or disk yields to the desktop. Memory is then bounded only by memory admission.

use rm_core::{CheckState, HostCheck};
use std::path::Path;

/// The check's stable id.
pub const CAPS_CHECK: &str = "job_resource_caps";

/// The controllers a per-job cgroup would use.
const WANTED: &[&str] = &["memory", "pids", "cpu", "io"];

/// What `cgroup_root` (normally `/sys/fs/cgroup`) offers, as an advisory check.
pub fn caps_check(cgroup_root: &Path) -> HostCheck {
    let controllers = std::fs::read_to_string(cgroup_root.join("cgroup.controllers")).ok();
    let (detail, fix) = match controllers {
        None => (
            "this host has no unified cgroup v2 hierarchy (cgroup v1 controllers only): no \
             per-job memory, pids, CPU or I/O caps; jobs run at nice 19 in the idle I/O class \
             instead, and memory admission bounds how many start"
                .to_owned(),
            Some(
                "boot with the unified hierarchy (`systemd.unified_cgroup_hierarchy=1` on the \
                 kernel command line), as current Debian and Ubuntu do by default"
                    .to_owned(),
            ),
        ),
        Some(text) => {
            let have: Vec<&str> = text.split_whitespace().collect();
            let missing: Vec<&str> = WANTED
                .iter()
                .copied()
                .filter(|c| !have.contains(c))
                .collect();
            if missing.is_empty() {
                (
                    "cgroup v2 is available, but per-job caps (memory.max, pids.max, lower \
                     cpu.weight and io.weight) are not applied yet: jobs run at nice 19 in the \
                     idle I/O class, and memory admission bounds how many start"
                        .to_owned(),
                    None,
                )
            } else {
                (
                    format!(
                        "cgroup v2 lacks the {} controller(s): no per-job caps; jobs run at \
                         nice 19 in the idle I/O class instead",
                        missing.join(", ")
                    ),
                    Some(
                        "enable them for the service (systemd: `Delegate=yes` in its unit)"
                            .to_owned(),
                    ),
                )
            }
        }
    };
    HostCheck {
        id: CAPS_CHECK.to_owned(),
        title: "Jobs cannot starve the desktop".to_owned(),
        state: CheckState::Warn,
        required: false,
        detail,
        fix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_host_says_which_caps_are_off_and_what_applies_instead() {
        let dir = tempfile::tempdir().unwrap();
        let c = caps_check(dir.path());
        assert_eq!(c.state, CheckState::Warn);
        assert!(!c.required);
        assert!(c.detail.contains("nice 19") && c.detail.contains("cgroup v1"));
        assert!(c.fix.unwrap().contains("unified"));
    }

    #[test]
    fn missing_controllers_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        let c = caps_check(dir.path());
        assert!(c.detail.contains("memory, pids"), "{}", c.detail);
        assert!(c.fix.unwrap().contains("Delegate=yes"));
    }
}
