//! How much the dependency caches save: a small real Node project (`npm install`, packages from
//! the npm registry) and a small real Python project (`pip install` into a fresh virtualenv,
//! from PyPI), each installed by one job and again by the next job of the same repository, with
//! the caches on and persistent workspaces (`repo set --workspace persistent`: the project's
//! `node_modules` and venv survive), with the caches only, and with neither (`repo set --cache
//! off`). Each round starts a fresh service and fresh caches; the figures are medians over the
//! rounds.
//!
//! Usage (the machine must reach registry.npmjs.org and pypi.org; needs /usr/bin/python3 with
//! venv, and npm):
//!   cargo build --workspace --bins && cargo run -p rm-e2e --example cache-bench [-- ROUNDS]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{JobSpec, JobStatus};

const PACKAGE_JSON: &str = r#"{"name":"bench","version":"1.0.0","private":true,"dependencies":{"express":"4.21.2","lodash":"4.17.21","axios":"1.7.9","commander":"12.1.0","dayjs":"1.11.13","uuid":"11.0.3","chalk":"4.1.2"}}"#;
const REQUIREMENTS: &str = "requests==2.32.3\nflask==3.1.0\nclick==8.1.7\n";

/// The job's step: install both projects in its work directory, timing each. The project
/// directories are made when missing, as a checkout would bring them; a persistent workspace
/// still has them (and their `node_modules` and venv) from the previous job.
fn step(out: &Path, tag: &str) -> String {
    let o = out.display();
    format!(
        r#"set -e
mkdir -p node && cd node
printf '%s' '{PACKAGE_JSON}' > package.json
s=$(date +%s%N); npm install --no-audit --no-fund --prefer-offline --loglevel=error >/dev/null; e=$(date +%s%N)
echo $(( (e - s) / 1000000 )) > {o}/{tag}.npm
cd .. && mkdir -p py && cd py
printf '{req}' > requirements.txt
[ -d v ] || /usr/bin/python3 -m venv v
s=$(date +%s%N); v/bin/pip install -q --disable-pip-version-check -r requirements.txt; e=$(date +%s%N)
echo $(( (e - s) / 1000000 )) > {o}/{tag}.pip"#,
        req = REQUIREMENTS.replace('\n', "\\n"),
    )
}

fn ms(out: &Path, name: &str) -> u64 {
    std::fs::read_to_string(out.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e} (did the job fail? see the service's log)"))
        .trim()
        .parse()
        .unwrap()
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    CachesAndWorkspace,
    Caches,
    Neither,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::CachesAndWorkspace => "caches + persistent workspace",
            Mode::Caches => "caches only                  ",
            Mode::Neither => "neither                      ",
        }
    }
}

/// One round: a fresh service, two jobs in a row; answers (npm first, npm second, pip first,
/// pip second) in ms.
async fn round(mode: Mode) -> [u64; 4] {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    match mode {
        Mode::CachesAndWorkspace => {
            d.ok(&["repo", "set", "octo/hello", "--workspace", "persistent"])
                .await;
        }
        Mode::Caches => {}
        Mode::Neither => {
            d.ok(&["repo", "set", "octo/hello", "--cache", "off"]).await;
        }
    }
    let out = tempfile::tempdir().unwrap();
    std::fs::set_permissions(out.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for tag in ["first", "second"] {
        gh.queue_run(
            "octo/hello",
            vec![JobSpec::new(tag, &[&label]).with_command(&step(out.path(), tag))],
        )
        .unwrap();
        let client = d.client().await;
        until(Duration::from_secs(600), "the install job done", || {
            let client = &client;
            let gh = &gh;
            async move {
                let done = gh
                    .jobs()
                    .iter()
                    .any(|j| j.name == tag && j.status == JobStatus::Completed);
                let idle = client.status().await.ok()?.runners.is_empty();
                (done && idle).then_some(())
            }
        })
        .await;
    }
    [
        ms(out.path(), "first.npm"),
        ms(out.path(), "second.npm"),
        ms(out.path(), "first.pip"),
        ms(out.path(), "second.pip"),
    ]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    for mode in [Mode::CachesAndWorkspace, Mode::Caches, Mode::Neither] {
        let mut cols: [Vec<u64>; 4] = Default::default();
        for _ in 0..rounds {
            let r = round(mode).await;
            for (c, v) in cols.iter_mut().zip(r) {
                c.push(v);
            }
        }
        let [n1, n2, p1, p2] = cols.map(median);
        println!(
            "{}: npm install first {n1} ms, second {n2} ms ({:.1}x); pip install first {p1} ms, second {p2} ms ({:.1}x)  [median of {rounds}]",
            mode.name(),
            n1 as f64 / n2.max(1) as f64,
            p1 as f64 / p2.max(1) as f64,
        );
    }
}
