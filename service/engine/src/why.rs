//! `GET /v1/why` (`runner-manager why`): each target loop's record of its last pass, explained
//! by `rm_core::explain`, in words with the fix. Nothing is asked of GitHub here: the answer is
//! what the loops saw and decided.

use super::launch_health::{self, retry_command};
use super::state::Daemon;
use rm_agent::LaunchCause;
use rm_core::{
    BlockCause, DemandUnread, JobDemand, LaunchBlock, PassStop, PassView, Policy, Reason, RunsOn,
    Target, Timestamp,
};
use rm_proto::{JobWhy, TargetKind, TargetWhy, UnixMillis, WhyReason, WhyReport};

fn millis(t: Timestamp) -> UnixMillis {
    UnixMillis(t.as_millis())
}

/// The report for every target the loops serve (`passes`: each target with its policies and
/// its loop's last record, in the loops' order).
pub fn report(
    daemon: &Daemon,
    passes: Vec<(Target, Vec<Policy>, Option<PassView>)>,
    now: Timestamp,
) -> WhyReport {
    let targets = passes
        .into_iter()
        .map(|(target, policies, view)| target_why(daemon, &target, &policies, view, now))
        .collect();
    WhyReport { targets }
}

fn target_why(
    daemon: &Daemon,
    target: &Target,
    policies: &[Policy],
    view: Option<PassView>,
    now: Timestamp,
) -> TargetWhy {
    let kind = if target.is_organization() {
        TargetKind::Org
    } else {
        TargetKind::Repo
    };
    let Some(view) = view else {
        return TargetWhy {
            target: target.to_string(),
            kind,
            checked_at: None,
            jobs_read_at: None,
            is_floor: false,
            summary: Some(words(
                daemon,
                target,
                None,
                policies,
                &Reason::NotLookedAtYet,
                now,
            )),
            jobs: Vec::new(),
            recent_failures: recent_failures(daemon, target, now),
        };
    };
    let profile_of = |id: Option<rm_core::PolicyId>| {
        id.and_then(|id| policies.iter().find(|p| p.id() == id))
            .map(|p| p.profile().to_string())
    };
    let summary = match &view.stop {
        Some(PassStop::NothingPolled) => nothing_polled(daemon, target, policies, now),
        Some(stop) => Some(words(
            daemon,
            target,
            None,
            policies,
            &Reason::Stopped(stop.clone()),
            now,
        )),
        None => None,
    };
    let jobs = rm_core::explain(&view)
        .into_iter()
        .map(|w| {
            let profile = profile_of(w.policy);
            JobWhy {
                job_id: w.job.job_id,
                run_id: w.job.run_id,
                url: (!w.job.repository.is_empty()).then(|| {
                    format!(
                        "{}/{}/actions/runs/{}/job/{}",
                        daemon.client.config().endpoints.web(),
                        w.job.repository,
                        w.job.run_id,
                        w.job.job_id
                    )
                }),
                repository: w.job.repository.clone(),
                name: w.job.name.clone(),
                queued_at: w.job.queued_at_ms.map(UnixMillis),
                runs_on: runs_on(&w.job),
                reason: words(daemon, target, profile.as_deref(), policies, &w.reason, now),
                profile,
            }
        })
        .collect();
    TargetWhy {
        target: target.to_string(),
        kind,
        checked_at: Some(millis(view.at)),
        jobs_read_at: view.jobs_read_at.map(millis),
        is_floor: view.is_floor,
        summary,
        jobs,
        recent_failures: recent_failures(daemon, target, now),
    }
}

/// How far back `why` tells a target's runner failures.
const FAILURES_TOLD_FOR_MS: i64 = 60 * 60 * 1000;

/// `target`'s runner failures of the last [`FAILURES_TOLD_FOR_MS`], newest first.
fn recent_failures(daemon: &Daemon, target: &Target, now: Timestamp) -> Vec<rm_proto::Failure> {
    let name = target.to_string();
    let since = now.as_millis().saturating_sub(FAILURES_TOLD_FOR_MS);
    daemon
        .failures
        .list()
        .into_iter()
        .filter(|f| f.target.eq_ignore_ascii_case(&name) && f.at.0 >= since)
        .collect()
}

