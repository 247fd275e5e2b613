//! A pool when things go wrong: `pool join` with a bad URL, a password in the URL, a wrong
//! password, a server that is not PostgreSQL, a database of a newer schema, or nothing
//! listening is refused with the fix, joins nothing, keeps no secret in the log, and the host
//! goes on serving its own targets; a pool database down for 30 s holds pooled launches on
//! every host (no runner for a job that another host might start one for too) and, back, the
//! hosts resume by themselves with as many runners as jobs; a database that refuses a joined
//! host (here: a schema moved on by an updated host) is shown as refused, with the fix, holds
//! pooled launches, and is found again by itself once put right.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use rm_e2e::pool::{join, logs, until_all_alive, until_idle, TIMEOUTS};
use rm_e2e::postgres::Cluster;
use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{Conclusion, FakeGitHub, JobSpec, JobStatus};

/// The pool's label in these tests.
const LABEL: &str = "rm-pool-faults-x64";

/// The CLI with `input` on its stdin (when given); the output whatever the exit.
async fn run_stdin(d: &Daemon, args: &[&str], input: Option<&str>) -> Output {
    use tokio::io::AsyncWriteExt as _;
    let mut cmd = d.cli();
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = cmd.spawn().expect("CLI runs");
    if let Some(input) = input {
        let mut stdin = child.stdin.take().expect("stdin piped");
        // A CLI that exits without reading is judged below by its status and output.
        let _ = stdin.write_all(input.as_bytes()).await;
        drop(stdin);
    }
    child.wait_with_output().await.expect("CLI runs")
}

/// `pool join URL --label LABEL --host h1 [--password-stdin]` must fail with a message
/// containing every one of `fix`; answers the message (stdout and stderr).
async fn join_refused(d: &Daemon, url: &str, password: Option<&str>, fix: &[&str]) -> String {
    let mut args = vec!["pool", "join", url, "--label", LABEL, "--host", "h1"];
    if password.is_some() {
        args.push("--password-stdin");
    }
    let input = password.map(|p| format!("{p}\n"));
    let o = run_stdin(d, &args, input.as_deref()).await;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !o.status.success(),
        "`pool join {url}` succeeded: {said}\ndaemon log:\n{}",
        d.log()
    );
    for words in fix {
        assert!(
            said.contains(words),
            "`pool join {url}` ({:?}) does not say {words:?}: {said}",
            o.status.code()
        );
    }
    eprintln!("pool join {url} → {:?}: {}", o.status.code(), said.trim());
    // Nothing joined: the host is in no pool.
    let status = d.run(&["pool", "status"]).await;
    let status_said = format!(
        "{}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(
        status.status.code(),
        Some(6),
        "`pool status` after a refused join of {url}: {status_said}"
    );
    assert!(
        status_said.contains("in no pool"),
        "`pool status` after a refused join of {url}: {status_said}"
    );
    said
}

