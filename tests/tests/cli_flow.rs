//! Through the CLI: add a repository, queue jobs on the fake GitHub, watch them run on fake
//! runners and `status --json` report it; the error classes and their exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::{bin, fake_github, routing_label, until, Daemon};
use rm_testkit::{JobSpec, JobStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_queued_for_an_added_repo_run_and_status_json_shows_it() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;

    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let label = routing_label(&added);
    assert!(label.starts_with("rm-"), "{added}");
    // Real workflows list `self-hosted` (a default label GitHub gives every self-hosted
    // runner) next to the routing label: such jobs must count as demand and run here.
    for name in ["build", "test"] {
        gh.queue_run(
            "octo/hello",
            vec![JobSpec::new(name, &["self-hosted", label.as_str()])
                .duration(Duration::from_millis(300))],
        )
        .unwrap();
    }

    let status = until(
        Duration::from_secs(25),
        "both jobs done and no runner left",
        || async {
            let jobs = gh.jobs();
            let done = jobs.len() == 2 && jobs.iter().all(|j| j.status == JobStatus::Completed);
            if !done {
                return None;
            }
            let o = d.run(&["status", "--json"]).await;
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
            let idle = v["runners"].as_array()?.is_empty()
                && v["targets"][0]["active_runners"].as_u64() == Some(0);
            idle.then_some(v)
        },
    )
    .await;

    for j in gh.jobs() {
        assert!(j.runner_name.is_some(), "job {} ran on no runner", j.name);
        assert_eq!(j.conclusion, Some(rm_testkit::Conclusion::Success), "{j:?}");
    }
    assert!(
        gh.runners().is_empty(),
        "runners left registered: {:?}",
        gh.runners()
    );
    assert_eq!(status["auth"]["state"], "signed_in", "{status}");
    assert_eq!(status["targets"][0]["target"], "octo/hello");
    assert_eq!(status["targets"][0]["kind"], "repo");
    assert_eq!(status["targets"][0]["max_capacity"], 2);
    assert!(status["last_github_contact"].is_i64(), "{status}");
    assert_eq!(status["host"]["routing_label"], label.as_str());
    assert_eq!(
        status["targets"][0]["labels"][0],
        label.as_str(),
        "the policy's labels, routing label first: {status}"
    );

    let human = d.ok(&["status"]).await;
    assert!(human.contains("signed in as octo"), "{human}");
    assert!(human.contains("octo/hello"), "{human}");
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_commands_map_api_errors_to_exit_codes() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.ok(&["repo", "add", "octo/hello", "--disabled"]).await;

    let again = d.run(&["repo", "add", "octo/hello"]).await;
    assert_eq!(again.status.code(), Some(5), "{again:?}");

    let missing = d.run(&["repo", "set", "octo/nope", "--enable"]).await;
    assert_eq!(missing.status.code(), Some(6), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("runner-manager repo add"));

    let updated = d
        .ok(&[
            "repo",
            "set",
            "octo/hello",
            "--max-runners",
            "3",
            "--enable",
        ])
        .await;
    assert!(updated.contains("max 3"), "{updated}");
    let list: serde_json::Value =
        serde_json::from_str(&d.ok(&["repo", "list", "--json"]).await).unwrap();
    assert_eq!(list[0]["max_capacity"], 3);
    assert_eq!(list[0]["enabled"], true);

    let host = d.ok(&["host", "set-capacity", "3"]).await;
    assert!(host.contains('3'), "{host}");
    let shown: serde_json::Value =
        serde_json::from_str(&d.ok(&["host", "show", "--json"]).await).unwrap();
    assert_eq!(shown["capacity"], 3);

    d.ok(&["repo", "remove", "octo/hello"]).await;
    let list: serde_json::Value =
        serde_json::from_str(&d.ok(&["repo", "list", "--json"]).await).unwrap();
    assert_eq!(list, serde_json::json!([]));
    d.stop().await.unwrap();
}

#[test]
fn without_a_service_the_cli_says_how_to_start_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(bin("runner-manager"))
        .arg("--socket")
        .arg(dir.path().join("api.sock"))
        .args(["repo", "list"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not running"), "{err}");
    assert!(err.contains("runner-manager daemon run"), "{err}");
}

/// `host show` says how the capacity was chosen and how to change it; adding a target allowed
/// more runners than the host runs at once says so, with the command that raises it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_capacity_is_explained_where_it_limits() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.ok(&["host", "set-capacity", "1"]).await;
    let shown = d.ok(&["host", "show"]).await;
    assert!(
        shown.contains("host set-capacity"),
        "host show names the command: {shown}"
    );
    let cpus = std::thread::available_parallelism().unwrap().get();
    if cpus / 2 <= 1 {
        assert!(
            shown.contains("the default (half of this machine's"),
            "{shown}"
        );
    } else {
        assert!(
            shown.contains("set with `runner-manager host set-capacity`"),
            "{shown}"
        );
    }
    let added = d
        .ok(&[
            "repo",
            "add",
            "octo/hello",
            "--max-runners",
            "3",
            "--disabled",
        ])
        .await;
    assert!(
        added.contains("runs at most 1 runner(s) at once")
            && added.contains("runner-manager host set-capacity 3"),
        "{added}"
    );
    // The target's status carries the same note while the host's ceiling is below it, and
    // a target added without a maximum gets the host's capacity from the service.
    let note_of = |list: &serde_json::Value, name: &str| {
        list.as_array()
            .and_then(|l| l.iter().find(|t| t["target"] == name))
            .map(|t| t["capacity_note"].clone())
    };
    d.ok(&["repo", "add", "octo/other", "--disabled"]).await;
    let list: serde_json::Value =
        serde_json::from_str(&d.ok(&["repo", "list", "--json"]).await).unwrap();
    let note = note_of(&list, "octo/hello").expect("listed");
    assert!(
        note.as_str()
            .is_some_and(|n| n.contains("host set-capacity 3")),
        "{list}"
    );
    let other = list
        .as_array()
        .and_then(|l| l.iter().find(|t| t["target"] == "octo/other"))
        .expect("listed");
    assert_eq!(other["max_capacity"], 1, "the host's capacity: {list}");
    assert!(other["capacity_note"].is_null(), "{list}");
    d.ok(&["host", "set-capacity", "3"]).await;
    let list: serde_json::Value =
        serde_json::from_str(&d.ok(&["repo", "list", "--json"]).await).unwrap();
    assert_eq!(
        note_of(&list, "octo/hello"),
        Some(serde_json::Value::Null),
        "{list}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&d.ok(&["host", "show", "--json"]).await).unwrap();
    assert!(
        json["capacity_note"]
            .as_str()
            .is_some_and(|n| !n.is_empty()),
        "{json}"
    );
    d.stop().await.unwrap();
}
