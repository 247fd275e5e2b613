//! Every path the project's documents name resolves: a `service/…`, `src-tauri/…`, `tests/…`
//! (and the other top-level directories) in backticks must exist in the repository, so that a
//! moved or renamed file cannot leave ARCHITECTURE.md, README.md and the rest pointing at
//! nothing. A path resolves from the document's directory (a crate's README names its own
//! `tests/…`) or from the repository's root. A `*` in the last component matches any name
//! (`tests/tests/tray_*.rs`); a `:line` suffix is ignored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

const TOP: &[&str] = &[
    "service/",
    "src-tauri/",
    "tests/",
    "ui/",
    "installer/",
    "scripts/",
    "icons/",
    "docs/",
    ".ci/",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "SECURITY.md",
        "BENCHMARKS.md",
    ]
    .iter()
    .map(|d| root.join(d))
    .collect();
    out.push(root.join("installer/README.md"));
    for e in std::fs::read_dir(root.join("service")).unwrap().flatten() {
        let readme = e.path().join("README.md");
        if readme.exists() {
            out.push(readme);
        }
    }
    out
}

/// The backticked spans of `text` that start with a top-level directory, with their lines.
fn named_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (i, span) in line.split('`').enumerate() {
            // Odd pieces are inside backticks.
            if i % 2 == 1 && TOP.iter().any(|t| span.starts_with(t)) && !span.contains(' ') {
                let path = span.split(':').next().unwrap_or(span);
                out.push((n + 1, path.trim_end_matches('/').to_owned()));
            }
        }
    }
    out
}

fn resolves(root: &Path, path: &str) -> bool {
    let (dir, last) = match path.rsplit_once('/') {
        Some((d, l)) => (root.join(d), l),
        None => (root.to_path_buf(), path),
    };
    if !last.contains('*') {
        return dir.join(last).exists();
    }
    let (head, tail) = last.split_once('*').unwrap();
    std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(head) && name.ends_with(tail) && name.len() >= head.len() + tail.len()
        })
    })
}

#[test]
fn every_path_the_documents_name_exists() {
    let root = root();
    let mut missing = Vec::new();
    let mut seen = 0;
    for doc in documents(&root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        // A crate's README names its own files from the crate's directory.
        let here = doc.parent().unwrap();
        for (line, path) in named_paths(&text) {
            seen += 1;
            if !resolves(here, &path) && !resolves(&root, &path) {
                missing.push(format!("{}:{line}: `{path}`", doc.display()));
            }
        }
    }
    assert!(
        seen > 50,
        "the documents name only {seen} paths: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "paths named in the documents that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_check_finds_a_missing_path_and_accepts_patterns() {
    let root = root();
    let found = named_paths("see `service/engine/src/nothing_here.rs:12` and `service/core`");
    assert_eq!(found.len(), 2);
    assert!(!resolves(&root, &found[0].1), "a missing file is reported");
    assert!(resolves(&root, &found[1].1));
    assert!(resolves(&root, "tests/tests/tray_*.rs"));
    assert!(!resolves(&root, "tests/tests/no_such_*.rs"));
}