/// A port on which nothing listens (bound, then let go).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// An HTTP server on a loopback port (answers 400 to anything): something that is not
/// PostgreSQL where the pool URL points.
async fn http_server() -> u16 {
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = http.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut s, _)) = http.accept().await {
            tokio::spawn(async move {
                // As an HTTP server does: read the request, answer, close after the peer.
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(
                        b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n\
                          content-length: 11\r\n\r\nbad request",
                    )
                    .await;
                let _ = s.shutdown().await;
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_pool_input_is_refused_with_the_fix_and_the_host_keeps_serving_its_own_targets() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();

    // (a) Not a PostgreSQL URL, and one naming no user: the form to write it in.
    join_refused(
        &d,
        "mysql://x",
        None,
        &["must start with postgres://", "postgres://USER"],
    )
    .await;
    join_refused(
        &d,
        "postgres://host/db",
        None,
        &["names no user", "postgres://USER"],
    )
    .await;

    // (b) A password in the URL: refused before anything connects, the password nowhere.
    let said = join_refused(
        &d,
        "postgres://u:secret@127.0.0.1:1/db",
        None,
        &["carries a password", "--password-stdin"],
    )
    .await;
    assert!(
        !said.contains("secret"),
        "the refusal repeats the password: {said}"
    );

    // (c) A wrong password (on stdin) against the real cluster: rejoin with the right one.
    const WRONG: &str = "wrong-pw-9c41e7";
    let said = join_refused(
        &d,
        &pg.url_without_password(),
        Some(WRONG),
        &[
            "refused the password of 'rm_test'",
            "runner-manager pool join",
        ],
    )
    .await;
    assert!(
        !said.contains(WRONG),
        "the refusal repeats the password: {said}"
    );
    // The command it suggests names a whole URL: user, host and port, and a database (a URL
    // without one is refused).
    let suggested = said
        .split("runner-manager pool join ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no `pool join URL` suggested: {said}"));
    let (authority, database) = suggested
        .strip_prefix("postgres://")
        .and_then(|rest| rest.split_once('/'))
        .unwrap_or_else(|| panic!("the suggested URL {suggested:?} names no database: {said}"));
    assert_eq!(
        authority,
        format!("rm_test@127.0.0.1:{}", pg.port),
        "{said}"
    );
    assert!(
        !database.is_empty(),
        "the suggested URL {suggested:?}: {said}"
    );

    // (d) Something else on the port: check the host and port.
    let http = http_server().await;
    join_refused(
        &d,
        &format!("postgres://rm_test@127.0.0.1:{http}/pool"),
        None,
        &["does not answer as PostgreSQL", "check the host and port"],
    )
    .await;

    // (d2) TLS asked of a server without it, and a CA file that is not there: refused with
    // what to change, before anything is kept.
    join_refused(
        &d,
        &format!("{}?sslmode=require", pg.url_without_password()),
        Some(pg.password()),
        &["does not accept TLS", "drop sslmode"],
    )
    .await;
    join_refused(
        &d,
        &format!(
            "{}?sslmode=require&sslrootcert=/nonexistent/ca.pem",
            pg.url_without_password()
        ),
        Some(pg.password()),
        &["sslrootcert=/nonexistent/ca.pem cannot be read"],
    )
    .await;

    // (e) A database set up by a newer runner-manager: another host joins and sets up the
    // schema; then the schema says it is newer than this build.
    let other = Daemon::start(&gh).await;
    join(&other, &pg, LABEL, "h2").await;
    other.stop().await.unwrap();
    let set_up: i32 = pg
        .psql("SELECT schema_version FROM rm_pool_meta")
        .parse()
        .unwrap();
    assert!(set_up >= 1, "the joining host set the schema up");
    pg.psql("UPDATE rm_pool_meta SET schema_version = 99");
    join_refused(
        &d,
        &pg.url_without_password(),
        Some(pg.password()),
        &["newer runner-manager", "schema 99", "update runner-manager"],
    )
    .await;
    assert_eq!(
        pg.psql("SELECT schema_version FROM rm_pool_meta"),
        "99",
        "a newer schema is left untouched"
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM rm_pool_hosts WHERE host_id = 'h1'"),
        "0",
        "the refused host left no row"
    );

    // (f) Nothing listening: unreachable, with what to check.
    let port = closed_port();
    join_refused(
        &d,
        &format!("postgres://rm_test@127.0.0.1:{port}/pool"),
        None,
        &["cannot be reached", "check that PostgreSQL runs"],
    )
    .await;

    // No password given anywhere is in the service's log.
    let log = d.log();
    assert!(
        !log.contains("secret"),
        "the URL's password is in the log:\n{log}"
    );
    assert!(
        !log.contains(WRONG),
        "the stdin password is in the log:\n{log}"
    );
    assert!(
        !log.contains(pg.password()),
        "the cluster's password is in the log:\n{log}"
    );
    let status: serde_json::Value =
        serde_json::from_str(&d.ok(&["status", "--json"]).await).unwrap();
    assert!(status["pool"].is_null(), "{status}");
    // `--pool` takes the label of the pool the host joined: here there is none.
    let o = run_stdin(&d, &["repo", "set", "octo/hello", "--pool"], None).await;
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && said.contains("this host is in no pool")
            && said.contains("pool join"),
        "{said}"
    );
    // `repo add --pool` asks the service, which says the same and adds nothing.
    let o = run_stdin(&d, &["repo", "add", "octo/other", "--pool"], None).await;
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2)
            && said.contains("this host is in no pool")
            && said.contains("pool join"),
        "{:?}: {said}",
        o.status.code()
    );
    let list: serde_json::Value =
        serde_json::from_str(&d.ok(&["repo", "list", "--json"]).await).unwrap();
    assert!(
        list.as_array()
            .is_some_and(|l| l.iter().all(|t| t["target"] != "octo/other")),
        "{list}"
    );

    // The host kept serving its own target all along.
    gh.queue_run(
        "octo/hello",
        vec![
            JobSpec::new("after-the-refusals", &["self-hosted", label.as_str()])
                .duration(Duration::from_millis(300)),
        ],
    )
    .unwrap();
    until(Duration::from_secs(60), "the target's job done", || async {
        let jobs = gh.jobs();
        (jobs.len() == 1 && jobs[0].status == JobStatus::Completed).then_some(())
    })
    .await;
    let job = &gh.jobs()[0];
    assert_eq!(job.conclusion, Some(Conclusion::Success), "{job:?}");
    assert!(job.runner_name.is_some(), "{job:?}");

    d.stop().await.unwrap();
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}

