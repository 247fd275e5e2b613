//! How the CLI prints views: short human text, or JSON with `--json`.

use serde::Serialize;

use super::backend::{HostView, StatusView, TargetView};
use crate::exit::Failure;

fn json<T: Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::internal(format!("cannot encode the answer as JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// A target's capacity (`max N` or `monitor only`) and its profile suffix (none for `default`).
fn capacity_and_profile(max_capacity: Option<u32>, profile: &str) -> (String, String) {
    let cap = match max_capacity {
        Some(n) => format!("max {n}"),
        None => "monitor only".to_owned(),
    };
    let profile = if profile == "default" {
        String::new()
    } else {
        format!(" profile={profile}")
    };
    (cap, profile)
}

/// A target just added, and the `runs-on` label that sends jobs to this machine.
fn print_added_line(line: &str, routing_label: &str) {
    println!("added {line}");
    println!("put this in the workflow's jobs to run them on this machine:");
    println!("  runs-on: {routing_label}");
}

/// A list of targets, one line each (or JSON), with a hint when there is none.
fn print_target_list<T: Serialize>(
    targets: &[T],
    as_json: bool,
    noun: &str,
    line: fn(&T) -> String,
) -> Result<(), Failure> {
    if as_json {
        return json(&targets);
    }
    if targets.is_empty() {
        println!("none yet: add one with `runner-manager {noun} add`");
    }
    for t in targets {
        println!("{}", line(t));
    }
    Ok(())
}

/// Milliseconds since the epoch as a UTC time (the number itself when out of range).
fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

pub(super) fn target_line(t: &TargetView) -> String {
    let (cap, profile) = capacity_and_profile(t.max_capacity, &t.profile);
    format!(
        "{}{profile} [{}{}, {cap}, min {}, {} active] labels: {}",
        t.target,
        t.state,
        if t.enabled { "" } else { ", disabled" },
        t.min_capacity,
        t.active_runners,
        t.labels.join(",")
    )
}

pub(super) fn print_added(t: &TargetView) {
    print_added_line(&target_line(t), &t.routing_label);
}

pub(super) fn print_targets(
    targets: &[TargetView],
    as_json: bool,
    noun: &str,
) -> Result<(), Failure> {
    print_target_list(targets, as_json, noun, target_line)
}

pub(super) fn print_host(h: &HostView, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return json(h);
    }
    println!("host id:     {}", h.id);
    println!("label:       {}", h.label);
    println!("os/arch:     {}/{}", h.os, h.arch);
    println!("capacity:    {} runner(s) at once", h.capacity);
    println!("runner root: {}", h.runner_root.display());
    let (memory, rules) = admission_lines(&h.admission);
    println!("memory:      {memory}");
    println!("rules:       {rules}");
    println!("runner env:  {}", env_names_text(&h.runner_env));
    Ok(())
}

/// Memory admission and the workstation rules in two lines (without labels).
pub(super) fn admission_lines(a: &rm_proto::HostAdmission) -> (String, String) {
    let on_off = |on: bool| if on { "on" } else { "off" };
    let memory = if a.memory_admission {
        format!(
            "admission on: a new runner is expected to need {} MiB (until its target has a \
             history), {} MiB kept free",
            a.runner_memory_mb, a.memory_headroom_mb
        )
    } else {
        format!(
            "admission off (when on: {} MiB expected per new runner, {} MiB kept free)",
            a.runner_memory_mb, a.memory_headroom_mb
        )
    };
    let rules = format!(
        "on battery {}, max load {}, quiet hours {}, idle only {}",
        if a.wait_on_battery { "wait" } else { "run" },
        a.max_load
            .map_or_else(|| "off".to_owned(), |l| format!("{}", l.0)),
        a.quiet_hours.as_deref().unwrap_or("off"),
        on_off(a.idle_only)
    );
    (memory, rules)
}

/// The settings after `host set-admission` / `host set-rules`.
pub(super) fn print_admission(a: &rm_proto::HostAdmission) {
    let (memory, rules) = admission_lines(a);
    println!("memory {memory}");
    println!("workstation rules: {rules}");
}

pub(super) fn print_status(s: &StatusView, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return json(s);
    }
    println!(
        "host {} ({}/{}), capacity {}, {} runner(s) active",
        s.host.label, s.host.os, s.host.arch, s.host.capacity, s.active_runners
    );
    match s.last_github_contact_ms {
        Some(ms) => println!("last GitHub contact: {}", utc(ms)),
        None => println!("last GitHub contact: never"),
    }
    if s.targets.is_empty() {
        println!("no targets: add one with `runner-manager repo add owner/repo`");
    }
    for t in &s.targets {
        println!("  {}", target_line(t));
    }
    Ok(())
}