fn runs_on(job: &JobDemand) -> Vec<String> {
    match &job.labels {
        RunsOn::Labels(labels) => labels.clone(),
        RunsOn::Unresolvable(_) => Vec::new(),
    }
}

/// A target none of whose policies reads GitHub's queue: the first policy's state says why.
fn nothing_polled(
    daemon: &Daemon,
    target: &Target,
    policies: &[Policy],
    now: Timestamp,
) -> Option<WhyReason> {
    use rm_core::PolicyState::*;
    let reason = match policies.first().map(|p| (p.enabled(), p.state())) {
        Some((false, _)) | Some((_, Disabled | Draining)) => Reason::Disabled,
        Some((_, AuthenticationFailed)) => Reason::SignInFailed,
        Some((_, RepairRequired)) => Reason::RepairRequired,
        _ => Reason::Stopped(PassStop::NothingPolled),
    };
    let mut w = words(daemon, target, None, policies, &reason, now);
    w.message = format!("GitHub's queue is not read for {target}: {}", w.message);
    Some(w)
}

fn noun(target: &Target) -> &'static str {
    if target.is_organization() {
        "org"
    } else {
        "repo"
    }
}

fn list(names: &[String]) -> String {
    match names.len() {
        0 => "none known".to_owned(),
        1..=4 => names.join(", "),
        n => format!("{} and {} more", names[..3].join(", "), n - 3),
    }
}

/// `in about N min` from `now` to `until`.
fn from_now(until: Timestamp, now: Timestamp) -> String {
    let secs = (until.as_millis() - now.as_millis()).max(0) / 1000;
    match secs {
        0 => "any moment now".to_owned(),
        1..=89 => format!("in about {secs} s"),
        _ => format!("in about {} min", (secs + 59) / 60),
    }
}

/// `14:05`, as `runner-manager why` and `status` show times.
fn local_clock(t: Timestamp) -> Option<String> {
    crate::local_time::clock(t.as_millis(), "%H:%M")
}

fn reason(code: &str, message: String, fix: Option<String>) -> WhyReason {
    WhyReason {
        code: code.to_owned(),
        covered: false,
        message,
        fix,
        runners: Vec::new(),
        until: None,
    }
}

