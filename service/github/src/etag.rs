//! Conditional-request memory: the last ETag and body per URL and token, so a
//! repeated poll sends `If-None-Match` and a 304 (free against the primary
//! limit) reuses the stored answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

struct Entry {
    generation: u64,
    etag: String,
    body: Arc<str>,
    used: u64,
}

/// URL → last good answer. Entries are tied to the credential generation:
/// GitHub's ETags differ per token, so a renewed token starts afresh.
pub(crate) struct EtagCache {
    inner: Mutex<(HashMap<String, Entry>, u64)>,
    capacity: usize,
}

impl EtagCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new((HashMap::new(), 0)),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Entry>, u64)> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The stored ETag and body for `url` under this token generation.
    pub(crate) fn get(&self, url: &str, generation: u64) -> Option<(String, Arc<str>)> {
        let mut g = self.lock();
        g.1 += 1;
        let tick = g.1;
        let e = g.0.get_mut(url)?;
        if e.generation != generation {
            return None;
        }
        e.used = tick;
        Some((e.etag.clone(), e.body.clone()))
    }

    /// Remembers a parsed-good answer.
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
        g.0.insert(
            url.to_string(),
            Entry {
                generation,
                etag: etag.to_string(),
                body,
                used: tick,
            },
        );
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
        let c = EtagCache::new(2);
        c.put("a", 1, "W/\"1\"", "A".into());
        assert_eq!(c.get("a", 1).unwrap().0, "W/\"1\"");
        assert!(c.get("a", 2).is_none(), "another token does not reuse it");
        c.put("b", 1, "e", "B".into());
        let _ = c.get("a", 1);
        c.put("c", 1, "e", "C".into());
        assert_eq!(c.len(), 2);
        assert!(c.get("b", 1).is_none(), "least recently used dropped");
        assert!(c.get("a", 1).is_some());
    }
}
