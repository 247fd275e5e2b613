//! No import circles among the modules of `rm-engine` and of `rm-daemon`: the state's owners
//! sit below the state, the projections and tasks above it, the use cases on top, so a part
//! can be read (and changed) without the whole. A module here is a file (or a directory's
//! `mod.rs` and its children) directly under `src/`; an edge is a `crate::m` or, in a file
//! directly under `src/`, a `super::m` outside the tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The words after `prefix` that look like module names.
fn after(text: &str, prefix: &str) -> BTreeSet<String> {
    text.match_indices(prefix)
        .filter(|(i, _)| {
            // `super::` inside `super::super::` or `a::super::` is not a root reference.
            *i == 0
                || !text.as_bytes()[i - 1].is_ascii_alphanumeric() && text.as_bytes()[i - 1] != b':'
        })
        .map(|(i, _)| {
            text[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|m| !m.is_empty())
        .collect()
}

fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(src, &mut all);
    let module_of = |p: &Path| -> String {
        let rel = p.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        first.trim_end_matches(".rs").to_owned()
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &all {
        let m = module_of(p);
        if m == "lib" || m == "main" {
            continue;
        }
        let text = std::fs::read_to_string(p).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut refs = after(text, "crate::");
        let top_level = p.parent() == Some(src);
        if top_level {
            refs.extend(after(text, "super::"));
        }
        g.entry(m.clone())
            .or_default()
            .extend(refs.into_iter().filter(|r| *r != m));
    }
    let names: BTreeSet<String> = g.keys().cloned().collect();
    for refs in g.values_mut() {
        refs.retain(|r| names.contains(r));
    }
    g
}

/// The circles of `g`: its strongly connected parts of more than one module.
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability by search from each module; small graphs, plain code.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(m) = todo.pop() {
            for n in g.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for m in g.keys() {
        let part: Vec<String> = g
            .keys()
            .filter(|n| *n == m || reaches[m].contains(*n) && reaches[*n].contains(m))
            .cloned()
            .collect();
        if part.len() > 1 && !out.contains(&part) {
            out.push(part);
        }
    }
    out
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn the_engine_and_the_daemon_have_no_import_circles() {
    for name in ["engine", "daemon"] {
        let g = graph(&crate_src(name));
        assert!(
            g.len() > 5,
            "{name}: only {} modules: is the scan broken?",
            g.len()
        );
        let found = circles(&g);
        assert!(
            found.is_empty(),
            "import circles in service/{name}/src: {found:?}\n(edges: {g:?})"
        );
    }
}

#[test]
fn a_circle_is_found() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("state".into(), ["status".to_owned()].into());
    g.insert(
        "status".into(),
        ["wire".to_owned(), "state".to_owned()].into(),
    );
    g.insert("wire".into(), BTreeSet::new());
    assert_eq!(
        circles(&g),
        vec![vec!["state".to_owned(), "status".to_owned()]]
    );
    let refs = after(
        "use crate::state::Daemon; x::super::no; super::wire::via",
        "super::",
    );
    assert_eq!(refs, ["wire".to_owned()].into());
}
