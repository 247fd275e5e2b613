//! The real `runner-manager` binary against temporary data directories, with `--offline`
//! (the journal edited directly; the commands through a running service are covered by the
//! end-to-end tests in `tests/`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

use std::path::Path;
use std::process::{Command, Output};

use rm_daemon::ExitCode;

fn rm(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner-manager"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--offline")
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited by a signal")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(data_dir: &Path, args: &[&str]) -> String {
    let o = rm(data_dir, args);
    assert_eq!(
        code(&o),
        0,
        "{args:?}: stdout {} stderr {}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

fn fails(data_dir: &Path, args: &[&str], expected: ExitCode) -> String {
    let o = rm(data_dir, args);
    assert_eq!(
        code(&o),
        i32::from(expected.code()),
        "{args:?}: stdout {} stderr {}",
        stdout(&o),
        stderr(&o)
    );
    stderr(&o)
}

fn json(data_dir: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(data_dir, args)).unwrap()
}

fn journal_view(data_dir: &Path) -> Vec<u8> {
    // The WAL may hold committed pages too; compare what a reader sees instead of bytes.
    let o = rm(data_dir, &["status", "--json"]);
    o.stdout
}

#[test]
fn version_is_name_and_semver() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(dir.path(), &["--version"]);
    assert_eq!(out, format!("runner-manager {}\n", rm_daemon::VERSION));
}

