//! `runner-manager cache show [TARGET] [--json]`, `cache clear [TARGET] [--tool T]` and
//! `host set-cache-size SIZE`: what the caches hold, removing them, their size cap. The
//! service answers (it owns the caches); nothing is asked of GitHub.

use super::backend_api::{client_failure, ApiBackend};
use crate::exit::Failure;
use rm_core::caches::{format_size, parse_size, Namespace, TOOL_CACHE_ID};
use rm_proto::{CacheClear, CacheEntry, CachesReport, HostCachesChange, TargetRef};
use std::path::Path;

/// The namespace `target` names as `cache show` prints it (its own; a shared one is matched
/// by the service when clearing).
fn namespace_text(target: &str) -> Result<String, Failure> {
    let t = rm_core::Target::parse(target).map_err(|e| Failure::usage(e.to_string()))?;
    Ok(Namespace::of_target(&t).to_string())
}

pub fn show(socket: &Path, target: Option<&str>, as_json: bool) -> Result<(), Failure> {
    let wanted = target.map(namespace_text).transpose()?;
    if let Some(t) = target {
        TargetRef::parse(t).map_err(|e| Failure::usage(e.to_string()))?;
    }
    let api = ApiBackend::connect(socket)?;
    let mut report = api
        .block_on(api.client().caches())
        .map_err(client_failure)?;
    if let Some(ns) = &wanted {
        report.entries.retain(|e| {
            e.namespace
                .as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case(ns))
        });
    }
    if as_json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure::internal(format!("cannot encode the answer as JSON: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    print!("{}", render(&report, wanted.as_deref()));
    Ok(())
}

/// Whether an entry is a tool of a tool cache (`tool-cache/<tool>`), not a dependency cache.
fn is_tool(e: &CacheEntry) -> bool {
    e.tool
        .strip_prefix(TOOL_CACHE_ID)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The report as text: the cap and total, then a line per cache.
pub fn render(report: &CachesReport, only: Option<&str>) -> String {
    let mut out = String::new();
    let deps: u64 = report
        .entries
        .iter()
        .filter(|e| !is_tool(e))
        .map(|e| e.bytes)
        .sum();
    let tools: u64 = report
        .entries
        .iter()
        .filter(|e| is_tool(e))
        .map(|e| e.bytes)
        .sum();
    out.push_str(&format!(
        "Dependency caches: {} of {} (least recently used are removed between jobs beyond that; \
         change it with `runner-manager host set-cache-size SIZE`)\n",
        format_size(deps),
        format_size(report.cap_bytes)
    ));
    out.push_str(&format!(
        "Tool caches (one per repository): {}{}\n",
        format_size(tools),
        if report.tool_cache { "" } else { " (off)" }
    ));
    if !report.root.is_empty() {
        out.push_str(&format!("Kept in {}\n", report.root));
    }
    let shown: Vec<&CacheEntry> = report.entries.iter().filter(|e| e.bytes > 0).collect();
    if shown.is_empty() {
        out.push_str(match only {
            Some(_) => "Nothing is cached for it yet: its next job fills its caches.\n",
            None => "Nothing is cached yet: jobs fill the caches as they run.\n",
        });
        return out;
    }
    out.push('\n');
    for e in shown {
        let whose = e.namespace.as_deref().unwrap_or("every target");
        out.push_str(&format!(
            "  {:<24} {:<20} {:>10}  {} hit(s){}\n",
            whose,
            e.tool,
            format_size(e.bytes),
            e.hits,
            if e.in_use { "  in use" } else { "" }
        ));
    }
    out
}

pub fn clear(socket: &Path, target: Option<&str>, tool: Option<&str>) -> Result<(), Failure> {
    if let Some(t) = tool {
        if t != TOOL_CACHE_ID && rm_core::caches::find_tool(t).is_none() {
            return Err(Failure::usage(
                rm_core::caches::CacheError::UnknownTool(t.to_owned()).to_string(),
            ));
        }
    }
    if let Some(t) = target {
        TargetRef::parse(t).map_err(|e| Failure::usage(e.to_string()))?;
    }
    let api = ApiBackend::connect(socket)?;
    let cleared = api
        .block_on(api.client().clear_caches(&CacheClear {
            target: target.map(str::to_owned),
            tool: tool.map(str::to_owned),
        }))
        .map_err(client_failure)?;
    let freed: u64 = cleared.removed.iter().map(|e| e.bytes).sum();
    println!(
        "Removed {} cache(s), {}.",
        cleared.removed.len(),
        format_size(freed)
    );
    if !cleared.in_use.is_empty() {
        let names: Vec<String> = cleared
            .in_use
            .iter()
            .map(|e| match &e.namespace {
                Some(ns) => format!("{ns} {}", e.tool),
                None => e.tool.clone(),
            })
            .collect();
        println!(
            "Left {} in use by running jobs ({}): run this again when they have finished.",
            cleared.in_use.len(),
            names.join(", ")
        );
    }
    Ok(())
}

pub fn set_size(socket: &Path, size: &str) -> Result<(), Failure> {
    let bytes = parse_size(size).map_err(|e| Failure::usage(e.to_string()))?;
    let api = ApiBackend::connect(socket)?;
    let report = api
        .block_on(api.client().change_host_caches(&HostCachesChange {
            cap_bytes: Some(bytes),
            tool_cache: None,
        }))
        .map_err(client_failure)?;
    let used: u64 = report
        .entries
        .iter()
        .filter(|e| !is_tool(e))
        .map(|e| e.bytes)
        .sum();
    println!(
        "Dependency caches may now use {} (they use {}).",
        format_size(report.cap_bytes),
        format_size(used)
    );
    if used > report.cap_bytes {
        println!("What running jobs use is removed once they finish.");
    }
    Ok(())
}