/// The wire name of an enum value (`busy`, `signed_in`, …), as the API and `--json` spell it.
fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "unknown".to_owned(),
    }
}

fn when(t: rm_proto::UnixMillis) -> String {
    utc(t.as_millis())
}

pub(super) fn api_target_line(t: &rm_proto::TargetStatus) -> String {
    let (cap, profile) = capacity_and_profile(t.max_capacity, &t.profile);
    format!(
        "{}{profile} [{}{}, {cap}, min {}, {} queued, {} active] labels: {}{}{}{}{}",
        t.target,
        wire(&t.state),
        if t.enabled { "" } else { ", disabled" },
        t.min_capacity,
        t.demand.queued,
        t.active_runners,
        t.labels.join(","),
        own_admission_text(t.admission.as_ref()),
        own_cache_text(t.cache.as_ref()),
        workspace_text(t.workspace, t.saved_workspaces),
        sandbox_text(&t.sandbox)
    )
}

/// ` · SANDBOX OFF` / ` · docker: on (root)` for a target away from the default.
fn sandbox_text(s: &rm_proto::TargetSandbox) -> String {
    let mut out = String::new();
    if !s.walls {
        out.push_str(" · SANDBOX OFF (its jobs can read your files)");
    }
    if s.docker {
        out.push_str(" · docker: on (its jobs have root here)");
    }
    if let Some(mb) = s.memory_max_mb {
        out.push_str(&format!(" · job memory: at most {mb} MiB"));
    }
    out
}

/// ` · workspace: persistent (2 saved)` for a target that keeps its work folders.
fn workspace_text(w: rm_proto::Workspace, saved: u32) -> String {
    match w {
        rm_proto::Workspace::Persistent => format!(" · workspace: persistent ({saved} saved)"),
        _ => String::new(),
    }
}

/// ` · cache: off` / ` · cache: shared team-a` for a target with its own cache settings.
fn own_cache_text(c: Option<&rm_proto::TargetCache>) -> String {
    let Some(c) = c else {
        return String::new();
    };
    match (c.enabled, &c.namespace) {
        (Some(false), _) => " · cache: off".to_owned(),
        (_, Some(ns)) => format!(" · cache: shared {ns}"),
        (Some(true), None) => " · cache: on".to_owned(),
        (None, None) => String::new(),
    }
}

