//! How often each dependency cache was found non-empty and when a runner last got it, for
//! `cache show` and least-recently-used pruning: `<caches>/stats`, one line per cache,
//! written whole (temporary file and rename). Lost or unreadable, it starts over: it only
//! orders pruning.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

const FILE: &str = "stats";

#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// (namespace dir, tool) → (hits, last used ms)
    rows: BTreeMap<(String, String), (u64, i64)>,
}

impl Stats {
    pub fn load(root: &Path) -> Stats {
        let mut s = Stats::default();
        let Ok(text) = fs::read_to_string(root.join(FILE)) else {
            return s;
        };
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            if let [ns, tool, hits, last] = f.as_slice() {
                if let (Ok(h), Ok(l)) = (hits.parse(), last.parse()) {
                    s.rows
                        .insert(((*ns).to_owned(), (*tool).to_owned()), (h, l));
                }
            }
        }
        s
    }

    pub fn hit(&mut self, ns: &str, tool: &str, now_ms: i64) {
        let row = self
            .rows
            .entry((ns.to_owned(), tool.to_owned()))
            .or_default();
        row.0 += 1;
        row.1 = now_ms;
    }

    pub fn used(&mut self, ns: &str, tool: &str, now_ms: i64) {
        self.rows
            .entry((ns.to_owned(), tool.to_owned()))
            .or_default()
            .1 = now_ms;
    }

    pub fn get(&self, ns: &str, tool: &str) -> (u64, i64) {
        self.rows
            .get(&(ns.to_owned(), tool.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    pub fn forget(&mut self, ns: &str, tool: &str) {
        self.rows.remove(&(ns.to_owned(), tool.to_owned()));
    }

    pub fn save(&self, root: &Path) -> std::io::Result<()> {
        let mut text = String::new();
        for ((ns, tool), (hits, last)) in &self.rows {
            text.push_str(&format!("{ns}\t{tool}\t{hits}\t{last}\n"));
        }
        let tmp = root.join(".stats.tmp");
        {
            use std::os::unix::fs::OpenOptionsExt;
            // The service's alone: it names every target that has caches.
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
        }
        fs::rename(&tmp, root.join(FILE))
    }
}
