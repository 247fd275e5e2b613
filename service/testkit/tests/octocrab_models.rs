//! octocrab 0.54 (the product's client) must read every answer the fake sends.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken expectations

mod common;

use common::{octocrab, world};
use octocrab::models::actions::SelfHostedRunnerLabelType;
use octocrab::models::workflows::Status;
use octocrab::params::workflows::Filter;
use rm_testkit::{FaultRule, JobSpec};

/// `octo/hello`'s runs with this status.
async fn runs_with_status(
    o: &octocrab::Octocrab,
    status: &str,
) -> octocrab::Page<octocrab::models::workflows::Run> {
    o.workflows("octo", "hello")
        .list_all_runs()
        .status(status)
        .send()
        .await
        .unwrap()
}

/// `octo/hello`'s runners with this name.
async fn runners_named(
    o: &octocrab::Octocrab,
    name: &str,
) -> octocrab::Page<octocrab::models::actions::SelfHostedRunner> {
    o.actions()
        .list_repo_self_hosted_runners("octo", "hello")
        .name(name)
        .send()
        .await
        .unwrap()
}

/// The HTTP status of a GitHub error answer (None for transport or parsing errors).
fn github_status(err: &octocrab::Error) -> Option<u16> {
    match err {
        octocrab::Error::GitHub { source, .. } => Some(source.status_code.as_u16()),
        _ => None,
    }
}

#[tokio::test]
async fn runners_jit_get_list_delete_round_trip() {
    let w = world().await;
    let o = octocrab(&w.gh.origin(), &w.token);
    let jit = o
        .actions()
        .create_repo_jit_runner_config("octo", "hello", "runner-1", 1u64.into(), vec!["gpu".into()])
        .work_folder("_work")
        .send()
        .await
        .unwrap();
    assert_eq!(jit.runner.name, "runner-1");
    assert_eq!(jit.runner.status, "offline");
    assert_eq!(jit.runner.os, "unknown");
    assert!(!jit.runner.busy);
    assert!(!jit.encoded_jit_config.is_empty());
    let custom: Vec<_> = jit
        .runner
        .labels
        .iter()
        .filter(|l| l.label_type == SelfHostedRunnerLabelType::Custom)
        .collect();
    assert_eq!(custom.len(), 1);
    assert_eq!(custom[0].name, "gpu");

    let got = o
        .actions()
        .get_repo_runner("octo", "hello", jit.runner.id)
        .await
        .unwrap();
    assert_eq!(got.id, jit.runner.id);

    let list = runners_named(&o, "runner-1").await;
    assert_eq!(list.total_count, Some(1));
    assert_eq!(list.items[0].name, "runner-1");
    assert_eq!(runners_named(&o, "other").await.items.len(), 0);

    o.actions()
        .delete_repo_runner("octo", "hello", jit.runner.id)
        .await
        .unwrap();
    let err = o
        .actions()
        .get_repo_runner("octo", "hello", jit.runner.id)
        .await
        .unwrap_err();
    assert_eq!(github_status(&err), Some(404), "{err:?}");
    assert!(w.gh.runners().is_empty());
}

#[tokio::test]
async fn org_runners_tokens_groups_and_downloads() {
    let w = world().await;
    let o = octocrab(&w.gh.origin(), &w.token);
    let jit = o
        .actions()
        .create_org_jit_runner_config(
            "acme",
            "org-runner",
            1u64.into(),
            vec!["self-hosted".into()],
        )
        .send()
        .await
        .unwrap();
    let list = o
        .actions()
        .list_org_self_hosted_runners("acme")
        .send()
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        o.actions()
            .get_org_runner("acme", jit.runner.id)
            .await
            .unwrap()
            .name,
        "org-runner"
    );
    let reg = o
        .actions()
        .create_org_runner_registration_token("acme")
        .await
        .unwrap();
    assert!(reg.expires_at > chrono::Utc::now());
    let rem = o
        .actions()
        .create_repo_runner_remove_token("octo", "hello")
        .await
        .unwrap();
    assert!(!rem.token.is_empty());
    let groups = o
        .actions()
        .org("acme")
        .runner_groups()
        .list()
        .await
        .unwrap();
    assert_eq!(groups.total_count, 1);
    assert_eq!(groups.runner_groups[0].name, "Default");
    assert_eq!(groups.runner_groups[0].default, Some(true));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions-runner-linux-x64-2.336.0.tar.gz");
    std::fs::write(&path, b"fake package bytes").unwrap();
    w.gh.set_runner_package(&rm_testkit::package::RunnerPackage {
        path: path.clone(),
        filename: "actions-runner-linux-x64-2.336.0.tar.gz".into(),
        sha256: "ab".repeat(32),
        version: "2.336.0".into(),
        os: "linux".into(),
        arch: "x64".into(),
        size: 18,
    });
    let downloads = o
        .actions()
        .list_repo_runner_downloads("octo", "hello")
        .await
        .unwrap();
    assert_eq!(downloads.len(), 1);
    assert_eq!(downloads[0].os, "linux");
    assert_eq!(
        downloads[0].sha256_checksum.as_deref(),
        Some("ab".repeat(32).as_str())
    );
    let target = downloads[0]
        .download_url
        .trim_start_matches(&w.gh.origin())
        .to_string();
    let bytes = common::raw(w.gh.addr(), "GET", &target, &[], b"").await;
    assert_eq!(bytes.status, 200);
    assert_eq!(bytes.body, b"fake package bytes");
    o.actions()
        .delete_org_runner("acme", jit.runner.id)
        .await
        .unwrap();
}

