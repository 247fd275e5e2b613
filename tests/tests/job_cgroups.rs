//! Each job in a cgroup of its own, through the real service under a cgroup delegated to it
//! (as systemd's `Delegate=yes` does; the harness makes one per service when the tests run
//! as root): the job's processes are in it from the first, and whatever the job left running
//! ends with it, however it detached. This machine's cgroup v2 has no controllers (they are
//! bound to cgroup v1), so the caps themselves are pinned in `rm-runner`'s unit tests; the
//! doctor here says which are off and why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use rm_e2e::jobs::{out_dir, read, run};
use rm_e2e::{dev_user, fake_github, is_root, routing_label, until, Daemon, DevUser};
use rm_testkit::{Conclusion, FakeGitHub, JobSpec};

fn alive(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(marker.as_bytes()))
    })
}

/// The runtimes under the service's runner root (its hidden directories aside).
fn runtimes(d: &Daemon) -> usize {
    std::fs::read_dir(d.data_dir.join("runners"))
        .map(|r| {
            r.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

/// `octo/hello` added with the sandbox turned off for it (so no PID namespace ends the job's
/// processes: the cgroup alone does), signed in; answers the routing label.
async fn unwalled_target(d: &Daemon, gh: &FakeGitHub) -> String {
    d.sign_in(gh, "octo").await;
    let added = d.ok(&["repo", "add", "octo/hello"]).await;
    d.ok(&["repo", "set", "octo/hello", "--sandbox", "off"])
        .await;
    routing_label(&added)
}

/// Runs a job that starts a detached daemon (`setsid` and a double fork: outside the step's
/// process group and the listener's session) named `marker`, and reports its cgroup.
async fn job_leaving_a_daemon(d: &Daemon, gh: &FakeGitHub, label: &str, marker: &str, out: &Path) {
    let o = out.display();
    let step = format!(
        "cat /proc/self/cgroup > {o}/cgroup\n\
         setsid sh -c '(exec sleep {marker}) & echo started > {o}/left' </dev/null >/dev/null 2>&1 &\n\
         while [ ! -s {o}/left ]; do sleep 0.05; done"
    );
    let c = run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new("leaves-a-daemon", &[label]).with_command(&step)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_job_detached_ends_with_its_cgroup_in_both_modes() {
    if !is_root() {
        eprintln!("skipped: delegating a cgroup to the service needs root (CI runs as root)");
        return;
    }
    let modes: [Option<DevUser>; 2] = [None, Some(dev_user())];
    for (i, user) in modes.iter().enumerate() {
        let gh = fake_github().await;
        let d = match user {
            None => Daemon::start(&gh).await,
            Some(u) => Daemon::start_as(&gh, u).await,
        };
        let cgroup = d.cgroup().expect("the harness delegates a cgroup as root");
        let label = unwalled_target(&d, &gh).await;
        let out = out_dir();
        let marker = format!("{}", 3988 + i);
        job_leaving_a_daemon(&d, &gh, &label, &marker, out.path()).await;

        let seen = read(out.path(), "cgroup");
        assert!(
            seen.contains("/jobs/"),
            "{user:?}: the job ran in a cgroup of its own: {seen}"
        );
        until(
            Duration::from_secs(20),
            "the detached daemon ended",
            || async { (!alive(&marker)).then_some(()) },
        )
        .await;
        until(
            Duration::from_secs(20),
            "the job's cgroup removed",
            || async {
                let jobs = cgroup.find("jobs");
                let left: Vec<_> = jobs
                    .iter()
                    .flat_map(|j| std::fs::read_dir(j).into_iter().flatten().flatten())
                    .filter(|e| e.path().is_dir())
                    .collect();
                (jobs.len() == 1 && left.is_empty()).then_some(())
            },
        )
        .await;
        assert!(d
            .log()
            .contains("processes the job left in its cgroup were ended"));
        d.stop().await.unwrap();
    }
}

/// Outside the wall: the per-user service started outside a delegated cgroup runs the same
/// unwalled job, and the daemon it detached lives on after the runner is scrubbed (for the
/// system service the per-attempt uid's clean-up ends it anyway). So the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cgroup_what_an_unwalled_job_detached_lives_on() {
    if !is_root() {
        eprintln!("skipped: the developer account needs root to make (CI runs as root)");
        return;
    }
    let user = dev_user();
    let gh = fake_github().await;
    let d = Daemon::start_without_cgroup(&gh, Some(&user)).await;
    let label = unwalled_target(&d, &gh).await;
    let out = out_dir();
    let marker = "3999";
    job_leaving_a_daemon(&d, &gh, &label, marker, out.path()).await;
    until(Duration::from_secs(20), "the runtime scrubbed", || async {
        (runtimes(&d) == 0).then_some(())
    })
    .await;
    assert!(alive(marker), "the detached daemon outlived its job");
    assert!(!read(out.path(), "cgroup").contains("/jobs/"));
    let report = d.ok(&["host", "doctor"]).await;
    assert!(
        report.contains("root cgroup") || report.contains("not delegated"),
        "the doctor says why jobs get no cgroup:\n{report}"
    );
    // Not left for the next test.
    let _ = std::process::Command::new("pkill")
        .args(["-f", &format!("^sleep {marker}$")])
        .status();
    d.stop().await.unwrap();
}

/// The doctor names the cgroup caps: here each job has a cgroup of its own, and the
/// controllers this host keeps on cgroup v1 are named as off, with the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_reports_the_caps() {
    if !is_root() {
        eprintln!("skipped: delegating a cgroup to the service needs root (CI runs as root)");
        return;
    }
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let out = d.run(&["host", "doctor", "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "job_resource_caps")
        .expect("a job_resource_caps check")
        .clone();
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("cgroup of its own"), "{check}");
    let offered =
        std::fs::read_to_string(d.cgroup().unwrap().dir.join("cgroup.controllers")).unwrap();
    if offered.split_whitespace().count() < 4 {
        assert_eq!(check["state"], "warn", "{check}");
        assert!(
            check["fix"].as_str().unwrap().contains("Delegate=yes"),
            "{check}"
        );
    }
    d.stop().await.unwrap();
}

/// The CPU of the job's runner as the service logged it when the attempt ended (`runner
/// usage … ran_job=true`).
fn logged_job_cpu_ms(log: &str) -> Option<u64> {
    log.lines()
        .filter(|l| l.contains("runner usage") && l.contains("ran_job=true"))
        .find_map(|l| {
            let (_, rest) = l.split_once("cpu_ms=")?;
            rest.split_whitespace().next()?.parse().ok()
        })
}

/// Runs a job whose CPU is spent in many short-lived processes (each reaped by the step's
/// shell between two samples of the process tree) and answers the CPU the service metered.
async fn metered_cpu_of_short_processes(d: &Daemon, gh: &FakeGitHub) -> u64 {
    d.sign_in(gh, "octo").await;
    let added = d.ok(&["repo", "add", "octo/hello"]).await;
    let label = routing_label(&added);
    let step =
        "for n in $(seq 80); do sh -c 'i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done'; done";
    let c = run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new("short-processes", &[&label]).with_command(step)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    until(
        Duration::from_secs(20),
        "the attempt's usage logged",
        || async { logged_job_cpu_ms(&d.log()) },
    )
    .await
}

/// The attempt's meter reads its cgroup: CPU spent in processes that started and ended
/// between two samples of the process tree is counted (the tree sees each at most once, and a
/// reaped child's time moves into its parent's `cutime`, which the tree does not add). Outside
/// the wall, the same job on a service without a delegated cgroup is metered far lower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_meter_counts_what_the_jobs_cgroup_counted() {
    if !is_root() {
        eprintln!("skipped: delegating a cgroup to the service needs root (CI runs as root)");
        return;
    }
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    assert!(d.cgroup().is_some());
    let with = metered_cpu_of_short_processes(&d, &gh).await;
    d.stop().await.unwrap();

    let gh = fake_github().await;
    let d = Daemon::start_without_cgroup(&gh, None).await;
    let without = metered_cpu_of_short_processes(&d, &gh).await;
    d.stop().await.unwrap();
    eprintln!("metered CPU: {with} ms with the job's cgroup, {without} ms by the tree alone");
    assert!(
        with >= 500 && with >= 2 * without,
        "the cgroup's count ({with} ms) is the job's whole CPU; the tree alone saw {without} ms"
    );
}

/// A target's own job memory cap: set with `repo set --memory-max-mb`, shown on the target
/// (status and `repo list`), kept across a restart, back to the host's default with
/// `default`; a cap below what a runner needs is refused with the fix and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targets_job_memory_cap_is_set_shown_kept_and_checked() {
    let gh = fake_github().await;
    let mut d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d.ok(&["repo", "add", "octo/hello"]).await;
    let label = routing_label(&added);

    let refused = d
        .run(&["repo", "set", "octo/hello", "--memory-max-mb", "100"])
        .await;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("at least 256"), "{said}");

    let set = d
        .ok(&["repo", "set", "octo/hello", "--memory-max-mb", "1024"])
        .await;
    assert!(set.contains("job memory: at most 1024 MiB"), "{set}");
    assert_eq!(job_memory_cap(&d).await, Some(1024));
    d.restart().await;
    assert_eq!(
        job_memory_cap(&d).await,
        Some(1024),
        "kept across a restart"
    );
    let listed = d.ok(&["repo", "list"]).await;
    assert!(listed.contains("job memory: at most 1024 MiB"), "{listed}");

    // A job runs with it (the cap itself is pinned in rm-runner's unit tests: no memory
    // controller is delegated on this machine).
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("capped", &[&label]).with_command("true")],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);

    d.ok(&["repo", "set", "octo/hello", "--memory-max-mb", "default"])
        .await;
    assert_eq!(job_memory_cap(&d).await, None);
    d.stop().await.unwrap();
}

async fn job_memory_cap(d: &Daemon) -> Option<u32> {
    let status = d.client().await.status().await.unwrap();
    status.targets[0].sandbox.memory_max_mb
}
