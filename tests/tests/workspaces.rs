//! Persistent workspaces end to end: real binary, fake GitHub, fake runner listeners whose job
//! runs a shell step in its workspace (`_work/<repo>/<repo>`), as a real job's steps do.
//!
//! - A second job finds the first one's files at the same path (and may change them: with
//!   root, each runner has its own uid), while nothing credential-like survives between the
//!   two: the slot holds neither the runner's JIT config nor its `.runner`/`.credentials`, nor
//!   checkout's extraheader, nor the job's temp directory; no runner account can read it
//!   between jobs.
//! - A runner that may take a fork's job gets a fresh workspace and saves nothing; going back
//!   to `--workspace ephemeral` deletes what was saved.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use rm_e2e::jobs::{find_named, out_dir, read, run};
use rm_e2e::{fake_github, routing_label, Daemon};
use rm_testkit::{Conclusion, JobSpec};

/// Every regular file under `dir` whose content contains `needle`, links not followed.
fn grep(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file()
                && std::fs::read(e.path())
                    .is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle))
            {
                hits.push(e.path());
            }
        }
    }
    hits
}

async fn persistent_repo(d: &Daemon) -> String {
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let set = d
        .ok(&["repo", "set", "octo/hello", "--workspace", "persistent"])
        .await;
    assert!(set.contains("workspace: persistent (0 saved)"), "{set}");
    routing_label(&added)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_job_finds_the_first_ones_files_and_no_credential_survives_between_them() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let label = persistent_repo(&d).await;
    let out = out_dir();
    let o = out.path().display();

    // What a job leaves behind: a checkout with its persisted token, build output, temp files,
    // and copies of the runner's own credential files. It also reports the runner's JIT
    // config (read from its listener) so the test can look for it.
    let first = format!(
        r#"set -e
R=$(dirname "$(dirname "$(readlink /proc/$PPID/exe)")")
tr '\0' '\n' < /proc/$PPID/environ | sed -n 's/^ACTIONS_RUNNER_INPUT_JITCONFIG=//p' > {o}/jit
cat "$R/.credentials" > {o}/credentials
mkdir -p .git
printf '[core]\n\tbare = false\n[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic SECRET-HEADER-81\n' > .git/config
echo built-by-first > out.txt
echo SECRET-TEMP-81 > "$RUNNER_TEMP/token"
cp "$R/.runner" "$R/.credentials" .
echo "$PWD" > {o}/first.pwd"#
    );
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("first", &[&label]).with_command(&first)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    let jit = read(out.path(), "jit");
    let credentials = read(out.path(), "credentials");
    assert!(jit.len() > 100, "the JIT config was read: {jit:?}");
    assert!(credentials.len() > 20, "{credentials:?}");

    // The slot, as saved between the two jobs.
    let slots = d.data_dir.join("runners/.workspaces");
    let saved = find_named(&slots, "out.txt");
    assert_eq!(saved.len(), 1, "one saved workspace: {saved:?}");
    for secret in [
        jit.as_str(),
        credentials.as_str(),
        "SECRET-HEADER-81",
        "SECRET-TEMP-81",
        "extraheader",
    ] {
        assert_eq!(
            grep(&slots, secret),
            Vec::<PathBuf>::new(),
            "{secret} survived"
        );
    }
    for file in [".runner", ".credentials", "_temp"] {
        assert_eq!(
            find_named(&slots, file),
            Vec::<PathBuf>::new(),
            "{file} survived"
        );
    }
    if rm_e2e::is_root() {
        use std::os::unix::fs::MetadataExt as _;
        let work = saved[0]
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap();
        let meta = std::fs::metadata(work).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o777),
            (0, 0o700),
            "{}",
            work.display()
        );
    }
    let listed = d.ok(&["repo", "list"]).await;
    assert!(
        listed.contains("workspace: persistent (1 saved)"),
        "{listed}"
    );

    let second = format!(
        r#"set -e
echo "$PWD" > {o}/second.pwd
cat out.txt > {o}/second.out
echo changed-by-second >> out.txt && echo writable > {o}/second.write
cat .git/config > {o}/second.config
if [ -e "$RUNNER_TEMP/token" ] || [ -e .credentials ] || [ -e .runner ]; then echo left; else echo clean; fi > {o}/second.clean"#
    );
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("second", &[&label]).with_command(&second)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success], "{}", d.log());
    assert_eq!(read(out.path(), "second.out"), "built-by-first");
    assert_eq!(read(out.path(), "second.write"), "writable");
    let pwd = read(out.path(), "second.pwd");
    assert_eq!(
        pwd,
        read(out.path(), "first.pwd"),
        "the same path: what jobs wrote with absolute paths (a venv) stays valid"
    );
    assert!(pwd.contains("/.workspaces/"), "{pwd}");
    let config = read(out.path(), "second.config");
    assert!(
        config.contains("bare = false") && !config.contains("extraheader"),
        "{config}"
    );
    assert_eq!(read(out.path(), "second.clean"), "clean");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_job_gets_a_fresh_workspace_and_going_ephemeral_deletes_the_saved_ones() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let label = persistent_repo(&d).await;
    let out = out_dir();
    let o = out.path().display();
    let look = |name: &str| {
        format!(
            r#"if [ -e out.txt ]; then cat out.txt; else echo fresh; fi > {o}/{name}.seen
if [ -e poison.txt ]; then echo poisoned; else echo unpoisoned; fi > {o}/{name}.poison"#
        )
    };

    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("first", &[&label]).with_command("echo from-first > out.txt")],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);

    // A fork's pull request: its runner neither sees the saved workspace nor saves its own.
    let fork = format!("{}\necho evil > poison.txt", look("fork"));
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("fork", &[&label])
            .with_command(&fork)
            .from_fork()],
    )
    .await;
    assert_eq!(read(out.path(), "fork.seen"), "fresh");

    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("after-fork", &[&label]).with_command(&look("after-fork"))],
    )
    .await;
    assert_eq!(read(out.path(), "after-fork.seen"), "from-first");
    assert_eq!(read(out.path(), "after-fork.poison"), "unpoisoned");

    // Back to ephemeral: the saved workspaces are deleted at once.
    let slots = d.data_dir.join("runners/.workspaces");
    assert_eq!(find_named(&slots, "out.txt").len(), 1);
    let set = d
        .ok(&["repo", "set", "octo/hello", "--workspace", "ephemeral"])
        .await;
    assert!(!set.contains("workspace:"), "{set}");
    assert_eq!(find_named(&slots, "out.txt"), Vec::<PathBuf>::new());
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("ephemeral", &[&label])
            .with_command(&format!("{}\necho again > out.txt", look("ephemeral")))],
    )
    .await;
    assert_eq!(read(out.path(), "ephemeral.seen"), "fresh");
    assert_eq!(
        find_named(&slots, "out.txt"),
        Vec::<PathBuf>::new(),
        "nothing saved"
    );

    // A bad value names the choices and changes nothing.
    let bad = d
        .run(&["repo", "set", "octo/hello", "--workspace", "sometimes"])
        .await;
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("persistent or ephemeral"), "{err}");
}
