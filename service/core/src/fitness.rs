//! Host fitness: the result of one host check (`runner-manager host doctor`). A failed
//! *required* check makes the host unfit: nothing is launched and no runner is registered
//! until it passes. The checks themselves do IO and live with what they check (`rm_runner`
//! for the filesystem, the daemon for GitHub); this is the result they share.

use crate::text::text_enum;

text_enum! {
    /// How one check came out.
    pub enum CheckState ("check state") {
        Pass => "pass",
        /// Works, but worth a look (advice).
        Warn => "warn",
        Fail => "fail",
        /// Not checked (nothing to check yet, or not asked).
        Skipped => "skipped",
    }
}

/// One check's result, for people and for the launch gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCheck {
    /// Stable id, e.g. `runner_root_reachable`.
    pub id: String,
    /// What is checked, for people.
    pub title: String,
    pub state: CheckState,
    /// A failed required check stops launches; the others are advice.
    pub required: bool,
    /// What was found (the directory and its mode, the free space…).
    pub detail: String,
    /// What to do when it did not pass.
    pub fix: Option<String>,
}

impl HostCheck {
    /// Whether this result keeps the host from launching.
    pub fn blocks_launch(&self) -> bool {
        self.required && self.state == CheckState::Fail
    }
}

/// The first result that keeps the host from launching, if any.
pub fn first_blocking(checks: &[HostCheck]) -> Option<&HostCheck> {
    checks.iter().find(|c| c.blocks_launch())
}

/// The id of the host check that the job sandbox can be built (`rm_runner::sandbox`).
pub const JOB_SANDBOX_CHECK: &str = "job_sandbox";

/// The first result that keeps the host from launching runners of a target with the sandbox
/// choice `sandbox`: a target the operator set to run without the walls does not need them
/// built, so the sandbox check does not hold it back (the others still do).
pub fn first_blocking_for<'a>(
    checks: &'a [HostCheck],
    sandbox: &crate::TargetSandbox,
) -> Option<&'a HostCheck> {
    checks
        .iter()
        .filter(|c| sandbox.walls || c.id != JOB_SANDBOX_CHECK)
        .find(|c| c.blocks_launch())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str, state: CheckState, required: bool) -> HostCheck {
        HostCheck {
            id: id.into(),
            title: id.into(),
            state,
            required,
            detail: String::new(),
            fix: None,
        }
    }

    #[test]
    fn only_a_failed_required_check_blocks() {
        let checks = vec![
            check("capacity", CheckState::Fail, false),
            check("disk", CheckState::Warn, true),
            check("package", CheckState::Skipped, true),
        ];
        assert!(first_blocking(&checks).is_none());
        let mut unfit = checks.clone();
        unfit.push(check("root", CheckState::Fail, true));
        unfit.push(check("later", CheckState::Fail, true));
        assert_eq!(first_blocking(&unfit).map(|c| c.id.as_str()), Some("root"));
        assert_eq!(CheckState::Skipped.as_str(), "skipped");
    }

    #[test]
    fn a_target_without_walls_is_not_held_back_by_the_sandbox_check_alone() {
        let walled = crate::TargetSandbox::default();
        let unwalled = crate::TargetSandbox {
            walls: false,
            docker: false,
            memory_max_mb: None,
        };
        let checks = vec![
            check("disk", CheckState::Pass, true),
            check(JOB_SANDBOX_CHECK, CheckState::Fail, true),
        ];
        assert_eq!(
            first_blocking_for(&checks, &walled).map(|c| c.id.as_str()),
            Some(JOB_SANDBOX_CHECK)
        );
        assert!(first_blocking_for(&checks, &unwalled).is_none());
        let mut both = checks.clone();
        both.push(check("root", CheckState::Fail, true));
        assert_eq!(
            first_blocking_for(&both, &unwalled).map(|c| c.id.as_str()),
            Some("root"),
            "other checks still hold it back"
        );
    }
}