/// A reason in words, with the fix; `profile`: the profile it is about, if not the default.
fn words(
    daemon: &Daemon,
    target: &Target,
    profile: Option<&str>,
    policies: &[Policy],
    why: &Reason,
    now: Timestamp,
) -> WhyReason {
    let code = why.code();
    let profile = profile.filter(|p| *p != "default");
    let (set, who) = match profile {
        Some(p) => (
            format!("runner-manager {} set {target} --profile {p}", noun(target)),
            format!("{target} (profile {p})"),
        ),
        None => (
            format!("runner-manager {} set {target}", noun(target)),
            target.to_string(),
        ),
    };
    let target_words = &who;
    let mut out = match why {
        Reason::BeingTaken { runner } => reason(
            code,
            format!("Runner {runner} of this host has just taken it (GitHub's list lags a few seconds)."),
            None,
        ),
        Reason::RunnerReady { runner } => reason(
            code,
            format!("Runner {runner} of this host is up without a job and takes it next."),
            None,
        ),
        Reason::RunnerStarting { runner } => reason(
            code,
            format!("Runner {runner} was started for it and takes it once it is online."),
            None,
        ),
        Reason::LabelsMismatch {
            missing,
            labels,
            github_hosted: true,
        } => reason(
            code,
            format!(
                "It asks for a GitHub-hosted runner ({}), not for this host.",
                missing.join(", ")
            ),
            Some(format!(
                "Nothing to do if it should run on GitHub. To run it here, use `runs-on: [self-hosted, {}]`.",
                labels.first().map_or("<routing label>", String::as_str)
            )),
        ),
        Reason::LabelsMismatch { missing, labels, .. } => reason(
            code,
            format!(
                "Its runs-on asks for {} which this host's runners for {target_words} do not have (they have: {}).",
                quote_all(missing),
                labels.join(", ")
            ),
            Some(format!(
                "Use this host's routing label in runs-on (`{}`), or give the runners the \
                 label: `{set} --label {}` (this replaces the extra labels).",
                labels.first().map_or("<routing label>", String::as_str),
                missing.first().map_or("LABEL", String::as_str)
            )),
        ),
        Reason::Unresolvable { raw } => reason(
            code,
            format!("Its runs-on could not be read as runner labels ({raw})."),
            Some("Give the job literal labels, e.g. `runs-on: [self-hosted, <routing label>]`; runner groups are not served.".into()),
        ),
        Reason::Disabled => reason(
            code,
            format!("{target_words} is disabled on this host."),
            Some(format!("Enable it: `{set} --enable`.")),
        ),
        Reason::MonitorOnly => reason(
            code,
            format!("{target_words} is monitor-only: its queue is watched, no runner is started."),
            Some(format!("Let it start runners: `{set} --max-runners N`.")),
        ),
        Reason::SignInFailed | Reason::Stopped(PassStop::Demand(DemandUnread::SignInFailed)) => {
            reason(
                code,
                "GitHub no longer accepts the service's sign-in.".into(),
                Some("Sign in again: `runner-manager auth login`, or Sign in… in the tray; the target resumes by itself.".into()),
            )
        }
        Reason::RepairRequired => {
            let problem = policies
                .iter()
                .filter(|p| p.state() == rm_core::PolicyState::RepairRequired)
                .find_map(|p| daemon.launch.problem(p));
            match problem {
                Some(p) => reason(code, p.message, Some(p.fix)),
                None => reason(
                    code,
                    format!("{target} needs repair: it starts nothing until it is retried."),
                    Some(format!(
                        "See `runner-manager status` for what went wrong, fix it, then run `{}`.",
                        retry_command(target)
                    )),
                ),
            }
        }
        Reason::PolicyFull { max, runners } => {
            let mut r = reason(
                code,
                format!(
                    "{target_words} already runs its maximum of {max} runner(s) here ({}).",
                    list(runners)
                ),
                Some(format!(
                    "It starts when one of them finishes. To allow more at once: `{set} --max-runners N`."
                )),
            );
            r.runners.clone_from(runners);
            r
        }
        Reason::HostFull { capacity, runners } => {
            let mut r = reason(
                code,
                format!(
                    "This host already runs its capacity of {capacity} runner(s) ({}).",
                    list(runners)
                ),
                Some(
                    "It starts when one of them finishes. To allow more at once: \
                     `runner-manager host set-capacity N`."
                        .into(),
                ),
            );
            r.runners.clone_from(runners);
            r
        }
        Reason::Held(hold) => reason(code, hold.message.clone(), Some(hold.fix.clone())),
        Reason::Blocked(block) => {
            let (failures, next_try, cause) = match block {
                LaunchBlock::BackingOff {
                    failures,
                    next_try,
                    cause,
                } => (*failures, Some(*next_try), cause),
                LaunchBlock::GaveUp { failures, cause } => (*failures, None, cause),
            };
            let cause = match cause {
                BlockCause::Failed { reason, detail } => LaunchCause::Failed {
                    reason: *reason,
                    detail: detail.clone(),
                },
                BlockCause::HostUnfit { check } => LaunchCause::HostUnfit {
                    check: check.clone(),
                },
            };
            let p = launch_health::problem(target, failures, now, next_try, &cause);
            let mut r = reason(code, p.message, Some(p.fix));
            if let Some(next) = next_try {
                r.message = if next <= now {
                    format!("{} Trying one runner at a time now.", r.message)
                } else {
                    format!("{} Next try {}.", r.message, from_now(next, now))
                };
                r.until = Some(millis(next));
            }
            r
        }
        Reason::Stopped(stop) => stopped(code, stop, target, now),
        Reason::NotStartedYet => reason(
            code,
            "A runner was granted for it but did not start in the last pass (its launch \
             failed or the room went to another target); the next pass decides again."
                .into(),
            Some("If this stays, `runner-manager status` names the failure.".into()),
        ),
        Reason::NotLookedAtYet => reason(
            code,
            format!("The service has not looked at {target}'s queue yet."),
            Some("Wait a few seconds: the first pass runs right after the service starts.".into()),
        ),
    };
    out.covered = why.is_covered();
    if let Reason::BeingTaken { runner }
    | Reason::RunnerReady { runner }
    | Reason::RunnerStarting { runner } = why
    {
        out.runners = vec![runner.clone()];
    }
    out
}

