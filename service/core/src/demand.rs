//! Which queued jobs a policy could serve.
//!
//! A job matches when every label its `runs-on` requires is among the policy's labels
//! (case-insensitive). A `runs-on` that could not be resolved to labels (an expression, a runner
//! group) is reported, never counted. An empty label list is treated as unresolvable: it would
//! otherwise match every policy.
//!
//! GitHub also gives every self-hosted runner the read-only labels `self-hosted`, its OS and
//! its architecture; [`match_demand_for_runner`] counts those as present, since real workflows
//! almost always ask for `self-hosted`.

use crate::labels::{default_runner_labels, Arch, LabelSet, Os};

/// A job's `runs-on`, as far as the GitHub adapter could resolve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunsOn {
    Labels(Vec<String>),
    /// The raw text the adapter could not turn into labels.
    Unresolvable(String),
}

/// One queued job of the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDemand {
    pub job_id: u64,
    pub run_id: u64,
    /// `owner/repo` the job belongs to (an organization's jobs come from many).
    pub repository: String,
    /// The job's name in its workflow.
    pub name: String,
    /// When GitHub queued it (ms since the epoch), if it said.
    pub queued_at_ms: Option<i64>,
    pub labels: RunsOn,
    /// The job's run comes from a pull request of a fork (its head repository is another
    /// repository than the one it runs in): its code is not the target's own.
    pub from_fork: bool,
}

/// A job that was reported instead of counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvableJob {
    pub job_id: u64,
    pub run_id: u64,
    pub raw: String,
}

/// A policy's demand for this pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DemandCount {
    pub matched: u32,
    pub unresolvable: Vec<UnresolvableJob>,
    /// True when the adapter capped how many runs it listed: the real demand may be higher.
    pub is_floor: bool,
}

/// Whether a job requiring `required` may run on a runner with `labels`.
pub fn job_matches(labels: &LabelSet, required: &[String]) -> bool {
    !required.is_empty() && required.iter().all(|l| labels.contains(l))
}

/// Whether a job requiring `required` may run on a runner of `os`/`arch` registered with
/// `labels`: GitHub's default labels for that runner count as present (case-insensitive).
pub fn job_matches_runner(labels: &LabelSet, os: Os, arch: Arch, required: &[String]) -> bool {
    let defaults = default_runner_labels(os, arch);
    !required.is_empty()
        && required
            .iter()
            .all(|l| labels.contains(l) || defaults.iter().any(|d| d.eq_ignore_ascii_case(l)))
}

/// Counts the jobs `labels` can serve; `is_floor` passes through from the adapter. Only the
/// registered labels count: use [`match_demand_for_runner`] for a real runner.
pub fn match_demand(labels: &LabelSet, jobs: &[JobDemand], is_floor: bool) -> DemandCount {
    count_demand(jobs, is_floor, |required| job_matches(labels, required))
}

/// Counts the jobs a runner of `os`/`arch` registered with `labels` can serve, GitHub's default
/// labels (`self-hosted`, OS, architecture) included.
pub fn match_demand_for_runner(
    labels: &LabelSet,
    os: Os,
    arch: Arch,
    jobs: &[JobDemand],
    is_floor: bool,
) -> DemandCount {
    count_demand(jobs, is_floor, |required| {
        job_matches_runner(labels, os, arch, required)
    })
}