#[tokio::test]
async fn runs_and_jobs_follow_the_job_states() {
    let w = world().await;
    let o = octocrab(&w.gh.origin(), &w.token);
    let run =
        w.gh.queue_run(
            "octo/hello",
            vec![
                JobSpec::new("build", &["self-hosted"]),
                JobSpec::new("test", &["self-hosted"]),
            ],
        )
        .unwrap();
    let queued = runs_with_status(&o, "queued").await;
    assert_eq!(queued.items.len(), 1);
    assert_eq!(queued.items[0].id.0, run);
    assert_eq!(queued.items[0].status, "queued");
    assert_eq!(queued.items[0].repository.name, "hello");
    let jobs = o
        .workflows("octo", "hello")
        .list_jobs(run.into())
        .filter(Filter::All)
        .send()
        .await
        .unwrap();
    assert_eq!(jobs.items.len(), 2);
    assert_eq!(jobs.items[0].status, Status::Queued);
    assert_eq!(jobs.items[0].labels, vec!["self-hosted".to_string()]);
    assert!(jobs.items[0].runner_id.is_none());

    // One job done, the other still queued: the run is in_progress.
    let first = jobs.items[0].id.0;
    w.gh.finish_job(first, rm_testkit::Conclusion::Success)
        .unwrap();
    let run_obj = o.workflows("octo", "hello").get(run.into()).await.unwrap();
    assert_eq!(run_obj.status, "in_progress");
    assert_eq!(runs_with_status(&o, "in_progress").await.items.len(), 1);
    let job = o
        .workflows("octo", "hello")
        .get_job(first.into())
        .await
        .unwrap();
    assert_eq!(job.status, Status::Completed);
    assert_eq!(
        job.conclusion,
        Some(octocrab::models::workflows::Conclusion::Success)
    );
    assert!(!job.steps.is_empty());

    w.gh.finish_job(jobs.items[1].id.0, rm_testkit::Conclusion::Failure)
        .unwrap();
    let done = o.workflows("octo", "hello").get(run.into()).await.unwrap();
    assert_eq!(done.status, "completed");
    assert_eq!(done.conclusion.as_deref(), Some("failure"));
    assert!(runs_with_status(&o, "queued").await.items.is_empty());
}