/// ` · admission: memory off, runner 6144 MiB` for a target with its own settings.
fn own_admission_text(a: Option<&rm_proto::TargetAdmission>) -> String {
    let Some(a) = a else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(on) = a.memory_admission {
        parts.push(format!("memory {}", if on { "on" } else { "off" }));
    }
    if let Some(mb) = a.runner_memory_mb {
        parts.push(format!("runner {mb} MiB"));
    }
    if let Some(mb) = a.memory_headroom_mb {
        parts.push(format!("headroom {mb} MiB"));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(" · admission: {}", parts.join(", "))
}

/// A target's problem, indented under its line: what is wrong, when it is tried next, the fix.
fn problem_lines(p: &rm_proto::TargetProblem) -> Vec<String> {
    let mut lines = vec![format!("    {}: {}", wire(&p.code), p.message)];
    if let Some(next) = p.next_try {
        lines.push(format!("    next try: {}", when(next)));
    }
    lines.push(format!("    fix: {}", p.fix));
    lines
}

/// One host check: `PASS`/`WARN`/`FAIL`/`SKIP`, its title and what was found; the fix below
/// when it did not pass.
pub(super) fn check_lines(c: &rm_proto::HostCheck) -> Vec<String> {
    let state = match c.state {
        rm_proto::CheckState::Pass => "PASS",
        rm_proto::CheckState::Warn => "WARN",
        rm_proto::CheckState::Fail => "FAIL",
        rm_proto::CheckState::Skipped => "SKIP",
        rm_proto::CheckState::Unknown => "????",
    };
    let advice = if c.required { "" } else { " (advice)" };
    let mut lines = vec![
        format!("{state}  {}{advice} [{}]", c.title, c.id),
        format!("      {}", c.detail),
    ];
    if let (Some(fix), false) = (&c.fix, c.state == rm_proto::CheckState::Pass) {
        lines.push(format!("      fix: {fix}"));
    }
    lines
}

/// `host doctor`: every check, then the verdict; a failed required check is an error (its
/// exit code lets scripts branch).
pub(super) fn print_doctor(r: &rm_proto::DoctorReport, as_json: bool) -> Result<(), Failure> {
    if as_json {
        json(r)?;
    } else {
        for c in &r.checks {
            for line in check_lines(c) {
                println!("{line}");
            }
        }
    }
    if r.fit() {
        if !as_json {
            println!("this host is fit to run runners");
        }
        return Ok(());
    }
    let failed: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.required && c.state == rm_proto::CheckState::Fail)
        .map(|c| c.id.as_str())
        .collect();
    Err(Failure::new(
        crate::exit::ExitCode::HostUnfit,
        format!(
            "this host is unfit: {} failed, so nothing is launched; apply the fixes above, then \
             retry the targets that stopped (`runner-manager repo set OWNER/REPO --retry`)",
            failed.join(", ")
        ),
    ))
}

pub(super) fn print_api_added(t: &rm_proto::TargetStatus, routing_label: &str) {
    print_added_line(&api_target_line(t), routing_label);
}

/// A target added for the pool: the `runs-on` label is the pool's, which every host of the
/// pool serves (this machine's own label would pin the jobs to it).
pub(super) fn print_api_added_to_pool(t: &rm_proto::TargetStatus, pool_label: &str) {
    println!("added {}", api_target_line(t));
    println!("put this in the workflow's jobs to run them on any host of the pool:");
    println!("  runs-on: {pool_label}");
}

pub(super) fn print_api_targets(
    targets: &[rm_proto::TargetStatus],
    as_json: bool,
    noun: &str,
) -> Result<(), Failure> {
    print_target_list(targets, as_json, noun, api_target_line)
}

/// `host show --json`: the host's fields, plus what it spends of the rate limit and whether
/// GitHub answers it.
#[derive(Serialize)]
struct HostShow<'a> {
    #[serde(flatten)]
    host: &'a rm_proto::HostStatus,
    budget: Option<&'a rm_proto::Budget>,
    github_health: &'a rm_proto::GitHubHealth,
}

pub(super) fn print_api_host(s: &rm_proto::Status, as_json: bool) -> Result<(), Failure> {
    let h = &s.host;
    if as_json {
        return json(&HostShow {
            host: h,
            budget: s.budget.as_ref(),
            github_health: &s.github_health,
        });
    }
    println!("host id:       {}", h.id);
    println!("label:         {}", h.label);
    println!("os/arch:       {}/{}", wire(&h.os), wire(&h.arch));
    println!("capacity:      {} runner(s) at once", h.capacity);
    if let Some(note) = &h.capacity_note {
        println!("               {note}");
    }
    println!("routing label: {}", h.routing_label);
    if let Some(a) = &h.admission {
        let (memory, rules) = admission_lines(a);
        println!("memory:        {memory}");
        println!("rules:         {rules}");
        println!(
            "               change them with `runner-manager host set-admission` / `host \
             set-rules`"
        );
    }
    println!("runner env:    {}", env_names_text(&h.runner_env));
    let now = chrono::Utc::now().timestamp_millis();
    if let Some(line) = health_line(&s.github_health, now) {
        println!("{line}");
    }
    println!("{}", traffic_line(s.budget.as_ref()));
    Ok(())
}

