//! The caches: what they hold, clearing them, their size and the tool cache.

use super::bad;
use crate::engine::Engine;
use crate::state::Daemon;
use crate::wire::journal_error;
use rm_proto::{ApiError, Peer};
use std::sync::Arc;

/// What the caches hold, as answered.
fn caches_report(daemon: &Daemon) -> rm_proto::CachesReport {
    let settings = &daemon.caches;
    let (root, entries) = match settings.caches() {
        Some(c) => {
            let entries = c.entries().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the caches could not be read");
                Vec::new()
            });
            (c.root().display().to_string(), entries)
        }
        None => (String::new(), Vec::new()),
    };
    rm_proto::CachesReport {
        cap_bytes: settings.cap_bytes(),
        tool_cache: settings.tool_cache(),
        root,
        entries: entries.iter().map(cache_entry).collect(),
    }
}

fn cache_entry(e: &rm_runner::EntryInfo) -> rm_proto::CacheEntry {
    rm_proto::CacheEntry {
        namespace: e.namespace.as_ref().map(ToString::to_string),
        tool: e.tool.clone(),
        bytes: e.bytes,
        hits: e.hits,
        last_used_ms: e.last_used_ms,
        in_use: e.in_use,
    }
}

impl Engine {
    pub async fn caches(&self) -> Result<rm_proto::CachesReport, ApiError> {
        let daemon = Arc::clone(&self.daemon);
        tokio::task::spawn_blocking(move || caches_report(&daemon))
            .await
            .map_err(|e| ApiError::internal(format!("reading the caches failed: {e}")))
    }

    pub async fn clear_caches(
        &self,
        peer: Peer,
        req: rm_proto::CacheClear,
    ) -> Result<rm_proto::CacheCleared, ApiError> {
        let tool = match req.tool.as_deref() {
            None => None,
            Some(t) if t == rm_core::caches::TOOL_CACHE_ID => Some(t.to_owned()),
            Some(t) => match rm_core::caches::find_tool(t) {
                Some(tool) => Some(tool.id.to_owned()),
                None => {
                    return Err(bad(
                        rm_core::caches::CacheError::UnknownTool(t.to_owned()).to_string()
                    ))
                }
            },
        };
        let namespace = match &req.target {
            None => None,
            Some(text) => {
                let target = rm_core::Target::parse(text).map_err(|e| bad(e.to_string()))?;
                let policies = self
                    .daemon
                    .journal
                    .with(|j| j.list_policies())
                    .await
                    .map_err(journal_error)?;
                let Some(policy) = policies.iter().find(|p| p.target() == &target) else {
                    return Err(ApiError::not_found(format!(
                        "{text} is not a target of this host: see `runner-manager repo list`"
                    )));
                };
                let setting = self.daemon.caches.for_policy(policy.id());
                Some(
                    setting
                        .namespace
                        .unwrap_or_else(|| rm_core::caches::Namespace::of_target(&target)),
                )
            }
        };
        let filter = rm_runner::ClearFilter { namespace, tool };
        let Some(caches) = self.daemon.caches.caches() else {
            return Ok(rm_proto::CacheCleared {
                removed: Vec::new(),
                in_use: Vec::new(),
            });
        };
        let removal = tokio::task::spawn_blocking(move || caches.clear(&filter))
            .await
            .map_err(|e| ApiError::internal(format!("clearing the caches failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("clearing the caches failed: {e}")))?;
        tracing::info!(
            uid = peer.uid,
            removed = removal.removed.len(),
            in_use = removal.in_use.len(),
            "caches cleared"
        );
        Ok(rm_proto::CacheCleared {
            removed: removal.removed.iter().map(cache_entry).collect(),
            in_use: removal.in_use.iter().map(cache_entry).collect(),
        })
    }

    pub async fn set_host_caches(
        &self,
        peer: Peer,
        req: rm_proto::HostCachesChange,
    ) -> Result<rm_proto::CachesReport, ApiError> {
        let settings = self
            .daemon
            .host_caches
            .change(&self.daemon.journal, &req)
            .await?;
        tracing::info!(
            uid = peer.uid,
            cap_bytes = settings.cap_bytes,
            tool_cache = settings.tool_cache,
            "cache settings changed"
        );
        let daemon = Arc::clone(&self.daemon);
        let cap = settings.cap_bytes;
        tokio::task::spawn_blocking(move || {
            // A smaller cap applies now, not after the next job.
            if let Some(c) = daemon.caches.caches() {
                if let Err(e) = c.prune(cap) {
                    tracing::warn!(error = %e, "the caches could not be pruned");
                }
            }
            caches_report(&daemon)
        })
        .await
        .map_err(|e| ApiError::internal(format!("reading the caches failed: {e}")))
    }
}