const HOSTS: [&str; 2] = ["h1", "h2"];
const CAPACITY: usize = 3;
/// As long as the outage.
const OUTAGE: Duration = Duration::from_secs(30);
const FIRST_BURST: usize = 4;
const SECOND_BURST: usize = 5;

/// One host with a short lease, joined, its target pooled.
async fn pooled_host(gh: &FakeGitHub, pg: &Cluster, name: &str) -> Daemon {
    let mut extra = TIMEOUTS.to_vec();
    extra.extend(["--pool-lease-secs", "6"]);
    let d = Daemon::start_with(gh, &extra).await;
    d.sign_in(gh, "octo").await;
    d.ok(&["host", "set-capacity", &CAPACITY.to_string()]).await;
    join(&d, pg, LABEL, name).await;
    d.ok(&[
        "repo",
        "add",
        "octo/hello",
        "--max-runners",
        &CAPACITY.to_string(),
        "--label",
        LABEL,
    ])
    .await;
    d
}

/// Each host's pool as `status --json` shows it.
async fn pool_states(hosts: &[Daemon]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for d in hosts {
        let v: serde_json::Value =
            serde_json::from_str(&d.ok(&["status", "--json"]).await).unwrap();
        out.push(v["pool"].clone());
    }
    out
}

/// Runners registered at GitHub (JIT configurations handed out).
fn registered(gh: &FakeGitHub) -> u64 {
    let jit = gh.counters().endpoint("repo_jitconfig");
    jit.requests - jit.errors
}

fn queue(gh: &FakeGitHub, name: &str) -> u64 {
    let run = gh
        .queue_run(
            "octo/hello",
            vec![JobSpec::new(name, &[LABEL]).duration(Duration::from_secs(2))],
        )
        .unwrap();
    gh.runs()
        .into_iter()
        .find(|r| r.id == run)
        .and_then(|r| r.job_ids.first().copied())
        .expect("the queued job")
}