/// The runner environment's names in one line (values only in `host env show`).
pub(super) fn env_names_text(names: &[String]) -> String {
    match names.len() {
        0 => "none (set with `runner-manager host env set NAME=VALUE`)".to_owned(),
        n => format!(
            "{n} variable(s) given to every runner: {} (`host env show`)",
            names.join(", ")
        ),
    }
}

/// `host env show`: `NAME=VALUE` lines (names alone when the values were withheld), or JSON.
pub(super) fn print_host_env(env: &rm_proto::HostEnv, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return json(env);
    }
    if env.variables.is_empty() {
        eprintln!(
            "no runner environment variables are set: add one with `runner-manager host env \
             set NAME=VALUE`"
        );
        return Ok(());
    }
    for var in &env.variables {
        match &var.value {
            Some(value) => println!("{}={value}", var.name),
            None => println!("{}", var.name),
        }
    }
    if !env.values_shown {
        eprintln!(
            "values are shown to the service's operators only (they may hold a proxy \
             password): run the command as one"
        );
    }
    Ok(())
}

/// `12,345`.
fn thousands(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A time of day in the local time zone, `14:03:07` (the number when out of range).
fn clock(t: rm_proto::UnixMillis, format: &str) -> String {
    crate::local_time::clock(t.as_millis(), format).unwrap_or_else(|| t.as_millis().to_string())
}

/// `in 12s`, `in 3m 05s`, or `now` for a time that has come.
fn from_now(t: rm_proto::UnixMillis, now_ms: i64) -> String {
    // Rounded up: "in 0s" would read as a try under way.
    let secs = ((t.as_millis() - now_ms).max(0) + 999) / 1000;
    match secs {
        0 => "now".to_owned(),
        s if s < 60 => format!("in {s}s"),
        s => format!("in {}m {:02}s", s / 60, s % 60),
    }
}

/// `GitHub unreachable since 14:03:07 (5 failures), next try in 12s` (and the last failure);
/// `None` while GitHub answers.
pub(super) fn health_line(h: &rm_proto::GitHubHealth, now_ms: i64) -> Option<String> {
    use rm_proto::GitHubHealthState as S;
    let since = h
        .since
        .map(|t| format!(" since {}", clock(t, "%H:%M:%S")))
        .unwrap_or_default();
    let next = h
        .next_try
        .map(|t| format!(", next try {}", from_now(t, now_ms)))
        .unwrap_or_default();
    let detail = h
        .detail
        .as_deref()
        .map(|d| format!(" — last: {d}"))
        .unwrap_or_default();
    match h.state {
        S::Ok => None,
        S::Unreachable => Some(format!(
            "GitHub unreachable{since} ({} failure{}){next}{detail}; every target waits for it (check the network, or https://www.githubstatus.com)",
            h.consecutive_failures,
            if h.consecutive_failures == 1 { "" } else { "s" }
        )),
        S::RateLimited => Some(format!(
            "GitHub rate limit{since}{next}{}; nothing is sent until then",
            h.detail
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )),
        S::Unknown => Some("GitHub health unknown (a newer service?)".to_owned()),
    }
}

/// `GitHub requests, last hour: 120 charged · 3,400 free (304) · 2 failed; quota left 4,870 of
/// 5,000 (resets 14:00); planned: octo/app ~90/h, acme ~180/h`.
pub(super) fn traffic_line(b: Option<&rm_proto::Budget>) -> String {
    let Some(b) = b else {
        return "GitHub requests: none answered yet".to_owned();
    };
    let resets = b
        .reset
        .map(|t| format!(" (resets {})", clock(t, "%H:%M")))
        .unwrap_or_default();
    let planned = if b.planned_per_hour.is_empty() {
        String::new()
    } else {
        let each: Vec<String> = b
            .planned_per_hour
            .iter()
            .map(|t| format!("{} ~{}/h", t.target, thousands(t.planned_per_hour)))
            .collect();
        format!("; planned: {}", each.join(", "))
    };
    format!(
        "GitHub requests, last hour: {} charged · {} free (304) · {} failed; quota left {} of {}{resets}{planned}",
        thousands(b.charged_last_hour),
        thousands(b.not_modified_last_hour),
        thousands(b.errors_last_hour),
        thousands(b.remaining),
        thousands(b.limit),
    )
}

/// `, job build (#42, octo/app) https://…` as far as it is known.
fn job_text(j: &rm_proto::JobRef) -> String {
    let mut text = format!(", job {}", j.name.as_deref().unwrap_or("?"));
    let detail: Vec<String> =
        j.id.map(|id| format!("#{id}"))
            .into_iter()
            .chain(j.repository.clone())
            .collect();
    if !detail.is_empty() {
        text.push_str(&format!(" ({})", detail.join(", ")));
    }
    if let Some(url) = &j.html_url {
        text.push(' ');
        text.push_str(url);
    }
    text
}

pub(super) fn print_api_status(s: &rm_proto::Status, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return json(s);
    }
    let h = &s.host;
    println!(
        "host {} ({}/{}), capacity {}, {} runner(s){}{}",
        h.label,
        wire(&h.os),
        wire(&h.arch),
        h.capacity,
        s.runners.len(),
        match h.runner_env.len() {
            0 => String::new(),
            n => format!(", {n} runner env variable(s)"),
        },
        if s.paused {
            ", launching PAUSED (resume: `runner-manager service resume`, or Resume in the tray)"
        } else {
            ""
        }
    );
    match &s.auth {
        rm_proto::AuthState::SignedIn { login, .. } if login.is_empty() => println!("signed in"),
        rm_proto::AuthState::SignedIn { login, .. } => println!("signed in as {login}"),
        rm_proto::AuthState::SignedOut => {
            println!("signed out: sign in with `runner-manager auth login`")
        }
        rm_proto::AuthState::SignInRequired { reason } => {
            println!("sign-in required ({reason}): run `runner-manager auth login`")
        }
        rm_proto::AuthState::Unknown => println!("sign-in state unknown"),
    }
    match s.last_github_contact {
        Some(t) => println!("last GitHub contact: {}", when(t)),
        None => println!("last GitHub contact: never"),
    }
    if let Some(line) = health_line(&s.github_health, chrono::Utc::now().timestamp_millis()) {
        println!("{line}");
    }
    println!("{}", traffic_line(s.budget.as_ref()));
    if s.targets.is_empty() {
        println!("no targets: add one with `runner-manager repo add owner/repo`");
    }
    // A failed check, and the sandbox turned off (a warning, but one that says jobs can read
    // this machine's files: never left to the doctor alone).
    for c in s.host_checks.iter().filter(|c| {
        c.state == rm_proto::CheckState::Fail
            || (c.id == "job_sandbox" && c.state == rm_proto::CheckState::Warn)
    }) {
        for line in check_lines(c) {
            println!("  {line}");
        }
        if let Some(at) = c.checked_at {
            println!("        checked {}", when(at));
        }
    }
    for t in &s.targets {
        println!("  {}", api_target_line(t));
        if let Some(peak) = t.typical_peak_rss_bytes {
            println!("    its runners typically peak at {}", bytes_text(peak));
        }
        for line in t.problem.iter().flat_map(problem_lines) {
            println!("  {line}");
        }
    }
    if let Some(hold) = &s.admission {
        println!("  {}", hold.message);
        println!("    fix: {}", hold.fix);
    }
    if let Some(hold) = &s.workstation {
        println!("  {}", hold.message);
        println!("    fix: {}", hold.fix);
    }
    if let Some(p) = &s.caches_problem {
        println!("  {}", p.message);
        println!("    fix: {}", p.fix);
    }
    if let Some(p) = &s.pool {
        let alive = p.hosts.iter().filter(|h| h.alive).count();
        let down = matches!(p.state.as_str(), "unreachable" | "refused");
        match p.message.as_deref().filter(|_| down) {
            Some(m) => {
                println!(
                    "  pool '{}' as {}: {}: pooled runners wait",
                    p.label,
                    p.host_id,
                    if p.state == "refused" {
                        "the pool database refuses this host"
                    } else {
                        "pool database unreachable"
                    }
                );
                println!("    {m}");
            }
            None => println!(
                "  pool '{}' at {} as {}: {}, {alive} host(s) alive (`runner-manager pool status`)",
                p.label, p.address, p.host_id, p.state
            ),
        }
    }
    for r in &s.runners {
        let job = r.job.as_ref().map(job_text).unwrap_or_default();
        println!(
            "  runner {} for {}: {}{job} since {}",
            r.runner_name,
            r.target,
            wire(&r.state),
            when(r.since)
        );
        if let Some(u) = &r.usage {
            println!("    {}", usage_text(u));
        }
    }
    for f in &s.recent_failures {
        println!(
            "  failure at {} on {}: {} — {}",
            when(f.at),
            f.target,
            wire(&f.reason),
            f.fix
        );
        if let Some(detail) = &f.detail {
            println!("    {detail}");
        }
    }
    for l in &s.left_registrations {
        match l.next_try_at {
            Some(next) => println!(
                "  registration left at GitHub on {}: {} ended but GitHub still counts it busy \
                 and refused to delete it {} time(s); trying again at {}",
                l.target,
                l.runner_name,
                l.refusals,
                when(next)
            ),
            None => println!(
                "  registration left at GitHub on {}: {} ended but GitHub refused to delete it \
                 {} times; left for GitHub to remove once it gives up on the job (about 10 \
                 minutes after the runner died); nothing to do",
                l.target, l.runner_name, l.refusals
            ),
        }
    }
    Ok(())
}

