//! `runner-manager why [TARGET]`: every queued job the service saw for its targets and why no
//! runner of this host started for it (or which runner takes it), with the fix. The service
//! answers from its loops' last passes; nothing is asked of GitHub.

use super::backend_api::{client_failure, ApiBackend};
use crate::exit::{ExitCode, Failure};
use rm_proto::{TargetRef, TargetWhy, UnixMillis, WhyReport};
use std::path::Path;

pub fn run(socket: &Path, target: Option<&str>, as_json: bool) -> Result<(), Failure> {
    let wanted = target
        .map(|t| TargetRef::parse(t).map_err(|e| Failure::usage(e.to_string())))
        .transpose()?;
    let api = ApiBackend::connect(socket)?;
    let mut report = api.block_on(api.client().why()).map_err(client_failure)?;
    if let Some(wanted) = &wanted {
        report
            .targets
            .retain(|t| t.target.eq_ignore_ascii_case(&wanted.name));
        if report.targets.is_empty() {
            return Err(Failure::new(
                ExitCode::NotFound,
                format!(
                    "this host does not serve {}: `runner-manager status` lists the targets it \
                     serves",
                    wanted.name
                ),
            ));
        }
    }
    if as_json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure::internal(format!("cannot encode the answer as JSON: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    print!("{}", render(&report));
    Ok(())
}

fn clock(t: UnixMillis) -> String {
    crate::local_time::clock(t.0, "%H:%M:%S").unwrap_or_else(|| "?".into())
}

/// The report as text: a block per target, a few lines per job.
pub fn render(report: &WhyReport) -> String {
    let mut out = String::new();
    if report.targets.is_empty() {
        out.push_str(
            "This host serves no target yet: add one with `runner-manager repo add OWNER/REPO`.\n",
        );
    }
    for t in &report.targets {
        render_target(&mut out, t);
    }
    out
}

fn render_target(out: &mut String, t: &TargetWhy) {
    let read = match t.jobs_read_at {
        Some(at) => format!("queue read at {}", clock(at)),
        None => "queue not read yet".into(),
    };
    let waiting = t.jobs.iter().filter(|j| !j.reason.covered).count();
    let head = match (t.jobs.len(), waiting) {
        (0, _) => "no queued job".to_owned(),
        (n, 0) => format!("{n} queued job(s), each has a runner"),
        (n, w) => format!("{n} queued job(s), {w} without a runner"),
    };
    let more = if t.is_floor {
        " (GitHub listed only the newest runs: there may be more)"
    } else {
        ""
    };
    out.push_str(&format!("{}: {head}{more} — {read}\n", t.target));
    if let Some(s) = &t.summary {
        out.push_str(&format!("  {}\n", s.message));
        if let Some(fix) = &s.fix {
            out.push_str(&format!("  fix: {fix}\n"));
        }
    }
    for j in &t.jobs {
        let runs_on = if j.runs_on.is_empty() {
            "runs-on: no labels".to_owned()
        } else {
            format!("runs-on [{}]", j.runs_on.join(", "))
        };
        let profile = match j.profile.as_deref() {
            Some(p) if p != "default" => format!(" profile={p}"),
            _ => String::new(),
        };
        let what = match (j.name.is_empty(), j.repository.is_empty()) {
            (false, false) => format!("{} · {} (job {})", j.repository, j.name, j.job_id),
            (false, true) => format!("{} (job {})", j.name, j.job_id),
            _ => format!("job {} (run {})", j.job_id, j.run_id),
        };
        let waited = match j.queued_at {
            Some(at) => format!(", queued {}", clock(at)),
            None => String::new(),
        };
        out.push_str(&format!("  {what}{waited} {runs_on}{profile}\n"));
        let mark = if j.reason.covered { "ok" } else { "waits" };
        out.push_str(&format!("    {mark}: {}\n", j.reason.message));
        if let Some(fix) = &j.reason.fix {
            out.push_str(&format!("    fix: {fix}\n"));
        }
    }
    for f in &t.recent_failures {
        let detail = f
            .detail
            .as_deref()
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  at {}, {}{detail}\n    fix: {}\n",
            clock(f.at),
            rm_proto::model::words::reason_words(f.reason),
            f.fix
        ));
    }
}
