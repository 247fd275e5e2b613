//! No message in the code has a run of spaces in the middle of its words: what a lost line
//! continuation (a `\` at the end of a line inside a string) leaves behind, and what users then
//! read as `sign in again                      with …`.
//!
//! Every ordinary string literal of the workspace's Rust sources is read as the compiler reads
//! it (a `\` before a line break swallows the break and the next line's indentation); a run of
//! 8 or more spaces after a word is reported with its file and line. Not reported: alignment
//! after a colon (`label:       value`), indentation after a line break (`\n` or a raw one),
//! SQL (a literal that starts with a statement's keyword: its columns are aligned), raw strings
//! (`r"…"`, `r#"…"#`), comments, and this file's own examples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The directories whose sources are scanned, from the workspace root.
const ROOTS: &[&str] = &["service", "src-tauri/src", "tests/src", "tests/tests"];

/// Shorter runs are alignment in tables and benchmark output.
const RUN: usize = 8;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if path.is_dir() {
            if name != "target" && name != "node_modules" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// `(line, text)` of every ordinary string literal of `src`, the text as the compiler reads
/// it, except that escapes other than a line continuation are kept as written.
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let b = src.as_bytes();
    let (mut i, mut line) = (0, 1);
    let mut out = Vec::new();
    let newlines = |from: usize, to: usize| b[from..to].iter().filter(|c| **c == b'\n').count();
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                line += newlines(i, end);
                i = end;
            }
            b'r' | b'b'
                if (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
                    && raw_string_at(&src[i..]).is_some() =>
            {
                let (open, hashes) = raw_string_at(&src[i..]).unwrap_or((1, 0));
                let close = format!("\"{}", "#".repeat(hashes));
                let end = src[i + open..]
                    .find(&close)
                    .map_or(b.len(), |e| i + open + e + close.len());
                line += newlines(i, end);
                i = end;
            }
            b'\'' => i += char_literal_len(&b[i..]),
            b'"' => {
                let start = line;
                let mut text = String::new();
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    if b[j] == b'\\' && b.get(j + 1) == Some(&b'\n') {
                        j += 1;
                        while j < b.len() && b[j].is_ascii_whitespace() {
                            line += usize::from(b[j] == b'\n');
                            j += 1;
                        }
                        continue;
                    }
                    let len = if b[j] == b'\\' { 2 } else { 1 };
                    line += usize::from(b[j] == b'\n');
                    text.push_str(&String::from_utf8_lossy(&b[j..(j + len).min(b.len())]));
                    j += len;
                }
                out.push((start, text));
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The length of the opening (`r"`, `br##"`…) and the number of `#` when a raw string starts
/// at the beginning of `s`.
fn raw_string_at(s: &str) -> Option<(usize, usize)> {
    let rest = s.strip_prefix('b').unwrap_or(s);
    let after_r = rest.strip_prefix('r')?;
    let hashes = after_r.bytes().take_while(|c| *c == b'#').count();
    after_r[hashes..].starts_with('"').then(|| {
        let prefix = s.len() - rest.len();
        (prefix + 1 + hashes + 1, hashes)
    })
}

/// A char literal's length at the start of `b` (`'a'`, `'\n'`, `'\u{1F600}'`), or 1 for a
/// lifetime's quote.
fn char_literal_len(b: &[u8]) -> usize {
    match b {
        [b'\'', b'\\', b'u', b'{', ..] => b.iter().position(|c| *c == b'}').map_or(1, |p| p + 2),
        [b'\'', b'\\', _, b'\'', ..] => 4,
        [b'\'', c, b'\'', ..] if *c != b'\\' => 3,
        [b'\'', ..] => {
            // A multi-byte character: up to its closing quote within 4 bytes.
            match b.iter().skip(2).take(4).position(|c| *c == b'\'') {
                Some(p) if !b[1].is_ascii() => p + 3,
                _ => 1,
            }
        }
        _ => 1,
    }
}

/// Words a literal of SQL starts with.
const SQL: &[&str] = &[
    "SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP", "WITH", "PRAGMA",
];

/// The runs of [`RUN`] or more spaces in `text` after a word (see the module's words).
fn space_runs(text: &str) -> Vec<String> {
    let first = text.split_whitespace().next().unwrap_or("");
    if SQL.contains(&first) {
        return Vec::new();
    }
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b' ' {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let after_word = start > 0
            && !matches!(b[start - 1], b':' | b'\n')
            && !(start > 1 && &b[start - 2..start] == b"\\n");
        if i - start >= RUN && after_word {
            let mut from = start.saturating_sub(30);
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            let mut to = (i + 30).min(text.len());
            while !text.is_char_boundary(to) {
                to += 1;
            }
            found.push(text[from..to].to_owned());
        }
    }
    found
}

#[test]
fn no_message_has_a_run_of_spaces_between_its_words() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for root in ROOTS {
        rust_files(&workspace.join(root), &mut files);
    }
    assert!(files.len() > 100, "the sources were found: {}", files.len());
    let mut bad = Vec::new();
    let this = Path::new(file!()).file_name();
    for file in files.iter().filter(|f| f.file_name() != this) {
        let src = std::fs::read_to_string(file).unwrap();
        for (line, text) in string_literals(&src) {
            for run in space_runs(&text) {
                let rel = file.strip_prefix(&workspace).unwrap_or(file);
                bad.push(format!("{}:{line}: …{run}…", rel.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "strings with a run of spaces (a lost `\\` line continuation?):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scan_finds_a_lost_continuation_and_spares_alignment_and_raw_text() {
    let src = concat!(
        "let a = \"sign in again                      with it\";\n",
        "let b = \"fine \\\n        continued\";\n",
        "let c = \"label:       value\";\n",
        "let d = r#\"SELECT 1\n          FROM t        x\"#;\n",
        "// \"a comment          with a run\"\n",
        "let e = '\"'; let f = \"x\\n          indented\";\n",
        "let g = \"CREATE TABLE t (\n    id        integer\";\n",
    );
    let literals = string_literals(src);
    assert_eq!(literals[0].0, 1);
    assert_eq!(literals[1].1, "fine continued");
    let runs: Vec<String> = literals.iter().flat_map(|(_, t)| space_runs(t)).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].contains("again"), "{runs:?}");
}