/// Bytes for people: MiB below a GiB, else GiB with one decimal.
fn bytes_text(b: u64) -> String {
    const MIB: u64 = 1 << 20;
    if b < 1024 * MIB {
        format!("{} MiB", (b + MIB / 2) / MIB)
    } else {
        format!("{:.1} GiB", b as f64 / (1024 * MIB) as f64)
    }
}

/// Millicores as cores (1000 = one core busy).
fn cores_text(millicores: u64) -> String {
    format!("{:.1}", millicores as f64 / 1000.0)
}

/// A runner's metered usage in one line.
fn usage_text(u: &rm_proto::RunnerUsage) -> String {
    format!(
        "uses {} now (peak {}), CPU {} cores on average (busiest {})",
        bytes_text(u.rss_bytes),
        bytes_text(u.peak_rss_bytes),
        cores_text(u.average_millicores),
        cores_text(u.busiest_millicores)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_names_since_the_failures_and_the_next_try() {
        let now = 1_900_000_000_000i64;
        let h = rm_proto::GitHubHealth {
            state: rm_proto::GitHubHealthState::Unreachable,
            since: Some(rm_proto::UnixMillis(now - 95_000)),
            next_try: Some(rm_proto::UnixMillis(now + 11_200)),
            detail: Some("runs.list: HTTP 503".into()),
            consecutive_failures: 5,
        };
        let line = health_line(&h, now).unwrap();
        let since = clock(rm_proto::UnixMillis(now - 95_000), "%H:%M:%S");
        assert!(
            line.starts_with(&format!(
                "GitHub unreachable since {since} (5 failures), next try in 12s"
            )),
            "{line}"
        );
        assert!(line.contains("HTTP 503"), "{line}");
        let past = rm_proto::GitHubHealth {
            next_try: Some(rm_proto::UnixMillis(now - 1)),
            consecutive_failures: 1,
            ..h.clone()
        };
        assert!(health_line(&past, now)
            .unwrap()
            .contains("(1 failure), next try now"));
        let long = rm_proto::GitHubHealth {
            next_try: Some(rm_proto::UnixMillis(now + 125_000)),
            ..h.clone()
        };
        assert!(health_line(&long, now)
            .unwrap()
            .contains("next try in 2m 05s"));
        assert_eq!(health_line(&rm_proto::GitHubHealth::default(), now), None);
        let limited = rm_proto::GitHubHealth {
            state: rm_proto::GitHubHealthState::RateLimited,
            detail: Some("secondary rate limit".into()),
            consecutive_failures: 0,
            ..h
        };
        let line = health_line(&limited, now).unwrap();
        assert!(line.starts_with("GitHub rate limit since"), "{line}");
        assert!(line.contains("(secondary rate limit)"), "{line}");
    }

    #[test]
    fn the_traffic_line_shows_what_the_rate_limit_pays_for() {
        let b = rm_proto::Budget {
            limit: 5000,
            remaining: 4870,
            reset: Some(rm_proto::UnixMillis(1_900_000_800_000)),
            charged_last_hour: 120,
            not_modified_last_hour: 3400,
            errors_last_hour: 2,
            poll_interval_secs: 2,
            planned_per_hour: vec![
                rm_proto::TargetSpend {
                    target: "octo/app".into(),
                    planned_per_hour: 90,
                },
                rm_proto::TargetSpend {
                    target: "acme".into(),
                    planned_per_hour: 1180,
                },
            ],
        };
        let resets = clock(rm_proto::UnixMillis(1_900_000_800_000), "%H:%M");
        assert_eq!(
            traffic_line(Some(&b)),
            format!("GitHub requests, last hour: 120 charged · 3,400 free (304) · 2 failed; quota left 4,870 of 5,000 (resets {resets}); planned: octo/app ~90/h, acme ~1,180/h")
        );
        assert_eq!(traffic_line(None), "GitHub requests: none answered yet");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn a_failed_check_shows_its_fix_and_a_passed_one_does_not() {
        let mut c = rm_proto::HostCheck {
            id: "runner_root_reachable".into(),
            title: "The runner account can reach and execute inside the runner root".into(),
            state: rm_proto::CheckState::Fail,
            required: true,
            detail: "/d is mode 0700 (owner root, group root)".into(),
            fix: Some("`chmod o+x /d`".into()),
            checked_at: None,
        };
        assert_eq!(
            check_lines(&c),
            vec![
                "FAIL  The runner account can reach and execute inside the runner root \
                 [runner_root_reachable]",
                "      /d is mode 0700 (owner root, group root)",
                "      fix: `chmod o+x /d`",
            ]
        );
        c.state = rm_proto::CheckState::Pass;
        assert_eq!(check_lines(&c).len(), 2);
        let report = rm_proto::DoctorReport {
            at: rm_proto::UnixMillis(0),
            checks: vec![rm_proto::HostCheck {
                state: rm_proto::CheckState::Fail,
                ..c
            }],
        };
        let e = print_doctor(&report, true).unwrap_err();
        assert_eq!(e.code, crate::exit::ExitCode::HostUnfit);
        assert!(e.message.contains("runner_root_reachable"), "{}", e.message);
    }

    #[test]
    fn a_runners_job_is_shown_as_far_as_it_is_known() {
        let full = rm_proto::JobRef {
            id: Some(42),
            name: Some("build".into()),
            repository: Some("octo/app".into()),
            html_url: Some("https://github.com/octo/app/actions/runs/7/job/42".into()),
            ..rm_proto::JobRef::default()
        };
        assert_eq!(
            job_text(&full),
            ", job build (#42, octo/app) https://github.com/octo/app/actions/runs/7/job/42"
        );
        let bare = rm_proto::JobRef {
            id: Some(42),
            ..rm_proto::JobRef::default()
        };
        assert_eq!(job_text(&bare), ", job ? (#42)");
    }

    #[test]
    fn usage_reads_as_memory_and_cores() {
        let u = rm_proto::RunnerUsage {
            rss_bytes: 300 << 20,
            peak_rss_bytes: 3 << 30,
            cpu_ms: 90_000,
            average_millicores: 1_500,
            busiest_millicores: 2_000,
        };
        assert_eq!(
            usage_text(&u),
            "uses 300 MiB now (peak 3.0 GiB), CPU 1.5 cores on average (busiest 2.0)"
        );
    }
}