#[test]
fn repos_add_list_set_remove() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = ok(
        d,
        &[
            "repo",
            "add",
            "me/app",
            "--max-runners",
            "2",
            "--label",
            "gpu",
        ],
    );
    let host = json(d, &["host", "show", "--json"]);
    let routing = format!(
        "rm-{}-{}-{}",
        host["label"].as_str().unwrap(),
        host["os"].as_str().unwrap(),
        host["arch"].as_str().unwrap()
    );
    assert!(out.contains(&format!("runs-on: {routing}\n")), "{out}");

    let list = json(d, &["repo", "list", "--json"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["target"], "me/app");
    assert_eq!(list[0]["max_capacity"], 2);
    assert_eq!(list[0]["enabled"], true);
    assert_eq!(list[0]["labels"], serde_json::json!([routing, "gpu"]));

    // A second profile gets its own routing label.
    let out = ok(
        d,
        &[
            "repo",
            "add",
            "me/app",
            "--profile",
            "big",
            "--monitor-only",
        ],
    );
    assert!(out.contains(&format!("runs-on: {routing}-big\n")), "{out}");

    ok(
        d,
        &["repo", "set", "me/app", "--max-runners", "3", "--disable"],
    );
    let list = json(d, &["repo", "list", "--json"]);
    let app = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["profile"] == "default")
        .unwrap();
    assert_eq!(app["max_capacity"], 3);
    assert_eq!(app["enabled"], false);

    // Orgs are listed apart from repos.
    ok(d, &["org", "add", "octo-org"]);
    assert_eq!(
        json(d, &["org", "list", "--json"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        json(d, &["repo", "list", "--json"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    ok(d, &["org", "set", "octo-org", "--monitor-only"]);
    assert!(json(d, &["org", "list", "--json"])[0]["max_capacity"].is_null());

    let out = ok(d, &["repo", "remove", "me/app"]);
    assert!(out.contains("removed me/app"), "{out}");
    ok(d, &["repo", "remove", "ME/App", "--profile", "big"]);
    ok(d, &["org", "remove", "octo-org"]);
    assert_eq!(json(d, &["repo", "list", "--json"]), serde_json::json!([]));
    let text = ok(d, &["repo", "list"]);
    assert!(text.contains("runner-manager repo add"), "{text}");
}

#[test]
fn host_capacity_is_validated_and_stored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let host = json(d, &["host", "show", "--json"]);
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(host["capacity"].as_u64().unwrap(), (cpus / 2).max(1));
    ok(d, &["host", "set-capacity", "7"]);
    assert_eq!(json(d, &["host", "show", "--json"])["capacity"], 7);
    let before = journal_view(d);
    for bad in ["0", "-1", "257", "99999999999", "seven"] {
        let err = fails(d, &["host", "set-capacity", bad], ExitCode::Usage);
        assert!(err.contains(bad), "{bad}: {err}");
    }
    assert_eq!(
        journal_view(d),
        before,
        "a refused command changed the journal"
    );
}

#[test]
fn admission_settings_are_validated_stored_and_shown() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let host = json(d, &["host", "show", "--json"]);
    let a = &host["admission"];
    assert_eq!(a["memory_admission"], true, "{host}");
    assert_eq!(a["runner_memory_mb"], 2048, "{host}");
    assert_eq!(a["memory_headroom_mb"], 1024, "{host}");
    assert_eq!(a["wait_on_battery"], false, "{host}");
    assert!(
        a["max_load"].is_null() && a["quiet_hours"].is_null(),
        "{host}"
    );
    assert_eq!(a["idle_only"], false, "{host}");

    let before = journal_view(d);
    for (args, said) in [
        (
            &["set-rules", "--max-load", "-1"][..],
            "give a number above 0",
        ),
        (
            &["set-rules", "--max-load", "0"][..],
            "give a number above 0",
        ),
        (
            &["set-rules", "--max-load", "NaN"][..],
            "give a number above 0",
        ),
        (&["set-rules", "--max-load", "lots"][..], "or `off`"),
        (
            &["set-rules", "--quiet-hours", "25:00-01:00"][..],
            "HH:MM-HH:MM",
        ),
        (
            &["set-rules", "--quiet-hours", "10:00-10:00"][..],
            "same time",
        ),
        (&["set-rules", "--on-battery", "maybe"][..], "wait"),
        (&["set-rules", "--idle-only", "yes"][..], "on"),
        (
            &["set-rules"][..],
            "nothing to change: give at least one of --on-battery",
        ),
        (
            &["set-admission", "--runner-memory-mb", "0"][..],
            "1..=1048576",
        ),
        (&["set-admission", "--runner-memory-mb", "-5"][..], "-5"),
        (
            &["set-admission", "--headroom-mb", "99999999"][..],
            "0..=1048576",
        ),
        (&["set-admission", "--memory", "maybe"][..], "on"),
        (
            &["set-admission"][..],
            "nothing to change: give at least one of --memory",
        ),
    ] {
        let args: Vec<&str> = ["host"].iter().chain(args).copied().collect();
        let err = fails(d, &args, ExitCode::Usage);
        assert!(err.contains(said), "{args:?}: {err}");
    }
    assert_eq!(
        journal_view(d),
        before,
        "a refused command changed the journal"
    );

    let out = ok(
        d,
        &[
            "host",
            "set-rules",
            "--on-battery",
            "wait",
            "--max-load",
            "6.5",
            "--quiet-hours",
            "22:00-07:00",
            "--idle-only",
            "on",
        ],
    );
    assert!(
        out.contains("on battery wait, max load 6.5, quiet hours 22:00-07:00, idle only on"),
        "{out}"
    );
    assert!(out.contains("applies it when it starts"), "{out}");
    ok(
        d,
        &[
            "host",
            "set-admission",
            "--memory",
            "off",
            "--runner-memory-mb",
            "512",
            "--headroom-mb",
            "0",
        ],
    );
    let a = json(d, &["status", "--json"])["host"]["admission"].clone();
    assert_eq!(a["memory_admission"], false, "{a}");
    assert_eq!(a["runner_memory_mb"], 512, "{a}");
    assert_eq!(a["memory_headroom_mb"], 0, "{a}");
    assert_eq!(a["wait_on_battery"], true, "{a}");
    assert_eq!(a["max_load"], 6.5, "{a}");
    assert_eq!(a["quiet_hours"], "22:00-07:00", "{a}");
    assert_eq!(a["idle_only"], true, "{a}");
    let text = ok(d, &["host", "show"]);
    assert!(text.contains("admission off"), "{text}");

    // `off` turns a rule off; the others stay.
    ok(
        d,
        &[
            "host",
            "set-rules",
            "--max-load",
            "off",
            "--quiet-hours",
            "off",
        ],
    );
    let a = json(d, &["host", "show", "--json"])["admission"].clone();
    assert!(a["max_load"].is_null() && a["quiet_hours"].is_null(), "{a}");
    assert_eq!(a["idle_only"], true, "{a}");

    // `daemon run`'s flags say that, given, they are stored.
    let help = ok(d, &["daemon", "run", "--help"]);
    assert!(help.contains("host set-rules"), "{help}");
}

#[test]
fn bad_input_is_refused_with_a_fix_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["repo", "add", "me/app"]);
    let before = journal_view(d);

    let err = fails(d, &["repo", "add", "me/bad name"], ExitCode::Usage);
    assert!(err.contains("repository name 'bad name'"), "{err}");
    let err = fails(d, &["repo", "add", "octo"], ExitCode::Usage);
    assert!(err.contains("runner-manager org add octo"), "{err}");
    let err = fails(d, &["org", "add", "me/app"], ExitCode::Usage);
    assert!(err.contains("runner-manager repo add me/app"), "{err}");
    for args in [
        &["repo", "add", "a/b/c"][..],
        &["repo", "add", "-x/app"][..],
        &["repo", "add", "me/other", "--max-runners", "0"][..],
        &["repo", "add", "me/other", "--max-runners", "-3"][..],
        &["repo", "add", "me/other", "--max-runners", "100000"][..],
    ] {
        fails(d, args, ExitCode::Usage);
    }
    let err = fails(
        d,
        &[
            "repo",
            "add",
            "me/other",
            "--max-runners",
            "1",
            "--min-runners",
            "2",
        ],
        ExitCode::Usage,
    );
    assert!(
        err.contains("min_capacity 2 is above max_capacity 1"),
        "{err}"
    );
    for args in [
        &["repo", "add", "me/other", "--label", "bad label"][..],
        &["repo", "add", "me/other", "--profile", "Big"][..],
        &["repo", "add", "me/other", "--frobnicate"][..],
        &["repo", "set", "me/app"][..],
        &["repo", "set", "me/app", "--enable", "--disable"][..],
    ] {
        fails(d, args, ExitCode::Usage);
    }

    let err = fails(d, &["repo", "add", "me/app"], ExitCode::Conflict);
    assert!(err.contains("runner-manager repo set me/app"), "{err}");
    let err = fails(d, &["repo", "add", "Me/APP"], ExitCode::Conflict);
    assert!(err.contains("already"), "{err}");
    let err = fails(d, &["repo", "remove", "me/nope"], ExitCode::NotFound);
    assert!(err.contains("runner-manager repo add me/nope"), "{err}");
    fails(
        d,
        &["repo", "set", "me/nope", "--enable"],
        ExitCode::NotFound,
    );

    assert_eq!(
        journal_view(d),
        before,
        "a refused command changed the journal"
    );
}