#[tokio::test]
async fn a_run_from_a_fork_names_the_fork_as_its_head_repository() {
    let w = world().await;
    let o = octocrab(&w.gh.origin(), &w.token);
    let own =
        w.gh.queue_run("octo/hello", vec![JobSpec::new("push", &["self-hosted"])])
            .unwrap();
    let fork =
        w.gh.queue_run(
            "octo/hello",
            vec![
                JobSpec::new("pr", &["self-hosted"]).from_fork(),
                JobSpec::new("pr-2", &["self-hosted"]),
            ],
        )
        .unwrap();
    let views = w.gh.runs();
    let view = |id| views.iter().find(|r| r.id == id).unwrap();
    assert!(view(fork).from_fork && !view(own).from_fork);

    // octocrab reads both, listed and alone.
    let listed = runs_with_status(&o, "queued").await;
    assert_eq!(listed.items.len(), 2);
    let single = o.workflows("octo", "hello").get(fork.into()).await.unwrap();
    assert_eq!(single.event, "pull_request");

    // The raw shapes: the listing and the single run agree.
    let list: serde_json::Value = o
        .get("/repos/octo/hello/actions/runs", None::<&()>)
        .await
        .unwrap();
    let single: serde_json::Value = o
        .get(
            format!("/repos/octo/hello/actions/runs/{fork}"),
            None::<&()>,
        )
        .await
        .unwrap();
    let listed = |id: u64| {
        list["workflow_runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()
            .clone()
    };
    for run in [listed(fork), single] {
        assert_eq!(run["event"], "pull_request");
        assert_eq!(run["repository"]["full_name"], "octo/hello");
        assert_eq!(run["repository"]["fork"], false);
        let head = &run["head_repository"];
        assert_eq!(head["full_name"], "octo-fork/hello");
        assert_eq!(head["name"], "hello");
        assert_eq!(head["fork"], true);
        assert_eq!(head["owner"]["login"], "octo-fork");
        assert_ne!(head["id"], run["repository"]["id"]);
        assert_ne!(head["owner"]["id"], run["repository"]["owner"]["id"]);
    }
    let own = listed(own);
    assert_eq!(own["event"], "push");
    assert_eq!(own["head_repository"], own["repository"]);
}

#[tokio::test]
async fn installations_repositories_and_next_pages() {
    let w = world().await;
    for i in 0..4 {
        w.gh.create_repo(&format!("octo/r{i}")).unwrap();
    }
    let o = octocrab(&w.gh.origin(), &w.token);
    let inst = o
        .current()
        .list_app_installations_accessible_to_user()
        .send()
        .await
        .unwrap();
    assert_eq!(inst.items.len(), 2);
    let octo_inst = inst
        .items
        .iter()
        .find(|i| i.account.login == "octo")
        .unwrap();
    let repos = o
        .current()
        .installation_repositories(octo_inst.id)
        .per_page(2u8)
        .send()
        .await
        .unwrap();
    assert_eq!(repos.total_count, 5);
    assert_eq!(repos.repositories.len(), 2);
    assert_eq!(
        repos.repositories[0].permissions.as_ref().map(|p| p.admin),
        Some(true)
    );

    // Pagination through absolute `next` links keeps auth (builder token, same host).
    for i in 0..5 {
        w.gh.queue_run(
            "octo/hello",
            vec![JobSpec::new(&format!("j{i}"), &["self-hosted"])],
        )
        .unwrap();
    }
    let mut page = o
        .workflows("octo", "hello")
        .list_all_runs()
        .per_page(2u8)
        .send()
        .await
        .unwrap();
    let mut seen = page.items.len();
    while let Some(next) = o
        .get_page::<octocrab::models::workflows::Run>(&page.next)
        .await
        .unwrap()
    {
        seen += next.items.len();
        page = next;
    }
    assert_eq!(seen, 5);
    assert!(page.prev.is_some());
}

#[tokio::test]
async fn ghes_base_and_rate_limit_model() {
    let w = world().await;
    let o = octocrab(&w.gh.api_v3(), &w.token);
    let rl = o.ratelimit().get().await.unwrap();
    assert_eq!(rl.resources.core.limit, 5000);
    let runs = o
        .workflows("octo", "hello")
        .list_all_runs()
        .send()
        .await
        .unwrap();
    assert_eq!(runs.total_count, Some(0));
    assert_eq!(w.gh.counters().endpoint("workflow_runs").charged, 1);
    assert_eq!(w.gh.counters().endpoint("rate_limit").charged, 0);
}

#[tokio::test]
async fn octocrab_sees_errors_with_messages() {
    let w = world().await;
    let o = octocrab(&w.gh.origin(), &w.token);
    o.actions()
        .create_repo_jit_runner_config("octo", "hello", "dup", 1u64.into(), vec!["x".into()])
        .send()
        .await
        .unwrap();
    let err = o
        .actions()
        .create_repo_jit_runner_config("octo", "hello", "dup", 1u64.into(), vec!["x".into()])
        .send()
        .await
        .unwrap_err();
    match err {
        octocrab::Error::GitHub { source, .. } => {
            assert_eq!(source.status_code, 409);
            assert_eq!(
                source.message,
                "Already exists - A runner with the name dup already exists."
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    w.gh.inject_fault(FaultRule::times(
        rm_testkit::EndpointMatch::name("user"),
        rm_testkit::Fault::Unauthorized,
        1,
    ));
    let err = o.current().user().await.unwrap_err();
    assert_eq!(github_status(&err), Some(401), "{err:?}");
}
