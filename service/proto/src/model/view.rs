//! What to show, derived from the model: the tray state (which icon), the menu header, the
//! one-line summary, the live runners and what needs attention (each with its fix).

use super::notice::fix_sentence;
use super::words::{count, elapsed, reason_words};
use super::{Connection, Model, UNREACHABLE_ATTENTION_MS};
use crate::signin::SignInState;
use crate::status::{
    AuthState, CheckState, GitHubHealthState, ProblemCode, RunnerState, RunnerStatus, Status,
};
use crate::time::UnixMillis;
use serde::Serialize;

/// The tray's state: one icon each, told apart by shape as well as colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrayState {
    /// Looking for the service (at start, or after the stream ended).
    Connecting,
    /// The service does not run (or cannot be read).
    ServiceDown,
    /// The service refuses this user.
    NotAllowed,
    /// Something needs the user: a failure, sign-in, GitHub out of reach, an update.
    Attention,
    SignedOut,
    Paused,
    /// Runners are live (starting, waiting for their job or running it).
    Busy,
    /// Targets watched, nothing running.
    Idle,
}

impl TrayState {
    /// The icon's name (`icons/tray/<name>.png`).
    pub fn icon(self) -> &'static str {
        match self {
            TrayState::Connecting | TrayState::ServiceDown => "down",
            TrayState::NotAllowed => "not-allowed",
            TrayState::Attention => "attention",
            TrayState::SignedOut => "signed-out",
            TrayState::Paused => "paused",
            TrayState::Busy => "busy",
            TrayState::Idle => "idle",
        }
    }

    /// The state's name on the wire to the webview and in tests (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            TrayState::Connecting => "connecting",
            TrayState::ServiceDown => "service_down",
            TrayState::NotAllowed => "not_allowed",
            TrayState::Attention => "attention",
            TrayState::SignedOut => "signed_out",
            TrayState::Paused => "paused",
            TrayState::Busy => "busy",
            TrayState::Idle => "idle",
        }
    }
}

/// Something that needs the user, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Concern {
    /// A short, stable code (`sign_in_required`, `github_unreachable`, `runner_failed`,
    /// a target problem's code…).
    pub code: String,
    pub message: String,
    pub fix: String,
}

/// A runner that is not finished, for the menu and the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveRunner {
    pub attempt_id: String,
    pub target: String,
    pub state: RunnerState,
    pub job_name: Option<String>,
    /// The job's page on GitHub, when known.
    pub job_url: Option<String>,
    /// `1m 20s` in its current state.
    pub elapsed: String,
    /// `octo/app › build (1m 20s)` or `octo/app · starting (5s)`.
    pub line: String,
}

/// Everything the tray renders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct View {
    pub state: TrayState,
    /// The menu's first line: `Idle · 3 targets`, `Running 2 jobs`, `Signed out`,
    /// `Service not running`.
    pub header: String,
    /// One line for a tooltip or label: the header and what it is about.
    pub summary: String,
    /// What needs the user, most important first.
    pub concerns: Vec<Concern>,
    pub runners: Vec<LiveRunner>,
    /// `Some(login)` when signed in.
    pub signed_in_as: Option<String>,
    pub paused: bool,
    /// The service's updater, when it said anything (a menu item while an update is
    /// available, downloading, applying or failed).
    pub update: Option<super::UpdateView>,
}

/// Runners that are live, oldest first.
pub(crate) fn live_runners(status: &Status, now: UnixMillis) -> Vec<LiveRunner> {
    let mut live: Vec<&RunnerStatus> = status
        .runners
        .iter()
        .filter(|r| {
            matches!(
                r.state,
                RunnerState::Allocated
                    | RunnerState::JitReceived
                    | RunnerState::Starting
                    | RunnerState::Idle
                    | RunnerState::Busy
            )
        })
        .collect();
    live.sort_by_key(|r| r.since);
    live.into_iter()
        .map(|r| {
            let took = elapsed(now.0 - r.since.0);
            let job_name = r.job.as_ref().and_then(|j| j.name.clone());
            let line = match (&job_name, r.state) {
                (Some(job), _) => format!("{} › {job} ({took})", r.target),
                (None, RunnerState::Busy) => format!("{} › a job ({took})", r.target),
                (None, RunnerState::Idle) => format!("{} · waiting for its job ({took})", r.target),
                (None, _) => format!("{} · starting ({took})", r.target),
            };
            LiveRunner {
                attempt_id: r.attempt_id.clone(),
                target: r.target.clone(),
                state: r.state,
                job_name,
                job_url: r.job.as_ref().and_then(|j| j.html_url.clone()),
                elapsed: took,
                line,
            }
        })
        .collect()
}