#[test]
fn status_json_reads_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["repo", "add", "me/app", "--max-runners", "1"]);
    let s = json(d, &["status", "--json"]);
    assert_eq!(s["active_runners"], 0);
    assert_eq!(s["targets"][0]["target"], "me/app");
    assert!(s["last_github_contact_ms"].is_null());
    let text = ok(d, &["status"]);
    assert!(text.contains("me/app"), "{text}");
}

#[test]
fn online_commands_without_a_service_say_how_to_start_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(dir.path(), &["auth", "login"], ExitCode::Usage);
    assert!(err.contains("runner-manager daemon run"), "{err}");
    for args in [
        &["auth", "status"][..],
        &["repo", "list"][..],
        &["status"][..],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_runner-manager"))
            .arg("--socket")
            .arg(dir.path().join("api.sock"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            code(&o),
            i32::from(ExitCode::ServiceNotRunning.code()),
            "{args:?}: {}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("runner-manager daemon run"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn offline_edits_are_refused_while_the_service_holds_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let _held = rm_daemon::lock::InstanceLock::acquire(dir.path()).unwrap();
    let err = fails(dir.path(), &["repo", "add", "me/app"], ExitCode::Conflict);
    assert!(err.contains("drop `--offline`"), "{err}");
}

#[cfg(target_os = "linux")]
#[test]
fn service_install_without_systemd_says_how_to_run_instead() {
    if Path::new("/run/systemd/system").exists() {
        eprintln!("SKIPPED: systemd is running here; this test covers machines without it (CI)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    for args in [
        &["service", "install", "--start-at", "boot"][..],
        &["service", "install", "--start-at", "login"][..],
        &["service", "uninstall"][..],
    ] {
        let err = fails(&d, args, ExitCode::Unsupported);
        assert!(
            err.contains("systemd is not running on this machine"),
            "{err}"
        );
        assert!(err.contains("runner-manager daemon run"), "{err}");
    }
    assert!(
        !d.exists(),
        "nothing may be written when nothing can be installed"
    );
    let o = rm(&d, &["service", "status"]);
    assert_eq!(code(&o), i32::from(ExitCode::Unsupported.code()));
    assert!(stdout(&o).contains("not installed"), "{}", stdout(&o));
}

/// `host env show --json`'s variables as (name, value) pairs.
fn env_vars(d: &Path) -> Vec<(String, String)> {
    let env = json(d, &["host", "env", "show", "--json"]);
    assert_eq!(
        env["values_shown"], true,
        "offline: the journal's reader sees values"
    );
    env["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn runner_env_is_set_shown_and_unset_offline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = rm(d, &["host", "env", "show"]);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), "", "nothing set: no lines");
    assert!(
        stderr(&o).contains("host env set NAME=VALUE"),
        "{}",
        stderr(&o)
    );

    let out = ok(
        d,
        &[
            "host",
            "env",
            "set",
            "HTTPS_PROXY=http://user:pw@proxy:3128",
            "NO_PROXY=localhost,127.0.0.1",
            "PATH=/opt/tools/bin:/usr/local/bin:/usr/bin:/bin",
            "EQUALS=a=b",
        ],
    );
    assert!(
        out.contains("set EQUALS, HTTPS_PROXY, NO_PROXY, PATH"),
        "{out}"
    );
    assert!(
        out.contains("when it starts") || out.contains("after it starts"),
        "{out}"
    );
    assert!(!out.contains("pw@proxy"), "set does not echo values: {out}");
    assert_eq!(
        ok(d, &["host", "env", "show"]),
        "EQUALS=a=b\nHTTPS_PROXY=http://user:pw@proxy:3128\nNO_PROXY=localhost,127.0.0.1\n\
         PATH=/opt/tools/bin:/usr/local/bin:/usr/bin:/bin\n"
    );
    let show = ok(d, &["host", "show"]);
    assert!(
        show.contains("4 variable(s) given to every runner: EQUALS, HTTPS_PROXY, NO_PROXY, PATH"),
        "{show}"
    );
    assert!(!show.contains("pw@proxy"), "{show}");
    assert_eq!(
        json(d, &["host", "show", "--json"])["runner_env"],
        serde_json::json!(["EQUALS", "HTTPS_PROXY", "NO_PROXY", "PATH"])
    );

    let out = ok(d, &["host", "env", "unset", "NO_PROXY", "EQUALS"]);
    assert!(out.contains("unset NO_PROXY, EQUALS"), "{out}");
    ok(d, &["host", "env", "set", "HTTPS_PROXY=http://other:8080"]);
    assert_eq!(
        env_vars(d),
        vec![
            ("HTTPS_PROXY".to_owned(), "http://other:8080".to_owned()),
            (
                "PATH".to_owned(),
                "/opt/tools/bin:/usr/local/bin:/usr/bin:/bin".to_owned()
            ),
        ]
    );
}

#[test]
fn bad_runner_env_is_refused_with_the_reason_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["host", "env", "set", "HTTP_PROXY=http://proxy:3128"]);
    let before = env_vars(d);
    let secret = "s3cr3t-value-xyz";
    let too_long = format!("BIG={secret}{}", "x".repeat(4096));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![format!("NPM_TOKEN={secret}")],
            "secrets belong in GitHub's secrets (Settings → Secrets and variables → Actions)",
        ),
        (vec![format!("my_api_key={secret}")], "GitHub's secrets"),
        (vec![format!("DB_PASSWORD={secret}")], "GitHub's secrets"),
        (
            vec![format!("AWS_ACCESS_KEY_ID={secret}")],
            "GitHub's secrets",
        ),
        (
            vec![format!("ACTIONS_RUNNER_INPUT_JITCONFIG={secret}")],
            "one-job credential",
        ),
        (vec![format!("RUNNER_TOOL_CACHE={secret}")], "tool cache"),
        (vec![format!("HOME={secret}")], "its own inside its runtime"),
        (
            vec![format!("TMPDIR={secret}")],
            "its own inside its runtime",
        ),
        (vec![format!("GITHUB_REF={secret}")], "GitHub's context"),
        (vec![format!("1ABC={secret}")], "letters, digits and '_'"),
        (vec![format!("A-B={secret}")], "letters, digits and '_'"),
        (vec![format!("={secret}")], "letters, digits and '_'"),
        (vec![too_long], "at most 4096"),
        // A bare word may be a pasted token: refused by position, not echoed.
        (vec![secret.to_owned()], "argument 1 has no '='"),
        // One bad variable refuses the whole command (the good one is not stored either).
        (
            vec!["GOOD=1".to_owned(), format!("X_SECRET={secret}")],
            "GitHub's secrets",
        ),
        (
            vec!["TWICE=1".to_owned(), "TWICE=2".to_owned()],
            "given twice",
        ),
    ];
    for (args, said) in cases {
        let mut argv = vec!["host", "env", "set"];
        argv.extend(args.iter().map(String::as_str));
        let err = fails(d, &argv, ExitCode::Usage);
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(err.contains("nothing was changed"), "{args:?}: {err}");
        assert!(!err.contains(secret), "a value leaked: {err}");
        assert_eq!(env_vars(d), before, "{args:?} changed something");
    }
    let err = fails(d, &["host", "env", "unset", "not a name"], ExitCode::Usage);
    assert!(err.contains("letters, digits"), "{err}");
    // clap refuses a command without variables before anything is opened.
    fails(d, &["host", "env", "set"], ExitCode::Usage);
    fails(d, &["host", "env", "unset"], ExitCode::Usage);
    assert_eq!(env_vars(d), before);
}
