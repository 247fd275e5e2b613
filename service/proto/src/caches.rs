//! The caches over the local API: `GET /v1/caches` (what is cached, sizes, hits, the cap),
//! `POST /v1/caches/clear` (operators), `PATCH /v1/host/caches` (the size cap, the tool cache
//! switch; operators). A target's own cache settings travel in `TargetUpdate.cache` and
//! `TargetStatus.cache`.

use serde::{Deserialize, Serialize};

/// One cache directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// Whose: `owner/repo`, `org (organization)` or `name (shared)`; absent for the host-wide
    /// tool cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A tool of the caches' table (`npm`, `cargo`…), or `tool-cache/<tool>`.
    pub tool: String,
    pub bytes: u64,
    /// Jobs that found it filled.
    pub hits: u64,
    /// When a runner last got it (ms since the epoch; 0: unknown).
    pub last_used_ms: i64,
    /// A live runner has it: neither pruned nor cleared.
    pub in_use: bool,
}

/// `GET /v1/caches`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachesReport {
    /// The dependency caches' size cap (bytes).
    pub cap_bytes: u64,
    pub tool_cache: bool,
    /// Where they are on disk.
    pub root: String,
    pub entries: Vec<CacheEntry>,
}

/// `POST /v1/caches/clear`: remove caches no live runner has. No field: all of them (the tool
/// cache's finished tools too).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheClear {
    /// Only this target's (`owner/repo` or `org`; its namespace, shared or own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Only this tool's (`tool-cache`: the tool cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// What a clear did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCleared {
    pub removed: Vec<CacheEntry>,
    /// Matching caches a running job has: left alone.
    pub in_use: Vec<CacheEntry>,
}

/// `PATCH /v1/host/caches`. Omitted fields are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCachesChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_cache: Option<bool>,
}

/// A target's own cache settings (`null`: the default — on for a repository, off for an
/// organization; its own namespace).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetCache {
    #[serde(default)]
    pub enabled: Option<bool>,
    /// A shared namespace several targets join.
    #[serde(default)]
    pub namespace: Option<String>,
}
