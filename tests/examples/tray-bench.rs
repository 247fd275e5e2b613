//! The tray's figures (`scripts/bench-tray.sh`): start → tray registered with the tray host,
//! resident memory with no window open, CPU over an idle window (nothing polls), and service
//! event → tray menu updated (read over D-Bus), as medians and p99 over N events.
//! Real service, fake GitHub, the tray under Xvfb with the tests' fake tray host.
//!
//! Usage: tray-bench [EVENTS=50] [IDLE_SECS=60]; `RM_BENCH_TRAY=PATH` measures that tray binary
//! (e.g. a release build) instead of the debug one built beside this example.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rm_e2e::tray::{Session, SessionOptions};
use rm_e2e::{fake_github, Daemon};
use serde_json::json;

fn proc_field(pid: u32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default()
}

/// A `Name:   N kB` field of `/proc/<pid>/smaps_rollup`.
fn rollup_kib(pid: u32, field: &str) -> u64 {
    proc_field(pid, "smaps_rollup")
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    proc_field(pid, "status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// utime + stime of the whole process (all threads), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = proc_field(pid, "stat");
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let idle_secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(60);
    let mut s = Session::start(SessionOptions::default()).await;
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let client = d.client().await;
    let log = d.dir.path().join("tray.log");
    let socket = d.socket.display().to_string();

    // Start → registered.
    let started = Instant::now();
    let exe = std::env::var_os("RM_BENCH_TRAY").map(std::path::PathBuf::from);
    println!(
        "tray binary: {}",
        exe.as_deref()
            .map_or_else(|| "debug build".to_owned(), |p| p.display().to_string())
    );
    let tray = s
        .tray(exe.as_deref(), &["--socket", &socket], &log)
        .spawn()
        .unwrap();
    let pid = tray.id().unwrap();
    loop {
        let items = s.cmd(json!({"cmd": "items"})).await;
        if !items["items"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never registered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let registered = started.elapsed();
    s.until_menu("idle", |m| m.header() == "Idle · 1 target")
        .await;

    // Idle: no window, nothing happening.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let cpu0 = cpu_ticks(pid);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let idle_cpu = (cpu_ticks(pid) - cpu0) as f64 / ticks_per_sec / t0.elapsed().as_secs_f64();
    let rss = rss_kib(pid);
    // What the tray itself dirtied, apart from file pages of the binary and the libraries.
    let private_dirty = rollup_kib(pid, "Private_Dirty");
    let pss = rollup_kib(pid, "Pss");
    // The windows are another process: the resident tray must not have loaded a web engine.
    let maps = proc_field(pid, "maps");
    let web_engine = maps.contains("webkit") || maps.contains("javascriptcore");

    // Service event → menu updated: pause/resume, timed until the menu's header says so.
    let mut lat = Vec::new();
    for i in 0..events {
        let pause = i % 2 == 0;
        let want = if pause {
            "Paused · 1 target"
        } else {
            "Idle · 1 target"
        };
        let t = Instant::now();
        if pause {
            client.pause().await.unwrap();
        } else {
            client.resume().await.unwrap();
        }
        loop {
            if let Some(l) = s.layout().await {
                if rm_e2e::tray::Menu(l).header() == want {
                    break;
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "menu never showed {want}"
            );
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(|a, b| a.total_cmp(b));

    let which = if exe.is_some() {
        "the given binary"
    } else {
        "debug build"
    };
    println!("tray figures ({events} events, {idle_secs} s idle window, {which})");
    println!(
        "  start → tray registered:            {:.0} ms",
        registered.as_secs_f64() * 1000.0
    );
    println!(
        "  RSS, no window open:                {:.1} MiB",
        rss as f64 / 1024.0
    );
    println!(
        "    of which private dirty (heap, stacks, relocated data): {:.1} MiB; PSS {:.1} MiB",
        private_dirty as f64 / 1024.0,
        pss as f64 / 1024.0
    );
    println!(
        "    web engine (WebKit) mapped in the tray process: {}",
        if web_engine { "yes" } else { "no" }
    );
    println!(
        "  CPU while idle:                     {:.3} % of one core",
        idle_cpu * 100.0
    );
    println!(
        "  event → menu updated (D-Bus read):  p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1]
    );
    d.stop().await.unwrap();
    s.quit().await;
}