/// Runners the hosts show (any state).
async fn host_runners(hosts: &[Daemon]) -> Vec<String> {
    let mut left = Vec::new();
    for d in hosts {
        let s = d
            .client()
            .await
            .status()
            .await
            .expect("the service answers");
        left.extend(s.runners.into_iter().map(|r| r.runner_name));
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_database_down_for_30_s_stops_pool_launches_and_resumes_by_itself() {
    let gh = fake_github().await;
    let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let mut hosts = Vec::new();
    for name in HOSTS {
        hosts.push(pooled_host(&gh, &pg, name).await);
    }
    let named: Vec<(&str, &Daemon)> = HOSTS.iter().copied().zip(&hosts).collect();
    until_all_alive(&named).await;

    // A first burst with the database up: done, one runner each.
    let mut all_jobs = BTreeSet::new();
    for i in 0..FIRST_BURST {
        all_jobs.insert(queue(&gh, &format!("up-{i}")));
    }
    until_idle(&gh, &named, "the first burst done").await;
    assert_eq!(registered(&gh), FIRST_BURST as u64, "{}", logs(&named));

    // The database goes away; a burst is queued.
    let mut pg = tokio::task::spawn_blocking(move || {
        let mut pg = pg;
        pg.halt();
        pg
    })
    .await
    .unwrap();
    let down_at = Instant::now();
    let before = registered(&gh);
    let mut held = BTreeSet::new();
    for i in 0..SECOND_BURST {
        held.insert(queue(&gh, &format!("down-{i}")));
    }
    all_jobs.extend(held.iter().copied());

    // Both hosts say the pool's database is unreachable, with the message.
    let states = until(
        Duration::from_secs(20),
        "both hosts showing the pool unreachable",
        || async {
            let states = pool_states(&hosts).await;
            states
                .iter()
                .all(|p| p["state"] == "unreachable")
                .then_some(states)
        },
    )
    .await;
    for p in &states {
        let message = p["message"].as_str().unwrap_or_default();
        assert!(message.contains("cannot be reached"), "{p}");
        assert!(message.contains("resumes by itself"), "{p}");
        assert!(p["since"].is_i64(), "{p}");
    }
    eprintln!(
        "both hosts unreachable {:.1} s after the halt",
        down_at.elapsed().as_secs_f64()
    );

    // `why` names the held launch.
    let why = until(
        Duration::from_secs(20),
        "why naming pool_unreachable for the queued jobs",
        || async {
            for d in &hosts {
                let report = d.client().await.why().await.unwrap();
                let jobs: Vec<_> = report.targets.iter().flat_map(|t| &t.jobs).collect();
                let listed: BTreeSet<u64> = jobs.iter().map(|j| j.job_id).collect();
                if listed == held && jobs.iter().any(|j| j.reason.code == "pool_unreachable") {
                    return Some(report);
                }
            }
            None
        },
    )
    .await;
    eprintln!(
        "why while down: {}",
        serde_json::to_string_pretty(&why).unwrap()
    );
    for j in why.targets.iter().flat_map(|t| &t.jobs) {
        assert!(
            !j.reason.covered,
            "a runner has job {} in hand: {j:?}",
            j.job_id
        );
        // Held by the pool, or (past what the host would start anyway) by its limit.
        assert!(
            ["pool_unreachable", "target_full", "host_full"].contains(&j.reason.code.as_str()),
            "job {}: {:?}",
            j.job_id,
            j.reason
        );
        if j.reason.code == "pool_unreachable" {
            assert!(j.reason.message.contains("unreachable"), "{:?}", j.reason);
            assert!(
                j.reason
                    .fix
                    .as_deref()
                    .is_some_and(|f| f.contains("resumes by itself")),
                "{:?}",
                j.reason
            );
        }
    }

    // For the whole outage: no runner registered or started, every job still queued, and the
    // pool still unreachable on both hosts.
    while down_at.elapsed() < OUTAGE {
        assert_eq!(
            registered(&gh),
            before,
            "a runner was registered with the pool database down\n{}",
            logs(&named)
        );
        assert!(gh.runners().is_empty(), "{:?}", gh.runners());
        let runners = host_runners(&hosts).await;
        assert!(
            runners.is_empty(),
            "runners with the pool down: {runners:?}"
        );
        for j in &held {
            let job = gh.job(*j).unwrap();
            assert_eq!(job.status, JobStatus::Queued, "{job:?}");
        }
        for p in pool_states(&hosts).await {
            assert_eq!(p["state"], "unreachable", "{p}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Back: the hosts resume by themselves; every job runs once, no runner to spare.
    let resumed_at = Instant::now();
    let pg = tokio::task::spawn_blocking(move || {
        pg.resume();
        pg
    })
    .await
    .unwrap();
    until_idle(&gh, &named, "every job done after the database came back").await;
    eprintln!(
        "every job done {:.1} s after the database came back",
        resumed_at.elapsed().as_secs_f64()
    );
    let jobs = gh.jobs();
    assert_eq!(
        jobs.iter().map(|j| j.id).collect::<BTreeSet<_>>(),
        all_jobs,
        "{jobs:?}"
    );
    let failed: Vec<_> = jobs
        .iter()
        .filter(|j| j.conclusion != Some(Conclusion::Success))
        .map(|j| (j.id, &j.name, j.conclusion))
        .collect();
    assert!(failed.is_empty(), "jobs not successful: {failed:?}");
    let ran_on: BTreeSet<&str> = jobs
        .iter()
        .map(|j| j.runner_name.as_deref().expect("a completed job's runner"))
        .collect();
    assert_eq!(
        ran_on.len(),
        all_jobs.len(),
        "a runner ran two jobs: {jobs:?}"
    );
    assert_eq!(
        registered(&gh),
        all_jobs.len() as u64,
        "runners registered ≠ jobs\n{}",
        logs(&named)
    );

    // Both services still run, connected again, and said so.
    let states = until(
        Duration::from_secs(60),
        "both hosts connected again",
        || async {
            let states = pool_states(&hosts).await;
            states
                .iter()
                .all(|p| p["state"] == "connected")
                .then_some(states)
        },
    )
    .await;
    for p in &states {
        assert!(p["message"].is_null(), "{p}");
    }
    for (name, d) in HOSTS.iter().zip(&hosts) {
        let log = d.log();
        assert!(
            log.contains("the pool database answers again"),
            "{name} did not log the database back:\n{log}"
        );
        assert!(!log.contains("panicked"), "{name}:\n{log}");
    }
    for d in hosts {
        d.stop().await.unwrap();
    }
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_database_that_refuses_a_joined_host_is_shown_with_the_fix_and_resumes_once_fixed() {
    let gh = fake_github().await;
    let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let d = pooled_host(&gh, &pg, "h1").await;
    // `repo set --pool` adds the pool's label to the extra labels the target has.
    d.ok(&["repo", "set", "octo/hello", "--label", "gpu"]).await;
    d.ok(&["repo", "set", "octo/hello", "--pool"]).await;
    let targets: serde_json::Value =
        serde_json::from_str(&d.ok(&["repo", "list", "--json"]).await).unwrap();
    let labels: Vec<&str> = targets[0]["labels"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .filter_map(|l| l.as_str())
        .collect();
    assert_eq!(labels, ["gpu", LABEL], "{targets}");
    let hosts = [d];
    until(Duration::from_secs(60), "connected", || async {
        (pool_states(&hosts).await[0]["state"] == "connected").then_some(())
    })
    .await;

    // Another host, updated, moved the schema on; this host's connection drops, and when it
    // connects again the database is of a schema it does not know.
    let version = pg.psql("SELECT schema_version FROM rm_pool_meta");
    pg.psql("UPDATE rm_pool_meta SET schema_version = 99");
    pg.psql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = 'runner-manager'",
    );
    let job = queue(&gh, "while-refused");
    let state = until(
        Duration::from_secs(60),
        "the pool shown refused",
        || async {
            let p = pool_states(&hosts).await.remove(0);
            (p["state"] == "refused").then_some(p)
        },
    )
    .await;
    let message = state["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("newer runner-manager") && message.contains("update runner-manager"),
        "{state}"
    );
    let text = hosts[0].ok(&["status"]).await;
    assert!(
        text.contains("the pool database refuses this host") && text.contains("schema 99"),
        "{text}"
    );
    // Nothing starts for the pooled job meanwhile (another host may be starting one).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(registered(&gh), 0, "{}", hosts[0].log());
    assert_eq!(
        gh.job(job).map(|j| j.status),
        Some(JobStatus::Queued),
        "the job waits"
    );

    // Put right: the host finds the pool again by itself (asked again after its pause, at
    // most 30 s) and the job runs.
    pg.psql(&format!(
        "UPDATE rm_pool_meta SET schema_version = {version}"
    ));
    until(Duration::from_secs(90), "the job done", || async {
        gh.job(job)
            .filter(|j| j.status == JobStatus::Completed)
            .map(|_| ())
    })
    .await;
    assert_eq!(pool_states(&hosts).await[0]["state"], "connected");
    assert_eq!(registered(&gh), 1);
    let [d] = hosts;
    d.stop().await.unwrap();
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}
