//! Conditional-request memory: the last few ETags and bodies per URL and token, so a repeated
//! poll sends `If-None-Match` and a 304 (free against the primary limit) reuses a stored
//! answer.
//!
//! Why more than one version: a list often goes back to an earlier state (a run leaves the
//! `queued` list, which is empty again; a JIT runner is deleted and the runner list is what it
//! was before). HTTP lets `If-None-Match` name several entity tags, and the server answers 304
//! when any of them is current, naming it in the 304's `ETag` (RFC 9110 §13.1.2, §15.4.5);
//! with only the latest version remembered, each such return would be a charged 200.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// One remembered answer.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    pub etag: String,
    pub body: Arc<str>,
}

struct Entry {
    generation: u64,
    /// Newest first, at most `versions`.
    versions: VecDeque<Version>,
    used: u64,
}

/// URL → last good answers. Entries are tied to the credential generation:
/// GitHub's ETags differ per token, so a renewed token starts afresh.
pub(crate) struct EtagCache {
    inner: Mutex<(HashMap<String, Entry>, u64)>,
    capacity: usize,
    versions: usize,
}

/// `W/"x"` and `"x"` name the same entity for `If-None-Match` (weak comparison).
pub(crate) fn same_tag(a: &str, b: &str) -> bool {
    a.trim().trim_start_matches("W/") == b.trim().trim_start_matches("W/")
}

impl EtagCache {
    /// At most `capacity` URLs, `versions` answers each (at least one).
    pub(crate) fn new(capacity: usize, versions: usize) -> Self {
        Self {
            inner: Mutex::new((HashMap::new(), 0)),
            capacity: capacity.max(1),
            versions: versions.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Entry>, u64)> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The stored answers for `url` under this token generation, newest first.
    pub(crate) fn get(&self, url: &str, generation: u64) -> Vec<Version> {
        let mut g = self.lock();
        g.1 += 1;
        let tick = g.1;
        let Some(e) = g.0.get_mut(url) else {
            return Vec::new();
        };
        if e.generation != generation {
            return Vec::new();
        }
        e.used = tick;
        e.versions.iter().cloned().collect()
    }

    /// Remembers a parsed-good answer as the newest version of `url`.
    pub(crate) fn put(&self, url: &str, generation: u64, etag: &str, body: Arc<str>) {
        let mut g = self.lock();
        g.1 += 1;
        let tick = g.1;
        if g.0.len() >= self.capacity && !g.0.contains_key(url) {
            if let Some(oldest) =
                g.0.iter()
                    .min_by_key(|(_, e)| e.used)
                    .map(|(k, _)| k.clone())
            {
                g.0.remove(&oldest);
            }
        }
        let entry = g.0.entry(url.to_string()).or_insert_with(|| Entry {
            generation,
            versions: VecDeque::new(),
            used: tick,
        });
        if entry.generation != generation {
            entry.generation = generation;
            entry.versions.clear();
        }
        entry.used = tick;
        entry.versions.retain(|v| !same_tag(&v.etag, etag));
        entry.versions.push_front(Version {
            etag: etag.to_string(),
            body,
        });
        entry.versions.truncate(self.versions);
    }

    /// A 304 named `etag` as current: that version becomes the newest; its body, if known.
    pub(crate) fn current(&self, url: &str, generation: u64, etag: &str) -> Option<Arc<str>> {
        let mut g = self.lock();
        let e = g.0.get_mut(url)?;
        if e.generation != generation {
            return None;
        }
        let at = e.versions.iter().position(|v| same_tag(&v.etag, etag))?;
        let v = e.versions.remove(at)?;
        let body = v.body.clone();
        e.versions.push_front(v);
        Some(body)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_by_url_and_generation_and_bounded() {
        let c = EtagCache::new(2, 1);
        c.put("a", 1, "W/\"1\"", "A".into());
        assert_eq!(c.get("a", 1)[0].etag, "W/\"1\"");
        assert!(c.get("a", 2).is_empty(), "another token does not reuse it");
        c.put("b", 1, "e", "B".into());
        let _ = c.get("a", 1);
        c.put("c", 1, "e", "C".into());
        assert_eq!(c.len(), 2);
        assert!(c.get("b", 1).is_empty(), "least recently used dropped");
        assert!(!c.get("a", 1).is_empty());
    }

    #[test]
    fn a_few_versions_per_url_newest_first_and_a_304_promotes_its_version() {
        let c = EtagCache::new(8, 3);
        for (tag, body) in [
            ("W/\"e\"", "empty"),
            ("W/\"q\"", "queued"),
            ("W/\"r\"", "run"),
        ] {
            c.put("runs", 1, tag, body.into());
        }
        let tags: Vec<String> = c.get("runs", 1).into_iter().map(|v| v.etag).collect();
        assert_eq!(tags, ["W/\"r\"", "W/\"q\"", "W/\"e\""]);
        // The list went back to empty: the 304 names that version (weakly compared).
        assert_eq!(c.current("runs", 1, "\"e\"").as_deref(), Some("empty"));
        assert_eq!(c.get("runs", 1)[0].etag, "W/\"e\"");
        assert!(c.current("runs", 1, "W/\"unknown\"").is_none());
        assert!(c.current("runs", 2, "W/\"e\"").is_none(), "another token");
        // A fourth version pushes the oldest out; the same tag again is not kept twice.
        c.put("runs", 1, "W/\"x\"", "x".into());
        c.put("runs", 1, "W/\"x\"", "x".into());
        let tags: Vec<String> = c.get("runs", 1).into_iter().map(|v| v.etag).collect();
        assert_eq!(tags, ["W/\"x\"", "W/\"e\"", "W/\"r\""]);
        // A new token starts afresh.
        c.put("runs", 2, "W/\"y\"", "y".into());
        assert!(c.get("runs", 1).is_empty());
        assert_eq!(c.get("runs", 2).len(), 1);
    }
}
