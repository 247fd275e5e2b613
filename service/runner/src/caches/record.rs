//! What a runtime holds of the caches, kept beside its runner id in the service-only
//! `<runner root>/.ids/<name>.caches`, so leases and "in use" survive a restart of the service:
//! a record counts while its runtime exists.

use super::{io_at, CachesError};
use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Record {
    /// The namespace's directory relative to `deps/`.
    pub namespace: Option<String>,
    /// Tools whose shared cache the runner uses.
    pub shared: BTreeSet<String>,
    /// Tools whose writer's lease it holds.
    pub leases: BTreeSet<String>,
    /// The namespace (relative directory) whose tool cache it holds the writer's lease of.
    pub tool_lease: Option<String>,
}

/// One `key value` per line; unknown lines are ignored (a newer service's record still
/// reads).
pub(crate) fn write(path: &Path, r: &Record) -> Result<(), CachesError> {
    let mut text = String::new();
    if let Some(ns) = &r.namespace {
        text.push_str(&format!("namespace {ns}\n"));
    }
    for t in &r.shared {
        text.push_str(&format!("shared {t}\n"));
    }
    for t in &r.leases {
        text.push_str(&format!("lease {t}\n"));
    }
    if let Some(ns) = &r.tool_lease {
        text.push_str(&format!("tool-lease {ns}\n"));
    }
    let tmp = path.with_extension("caches.tmp");
    {
        let mut f = fs::File::create(&tmp).map_err(io_at(&tmp))?;
        f.write_all(text.as_bytes()).map_err(io_at(&tmp))?;
        f.sync_all().map_err(io_at(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_at(path))
}

/// `None` when absent or unreadable.
pub(crate) fn read(path: &Path) -> Option<Record> {
    let text = fs::read_to_string(path).ok()?;
    let mut r = Record::default();
    for line in text.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "namespace" => r.namespace = Some(value.to_owned()),
            "shared" => {
                r.shared.insert(value.to_owned());
            }
            "lease" => {
                r.leases.insert(value.to_owned());
            }
            // Without a namespace: the host-wide tool cache of an older service, which is
            // gone (see `Caches::open`).
            "tool-lease" if !value.is_empty() => r.tool_lease = Some(value.to_owned()),
            _ => {}
        }
    }
    Some(r)
}
