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

pub(super) fn target_line(t: &TargetView) -> String {
    let cap = match t.max_capacity {
        Some(n) => format!("max {n}"),
        None => "monitor only".to_owned(),
    };
    let profile = if t.profile == "default" {
        String::new()
    } else {
        format!(" profile={}", t.profile)
    };
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
    println!("added {}", target_line(t));
    println!("put this in the workflow's jobs to run them on this machine:");
    println!("  runs-on: {}", t.routing_label);
}

pub(super) fn print_targets(
    targets: &[TargetView],
    as_json: bool,
    noun: &str,
) -> Result<(), Failure> {
    if as_json {
        return json(&targets);
    }
    if targets.is_empty() {
        println!("none yet: add one with `runner-manager {noun} add`");
    }
    for t in targets {
        println!("{}", target_line(t));
    }
    Ok(())
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
    Ok(())
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
        Some(ms) => println!(
            "last GitHub contact: {}",
            chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                .unwrap_or_else(|| ms.to_string())
        ),
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
