//! What the pool tests share: joining a host to a pool, reading the pool and the hosts'
//! runners, waiting for a pool to be idle, and the hosts' logs for failure messages.

use crate::postgres::Cluster;
use crate::Daemon;
use rm_testkit::{FakeGitHub, JobStatus};
use std::path::Path;
use std::time::{Duration, Instant};

/// Registration and idle timeouts of 40 s: a surplus runner, started for no job, idles out
/// within [`until_idle`]'s wait and is then counted.
pub const TIMEOUTS: [&str; 4] = [
    "--registration-timeout-secs",
    "40",
    "--idle-timeout-secs",
    "40",
];

/// `pool join` of `d` to `pg`'s database with `label` as `host` (the password on stdin);
/// answers what the CLI printed.
pub async fn join(d: &Daemon, pg: &Cluster, label: &str, host: &str) -> String {
    d.ok_stdin(
        &[
            "pool",
            "join",
            &pg.url_without_password(),
            "--label",
            label,
            "--host",
            host,
            "--password-stdin",
        ],
        &format!("{}\n", pg.password()),
    )
    .await
}

/// Waits (up to 60 s) until every one of `hosts` is connected to its pool and sees all of them
/// alive (each host's name as it joined).
pub async fn until_all_alive(hosts: &[(&str, &Daemon)]) {
    for (name, d) in hosts {
        crate::until(
            Duration::from_secs(60),
            &format!("{name} connected, seeing all {} hosts alive", hosts.len()),
            || async {
                let s = pool_status(d).await;
                let alive = s["hosts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|h| h["alive"] == true)
                    .count();
                (s["state"] == "connected" && alive == hosts.len()).then_some(())
            },
        )
        .await;
    }
}

/// `pool status --json` of one host.
pub async fn pool_status(d: &Daemon) -> serde_json::Value {
    serde_json::from_str(&d.ok(&["pool", "status", "--json"]).await).expect("pool status JSON")
}

/// The runners a host's `status` lists now (`None` while its service is down).
pub async fn runners_of(socket: &Path) -> Option<Vec<rm_proto::RunnerStatus>> {
    let client = rm_proto::Client::connect(socket).await.ok()?;
    client.status().await.ok().map(|s| s.runners)
}

/// The last 60 lines of each host's log, for failure messages.
pub fn logs(hosts: &[(&str, &Daemon)]) -> String {
    hosts
        .iter()
        .map(|(name, d)| {
            let log = d.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            format!("--- {name} (last 60 lines) ---\n{tail}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits (up to 180 s) until every job queued so far completed and no runner is left, at
/// GitHub nor on any host (a host that is down lists none).
pub async fn until_idle(gh: &FakeGitHub, hosts: &[(&str, &Daemon)], what: &str) {
    let deadline = Duration::from_secs(180);
    let start = Instant::now();
    loop {
        let mut left: Vec<String> = gh.runners().into_iter().map(|r| r.name).collect();
        for (_, d) in hosts {
            let listed = runners_of(&d.socket).await.unwrap_or_default();
            left.extend(listed.into_iter().map(|r| r.runner_name));
        }
        let waiting: Vec<_> = gh
            .jobs()
            .into_iter()
            .filter(|j| j.status != JobStatus::Completed)
            .map(|j| (j.id, j.name, j.status, j.runner_name))
            .collect();
        if waiting.is_empty() && left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < deadline,
            "{what}: not within {deadline:?}; jobs not done {waiting:?}, runners left {left:?}\n{}",
            logs(hosts)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