fn count_demand(
    jobs: &[JobDemand],
    is_floor: bool,
    matches: impl Fn(&[String]) -> bool,
) -> DemandCount {
    let mut count = DemandCount {
        is_floor,
        ..DemandCount::default()
    };
    for job in jobs {
        match &job.labels {
            RunsOn::Labels(required) if required.is_empty() => {
                count.unresolvable.push(UnresolvableJob {
                    job_id: job.job_id,
                    run_id: job.run_id,
                    raw: "[]".to_owned(),
                })
            }
            RunsOn::Labels(required) => {
                if matches(required) {
                    count.matched = count.matched.saturating_add(1);
                }
            }
            RunsOn::Unresolvable(raw) => count.unresolvable.push(UnresolvableJob {
                job_id: job.job_id,
                run_id: job.run_id,
                raw: raw.clone(),
            }),
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, labels: &[&str]) -> JobDemand {
        JobDemand {
            job_id: id,
            run_id: 100,
            repository: String::new(),
            name: String::new(),
            queued_at_ms: None,
            labels: RunsOn::Labels(labels.iter().map(|s| s.to_string()).collect()),
            from_fork: false,
        }
    }

    #[test]
    fn a_job_matches_when_all_its_labels_are_the_policys() {
        let labels = LabelSet::parse(["rm-home-linux-x64", "self-hosted", "gpu"]).unwrap();
        let jobs = [
            job(1, &["rm-home-linux-x64"]),
            job(2, &["self-hosted", "RM-Home-Linux-X64"]),
            job(3, &["rm-home-linux-x64", "windows"]),
            job(4, &["ubuntu-latest"]),
        ];
        let count = match_demand(&labels, &jobs, false);
        assert_eq!(count.matched, 2);
        assert!(count.unresolvable.is_empty());
        assert!(!count.is_floor);
    }

    #[test]
    fn a_runner_also_has_githubs_default_labels() {
        let labels = LabelSet::parse(["rm-home-linux-x64"]).unwrap();
        let jobs = [
            job(1, &["self-hosted", "rm-home-linux-x64"]),
            job(2, &["Self-Hosted", "linux", "x64", "rm-home-linux-x64"]),
            job(3, &["self-hosted", "Linux", "ARM64", "rm-home-linux-x64"]),
            job(4, &["self-hosted", "macOS"]),
            job(5, &["self-hosted"]),
        ];
        let count = match_demand_for_runner(&labels, Os::Linux, Arch::X64, &jobs, false);
        // 1 and 2 are ours; 3 wants another arch, 4 another OS; 5 any self-hosted runner.
        assert_eq!(count.matched, 3);
        // The registered-labels-only API is unchanged.
        assert_eq!(match_demand(&labels, &jobs, false).matched, 0);
        let mac = match_demand_for_runner(&labels, Os::Macos, Arch::Arm64, &jobs[3..], false);
        assert_eq!(mac.matched, 2);
    }

    #[test]
    fn default_labels_follow_githubs_spelling() {
        assert_eq!(
            default_runner_labels(Os::Linux, Arch::X64),
            ["self-hosted", "Linux", "X64"]
        );
        assert_eq!(
            default_runner_labels(Os::Macos, Arch::Arm64),
            ["self-hosted", "macOS", "ARM64"]
        );
        assert_eq!(
            default_runner_labels(Os::Windows, Arch::Arm),
            ["self-hosted", "Windows", "ARM"]
        );
    }

    #[test]
    fn unresolvable_jobs_are_reported_not_counted() {
        let labels = LabelSet::parse(["rm-home-linux-x64"]).unwrap();
        let jobs = [
            job(1, &["rm-home-linux-x64"]),
            JobDemand {
                job_id: 2,
                run_id: 7,
                repository: String::new(),
                name: String::new(),
                queued_at_ms: None,
                labels: RunsOn::Unresolvable("${{ matrix.os }}".into()),
                from_fork: false,
            },
            job(3, &[]),
        ];
        let count = match_demand(&labels, &jobs, true);
        assert_eq!(count.matched, 1);
        assert_eq!(
            count.unresolvable,
            vec![
                UnresolvableJob {
                    job_id: 2,
                    run_id: 7,
                    raw: "${{ matrix.os }}".into()
                },
                UnresolvableJob {
                    job_id: 3,
                    run_id: 100,
                    raw: "[]".into()
                },
            ]
        );
        assert!(count.is_floor);
    }
}