fn quote_all(labels: &[String]) -> String {
    labels
        .iter()
        .map(|l| format!("'{l}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn stopped(code: &str, stop: &PassStop, target: &Target, now: Timestamp) -> WhyReason {
    match stop {
        PassStop::Draining => reason(
            code,
            "The service is stopping or draining: it starts no new runner (running jobs finish)."
                .into(),
            Some("Start the service again once it stopped (`runner-manager service install` keeps it running).".into()),
        ),
        PassStop::Retiring => reason(
            code,
            format!("{target} is being removed from this host: its last runners finish, nothing new starts."),
            Some(format!("To serve it again: `runner-manager {} add {target}`.", noun(target))),
        ),
        PassStop::Paused => reason(
            code,
            "Launching is paused on this host.".into(),
            Some("Resume it: `runner-manager service resume`, or Resume in the tray's menu.".into()),
        ),
        PassStop::Demand(DemandUnread::RateLimited { until }) => {
            let when = match local_clock(*until) {
                Some(clock) => format!("until {clock} ({})", from_now(*until, now)),
                None => format!("for now (it lifts {})", from_now(*until, now)),
            };
            let mut r = reason(
                code,
                format!(
                    "Rate-limited by GitHub {when}: this host's sign-in has used up its requests."
                ),
                Some("Nothing to do: the service waits and goes on by itself. Other tools signed in as the same account share the limit.".into()),
            );
            r.until = Some(millis(*until));
            r
        }
        PassStop::Demand(DemandUnread::Unreachable { detail }) => reason(
            code,
            format!("GitHub could not be reached ({detail})."),
            Some("Check this machine's network or proxy; the service retries by itself with back-off.".into()),
        ),
        PassStop::Demand(DemandUnread::SignInFailed) => reason(
            code,
            "GitHub no longer accepts the service's sign-in.".into(),
            Some("Sign in again: `runner-manager auth login`.".into()),
        ),
        PassStop::Demand(DemandUnread::Refused { detail }) => reason(
            code,
            format!("GitHub refused to list {target}'s jobs: {detail}"),
            Some(format!(
                "Check that the GitHub App is installed on {target} and you are an admin there; then run `{}`.",
                retry_command(target)
            )),
        ),
        PassStop::Demand(DemandUnread::Other { detail }) => reason(
            code,
            format!("GitHub's queue could not be read: {detail}"),
            Some("It is tried again at the next pass; if it stays, see the service's log.".into()),
        ),
        PassStop::Journal { detail } => reason(
            code,
            format!("The service's journal could not be read: {detail}"),
            Some("See the service's log (`journalctl -u runner-manager`) and `runner-manager host doctor`.".into()),
        ),
        PassStop::NothingPolled => reason(
            code,
            format!("No profile of {target} reads GitHub's queue."),
            Some("See `runner-manager status` for each profile's state.".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_names_the_local_time_it_lifts_and_how_soon() {
        let target = Target::parse("octo/hello").expect("a repository");
        let now = Timestamp::from_millis(1_900_000_000_000);
        let until = Timestamp::from_millis(1_900_000_000_000 + 150_000);
        let stop = PassStop::Demand(DemandUnread::RateLimited { until });
        let r = stopped("rate_limited", &stop, &target, now);
        let clock = chrono::DateTime::from_timestamp_millis(until.as_millis())
            .expect("in range")
            .with_timezone(&chrono::Local)
            .format("%H:%M")
            .to_string();
        assert!(
            r.message.starts_with(&format!(
                "Rate-limited by GitHub until {clock} (in about 3 min)"
            )),
            "{}",
            r.message
        );
        assert_eq!(r.until, Some(UnixMillis(until.as_millis())));
    }
}
