//! The host's runner environment: empty until set, round-trip, unset, a refused change writes
//! nothing (and never names a value), a version-5 file migrates forward keeping what it had,
//! and a damaged row is a typed error that an unset can still remove.

// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use rm_core::{LabelSet, PolicySpec, Target};
use rm_journal::{HostSettings, Journal, JournalError, SCHEMA_VERSION};
use rusqlite::Connection;

fn open() -> (tempfile::TempDir, std::path::PathBuf, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let journal = Journal::open(&path).unwrap();
    (dir, path, journal)
}

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn variables_round_trip_change_and_unset() {
    let (_dir, _path, mut journal) = open();
    assert!(journal.runner_env().unwrap().is_empty());
    let first = vars(&[
        ("HTTPS_PROXY", "http://proxy:3128"),
        ("NO_PROXY", "localhost,127.0.0.1"),
    ]);
    assert_eq!(journal.change_runner_env(&first, &[]).unwrap(), first);
    assert_eq!(journal.runner_env().unwrap(), first);

    let now = journal
        .change_runner_env(
            &vars(&[
                ("HTTPS_PROXY", "http://other:8080"),
                ("PATH", "/opt/x/bin:/usr/bin:/bin"),
            ]),
            &["NO_PROXY".to_owned(), "NEVER_SET".to_owned()],
        )
        .unwrap();
    let expected = vars(&[
        ("HTTPS_PROXY", "http://other:8080"),
        ("PATH", "/opt/x/bin:/usr/bin:/bin"),
    ]);
    assert_eq!(now, expected);
    assert_eq!(journal.runner_env().unwrap(), expected);
    // An empty value is a value (some tools read "set but empty").
    journal
        .change_runner_env(&vars(&[("EMPTY", "")]), &[])
        .unwrap();
    assert_eq!(journal.runner_env().unwrap()["EMPTY"], "");
}

#[test]
fn a_refused_change_writes_nothing_and_names_no_value() {
    let (_dir, _path, mut journal) = open();
    let kept = vars(&[("HTTP_PROXY", "http://proxy:3128")]);
    journal.change_runner_env(&kept, &[]).unwrap();
    let secret_value = "hunter2-very-secret";
    let long = format!("{secret_value}{}", "x".repeat(4096));
    let nul = format!("{secret_value}\0");
    let refused: Vec<(BTreeMap<String, String>, Vec<String>, &str)> = vec![
        (
            vars(&[("OK_ONE", "1"), ("NPM_TOKEN", secret_value)]),
            vec![],
            "GitHub's secrets",
        ),
        (
            vars(&[
                ("OK_ONE", "1"),
                ("ACTIONS_RUNNER_INPUT_JITCONFIG", secret_value),
            ]),
            vec![],
            "runner",
        ),
        (
            vars(&[("OK_ONE", "1"), ("HOME", secret_value)]),
            vec![],
            "runtime",
        ),
        (
            vars(&[("OK_ONE", "1"), ("GITHUB_SHA", secret_value)]),
            vec![],
            "GitHub's context",
        ),
        (
            vars(&[("OK_ONE", "1"), ("1BAD", secret_value)]),
            vec![],
            "letters, digits",
        ),
        (
            vars(&[("OK_ONE", "1"), ("LONG", &long)]),
            vec![],
            "at most 4096",
        ),
        (vars(&[("OK_ONE", "1"), ("NUL", &nul)]), vec![], "NUL"),
        (vars(&[("OK_ONE", "1")]), vec!["OK_ONE".to_owned()], "once"),
        (
            vars(&[]),
            vec!["HTTP_PROXY".to_owned(), "bad name".to_owned()],
            "letters, digits",
        ),
    ];
    for (set, unset, said) in refused {
        let e = journal.change_runner_env(&set, &unset).unwrap_err();
        assert!(matches!(e, JournalError::InvalidInput { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains(said), "{text}");
        assert!(!text.contains(secret_value), "a value leaked: {text}");
        assert_eq!(journal.runner_env().unwrap(), kept, "{text}");
    }
}

#[test]
fn a_version_5_journal_migrates_forward_and_keeps_what_it_had() {
    let (_dir, path, mut journal) = open();
    let spec = PolicySpec::new(
        Target::parse("me/app").unwrap(),
        LabelSet::parse(["rm-home-linux-x64"]).unwrap(),
    );
    let policy = journal.insert_policy(&spec).unwrap();
    let settings = HostSettings {
        memory_admission: true,
        runner_memory_mb: 2048,
        memory_headroom_mb: 512,
        wait_on_battery: true,
        max_load: None,
        quiet_hours: None,
        idle_only: false,
    };
    journal.put_host_settings(&settings).unwrap();
    drop(journal);
    // Version 6 only adds `runner_env`, version 7 the caches' tables, 8 the targets' sandbox
    // choices and 9 the jobs' verdicts: without them, stamped 5, this is version 5's file.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE runner_env; DROP TABLE policy_cache; DROP TABLE cache_settings;
             DROP TABLE policy_sandbox; DROP TABLE attempt_trust; PRAGMA user_version = 5;",
        )
        .unwrap();

    let mut journal = Journal::open(&path).unwrap();
    assert_eq!(SCHEMA_VERSION, 10);
    assert_eq!(journal.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(journal.list_policies().unwrap(), vec![policy]);
    assert_eq!(journal.host_settings().unwrap(), Some(settings));
    assert!(journal.runner_env().unwrap().is_empty());
    let set = vars(&[("HTTPS_PROXY", "http://proxy:3128")]);
    journal.change_runner_env(&set, &[]).unwrap();
    drop(journal);
    assert_eq!(Journal::open(&path).unwrap().runner_env().unwrap(), set);
}

#[test]
fn a_damaged_row_is_a_typed_error_and_can_be_unset() {
    let (_dir, path, mut journal) = open();
    journal
        .change_runner_env(&vars(&[("HTTP_PROXY", "http://proxy:3128")]), &[])
        .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO runner_env (name, value, updated_at_ms) VALUES ('DB_PASSWORD', 'pw-x', 0)",
            [],
        )
        .unwrap();
    let e = journal.runner_env().unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("DB_PASSWORD") && !text.contains("pw-x"),
        "{text}"
    );
    journal
        .change_runner_env(&BTreeMap::new(), &["DB_PASSWORD".to_owned()])
        .unwrap();
    assert_eq!(
        journal.runner_env().unwrap(),
        vars(&[("HTTP_PROXY", "http://proxy:3128")])
    );
}