/// A target problem's code in words (spelt out: the serde name of `GitHubRefused` is
/// `git_hub_refused`).
fn problem_code(code: ProblemCode) -> &'static str {
    match code {
        ProblemCode::LaunchBackoff => "launch_backoff",
        ProblemCode::LaunchFailing => "launch_failing",
        ProblemCode::HostUnfit => "host_unfit",
        ProblemCode::GitHubRefused => "github_refused",
        ProblemCode::SignInRequired => "sign_in_required",
        ProblemCode::Unknown => "target_problem",
    }
}

/// Since when GitHub has not answered, when it does not.
pub(crate) fn unreachable_since(status: &Status) -> Option<UnixMillis> {
    match status.github_health.state {
        GitHubHealthState::Unreachable => status.github_health.since,
        _ => None,
    }
}

impl Model {
    /// What to show at `now`.
    pub fn view(&self, now: UnixMillis) -> View {
        let connection_view = |state: TrayState, header: &str| {
            let (message, fix) = self.connection.problem().unwrap_or(("", ""));
            View {
                state,
                header: header.to_owned(),
                summary: if message.is_empty() {
                    header.to_owned()
                } else {
                    format!("{header}: {fix}")
                },
                concerns: if message.is_empty() {
                    Vec::new()
                } else {
                    vec![Concern {
                        code: state.as_str().to_owned(),
                        message: message.to_owned(),
                        fix: fix.to_owned(),
                    }]
                },
                runners: Vec::new(),
                signed_in_as: None,
                paused: false,
                update: None,
            }
        };
        match &self.connection {
            Connection::Connected => {}
            Connection::Connecting => {
                return connection_view(TrayState::Connecting, "Connecting to the service…")
            }
            Connection::ServiceNotRunning { .. } => {
                return connection_view(TrayState::ServiceDown, "Service not running")
            }
            Connection::Unreadable { .. } => {
                return connection_view(TrayState::ServiceDown, "Service not reachable")
            }
            Connection::NotAllowed { .. } => {
                return connection_view(TrayState::NotAllowed, "Not allowed")
            }
            Connection::VersionMismatch { .. } => {
                return connection_view(TrayState::Attention, "Update needed")
            }
        }
        let Some(status) = &self.status else {
            return connection_view(TrayState::Connecting, "Connecting to the service…");
        };
        let runners = live_runners(status, now);
        let concerns = self.concerns(status, now);
        let signed_in_as = match &status.auth {
            AuthState::SignedIn { login, .. } => Some(login.clone()),
            _ => None,
        };
        let jobs: Vec<&LiveRunner> = runners
            .iter()
            .filter(|r| r.state == RunnerState::Busy)
            .collect();
        let targets = count(status.targets.len(), "target", "targets");
        let busy_header = if jobs.is_empty() {
            format!("Starting {}", count(runners.len(), "runner", "runners"))
        } else if jobs.len() < runners.len() {
            format!(
                "Running {} · {} starting",
                count(jobs.len(), "job", "jobs"),
                runners.len() - jobs.len()
            )
        } else {
            format!("Running {}", count(jobs.len(), "job", "jobs"))
        };
        let runner_lines = runners
            .iter()
            .map(|r| r.line.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        // A queued job held back by memory admission or a workstation rule (a hold with nothing
        // queued is not news): (few words, message, fix).
        let queued = status.targets.iter().any(|t| t.demand.queued > 0);
        let memory_wait = status
            .workstation
            .as_ref()
            .map(|w| (w.short.as_str(), &w.message, &w.fix))
            .or_else(|| {
                status
                    .admission
                    .as_ref()
                    .map(|a| ("memory", &a.message, &a.fix))
            })
            .filter(|_| queued);
        let (state, header, summary) = if let Some(first) = concerns.first() {
            let header = format!("Needs attention: {}", first.message);
            let summary = format!("{header}. {}", first.fix);
            (TrayState::Attention, header, summary)
        } else if matches!(status.auth, AuthState::SignedOut | AuthState::Unknown) {
            (
                TrayState::SignedOut,
                "Signed out".to_owned(),
                "Signed out: sign in to GitHub so runners can start".to_owned(),
            )
        } else if status.paused {
            let header = if runners.is_empty() {
                format!("Paused · {targets}")
            } else {
                format!(
                    "Paused · {} finishing",
                    count(runners.len(), "runner", "runners")
                )
            };
            let summary = format!("{header}: no new runner starts until you resume");
            (TrayState::Paused, header, summary)
        } else if !runners.is_empty() {
            let mut summary = format!("{busy_header}: {runner_lines}");
            if let Some((short, _, _)) = memory_wait {
                summary.push_str(&format!("; queued jobs wait ({short})"));
            }
            (TrayState::Busy, busy_header, summary)
        } else if let Some((short, message, fix)) = memory_wait {
            // Not a failure: the jobs start by themselves once the reason clears.
            let header = if short == "memory" {
                format!("Waiting for memory · {targets}")
            } else {
                format!("Waiting · {short} · {targets}")
            };
            let summary = format!("{header}: {message} {fix}");
            (TrayState::Idle, header, summary)
        } else {
            let header = if status.targets.is_empty() {
                "Idle · no targets yet".to_owned()
            } else {
                format!("Idle · {targets}")
            };
            let summary = if status.targets.is_empty() {
                format!("{header}: add a repository or organization to serve")
            } else {
                format!("{header} watched, no job running")
            };
            (TrayState::Idle, header, summary)
        };
        View {
            state,
            header,
            summary,
            concerns,
            runners,
            signed_in_as,
            paused: status.paused,
            update: self.updates.view(),
        }
    }

    fn concerns(&self, status: &Status, now: UnixMillis) -> Vec<Concern> {
        let mut out = Vec::new();
        if let AuthState::SignInRequired { reason } = &status.auth {
            out.push(Concern {
                code: "sign_in_required".to_owned(),
                message: format!("Sign-in needed ({})", reason.trim_end_matches('.')),
                fix: "Sign in again from the tray menu (Sign in…).".to_owned(),
            });
        }
        if let Some(session) = &self.sign_in {
            let signed_in = matches!(status.auth, AuthState::SignedIn { .. });
            if session.state == SignInState::Failed && !signed_in {
                out.push(Concern {
                    code: "sign_in_failed".to_owned(),
                    message: format!(
                        "Sign-in failed: {}",
                        session
                            .message
                            .as_deref()
                            .unwrap_or("GitHub refused the sign-in")
                    ),
                    fix: session
                        .fix
                        .clone()
                        .unwrap_or_else(|| "Try signing in again.".to_owned()),
                });
            }
        }
        if let Some(pool) = status.pool.as_ref().filter(|p| p.state == "refused") {
            // Not a blip: the database answered and said no. It is asked again, but nothing
            // changes until someone acts.
            out.push(Concern {
                code: "pool_refused".to_owned(),
                message: "The pool database refuses this host".to_owned(),
                fix: format!(
                    "{} Runners for the pool '{}' wait on this host meanwhile (running jobs go \
                     on).",
                    pool.message
                        .as_deref()
                        .unwrap_or("See `runner-manager pool status`."),
                    pool.label
                ),
            });
        }
        if let Some(pool) = status.pool.as_ref().filter(|p| p.state == "unreachable") {
            // A database restart of a few seconds is not news; one that stays down is.
            let since = pool.since.map_or(0, |s| now.0 - s.0);
            if since >= UNREACHABLE_ATTENTION_MS {
                out.push(Concern {
                    code: "pool_unreachable".to_owned(),
                    message: format!("Pool database unreachable for {}", elapsed(since)),
                    fix: format!(
                        "Runners for the pool '{}' wait on every host until its PostgreSQL \
                         answers (running jobs go on): check it runs and this host reaches it \
                         (`runner-manager pool status`).",
                        pool.label
                    ),
                });
            }
        }
        let health = &status.github_health;
        match health.state {
            GitHubHealthState::Unreachable
                if health
                    .since
                    .is_some_and(|s| now.0 - s.0 >= UNREACHABLE_ATTENTION_MS) =>
            {
                let since = health.since.map_or(0, |s| now.0 - s.0);
                out.push(Concern {
                    code: "github_unreachable".to_owned(),
                    message: format!(
                        "GitHub unreachable for {}{}",
                        elapsed(since),
                        health
                            .detail
                            .as_deref()
                            .map(|d| format!(" ({d})"))
                            .unwrap_or_default()
                    ),
                    fix: "Check this machine's network connection; the service retries by \
                          itself and running jobs go on."
                        .to_owned(),
                });
            }
            GitHubHealthState::RateLimited => {
                let until = health
                    .next_try
                    .map(|t| format!(" for {}", elapsed(t.0 - now.0)))
                    .unwrap_or_default();
                out.push(Concern {
                    code: "rate_limited".to_owned(),
                    message: format!("GitHub's rate limit reached: nothing is asked{until}"),
                    fix: "Nothing to do: the service waits for GitHub's reset. Fewer targets or \
                          monitor-only targets spend less."
                        .to_owned(),
                });
            }
            _ => {}
        }
        for check in &status.host_checks {
            // Sign-in and GitHub's reachability are shown from `auth` and `github_health`,
            // which are current; the doctor's copies of them are only as fresh as its last run.
            let about_github =
                matches!(check.id.as_str(), "github_credential" | "github_reachable");
            // The operator's opt-out of the job sandbox is a warning, not a failure, but it
            // means jobs can read this machine's files: it stays in sight.
            let sandbox_off = check.id == "job_sandbox" && check.state == CheckState::Warn;
            if (check.required && check.state == CheckState::Fail && !about_github) || sandbox_off {
                out.push(Concern {
                    code: format!("host_check_{}", check.id),
                    message: format!("{}: {}", check.title, check.detail),
                    fix: check
                        .fix
                        .clone()
                        .unwrap_or_else(|| "Run `runner-manager host doctor`.".to_owned()),
                });
            }
        }
        for target in &status.targets {
            if let Some(problem) = &target.problem {
                out.push(Concern {
                    code: problem_code(problem.code).to_owned(),
                    message: format!("{}: {}", target.target, problem.message),
                    fix: problem.fix.clone(),
                });
            }
            // The operator's choice, but one that hands this machine to the target's jobs:
            // it stays in sight.
            if let Some(warning) = &target.sandbox.warning {
                let noun = match target.kind {
                    crate::status::TargetKind::Org => "org",
                    _ => "repo",
                };
                let undo = if target.sandbox.walls {
                    "--docker off"
                } else {
                    "--sandbox on"
                };
                out.push(Concern {
                    code: "target_sandbox".to_owned(),
                    message: format!("{}: {warning}", target.target),
                    fix: format!(
                        "If that is not what you want: `runner-manager {noun} set {} {undo}`.",
                        target.target
                    ),
                });
            }
        }
        if let Some(latest) = self.unacknowledged.last() {
            let more = self.unacknowledged.len() - 1;
            out.push(Concern {
                code: "runner_failed".to_owned(),
                message: format!(
                    "Runner failed · {}: {}{}",
                    latest.target,
                    reason_words(latest.reason),
                    if more > 0 {
                        format!(" (and {})", count(more, "more failure", "more failures"))
                    } else {
                        String::new()
                    }
                ),
                // What happened to this runner (its job, how it ended) before what to do.
                fix: match &latest.detail {
                    Some(detail) => format!("{detail} {}", fix_sentence(&latest.fix)),
                    None => fix_sentence(&latest.fix),
                },
            });
        }
        out
    }
}
