//! The README's first command, `scripts/demo.sh`, with the binaries under test (it builds
//! nothing here): it must sign in, run every job on an ephemeral runner, clean up and exit 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use rm_e2e::bin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_every_job_and_exits_cleanly() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: the demo needs curl (scripts/demo.sh installs it; tests do not)");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin_dir = bin("runner-manager").parent().unwrap().to_path_buf();
    let child = tokio::process::Command::new("bash")
        .arg(root.join("scripts/demo.sh"))
        .env("RM_DEMO_BIN_DIR", &bin_dir)
        .env("DEMO_JOBS", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the demo finished within 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {stdout}\n{stderr}");
    assert!(stdout.contains("enter the code: "), "{stdout}");
    assert!(stdout.contains("no runner is left"), "{stdout}");
    for job in [
        "job-1: success on runner rm-",
        "job-2: success on runner rm-",
    ] {
        assert!(stdout.contains(job), "no `{job}` in {stdout}");
    }
    assert!(
        stdout.contains("GitHub now lists 0 self-hosted runner(s)"),
        "{stdout}"
    );
    // The trap removed the temporary directory (data, socket, logs).
    let data = stdout
        .lines()
        .find_map(|l| {
            l.split_once("with data in ")
                .map(|(_, d)| d.split('\u{1b}').next().unwrap_or(d).trim())
        })
        .expect("the demo names its data directory");
    let tmp = std::path::Path::new(data).parent().unwrap();
    assert!(!tmp.exists(), "{} was left behind", tmp.display());
}
